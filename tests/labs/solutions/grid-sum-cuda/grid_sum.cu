// 参考解：grid-sum-cuda（网格步长 + 块内归约 + grid.sync() + 0 号块按固定顺序合并）

#include <stdint.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

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

__device__ float block_sum(float v, float *warp_sums)
{
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    v = warp == 0 ? warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f) : 0.0f;
    __syncthreads();
    return v;
}

extern "C" __global__ void grid_sum_kernel(float *out, float *partial, const float *in, int64_t n)
{
    __shared__ float warp_sums[32];
    cg::grid_group grid = cg::this_grid();
    unsigned int tid = threadIdx.x;

    // 1. 网格步长循环
    int64_t i = (int64_t)blockIdx.x * blockDim.x + tid;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (int64_t j = i; j < n; j += stride)
        acc += in[j];

    // 2. 本块的部分和写进自己的槽位
    float s = block_sum(acc, warp_sums);
    if (tid == 0)
        partial[blockIdx.x] = s;

    // 3. 整个网格的屏障：在所有分支之外
    grid.sync();

    // 4. 0 号块按固定的顺序合并
    if (blockIdx.x == 0) {
        float t = 0.0f;
        for (unsigned int b = tid; b < gridDim.x; b += blockDim.x)
            t += partial[b];
        t = block_sum(t, warp_sums);
        if (tid == 0)
            *out = t;
    }
}
