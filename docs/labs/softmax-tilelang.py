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
# # 实验：融合softmax（TileLang）
#
# 讲义：[TileLang的归约](../../tilelang/reduce/)、[-inf掩码](../../triton/masking/)。
# 同一个算法的另外两种写法：[融合softmax（Triton）](../softmax-triton/)、[融合softmax（CUDA C）](../softmax-cuda/)；
# TileLang的按行求和见[按行求和](../reduce-sum/)。
#
# ## 学习目标
#
# - 用TileLang写出一行一个线程块的融合softmax：`T.copy`读整行、`T.reduce_max`、`T.exp`、`T.reduce_sum`、写回；
# - 知道`T.copy`在行尾之外补的是0，为什么要在归约之前把这些车道换成$-\infty$；
# - 对照Triton与CUDA C的写法，说出三种语言里“整行留在片上、只读一次”各由谁负责。
#
# ```shell
# reduction-lab lab start softmax-tilelang      # 骨架复制到 ./labs/softmax-tilelang
# reduction-lab lab check softmax-tilelang      # 评分；也可以 pytest --lab softmax-tilelang --backend tilelang
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("softmax-tilelang")        # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "softmax.py")

# %% [markdown]
# ## 概念：整行一块，块外是$-\infty$
#
# $$\mathrm{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_k e^{x_k - m}},\qquad m = \max_k x_k$$
#
# 一个线程块负责一行：`block_n`是不小于$N$的2的幂，整行装进一块`tile`（GPU上是分布在各线程寄存器里的片段，
# 没有GPU时是C目标的local数组）。`T.copy(x[bx, 0], tile)`从第`bx`行的开头读`block_n`个元素，越过行尾的部分补0。
# 这些0不是数据：留着它们，最大值至少是0（整行都是负数时0成了“最大值”），分母还多了$(\text{block\_n} - N)\,e^{0 - m}$。
# 所以读进来之后先把$j \ge N$的车道换成$-\infty$：它不改变最大值，$e^{-\infty} = 0$也不改变分母。
# 之后的每一步都是整块的操作：`T.reduce_max`、逐元素的`T.exp(tile - m)`、`T.reduce_sum`、除以和、`T.copy`写回
# （写回时越过行尾的部分不写）。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64的`torch.softmax`计算参考结果，逐元素按相对误差比较（$\text{rtol} = 10^{-5}$；
# $\text{atol} = 10^{-9}$只管下溢的值）：输出约为$1/N$，固定的绝对容差会比输出本身还大。下面用torch模拟“补0到`block_n`列再做softmax”，
# 与换成$-\infty$的结果比较：

# %%
def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=1)


def padded_softmax(x: torch.Tensor, block_n: int, fill: float) -> torch.Tensor:
    pad = torch.full((x.shape[0], block_n - x.shape[1]), fill, dtype=torch.float64)
    return torch.softmax(torch.cat([x.double(), pad], dim=1), dim=1)[:, :x.shape[1]]


x = -5.0 - torch.rand(1, 5)                       # 整行都是负数，N = 5，block_n = 8
print("参考：        ", [round(v, 4) for v in softmax_reference(x)[0].tolist()])
print("补 -inf：     ", [round(v, 4) for v in padded_softmax(x, 8, float("-inf"))[0].tolist()])
print("补 0：        ", [round(v, 4) for v in padded_softmax(x, 8, 0.0)[0].tolist()],
      "（每行的和", round(padded_softmax(x, 8, 0.0).sum().item(), 4), "）")

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/softmax-tilelang/softmax.py`），也就是
# `lab start`复制给你的文件。文件末尾的`softmax(x)`已经写好（检查输入、选`block_n`与线程数、启动内核）；
# 按TODO(1)到TODO(5)完成内核。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("softmax-tilelang")), language="python")

# %% [markdown]
# ## 陷阱：`T.copy`补的0
#
# 上面的参考实现已经演示了：补0时整行都是负数的行，0成了最大值，每行的和也小于1。
# 评分程序认得这种结果：它在float64里算出“补0到`block_n`列的softmax”，与你的输出相同时，
# 指出掩码那一行（还没写掩码时指出读整行的`T.copy`），并说明应该换成$-\infty$。这个错误只在$N$不是2的幂时出现
# （课程原来的形状都是2的幂，所以评分另有$N = 1000$、781的用例）。
#
# 掩码要写在`T.reduce_max`之前：先求最大值、后换成$-\infty$，补的0已经混进了最大值。数值不大的行上
# softmax与减去哪个数无关，结果照样对；整行是很大的负数时（$-1000$左右），减去0之后$e^x$全部下溢成0，得到$0/0$。
# 所以评分另有一个这样的用例。
#
# 另一个陷阱是没有写出结果：`T.empty`分配的`y`没有初值，没写的行是上一次留下的任意值，
# 从结果看不出是“没写”，评分程序从源码里找`T.copy(tile, y[...])`。
#
# 最后一个陷阱是越界：块内的循环多走一列（`tile_loop(1, block_n + 1)`），C目标里`tile`是栈上的数组，
# 多写的那个元素落在相邻的变量上，答案常常照样对；GPU上也不一定报错。所以评分程序在编译之前，
# 把内核展开成TIR，按每个循环的范围和`if`的条件算出每次读写的下标能取到的整数范围，证得出会越出缓冲区的
# 就报出来（哪个缓冲区、哪一维、下标能到多少），指向那个循环。下标依赖运行时的值、证不出的不报
# （`reduction_lab.tilelang_kernels.bounds`）。

# %% [markdown]
# ## 验证：TileLang（`--backend tilelang`）
#
# 与命令行`reduction-lab lab check softmax-tilelang`、`pytest --lab softmax-tilelang --backend tilelang`相同：
# 课程原来的形状和报错约定，加上$N$不是2的幂、整行为负数、数值很大和整行是很大的负数的行。

# %%
result = labs.check("softmax-tilelang", lab_dir)
result

# %% [markdown]
# ## 对比：三种语言的同一个softmax
#
# 同一个输入交给三个实验的参考写法（你的TileLang内核，以及`lab start`复制过的另外两个实验目录里你的内核——
# 还没完成的跳过），与float64的参考比较：

# %%
if result.passed:
    x = torch.randn(6, 1000, device=rl.DEVICE)
    ref = torch.softmax(x.double(), 1)
    print("你的 TileLang：与 float64 的最大差", (labs.op("softmax-tilelang", lab_dir)(x).double() - ref).abs().max().item())
    for name in ("softmax-triton", "softmax-cuda"):
        other = labs.default_dir(name)
        try:
            y = labs.op(name, other)(x)
            print(f"你的 {name}：与 float64 的最大差", (y.double() - ref).abs().max().item())
        except Exception as exc:  # noqa: BLE001 - 目录不存在或还没完成：说明原因，继续
            print(f"{name}：跳过（{type(exc).__name__}）")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 三种写法是同一个算法：整行读一次留在片上，减最大值、求指数、求和、除以和、写一次。差别在谁来管“片上”和“块外”：
# Triton里`tl.load`的`other=-float("inf")`一步做完读与掩码，块内归约由编译器安排；
# CUDA C里你自己把行放进共享内存、写两次块内归约和它们之间的屏障；TileLang里`T.copy`与`T.reduce_*`是整块的操作，
# 布局与线程间的归约由TileLang推导，但补0的语义是它的，换成$-\infty$要自己写。
# 在GPU上，`lab check`在全部通过之后还会在4096x4096上计时：你的内核（每次调用分配`y`）、`torch.softmax`和设备拷贝。

# %% [markdown]
# ## 扩展
#
# - 打开`reduction_lab.tilelang_kernels.cuda_source("softmax", M=8, N=1000, path="row")`看本包的row路径：
#   它用`T.annotate_layout`把一行交给相邻的线程，短行时一个warp一行，归约只用warp洗牌；
# - 把`threads`改成每个线程64个元素（`block_n // 64`），再计时：寄存器多了，每个SM驻留的块少了；
# - 行长到一块放不下（$N > 16384$）时怎么办？读[TileLang的归约](../../tilelang/reduce/)里的`cluster`与`split`路径。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check softmax-tilelang`全部通过；
# - [ ] 能说出`T.copy`在行尾之外补什么、为什么要换成$-\infty$，补0在哪种行上出错；
# - [ ] 能对照Triton与CUDA C的写法，说出TileLang替你做了什么、没替你做什么；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
