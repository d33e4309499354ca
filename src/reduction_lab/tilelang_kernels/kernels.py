"""TileLang 内核：按行求和与按行 softmax。

课程页面：docs/tilelang/reduce.md（「TileLang 的归约」）。

同一份内核源码两种编译目标：

* gpu 模式：``{"kind": "cuda", "arch": "sm_XY"}``，缓冲区用 ``T.alloc_fragment``
  （分布在线程块的各个线程的寄存器里），块内并行循环用 ``T.Parallel``；
* sim 模式：TileLang 的 ``c`` 目标，在 CPU 上运行；C 目标的归约只接受
  ``T.alloc_local`` 缓冲区，而线程私有的 local 缓冲区不能用 ``T.Parallel`` 的循环变量
  做下标，所以同一个循环写成 ``T.grid``（串行）。

两处差别由内核参数 ``cpu`` 在 Python 层面选定（``alloc`` 与 ``tile_loop``），其余逐行相同。

``dtype``：输入与输出的元素类型（"float32"、"float16"、"bfloat16"）。块按这个类型搬进片上缓冲区，
``T.cast`` 成 float32 之后再归约、求 exp，写回之前再转回 ``dtype``；float32 时不多分配缓冲区，
生成的代码与只有 float32 的版本相同。
形状 ``M, N`` 用 ``T.const`` 声明：编译时按实际张量的形状代入常量，所以每种形状编译一次，
编译结果缓存在进程内（以及 TileLang 的磁盘缓存 ``TILELANG_CACHE_DIR``）。
"""

from __future__ import annotations

import tilelang
import tilelang.language as T

# TileLang 的 INFO 日志（“开始/完成编译”）经 tqdm 写到标准输出，会混进代码片段的输出
tilelang.set_log_level("WARNING")


# --8<-- [start:reduce_sum]
@tilelang.jit
def reduce_sum_kernel(x, block_m: int = 1, block_n: int = 1024, threads: int = 256,
                      n_split: int = 1, defer_reduce: bool = True, cpu: bool = False, dtype: str = "float32"):
    M, N = T.const("M, N")
    x: T.Tensor[[M, N], dtype]
    # 每段一个部分和；n_split=1 时就是行和（dtype 与 x 相同），分段时部分和留在 float32
    out_dtype = dtype if n_split == 1 else T.float32
    y = T.empty([M, n_split], out_dtype)
    alloc = T.alloc_local if cpu else T.alloc_fragment  # C 目标只认 local 缓冲区
    tile_loop = T.grid if cpu else T.Parallel
    # 每段 n_tiles 个块；段长是 block_n 的倍数，各段首尾相接、互不重叠
    n_tiles = T.ceildiv(T.ceildiv(N, n_split), block_n)
    with T.Kernel(T.ceildiv(M, block_m), n_split, threads=threads) as (bx, by):
        tile = alloc([block_m, block_n], dtype)       # 按输入的 dtype 搬进来
        if not defer_reduce and dtype != T.float32:
            ftile = alloc([block_m, block_n], T.float32)  # 逐块归约之前先转成 float32
        part = alloc([block_m], T.float32)
        acc = alloc([block_m], T.float32)
        T.clear(acc)
        if defer_reduce:
            # 先逐元素累加（每个线程只加自己的那几个元素），循环结束后只归约一次
            acc_tile = alloc([block_m, block_n], T.float32)
            T.clear(acc_tile)
        for k in T.Serial(n_tiles):                   # 在一个线程块内串行地走过整段
            col = (by * n_tiles + k) * block_n
            T.copy(x[bx * block_m, col], tile)        # 越界部分（行尾、最后一个行块）补 0
            if defer_reduce:
                for i, j in tile_loop(block_m, block_n):  # 块内：每个线程各加各的
                    acc_tile[i, j] += T.cast(tile[i, j], T.float32)
            else:
                if dtype != T.float32:
                    for i, j in tile_loop(block_m, block_n):
                        ftile[i, j] = T.cast(tile[i, j], T.float32)
                T.reduce_sum(tile if dtype == T.float32 else ftile, part, dim=1)  # 块内归约：每行一个数
                for i in tile_loop(block_m):
                    acc[i] += part[i]
        if defer_reduce:
            T.reduce_sum(acc_tile, acc, dim=1)
        for i in tile_loop(block_m):
            if bx * block_m + i < M:
                y[bx * block_m + i, by] = T.cast(acc[i], out_dtype)
    return y
# --8<-- [end:reduce_sum]


# --8<-- [start:softmax]
@tilelang.jit
def softmax_kernel(x, block_m: int = 1, block_n: int = 1024, threads: int = 256, cpu: bool = False,
                   dtype: str = "float32"):
    M, N = T.const("M, N")
    x: T.Tensor[[M, N], dtype]
    y = T.empty([M, N], dtype)
    alloc = T.alloc_local if cpu else T.alloc_fragment
    tile_loop = T.grid if cpu else T.Parallel
    n_tiles = T.ceildiv(N, block_n)
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
        xtile = alloc([block_m, block_n], dtype)      # 按输入的 dtype 搬进来、写出去
        # 在 float32 里计算（float32 输入就用 xtile 本身）
        tile = xtile if dtype == T.float32 else alloc([block_m, block_n], T.float32)
        row_max = alloc([block_m], T.float32)         # 到目前为止的行最大值 m
        new_max = alloc([block_m], T.float32)
        row_sum = alloc([block_m], T.float32)         # 以 m 为基准的指数和 s
        part = alloc([block_m], T.float32)
        T.fill(row_max, -T.infinity(T.float32))
        T.clear(row_sum)
        # 第 1 遍（在线）：一块一块地更新 m 和 s，s 按 exp(m_旧 - m_新) 缩放
        for k in T.Serial(n_tiles):
            T.copy(x[bx * block_m, k * block_n], xtile)
            for i, j in tile_loop(block_m, block_n):  # 行尾之外填 -inf，不影响最大值
                tile[i, j] = T.if_then_else(k * block_n + j < N, T.cast(xtile[i, j], T.float32),
                                            -T.infinity(T.float32))
            T.reduce_max(tile, new_max, dim=1)
            for i in tile_loop(block_m):
                # 不用 T.max：C 目标把它的两个操作数缓存成临时变量，会读到归约之前的旧值
                new_max[i] = T.if_then_else(new_max[i] > row_max[i], new_max[i], row_max[i])
                # 最大值没变时缩放因子是 1；这样前几块全是 -inf 时不会算出 exp(-inf + inf) = NaN
                row_sum[i] = row_sum[i] * T.if_then_else(
                    new_max[i] == row_max[i], 1.0, T.exp(row_max[i] - new_max[i]))
                row_max[i] = new_max[i]
            for i, j in tile_loop(block_m, block_n):  # 被遮住的 -inf 贡献 0
                tile[i, j] = T.if_then_else(tile[i, j] == -T.infinity(T.float32), 0.0,
                                            T.exp(tile[i, j] - row_max[i]))
            T.reduce_sum(tile, part, dim=1)
            for i in tile_loop(block_m):
                row_sum[i] += part[i]
        # 第 2 遍：归一化并写回
        for k in T.Serial(n_tiles):
            T.copy(x[bx * block_m, k * block_n], xtile)
            for i, j in tile_loop(block_m, block_n):  # 转回 dtype（float32 时什么也不做）
                xtile[i, j] = T.cast(T.exp(T.cast(xtile[i, j], T.float32) - row_max[i]) / row_sum[i], dtype)
            T.copy(xtile, y[bx * block_m, k * block_n])  # 越界部分不写
    return y
# --8<-- [end:softmax]
