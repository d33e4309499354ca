"""实验 reduce-sum-tilelang：``T.Serial`` 走过列块，块内 ``T.reduce_sum``。

讲义：docs/tilelang/reduce.md；实验页：docs/labs/reduce-sum.ipynb。
sim 模式经 TileLang 的 C 目标在 CPU 上运行，gpu 模式编译成当前 GPU 架构的 CUDA。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .core import Lab, load_learner_module, time_against
from .grading import Case, Hint, find_line, root_cause, traceback_line, zh_part

FILE = "reduce_sum.py"


def _block_n(text: str) -> int:
    m = re.search(r"block_n\s*:\s*int\s*=\s*(\d+)", text)
    return int(m.group(1)) if m else 256


def tilelang_error_hint(exc: BaseException, path, file: str) -> Hint:
    """TileLang 实验的学习者文件抛出的异常 -> 诊断：语法错误、没有定义的名字、TileLang 自己的报错（指向文件里的行）。"""
    if isinstance(exc, SyntaxError):
        return Hint("syntax-error", f"语法错误：{exc.msg}", file, exc.lineno, fix="按 Python 的提示修改这一行。")
    line = traceback_line(exc, path)
    root = root_cause(exc)
    if isinstance(root, NameError):
        name = getattr(root, "name", None) or "?"
        return Hint("undeclared", f"用到了没有定义的名字 {name}", file, line, detail=str(root),
                    fix=f"先定义 {name}（T.alloc_local / T.alloc_fragment 分配的缓冲区，或检查拼写）。")
    return Hint("exception", f"TileLang 报错 {type(exc).__name__}", file, line,
                detail=zh_part(str(exc)).strip().splitlines()[-1][:600] if str(exc).strip() else "",
                fix="这一行的 TileLang 写法对照讲义「TileLang的归约」。")


class ReduceSumTileLang(Lab):
    name = "reduce-sum-tilelang"
    title = "TileLang：T.Serial与T.reduce_sum"
    lecture = "tilelang/reduce.md"
    notebook = "labs/reduce-sum.ipynb"
    files = (FILE,)
    backend = "tilelang"
    case_time_limit = False     # sim 模式运行编译好的 C 代码：超时信号打断不了，第一次还要编译

    def cases(self, mode):
        return C.row_sum_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "reduce_sum_tilelang", ("reduce_sum", "reduce_sum_kernel"))
        text = paths[FILE].read_text(encoding="utf-8")
        return {"op": module.reduce_sum, "path": paths[FILE], "text": text, "block_n": _block_n(text)}

    def run_case(self, impl, case: Case, mode):
        return C.run_row_sum_case(self, impl, case, mode, impl["op"])

    def wrong_shape(self, out, x, impl) -> Hint:
        return Hint("wrong-shape", f"输出形状应为 ({x.shape[0]},)，得到 {tuple(out.shape)}", FILE,
                    find_line(impl["text"], r"T\.empty", lang="py"))

    def wrong_answer(self, mm, impl) -> Hint:
        xs, same, first = mm.x, mm.same, mm.first_row()
        N = xs.shape[1]
        bn = impl["block_n"]
        text = impl["text"]
        full = (N // bn) * bn
        code = "\n".join(ln.split("#")[0] for ln in text.splitlines())
        if not re.search(r"^\s*y\s*\[[^\]]*\]\s*=", code, re.M):
            # T.empty 的输出没有初值：没写的行是上一次留下的任意值，只能从源码看出来
            return Hint("not-written", "没有写出结果：内核里没有给 y[bx] 赋值", FILE,
                        find_line(text, r"T\.empty", lang="py"), first,
                        "行的和算完之后写出：for i in tile_loop(1): y[bx] = acc[i]（T.empty 分配的 y 没有初值）。")
        if N % bn and same(xs[:, :full].sum(1)):
            return Hint("tail-tile", f"最后一个不满的列块（{N % bn} 列）没有算进去", FILE,
                        find_line(text, r"n_tiles\s*=", lang="py"), first,
                        "列块数要向上取整：n_tiles = T.ceildiv(N, block_n)；T.copy 会把越过行尾的部分补 0。")
        if N > bn and same(xs[:, :bn].sum(1)):
            return Hint("one-tile", "只加了第一个列块", FILE, find_line(text, r"T\.Serial", lang="py"), first,
                        "for k in T.Serial(n_tiles) 的循环体里按 k 取列块：T.copy(x[bx, k * block_n], tile)。")
        if N > bn and same(xs[:, (-(-N // bn) - 1) * bn:].sum(1)):
            return Hint("overwrite", "只剩最后一个列块的和：累加写成了赋值", FILE,
                        find_line(text, r"acc\[\w*\]\s*=", lang="py"), first, "acc[i] += part[i]，不是 acc[i] = part[i]。")
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "检查列块数、T.copy 的起点 (bx, k * block_n)、每块的 T.reduce_sum 和累加，以及写出 y[bx]。")

    def on_error(self, case, exc, paths):
        return tilelang_error_hint(exc, paths[FILE], FILE)

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        op = impl["op"]
        op(x)
        out = torch.empty(M, device="cuda")
        calls = {"你的内核": lambda: op(x), "torch.sum": lambda: torch.sum(x, dim=1, out=out)}
        return time_against(calls, x.numel() * 4 + M * 4, x, f"{M}x{N} float32")
