// softmax_backward.cu：softmax的反向，dx[row, j] = y[row, j] * (dy[row, j] - sum_k y[row, k] * dy[row, k])。
// 包装函数：reduction_lab.cuda_kernels.softmax_backward（reduction_lab.softmax(x, backend="cuda")的反向）。
//
//   softmax_backward_rows  一行一个线程块：块内求sum(y * dy) -> 写出dx。
//                          第1遍读y、dy求点积，第2遍再读一遍y、dy写dx（第2遍多半命中L2）。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
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

extern "C" __global__ void softmax_backward_rows(const float *y, const float *dy, float *dx,
                                                 long long y_row_stride, long long dy_row_stride,
                                                 long long dx_row_stride, int n_cols)
{
    __shared__ float smem[BLOCK_SIZE / 32];
    const float *yr = y + blockIdx.x * y_row_stride;      // 64位偏移：行号 * 行距可能超过2**31
    const float *dyr = dy + blockIdx.x * dy_row_stride;
    float *dxr = dx + blockIdx.x * dx_row_stride;

    float s = 0.0f;                                       // 1. sum(y * dy)
    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE)
        s += yr[j] * dyr[j];
    s = block_allreduce_sum(s, smem);

    for (int j = threadIdx.x; j < n_cols; j += BLOCK_SIZE) // 2. dx = y * (dy - s)
        dxr[j] = yr[j] * (dyr[j] - s);
}
