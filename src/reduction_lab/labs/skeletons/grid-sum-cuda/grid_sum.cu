// 实验 grid-sum-cuda：整个数组求和 *out = in[0] + in[1] + ... + in[n - 1]（float32），一次启动，结果每次逐位相同
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid    = 固定的线程块数  GPU 上是「SM 数 x 每个 SM 驻留的块数」，模拟器里至多 8 块（评分另用 1、3、40 块各跑一个用例）
//   block   = BLOCK_SIZE      blockDim.x == BLOCK_SIZE；评分另用 32、96、1024 个线程的线程块各跑一个用例
//   partial = gridDim.x 个 float 的工作区：每块写一个部分和（评分程序在启动之前把它填成 NaN）
//   *out    评分程序在启动之前把它清零；由 0 号块的线程 0 写一次（不用原子操作）
// 源码里用了 cg::this_grid()，评分程序就协作启动（cudaLaunchCooperativeKernel）：网格里的块同时驻留，grid.sync()
// 才有定义。BLOCK_SIZE 必须是 32 的倍数、不超过 1024。
//
// 「全数组求和」实验用 atomicAdd 合并各块的部分和：加的先后每次不同，结果可能差最后几位。这里改成两步：
// 每块把部分和写进 partial，grid.sync() 等整个网格都写完，再由 0 号块按固定的顺序把它们加起来。
//
// 按顺序完成 TODO(1) 到 TODO(4)，然后运行：
//   reduction-lab lab check grid-sum-cuda
// 讲义：「数值与确定性」（docs/numerics.md）与「七个版本」（docs/cuda/seven-versions.md）

#include <stdint.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

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

extern "C" __global__ void grid_sum_kernel(float *out, float *partial, const float *in, int64_t n)
{
    __shared__ float warp_sums[32];
    cg::grid_group grid = cg::this_grid();
    unsigned int tid = threadIdx.x;

    // TODO(1): 网格步长循环（「全数组求和」实验的 TODO(1)、TODO(2)）：float acc 从 0 开始，
    //          i = blockIdx.x * blockDim.x + tid，stride = gridDim.x * blockDim.x（都用 int64_t），累加 in[j]，j < n。

    // TODO(2): s = block_sum(acc, warp_sums)；线程 0 把本块的和写进 partial[blockIdx.x]（不用原子操作：每块只写自己的槽位）。

    // TODO(3): grid.sync()：整个网格的每一块都写好了 partial，对所有线程块可见。
    //          写在所有分支之外：网格里每一块的每一个线程都要到达它，只有一部分到达时 GPU 上会死锁。

    // TODO(4): 0 号块（blockIdx.x == 0）按固定的顺序合并：第 tid 个线程加 partial[tid]、partial[tid + blockDim.x]……
    //          （b < gridDim.x，块数可能比线程多），再 block_sum 一次，线程 0 写 *out。
    //          别的块不读 partial、不写 out；block_sum 里有 __syncthreads()，0 号块的每个线程都要调用它。

    // TODO 结束
}
