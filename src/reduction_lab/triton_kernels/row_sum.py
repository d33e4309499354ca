"""分块行求和：行比一个块长时，在一个 program 里循环遍历整行。

课程页面：docs/triton/tiling.md。

* :func:`row_sum` 给出 ``block_size`` 时运行课程版内核 ``row_sum_kernel``
  （一行一个 program，按 BLOCK_SIZE 分块循环，float32 累加）；
* 不给 ``block_size`` 时运行生产版 ``row_sum_tiled_kernel``：短行时一个 program
  处理多行，长行时把一行切成几段分给几个 program，再用原子加合并。
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..checks import check_matrix, check_triton_tuning
from ..runtime import DEVICE
from ._launch import FastLaunch, fast_runner, cdiv, next_pow2, sm_count, warps_for

#: :func:`row_sum` 接受的 dtype：float64 只用于生产版内核（按 float64 累加）。
ROW_SUM_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# --8<-- [start:kernel]
@triton.jit
def row_sum_kernel(out_ptr, in_ptr, in_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)             # int64：row * stride 可能超过 2**31
    in_row = in_ptr + row * in_row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)   # 每个车道一个部分和
    for start in range(0, n_cols, BLOCK_SIZE):       # 在 program 内循环遍历整行
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_row + cols, mask=cols < n_cols, other=0.0)  # 求和的单位元是 0
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))     # 块内归约成一个数
# --8<-- [end:kernel]


# --8<-- [start:tiled]
@triton.jit
def _load_tile(base, row_mask, start, n_cols, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr, EVICT: tl.constexpr,
               ACC: tl.constexpr):
    """从第 start 列起读 BLOCK_N 列，转成 ACC。EVEN_N 时只用行掩码（整块都在行内）。"""
    cols = start + tl.arange(0, BLOCK_N)
    if EVEN_N:
        mask = row_mask[:, None]
    else:
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
    return tl.load(base + cols[None, :], mask=mask, other=0.0, eviction_policy=EVICT).to(ACC)


@triton.jit
def row_sum_tiled_kernel(out_ptr, in_ptr, in_row_stride, n_rows, n_cols, cols_per_split,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ATOMIC: tl.constexpr,
                         EVICT: tl.constexpr = "", ACC: tl.constexpr = tl.float32,
                         PARTIAL: tl.constexpr = False, ONE_TILE: tl.constexpr = False,
                         EVEN_N: tl.constexpr = False):
    """grid = (cdiv(M, BLOCK_M), n_split)：BLOCK_M 行 x 一段列，段内按 BLOCK_N 循环。
    cols_per_split 是 BLOCK_N 的倍数，各段互不重叠，所以掩码只需和 n_cols 比较——
    这样编译器知道掩码按 4 个元素成组不变，可以用 128 位向量加载。
    ONE_TILE：一段只有一块（短行），不写循环，加载一次；EVEN_N：n_cols 是段长的整数倍，不要列掩码
    （只剩行掩码）。H200 上的效果见 docs/bench/index.md 的 Triton 扫描表。
    ATOMIC：各段原子加到 out[row]（顺序不定）；PARTIAL：各段写 out[row, 段号]（out 是 M x n_split），
    之后按固定顺序再加一次（docs/numerics.md）。"""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    col_start = tl.program_id(1) * cols_per_split
    base = in_ptr + rows.to(tl.int64)[:, None] * in_row_stride
    if ONE_TILE:
        acc = _load_tile(base, row_mask, col_start, n_cols, BLOCK_N, EVEN_N, EVICT, ACC)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        for k in range(0, cols_per_split, BLOCK_N):
            acc += _load_tile(base, row_mask, col_start + k, n_cols, BLOCK_N, EVEN_N, EVICT, ACC)
    total = tl.sum(acc, axis=1)
    if ATOMIC:
        tl.atomic_add(out_ptr + rows, total, mask=row_mask)
    elif PARTIAL:
        tl.store(out_ptr + rows.to(tl.int64) * tl.num_programs(1) + tl.program_id(1), total, mask=row_mask)
    else:
        tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_mask)
# --8<-- [end:tiled]


def _shape_flags(n_cols: int, block_n: int, cols_per_split: int) -> dict:
    """分块内核的两个形状 constexpr：一段是否只有一块（ONE_TILE），n_cols 是否是段长的整数倍（EVEN_N：各段都满，
    不要列掩码）。"""
    return {"ONE_TILE": cols_per_split == block_n, "EVEN_N": n_cols % cols_per_split == 0}


@triton.jit
def row_sum_persistent_kernel(out_ptr, in_ptr, in_row_stride, n_rows, n_cols, n_col_blocks,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr,
                              EVICT: tl.constexpr = "", ACC: tl.constexpr = tl.float32):
    """常驻（persistent）版本：program p 依次处理第 p, p+P, p+2P, ... 个行块（每块 BLOCK_M 行），
    把「行块 x 列块」展平成一个循环，这样短行时 Triton 也能把下一块的加载与本块的求和重叠。"""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_row_blocks = tl.cdiv(n_rows, BLOCK_M)
    my_blocks = tl.cdiv(n_row_blocks - pid, nprog)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for i in tl.range(0, my_blocks * n_col_blocks, num_stages=NUM_STAGES):
        rb = pid + (i // n_col_blocks) * nprog
        cb = i % n_col_blocks
        rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = cb * BLOCK_N + tl.arange(0, BLOCK_N)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
        ptrs = in_ptr + rows.to(tl.int64)[:, None] * in_row_stride + cols[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICT).to(ACC)
        last = cb == n_col_blocks - 1
        if last:
            tl.store(out_ptr + rows, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=row_mask)
        acc = tl.where(last, 0.0, acc)


def _tiled_config(n_rows: int, n_cols: int, elem_size: int = 4):
    """(BLOCK_M, BLOCK_N, n_split, num_warps)，分块内核的默认配置，来自 H200 上的扫描（scripts/tune_triton_row_sum.py，
    docs/data/h200_triton_row_sum_sweep.json；计时与基准相同：每次调用前只读地扫过 4 倍 L2）：

    * 默认都用分块内核（一个 program 读 BLOCK_M 行 x BLOCK_N 列，grid = 行块数 x 段数），不用常驻内核：
      短行时它在 float32 的 N = 512 … 2048 快 2–3 个百分点，bf16 快 5 个；
    * float32（与 float64）：一块 4096 个元素（16 KiB）、16 个 warp，每个线程一轮两次 16 字节的加载。
      短行时一块装 4096 / N 行，长行时 BLOCK_N = 4096、在 program 内循环；
    * 16 位：N <= 4096 时一块 4096 个元素（装 4096 / N 行）、8 个 warp；N <= 32768 时整行一块
      （BLOCK_N = N，不循环）、16 个 warp；更长的行 BLOCK_N = 4096、16 个 warp，行数不到 2 倍 SM 数时
      BLOCK_N = 16384、8 个 warp（program 少，每个线程一轮要有 8 次 16 字节的加载同时在途）；
    * 行数少于 SM 数时把一行切成几段（原子加合并），让所有 SM 都有活干。"""
    if elem_size == 2:
        block_n = next_pow2(n_cols)
        if block_n <= 4096:
            return max(1, min(4096 // block_n, next_pow2(n_rows))), block_n, 1, 8
        if block_n <= 32768:
            return 1, block_n, 1, 16
        block_n, warps = (4096, 16) if n_rows >= 2 * sm_count() else (16384, 8)
    else:
        if n_cols < 4096:
            block_n = next_pow2(n_cols)
            return max(1, min(4096 // block_n, next_pow2(n_rows))), block_n, 1, 16
        block_n, warps = 4096, 16
    n_split = 1
    while n_rows * n_split < sm_count() and cdiv(n_cols, n_split * 2) >= 4 * block_n:
        n_split *= 2
    return 1, block_n, n_split, warps


def _default_evict(n_cols: int, elem_size: int) -> str:
    """默认配置的加载提示：每个元素只读一次，标成 ``evict_first``，让它们在 L2 里先被替换（torch.compile
    生成的求和内核也这样标）。H200 上同一进程的扫描（scripts/tune_triton_row_sum.py --evict ,evict_first，
    docs/data/h200_triton_row_sum_evict.json）：float32 在每个 N 上都不低于不标的同一配置（N = 512 … 2048 高
    1–3 个百分点）；16 位只在 N <= 4096（一块装下整行的短行）时更快，更长的行反而慢 1–2 个百分点。"""
    return "evict_first" if elem_size != 2 or next_pow2(n_cols) <= 4096 else ""


def row_sum(x: torch.Tensor, block_size: int | None = None, *, block_m: int | None = None,
            block_n: int | None = None, n_split: int | None = None, num_warps: int | None = None,
            programs_per_sm: int = 2, num_stages: int = 3, eviction_policy: str = "",
            deterministic: bool = False) -> torch.Tensor:
    """每行求和，返回 (M,)，dtype 与 x 相同（内部用 float32 累加）。

    ``block_size`` 给定时运行课程版内核（一行一个 program）；否则运行生产版：
    默认参数见 ``_tiled_config``；显式给出 ``n_split=1`` 时用常驻内核
    （program 数 = SM 数 x programs_per_sm），``n_split > 1`` 时分段 + 原子加。
    ``deterministic=True``：分段时不用原子加，各段写出部分和（M x 段数），第二次启动按固定
    顺序相加，同样的输入每次得到逐位相同的结果（docs/numerics.md）。"""
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic 必须是 bool，得到 {deterministic!r}")
    check_matrix(x, "x", dtypes=ROW_SUM_DTYPES, device=DEVICE)
    check_triton_tuning(block_size=block_size, block_m=block_m, block_n=block_n, n_split=n_split,
                        num_warps=num_warps, programs_per_sm=programs_per_sm, num_stages=num_stages,
                        eviction_policy=eviction_policy)
    if (block_size, block_m, block_n, n_split, num_warps, programs_per_sm, num_stages, eviction_policy,
            deterministic) == (None, None, None, None, None, 2, 3, "", False):
        return row_sum_checked(x)
    n_rows, n_cols = x.shape
    # float64 输入按 float64 累加（供 gradcheck 用），其余按 float32
    acc_t, acc_torch = (tl.float64, torch.float64) if x.dtype == torch.float64 else (tl.float32, torch.float32)
    if block_size is not None:
        if x.dtype == torch.float64:
            raise TypeError("课程版内核（给出 block_size）按 float32 累加，不接受 float64；去掉 block_size "
                            "用生产版 (the course kernel accumulates in float32; omit block_size for float64)")
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size 必须是 2 的幂，得到 {block_size} (block_size must be a power of two)")
        out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_sum_kernel[(n_rows,)](out, x, x.stride(0), n_cols, BLOCK_SIZE=block_size,
                                  num_warps=warps_for(block_size))
        return out.to(x.dtype)
    bm, bn, ns, nw = _tiled_config(n_rows, n_cols, x.element_size())
    persistent = n_split == 1                         # 显式的 n_split=1：常驻内核
    if not persistent and (programs_per_sm, num_stages) != (2, 3):
        raise ValueError("programs_per_sm 与 num_stages 只用于常驻内核：同时给出 n_split=1 "
                         "(programs_per_sm and num_stages apply to the persistent kernel only: pass n_split=1)")
    bm, bn, ns, nw = block_m or bm, block_n or bn, n_split or ns, num_warps or nw
    check_triton_tuning(block_m=bm, block_n=bn)       # 块内元素不超过 Triton 的上限
    if persistent:
        out = torch.empty(n_rows, device=x.device, dtype=x.dtype)   # 内核直接写 x 的 dtype
        n_row_blocks = cdiv(n_rows, bm)
        slots = programs_per_sm * sm_count() if sm_count() > 1 else 8
        grid = (min(n_row_blocks, slots),)
        row_sum_persistent_kernel[grid](out, x, x.stride(0), n_rows, n_cols, cdiv(n_cols, bn),
                                        BLOCK_M=bm, BLOCK_N=bn, NUM_STAGES=num_stages,
                                        EVICT=eviction_policy, ACC=acc_t, num_warps=nw)
        return out
    cols_per_split = cdiv(cdiv(n_cols, ns), bn) * bn
    ns = cdiv(n_cols, cols_per_split)
    if ns > 1 and deterministic:
        # 第一次启动：每段一个部分和，写进 part[row, 段号]；第二次：每行的 ns 个部分和按固定顺序相加
        part = torch.empty((n_rows, ns), device=x.device, dtype=acc_torch)
        row_sum_tiled_kernel[(cdiv(n_rows, bm), ns)](
            part, x, x.stride(0), n_rows, n_cols, cols_per_split,
            BLOCK_M=bm, BLOCK_N=bn, ATOMIC=False, EVICT=eviction_policy, ACC=acc_t, PARTIAL=True, num_warps=nw,
            **_shape_flags(n_cols, bn, cols_per_split),
        )
        bn2 = next_pow2(ns)
        bm2 = max(1, min(4096 // bn2, next_pow2(n_rows)))
        out = torch.empty(n_rows, device=x.device, dtype=acc_torch)
        row_sum_tiled_kernel[(cdiv(n_rows, bm2), 1)](
            out, part, part.stride(0), n_rows, ns, bn2,
            BLOCK_M=bm2, BLOCK_N=bn2, ATOMIC=False, ACC=acc_t, num_warps=4, **_shape_flags(ns, bn2, bn2),
        )
        return out.to(x.dtype)
    # 分段时各段原子加到清零的 float32（float64 输入时 float64），最后舍入成 x 的 dtype；一段时内核直接写 x 的 dtype
    out = torch.zeros(n_rows, device=x.device, dtype=acc_torch) if ns > 1 else torch.empty(n_rows, device=x.device,
                                                                                            dtype=x.dtype)
    row_sum_tiled_kernel[(cdiv(n_rows, bm), ns)](
        out, x, x.stride(0), n_rows, n_cols, cols_per_split,
        BLOCK_M=bm, BLOCK_N=bn, ATOMIC=ns > 1, EVICT=eviction_policy, ACC=acc_t, num_warps=nw,
        **_shape_flags(n_cols, bn, cols_per_split),
    )
    return out.to(x.dtype)


_tiled_launch = FastLaunch(row_sum_tiled_kernel)


@functools.lru_cache(maxsize=4096)
def _plan(n_rows: int, n_cols: int, dtype: torch.dtype):
    """默认参数下分块内核的启动计划，按形状与 dtype 缓存：(grid, 每段列数, constexpr 与 num_warps, 其键, 输出 dtype)。
    不用原子加时内核直接写出 x 的 dtype；分段（原子加）时先在 float32 里累加。"""
    bm, bn, ns, nw = _tiled_config(n_rows, n_cols, dtype.itemsize)
    acc_t, acc_torch = (tl.float64, torch.float64) if dtype == torch.float64 else (tl.float32, torch.float32)
    cols_per_split = cdiv(cdiv(n_cols, ns), bn) * bn
    ns = cdiv(n_cols, cols_per_split)
    kw = {"BLOCK_M": bm, "BLOCK_N": bn, "ATOMIC": ns > 1, "EVICT": _default_evict(n_cols, dtype.itemsize), "ACC": acc_t,
          **_shape_flags(n_cols, bn, cols_per_split), "num_warps": nw}
    return (cdiv(n_rows, bm), ns), cols_per_split, kw, tuple(kw.items()), (acc_torch if ns > 1 else dtype)


_PLANS: dict = {}


def row_sum_checked(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """默认参数的 :func:`row_sum`，输入已经检查过（:mod:`reduction_lab.api` 调用它）：启动计划按形状缓存，
    内核经 :meth:`FastLaunch.launch_keyed` 启动。``out`` 是调用者检查过的 (M,) 连续输出。"""
    n_rows, n_cols = x.shape
    dtype = x.dtype
    plan = _PLANS.get((n_rows, n_cols, dtype))
    if plan is None:
        plan = _PLANS[(n_rows, n_cols, dtype)] = _plan(n_rows, n_cols, dtype)
    grid, extra, kw, kw_key, res_dtype = plan
    if kw["ATOMIC"]:
        res = torch.zeros(n_rows, device=x.device, dtype=res_dtype)
    elif out is not None and res_dtype == dtype:
        res = out
    else:
        res = torch.empty(n_rows, device=x.device, dtype=res_dtype)
    pr, px, sx = res.data_ptr(), x.data_ptr(), x.stride(0)
    dev = x.get_device()
    key = (kw_key, dtype, res_dtype, dev, pr & 15 == 0, px & 15 == 0, sx, n_rows, n_cols, extra)
    _tiled_launch.launch_keyed(grid, key, dev, (pr, px, sx, n_rows, n_cols, extra), (res, x, sx, n_rows, n_cols, extra), kw)
    if res.dtype != dtype:
        res = res.to(dtype)
    if out is not None and res is not out:
        out.copy_(res)
        return out
    return res


def bound_row_sum(x: torch.Tensor):
    """:mod:`reduction_lab.fastcall` 用的最短路径（同 :func:`reduction_lab.triton_kernels.softmax.bound_softmax`）：
    只用于一次启动、直接写出 x 的 dtype 的计划（不分段）；分段（原子加）的计划返回 None。Python 的 runner 按一个
    预先分配的同形状张量 ``empty_like``：它比带 dtype、device 关键字的 ``torch.empty`` 便宜。"""
    n_rows, n_cols = x.shape
    dtype = x.dtype
    grid, extra, kw, kw_key, res_dtype = _plan(n_rows, n_cols, dtype)
    if kw["ATOMIC"] or res_dtype != dtype:
        return None
    dev = x.get_device()
    key = (kw_key, dtype, res_dtype, dev, True, True, n_cols, n_rows, n_cols, extra)
    template = torch.empty(n_rows, dtype=dtype, device=x.device)
    return fast_runner(_tiled_launch, key, grid, dev, n_rows, n_cols, dtype, True,
                       ("Y", "X", n_cols, n_rows, n_cols, extra), lambda x2: torch.empty_like(template))
