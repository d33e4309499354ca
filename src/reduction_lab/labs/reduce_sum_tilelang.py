"""实验 reduce-sum-tilelang：``T.Serial`` 走过列块，块内 ``T.reduce_sum``。

讲义：docs/tilelang/reduce.md；实验页：docs/labs/reduce-sum.ipynb。
sim 模式经 TileLang 的 C 目标在 CPU 上运行，gpu 模式编译成当前 GPU 架构的 CUDA。

诊断分两类。从源码看得出的：没写出 y、读写的不是第 bx 行、16 位（或别的）dtype、acc 没有清零、
``clear=False`` 的块内归约、改过的内核参数、sim 模式的 C 目标不认的 ``T.Parallel`` 与 ``T.alloc_fragment``。
从结果看得出的（与几种常见错误会算出的和比较）：漏了最后一个不满的列块、循环少走了几轮、只剩最后一块
（累加写成赋值、写出 part、归约直接写进 acc、累加写在循环外）、每一轮读的是同一块。
两个 TileLang 实验共用的读源码的小工具与报错的诊断在 :mod:`.tilelang_source`。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .core import Lab, load_learner_module, time_against
from .grading import Case, Hint, find_line
from .tilelang_source import (OTHER_DTYPE, check_bounds_in, code_lines, kernel_line, split_args, loop_span, low_precision_hint, out_dtype_hint, quiet_compiler,
                              row_index_hint, tilelang_error_hint)

FILE = "reduce_sum.py"
KERNEL = "reduce_sum_kernel"
PARAMS = ("x", "block_n", "threads", "cpu")


def _block_n(text: str) -> int:
    m = re.search(r"block_n\s*:\s*int\s*=\s*(\d+)", text)
    return int(m.group(1)) if m else 256


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
        check_bounds_in(module)            # 编译之前先检查下标（越界的读写在 C 栈上与 GPU 上都不一定报错）
        text = paths[FILE].read_text(encoding="utf-8")
        return {"op": module.reduce_sum, "path": paths[FILE], "text": text, "block_n": _block_n(text)}

    def run_case(self, impl, case: Case, mode):
        seen = []

        def call(x):
            out = impl["op"](x)
            seen.append(out)
            return out

        with quiet_compiler(mode):
            ok, err, note, hint = C.run_row_sum_case(self, impl, case, mode, call)
        if ok and seen and seen[-1].dtype != torch.float32:
            return False, err, "dtype 不对", out_dtype_hint(seen[-1], impl["text"], KERNEL, FILE)
        return ok, err, note, hint

    def wrong_shape(self, out, x, impl) -> Hint:
        return Hint("wrong-shape", f"输出形状应为 ({x.shape[0]},)，得到 {tuple(out.shape)}", FILE,
                    find_line(impl["text"], r"T\.empty", lang="py"))

    def wrong_answer(self, mm, impl) -> Hint:
        xs, same, first = mm.x, mm.same, mm.first_row()
        N = xs.shape[1]
        bn = impl["block_n"]
        text = impl["text"]
        full = (N // bn) * bn
        nt = -(-N // bn)
        code = "\n".join(code_lines(text))
        K = KERNEL

        def at(pattern, exclude=None):
            return kernel_line(text, K, pattern, exclude)

        if not re.search(r"^\s*y\s*\[[^\]]*\]\s*=", code, re.M):
            # T.empty 的输出没有初值：没写的行是上一次留下的任意值，只能从源码看出来
            return Hint("not-written", "没有写出结果：内核里没有给 y[bx] 赋值", FILE,
                        find_line(text, r"T\.empty", lang="py"), first,
                        "行的和算完之后写出：for i in tile_loop(1): y[bx] = acc[i]（T.empty 分配的 y 没有初值）。")
        # 从源码看得出的错误：16 位的 dtype、读写的不是第 bx 行、acc 没有清零、clear=False 的块内归约
        for h in (low_precision_hint(text, K, FILE, OTHER_DTYPE),
                  row_index_hint(text, K, FILE, "y", r"\by\s*\[([^\]]*)\]\s*=", "写出的",
                                 "写成 y[bx] = acc[i]。"),
                  row_index_hint(text, K, FILE, "x", r"T\.copy\(\s*x\s*\[([^\]]*)\]", "T.copy 读的",
                                 "写成 T.copy(x[bx, k * block_n], tile)：先行号，再列号。")):
            if h is not None:
                h.detail = first
                return h
        initialised = (r"T\.clear\(\s*acc\b|T\.fill\(\s*acc\b|\bacc\s*\[[^\]]*\]\s*=(?!=)"
                       r"|T\.reduce_\w+\([^,]*,\s*acc\b")
        if at(r"\bacc\s*\[[^\]]*\]\s*\+=") and not re.search(initialised, code):
            return Hint("no-init", "acc 没有清零：累加从一个任意的值开始", FILE, at(r"\bacc\s*=\s*\w"), first,
                        "分配之后先 T.clear(acc)（alloc 得到的缓冲区没有初值），再在循环里累加。")
        line = at(r"T\.reduce_(?!sum\b)\w+\(")
        if line is not None and at(r"T\.reduce_sum\(") is None:
            name = re.search(r"T\.reduce_\w+", code_lines(text)[line - 1]).group(0)
            return Hint("wrong-reduce", f"行和要用 T.reduce_sum，这里用的是 {name}", FILE, line, first,
                        "把这一块的元素加起来：T.reduce_sum(tile, part, dim=1)。")
        line = at(r"T\.reduce_sum\(\s*\w+\s*,\s*(?!acc\b)\w+.*clear\s*=\s*False")
        if line is not None:
            return Hint("reduce-clear", "T.reduce_sum(..., clear=False) 把这一块的和加到 part 原来的值上", FILE, line, first,
                        "part 每一块都要从 0 算起：去掉 clear=False（默认先清零），再 acc[i] += part[i]；"
                        "或者直接 T.reduce_sum(tile, acc, dim=1, clear=False) 累加进 acc。")
        copy = at(r"T\.copy\(\s*x\b")
        start = self._copy_start(text)
        if start is not None and start.replace(" ", "") in ("k+block_n", "block_n+k", "k-block_n", "k"):
            # 源码里读 x 的起点明显不是第 k 个列块的开头：先说它。读到行尾之外的块是补的 0，结果像是少走了几轮
            # （gpu 模式下短行的每一块都在行外，和是 0），按结果会误报成循环的范围
            return Hint("copy-start", f"每一轮读的列块不对：T.copy 的列起点是 {start}，不是第 k 个列块的开头", FILE, copy,
                        first, "第 k 个列块从第 k * block_n 列开始：T.copy(x[bx, k * block_n], tile)。")
        # 从结果看得出的错误：只加了前几个列块、只剩最后一块、每一轮读的是同一块
        n_line = at(r"\bn_tiles\s*=")
        rounds_up = n_line is not None and re.search(r"ceildiv|\+\s*block_n\s*-\s*1|\+\s*1\b",
                                                      code_lines(text)[n_line - 1])
        serial = at(r"for\s+\w+\s+in\s+T\.(?:Serial|serial|Pipelined)\(")
        if N % bn and not rounds_up and same(xs[:, :full].sum(1)):
            return Hint("tail-tile", f"最后一个不满的列块（{N % bn} 列）没有算进去", FILE,
                        n_line, first,
                        "列块数要向上取整：n_tiles = T.ceildiv(N, block_n)；T.copy 会把越过行尾的部分补 0。")
        if N > bn and same(xs[:, :bn].sum(1)):
            return Hint("one-tile", "只加了第一个列块", FILE, serial, first,
                        "for k in T.Serial(n_tiles) 的循环体里按 k 取列块：T.copy(x[bx, k * block_n], tile)。")
        done = next((t for t in range(nt) if same(xs[:, :t * bn].sum(1))), None)
        if done is not None:
            got = f"只加了前 {done} 个列块（这一行有 {nt} 个）" if done else f"一个列块也没有加（这一行有 {nt} 个）"
            return Hint("serial-bound", f"{got}：循环少走了几轮", FILE,
                        serial or n_line, first,
                        "for k in T.Serial(n_tiles) 走满全部 n_tiles = T.ceildiv(N, block_n) 个列块，不要减 1。")
        if N > bn and same(xs[:, (nt - 1) * bn:].sum(1)):
            return self._last_tile_only(text, first, serial)
        same_start = xs[:, :bn].sum(1) * nt
        by_one = sum(xs[:, k:k + bn].sum(1) for k in range(nt))
        if N > bn and (same(same_start) or same(by_one)):
            return Hint("copy-start", "每一轮读的列块不对：T.copy 的起点没有按 k * block_n 移动", FILE, copy, first,
                        "第 k 个列块从第 k * block_n 列开始：T.copy(x[bx, k * block_n], tile)。")
        if start is not None and start.replace(" ", "") not in ("k*block_n", "block_n*k"):
            # 结果看不出规律，源码里读 x 的起点又不是第 k 个列块的开头（例如 k + block_n）
            return Hint("copy-start", f"每一轮读的列块不对：T.copy 的列起点是 {start}，不是第 k 个列块的开头", FILE, copy,
                        first, "第 k 个列块从第 k * block_n 列开始：T.copy(x[bx, k * block_n], tile)。")
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "检查列块数、T.copy 的起点 (bx, k * block_n)、每块的 T.reduce_sum 和累加，以及写出 y[bx]。")

    @staticmethod
    def _copy_start(text: str) -> str | None:
        """内核里读 x 的 T.copy 的列起点（``T.copy(x[bx, 起点], tile)`` 的第二个下标），没有这样的 T.copy 时 None。"""
        line = kernel_line(text, KERNEL, r"T\.copy\(\s*x\s*\[")
        if line is None:
            return None
        m = re.search(r"T\.copy\(\s*x\s*\[([^\]]*)\]", code_lines(text)[line - 1])
        parts = split_args(m.group(1)) if m else []
        return " ".join(parts[1].split()) if len(parts) == 2 else None

    def _last_tile_only(self, text: str, first: str, serial: int | None) -> Hint:
        """结果只剩最后一个列块的和：找出是哪一行把前面各块的和丢掉了。"""
        K = KERNEL
        line = kernel_line(text, K, r"\bacc\s*\[\w*\]\s*=(?!=)")
        if line is not None:
            return Hint("overwrite", "只剩最后一个列块的和：累加写成了赋值", FILE, line, first,
                        "acc[i] += part[i]，不是 acc[i] = part[i]。")
        line = kernel_line(text, K, r"\by\s*\[[^\]]*\]\s*=.*\bpart\b")
        if line is not None:
            return Hint("write-part", "写出的是最后一个列块的和 part，不是整行累加的 acc", FILE, line, first,
                        "循环结束后写出累加器：y[bx] = acc[i]。")
        line = kernel_line(text, K, r"T\.reduce_sum\([^,]*,\s*acc\b", exclude=r"clear\s*=\s*False")
        if line is not None:
            return Hint("reduce-into-acc", "T.reduce_sum 直接写进 acc：它先把输出清零，前面各块的和都丢了", FILE, line,
                        first, "归约进 part 再 acc[i] += part[i]；或者 T.reduce_sum(tile, acc, dim=1, clear=False)"
                               "（clear=False：加到 acc 原来的值上）。")
        line = kernel_line(text, K, r"\bacc\s*\[\w*\]\s*\+=")
        loop = loop_span(text, K, serial)
        if line is not None and loop is not None:
            if not loop[0] < line <= loop[1]:
                return Hint("accumulate-outside", "累加写在了 T.Serial 循环的外面：只加上了最后一块的和", FILE, line,
                            first, "把 T.reduce_sum 与 acc[i] += part[i] 缩进到 for k in T.Serial(n_tiles) 的循环体里。")
        return Hint("overwrite", "只剩最后一个列块的和：前面各块的和没有留下", FILE, None, first,
                    "每一块的和都要加进 acc：acc[i] += part[i]，写在 T.Serial 的循环体里。")

    def on_error(self, case, exc, paths):
        return tilelang_error_hint(exc, paths[FILE], FILE, KERNEL, PARAMS)

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        op = impl["op"]
        op(x)
        out = torch.empty(M, device="cuda")
        calls = {"你的内核": lambda: op(x), "torch.sum": lambda: torch.sum(x, dim=1, out=out)}
        return time_against(calls, x.numel() * 4 + M * 4, x, f"{M}x{N} float32")
