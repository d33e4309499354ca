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
# # 实验：warp洗牌的按行求和（CUDA C）
#
# 讲义：[warp洗牌](../../cuda/warp-shuffle/)；`mask`的规则见[库里的归约原语](../../cuda/library-primitives/)。
# 先做过[按行求和](../reduce-sum/)的树形归约更好：这个实验把线程块内的那一步换成warp洗牌。
#
# ## 学习目标
#
# - 用`__shfl_down_sync`在一个warp内5步归约32个数，说出每一步lane 0读的是哪个lane；
# - 搭出两级的块内归约：每个warp一个数写进共享内存，一次`__syncthreads()`，第一个warp再洗牌一次；
# - 说出`mask`必须包含什么（执行洗牌的lane和被读的源lane），以及为什么线程块大小必须是32的倍数；
# - 处理两种“多出来”的线程：行尾之外的线程，和第二级里没有对应warp的lane；
# - 用评分程序检查内核，用模拟器的计数器与树形归约比较共享内存访问和屏障的次数。
#
# ```shell
# reduction-lab lab start warp-reduce-cuda      # 骨架复制到 ./labs/warp-reduce-cuda
# reduction-lab lab check warp-reduce-cuda      # 评分；也可以 pytest --lab warp-reduce-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("warp-reduce-cuda")          # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "warp_reduce.cu")

# %% [markdown]
# ## 概念：两级归约
#
# 一行有$N$个数，一个线程块有$B$个线程（$B$是32的倍数），也就是$W = B / 32$个warp。
#
# 1. 第$t$个线程把第$t, t+B, t+2B, \dots$列加进寄存器`acc`（和树形归约一样）；
# 2. 每个warp内：`acc += __shfl_down_sync(FULL_MASK, acc, offset)`，offset依次是16、8、4、2、1。
#    lane $l$读lane $l + \text{offset}$的值（超过31时读回自己的）。5步之后lane 0手里是本warp 32个部分和的总和；
# 3. 每个warp的lane 0把它写进`warp_sums[warp]`，然后`__syncthreads()`；
# 4. 第一个warp读回这$W$个数（lane $\ge W$的取0），再洗牌一次，lane 0写出结果。
#
# ```
# 线程块 B = 256：8 个 warp
#   warp 0: 32 个部分和 --5 次洗牌--> lane 0 ─┐
#   warp 1: 32 个部分和 --5 次洗牌--> lane 0 ─┤  写 warp_sums[0..7]
#   ...                                       │  __syncthreads()（唯一的一次）
#   warp 7: 32 个部分和 --5 次洗牌--> lane 0 ─┘
#   warp 0: warp_sums[0..7] 和 24 个 0 --5 次洗牌--> lane 0 = 整行的和
# ```
#
# 与树形归约相比，warp内的交换从寄存器到寄存器，不经过共享内存，也不需要屏障；
# 共享内存只放每个warp的一个数，整个线程块只有一次`__syncthreads()`。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64计算参考结果，按$\text{atol} = 10^{-5}\max(1, \sqrt{N}/8)$、$\text{rtol} = 10^{-5}$比较。
# 评分程序还带着这个算法在float64里的模型`model`（按线程的部分和、两级洗牌），
# 用它算出几种常见错误会得到的结果，与你的输出比较，说出最可能的原因：

# %%
from reduction_lab.labs.warp_reduce_cuda import model


def reduce_sum_reference(x: torch.Tensor) -> torch.Tensor:
    return x.double().sum(dim=1)


x = torch.randn(4, 1000)
ref = reduce_sum_reference(x)
print("参考：            ", ref.tolist())
print("两级洗牌的模型：  ", model(x, 256).tolist())
print("只有第 0 个 warp：", model(x, 256, second=False).tolist())

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/warp-reduce-cuda/warp_reduce.cu`），也就是
# `lab start`复制给你的文件。按TODO(1)到TODO(5)完成它。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("warp-reduce-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：`mask`里没有被读的lane
#
# 第二级只有$W$个有效的数，于是很容易想到只让lane $< W$的线程参加，`mask`写成`(1u << W) - 1`。
# 但offset = 16时lane 0要读lane 16，而lane 16不在`mask`里：读到的值是未定义的。
# 真实GPU不会报错，结果可能碰巧是对的。模拟器在第一次发生时报告`WarpSyncError`，指出是哪一行、哪个lane：

# %%
from pathlib import Path

from reduction_lab import simt
from reduction_lab.cuda_kernels import launch

demo = Path("mask_demo.cu")
demo.write_text("""
extern "C" __global__ void partial_mask(const float *in, float *out)
{
    unsigned int lane = threadIdx.x % 32;
    float v = in[lane];
    if (lane < 8)                                        // 只有 8 个 lane 参加，mask = 0xff
        for (int offset = 16; offset > 0; offset >>= 1)
            v += __shfl_down_sync(0xffu, v, offset);     // lane 0 读 lane 16：不在 mask 里
    out[lane] = v;
}
""", encoding="utf-8")
try:
    launch(demo, "partial_mask", grid=1, block=32, args=(torch.ones(32), torch.zeros(32)), mode="sim")
except simt.WarpSyncError as e:
    print(str(e).split(" / ")[0])

# %% [markdown]
# 改法是让整个warp用`FULL_MASK`执行洗牌，没有对应warp的lane取0。另外两个陷阱评分程序也会指出：
#
# - 读`warp_sums`之前少了`__syncthreads()`：不同warp之间只有块级屏障能保证先后，洗牌只在一个warp之内交换；
# - `BLOCK_SIZE`不是32的倍数：最后一个warp不满，`FULL_MASK`点名了不存在的lane。
#
# 反过来，offset从1开始每步翻倍（1、2、4、8、16）**不是**错误：每一步lane 0读的都是上一步已经合好的一段，
# 5步之后它同样得到32个数的和，只是加法的顺序不同。模型里换一下顺序就能看到：

# %%
x = torch.randn(3, 1000)
print("16, 8, 4, 2, 1：", model(x, 256).tolist())
print("1, 2, 4, 8, 16：", model(x, 256, (1, 2, 4, 8, 16), (1, 2, 4, 8, 16)).tolist())
print("只到 offset 2： ", model(x, 256, (16, 8, 4, 2)).tolist(), "（少了一步：奇数 lane 的值没加进来）")

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check warp-reduce-cuda`、`pytest --lab warp-reduce-cuda --backend cuda`相同。
# 除了课程原来的形状和报错约定，还用32、96（3个warp，不是2的幂）和1024个线程的线程块各跑一个用例。
#
# 调试时可以在内核里`printf`（不用包含头文件）：每个用例印出的行记在那个用例上，报告摘出第一个失败的用例的前20行，见[按行求和的实验](../reduce-sum/)。

# %%
result = labs.check("warp-reduce-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：与树形归约
#
# 同一个输入，课程的树形归约`reduce_sum_rows`（[树形归约与__syncthreads()](../../cuda/tree-reduction/)）与你的内核，
# 每个线程块的共享内存访问和屏障次数（模拟器的计数器，两种模式下都是精确的），以及与float64参考的差：

# %%
if result.passed:
    M, N, B = 8, 3000, 256
    x = torch.randn(M, N)
    ref = x.double().sum(dim=1)
    runs = [("树形归约 reduce_sum_rows", "reduce_sum.cu", "reduce_sum_rows", (x, torch.empty(M), N, N)),
            ("你的 warp 洗牌", lab_dir / "warp_reduce.cu", "warp_reduce_rowwise_kernel", (torch.empty(M), x, M, N))]
    for name, src, kernel, args in runs:
        rep = launch(src, kernel, grid=M, block=B, args=args, defines={"BLOCK_SIZE": B}, mode="sim")
        out = args[1] if kernel == "reduce_sum_rows" else args[0]
        print(f"{name:<24} 每块：共享内存读 {rep.shared_load_requests // M:>3} 次、写 {rep.shared_store_requests // M:>3} 次，"
              f"__syncthreads {rep.barriers // M:>2} 次；与 float64 的最大差 {(out.double() - ref).abs().max().item():.1e}")
    mine = labs.op("warp-reduce-cuda", lab_dir)             # 当前模式下（gpu 模式在 GPU 上）运行
    xd = x.to(rl.DEVICE)
    print("当前模式下与 torch.sum 的最大差：", (mine(xd) - xd.sum(dim=1)).abs().max().item())
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 树形归约每一步都要读写共享内存并等一次屏障；warp洗牌只让每个warp写一次、第一个warp读一次，屏障只有一次。
# 在GPU上，`lab check`在全部用例通过之后还会在4096x4096上计时：你的内核、`torch.sum`和设备拷贝`copy_`。
# 对这个访存受限的归约，块内那一步怎么写对带宽影响不大，决定速度的是加载循环——
# 对照[库里的归约原语](../../cuda/library-primitives/)里几种写法在H200上的数字。

# %% [markdown]
# ## 扩展
#
# - 把两级都换成`__shfl_xor_sync`（蝶形）：每个lane都得到和，评分仍然通过。什么时候需要“人人有份”？（提示：softmax的分母）；
# - 把`BLOCK_SIZE`改成512或1024再评分、再计时：第二级的warp数变了，结果不变吗？带宽呢？
# - sm_80起整数可以用一条`__reduce_add_sync`归约一个warp；float没有这个指令。
#   用[库里的归约原语](../../cuda/library-primitives/)里的cooperative groups写法`cg::reduce`重写第3步，比较编译出来的指令。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check warp-reduce-cuda`全部通过（模拟器：没有mask错误、竞争、越界或未初始化的读）；
# - [ ] 能说出offset = 16、8、4、2、1每一步lane 0读的是哪个lane，以及为什么倒过来也对；
# - [ ] 能说出`mask`必须包含哪些lane，为什么第二级要让整个warp参加、多余的lane取0；
# - [ ] 能说出整个线程块为什么只需要一次`__syncthreads()`，它保护的是哪一次读；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
