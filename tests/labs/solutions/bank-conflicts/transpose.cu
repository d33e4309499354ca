// 实验 bank-conflicts：没有存储体冲突的分块转置
//
// 启动方式（评分程序按这个启动，不要改内核的名字和参数）：
//   block = (32, 8)                        每个线程处理分块里的 4 行
//   grid  = (ceil(cols / 32), ceil(rows / 32))
//   in 是 rows x cols，out 是 cols x rows，都按行主序连续存放
//
// 下面的内核是对的，但慢：32x32 的分块按行写进共享内存、按列读出，
// 一列的 32 个数都落在同一个存储体，每次读要分 32 个波前（32 路冲突）。
// 完成 TODO(1)，然后运行：
//   reduction-lab lab check bank-conflicts
// 评分看模拟器的冲突计数（额外的波前必须是 0），gpu 模式下还要比冲突版本快。
// 讲义：「存储体冲突」（docs/cuda/bank-conflicts.md）

#include <stdint.h>

#define TILE 32
#define BLOCK_ROWS 8

extern "C" __global__ void transpose_kernel(const float *in, float *out, int rows, int cols)
{
    __shared__ float tile[TILE * (TILE + 1)];     // 每行补一个空位
    const int ld = TILE + 1;                       // 行距 33：第 i 行第 j 列在存储体 (i + j) % 32

    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * TILE + tx;                // 输入的列
    int r = blockIdx.y * TILE + ty;                // 输入的行
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (c < cols && r + j < rows)
            tile[(ty + j) * ld + tx] = in[(int64_t)(r + j) * cols + c];       // 按行写：无冲突
    __syncthreads();
    int oc = blockIdx.y * TILE + tx;               // 输出的列 = 输入的行
    int orow = blockIdx.x * TILE + ty;             // 输出的行 = 输入的列
    for (int j = 0; j < TILE; j += BLOCK_ROWS)
        if (oc < rows && orow + j < cols)
            out[(int64_t)(orow + j) * rows + oc] = tile[tx * ld + ty + j];    // 按列读
}
