// 实验 ordered-sum-cuda：整个数组求和 *out = in[0] + in[1] + ... + in[n - 1]（float32），一次启动，
// 不用 grid.sync()，也不用原子加合并，结果每次逐位相同
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid     = 固定的线程块数  GPU 上是「SM 数 x 每个 SM 驻留的块数」，模拟器里至多 8 块（评分另用 1、3、40 块各跑一个用例）
//   block    = BLOCK_SIZE      blockDim.x == BLOCK_SIZE；评分另用 32、96、1024 个线程的线程块各跑一个用例
//   counters = 两个 int，评分程序在启动之前清零：counters[0] 是发票号的计数器，counters[1] 是轮到第几段（turn）
//   *out     评分程序在启动之前把它清零；各块按段号的顺序轮流把自己的部分和加上去（不用原子加）
// BLOCK_SIZE 必须是 32 的倍数、不超过 1024。
//
// 「确定的全数组求和」实验用 grid.sync() 等整个网格，网格必须同时驻留。这里不等整个网格，只等前一段：
// 段号为 s 的块等到 turn == s，把部分和加进 *out，再把 turn 设成 s + 1。段号不能直接取 blockIdx.x：
// CUDA 不保证线程块按编号开始，等待的块占满 SM 时，它等的块可能还没开始。段号取「票号」：每块开始时从
// counters[0] 领一个号（atomicAdd 返回的旧值），号是按开始的先后发的，号比它小的块一定已经开始了。
//
// 按顺序完成 TODO(1) 到 TODO(4)，然后运行：
//   reduction-lab lab check ordered-sum-cuda
// 讲义：「CUDA C 模拟器」的「线程块之间的等待」（docs/cuda/simulator.md）与「数值与确定性」（docs/numerics.md）

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

    // TODO(1): 领票号：线程 0 做 seg_s = atomicAdd(&counters[0], 1)；__syncthreads() 之后全块读 int seg = seg_s。
    //          下面凡是用到「第几段」的地方都用 seg，不用 blockIdx.x。

    // TODO(2): 网格步长循环（「全数组求和」实验的 TODO(1)、TODO(2)，只是起点用 seg）：float acc 从 0 开始，
    //          i = seg * blockDim.x + tid，stride = gridDim.x * blockDim.x（都用 int64_t），累加 in[j]，j < n。

    // TODO(3): s = block_sum(acc, warp_sums)：本段的部分和在线程 0（每个线程都要调用它）。

    // TODO(4): 线程 0 轮流累加：
    //          while (atomicAdd(&counters[1], 0) != seg) { }   等到轮到本段（用原子操作读：普通的读可能只读一次）
    //          __threadfence();                                上一段对 *out 的写，本块读得到
    //          *out += s;                                      不用原子加：同一时刻只有一块在加
    //          __threadfence();                                本块的写，先于下一句对别的块可见
    //          atomicExch(&counters[1], seg + 1);              轮到下一段

    // TODO 结束
}
