// 实验 softmax-cuda：按行 softmax，out[row, j] = exp(x[row, j] - m) / s，
// m 是这一行的最大值，s = sum_j exp(x[row, j] - m)（float32）。一行只从显存读一次：整行留在共享内存里。
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid   = rows            一个线程块负责一行，行号是 blockIdx.x
//   block  = BLOCK_SIZE      blockDim.x == BLOCK_SIZE；评分用下面的默认值，另外用 32、96、1024 个线程各跑一个用例
//   动态共享内存 = cols 个 float：extern __shared__ float row_buf[] 正好放下一行（所以 cols 至多 12288）
//   in、out 按行主序连续存放：第 row 行第 j 列是 in[row * cols + j]
// BLOCK_SIZE 可以改（计时用它），但必须是 32 的倍数、不超过 1024：归约按整个 warp 洗牌。
//
// 按顺序完成 TODO(1) 到 TODO(5)，然后运行：
//   reduction-lab lab check softmax-cuda
// 讲义：「融合softmax与访存计数」（docs/triton/fused-softmax.md）、「-inf掩码」（docs/triton/masking.md）、
// 「warp洗牌」（docs/cuda/warp-shuffle.md）

#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#if defined(__CUDACC_RTC__) && !defined(INFINITY)
#define INFINITY __int_as_float(0x7f800000)      // NVRTC 不带 math.h 的宏
#endif

#define FULL_MASK 0xffffffffu

// warp 内的蝶形归约（__shfl_xor_sync）：5 步之后 32 个 lane 人人都拿到结果，不只是 lane 0
__device__ float warp_max(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

__device__ float warp_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    return v;
}

extern "C" __global__ void softmax_rowwise_kernel(float *out, const float *in, int64_t rows, int64_t cols)
{
    extern __shared__ float row_buf[];             // 整行：cols 个 float（动态共享内存，启动时给出大小）
    __shared__ float red[32];                      // 每个 warp 一个槽位，块内归约的第二级用
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid % 32;
    unsigned int warp = tid / 32;
    unsigned int n_warps = blockDim.x / 32;

    // TODO(1): row = blockIdx.x，row_in / row_out 指向这一行的开头（行偏移用 int64_t）。
    //          每个线程从第 tid 列开始、以 blockDim.x 为步长，把元素读进 row_buf[j]（整行只读这一次），
    //          同时求自己的最大值 float m。m 的初值是 -INFINITY：行尾之外的线程一个元素也不读，
    //          它们的 m 必须不改变整行的最大值（0 会改变：整行都是负数时 0 比每个元素都大）。

    // TODO(2): 块内最大值：m = warp_max(m)；lane 0 写 red[warp]；__syncthreads()；
    //          然后每个线程都读回各 warp 的最大值再归约一次（lane < n_warps 的读 red[lane]，其余取 -INFINITY，
    //          再 warp_max），这样每个线程手里都是整行的最大值。最后再 __syncthreads() 一次：
    //          第 4 步还要写 red，不能在别的 warp 读完之前就改掉它。

    // TODO(3): 每个线程把自己的元素换成 e = expf(row_buf[j] - m)，写回 row_buf[j]，并累加到 float s。
    //          减去最大值之后 e <= 1，x 很大也不会溢出。

    // TODO(4): 块内求和：和 TODO(2) 一样，只是换成 warp_sum、空的槽位取 0.0f。之后每个线程手里都是整行的 s。

    // TODO(5): row_out[j] = row_buf[j] / s（或乘以 1.0f / s），同样按步长 blockDim.x 写回整行。

    // TODO 结束
}
