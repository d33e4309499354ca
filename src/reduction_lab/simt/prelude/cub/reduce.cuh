// 模拟器自带的 CUB 子集：cub::WarpReduce、cub::BlockReduce 的 Sum / Reduce（运算用 <cuda/functional> 的
// cuda::maximum<>()、cuda::minimum<>() 与 cuda::std::plus<>()，与 CCCL 3 相同）。
// 接口与 CUB 相同；实现按 CUB 默认的算法（BLOCK_REDUCE_WARP_REDUCTIONS：先 warp 内洗牌，各 warp 的和经共享内存
// 交给线程 0），所以模拟器的计数是这个实现的，不是 CUB 源码的。与 CUB 一样，结果只在线程 0（WarpReduce：
// 每个逻辑 warp 的第 0 个 lane）有效，其他线程拿到的是部分和；块里的每个线程都要调用（里面有 __syncthreads()）。
#pragma once
#include <cuda/functional>

namespace cub {

enum BlockReduceAlgorithm { BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY, BLOCK_REDUCE_RAKING, BLOCK_REDUCE_WARP_REDUCTIONS };

// 一个逻辑 warp（WIDTH 个 lane）里前 valid 个 lane 的归约，结果在第 0 个 lane
template <typename T, int WIDTH, typename Op>
__device__ T __simt_warp_fold(T v, Op op, unsigned mask, int lane, int valid) {
    for (int o = 1; o < WIDTH; o <<= 1) {
        T other = __shfl_down_sync(mask, v, o, WIDTH);
        if (lane + o < valid) v = op(v, other);
    }
    return v;
}

template <typename T, int LOGICAL_WARP_THREADS = 32>
class WarpReduce {
  public:
    struct TempStorage { T unused; };
    __device__ WarpReduce(TempStorage &temp_storage) : storage(&temp_storage) {}
    template <typename Op> __device__ T Reduce(T input, Op op) {
        return Reduce(input, op, LOGICAL_WARP_THREADS);
    }
    template <typename Op> __device__ T Reduce(T input, Op op, int valid_items) {
        int lane = threadIdx.x % LOGICAL_WARP_THREADS;
        return __simt_warp_fold<T, LOGICAL_WARP_THREADS>(input, op, __activemask(), lane, valid_items);
    }
    __device__ T Sum(T input) { return Reduce(input, ::cuda::std::plus<T>()); }
    __device__ T Sum(T input, int valid_items) { return Reduce(input, ::cuda::std::plus<T>(), valid_items); }

  private:
    TempStorage *storage;
};

template <typename T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1>
class BlockReduce {
    static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
    static constexpr int WARPS = (THREADS + 31) / 32;

    static constexpr int SEG = (THREADS + 31) / 32;      // 耙式归约：第 0 个 warp 的每个 lane 顺序加几个

  public:
    struct TempStorage {
        T warp_aggregates[WARPS];
        T raking[ALGORITHM == BLOCK_REDUCE_WARP_REDUCTIONS ? 1 : THREADS];
    };
    __device__ BlockReduce(TempStorage &temp_storage) : storage(&temp_storage) {}

    // 前 num_valid 个线程的值（线程按 x、y、z 的顺序编号）
    template <typename Op> __device__ T Reduce(T input, Op op, int num_valid) {
        int tid = threadIdx.x + threadIdx.y * BLOCK_DIM_X + threadIdx.z * BLOCK_DIM_X * BLOCK_DIM_Y;
        int lane = tid % 32;
        int warp = tid / 32;
        int in_warp = THREADS - warp * 32 < 32 ? THREADS - warp * 32 : 32;
        unsigned mask = in_warp == 32 ? 0xffffffffu : (1u << in_warp) - 1u;
        if (ALGORITHM != BLOCK_REDUCE_WARP_REDUCTIONS) {
            // 耙式：全部写进共享内存，第 0 个 warp 的 lane k 顺序加第 k 段，再在这个 warp 内洗牌（保持顺序）
            storage->raking[tid] = input;
            __syncthreads();
            T v = input;
            if (warp == 0) {
                int begin = lane * SEG;
                if (begin < num_valid)
                    v = storage->raking[begin];
                for (int i = 1; i < SEG; ++i)
                    if (begin + i < num_valid)
                        v = op(v, storage->raking[begin + i]);
                v = __simt_warp_fold<T, 32>(v, op, mask, lane, (num_valid + SEG - 1) / SEG);
            }
            return v;
        }
        int valid = num_valid - warp * 32;
        T v = __simt_warp_fold<T, 32>(input, op, mask, lane, valid < in_warp ? valid : in_warp);
        if (lane == 0)
            storage->warp_aggregates[warp] = v;
        __syncthreads();
        if (tid == 0)
            for (int w = 1; w < WARPS && w * 32 < num_valid; ++w)
                v = op(v, storage->warp_aggregates[w]);
        return v;
    }
    template <typename Op> __device__ T Reduce(T input, Op op) { return Reduce(input, op, THREADS); }
    __device__ T Sum(T input) { return Reduce(input, ::cuda::std::plus<T>(), THREADS); }
    __device__ T Sum(T input, int num_valid) { return Reduce(input, ::cuda::std::plus<T>(), num_valid); }
    // 每个线程几个值：先在线程内归约，再归约整个块
    template <int ITEMS, typename Op> __device__ T Reduce(T (&inputs)[ITEMS], Op op) {
        T v = inputs[0];
        for (int i = 1; i < ITEMS; ++i)
            v = op(v, inputs[i]);
        return Reduce(v, op, THREADS);
    }
    template <int ITEMS> __device__ T Sum(T (&inputs)[ITEMS]) { return Reduce(inputs, ::cuda::std::plus<T>()); }

  private:
    TempStorage *storage;
};

}  // namespace cub
