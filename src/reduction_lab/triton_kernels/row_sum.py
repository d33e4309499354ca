"""分块行求和：行比一个块长时，在一个 program 里循环遍历整行。

课程页面：docs/triton/tiling.md。

* :func:`row_sum` 给出 ``block_size`` 时运行课程版内核 ``row_sum_kernel``
  （一行一个 program，按 BLOCK_SIZE 分块循环，float32 累加）；
* 不给 ``block_size`` 时运行生产版 ``row_sum_tiled_kernel``：短行时一个 program
  处理多行，长行时把一行切成几段分给几个 program，再用原子加合并。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_matrix
from ..runtime import DEVICE
from ._launch import next_pow2, sm_count, warps_for


# --8<-- [start:kernel]
@triton.jit
def row_sum_kernel(out_ptr, in_ptr, in_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    in_row = in_ptr + row * in_row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)   # 每个车道一个部分和
    for start in range(0, n_cols, BLOCK_SIZE):       # 在 program 内循环遍历整行
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(in_row + cols, mask=cols < n_cols, other=0.0)  # 求和的单位元是 0
        acc += x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))     # 块内归约成一个数
# --8<-- [end:kernel]


@triton.jit
def row_sum_tiled_kernel(out_ptr, in_ptr, in_row_stride, n_rows, n_cols, cols_per_split,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ATOMIC: tl.constexpr):
    """grid = (cdiv(M, BLOCK_M), n_split)：BLOCK_M 行 x 一段列，段内按 BLOCK_N 循环。"""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    col_start = tl.program_id(1) * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, n_cols)
    base = in_ptr + rows.to(tl.int64)[:, None] * in_row_stride
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(col_start, col_end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols[None, :] < col_end)
        acc += tl.load(base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=1)
    if ATOMIC:
        tl.atomic_add(out_ptr + rows, total, mask=row_mask)
    else:
        tl.store(out_ptr + rows, total, mask=row_mask)


def _tiled_config(n_rows: int, n_cols: int):
    """(BLOCK_M, BLOCK_N, n_split, num_warps)：每个 program 一次读约 4096 个元素，
    程序总数至少约为 SM 数的 4 倍。"""
    block_n = min(next_pow2(n_cols), 4096)
    block_m = max(1, min(4096 // block_n, next_pow2(n_rows)))
    programs = triton.cdiv(n_rows, block_m)
    n_split = 1
    target = 4 * sm_count()
    while programs * n_split < target and triton.cdiv(n_cols, n_split * 2) >= 4 * block_n:
        n_split *= 2
    return block_m, block_n, n_split, warps_for(block_m * block_n)


def row_sum(x: torch.Tensor, block_size: int | None = None, *, block_m: int | None = None,
            block_n: int | None = None, n_split: int | None = None,
            num_warps: int | None = None) -> torch.Tensor:
    """每行求和，返回 (M,)，dtype 与 x 相同（内部用 float32 累加）。

    ``block_size`` 给定时运行课程版内核（一行一个 program）；否则运行生产版。"""
    check_matrix(x, "x", device=DEVICE)
    n_rows, n_cols = x.shape
    if block_size is not None:
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size 必须是 2 的幂，得到 {block_size} (block_size must be a power of two)")
        out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_sum_kernel[(n_rows,)](out, x, x.stride(0), n_cols, BLOCK_SIZE=block_size,
                                  num_warps=warps_for(block_size))
        return out.to(x.dtype)
    bm, bn, ns, nw = _tiled_config(n_rows, n_cols)
    bm, bn, ns, nw = block_m or bm, block_n or bn, n_split or ns, num_warps or nw
    cols_per_split = triton.cdiv(triton.cdiv(n_cols, ns), bn) * bn
    ns = triton.cdiv(n_cols, cols_per_split)
    atomic = ns > 1
    out = (torch.zeros if atomic else torch.empty)(n_rows, device=x.device, dtype=torch.float32)
    row_sum_tiled_kernel[(triton.cdiv(n_rows, bm), ns)](
        out, x, x.stride(0), n_rows, n_cols, cols_per_split,
        BLOCK_M=bm, BLOCK_N=bn, ATOMIC=atomic, num_warps=nw,
    )
    return out.to(x.dtype)
