"""实验 softmax-tilelang：用 TileLang 写按行 softmax，整行装进一块，只读一次、写一次。

评分程序调用文件末尾的 softmax(x)，它这样启动内核（不要改内核的名字和参数）：
  一个线程块负责一行（T.Kernel(M, ...) 的 bx 就是行号），block_n 是不小于 N 的 2 的幂：整行装进 1 x block_n 的一块
按顺序完成 TODO(1) 到 TODO(5)，然后运行：
  reduction-lab lab check softmax-tilelang
讲义：「TileLang的归约」（docs/tilelang/reduce.md）、「-inf掩码」（docs/triton/masking.md）
"""

import torch

import reduction_lab
import tilelang
import tilelang.language as T
from reduction_lab.checks import check_out
from reduction_lab.labs.cases import check_rows_input
from reduction_lab.tilelang_kernels import current_target, retarget

tilelang.set_log_level("WARNING")

NEG_INF = -T.infinity(T.float32)
#: 整行装进一块：一行至多这么多个元素（gpu 模式下每个线程至多 32 个放在寄存器里）
MAX_N = 16384


@tilelang.jit
def softmax_kernel(x, block_n: int = 1024, threads: int = 128, cpu: bool = False):
    M = T.dynamic("M")                           # 行数在运行时读出：一次编译服务所有行数
    N = T.const("N")                             # 列数在编译时代入：每种 N 编译一次
    x: T.Tensor[[M, N], T.float32]
    y = T.empty([M, N], T.float32)
    # 在 GPU 上缓冲区分布在各线程的寄存器里（fragment），块内循环是 T.Parallel；
    # 没有 GPU 时用 TileLang 的 C 目标在 CPU 上运行，它只认 local 缓冲区和串行循环 T.grid
    alloc = T.alloc_local if cpu else T.alloc_fragment
    tile_loop = T.grid if cpu else T.Parallel
    with T.Kernel(M, threads=threads) as bx:
        tile = alloc([1, block_n], T.float32)    # 整行（block_n >= N）
        row_max = alloc([1], T.float32)
        row_sum = alloc([1], T.float32)

        T.copy(x[bx, 0], tile)
        for i, j in tile_loop(1, block_n):
            tile[i, j] = T.if_then_else(j < N, tile[i, j], NEG_INF)
        T.reduce_max(tile, row_max, dim=1)
        for i, j in tile_loop(1, block_n):
            tile[i, j] = T.exp(tile[i, j] - row_max[i])
        T.reduce_sum(tile, row_sum, dim=1)
        for i, j in tile_loop(1, block_n):
            tile[i, j] = tile[i, j] / row_sum[i]
        T.copy(tile, y[bx, 0])
    return y


def softmax(x: torch.Tensor, dim: int = 1, out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) float32 -> (M, N)。这个函数已经写好，不需要改。"""
    check_rows_input(x, dim, reduction_lab.DEVICE)        # 二维、float32、设备、行首尾相接、dim 是最后一维
    M, N = x.shape
    if N > MAX_N:
        raise ValueError(f"整行装进一块：N = {N} 超过 {MAX_N}；更长的行见在线 softmax 的实验 "
                         f"(rows longer than {MAX_N} do not fit one block)")
    if out is not None:
        check_out(out, (M, N), torch.float32, x.device)
    block_n = 1 << max(N - 1, 1).bit_length()     # 不小于 N 的 2 的幂（至少 2）
    threads = min(512, max(32, block_n // 32))    # gpu 模式下每个线程至多 32 个元素
    # 没有 GPU 时编译成 TileLang 的 C 目标在 CPU 上运行，有 GPU 时编译成这块 GPU 的 CUDA
    kernel = retarget(softmax_kernel, current_target(x.device))
    y = kernel(x, block_n=block_n, threads=threads, cpu=reduction_lab.MODE == "sim")
    if out is None:
        return y
    out.copy_(y)
    return out
