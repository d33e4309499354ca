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
# # 实验：16字节的向量加载（CUDA C，bfloat16按行求和）
#
# 讲义：[树形归约与__syncthreads()](../../cuda/tree-reduction/)的「16字节一包：对齐与请求数」、
# [16位输入与向量加载](../../triton/half-precision/)。先做过[按行求和（CUDA C与TileLang）](../reduce-sum/)更好：
# 块内归约这里已经写好，要写的只是读。
#
# ## 学习目标
#
# - 用16字节一包（8个bfloat16）读一行：一条128位的加载指令，一个warp一次请求512字节；
# - 说出16字节的加载为什么要求地址对齐，以及$N$不是8的倍数时哪些行首不对齐；
# - 把一行分成三段：开头逐个读到16字节边界、中间整包读、结尾逐个读，三段正好拼成整行；
# - 用模拟器的计数器核对：读的字节不变，加载请求少了。
#
# ```shell
# reduction-lab lab start vector-loads-cuda
# reduction-lab lab check vector-loads-cuda       # 或 pytest --lab vector-loads-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("vector-loads-cuda")
print("模式：", rl.MODE, "；打开", lab_dir / "vec_row_sum.cu")

# %% [markdown]
# ## 概念：三段
#
# 第$r$行从`in + r * cols`开始，每个bfloat16两个字节。张量的开头对齐到16字节（CPU上64字节、GPU上256字节），
# 所以第$r$行的行首距离上一个16字节边界是$2rN \bmod 16$字节；$N$是8的倍数时每行都对齐，否则各行错开：
#
# $$\text{head}_r = \min\left(\frac{(16 - 2rN \bmod 16) \bmod 16}{2},\ N\right),\qquad
#   n_\text{pack} = \left\lfloor\frac{N - \text{head}_r}{8}\right\rfloor$$
#
# 开头`head`个元素逐个读，接着$n_\text{pack}$个整包，剩下不足一包的结尾再逐个读。评分程序用同样的算法算出每行的`head`：

# %%
from reduction_lab.labs.vector_loads_cuda import heads

for N in (128, 1003):
    x = torch.zeros(6, N, dtype=torch.bfloat16)
    hs = heads(x)
    print(f"N = {N:4d}：各行的 head = {hs}，整包数 = {[(N - h) // 8 for h in hs]}")

# %% [markdown]
# ## PyTorch参考实现
#
# 参考结果是float64的`x.double().sum(dim=1)`，结果与它比较（float32累加的容差）。评分程序还带着几种错误的模型：
# 漏了结尾、漏了开头、只加了整包、`head`没有限制在`cols`之内、整包的步长写成1；
# 不对齐的加载不用模型，模拟器在那次加载上直接停下。

# %%
from reduction_lab.labs.vector_loads_cuda import model

x = torch.randn(3, 1003, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
hs = heads(x)
print("参考：      ", [round(v, 3) for v in x.double().sum(1).tolist()])
print("漏了结尾：  ", [round(v, 3) for v in model(x, hs, "no-tail").tolist()])
print("只加了整包：", [round(v, 3) for v in model(x, hs, "packs-only").tolist()])

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/vector-loads-cuda/vec_row_sum.cu`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(4)完成它；`pack8`、`sum_pack`与最后的块内归约已经写好。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("vector-loads-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：直接从行首整包读
#
# 在参考解的一个副本里让整包从行首开始（不先读到边界）。课程的形状（$N = 128, 256$）每行都对齐，照样通过；
# $N = 1003$时第1行的行首在第2006字节，模拟器在这次16字节的加载上停下，指出是哪一行、哪个线程块。
# 在GPU上它是`misaligned address`：内核中止，这个进程之后的每个CUDA调用都报同一个错。

# %% tags=["broken-copy"]
import shutil

broken = shutil.copytree(lab_dir, lab_dir.with_name("vector-loads-broken"), dirs_exist_ok=True)
src = (broken / "vec_row_sum.cu").read_text(encoding="utf-8")
src = src.replace("const pack8 *pk = (const pack8 *)(row_in + head);", "const pack8 *pk = (const pack8 *)row_in;", 1)
(broken / "vec_row_sum.cu").write_text(src, encoding="utf-8")
labs.check("vector-loads-cuda", broken, bench=False)

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check vector-loads-cuda`相同。用例里有每行都对齐的课程形状、行首各不相同的$N = 1003$、
# 比一包还短的行、1个与32个warp的线程块；“访存计数”在模拟器里数读的字节与warp级的加载请求。

# %%
result = labs.check("vector-loads-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：逐个读与整包读
#
# 同一份输入，用你的内核与只逐个读的写法（把主循环换成逐个读8个元素）各跑一次，模拟器数出读的字节与请求
# （两种模式下都在模拟器里运行，数字是精确的）：

# %%
if result.passed:
    from reduction_lab.cuda_kernels import launch

    mine = (lab_dir / "vec_row_sum.cu").read_text(encoding="utf-8")
    scalar = mine.replace("acc += sum_pack(pk[k]);",
                          "for (int e = 0; e < VEC; e++) acc += __bfloat162float(row_in[head + VEC * k + e]);", 1)
    (lab_dir.with_name("vector-loads-scalar.cu")).write_text(scalar, encoding="utf-8")
    x = torch.randn(8, 1003, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    for name, path in (("整包读", lab_dir / "vec_row_sum.cu"), ("逐个读", lab_dir.with_name("vector-loads-scalar.cu"))):
        out = torch.empty(8)
        rep = launch(path, "vec_row_sum_kernel", grid=8, block=256, args=(out, x, 8, 1003),
                     defines={"BLOCK_SIZE": 256}, mode="sim")
        ok = torch.allclose(out.double(), x.double().sum(1), atol=1e-3)
        print(f"{name}：读 {rep.global_load_bytes} 字节，{rep.global_load_requests:3d} 次请求，结果正确：{ok}")
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`在全部用例通过之后在16384 x 4096的bfloat16上计时：你的内核、`x.sum(dim=1, dtype=float32)`
# 与设备拷贝`copy_`。包装函数里每个线程同时在途几包、在H200上差多少，见讲义「16字节一包」一节的扫描表。

# %% [markdown]
# ## 扩展
#
# - 主循环每个线程一次只发一包：改成先发出两包（`pk[k]`与`pk[k + blockDim.x]`）再相加，读法要怎么改才不越界？
#   对照`reduce_sum.cu`的`sum_packs`；
# - 行首的对齐与$N$有什么关系？$N$是4的倍数、不是8的倍数时，有几种不同的`head`？
# - 换成float32：一包是几个元素？`head`的公式哪里要改？

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check vector-loads-cuda`全部通过；
# - [ ] 能算出某一行的`head`和整包数，说出$N$是8的倍数时为什么每行都对齐；
# - [ ] 能说出不对齐的16字节加载在GPU上会怎样，模拟器在哪里报出；
# - [ ] 能说出整包读为什么读的字节不变、请求少了；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
