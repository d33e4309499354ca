"""两个 TileLang 实验（reduce-sum-tilelang、softmax-tilelang）共用的：读学习者内核的源码（去掉注释的行、
内核函数里的行、调用的参数），从源码看得出的错误（16 位的 dtype、读写的不是第 bx 行、输出的 dtype），
编译时不让 C 编译器的输出进终端（:class:`quiet_compiler`），以及把 TileLang 的报错换成诊断（:func:`tilelang_error_hint`）。
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path

from .. import runtime
from ..tilelang_kernels.cpu_pch import cpu_compiler
from .grading import Hint, exception_chain, root_cause, traceback_line, zh_part

def code_lines(text: str) -> list[str]:
    """源码的各行，去掉 ``#`` 之后的注释（行号不变：第 i 行是 ``[i - 1]``）。"""
    return [ln.split("#")[0] for ln in text.splitlines()]


def kernel_def(text: str, kernel: str):
    """内核函数的 ``ast.FunctionDef``（文件有语法错误、或没有这个函数时是 None）。"""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)


def kernel_lines(text: str, kernel: str) -> list[tuple[int, str]]:
    """内核函数体里的 (行号, 去掉注释的代码)；找不到内核时是整个文件。"""
    lines = code_lines(text)
    fn = kernel_def(text, kernel)
    lo, hi = (fn.lineno, fn.end_lineno) if fn is not None else (1, len(lines))
    return [(i, lines[i - 1]) for i in range(lo, hi + 1)]


def kernel_line(text: str, kernel: str, pattern: str, exclude: str | None = None) -> int | None:
    """内核里第一处匹配 ``pattern`` 的行号（``exclude`` 匹配的行跳过）。"""
    rx, ex = re.compile(pattern), re.compile(exclude) if exclude else None
    return next((i for i, c in kernel_lines(text, kernel) if rx.search(c) and not (ex and ex.search(c))), None)


#: 16 位的 dtype：实验全程用 float32
_LOW_PRECISION = r"\b(?:T\.)?(float16|bfloat16|half)\b"
#: float32 之外的 dtype（TileLang 报 dtype 不一致时找它；gpu 模式下 int32 的块照样编译，只是截掉小数）
OTHER_DTYPE = r"\bT\.(float16|bfloat16|half|float64|u?int(?:8|16|32|64))\b"


def low_precision_hint(text: str, kernel: str, file: str, pattern: str = _LOW_PRECISION) -> Hint | None:
    """内核里用了 16 位（``pattern``：或别的）dtype（缓冲区、累加器或输出）：这个实验全程用 float32。"""
    line = kernel_line(text, kernel, pattern)
    if line is None:
        return None
    name = re.search(pattern, code_lines(text)[line - 1]).group(1)
    why = "16 位的累加几百个数之后就只剩三四位有效数字，" if re.fullmatch(_LOW_PRECISION, name) else ""
    return Hint("dtype", f"内核里用了 {name}：这个实验的输入、输出和累加都是 float32", file, line,
                fix=f"把这一行的 {name} 改回 T.float32：{why}输出的 dtype 也要与评分程序给的 float32 一致。")


def out_dtype_hint(out, text: str, kernel: str, file: str) -> Hint:
    """输出的 dtype 不是 float32（值都对）：指向内核里分配 y 的那一行。"""
    h = low_precision_hint(text, kernel, file, OTHER_DTYPE)
    line = kernel_line(text, kernel, r"\by\s*=\s*T\.empty")
    return Hint("dtype", f"输出的 dtype 是 {str(out.dtype).replace('torch.', '')}，应为 float32", file,
                line if line is not None else h.line if h else None,
                fix="输出与输入一样是 float32：y = T.empty(..., T.float32)。")


def loop_span(text: str, kernel: str, line: int | None) -> tuple[int, int] | None:
    """从第 ``line`` 行开始的 for 循环占的行（首行, 末行）；那一行不是 for 循环时是 None。"""
    fn = kernel_def(text, kernel)
    if fn is None or line is None:
        return None
    loop = next((n for n in ast.walk(fn) if isinstance(n, ast.For) and n.lineno == line), None)
    return (loop.lineno, loop.end_lineno) if loop is not None else None


def call_args(line: str, func: str) -> str | None:
    """``line`` 里 ``func(`` 之后、与它配对的右括号之前的文字。"""
    at = line.find(func + "(")
    if at < 0:
        return None
    depth, start = 0, at + len(func)
    for i in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return line[start + 1:i]
    return line[start + 1:]


def split_args(args: str) -> list[str]:
    """按顶层的逗号拆开参数（方括号、圆括号里的逗号不拆）。"""
    out, depth, cur = [], 0, ""
    for ch in args:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def row_index_hint(text: str, kernel: str, file: str, buf: str, pattern: str, what: str, fix: str) -> Hint | None:
    """``buf[行, ...]`` 的行号不是 ``bx``（内核的 bx 就是行号）：读或写到了别的行。"""
    rx = re.compile(pattern)
    for i, c in kernel_lines(text, kernel):
        m = rx.search(c)
        if m:
            args = split_args(m.group(1))
            row = " ".join(args[0].split()) if args else ""
            if not re.fullmatch(r"bx(?::bx\+1)?", row.replace(" ", "")):
                return Hint("wrong-row", f"{what}不是第 bx 行：{buf} 的第一个下标是 {row}", file, i,
                            fix=f"一个线程块负责一行，T.Kernel 给的 bx 就是行号。{fix}")
    return None


def _signature_hint(exc: BaseException, text: str, file: str, kernel: str | None, params,
                    line: int | None) -> Hint | None:
    """内核的参数与骨架不同（删掉了 cpu、多了一个参数……）：末尾的启动函数照骨架的参数调用内核。
    内核里用到删掉的参数是 NameError；启动时参数对不上是 TypeError，出错的行不在内核里。"""
    if not kernel or not params:
        return None
    fn = kernel_def(text, kernel)
    if fn is None:
        return None
    mine = [a.arg for a in fn.args.args]
    if mine == list(params):
        return None
    root = root_cause(exc)
    missing = [p for p in params if p not in mine]
    at_launch = isinstance(root, TypeError) and not (line is not None and fn.lineno < line <= fn.end_lineno)
    if not (at_launch or (isinstance(root, NameError) and getattr(root, "name", None) in missing)):
        return None
    return Hint("signature", f"内核 {kernel} 的参数改过了：骨架里是 ({', '.join(params)})，现在是 ({', '.join(mine)})",
                file, fn.lineno, detail=str(root)[:300],
                fix="把内核的名字和参数改回骨架里的样子：文件末尾写好的函数按这些参数启动内核"
                    "（block_n、threads、cpu 都由它给出）。")


class quiet_compiler:
    """with 块里写到文件描述符 2 的文字先收起来：sim 模式下 TileLang 生成的 C 代码编译失败时，编译器把几十行
    模板报错（带着临时文件和安装目录的路径）直接写到终端，每个用例一遍。它们不再印出，第一条 ``error:`` 记在
    异常的 ``compiler_error`` 上，交给诊断；别的文字（警告等）照样写回标准错误。

    ``mode == "sim"`` 时还经预编译头编译 C 目标（:func:`reduction_lab.tilelang_kernels.cpu_pch.cpu_compiler`）：
    一次评分要编 6 个内核，冷缓存下 softmax-tilelang 的一次评分约 9 s 变成约 5 s。"""

    def __init__(self, mode: str | None = None):
        self._fast = cpu_compiler(mode == "sim")

    def __enter__(self):
        self._fast.__enter__()
        sys.stderr.flush()
        try:
            self._tmp = tempfile.TemporaryFile(mode="w+b")
            self._saved = os.dup(2)
            os.dup2(self._tmp.fileno(), 2)
        except OSError:
            self._saved = None
        return self

    def __exit__(self, exc_type, exc, tb):
        self._fast.__exit__(None, None, None)
        if self._saved is None:
            return False
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        text = self._tmp.read().decode("utf-8", "replace")
        self._tmp.close()
        errors = re.findall(r"\berror:\s*(.+)", text)
        if errors and re.search(r"\.(?:cpp|cc|c|h):\d+", text):
            if exc is not None:
                with contextlib.suppress(AttributeError, TypeError):
                    exc.compiler_error = errors[0].strip()[:300]
        elif text:
            sys.stderr.write(text)
            sys.stderr.flush()
        return False


def _span_line(message: str, path) -> int | None:
    """TileLang 报错里指向学习者文件的位置（``--> 文件:行:列``）。"""
    for m in re.finditer(r"-->\s*(.+?):(\d+):\d+", message):
        try:
            if Path(m.group(1)).resolve() == Path(path).resolve():
                return int(m.group(2))
        except OSError:
            continue
    return None


def _first_line(message: str) -> str:
    lines = [ln.strip() for ln in zh_part(message).splitlines() if ln.strip()]
    return lines[0][:600] if lines else ""


def check_bounds_in(module) -> None:
    """学习者文件经 ``retarget`` 得到内核：换成 :func:`reduction_lab.tilelang_kernels.bounds.checked_retarget`，
    每组新参数在编译之前先检查下标，越界时抛出 ``TileBoundsError``（由 :func:`tilelang_error_hint` 诊断）。"""
    from ..tilelang_kernels.bounds import checked_retarget

    if callable(getattr(module, "retarget", None)):
        module.retarget = checked_retarget


def bounds_hint(issue, text: str, file: str, kernel: str) -> Hint:
    """内核里证明会越界的一次读写（:class:`reduction_lab.tilelang_kernels.bounds.BoundsIssue`）-> 诊断：指向那一组
    循环变量的第 ``issue.nest`` 个 ``for``（按源码顺序），找不到时指向第一处用到这个缓冲区的行。"""
    fn = kernel_def(text, kernel)
    loops = []

    def names(t):
        if isinstance(t, ast.Tuple):
            return tuple(e.id for e in t.elts if isinstance(e, ast.Name))
        return (t.id,) if isinstance(t, ast.Name) else ()

    def visit(node, chain):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.For):
                inner = chain + names(child.target)
                # 从内核的 T.Kernel 变量（bx）之后，这个 for 与外层的 for 的变量正好是越界那次读写外面的循环
                if inner and issue.loops[-len(inner):] == inner:
                    loops.append(child.lineno)
                visit(child, inner)
            else:
                visit(child, chain)

    if fn is not None:
        visit(fn, ())
        loops.sort()
    by_loop = issue.index in issue.loops           # 下标就是循环变量：循环的范围写错了
    line = (loops[issue.nest] if issue.nest < len(loops) else loops[0]) if loops else None
    if line is None or not by_loop:
        # 下标不只是循环变量（如 y[bx + 1]）：指向那次读写；否则指向循环
        span = loop_span(text, kernel, line) if line is not None else None
        access = rf"\b{re.escape(issue.buffer)}\s*\["
        hit = next((i for i, c in kernel_lines(text, kernel) if re.search(access, c)
                    and (span is None or span[0] <= i <= span[1])), None)
        line = hit or line
    fix = (f"让循环的范围与 {issue.buffer} 的形状一致（块内的循环写 tile_loop(1, block_n)，下标从 0 到大小减 1）；"
           f"要跳过行尾之外的列，用条件（j < N），不要改循环的范围。" if by_loop else
           f"检查下标 {issue.index}：它要落在 0 … {issue.last()} 之内。")
    return Hint("out-of-bounds", issue.message(), file, line,
                detail="这次读写不一定让结果出错：sim 模式下越界写进的是 C 栈上相邻的变量或别的行，GPU 上也不一定报错，"
                       "所以评分程序在编译之前按循环的范围检查每一次下标。", fix=fix)


def tilelang_error_hint(exc: BaseException, path, file: str, kernel: str | None = None, params=()) -> Hint:
    """TileLang 实验的学习者文件抛出的异常 -> 诊断：语法错误、改过的内核参数、没有定义的名字、sim 模式的 C 目标
    不认的写法、16 位的 dtype、归约的形状，以及 TileLang 自己的报错（指向文件里的行）。"""
    if isinstance(exc, SyntaxError):
        return Hint("syntax-error", f"语法错误：{exc.msg}", file, exc.lineno, fix="按 Python 的提示修改这一行。")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        text = ""
    from ..tilelang_kernels.bounds import TileBoundsError

    bound = next((e for e in exception_chain(exc) if isinstance(e, TileBoundsError)), None)
    if bound is not None:
        return bounds_hint(bound.issue, text, file, kernel or "")
    line = traceback_line(exc, path)
    root = root_cause(exc)
    message = "\n".join(str(e) for e in exception_chain(exc))
    sig = _signature_hint(exc, text, file, kernel, params, line)
    if sig is not None:
        return sig
    if isinstance(root, NameError):
        name = getattr(root, "name", None) or "?"
        return Hint("undeclared", f"用到了没有定义的名字 {name}", file, line, detail=str(root),
                    fix=f"先定义 {name}（T.alloc_local / T.alloc_fragment 分配的缓冲区，或检查拼写）。")
    m = re.search(r"module 'tilelang\.language' has no attribute '(\w+)'", message)
    if m:
        return Hint("unknown-api", f"TileLang 里没有 T.{m.group(1)}", file, line, detail=str(root)[:300],
                    fix="检查拼写，对照骨架注释里的写法（例如 T.ceildiv、T.Serial、T.copy、T.reduce_sum）。")
    k = kernel or ""
    in_kernel = line is not None and any(i == line for i, _ in kernel_lines(text, k)) if kernel else True
    if "T.Parallel" in message and "Local buffer" in message:
        return Hint("cpu-target", "sim 模式下内核编译成 C 目标：local 缓冲区不能用 T.Parallel 循环", file,
                    kernel_line(text, k, r"T\.Parallel\(", exclude=r"tile_loop\s*=") or line,
                    detail=_first_line(message),
                    fix="块内的循环用骨架里的 tile_loop(...)：sim 模式下它是串行的 T.grid，gpu 模式下是 T.Parallel。")
    if "layout for fragment" in message and runtime.MODE == "sim":
        return Hint("cpu-target", "sim 模式下内核编译成 C 目标：它不认 T.alloc_fragment", file,
                    kernel_line(text, k, r"T\.alloc_fragment", exclude=r"if\s+cpu\s+else") or _span_line(message, path)
                    or line, detail=_first_line(message),
                    fix="缓冲区用骨架里的 alloc(...)：sim 模式下它是 T.alloc_local，gpu 模式下是 T.alloc_fragment。")
    compiled = "Compilation Failed" in message
    compiler = next((getattr(e, "compiler_error", None) for e in exception_chain(exc)
                     if getattr(e, "compiler_error", None)), None)
    low = low_precision_hint(text, k, file) if kernel else None
    if kernel and low is None and (compiled or "dtype" in message):
        low = low_precision_hint(text, k, file, OTHER_DTYPE)
    if low is not None and (compiled or re.search(r"dtype|float16|bfloat16|\bhalf", message)):
        low.detail = "TileLang 生成的 C 代码没能编译。" if compiled else _first_line(message)
        return low
    if "Inconsistent layouts between src and dst in ReduceOp" in message:
        # gpu 模式：T.reduce_* 要把 [1, block_n] 的 fragment 分到 threads 个线程上，block_n 配不上线程数时布局推断失败
        return Hint("block-threads", "gpu 模式下 TileLang 排不出 T.reduce_* 的布局：块宽 block_n 与线程数配不上", file,
                    kernel_line(text, k, r"\bblock_n\s*:\s*int\s*=") or line, detail=_first_line(message),
                    fix="块宽 block_n 取线程数的整数倍（骨架的 block_n = 256 是 threads = 128 的 2 倍）："
                        "tile 的 block_n 列平均分给各个线程，每个线程的几列先在寄存器里归约，再跨线程归约。"
                        "sim 模式的 C 目标是串行的，没有这个限制。")
    if "Invalid reduce output shape" in message:
        return Hint("reduce-dim", "T.reduce_* 的 dim 与输出的形状不配", file, line, detail=_first_line(message),
                    fix="tile 的形状是 [1, block_n]：一行的 block_n 个元素沿 dim=1（列的方向）归约，输出的形状是 [1]。")
    if isinstance(root, IndexError) and "index(es) were provided" in message:
        return Hint("buffer-dims", "下标的个数与缓冲区的维数不一致", file, line, detail=_first_line(message),
                    fix="tile 分配成 [1, block_n]（一行、block_n 列），下标写 tile[i, j]；"
                        "形状改过的话，分配与每一处下标要一起改。")
    vec = re.search(r"Cannot convert type (\w+?)x(\d+) to C type", message) if runtime.MODE == "sim" else None
    copy = kernel_line(text, k, r"T\.copy\(\s*x\s*\[") if vec and kernel and text else None
    if copy is not None:
        # TileLang 证出这次读整个落在行尾之外时把它写成一次 N 个元素的向量赋值，C 目标没有这样的类型
        return Hint("copy-start", "T.copy 读的列块整个落在这一行之外：sim 模式的 C 目标连编译都过不了", file, copy,
                    detail=f"TileLang 报错：{_first_line(message)}（{vec.group(2)} 个 {vec.group(1)} 的向量）",
                    fix="T.copy 的起点要落在这一行之内：第 k 个列块从第 k * block_n 列开始（T.copy(x[bx, k * block_n], tile)），"
                        "整行一块时从第 0 列开始（T.copy(x[bx, 0], tile)）。")
    if not in_kernel:
        line = _span_line(message, path) or line
    if isinstance(root, AssertionError) and text and line and "T.copy(" in code_lines(text)[line - 1]:
        return Hint("copy-shape", "T.copy 的源和目的维数不一致", file, line, detail=_first_line(str(root)),
                    fix="T.copy 的两边按同样的维数写：tile 是 [1, block_n] 的二维块，全局张量也写成二维的起点"
                        " x[行, 列]、y[行, 列]（例如 T.copy(x[bx, 0], tile)）。")
    call = re.search(r"\bT\.(\w+)\(", code_lines(text)[line - 1]) if text and line else None
    if isinstance(root, TypeError) and call and in_kernel:
        return Hint("api-args", f"T.{call.group(1)} 的参数不对", file, line, detail=_first_line(str(root)),
                    fix="对照骨架注释里的写法：T.copy(源, 目的)，例如 T.copy(x[bx, 0], tile)；"
                        "T.reduce_sum(源, 目的, dim=1)。")
    if compiled:
        detail = "TileLang 生成的 C 代码没能编译" + (f"：{compiler}" if compiler else "。")
    else:
        detail = _first_line(message)
    return Hint("exception", f"TileLang 报错 {type(root).__name__}", file, line, detail=detail,
                fix="这一行的 TileLang 写法对照讲义「TileLang的归约」。")
