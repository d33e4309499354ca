"""实验 grid-sum-cuda：整个数组求和，一次启动、结果每次逐位相同：网格步长 + 块内归约 + ``grid.sync()`` +
0 号块按固定的顺序合并各块的部分和（CUDA C，cooperative groups 的网格屏障）。

讲义：docs/numerics.md（原子加的先后与确定性）、docs/cuda/seven-versions.md（网格步长）；实验页：docs/labs/grid-sum.ipynb。
先做「全数组求和」实验（:mod:`.full_sum_cuda`）：那里各块的部分和用 ``atomicAdd`` 合并，加的先后每次不同；
这里每块把部分和写进 ``partial[blockIdx.x]``，``grid.sync()`` 之后 0 号块的线程按固定的下标读回、块内归约、写 ``*out``。
内核用了 ``cg::this_grid()``，启动器协作启动它（gpu 模式 cudaLaunchCooperativeKernel，网格必须同时驻留；模拟器在
``grid.sync()`` 处按 sm_90 核对同一条件）。

诊断：少了 ``grid.sync()``（0 号块读到别的块还没写的部分和：模拟器的全局内存数据竞争；GPU 上常常碰巧对）、
``grid.sync()`` 写在分支里（网格屏障发散，GPU 上死锁）、每块都写 ``*out``、0 号块只加了自己的部分和或少加了
最后几块、读了没写过的槽位（``partial`` 在启动前填成 NaN）、网格步长的三种错误（同 full-sum-cuda）、用了原子操作
（模拟器数 ``atomic_ops``，应为 0）。gpu 模式下全部通过之后计时，并把同一个输入运行 20 次，数出几种不同的结果。
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from .core import time_against
from .full_sum_cuda import REPEATS, U32, FullSumCuda, repeat_results, sm_count, stride_hint, sum_op
from .grading import Hint, find_line
from .hints import cuda_error_hint

FILE = "grid_sum.cu"
KERNEL = "grid_sum_kernel"
SIGNATURE = ["float *", "float *", "const float *", "int64_t"]
PARAMS = "(float *out, float *partial, const float *in, int64_t n)"
#: 模拟器里网格至多这么多块
SIM_GRID = 8

FIXES = {
    "global-race": "对照报错的那一行，常见的三种：\n"
                   "① 0 号块读 partial[b] 之前，整个网格要 grid.sync() 一次（TODO(3)）：__syncthreads() 只排定同一线程块的"
                   "线程，一次启动里只有协作启动的 grid.sync() 能让别的块「先写完、再读」；\n"
                   "② 每块只写自己的槽位 partial[blockIdx.x]（不是 partial[tid]），只让线程 0 写；\n"
                   "③ *out 只让 0 号块的线程 0 写：if (blockIdx.x == 0) { … if (tid == 0) *out = t; }。",
    "barrier-divergence": "grid.sync() 写在 if (blockIdx.x == 0) 的外面：网格里每一块的每一个线程都要到达它，"
                          "只有一部分到达时 GPU 上会死锁。\n"
                          "block_sum 里有 __syncthreads()：0 号块的每个线程都要调用它（不要写在 if (tid < …) 里）。",
    "uninitialized-read": "warp_sums 只有前 n_warps 个槽位被写过：用给出的 block_sum，不要改它。",
    "out-of-bounds": "网格步长循环的条件是 j < n；0 号块只读 b < gridDim.x 的 partial[b]（partial 只有 gridDim.x 个）。",
    "warp-sync": "warp_sum 要整个 warp 一起调用：block_sum 由线程块里的每个线程调用，不要写在分支里。",
}


def grid_for(n: int, block: int, mode: str) -> int:
    """评分程序的线程块数：够用就好（ceil(n / block)），但不超过上限——GPU 上是 SM 数 x 每个 SM 1024 个线程
    （协作启动要全部同时驻留：只用每个 SM 一半的线程，寄存器多一些也放得下），模拟器里是 :data:`SIM_GRID`。"""
    cap = sm_count() * max(1, 1024 // block) if mode == "gpu" else SIM_GRID
    return max(1, min(-(-n // block), cap))


def make_op(path: Path, mode: str, block: int, grid: int | None = None):
    """课程的算子接口：``grid_sum(x, out=None)`` -> 0 维张量。检查输入（一维、非空、float32、连续、设备），把 ``out``
    清零，分配填成 NaN 的 ``partial``（gridDim.x 个），以 ``grid``（None：:func:`grid_for`）x ``block`` 启动学习者的内核。
    ``op.with_report(x, out)`` 返回 ``(out, 模拟器的计数器或 None, 线程块数)``。"""
    return sum_op(path, KERNEL, mode, block, grid, grid_for,
                  lambda out, x, g: (out, torch.full((g,), float("nan"), dtype=torch.float32, device=x.device), x,
                                     x.numel()))


def sum_tolerance(x: torch.Tensor, grid: int, block: int) -> float:
    """float32 求和与 float64 参考之差的容许值：2 u sqrt(k) sum|x|，k 是最长的加法链（网格步长的轮数、块内两级各 5 步
    洗牌、0 号块读部分和的轮数、再两级洗牌）。"""
    k = -(-x.numel() // (grid * block)) + 10 + -(-grid // block) + 10
    return 2 * U32 * math.sqrt(k) * float(x.double().abs().sum()) + 1e-30


class GridSumCuda(FullSumCuda):
    """网格步长、评分的流程与报错约定同 :class:`.full_sum_cuda.FullSumCuda`；不同的是算子（多一个 ``partial``）、
    容差、计数用例与诊断。"""

    name = "grid-sum-cuda"
    title = "CUDA C：确定的全数组求和（grid.sync()）"
    lecture = "numerics.md"
    notebook = "labs/grid-sum.ipynb"
    files = (FILE,)
    kernel = KERNEL
    file, signature, params = FILE, SIGNATURE, PARAMS

    def cases(self, mode):
        from .cases import grid_sum_cases

        return grid_sum_cases(mode)

    def make_op(self, path: Path, mode: str, block: int, grid: int | None = None):
        return make_op(path, mode, block, grid)

    def tolerance(self, x: torch.Tensor, grid: int, block: int) -> float:
        return sum_tolerance(x, grid, block)

    def sim_args(self, x: torch.Tensor, grid: int) -> tuple:
        return torch.zeros(()), torch.full((grid,), float("nan")), x, x.numel()

    def counters(self, rep, x, grid: int, block: int, impl, err: float):
        """计数用例：原子操作 0 次、网格屏障每块 1 次、读 n 个元素加 gridDim.x 个部分和。"""
        n = x.numel()
        if rep.atomic_ops:
            return False, err, f"原子操作 {rep.atomic_ops} 次", Hint(
                "atomics", f"用了原子操作（{rep.atomic_ops} 次）：这个实验按固定的顺序合并，不用原子操作", FILE,
                find_line(impl["text"], r"\batomic\w*\s*\("),
                "原子加的先后每次运行都可能不同，float 的加法又不满足结合律，结果可能差最后几位（「全数组求和」实验"
                "数过几种）。", "每块写 partial[blockIdx.x]，grid.sync() 之后由 0 号块按下标顺序读回、归约、写 *out。")
        if rep.grid_barriers != grid:
            return False, err, f"网格屏障 {rep.grid_barriers} 次", Hint(
                "grid-barriers", f"每块经过了 {rep.grid_barriers / grid:g} 次 grid.sync()，应为 1 次", FILE,
                find_line(impl["text"], r"grid\.sync\s*\("), f"模拟器的计数器 grid_barriers = {rep.grid_barriers}"
                f"（{grid} 块）", "部分和都写好之后、0 号块读它们之前，只要一次 grid.sync()；每多一次，整个 GPU 就多等一次。")
        if rep.global_load_bytes != 4 * (n + grid):
            return False, err, "访存量不对", Hint(
                "memory-loads", f"从显存读了 {rep.global_load_bytes // 4} 个 float，应为 n + gridDim.x = {n + grid}"
                "（每个元素读一次，0 号块再读一遍各块的部分和）", FILE, find_line(impl["text"], r"in\s*\["), "",
                "网格步长循环里每个元素只读一次；0 号块的每个线程读 partial[tid]、partial[tid + blockDim.x]……各一次。")
        return True, err, f"{grid} 块、原子操作 0 次、网格屏障每块 1 次、读 {n + grid} 个 float", None

    def wrong_answer(self, x, got: float, ref: float, tol: float, grid: int, block: int, impl) -> Hint:
        text = impl["text"]
        xs, n, first, same = self.answer_context(x, got, ref, tol, grid, block)
        if math.isnan(got):
            return Hint("unwritten-partial", "结果是 NaN：0 号块读到了没写过的 partial 槽位（评分程序在启动前把它填成 NaN）",
                        FILE, find_line(text, r"\+=\s*partial\s*\[") or find_line(text, r"partial\s*\["), first,
                        "每块的线程 0 写 partial[blockIdx.x]（TODO(2)）；0 号块只读 b < gridDim.x 的槽位（TODO(4)），"
                        "而且是在 grid.sync() 之后。")
        part = torch.zeros(grid, dtype=torch.float64)        # 各块的部分和（正确的网格步长分法）
        j = torch.arange(n)
        part.index_add_(0, (j % (grid * block)) // block, xs)
        bound = find_line(text, r"gridDim\.x\s*-\s*1")
        if bound is not None and same(float(part[:-1].sum())):
            # 放在「没写出」之前：只有一块时 0 号块一个槽位也没读，结果也是 0
            return Hint("partial-bound", f"少加了最后一块的部分和：0 号块只读了 {grid - 1} 个槽位，共有 gridDim.x = {grid} 个",
                        FILE, bound, first, "循环条件是 b < gridDim.x（不是 b < gridDim.x - 1）。")
        if got == 0.0 and ref != 0.0:
            return Hint("not-written", "*out 还是 0：0 号块的线程 0 没有写出结果", FILE,
                        find_line(text, r"\*\s*out\s*=|\bout\s*\["), first, "TODO(4)：if (tid == 0) *out = t;（在 0 号块里）。")
        if not math.isfinite(got):
            return Hint("not-finite", f"结果是 {got}", FILE, None, first, "检查累加器的初值：float acc = 0.0f。")
        if grid > 1 and same(float(part[0])):                # 0 号块只加了自己的部分和
            return Hint("own-partial-only", "结果只是 0 号块自己的部分和：别的块写进 partial 的数没有加进来", FILE,
                        find_line(text, r"partial\s*\[\s*b\b") or find_line(text, r"partial\s*\["), first,
                        "TODO(4)：0 号块的第 tid 个线程读 partial[tid]、partial[tid + blockDim.x]……直到 b < gridDim.x，"
                        "再 block_sum。")
        if grid > 1 and same(float(part[:-1].sum())):
            return Hint("partial-bound", f"少加了最后一块的部分和：0 号块只读了 {grid - 1} 个槽位，共有 gridDim.x = {grid} 个",
                        FILE, find_line(text, r"gridDim\.x\s*-\s*1") or find_line(text, r"partial\s*\["), first,
                        "循环条件是 b < gridDim.x（不是 b < gridDim.x - 1）。")
        h = stride_hint(xs, got, tol, grid, block, text, first, FILE, "TODO(1)")
        if h is not None:
            return h
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "先在小的用例上对照 torch.sum：检查起点 i、网格步长 stride、partial 的下标 blockIdx.x，"
                    "以及 0 号块读回 partial 的循环。")

    def on_error(self, case, exc, paths):
        return cuda_error_hint(exc, FILE, KERNEL, paths[FILE].read_text(encoding="utf-8"), PARAMS, FIXES)

    def bench(self, impl):
        n = 1 << 26
        x = torch.randn(n, device="cuda")
        out = torch.empty((), device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=0, out=out)}
        method, rows = time_against(calls, 4 * n + 4, x, f"n = 2^26 float32，block = {impl['block']}，"
                                                        f"grid = {grid_for(n, impl['block'], 'gpu')}（协作启动），"
                                                        f"你的内核含把 partial 填成 NaN 的一次启动")
        distinct, ref = repeat_results(op, x)
        note = (f"{method} 确定性：同一个输入运行 {REPEATS} 次，得到 {len(distinct)} 种不同的结果（{distinct[0]:.9g}"
                f"{'' if len(distinct) == 1 else f' … {distinct[-1]:.9g}'}），float64 参考 {ref:.9g}"
                f"（各块的部分和按固定的顺序合并；「全数组求和」实验用原子加，讲义「数值与确定性」）。")
        return note, rows
