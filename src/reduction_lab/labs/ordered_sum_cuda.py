"""实验 ordered-sum-cuda：整个数组求和，一次启动、结果每次逐位相同，不用 ``grid.sync()``：每块领一个票号，
按票号读自己那一段（网格步长），块内归约，再按票号的顺序轮流把部分和加进 ``*out``（CUDA C）。

讲义：docs/cuda/simulator.md 的「线程块之间的等待」、docs/numerics.md（确定性）；实验页：docs/labs/ordered-sum.ipynb。
先做「确定的全数组求和」实验（:mod:`.grid_sum_cuda`）：那里用协作启动的 ``grid.sync()`` 等整个网格，网格必须同时
驻留；这里只等前一段，票号保证等的块已经开始，所以不要求同时驻留。

诊断：段号用了 ``blockIdx.x``（只在线程块按编号开始时才等得到：模拟器按编号从大到小逐块执行时报出，
``SpinWaitError.order_dependent``）、用普通的读等 ``turn``（``plain_load``：GPU 上编译器可以只读一次）、加完没有
轮到下一段（永远等下去）、少了 ``__threadfence()``（全局内存的竞争）、用原子加合并（模拟器数 ``*out`` 的写，
应为每块一次普通的写）、网格步长的三种错误（同 full-sum-cuda）。gpu 模式下全部通过之后计时，并把同一个输入
运行 20 次，数出几种不同的结果。
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from ..simt import kernel_signature
from .core import time_against
from .full_sum_cuda import REPEATS, U32, repeat_results, stride_hint, sum_op
from .grading import Hint, error_line, find_line, zh_part
from .grid_sum_cuda import GridSumCuda, grid_for
from .hints import cuda_error_hint

FILE = "ordered_sum.cu"
KERNEL = "ordered_sum_kernel"
SIGNATURE = ["float *", "int *", "const float *", "int64_t"]
PARAMS = "(float *out, int *counters, const float *in, int64_t n)"

FIXES = {
    "global-race": "对照报错的那一行，常见的两种：\n"
                   "① *out += s 的前后各要一次 __threadfence()（TODO(4)）：等到轮次之后的那一次，让上一段对 *out 的写"
                   "本块读得到；加完之后的那一次，让本块的写先于 atomicExch 发布下一轮、对别的块可见；\n"
                   "② *out 只让线程 0 写，而且是在等到轮次之后。",
    "spin-wait": "TODO(4)：加完之后 atomicExch(&counters[1], seg + 1) 轮到下一段；等的条件是 counters[1] == seg"
                 "（票号 0 的块一来就轮到，不等）。每块都要领一个票号（TODO(1)），否则后面的段永远等不到。",
    "barrier-divergence": "block_sum 里有 __syncthreads()：每个线程都要调用它（不要写在 if (tid == 0) 里）；"
                          "领票号之后的 __syncthreads() 也写在分支外面。",
    "uninitialized-read": "seg_s 由线程 0 写：__syncthreads() 之后别的线程才能读它（TODO(1)）。"
                          "warp_sums 只有前 n_warps 个槽位被写过：用给出的 block_sum，不要改它。",
    "out-of-bounds": "网格步长循环的条件是 j < n；counters 只有两个元素：counters[0] 发票号，counters[1] 是轮次。",
    "warp-sync": "warp_sum 要整个 warp 一起调用：block_sum 由线程块里的每个线程调用，不要写在分支里。",
}


def make_op(path: Path, mode: str, block: int, grid: int | None = None):
    """课程的算子接口：``ordered_sum(x, out=None)`` -> 0 维张量。检查输入（一维、非空、float32、连续、设备），把 ``out``
    清零，分配清零的 ``counters``（两个 int32），以 ``grid``（None：:func:`.grid_sum_cuda.grid_for`）x ``block`` 启动
    学习者的内核。``op.with_report(x, out)`` 返回 ``(out, 模拟器的计数器或 None, 线程块数)``。"""
    return sum_op(path, KERNEL, mode, block, grid, grid_for,
                  lambda out, x, g: (out, torch.zeros(2, dtype=torch.int32, device=x.device), x, x.numel()))


def sum_tolerance(x: torch.Tensor, grid: int, block: int) -> float:
    """float32 求和与 float64 参考之差的容许值：2 u sqrt(k) sum|x|，k 是最长的加法链（网格步长的轮数、块内两级各 5 步
    洗牌、再按段的顺序加 gridDim.x 次）。"""
    k = -(-x.numel() // (grid * block)) + 10 + grid
    return 2 * U32 * math.sqrt(k) * float(x.double().abs().sum()) + 1e-30


class OrderedSumCuda(GridSumCuda):
    """评分的流程、网格与报错约定同 :class:`.grid_sum_cuda.GridSumCuda`；不同的是内核的参数（``counters`` 代替
    ``partial``）、计数用例与诊断。"""

    name = "ordered-sum-cuda"
    title = "CUDA C：按票号轮流累加的全数组求和"
    lecture = "cuda/simulator.md"
    notebook = "labs/ordered-sum.ipynb"
    files = (FILE,)
    kernel = KERNEL
    file, signature, params = FILE, SIGNATURE, PARAMS

    def cases(self, mode):
        from .cases import ordered_sum_cases

        return ordered_sum_cases(mode)

    def make_op(self, path: Path, mode: str, block: int, grid: int | None = None):
        return make_op(path, mode, block, grid)

    def tolerance(self, x: torch.Tensor, grid: int, block: int) -> float:
        return sum_tolerance(x, grid, block)

    def sim_args(self, x: torch.Tensor, grid: int) -> tuple:
        return torch.zeros(()), torch.zeros(2, dtype=torch.int32), x, x.numel()

    def counters(self, rep, x, grid: int, block: int, impl, err: float):
        """计数用例：``*out`` 每块一次普通的写（不是原子加），每个元素读一次（另有每块读一次 ``*out``）。"""
        n = x.numel()
        text = impl["text"]
        # 只数写进第一个参数（out）的：交出轮次可以用 volatile 写或 cuda::atomic_ref 的 store 写 counters[1]，那不算
        out_name = kernel_signature(text, KERNEL)[0][0]
        writes = rep.global_store_bytes_by_array.get(out_name, 0) // 4
        if writes != grid:
            line = find_line(text, r"atomic\w*\s*\(\s*out\b") or find_line(text, r"\*\s*out\s*\+?=")
            return False, err, f"写 *out {writes} 次", Hint(
                "out-writes", f"*out 被普通地写了 {writes} 次，应为每块一次（{grid} 块）", FILE, line,
                f"模拟器的计数器 global_store_bytes_by_array = {rep.global_store_bytes_by_array}",
                "轮到本段时由线程 0 做一次 *out += s。用 atomicAdd(out, s) 合并，各块加的先后就又取决于调度了"
                "（「全数组求和」实验）；这里先后由票号决定，同一时刻只有一块在加，不需要原子加。")
        if rep.global_load_bytes < 4 * (n + grid):
            return False, err, "访存量不对", Hint(
                "memory-loads", f"从显存读了 {rep.global_load_bytes // 4} 个数，至少应有 n + gridDim.x = {n + grid}"
                "（每个元素读一次，每块读一次 *out）", FILE, find_line(text, r"in\s*\["), "",
                "网格步长循环里每个元素读一次：j 从 i 开始、每次加 stride。")
        return True, err, f"{grid} 块、*out 每块写一次、按{'票号' if rep.schedule != 'grid' else '段'}的顺序轮流累加", None

    def wrong_answer(self, x, got: float, ref: float, tol: float, grid: int, block: int, impl) -> Hint:
        text = impl["text"]
        xs, n, first, same = self.answer_context(x, got, ref, tol, grid, block)
        if got == 0.0 and ref != 0.0:
            return Hint("not-written", "*out 还是 0：没有块把部分和加上去", FILE,
                        find_line(text, r"\*\s*out\s*\+?=|\bout\s*\["), first,
                        "TODO(4)：轮到本段之后，线程 0 做 *out += s。")
        if not math.isfinite(got):
            return Hint("not-finite", f"结果是 {got}", FILE, None, first, "检查累加器的初值：float acc = 0.0f。")
        h = stride_hint(xs, got, tol, grid, block, text, first, FILE, "TODO(2)")
        if h is not None:
            return h
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "先在小的用例上对照 torch.sum：检查起点 i（用票号 seg）、网格步长 stride，以及每块只加一次部分和。")

    def on_error(self, case, exc, paths):
        text = paths[FILE].read_text(encoding="utf-8")
        msg = re.sub(r"。确实要依赖这个顺序时[^。]*$", "", zh_part(str(exc)))   # 评分程序里学习者传不了 schedule
        if getattr(exc, "order_dependent", False):
            line = find_line(text, r"\bseg\w*\s*=\s*\(?\s*(int\s*\)\s*)?blockIdx") or \
                find_line(text, r"\bint\s+seg\s*=") or error_line(exc)
            return Hint("order-dependent", "段号用了 blockIdx.x：只有线程块按编号顺序开始时才等得到（模拟器："
                        "SpinWaitError）", FILE, line, detail=msg,
                        fix="TODO(1)：线程 0 领票号 seg_s = atomicAdd(&counters[0], 1)，__syncthreads() 之后全块读 "
                            "int seg = seg_s；起点（TODO(2)）和等的轮次（TODO(4)）都用 seg。CUDA 不保证线程块开始的顺序，"
                            "票号按开始的先后发，号比它小的块一定已经开始了。")
        if getattr(exc, "plain_load", False):
            return Hint("plain-load", "用普通的读等轮次（模拟器：SpinWaitError）", FILE, error_line(exc), detail=msg,
                        fix="TODO(4)：while (atomicAdd(&counters[1], 0) != seg) { }。普通的读，nvcc 可以只读一次、"
                            "把值留在寄存器里，GPU 上就永远等下去；别的块同时在写，这样读也是数据竞争。")
        return cuda_error_hint(exc, FILE, KERNEL, text, PARAMS, FIXES)

    def bench(self, impl):
        n = 1 << 26
        x = torch.randn(n, device="cuda")
        out = torch.empty((), device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=0, out=out)}
        method, rows = time_against(calls, 4 * n + 4, x, f"n = 2^26 float32，block = {impl['block']}，"
                                                        f"grid = {grid_for(n, impl['block'], 'gpu')}，"
                                                        f"你的内核含把 counters 清零的一次启动")
        distinct, ref = repeat_results(op, x)
        note = (f"{method} 确定性：同一个输入运行 {REPEATS} 次，得到 {len(distinct)} 种不同的结果（{distinct[0]:.9g}"
                f"{'' if len(distinct) == 1 else f' … {distinct[-1]:.9g}'}），float64 参考 {ref:.9g}"
                f"（各段按票号的顺序轮流累加；讲义「CUDA C 模拟器」的「线程块之间的等待」）。")
        return note, rows
