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
# # 实验：线程块簇的按行求和（CUDA C）
#
# 讲义：[线程块簇上的长行softmax](../../cuda/cluster-softmax/)（其中「在模拟器里运行簇内核」一节）；
# 块内的归约用[warp洗牌](../../cuda/warp-shuffle/)，先做过[warp洗牌的按行求和](../warp-reduce/)更好。
#
# ## 学习目标
#
# - 把一行交给一个*线程块簇*（thread block cluster）：用`__cluster_dims__`声明簇的形状，
#   用`cluster.block_rank()`得到块在簇里的编号，按编号把一行的列分给簇里的几个线程块；
# - 经*分布式共享内存*（distributed shared memory，DSMEM）读别的块的共享内存：`cluster.map_shared_rank(&partial, r)`；
# - 说出两次`cluster.sync()`各保护什么：第一次保证“先写完、再读”，第二次保证“读完之前谁也不退出”；
# - 认出簇的两种错误（读之前少了簇屏障、块在别人还要读它时退出）和写在分支里的簇屏障；
# - 用模拟器的计数器数出DSMEM的读写次数和簇屏障的次数。
#
# ```shell
# reduction-lab lab start cluster-reduce-cuda      # 骨架复制到 ./labs/cluster-reduce-cuda
# reduction-lab lab check cluster-reduce-cuda      # 评分；也可以 pytest --lab cluster-reduce-cuda --backend cuda
# ```
#
# 没有GPU时内核在CPU模拟器里运行；有GPU时要计算能力9.0以上（H100、H200等Hopper起的GPU才有线程块簇），
# 更早的GPU上评分程序说明原因，改在模拟器里运行用例。

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

lab_dir = labs.start("cluster-reduce-cuda")          # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "cluster_reduce.cu")

# %% [markdown]
# ## 概念：一个簇一行
#
# 一行有$N$个数。网格有$M \times C$个线程块，每$C$个相邻的块组成一个簇（$C$ = `CLUSTER_SIZE`），
# 线程块`blockIdx.x`属于第$\lfloor \text{blockIdx.x} / C \rfloor$个簇，第$r$个簇负责第$r$行。
# 一个线程块有$B$个线程（$B$ = `BLOCK_SIZE`）。
#
# 1. **分列（按块号交错）**：把一行切成$B$列一段，第$k$段归簇里编号$k \bmod C$的块。
#    编号为`rank`的块的第`tid`个线程从第`rank * B + tid`列起，步长$C \cdot B$。
#    $N < B$时只有0号块分到列，别的块的部分和是0；$N$不是$C \cdot B$的倍数时最后一轮有的块少分一些——
#    循环条件`j < cols`把这两种情况都处理了；
# 2. **块内归约**：和warp洗牌实验一样，两级洗牌，线程0把本块的和写进共享内存里的`partial`；
# 3. **簇内合并**：`cluster.sync()`之后，0号块的线程0依次读`*cluster.map_shared_rank(&partial, r)`，
#    $r = 0, \dots, C-1$，写出`out[row]`；
# 4. **再等一次**：`cluster.sync()`，所有块都等0号块读完再退出。
#
# ```
# 一行 N = 2500 列，C = 4 块的簇，B = 256：每轮 C * B = 1024 列
#   列:     0..255  256..511  512..767  768..1023 | 1024..1279 ... | 2048..2303  2304..2499
#   块:     rank 0  rank 1    rank 2    rank 3    | rank 0     ... | rank 0      rank 1
#
#   rank 0: partial ─┐                           ┐
#   rank 1: partial ─┤ cluster.sync()            │ 0 号块：total = Σ *map_shared_rank(&partial, r)
#   rank 2: partial ─┤ （都写完了，对簇可见）     │          out[row] = total
#   rank 3: partial ─┘                           ┘
#                      cluster.sync()（0 号块读完了，大家才退出）
# ```
#
# 分布式共享内存的读走SM之间的网络，不经过显存；一个簇的线程块同时被调度到同一个GPC里的SM上，
# 所以它们可以互相等待（`cluster.sync()`），这是普通的几个线程块做不到的。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64计算参考结果，按$\text{atol} = 10^{-5}\max(1, \sqrt{N}/8)$、$\text{rtol} = 10^{-5}$比较。
# 它还带着这个算法在float64里的模型：`counts`给出每块读了哪些列（各读几次），`model`按它求和，
# 并可以只加一部分块的`partial`。评分程序用它们算出几种常见错误会得到的结果，与你的输出比较：

# %%
from reduction_lab.labs.cluster_reduce_cuda import counts, model


def reduce_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum(dim=1)


torch.manual_seed(0)
x = torch.randn(3, 2500)
print("参考：                ", [round(v, 4) for v in reduce_sum_reference(x).tolist()])
print("一个簇（4 块）的模型：", [round(v, 4) for v in model(x, 256, 4).tolist()])
print("只有 0 号块的部分和： ", [round(v, 4) for v in model(x, 256, 4, ranks=[0]).tolist()])
w = counts(2500, 256, 4)
print("各块分到的列数：", w.sum(1).int().tolist(), "；每列正好一次：", bool((w.sum(0) == 1).all()))

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/cluster-reduce-cuda/cluster_reduce.cu`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它。簇的形状写在内核的前置声明上
# （`__cluster_dims__(CLUSTER_SIZE, 1, 1)`），定义处保持`extern "C" __global__ void 名字`的写法。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("cluster-reduce-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：少了任何一次`cluster.sync()`
#
# 真实GPU上这两种错误常常不出错：0号块读`partial`的时候，别的块多半已经写完、也还没退出。
# 模拟器按CUDA的规则检查每一次DSMEM访问，在第一次违规时指出是哪一行、哪两个块。
# 讲义的例子`cluster_demo.cu`里有两个故意少了一次`cluster.sync()`的内核：

# %%
from reduction_lab import simt
from reduction_lab.cuda_kernels import KERNEL_DIR, launch

xs = torch.randn(2, 500)
for kernel in ("cluster_row_sum_no_first_sync", "cluster_row_sum_no_final_sync"):
    try:
        launch(KERNEL_DIR / "cluster_demo.cu", kernel, grid=2 * 4, block=128, args=(xs, torch.zeros(2), 500),
               mode="sim")
    except (simt.SharedMemoryRaceError, simt.DsmemExitedBlockError) as e:
        print(f"{kernel}：{type(e).__name__}\n  {str(e).split(' / ')[0]}\n")

# %% [markdown]
# - 第一个：`__syncthreads()`只排定本块的线程，0号块读第1块的`partial`时，第1块可能还没写——*簇内跨线程块的竞争*；
# - 第二个：0号块读完之前，第1块已经走到内核末尾。GPU上块一退出，它的共享内存就被回收，
#   读到的是无效的值，也可能让整个内核出错——*访问已退出的块*。
#
# 第三个陷阱是把`cluster.sync()`写进`if (rank == 0)`：簇屏障要等簇里每一块的每一个线程，
# 只有一部分线程到达时GPU上会死锁。评分程序在你的文件里发现这三种错误时，都会指出文件、行和改法，
# 还会指出越界的簇内编号（`r <= CLUSTER_SIZE`，或者把`blockIdx.x`当成了簇内编号）、有重叠或空隙的分列，
# 以及只加了0号块的部分和。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check cluster-reduce-cuda`、`pytest --lab cluster-reduce-cuda --backend cuda`相同。
# 除了课程原来的形状和报错约定，还有要走好几轮的长行（$N$不是$C \cdot B$的倍数）、32个线程的线程块，
# 以及2块和8块的簇（步长里把簇大小写死成4的内核在这两个用例上漏掉或重复一些列）。
#
# 调试时可以在内核里`printf`（不用包含头文件）：每个用例印出的行记在那个用例上，报告摘出第一个失败的用例的前20行，见[按行求和的实验](../reduce-sum/)。

# %%
result = labs.check("cluster-reduce-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：簇的大小与模拟器的计数器
#
# 同一个输入，用你的内核分别以1、2、4、8块的簇运行（模拟器里，计数在两种模式下都是精确的）：
# DSMEM的读写次数、簇屏障的次数（每块每经过一次`cluster.sync()`计1），以及与float64参考的差。

# %%
if result.passed:
    M, N, B = 8, 3000, 256
    x = torch.randn(M, N)
    ref = x.double().sum(dim=1)
    src = lab_dir / "cluster_reduce.cu"
    for c in (1, 2, 4, 8):
        out = torch.empty(M)
        rep = launch(src, "cluster_reduce_rowwise_kernel", grid=M * c, block=B, args=(out, x, M, N),
                     defines={"BLOCK_SIZE": B, "CLUSTER_SIZE": c}, mode="sim")
        print(f"簇 = {c} 块：每行 DSMEM 读 {rep.dsmem_load_elements // M} 个 float、写 {rep.dsmem_store_elements // M} 个；"
              f"簇屏障 {rep.cluster_barriers:>3} 次（{rep.cluster_barriers // (M * c)} 次/块）；"
              f"全局内存读 {rep.global_load_bytes // M:>5} 字节/行；与 float64 的最大差 {(out.double() - ref).abs().max().item():.1e}")
    print(rep)
    lab = labs.get("cluster-reduce-cuda")
    dev = "cuda" if lab.run_mode(rl.MODE) == "gpu" else "cpu"     # 没有线程块簇的 GPU 上也在模拟器里运行
    mine = labs.op("cluster-reduce-cuda", lab_dir)
    xd = x.to(dev)
    print("当前模式下与 torch.sum 的最大差：", (mine(xd) - xd.sum(dim=1)).abs().max().item())
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 0号块读自己的`partial`不经过网络（`map_shared_rank(&partial, 0)`就是本块的地址），所以每行的DSMEM读是$C - 1$个，
# 全局内存读不随簇变：每个元素仍然只读一次。簇越大，一行由越多的SM一起读——
# 行数少、行很长时，一个块一行只能用上少数几个SM，簇把一行摊给更多的SM。
# 在GPU上，`lab check`在全部用例通过之后还会在4096x4096上计时：你的内核、`torch.sum`和设备拷贝`copy_`。

# %% [markdown]
# ## 扩展
#
# - 改用连续分段：第`rank`块读第`rank * per`到`min(rank * per + per, cols)`列（`per`向上取整），评分仍然通过。
#   两种分法的全局内存访问在GPU上有什么不同？用`ncu`比较；
# - 把合并改成“推”：每块经`map_shared_rank`把自己的`partial`写进0号块共享内存里的数组`parts[CLUSTER_SIZE]`，
#   `cluster.sync()`之后0号块只读本块的共享内存。看看DSMEM的计数怎样从读变成写；
# - 让簇里每一块都得到整行的和（softmax的分母就需要这样）：每块读全部$C$个`partial`。
#   这时最后一次`cluster.sync()`还需要吗？可以换成`barrier_arrive()`/`barrier_wait()`吗？对照讲义里的`softmax_cluster_rows`。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check cluster-reduce-cuda`全部通过（模拟器：没有簇内竞争、访问已退出的块或发散的簇屏障）；
# - [ ] 能说出`blockIdx.x`、`cluster.block_rank()`与行号之间的关系，以及为什么`map_shared_rank`的编号不是`blockIdx.x`；
# - [ ] 能说出每块读哪些列，$N < B$和$N$不是$C \cdot B$的倍数时为什么仍然每列正好读一次；
# - [ ] 能说出两次`cluster.sync()`各保护哪一次访问，为什么`__syncthreads()`代替不了它们；
# - [ ] 能从模拟器的计数器读出每行的DSMEM读次数与每块的簇屏障次数，并解释它们。
