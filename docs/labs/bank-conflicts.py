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
# # 实验：消除存储体冲突（CUDA C）
#
# 讲义：[存储体冲突](../../cuda/bank-conflicts/)。
#
# ## 学习目标
#
# - 算出一个warp的一次共享内存访问落在哪些存储体、要分几个波前；
# - 用补一列（行距33）消除分块转置里的32路冲突；
# - 用模拟器的计数器验证“额外的波前是0”，在GPU上量出提速。
#
# ```shell
# reduction-lab lab start bank-conflicts
# reduction-lab lab check bank-conflicts        # 或 pytest --lab bank-conflicts --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("bank-conflicts")
print("模式：", rl.MODE, "；打开", lab_dir / "transpose.cu")

# %% [markdown]
# ## 概念
#
# 共享内存分成32个存储体，每个4字节宽：第$k$个float在第$k \bmod 32$个存储体。
# 分块按行距$\text{ld}$存放时，第$i$行第$j$列在存储体$(i \cdot \text{ld} + j) \bmod 32$。
# 一个warp按列读（$i = 0..31$，$j$固定）：$\text{ld} = 32$时32个地址都在同一个存储体，要分32个波前；
# $\text{ld} = 33$时落在32个不同的存储体，一个波前。计数器报告的冲突 = 波前数 − 理想波前数。

# %% [markdown]
# ## PyTorch参考实现：转置
#
# 评分要求输出与`x.T`逐位相等（转置不做任何算术）。

# %%
x = torch.arange(12.0).reshape(3, 4)
print(x.t().contiguous())

# %% [markdown]
# ## 骨架

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("bank-conflicts")), language="cuda")

# %% [markdown]
# ## 陷阱：只改声明，不改下标
#
# 把分块声明成`TILE * (TILE + 1)`，却还用行距32计算下标，冲突一个也没少；写入用33、读出用32，
# 读到的是没有任何线程写过的字。模拟器分别报告“仍有冲突”（附每次请求的波前数）和
# “读了未初始化的共享内存”。课程的冲突版本的计数：

# %%
from reduction_lab.cuda_kernels import launch

x = torch.randn(64, 64)
out = torch.empty(64, 64)
rep = launch("bank_conflicts.cu", "transpose_conflict", grid=(2, 2), block=(32, 8), args=(x, out, 64, 64), mode="sim")
print("读：", rep.shared_load_requests, "次请求，", rep.shared_load_wavefronts, "个波前，额外",
      rep.shared_load_bank_conflicts)

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 调试时可以在内核里`printf`（不用包含头文件）：每个用例印出的行记在那个用例上，报告摘出第一个失败的用例的前20行，见[按行求和的实验](../reduce-sum/)。

# %%
result = labs.check("bank-conflicts", lab_dir)
result

# %% [markdown]
# ## 对比：你的内核与课程的两个版本

# %%
if result.passed:
    transpose = labs.op("bank-conflicts", lab_dir)
    x = torch.randn(64, 64, device=rl.DEVICE)
    print("与 x.T 相等：", torch.equal(transpose(x), x.t()))
    for kernel in ("transpose_conflict", "transpose_padded"):
        out = torch.empty(64, 64)
        r = launch("bank_conflicts.cu", kernel, grid=(2, 2), block=(32, 8), args=(x.cpu(), out, 64, 64), mode="sim")
        print(f"{kernel:<20} 额外的波前 {r.bank_conflicts}")
else:
    print("先让评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`还会在8192x8192上计时：你的内核、32路冲突的版本、不转置的`copy_tile`和设备拷贝。
# 全套基准测试：`reduction-lab bench bank-conflicts`，H200上的结果见[性能实测](../../bench/)。

# %% [markdown]
# ## 扩展
#
# - 不补空位也能消除冲突：按异或重排列号（`tile[i * 32 + (j ^ i)]`）。改成这样，再评分一次；
# - 补一列之后，转置仍比不转置的`copy_tile`慢一些：差在哪里？（提示：三个内核的读写都是合并的；比较一个线程块写的那几行在输出里相隔多远，以及这对显存访问的局部性意味着什么）。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check bank-conflicts`全部通过，额外的波前是0；
# - [ ] 能算出任意行距下按列读的冲突路数；
# - [ ] 在GPU上量出比冲突版本快多少。
