// bank_conflicts.cu：共享内存存储体冲突（bank conflict）的演示。
// 课程页面：docs/cuda/bank-conflicts.md。
//
// 共享内存分成32个存储体，每个4字节宽：第k个float落在第k % 32个存储体。
// 一个warp的一次访问里，若有d个线程访问同一存储体的不同地址，就要分d次完成（d路冲突）。
//
//   shared_stride       一个warp以步长stride读共享内存：冲突路数 = gcd(stride, 32)
//   shared_stride_wide  同上，但每个元素8字节（double；定义WIDE_FLOAT4时是16字节的float4）：
//                       按半个warp / 四分之一个warp分相，理想波前数是2 / 4，冲突 = 波前数 - 理想数
//   copy_tile           32x32分块复制：按行写、按行读（顺序寻址，无冲突），作时间上的对照
//   transpose_conflict  32x32分块转置：按行写、按列读，同一列的32个数在同一存储体：32路冲突
//   transpose_padded    同上，但每行补一个空位（33列）：一列的32个数落在32个不同存储体
//
// 三个分块内核的启动方式相同：block = (32, 8)，grid = (ceil(cols / 32), ceil(rows / 32))，
// 输入rows x cols，copy_tile输出rows x cols，两个转置输出cols x rows。

#define TILE 32
#define BLOCK_ROWS 8

// --8<-- [start:shared_stride]
// block = 32个线程（一个warp）；out[k] = 第k个线程读到的共享内存下标
extern "C" __global__ void shared_stride(float *out, int stride)
{
    __shared__ float buf[TILE * (TILE + 1)];
    int tid = threadIdx.x;
    for (int k = tid; k < TILE * (TILE + 1); k += blockDim.x)
        buf[k] = k;                                // 顺序写：相邻线程写相邻的字，无冲突
    __syncthreads();
    int idx = (tid * stride) % (TILE * (TILE + 1));
    out[blockIdx.x * blockDim.x + tid] = buf[idx]; // 步长stride：存储体 (tid * stride) % 32
}
// --8<-- [end:shared_stride]

// --8<-- [start:shared_stride_wide]
// 宽元素：默认double（8字节，占2个存储体）；-DWIDE_FLOAT4 时是float4（16字节，占4个存储体）
#ifdef WIDE_FLOAT4
typedef float4 wide_t;
#define WIDE(v) make_float4((v), (v), (v), (v))
#define NARROW(e) ((e).x + (e).y + (e).z + (e).w)  // 用到全部4个分量：一条128位的读
#else
typedef double wide_t;
#define WIDE(v) ((double)(v))
#define NARROW(e) ((float)(e))
#endif

extern "C" __global__ void shared_stride_wide(float *out, int stride)
{
    __shared__ wide_t buf[TILE * (TILE + 1)];
    int tid = threadIdx.x;
    for (int k = tid; k < TILE * (TILE + 1); k += blockDim.x)
        buf[k] = WIDE(k);
    __syncthreads();
    int idx = (tid * stride) % (TILE * (TILE + 1));
    out[blockIdx.x * blockDim.x + tid] = NARROW(buf[idx]);  // 第tid个线程读第idx个宽元素
}
// --8<-- [end:shared_stride_wide]

// --8<-- [start:tile_helper]
// 把输入的一个32x32分块搬进共享内存tile（行距ld个float），再按transpose指定的方向写出。
// 每个线程处理分块里的TILE / BLOCK_ROWS = 4行。
__device__ void tile_pass(const float *in, float *out, int rows, int cols, float *tile, int ld, int transpose)
{
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * TILE + tx;                // 输入的列
    int r = blockIdx.y * TILE + ty;                // 输入的行
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (c < cols && r + j < rows)
            tile[(ty + j) * ld + tx] = in[(long long)(r + j) * cols + c];      // 按行写：无冲突
    __syncthreads();
    if (transpose) {
        int oc = blockIdx.y * TILE + tx;           // 输出的列 = 输入的行
        int orow = blockIdx.x * TILE + ty;         // 输出的行 = 输入的列
        for (int j = 0; j < TILE; j += BLOCK_ROWS)
            if (oc < rows && orow + j < cols)
                out[(long long)(orow + j) * rows + oc] = tile[tx * ld + ty + j]; // 按列读
    } else {
        for (int j = 0; j < TILE; j += BLOCK_ROWS)
            if (c < cols && r + j < rows)
                out[(long long)(r + j) * cols + c] = tile[(ty + j) * ld + tx];   // 按行读
    }
}
// --8<-- [end:tile_helper]

// --8<-- [start:tile_kernels]
extern "C" __global__ void copy_tile(const float *in, float *out, int rows, int cols)
{
    __shared__ float tile[TILE * TILE];
    tile_pass(in, out, rows, cols, tile, TILE, 0);
}

extern "C" __global__ void transpose_conflict(const float *in, float *out, int rows, int cols)
{
    __shared__ float tile[TILE * TILE];            // 行距32：一列的32个数都在同一存储体
    tile_pass(in, out, rows, cols, tile, TILE, 1);
}

extern "C" __global__ void transpose_padded(const float *in, float *out, int rows, int cols)
{
    __shared__ float tile[TILE * (TILE + 1)];      // 行距33：第i行第j列在存储体 (i + j) % 32
    tile_pass(in, out, rows, cols, tile, TILE + 1, 1);
}
// --8<-- [end:tile_kernels]
