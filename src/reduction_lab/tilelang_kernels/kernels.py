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

import math

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
NEG_INF = -T.infinity(T.float32)
LOG2E = 1.4426950408889634   # log2(e)：exp(x) = exp2(x * log2(e))


def online_sum(m, s, v):
    """一个车道的在线指数和：读到 v 之后以 max(m, v) 为基准的 s，只用一次 exp：e = exp(-|v - m|)，
    v 更大时 s*e + 1，否则 s + e；v = -inf（被遮住）时 s 不变（也避开 -inf - (-inf) = NaN）。"""
    e = T.exp(T.if_then_else(v > m, m - v, v - m))   # -|v - m|（C 目标没有 fabs）
    return T.if_then_else(v > m, s * e + 1.0, T.if_then_else(v == NEG_INF, s, s + e))


def row_layout(block_m: int, block_n: int, threads: int, vec: int):
    """整行装进一块时 [block_m, block_n] 片段的布局：每行交给 tpr 个相邻的线程（至少一个 warp，
    行短时更少），每个线程一次持有 vec 个连续元素（16 字节）。这样按行归约只在这 tpr 个线程之间进行
    （一个 warp 时只用 warp 洗牌，不经共享内存、没有线程块同步）；默认推导的布局让每行跨越全部线程，
    每行都要一次整块的 AllReduce。"""
    tpr = min(max(32, threads // block_m), block_n // vec)
    rg = threads // tpr            # 同时处理几行
    per_row = block_n // (vec * tpr)

    def thread(i, j):
        return (i % rg) * tpr + (j // vec) % tpr

    def index(i, j):
        return ((i // rg) * per_row + j // (vec * tpr)) * vec + j % vec

    return T.Fragment([block_m, block_n], forward_thread_fn=thread, forward_index_fn=index)


def cluster_unit(block_n: int, threads: int, dtype: str) -> int:
    """cluster 路径的段长取这个数的倍数：既是 block_n 的倍数，也是 threads 个线程各持一个 16 字节向量
    （vec*threads 个元素）的倍数，这样整段恰好平均分给全部线程（寄存器片段的布局 row_layout 要求如此）。"""
    vec = 4 if str(dtype) == "float32" else 8
    return math.lcm(block_n, vec * threads)


def online_max(m, v):
    return T.if_then_else(v > m, v, m)   # 不用 T.max：C 目标会把操作数缓存成旧值


#: cluster 路径的簇内交换用到的两条 PTX（TileLang 的 tile 操作里没有 st.async，用 T.import_source 放进生成的源码，
#: T.call_extern 调用）：登记要收的字节数；把一对 float 写进簇里第 rank 块共享内存的同一位置，完成时记到那一块的 mbarrier 上
ST_ASYNC_SOURCE = r"""
__device__ __forceinline__ void rl_expect_bytes(void *bar, int bytes) {
  unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void rl_send_pair(void *slot, void *bar, int rank, float m, float s) {
  unsigned a = (unsigned)__cvta_generic_to_shared(slot), b = (unsigned)__cvta_generic_to_shared(bar), ra, rb;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(b), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               :: "r"(ra), "f"(m), "f"(s), "r"(rb) : "memory");
}
"""


@tilelang.jit
def softmax_kernel(x, y, stats, path: str = "row", block_m: int = 1, block_n: int = 1024, threads: int = 256,
                   n_seg: int = 1, min_blocks: int = 0, phase: int = 0, cpu: bool = False, dtype: str = "float32"):
    M = T.dynamic("M")        # 行数是运行期变量：同一个编译结果服务所有 M
    N = T.const("N")          # 列数是编译期常量（行首对齐可证，才能用 128 位访存）
    x: T.Tensor[[M, N], dtype]
    y: T.Tensor[[M, N], dtype]
    S = T.dynamic("S")        # stats 的行数：path="cluster" 时是 M，其余路径不用它（给 1 行）
    stats: T.Tensor[[S, n_seg, 2], T.float32]   # path="cluster"：每段的 (m, s)
    alloc = T.alloc_local if cpu else T.alloc_fragment
    tile_loop = T.grid if cpu else T.Parallel
    f32 = T.float32
    ragged = not isinstance(N, int) or N % block_n != 0   # 最后一块有行尾之外的车道
    if path == "row":
        # 整行装进一块（block_n >= N）：读一次 x，行在寄存器里，写一次 y
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
            xtile = alloc([block_m, block_n], dtype)
            tile = xtile if dtype == f32 else alloc([block_m, block_n], f32)
            row_max = alloc([block_m], f32)
            row_sum = alloc([block_m], f32)
            vec = 4 if dtype == f32 else 8
            if not cpu and block_n >= vec and block_m * block_n >= threads * vec:
                layout = row_layout(block_m, block_n, threads, vec)
                T.annotate_layout({xtile: layout} if dtype == f32 else {xtile: layout, tile: layout})
            T.copy(x[bx * block_m, 0], xtile)           # 越界补 0
            for i, j in tile_loop(block_m, block_n):    # 行尾之外换成 -inf：不改变最大值，exp 后贡献 0
                tile[i, j] = T.if_then_else(j < N, T.cast(xtile[i, j], f32), NEG_INF) if ragged \
                    else T.cast(xtile[i, j], f32)
            T.reduce_max(tile, row_max, dim=1)
            for i, j in tile_loop(block_m, block_n):
                tile[i, j] = T.exp(tile[i, j] - row_max[i])
            T.reduce_sum(tile, row_sum, dim=1)
            for i in tile_loop(block_m):
                row_sum[i] = 1.0 / row_sum[i]
            for i, j in tile_loop(block_m, block_n):
                xtile[i, j] = T.cast(tile[i, j] * row_sum[i], dtype)
            T.copy(xtile, y[bx * block_m, 0])           # 越界部分不写
    elif path == "online":
        # 一行跨好几块：第 1 遍每个车道维护自己的在线 (m, s)，循环结束后才归约一次；第 2 遍再读 x
        # （刚读过，多半还在 L2 里）、写 y
        n_tiles = T.ceildiv(N, block_n)
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
            xtile = alloc([block_m, block_n], dtype)
            lane_m = alloc([block_m, block_n], f32)
            lane_s = alloc([block_m, block_n], f32)
            row_max = alloc([block_m], f32)
            row_sum = alloc([block_m], f32)
            T.fill(lane_m, NEG_INF)
            T.clear(lane_s)
            for k in T.Serial(n_tiles):
                T.copy(x[bx * block_m, k * block_n], xtile)
                for i, j in tile_loop(block_m, block_n):
                    v = T.cast(xtile[i, j], f32)
                    if ragged:                          # 行尾之外是 -inf
                        v = T.if_then_else(k * block_n + j < N, v, NEG_INF)
                    lane_s[i, j] = online_sum(lane_m[i, j], lane_s[i, j], v)   # 先用旧的 m 更新 s
                    lane_m[i, j] = online_max(lane_m[i, j], v)
            T.reduce_max(lane_m, row_max, dim=1)
            for i, j in tile_loop(block_m, block_n):    # 各车道的 s 换到整行的最大值下；空车道贡献 0
                lane_s[i, j] = T.if_then_else(lane_m[i, j] == NEG_INF, 0.0,
                                              lane_s[i, j] * T.exp(lane_m[i, j] - row_max[i]))
            T.reduce_sum(lane_s, row_sum, dim=1)
            for i in tile_loop(block_m):
                row_sum[i] = 1.0 / row_sum[i]
            for k in T.Serial(n_tiles):
                T.copy(x[bx * block_m, k * block_n], xtile)
                for i, j in tile_loop(block_m, block_n):
                    xtile[i, j] = T.cast(T.exp(T.cast(xtile[i, j], f32) - row_max[i]) * row_sum[i], dtype)
                T.copy(xtile, y[bx * block_m, k * block_n])
    else:
        # path="cluster"：一行分成 n_seg 段（段长 seg_len 取 cluster_unit 的倍数），一段一个线程块，同一行的 n_seg 个
        # 线程块组成一个簇（cluster）。每段从显存直接读进寄存器片段（读一次），求段内最大值 m、
        # e = exp(x - m)（每个元素只求一次 exp，e 留在寄存器里）与段内和 s；(m, s) 经分布式共享内存发给簇里
        # 每一块，每块只等自己的 mbarrier 收齐 n_seg 份（不等整簇同步），每个线程合并全行的 (M, S)，
        # y = e * exp(m - M) / S 直接写回显存：读 MN、写 MN。
        # path="split"（以及 sim 模式的 cluster，C 目标没有簇）：两次启动，phase=1 只写 stats，phase=2 重新读 x、
        # 用 stats 里本段的 m 算同样的 e，合并、写 y：读 2MN、写 MN，但不需要簇，段数不受簇大小限制。
        if path not in ("cluster", "cluster_smem", "split"):
            raise ValueError(f"softmax_kernel 没有 path={path!r}：可选 row、online、cluster、cluster_smem、split"
                             f"（grid 是另一个内核 softmax_grid_kernel）(unknown path {path!r})")
        unit = cluster_unit(block_n, threads, dtype)
        seg_len = T.ceildiv(T.ceildiv(N, n_seg), unit) * unit
        vec = 4 if dtype == f32 else 8                # 16 字节一次访存
        masked = not isinstance(N, int) or N != n_seg * seg_len   # 有段伸到行尾之外
        in_cluster = not cpu and path in ("cluster", "cluster_smem")    # 一次启动、簇内经分布式共享内存交换
        # path="cluster_smem"：与 cluster 相同，只是整段放在共享内存里（不占寄存器），每个 SM 能多驻留几块；
        # 求最大值、求和、写回各读一遍共享内存，每遍每个线程一次一个 16 字节向量（chunk 个元素一组）
        in_smem = in_cluster and path == "cluster_smem"
        if in_cluster and n_seg > threads:       # 第 g 个线程发给第 g 块：段数不能多于线程数
            raise ValueError(f"path={path!r} 的 n_seg={n_seg} 多于每块的线程数 {threads} "
                             f"(n_seg must not exceed threads)")
        if path == "split" and phase not in (1, 2):
            raise ValueError(f"path='split' 分两次启动，phase 只能是 1 或 2，得到 {phase} (split needs phase 1 or 2)")
        kernel_kw = {"cluster_dims": (n_seg, 1, 1)} if in_cluster else {}
        with T.Kernel(M * n_seg, threads=threads, **kernel_kw) as bx:
            if min_blocks and not cpu:
                # __launch_bounds__(threads, min_blocks)：ptxas 把寄存器压到每个 SM 容得下 min_blocks 块
                T.annotate_min_blocks_per_sm(min_blocks)
            row = bx // n_seg
            seg = bx % n_seg
            if in_cluster:
                # 簇内经分布式共享内存交换 (m, s)：slots 的第 g 格（16 字节）收第 g 段的 (m, s)。第 g 个线程用一条
                # st.async 把本段的 (m, s) 直接从寄存器写进簇里第 g 块的 slots，写完时由硬件把 8 个字节记到那一块的
                # received（mbarrier）上。slots 是静态共享内存：动态共享内存按生存期复用，会与归约的工作区重叠，
                # 而别的块可能在本块还在归约时就写进来
                tx = T.get_thread_binding()
                slots = T.alloc_shared([4 * n_seg], f32, scope="shared")
                received = T.alloc_barrier([1])
                T.import_source(ST_ASYNC_SOURCE)
                # 别的块只能在本块的 received 初始化之后往这里写：先宣告「已开始」，真正的等待放在发送之前，
                # 与下面的加载重叠
                T.cluster_arrive_relaxed()
            m_loc = alloc([1], f32)
            s_loc = alloc([1], f32)
            if in_smem:
                chunk = vec * threads                  # 每个线程一个 16 字节向量
                xs = T.alloc_shared([1, seg_len], dtype)
                cf = alloc([1, chunk], dtype)
                lane = alloc([1, chunk], f32)          # 每个车道的最大值，再是指数和：最后才归约一次
                layout = row_layout(1, chunk, threads, vec)
                T.annotate_layout({cf: layout, lane: layout})
                # 显存直接进共享内存（cp.async，不经寄存器）；行尾之外补 0，下面按下标换成 -inf
                T.copy(x[row, seg * seg_len], xs, prefer_instruction="cp_async")
                T.fill(lane, NEG_INF)
                for k in T.Serial(seg_len // chunk):
                    T.copy(xs[0, k * chunk], cf)
                    for i, j in tile_loop(1, chunk):
                        v = T.cast(cf[i, j], f32)
                        if masked:
                            v = T.if_then_else(seg * seg_len + k * chunk + j < N, v, NEG_INF)
                        lane[i, j] = online_max(lane[i, j], v)
                T.reduce_max(lane, m_loc, dim=1)
                m_safe = T.if_then_else(m_loc[0] == NEG_INF, 0.0, m_loc[0])
                T.clear(lane)
                for k in T.Serial(seg_len // chunk):
                    T.copy(xs[0, k * chunk], cf)
                    for i, j in tile_loop(1, chunk):
                        v = T.exp2((T.cast(cf[i, j], f32) - m_safe) * LOG2E)
                        if masked:
                            v = T.if_then_else(seg * seg_len + k * chunk + j < N, v, 0.0)
                        lane[i, j] = lane[i, j] + v
                T.reduce_sum(lane, s_loc, dim=1)
            else:
                xseg = alloc([1, seg_len], dtype)          # 整段在寄存器里
                e = xseg if dtype == f32 else alloc([1, seg_len], f32)
                if not cpu:
                    layout = row_layout(1, seg_len, threads, vec)    # 每个线程每次 16 字节、连续的向量
                    T.annotate_layout({xseg: layout} if dtype == f32 else {xseg: layout, e: layout})
                T.copy(x[row, seg * seg_len], xseg)        # 行尾之外补 0，下一步换成 -inf
                for i, j in tile_loop(1, seg_len):
                    e[i, j] = T.if_then_else(seg * seg_len + j < N, T.cast(xseg[i, j], f32), NEG_INF) if masked \
                        else T.cast(xseg[i, j], f32)
                if phase == 2:
                    m_loc[0] = stats[row, seg, 0]          # 第 1 次启动求出的段内最大值
                else:
                    T.reduce_max(e, m_loc, dim=1)
                # 整段都是 -inf 时以 0 为基准：e = exp(-inf) = 0，不出现 -inf - (-inf)
                m_safe = T.if_then_else(m_loc[0] == NEG_INF, 0.0, m_loc[0])
                for i, j in tile_loop(1, seg_len):
                    e[i, j] = T.exp2((e[i, j] - m_safe) * LOG2E)   # exp2 + 一次乘法：比 expf 短得多
                if phase != 2:
                    T.reduce_sum(e, s_loc, dim=1)
            if phase != 2:
                # cluster 路径也写出各段的 (m, s)（每块 8 字节，不在依赖链上）：各路径的内核参数相同
                stats[row, seg, 0] = m_loc[0]
                stats[row, seg, 1] = s_loc[0]
            if in_cluster:
                T.cluster_wait()     # 簇里每一块的 received 都已初始化
                if tx == 0:          # 一次到达，并登记要收的字节数：n_seg 份 (m, s)
                    T.call_extern("handle", "rl_expect_bytes", T.address_of(received[0]), n_seg * 8)
                if tx < n_seg:       # n_seg 份同时发出
                    T.call_extern("handle", "rl_send_pair", T.address_of(slots[4 * seg]),
                                  T.address_of(received[0]), tx, m_loc[0], s_loc[0])
                # 只等本块收齐，不等整个簇。之后没有块再写本块的共享内存；本块发出的 st.async 的数据在寄存器里，
                # 不读本块的共享内存，所以退出之前也不需要第二次簇屏障
                T.mbarrier_wait_parity(received[0], 0)
            if phase != 1:
                # 各段的 (m_g, s_g) 每次读 ch 组进寄存器：这些读互不依赖，一起发出，再在线地并进全行的 (M, S)。
                # 边读边算时每一段都要等一次刚由别的线程块写进 L2 的读，这些读串在依赖链上，段数越多等得越久
                ch = math.gcd(n_seg, 8)
                seg_m = T.alloc_local([ch], f32)
                seg_s = T.alloc_local([ch], f32)
                total = T.alloc_local([4], f32)   # 全行的 (M, S)、本段的比例、这一组之后的最大值
                total[0] = NEG_INF
                total[1] = 0.0
                for c in T.Serial(n_seg // ch):
                    for g in T.unroll(ch):
                        if in_cluster:
                            seg_m[g] = slots[4 * (c * ch + g)]
                            seg_s[g] = slots[4 * (c * ch + g) + 1]
                        else:
                            seg_m[g] = stats[row, c * ch + g, 0]
                            seg_s[g] = stats[row, c * ch + g, 1]
                    total[3] = total[0]
                    for g in T.unroll(ch):
                        total[3] = online_max(total[3], seg_m[g])
                    # 已并进的和换到新的最大值下；到这里都是空段（-inf）时和为 0
                    total[1] = T.if_then_else(total[3] == NEG_INF, 0.0, total[1] * T.exp2((total[0] - total[3]) * LOG2E))
                    for g in T.unroll(ch):
                        total[1] = total[1] + T.if_then_else(seg_m[g] == NEG_INF, 0.0,
                                                             seg_s[g] * T.exp2((seg_m[g] - total[3]) * LOG2E))
                    total[0] = total[3]
                # 本段的 e 换到全行的最大值下再除以 S；空段是 0，整行都是 -inf 时 0/0 = NaN（与 torch 相同）
                total[2] = T.if_then_else(m_loc[0] == NEG_INF, 0.0, T.exp2((m_loc[0] - total[0]) * LOG2E)) / total[1]
                if in_smem:
                    for k in T.Serial(seg_len // chunk):   # 第三遍读共享内存：再求一次 exp，写回显存
                        T.copy(xs[0, k * chunk], cf)
                        for i, j in tile_loop(1, chunk):
                            cf[i, j] = T.cast(T.exp2((T.cast(cf[i, j], f32) - m_safe) * LOG2E) * total[2], dtype)
                        T.copy(cf, y[row, seg * seg_len + k * chunk])   # 越界部分不写
                else:
                    for i, j in tile_loop(1, seg_len):
                        xseg[i, j] = T.cast(e[i, j] * total[2], dtype)
                    T.copy(xseg, y[row, seg * seg_len])    # 越界部分不写
# --8<-- [end:softmax]


# --8<-- [start:grid]
#: grid 路径经全局内存交换各段的 (m, s)：每段一个 8 字节的槽位（stats[row, seg] 的两个 float，m 在低 32 位、
#: s 在高 32 位）。启动前 s 填成 -1（真实的 s >= 0）作哨兵：64 位一次写、一次读，字本身就是「到了」的标志。
#: rl_put_pair 发布本段；rl_row_total 由一个 warp 调用：第 g 个车道轮询第 g、g + 32、……个槽位，在线合并，
#: 再在 warp 内合并，车道 0 把全行的 M 与 1/S 写进 out[0]、out[1]（TileLang 的 tile 操作里没有跨线程块的等待）
GRID_SOURCE = r"""
__device__ __forceinline__ void rl_put_pair(void *slot, float m, float s) {
  unsigned long long v = ((unsigned long long)__float_as_uint(s) << 32) | __float_as_uint(m);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" :: "l"(slot), "l"(v) : "memory");
}
__device__ __forceinline__ void rl_merge(float &m, float &s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  s = mn == __int_as_float(0xff800000) ? 0.0f : s * exp2f((m - mn) * 1.4426950408889634f) + s2 * exp2f((m2 - mn) * 1.4426950408889634f);
  m = mn;
}
__device__ __forceinline__ void rl_row_total(const void *row_slots, int n_seg, float *out) {
  const unsigned long long *p = (const unsigned long long *)row_slots;
  const int lane = threadIdx.x & 31;
  float m = __int_as_float(0xff800000), s = 0.0f;   // -inf
  for (int g = lane; g < n_seg; g += 32) {
    unsigned long long v;
    do {
      asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p + g) : "memory");
    } while ((unsigned)(v >> 32) == 0xbf800000u);
    rl_merge(m, s, __uint_as_float((unsigned)v), __uint_as_float((unsigned)(v >> 32)));
  }
  for (int o = 16; o > 0; o >>= 1)
    rl_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) {
    out[0] = m;
    out[1] = 1.0f / s;
  }
}
"""


@tilelang.jit
def softmax_grid_kernel(x, y, stats, blocks: int = 132, threads: int = 512, n_seg: int = 64, seg_len: int = 16384,
                        delay: int = 1, min_blocks: int = 1, dtype: str = "float32"):
    """path="grid"：一行放不进一个簇时（fp32 的 N = 2^20 一行 4 MiB）。网格是同时驻留的 ``blocks`` 个块；
    第 w 项是第 w // n_seg 行的第 w % n_seg 段，块 b 依次处理第 b、b + blocks、……项（本块的第 0、1、……项）。
    第 it 轮：用 cp.async 发出本块第 it + 1 项的拷贝（不经寄存器，这一轮里都在路上）；等第 it 项到齐，求段内
    (m, s)，写进全局内存的槽位（发布，不等别的块）；再写出第 it - delay 项：等它那一行的 n_seg 个槽位都到了
    （delay = 1 时那一行早在一轮之前就开始发布，多半已经到齐），合并出 (M, S)，从共享内存算出 y 写回。
    共享内存里 2 + delay 段轮流用。读 MN、写 MN。
    不会死锁的条件（包装函数保证）：blocks 个块同时驻留、n_seg <= blocks（同一块的两项不在同一行）。
    一块只在写出时等待，等的是它更早的一项所在的行，那一行的各段所在的块在发布它之前只等过更早的行。
    要求 N = n_seg * seg_len，seg_len 是 16 字节向量 x threads 的倍数。"""
    M = T.dynamic("M")
    N = T.const("N")
    x: T.Tensor[[M, N], dtype]
    y: T.Tensor[[M, N], dtype]
    S = T.dynamic("S")
    stats: T.Tensor[[S, n_seg, 2], T.float32]
    f32 = T.float32
    vec = 4 if dtype == f32 else 8
    chunk = vec * threads                      # 每个线程一次一个 16 字节向量
    ring = 2 + delay
    with T.Kernel(blocks, threads=threads) as bx:
        T.annotate_min_blocks_per_sm(min_blocks)
        T.import_source(GRID_SOURCE)
        tx = T.get_thread_binding()
        xs = T.alloc_shared([ring, seg_len], dtype)
        tot = T.alloc_shared([2], f32)             # 要写出的那一项所在行的 M 与 1/S
        cf = T.alloc_fragment([1, chunk], dtype)
        lane = T.alloc_fragment([1, chunk], f32)   # 每个车道的最大值，再是指数和：最后才归约一次
        layout = row_layout(1, chunk, threads, vec)
        T.annotate_layout({cf: layout, lane: layout})
        m_loc = T.alloc_fragment([1], f32)
        s_loc = T.alloc_fragment([1], f32)
        row_m = T.alloc_local([2], f32)
        n_mine = T.ceildiv(M * n_seg - bx, blocks)     # 本块的项数

        # 本块的第 j 项装进第 j % ring 段（cp.async，不等它到）：先发出第 0 项，每一轮开头发出下一项
        if n_mine > 0:
            c0 = (bx % n_seg) * seg_len
            T.async_copy(x[bx // n_seg: bx // n_seg + 1, c0: c0 + seg_len], xs[0:1, 0:seg_len])
        for it in T.serial(n_mine + delay):
            if it + 1 < n_mine:
                wn = bx + (it + 1) * blocks
                cn = (wn % n_seg) * seg_len
                sn = (it + 1) % ring
                T.async_copy(x[wn // n_seg: wn // n_seg + 1, cn: cn + seg_len], xs[sn: sn + 1, 0:seg_len])
                T.ptx_wait_group(1)            # 本线程发出的第 it 项已到
            else:
                T.ptx_wait_group(0)
            T.sync_threads()                   # 全块的第 it 项都已到
            if it < n_mine:                    # 发布第 it 项的 (m, s)
                w = bx + it * blocks
                cur = it % ring
                T.fill(lane, NEG_INF)
                for k in T.serial(seg_len // chunk):
                    T.copy(xs[cur, k * chunk], cf)
                    for i, j in T.Parallel(1, chunk):
                        lane[i, j] = online_max(lane[i, j], T.cast(cf[i, j], f32))
                T.reduce_max(lane, m_loc, dim=1)
                m_safe = T.if_then_else(m_loc[0] == NEG_INF, 0.0, m_loc[0])   # 整段都是 -inf：以 0 为基准
                T.clear(lane)
                for k in T.serial(seg_len // chunk):
                    T.copy(xs[cur, k * chunk], cf)
                    for i, j in T.Parallel(1, chunk):
                        lane[i, j] = lane[i, j] + T.exp2((T.cast(cf[i, j], f32) - m_safe) * LOG2E)
                T.reduce_sum(lane, s_loc, dim=1)
                if tx == 0:
                    T.call_extern("handle", "rl_put_pair", T.address_of(stats[w // n_seg, w % n_seg, 0]),
                                  m_loc[0], s_loc[0])
            if it >= delay:                    # 写出第 it - delay 项
                w = bx + (it - delay) * blocks
                old = (it - delay) % ring
                if tx < 32:                    # warp 0 等齐这一行的各段，合并出 (M, 1/S)
                    T.call_extern("handle", "rl_row_total", T.address_of(stats[w // n_seg, 0, 0]), n_seg,
                                  T.address_of(tot[0]))
                T.sync_threads()
                row_m[0] = tot[0]
                row_m[1] = tot[1]
                for k in T.serial(seg_len // chunk):
                    T.copy(xs[old, k * chunk], cf)
                    for i, j in T.Parallel(1, chunk):
                        cf[i, j] = T.cast(T.exp2((T.cast(cf[i, j], f32) - row_m[0]) * LOG2E) * row_m[1], dtype)
                    T.copy(cf, y[w // n_seg, (w % n_seg) * seg_len + k * chunk])
            T.sync_threads()                   # 这一轮读完的段，下一轮的预取才能覆盖；tot 也读完了
# --8<-- [end:grid]
