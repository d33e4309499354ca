"""实验 reduce-sum-cuda：一行一个线程块的共享内存树形归约（CUDA C）。

讲义：docs/cuda/tree-reduction.md；实验页：docs/labs/reduce-sum.ipynb。
学习者的内核经 :func:`reduction_lab.cuda_kernels.launch` 启动：sim 模式在模拟器里，
gpu 模式在 GPU 上（之前先在模拟器里跑一个小用例，找出 GPU 不会报出的错误）。
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..checks import check_out
from . import cases as C
from .core import Lab, sim_precheck, time_against
from .grading import Case, Hint, error_line, find_line, zh_part
from .hints import compile_hint, simt_hint

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
            check_out(out, (M,), x.dtype, x.device)
        launch(path, KERNEL, grid=M, block=block, args=(out, x, M, N), defines={"BLOCK_SIZE": block}, mode=mode)
        return out

    return reduce_sum


class ReduceSumCuda(Lab):
    name = "reduce-sum-cuda"
    title = "CUDA C：按行求和（共享内存树形归约）"
    lecture = "cuda/tree-reduction.md"
    notebook = "labs/reduce-sum.ipynb"
    files = (FILE,)
    backend = "cuda"

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
        def call(x):
            out = torch.full((x.shape[0],), float("nan"), dtype=torch.float32, device=x.device)  # 没写的行是 NaN
            return impl["op"](x, out=out)

        return C.run_row_sum_case(self, impl, case, mode, call)

    def wrong_shape(self, out, x, impl) -> Hint:
        return Hint("wrong-shape", f"输出形状应为 ({x.shape[0]},)，得到 {tuple(out.shape)}", FILE)

    def wrong_answer(self, mm, impl) -> Hint:
        """比较几种常见错误会得到的结果，说出最可能的原因。"""
        xs, same, first = mm.x, mm.same, mm.first_row()
        M, N = xs.shape
        text = Path(impl["path"]).read_text(encoding="utf-8")
        if torch.isnan(mm.got[mm.bad]).all():
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
        if same(mm.ref + nxt):
            return Hint("off-by-one", "每行多加了下一行的第一个元素：循环边界多走了一步", FILE,
                        find_line(text, r"<=\s*cols"), first, "循环条件应为 j < cols。")
        if M > 1 and same(xs[0].sum().expand(M)):
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
