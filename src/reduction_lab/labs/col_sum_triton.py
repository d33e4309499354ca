"""实验 col-sum-triton：沿列求和，不转置：一个 program 负责 BLOCK_N 个相邻的列，按二维块向下循环（Triton）。

讲义：docs/triton/column-sum.md；实验页：docs/labs/col-sum.ipynb。
运行方式同 :mod:`.softmax_triton`（sim 模式在 :func:`reduction_lab.count_memory` 里，越界在发生之前报出；
「访存计数」用例两种模式都在解释器里运行）。块大小由文件末尾的包装函数固定为 32 x 32。

诊断：列号少了 program_id（只有第一组列被写）、没有向下循环（只加了前 BLOCK_M 行）、循环里行号没有加上 start
（前 BLOCK_M 行加了好几遍）、归约沿错了轴（axis=1）、行距用了 N 而不是 in_row_stride（行距大于 N 的视图上才错）、
被屏蔽的车道没有填 0、每个元素读了不止一次、越界、没写。
"""

from __future__ import annotations

import torch

from . import cases as C
from .core import load_learner_module, time_against
from .grading import Case, Hint, compare, find_line, never_written, rows_text, tolerance
from .softmax_triton import SoftmaxTriton, run_counted

FILE = "col_sum.py"
#: 包装函数里的块大小（BLOCK_M = BLOCK_N）
BLOCK = 32


def wrong_axis_model(x: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """循环之后沿 axis=1 归约时内核写出的结果（float64）：第 p 个 program 的第 i 个输出是它那组列里、
    行号除以 ``block`` 余 i 的那些元素之和。"""
    M, N = x.shape
    Mp, Np = -(-M // block) * block, -(-N // block) * block
    xp = torch.zeros(Mp, Np, dtype=torch.float64)
    xp[:M, :N] = x.double()
    s = xp.reshape(Mp // block, block, Np // block, block).sum(dim=(0, 3))   # (行余数 i, program p)
    return s.t().reshape(-1)[:N]


class ColSumTriton(SoftmaxTriton):
    name = "col-sum-triton"
    title = "Triton：沿列求和（二维块向下循环）"
    lecture = "triton/column-sum.md"
    notebook = "labs/col-sum.ipynb"
    files = (FILE,)
    kernel = "col_sum_kernel"

    def cases(self, mode):
        return C.col_sum_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "col_sum_triton", ("col_sum", self.kernel))
        return {"module": module, "op": module.col_sum, "path": paths[FILE], "text": paths[FILE].read_text("utf-8")}

    def run_case(self, impl, case: Case, mode):
        op = impl["op"]
        if case.kind == "error":
            return C.run_error_case(op, case, mode, out_shape=lambda x: x.shape[1:])
        x = C.make_input(case, mode)
        M, N = x.shape
        out = torch.full((N,), float("nan"), device=x.device)
        rep = run_counted(op, x, out, mode, case)
        ref = x.double().sum(dim=0).cpu()
        atol, rtol = tolerance(M, torch.float32)
        ok, err, bad = compare(out, ref, atol, rtol)
        if not ok:
            return False, err, f"列 {rows_text(bad, unit='列')} 不对", self.wrong_answer(case, x, out, ref, bad, impl)
        if case.kind == "memory":
            if rep.elements_loaded != M * N or rep.elements_stored != N:
                return False, err, "访存量不对", self.memory_hint(rep, M, N, impl)
            return True, err, f"读 {rep.elements_loaded}、写 {rep.elements_stored} 个元素", None
        return True, err, "", None

    def memory_hint(self, rep, M, N, impl) -> Hint:
        text = impl["text"]
        detail = (f"count_memory()：读了 {rep.elements_loaded} 个元素、写了 {rep.elements_stored} 个，"
                  f"应为 MN = {M * N} 与 N = {N}")
        if rep.elements_loaded > M * N:
            return Hint("memory-loads", f"读得比 MN 多：每个元素读了 {rep.elements_loaded / (M * N):.2g} 遍", FILE,
                        find_line(text, r"tl\.load", lang="py"), detail,
                        "每个块只 tl.load 一次，加到 acc 上；循环的步长是 BLOCK_M，块与块不重叠。")
        return Hint("memory-count", "读写的元素比 MN / N 少", FILE, None, detail, "每个元素都要读到，每列写一次。")

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        xs = x.detach().cpu().double()
        M, N = xs.shape
        j = bad[0]
        first = f"第 {j} 列：应为 {ref[j].item():.6g}，得到 {got[j].item():.6g}（不对的列：{rows_text(bad, unit='列')}）"

        def same(cand):
            return bool(torch.allclose(got[bad], cand.double()[bad], rtol=1e-5, atol=1e-4))

        unwritten = never_written(impl["op"], x, (N,)) if torch.isnan(got).any() else torch.zeros(N, dtype=torch.bool)
        if bool(unwritten.all()):
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN，再运行一次也没有写）", FILE,
                        find_line(text, r"tl\.store", lang="py"),
                        first, "TODO(5)：tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=col_mask)。")
        if N > BLOCK and torch.isnan(got[BLOCK:]).all() and torch.allclose(got[:BLOCK], ref[:BLOCK], rtol=1e-5, atol=1e-4):
            return Hint("col-offset", f"只有前 {BLOCK} 列被写了：每个 program 都算了第一组列", FILE,
                        find_line(text, r"\bcols\s*=", lang="py"), first,
                        "TODO(1)：cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)：第 pid 个 program 负责第 pid 组列。")
        if bool(unwritten.any()):
            miss = unwritten.nonzero().flatten().tolist()
            return Hint("col-offset", f"有 {len(miss)} 列没有被写入（第 {', '.join(map(str, miss[:8]))}{' …' if len(miss) > 8 else ''} 列）："
                        "各个 program 负责的列合起来没有盖住全部 N 列", FILE, find_line(text, r"\bcols\s*=", lang="py"), first,
                        "TODO(1)：cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)：第 pid 个 program 负责第 pid * BLOCK_N 列起的 "
                        "BLOCK_N 列，网格有 cdiv(N, BLOCK_N) 个 program。")
        if not torch.isfinite(got[bad]).all() and M % BLOCK:
            return Hint("mask-other", f"得到 inf 或 NaN：最后一个行块只有 {M % BLOCK} 行，被屏蔽的车道填的值进了和", FILE,
                        find_line(text, r"other\s*=", lang="py") or find_line(text, r"tl\.load", lang="py"), first,
                        "tl.load(..., mask=mask, other=0.0)：求和的单位元是 0（求最大值才填 -inf）。")
        head = xs[:BLOCK].sum(dim=0)
        checks = [
            ("no-row-loop", M > BLOCK, head, f"只加了前 BLOCK_M = {BLOCK} 行：没有向下循环", r"tl\.load",
             "TODO(3)：for start in range(0, n_rows, BLOCK_M)，每一轮读下面的一个块。"),
            ("rows-not-advanced", M > BLOCK, head * -(-M // BLOCK), f"前 {BLOCK} 行被加了 {-(-M // BLOCK)} 遍：循环里的行号没有加上 start",
             r"\brows\s*=", "TODO(3)：rows = start + tl.arange(0, BLOCK_M)。"),
            ("wrong-axis", True, wrong_axis_model(xs), "归约沿错了轴：得到的是各行的和，不是各列的和",
             r"axis\s*=\s*1|\[\s*None\s*,\s*:\s*\]\s*\*\s*in_row_stride",
             "块是 [BLOCK_M, BLOCK_N]：行号沿第 0 维（rows[:, None] * in_row_stride），列号沿第 1 维（cols[None, :]）；"
             "TODO(5) 沿第 0 维把 BLOCK_M 行加起来：tl.sum(acc, axis=0)。两处有一处反了，加起来的就是每行。"),
        ]
        if case.kind == "row-stride":
            checks.append(("row-stride", True, C.read_with_stride_n(case).double().sum(dim=0),
                           f"行距用成了 N：x 是更宽的矩阵的一部分（行距 {x.stride(0)}，N = {N}），第 1 行以后读错了位置",
                           r"n_cols\s*\[|\*\s*n_cols", "行的起点是 rows * in_row_stride，不是 rows * n_cols：x 的行之间可能有空隙。"))
        for key, applies, cand, cause, where, fix in checks:
            if applies and same(cand):
                return Hint(key, cause, FILE, find_line(text, where, lang="py"), first, fix)
        return Hint("wrong-col-sum", "列和不对", FILE, None, first,
                    "对照讲义：列号带上 program_id，向下循环时行号加上 start，掩码同时管行与列，最后沿 axis=0 归约。")

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        out = torch.empty(N, device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum(dim=0)": lambda: torch.sum(x, dim=0, out=out)}
        return time_against(calls, x.numel() * 4 + N * 4, x, f"{M}x{N} float32，{-(-N // BLOCK)} 个 program")
