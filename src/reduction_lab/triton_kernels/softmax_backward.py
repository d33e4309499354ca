"""softmax 的反向：dx = y * (dy - sum(y * dy))，它本身也是一个按行归约。

课程页面：docs/triton/fused-softmax.md 的「反向传播：又一个行归约」。

* :func:`fused_softmax_backward`——课程版内核 ``softmax_backward_kernel``：一行一个 program，
  整行放进一个块：读一次 y、读一次 dy、写一次 dx（读 2MN，写 MN 个元素）；
* :func:`softmax_backward`——生产版：短行时一个 program 处理多行（二维块）；行太长、一个块
  装不下（N > MAX_FUSED_COLS）时用 ``softmax_backward_looped_kernel``，它分块循环两遍
  （第 1 遍求 sum(y * dy)，第 2 遍写 dx），读 4MN、写 MN。

float64 的 y、dy 在内核里按 float64 计算（``torch.autograd.gradcheck`` 需要），其余 dtype
按 float32 计算、按输入的 dtype 写出。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_matrix
from ..runtime import DEVICE
from ._launch import next_pow2, warps_for
from .softmax import MAX_FUSED_COLS

__all__ = ["fused_softmax_backward", "softmax_backward", "GRAD_DTYPES", "acc_dtype"]

#: 反向内核接受的 dtype（y 与 dy 必须相同）。
GRAD_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def acc_dtype(dtype: torch.dtype):
    """内核里的计算精度：float64 输入用 float64，其余用 float32。"""
    return tl.float64 if dtype == torch.float64 else tl.float32


# --8<-- [start:kernel]
@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride,
                            n_cols, BLOCK_SIZE: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)          # int64：row * stride 可能超过 2**31
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # 被屏蔽的车道填 0：它们对 sum(y * dy) 没有贡献
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(ACC)
    dot = tl.sum(y * dy, axis=0)                 # 行归约：一个数
    dx = y * (dy - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:kernel]


@triton.jit
def softmax_backward_rows_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride,
                                 n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 ACC: tl.constexpr):
    """一个 program 处理 BLOCK_M 行（短行时让每个 program 有足够的工作量）。"""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    y = tl.load(y_ptr + rows[:, None] * y_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    dot = tl.sum(y * dy, axis=1)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def softmax_backward_looped_kernel(dx_ptr, y_ptr, dy_ptr, y_row_stride, dy_row_stride, dx_row_stride,
                                   n_cols, BLOCK_SIZE: tl.constexpr, ACC: tl.constexpr):
    """长行：一行一个 program，分块循环两遍（整行装不进一个块）。"""
    row = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + row * y_row_stride
    dy_row = dy_ptr + row * dy_row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC)
        acc += y * dy
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(ACC)
        tl.store(dx_ptr + row * dx_row_stride + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty),
                 mask=mask)


def _check_pair(y: torch.Tensor, dy: torch.Tensor) -> None:
    check_matrix(y, "y", dtypes=GRAD_DTYPES, device=DEVICE)
    check_matrix(dy, "dy", dtypes=GRAD_DTYPES, device=DEVICE)
    if y.shape != dy.shape:
        raise ValueError(f"y 与 dy 的形状必须相同，得到 {tuple(y.shape)} 与 {tuple(dy.shape)} "
                         f"(y and dy must have the same shape, got {tuple(y.shape)} and {tuple(dy.shape)})")
    if y.dtype != dy.dtype:
        raise TypeError(f"y 与 dy 的 dtype 必须相同，得到 {y.dtype} 与 {dy.dtype} "
                        f"(y and dy must have the same dtype, got {y.dtype} and {dy.dtype})")
    if y.device != dy.device:
        raise ValueError(f"y 与 dy 必须在同一设备上，得到 {y.device} 与 {dy.device} "
                         f"(y and dy must be on the same device)")


# --8<-- [start:wrapper]
def fused_softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """softmax 的反向（课程版）：y = softmax(x) 与上游梯度 dy，返回 dx。N <= MAX_FUSED_COLS。"""
    _check_pair(y, dy)
    n_rows, n_cols = y.shape
    if n_cols > MAX_FUSED_COLS:
        raise ValueError(f"fused_softmax_backward 把整行放进一个块，最多 {MAX_FUSED_COLS} 列，得到 N={n_cols}；"
                         f"长行请用 softmax_backward (row of {n_cols} columns does not fit one block)")
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)   # 总是连续的
    BLOCK_SIZE = next_pow2(n_cols)
    softmax_backward_kernel[(n_rows,)](
        dx, y, dy, y.stride(0), dy.stride(0), dx.stride(0), n_cols,
        BLOCK_SIZE=BLOCK_SIZE, ACC=acc_dtype(y.dtype), num_warps=warps_for(BLOCK_SIZE),
    )
    return dx
# --8<-- [end:wrapper]


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax 的反向（生产版）：N <= MAX_FUSED_COLS 时一个 program 处理若干行，每个元素读一次
    y、一次 dy、写一次 dx；更长的行分块循环两遍。``out`` 是调用者提供的 dx（连续、形状与 dtype
    同 y）。"""
    _check_pair(y, dy)
    n_rows, n_cols = y.shape
    if out is None:
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    else:
        from ..checks import check_out

        check_out(out, y.shape, y.dtype, y.device, name="out")
    acc = acc_dtype(y.dtype)
    if n_cols > MAX_FUSED_COLS:
        block = 4096
        softmax_backward_looped_kernel[(n_rows,)](
            out, y, dy, y.stride(0), dy.stride(0), out.stride(0), n_cols,
            BLOCK_SIZE=block, ACC=acc, num_warps=warps_for(block))
        return out
    block_n = next_pow2(n_cols)
    block_m = max(1, min(4096 // block_n, next_pow2(n_rows)))
    softmax_backward_rows_kernel[(triton.cdiv(n_rows, block_m),)](
        out, y, dy, y.stride(0), dy.stride(0), out.stride(0), n_rows, n_cols,
        BLOCK_M=block_m, BLOCK_N=block_n, ACC=acc, num_warps=warps_for(block_m * block_n))
    return out
