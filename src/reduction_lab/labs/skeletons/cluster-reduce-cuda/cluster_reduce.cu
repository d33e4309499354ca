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

    // TODO(1): 本块负责的行 row = blockIdx.x / CLUSTER_SIZE（一个簇一行，行号用 int64_t）、
    //          本块在簇里的编号 rank = cluster.block_rank()（0 .. CLUSTER_SIZE - 1），和这一行的开头 row_in。

    // TODO(2): 按块号交错累加本块那一份：第 tid 个线程从第 rank * blockDim.x + tid 列起，
    //          以 CLUSTER_SIZE * blockDim.x 为步长，把 j < cols 的元素加进 float acc（下标用 int64_t）。
    //          cols 可能比一个线程块的线程还少：分不到列的块和线程 acc 保持 0，它们的部分和就是 0。

    // TODO(3): 块内归约成一个数（「warp洗牌」实验的两级归约）：每个 warp 用 __shfl_down_sync 归约，
    //          lane 0 写 warp_sums[warp]，__syncthreads()，第一个 warp 读回（lane >= n_warps 取 0.0f）再洗牌，
    //          最后由线程 0 写 partial。

    // TODO(4): cluster.sync()：簇里每一块都写好了 partial，对整个簇可见（簇里所有线程都要执行到它）。
    //          然后簇里的 0 号块的线程 0（rank == 0 && tid == 0）对 r = 0 .. CLUSTER_SIZE - 1
    //          加上 *cluster.map_shared_rank(&partial, r)（第 r 块的 partial），写 out[row]。

    // TODO(5): 再 cluster.sync() 一次，写在所有分支之外：0 号块读完别的块的 partial 之前，谁也不能退出
    //          （块退出之后它的共享内存就被回收了）。

    // TODO 结束
}
