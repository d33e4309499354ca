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
# # 实验：在线softmax（Triton，长行）
#
# 讲义：[分块与在线softmax](../../triton/tiling/)；先完成[融合softmax](../softmax-triton/)。
#
# ## 学习目标
#
# - 行长于一个块时，在一个program里按块循环：第1遍边读边更新最大值$m$和指数和$d$，第2遍归一化；
# - 推出重新缩放的公式$d \leftarrow d\,e^{m - m'} + \sum_j e^{x_j - m'}$，知道忘了它会错在哪里；
# - 用`count_memory()`确认每行只读两遍（$2MN$）、写一遍（$MN$），而朴素的三遍写法读$3MN$。
#
# ```shell
# reduction-lab lab start online-softmax
# reduction-lab lab check online-softmax       # 或 pytest --lab online-softmax --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("online-softmax")
print("模式：", rl.MODE, "；打开", lab_dir / "online_softmax.py")

# %% [markdown]
# ## 概念：合并两个部分状态
#
# 把一行看成一块接一块。读完前几块后记下$(m, d)$：最大值和以$m$为基准的指数和$d = \sum e^{x - m}$。
# 读到新的一块，最大值变成$m' = \max(m, \max_j x_j)$，旧的和要换基准：$e^{x - m} = e^{x - m'}\,e^{m' - m}$……反过来，
#
# $$d' = d\,e^{m - m'} + \sum_j e^{x_j - m'}$$
#
# 这和归约里“把两个部分和加起来”是同一件事：两个部分状态$(m_1, d_1)$、$(m_2, d_2)$可以按这个规则合并，
# 合并与顺序无关（在实数里）。第2遍再读一次，写出$e^{x - m}/d$。

# %% [markdown]
# ## PyTorch参考实现：按块的在线算法

# %%
def online_softmax_reference(x: torch.Tensor, block: int) -> torch.Tensor:
    x = x.double()
    m = torch.full((x.shape[0],), float("-inf"), dtype=x.dtype, device=x.device)
    d = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[1], block):
        t = x[:, start:start + block]
        m_new = torch.maximum(m, t.max(dim=1).values)
        d = d * torch.exp(m - m_new) + torch.exp(t - m_new[:, None]).sum(dim=1)
        m = m_new
    return torch.exp(x - m[:, None]) / d[:, None]


x = torch.randn(3, 1000, device=rl.DEVICE)
print((online_softmax_reference(x, 128) - torch.softmax(x.double(), dim=1)).abs().max().item() < 1e-12)

# %% [markdown]
# ## 骨架

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("online-softmax")), language="python")

# %% [markdown]
# ## 陷阱：忘了重新缩放
#
# 只写`d = d + sum(exp(x - m_new))`：之前的块是以更小的最大值为基准累加的，每一项都偏大，
# 每行的和小于1。只有一块的行（$N \le$ `BLOCK_SIZE`）看不出错，所以评分用跨很多块的行：

# %%
def no_rescale(x: torch.Tensor, block: int) -> torch.Tensor:
    x = x.double()
    m = torch.full((x.shape[0],), float("-inf"), dtype=x.dtype, device=x.device)
    d = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[1], block):
        t = x[:, start:start + block]
        m = torch.maximum(m, t.max(dim=1).values)
        d = d + torch.exp(t - m[:, None]).sum(dim=1)          # 错：旧的 d 没有乘 exp(m_旧 - m_新)
    return torch.exp(x - m[:, None]) / d[:, None]


x = torch.randn(2, 1000, device=rl.DEVICE)
print("一块（N=100）的行和：", no_rescale(x[:, :100], 128).sum(dim=1).tolist())
print("8 块（N=1000）的行和小于 1：", bool((no_rescale(x, 128).sum(dim=1) < 1).all()))

# %% [markdown]
# ## 验证：Triton（`--backend triton`）

# %%
result = labs.check("online-softmax", lab_dir)
result

# %% [markdown]
# ## 对比：与融合softmax、`torch.softmax`

# %%
if result.passed:
    softmax = labs.op("online-softmax", lab_dir)
    x = torch.randn(8, 3000, device=rl.DEVICE)
    err = (softmax(x).double() - torch.softmax(x.double(), dim=1)).abs().max().item()
    print(f"与 float64 的最大差 {err:.2e}")
    with rl.count_memory() as rep:
        softmax(x)
    print("读", rep.elements_loaded, "= 2MN =", 2 * x.numel(), "；写", rep.elements_stored, "= MN")
else:
    print("先让评分全部通过")

# %% [markdown]
# 融合softmax读$MN$，这里读$2MN$：行装不进一个块时，第2遍只能再读一次（除非像生产版那样把一行分给
# 几个program、各自把自己那段留在寄存器里，见[分块与在线softmax](../../triton/tiling/)）。
# 在GPU上，`lab check`的计时给出它离设备拷贝有多远。

# %% [markdown]
# ## 扩展
#
# - 把第1遍改成两遍（先求最大值、再求和），用`count_memory()`看读了几遍，评分程序会怎么说；
# - 把块宽从128改成1024（`softmax(x, block_size=1024)`），解释器里的program数不变，为什么它跑得更快？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check online-softmax`全部通过；
# - [ ] 能推出重新缩放的公式，并说明整行是$-\infty$时为什么要换一个减数；
# - [ ] 能用`count_memory()`说明读了$2MN$、写了$MN$个元素。
