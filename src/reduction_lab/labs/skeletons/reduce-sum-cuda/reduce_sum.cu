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

    // TODO(1): 算出本线程块负责的行 row（blockIdx.x），以及指向这一行开头的指针 row_in。
    //          行偏移 row * cols 用 int64_t 计算：行多、行长时它会超过 2^31。

    // TODO(2): 每个线程从第 tid 列开始、以 blockDim.x 为步长，把本行的元素累加到 float acc 里
    //          （相邻线程读相邻地址，访存是合并的）。cols 可能比 blockDim.x 小，也可能不是它的倍数。

    // TODO(3): 把 acc 写进 sdata[tid]，然后 __syncthreads()：所有部分和写完，才能开始读别人的。

    // TODO(4): 树形归约（顺序寻址）：s 从 blockDim.x / 2 开始，每步减半直到 1；
    //          tid < s 的线程执行 sdata[tid] += sdata[tid + s]。
    //          每一步之后都要 __syncthreads()，而且线程块里的每个线程都必须执行到这个屏障。

    // TODO(5): 线程 0 把这一行的和 sdata[0] 写到 out[row]。

    // TODO 结束
}
