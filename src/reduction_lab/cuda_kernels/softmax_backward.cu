// softmax_backward.cu：softmax的反向，dx[row, j] = y[row, j] * (dy[row, j] - sum_k y[row, k] * dy[row, k])。
// 包装函数：reduction_lab.cuda_kernels.softmax_backward（reduction_lab.softmax(x, backend="cuda")的反向）。
//
//   softmax_backward_rows  一行一个线程块：块内求sum(y * dy) -> 写出dx。
//                          第1遍读y、dy求点积，第2遍再读一遍y、dy写dx（第2遍多半命中L2）。
//                          bf16 / fp16：每个线程一次读写16字节（8个元素），计算用float。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）；
// 元素类型floatX：定义ENABLE_BF16时是__nv_bfloat16，定义ENABLE_FP16时是__half，否则是float。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif

// 每种元素类型编译一份：读写floatX，计算用float
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

__device__ float warp_allreduce_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// 块内求和，所有线程都得到结果；smem至少BLOCK_SIZE / 32个float
__device__ float block_allreduce_sum(float v, float *smem)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_allreduce_sum(v);
    if (lane == 0)
        smem[warp] = v;
    __syncthreads();
    v = lane < BLOCK_SIZE / 32 ? smem[lane] : 0.0f;
    return warp_allreduce_sum(v);
}

#if FLOATX_BYTES == 2
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

// 一行 = 开头head个元素 + n_pack个对齐的包 + 结尾不足一包的元素；开头和结尾（共n_edge个）逐个处理。
// 三个指针在16字节内的偏移不同时，整行逐个处理。
__device__ void softmax_backward_row_x8(const floatX *yr, const floatX *dyr, floatX *dxr, int n_cols, float *smem)
{
    size_t mis = (size_t)yr % 16;
    int head = n_cols;
    if ((size_t)dyr % 16 == mis && (size_t)dxr % 16 == mis) {
        head = (int)((16 - mis) % 16) / 2;
        head = head < n_cols ? head : n_cols;
    }
    int n_pack = (n_cols - head) / 8, n_edge = n_cols - 8 * n_pack;
    float f[8], g[8];

    float s = 0.0f;                                       // 1. sum(y * dy)
    for (int e = threadIdx.x; e < n_edge; e += BLOCK_SIZE) {
        int j = e < head ? e : e + 8 * n_pack;
        s += (float)yr[j] * (float)dyr[j];
    }
    for (int k = threadIdx.x; k < n_pack; k += BLOCK_SIZE) {
        load8(yr + head + 8 * k, f);
        load8(dyr + head + 8 * k, g);
#pragma unroll
        for (int i = 0; i < 8; i++)
            s += f[i] * g[i];
    }
    s = block_allreduce_sum(s, smem);

    for (int e = threadIdx.x; e < n_edge; e += BLOCK_SIZE) { // 2. dx = y * (dy - s)
        int j = e < head ? e : e + 8 * n_pack;
        dxr[j] = (float)yr[j] * ((float)dyr[j] - s);
    }
    for (int k = threadIdx.x; k < n_pack; k += BLOCK_SIZE) {
        load8(yr + head + 8 * k, f);
        load8(dyr + head + 8 * k, g);
#pragma unroll
        for (int i = 0; i < 8; i++)
            f[i] = f[i] * (g[i] - s);
        store8(dxr + head + 8 * k, f);
    }
}
#endif

extern "C" __global__ void softmax_backward_rows(const floatX *y, const floatX *dy, floatX *dx,
                                                 long long y_row_stride, long long dy_row_stride,
                                                 long long dx_row_stride, int n_cols)
{
    __shared__ float smem[BLOCK_SIZE / 32];
    const floatX *yr = y + blockIdx.x * y_row_stride;     // 64位偏移：行号 * 行距可能超过2**31
    const floatX *dyr = dy + blockIdx.x * dy_row_stride;
    floatX *dxr = dx + blockIdx.x * dx_row_stride;
#if FLOATX_BYTES == 2
    softmax_backward_row_x8(yr, dyr, dxr, n_cols, smem);  // bf16 / fp16：16字节一包
#else
    float s = 0.0f;                                       // 1. sum(y * dy)
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        s += yr[j] * dyr[j];
    s = block_allreduce_sum(s, smem);

    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE) // 2. dx = y * (dy - s)
        dxr[j] = yr[j] * (dyr[j] - s);
#endif
}
