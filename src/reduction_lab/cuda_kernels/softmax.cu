// softmax.cu：按行softmax，y[row, j] = exp(x[row, j] - m) / sum_k exp(x[row, k] - m)，m为行最大值。
// 包装函数：reduction_lab.cuda_kernels.softmax（即reduction_lab.softmax(x, backend="cuda")）。
//
//   softmax_rows  一行一个线程块：块内求最大值 -> 块内求exp之和 -> 归一化写出。
//                 块内归约 = warp内蝶形洗牌（__shfl_xor_sync，每个lane都得到结果）
//                 + 共享内存里各warp的结果再洗牌一次。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif
#if defined(__CUDACC_RTC__) && !defined(INFINITY)
#define INFINITY __int_as_float(0x7f800000)      // NVRTC不带math.h的宏
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
extern "C" __global__ void softmax_rows(const float *x, float *y, long long x_row_stride,
                                        long long y_row_stride, int n_cols)
{
    __shared__ float smem_max[BLOCK_SIZE / 32];
    __shared__ float smem_sum[BLOCK_SIZE / 32];
    const float *xr = x + blockIdx.x * x_row_stride;
    float *yr = y + blockIdx.x * y_row_stride;

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
}
// --8<-- [end:softmax_rows]
