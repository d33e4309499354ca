// 实验 full-sum-cuda：整个数组求和 *out = in[0] + in[1] + ... + in[n - 1]（float32），一次启动
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid  = 固定的线程块数  不随 n 增长：GPU 上是「SM 数 x 每个 SM 常驻的块数」，模拟器里至多 8 块，
//                           所以 grid * BLOCK_SIZE 常常比 n 小，每个线程要处理好几个元素
//   block = BLOCK_SIZE      blockDim.x == BLOCK_SIZE；评分另用 32、96、1024 个线程和 1 块、3 块的网格各跑一个用例
//   *out  评分程序在启动之前把它清零
// BLOCK_SIZE 可以改（计时用它），但必须是 32 的倍数、不超过 1024：块内的归约按整个 warp 洗牌。
//
// 不同线程块之间没有 __syncthreads()，也没有先后：每块算出自己的部分和，再用 atomicAdd 加到 *out 上。
//
// 按顺序完成 TODO(1) 到 TODO(5)，然后运行：
//   reduction-lab lab check full-sum-cuda
// 讲义：「七个版本」（docs/cuda/seven-versions.md）与「数值与确定性」（docs/numerics.md）

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

extern "C" __global__ void full_sum_kernel(float *out, const float *in, int64_t n)
{
    __shared__ float warp_sums[32];                // 每个 warp 一个槽位：一个线程块最多 32 个 warp
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid % 32;
    unsigned int warp = tid / 32;
    unsigned int n_warps = blockDim.x / 32;

    // TODO(1): 本线程在整个网格里的编号 i = blockIdx.x * blockDim.x + tid，
    //          以及网格步长 stride = gridDim.x * blockDim.x（整个网格的线程数）。
    //          两个都用 int64_t：n 可以超过 2^31，32 位的乘积会溢出。

    // TODO(2): 网格步长循环：float acc 从 0 开始，累加 in[i]、in[i + stride]、in[i + 2 * stride]……直到 n。
    //          相邻线程读相邻地址（合并访存）；n 可能比整个网格的线程数少。

    // TODO(3): 块内第一级：acc = warp_sum(acc)；每个 warp 的 lane 0 把它写进 warp_sums[warp]，
    //          然后 __syncthreads()（写在分支外面：线程块里的每个线程都要到达）。

    // TODO(4): 块内第二级：第 0 个 warp 读回 warp_sums[lane]（lane >= n_warps 的取 0.0f），再 warp_sum 一次。

    // TODO(5): 线程 0 把本块的和 atomicAdd 到 *out：每块只做一次原子加。
    //          写成 *out += s 会丢掉别的线程块同时加上的值（模拟器报告全局内存数据竞争）。

    // TODO 结束
}
