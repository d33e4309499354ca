// 实验 warp-reduce-cuda：按行求和 out[row] = in[row, 0] + ... + in[row, cols - 1]（float32），
// 线程块内的归约用 warp 洗牌：每个 warp 用 __shfl_down_sync 归约成一个数，经共享内存交给第一个 warp 再归约一次。
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid  = rows            一个线程块负责一行，行号是 blockIdx.x
//   block = BLOCK_SIZE      blockDim.x == BLOCK_SIZE；评分用下面的默认值，另外用 32、96、1024 个线程各跑一个用例
//   in    按行主序连续存放：第 row 行第 j 列是 in[row * cols + j]
// BLOCK_SIZE 可以改（计时用它），但必须是 32 的倍数、不超过 1024：洗牌按整个 warp 进行。
//
// 按顺序完成 TODO(1) 到 TODO(5)，然后运行：
//   reduction-lab lab check warp-reduce-cuda
// 讲义：「warp洗牌」（docs/cuda/warp-shuffle.md）；mask 的规则见「库里的归约原语」（docs/cuda/library-primitives.md）

#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#define FULL_MASK 0xffffffffu

extern "C" __global__ void warp_reduce_rowwise_kernel(float *out, const float *in, int64_t rows, int64_t cols)
{
    __shared__ float warp_sums[32];                // 每个 warp 一个槽位：一个线程块最多 1024 / 32 = 32 个 warp
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid % 32;                  // 在本 warp 里的编号 0..31
    unsigned int warp = tid / 32;                  // 第几个 warp
    unsigned int n_warps = blockDim.x / 32;

    // 1. 本线程块负责的行；64 位的行偏移
    int64_t row = blockIdx.x;
    const float *row_in = in + row * cols;

    // 2. 以 blockDim.x 为步长累加；行尾之外的线程 acc = 0
    float acc = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x)
        acc += row_in[j];

    // 3. warp 内归约：5 步之后和在 lane 0
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(FULL_MASK, acc, offset);

    // 4. 每个 warp 一个数写进共享内存；屏障在分支之外
    if (lane == 0)
        warp_sums[warp] = acc;
    __syncthreads();

    // 5. 第一个 warp 归约各 warp 的和；没有对应 warp 的 lane 取 0
    if (warp == 0) {
        float v = lane < n_warps ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1)
            v += __shfl_down_sync(FULL_MASK, v, offset);
        if (lane == 0)
            out[row] = v;
    }
}
