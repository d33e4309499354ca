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
# # 实验：融合softmax（CUDA C）
#
# 讲义：[融合softmax与访存计数](../../triton/fused-softmax/)（同一个算法的Triton写法）、[-inf掩码](../../triton/masking/)、
# [warp洗牌](../../cuda/warp-shuffle/)。先做过[融合softmax（Triton）](../softmax-triton/)和
# [warp洗牌的按行求和](../warp-reduce/)更好：这个实验把两者合在一起，用CUDA C写出一行一个线程块的融合softmax。
#
# ## 学习目标
#
# - 用CUDA C写出融合softmax：整行读进共享内存，只从显存读一次、写一次；
# - 说出最大值的初值为什么是$-\infty$：行尾之外的线程不能改变最大值，初值0会让整行很负的行得到$0/0$；
# - 搭出“人人有份”的块内归约：warp蝶形归约、每个warp一个槽位、`__syncthreads()`、每个线程再归约一次；
# - 说出同一块共享内存用两次时，为什么需要第二次`__syncthreads()`；
# - 用模拟器的计数器数清每行从显存读写了多少字节。
#
# ```shell
# reduction-lab lab start softmax-cuda      # 骨架复制到 ./labs/softmax-cuda
# reduction-lab lab check softmax-cuda      # 评分；也可以 pytest --lab softmax-cuda --backend cuda
# ```

# %%
import torch

import reduction_lab as rl
from reduction_lab import labs

torch.manual_seed(0)                              # 随机输入固定下来：重新运行得到页面上的输出
lab_dir = labs.start("softmax-cuda")            # 已有的文件不会被覆盖
print("模式：", rl.MODE, "；打开", lab_dir / "softmax.cu")

# %% [markdown]
# ## 概念：一个线程块，一行，三步
#
# $$\mathrm{softmax}(x)_j = \frac{e^{x_j - m}}{s},\qquad m = \max_k x_k,\qquad s = \sum_k e^{x_k - m}$$
#
# 一个线程块负责一行，$B$个线程（$W = B/32$个warp），第$t$个线程负责第$t, t+B, t+2B, \dots$列：
#
# 1. **读进共享内存，求最大值**：`row_buf[j] = row_in[j]`，同时`m = fmaxf(m, v)`；`m`的初值是$-\infty$；
# 2. **块内最大值**：`warp_max`（蝶形，32个lane人人得到结果），lane 0写`red[warp]`，`__syncthreads()`，
#    每个线程再读回$W$个槽位（其余取$-\infty$）归约一次；**再**`__syncthreads()`：下一步还要写`red`；
# 3. **指数与和**：`e = expf(row_buf[j] - m)`写回`row_buf[j]`，累加成`s`，同样的块内归约（空槽位取0）；
#    最后`row_out[j] = row_buf[j] / s`。
#
# 整行只从显存读一次（第1步），后面两遍读的是共享内存；写也只有一次。
# 共享内存一行$N$个float，启动时作为动态共享内存给出（`extern __shared__ float row_buf[]`），
# 不申请更大的上限时每块48 KiB，所以$N \le 12288$；更长的行见[在线softmax](../online-softmax/)。

# %% [markdown]
# ## PyTorch参考实现
#
# 评分程序用float64的`torch.softmax`计算参考结果，逐元素按相对误差比较（$\text{rtol} = 10^{-5}$；
# $\text{atol} = 10^{-9}$只管下溢的值）：输出约为$1/N$，固定的绝对容差会比输出本身还大。下面在float32里算一行很负的数
# （$-1000$左右，评分的用例“整行是很大的负数”），对比最大值的两种初值：

# %%
def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=1)


def softmax_with_max_init(x: torch.Tensor, init: float) -> torch.Tensor:
    m = torch.clamp(x.max(dim=1, keepdim=True).values, min=init)   # 线程的 m 从 init 开始取最大值
    e = torch.exp(x - m)
    return e / e.sum(dim=1, keepdim=True)


x = torch.tensor([[-1000.0, -1001.0, -1002.0]])
print("参考：        ", softmax_reference(x).float().tolist())
print("初值 -inf：   ", softmax_with_max_init(x, float("-inf")).tolist())
print("初值 0：      ", softmax_with_max_init(x, 0.0).tolist(), "（exp(-1000) 下溢成 0：0 / 0）")

# %% [markdown]
# ## 骨架
#
# 下面是随包发布的骨架（`reduction_lab/labs/skeletons/softmax-cuda/softmax.cu`），也就是
# `lab start`复制给你的文件。`warp_max`与`warp_sum`已经写好；按TODO(1)到TODO(5)完成内核。

# %%
from IPython.display import Code

Code(filename=str(labs.skeleton_path("softmax-cuda")), language="cuda")

# %% [markdown]
# ## 陷阱：同一块共享内存用两次
#
# `red`先放各warp的最大值，再放各warp的和。第一次`__syncthreads()`之后，每个warp都去读`red[lane]`；
# 如果没有第二次屏障，跑得快的warp的lane 0可能在别的warp读完最大值之前就把和写进`red`——
# 那个warp读到的“最大值”其实是一个和。真实GPU上这多半碰巧不出错，模拟器在第一次发生时指出是哪一行、哪两个线程：

# %%
from pathlib import Path

from reduction_lab import simt
from reduction_lab.cuda_kernels import launch

demo = Path("reuse_demo.cu")
demo.write_text("""
extern "C" __global__ void reuse_without_barrier(const float *in, float *out)
{
    __shared__ float red[32];
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0)
        red[warp] = in[warp];              // 第一次用：各 warp 的一个数
    __syncthreads();
    float first = red[lane % 2];           // 每个线程读前两个槽位
    if (lane == 0)
        red[warp] = 2.0f * first;          // 第二次用：没有等别的 warp 读完
    out[threadIdx.x] = first;
}
""", encoding="utf-8")
try:
    launch(demo, "reuse_without_barrier", grid=1, block=64, args=(torch.ones(2), torch.zeros(64)), mode="sim")
except simt.SharedMemoryRaceError as e:
    print(str(e).split(" / ")[0][:400])

# %% [markdown]
# 改法是在第二次写之前`__syncthreads()`：所有warp都读完第一次的值，才允许改写。另外两个陷阱评分程序也会指出：
#
# - 最大值的初值写成0：整行是很大的负数时得到NaN（上面的参考实现演示了为什么）；
# - 后两遍又从`row_in`读：结果是对的，但“访存计数”用例会数出每行从显存读了两遍或三遍；
# - 最大值只做了warp内那一级（`warp_max(m)`之后没有经`red`合并）：每个warp以自己的最大值为基准求指数，
#   分母把基准不同的数加在一起。评分程序按线程与列的对应关系算出这种结果，认出来就指向`warp_max(m)`那一行。

# %% [markdown]
# ## 验证：CUDA C（`--backend cuda`）
#
# 与命令行`reduction-lab lab check softmax-cuda`、`pytest --lab softmax-cuda --backend cuda`相同。
# 除了课程原来的形状和报错约定，还有数值很大、整行是很大的负数的行，32、96和1024个线程的线程块，
# 以及在模拟器里数显存读写的“访存计数”用例（两种模式下都在模拟器里运行，计数是精确的）。
#
# 调试时可以在内核里`printf`（不用包含头文件）：每个用例印出的行记在那个用例上，报告摘出第一个失败的用例的前20行，见[按行求和的实验](../reduce-sum/)。

# %%
result = labs.check("softmax-cuda", lab_dir)
result

# %% [markdown]
# ## 对比：读了几遍显存
#
# 同一个输入，模拟器的计数器（两种模式下都是精确的）：你的内核每行从显存读写的字节数、共享内存的访问次数和屏障次数，
# 与逐步计算的PyTorch写法（每一步都把中间结果写回显存）应读写的元素数比较：

# %%
if result.passed:
    M, N, B = 8, 3000, 256
    x = torch.randn(M, N)
    out = torch.empty(M, N)
    rep = launch(lab_dir / "softmax.cu", "softmax_rowwise_kernel", grid=M, block=B, args=(out, x, M, N),
                 shared_bytes=4 * N, defines={"BLOCK_SIZE": B}, mode="sim")
    print(f"你的内核：每行从显存读 {rep.global_load_bytes // (4 * M)} 个、写 {rep.global_store_bytes // (4 * M)} 个 float"
          f"（N = {N}）；每块共享内存读 {rep.shared_load_requests // M} 次、写 {rep.shared_store_requests // M} 次，"
          f"__syncthreads {rep.barriers // M} 次")
    print(f"逐步计算（max、减、exp、sum、除，每步写回显存）：每行读 {5 * N + 2} 个、写 {3 * N + 2} 个元素")
    print("与 float64 参考的最大差：", (out.double() - torch.softmax(x.double(), 1)).abs().max().item())
    mine = labs.op("softmax-cuda", lab_dir)               # 当前模式下（gpu 模式在 GPU 上）运行
    xd = x.to(rl.DEVICE)
    print("当前模式下与 torch.softmax 的最大差：", (mine(xd) - torch.softmax(xd, 1)).abs().max().item())
else:
    print("先让上面的评分全部通过")

# %% [markdown]
# 屏障是3次：求最大值的那次归约两次（写槽位之后；改写槽位之前），求和的那次一次（之后没有人再写`red`）。
# 计数器在两种模式下相同（`tests/labs/test_labs.py`用参考解检查读写的字节数与屏障次数）。在GPU上，`lab check`在全部用例通过之后
# 还会在4096x4096上计时：你的内核、`torch.softmax`和设备拷贝`copy_`。这个内核读一次、写一次，
# 速度取决于加载循环能让多少字节同时在途——对照[性能实测](../../bench/)里本包的CUDA C softmax
# （每个线程一次读16字节、行留在寄存器里）在H200上的数字。

# %% [markdown]
# ## 扩展
#
# - 把加载换成`float4`（每个线程一次16字节，行首要16字节对齐，行尾逐个读），再评分、再计时；
# - 行不长时（例如$N \le 8B$）把本线程的元素留在寄存器里，不经过共享内存：这是本包`softmax.cu`的做法；
# - $N > 12288$时：用`max_dynamic_shared_bytes`申请更大的动态共享内存（sm_90上每块至多227 KiB），
#   或者改成[在线softmax](../online-softmax/)，一遍同时求最大值和分母，再读一遍归一化；
# - 两次块内归约能不能合成一次？提示：在线softmax的$(m, s)$对也可以按warp归约。

# %% [markdown]
# ## 检查清单
#
# - [ ] `reduction-lab lab check softmax-cuda`全部通过（模拟器：没有竞争、越界或未初始化的读，访存计数是$MN$读、$MN$写）；
# - [ ] 能说出最大值的初值为什么是$-\infty$，初值0在哪种行上出错；
# - [ ] 能说出每次块内归约为什么要两次`__syncthreads()`，各自保护的是哪一次读写；
# - [ ] 能说出为什么整行读进共享内存之后，显存只读一遍；
# - [ ] 在GPU上跑通计时，知道自己的内核达到设备拷贝带宽的百分之几。
