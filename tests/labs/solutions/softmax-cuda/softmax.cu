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

    // TODO(1): 读进共享内存，同时求本线程的最大值
    int64_t row = blockIdx.x;
    const float *row_in = in + row * cols;
    float *row_out = out + row * cols;
    float m = -INFINITY;
    for (int64_t j = tid; j < cols; j += blockDim.x) {
        float v = row_in[j];
        row_buf[j] = v;
        m = fmaxf(m, v);
    }

    // TODO(2): 块内最大值
    m = warp_max(m);
    if (lane == 0)
        red[warp] = m;
    __syncthreads();
    m = warp_max(lane < n_warps ? red[lane] : -INFINITY);
    __syncthreads();

    // TODO(3): e = exp(x - m)，写回共享内存，累加
    float s = 0.0f;
    for (int64_t j = tid; j < cols; j += blockDim.x) {
        float e = expf(row_buf[j] - m);
        row_buf[j] = e;
        s += e;
    }

    // TODO(4): 块内求和
    s = warp_sum(s);
    if (lane == 0)
        red[warp] = s;
    __syncthreads();
    s = warp_sum(lane < n_warps ? red[lane] : 0.0f);

    // TODO(5): 归一化写回
    float inv = 1.0f / s;
    for (int64_t j = tid; j < cols; j += blockDim.x)
        row_out[j] = row_buf[j] * inv;
    // TODO 结束
}
