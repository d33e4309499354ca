"""实验 softmax-rows-triton：16 位输入的融合 softmax，一个 program 处理 BLOCK_M 行。

    y[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k])

x 是 bfloat16、float16 或 float32；在 float32 里计算，y 与 x 同 dtype。
评分程序调用文件末尾的 softmax(x)，它这样启动内核（不要改内核的名字和参数）：
  grid = (cdiv(M, BLOCK_M),)   第 pid 个 program 处理第 pid * BLOCK_M 行起的 BLOCK_M 行
  BLOCK_N      不小于 N 的 2 的幂：一行放进块的一行，多出来的列要屏蔽
  BLOCK_M      每个 program 的行数（2 的幂）：M 不一定是它的倍数，最后一个 program 的行可能不满
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check softmax-rows-triton
讲义：「16位输入与向量加载」（docs/triton/half-precision.md）、「融合softmax与访存计数」（docs/triton/fused-softmax.md）
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out


@triton.jit
def softmax_rows_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)  # 64 位：行号乘行距可能超过 2^31

    # 1. 本 program 的 BLOCK_M 行与一行里的列；mask 同时管行与列
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    # 2. 读入 BLOCK_M x BLOCK_N 的块，被屏蔽的车道填 -inf，在 float32 里计算
    x = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
    # 3. 每行的最大值（axis=1），沿列广播
    m = tl.max(x, axis=1)
    num = tl.exp(x - m[:, None])
    # 4. 每行的指数之和
    d = tl.sum(num, axis=1)
    y = num / d[:, None]
    # 5. 写回，转换成输出的 dtype
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def rows_per_program(n_cols: int, dtype: torch.dtype) -> int:
    """默认的 BLOCK_M：让一个 program 约有 4096 个 16 位元素或 2048 个 float32（8 KiB），至多 16 行。"""
    block_n = triton.next_power_of_2(n_cols)
    elems = 4096 if dtype.itemsize == 2 else 2048
    return max(1, min(16, elems // block_n))


def softmax(x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None,
            block_m: int | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)，N <= 32768，dtype 取 float32、bfloat16、float16。
    ``block_m``：每个 program 的行数（2 的幂，1 到 64；默认 :func:`rows_per_program`）。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", dtypes=(torch.float32, torch.bfloat16, torch.float16), device=reduction_lab.DEVICE)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维 softmax（dim=-1），得到 dim={dim} (only the last dim is supported)")
    n_rows, n_cols = x.shape
    if n_cols > 32768:
        raise ValueError(f"一行放进块的一行，最多 32768 列，得到 N={n_cols} (row too long for one block)")
    if block_m is None:
        block_m = rows_per_program(n_cols, x.dtype)
    elif isinstance(block_m, bool) or not isinstance(block_m, int) or block_m not in (1, 2, 4, 8, 16, 32, 64):
        raise ValueError(f"block_m 必须是 1 到 64 之间的 2 的幂，得到 {block_m!r} (block_m must be a power of two in 1..64)")
    if out is None:
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (n_rows, n_cols), x.dtype, x.device)
    BLOCK_N = triton.next_power_of_2(n_cols)
    tile = block_m * BLOCK_N
    num_warps = 4 if tile <= 4096 else 8 if tile <= 16384 else 16
    softmax_rows_kernel[(triton.cdiv(n_rows, block_m),)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                                                          BLOCK_M=block_m, BLOCK_N=BLOCK_N, num_warps=num_warps)
    return out
