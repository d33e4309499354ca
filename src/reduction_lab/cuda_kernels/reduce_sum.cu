// reduce_sum.cu：按行求和out[row] = x[row, 0] + ... + x[row, n_cols - 1]（用float累加）。
// 课程页面：docs/cuda/tree-reduction.md；包装函数：reduction_lab.cuda_kernels.reduce_sum。
//
//   reduce_sum_rows        课程版：一行一个线程块，共享内存树形归约（顺序寻址）
//   reduce_sum_rows_warp   短行（生产版）：一个warp一行，每个线程8路独立加载，warp洗牌归约
//   reduce_sum_rows_split  长行（生产版）：grid = (段数, 行数)，一行切成几段各由一个线程块处理，
//                          warp洗牌 + 共享内存归约；只有一段时直接写floatX的输出（一次启动），
//                          段数 > 1时atomicAdd到事先清零的float缓冲区
//   bf16 / fp16：两个生产版内核每个线程一次读16字节（8个元素，sum_x8），课程版逐个读。
//
// 编译期常量：BLOCK_SIZE（每块线程数，32到1024之间的2的幂，启动时必须等于blockDim.x）；
// 元素类型floatX：定义ENABLE_BF16时是__nv_bfloat16，定义ENABLE_FP16时是__half，否则是float。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif

// 每种元素类型编译一份：读写floatX，累加用float
#if defined(ENABLE_BF16)
#include <cuda_bf16.h>
#define floatX __nv_bfloat16
#define FLOATX_BYTES 2
#elif defined(ENABLE_FP16)
#include <cuda_fp16.h>
#define floatX __half
#define FLOATX_BYTES 2
#else
#define floatX float
#define FLOATX_BYTES 4
#endif

// --8<-- [start:reduce_sum_rows]
extern "C" __global__ void reduce_sum_rows(const floatX *x, floatX *out, long long row_stride, int n_cols)
{
    __shared__ float sdata[BLOCK_SIZE];            // 每个线程一个槽位
    unsigned int tid = threadIdx.x;
    const floatX *row = x + blockIdx.x * row_stride; // 一行一个线程块；floatX是float（或bf16 / fp16）

    // 1. 每个线程以BLOCK_SIZE为步长累加自己负责的元素（相邻线程读相邻地址），用float累加
    float acc = 0.0f;
    for (int j = tid; j < n_cols; j += BLOCK_SIZE)
        acc += (float)row[j];
    sdata[tid] = acc;
    __syncthreads();                               // 所有部分和写完，才能开始读别人的

    // 2. 树形归约，顺序寻址：每一步把后一半加到前一半上
    for (unsigned int s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();                           // 这一步全部写完，下一步才能读
    }

    // 3. 线程0写出这一行的和
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce_sum_rows]

// --8<-- [start:warp_reduce_sum]
// warp内求和：5次洗牌后lane 0持有32个值的和（不经过共享内存，也不需要__syncthreads）
__device__ float warp_reduce_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}
// --8<-- [end:warp_reduce_sum]

#if FLOATX_BYTES == 2
// 16字节一包：8个floatX。包的地址按16字节对齐时，读一包是一条128位的加载指令。
struct __align__(16) pack8 { floatX v0, v1, v2, v3, v4, v5, v6, v7; };

__device__ float sum8(const floatX *p)             // p按16字节对齐
{
    pack8 q = *(const pack8 *)p;
    return (((float)q.v0 + (float)q.v1) + ((float)q.v2 + (float)q.v3)) +
           (((float)q.v4 + (float)q.v5) + ((float)q.v6 + (float)q.v7));
}

// 线程t（共nt个）在p[0 .. n)里的部分和。这一段 = 开头head个元素（第一个16字节边界之前）
// + n_pack个对齐的包 + 结尾不足一包的元素；开头与结尾（共n_edge个）逐个读，包两个一起在途。
__device__ float sum_x8(const floatX *p, int n, int t, int nt)
{
    int head = (int)((16 - (size_t)p % 16) % 16) / 2;
    head = head < n ? head : n;
    int n_pack = (n - head) / 8, n_edge = n - 8 * n_pack;
    const floatX *q = p + head;
    float a = 0.0f, b = 0.0f;
    for (int e = t; e < n_edge; e += nt)
        a += (float)p[e < head ? e : e + 8 * n_pack];
    int k = t;
    for (; k + nt < n_pack; k += 2 * nt) {
        float s0 = sum8(q + 8 * k), s1 = sum8(q + 8 * (k + nt));
        a += s0;
        b += s1;
    }
    if (k < n_pack)
        a += sum8(q + 8 * k);
    return a + b;
}
#endif

// 短行：一个warp负责一行，一个线程块BLOCK_SIZE / 32行。
extern "C" __global__ void reduce_sum_rows_warp(const floatX *__restrict__ x, floatX *__restrict__ out, long long row_stride,
                                                int n_rows, int n_cols)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (BLOCK_SIZE / 32) + (threadIdx.x >> 5);
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#if FLOATX_BYTES == 2
    if (row < n_rows)
        a0 = sum_x8(x + row * row_stride, n_cols, lane, 32);
#else
    if (row < n_rows) {
        const float *p = x + row * row_stride;
        int j = lane;
        // 8个互不依赖的加载同时在途，掩盖显存延迟
        for (; j + 7 * 32 < n_cols; j += 8 * 32) {
            float v0 = p[j], v1 = p[j + 32], v2 = p[j + 64], v3 = p[j + 96];
            float v4 = p[j + 128], v5 = p[j + 160], v6 = p[j + 192], v7 = p[j + 224];
            a0 += v0 + v4;
            a1 += v1 + v5;
            a2 += v2 + v6;
            a3 += v3 + v7;
        }
        for (; j < n_cols; j += 32)
            a0 += p[j];
    }
#endif
    float v = warp_reduce_sum((a0 + a1) + (a2 + a3));
    if (lane == 0 && row < n_rows)
        out[row] = v;
}

// --8<-- [start:reduce_sum_rows_split]
// 长行：blockIdx.x选段，blockIdx.y选行（行数超过gridDim.y时循环）。
// 只有一段（gridDim.x == 1）时这一行的和直接写成floatX：out[row]，不需要别的启动；
// 段数 > 1时各段用atomicAdd累加到事先清零的float缓冲区acc[row]（16位时之后再转换成floatX）。
// float32时acc可以就是out：一次启动只写其中一个。
extern "C" __global__ void reduce_sum_rows_split(const floatX *__restrict__ x, floatX *out, float *acc, long long row_stride,
                                                 int n_rows, int n_cols, int cols_per_block)
{
    __shared__ float warp_sums[BLOCK_SIZE / 32];
    int tid = threadIdx.x;
    int lane = tid & 31;
    int warp = tid >> 5;
    int start = blockIdx.x * cols_per_block;
    int end = start + cols_per_block < n_cols ? start + cols_per_block : n_cols;
    for (int row = blockIdx.y; row < n_rows; row += gridDim.y) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#if FLOATX_BYTES == 2
        if (start < end)
            a0 = sum_x8(x + row * row_stride + start, end - start, tid, BLOCK_SIZE);
#else
        const float *p = x + row * row_stride;
        int j = start + tid;
        for (; j + 7 * BLOCK_SIZE < end; j += 8 * BLOCK_SIZE) {
            float v0 = p[j], v1 = p[j + BLOCK_SIZE], v2 = p[j + 2 * BLOCK_SIZE], v3 = p[j + 3 * BLOCK_SIZE];
            float v4 = p[j + 4 * BLOCK_SIZE], v5 = p[j + 5 * BLOCK_SIZE];
            float v6 = p[j + 6 * BLOCK_SIZE], v7 = p[j + 7 * BLOCK_SIZE];
            a0 += v0 + v4;
            a1 += v1 + v5;
            a2 += v2 + v6;
            a3 += v3 + v7;
        }
        for (; j < end; j += BLOCK_SIZE)
            a0 += p[j];
#endif
        float v = warp_reduce_sum((a0 + a1) + (a2 + a3));   // 第一级：warp内洗牌
        if (lane == 0)
            warp_sums[warp] = v;
        __syncthreads();
        if (warp == 0) {                                     // 第二级：warp 0归约各warp的和
            v = lane < BLOCK_SIZE / 32 ? warp_sums[lane] : 0.0f;
            v = warp_reduce_sum(v);
            if (lane == 0) {
                if (gridDim.x == 1)
                    out[row] = (floatX)v;
                else
                    atomicAdd(acc + row, v);
            }
        }
        __syncthreads();                                     // warp_sums在下一行复用之前
    }
}
// --8<-- [end:reduce_sum_rows_split]
