# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 实验：确定的全数组求和——`grid.sync()`（CUDA C）
#
# 讲义：[数值与确定性](../../numerics/)（原子加的先后）、[七个版本](../../cuda/seven-versions/)（网格步长）、
# [CUDA C模拟器](../../cuda/simulator/)（网格屏障与全局内存的竞争检查）。
# 先做[全数组求和](../full-sum/)：那里各块的部分和用`atomicAdd`合并，GPU上同一个输入运行20次可能得到几种结果。
# 这里换一种合并：一次启动，不用原子操作，结果每次逐位相同。
#
# ## 学习目标
#
# - 说出一次启动里让不同线程块“先写完、再读”的唯一办法：协作启动里的网格屏障`grid.sync()`；
# - 说出协作启动的条件：网格里的块必须同时驻留，块数有上限；
# - 写出“各块写部分和、`grid.sync()`、0号块按固定顺序合并”的内核，说出它为什么每次得到同样的结果；
# - 说出少了`grid.sync()`时GPU上为什么常常碰巧算对，而模拟器每次都能指出来；`grid.sync()`写在分支里会怎样。
#
# ```shell
# reduction-lab lab start grid-sum-cuda      # 骨架复制到 ./labs/grid-sum-cuda
# reduction-lab lab check grid-sum-cuda      # 评分；也可以 pytest --lab grid-sum-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("grid-sum-cuda")            # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "grid_sum.cu")

# %% [markdown]
# ## 概念：写部分和、网格屏障、按固定顺序合并
#
# $$S = \sum_{b=0}^{G-1} P_b,\qquad P_b = \sum_{t=0}^{B-1} \sum_{k \ge 0} x_{bB + t + kGB}$$
#
# 网格步长与块内归约同[全数组求和](../full-sum/)。不同的是第二步：第$b$块的线程0把$P_b$写进`partial[b]`（每块只写
# 自己的槽位，不用原子操作），然后**整个网格**执行`grid.sync()`：它等网格里每一块的每一个线程都到达，并且此前所有线程
# 对全局内存的写，对此后所有线程的读都可见。之后0号块的第$t$个线程读`partial[t]`、`partial[t + B]`……，块内再归约一次，
# 线程0写`*out`。加法的先后只取决于下标，不取决于各块什么时候到达，所以同一个输入每次得到逐位相同的结果。
#
# `__syncthreads()`只排定同一个线程块的线程；普通的启动里，块与块之间没有任何先后，等别的块就可能永远等下去（那一块也许
# 还没排上SM）。`grid.sync()`只在**协作启动**（`cudaLaunchCooperativeKernel`）里有定义：驱动保证网格里的块同时驻留，
# 块数不能超过“每个SM驻留得下的块数 x SM数”。`reduction_lab.cuda_kernels.launch`看到源码里的`cg::this_grid()`就协作启动，
# 并先按驱动的占用率查询核对块数；模拟器在`grid.sync()`处按sm_90（132个SM）核对同一个条件：

# %%
from pathlib import Path

from reduction_lab import simt

big = Path("too_big.cu")
big.write_text("""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void staged(float *out)
{
    extern __shared__ float s[];                 // 每块 100 KiB：一个 SM 只驻留得下 2 块
    cg::grid_group grid = cg::this_grid();
    s[threadIdx.x] = 1.0f;
    grid.sync();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}
""", encoding="utf-8")
try:
    simt.launch(str(big), "staged", 265, 32, [torch.zeros(265 * 32)], shared_bytes=100 * 1024,
                max_dynamic_shared_bytes=100 * 1024)
except simt.LaunchError as e:
    print(str(e).split(" / ")[0])

# %% [markdown]
# ## PyTorch参考实现
#
# 参考结果用float64求和。float32的结果与它的差按最长的加法链$k$放宽（网格步长的轮数、两级各5步洗牌、0号块读部分和的
# 轮数、再两级洗牌）：$2u\sqrt{k}\sum|x_j|$，$u = 2^{-24}$。固定的先后是什么意思，用torch按同样的分法算一遍：

# %%
n, B, G = 20000, 256, 8
x = torch.randn(n, generator=torch.Generator().manual_seed(0))
j = torch.arange(n)
partial = torch.zeros(G).index_add_(0, (j % (G * B)) // B, x)     # 第 b 块的部分和（float32）
fixed = partial.sum()                                           # 按下标的顺序合并：每次一样
print(f"各块的部分和 {[round(v, 3) for v in partial.tolist()]}")
print(f"按固定顺序合并 {fixed.item():.6f}，float64 参考 {x.double().sum().item():.6f}")

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/grid-sum-cuda/grid_sum.cu`），也就是`lab start`复制给你的文件。
# 按TODO(1)到TODO(4)完成它；`warp_sum`与`block_sum`（[全数组求和](../full-sum/)里的两级洗牌）是给出的。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("grid-sum-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：少了`grid.sync()`，或把它写进分支
#
# 少了`grid.sync()`，0号块读`partial[b]`时，第$b$块可能还没写。GPU上各块几乎同时开始、同时结束，0号块读得晚，
# 结果常常碰巧是对的，偶尔差一块；模拟器为每个全局内存的字记下是哪个线程块在哪一行写的，另一块在网格屏障之前读它，
# 就报`GlobalMemoryRaceError`。把`grid.sync()`写进`if (blockIdx.x == 0)`里，只有0号块到达网格屏障，GPU上就死锁了；
# 模拟器报`BarrierDivergenceError`，说出多少个线程没有到达：

# %%
from reduction_lab.cuda_kernels import launch

solution = (lab_dir / "grid_sum.cu").read_text(encoding="utf-8")
if "grid.sync();\n" in solution and "// TODO(1)" not in solution:
    for name, edit in [("少了 grid.sync()", ("    grid.sync();\n", "")),
                       ("grid.sync() 写在分支里", ("    grid.sync();\n", "    if (blockIdx.x == 0)\n        grid.sync();\n"))]:
        bad = Path("bad.cu")
        bad.write_text(solution.replace(*edit, 1), encoding="utf-8")
        try:
            launch(bad, "grid_sum_kernel", grid=4, block=64,
                   args=(torch.zeros(()), torch.full((4,), float("nan")), torch.ones(1000), 1000), mode="sim")
        except (simt.GlobalMemoryRaceError, simt.BarrierDivergenceError) as e:
            print(f"{name}：{type(e).__name__}：{str(e).split(' / ')[0][:150]}……")
else:
    print("先完成 TODO(1) 到 TODO(4)")

# %% [markdown]
# 评分程序给出同样的诊断，指向你的文件里的那一行；在GPU上评分时，它先用模拟器跑一个小用例（$n = 1000$、3个线程块），
# 所以少了`grid.sync()`不会因为GPU上碰巧算对而溜过去。另外几个错误评分程序也会指出：0号块只加了自己的部分和、
# 少加了最后一块（`b < gridDim.x - 1`）、每块都写`*out`（全局内存的写后写竞争）、读了没写过的槽位（评分程序把`partial`
# 填成NaN）、又用回了`atomicAdd`（模拟器的计数器`atomic_ops`应为0）。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check grid-sum-cuda`、`pytest --lab grid-sum-cuda --backend cuda`相同。用例同
# [全数组求和](../full-sum/)，另有块比线程多的网格（40块、每块32个线程：0号块的每个线程要读两个部分和），
# “计数”用例在模拟器里数原子操作（0次）、网格屏障（每块1次）与读的字节数（$n$个元素加$G$个部分和）。

# %%
result = labs.check("grid-sum-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：原子加与固定顺序
#
# 两个实验的内核在模拟器里的计数器（两种模式下都是精确的），同一个输入、同样的网格：

# %%
if result.passed:
    atomic = Path("atomic_sum.cu")
    atomic.write_text("""
#include <stdint.h>
extern "C" __global__ void atomic_sum(float *out, const float *in, int64_t n)
{
    __shared__ float s[256];
    float acc = 0.0f;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        acc += in[j];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);    // 每块一次原子加（全数组求和实验的做法）
}
""", encoding="utf-8")
    n, B, G = 1 << 16, 256, 8
    x = torch.randn(n)
    out = torch.zeros(())
    rep = launch(atomic, "atomic_sum", grid=G, block=B, args=(out, x, n), mode="sim")
    print(f"原子加        原子操作 {rep.atomic_ops} 次，网格屏障 {rep.grid_barriers} 次，读 {rep.global_load_bytes // 4} 个 float")
    out = torch.zeros(())
    rep = launch(lab_dir / "grid_sum.cu", "grid_sum_kernel", grid=G, block=B,
                 args=(out, torch.full((G,), float("nan")), x, n), defines={"BLOCK_SIZE": B}, mode="sim")
    print(f"grid.sync()   原子操作 {rep.atomic_ops} 次，网格屏障 {rep.grid_barriers} 次，读 {rep.global_load_bytes // 4} 个 float")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 显存的读写几乎一样多（多读$G$个部分和），代价在别处：网格屏障要等最慢的那一块，整个GPU在那里停一下；网格的块数
# 受驻留上限约束，不能随便加。换来的是每次逐位相同的结果。在GPU上，`lab check`全部通过之后除了计时（你的内核、`torch.sum`
# 与设备拷贝），还把同一个$2^{26}$个元素的输入运行20次，报告得到了几种不同的结果（应为1种；全数组求和实验的原子加常常是几种）。
#
# 另外两种确定的做法：多级归约（[七个版本](../../cuda/seven-versions/)的版本7、8）多启动一次，用第二次启动代替网格屏障；
# “最后到达的块合并”每块写完部分和后`__threadfence()`、再用`atomicInc`领一个号，领到最后一个号的块按下标顺序合并，
# 不需要协作启动，合并的顺序同样固定。

# %% [markdown]
# ## 扩展
#
# - 在GPU上把网格的块数改成SM数的1倍、2倍、4倍（`reduction_lab.labs.grid_sum_cuda.make_op(path, "gpu", B, grid)`）：
#   带宽怎样变化？块数超过驻留上限时，启动器报出什么？
# - 去掉`grid.sync()`，在GPU上运行1000次，数一数有几次结果不对（模拟器每次都指出的竞争，GPU上多久碰上一次？）；
# - 0号块合并时改成每个线程读连续的几个部分和（`partial[t * k .. t * k + k - 1]`）：结果还确定吗？与`torch.sum`逐位相同吗？
# - 用同样的思路写按行的softmax：每块求一行一段的$(m, s)$，`grid.sync()`之后各块合并本行的各段
#   （[TileLang的常驻网格](../../tilelang/reduce/#grid)用的是不等整个网格、只等本行各段的做法）。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check grid-sum-cuda`全部通过（模拟器：没有全局内存的竞争、屏障发散，原子操作0次）；
# - [ ] 能说出`__syncthreads()`与`grid.sync()`各排定哪些线程，以及为什么一次普通的启动里块与块之间不能互相等待；
# - [ ] 能说出协作启动的块数上限从哪里来，超过时会怎样；
# - [ ] 能说出固定顺序的合并为什么每次得到同样的结果，原子加为什么不是；
# - [ ] 能说出少了`grid.sync()`时GPU上为什么常常碰巧算对。
