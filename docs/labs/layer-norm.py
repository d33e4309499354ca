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
# # 实验：长行的LayerNorm（Welford与Chan的合并，Triton）
#
# 讲义：[归一化：LayerNorm与RMSNorm](../../triton/normalization/)的「一遍还是两遍」与「行比一个块长：Welford与Chan的合并」、
# [数值与确定性](../../numerics/)。先做过[在线softmax](../online-softmax/)与[RMSNorm](../rms-norm/)更好：
# 这里的循环与在线softmax同构，被屏蔽的车道却要用第三种办法处理。
#
# ## 学习目标
#
# - 写出一行一个program、按块循环的LayerNorm：第1遍逐块求出$(n_b, \bar x_b, M_{2,b})$并用Chan的公式合并，第2遍归一化，
#   $x$每行只读两遍；每行另写出均值与`rstd`（反向要用）；
# - 说出最后一块不满时要改哪两处：元素数$n_b$按真正的列数算，被屏蔽的车道在减去均值**之后**要清零；
# - 说出一遍公式$E[x^2] - E[x]^2$为什么在均值大、方差小的行上毫无意义，以及块内先求均值为什么没有这个问题；
# - 说出$\varepsilon$在`sqrt`里面的作用，以及方差为什么除以$N$而不是$N - 1$。
#
# ```shell
# reduction-lab lab start layer-norm-triton
# reduction-lab lab check layer-norm-triton     # 或 pytest --lab layer-norm-triton --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("layer-norm-triton")
print("模式：", rl.MODE, "；打开", lab_dir / "layer_norm.py")

# %% [markdown]
# ## 概念：三元组的合并
#
# $$y_j = \frac{x_j - \mu}{\sqrt{\sigma^2 + \varepsilon}}\, w_j + b_j, \qquad
# \mu = \frac{1}{N}\sum_k x_k, \qquad \sigma^2 = \frac{1}{N}\sum_k (x_k - \mu)^2$$
#
# 一行比一个块长，只能分块读。每块先在寄存器里求出自己的状态：有效元素数$n_b$、均值$\bar x_b$、与这个均值之差的平方和
# $M_{2,b}$；再与运行状态$(n_a, \bar x_a, M_{2,a})$合并：
#
# $$n = n_a + n_b,\quad \delta = \bar x_b - \bar x_a,\quad \bar x = \bar x_a + \delta\frac{n_b}{n},\quad
# M_2 = M_{2,a} + M_{2,b} + \delta^2\frac{n_a n_b}{n}$$
#
# 循环结束时$\mu = \bar x$、$\sigma^2 = M_2 / N$。最后一块不满时，被屏蔽的车道在三处各要小心：
#
# | 量 | 被屏蔽的车道 | 做错了会怎样 |
# |---|---|---|
# | $\sum x$（求$\bar x_b$） | `other=0.0`：0不改变和 | — |
# | $n_b$ | 不计入：`tl.minimum(n_cols - start, BLOCK_SIZE)` | 按`BLOCK_SIZE`计：均值偏小，$n$最后不等于$N$ |
# | $\sum (x - \bar x_b)^2$ | 减去均值之后是$-\bar x_b$，要`tl.where(mask, x - mean_b, 0.0)` | 每个多余的车道给$M_{2,b}$加上$\bar x_b^2$ |
#
# RMSNorm不减均值，`other=0.0`就够了；softmax求最大值，填$-\infty$。LayerNorm是第一个「填0还不够」的归约。
# 在$N$正好是`BLOCK_SIZE`的倍数的行上，这些错误都藏得住：评分的用例里有$N = 129$、1000这样的行。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64计算参考结果，与`torch.nn.functional.layer_norm`相同（$\varepsilon = 10^{-5}$，权重$1 + 0.5z$、
# 偏置$0.3z'$，不是全1和全0：忘了乘权重、加偏置都看得出来）。诊断用的`model`按内核的步骤逐块合并，
# 几个开关各是一种常见错误；下面在一行$N = 300$、块宽128（最后一块44列）的输入上比较它们给出的方差：

# %%
import torch.nn.functional as F

from reduction_lab.labs.layer_norm_triton import EPS, model, params_for, reference

N = 300
x = 2.0 + torch.randn(1, N, generator=torch.Generator().manual_seed(0))
w, b = params_for(N, torch.float32, "cpu")
y, mean, rstd = reference(x, w, b)
print("参考与 F.layer_norm 一致：", torch.allclose(y, F.layer_norm(x.double(), (N,), w.double(), b.double(), EPS)))


def var_of(rstd):                                 # 由 rstd = 1 / sqrt(var + eps) 还原方差
    return (1.0 / rstd[0] ** 2 - EPS).item()


print(f"参考（float64，整行一起算）：均值 {mean[0].item():.4f}，方差 {var_of(rstd):.4f}")
for flags, what in ((dict(), "逐块合并（正确）"), (dict(count_masked=True), "n_b 按 BLOCK_SIZE 计"),
                    (dict(zero_masked=False), "被屏蔽的车道没有清零"), (dict(cross=False), "合并时少了 delta² 项"),
                    (dict(ddof=1), "除以 N - 1")):
    _, m, r = model(x, w, b, 128, **flags)
    print(f"{what}：均值 {m[0].item():.4f}，方差 {var_of(r):.4f}")

# %% [markdown]
# ## 陷阱：一遍公式$E[x^2] - E[x]^2$
#
# 同时累加$\sum x$和$\sum x^2$只读一遍，数学上没错。可是均值$10^4$、标准差1的一行，$x^2 \approx 10^8$，
# float32在那里相邻两数相差8，而真正的方差只有1。用float32算一算：

# %%
row = 1e4 + torch.randn(1000, generator=torch.Generator().manual_seed(1))          # float32
one_pass = (row * row).mean() - row.mean() ** 2
two_pass = ((row - row.mean()) ** 2).mean()
exact = row.double().var(correction=0).item()
print(f"精确 {exact:.4f}；一遍公式 {one_pass.item():.4f}；两遍（先减均值）{two_pass.item():.4f}")

# %% [markdown]
# 块内先求$\bar x_b$、再求$(x - \bar x_b)^2$（TODO(2)），块间用Chan的公式（TODO(3)），每一步相减的都是量级相近的小数，
# 不会抵消。评分的「均值很大、方差很小」用例专门测这一点；这一行上正确的float32内核也只有约3位有效数字（均值的舍入被
# $1/\sigma$放大），容差按每行的$(|\mu| + \sigma)/\sigma$放宽，一遍公式差得更多，过不了。

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/layer-norm-triton/layer_norm.py`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它；文件末尾的包装函数`layer_norm`已经写好。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("layer-norm-triton")), language="python")

# %% [markdown]
# ## 陷阱：被屏蔽的车道减去均值之后
#
# 在参考解的一个副本里去掉`tl.where`，直接用`d = x - mean_b`，再评分：$N = 256$（正好两块）的行仍然通过，
# 最后一块不满的行方差偏大。评分程序用`model`认出这个结果，指向那一行：

# %% tags=["broken-copy"]
import shutil

broken = shutil.copytree(lab_dir, lab_dir.with_name("layer-norm-broken"), dirs_exist_ok=True)
src = (broken / "layer_norm.py").read_text(encoding="utf-8")
src = src.replace("d = tl.where(mask, x - mean_b, 0.0)", "d = x - mean_b", 1)
(broken / "layer_norm.py").write_text(src, encoding="utf-8")
labs.check("layer-norm-triton", broken, bench=False)

# %% [markdown]
# ## 验证：Triton（`--backend triton`）
#
# 与命令行`reduction-lab lab check layer-norm-triton`相同。“访存计数”用例在Triton解释器里数读写的元素：
# 第1遍读$x$（$MN$），第2遍读$x$、$w$、$b$（各$MN$，权重与偏置每行一份），写$y$（$MN$）与每行的均值、`rstd`（$2M$）。

# %%
result = labs.check("layer-norm-triton", lab_dir)
result

# %% [markdown]
# ## 对比：两遍，不是三遍
#
# 先一遍求均值、再一遍求方差、最后一遍归一化，$x$要从显存读三遍；Welford的合并把前两遍并成一遍。
# `count_memory()`数出的读写（两种模式下都在Triton解释器里，数字是精确的）：

# %%
if result.passed:
    from reduction_lab import count_memory

    mine = labs.op("layer-norm-triton", lab_dir)
    M, N = 4, 1000
    x = torch.randn(M, N)
    with count_memory() as rep:
        mine(x.to(rl.DEVICE))
    print(f"{M}x{N}：读 {rep.elements_loaded} 个元素（x 两遍 2MN = {2 * M * N}，w、b 每行一份 2MN = {2 * M * N}），"
          f"写 {rep.elements_stored} 个（MN + 2M = {M * N + 2 * M}）")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`在全部用例通过之后在256x65536上计时：你的内核、`F.layer_norm`和设备拷贝`copy_`
# （GB/s按读一遍、写一遍计，你的内核实际读两遍）。本课程的LayerNorm内核与对照在H200上的数字见[归一化](../../triton/normalization/)一讲。

# %% [markdown]
# ## 扩展
#
# - 把合并改成两两合并（树形）：每个program只求一段的$(n, \bar x, M_2)$写出，再由另一个内核合并，结果与逐块合并在float64下
#   相同吗（讲义里用float64验证过结合律）？在float32下呢？
# - $N \le$ 一个块时，`BLOCK_SIZE`取不小于$N$的2的幂，循环只走一次：这时的内核与讲义的融合内核（整行留在寄存器里）有什么区别？
#   读几遍？
# - 讲义的生产版内核在求出均值之后「再修正一次」：在「均值很大、方差很小」的行上，它能把误差降到多少？试着在第2遍之前加上
#   这一步。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check layer-norm-triton`全部通过；
# - [ ] 能写出Chan的合并公式，并说出$\delta^2 n_a n_b / n$这一项从哪里来；
# - [ ] 能说出最后一块不满时$n_b$与$(x - \bar x_b)^2$各要怎么处理，以及为什么只在$N$不是块宽的倍数时出错；
# - [ ] 能说出一遍公式在什么样的行上失效，块内先减均值为什么不会；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
