// reduce_sum.cu：按行求和out[row] = x[row, 0] + ... + x[row, n_cols - 1]（float32）。
// 课程页面：docs/cuda/tree-reduction.md；包装函数：reduction_lab.cuda_kernels.reduce_sum。
//
//   reduce_sum_rows        课程版：一行一个线程块，共享内存树形归约（顺序寻址）
//   reduce_sum_rows_warp   短行（生产版）：一个warp一行，每个线程8路独立加载，warp洗牌归约
//   reduce_sum_rows_split  长行（生产版）：grid = (段数, 行数)，一行切成几段各由一个线程块处理，
//                          warp洗牌 + 共享内存归约，段数 > 1时atomicAdd到清零的输出
//
// 编译期常量：BLOCK_SIZE（每块线程数，32到1024之间的2的幂，启动时必须等于blockDim.x）。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 32 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 32 and 1024"
#endif

// --8<-- [start:reduce_sum_rows]
extern "C" __global__ void reduce_sum_rows(const float *x, float *out, long long row_stride, int n_cols)
{
    __shared__ float sdata[BLOCK_SIZE];            // 每个线程一个槽位
    unsigned int tid = threadIdx.x;
    const float *row = x + blockIdx.x * row_stride; // 一行一个线程块

    // 1. 每个线程以BLOCK_SIZE为步长累加自己负责的元素（相邻线程读相邻地址）
    float acc = 0.0f;
    for (int j = tid; j < n_cols; j += BLOCK_SIZE)
        acc += row[j];
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

// 短行：一个warp负责一行，一个线程块BLOCK_SIZE / 32行。
extern "C" __global__ void reduce_sum_rows_warp(const float *__restrict__ x, float *__restrict__ out, long long row_stride,
                                                int n_rows, int n_cols)
{
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * (BLOCK_SIZE / 32) + (threadIdx.x >> 5);
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
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
    float v = warp_reduce_sum((a0 + a1) + (a2 + a3));
    if (lane == 0 && row < n_rows)
        out[row] = v;
}

// --8<-- [start:reduce_sum_rows_split]
// 长行：blockIdx.x选段，blockIdx.y选行（行数超过gridDim.y时循环）。
// 段数gridDim.x > 1时各段用atomicAdd累加到事先清零的out[row]。
extern "C" __global__ void reduce_sum_rows_split(const float *__restrict__ x, float *__restrict__ out, long long row_stride,
                                                 int n_rows, int n_cols, int cols_per_block)
{
    __shared__ float warp_sums[BLOCK_SIZE / 32];
    int tid = threadIdx.x;
    int lane = tid & 31;
    int warp = tid >> 5;
    int start = blockIdx.x * cols_per_block;
    int end = start + cols_per_block < n_cols ? start + cols_per_block : n_cols;
    for (int row = blockIdx.y; row < n_rows; row += gridDim.y) {
        const float *p = x + row * row_stride;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
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
        float v = warp_reduce_sum((a0 + a1) + (a2 + a3));   // 第一级：warp内洗牌
        if (lane == 0)
            warp_sums[warp] = v;
        __syncthreads();
        if (warp == 0) {                                     // 第二级：warp 0归约各warp的和
            v = lane < BLOCK_SIZE / 32 ? warp_sums[lane] : 0.0f;
            v = warp_reduce_sum(v);
            if (lane == 0) {
                if (gridDim.x == 1)
                    out[row] = v;
                else
                    atomicAdd(out + row, v);
            }
        }
        __syncthreads();                                     // warp_sums在下一行复用之前
    }
}
// --8<-- [end:reduce_sum_rows_split]
