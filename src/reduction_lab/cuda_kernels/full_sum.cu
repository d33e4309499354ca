// full_sum.cu：整个数组求和的经典版本（Mark Harris,《Optimizing Parallel Reduction in CUDA》），
// 外加warp洗牌版。课程页面：docs/cuda/seven-versions.md、docs/cuda/warp-shuffle.md；
// 包装函数：reduction_lab.cuda_kernels.full_sum。
//
// 每个内核把一段输入归约成每个线程块一个部分和g_odata[blockIdx.x]；包装函数把同一个内核
// 再用在部分和上，直到只剩一个数（两级或多级，不用原子操作，结果与线程调度无关）。
//
// 下面的 @version 行是版本表的唯一出处（Python 侧的 FULL_SUM_VERSIONS 从这里解析）：
//   @version 序号 内核名 每个线程在第一级读入的元素数（1、2 或 grid：按网格步长循环） 说明
//
// @version 1 reduce1 1 交错寻址：tid % (2*s) == 0的线程才干活，warp内分支发散
// @version 2 reduce2 1 交错寻址：index = 2*s*tid让活跃线程连续，不再发散，但有存储体冲突
// @version 3 reduce3 1 顺序寻址：每步把后一半加到前一半，没有冲突，但第一步就有一半线程闲着
// @version 4 reduce4 2 加载时先做一次加法：每块处理2*BLOCK_SIZE个元素，线程块数减半
// @version 5 reduce5 2 展开最后一个warp：s <= 32时不再需要__syncthreads()
// @version 6 reduce6 2 完全展开：块大小是编译期常量BLOCK_SIZE，循环变成if链
// @version 7 reduce7 grid 线程块数固定，每个线程按网格步长累加多个元素
// @version 8 reduce8 grid 8路独立加载，warp洗牌__shfl_down_sync归约，共享内存只存各warp的和
//
// 编译期常量：BLOCK_SIZE（64到1024之间的2的幂：最后一个warp要读sdata[tid + 32]，启动时必须等于blockDim.x）。
// 版本1-7的共享内存是动态的：启动时shared_bytes = BLOCK_SIZE * 4。

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#if BLOCK_SIZE < 64 || BLOCK_SIZE > 1024 || (BLOCK_SIZE & (BLOCK_SIZE - 1)) != 0
#error "BLOCK_SIZE must be a power of two between 64 and 1024"
#endif

// --8<-- [start:reduce1]
extern "C" __global__ void reduce1(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = i < n ? g_idata[i] : 0.0f;        // 越界的线程补上单位元0
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0)                    // 活跃线程隔2s个才有一个：warp内发散
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce1]

// --8<-- [start:reduce2]
extern "C" __global__ void reduce2(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = i < n ? g_idata[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        unsigned int index = 2 * s * tid;          // 活跃线程连续：不再发散
        if (index < blockDim.x)
            sdata[index] += sdata[index + s];      // 但相邻线程相隔2s个字：存储体冲突
        __syncthreads();
    }
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce2]

// --8<-- [start:reduce3]
extern "C" __global__ void reduce3(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = i < n ? g_idata[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)                               // 顺序寻址：相邻线程读相邻的字
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce3]

// --8<-- [start:reduce4]
extern "C" __global__ void reduce4(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;   // 每块负责2 * blockDim.x个元素
    float sum = i < n ? g_idata[i] : 0.0f;
    if (i + blockDim.x < n)
        sum += g_idata[i + blockDim.x];            // 加载时先做第一次加法
    sdata[tid] = sum;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce4]

// --8<-- [start:warp_reduce_smem]
// 最后一个warp在共享内存里归约（只由tid < 32的线程调用）。
// Harris的原版依赖「warp内32个线程齐步执行」；Volta之后不再保证，所以每一步
// 先把值读进寄存器，用__syncwarp()隔开读和写。volatile让每次访问都真的落到共享内存。
__device__ void warp_reduce_smem(volatile float *sdata, unsigned int tid, unsigned int block_size)
{
    float v = sdata[tid];
    if (block_size >= 64) { v += sdata[tid + 32]; __syncwarp(); sdata[tid] = v; __syncwarp(); }
    v += sdata[tid + 16]; __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 8];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 4];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 2];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 1];  __syncwarp(); sdata[tid] = v;
}
// --8<-- [end:warp_reduce_smem]

// --8<-- [start:reduce5]
extern "C" __global__ void reduce5(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float sum = i < n ? g_idata[i] : 0.0f;
    if (i + blockDim.x < n)
        sum += g_idata[i + blockDim.x];
    sdata[tid] = sum;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {   // 只循环到s = 64
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32)                                  // 剩下64个数：交给一个warp，不用块级屏障
        warp_reduce_smem(sdata, tid, blockDim.x);
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce5]

// --8<-- [start:tree_unrolled]
// 完全展开的块内归约：BLOCK_SIZE是编译期常量，不成立的if在编译时就被删掉。
__device__ void tree_unrolled(float *sdata, unsigned int tid)
{
    if (BLOCK_SIZE >= 1024) { if (tid < 512) sdata[tid] += sdata[tid + 512]; __syncthreads(); }
    if (BLOCK_SIZE >= 512)  { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
    if (BLOCK_SIZE >= 256)  { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (BLOCK_SIZE >= 128)  { if (tid < 64)  sdata[tid] += sdata[tid + 64];  __syncthreads(); }
    if (tid < 32)
        warp_reduce_smem(sdata, tid, BLOCK_SIZE);
}
// --8<-- [end:tree_unrolled]

// --8<-- [start:reduce6]
extern "C" __global__ void reduce6(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (BLOCK_SIZE * 2) + threadIdx.x;
    float sum = i < n ? g_idata[i] : 0.0f;
    if (i + BLOCK_SIZE < n)
        sum += g_idata[i + BLOCK_SIZE];
    sdata[tid] = sum;
    __syncthreads();
    tree_unrolled(sdata, tid);
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce6]

// --8<-- [start:reduce7]
extern "C" __global__ void reduce7(const float *g_idata, float *g_odata, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (BLOCK_SIZE * 2) + threadIdx.x;
    unsigned int grid_size = BLOCK_SIZE * 2 * gridDim.x;   // 整个网格一轮处理的元素数
    float sum = 0.0f;
    while (i < n) {                                // 线程块数固定，每个线程循环读多个元素
        sum += g_idata[i];
        if (i + BLOCK_SIZE < n)
            sum += g_idata[i + BLOCK_SIZE];
        i += grid_size;
    }
    sdata[tid] = sum;
    __syncthreads();
    tree_unrolled(sdata, tid);
    if (tid == 0)
        g_odata[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce7]

// --8<-- [start:warp_reduce_sum]
// warp内求和：5次洗牌后lane 0持有32个值的和
__device__ float warp_reduce_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}
// --8<-- [end:warp_reduce_sum]

// --8<-- [start:reduce8]
extern "C" __global__ void reduce8(const float *__restrict__ g_idata, float *__restrict__ g_odata, unsigned int n)
{
    __shared__ float warp_sums[BLOCK_SIZE / 32];   // 每个warp一个数
    unsigned int tid = threadIdx.x;
    unsigned int lane = tid & 31;
    unsigned int warp = tid >> 5;
    unsigned int stride = BLOCK_SIZE * gridDim.x;
    unsigned int i = blockIdx.x * BLOCK_SIZE + tid;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (; i + 7 * stride < n; i += 8 * stride) {  // 8个互不依赖的加载同时在途
        float v0 = g_idata[i], v1 = g_idata[i + stride];
        float v2 = g_idata[i + 2 * stride], v3 = g_idata[i + 3 * stride];
        float v4 = g_idata[i + 4 * stride], v5 = g_idata[i + 5 * stride];
        float v6 = g_idata[i + 6 * stride], v7 = g_idata[i + 7 * stride];
        a0 += v0 + v4;
        a1 += v1 + v5;
        a2 += v2 + v6;
        a3 += v3 + v7;
    }
    for (; i < n; i += stride)                     // 剩下不足8轮的部分
        a0 += g_idata[i];
    float sum = warp_reduce_sum((a0 + a1) + (a2 + a3));   // 第一级：warp内洗牌
    if (lane == 0)
        warp_sums[warp] = sum;
    __syncthreads();                               // 整个内核唯一的块级屏障
    if (warp == 0) {                               // 第二级：warp 0归约各warp的和
        sum = lane < BLOCK_SIZE / 32 ? warp_sums[lane] : 0.0f;
        sum = warp_reduce_sum(sum);
        if (lane == 0)
            g_odata[blockIdx.x] = sum;
    }
}
// --8<-- [end:reduce8]
