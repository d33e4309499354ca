"""模拟器自带的示例内核：课程风格的正确写法（测试、基准脚本与文档共用；文档：docs/cuda/simulator.md）。"""

# Mark Harris 七个经典版本的同类写法（每个线程块把部分和写到 out[blockIdx.x]）
REDUCE = r'''
#include <cuda_runtime.h>
#ifndef BLOCK
#define BLOCK 256
#endif

// 1：交错寻址，分支发散
extern "C" __global__ void reduce0(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 2：交错寻址，下标连续（存储体冲突）
extern "C" __global__ void reduce1(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        int index = 2 * s * tid;
        if (index < blockDim.x) {
            sdata[index] += sdata[index + s];
        }
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 3：顺序寻址
extern "C" __global__ void reduce2(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 4：加载时先做一次加法
extern "C" __global__ void reduce3(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 原版只靠 volatile、依赖 warp 内齐步执行，Volta 之后是数据竞争：每一步用 __syncwarp() 隔开读和写
__device__ void warpReduce(volatile float* sdata, unsigned int tid) {
    float v = sdata[tid];
    v += sdata[tid + 32]; __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 16]; __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 8];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 4];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 2];  __syncwarp(); sdata[tid] = v; __syncwarp();
    v += sdata[tid + 1];  __syncwarp(); sdata[tid] = v;
}

// 5：展开最后一个线程束
extern "C" __global__ void reduce4(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid < 32) warpReduce(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 6：完全展开（块大小是编译期常量 BLOCK）
extern "C" __global__ void reduce5(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (BLOCK * 2) + threadIdx.x;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + BLOCK < n) v += x[i + BLOCK];
    sdata[tid] = v;
    __syncthreads();
    if (BLOCK >= 512) { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
    if (BLOCK >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
    if (tid < 32) warpReduce(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 7：每个线程处理多个元素（网格跨步循环）
extern "C" __global__ void reduce6(const float* x, float* out, unsigned int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (BLOCK * 2) + tid;
    unsigned int gridSize = BLOCK * 2 * gridDim.x;
    float v = 0.0f;
    while (i < n) {
        v += x[i];
        if (i + BLOCK < n) v += x[i + BLOCK];
        i += gridSize;
    }
    sdata[tid] = v;
    __syncthreads();
    if (BLOCK >= 512) { if (tid < 256) sdata[tid] += sdata[tid + 256]; __syncthreads(); }
    if (BLOCK >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
    if (tid < 32) warpReduce(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

// 8：线程束洗牌 + atomicAdd 收尾
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

extern "C" __global__ void reduce_shfl(const float* __restrict__ x, float* out, int n) {
    __shared__ float warp_sums[32];
    int tid = threadIdx.x;
    int lane = tid % warpSize;
    int warp = tid / warpSize;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x)
        v += x[i];
    v = warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = (lane < blockDim.x / warpSize) ? warp_sums[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) atomicAdd(out, v);
    }
}
'''

# 逐行求和（每行一个线程块，共享内存树形归约）
ROW_SUM = r'''
__global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * n;
    float acc = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) acc += row[i];
    s[tid] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
'''

# 逐行 softmax：先求最大值再求和（共享标量广播）
ROW_SOFTMAX = r'''
__global__ void row_softmax(const float* x, float* y, int n) {
    __shared__ float red[BLOCK];
    __shared__ float row_max;
    __shared__ float row_sum;
    int tid = threadIdx.x;
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float m = -INFINITY;
    for (int i = tid; i < n; i += blockDim.x) m = fmaxf(m, xr[i]);
    red[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    if (tid == 0) row_max = red[0];
    __syncthreads();
    float mx = row_max;
    float acc = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) acc += expf(xr[i] - mx);
    red[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    if (tid == 0) row_sum = red[0];
    __syncthreads();
    float inv = 1.0f / row_sum;
    for (int i = tid; i < n; i += blockDim.x) yr[i] = expf(xr[i] - mx) * inv;
}
'''

# 存储体冲突演示：按列读一个 32x32 的共享内存块，PAD=1 时无冲突
BANK = r'''
__global__ void transpose_tile(const float* in, float* out) {
    __shared__ float tile[32][32 + PAD];
    int tx = threadIdx.x, ty = threadIdx.y;
    tile[ty][tx] = in[ty * 32 + tx];
    __syncthreads();
    out[ty * 32 + tx] = tile[tx][ty];
}

__global__ void strided(float* out, int stride) {
    __shared__ float s[64 * 33];
    int tid = threadIdx.x;
    s[tid * stride] = (float)tid;
    __syncthreads();
    out[tid] = s[tid * stride];
}
'''
