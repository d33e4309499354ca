// 实验 cluster-reduce-cuda：按行求和 out[row] = in[row, 0] + ... + in[row, cols - 1]（float32），
// 一行交给一个线程块簇（thread block cluster）：簇里的 CLUSTER_SIZE 个线程块各求一部分和，
// 0 号块经分布式共享内存（DSMEM）读回各块的部分和，写出整行的和。要 Hopper（计算能力 9.0）以上。
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   grid  = rows * CLUSTER_SIZE   每 CLUSTER_SIZE 个相邻的线程块组成一个簇，一个簇负责一行
//   block = BLOCK_SIZE            blockDim.x == BLOCK_SIZE；评分另外用 32、96 个线程和 2、8 块的簇各跑一个用例
//   in    按行主序连续存放：第 row 行第 j 列是 in[row * cols + j]
// 列的分法（按块号交错）：一行切成 blockDim.x 列一段，第 k 段归簇里编号 k % CLUSTER_SIZE 的块；
//   簇里编号 rank 的块的第 tid 个线程读第 rank * blockDim.x + tid 列，步长 CLUSTER_SIZE * blockDim.x。
// BLOCK_SIZE 必须是 32 的倍数（32 到 1024）；CLUSTER_SIZE 在 1 到 8 之间（8 是可移植的上限）。
//
// 按顺序完成 TODO(1) 到 TODO(5)，然后运行：
//   reduction-lab lab check cluster-reduce-cuda
// 讲义：「线程块簇上的长行softmax」（docs/cuda/cluster-softmax.md）；块内归约见「warp洗牌」（docs/cuda/warp-shuffle.md）

#include <stdint.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#ifndef CLUSTER_SIZE
#define CLUSTER_SIZE 4
#endif
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

#define FULL_MASK 0xffffffffu

// 簇的形状写在前置声明上（定义处保持 extern "C" __global__ void 名字 的写法，启动器按它找内核）
extern "C" __global__ void __cluster_dims__(CLUSTER_SIZE, 1, 1)
cluster_reduce_rowwise_kernel(float *out, const float *in, int64_t rows, int64_t cols);

extern "C" __global__ void cluster_reduce_rowwise_kernel(float *out, const float *in, int64_t rows, int64_t cols)
{
    __shared__ float warp_sums[32];                // 块内归约：每个 warp 一个槽位
    __shared__ float partial;                      // 本块的部分和：簇里的 0 号块经 DSMEM 读它
    cg::cluster_group cluster = cg::this_cluster();
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid % 32;
    unsigned int warp = tid / 32;
    unsigned int n_warps = blockDim.x / 32;

    // 1. 一个簇一行；本块在簇里的编号
    int64_t row = blockIdx.x / CLUSTER_SIZE;
    unsigned int rank = cluster.block_rank();
    const float *row_in = in + row * cols;

    // 2. 按块号交错：第 rank * blockDim.x + tid 列起，步长 CLUSTER_SIZE * blockDim.x
    float acc = 0.0f;
    for (int64_t j = (int64_t)rank * blockDim.x + tid; j < cols; j += (int64_t)CLUSTER_SIZE * blockDim.x)
        acc += row_in[j];

    // 3. 块内归约（warp 洗牌两级），线程 0 把本块的和写进 partial
    for (int offset = 16; offset > 0; offset >>= 1)
        acc += __shfl_down_sync(FULL_MASK, acc, offset);
    if (lane == 0)
        warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = lane < n_warps ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1)
            v += __shfl_down_sync(FULL_MASK, v, offset);
        if (lane == 0)
            partial = v;
    }

    // 4. 簇屏障之后，0 号块读各块的 partial（包括自己的）
    cluster.sync();
    if (rank == 0 && tid == 0) {
        float total = 0.0f;
        for (int r = 0; r < CLUSTER_SIZE; ++r)
            total += *cluster.map_shared_rank(&partial, r);
        out[row] = total;
    }

    // 5. 0 号块读完之前谁也不退出
    cluster.sync();
}
