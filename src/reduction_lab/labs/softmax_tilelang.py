"""实验 softmax-tilelang：按行 softmax，整行装进一块（``T.copy``、``T.reduce_max``、``T.exp``、``T.reduce_sum``）。

讲义：docs/tilelang/reduce.md（TileLang 的归约与 softmax 的 row 路径）、docs/triton/masking.md（-inf 掩码）；
实验页：docs/labs/softmax-tilelang.ipynb。sim 模式经 TileLang 的 C 目标在 CPU 上运行，gpu 模式编译成当前 GPU
架构的 CUDA。同一个算法的 Triton 与 CUDA C 写法是 :mod:`.softmax_triton` 与 :mod:`.softmax_cuda`。

诊断：``T.copy`` 在行尾之外补的 0 没有换成 -inf（每行的和小于 1；整行为负数时 0 成了最大值）、没减最大值、
没除以和、没写出 y（``T.empty`` 没有初值，只能从源码看出来）。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .core import Lab, load_learner_module, softmax_bench
from .grading import Case, Hint, compare, find_line, first_bad_row, rows_text, softmax_tolerance
from .reduce_sum_tilelang import tilelang_error_hint

FILE = "softmax.py"


class SoftmaxTileLang(Lab):
    name = "softmax-tilelang"
    title = "TileLang：融合softmax与-inf掩码"
    lecture = "tilelang/reduce.md"
    notebook = "labs/softmax-tilelang.ipynb"
    files = (FILE,)
    backend = "tilelang"
    case_time_limit = False     # sim 模式运行编译好的 C 代码：超时信号打断不了，第一次还要编译

    def cases(self, mode):
        return C.softmax_tilelang_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "softmax_tilelang", ("softmax", "softmax_kernel"))
        return {"op": module.softmax, "path": paths[FILE], "text": paths[FILE].read_text(encoding="utf-8")}

    def run_case(self, impl, case: Case, mode):
        op = impl["op"]
        if case.kind == "error":
            return C.run_error_case(op, case, mode, out_shape=lambda x: x.shape)
        x = C.make_input(case, mode)
        out = op(x)
        if mode == "gpu":
            torch.cuda.synchronize()
        ref = torch.softmax(x.double(), dim=1)
        atol, rtol = softmax_tolerance(torch.float32)
        ok, err, bad = compare(out, ref, atol, rtol)
        if ok:
            return True, err, "", None
        return False, err, f"行 {rows_text(bad)} 不对", self.wrong_answer(case, x, out, ref, bad, impl)

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        code = "\n".join(ln.split("#")[0] for ln in text.splitlines())
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()
        xs = x.detach().cpu().double()
        M, N = xs.shape
        r = bad[0]
        first = first_bad_row(ref, got, bad)
        if not re.search(r"T\.copy\(\s*\w+\s*,\s*y\s*\[", code):
            # T.empty 的输出没有初值：没写的行是上一次留下的任意值，只能从源码看出来
            return Hint("not-written", "没有写出结果：内核里没有 T.copy(tile, y[bx, 0])", FILE,
                        find_line(text, r"T\.empty", lang="py"), first,
                        "TODO(5)：归一化之后 T.copy(tile, y[bx, 0]) 写回（T.empty 分配的 y 没有初值）。")
        g = got[bad]
        if case.kind == "large" and not torch.isfinite(g).all():
            return Hint("no-max-subtraction", "数值很大的行得到 inf 或 NaN：exp 溢出了", FILE,
                        find_line(text, r"T\.exp", lang="py"), first,
                        "先减去行最大值再取指数：T.exp(tile[i, j] - row_max[i]) 至多是 1，不会溢出，结果不变。")
        block_n = 1 << max(N - 1, 1).bit_length()
        if block_n > N:
            # 行尾之外的车道保留 T.copy 补的 0 时内核算出的结果：补 0 到 block_n 列的 softmax 的前 N 列
            xp = torch.cat([xs, torch.zeros(M, block_n - N, dtype=torch.float64)], dim=1)
            cand = torch.softmax(xp, dim=1)[:, :N]
            if torch.allclose(g, cand[bad], rtol=1e-4, atol=1e-7):
                negative = "；整行为负数时，补的 0 比整行都大，成了「最大值」" if case.kind == "negative" else ""
                return Hint("mask-other", f"行尾之外补的 0 改变了结果：每行的和小于 1（只在 N 不是 2 的幂时出现）{negative}",
                            FILE, find_line(text, r"T\.copy\(\s*x", lang="py"),
                            first + f"\n第 {r} 行的和是 {g[0].sum().item():.4g}",
                            "TODO(2)：T.copy 把越过行尾的部分补 0；读进来之后把 j >= N 的车道换成 NEG_INF："
                            "它不改变最大值，exp(-inf) = 0 也不改变分母。")
        mx = xs.max(dim=1, keepdim=True).values
        if torch.allclose(g, torch.exp(xs - mx)[bad], rtol=1e-4, atol=1e-7):
            return Hint("no-normalize", "输出是 exp(x - m)，没有除以和：每行的和不是 1", FILE,
                        find_line(text, r"T\.copy\(\s*\w+\s*,\s*y", lang="py"), first,
                        "TODO(5)：写回之前 tile[i, j] = tile[i, j] / row_sum[i]。")
        return Hint("wrong-softmax", "softmax 的值不对", FILE, None,
                    first + f"\n第 {r} 行的和是 {g[0].sum().item():.4g}（softmax 每行的和是 1）",
                    "对照讲义：读进一块、行尾之外换成 -inf、T.reduce_max、T.exp(x - m)、T.reduce_sum、除以和、写回。")

    def on_error(self, case, exc, paths):
        return tilelang_error_hint(exc, paths[FILE], FILE)

    def bench(self, impl):
        op = impl["op"]
        # 骨架里的 softmax(x, out=) 先让内核写进 T.empty 分配的 y 再拷进 out：计时只调用 softmax(x)，不算这次拷贝
        return softmax_bench(lambda x, out=None: op(x), "，你的内核每次调用分配 y")
