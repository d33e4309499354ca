"""实验 softmax-triton：融合 softmax，一行一个 program，整行只读一次、写一次。

评分程序调用文件末尾的 softmax(x)，它这样启动内核（不要改内核的名字和参数）：
  grid = (M,)       第 row 个 program 处理第 row 行
  BLOCK_SIZE        不小于 N 的 2 的幂：整行放进一个块，多出来的车道要屏蔽
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check softmax-triton
讲义：「融合softmax与访存计数」（docs/triton/fused-softmax.md）、「-inf掩码」（docs/triton/masking.md）
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64 位：row * in_row_stride 可能超过 2^31

    # 1. 列号与掩码
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # 2. 被屏蔽的车道填 -inf：不改变最大值，exp(-inf) = 0 也不改变分母
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    # 3. 减去最大值再取指数
    num = tl.exp(x - tl.max(x, axis=0))
    # 4. 归一化
    y = num / tl.sum(num, axis=0)
    # 5. 写回
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)，N <= 32768。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", device=reduction_lab.DEVICE)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维 softmax（dim=-1），得到 dim={dim} (only the last dim is supported)")
    n_rows, n_cols = x.shape
    if n_cols > 32768:
        raise ValueError(f"整行放进一个块，最多 32768 列，得到 N={n_cols} (row too long for one block)")
    if out is None:
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (n_rows, n_cols), x.dtype, x.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 4 if BLOCK_SIZE <= 2048 else 8 if BLOCK_SIZE <= 8192 else 16
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,
                              BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return out
