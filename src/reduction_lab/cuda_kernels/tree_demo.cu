// tree_demo.cu：树形归约的教学内核（一个线程块，块大小任意2的幂，动态共享内存blockDim.x * 4字节）。
// 课程页面：docs/cuda/tree-reduction.md。
//
//   tree_trace      顺序寻址的树形归约，每一步之后把整个共享数组写进trace，供页面逐步打印
//   tree_no_sync    错误示范：循环里去掉__syncthreads()，下一步可能读到别的线程还没写完的值
//   tree_bad_sync   错误示范：__syncthreads()放进if (tid < s)，只有部分线程到达屏障（未定义行为：可能挂起或碰巧算对）

// --8<-- [start:tree_trace]
// trace是log2(blockDim.x)行、blockDim.x列的矩阵：第step行是第step步之后的sdata
extern "C" __global__ void tree_trace(const float *in, float *trace)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    sdata[tid] = in[tid];
    __syncthreads();
    int step = 0;
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
        trace[step * blockDim.x + tid] = sdata[tid];   // 记录这一步之后的共享数组
        step++;
    }
}
// --8<-- [end:tree_trace]

// --8<-- [start:tree_no_sync]
extern "C" __global__ void tree_no_sync(const float *in, float *out)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    sdata[tid] = in[blockIdx.x * blockDim.x + tid];
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];          // 错误：没有屏障，线程tid + s可能还在写
    }
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}
// --8<-- [end:tree_no_sync]

// --8<-- [start:tree_bad_sync]
extern "C" __global__ void tree_bad_sync(const float *in, float *out)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    sdata[tid] = in[blockIdx.x * blockDim.x + tid];
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
            __syncthreads();                       // 错误：tid >= s的线程永远到不了这里
        }
    }
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}
// --8<-- [end:tree_bad_sync]
