// cluster_demo.cu：线程块簇（thread block cluster）与分布式共享内存（DSMEM）的最小例子：一个簇求一行的和。
// 课程页面：docs/cuda/cluster-softmax.md（「在模拟器里运行簇内核」）；gpu 与 sim 两种模式都经
// reduction_lab.cuda_kernels.launch 启动，模拟器的规则见 docs/cuda/simulator.md。
//
//   cluster_row_sum                  一个簇（CLUSTER_SIZE 个线程块）求一行的和：每块在共享内存里树形归约自己那一段，
//                                    cluster.sync() 之后，簇内编号 0 的块经 cluster.map_shared_rank 读别的块的部分和，
//                                    写出整行的和；最后再 cluster.sync()，没有块在 0 号块还可能读它时退出。
//   cluster_row_sum_no_final_sync    故意留下的错误：少了最后的 cluster.sync()，别的块可能在 0 号块读它们的共享
//                                    内存之前就退出了（模拟器报 DsmemExitedBlockError）。
//   cluster_row_sum_no_first_sync    故意留下的错误：少了第一个 cluster.sync()，0 号块读部分和时别的块可能还没写完
//                                    （模拟器报簇内跨线程块的 SharedMemoryRaceError）。
//
// 编译期常量：CLUSTER_SIZE 每簇的线程块数（默认 4；可移植的上限是 8）；BLOCK 每块的线程数（2 的幂，默认 128，
// 启动时必须等于 blockDim.x）。
// 启动：grid = M * CLUSTER_SIZE（1 维），block = BLOCK，不用动态共享内存。x 是 M 行 n 列（行连续）的 float，
// out 有 M 个元素。

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#ifndef CLUSTER_SIZE
#define CLUSTER_SIZE 4
#endif
#ifndef BLOCK
#define BLOCK 128
#endif
#if (BLOCK & (BLOCK - 1)) != 0 || BLOCK < 1 || BLOCK > 1024
#error "BLOCK must be a power of two between 1 and 1024"
#endif
// 簇的形状写在内核的前置声明上（定义处保持 extern "C" __global__ void 名字 的写法，启动器按它找内核）
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_SIZE, 1, 1)

// 每块求自己那一段（第 rank 段，共 CLUSTER_SIZE 段）的和，留在 sdata[0]
__device__ __forceinline__ void block_slice_sum(const float *__restrict__ row, int n, int rank, float *sdata)
{
    const int tid = threadIdx.x;
    const int per = (n + CLUSTER_SIZE - 1) / CLUSTER_SIZE;   // 每块的列数
    const int begin = rank * per;
    const int end = min(begin + per, n);
    float acc = 0.0f;
    for (int j = begin + tid; j < end; j += BLOCK)
        acc += row[j];
    sdata[tid] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
}

// --8<-- [start:cluster_row_sum]
extern "C" __global__ void CLUSTER_DIMS cluster_row_sum(const float *__restrict__ x, float *__restrict__ out, int n);
extern "C" __global__ void cluster_row_sum(const float *__restrict__ x, float *__restrict__ out, int n)
{
    __shared__ float sdata[BLOCK];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();           // 本块在簇里的编号：0 .. CLUSTER_SIZE - 1
    const int row = blockIdx.x / CLUSTER_SIZE;             // 一个簇一行
    block_slice_sum(x + (long long)row * n, n, rank, sdata);
    cluster.sync();                                        // 各块的部分和 sdata[0] 都已写好，对整个簇可见
    if (rank == 0 && threadIdx.x == 0) {
        float total = sdata[0];
        for (int r = 1; r < CLUSTER_SIZE; ++r)
            total += *cluster.map_shared_rank(&sdata[0], r);   // 分布式共享内存：读第 r 块的 sdata[0]
        out[row] = total;
    }
    cluster.sync();   // 0 号块读完之前，谁也不退出：块退出后它的共享内存就不能再访问
}
// --8<-- [end:cluster_row_sum]

// --8<-- [start:no_final_sync]
// 故意留下的错误：少了最后的 cluster.sync()
extern "C" __global__ void CLUSTER_DIMS cluster_row_sum_no_final_sync(const float *__restrict__ x, float *__restrict__ out, int n);
extern "C" __global__ void cluster_row_sum_no_final_sync(const float *__restrict__ x, float *__restrict__ out, int n)
{
    __shared__ float sdata[BLOCK];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int row = blockIdx.x / CLUSTER_SIZE;
    block_slice_sum(x + (long long)row * n, n, rank, sdata);
    cluster.sync();
    if (rank == 0 && threadIdx.x == 0) {
        float total = sdata[0];
        for (int r = 1; r < CLUSTER_SIZE; ++r)
            total += *cluster.map_shared_rank(&sdata[0], r);   // 第 r 块可能已经退出
        out[row] = total;
    }
}
// --8<-- [end:no_final_sync]

// 故意留下的错误：少了第一个 cluster.sync()（__syncthreads() 只排定本块的线程）
extern "C" __global__ void CLUSTER_DIMS cluster_row_sum_no_first_sync(const float *__restrict__ x, float *__restrict__ out, int n);
extern "C" __global__ void cluster_row_sum_no_first_sync(const float *__restrict__ x, float *__restrict__ out, int n)
{
    __shared__ float sdata[BLOCK];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const int row = blockIdx.x / CLUSTER_SIZE;
    block_slice_sum(x + (long long)row * n, n, rank, sdata);
    if (rank == 0 && threadIdx.x == 0) {
        float total = sdata[0];
        for (int r = 1; r < CLUSTER_SIZE; ++r)
            total += *cluster.map_shared_rank(&sdata[0], r);   // 第 r 块可能还没写完 sdata[0]
        out[row] = total;
    }
    cluster.sync();
}
