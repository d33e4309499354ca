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
# # 实验：融合softmax与-inf掩码（Triton）
#
# 讲义：[融合softmax与访存计数](../../triton/fused-softmax/)、[-inf掩码](../../triton/masking/)。
#
# ## 学习目标
#
# - 写出一行一个program的融合softmax：整行读进一个块，只读一次、写一次；
# - 知道被屏蔽的车道为什么要填$-\infty$，填0会错在哪里；
# - 用`count_memory()`数清内核读写了多少元素：$M \times N$的输入正好读$MN$、写$MN$。
#
# ```shell
# reduction-lab lab start softmax-triton
# reduction-lab lab check softmax-triton       # 或 pytest --lab softmax-triton --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("softmax-triton")
print("模式：", rl.MODE, "；打开", lab_dir / "softmax.py")

# %% [markdown]
# ## 概念：读一次，写一次
#
# $$\mathrm{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_k e^{x_k - m}},\qquad m = \max_k x_k$$
#
# 减去$m$不改变结果，却让指数的最大值是1，不会溢出。朴素的PyTorch写法每一步都把中间结果写回显存：
# 读$5MN + 2M$个元素、写$3MN + 2M$个；融合内核把一整行留在寄存器里，只读$MN$、写$MN$。
# `BLOCK_SIZE`是不小于$N$的2的幂，多出来的车道要屏蔽：读的时候填一个既不改变最大值、
# 也不改变分母的值。

# %% [markdown]
# ## PyTorch参考实现

# %%
def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    z = x.double() - x.double().max(dim=1, keepdim=True).values
    num = z.exp()
    return num / num.sum(dim=1, keepdim=True)


x = torch.randn(4, 1000, device=rl.DEVICE)
print(softmax_reference(x).sum(dim=1))

# %% [markdown]
# ## 骨架

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("softmax-triton")), language="python")

# %% [markdown]
# ## 陷阱：`other=0.0`
#
# 如果被屏蔽的车道填0：每个多余的车道给分母加上$e^{0 - m}$，每行的和小于1；整行为负数时，
# 0比整行都大，成了“最大值”。这个错误只在$N$不是2的幂时出现，所以只用$N = 128, 256$测试发现不了它。
# 下面用课程的计数工具看一个填0的块（只演示掩码，不是你的内核）：

# %%
import triton
import triton.language as tl


@triton.jit
def masked_max(x_ptr, out_ptr, n, BLOCK: tl.constexpr, FILL: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + cols, mask=cols < n, other=FILL)
    tl.store(out_ptr, tl.max(x, axis=0))


row = -5.0 - torch.rand(100, device=rl.DEVICE)      # 整行为负数，N = 100，块宽 128
for fill in (0.0, -float("inf")):
    out = torch.empty(1, device=rl.DEVICE)
    masked_max[(1,)](row, out, 100, BLOCK=128, FILL=fill)
    print(f"other={fill}: 块内最大值 {out.item():.3f}（这一行真正的最大值 {row.max().item():.3f}）")

# %% [markdown]
# ## 验证：Triton（`--backend triton`）
#
# 没有GPU时每个用例都在`count_memory()`里由Triton解释器运行：没有屏蔽的读写在越界之前就报出文件和行。
# “访存计数”一行的说明列是`count_memory()`数出的读写元素数。

# %%
result = labs.check("softmax-triton", lab_dir)
result

# %% [markdown]
# ## 对比：与`torch.softmax`

# %%
if result.passed:
    softmax = labs.op("softmax-triton", lab_dir)
    x = torch.randn(64, 3000, device=rl.DEVICE)
    for name, fn in [("torch.softmax", lambda t: torch.softmax(t, dim=-1)), ("你的内核", softmax)]:
        y = fn(x)
        err = (y.double() - softmax_reference(x)).abs().max().item()
        print(f"{name:<14} 与 float64 的最大差 {err:.2e}，每行的和 {y.sum(dim=1)[:2].tolist()}")
    with rl.count_memory() as rep:
        softmax(x)
    print("读", rep.elements_loaded, "写", rep.elements_stored, "= MN =", x.numel())
else:
    print("先让评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`在全部用例通过后还会计时：你的内核、`torch.softmax`与设备拷贝，报告GB/s与
# 占拷贝带宽的百分比。

# %% [markdown]
# ## 扩展：比一个块还长的行
#
# $N$大到一个块装不下时，一行要分成几块：在线softmax一边读一边更新最大值$m$和以$m$为基准的
# 指数和$d$（$d \leftarrow d\,e^{m_\text{旧} - m_\text{新}} + \sum e^{x - m_\text{新}}$），
# 见讲义[分块与在线softmax](../../triton/tiling/)。试着把你的内核改成循环处理`BLOCK_SIZE`列一块，
# 再用`count_memory()`看读了几遍。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check softmax-triton`全部通过；
# - [ ] 能说出被屏蔽的车道为什么填$-\infty$，以及填0时哪些形状会错；
# - [ ] 能用`count_memory()`说明内核只读了$MN$、写了$MN$个元素；
# - [ ] 知道为什么要先减去行最大值。
