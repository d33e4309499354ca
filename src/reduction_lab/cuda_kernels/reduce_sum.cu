// reduce_sum.cu：按行求和out[row] = x[row, 0] + ... + x[row, n_cols - 1]（用float累加）。
// 课程页面：docs/cuda/tree-reduction.md；包装函数：reduction_lab.cuda_kernels.reduce_sum。
//
//   reduce_sum_rows        课程版：一行一个线程块，共享内存树形归约（顺序寻址）
//   reduce_sum_rows_warp   短行（生产版）：一个warp一行，warp洗牌归约
//   reduce_sum_rows_split  长行（生产版）：grid = (段数, 行数)，一行切成几段各由一个线程块处理，
//                          warp洗牌 + 共享内存归约；只有一段时直接写floatX的输出（一次启动），
//                          段数 > 1时atomicAdd到事先清零的float缓冲区
//   两个生产版内核每个线程一次读16字节（一包：4个float或8个bf16 / fp16，sum_packs），SUM_PACKS包同时在途；
//   课程版逐个读。
//
// 编译期常量：BLOCK_SIZE（每块线程数，32到1024之间的2的幂，启动时必须等于blockDim.x）；SUM_PACKS（每个线程
// 同时在途的包数）；SUM_EVICT_FIRST（定义时主循环用流式加载）；
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

// 每个线程同时在途的16字节包数（编译期常量，1、2、4或8）
#ifndef SUM_PACKS
#define SUM_PACKS 2
#endif
#if SUM_PACKS != 1 && SUM_PACKS != 2 && SUM_PACKS != 4 && SUM_PACKS != 8
#error "SUM_PACKS must be 1, 2, 4 or 8"
#endif

// 16字节一包：VEC个floatX（float32 4个，16位8个）。包的地址按16字节对齐时，读一包是一条128位的加载指令。
#if FLOATX_BYTES == 2
#define VEC 8
struct __align__(16) pack16 { floatX v0, v1, v2, v3, v4, v5, v6, v7; };

__device__ float sum_pack(pack16 q)
{
    return (((float)q.v0 + (float)q.v1) + ((float)q.v2 + (float)q.v3)) +
           (((float)q.v4 + (float)q.v5) + ((float)q.v6 + (float)q.v7));
}
#else
#define VEC 4
struct __align__(16) pack16 { float v0, v1, v2, v3; };

__device__ float sum_pack(pack16 q)
{
    return (q.v0 + q.v1) + (q.v2 + q.v3);
}
#endif

#ifdef SUM_EVICT_FIRST
// 定义SUM_EVICT_FIRST时主循环的包用ld.global.cs读（流式：每个字节只读一次，让它先被替换出缓存）
__device__ pack16 load_pack_cs(const pack16 *q)
{
    uint4 u = __ldcs((const uint4 *)q);
    pack16 p;
    memcpy(&p, &u, sizeof p);
    return p;
}
#endif

// --8<-- [start:sum_packs]
// 线程t（共nt个）在p[0 .. n)里的部分和。这一段 = 开头head个元素（第一个16字节边界之前）
// + n_pack个对齐的包 + 结尾不足一包的元素；开头与结尾（共n_edge个）逐个读，包SUM_PACKS个一起在途。
__device__ float sum_packs(const floatX *p, int n, int t, int nt)
{
    int head = (int)((16 - (size_t)p % 16) % 16) / FLOATX_BYTES;
    head = head < n ? head : n;
    int n_pack = (n - head) / VEC, n_edge = n - VEC * n_pack;
    const pack16 *q = (const pack16 *)(p + head);
    float a = 0.0f, b = 0.0f;
    for (int e = t; e < n_edge; e += nt)
        a += (float)p[e < head ? e : e + VEC * n_pack];
    int k = t;
    for (; k + (SUM_PACKS - 1) * nt < n_pack; k += SUM_PACKS * nt) {
        pack16 v[SUM_PACKS];
#pragma unroll
        for (int u = 0; u < SUM_PACKS; u++)          // 先发出全部加载，再求和
#ifdef SUM_EVICT_FIRST
            v[u] = load_pack_cs(q + k + u * nt);
#else
            v[u] = q[k + u * nt];
#endif
#pragma unroll
        for (int u = 0; u < SUM_PACKS; u += 2) {
            a += sum_pack(v[u]);
            if (u + 1 < SUM_PACKS)
                b += sum_pack(v[u + 1]);
        }
    }
    for (; k < n_pack; k += nt)
        a += sum_pack(q[k]);
    return a + b;
}
// --8<-- [end:sum_packs]

// 短行：一个warp负责一行，一个线程块BLOCK_SIZE / 32行。
extern "C" __global__ void reduce_sum_rows_warp(const floatX *__restrict__ x, floatX *__restrict__ out, long long row_stride,
                                                int n_rows, int n_cols)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (BLOCK_SIZE / 32) + (threadIdx.x >> 5);
    float a = 0.0f;
    if (row < n_rows)
        a = sum_packs(x + row * row_stride, n_cols, lane, 32);
    float v = warp_reduce_sum(a);
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
        float a = 0.0f;
        if (start < end)
            a = sum_packs(x + row * row_stride + start, end - start, tid, BLOCK_SIZE);
        float v = warp_reduce_sum(a);                       // 第一级：warp内洗牌
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
