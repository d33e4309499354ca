"""融合 softmax：一个 program 处理一行，整行放进一个块，只读一次、写一次。

课程页面：docs/triton/fused-softmax.md（访存计数）与 docs/triton/masking.md（-inf 掩码）。

* :func:`fused_softmax`——课程版内核 ``fused_softmax_kernel``：每行一个 program；
* :func:`softmax`——同一思想的生产版：短行时一个 program 处理多行（二维块），
  行太长、一个块装不下时交给 :mod:`.online_softmax` 的分段内核。
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..checks import check_matrix, check_triton_tuning
from ..runtime import DEVICE, MODE
from ._launch import FastLaunch, fast_runner, cdiv, next_pow2, sm_count, warps_for
from .online_softmax import SPLIT_THRESHOLD, split_softmax

#: 一个块最多装下的列数；更长的行用 online_softmax / 分段内核。
MAX_FUSED_COLS = 32768
#: 生产版 :func:`softmax` 接受的 dtype：float64 按 float64 计算（供 gradcheck 用）。
SOFTMAX_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# --8<-- [start:kernel]
@triton.jit
def fused_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                         BLOCK_SIZE: tl.constexpr):
    # 每个 program 负责一行；行号转成 int64：row * stride 超过 2**31 时 int32 会回绕
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)              # BLOCK_SIZE 是 >= n_cols 的 2 的幂
    mask = cols < n_cols                         # 多出来的车道被屏蔽
    # 被屏蔽的车道填 -inf：它不会改变最大值，exp(-inf) = 0 也不会改变分母
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    z = x - tl.max(x, axis=0)                    # 减去行最大值，exp 不会溢出
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:kernel]


# --8<-- [start:wrapper]
def fused_softmax(x: torch.Tensor) -> torch.Tensor:
    """按行 softmax，一行一个 program（课程版）。x: (M, N)，N <= MAX_FUSED_COLS。"""
    check_matrix(x, "x", device=DEVICE)
    n_rows, n_cols = x.shape
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(
            f"fused_softmax 把整行放进一个块，最多 {MAX_FUSED_COLS} 列，得到 N={n_cols}；"
            f"长行请用 reduction_lab.online_softmax "
            f"(row of {n_cols} columns does not fit one block; use online_softmax)"
        )
    out = torch.empty_like(x)
    BLOCK_SIZE = next_pow2(n_cols)               # 整行放进一个块
    fused_softmax_kernel[(n_rows,)](
        out, x, x.stride(0), out.stride(0), n_cols,
        BLOCK_SIZE=BLOCK_SIZE, num_warps=warps_for(BLOCK_SIZE),
    )
    return out
# --8<-- [end:wrapper]


@triton.jit
def softmax_rows_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVICT: tl.constexpr = "",
                        ACC: tl.constexpr = tl.float32):
    """一个 program 处理 BLOCK_M 行（短行时让每个 program 有足够的工作量）。
    ACC 是计算精度：float64 输入用 tl.float64，其余 tl.float32。"""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows64 = rows.to(tl.int64)
    x = tl.load(in_ptr + rows64[:, None] * in_row_stride + cols[None, :], mask=mask,
                other=-float("inf"), eviction_policy=EVICT).to(ACC)
    x = tl.where(rows[:, None] < n_rows, x, 0.0)   # 越过末行的整行填 0，避免 -inf - (-inf)
    z = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(z)
    # 每行求一次倒数再乘：逐元素的除法要多一条 MUFU.RCP，16 位输入时它与 exp 争同一个部件
    y = num * (1.0 / tl.sum(num, axis=1))[:, None]
    tl.store(out_ptr + rows64[:, None] * out_row_stride + cols[None, :],
             y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_persistent_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_STAGES: tl.constexpr):
    """常驻版本：program 数固定（约为 SM 数的几倍），每个 program 循环处理第 pid, pid+P, ...
    个行块；循环交给 tl.range 做软件流水，下一块的加载与这一块的计算、写回重叠。"""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    for rb in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), nprog, num_stages=NUM_STAGES):
        rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        rows64 = rows.to(tl.int64)
        x = tl.load(in_ptr + rows64[:, None] * in_row_stride + cols[None, :], mask=mask,
                    other=-float("inf")).to(tl.float32)
        x = tl.where(rows[:, None] < n_rows, x, 0.0)
        num = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = num * (1.0 / tl.sum(num, axis=1))[:, None]
        tl.store(out_ptr + rows64[:, None] * out_row_stride + cols[None, :],
                 y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax_persistent(x: torch.Tensor, block_m: int | None = None, num_warps: int | None = None,
                       programs_per_sm: int = 4, num_stages: int = 2) -> torch.Tensor:
    """常驻版本的多行 softmax（N <= MAX_FUSED_COLS）。"""
    check_matrix(x, "x", device=DEVICE)
    check_triton_tuning(block_m=block_m, num_warps=num_warps, programs_per_sm=programs_per_sm,
                        num_stages=num_stages)
    n_rows, n_cols = x.shape
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(f"常驻内核把整行放进一个块，最多 {MAX_FUSED_COLS} 列，得到 N={n_cols}")
    bm, bn, nw = _rows_config(n_rows, n_cols, x.element_size())
    bm, nw = block_m or bm, num_warps or nw
    check_triton_tuning(block_m=bm, block_n=bn)
    out = torch.empty_like(x)
    slots = programs_per_sm * sm_count() if sm_count() > 1 else 8
    grid = (min(triton.cdiv(n_rows, bm), slots),)
    softmax_persistent_kernel[grid](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                    BLOCK_M=bm, BLOCK_N=bn, NUM_STAGES=num_stages, num_warps=nw)
    return out


def _rows_config(n_rows: int, n_cols: int, element_size: int = 4, gpu: bool | None = None):
    """(BLOCK_M, BLOCK_N, num_warps)。在 H200 上扫描过（scripts/tune_triton.py，M x N = 2^26）：

    * float32，BLOCK_N 是 512 或 1024（N = 257 … 1024）：每个 program 1024 个元素，BLOCK_N = 512 时 1 个 warp
      （两行），1024 时 2 个 warp；与同一进程里的 torch.compile 交替扫描（scripts/tune_softmax_short.py，
      docs/data/h200_triton_softmax_short.json），下面的 4096 个元素、16 个 warp 在 N = 512、1024 上比 torch.compile
      低一个半到两个百分点，小 program 与它持平（更短的行没有扫描，仍用下面的规则）。只用于 GPU（``gpu``，
      默认看当前模式）：sim 模式的解释器一个接一个地运行 program，program 多四倍就慢四倍，那里仍用下面的规则，
      每行的结果与 block_m 无关；
    * float32，更长的行：每个 program 至少一行、约 4096 个元素，16 个 warp；N = 2048 … 32768 时达到拷贝带宽的 96%–99%；
    * 16 位（bfloat16 / float16），N <= 4096：4 个 warp，每个 program 约 2048 个元素（N = 512 时 4096 个），
      即每个线程 16 到 32 个元素；用 float32 的配置（16 个 warp）只有拷贝带宽的 78%，这样是 96%–100%。
      BLOCK_N = 512 时（只在 GPU 上，理由同上）每个 program 两行、1 个 warp：与 torch.compile 选的一样，
      同一进程的扫描里是拷贝的 100.0%，4096 个元素、4 个 warp 是 98.4%
      （docs/data/h200_triton_softmax_short_bf16.json）；
    * 16 位，BLOCK_N = 8192：一行、8 个 warp（每个线程 32 个元素），同一扫描里 99.6%，16 个 warp 是 97.6%。
    """
    block_n = next_pow2(n_cols)
    on_gpu = MODE == "gpu" if gpu is None else gpu
    if element_size == 4 and 512 <= block_n <= 1024 and on_gpu:
        return max(1, min(1024 // block_n, next_pow2(n_rows))), block_n, 1 if block_n == 512 else 2
    if element_size == 2 and block_n == 512 and on_gpu:
        return max(1, min(2, next_pow2(n_rows))), block_n, 1
    if element_size == 2 and block_n <= 4096:
        per_program = 4096 if block_n <= 512 else 2048
        block_m = max(1, min(per_program // block_n, next_pow2(n_rows)))
        return block_m, block_n, 4
    if element_size == 2 and block_n == 8192:
        return 1, block_n, 8
    block_m = max(1, min(4096 // block_n, next_pow2(n_rows)))
    num_warps = 16 if block_m * block_n >= 2048 else warps_for(block_m * block_n)
    return block_m, block_n, num_warps


def softmax(x: torch.Tensor, *, block_m: int | None = None, num_warps: int | None = None,
            chunk: int | None = None, eviction_policy: str = "",
            out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax（生产版）。默认：N <= SPLIT_THRESHOLD 时一个 program 处理 BLOCK_M 行，
    更长的行分段（online_softmax.split_softmax）。给出 ``block_m`` 强制多行内核，
    给出 ``chunk`` 强制分段内核。``out`` 是调用者提供的连续输出（由调用者检查，见
    :func:`reduction_lab.checks.check_out`）；分段内核先写进新张量，再拷进 ``out``。"""
    check_matrix(x, "x", dtypes=SOFTMAX_DTYPES, device=DEVICE)
    check_triton_tuning(block_m=block_m, num_warps=num_warps, chunk=chunk, eviction_policy=eviction_policy)
    if block_m is None and num_warps is None and chunk is None and not eviction_policy:
        return softmax_checked(x, out)
    n_rows, n_cols = x.shape
    long_row = chunk is not None or (block_m is None and n_cols > SPLIT_THRESHOLD)
    if long_row and x.dtype == torch.float64:
        raise TypeError(f"float64 只支持整行装进一个块的多行内核（N <= {SPLIT_THRESHOLD}，不给 chunk），"
                        f"得到 N={n_cols}、chunk={chunk!r} (float64 is supported only for "
                        f"N <= {SPLIT_THRESHOLD} without chunk)")
    if long_row:
        res = split_softmax(x, chunk=chunk, num_warps=num_warps)
        return res if out is None else out.copy_(res)
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(f"多行内核把整行放进一个块，最多 {MAX_FUSED_COLS} 列，得到 N={n_cols} "
                         f"(row does not fit one block)")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)   # 总是连续的，不沿用 x 的步长
    bm, bn, nw = _rows_config(n_rows, n_cols, x.element_size())
    bm = block_m or bm
    nw = num_warps or nw
    check_triton_tuning(block_m=bm, block_n=bn)       # 块内元素不超过 Triton 的上限
    softmax_rows_kernel[(triton.cdiv(n_rows, bm),)](
        out, x, x.stride(0), out.stride(0), n_rows, n_cols,
        BLOCK_M=bm, BLOCK_N=bn, EVICT=eviction_policy, ACC=tl.float64 if x.dtype == torch.float64 else tl.float32,
        num_warps=nw,
    )
    return out


@functools.lru_cache(maxsize=4096)
def _rows_plan(n_rows: int, n_cols: int, dtype: torch.dtype):
    """默认参数下的启动计划：(启动器, grid, constexpr 与 num_warps, 它们的可哈希形式)。按形状与 dtype 缓存，
    每次调用不再重新计算。16 位输入、N = 32768 时用常驻内核（H200 上 84% 对多行内核的 71%，
    scripts/tune_triton.py --kinds rows,persistent）。"""
    bm, bn, nw = _rows_config(n_rows, n_cols, dtype.itemsize)
    if dtype.itemsize == 2 and bn == 32768:
        slots = sm_count() if sm_count() > 1 else 8
        kw = {"BLOCK_M": 1, "BLOCK_N": bn, "NUM_STAGES": 3, "num_warps": 32}
        return _persistent_launch, (min(n_rows, slots),), kw, tuple(kw.items())
    acc = tl.float64 if dtype == torch.float64 else tl.float32
    kw = {"BLOCK_M": bm, "BLOCK_N": bn, "EVICT": "", "ACC": acc, "num_warps": nw}
    return _rows_launch, (cdiv(n_rows, bm),), kw, tuple(kw.items())


_rows_launch = FastLaunch(softmax_rows_kernel)
_persistent_launch = FastLaunch(softmax_persistent_kernel)


_PLANS: dict = {}


def softmax_checked(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """默认参数的 :func:`softmax`，输入已经检查过（:mod:`reduction_lab.api` 调用它）：
    启动计划按形状缓存，内核经 :meth:`FastLaunch.launch_keyed` 启动，一次调用的主机开销只剩分配输出与启动。"""
    n_rows, n_cols = x.shape
    if n_cols > SPLIT_THRESHOLD:
        if x.dtype == torch.float64:
            raise TypeError(f"float64 只支持整行装进一个块的多行内核（N <= {SPLIT_THRESHOLD}），得到 N={n_cols} "
                            f"(float64 is supported only for N <= {SPLIT_THRESHOLD})")
        res = split_softmax(x)
        return res if out is None else out.copy_(res)
    dtype = x.dtype
    plan = _PLANS.get((n_rows, n_cols, dtype))
    if plan is None:
        plan = _PLANS[(n_rows, n_cols, dtype)] = _rows_plan(n_rows, n_cols, dtype)
    launcher, grid, kw, kw_key = plan
    if out is None:
        # 最后一维连续的二维张量：empty_like 给出的总是连续张量（不沿用行距）
        out = torch.empty_like(x)
    po, px, sx, so = out.data_ptr(), x.data_ptr(), x.stride(0), out.stride(0)
    dev = x.get_device()
    # 计划固定了 dtype、constexpr 与 n_rows、n_cols；会变的只有两个地址是否16字节对齐和两个行距
    key = (kw_key, dtype, dev, po & 15 == 0, px & 15 == 0, sx, so, n_rows, n_cols)
    launcher.launch_keyed(grid, key, dev, (po, px, sx, so, n_rows, n_cols),
                          (out, x, sx, so, n_rows, n_cols), kw)
    return out


def bound_softmax(x: torch.Tensor):
    """:mod:`reduction_lab.fastcall` 用的最短路径：``x`` 是已经经 :func:`softmax_checked` 成功启动过一次的
    连续张量。返回 :func:`reduction_lab.triton_kernels._launch.fast_runner` 的 runner，或 None（这个形状没有
    单次启动的计划，例如分段的长行）。"""
    n_rows, n_cols = x.shape
    dtype = x.dtype
    if n_cols > SPLIT_THRESHOLD:
        return None
    launcher, grid, kw, kw_key = _rows_plan(n_rows, n_cols, dtype)
    dev = x.get_device()
    key = (kw_key, dtype, dev, True, True, n_cols, n_cols, n_rows, n_cols)
    return fast_runner(launcher, key, grid, dev, n_rows, n_cols, dtype, False,
                       ("Y", "X", n_cols, n_cols, n_rows, n_cols), torch.empty_like)
