// primitives_cub.cu：用CUB（CCCL）的WarpReduce与BlockReduce写分段求和。课程页面：docs/cuda/library-primitives.md；
// 包装函数：reduction_lab.cuda_kernels.primitives。sim模式下由模拟器自带的同接口子集（simt/prelude/cub）运行；
// GPU上经CuPy编译，CuPy自带CCCL头文件，编译选项是-I<CCCL目录>与--std=c++17。
//
//   seg_sum_cub_warp           warp内用cub::WarpReduce<float>，块内合并与primitives.cu相同
//   seg_sum_cub_block          cub::BlockReduce<float, BLOCK_SIZE>（默认算法BLOCK_REDUCE_WARP_REDUCTIONS）
//   seg_sum_cub_raking         cub::BlockReduce，算法BLOCK_REDUCE_RAKING
//   seg_sum_cub_raking_comm    cub::BlockReduce，算法BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY
//   cub_temp_storage_bytes     各个TempStorage的字节数
//
// 分段的约定与加载循环和primitives.cu相同：第b个线程块把x[b*seg, min((b+1)*seg, n))加起来写到out[b]。
// 编译期常量：BLOCK_SIZE（32到1024之间的2的幂，启动时必须等于blockDim.x）。

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif
#define WARPS (BLOCK_SIZE / 32)
#define UNROLL 8

// 与primitives.cu的thread_partial相同：每个线程以BLOCK_SIZE为步长累加，UNROLL个加载同时在途
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
    for (; i < end; i += BLOCK_SIZE)
        acc[0] += x[i];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
        s += acc[k];
    return s;
}

// --8<-- [start:seg_sum_cub_warp]
extern "C" __global__ void seg_sum_cub_warp(const float *x, float *out, long long n, long long seg)
{
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage temp[WARPS];   // 每个warp一份
    __shared__ float warp_sums[WARPS];
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    int warp = threadIdx.x >> 5;
    float v = WarpReduce(temp[warp]).Sum(thread_partial(x, begin, end));   // 只有lane 0的结果有效
    if ((threadIdx.x & 31) == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < WARPS; w++)
            s += warp_sums[w];
        out[blockIdx.x] = s;
    }
}
// --8<-- [end:seg_sum_cub_warp]

// --8<-- [start:cub_block_sum]
template <cub::BlockReduceAlgorithm ALGORITHM>
__device__ void cub_block_sum(const float *x, float *out, long long n, long long seg)
{
    using BlockReduce = cub::BlockReduce<float, BLOCK_SIZE, ALGORITHM>;
    __shared__ typename BlockReduce::TempStorage temp;          // 整个线程块共用一份
    long long begin = blockIdx.x * seg;
    long long end = min(begin + seg, n);
    float s = BlockReduce(temp).Sum(thread_partial(x, begin, end));
    if (threadIdx.x == 0)                                        // 只有线程0的结果有效
        out[blockIdx.x] = s;
}

extern "C" __global__ void seg_sum_cub_block(const float *x, float *out, long long n, long long seg)
{
    cub_block_sum<cub::BLOCK_REDUCE_WARP_REDUCTIONS>(x, out, n, seg);
}
// --8<-- [end:cub_block_sum]

extern "C" __global__ void seg_sum_cub_raking(const float *x, float *out, long long n, long long seg)
{
    cub_block_sum<cub::BLOCK_REDUCE_RAKING>(x, out, n, seg);
}

extern "C" __global__ void seg_sum_cub_raking_comm(const float *x, float *out, long long n, long long seg)
{
    cub_block_sum<cub::BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY>(x, out, n, seg);
}

// out[0..3]：WarpReduce、BlockReduce的WARP_REDUCTIONS、RAKING、RAKING_COMMUTATIVE_ONLY的TempStorage字节数
extern "C" __global__ void cub_temp_storage_bytes(int *out)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        out[0] = sizeof(cub::WarpReduce<float>::TempStorage);
        out[1] = sizeof(cub::BlockReduce<float, BLOCK_SIZE, cub::BLOCK_REDUCE_WARP_REDUCTIONS>::TempStorage);
        out[2] = sizeof(cub::BlockReduce<float, BLOCK_SIZE, cub::BLOCK_REDUCE_RAKING>::TempStorage);
        out[3] = sizeof(cub::BlockReduce<float, BLOCK_SIZE, cub::BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY>::TempStorage);
    }
}
