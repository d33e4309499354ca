"""实验 reduce-sum-tilelang：用 TileLang 写按行求和，T.Serial 走过列块，块内 T.reduce_sum。

评分程序调用文件末尾的 reduce_sum(x)，它这样启动内核（不要改内核的名字和参数）：
  一个线程块负责一行（T.Kernel(M, ...) 的 bx 就是行号），每次处理 1 x block_n 的一块
按顺序完成 TODO(1) 到 TODO(4)，然后运行：
  reduction-lab lab check reduce-sum-tilelang
讲义：「TileLang的归约」（docs/tilelang/reduce.md）
"""

import torch

import reduction_lab
import tilelang
import tilelang.language as T
from reduction_lab.checks import check_out
from reduction_lab.labs.cases import check_rows_input
from reduction_lab.tilelang_kernels import current_target, retarget

tilelang.set_log_level("WARNING")


@tilelang.jit
def reduce_sum_kernel(x, block_n: int = 256, threads: int = 128, cpu: bool = False):
    M = T.dynamic("M")                           # 行数在运行时读出：一次编译服务所有行数
    N = T.const("N")                             # 列数在编译时代入：每种 N 编译一次
    x: T.Tensor[[M, N], T.float32]
    y = T.empty([M], T.float32)
    # 在 GPU 上缓冲区分布在各线程的寄存器里（fragment），块内循环是 T.Parallel；
    # 没有 GPU 时用 TileLang 的 C 目标在 CPU 上运行，它只认 local 缓冲区和串行循环 T.grid
    alloc = T.alloc_local if cpu else T.alloc_fragment
    tile_loop = T.grid if cpu else T.Parallel
    with T.Kernel(M, threads=threads) as bx:
        tile = alloc([1, block_n], T.float32)    # 一个列块
        part = alloc([1], T.float32)             # 这一块的和
        acc = alloc([1], T.float32)              # 这一行到目前为止的和
        T.clear(acc)

        # TODO(1): 这一行有几个列块 n_tiles？N 不一定是 block_n 的倍数（用 T.ceildiv）。

        # TODO(2): for k in T.Serial(n_tiles): 把第 k 个列块拷进 tile：T.copy(x[bx, k * block_n], tile)
        #          （T.copy 把越过行尾的部分补 0）。

            # TODO(3): 在 TODO(2) 的循环体里（与 T.copy 同样缩进）：T.reduce_sum(tile, part, dim=1) 求出这一块的和，
            #          再用 for i in tile_loop(1): acc[i] += part[i] 累加。写在循环外面就只加上了最后一块。

        # TODO(4): 循环结束后写出这一行的和：for i in tile_loop(1): y[bx] = acc[i]

        # TODO 结束
    return y


def reduce_sum(x: torch.Tensor, dim: int = 1, out: torch.Tensor | None = None) -> torch.Tensor:
    """每行求和：(M, N) float32 -> (M,)。这个函数已经写好，不需要改。"""
    check_rows_input(x, dim, reduction_lab.DEVICE)        # 二维、float32、设备、行首尾相接、dim 是最后一维
    if out is not None:
        check_out(out, (x.shape[0],), torch.float32, x.device)
    # 没有 GPU 时编译成 TileLang 的 C 目标在 CPU 上运行，有 GPU 时编译成这块 GPU 的 CUDA
    y = retarget(reduce_sum_kernel, current_target(x.device))(x, cpu=reduction_lab.MODE == "sim")
    if out is None:
        return y
    out.copy_(y)
    return out
