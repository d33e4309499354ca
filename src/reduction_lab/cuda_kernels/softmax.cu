// softmax.cu：按行softmax，y[row, j] = exp(x[row, j] - m) / sum_k exp(x[row, k] - m)，m为行最大值。
// 包装函数：reduction_lab.cuda_kernels.softmax（即reduction_lab.softmax(x, backend="cuda")）。
//
//   softmax_rows  一行一个线程块：块内求最大值 -> 块内求exp之和 -> 归一化写出。
//                 块内归约 = warp内蝶形洗牌（__shfl_xor_sync，每个lane都得到结果）
//                 + 共享内存里各warp的结果再洗牌一次。
//                 bf16 / fp16：每个线程一次读写16字节（8个元素，softmax_row_x8），计算仍用float。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）；
// 元素类型floatX：定义ENABLE_BF16时是__nv_bfloat16，定义ENABLE_FP16时是__half，否则是float。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
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

#if FLOATX_BYTES == 2
// --8<-- [start:pack8]
// 16字节一包：8个floatX。包的地址按16字节对齐时，读写一包是一条128位的指令。
struct __align__(16) pack8 { floatX v0, v1, v2, v3, v4, v5, v6, v7; };

__device__ void load8(const floatX *p, float *f)    // p按16字节对齐
{
    pack8 q = *(const pack8 *)p;
    f[0] = (float)q.v0; f[1] = (float)q.v1; f[2] = (float)q.v2; f[3] = (float)q.v3;
    f[4] = (float)q.v4; f[5] = (float)q.v5; f[6] = (float)q.v6; f[7] = (float)q.v7;
}

__device__ void store8(floatX *p, const float *f)   // 就近舍入到偶数
{
    pack8 q;
    q.v0 = f[0]; q.v1 = f[1]; q.v2 = f[2]; q.v3 = f[3];
    q.v4 = f[4]; q.v5 = f[5]; q.v6 = f[6]; q.v7 = f[7];
    *(pack8 *)p = q;
}

// 从p起的n个元素里，开头有几个在第一个16字节边界之前（元素至少按2字节对齐）
__device__ int head_before_16(const floatX *p, int n)
{
    int head = (int)((16 - (size_t)p % 16) % 16) / 2;
    return head < n ? head : n;
}
// --8<-- [end:pack8]

// 一行 = 开头head个元素 + n_pack个对齐的包 + 结尾不足一包的元素；开头和结尾（共n_edge个）逐个处理。
// x与y在16字节内的偏移不同时，没法对同一个j同时按包读写：整行逐个处理。
__device__ void softmax_row_x8(const floatX *xr, floatX *yr, int n_cols, float *smem_max, float *smem_sum)
{
    int head = (size_t)xr % 16 == (size_t)yr % 16 ? head_before_16(xr, n_cols) : n_cols;
    int n_pack = (n_cols - head) / 8, n_edge = n_cols - 8 * n_pack;
    const floatX *xp = xr + head;
    floatX *yp = yr + head;
    float f[8];

    float m = -INFINITY;                           // 1. 行最大值
    for (int e = threadIdx.x; e < n_edge; e += BLOCK_SIZE)
        m = fmaxf(m, (float)xr[e < head ? e : e + 8 * n_pack]);
    for (int k = threadIdx.x; k < n_pack; k += BLOCK_SIZE) {
        load8(xp + 8 * k, f);
#pragma unroll
        for (int i = 0; i < 8; i++)
            m = fmaxf(m, f[i]);
    }
    m = block_allreduce_max(m, smem_max);

    float s = 0.0f;                                // 2. exp(x - m)之和
    for (int e = threadIdx.x; e < n_edge; e += BLOCK_SIZE)
        s += expf((float)xr[e < head ? e : e + 8 * n_pack] - m);
    for (int k = threadIdx.x; k < n_pack; k += BLOCK_SIZE) {
        load8(xp + 8 * k, f);
#pragma unroll
        for (int i = 0; i < 8; i++)
            s += expf(f[i] - m);
    }
    s = block_allreduce_sum(s, smem_sum);

    float inv = 1.0f / s;                          // 3. 归一化，舍入成floatX写出
    for (int e = threadIdx.x; e < n_edge; e += BLOCK_SIZE) {
        int j = e < head ? e : e + 8 * n_pack;
        yr[j] = expf((float)xr[j] - m) * inv;
    }
    for (int k = threadIdx.x; k < n_pack; k += BLOCK_SIZE) {
        load8(xp + 8 * k, f);
#pragma unroll
        for (int i = 0; i < 8; i++)
            f[i] = expf(f[i] - m) * inv;
        store8(yp + 8 * k, f);
    }
}
#endif

// --8<-- [start:softmax_rows]
extern "C" __global__ void softmax_rows(const floatX *x, floatX *y, long long x_row_stride,
                                        long long y_row_stride, int n_cols)
{
    __shared__ float smem_max[BLOCK_SIZE / 32];
    __shared__ float smem_sum[BLOCK_SIZE / 32];
    const floatX *xr = x + blockIdx.x * x_row_stride;
    floatX *yr = y + blockIdx.x * y_row_stride;
#if FLOATX_BYTES == 2
    softmax_row_x8(xr, yr, n_cols, smem_max, smem_sum);   // bf16 / fp16：16字节一包
#else
    float m = -INFINITY;                           // 1. 行最大值
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        m = fmaxf(m, xr[j]);
    m = block_allreduce_max(m, smem_max);

    float s = 0.0f;                                // 2. exp(x - m)之和：指数不超过0，不会溢出
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        s += expf(xr[j] - m);
    s = block_allreduce_sum(s, smem_sum);

    float inv = 1.0f / s;                          // 3. 归一化
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        yr[j] = expf(xr[j] - m) * inv;
#endif
}
// --8<-- [end:softmax_rows]
