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
# # 实验：沿列求和——二维块向下循环（Triton）
#
# 讲义：[沿列归约](../../triton/column-sum/)、[分块与在线softmax](../../triton/tiling/)。
# 先做过[融合softmax（Triton）](../softmax-triton/)更好：这里一个program不再负责一行，而是一组相邻的列。
#
# ## 学习目标
#
# - 写出不转置的列求和：一个program负责`BLOCK_N`个相邻的列，向下每次读一个`BLOCK_M x BLOCK_N`的二维块；
# - 说出为什么这样读仍是合并访存：块的每一行是内存里连续的`BLOCK_N`个元素；
# - 写出二维掩码（行与列都可能不满），并说出被屏蔽的车道为什么填0；
# - 说出循环里为什么只做逐元素的加法、循环之后才沿`axis=0`归约一次；
# - 用`in_row_stride`而不是$N$定位行：$x$可以是更宽的矩阵的一部分。
#
# ```shell
# reduction-lab lab start col-sum-triton
# reduction-lab lab check col-sum-triton       # 或 pytest --lab col-sum-triton --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("col-sum-triton")
print("模式：", rl.MODE, "；打开", lab_dir / "col_sum.py")

# %% [markdown]
# ## 概念：向下走，横着读
#
# $$s_j = \sum_{i=0}^{M-1} x_{ij},\qquad j = 0, \dots, N-1$$
#
# 按行主序存放时，一列的相邻元素隔着一整行。让一个线程沿列往下读，同一条加载指令里32个线程的地址各隔一行，
# 每个32字节的扇区只用到4个字节。反过来，让一个program负责$B_N$个相邻的列，每次读$B_M$行：
# 块的每一行是连续的$B_N$个元素，相邻的线程读相邻的地址，加载是合并的。
#
# ```
# M = 70，N = 50，B_M = B_N = 32：两个 program（列 0..31、列 32..49）
#   program 0：行 0..31、32..63、64..69（最后一块只有 6 行）× 列 0..31
#   program 1：同样的三块 × 列 32..49（只有 18 列，另外 14 个车道被屏蔽）
#   每一块：acc[B_M, B_N] += 块（逐元素）；三块之后 tl.sum(acc, axis=0) -> B_N 个列和
# ```
#
# 循环里只做逐元素的加法，每个车道攒自己的部分和；归约（跨线程的交换）在循环之后只做一次。
# 掩码同时管行与列，被屏蔽的车道填求和的单位元0。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64的`x.sum(dim=0)`作参考，容差随$M$增长（$\mathrm{atol} = 10^{-5}\max(1, \sqrt{M}/8)$）。
# 它还带着“归约沿错了轴”的模型：循环之后写成`axis=1`，每个program输出的是它那组列里、行号除以32余$i$的元素之和：

# %%
from reduction_lab.labs.col_sum_triton import wrong_axis_model

x = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4)
print(x)
print("列和：          ", x.sum(dim=0).tolist())
print("axis=1 的结果： ", wrong_axis_model(x, block=2).tolist())

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/col-sum-triton/col_sum.py`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它；文件末尾的包装函数`col_sum`已经写好，块大小固定为32 x 32。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("col-sum-triton")), language="python")

# %% [markdown]
# ## 陷阱：行距不是$N$
#
# `x[:, :N]`是更宽的矩阵的前$N$列：每行仍然连续，行与行之间却隔着$N + 7$个元素（`x.stride(0)`）。
# 把行的起点写成`rows * n_cols`，在普通的连续输入上全部通过，只在这样的视图上读错位置。
# 在参考解的一个副本里这样改，再评分：

# %% tags=["broken-copy"]
import shutil

broken = shutil.copytree(lab_dir, lab_dir.with_name("col-sum-broken"), dirs_exist_ok=True)
src = (broken / "col_sum.py").read_text(encoding="utf-8")
src = src.replace("[:, None] * in_row_stride", "[:, None] * n_cols", 1)
(broken / "col_sum.py").write_text(src, encoding="utf-8")
labs.check("col-sum-triton", broken, bench=False)

# %% [markdown]
# 另外几个错误评分程序也认得出来：列号少了`program_id`（只有前32列被写）、没有向下循环或行号没有加上`start`
# （只加了前32行，或把它们加了好几遍）、归约沿错了轴，以及被屏蔽的车道填了$-\infty$。

# %% [markdown]
# ## 验证：Triton（`--backend triton`）
#
# 与命令行`reduction-lab lab check col-sum-triton`相同。“访存计数”用例在Triton解释器里数读写：读$MN$个、写$N$个。

# %%
result = labs.check("col-sum-triton", lab_dir)
result

# %% [markdown]
# ## 对比：不转置与先转置
#
# 另一种做法是先把$x$转置成连续的$N \times M$，再按行求和。`count_memory()`数出两种做法从显存读写的元素
# （两种模式下都在Triton解释器里，数字是精确的；转置那一步是`torch`的拷贝，按读$MN$、写$MN$算）：

# %%
if result.passed:
    from reduction_lab import count_memory

    mine = labs.op("col-sum-triton", lab_dir)
    M, N = 300, 700
    x = torch.randn(M, N).to(rl.DEVICE)
    with count_memory() as rep:
        mine(x)
    with count_memory() as rep_rows:
        rl.reduce_sum(x.t().contiguous(), backend="triton")
    print(f"不转置：读 {rep.elements_loaded:,}、写 {rep.elements_stored:,}")
    print(f"先转置：转置读 {M * N:,}、写 {M * N:,}，按行求和读 {rep_rows.elements_loaded:,}、写 {rep_rows.elements_stored:,}")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 不转置时每个元素只读一次；先转置要多读写两遍整个矩阵。GPU上`lab check`全部通过之后在4096x4096上计时：
# 你的内核、`torch.sum(x, dim=0)`与设备拷贝。这个形状只有128个program（每个32列），比SM的两倍少；
# 列少行多时怎样把行切给更多的program，见[沿列归约](../../triton/column-sum/)的`n_split`。

# %% [markdown]
# ## 扩展
#
# - 把`BLOCK_M`改成64、`BLOCK_N`改成16，计数器的数会变吗？在GPU上计时，带宽呢？（提示：块的一行只有64字节）
# - 仿照`rl.col_sum`的`n_split`，加一个`tl.program_id(1)`把行切成几段，各段写部分和，再启动一次把它们加起来；
# - 循环里每一轮都`tl.sum(块, axis=0)`再加到一个长度为`BLOCK_N`的向量上，结果一样吗？每轮多了什么？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check col-sum-triton`全部通过；
# - [ ] 能说出二维块的每一行为什么是合并访存，沿列一个线程往下读为什么不是；
# - [ ] 能写出行与列的二维掩码，说出被屏蔽的车道填0的原因；
# - [ ] 能说出行距`in_row_stride`与$N$什么时候不同；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
