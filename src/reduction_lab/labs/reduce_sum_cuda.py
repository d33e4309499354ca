"""实验 reduce-sum-cuda：一行一个线程块的共享内存树形归约（CUDA C）。

讲义：docs/cuda/tree-reduction.md；实验页：docs/labs/reduce-sum.ipynb。
学习者的内核经 :func:`reduction_lab.cuda_kernels.launch` 启动：sim 模式在模拟器里，
gpu 模式在 GPU 上（之前先在模拟器里跑一个小用例，找出 GPU 不会报出的错误）。
:class:`RowSumCudaLab` 是按行求和的 CUDA C 实验的公共部分（:mod:`.warp_reduce_cuda` 也用它）。
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..checks import check_out
from . import cases as C
from .core import Lab, cuda_precheck, time_against
from .grading import Case, Hint, find_line
from .hints import cuda_error_hint

KERNEL = "reduce_sum_rowwise_kernel"
BLOCK = 256
FILE = "reduce_sum.cu"
SIGNATURE = ["float *", "const float *", "int64_t", "int64_t"]
#: 诊断里写出的参数表
ROW_PARAMS = "(float *out, const float *in, int64_t rows, int64_t cols)"


def check_signature(path: Path, kernel: str, defines: dict, want: list[str], params: str) -> None:
    """学习者的内核的参数类型必须是 ``want``（``params`` 是报错里写出的参数表）。先用模拟器的前端解析一遍：
    语法错误在这里报出。"""
    from ..cuda_kernels import kernel_signature

    sig = kernel_signature(path, kernel, defines=defines)
    got = [" ".join(t.replace("*", " * ").split()) for _, t, _ in sig]
    if [g.replace(" ", "") for g in got] != [w.replace(" ", "") for w in want]:
        raise TypeError(f"{kernel} 的参数应为 {params}，"
                        f"得到 ({', '.join(f'{t} {n}' for n, t, _ in sig)})")


def check_row_signature(path: Path, kernel: str, defines: dict) -> None:
    """按行归约的 CUDA C 实验共用：``kernel(float *out, const float *in, int64_t rows, int64_t cols)``。"""
    check_signature(path, kernel, defines, SIGNATURE, ROW_PARAMS)


def make_op(path: Path, mode: str, block: int = BLOCK, kernel: str = KERNEL, cluster: int | None = None):
    """课程的算子接口：``reduce_sum(x, dim=1, out=None)``，检查输入后启动学习者的内核
    （grid = 行数，block = ``block``，并以 ``-DBLOCK_SIZE=block`` 编译）。``cluster``：一行交给一个线程块簇时
    每簇的块数（grid = 行数 x ``cluster``，另以 ``-DCLUSTER_SIZE=cluster`` 编译）。"""
    from ..cuda_kernels import launch

    device = "cuda" if mode == "gpu" else "cpu"
    per_row = 1 if cluster is None else cluster
    defines = {"BLOCK_SIZE": block} if cluster is None else {"BLOCK_SIZE": block, "CLUSTER_SIZE": cluster}

    def reduce_sum(x, dim=1, out=None):
        C.check_rows_input(x, dim, device)
        M, N = x.shape
        if out is None:
            out = torch.empty(M, dtype=torch.float32, device=x.device)
        else:
            check_out(out, (M,), x.dtype, x.device)
        launch(path, kernel, grid=M * per_row, block=block, args=(out, x, M, N), defines=defines, mode=mode)
        return out

    return reduce_sum


def load_request_check(rep, M: int, N: int, file: str, text: str, load_pattern: str) -> tuple[list[str], list[Hint]]:
    """全部用例通过之后的检查（按行归约的 CUDA C 实验共用）：模拟器数出的全局内存读请求。一个线程读完整行
    （if (tid == 0) for (…) acc += row_in[j];）也算得对，但每次请求只读 4 字节，比合并的读法（相邻线程读相邻的数，
    一次请求 32 个 float）多出几十倍的请求，GPU 上慢一个数量级。超过合并读法的 4 倍就报出。"""
    coalesced = M * N // 32
    line = f"全局内存读请求（模拟器，{M}x{N}）：{rep.global_load_requests} 次，合并的读法约 {coalesced} 次"
    if rep.global_load_requests <= 4 * coalesced:
        return [line], []
    return [line], [Hint(
        "not-parallel", f"读一行的只有少数几个线程：{rep.global_load_requests} 次读请求，合并的读法约 {coalesced} 次",
        file, find_line(text, r"\+=\s*" + load_pattern) or find_line(text, load_pattern),
        detail="结果是对的，但每次请求只读到几个 float：GPU 上要慢一个数量级。",
        fix="每个线程从第 tid 列开始、以 blockDim.x 为步长读：for (int64_t j = tid; j < cols; j += blockDim.x)，"
            "相邻的线程读相邻的地址；再在块内归约。")]


class RowSumCudaLab(Lab):
    """按行求和的 CUDA C 实验：内核 ``KERNEL(float *out, const float *in, int64_t rows, int64_t cols)``，
    一行一个线程块。子类给出文件、内核名、线程块大小和自己的诊断（:meth:`specific_hints`）。"""

    backend = "cuda"
    kernel = KERNEL
    #: simt_hint 的通用改法换成这个实验的（诊断的 key -> 改法）
    fixes: dict[str, str] = {}

    def cases(self, mode):
        return C.row_sum_cases(mode)

    def block_size(self, paths) -> int:
        return BLOCK

    def check_source(self, path: Path, text: str) -> Hint | None:
        """解析之前的静态检查（例如线程块大小）；返回的诊断会让评分在运行用例之前结束。"""
        return None

    def load(self, paths, mode):
        path = paths[self.file]
        text = path.read_text(encoding="utf-8")
        block = self.block_size(paths)
        check_row_signature(path, self.kernel, {"BLOCK_SIZE": block})   # 解析一遍：语法错误在这里报出
        hint = self.check_source(path, text)
        return {"op": make_op(path, mode, block, self.kernel), "path": path, "mode": mode, "block": block,
                "text": text, "static": hint}

    def run_case(self, impl, case: Case, mode):
        block = case.block or impl["block"]
        op = impl["op"] if case.block is None else make_op(impl["path"], mode, block, self.kernel)

        def call(x):
            out = torch.full((x.shape[0],), float("nan"), dtype=torch.float32, device=x.device)  # 没写的行是 NaN
            return op(x, out=out)

        return C.run_row_sum_case(self, dict(impl, op=op, block=block), case, mode, call)

    def wrong_shape(self, out, x, impl) -> Hint:
        return Hint("wrong-shape", f"输出形状应为 ({x.shape[0]},)，得到 {tuple(out.shape)}", self.file)

    def wrong_answer(self, mm, impl) -> Hint:
        """比较几种常见错误会得到的结果，说出最可能的原因。"""
        xs, same, first = mm.x, mm.same, mm.first_row()
        M, N = xs.shape
        block = impl["block"]
        text = impl["text"]
        got = mm.got[mm.bad]
        if torch.isnan(got).all():
            return Hint("not-written", "out[row] 没有被写入（评分前 out 填满了 NaN）", self.file,
                        find_line(text, r"out\s*\["), first, self.not_written_fix)
        if torch.isfinite(got).all() and bool((got == got.round()).all()) and not bool(
                (mm.ref[mm.bad] == mm.ref[mm.bad].round()).all()):
            return Hint("int-acc", "结果都是整数：累加用了整数类型，每次加法都把小数部分截掉了", self.file,
                        find_line(text, r"\b(int|long|unsigned|int32_t|int64_t)\s+acc\b") or find_line(text, r"\bacc\s*="),
                        first, "部分和用 float（或 double）：float acc = 0.0f;")
        if same(xs[:, :block].sum(1)):
            return Hint("no-stride-loop", "每个线程只读了一个元素：本行第 blockDim.x 列以后的元素没有加进来", self.file,
                        find_line(text, r"acc\s*\+="), first,
                        "for (int64_t j = tid; j < cols; j += blockDim.x) acc += row_in[j];")
        nxt = torch.cat([xs[1:, 0], torch.zeros(1, dtype=xs.dtype)])
        if same(mm.ref + nxt):
            return Hint("off-by-one", "每行多加了下一行的第一个元素：循环边界多走了一步", self.file,
                        find_line(text, r"<=\s*cols"), first, "循环条件应为 j < cols。")
        if M > 1 and same(xs[0].sum().expand(M)):
            return Hint("wrong-row", "每一行都得到了第 0 行的和：行偏移没有用上 blockIdx.x", self.file,
                        find_line(text, r"row_in\s*="), first, "row = blockIdx.x，row_in = in + row * cols。")
        h = self.specific_hints(mm, impl)
        if h is not None:
            return h
        return Hint("wrong-sum", "和不对", self.file, None, first, self.wrong_sum_fix)

    not_written_fix = "归约结束后由线程 0 写 out[row] = sdata[0]；row 就是 blockIdx.x。"
    wrong_sum_fix = "先在最小的用例（1 行）上对照 torch.sum：检查步长循环、树形归约的每一步和屏障。"

    def specific_hints(self, mm, impl) -> Hint | None:
        return None

    def on_error(self, case, exc, paths):
        return cuda_error_hint(exc, self.file, self.kernel, paths[self.file].read_text(encoding="utf-8"), ROW_PARAMS,
                               self.fixes)

    def extra_checks(self, impl, mode, paths):
        if impl["static"] is not None:
            return [], [impl["static"]]
        from .. import simt

        x = torch.randn(2, 300, generator=torch.Generator().manual_seed(1))
        block = impl["block"]

        def run(steps):
            out = torch.full((2,), float("nan"))
            simt.launch(str(impl["path"]), self.kernel, 2, block, (out, x, 2, 300), defines={"BLOCK_SIZE": block},
                        max_lane_steps=steps)

        return cuda_precheck(self, mode, paths, run, "2x300")

    def launch_shape(self, impl, M: int) -> tuple[int, dict]:
        """模拟器里启动 M 行时的 (线程块数, 编译期的宏)。"""
        return M, {"BLOCK_SIZE": impl["block"]}

    def final_checks(self, impl, mode, paths):
        """全部用例通过之后：在模拟器里数一遍全局内存的读请求（:func:`load_request_check`）。"""
        from .. import simt

        M, N = 2, 4096
        x = torch.randn(M, N, generator=torch.Generator().manual_seed(3))
        grid, defines = self.launch_shape(impl, M)
        rep = simt.launch(str(impl["path"]), self.kernel, grid, impl["block"], (torch.zeros(M), x, M, N),
                          defines=defines)
        return load_request_check(rep, M, N, self.file, impl["text"], r"row_in\s*\[")

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        out = torch.empty(M, device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=1, out=out)}
        return time_against(calls, x.numel() * 4 + M * 4, x, f"{M}x{N} float32，block = {impl['block']}")


class ReduceSumCuda(RowSumCudaLab):
    name = "reduce-sum-cuda"
    title = "CUDA C：按行求和（共享内存树形归约）"
    lecture = "cuda/tree-reduction.md"
    notebook = "labs/reduce-sum.ipynb"
    files = (FILE,)

    def specific_hints(self, mm, impl):
        block = impl["block"]
        if mm.same(mm.x[:, 0::block].sum(1)):
            return Hint("no-tree", "结果只是线程 0 自己的部分和：树形归约没有把其他线程的部分和加进来", self.file,
                        find_line(impl["text"], r"sdata\s*\[\s*tid\s*\]\s*\+="), mm.first_row(),
                        "TODO(4)：s 从 blockDim.x / 2 开始每步减半，tid < s 的线程加上 sdata[tid + s]。")
        # 树形归约少做最后 k 步（循环条件写成 s > 1、s > 2……）：sdata[0] 只合了编号是 2^k 的倍数的那些槽位
        partial = torch.stack([mm.x[:, t::block].sum(1) for t in range(block)], 1)   # 每个线程的部分和
        for k in range(1, 4):
            if block >> k and mm.same(partial[:, 0::1 << k].sum(1)):
                return Hint("tree-steps", f"树形归约少了最后 {k} 步：s 只走到了 {1 << k}，sdata[0] 只加了编号是 {1 << k} "
                            f"的倍数的那些线程的部分和", self.file,
                            find_line(impl["text"], r"s\s*>\s*[1-9]|s\s*>=\s*[2-9]")
                            or find_line(impl["text"], r"sdata\s*\[\s*tid\s*\]\s*\+="), mm.first_row(),
                            "s 从 blockDim.x / 2 开始每步减半，一直到 1（条件 s > 0）：最后一步把 sdata[1] 加进 sdata[0]。")
        return None
