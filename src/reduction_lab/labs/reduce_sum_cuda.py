"""实验 reduce-sum-cuda：一行一个线程块的共享内存树形归约（CUDA C）。

讲义：docs/cuda/tree-reduction.md；实验页：docs/labs/reduce-sum.ipynb。
学习者的内核经 :func:`reduction_lab.cuda_kernels.launch` 启动：sim 模式在模拟器里，
gpu 模式在 GPU 上（之前先在模拟器里跑一个小用例，找出 GPU 不会报出的错误）。
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import cases as C
from .core import Lab, time_against
from .grading import Case, Hint, compare, error_line, find_line, rows_text, tolerance, zh_part

KERNEL = "reduce_sum_rowwise_kernel"
BLOCK = 256
FILE = "reduce_sum.cu"


def make_op(path: Path, mode: str, block: int = BLOCK):
    """课程的算子接口：``reduce_sum(x, dim=1, out=None)``，检查输入后启动学习者的内核。"""
    from ..cuda_kernels import launch

    device = "cuda" if mode == "gpu" else "cpu"

    def reduce_sum(x, dim=1, out=None):
        C.check_rows_input(x, dim, device)
        M, N = x.shape
        if out is None:
            out = torch.empty(M, dtype=torch.float32, device=x.device)
        else:
            C.check_out_arg(out, (M,), x)
        launch(path, KERNEL, grid=M, block=block, args=(out, x, M, N), defines={"BLOCK_SIZE": block}, mode=mode)
        return out

    return reduce_sum


# 模拟器的错误 -> (key, 原因, 怎么改)
_SIMT_HINTS = {
    "BarrierDivergenceError": (
        "barrier-divergence", "__syncthreads() 没有被线程块里的所有线程执行到（屏障写在了分支里）",
        "把 __syncthreads() 移到 if (tid < s) 的外面、循环体之内：每一步所有线程都要到达同一个屏障。\n"
        "真实 GPU 上这是未定义行为：可能死锁，也可能悄悄算出（或算错）结果，所以模拟器把它当作错误。"),
    "SharedMemoryRaceError": (
        "shared-race", "共享内存数据竞争：一个线程读了别的线程还没写完（或正要改写）的 sdata",
        "写完 sdata[tid] 之后，以及树形归约的每一步之后，都要 __syncthreads()。"),
    "GlobalMemoryRaceError": (
        "global-race", "全局内存数据竞争：几个线程（常常是不同线程块的）不用原子操作写同一个 out[row]，或读了别的线程块正在写的结果",
        "每个输出元素只让一个线程写（例如 if (tid == 0) out[row] = sdata[0];）；几个线程块合写一个元素时两边都用 atomicAdd，"
        "并在启动前把输出清零。\n一次启动之内，不同线程块之间没有任何顺序：要用别的线程块的结果，就放到下一次启动。"),
    "OutOfBoundsError": (
        "out-of-bounds", "越界访问",
        "检查循环的边界（j < cols，不是 j <= cols）、行偏移 row * cols 和写出的下标 out[row]。"),
    "UninitializedReadError": (
        "uninitialized-read", "读了没有任何线程写过的内存",
        "写入和读出的下标要一致（同一个行距、同一个分块大小）；先写、同步、再读。\n"
        "真实 GPU 上读到的是上一次留下的任意值，不是 0，所以这种错误在 GPU 上常常只是偶尔算错。"),
    "LoopLimitError": (
        "endless-loop", "循环停不下来",
        "检查循环变量是否在变（s >>= 1、j += blockDim.x）以及循环条件。"),
    "CompileError": (
        "compile-error", "nvcc 会拒绝这段代码", "按报错修改这一行（例如不能写 const 指针指向的内存、__shared__ 变量不能带初始值）。"),
    "UnsupportedError": (
        "unsupported", "模拟器不支持这一行的写法",
        "换成讲义里用到的写法；模拟器支持的子集见「CUDA C模拟器」一页。"),
    "WarpSyncError": (
        "warp-sync", "warp 级原语的参与线程不对", "检查 __shfl_*_sync 的掩码与调用它的线程。"),
    "SimtRuntimeError": ("runtime-error", "运行时错误", ""),
}


def simt_hint(exc: BaseException, file: str) -> Hint | None:
    msg = str(exc)
    if type(exc).__name__ == "UnsupportedError":
        import re

        m = re.search(r"未声明的标识符 (\w+)", msg)
        if m:
            return Hint("undeclared", f"用到了没有声明的变量 {m.group(1)}", file, error_line(exc),
                        detail=zh_part(msg), fix=f"先声明 {m.group(1)}（或检查拼写）。")
        if "无法解析" in msg:
            return Hint("syntax-error", "语法错误：这一行（或上一行的结尾）无法解析", file, error_line(exc),
                        detail=zh_part(msg), fix="常见原因：上一行少了分号、括号没有配对。")
    for cls in type(exc).__mro__:
        if cls.__name__ in _SIMT_HINTS:
            key, cause, fix = _SIMT_HINTS[cls.__name__]
            return Hint(key, f"{cause}（模拟器：{type(exc).__name__}）", file, error_line(exc),
                        detail=zh_part(str(exc)), fix=fix)
    return None


def compile_hint(exc: BaseException, file: str) -> Hint | None:
    """nvrtc / 模拟器前端的编译错误，带行号。"""
    import re

    text = str(exc)
    m = re.search(rf"{re.escape(file)}\((\d+)\): (?:catastrophic )?(?:error|错误)[^\n]*", text)
    if m:
        return Hint("compile-error", "编译错误", file, int(m.group(1)), detail=m.group(0),
                    fix="按编译器的提示修改这一行。")
    return None


def sim_precheck(lab, mode, paths, run, label):
    """gpu 模式：先在模拟器（或 Triton 解释器）里跑一个小用例。GPU 不报告屏障发散、
    共享内存竞争、越界读与未初始化的读，这里找出它们。sim 模式下用例本身就在模拟器里运行。"""
    if mode != "gpu":
        return [], []
    import numpy as np

    try:
        with np.errstate(all="ignore"):
            run()
    except Exception as exc:  # noqa: BLE001
        h = lab.on_error(None, exc, paths)
        h.cause = f"模拟器检查（{label}）：" + h.cause
        return [f"模拟器检查（{label}）：发现问题，见下。", ""], [h]
    return [f"模拟器检查（{label}）：没有发现屏障发散、数据竞争、越界或未初始化的读。", ""], []


class ReduceSumCuda(Lab):
    name = "reduce-sum-cuda"
    title = "CUDA C：按行求和（共享内存树形归约）"
    lecture = "cuda/tree-reduction.md"
    notebook = "labs/reduce-sum.ipynb"
    files = (FILE,)
    backend = "cuda"
    open_first = FILE

    def cases(self, mode):
        return C.row_sum_cases(mode)

    def load(self, paths, mode):
        from ..cuda_kernels import kernel_signature

        path = paths[FILE]
        sig = kernel_signature(path, KERNEL, defines={"BLOCK_SIZE": BLOCK})   # 解析一遍：语法错误在这里报出
        want = ["float *", "const float *", "int64_t", "int64_t"]
        got = [" ".join(t.replace("*", " * ").split()) for _, t, _ in sig]
        if [g.replace(" ", "") for g in got] != [w.replace(" ", "") for w in want]:
            raise TypeError(f"{KERNEL} 的参数应为 (float *out, const float *in, int64_t rows, int64_t cols)，"
                            f"得到 ({', '.join(f'{t} {n}' for n, t, _ in sig)})")
        return {"op": make_op(path, mode), "path": path, "mode": mode}

    def run_case(self, impl, case: Case, mode):
        op = impl["op"]
        if case.kind == "error":
            return C.run_error_case(op, case, mode)
        x = C.make_input(case, mode)
        out = torch.full((x.shape[0],), float("nan"), dtype=torch.float32, device=x.device)  # 没写的行是 NaN
        op(x, out=out)
        if mode == "gpu":
            torch.cuda.synchronize()
        ref = x.double().sum(dim=1)
        atol, rtol = tolerance(x.shape[1], torch.float32)
        ok, err, bad = compare(out, ref, atol, rtol)
        if ok:
            return True, err, "", None
        return False, err, f"行 {rows_text(bad)} 不对", self.wrong_answer(x, out, ref, bad, impl)

    def wrong_answer(self, x, out, ref, bad, impl) -> Hint:
        """比较几种常见错误会得到的结果，说出最可能的原因。"""
        xs = x.detach().cpu().double()
        got = out.detach().cpu().double()
        M, N = xs.shape
        r = bad[0]
        text = Path(impl["path"]).read_text(encoding="utf-8")
        atol, rtol = tolerance(N, torch.float32)

        def same(candidate):
            return bool(((got[bad] - candidate[bad]).abs() <= atol + rtol * candidate[bad].abs()).all())

        first = f"第 {r} 行：应为 {ref[r].item():.6g}，得到 {got[r].item():.6g}（不对的行：{rows_text(bad)}）"
        if torch.isnan(got[bad]).all():
            return Hint("not-written", "out[row] 没有被写入（评分前 out 填满了 NaN）", FILE,
                        find_line(text, r"out\s*\["), first,
                        "归约结束后由线程 0 写 out[row] = sdata[0]；row 就是 blockIdx.x。")
        if same(xs[:, :BLOCK].sum(1)):
            return Hint("no-stride-loop", "每个线程只读了一个元素：本行第 blockDim.x 列以后的元素没有加进来", FILE,
                        find_line(text, r"acc\s*\+="), first,
                        "TODO(2)：for (int64_t j = tid; j < cols; j += blockDim.x) acc += row_in[j];")
        if same(xs[:, 0::BLOCK].sum(1)):
            return Hint("no-tree", "结果只是线程 0 自己的部分和：树形归约没有把其他线程的部分和加进来", FILE,
                        find_line(text, r"sdata\s*\[\s*tid\s*\]\s*\+="), first,
                        "TODO(4)：s 从 blockDim.x / 2 开始每步减半，tid < s 的线程加上 sdata[tid + s]。")
        nxt = torch.cat([xs[1:, 0], torch.zeros(1, dtype=xs.dtype)])
        if same(ref.cpu() + nxt):
            return Hint("off-by-one", "每行多加了下一行的第一个元素：循环边界多走了一步", FILE,
                        find_line(text, r"<=\s*cols"), first, "循环条件应为 j < cols。")
        rowsums = xs.sum(1)
        if M > 1 and same(rowsums[0].expand(M)):
            return Hint("wrong-row", "每一行都得到了第 0 行的和：行偏移没有用上 blockIdx.x", FILE,
                        find_line(text, r"row_in\s*="), first, "row = blockIdx.x，row_in = in + row * cols。")
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "先在最小的用例（1 行）上对照 torch.sum：检查步长循环、树形归约的每一步和屏障。")

    def on_error(self, case, exc, paths):
        h = simt_hint(exc, FILE) or compile_hint(exc, FILE)
        if h is not None:
            return h
        if isinstance(exc, TypeError) and KERNEL in str(exc):
            return Hint("signature", "内核的签名不对", FILE,
                        find_line(paths[FILE].read_text(encoding="utf-8"), KERNEL), detail=str(exc),
                        fix="保留骨架里的内核名和参数：(float *out, const float *in, int64_t rows, int64_t cols)。")
        return Hint("exception", f"运行时抛出 {type(exc).__name__}", FILE, error_line(exc),
                    detail=zh_part(str(exc))[:800])

    def extra_checks(self, impl, mode, paths):
        x = torch.randn(3, 300, generator=torch.Generator().manual_seed(1))
        return sim_precheck(self, mode, paths, lambda: make_op(impl["path"], "sim")(x), "3x300")

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        out = torch.empty(M, device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=1, out=out)}
        return time_against(calls, x.numel() * 4 + M * 4, x, f"{M}x{N} float32")
