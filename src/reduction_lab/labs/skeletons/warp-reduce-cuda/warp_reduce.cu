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

    // TODO(1): 本线程块负责的行 row（blockIdx.x）和指向这一行开头的指针 row_in（行偏移用 int64_t）。

    // TODO(2): 每个线程从第 tid 列开始、以 blockDim.x 为步长，把本行的元素累加到 float acc 里。
    //          cols 可能比线程数少：行尾之外的线程一个元素也不读，acc 保持 0。

    // TODO(3): warp 内归约：offset 从 16 开始每步减半到 1，acc += __shfl_down_sync(FULL_MASK, acc, offset)。
    //          5 步之后 lane 0 手里是本 warp 32 个部分和的总和。mask 里要有被读的那个 lane（源线程）。

    // TODO(4): 每个 warp 的 lane 0 把 acc 写进 warp_sums[warp]；然后 __syncthreads()，
    //          整个线程块都要执行到它（不能写在 if (lane == 0) 里面）。

    // TODO(5): 第一个 warp（warp == 0）读回各 warp 的和：lane < n_warps 的读 warp_sums[lane]，其余的取 0.0f；
    //          再像 TODO(3) 一样洗牌一次，由 lane 0 写 out[row]。

    // TODO 结束
}
