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
# # 实验：按票号轮流累加——线程块之间的等待（CUDA C）
#
# 讲义：[CUDA C模拟器](../../cuda/simulator/#spin-wait)的「线程块之间的等待」、[数值与确定性](../../numerics/)。
# 先做[确定的全数组求和](../grid-sum/)：那里用协作启动的`grid.sync()`等整个网格，网格里的块必须同时驻留。
# 这里只等前一段：一次普通的启动，不用`grid.sync()`，也不用原子加合并，结果每次逐位相同。
#
# ## 学习目标
#
# - 说出为什么一个线程块不能按`blockIdx.x`等别的线程块：CUDA不保证线程块开始的顺序，等待的块占满SM时，它等的块可能还没开始；
# - 用*票号*（每块开始时对全局计数器`atomicAdd`，拿到的旧值）代替`blockIdx.x`，说出为什么这样不会死锁；
# - 写出“等到轮次、加上、轮到下一段”的三步，说出每一次`__threadfence()`排定的是什么，等的值为什么要用原子操作来读；
# - 说出模拟器怎样运行这种内核（整个网格一起等不到，就一块接一块、两个方向各执行一遍），以及它能指出哪些GPU上看不出来的错误。
#
# ```shell
# reduction-lab lab start ordered-sum-cuda      # 骨架复制到 ./labs/ordered-sum-cuda
# reduction-lab lab check ordered-sum-cuda      # 评分；也可以 pytest --lab ordered-sum-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("ordered-sum-cuda")         # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "ordered_sum.cu")

# %% [markdown]
# ## 概念：票号、轮次、按固定顺序累加
#
# $$S = \Big(\big((P_0 + P_1) + P_2\big) + \cdots\Big) + P_{G-1},\qquad
#   P_s = \sum_{t=0}^{B-1} \sum_{k \ge 0} x_{sB + t + kGB}$$
#
# 第$s$段的部分和$P_s$由领到票号$s$的那一块算出（网格步长与块内归约同[全数组求和](../full-sum/)，只是起点用票号）。
# 然后它等到轮次`turn == s`，把$P_s$加进`*out`，再把`turn`设成$s + 1$。加法的先后只取决于段号，所以同一个输入每次
# 得到逐位相同的结果。
#
# 段号为什么不能直接取`blockIdx.x`？CUDA要求线程块能以任意顺序执行，不保证按编号开始。网格比同时驻留得下的块多时，
# 先开始的可能是编号大的块，它们占着SM等编号小的块，而编号小的块排不上SM，就永远等下去。票号是按开始的先后发的：
# 领到$s$的块开始时，领到$0 \ldots s-1$的块都已经开始了，它们只等更小的号，总能做完。所以不要求网格同时驻留。
#
# 模拟器整个网格一起执行，在这里等不到：块0加完之前，别的块都在循环里等，块0停在循环后面。它看出循环转了一圈什么都没变，
# 就把数组恢复成启动前的样子，改为一块接一块执行，按编号从小到大、从大到小各一遍。两遍都等得到，内核才不依赖线程块开始的
# 顺序。同一个等待写成按`blockIdx.x`，从大到小的那一遍就等不到：

# %%
from reduction_lab import simt

src = r"""
__global__ void chain(int* turn, int* order, int* ticket) {
    __shared__ int s;
    if (threadIdx.x == 0) s = TICKET ? atomicAdd(ticket, 1) : blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        while (atomicAdd(turn, 0) != s) { }       // 等轮到第 s 段
        order[s] = blockIdx.x;                    // 记下是哪一块做了第 s 段
        __threadfence();
        atomicExch(turn, s + 1);                  // 轮到下一段
    }
}
"""
for ticket in (1, 0):
    order = torch.zeros(4, dtype=torch.int32)
    try:
        rep = simt.launch(src, "chain", 4, 32, (torch.zeros(1, dtype=torch.int32).numpy(), order.numpy(),
                                                torch.zeros(1, dtype=torch.int32).numpy()), defines={"TICKET": ticket})
        print(f"TICKET={ticket}：调度 {rep.schedule}，第 0..3 段由线程块 {order.tolist()} 做")
    except simt.SpinWaitError as e:
        print(f"TICKET={ticket}：{type(e).__name__}，第 {e.line} 行，线程块 {e.block}，依赖开始的顺序：{e.order_dependent}")

# %% [markdown]
# 结果来自从大到小的那一遍，所以线程块3领到票号0、做了第0段。GPU通常按编号发出线程块，`TICKET=0`在GPU上多半也算对；
# 模拟器把这个只在某种调度下才对的写法指出来。
#
# ## PyTorch参考实现
#
# 参考结果用float64求和。float32的结果与它的差按最长的加法链$k$放宽（网格步长的轮数、两级各5步洗牌、再按段的顺序加$G$次）：
# $2u\sqrt{k}\sum|x_j|$，$u = 2^{-24}$。固定的先后是什么意思，用torch按同样的分法算一遍：

# %%
n, B, G = 20000, 256, 8
x = torch.randn(n, generator=torch.Generator().manual_seed(0))
j = torch.arange(n)
partial = torch.zeros(G).index_add_(0, (j % (G * B)) // B, x)     # 第 s 段的部分和（float32）
fixed = torch.zeros(())
for p in partial:                                               # 按段号的顺序一个一个加：每次一样
    fixed += p
print(f"各段的部分和 {[round(v, 3) for v in partial.tolist()]}")
print(f"按段号的顺序累加 {fixed.item():.6f}，float64 参考 {x.double().sum().item():.6f}")

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/ordered-sum-cuda/ordered_sum.cu`），也就是`lab start`复制给你的文件。
# 按TODO(1)到TODO(4)完成它；`warp_sum`与`block_sum`（[全数组求和](../full-sum/)里的两级洗牌）是给出的。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("ordered-sum-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：按编号等、用普通的读等、忘了轮到下一段、少了栅栏
#
# 四种错误在GPU上的表现各不相同：按`blockIdx.x`等，GPU多半算对；用普通的读等，编译器可以只读一次、把值留在寄存器里，
# 这一块就永远等下去；加完忘了把`turn`设成下一段，后面的块全都等下去；少了加完之后的`__threadfence()`，下一块可能读到
# `*out`的旧值，偶尔少加一段。模拟器每一种都指出来，指向出错的那一行：

# %%
from pathlib import Path

from reduction_lab.cuda_kernels import launch

solution = (lab_dir / "ordered_sum.cu").read_text(encoding="utf-8")
mistakes = [
    ("段号用 blockIdx.x", ("    int seg = seg_s;", "    int seg = blockIdx.x;")),
    ("普通的读等轮次", ("while (atomicAdd(&counters[1], 0) != seg)", "while (counters[1] != seg)")),
    ("忘了轮到下一段", ("        atomicExch(&counters[1], seg + 1);\n", "")),
    ("加完之后少了栅栏", ("        *out += s;\n        __threadfence();\n", "        *out += s;\n")),
]
if all(old in solution for _, (old, _) in mistakes):
    for name, edit in mistakes:
        bad = Path("bad.cu")
        bad.write_text(solution.replace(*edit, 1), encoding="utf-8")
        try:
            launch(bad, "ordered_sum_kernel", grid=4, block=64,
                   args=(torch.zeros(()), torch.zeros(2, dtype=torch.int32), torch.ones(1000), 1000), mode="sim")
            print(f"{name}：没有报错")
        except simt.SimtError as e:
            print(f"{name}：{type(e).__name__}：{str(e).split(' / ')[0][:160]}……")
else:
    print("先完成 TODO(1) 到 TODO(4)")

# %% [markdown]
# 评分程序给出同样的诊断，指向你的文件里的那一行；在GPU上评分时，它先用模拟器跑一个小用例（$n = 1000$、3个线程块），
# 前三种错误在GPU上会卡住或碰巧算对，所以不在GPU上运行用例。另外几个错误评分程序也会指出：每个线程都去加`*out`
# （全局内存的竞争）、改用`atomicAdd(out, s)`合并（模拟器数`*out`的普通写，应为每块一次：用原子加，先后又取决于调度了）、
# 网格步长的三种错误。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check ordered-sum-cuda`、`pytest --lab ordered-sum-cuda --backend cuda`相同。用例同
# [确定的全数组求和](../grid-sum/)（1、3、8、40个线程块，32到1024个线程的线程块），“计数”用例在模拟器里数`*out`的写
# （每块一次）与读的字节数。

# %%
result = labs.check("ordered-sum-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：`grid.sync()`与按票号轮流累加
#
# 两个实验的内核在模拟器里的计数器（两种模式下都是精确的），同一个输入、同样的网格：

# %%
if result.passed:
    n, B, G = 1 << 16, 256, 8
    x = torch.randn(n)
    grid_dir = labs.start("grid-sum-cuda")
    rows = []
    if "// TODO(1)" not in (grid_dir / "grid_sum.cu").read_text(encoding="utf-8"):
        rep = launch(grid_dir / "grid_sum.cu", "grid_sum_kernel", grid=G, block=B,
                     args=(torch.zeros(()), torch.full((G,), float("nan")), x, n), defines={"BLOCK_SIZE": B}, mode="sim")
        rows.append(("grid.sync()", rep))
    rep = launch(lab_dir / "ordered_sum.cu", "ordered_sum_kernel", grid=G, block=B,
                 args=(torch.zeros(()), torch.zeros(2, dtype=torch.int32), x, n), defines={"BLOCK_SIZE": B}, mode="sim")
    rows.append(("按票号轮流累加", rep))
    for name, rep in rows:
        print(f"{name:8s} 原子操作 {rep.atomic_ops:3d} 次，网格屏障 {rep.grid_barriers} 次，"
              f"读 {rep.global_load_bytes // 4} 个数，写 {rep.global_store_bytes // 4} 个数，模拟器的调度 {rep.schedule}")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 显存的读几乎一样多：每个元素一次，另有每块读一次部分和或`*out`。不同在于等什么。`grid.sync()`让整个GPU等最慢的那一块，
# 网格必须同时驻留；按票号轮流累加不要求驻留，每块只等前一段，可等待连成了一条链：第$s$段要等前面$s$段一个接一个加完，
# 每一步都要经L2把上一块的写传过来。段越多，链越长。在GPU上，`lab check`全部通过之后除了计时（你的内核、`torch.sum`与
# 设备拷贝），还把同一个$2^{26}$个元素的输入运行20次，报告得到了几种不同的结果（应为1种）。
#
# 单遍的前缀和（scan）用的也是这个思路，叫作*decoupled look-back*：每块领票号，发布自己那一段的和，再往前看已经发布的段，
# 不必一段一段地等到自己。

# %% [markdown]
# ## 扩展
#
# - 在GPU上把网格的块数改成SM数的1倍、4倍、16倍（`reduction_lab.labs.ordered_sum_cuda.make_op(path, "gpu", B, grid)`）：
#   带宽怎样变化？块数超过同时驻留的上限时，`grid.sync()`的版本不能启动，这个版本呢？
# - 把`TICKET=0`的写法放到GPU上，网格取驻留上限的几十倍，再让另一个内核同时占着一部分SM：它还总能算对吗？
# - 让每块只等“最近发布的那一段”：第$s$段发布$P_s$和到它为止的前缀和，后面的块往前找最近一个发布了前缀和的段
#   （decoupled look-back）。加法的顺序还固定吗？
# - 去掉等到轮次之后的那一次`__threadfence()`，模拟器报不报？GPU上可能出什么错？（提示：读`*out`可能在看到新轮次之前发生。）
# - 用libcu++的`cuda::atomic_ref<int, cuda::thread_scope_device>`（`#include <cuda/atomic>`）重写第4步：
#   `load(cuda::memory_order_acquire)`等轮次，`store(seg + 1, cuda::memory_order_release)`交出轮次，两次`__threadfence()`
#   还需要吗？把release改成`cuda::memory_order_relaxed`，模拟器报什么？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check ordered-sum-cuda`全部通过（模拟器：两个方向逐块执行都等得到，没有全局内存的竞争）；
# - [ ] 能说出为什么段号不能取`blockIdx.x`，票号为什么不会死锁；
# - [ ] 能说出等轮次为什么要用原子操作（或`volatile`）来读，两次`__threadfence()`各排定什么；
# - [ ] 能说出按票号轮流累加与`grid.sync()`各自的代价：一条等待的链，还是整个网格同时驻留、一起等最慢的块。
