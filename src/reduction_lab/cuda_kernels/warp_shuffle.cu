// warp_shuffle.cu：warp洗牌的教学内核（一个warp，block = 32个线程）。
// 课程页面：docs/cuda/warp-shuffle.md。
//
//   shfl_down_trace  用__shfl_down_sync做5步归约，每步之后记下32个lane手里的值
//   shfl_xor_trace   用__shfl_xor_sync做5步蝶形归约，同样记录
// trace是5行32列：trace[step * 32 + lane]。

// --8<-- [start:shfl_down_trace]
extern "C" __global__ void shfl_down_trace(const float *in, float *trace)
{
    int lane = threadIdx.x & 31;
    float v = in[lane];
    int step = 0;
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffff, v, offset);   // 取lane + offset的值；越过31时取回自己的
        trace[step * 32 + lane] = v;
        step++;
    }
}
// --8<-- [end:shfl_down_trace]

// --8<-- [start:shfl_xor_trace]
extern "C" __global__ void shfl_xor_trace(const float *in, float *trace)
{
    int lane = threadIdx.x & 31;
    float v = in[lane];
    int step = 0;
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffff, v, offset);    // 与lane ^ offset两两交换
        trace[step * 32 + lane] = v;
        step++;
    }
}
// --8<-- [end:shfl_xor_trace]
