"""实验 full-sum-cuda：整个数组求和，一次启动：网格步长循环 + 块内两级 warp 洗牌 + 每块一次 ``atomicAdd``（CUDA C）。

讲义：docs/cuda/seven-versions.md（多级归约与版本 7 的网格步长）、docs/numerics.md（原子加的先后与确定性）；
实验页：docs/labs/full-sum.ipynb。
线程块数固定（:func:`grid_for`：GPU 上是 SM 数 x 每个 SM 常驻的块数，模拟器里至多 :data:`SIM_GRID` 块），不随 n 增长，
所以每个线程按网格步长读好几个元素；块内归约同 :mod:`.warp_reduce_cuda`；不同线程块之间没有屏障，只能用原子加合并。

诊断：没有网格步长循环（只加了前 grid x block 个元素）、步长只用了 blockDim.x（前面的元素被好几块重复加）、
起点没有加上 blockIdx.x * blockDim.x、只有第 0 个 warp 或第 0 块的和、不用原子操作的 ``*out += s``
（模拟器的全局内存数据竞争）、原子加做得太多（模拟器数 ``atomic_ops``：每块应只有一次）、累加器是整数。
gpu 模式下全部通过之后计时，并把同一个输入运行 20 次，数出原子加的先后带来几种不同的结果。
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from ..checks import check_out, check_vector
from .core import Lab, time_against
from .grading import Case, Hint, find_line
from .hints import cuda_error_hint
from .reduce_sum_cuda import check_signature
from .warp_reduce_cuda import block_size_from, block_size_hint

FILE = "full_sum.cu"
KERNEL = "full_sum_kernel"
SIGNATURE = ["float *", "const float *", "int64_t"]
PARAMS = "(float *out, const float *in, int64_t n)"
#: 模拟器里网格至多这么多块：n 稍大一些，每个线程就要按网格步长读好几个元素
SIM_GRID = 8
#: float32 的单位舍入
U32 = 2.0 ** -24
#: 确定性的检查：gpu 模式下同一个输入运行几次
REPEATS = 20

FIXES = {
    "global-race": "不同线程块之间没有先后，*out += s 是「读、加、写」三步：两块同时读到旧值，后写的那块把先写的覆盖掉。\n"
                   "TODO(5)：if (tid == 0) atomicAdd(out, s);（评分程序在启动前已经把 *out 清零）。",
    "shared-race": "lane 0 写完 warp_sums[warp] 之后、第 0 个 warp 读 warp_sums 之前，整个线程块要 __syncthreads() 一次。",
    "uninitialized-read": "warp_sums 只有前 n_warps 个槽位被写过：第 0 个 warp 里 lane >= n_warps 的线程取 0.0f；"
                          "n_warps 按 blockDim.x / 32 计算，不要写死（评分也用 32、96、1024 个线程的线程块）。",
    "out-of-bounds": "网格步长循环的条件是 j < n（不是 j <= n）；out 只有一个元素，所有线程块都加到 out[0]（*out）上。",
    "barrier-divergence": "__syncthreads() 写在 if (lane == 0) 与 if (warp == 0) 的外面：线程块里的每个线程都要到达它。",
    "warp-sync": "warp_sum 要整个 warp 一起调用（FULL_MASK）：第二级让第 0 个 warp 的 32 个 lane 都参加，"
                 "没有对应 warp 的 lane 取 0.0f。",
}


def sm_count() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def grid_for(n: int, block: int, mode: str) -> int:
    """评分程序的线程块数：够用就好（ceil(n / block)），但不超过上限——GPU 上是 SM 数 x 每个 SM 常驻的块数
    （2048 / block），模拟器里是 :data:`SIM_GRID`。"""
    cap = sm_count() * (2048 // block) if mode == "gpu" else SIM_GRID
    return max(1, min(-(-n // block), cap))


def make_op(path: Path, mode: str, block: int, grid: int | None = None):
    """课程的算子接口：``full_sum(x, out=None)`` -> 0 维张量。检查输入（一维、非空、float32、连续、设备），
    把 ``out`` 清零，再以 ``grid``（None：:func:`grid_for`）x ``block`` 启动学习者的内核。
    ``op.with_report(x, out)`` 返回 ``(out, 模拟器的计数器或 None, 线程块数)``。"""
    return sum_op(path, KERNEL, mode, block, grid, grid_for, lambda out, x, g: (out, x, x.numel()))


def sum_op(path: Path, kernel: str, mode: str, block: int, grid: int | None, grid_of, args_of):
    """两个全数组求和实验共用的算子：检查输入、把 ``out`` 清零，以 ``grid``（None：``grid_of(n, block, mode)``）x
    ``block`` 启动，内核的参数是 ``args_of(out, x, grid)``。"""
    from ..cuda_kernels import launch

    device = "cuda" if mode == "gpu" else "cpu"

    def run(x, out=None):
        check_vector(x, "x", dtypes=(torch.float32,), device=device)
        if out is None:
            out = torch.empty((), dtype=torch.float32, device=x.device)
        else:
            check_out(out, (), torch.float32, x.device)
        g = grid if grid is not None else grid_of(x.numel(), block, mode)
        out.zero_()
        rep = launch(path, kernel, grid=g, block=block, args=args_of(out, x, g), defines={"BLOCK_SIZE": block},
                     mode=mode)
        return out, rep, g

    def op(x, out=None):
        return run(x, out)[0]

    op.with_report = run
    return op


def repeat_results(op, x: torch.Tensor) -> tuple[list[float], float]:
    """确定性的检查（三个全数组求和实验共用）：同一个输入运行 :data:`REPEATS` 次，返回得到的不同结果（从小到大）
    与 float64 的参考值。"""
    values = [float(op(x)) for _ in range(REPEATS)]
    if x.is_cuda:
        torch.cuda.synchronize()
    return sorted(set(values)), float(x.double().sum())


def chain(n: int, grid: int, block: int) -> int:
    """一个结果经过的最长加法链：每个线程的网格步长循环、两级各 5 步洗牌、最多 ``grid`` 次原子加。"""
    return -(-n // (grid * block)) + 10 + grid


def sum_tolerance(x: torch.Tensor, grid: int, block: int) -> float:
    """float32 求和与 float64 参考之差的容许值：2 u sqrt(k) sum|x|（k 是 :func:`chain`，舍入误差的符号随机时的量级；
    严格的上界是 k u sum|x|）。"""
    return 2 * U32 * math.sqrt(chain(x.numel(), grid, block)) * float(x.double().abs().sum()) + 1e-30


def weights(n: int, grid: int, block: int, mistake: str) -> torch.Tensor:
    """几种常见错误下每个元素被加了几次（float64）。第 j 个元素在第 j // block 个「块长」里、是其中的第 j % block 个。"""
    j = torch.arange(n)
    if mistake == "block-stride":         # 步长写成 blockDim.x：第 b 块从 b * block 读到行尾，前面的元素被重复加
        return (torch.clamp(j // block, max=grid - 1) + 1).double()
    if mistake == "no-block-offset":      # 起点只有 tid：每块都读同样的元素
        return ((j % (grid * block)) < block).double() * grid
    if mistake == "first-warp-only":      # 只有第 0 个 warp 的和
        return ((j % block) < 32).double()
    if mistake == "first-block-only":     # 只有第 0 块加到了 out 上
        return ((j % (grid * block)) < block).double()
    raise ValueError(mistake)


def stride_hint(xs: torch.Tensor, got: float, tol: float, grid: int, block: int, text: str, first: str, file: str,
                loop_todo: str) -> Hint | None:
    """网格步长的三种错误（两个全数组求和实验共用）：没有循环（只加了前 grid x block 个）、步长只用了 blockDim.x、
    起点少了 blockIdx.x * blockDim.x。``loop_todo`` 是骨架里写循环的那一步。"""
    n = xs.numel()
    if n > grid * block and abs(got - float(xs[:grid * block].sum())) <= tol:
        return Hint("no-grid-stride", f"只加了前 grid x block = {grid * block} 个元素：每个线程只读了一个元素", file,
                    find_line(text, r"acc\s*\+="), first,
                    f"{loop_todo}：for (int64_t j = i; j < n; j += stride) acc += in[j];"
                    "线程块数是固定的，不随 n 增长，剩下的元素靠网格步长循环读完。")
    checks = [
        ("block-stride", "步长只用了 blockDim.x：第 b 块从第 b x blockDim.x 个元素一直读到末尾，前面的元素被好几块重复加了",
         r"stride\s*=", "TODO(1)：stride = (int64_t)gridDim.x * blockDim.x，整个网格的线程数。"),
        ("no-block-offset", "每个线程块都从同样的位置开始读：起点里少了 blockIdx.x * blockDim.x",
         r"\bi\s*=", "TODO(1)：i = (int64_t)blockIdx.x * blockDim.x + tid。"),
    ]
    for key, cause, where, fix in checks:
        if grid > 1 and abs(got - float((xs * weights(n, grid, block, key)).sum())) <= tol:
            return Hint(key, cause, file, find_line(text, where), first, fix)
    return None


class FullSumCuda(Lab):
    name = "full-sum-cuda"
    title = "CUDA C：全数组求和（网格步长与原子加）"
    lecture = "cuda/seven-versions.md"
    notebook = "labs/full-sum.ipynb"
    files = (FILE,)
    backend = "cuda"
    kernel = KERNEL

    def cases(self, mode):
        from .cases import full_sum_cases

        return full_sum_cases(mode)

    #: 学习者的文件、内核名、形参的类型与骨架里的参数表（子类换成自己的）
    file, signature, params = FILE, SIGNATURE, PARAMS

    def make_op(self, path: Path, mode: str, block: int, grid: int | None = None):
        return make_op(path, mode, block, grid)

    def tolerance(self, x: torch.Tensor, grid: int, block: int) -> float:
        return sum_tolerance(x, grid, block)

    def load(self, paths, mode):
        path = paths[self.file]
        text = path.read_text(encoding="utf-8")
        block = block_size_from(text)
        # 解析一遍：语法错误在这里报出
        check_signature(path, self.kernel, {"BLOCK_SIZE": block}, self.signature, self.params)
        return {"op": self.make_op(path, mode, block), "path": path, "mode": mode, "block": block, "text": text,
                "static": block_size_hint(self.file, text)}

    def run_case(self, impl, case: Case, mode):
        from . import cases as C

        block = case.block or impl["block"]
        # 计数用例：两种模式都在模拟器里运行（计数器是精确的）
        run_mode = "sim" if case.kind == "atomics" else mode
        if case.block is None and case.grid is None and run_mode == mode:
            op = impl["op"]
        else:
            op = self.make_op(impl["path"], run_mode, block, case.grid)
        if case.kind == "error":
            return C.run_vector_error_case(op, case, mode)
        x = C.make_input(case, run_mode)
        out, rep, grid = op.with_report(x)
        if run_mode == "gpu":
            torch.cuda.synchronize()
        ref = x.double().sum()
        got = float(out)
        err = abs(got - float(ref)) if math.isfinite(got) else float("nan")
        tol = self.tolerance(x, grid, block)
        if not err <= tol:
            return False, err, f"应为 {float(ref):.6g}，得到 {got:.6g}（grid = {grid}, block = {block}）", \
                self.wrong_answer(x, got, float(ref), tol, grid, block, impl)
        if case.kind == "atomics":
            return self.counters(rep, x, grid, block, impl, err)
        return True, err, f"grid = {grid}" if case.grid or case.block else "", None

    def counters(self, rep, x, grid: int, block: int, impl, err: float):
        """计数用例（模拟器的计数器）：每块一次原子加、每个元素读一次。"""
        n = x.numel()
        if rep.atomic_ops != grid:
            return False, err, f"原子加 {rep.atomic_ops} 次", self.atomics_hint(rep.atomic_ops, grid, block, impl)
        if rep.global_load_bytes != 4 * n:
            return False, err, "访存量不对", Hint(
                "memory-loads", f"从显存读了 {rep.global_load_bytes // 4} 个 float，应为 n = {n}（每个元素读一次）",
                FILE, find_line(impl["text"], r"in\s*\["), "", "网格步长循环里每个元素只读一次：j 从 i 开始、每次加 stride。")
        return True, err, f"{grid} 块、原子加 {rep.atomic_ops} 次、读 {n} 个 float", None

    def atomics_hint(self, ops: int, grid: int, block: int, impl) -> Hint:
        per = ops / grid
        text = impl["text"]
        return Hint("too-many-atomics", f"原子加做了 {ops} 次（{grid} 个线程块，每块 {per:g} 次）：每块应只做一次", FILE,
                    find_line(text, r"atomicAdd"),
                    f"模拟器的计数器 atomic_ops = {ops}；同一个地址上的原子加在 GPU 上一个接一个地执行，"
                    f"每块 {per:g} 次，{grid} 块就是 {ops} 次排队（每块一次只要 {grid} 次）。",
                    "先在块内归约（TODO(3)、TODO(4)：warp 内洗牌，再经 warp_sums 合并各 warp），"
                    "再只让线程 0 atomicAdd：if (tid == 0) atomicAdd(out, s);")

    @staticmethod
    def answer_context(x, got: float, ref: float, tol: float, grid: int, block: int):
        """wrong_answer 的共同开头：float64 的输入、n、提示的第一行，以及「得数等于 v」的判断。"""
        xs = x.detach().cpu().double()
        n = xs.numel()
        first = f"应为 {ref:.8g}，得到 {got:.8g}（n = {n}，grid = {grid}，block = {block}）"

        def same(v: float) -> bool:
            return abs(got - v) <= tol

        return xs, n, first, same

    def wrong_answer(self, x, got: float, ref: float, tol: float, grid: int, block: int, impl) -> Hint:
        text = impl["text"]
        xs, n, first, same = self.answer_context(x, got, ref, tol, grid, block)
        probe = functools.cache(lambda: self.probe_atomics(impl, block))   # 模拟器里数原子操作：至多一次
        if got == 0.0 and ref != 0.0:
            if probe() == 0:
                return Hint("not-written", "*out 还是 0：没有线程把结果加到 out 上（评分程序在启动前把它清零）", FILE,
                            find_line(text, r"atomicAdd|\*\s*out\s*\+?=|\bout\s*\["), first,
                            "TODO(5)：块内归约之后，if (tid == 0) atomicAdd(out, s);")
        if not math.isfinite(got):
            return Hint("not-finite", f"结果是 {got}", FILE, None, first,
                        "检查累加器的初值（float acc = 0.0f）与第二级里 lane >= n_warps 的线程取 0.0f。")
        if got == round(got) and ref != round(ref) and abs(got - ref) < 0.5 + 0.5 * n:
            return Hint("int-acc", "结果是整数：累加用了整数类型，每次加法都把小数部分截掉了", FILE,
                        find_line(text, r"\b(int|long|unsigned|int32_t|int64_t)\s+acc\b") or find_line(text, r"\bacc\s*="),
                        first, "部分和用 float：float acc = 0.0f;")
        h = stride_hint(xs, got, tol, grid, block, text, first, FILE, "TODO(2)")
        if h is not None:
            return h
        checks = [
            ("first-block-only", grid > 1, "结果只是第 0 个线程块的和：别的线程块没有加到 out 上",
             r"atomicAdd", "TODO(5)：每个线程块的线程 0 都要 atomicAdd(out, s)，不只是第 0 块（条件是 tid == 0，不是 i == 0）。"),
            ("first-warp-only", block > 32, "结果只是每块第 0 个 warp 的和：其他 warp 写进 warp_sums 的数没有加进来",
             r"atomicAdd", "TODO(4)：第 0 个 warp 读回 warp_sums[0..n_warps-1]（其余 lane 取 0），再 warp_sum 一次，然后才原子加。"),
        ]
        for key, applies, cause, where, fix in checks:
            if applies and same(float((xs * weights(n, grid, block, key)).sum())):
                return Hint(key, cause, FILE, find_line(text, where), first, fix)
        ops = probe()
        if ops is not None and ops > 4:
            return self.atomics_hint(ops, 4, block, impl)
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "先在小的用例上对照 torch.sum：检查起点 i、网格步长 stride、两级洗牌与 warp_sums 的下标，"
                    "以及只让线程 0 做原子加。")

    def probe_atomics(self, impl, block: int) -> int | None:
        """在模拟器里用 4 个线程块启动一次（n = 3000），返回原子操作的次数；内核出错时返回 None。"""
        from .. import simt

        x = torch.randn(3000, generator=torch.Generator().manual_seed(3))
        try:
            rep = simt.launch(str(impl["path"]), KERNEL, 4, block, (torch.zeros(()), x, 3000),
                              defines={"BLOCK_SIZE": block})
        except Exception:  # noqa: BLE001  错误本身由用例报出
            return None
        return rep.atomic_ops

    def on_error(self, case, exc, paths):
        return cuda_error_hint(exc, FILE, KERNEL, paths[FILE].read_text(encoding="utf-8"), PARAMS, FIXES)

    def extra_checks(self, impl, mode, paths):
        """模拟器检查（:func:`.core.cuda_precheck`）：n = 1000、3 个线程块，学习者的 BLOCK_SIZE 之外另用 32 与 96 个
        线程：每个线程要走好几轮网格步长，不用原子操作的 ``*out += s`` 在这里报出全局内存数据竞争
        （GPU 上只是偶尔少加几块）。"""
        if impl["static"] is not None:
            return [], [impl["static"]]
        from .. import simt
        from .core import cuda_precheck

        n, grid = 1000, 3
        x = torch.randn(n, generator=torch.Generator().manual_seed(1))
        blocks = list(dict.fromkeys((impl["block"], 32, 96)))

        def run(steps):
            for b in blocks:
                simt.launch(str(impl["path"]), self.kernel, grid, b, self.sim_args(x, grid), defines={"BLOCK_SIZE": b},
                            max_lane_steps=steps)

        return cuda_precheck(self, mode, paths, run, f"n = {n}，grid = {grid}，block = {'、'.join(map(str, blocks))}")

    def sim_args(self, x: torch.Tensor, grid: int) -> tuple:
        """模拟器检查里内核的参数（输出清零）。"""
        return torch.zeros(()), x, x.numel()

    def bench(self, impl):
        n = 1 << 26
        x = torch.randn(n, device="cuda")
        out = torch.empty((), device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=0, out=out)}
        method, rows = time_against(calls, 4 * n + 4, x, f"n = 2^26 float32，block = {impl['block']}，"
                                                        f"grid = {grid_for(n, impl['block'], 'gpu')}，你的内核含把 out 清零的一次启动")
        distinct, ref = repeat_results(op, x)
        spread = f"，最小 {distinct[0]:.9g}、最大 {distinct[-1]:.9g}，float64 参考 {ref:.9g}" if len(distinct) > 1 else \
            f"：{distinct[0]:.9g}，float64 参考 {ref:.9g}"
        note = (f"{method} 确定性：同一个输入运行 {REPEATS} 次，得到 {len(distinct)} 种不同的结果{spread}"
                f"（原子加的先后每次不同；讲义「数值与确定性」）。")
        return note, rows
