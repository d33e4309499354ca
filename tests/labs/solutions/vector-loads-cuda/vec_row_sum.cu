// 实验 vector-loads-cuda：bfloat16 的按行求和 out[row] = in[row, 0] + ... + in[row, cols - 1]（结果是 float32），
// 主循环每个线程一次读 16 字节：8 个 bfloat16 一包，一条 128 位的加载指令。
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid  = rows            一个线程块负责一行，行号是 blockIdx.x
//   block = BLOCK_SIZE      blockDim.x == BLOCK_SIZE（2 的幂）
//   in    按行主序连续存放：第 row 行第 j 列是 in[row * cols + j]
// 16 字节的加载要求地址是 16 的倍数（否则 GPU 报 misaligned address 并终止程序）。张量的开头是对齐的，
// 可 cols 不是 8 的倍数时，第 1 行以后的行首不在 16 字节边界上：每行要先逐个读到边界，再整包读，最后逐个读结尾。
//
// 按顺序完成 TODO(1) 到 TODO(4)，然后运行：
//   reduction-lab lab check vector-loads-cuda
// 讲义：「树形归约与__syncthreads()」的「16字节一包：对齐与请求数」（docs/cuda/tree-reduction.md）、
//       「16位输入与向量加载」（docs/triton/half-precision.md）

#include <cuda_bf16.h>
#include <stdint.h>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#define VEC 8                                      // 一包的元素数：16 字节 / 2 字节

// 一包 8 个 bfloat16，按 16 字节对齐：读一个 pack8 就是一条 128 位的加载
struct __align__(16) pack8 { __nv_bfloat16 v0, v1, v2, v3, v4, v5, v6, v7; };

// 已经写好：一包的 8 个元素转成 float 相加
__device__ float sum_pack(pack8 p)
{
    return ((__bfloat162float(p.v0) + __bfloat162float(p.v1)) + (__bfloat162float(p.v2) + __bfloat162float(p.v3))) +
           ((__bfloat162float(p.v4) + __bfloat162float(p.v5)) + (__bfloat162float(p.v6) + __bfloat162float(p.v7)));
}

extern "C" __global__ void vec_row_sum_kernel(float *out, const __nv_bfloat16 *in, int64_t rows, int64_t cols)
{
    __shared__ float sdata[BLOCK_SIZE];
    unsigned int tid = threadIdx.x;
    int64_t row = blockIdx.x;
    const __nv_bfloat16 *row_in = in + row * cols;
    float acc = 0.0f;

    // 1. 行首到下一个 16 字节边界的元素数，不超过 cols
    int64_t head = (int64_t)((16 - (size_t)row_in % 16) % 16) / 2;
    head = head < cols ? head : cols;
    // 2. 对齐之后的整包
    int64_t n_pack = (cols - head) / VEC;
    const pack8 *pk = (const pack8 *)(row_in + head);
    // 3. 主循环：每个线程一次读 16 字节
    for (int64_t k = tid; k < n_pack; k += blockDim.x)
        acc += sum_pack(pk[k]);
    // 4. 两头逐个读
    for (int64_t j = tid; j < head; j += blockDim.x)
        acc += __bfloat162float(row_in[j]);
    for (int64_t j = head + VEC * n_pack + tid; j < cols; j += blockDim.x)
        acc += __bfloat162float(row_in[j]);

    // 下面已经写好：块内树形归约，线程 0 写出这一行的和
    sdata[tid] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        out[row] = sdata[0];
}
