"""实验 rms-norm-triton：RMSNorm，一行一个 program，整行只读一次、写一次。

    y[row, j] = x[row, j] / sqrt(mean(x[row, :]^2) + eps) * w[j]

评分程序调用文件末尾的 rms_norm(x, weight)，它这样启动内核（不要改内核的名字和参数）：
  grid = (M,)       第 row 个 program 处理第 row 行
  BLOCK_SIZE        不小于 N 的 2 的幂：整行放进一个块，多出来的车道要屏蔽
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check rms-norm-triton
讲义：「归一化：LayerNorm与RMSNorm」（docs/triton/normalization.md）、「-inf掩码」（docs/triton/masking.md）
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out, check_vector


@triton.jit
def rms_norm_kernel(out_ptr, in_ptr, w_ptr, in_row_stride, out_row_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64 位：row * in_row_stride 可能超过 2^31

    # 1. 列号与掩码
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # 2. 被屏蔽的车道填 0：0 的平方不改变平方和（填 -inf 会得到 inf）
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # 3. 均方：除以 N，不是 BLOCK_SIZE
    ms = tl.sum(x * x, axis=0) / n_cols
    # 4. 归一化并乘以权重
    y = x * tl.rsqrt(ms + eps) * w
    # 5. 写回
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, dim: int = -1,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 RMSNorm：(M, N) 与 (N,) 的权重 -> (M, N)，N <= 32768。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", device=reduction_lab.DEVICE)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维归一化（dim=-1），得到 dim={dim} (only the last dim is supported)")
    n_rows, n_cols = x.shape
    check_vector(weight, "weight", dtypes=(x.dtype,), device=reduction_lab.DEVICE)
    if weight.shape != (n_cols,):
        raise ValueError(f"weight 的形状应为 ({n_cols},)，得到 {tuple(weight.shape)} (weight must have shape ({n_cols},))")
    if not eps > 0:
        raise ValueError(f"eps 必须是正数，得到 {eps} (eps must be positive)")
    if n_cols > 32768:
        raise ValueError(f"整行放进一个块，最多 32768 列，得到 N={n_cols} (row too long for one block)")
    if out is None:
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (n_rows, n_cols), x.dtype, x.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 4 if BLOCK_SIZE <= 2048 else 8 if BLOCK_SIZE <= 8192 else 16
    rms_norm_kernel[(n_rows,)](out, x, weight, x.stride(0), out.stride(0), n_cols, eps,
                               BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return out
