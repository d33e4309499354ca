"""TileLang 版 softmax 的反向：dx = y * (dy - sum(y * dy))，一个线程块处理 block_m 行。

与 :mod:`.kernels` 里的前向同一写法（``cpu`` 参数选 local / fragment 缓冲区与串行 / 并行循环）：
第 1 遍一块一块地读 y、dy，求每行的点积 sum(y * dy)；第 2 遍再读一遍 y、dy，写 dx。
读 4MN、写 MN 个元素（整行装不进一个块时，第 2 遍无法复用第 1 遍的块）。
``dtype``（"float32"、"float16"、"bfloat16"）是 y、dy、dx 的元素类型，计算在 float32 里做。
课程页面：docs/triton/fused-softmax.md 的「反向传播：又一个行归约」。
"""

from __future__ import annotations

import tilelang
import tilelang.language as T

from . import kernels  # noqa: F401  它把 TileLang 的日志级别设成 WARNING


@tilelang.jit
def softmax_backward_kernel(y, dy, block_m: int = 1, block_n: int = 1024, threads: int = 256, cpu: bool = False,
                            dtype: str = "float32"):
    M, N = T.const("M, N")
    y: T.Tensor[[M, N], dtype]
    dy: T.Tensor[[M, N], dtype]
    dx = T.empty([M, N], dtype)
    alloc = T.alloc_local if cpu else T.alloc_fragment
    tile_loop = T.grid if cpu else T.Parallel
    n_tiles = T.ceildiv(N, block_n)
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
        ty = alloc([block_m, block_n], dtype)         # 按输入的 dtype 搬进来
        tdy = alloc([block_m, block_n], dtype)
        if dtype != T.float32:
            prod = alloc([block_m, block_n], T.float32)   # 半精度：乘积放进 float32 的缓冲区
        dot = alloc([block_m], T.float32)             # 每行的 sum(y * dy)
        part = alloc([block_m], T.float32)
        T.clear(dot)
        for k in T.Serial(n_tiles):                   # 第 1 遍：点积（越界部分补 0，乘积为 0）
            T.copy(y[bx * block_m, k * block_n], ty)
            T.copy(dy[bx * block_m, k * block_n], tdy)
            if dtype == T.float32:
                for i, j in tile_loop(block_m, block_n):
                    ty[i, j] = ty[i, j] * tdy[i, j]
                T.reduce_sum(ty, part, dim=1)
            else:
                for i, j in tile_loop(block_m, block_n):
                    prod[i, j] = T.cast(ty[i, j], T.float32) * T.cast(tdy[i, j], T.float32)
                T.reduce_sum(prod, part, dim=1)
            for i in tile_loop(block_m):
                dot[i] += part[i]
        for k in T.Serial(n_tiles):                   # 第 2 遍：dx = y * (dy - dot)
            T.copy(y[bx * block_m, k * block_n], ty)
            T.copy(dy[bx * block_m, k * block_n], tdy)
            for i, j in tile_loop(block_m, block_n):  # float32 里计算，转回 dtype
                ty[i, j] = T.cast(T.cast(ty[i, j], T.float32) * (T.cast(tdy[i, j], T.float32) - dot[i]), dtype)
            T.copy(ty, dx[bx * block_m, k * block_n])  # 越界部分不写
    return dx
