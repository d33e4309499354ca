"""实验 col-sum-triton：沿列求和 out[j] = x[0, j] + x[1, j] + ... + x[M - 1, j]，不转置，访存仍然合并。

评分程序调用文件末尾的 col_sum(x)，它这样启动内核（不要改内核的名字和参数）：
  grid = (cdiv(N, BLOCK_N),)   第 pid 个 program 负责第 pid * BLOCK_N 起的 BLOCK_N 个相邻的列
  BLOCK_M = BLOCK_N = 32       每次向下读一个 BLOCK_M x BLOCK_N 的二维块；块的每一行是内存里连续的 BLOCK_N 个元素
  x 的第 i 行第 j 列在 in_ptr + i * in_row_stride + j（行距可能大于 N：x 可以是更宽的矩阵的一部分）
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check col-sum-triton
讲义：「沿列归约」（docs/triton/column-sum.md）、「分块与在线softmax」（docs/triton/tiling.md）
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out


@triton.jit
def col_sum_kernel(out_ptr, in_ptr, in_row_stride, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)  # 第 pid 个 program 负责第 pid 组列

    # 1. 列号与列掩码
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    # 2. 每个车道一个部分和
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # 3. 向下循环，二维块
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        ptrs = in_ptr + rows.to(tl.int64)[:, None] * in_row_stride + cols[None, :]
        # 4. 被屏蔽的车道填 0：不改变和
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    # 5. 沿列归约一次
    tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=col_mask)


def col_sum(x: torch.Tensor, dim: int = 0, out: torch.Tensor | None = None) -> torch.Tensor:
    """按列求和：(M, N) -> (N,)，float32。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", dtypes=(torch.float32,), device=reduction_lab.DEVICE)
    if dim not in (0, -2):
        raise ValueError(f"只支持沿第 0 维求和（dim=0），得到 dim={dim} (only dim=0 is supported)")
    n_rows, n_cols = x.shape
    if out is None:
        out = torch.empty(n_cols, dtype=torch.float32, device=x.device)
    else:
        check_out(out, (n_cols,), torch.float32, x.device)
    BLOCK_M = BLOCK_N = 32
    col_sum_kernel[(triton.cdiv(n_cols, BLOCK_N),)](out, x, x.stride(0), n_rows, n_cols,
                                                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4)
    return out
