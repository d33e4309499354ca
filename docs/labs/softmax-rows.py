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
# # 实验：16位softmax，一个program处理几行（Triton）
#
# 讲义：[16位输入与向量加载](../../triton/half-precision/)、[融合softmax与访存计数](../../triton/fused-softmax/)。
# 先做过[融合softmax（Triton）](../softmax-triton/)更好：这里把它的一行一个program改成一个program处理`BLOCK_M`行。
#
# ## 学习目标
#
# - 写出二维块的softmax：`BLOCK_M`行 x `BLOCK_N`列，行号带上`pid * BLOCK_M`，`mask`同时管行与列；
# - 沿`axis=1`求每行的最大值与和，用`m[:, None]`把每行一个数沿列广播回块上；
# - 读bfloat16 / float16、在float32里计算、按输出的dtype写回；
# - 说出短行的16位输入为什么要让一个program多拿几行：每个线程在途的字节。
#
# ```shell
# reduction-lab lab start softmax-rows-triton
# reduction-lab lab check softmax-rows-triton       # 或 pytest --lab softmax-rows-triton --backend triton
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("softmax-rows-triton")
print("模式：", rl.MODE, "；打开", lab_dir / "softmax_rows.py")

# %% [markdown]
# ## 概念：一个program，BLOCK_M行
#
# $$y_{ij} = \frac{e^{x_{ij} - m_i}}{\sum_k e^{x_{ik} - m_i}},\qquad m_i = \max_k x_{ik}$$
#
# 一行一个program时，$N = 1024$的bfloat16一行只有2 KiB：4个warp的128个线程每人只读16字节，一条向量加载就完了，
# 在途的字节太少，藏不住显存的延迟（讲义里的利特尔定律）。一个program处理`BLOCK_M`行，块就是`BLOCK_M x BLOCK_N`：
#
# | 量 | 形状 | 写法 |
# |---|---|---|
# | 行号 | `(BLOCK_M,)` | `pid * BLOCK_M + tl.arange(0, BLOCK_M)` |
# | 块的地址 | `(BLOCK_M, BLOCK_N)` | `in_ptr + rows[:, None] * in_row_stride + cols[None, :]` |
# | mask | `(BLOCK_M, BLOCK_N)` | `(rows[:, None] < n_rows) & (cols[None, :] < n_cols)` |
# | 每行的最大值、和 | `(BLOCK_M,)` | `tl.max(x, axis=1)`、`tl.sum(num, axis=1)` |
# | 广播回块上 | `(BLOCK_M, 1)` | `m[:, None]`、`d[:, None]` |
#
# $M$不一定是`BLOCK_M`的倍数：最后一个program的行号可能超过$M$，所以`mask`要管行。只管列的内核在GPU上照样运行，
# 最后几行读写到张量之外：可能是别的张量的数据，也可能是非法地址。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序在float64里计算参考结果（`torch.softmax(x.double(), dim=1)`），按输入的dtype定容差：bfloat16的相对容差是
# $8 \times 10^{-3}$（它只有8位有效的二进制位）。它还带着「沿错了轴」的模型`wrong_axis_model`：最大值或和沿`axis=0`
# 归约时，同一个program的几行之间逐列做了运算，结果取决于`BLOCK_M`：

# %%
from reduction_lab.labs.softmax_rows_triton import default_block_m, wrong_axis_model

x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0))
print("参考的第 0 行和：      ", round(torch.softmax(x.double(), dim=1)[0].sum().item(), 6))
print("都沿 axis=0，第 0 列和：", round(wrong_axis_model(x, 4)[:4, 0].sum().item(), 6), "（前 4 行逐列归一）")
print("BLOCK_M 的默认值（N = 1024）：bfloat16", default_block_m(1024, torch.bfloat16),
      "，float32", default_block_m(1024, torch.float32))

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/softmax-rows-triton/softmax_rows.py`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它；文件末尾的包装函数`softmax`已经写好：它按$N$与dtype
# 选`BLOCK_M`（`rows_per_program`），也接受`block_m=`指定。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("softmax-rows-triton")), language="python")

# %% [markdown]
# ## 陷阱：mask只管了列
#
# 在参考解的一个副本里把`mask`改成只管列（一行一个program时这样写是对的），再评分。第一个用例只有1行，
# 默认的`BLOCK_M`是16：唯一的program里另外15行全在张量之外。Triton解释器在越界发生之前报出，评分程序指向`mask`那一行：

# %% tags=["broken-copy"]
import shutil

broken = shutil.copytree(lab_dir, lab_dir.with_name("softmax-rows-broken"), dirs_exist_ok=True)
src = (broken / "softmax_rows.py").read_text(encoding="utf-8")
src = src.replace("mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)", "mask = cols[None, :] < n_cols", 1)
(broken / "softmax_rows.py").write_text(src, encoding="utf-8")
labs.check("softmax-rows-triton", broken, bench=False)

# %% [markdown]
# ## 验证：Triton（`--backend triton`）
#
# 与命令行`reduction-lab lab check softmax-rows-triton`相同。用例里有bfloat16、float16与float32，
# `BLOCK_M`取默认值、1和16，$M$不是`BLOCK_M`倍数的形状，以及行距大于$N$的视图。“访存计数”在Triton解释器里数读写的元素。

# %%
result = labs.check("softmax-rows-triton", lab_dir)
result

# %% [markdown]
# ## 对比：一个program几行，读写的字节不变
#
# 一个program处理几行不改变读写的总量：`count_memory()`数出的读写在`BLOCK_M = 1`与默认值下相同（每个元素各一次），
# 变的是program的个数，和每个线程同时在途的字节。包装函数的warp数按块的元素数选（4096个以内4个warp）：

# %%
if result.passed:
    from reduction_lab import count_memory

    mine = labs.op("softmax-rows-triton", lab_dir)
    M, N = 64, 1024
    x = torch.randn(M, N).to(torch.bfloat16).to(rl.DEVICE)
    for bm in (1, default_block_m(N, x.dtype)):
        with count_memory() as rep:
            mine(x, block_m=bm)
        print(f"BLOCK_M = {bm:2d}：{-(-M // bm):3d} 个 program，读 {rep.elements_loaded} 个、写 {rep.elements_stored} 个元素"
              f"（{rep.bytes_loaded} 字节读入）")
else:
    print("先让上面的评分全部通过")

# %%
print(f"{'N':>6} {'dtype':>9} {'BLOCK_M':>8} {'每个线程的字节':>14} {'BLOCK_M = 1 时':>14}")
for n in (512, 1024, 2048, 4096):
    for dt in (torch.bfloat16, torch.float32):
        bn = 1 << (n - 1).bit_length()
        bm = default_block_m(n, dt)
        warps = 4 if bm * bn <= 4096 else 8 if bm * bn <= 16384 else 16
        one = 4 if bn <= 4096 else 8
        per_thread = bm * bn * dt.itemsize // (warps * 32)
        print(f"{n:>6} {str(dt)[6:]:>9} {bm:>8} {per_thread:>14} {bn * dt.itemsize // (one * 32):>14}")

# %% [markdown]
# 默认的`BLOCK_M`让每个线程至少有64字节在途，bfloat16与float32一样；`BLOCK_M = 1`时短行的bfloat16每个线程只有8到32字节。
# 在GPU上，`lab check`在全部用例通过之后在262144 x 256的bfloat16上计时：默认的`BLOCK_M`、`BLOCK_M = 1`、`torch.softmax`
# 与设备拷贝`copy_`。本课程自己的内核在H200上的扫描见[16位输入与向量加载](../../triton/half-precision/)一讲。

# %% [markdown]
# ## 扩展
#
# - 把`tl.exp`换成`tl.exp2`：先把$x - m$乘以$\log_2 e$。结果一样吗？GPU上哪个快？
# - 在GPU上用`block_m=`扫一遍1到16，看看$N = 512$、4096时最快的是几行；与讲义里H200的扫描表对照；
# - $N = 8192$的bfloat16时默认的`BLOCK_M`是几？为什么一行已经够了？
# - 行号为什么转成int64？算一算$M \times N$多大时32位的`rows * in_row_stride`会溢出。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check softmax-rows-triton`全部通过；
# - [ ] 能说出二维块里行号、列号、mask、每行的最大值各是什么形状，`[:, None]`做了什么；
# - [ ] 能说出mask只管列时，哪个program、哪几行越界；
# - [ ] 能说出一个program几行不改变读写的字节数，改变的是每个线程在途的字节；
# - [ ] 在GPU上跑通计时，比较默认的`BLOCK_M`与`BLOCK_M = 1`。
