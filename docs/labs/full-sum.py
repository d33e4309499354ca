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
# # 实验：全数组求和——网格步长与原子加（CUDA C）
#
# 讲义：[七个版本](../../cuda/seven-versions/)（多级归约、版本7的网格步长）、[数值与确定性](../../numerics/)（原子加的先后）。
# 先做过[warp洗牌的按行求和](../warp-reduce/)更好：块内的两级洗牌在这里原样再用一次，新的是线程块之间怎么合并。
#
# ## 学习目标
#
# - 写出网格步长循环：线程块数固定、不随$n$增长时，每个线程怎样读完整个数组，访存仍然合并；
# - 说出为什么线程块之间不能用`__syncthreads()`，以及一次启动里合并各块部分和的办法：`atomicAdd`；
# - 说出`*out += s`错在哪里，为什么GPU上它常常“看起来是对的”，而模拟器每次都能指出它；
# - 用模拟器的计数器数出原子操作的次数，说出“每块一次”与“每个线程一次”的差别；
# - 说出原子加为什么让结果每次运行都可能差最后几位，以及确定性的替代做法。
#
# ```shell
# reduction-lab lab start full-sum-cuda      # 骨架复制到 ./labs/full-sum-cuda
# reduction-lab lab check full-sum-cuda      # 评分；也可以 pytest --lab full-sum-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("full-sum-cuda")            # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "full_sum.cu")

# %% [markdown]
# ## 概念：固定的网格，一次原子加
#
# $$S = \sum_{j=0}^{n-1} x_j = \sum_{b=0}^{G-1} \underbrace{\sum_{t=0}^{B-1} \sum_{k \ge 0} x_{bB + t + kGB}}_{\text{第}b\text{块的部分和}}$$
#
# $G$个线程块、每块$B$个线程，整个网格$GB$个线程。第$b$块的第$t$个线程的编号是$i = bB + t$，
# 它读$x_i, x_{i+GB}, x_{i+2GB}, \dots$：步长是**整个网格**的线程数。同一轮里相邻的线程读相邻的地址，访存是合并的；
# $G$不随$n$增长（GPU上取“SM数 x 每个SM常驻的块数”，正好铺满一次），多出来的元素靠循环读完。
# 这是[七个版本](../../cuda/seven-versions/)里版本7的做法。
#
# ```
# n = 20，G = 2，B = 4（GB = 8）
#   j:    0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 13 14 15 | 16 17 18 19
#   块:   0 0 0 0 | 1 1 1 1 | 0 0 0  0  | 1  1  1  1  | 0  0  0  0
#   线程: 0 1 2 3 | 0 1 2 3 | 0 1 2  3  | 0  1  2  3  | 0  1  2  3
# ```
#
# 每块在块内归约出一个数（warp洗牌，同[warp洗牌的按行求和](../warp-reduce/)），剩下的$G$个部分和要合成一个。
# 块与块之间没有屏障，也没有先后：讲义的做法是把部分和写进一个数组、再启动一次内核归约它（多级归约）；
# 这个实验只启动一次，每块的线程0用`atomicAdd(out, s)`把部分和加到输出上。原子加保证“读、加、写”三步不被别的线程打断，
# 但不保证各块到达的先后。评分程序在启动前把`*out`清零，线程块数由它决定（模拟器里至多8块）。

# %% [markdown]
# ## PyTorch参考实现
#
# 参考结果用float64求和。float32的结果与它的差，按最长的加法链$k$（网格步长的轮数、两级各5步洗牌、$G$次原子加）
# 放宽：$2u\sqrt{k}\sum|x_j|$，$u = 2^{-24}$。评分程序还带着几种常见错误下“每个元素被加了几次”的模型`weights`，
# 用它认出你的错误：

# %%
from reduction_lab.labs.full_sum_cuda import grid_for, weights

n, B = 20000, 256
G = grid_for(n, B, "sim")
x = torch.randn(n, generator=torch.Generator().manual_seed(0)).double()
print(f"n = {n}，G = {G}，B = {B}：参考 {x.sum().item():.6f}")
print(f"  只加了前 GB 个（没有网格步长循环）：{x[:G * B].sum().item():.6f}")
for mistake in ("block-stride", "no-block-offset", "first-block-only", "first-warp-only"):
    print(f"  {mistake:<17}：{(x * weights(n, G, B, mistake)).sum().item():.6f}")

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/full-sum-cuda/full_sum.cu`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它；`warp_sum`是给出的。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("full-sum-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：不用原子操作的`*out += s`
#
# `*out += s`是三步：读`*out`、加、写回。两个线程块同时读到同一个旧值，后写的那块就把先写的覆盖了，那一块的部分和丢了。
# 在GPU上丢不丢、丢几块，取决于各块恰好什么时候到达：有时结果碰巧是对的，有时差了几块。
# 模拟器为每个全局内存的元素记下最后是哪个线程块写的，同一次启动里另一块不经原子操作读写它，就报`GlobalMemoryRaceError`，
# 指出是哪一行、哪两块：

# %%
from pathlib import Path

from reduction_lab import simt
from reduction_lab.cuda_kernels import launch

demo = Path("race_demo.cu")
demo.write_text("""
extern "C" __global__ void plain_add(float *out, const float *in)
{
    if (threadIdx.x == 0)
        *out += in[blockIdx.x];          // 每块一个数，不用原子操作
}
""", encoding="utf-8")
try:
    launch(demo, "plain_add", grid=4, block=32, args=(torch.zeros(()), torch.ones(4)), mode="sim")
except simt.GlobalMemoryRaceError as e:
    print(str(e).split(" / ")[0])

# %% [markdown]
# 你的内核里犯了同样的错误，评分程序给出同样的诊断，指向你的文件里的那一行；在GPU上评分时，它先用模拟器跑一个小用例
# （$n = 1000$、3个线程块），所以这个错误不会因为GPU上碰巧算对而溜过去。另外三个陷阱评分程序也会指出：
#
# - 步长写成`blockDim.x`：第$b$块从第$bB$个元素一直读到末尾，前面的元素被好几块重复加了；
# - 起点少了`blockIdx.x * blockDim.x`：每块都读同样的元素；
# - 每个线程都`atomicAdd`：结果是对的，但同一个地址上的原子加在GPU上一个接一个地执行，模拟器的计数器数得出来（“原子操作计数”用例）。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check full-sum-cuda`、`pytest --lab full-sum-cuda --backend cuda`相同。
# 用例从1个元素到100003个（每个线程要走几十轮网格步长），另有1块与3块的网格、32、96与1024个线程的线程块；
# 报错约定换成一维输入的：float16、不连续、空数组、二维输入、`out`的形状不对，都要在启动之前报错。

# %%
result = labs.check("full-sum-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：每块一次与每个线程一次
#
# 同一个输入，你的内核与“每个线程直接`atomicAdd`自己的部分和”的版本，模拟器的计数器（两种模式下都是精确的）：

# %%
if result.passed:
    per_thread = Path("per_thread.cu")
    per_thread.write_text("""
#include <stdint.h>
extern "C" __global__ void full_sum_kernel(float *out, const float *in, int64_t n)
{
    float acc = 0.0f;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        acc += in[j];
    atomicAdd(out, acc);                 // 每个线程一次
}
""", encoding="utf-8")
    n, B, G = 1 << 16, 256, 8
    x = torch.randn(n)
    for name, src in [("你的内核（每块一次）", lab_dir / "full_sum.cu"), ("每个线程一次", per_thread)]:
        out = torch.zeros(())
        rep = launch(src, "full_sum_kernel", grid=G, block=B, args=(out, x, n), defines={"BLOCK_SIZE": B}, mode="sim")
        print(f"{name:<12} 原子操作 {rep.atomic_ops:>5} 次，读 {rep.global_load_bytes // 4} 个 float，"
              f"与 float64 的差 {abs(out.item() - x.double().sum().item()):.1e}")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 两个版本从显存读的一样多；差别在同一个地址上排队的原子加：$G$次对$GB$次。GPU上$G$取“SM数 x 每个SM常驻的块数”
# （H200上256个线程一块时是$132 \times 8 = 1056$），每个线程一次就是27万次。
#
# 原子加的先后还决定了结果的最后几位。float32的加法不满足结合律：同样的$G$个部分和，按不同的先后加起来，结果可能不同。
# 下面把1056个部分和按20种随机的先后依次加起来（float32，就像`atomicAdd`一个接一个地执行）：

# %%
g = torch.Generator().manual_seed(0)
partials = torch.randn(1056, generator=g) * 100
results = set()
for _ in range(20):
    acc = torch.zeros((), dtype=torch.float32)
    for v in partials[torch.randperm(1056, generator=g)]:
        acc = acc + v
    results.add(acc.item())
print(f"20 种先后，{len(results)} 种不同的 float32 结果；float64 参考 {partials.double().sum().item():.6f}")
print("最小", min(results), "最大", max(results))

# %% [markdown]
# 模拟器里原子加按线程的编号依次执行，同一个输入每次得到同样的结果；GPU上各块到达的先后每次不同。
# 所以在GPU上，`lab check`全部通过之后除了计时（你的内核、`torch.sum`与设备拷贝），还把同一个$2^{26}$个元素的输入
# 运行20次，报告得到了几种不同的结果。要逐位可重复，就回到多级归约：先把每块的部分和写进数组，再按固定的顺序相加，
# 代价是多一次启动，见[数值与确定性](../../numerics/)。

# %% [markdown]
# ## 扩展
#
# - 写出确定性的版本：第一个内核把部分和写进`partials[blockIdx.x]`，第二个内核用一个线程块归约它们。
#   在GPU上运行20次，数一数不同的结果；与`reduction_lab.cuda_kernels.full_sum(x, version=8)`比较时间；
# - 网格步长循环每轮读4个元素（`float4`，要求`in`按16字节对齐、$n$的尾部单独处理），计时比较；
# - 把$G$改成SM数的1倍、2倍、8倍、32倍：原子加的次数与带宽怎样变化？$G$太小时为什么也会慢？
# - $n > 2^{31}$时，`int i = blockIdx.x * blockDim.x + threadIdx.x`会怎样？为什么骨架要求用`int64_t`？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check full-sum-cuda`全部通过（模拟器：没有全局或共享内存的竞争、越界或未初始化的读）；
# - [ ] 能画出网格步长循环里每个线程读哪些元素，说出步长为什么是`gridDim.x * blockDim.x`；
# - [ ] 能说出`*out += s`丢掉部分和的过程，以及为什么GPU上它不一定每次都算错；
# - [ ] 能说出每块一次原子加与每个线程一次的差别（模拟器数出的次数）；
# - [ ] 能说出原子加让结果的最后几位每次运行都可能不同的原因，以及确定性的替代做法的代价。
