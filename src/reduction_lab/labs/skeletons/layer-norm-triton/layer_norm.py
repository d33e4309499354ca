"""实验 layer-norm-triton：比一个块还长的行上的 LayerNorm。一行一个 program，在行内按 BLOCK_SIZE 分块循环：
第 1 遍边读边用 Welford / Chan 的合并求出均值与方差，第 2 遍归一化写回：x 每行只读两遍。

    y[row, j] = (x[row, j] - mean) / sqrt(var + eps) * w[j] + b[j]     var 是有偏方差（除以 N）

评分程序调用文件末尾的 layer_norm(x, weight, bias)，它这样启动内核（不要改内核的名字和参数）：
  grid = (M,)        第 row 个 program 处理第 row 行
  BLOCK_SIZE         每块的列数（2 的幂；没有 GPU 时 128，GPU 上 1024），N 可以比它大得多
内核另外把每行的 mean 与 rstd = 1 / sqrt(var + eps) 写进 mean_ptr[row]、rstd_ptr[row]（反向要用）。
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check layer-norm-triton
讲义：「归一化：LayerNorm与RMSNorm」（docs/triton/normalization.md）的「行比一个块长：Welford与Chan的合并」
"""

import torch

import reduction_lab  # 必须先于 triton 导入：没有 GPU 时它打开 Triton 解释器
import triton
import triton.language as tl
from reduction_lab.checks import check_matrix, check_out, check_vector


@triton.jit
def layer_norm_kernel(y_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, x_row_stride, y_row_stride, n_cols, eps,
                      BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64 位：row * x_row_stride 可能超过 2^31
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    # 运行状态：已读元素的个数 n、它们的均值 mean、与这个均值之差的平方和 m2
    n = tl.zeros([], dtype=tl.float32)
    mean = tl.zeros([], dtype=tl.float32)
    m2 = tl.zeros([], dtype=tl.float32)

    # TODO(1): 第 1 遍：for start in range(0, n_cols, BLOCK_SIZE)，列号 cols = start + tl.arange(0, BLOCK_SIZE)，
    #          mask = cols < n_cols；读入这一块 x（被屏蔽的车道填 0.0），转成 float32。
    #          这一块的有效元素数 n_b = tl.minimum(n_cols - start, BLOCK_SIZE).to(tl.float32)：最后一块可能不满。

    # TODO(2):     这一块自己的状态：mean_b = tl.sum(x, axis=0) / n_b；d = x - mean_b，
    #              m2_b = tl.sum(d * d, axis=0)。被屏蔽的车道读入的是 0，d 在那里等于 -mean_b：先用 tl.where 清零。

    # TODO(3):     用 Chan 的公式把 (n_b, mean_b, m2_b) 并进 (n, mean, m2)：
    #              n_ab = n + n_b，delta = mean_b - mean，mean += delta * n_b / n_ab，
    #              m2 += m2_b + delta * delta * n * n_b / n_ab，最后 n = n_ab。

    # TODO(4): 循环之后：var = m2 / n（有偏方差，与 torch 相同），rstd = 1 / sqrt(var + eps)；
    #          把 mean 与 rstd 写进 mean_ptr + row、rstd_ptr + row。

    # TODO(5): 第 2 遍：再循环一次，读入 x、w、b（都带 mask），y = (x - mean) * rstd * w + b，
    #          写回 tl.store(y_row + cols, ..., mask=mask)，先转换成输出的 dtype：.to(y_ptr.dtype.element_ty)。

    # TODO 结束


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, dim: int = -1,
               out: torch.Tensor | None = None, mean: torch.Tensor | None = None, rstd: torch.Tensor | None = None,
               block_size: int | None = None) -> torch.Tensor:
    """按行 LayerNorm：(M, N)、(N,) 的 weight 与 bias -> (M, N)；每行的均值与 rstd 写进 mean、rstd（float32 的 (M,)，
    不给就不保留）。这个函数已经写好，不需要改。"""
    check_matrix(x, "x", device=reduction_lab.DEVICE)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维归一化（dim=-1），得到 dim={dim} (only the last dim is supported)")
    n_rows, n_cols = x.shape
    for name, v in (("weight", weight), ("bias", bias)):
        check_vector(v, name, dtypes=(x.dtype,), device=reduction_lab.DEVICE)
        if v.shape != (n_cols,):
            raise ValueError(f"{name} 的形状应为 ({n_cols},)，得到 {tuple(v.shape)} ({name} must have shape ({n_cols},))")
    if not eps > 0:
        raise ValueError(f"eps 必须是正数，得到 {eps} (eps must be positive)")
    if block_size is None:
        block_size = 128 if reduction_lab.MODE == "sim" else 1024
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size 必须是不小于 16 的 2 的幂，得到 {block_size} (block_size must be a power of two)")
    if out is None:
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (n_rows, n_cols), x.dtype, x.device)
    stats = []
    for name, v in (("mean", mean), ("rstd", rstd)):
        if v is None:
            v = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        else:
            check_out(v, (n_rows,), torch.float32, x.device, name=name)
        stats.append(v)
    num_warps = 4 if block_size <= 1024 else 8
    layer_norm_kernel[(n_rows,)](out, x, weight, bias, stats[0], stats[1], x.stride(0), out.stride(0), n_cols, eps,
                                 BLOCK_SIZE=block_size, num_warps=num_warps)
    return out
