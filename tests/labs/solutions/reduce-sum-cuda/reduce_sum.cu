// 实验 reduce-sum-cuda：按行求和 out[row] = in[row, 0] + ... + in[row, cols - 1]（float32）
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid  = rows            一个线程块负责一行，行号是 blockIdx.x
//   block = BLOCK_SIZE      每块 BLOCK_SIZE 个线程（2 的幂，评分时为 256），blockDim.x == BLOCK_SIZE
//   in    按行主序连续存放：第 row 行第 j 列是 in[row * cols + j]
//
// 按顺序完成 TODO(1) 到 TODO(5)，然后运行：
//   reduction-lab lab check reduce-sum-cuda
// 讲义：「树形归约与__syncthreads()」（docs/cuda/tree-reduction.md）

#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

extern "C" __global__ void reduce_sum_rowwise_kernel(float *out, const float *in, int64_t rows, int64_t cols)
{
    __shared__ float sdata[BLOCK_SIZE];            // 每个线程一个槽位
    unsigned int tid = threadIdx.x;

    // 1. 本线程块负责的行；64 位的行偏移
    int64_t row = blockIdx.x;
    const float *row_in = in + row * cols;

    // 2. 以 blockDim.x 为步长累加
    float acc = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x)
        acc += row_in[j];

    // 3. 部分和写进共享内存
    sdata[tid] = acc;
    __syncthreads();

    // 4. 树形归约，屏障在分支之外
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }

    // 5. 线程 0 写出结果
    if (tid == 0)
        out[row] = sdata[0];
}
