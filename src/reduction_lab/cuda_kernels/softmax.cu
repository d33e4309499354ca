// softmax.cu：按行softmax，y[row, j] = exp(x[row, j] - m) / sum_k exp(x[row, k] - m)，m为行最大值。
// 包装函数：reduction_lab.cuda_kernels.softmax（即reduction_lab.softmax(x, backend="cuda")），
// 它按N从一张小表里选内核与配置（kernel="auto"），也可以显式指定。
//
//   softmax_rows        课程版：一行一个线程块，三遍读（最大值 -> exp之和 -> 归一化写出），逐个元素读写。
//   softmax_rows_warp   ROW_LANES个lane一行（一个线程块BLOCK_SIZE / ROW_LANES行）：整行放在寄存器里，只读一遍；
//                       组内先洗牌求出整行的最大值，再求exp之和，没有__syncthreads。短行用半个或四分之一个
//                       warp一行：每个lane放满PACKS包，同样多的寄存器里有两倍（四倍）的字节在路上。
//   softmax_rows_block  一个线程块一行：整行放在寄存器里，只读一遍；块内合并(m, s)。
//   softmax_rows_split  一行切成chunks段，一段一个线程块，段放在寄存器里，只读一遍；
//                       各段经全局内存交换(m, s)，等齐同一行的全部段再写出。
//
// 后三个内核按16字节一包读写（float：4个，bf16 / fp16：8个），计算都用float；每个线程放PACKS包。
// (m, s)是一段元素的最大值m与sum exp(x - m)：两段合并时以较大的最大值为基准重新缩放（在线softmax）。
// 后三个内核的指数写成exp2f((x - m) * LOG2E)：一条ex2.approx.f32（相对误差约2^-22），精确的expf要十来条
// 指令；16位的短行每字节要算的指数是float32的两倍，用expf时指令发射跟不上显存。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）；PACKS（1到16之间的2的幂，
// 每个线程的元素数PACKS * VEC不超过64）；ROW_LANES（warp内核一行几个lane：8、16或32，默认32；不少于
// 2 * VEC - 2，行首行尾的零散元素每个lane至多拿一个）；元素类型floatX：定义ENABLE_BF16时是__nv_bfloat16，
// 定义ENABLE_FP16时是__half，否则是float。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif
#ifndef PACKS
#define PACKS 4
#endif
#if PACKS < 1 || PACKS > 16 || (PACKS & (PACKS - 1)) != 0
#error "PACKS must be a power of two between 1 and 16"
#endif
#ifndef ROW_LANES
#define ROW_LANES 32
#endif
#if ROW_LANES != 8 && ROW_LANES != 16 && ROW_LANES != 32
#error "ROW_LANES must be 8, 16 or 32"
#endif
#if defined(__CUDACC_RTC__) && !defined(INFINITY)
#define INFINITY __int_as_float(0x7f800000)      // NVRTC不带math.h的宏
#endif

// --8<-- [start:floatX]
// 每种元素类型编译一份：读写floatX，累加和其余计算都用float
#if defined(ENABLE_BF16)
#include <cuda_bf16.h>
#define floatX __nv_bfloat16
#define FLOATX_BYTES 2
#elif defined(ENABLE_FP16)
#include <cuda_fp16.h>
#define floatX __half
#define FLOATX_BYTES 2
#else
#define floatX float
#define FLOATX_BYTES 4
#endif
// --8<-- [end:floatX]

#define VEC (16 / FLOATX_BYTES)       // 一包的元素数
#define ELEMS (PACKS * VEC)           // 每个线程放在寄存器里的元素数（另加一个零散元素）
#define LOG2E 1.4426950408889634f     // exp(v) = exp2(v * log2(e))
#if ELEMS > 64
#error "PACKS * VEC must not exceed 64 elements per thread"
#endif
#if ROW_LANES < 2 * VEC - 2
#error "ROW_LANES must be at least 2 * VEC - 2 (one edge element per lane)"
#endif

// --8<-- [start:warp_allreduce]
// 蝶形（butterfly）归约：第k步与lane ^ offset交换，5步后32个lane都持有结果
__device__ float warp_allreduce_max(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ float warp_allreduce_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// 只在每组ROW_LANES个lane之内：offset < ROW_LANES时lane ^ offset不出组，全部32个lane照样参加洗牌
__device__ float group_allreduce_max(float v)
{
    for (int offset = ROW_LANES / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ float group_allreduce_sum(float v)
{
    for (int offset = ROW_LANES / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}
// --8<-- [end:warp_allreduce]

// --8<-- [start:block_allreduce]
// 块内归约，所有线程都得到结果。smem至少BLOCK_SIZE / 32个float，每次调用用一块新的，
// 这样两次调用之间不需要额外的屏障。
__device__ float block_allreduce_max(float v, float *smem)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_allreduce_max(v);
    if (lane == 0)
        smem[warp] = v;
    __syncthreads();
    v = lane < BLOCK_SIZE / 32 ? smem[lane] : -INFINITY;   // 最大值的单位元是 -inf
    return warp_allreduce_max(v);
}

__device__ float block_allreduce_sum(float v, float *smem)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_allreduce_sum(v);
    if (lane == 0)
        smem[warp] = v;
    __syncthreads();
    v = lane < BLOCK_SIZE / 32 ? smem[lane] : 0.0f;        // 求和的单位元是0
    return warp_allreduce_sum(v);
}
// --8<-- [end:block_allreduce]

// --8<-- [start:softmax_rows]
extern "C" __global__ void softmax_rows(const floatX *x, floatX *y, long long x_row_stride,
                                        long long y_row_stride, int n_cols)
{
    __shared__ float smem_max[BLOCK_SIZE / 32];
    __shared__ float smem_sum[BLOCK_SIZE / 32];
    const floatX *xr = x + blockIdx.x * x_row_stride;
    floatX *yr = y + blockIdx.x * y_row_stride;

    float m = -INFINITY;                           // 1. 行最大值
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        m = fmaxf(m, (float)xr[j]);
    m = block_allreduce_max(m, smem_max);

    float s = 0.0f;                                // 2. exp(x - m)之和：指数不超过0，不会溢出
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        s += expf((float)xr[j] - m);
    s = block_allreduce_sum(s, smem_sum);

    float inv = 1.0f / s;                          // 3. 归一化
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        yr[j] = expf((float)xr[j] - m) * inv;
}
// --8<-- [end:softmax_rows]

// ---------------------------------------------------------------- 只读一遍的内核

// --8<-- [start:pack]
// 16字节一包：VEC个floatX。包的地址按16字节对齐时，读写一包是一条128位的指令。
struct __align__(16) packX { floatX v[VEC]; };

__device__ void load_pack(const floatX *p, float *f)    // p按16字节对齐
{
    packX q = *(const packX *)p;
#pragma unroll
    for (int i = 0; i < VEC; i++)
        f[i] = (float)q.v[i];
}

__device__ void store_pack(floatX *p, const float *f)   // 舍入成floatX：就近舍入到偶数
{
    packX q;
#pragma unroll
    for (int i = 0; i < VEC; i++)
        q.v[i] = f[i];
    *(packX *)p = q;
}

// 从p起的n个元素里，开头有几个在第一个16字节边界之前（元素按自身大小对齐）
__device__ int head_before_16(const floatX *p, int n)
{
    int head = (int)((16 - (size_t)p % 16) % 16) / FLOATX_BYTES;
    return head < n ? head : n;
}
// --8<-- [end:pack]

// --8<-- [start:ms_merge]
// (m, s)合并：s = s * exp(m - m') + s2 * exp(m2 - m')，m' = max(m, m2)。
// 两边都是空的（m = m2 = -inf）时保持(-inf, 0)，不算 -inf - (-inf) = nan。
// __fmul_rn：乘积单独舍入，不与加法合成FMA，于是交换两边得到逐位相同的结果。
__device__ void ms_merge(float &m, float &s, float m2, float s2)
{
    float mn = fmaxf(m, m2);
    if (mn != -INFINITY)
        s = __fmul_rn(s, exp2f((m - mn) * LOG2E)) + __fmul_rn(s2, exp2f((m2 - mn) * LOG2E));
    m = mn;
}

// 蝶形归约(m, s)：交换的两个lane算同一个式子（加法可交换），32个lane得到逐位相同的结果
__device__ void warp_allreduce_ms(float &m, float &s)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        ms_merge(m, s, m2, s2);
    }
}

// 块内合并(m, s)，所有线程都得到结果；与block_allreduce同样只用一次屏障
__device__ void block_allreduce_ms(float &m, float &s, float *smem_m, float *smem_s)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_allreduce_ms(m, s);
    if (lane == 0) {
        smem_m[warp] = m;
        smem_s[warp] = s;
    }
    __syncthreads();
    m = lane < BLOCK_SIZE / 32 ? smem_m[lane] : -INFINITY;  // 空段(-inf, 0)是单位元
    s = lane < BLOCK_SIZE / 32 ? smem_s[lane] : 0.0f;
    warp_allreduce_ms(m, s);
}
// --8<-- [end:ms_merge]

// --8<-- [start:row_in_registers]
// 一行 = 开头head个元素 + n_pack个对齐的包 + 结尾不足一包的元素。开头和结尾共n_edge（< 2 * VEC）个
// 零散元素，由一组线程的前n_edge个各拿一个。每个线程拿第first, first + stride, ...包，共PACKS包。
struct RowPart {
    int head, n_pack, edge;   // edge：本线程的零散元素在行内的下标，没有时为-1
};

__device__ RowPart row_part(const floatX *xr, int n_cols, int t, bool has_edges)
{
    RowPart r;
    r.head = head_before_16(xr, n_cols);
    r.n_pack = (n_cols - r.head) / VEC;
    int n_edge = n_cols - VEC * r.n_pack;
    r.edge = has_edges && t < n_edge ? (t < r.head ? t : t + VEC * r.n_pack) : -1;
    return r;
}

// 读本线程的元素到v（不存在的位置填-inf）
__device__ void load_row(const floatX *xr, RowPart r, int first, int stride, float *v)
{
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        int p = first + k * stride;
        if (p < r.n_pack) {
            load_pack(xr + r.head + p * VEC, v + k * VEC);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; i++)
                v[k * VEC + i] = -INFINITY;
        }
    }
    v[ELEMS] = r.edge >= 0 ? (float)xr[r.edge] : -INFINITY;
}

__device__ float thread_max(const float *v)
{
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i <= ELEMS; i++)
        m = fmaxf(m, v[i]);
    return m;
}

// v就地换成exp(v - m)，返回它们的和。m是-inf（全是-inf）时以0为基准：exp(-inf) = 0，和为0
__device__ float exp_sum(float *v, float m)
{
    float base = m == -INFINITY ? 0.0f : m, s = 0.0f;
#pragma unroll
    for (int i = 0; i <= ELEMS; i++) {
        v[i] = exp2f((v[i] - base) * LOG2E);      // 先相减再乘：x与base相近时差是精确的
        s += v[i];
    }
    return s;
}

// 读本线程的元素，算出本线程的(m, s)，v就地换成exp(v - m)
__device__ void load_exp(const floatX *xr, RowPart r, int first, int stride, float *v, float &m, float &s)
{
    load_row(xr, r, first, stride, v);
    m = thread_max(v);
    s = exp_sum(v, m);
}

// 整行的(M, S)已知：y = exp(x - M) / S = v * exp(m - M) / S。
// x与y在16字节内的偏移相同时按包写，否则逐个元素写（同样的元素，同样的值）。
__device__ void store_scaled(floatX *yr, const floatX *xr, RowPart r, int first, int stride, float *v,
                             float m, float M, float S)
{
    // 本线程全是-inf时v全是0，系数取0（exp(0 - M)可能溢出）；整行都是-inf时S = 0，得到nan，与torch相同
    float scale = (m == -INFINITY ? 0.0f : exp2f((m - M) * LOG2E)) * (1.0f / S);
#pragma unroll
    for (int i = 0; i <= ELEMS; i++)
        v[i] *= scale;
    bool same_offset = (size_t)xr % 16 == (size_t)yr % 16;
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        int p = first + k * stride;
        if (p < r.n_pack) {
            floatX *yp = yr + r.head + p * VEC;
            if (same_offset) {
                store_pack(yp, v + k * VEC);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; i++)
                    yp[i] = v[k * VEC + i];
            }
        }
    }
    if (r.edge >= 0)
        yr[r.edge] = v[ELEMS];
}
// --8<-- [end:row_in_registers]

// __launch_bounds__写在前置声明上（定义处保持 extern "C" __global__ void 名字 的写法）：
// 编译器按BLOCK_SIZE个线程一块分配寄存器，不会多到启动不了
extern "C" __global__ __launch_bounds__(BLOCK_SIZE) void
softmax_rows_warp(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                  long long y_row_stride, int n_rows, int n_cols);
extern "C" __global__ __launch_bounds__(BLOCK_SIZE, 1) void
softmax_rows_block(const floatX *__restrict__ x, floatX *__restrict__ y, long long x_row_stride,
                   long long y_row_stride, int n_cols);

// --8<-- [start:softmax_rows_warp]
extern "C" __global__ void softmax_rows_warp(const floatX *__restrict__ x, floatX *__restrict__ y,
                                             long long x_row_stride, long long y_row_stride, int n_rows,
                                             int n_cols)
{
    int lane = threadIdx.x % ROW_LANES;
    long long warp_row = (long long)blockIdx.x * (BLOCK_SIZE / ROW_LANES) + (threadIdx.x & ~31) / ROW_LANES;
    if (warp_row >= n_rows)
        return;                                    // 整个warp一起退出；之后只有warp内的洗牌
    long long row = warp_row + (threadIdx.x & 31) / ROW_LANES;
    bool live = row < n_rows;                      // 最后一个warp里多出的组：什么也不读不写，只陪着洗牌
    if (!live)
        row = n_rows - 1;
    const floatX *xr = x + row * x_row_stride;
    floatX *yr = y + row * y_row_stride;
    RowPart r = row_part(xr, n_cols, lane, true);
    if (!live) {                                   // 一个元素也没有：v全是-inf
        r.n_pack = 0;
        r.edge = -1;
    }
    float v[ELEMS + 1];
    load_row(xr, r, lane, ROW_LANES, v);           // 唯一的一遍读
    // 组内先求整行的最大值（洗牌，不要屏障），每个元素的exp(x - M)一次算定，不再合并(m, s)
    float M = group_allreduce_max(thread_max(v));
    float S = group_allreduce_sum(exp_sum(v, M));
    if (live)
        store_scaled(yr, xr, r, lane, ROW_LANES, v, M, M, S);
}
// --8<-- [end:softmax_rows_warp]

// --8<-- [start:softmax_rows_block]
extern "C" __global__ void softmax_rows_block(const floatX *__restrict__ x, floatX *__restrict__ y,
                                              long long x_row_stride, long long y_row_stride, int n_cols)
{
    __shared__ float smem_m[BLOCK_SIZE / 32], smem_s[BLOCK_SIZE / 32];
    const floatX *xr = x + blockIdx.x * x_row_stride;
    floatX *yr = y + blockIdx.x * y_row_stride;
    RowPart r = row_part(xr, n_cols, threadIdx.x, true);
    float v[ELEMS + 1], m, s;
    load_exp(xr, r, threadIdx.x, BLOCK_SIZE, v, m, s);
    float M = m, S = s;
    block_allreduce_ms(M, S, smem_m, smem_s);
    store_scaled(yr, xr, r, threadIdx.x, BLOCK_SIZE, v, m, M, S);
}
// --8<-- [end:softmax_rows_block]

// sync：1 + n_rows个int，启动前清零。sync[0]发号，sync[1 + row]数第row行已经发布(m, s)的段。
// part：n_rows * chunks个(m, s)。
// 线程块的逻辑编号取自sync[0]的原子发号，而不是blockIdx.x：号小的块一定已经开始运行，
// 一个块只等同一行的段，所以只要GPU能同时驻留chunks个线程块，就不会死锁（不依赖硬件分派的顺序）。
// SPLIT_MIN_BLOCKS：每个SM至少驻留SPLIT_MIN_THREADS个线程（每个线程至多64或128个寄存器），
// 包装函数按512个线程限制chunks。
#define SPLIT_MIN_THREADS (ELEMS > 32 ? 512 : 1024)
#define SPLIT_MIN_BLOCKS (BLOCK_SIZE >= SPLIT_MIN_THREADS ? 1 : SPLIT_MIN_THREADS / BLOCK_SIZE)
extern "C" __global__ __launch_bounds__(BLOCK_SIZE, SPLIT_MIN_BLOCKS) void
softmax_rows_split(const floatX *__restrict__ x, floatX *__restrict__ y, int *sync, float *part,
                   long long x_row_stride, long long y_row_stride, int n_cols, int chunks);

// --8<-- [start:softmax_rows_split]
extern "C" __global__ void softmax_rows_split(const floatX *__restrict__ x, floatX *__restrict__ y, int *sync,
                                              float *part, long long x_row_stride, long long y_row_stride,
                                              int n_cols, int chunks)
{
    __shared__ float smem_m[BLOCK_SIZE / 32], smem_s[BLOCK_SIZE / 32];
    __shared__ int ticket;
    __shared__ float row_ms[2];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0)
        ticket = atomicAdd(&sync[0], 1);
    __syncthreads();
    long long row = ticket / chunks;
    int c = ticket % chunks;
    const floatX *xr = x + row * x_row_stride;
    floatX *yr = y + row * y_row_stride;
    RowPart r = row_part(xr, n_cols, threadIdx.x, c == 0);     // 零散元素归第0段
    int first = c * BLOCK_SIZE * PACKS + threadIdx.x;
    float v[ELEMS + 1], m, s;
    load_exp(xr, r, first, BLOCK_SIZE, v, m, s);
    float M = m, S = s;
    block_allreduce_ms(M, S, smem_m, smem_s);                  // 本段的(m, s)

    if (threadIdx.x == 0) {                        // 发布：写(m, s)，栅栏，再原子计数
        part[2 * (long long)ticket] = M;
        part[2 * (long long)ticket + 1] = S;
        __threadfence();
        atomicAdd(&sync[1 + row], 1);
    }
    if (warp == 0) {                               // warp 0等齐同一行的全部段，合并它们的(m, s)
        if (lane == 0)
            while (atomicAdd(&sync[1 + row], 0) < chunks) {
            }
        __syncwarp();
        __threadfence();
        const volatile float *pr = part + 2 * row * chunks;    // volatile：读L2里的新值，不用L1的旧副本
        M = -INFINITY;
        S = 0.0f;
        for (int i = lane; i < chunks; i += 32)
            ms_merge(M, S, pr[2 * i], pr[2 * i + 1]);
        warp_allreduce_ms(M, S);
        if (lane == 0) {
            row_ms[0] = M;
            row_ms[1] = S;
        }
    }
    __syncthreads();
    store_scaled(yr, xr, r, first, BLOCK_SIZE, v, m, row_ms[0], row_ms[1]);
}
// --8<-- [end:softmax_rows_split]
