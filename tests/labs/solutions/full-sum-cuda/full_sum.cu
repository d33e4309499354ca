// 实验 full-sum-cuda 的参考解：网格步长循环 + 两级 warp 洗牌 + 每块一次 atomicAdd

#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#define FULL_MASK 0xffffffffu

__device__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(FULL_MASK, v, offset);
    return v;
}

extern "C" __global__ void full_sum_kernel(float *out, const float *in, int64_t n)
{
    __shared__ float warp_sums[32];
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid % 32;
    unsigned int warp = tid / 32;
    unsigned int n_warps = blockDim.x / 32;

    // 1. 网格里的编号与网格步长（64 位）
    int64_t i = (int64_t)blockIdx.x * blockDim.x + tid;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;

    // 2. 网格步长循环
    float acc = 0.0f;
    for (int64_t j = i; j < n; j += stride)
        acc += in[j];

    // 3. warp 内归约，lane 0 写槽位；屏障在分支之外
    acc = warp_sum(acc);
    if (lane == 0)
        warp_sums[warp] = acc;
    __syncthreads();

    // 4. 第 0 个 warp 归约各 warp 的和
    if (warp == 0) {
        float s = warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f);
        // 5. 每块一次原子加
        if (lane == 0)
            atomicAdd(out, s);
    }
}
