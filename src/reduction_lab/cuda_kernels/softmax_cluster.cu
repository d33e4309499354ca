// softmax_cluster.cu：一行大到一个SM放不下时，用Hopper的线程块簇（thread block cluster）把整行留在片上。
// 包装函数：reduction_lab.cuda_kernels.cluster（softmax_cluster、softmax_cluster_regs、softmax_cluster_pipe）。
// 课程页面：docs/cuda/cluster-softmax.md。
//
//   softmax_cluster_rows  一个簇（CLUSTER_SIZE个线程块）处理一行：每块把自己那一段用16字节的向量
//                         读进动态共享内存，同时算出本段的(最大值m, sum exp(x - m))；簇内各块经
//                         分布式共享内存（cluster.map_shared_rank）交换这一对数，合并出整行的结果；
//                         每块再从共享内存算出并写回自己那一段。全局内存：每个元素读一次、写一次。
//   softmax_cluster_regs  同样一个簇一行，但每块那一段放在寄存器里（每个线程PACKS个16字节向量）：
//                         exp只算一次（以整个warp的最大值为基准）；每个warp把自己的(m, s)用st.async直接
//                         写进簇里每一块的共享内存，写完时记到那一块的mbarrier上，各块只等自己的mbarrier收齐，
//                         之后只读本地的共享内存。
//   softmax_cluster_pipe  寄存器版的常驻形式：网格里的簇数等于同时驻留得下的簇数，每个簇依次处理多行，
//                         后面几行的段先异步地装进共享内存（cp.async 或一维 TMA，见该内核前的说明）。
//
// 编译期常量：
//   CLUSTER_SIZE  每簇的线程块数：1、2、4、8（可移植的上限）或16（启动前要设置内核属性
//                 cudaFuncAttributeNonPortableClusterSizeAllowed = 1）
//   USE_BF16 / USE_FP16  0或1：floatX = __nv_bfloat16 / __half，都是0时floatX = float。累加一律用float
//   BLOCK_SIZE、PACKS     只用于softmax_cluster_regs：每块的线程数（32的倍数，至多1024，启动时必须等于
//                 blockDim.x）与每个线程的16字节向量数（1到16）
//   MIN_BLOCKS    只用于softmax_cluster_regs：__launch_bounds__的第二个参数（每个SM至少驻留的块数，默认1），
//                 包装函数按每个线程的元素数给出（cluster.regs_min_blocks）
//   SMEM_PACKS    只用于softmax_cluster_regs：每个线程另有几个16字节向量放在动态共享内存里（0到64，默认0），
//                 用cp.async搬进去，不占寄存器
//   KEEP_PACKED   只用于softmax_cluster_regs：1时寄存器里只留读进来的原始向量，exp在求和与写回时各算一遍；
//                 默认16位输入且SMEM_PACKS > 0时为1（寄存器减半，每个SM驻留更多块），否则为0（exp只算一次；
//                 float32拆包本来就不占寄存器）
// softmax_cluster_rows的启动：grid = M * CLUSTER_SIZE（1维），block = 32的倍数（至多1024个线程），
//       动态共享内存 = vecs_per_cta * 16字节（超过48 KiB要先调大cudaFuncAttributeMaxDynamicSharedMemorySize）。
//       vecs_per_cta >= ceil(ceil((n_cols + VEC - 1) / VEC) / CLUSTER_SIZE)，VEC = 16 / sizeof(floatX)。
// softmax_cluster_regs的启动：grid = M * CLUSTER_SIZE，block = BLOCK_SIZE，动态共享内存 = SMEM_PACKS * BLOCK_SIZE * 16
//       字节（超过48 KiB要先调大上限）；要求CLUSTER_SIZE * BLOCK_SIZE * (PACKS + SMEM_PACKS) >= ceil((n_cols + VEC - 1) / VEC)。

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cg = cooperative_groups;

#ifndef CLUSTER_SIZE
#define CLUSTER_SIZE 8
#endif
#if CLUSTER_SIZE != 1 && CLUSTER_SIZE != 2 && CLUSTER_SIZE != 4 && CLUSTER_SIZE != 8 && CLUSTER_SIZE != 16
#error "CLUSTER_SIZE must be 1, 2, 4, 8 or 16"
#endif
#ifndef USE_BF16
#define USE_BF16 0
#endif
#if USE_BF16 != 0 && USE_BF16 != 1
#error "USE_BF16 must be 0 or 1"
#endif
#ifndef USE_FP16
#define USE_FP16 0
#endif
#if (USE_FP16 != 0 && USE_FP16 != 1) || (USE_BF16 && USE_FP16)
#error "USE_FP16 must be 0 or 1, and not together with USE_BF16"
#endif
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || BLOCK_SIZE % 32 != 0
#error "BLOCK_SIZE must be a multiple of 32 between 32 and 1024"
#endif
#ifndef PACKS
#define PACKS 4
#endif
#if PACKS < 1 || PACKS > 16
#error "PACKS must be between 1 and 16"
#endif

#if USE_BF16
typedef __nv_bfloat16 floatX;
#elif USE_FP16
typedef __half floatX;
#else
typedef float floatX;
#endif

#if CLUSTER_SIZE > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_SIZE, 1, 1)
#else
#define CLUSTER_DIMS
#endif

constexpr int VEC = 16 / sizeof(floatX);      // 一个16字节向量里的元素数：float 4个，bf16 8个
constexpr int UNROLL = 8;                     // 每个线程一批同时在途的向量读
constexpr float LOG2E = 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))
#define NEG_INF (__int_as_float(0xff800000))  // NVRTC没有math.h的INFINITY

// --8<-- [start:vec]
// 16字节向量与float之间的转换。共享内存里按原始类型存放（bf16的行只占一半），计算一律用float。
__device__ __forceinline__ void unpack(uint4 u, float (&f)[VEC])
{
#if USE_BF16
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);             // 低16位是前一个元素
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u); // bf16就是float的高16位
    }
#elif USE_FP16
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 p = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
#else
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
#endif
}

__device__ __forceinline__ uint4 pack(const float (&f)[VEC])
{
#if USE_BF16
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);   // 一条指令转两个
        w[i] = *reinterpret_cast<const unsigned *>(&p);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
#elif USE_FP16
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 p = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
        w[i] = *reinterpret_cast<const unsigned *>(&p);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
#else
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
#endif
}

__device__ __forceinline__ float to_float(floatX v)
{
#if USE_BF16
    return __bfloat162float(v);
#elif USE_FP16
    return __half2float(v);
#else
    return v;
#endif
}

__device__ __forceinline__ floatX from_float(float v)
{
#if USE_BF16
    return __float2bfloat16_rn(v);
#elif USE_FP16
    return __float2half_rn(v);
#else
    return v;
#endif
}
// --8<-- [end:vec]

// --8<-- [start:edges]
// 列号先整体右移head个元素（head = 行首到上一个16字节边界的元素数），第v个向量就是移位后的
// 列[v * VEC, v * VEC + VEC)，正好落在16字节边界上。移位后的有效范围是[head, end)，end = n_cols + head。
// 整个落在范围内的向量一次读16字节；行首、行尾的半截向量逐个元素读，范围外填-inf
// （最大值的单位元；exp(-inf - m) = 0，对和也没有贡献）。
// 整向量读写的缓存提示（编译期常量，默认是下面注释里的写法）：
//   LOAD_HINT   0 普通的读；1 ld.global.cs（流式，先被替换出缓存）；2 ld.global.nc.L1::no_allocate.L2::256B
//               （不进L1，每次让L2取回256字节）
//   STORE_HINT  0 st.global.cs（流式写：这一行不会再被本内核读）；1 st.global.wb（普通的写回，默认：
//               H200上七个形状里六个比流式写快0.3到1.1个百分点，一个持平，docs/data/h200_cuda_softmax_hints.json）
#ifndef LOAD_HINT
#define LOAD_HINT 0
#endif
#ifndef STORE_HINT
#define STORE_HINT 1
#endif
#if LOAD_HINT < 0 || LOAD_HINT > 2 || STORE_HINT < 0 || STORE_HINT > 1
#error "LOAD_HINT must be 0, 1 or 2 and STORE_HINT 0 or 1"
#endif

__device__ __forceinline__ uint4 ld16(const floatX *p)
{
#if LOAD_HINT == 1
    return __ldcs(reinterpret_cast<const uint4 *>(p));
#elif LOAD_HINT == 2
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
#else
    return *reinterpret_cast<const uint4 *>(p);
#endif
}

__device__ __forceinline__ uint4 load_vec(const floatX *xr, int v, int head, int end)
{
    const int g = v * VEC;
    if (g >= head && g + VEC <= end)
        return ld16(xr + (g - head));
    float f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++)
        f[e] = (g + e >= head && g + e < end) ? to_float(xr[g + e - head]) : NEG_INF;
    return pack(f);
}

__device__ __forceinline__ uint4 neg_inf_vec()
{
    float f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++)
        f[e] = NEG_INF;
    return pack(f);
}

// 写回：y的行首与x的行首在16字节边界上的相位相同（vector_ok）时整向量写，否则逐个元素写
__device__ __forceinline__ void store_vec(floatX *yr, int v, int head, int end, const float (&f)[VEC],
                                          bool vector_ok)
{
    const int g = v * VEC;
    if (vector_ok && g >= head && g + VEC <= end) {
#if STORE_HINT == 1
        __stwb(reinterpret_cast<uint4 *>(yr + (g - head)), pack(f));   // st.global.wb：普通的写回
#else
        __stcs(reinterpret_cast<uint4 *>(yr + (g - head)), pack(f));   // 流式写：这一行不会再被本内核读
#endif
        return;
    }
#pragma unroll
    for (int e = 0; e < VEC; e++)
        if (g + e >= head && g + e < end)
            yr[g + e - head] = from_float(f[e]);
}
// --8<-- [end:edges]

// --8<-- [start:combine]
// (m, s)：一段元素的最大值m与sum exp(x - m)。两段合并时都换算到共同的最大值上再相加；
// 两段都是空的（m = -inf）时结果仍是(-inf, 0)，不会算出exp(-inf - (-inf)) = nan。
__device__ __forceinline__ void combine(float &m, float &s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    s = (mm == NEG_INF) ? 0.0f : s * exp2f((m - mm) * LOG2E) + s2 * exp2f((m2 - mm) * LOG2E);
    m = mm;
}

// warp内蝶形合并：5步之后32个lane都持有整个warp的(m, s)
__device__ __forceinline__ void warp_combine(float &m, float &s)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        const float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        combine(m, s, m2, s2);
    }
}

// 块内合并，所有线程都得到整块的(m, s)。每个kernel只调用一次，所以一次__syncthreads()就够。
__device__ __forceinline__ void block_combine(float &m, float &s)
{
    __shared__ float red_m[32], red_s[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    warp_combine(m, s);
    if (lane == 0) {
        red_m[warp] = m;
        red_s[warp] = s;
    }
    __syncthreads();
    m = lane < nwarps ? red_m[lane] : NEG_INF;
    s = lane < nwarps ? red_s[lane] : 0.0f;
    warp_combine(m, s);
}
// --8<-- [end:combine]

// 属性写在前置声明上（定义处保持 extern "C" __global__ void 名字 的写法）
extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(1024)
softmax_cluster_rows(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                     long long y_row_stride, int n_cols, int vecs_per_cta);

// --8<-- [start:kernel]
extern "C" __global__ void softmax_cluster_rows(const floatX *__restrict__ x, floatX *__restrict__ y,
                                                long long x_row_stride, long long y_row_stride,
                                                int n_cols, int vecs_per_cta)
{
    extern __shared__ uint4 slice[];          // 本块的那一段：vecs_per_cta个16字节向量
#if CLUSTER_SIZE > 1
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();   // 本块在簇里的编号：0 .. CLUSTER_SIZE - 1
#else
    const int rank = 0;
#endif
    const long long row = blockIdx.x / CLUSTER_SIZE;   // 一个簇一行
    const floatX *xr = x + row * x_row_stride;
    floatX *yr = y + row * y_row_stride;
    const int head = (int)((reinterpret_cast<unsigned long long>(xr) / sizeof(floatX)) % VEC);
    const bool vector_ok = head == (int)((reinterpret_cast<unsigned long long>(yr) / sizeof(floatX)) % VEC);
    const int end = n_cols + head;
    const int v0 = rank * vecs_per_cta;                          // 本块的第一个向量
    const int nv = min(vecs_per_cta, (end + VEC - 1) / VEC - v0);  // 本块的向量数（最后几块可能更少或没有）

    // 1. 读：全局内存 -> 共享内存，每个元素只读这一次；同时在线地累计本线程的(m, s)
    float m = NEG_INF, s = 0.0f;
    for (int base = 0; base < nv; base += UNROLL * blockDim.x) {
        uint4 u[UNROLL];
#pragma unroll
        for (int i = 0; i < UNROLL; i++) {          // 先发出一批互不依赖的读，再使用
            const int k = base + i * blockDim.x + threadIdx.x;
            u[i] = k < nv ? load_vec(xr, v0 + k, head, end) : neg_inf_vec();   // 批尾多出的位置填-inf
        }
#pragma unroll
        for (int i = 0; i < UNROLL; i++) {          // 逐个向量：存进共享内存，更新(m, s)
            const int k = base + i * blockDim.x + threadIdx.x;
            if (k < nv)
                slice[k] = u[i];
            float f[VEC];
            unpack(u[i], f);
            float bm = f[0];
#pragma unroll
            for (int e = 1; e < VEC; e++)
                bm = fmaxf(bm, f[e]);
            if (bm > m) {                           // 最大值变大：已有的和按新的最大值缩小
                s *= exp2f((m - bm) * LOG2E);
                m = bm;
            }
            if (m != NEG_INF) {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    s += exp2f((f[e] - m) * LOG2E);
            }
        }
    }

    // 2. 合并：先在块内，再在簇内
    block_combine(m, s);
#if CLUSTER_SIZE > 1
    __shared__ float2 part;                         // 本块的(m, s)，簇里的其他块来读
    if (threadIdx.x == 0)
        part = make_float2(m, s);
    cluster.sync();                                 // 各块的part都已写好，并对整个簇可见
    const int lane = threadIdx.x & 31;
    float2 p = make_float2(NEG_INF, 0.0f);
    if (lane < CLUSTER_SIZE)
        p = *cluster.map_shared_rank(&part, lane);  // 分布式共享内存：读第lane块的part
    m = p.x;
    s = p.y;
    warp_combine(m, s);                             // 每个warp各自合并，不必再同步
    cluster.barrier_arrive();                       // 宣告：本块不再读别的块的共享内存
#endif

    // 3. 写：从共享内存算出exp(x - m) / s，每个元素只写这一次
    const float inv = 1.0f / s;
    for (int k = threadIdx.x; k < nv; k += blockDim.x) {   // 与第1步同一个线程读写同一个向量
        float f[VEC];
        unpack(slice[k], f);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            f[e] = exp2f((f[e] - m) * LOG2E) * inv;
        store_vec(yr, v0 + k, head, end, f, vector_ok);
    }
#if CLUSTER_SIZE > 1
    cluster.barrier_wait();   // 等簇里每一块都读完了part再退出：块退出后它的共享内存就不能再访问
#endif
}
// --8<-- [end:kernel]

// ---------------------------------------------------------------- 段放在寄存器里

// 2^v：一条MUFU.EX2指令（ex2.approx.ftz，相对误差约2^-22，结果小于2^-126时冲成0）。
// exp(x - m) = 2^(x * log2(e) - m * log2(e))，指数用一条FFMA算出。
__device__ __forceinline__ float fast_exp2(float v)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

constexpr int NWARPS = BLOCK_SIZE / 32;

// --8<-- [start:steps]
// 本块在簇里的编号：0 .. CLUSTER_SIZE - 1
__device__ __forceinline__ int cluster_rank()
{
#if CLUSTER_SIZE > 1
    return (int)cg::this_cluster().block_rank();
#else
    return 0;
#endif
}

// 常驻版的两步（寄存器版的第一版也这样写：以本线程的最大值为基准，交换之后一次cluster.sync()）。
// 拆开与 exp：本线程的 PACKS 个向量拆成 float，m = 它们的最大值（WARP_MAX 时是整个 warp 的最大值）；
// exp 只算这一次：f = exp(x - m)，返回本线程的 sum f
template <bool WARP_MAX = false>
__device__ __forceinline__ float exp_segment(const uint4 (&u)[PACKS], float (&f)[PACKS][VEC], float &m)
{
#pragma unroll
    for (int p = 0; p < PACKS; p++)
        unpack(u[p], f[p]);
    m = NEG_INF;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int e = 0; e < VEC; e++)
            m = fmaxf(m, f[p][e]);
    if (WARP_MAX) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    }
    // 先减最大值再乘 log2(e)：x * log2(e) - m * log2(e) 的一条 FFMA 写法里，m * log2(e) 的舍入误差整个进到
    // 指数里（|m| = 1000 时相对误差约 3e-5；整行是 -3.4e38 的掩码时 m * log2(e) 溢出成 -inf，结果是 nan）
    const float mref = (m == NEG_INF) ? 0.0f : m;   // 全是-inf时以0为基准：f = 0，s = 0
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            f[p][e] = fast_exp2((f[p][e] - mref) * LOG2E);
            s += f[p][e];
        }
    return s;
}

// slots里簇中每个warp的(m, s)合并成整行的(M, S)：每个lane合并几项，再在warp内蝶形合并，32个lane都得到结果
__device__ __forceinline__ float2 merge_slots(const float2 *slots, int lane)
{
    float M = NEG_INF, S = 0.0f;
    for (int i = lane; i < CLUSTER_SIZE * NWARPS; i += 32) {
        const float2 q = slots[i];
        combine(M, S, q.x, q.y);
    }
    warp_combine(M, S);
    return make_float2(M, S);
}

// 簇内合并：warp内蝶形合并；lane r把本warp的(m, s)写进第r块的slots（分布式共享内存），
// 一次cluster.sync()（释放/获取语义）之后，每块的slots里是整个簇所有warp的结果，各块只读本地的共享内存。
// 返回整行的(M, S)。调用之前簇里每一块都必须已经开始运行（写别的块的共享内存）。
__device__ __forceinline__ float2 cluster_merge(float2 *slots, float m, float s)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_combine(m, s);
#if CLUSTER_SIZE > 1
    cg::cluster_group cluster = cg::this_cluster();
    if (lane < CLUSTER_SIZE)
        *cluster.map_shared_rank(&slots[(int)cluster.block_rank() * NWARPS + warp], lane) = make_float2(m, s);
    cluster.sync();
#else
    if (lane == 0)
        slots[warp] = make_float2(m, s);
    __syncthreads();
#endif
    return merge_slots(slots, lane);
}
// --8<-- [end:steps]

__device__ __forceinline__ unsigned smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

// --8<-- [start:mbar]
// mbarrier：共享内存里的一个 64 位计数器。到达数与「还要等的字节数」都归零时完成一个阶段（phase），
// 阶段号的奇偶位翻转；等待的线程按奇偶位等（第 k 次用这一段时等奇偶位 k & 1）。
__device__ __forceinline__ void mbar_init(unsigned long long *bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
// 一次到达，并登记接下来要有 bytes 个字节异步地写进来（TMA，或别的块的 st.async）
__device__ __forceinline__ void mbar_expect_bytes(unsigned long long *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n"
                 "}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
}
// 分布式共享内存的异步写：把 (m, s) 写进簇里第 rank 块的共享内存里与 slot 同一位置，
// 写完时把 8 个字节记到那一块的 bar 上（mapa：本块共享内存的地址 -> 簇里第 rank 块同一变量的地址）
__device__ __forceinline__ void st_async_pair(float2 *slot, unsigned long long *bar, int rank, float m, float s)
{
    unsigned remote_slot, remote_bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(smem_addr(slot)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(smem_addr(bar)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                 ::"r"(remote_slot), "f"(m), "f"(s), "r"(remote_bar) : "memory");
}
// --8<-- [end:mbar]

// --8<-- [start:async]
// cp.async：16 字节从全局内存直接进共享内存（.cg：不经 L1）。发出的拷贝按 commit 分组，
// wait_group N 等到本线程只剩最近的 N 组还没完成。
__device__ __forceinline__ void copy_async16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void copy_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// 一维 TMA：bytes 个字节（16 的倍数，两端 16 字节对齐）从全局内存进本块的共享内存，完成时记到 bar 上
__device__ __forceinline__ void tma_load(void *dst, const void *src, unsigned bytes, unsigned long long *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

// 共享内存里的一个 16 字节向量：volatile，两遍读不会被编译器合并成一遍、把值留在寄存器里
__device__ __forceinline__ uint4 lds16(const uint4 *p)
{
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(smem_addr(p)));
    return r;
}
// --8<-- [end:async]

#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef SMEM_PACKS
#define SMEM_PACKS 0
#endif
#if SMEM_PACKS < 0 || SMEM_PACKS > 64
#error "SMEM_PACKS must be between 0 and 64"
#endif
#ifndef KEEP_PACKED
#define KEEP_PACKED ((USE_BF16 || USE_FP16) && SMEM_PACKS > 0)
#endif

// 空的 volatile asm 声明「u 被改过」：之前从 u 拆出来的 float 不能留到后面复用，只能重新拆包
__device__ __forceinline__ void launder(uint4 &u)
{
    asm volatile("" : "+r"(u.x), "+r"(u.y), "+r"(u.z), "+r"(u.w));
}

// 一个向量拆成 float，再算 exp(x - mref)
__device__ __forceinline__ void exp_vec(uint4 u, float mref, float (&f)[VEC])
{
    unpack(u, f);
#pragma unroll
    for (int e = 0; e < VEC; e++)
        f[e] = fast_exp2((f[e] - mref) * LOG2E);
}

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(BLOCK_SIZE, MIN_BLOCKS)
softmax_cluster_regs(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                     long long y_row_stride, int n_cols);

// --8<-- [start:regs]
extern "C" __global__ void softmax_cluster_regs(const floatX *__restrict__ x, floatX *__restrict__ y,
                                                long long x_row_stride, long long y_row_stride, int n_cols)
{
    // 簇里每个warp的(m, s)：第r块的第w个warp写进每一块的slots[r * NWARPS + w]
    __shared__ float2 slots[CLUSTER_SIZE * NWARPS];
#if CLUSTER_SIZE > 1
    __shared__ unsigned long long full;                 // slots收齐CLUSTER_SIZE * NWARPS份时完成
#endif
    extern __shared__ uint4 seg[];                      // SMEM_PACKS > 0：每个线程另有SMEM_PACKS个向量放在这里
    constexpr int TPACKS = PACKS + SMEM_PACKS;          // 每个线程的向量数：寄存器里PACKS个，共享内存里SMEM_PACKS个
    const int rank = cluster_rank();                    // 本块在簇里的编号
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long row = blockIdx.x / CLUSTER_SIZE;
    const floatX *xr = x + row * x_row_stride;
    const int head = (int)((reinterpret_cast<unsigned long long>(xr) / sizeof(floatX)) % VEC);
    const int end = n_cols + head;
    const int v0 = rank * (BLOCK_SIZE * TPACKS) + threadIdx.x;  // 本线程的第一个向量；之后每隔BLOCK_SIZE个
#if CLUSTER_SIZE > 1
    // 别的块往本块的slots里写之前，本块的mbarrier必须已经初始化：初始化之后宣告「本块已开始」，
    // 等到第3步再等齐（这一半屏障的等待与下面的读重叠）
    if (threadIdx.x == 0) {
        mbar_init(&full);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif

    // 1. 读：共享内存的那几个向量用cp.async直接搬进去（不占寄存器），再发出PACKS个互不依赖的16字节读，
    //    之后才逐个使用（用到结果之前warp不必停下来等）。每个线程只读写共享内存里自己的槽位，块内不必同步
#pragma unroll
    for (int q = 0; q < SMEM_PACKS; q++) {
        const int v = v0 + (PACKS + q) * BLOCK_SIZE, g = v * VEC;
        uint4 *slot = &seg[q * BLOCK_SIZE + threadIdx.x];
        if (g >= head && g + VEC <= end)
            copy_async16(slot, xr + (g - head));
        else                                            // 行首、行尾的半截向量与行外：同寄存器版
            *slot = g < end ? load_vec(xr, v, head, end) : neg_inf_vec();
    }
    if (SMEM_PACKS > 0)
        copy_commit();
    uint4 u[PACKS];
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int v = v0 + p * BLOCK_SIZE;
        u[p] = v * VEC < end ? load_vec(xr, v, head, end) : neg_inf_vec();
    }
    // 2. 整个warp的最大值m；s = sum exp(x - m)。exp的结果留在f里，第4步直接用；
    //    KEEP_PACKED时寄存器里只留原始的向量（16位：一半的寄存器，每个SM驻留更多块），exp在第4步再算一遍
    float m = NEG_INF;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        float g[VEC];
        unpack(u[p], g);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            m = fmaxf(m, g[e]);
    }
    if (SMEM_PACKS > 0)
        copy_wait<0>();                                 // 本线程搬的向量都已到达
#pragma unroll 2
    for (int q = 0; q < SMEM_PACKS; q++) {
        float g[VEC];
        unpack(lds16(&seg[q * BLOCK_SIZE + threadIdx.x]), g);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            m = fmaxf(m, g[e]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    // 先减最大值再乘log2(e)（见exp_segment）；全是-inf时以0为基准：f = 0，s = 0
    const float mref = (m == NEG_INF) ? 0.0f : m;
    float f[PACKS][VEC], s = 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        if (KEEP_PACKED)
            launder(u[p]);
        float g[VEC];
        unpack(u[p], g);
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            g[e] = fast_exp2((g[e] - mref) * LOG2E);
            s += g[e];
            if (!KEEP_PACKED)
                f[p][e] = g[e];
        }
    }
#pragma unroll 2
    for (int q = 0; q < SMEM_PACKS; q++) {
        float g[VEC];
        unpack(lds16(&seg[q * BLOCK_SIZE + threadIdx.x]), g);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            s += fast_exp2((g[e] - mref) * LOG2E);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffff, s, o);

    // 3. 簇内交换：lane r把本warp的(m, s)用st.async写进第r块的slots，完成时记到第r块的full上；
    //    每块只等自己的full收齐。之后没有块再写本块的共享内存，不必再有第二次簇屏障
#if CLUSTER_SIZE > 1
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");   // 簇里每一块的full都已初始化
    if (threadIdx.x == 0)
        mbar_expect_bytes(&full, CLUSTER_SIZE * NWARPS * sizeof(float2));
    if (lane < CLUSTER_SIZE)
        st_async_pair(&slots[rank * NWARPS + warp], &full, lane, m, s);
    mbar_wait(&full, 0);
#else
    if (lane == 0)
        slots[warp] = make_float2(m, s);
    __syncthreads();
#endif
    const float2 MS = merge_slots(slots, lane);

    // 4. 写：y = exp(x - M) / S = f * exp(m - M) / S，一个warp一个系数
    floatX *yr = y + row * y_row_stride;
    const bool vector_ok = head == (int)((reinterpret_cast<unsigned long long>(yr) / sizeof(floatX)) % VEC);
    const float scale = (m == NEG_INF) ? 0.0f : fast_exp2((m - MS.x) * LOG2E) / MS.y;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int v = v0 + p * BLOCK_SIZE;
        if (KEEP_PACKED)
            launder(u[p]);
        if (v * VEC < end) {
            float g[VEC];
            if (KEEP_PACKED)
                exp_vec(u[p], mref, g);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                g[e] = (KEEP_PACKED ? g[e] : f[p][e]) * scale;
            store_vec(yr, v, head, end, g, vector_ok);
        }
    }
#pragma unroll 2
    for (int q = 0; q < SMEM_PACKS; q++) {
        const int v = v0 + (PACKS + q) * BLOCK_SIZE;
        if (v * VEC < end) {
            float g[VEC];
            exp_vec(lds16(&seg[q * BLOCK_SIZE + threadIdx.x]), mref, g);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                g[e] *= scale;
            store_vec(yr, v, head, end, g, vector_ok);
        }
    }
}
// --8<-- [end:regs]

// ---------------------------------------------------------------- 常驻的簇，预取后面的行：softmax_cluster_pipe
//
// 寄存器版里，一块读完自己那一段才开始算、算完才开始写：读、算、写在每个 SM 上一段接一段地排队，
// 一个簇又要凑齐 CLUSTER_SIZE 个 SM 上的空位才能开始。这里每个簇常驻（网格 = 同时驻留得下的簇数），
// 依次处理第 cid、cid + n_clusters、……行；每块有 STAGES 段共享内存，后面 STAGES - 1 行的段先异步地
// 装进来（不经寄存器），处理当前这一行时，后面的行已经在路上。两种装法（编译期的 USE_TMA）：
//   USE_TMA 0  每个线程用 cp.async 搬自己以后要读的那几个 16 字节向量：只读写自己的槽位，块内不必同步；
//   USE_TMA 1  一个线程发一条 cp.async.bulk（一维 TMA）搬整段，完成时按字节数记到 mbarrier 上。
//
// 要求（包装函数检查）：x 与 y 的每一行从 16 字节边界开始、每行的字节数是 16 的倍数，
//       BLOCK_SIZE * PACKS >= seg_vecs >= ceil(n_cols / VEC / CLUSTER_SIZE)。
// 启动：grid = n_clusters * CLUSTER_SIZE，block = BLOCK_SIZE，动态共享内存 = STAGES * seg_vecs * 16 字节。
#ifndef STAGES
#define STAGES 2
#endif
#if STAGES < 2 || STAGES > 4
#error "STAGES must be between 2 and 4"
#endif
#ifndef USE_TMA
#define USE_TMA 0
#endif


extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(BLOCK_SIZE)
softmax_cluster_pipe(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                     long long y_row_stride, int n_rows, int n_cols, int seg_vecs);

// --8<-- [start:pipe]
extern "C" __global__ void softmax_cluster_pipe(const floatX *__restrict__ x, floatX *__restrict__ y,
                                                long long x_row_stride, long long y_row_stride, int n_rows,
                                                int n_cols, int seg_vecs)
{
    extern __shared__ uint4 stage[];                     // STAGES 段，每段 seg_vecs 个 16 字节向量
    __shared__ float2 slots[2][CLUSTER_SIZE * NWARPS];   // 簇里每个warp的(m, s)，相邻两行轮流用
    const int rank = cluster_rank();                    // 本块在簇里的编号
    const int cid = blockIdx.x / CLUSTER_SIZE, n_clusters = gridDim.x / CLUSTER_SIZE;
    const int v0 = rank * seg_vecs;                                // 本块那一段的第一个向量
    const int nv = max(0, min(seg_vecs, n_cols / VEC - v0));       // 本块的向量数（最后几块可能没有）

#if USE_TMA
    __shared__ unsigned long long full[STAGES];          // 第 s 段装满时完成一个阶段
    const unsigned bytes = (unsigned)nv * 16u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++)
            mbar_init(&full[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // 让 TMA（异步代理）看得见
    }
    __syncthreads();
#endif
    // 第 j 个要处理的行（j = 0, 1, ...）的段装进第 j % STAGES 段
    auto fetch = [&](int j) {
        const long long row = cid + (long long)j * n_clusters;
        uint4 *buf = stage + (j % STAGES) * seg_vecs;
#if USE_TMA
        if (threadIdx.x == 0 && nv > 0 && row < n_rows) {
            mbar_expect_bytes(&full[j % STAGES], bytes);
            tma_load(buf, x + row * x_row_stride + (long long)v0 * VEC, bytes, &full[j % STAGES]);
        }
#else
        if (row < n_rows) {
            const uint4 *src = reinterpret_cast<const uint4 *>(x + row * x_row_stride) + v0;
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                const int k = threadIdx.x + p * BLOCK_SIZE;
                if (k < nv)
                    copy_async16(buf + k, src + k);
            }
        }
        copy_commit();                                   // 每行一组（行外也提交空组，组号与行号对齐）
#endif
    };
    for (int j = 0; j < STAGES - 1; j++)                 // 先装前 STAGES - 1 行
        fetch(j);
#if CLUSTER_SIZE > 1
    cg::this_cluster().sync();                           // 簇里每一块都已开始运行：之后才写别的块的共享内存
#endif

    int it = 0;
    for (long long row = cid; row < n_rows; row += n_clusters, it++) {
        uint4 *buf = stage + (it % STAGES) * seg_vecs;
        // 1. 发出第 it + STAGES - 1 行的拷贝（它那一段上一轮已经读进寄存器），再等第 it 行到齐
#if USE_TMA
        __syncthreads();                                 // 上一轮每个线程都读完了那一段，才能让 TMA 覆盖
        if (threadIdx.x == 0)
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // 普通读排在 TMA 的写之前
        fetch(it + STAGES - 1);
        if (nv > 0)
            mbar_wait(&full[it % STAGES], (unsigned)(it / STAGES) & 1u);
#else
        fetch(it + STAGES - 1);                          // 本线程只覆盖自己上一轮读过的槽位
        copy_wait<STAGES - 1>();                         // 本线程第 it 行的拷贝已完成
#endif
        uint4 u[PACKS];
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            const int k = threadIdx.x + p * BLOCK_SIZE;
            u[p] = k < nv ? buf[k] : neg_inf_vec();
        }
        // 2. 与寄存器版相同：本线程的 m，f = exp(x - m)，s = sum f；簇内合并。这一行用 slots[it & 1]：
        //    写下一行的那一份之前，每块都已过了这一行的屏障，不会有块还在读它（两份轮换，每行一次屏障就够）
        float f[PACKS][VEC], m;
        const float sum = exp_segment(u, f, m);
        const float2 MS = cluster_merge(slots[it & 1], m, sum);
        // 4. 写：整向量的流式写（行首对齐、每行的字节数是 16 的倍数，没有半截向量）
        const float scale = (m == NEG_INF) ? 0.0f : fast_exp2((m - MS.x) * LOG2E) / MS.y;
        uint4 *yr = reinterpret_cast<uint4 *>(y + row * y_row_stride) + v0;
#pragma unroll
        for (int p = 0; p < PACKS; p++) {
            const int k = threadIdx.x + p * BLOCK_SIZE;
            if (k < nv) {
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    f[p][e] *= scale;
                __stcs(yr + k, pack(f[p]));
            }
        }
    }
#if !USE_TMA
    copy_wait<0>();              // 行外提交的空组：退出前等齐（没有真正的拷贝在途）
#endif
    // 最后一行的 cluster.sync() 之后没有块再访问别的块的共享内存，各块可以直接退出
}
// --8<-- [end:pipe]

// ---------------------------------------------------------------- 一行放不进一个簇：softmax_grid_pipe
//
// N = 2^20 的 float32 行有 4 MiB，16 块的簇也放不下（每块至多 227 KiB 共享内存）。这里一行切成 n_segs 段，
// 每段 seg_vecs 个 16 字节向量；第 w 个工作项是第 w / n_segs 行的第 w % n_segs 段。网格是常驻的 P 个块
// （同时驻留得下的块数），块 b 依次处理第 b、b + P、b + 2P、……项（本块的第 0、1、2、……项）。
// 每块有 AHEAD + DELAY + 1 段共享内存，排成一个环：第 j 项的段装进第 j % (AHEAD + DELAY + 1) 段。第 it 轮：
//   1. 预取：用 cp.async 发出第 it + AHEAD 项的拷贝（不经寄存器）；
//   2. 发布：等第 it 项到齐，算出它的 (m, s)（float32 的行把 e = exp(x - 线程最大值) 写回共享内存里原来的
//      位置），打包成一个 64 位字（高 32 位 m、低 32 位 s 的位模式）一次写进 slots[w]，不等别的块。
//      槽位启动前填成哨兵（低 32 位是 -1.0f：真实的 s >= 0），字本身就是「到了」的标志，
//      不必再有计数器和 __threadfence()（后者要等本线程之前的写都到达 L2，一次就是几百纳秒）；
//   3. 写出：第 it - DELAY 项——它那一行的各段早在 DELAY 轮之前就开始发布了，通常已经到齐：轮询这一行的
//      n_segs 个槽位直到没有哨兵，合并出 (M, S)，算出 exp(x - M) / S 写回（float32 的行：e 乘上
//      exp(线程最大值 - M) / S）。warp 0 在每轮开头先发出这些槽位的读，多数时候合并时已经到了。
// 交换 (m, s) 的往返（原子加、别的 SM 上的块、轮询）落在 DELAY 轮的间隔里，不让 HBM 停下来等。
// 全局内存：每个元素读一次、写一次；float32 的行每个元素算一次 exp，16 位的行两次（发布一次、写出一次）。
// exp 的参数是 (x - m) * log2(e)：先相减（x 与 m 相近时差是精确的），不用 x * log2(e) - m * log2(e) 的 FFMA 写法。
// 不会死锁的条件（包装函数保证）：P 个块同时驻留，并且 n_segs <= P（同一块的两项相隔 P >= n_segs，
// 不在同一行）。一块只在写出时等待，等的是它更早的一项所在的行；行号最小的未完成行 r 的各段在不同的块上，
// 这些块发布 r 的段之前只等过更早的行（已经完成），所以 r 的每一段都会发布。
// 要求：x 与 y 的每一行从 16 字节边界开始、每行的字节数是 16 的倍数；BLOCK_SIZE * PACKS >= seg_vecs；
//       slots 在启动前填满哨兵 SLOT_EMPTY。CLUSTER_SIZE 取 1。
// 启动：grid = P，block = BLOCK_SIZE，动态共享内存 = (AHEAD + DELAY + 1) * seg_vecs * 16 字节，
//       float32 的行每段再加 BLOCK_SIZE * 4 字节（每个线程的最大值）。
#ifndef AHEAD
#define AHEAD 2
#endif
#ifndef DELAY
#define DELAY 2
#endif
#if AHEAD < 1 || DELAY < 0 || AHEAD + DELAY + 1 > 8
#error "need AHEAD >= 1, DELAY >= 0, AHEAD + DELAY + 1 <= 8"
#endif
constexpr int RING = AHEAD + DELAY + 1;

#define SLOT_EMPTY 0xbf800000u   // 槽位低 32 位的哨兵：-1.0f 的位模式

// 槽位的读写：64 位一次完成（别的块看到的要么是哨兵、要么是完整的一对），.relaxed.gpu 经 L2、对全 GPU 可见
__device__ __forceinline__ void st_slot(unsigned long long *p, float m, float s)
{
    const unsigned long long v = ((unsigned long long)__float_as_uint(m) << 32) | __float_as_uint(s);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned long long ld_slot(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// 共享内存里存什么：float32 的行在发布时把 e = exp(x - 线程最大值) 写回 x 原来的位置（同样大小、同样精度），写出时
// 每个元素只乘一个数，exp 只算一次。16 位的行放不下 float 的 e：存成 fp16 的 e 有 2^-11 的相对误差，结果就不再
// 落在正确舍入的半个 ulp 之内，所以 16 位的行留着 x，写出时重算 exp(x - M)。
#define STORE_E (!(USE_BF16 || USE_FP16))

extern "C" __global__ void CLUSTER_DIMS __launch_bounds__(BLOCK_SIZE)
softmax_grid_pipe(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                  long long y_row_stride, int n_rows, int n_cols, int seg_vecs, int n_segs,
                  unsigned long long *slots);

// --8<-- [start:grid]
extern "C" __global__ void softmax_grid_pipe(const floatX *__restrict__ x, floatX *__restrict__ y,
                                             long long x_row_stride, long long y_row_stride, int n_rows,
                                             int n_cols, int seg_vecs, int n_segs, unsigned long long *slots)
{
    extern __shared__ uint4 ring[];              // RING 段，每段 seg_vecs 个 16 字节向量
#if STORE_E
    float *tmax = reinterpret_cast<float *>(ring + RING * seg_vecs);   // 每段每线程的最大值（float32 的行）
#endif
    __shared__ float2 red[NWARPS];               // 块内合并：每个 warp 的 (m, s)
    __shared__ float2 row_ms;                    // 要写出的那一项所在行的 (M, S)：warp 0 合并好，全块来读
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long n_items = (long long)n_rows * n_segs;
    const long long P = gridDim.x;
    const int n_mine = (int)((n_items - blockIdx.x + P - 1) / P);   // 本块的项数
    const int row_vecs = n_cols / VEC;
    auto item = [&](int j) { return blockIdx.x + j * P; };          // 本块第 j 项的全局编号
    auto seg_nv = [&](long long w) { return min(seg_vecs, row_vecs - (int)(w % n_segs) * seg_vecs); };
    auto fetch = [&](int j) {                    // 本块的第 j 项装进第 j % RING 段
        if (j < n_mine) {
            const long long w = item(j);
            const uint4 *src = reinterpret_cast<const uint4 *>(x + (w / n_segs) * x_row_stride) +
                               (long long)(w % n_segs) * seg_vecs;
            uint4 *buf = ring + (j % RING) * seg_vecs;
            const int nv = seg_nv(w);
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                const int k = threadIdx.x + p * BLOCK_SIZE;
                if (k < nv)
                    copy_async16(buf + k, src + k);
            }
        }
        copy_commit();                           // 每项一组（没有的项也提交空组，组号与项号对齐）
    };
    for (int j = 0; j < AHEAD; j++)
        fetch(j);

    for (int it = 0; it < n_mine + DELAY; it++) {
        const bool publish = it < n_mine, write = it >= DELAY;   // 整块一致的条件
        float bm = NEG_INF, bs = 0.0f;
        // 先发出读：要写出的那一项所在行的前 64 个槽位，合并时才用。多数行这时早已到齐，这次 L2 往返就落在
        // 下面的计算里；没到齐的，发布本项之后再轮询（等待只发生在发布之后，不会死锁）
        unsigned long long pre0 = SLOT_EMPTY, pre1 = SLOT_EMPTY;
        if (warp == 0 && write) {
            const unsigned long long *rs = slots + item(it - DELAY) / n_segs * n_segs;
            if (lane < n_segs)
                pre0 = ld_slot(rs + lane);
            if (lane + 32 < n_segs)
                pre1 = ld_slot(rs + lane + 32);
        }
        if (publish) {
            // 1. 预取第 it + AHEAD 项：它覆盖的是第 it - DELAY - 1 项的段，本线程上一轮已经写出了
            fetch(it + AHEAD);
            copy_wait<AHEAD>();                  // 本线程第 it 项的拷贝已完成（每个线程只读自己拷的槽位）
            const uint4 *buf = ring + (it % RING) * seg_vecs;
            const int nv = seg_nv(item(it));
            uint4 u[PACKS];
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                const int k = threadIdx.x + p * BLOCK_SIZE;
                u[p] = k < nv ? buf[k] : neg_inf_vec();
            }
            // 本线程的 (m, s)：先减最大值再乘 log2(e)。x * log2(e) - m * log2(e) 用一条 FFMA 更省，但 m * log2(e)
            // 舍入的误差（|m| 很大时，例如整行填成 -3.4e38 的掩码）会整个进到 exp 的指数里
            float f[PACKS][VEC];
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                unpack(u[p], f[p]);
#pragma unroll
                for (int e = 0; e < VEC; e++)
                    bm = fmaxf(bm, f[p][e]);
            }
#if STORE_E
            // e = exp(x - 本线程的最大值) 写回原处（覆盖 x）：写出时只需乘一个数
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float v = bm != NEG_INF ? fast_exp2((f[p][e] - bm) * LOG2E)
                                                  : (isnan(f[p][e]) ? f[p][e] : 0.0f);   // 全是 -inf：e = 0
                    bs += v;
                    f[p][e] = v;
                }
                const int k = threadIdx.x + p * BLOCK_SIZE;
                if (k < nv)
                    ring[(it % RING) * seg_vecs + k] = pack(f[p]);
            }
            tmax[(it % RING) * BLOCK_SIZE + threadIdx.x] = bm;
#else
            if (bm != NEG_INF) {
#pragma unroll
                for (int p = 0; p < PACKS; p++)
#pragma unroll
                    for (int e = 0; e < VEC; e++)
                        bs += fast_exp2((f[p][e] - bm) * LOG2E);
            }
#endif
            warp_combine(bm, bs);
            if (lane == 0)
                red[warp] = make_float2(bm, bs);
        }
        __syncthreads();
        if (warp == 0) {
            if (publish) {                       // 2. 块内合并出本段的 (m, s)，线程 0 发布
                float2 q = lane < NWARPS ? red[lane] : make_float2(NEG_INF, 0.0f);
                warp_combine(q.x, q.y);
                if (lane == 0)
                    st_slot(slots + item(it), q.x, q.y);
            }
            if (write) {                         // 3. 要写出的那一项：轮询它那一行的槽位直到到齐，合并
                const unsigned long long *rs = slots + item(it - DELAY) / n_segs * n_segs;
                float M = NEG_INF, S = 0.0f;
                for (int i = lane; i < n_segs; i += 32) {
                    unsigned long long v = i == lane ? pre0 : i == lane + 32 ? pre1 : SLOT_EMPTY;   // 先发出的读
                    if ((unsigned)v == SLOT_EMPTY)
                        v = ld_slot(rs + i);
                    while ((unsigned)v == SLOT_EMPTY)
                        v = ld_slot(rs + i);
                    combine(M, S, __uint_as_float((unsigned)(v >> 32)), __uint_as_float((unsigned)v));
                }
                warp_combine(M, S);
                if (lane == 0)
                    row_ms = make_float2(M, S);
            }
        }
        __syncthreads();
        if (write) {                             // 从共享内存里的段算出 y = exp(x - M) / S，流式写回
            const int j = it - DELAY;
            const long long w = item(j);
            const int nv = seg_nv(w);
            const float2 MS = row_ms;
            // 整行 -inf 时 M = -inf、S = 0，下面得到 nan（与 torch 相同）
#if STORE_E
            const float sc = fast_exp2((tmax[(j % RING) * BLOCK_SIZE + threadIdx.x] - MS.x) * LOG2E) / MS.y;
#else
            const float inv = 1.0f / MS.y;
#endif
            const uint4 *buf = ring + (j % RING) * seg_vecs;
            uint4 *yr = reinterpret_cast<uint4 *>(y + (w / n_segs) * y_row_stride) + (long long)(w % n_segs) * seg_vecs;
#pragma unroll
            for (int p = 0; p < PACKS; p++) {
                const int k = threadIdx.x + p * BLOCK_SIZE;
                if (k < nv) {
                    float f[VEC];
                    unpack(buf[k], f);
#pragma unroll
                    for (int e = 0; e < VEC; e++)
#if STORE_E
                        f[e] *= sc;                      // y = e * exp(m_线程 - M) / S
#else
                        f[e] = fast_exp2((f[e] - MS.x) * LOG2E) * inv;
#endif
                    __stcs(yr + k, pack(f));
                }
            }
        }
    }
    copy_wait<0>();                              // 末尾提交的空组：退出前等齐
}
// --8<-- [end:grid]
