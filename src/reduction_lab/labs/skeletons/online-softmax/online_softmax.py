"""实验 online-softmax：比一个块还长的行。一行一个 program，在行内按 BLOCK_SIZE 分块循环，
第 1 遍边读边更新行最大值 m 和指数和 d（在线 softmax），第 2 遍归一化写回：每行只读两遍。

评分程序调用文件末尾的 softmax(x)，它这样启动内核（不要改内核的名字和参数）：
  grid = (M,)        第 row 个 program 处理第 row 行
  BLOCK_SIZE         每块的列数（2 的幂；没有 GPU 时 128，GPU 上 1024），N 可以比它大得多
按顺序完成 TODO(1) 到 TODO(4)，然后运行：
  reduction-lab lab check online-softmax
讲义：「分块与在线softmax」（docs/triton/tiling.md）
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out


@triton.jit
def online_softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64 位：row * in_row_stride 可能超过 2^31
    in_row = in_ptr + row * in_row_stride
    out_row = out_ptr + row * out_row_stride
    m = -float("inf")                    # 到目前为止的行最大值
    d = 0.0                              # 到目前为止的 sum(exp(x - m))

    # TODO(1): 第 1 遍：for start in range(0, n_cols, BLOCK_SIZE)，列号 cols = start + tl.arange(0, BLOCK_SIZE)，
    #          读入这一块（mask=cols < n_cols，被屏蔽的车道填 -inf），转成 float32。

    # TODO(2):     在循环里更新：m_new = tl.maximum(m, tl.max(x, axis=0))；
    #              旧的 d 是以 m 为基准的，要先乘以 exp(m - m_new) 换成以 m_new 为基准，再加上这一块的 sum(exp(x - m_new))；
    #              最后 m = m_new。（整行都是 -inf 时 m_new 也是 -inf：减数用 0 代替，以免 -inf - (-inf) = NaN。）

    # TODO(3): 第 2 遍：再循环一次，读入每一块，算出 exp(x - m) / d。

    # TODO(4):     写回 tl.store(out_row + cols, ..., mask=mask)，先转换成输出的 dtype。

    # TODO 结束


def softmax(x: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None,
            block_size: int | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)，N 不受一个块的限制。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", device=reduction_lab.DEVICE)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维 softmax（dim=-1），得到 dim={dim} (only the last dim is supported)")
    if block_size is None:
        block_size = 128 if reduction_lab.MODE == "sim" else 1024
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size 必须是不小于 16 的 2 的幂，得到 {block_size} (block_size must be a power of two)")
    n_rows, n_cols = x.shape
    if out is None:
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (n_rows, n_cols), x.dtype, x.device)
    num_warps = 4 if block_size <= 1024 else 8
    online_softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,
                                     BLOCK_SIZE=block_size, num_warps=num_warps)
    return out
