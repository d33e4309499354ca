"""在线 softmax：行长于一个块时，一遍扫描同时维护运行最大值与重新缩放的运行和。

课程页面：docs/triton/tiling.md。

* :func:`online_softmax`——课程版：一个 program 处理一行，第一遍循环求 (m, d)，
  第二遍循环归一化（与 FlashAttention 对键的循环同构）；
* :func:`split_softmax`——生产版：行长到一个 program 填不满 GPU 时，把一行切成
  N_SPLIT 段分给多个 program。GPU 上一次启动：每段只读一次、留在寄存器里，各段通过
  原子操作交换 (m, d) 后归一化；解释器里分两次启动（第二次重新读输入）。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_matrix, check_triton_tuning
from ..runtime import DEVICE, MODE
from ._launch import next_pow2, sm_count, warps_for

#: softmax() 在 N 超过它时改用分段内核。
SPLIT_THRESHOLD = 32768
#: 分段内核每段的列数（每个 program 在寄存器里放一段）。
SPLIT_CHUNK = 8192


# --8<-- [start:kernel]
@triton.jit
def online_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)          # int64：row * stride 可能超过 2**31
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride
    m = -float("inf")                            # 运行最大值
    d = 0.0                                      # 运行和：sum(exp(x - m))
    # 第一遍：一次读完整行，边读边更新 (m, d)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # 到目前为止全是 -inf 时 m_new = -inf，用 0 作减数以免 -inf - (-inf) = nan
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        # 旧的和按新最大值重新缩放：exp(x - m) = exp(x - m_new) * exp(m_new - m)
        d = d * tl.exp(m - m_ref) + tl.sum(tl.exp(x - m_ref), axis=0)
        m = m_new
    # 第二遍：再读一次，写出 exp(x - m) / d
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(in_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - m) / d
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:kernel]


def online_softmax(x: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
    """按行 softmax，一行一个 program，在行内按 block_size 分块循环（课程版）。"""
    check_matrix(x, "x", device=DEVICE)
    check_triton_tuning(block_size=block_size)
    if block_size is None:
        raise TypeError("block_size 必须是整数，得到 None (block_size must be an int)")
    n_rows, n_cols = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)     # 总是连续的
    online_softmax_kernel[(n_rows,)](
        out, x, x.stride(0), out.stride(0), n_cols,
        BLOCK_SIZE=block_size, num_warps=warps_for(block_size),
    )
    return out


@triton.jit
def split_softmax_kernel(out_ptr, in_ptr, pmax_ptr, psum_ptr, count_ptr,
                         in_row_stride, out_row_stride, n_cols,
                         CHUNK: tl.constexpr, N_SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                         PHASE: tl.constexpr):
    """grid = (N_SPLIT, M)。PHASE 0：一次启动完成（同一行的各段通过原子计数器等待彼此，
    只在 GPU 上用）；PHASE 1 / 2：两次启动（先写各段的 (m, d)，再归一化），解释器用它，
    因为解释器一个接一个地运行 program，等待别的 program 会死锁。"""
    seg = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    cols = seg * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    if PHASE != 2:
        m = tl.max(x, axis=0)
        # 整段都是 -inf（输入里被屏蔽的位置）时 d = 0，而不是 exp(-inf - (-inf)) = nan
        d = tl.sum(tl.exp(x - tl.where(m == -float("inf"), 0.0, m)), axis=0)
        if PHASE == 0:
            tl.atomic_xchg(pmax_ptr + row * N_SPLIT + seg, m, sem="release")
            tl.atomic_xchg(psum_ptr + row * N_SPLIT + seg, d, sem="release")
            arrived = tl.atomic_add(count_ptr + row, 1, sem="acq_rel") + 1
            while arrived < N_SPLIT:
                arrived = tl.atomic_add(count_ptr + row, 0, sem="acquire")
        else:
            tl.store(pmax_ptr + row * N_SPLIT + seg, m)
            tl.store(psum_ptr + row * N_SPLIT + seg, d)
    if PHASE != 1:
        offs = tl.arange(0, SPLIT_P2)
        pmask = offs < N_SPLIT
        if PHASE == 0:
            pm = tl.atomic_add(pmax_ptr + row * N_SPLIT + offs, 0.0, mask=pmask, sem="acquire")
            ps = tl.atomic_add(psum_ptr + row * N_SPLIT + offs, 0.0, mask=pmask, sem="acquire")
            pm = tl.where(pmask, pm, -float("inf"))
            ps = tl.where(pmask, ps, 0.0)
        else:
            pm = tl.load(pmax_ptr + row * N_SPLIT + offs, mask=pmask, other=-float("inf"))
            ps = tl.load(psum_ptr + row * N_SPLIT + offs, mask=pmask, other=0.0)
        m_row = tl.max(pm, axis=0)
        d_row = tl.sum(ps * tl.exp(pm - m_row), axis=0)
        y = tl.exp(x - m_row) * (1.0 / d_row)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


#: 槽位里 d 的哨兵值（-1.0 的位模式）：真实的 d = sum(exp(x - m)) >= 1，不会是负数。
_SENTINEL_BITS = -1082130432  # float32 -1.0 的位模式（int32）


@triton.jit
def split_softmax_packed_kernel(out_ptr, in_ptr, slot_ptr, in_row_stride, out_row_stride, n_cols,
                                CHUNK: tl.constexpr, N_SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                                SENTINEL: tl.constexpr):
    """一次启动的分段 softmax（仅 GPU）：每段把 (m, d) 打包成一个 64 位字，用一次 release
    原子交换发布；同一行的各段轮询这一行的 N_SPLIT 个槽位，直到没有哨兵为止。"""
    seg = tl.program_id(0)
    row = tl.program_id(1).to(tl.int64)
    cols = seg * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    # exp 只算这一次：e = exp(x - m)；整段都是 -inf 时以 0 为基准，e = 0、d = 0
    e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))
    d = tl.sum(e, axis=0)
    packed = (m.to(tl.int32, bitcast=True).to(tl.int64) << 32) | \
        (d.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    tl.atomic_xchg(slot_ptr + row * N_SPLIT + seg, packed, sem="release")
    offs = tl.arange(0, SPLIT_P2)
    pmask = offs < N_SPLIT
    v = tl.atomic_add(slot_ptr + row * N_SPLIT + offs, 0, mask=pmask, sem="acquire")
    d_bits = (v & 0xFFFFFFFF).to(tl.int32)
    pending = tl.sum(((d_bits == SENTINEL) & pmask).to(tl.int32), axis=0)
    while pending > 0:
        v = tl.atomic_add(slot_ptr + row * N_SPLIT + offs, 0, mask=pmask, sem="acquire")
        d_bits = (v & 0xFFFFFFFF).to(tl.int32)
        pending = tl.sum(((d_bits == SENTINEL) & pmask).to(tl.int32), axis=0)
    pm = tl.where(pmask, (v >> 32).to(tl.int32).to(tl.float32, bitcast=True), -float("inf"))
    ps = tl.where(pmask, d_bits.to(tl.float32, bitcast=True), 0.0)
    m_row = tl.max(pm, axis=0)
    d_row = tl.sum(ps * tl.exp(pm - m_row), axis=0)
    # y = exp(x - m_row) / d_row = e * exp(m - m_row) / d_row：每段一个系数，逐元素只乘一次
    y = e * (tl.exp(m - m_row) / d_row)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def segments_fit(n_split: int, num_warps: int) -> bool:
    """一次启动的分段 softmax 里，同一行的各段在互相等待，它们必须同时驻留在 GPU 上。
    保守地按每个 SM 只驻留 1024 个线程估算：一行的全部段不超过 SM 数 x 1024 个线程的一半
    （另一半留给排在前面、还没退出的行）。sim 模式按 132 个 SM 估算。"""
    sms = sm_count() if MODE == "gpu" else 132
    return n_split * num_warps * 32 <= sms * 1024 // 2


def split_config(n_cols: int, element_size: int) -> tuple[int, int]:
    """分段内核的默认 (每段列数, num_warps)，H200 上 scripts/tune_triton.py --kinds packed 扫描得到
    （M x N = 2^26）：float32 每段 16384 列、16 个 warp（N = 65536 … 262144 时 89% / 87% / 84%），
    N > 262144 时每段 32768 列、32 个 warp（N = 2^20：76%）；16 位每段 8192 列、8 个 warp（每段 16 KiB：
    N = 65536 … 262144 时 74% / 79% / 73%，每段 16384 列时 262144 只有 61%），N > 262144 时也是每段 32768 列、
    32 个 warp（bf16 N = 2^20：55%，每段 8192 列只有 43%；scripts/tune_triton.py --kinds packed）。"""
    if element_size == 2:
        return (8192, 8) if n_cols <= 262144 else (4 * SPLIT_CHUNK, 32)
    if n_cols <= 262144:
        return 2 * SPLIT_CHUNK, 16
    return 4 * SPLIT_CHUNK, 32


def split_softmax(x: torch.Tensor, chunk: int | None = None, num_warps: int | None = None,
                  single_launch: bool | None = None, packed: bool = True) -> torch.Tensor:
    """长行 softmax：每行切成 cdiv(N, chunk) 段，每段一个 program，输入只读一次。

    GPU 上默认一次启动，``packed=True`` 时各段用一个 64 位槽位发布 (m, d)（一次原子交换），
    ``packed=False`` 时用两个槽位加一个到达计数器（多一次原子往返，H200 上慢约 10%）。
    默认 chunk 与 num_warps 见 :func:`split_config`。"""
    check_matrix(x, "x", device=DEVICE)
    check_triton_tuning(chunk=chunk, num_warps=num_warps)
    for name, v in (("single_launch", single_launch), ("packed", packed)):
        if v is not None and not isinstance(v, bool):
            raise TypeError(f"{name} 必须是 bool 或 None，得到 {v!r} ({name} must be a bool)")
    if chunk is None:
        chunk, default_warps = split_config(x.shape[1], x.element_size())
        num_warps = num_warps or default_warps
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"chunk 必须是 2 的幂，得到 {chunk} (chunk must be a power of two)")
    n_rows, n_cols = x.shape
    n_split = triton.cdiv(n_cols, chunk)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)     # 总是连续的
    pmax = torch.empty((n_rows, n_split), device=x.device, dtype=torch.float32)
    psum = torch.empty((n_rows, n_split), device=x.device, dtype=torch.float32)
    from ..memcount import is_counting

    interpreted = MODE != "gpu" or is_counting()   # 解释器逐个执行 program
    warps = num_warps or max(4, chunk // 1024)
    fits = segments_fit(n_split, warps)
    if single_launch is None:
        single_launch = not interpreted and fits
    if single_launch and interpreted:
        raise ValueError("single_launch=True 需要在 GPU 上编译运行：解释器（sim 模式或 count_memory() 之内）"
                         "顺序执行 program，互相等待会死锁 "
                         "(single_launch needs compiled GPU execution: the interpreter runs programs one by one)")
    if single_launch and not fits:
        raise ValueError(f"一行 {n_split} 段、每段 {warps} 个 warp：同一行的各段无法保证同时驻留在 GPU 上，"
                         f"一次启动会死锁；请加大 chunk 或用 single_launch=False "
                         f"({n_split} segments of {warps} warps cannot be guaranteed co-resident)")
    common = dict(CHUNK=chunk, N_SPLIT=n_split, SPLIT_P2=next_pow2(n_split),
                  num_warps=warps)
    grid = (n_split, n_rows)
    if single_launch and packed:
        slots = torch.full((n_rows, n_split), _SENTINEL_BITS & 0xFFFFFFFF, device=x.device, dtype=torch.int64)
        split_softmax_packed_kernel[grid](out, x, slots, x.stride(0), out.stride(0), n_cols,
                                          CHUNK=chunk, N_SPLIT=n_split, SPLIT_P2=next_pow2(n_split),
                                          SENTINEL=_SENTINEL_BITS, num_warps=common["num_warps"])
    elif single_launch:
        count = torch.zeros(n_rows, device=x.device, dtype=torch.int32)
        split_softmax_kernel[grid](out, x, pmax, psum, count, x.stride(0), out.stride(0), n_cols,
                                   PHASE=0, **common)
    else:
        split_softmax_kernel[grid](out, x, pmax, psum, pmax, x.stride(0), out.stride(0), n_cols,
                                   PHASE=1, **common)
        split_softmax_kernel[grid](out, x, pmax, psum, pmax, x.stride(0), out.stride(0), n_cols,
                                   PHASE=2, **common)
    return out
