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
# # 实验：按行求和（CUDA C与TileLang）
#
# 讲义：[树形归约与__syncthreads()](../../cuda/tree-reduction/)、[TileLang的归约](../../tilelang/reduce/)。
# 这一页是一个notebook：下载后在本地运行（`pip install`本包之后），或者照着它在终端里用命令行完成。
#
# ## 学习目标
#
# - 用CUDA C写出一行一个线程块的按行求和：步长循环、共享内存、树形归约、`__syncthreads()`；
# - 知道`__syncthreads()`为什么不能放进`if (tid < s)`，以及模拟器怎样指出它；
# - 用TileLang写出同一个归约：`T.Serial`走过列块，块内`T.reduce_sum`；
# - 用评分程序检查两个实现，与`torch.sum`对比，在GPU上量出带宽占设备拷贝的百分之几。
#
# 两条命令开始（没有GPU时一切在CPU上的模拟器里运行）：
#
# ```shell
# reduction-lab lab start reduce-sum-cuda      # 骨架复制到 ./labs/reduce-sum-cuda
# reduction-lab lab check reduce-sum-cuda      # 评分
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
cuda_dir = labs.start("reduce-sum-cuda")          # 已有的文件不会被覆盖
tilelang_dir = labs.start("reduce-sum-tilelang")
print("模式：", rl.MODE)
print("CUDA C：", cuda_dir / "reduce_sum.cu")
print("TileLang：", tilelang_dir / "reduce_sum.py")

# %% [markdown]
# ## 概念：树形归约
#
# 一行有$N$个数，一个线程块有$B$个线程。先让第$t$个线程把第$t, t+B, t+2B, \dots$列加起来，
# 得到$B$个部分和放进共享内存；再每一步把后一半加到前一半上（*顺序寻址*），
# $\log_2 B$步之后`sdata[0]`就是整行的和。$B = 8$时：
#
# ```
# 第 0 步   s0  s1  s2  s3  s4  s5  s6  s7      8 个部分和（每个线程一个）
#           |   |   |   |   |   |   |   |
#           +---+---+---+---+   |   |   |      s = 4：线程 0..3 各加上 sdata[tid + 4]
# 第 1 步   a0  a1  a2  a3
#           +---+---+           s = 2：线程 0..1 各加上 sdata[tid + 2]
# 第 2 步   b0  b1
#           +---+               s = 1：线程 0 加上 sdata[1]
# 第 3 步   c0                  = 整行的和
# ```
#
# 每一步之前，上一步的结果必须全部写完：这就是每一步之后的`__syncthreads()`。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64计算参考结果，再按$\text{atol} = 10^{-5}\max(1, \sqrt{N}/8)$、$\text{rtol} = 10^{-5}$比较。

# %%
def reduce_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum(dim=1)


x = torch.randn(16, 256, device=rl.DEVICE)
print(reduce_sum_reference(x)[:4])

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/reduce-sum-cuda/reduce_sum.cu`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("reduce-sum-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：分支里的`__syncthreads()`
#
# 把屏障写进`if (tid < s)`，`tid >= s`的线程就到不了它。这是未定义行为：可能死锁，也可能碰巧算对
# （在H200上它算对了），所以GPU不会替你发现。模拟器在第一次发生时报告`BarrierDivergenceError`，
# 指出屏障所在的行和两边各有哪些线程：

# %%
from reduction_lab import simt
from reduction_lab.cuda_kernels import launch

try:
    launch("tree_demo.cu", "tree_bad_sync", grid=1, block=64, args=(torch.ones(64), torch.zeros(1)),
           shared_bytes=64 * 4, mode="sim")
except simt.BarrierDivergenceError as e:
    print(str(e).split(" / ")[0])

# %% [markdown]
# 你的内核里犯了同样的错误，评分程序会给出同样的诊断，并指向你的文件里的那一行。
#
# 在GPU上评分时，评分程序先用模拟器跑一个小用例（2行 x 300列），因为GPU不报告屏障发散、竞争和越界。
# 发现屏障发散、死循环或越界访问时，用例不在GPU上运行：挂起的内核要重启才能结束；越界的读写可能变成一次非法访存，
# 之后这个Python进程（notebook的内核）里的每个CUDA调用都会报同一个错，直到重启。小用例上没有越界、大用例上才越界时，
# 评分在出错的那个用例之后停下，说明原因；重启之后，用`REDUCTION_LAB_MODE=sim`在模拟器里评分，它会指出越界的那一行。

# %% [markdown]
# ## 调试：在内核里`printf`
#
# 内核里可以`printf`：在模拟器里，格式与C的`printf`相同，每个执行到它的线程一行，按线程编号排好。
# 评分程序把每个用例印出的行记在那个用例上，报告里摘出第一个失败的用例的前20行，终端不会被十几个用例的输出淹没。
# `printf`不用包含头文件（GPU上的编译器NVRTC没有`<cstdio>`，包含它会得到一条编译错误的诊断）。
# 下面在参考解的一个副本里印出每行前两个线程的部分和，再让树形归约少做最后一步（`s > 1`）：

# %% tags=["broken-copy"]
import shutil

debug_dir = shutil.copytree(cuda_dir, cuda_dir.with_name("reduce-sum-debug"), dirs_exist_ok=True)
src = (debug_dir / "reduce_sum.cu").read_text(encoding="utf-8")
src = src.replace("        acc += row_in[j];\n", "        acc += row_in[j];\n"
                  "    if (tid < 2) printf(\"row %lld tid %u partial %.3f\\n\", (long long)row, tid, acc);\n", 1)
src = src.replace("s > 0; s >>= 1", "s > 1; s >>= 1", 1)    # 错误：少做最后一步，sdata[1] 没有加进来
(debug_dir / "reduce_sum.cu").write_text(src, encoding="utf-8")
labs.check("reduce-sum-cuda", debug_dir, bench=False)

# %% [markdown]
# 这个错误评分程序认得出来，诊断指向循环那一行：`s > 1`让循环做完`s = 2`就停了，奇数号槽位合起来的那一半
# （`sdata[1]`）没有加进`sdata[0]`。认不出来的错误就要靠印出的中间值：这里用例1只有一行，印出的部分和
# 说明步长循环没有问题（每个线程都加了自己的那几个元素），要查的是后面的树形归约。
# 在GPU上评分时也一样：驱动在同步时把`printf`写到进程的标准输出（notebook的单元格里原本看不到），评分程序把它收进
# 那个用例，报告照样摘出来；只是各线程的顺序没有保证。
# 盯着一个没通过的用例反复改时，只评它：`reduction-lab lab check reduce-sum-cuda --case 1`
# （`labs.check(..., cases=[1])`），编号是成绩表的`#`列；其余用例不运行，结论只说选中的那几个，也不计时。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check reduce-sum-cuda`、`pytest --lab reduce-sum-cuda --backend cuda`相同。
# 表格里的用例与课程原来的测试一致，另加不规整的形状和课程的报错约定。

# %%
result_cuda = labs.check("reduce-sum-cuda", cuda_dir)
result_cuda

# %% [markdown]
# ## TileLang的骨架

# %%
Code(filename=str(labs.skeleton_path("reduce-sum-tilelang")), language="python")

# %% [markdown]
# ## 验证：TileLang（`--backend tilelang`）

# %%
result_tilelang = labs.check("reduce-sum-tilelang", tilelang_dir)
result_tilelang

# %% [markdown]
# ## 对比：与`torch.sum`
#
# 同一个输入，三个实现的结果相差多少（浮点加法的顺序不同，结果在最后几位上不同）。

# %%
if result_cuda.passed and result_tilelang.passed:
    x = torch.randn(64, 3000, device=rl.DEVICE)
    ref = x.double().sum(dim=1)
    for name, fn in [("torch.sum", lambda t: t.sum(dim=1)),
                     ("你的 CUDA C", labs.op("reduce-sum-cuda", cuda_dir)),
                     ("你的 TileLang", labs.op("reduce-sum-tilelang", tilelang_dir))]:
        err = (fn(x).double() - ref).abs().max().item()
        print(f"{name:<14} 与 float64 的最大差 {err:.2e}")
else:
    print("先让上面两个评分全部通过")

# %% [markdown]
# 在GPU上，`lab check`在全部用例通过之后还会计时：你的内核、`torch.sum`和设备拷贝`copy_`，
# 报告GB/s与占拷贝带宽的百分比。一行一个线程块、256个线程的树形归约在4096x4096上能到多少，
# 自己量一量，再对照[性能实测](../../bench/)里生产版内核的数字。

# %% [markdown]
# ## 扩展：存储体冲突
#
# 树形归约用的是顺序寻址：同一步里相邻线程读相邻的字，没有存储体冲突。换成交错寻址
# （`index = 2 * s * tid`）会怎样？讲义[存储体冲突](../../cuda/bank-conflicts/)用模拟器的计数器回答了这个问题；
# 实验[bank-conflicts](../bank-conflicts/)让你亲手消除一个32路冲突，并在GPU上量出提速。
# 全套基准测试：`reduction-lab bench bank-conflicts`。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check reduce-sum-cuda`全部通过（模拟器：没有屏障发散、竞争或越界）；
# - [ ] 能说出每个`__syncthreads()`保护的是哪一次读；
# - [ ] 能解释为什么屏障不能放进`if (tid < s)`，以及为什么GPU上“没挂起”不等于没错；
# - [ ] `reduction-lab lab check reduce-sum-tilelang`全部通过，能说出`T.ceildiv`处理了什么；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
