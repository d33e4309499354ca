// primitives.cu：用CUDA自带的归约原语写块内求和。课程页面：docs/cuda/library-primitives.md；
// 包装函数：reduction_lab.cuda_kernels.primitives。CUB的版本在primitives_cub.cu（模拟器不能运行CUB）。
//
//   half_warp_sum      半个warp的洗牌归约，mask与width由参数给出（演示mask规则）
//   warp_redux_demo    __reduce_add/min/max_sync：每个warp的和、最小值、最大值
//   seg_sum_shfl       分段求和，warp内用手写的__shfl_xor_sync
//   seg_sum_tile       分段求和，warp内用cooperative groups的tile.shfl_down
//   seg_sum_cg         分段求和，warp内用cg::reduce(tile, v, cg::plus<float>())
//   seg_sum_redux      分段求和（int32），warp内用__reduce_add_sync
//
// 分段求和：第b个线程块把x[b*seg, min((b+1)*seg, n))加起来写到out[b]。按行求和时seg = 行长、
// 线程块数 = 行数；一维求和先用固定个数的线程块得到部分和，再用一个线程块把部分和加起来。
// 四个seg_sum_*内核的加载循环和块内合并完全相同，只有warp内那一步不同。
//
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）。

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif
#define WARPS (BLOCK_SIZE / 32)
#define UNROLL 8

// --8<-- [start:half_warp_sum]
extern "C" __global__ void half_warp_sum(const float *x, float *out, unsigned int mask, int width)
{
    int lane = threadIdx.x & 31;
    float v = x[threadIdx.x];
    if (lane < 16) {                                   // 只有前半个warp进入这个分支
        for (int offset = 8; offset > 0; offset >>= 1)
            v += __shfl_down_sync(mask, v, offset, width);
    }
    out[threadIdx.x] = v;
}
// --8<-- [end:half_warp_sum]

// --8<-- [start:warp_redux_demo]
extern "C" __global__ void warp_redux_demo(const int *x, int *out)
{
    int v = x[threadIdx.x];
    int warp = threadIdx.x >> 5;
    int s = __reduce_add_sync(0xffffffff, v);          // 一条指令：32个int的和，每个lane都拿到
    int lo = __reduce_min_sync(0xffffffff, v);
    int hi = __reduce_max_sync(0xffffffff, v);
    if ((threadIdx.x & 31) == 0) {
        out[3 * warp] = s;
        out[3 * warp + 1] = lo;
        out[3 * warp + 2] = hi;
    }
}
// --8<-- [end:warp_redux_demo]

// --8<-- [start:thread_partial]
// 每个线程以BLOCK_SIZE为步长累加[begin, end)里属于自己的元素；UNROLL个互不依赖的加载同时在途
__device__ float thread_partial(const float *x, long long begin, long long end)
{
    float acc[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
        acc[k] = 0.0f;
    long long i = begin + threadIdx.x;
    for (; i + (UNROLL - 1) * BLOCK_SIZE < end; i += UNROLL * BLOCK_SIZE) {
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            acc[k] += x[i + k * BLOCK_SIZE];
    }
    for (; i < end; i += BLOCK_SIZE)                   // 不满UNROLL轮的尾部
        acc[0] += x[i];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
        s += acc[k];
    return s;
}
// --8<-- [end:thread_partial]

__device__ int thread_partial_int(const int *x, long long begin, long long end)
{
    int acc[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
        acc[k] = 0;
    long long i = begin + threadIdx.x;
    for (; i + (UNROLL - 1) * BLOCK_SIZE < end; i += UNROLL * BLOCK_SIZE) {
#pragma unroll
        for (int k = 0; k < UNROLL; k++)
            acc[k] += x[i + k * BLOCK_SIZE];
    }
    for (; i < end; i += BLOCK_SIZE)
        acc[0] += x[i];
    int s = 0;
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
        s += acc[k];
    return s;
}

// --8<-- [start:block_store]
// 块内合并：每个warp的lane 0把warp的和写进共享内存，一次屏障之后线程0把WARPS个数加起来
__device__ void block_store(float *warp_sums, float v, float *out)
{
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < WARPS; w++)
            s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}
// --8<-- [end:block_store]

__device__ void block_store_int(int *warp_sums, int v, int *out)
{
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int w = 0; w < WARPS; w++)
            s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}

// --8<-- [start:warp_sums]
// 1. 手写：蝶形洗牌，5步之后32个lane都是和
__device__ float warp_sum_shfl(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// 2. cooperative groups：tile对象知道自己的大小和mask，shfl_down不用再写mask
__device__ float warp_sum_tile(float v)
{
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    for (int offset = tile.size() / 2; offset > 0; offset >>= 1)
        v += tile.shfl_down(v, offset);
    return v;                                          // 只有tile.thread_rank() == 0的值是和
}

// 3. cooperative groups：cg::reduce，tile里每个线程都得到结果
__device__ float warp_sum_cg(float v)
{
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    return cg::reduce(tile, v, cg::plus<float>());
}

// 4. sm_80起的硬件归约：一条指令，只有32位整数版本
__device__ int warp_sum_redux(int v)
{
    return __reduce_add_sync(0xffffffff, v);
}
// --8<-- [end:warp_sums]

// --8<-- [start:seg_sum_shfl]
extern "C" __global__ void seg_sum_shfl(const float *x, float *out, long long n, long long seg)
{
    __shared__ float warp_sums[WARPS];
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    float v = warp_sum_shfl(thread_partial(x, begin, end));
    block_store(warp_sums, v, out);
}
// --8<-- [end:seg_sum_shfl]

extern "C" __global__ void seg_sum_tile(const float *x, float *out, long long n, long long seg)
{
    __shared__ float warp_sums[WARPS];
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    float v = warp_sum_tile(thread_partial(x, begin, end));
    block_store(warp_sums, v, out);
}

extern "C" __global__ void seg_sum_cg(const float *x, float *out, long long n, long long seg)
{
    __shared__ float warp_sums[WARPS];
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    float v = warp_sum_cg(thread_partial(x, begin, end));
    block_store(warp_sums, v, out);
}

extern "C" __global__ void seg_sum_redux(const int *x, int *out, long long n, long long seg)
{
    __shared__ int warp_sums[WARPS];
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    int v = warp_sum_redux(thread_partial_int(x, begin, end));
    block_store_int(warp_sums, v, out);
}
