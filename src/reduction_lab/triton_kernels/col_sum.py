"""沿列求和：out[j] = sum_i x[i, j]，不转置、不拷贝，按行读入（合并访问）。

课程页面：docs/triton/column-sum.md；LayerNorm / RMSNorm 的反向用它把各 program 的
dW、dB 部分和加起来（docs/triton/normalization.md）。

* 一个 program 负责 BLOCK_N 列，向下按 BLOCK_M 行一块循环：每次读一个
  BLOCK_M x BLOCK_N 的二维块，块的每一行是内存里连续的 BLOCK_N 个元素，一个 warp 的
  32 个线程读相邻的地址（合并访问）；循环里只逐元素累加，最后沿 axis=0 归约一次。
* 列少、行多时（例如 N = 256、M = 10**6），只有 cdiv(N, BLOCK_N) 个 program 填不满 GPU：
  把行切成 n_split 段，每段写一行部分和（n_split x N），第二次启动再按固定顺序沿列相加，
  结果与启动次序无关、每次逐位相同（不用原子加）。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_matrix, check_triton_tuning
from ..runtime import DEVICE
from ._launch import next_pow2, sm_count

__all__ = ["col_sum", "COL_SUM_DTYPES"]

#: :func:`col_sum` 接受的 dtype：float64 按 float64 累加（供 gradcheck 用），其余按 float32。
COL_SUM_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


# --8<-- [start:kernel]
@triton.jit
def col_sum_kernel(out_ptr, in_ptr, in_row_stride, n_rows, n_cols, rows_per_split,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr):
    """grid = (cdiv(N, BLOCK_N), n_split)。out 是 (n_split, N)：第 s 段的部分和写在第 s 行。"""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    split = tl.program_id(1)
    row_start = split * rows_per_split               # rows_per_split 是 BLOCK_M 的倍数，各段不重叠
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)    # 每个车道一个部分和
    for k in range(0, rows_per_split, BLOCK_M):
        rows = row_start + k + tl.arange(0, BLOCK_M)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        # int64：rows * stride 可能超过 2**31；块的每一行是连续的 BLOCK_N 个元素
        ptrs = in_ptr + rows.to(tl.int64)[:, None] * in_row_stride + cols[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(ACC)
    total = tl.sum(acc, axis=0)                      # 沿列（axis=0）归约一次：BLOCK_N 个数
    tl.store(out_ptr + split.to(tl.int64) * n_cols + cols, total, mask=col_mask)
# --8<-- [end:kernel]


def _config(n_rows: int, n_cols: int):
    """(BLOCK_M, BLOCK_N, num_warps)：块里 4096 个元素；BLOCK_N 至多 256 列（一行 1 KiB 的 fp32）。"""
    block_n = min(next_pow2(n_cols), 256)
    block_m = max(1, min(4096 // block_n, next_pow2(n_rows)))
    return block_m, block_n, 8 if block_m * block_n >= 2048 else 4


def col_sum(x: torch.Tensor, *, block_m: int | None = None, block_n: int | None = None,
            n_split: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """每列求和，返回 (N,)，dtype 与 x 相同（内部用 float32 累加；float64 用 float64）。

    ``n_split``：把行切成几段（默认：列块数少于 SM 数的 2 倍时切分，让每个 SM 有两个 program）；
    ``n_split > 1`` 时第二次启动按固定顺序把各段的部分和相加，结果逐位可复现。"""
    check_matrix(x, "x", dtypes=COL_SUM_DTYPES, device=DEVICE)
    check_triton_tuning(block_m=block_m, block_n=block_n, n_split=n_split, num_warps=num_warps)
    n_rows, n_cols = x.shape
    bm, bn, nw = _config(n_rows, n_cols)
    bm, bn, nw = block_m or bm, block_n or bn, num_warps or nw
    check_triton_tuning(block_m=bm, block_n=bn)          # 块内元素不超过 Triton 的上限
    acc_t, acc_torch = (tl.float64, torch.float64) if x.dtype == torch.float64 else (tl.float32, torch.float32)
    n_col_blocks = triton.cdiv(n_cols, bn)
    if n_split is None:
        n_split = 1
        # 每段至少 8 个行块，否则第二次启动读的部分和比省下的还多
        while n_col_blocks * n_split < 2 * sm_count() and triton.cdiv(n_rows, 2 * n_split) >= 8 * bm:
            n_split *= 2
    rows_per_split = triton.cdiv(triton.cdiv(n_rows, n_split), bm) * bm
    n_split = triton.cdiv(n_rows, rows_per_split)         # 去掉空段
    part = torch.empty((n_split, n_cols), device=x.device, dtype=acc_torch)
    col_sum_kernel[(n_col_blocks, n_split)](part, x, x.stride(0), n_rows, n_cols, rows_per_split,
                                            BLOCK_M=bm, BLOCK_N=bn, ACC=acc_t, num_warps=nw)
    if n_split == 1:
        return part[0].to(x.dtype)
    # 第二次启动：n_split 行部分和，每列按段号顺序相加（一段一行，不需要再切分）
    bm2, bn2, nw2 = _config(n_split, n_cols)
    out = torch.empty((1, n_cols), device=x.device, dtype=acc_torch)
    col_sum_kernel[(triton.cdiv(n_cols, bn2), 1)](out, part, part.stride(0), n_split, n_cols,
                                                  triton.cdiv(n_split, bm2) * bm2,
                                                  BLOCK_M=bm2, BLOCK_N=bn2, ACC=acc_t, num_warps=nw2)
    return out[0].to(x.dtype)
