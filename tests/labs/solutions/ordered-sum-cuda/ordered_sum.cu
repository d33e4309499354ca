// 实验 ordered-sum-cuda 的参考解（不随包发布）
#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#define FULL_MASK 0xffffffffu

// 一个 warp 的和：5 步之后在 lane 0（给出的，不用改）
__device__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(FULL_MASK, v, offset);
    return v;
}

// 整个线程块的和，结果在线程 0（给出的，不用改；「全数组求和」实验的 TODO(3)、TODO(4)）。
// 线程块里的每个线程都要调用它：里面有 __syncthreads()。warp_sums 是调用者的共享内存（至少 32 个槽位）。
__device__ float block_sum(float v, float *warp_sums)
{
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    v = warp == 0 ? warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f) : 0.0f;
    __syncthreads();                               // 再次调用之前，各 warp 都读完了 warp_sums
    return v;
}

extern "C" __global__ void ordered_sum_kernel(float *out, int *counters, const float *in, int64_t n)
{
    __shared__ float warp_sums[32];
    __shared__ int seg_s;
    unsigned int tid = threadIdx.x;

    // 1. 领票号：号比它小的块一定已经开始了
    if (tid == 0)
        seg_s = atomicAdd(&counters[0], 1);
    __syncthreads();
    int seg = seg_s;

    // 2. 网格步长循环，起点用票号
    int64_t i = (int64_t)seg * blockDim.x + tid;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (int64_t j = i; j < n; j += stride)
        acc += in[j];

    // 3. 本段的部分和
    float s = block_sum(acc, warp_sums);

    // 4. 轮流累加：等到轮到本段，加上，轮到下一段
    if (tid == 0) {
        while (atomicAdd(&counters[1], 0) != seg) { }
        __threadfence();
        *out += s;
        __threadfence();
        atomicExch(&counters[1], seg + 1);
    }
}
