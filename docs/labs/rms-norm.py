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
# # 实验：RMSNorm与被屏蔽车道的填充值（Triton）
#
# 讲义：[归一化：LayerNorm与RMSNorm](../../triton/normalization/)、[-inf掩码](../../triton/masking/)。
# 先做过[融合softmax（Triton）](../softmax-triton/)更好：内核的骨架几乎一样，被屏蔽的车道却要填另一个值。
#
# ## 学习目标
#
# - 写出一行一个program的RMSNorm：整行读进一个块，平方和、均方、`rsqrt`、乘权重，只读一次、写一次；
# - 说出每种归约的被屏蔽车道要填什么：求最大值填$-\infty$，求和（平方和）填0；
# - 说出均值为什么除以$N$而不是`BLOCK_SIZE`，以及只有$N$不是2的幂时才看得出这个错误；
# - 说出$\varepsilon$的作用：全是0的一行没有它就是$0 \times \infty$。
#
# ```shell
# reduction-lab lab start rms-norm-triton
# reduction-lab lab check rms-norm-triton       # 或 pytest --lab rms-norm-triton --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("rms-norm-triton")
print("模式：", rl.MODE, "；打开", lab_dir / "rms_norm.py")

# %% [markdown]
# ## 概念：一次归约，两个陷阱
#
# $$\mathrm{RMSNorm}(x)_j = \frac{x_j}{\sqrt{\frac{1}{N}\sum_{k=0}^{N-1} x_k^2 + \varepsilon}}\; w_j$$
#
# 与softmax一样，一行放进一个块：`BLOCK_SIZE`是不小于$N$的2的幂，多出来的`BLOCK_SIZE - N`个车道用`mask`屏蔽。
# 被屏蔽的车道仍然参加`tl.sum`，所以`tl.load`的`other`必须是**这种归约的单位元**：
#
# | 归约 | 单位元（`other`） | 填错了会怎样 |
# |---|---|---|
# | `tl.max`（softmax的最大值） | $-\infty$ | 填0：整行为负数时0成了“最大值” |
# | `tl.sum`（RMSNorm的平方和） | 0 | 填$-\infty$：$(-\infty)^2 = \infty$，`rsqrt(inf) = 0`，整行输出0 |
#
# 第二个陷阱在分母：多出来的车道不是数据，均值要除以$N$（`n_cols`），不是`BLOCK_SIZE`。
# $N$正好是2的幂时两者相等，错误藏得住；评分的用例里有$N = 1000$、781这样的行。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64计算参考结果，与`torch.nn.functional.rms_norm`相同（$\varepsilon = 10^{-6}$，权重是$1 + 0.5z$，
# 不是全1：忘了乘权重也看得出来）。它还带着几种错误的模型`model`，与你的输出比较，说出最可能的原因：

# %%
import torch.nn.functional as F

from reduction_lab.labs.rms_norm_triton import EPS, model, weight_for

x = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0))
w = weight_for(1000, torch.float32, "cpu")
print("与 F.rms_norm 一致：", torch.allclose(model(x, w), F.rms_norm(x.double(), (1000,), w.double(), EPS)))
print("参考的第 0 行：      ", [round(v, 4) for v in model(x, w)[0, :4].tolist()])
print("除以 BLOCK_SIZE：    ", [round(v, 4) for v in model(x, w, denom=1024)[0, :4].tolist()])
print("乘 sqrt 而不是 rsqrt：", [round(v, 4) for v in model(x, w, inverse=False)[0, :4].tolist()])

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/rms-norm-triton/rms_norm.py`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它；文件末尾的包装函数`rms_norm`已经写好。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("rms-norm-triton")), language="python")

# %% [markdown]
# ## 陷阱：把softmax的$-\infty$搬过来
#
# 在参考解的一个副本里把$x$的`other`改成$-\infty$（softmax里正确的写法），再评分：$N$是2的幂的行（128、256）仍然通过，
# 其余的行整行输出0。评分程序认出这个结果，指向`tl.load`那一行：

# %% tags=["broken-copy"]
import shutil

broken = shutil.copytree(lab_dir, lab_dir.with_name("rms-norm-broken"), dirs_exist_ok=True)
src = (broken / "rms_norm.py").read_text(encoding="utf-8")
src = src.replace("cols, mask=mask, other=0.0).to(tl.float32)\n    w", 'cols, mask=mask, other=-float("inf")).to(tl.float32)\n    w', 1)
(broken / "rms_norm.py").write_text(src, encoding="utf-8")
labs.check("rms-norm-triton", broken, bench=False)

# %% [markdown]
# ## 验证：Triton（`--backend triton`）
#
# 与命令行`reduction-lab lab check rms-norm-triton`相同。“访存计数”用例在Triton解释器里数读写的元素：
# $x$读$MN$个、权重每行读一份（又是$MN$个）、写$MN$个。

# %%
result = labs.check("rms-norm-triton", lab_dir)
result

# %% [markdown]
# ## 对比：与softmax读写一样多
#
# RMSNorm与融合softmax一样，每行从显存读一次、写一次（权重只有$N$个元素，各行共用，在GPU上留在L2里）。
# `count_memory()`数出的读写（两种模式下都在Triton解释器里，数字是精确的）：

# %%
if result.passed:
    from reduction_lab import count_memory

    mine = labs.op("rms-norm-triton", lab_dir)
    M, N = 8, 781
    x = torch.randn(M, N)
    with count_memory() as rep:
        mine(x.to(rl.DEVICE))
    print(f"{M}x{N}：读 {rep.elements_loaded} 个元素（x 的 MN = {M * N}，权重每行一份 {M * N}），"
          f"写 {rep.elements_stored} 个（MN = {M * N}）")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`在全部用例通过之后在4096x4096上计时：你的内核、`F.rms_norm`和设备拷贝`copy_`。
# 本课程自己的RMSNorm内核与对照在H200上的数字见[归一化](../../triton/normalization/)一讲。

# %% [markdown]
# ## 扩展
#
# - 改写成LayerNorm：先求均值，再求$(x - \mu)^2$的均值，两次归约都要除以$N$；被屏蔽的车道在第二次归约之前要重新置0（为什么？）；
# - 输入是bfloat16时，平方为什么要在float32里做？试试$x = 300$的一行；
# - $N > 32768$时一行放不进一个块：按[分块与在线softmax](../../triton/tiling/)的办法循环读，平方和跨块累加，需要读几遍？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check rms-norm-triton`全部通过；
# - [ ] 能说出求最大值与求和的被屏蔽车道各填什么，以及填错时各自的症状；
# - [ ] 能说出均值除以`BLOCK_SIZE`的错误为什么只在$N$不是2的幂时出现；
# - [ ] 能说出$\varepsilon$让全0的一行得到0而不是NaN；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
