"""静态检查：用 32 位整数算的行偏移（行号 x 行距），Triton 与 CUDA C 各一份。

行号乘行距超过 2^31 - 1 时（例如 65536 x 32768 的矩阵），32 位的乘积溢出成负数，读写到别处。
用例里的矩阵都远小于 2^31 个元素，这个错误在用例里不会出现，所以从源码找：

* Triton（Python 的语法树）：``tl.program_id``、``tl.arange`` 与 ``range`` 的循环变量都是 32 位；某个乘法的一边
  由它们算出、中间没有 ``.to(tl.int64)``，另一边是行距（名字里有 ``stride``，或 ``n_cols``）；
* CUDA C（libclang 给出的类型）：结果是 ``int`` / ``unsigned`` 的乘法，一边由 ``blockIdx`` / ``gridDim`` 算出，
  另一边是运行时的量（不是常数，也不只是 ``blockDim``）；以及循环条件里拿 32 位的变量去比 64 位的上界
  （``for (int i = ...; i < n; i += stride)``，``n`` 是 ``int64_t``）：``n`` 超过 2^31 - 1 时 ``i`` 溢出。
"""

from __future__ import annotations

import ast
import functools

from .grading import Hint

_SOURCES = {"program_id", "arange"}
_STRIDE_NAMES = {"n_cols", "ncols", "N"}


def _is_int64_cast(node: ast.AST) -> bool:
    """``e.to(tl.int64)`` 或 ``e.to(tl.uint64)``。"""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and bool(node.args) and isinstance(node.args[0], ast.Attribute) and node.args[0].attr in ("int64", "uint64"))


def _is_source(node: ast.AST) -> bool:
    """``tl.program_id(...)``、``tl.arange(...)``。"""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SOURCES


def _width(node: ast.AST, names: dict[str, int]) -> int | None:
    """整数表达式的位宽：64（``.to(tl.int64)`` 或由它算出）、32（来自 32 位的来源）、None（说不准，例如参数）。
    Triton 的算术按较宽的一边提升：两边有一个是 64 位，结果就是 64 位。"""
    if _is_int64_cast(node):
        return 64
    if _is_source(node):
        return 32
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Subscript):
        return _width(node.value, names)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not isinstance(node.func.value, ast.Name | ast.Attribute):
        return _width(node.func.value, names)          # rows[:, None].to(...)、(a + b).reshape(...)：看接收者
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
            and node.func.value.id in names:
        return names[node.func.value.id]               # rows.reshape(...)
    widths = [w for c in ast.iter_child_nodes(node) if (w := _width(c, names)) is not None]
    return max(widths) if widths else None


def _is_stride(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "stride" in node.id or node.id in _STRIDE_NAMES
    if isinstance(node, ast.Subscript):
        return _is_stride(node.value)
    return False


def narrow_offsets(text: str, kernel: str) -> list[tuple[int, str]]:
    """内核 ``kernel`` 里 32 位的行号乘行距的地方：[(行号, 那个乘法的源码)]。"""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    fn = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        return []
    names: dict[str, int] = {}
    for _ in range(4):                       # 赋值链不长：几轮传播就到不动点
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                w = _width(node.value, names)
                for t in targets:
                    if isinstance(t, ast.Name):
                        if w is None:
                            names.pop(t.id, None)
                        else:
                            names[t.id] = w
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                it = node.iter
                if isinstance(it, ast.Call) and (getattr(it.func, "id", None) == "range"
                                                 or getattr(it.func, "attr", None) in ("range", "static_range")):
                    names[node.target.id] = 32
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if _is_stride(b) and _width(a, names) == 32:
                    out.append((node.lineno, ast.get_source_segment(text, node) or ""))
                    break
    return sorted(set(out))


def _offset_hint(found: list[tuple[int, str]], why: str, fix: str, file: str) -> Hint | None:
    """第一处 32 位的乘法 -> 诊断（其余的行列在说明里）；没有时 None。"""
    if not found:
        return None
    line, code = found[0]
    more = "、".join(f"第 {ln} 行" for ln, _ in found[1:])
    detail = (f"{code}：{why}；乘积超过 2^31 - 1（例如 65536 x 32768 的矩阵）时溢出成负数，读写到别的地方。"
              "用例的矩阵都小，测不出来。" + (f"同样的乘法还在{more}。" if more else ""))
    return Hint("int32-offset", "下标用 32 位整数计算：大矩阵上会溢出", file, line, detail=detail, fix=fix)


def narrow_offset_hint(text: str, kernel: str, file: str) -> Hint | None:
    """Triton 内核里第一处 32 位的行偏移 -> 诊断；没有时 None。"""
    return _offset_hint(narrow_offsets(text, kernel), "两边都是 32 位整数", "行号先转成 64 位再乘行距："
                        "row = tl.program_id(0).to(tl.int64)，或 rows.to(tl.int64)[:, None] * in_row_stride。", file)


# ---------------------------------------------------------------- CUDA C
_GRID_NAMES = {"blockIdx", "gridDim"}


@functools.lru_cache(maxsize=8)
def _parse_cuda(text: str, filename: str):
    """(翻译单元, CursorKind, TypeKind, libclang 的函数表)；解析不了时 None（没有 libclang 时模拟器自己会报出
    FrontendMissingError：这里不重复）。同一份源码的两个检查共用一次解析。"""
    try:
        import clang.cindex as ci

        from ..simt.clang_frontend import CLANG_ARGS

        tu = ci.Index.create().parse(filename, args=list(CLANG_ARGS), unsaved_files=[(filename, text)])
        return tu, ci.CursorKind, ci.TypeKind, ci.conf.lib
    except Exception:  # noqa: BLE001  ImportError、LibclangError、TranslationUnitLoadError
        return None


def _source_of(c, lines: list[str]) -> str:
    """表达式在源码里的原文（跨行时空串）。"""
    ext = c.extent
    if ext.start.line == ext.end.line and ext.start.line <= len(lines):
        return lines[ext.start.line - 1][ext.start.column - 1:ext.end.column - 1]
    return ""


def cuda_narrow_offsets(text: str, filename: str) -> list[tuple[int, str]]:
    """CUDA C 源码里 32 位的乘法：一边由 ``blockIdx`` / ``gridDim`` 算出（行号），另一边是运行时的量（列数、行距），
    [(行号, 源码)]。例如 ``int row = blockIdx.x; int c = cols; in + row * c``。乘以常数（``blockIdx.x * TILE``）
    与 ``blockDim`` 的不算。
    用 libclang 按 C++ 的类型判断（``int64_t row = blockIdx.x; row * cols`` 是 64 位的，不算）；解析不了时返回 []。"""
    parsed = _parse_cuda(text, filename)
    if parsed is None:
        return []
    tu, K, TK, lib = parsed
    lines = text.splitlines()

    def in_file(c) -> bool:
        return c.location.file is not None and c.location.file.name == filename

    def refs(c) -> set[str]:
        return {d.spelling for d in c.walk_preorder() if d.kind == K.DECL_REF_EXPR}

    derived = set(_GRID_NAMES)
    decls = [c for c in tu.cursor.walk_preorder() if in_file(c) and c.kind == K.VAR_DECL]
    assigns = [c for c in tu.cursor.walk_preorder() if in_file(c) and c.kind == K.BINARY_OPERATOR
               and lib.clang_getCursorBinaryOperatorKind(c) == 22]
    for _ in range(4):
        for d in decls:
            kids = list(d.get_children())
            if kids and refs(kids[-1]) & derived:
                derived.add(d.spelling)
        for a in assigns:
            lhs, rhs = list(a.get_children())[:2]
            if lhs.kind == K.DECL_REF_EXPR and refs(rhs) & derived:
                derived.add(lhs.spelling)
    out = []
    for c in tu.cursor.walk_preorder():
        if not (in_file(c) and c.kind == K.BINARY_OPERATOR and lib.clang_getCursorBinaryOperatorKind(c) == 3):
            continue
        if c.type.get_canonical().kind not in (TK.INT, TK.UINT):
            continue
        a, b = list(c.get_children())[:2]
        ra, rb = refs(a), refs(b)
        # 一边由网格算出（行号、线程号），另一边是运行时的量（列数、行距）：常数（TILE）与 blockDim 不算，
        # 块内的二维下标 blockIdx.y * TILE 不会接近 2^31
        if not ((ra & derived and rb - {"blockDim"}) or (rb & derived and ra - {"blockDim"})):
            continue
        out.append((c.location.line, _source_of(c, lines)))
    return sorted(set(out))


#: libclang 的 CXBinaryOperatorKind：<、>、<=、>=、!=
_COMPARISONS = {11, 12, 13, 14, 16}


def cuda_narrow_counters(text: str, filename: str) -> list[tuple[int, str]]:
    """CUDA C 的循环条件（``for`` / ``while`` / ``do``）里，32 位整数的变量与 64 位的量比较：[(行号, 源码)]。
    例如 ``for (int i = tid; i < n; i += stride)``，``n`` 是 ``int64_t``：``n`` 超过 2^31 - 1 时 ``i`` 溢出，
    循环不会在 ``n`` 停下。比较的两边都是 32 位（``s > 0``、``k < VEC``）的不算。解析不了时返回 []。"""
    parsed = _parse_cuda(text, filename)
    if parsed is None:
        return []
    tu, K, TK, lib = parsed
    lines = text.splitlines()
    narrow = (TK.INT, TK.UINT)
    wide = (TK.LONG, TK.ULONG, TK.LONGLONG, TK.ULONGLONG)

    def inner(c):
        """去掉隐式的类型转换（libclang 把它们报成 UNEXPOSED_EXPR）与括号。"""
        while c.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
            kids = list(c.get_children())
            if len(kids) != 1:
                break
            c = kids[0]
        return c

    out = []
    for loop in tu.cursor.walk_preorder():
        if loop.kind not in (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT):
            continue
        if loop.location.file is None or loop.location.file.name != filename:
            continue
        for cond in loop.get_children():
            if not (cond.kind == K.BINARY_OPERATOR and lib.clang_getCursorBinaryOperatorKind(cond) in _COMPARISONS):
                continue
            a, b = (inner(x) for x in list(cond.get_children())[:2])
            for var, bound in ((a, b), (b, a)):
                if (var.kind == K.DECL_REF_EXPR and var.type.get_canonical().kind in narrow
                        and bound.type.get_canonical().kind in wide):
                    out.append((cond.location.line, _source_of(cond, lines)))
                    break
    return sorted(set(out))


def cuda_narrow_offset_hint(text: str, filename: str, file: str) -> Hint | None:
    """CUDA C 源码里第一处 32 位的行偏移 / 全局下标 -> 诊断；没有时 None。"""
    return _offset_hint(cuda_narrow_offsets(text, filename),
                        "乘法的两边都是 32 位整数（int / unsigned），其中一边由 blockIdx 或 gridDim 算出",
                        "参与乘法的一边先变成 64 位：int64_t row = blockIdx.x;、(int64_t)blockIdx.x * blockDim.x + tid；"
                        "存下标的变量也用 int64_t。", file)


def cuda_narrow_counter_hint(text: str, filename: str, file: str) -> Hint | None:
    """CUDA C 源码里第一处 32 位的循环变量与 64 位的上界比较 -> 诊断；没有时 None。"""
    found = cuda_narrow_counters(text, filename)
    if not found:
        return None
    line, code = found[0]
    more = "、".join(f"第 {ln} 行" for ln, _ in found[1:])
    detail = (f"{code}：左右两边一个是 32 位的变量（int / unsigned），一个是 64 位的量（int64_t）。"
              "上界超过 2^31 - 1 时，变量加到 2^31 - 1 之后溢出（int 溢出是未定义行为，实际多变成负数；unsigned 绕回 0），"
              "循环停不下来、读到别的地方。用例的数组都小，测不出来。" + (f"同样的比较还在{more}。" if more else ""))
    return Hint("int32-counter", "循环变量是 32 位，上界是 64 位：大数组上会溢出", file, line, detail=detail,
                fix="循环变量与它的步长都用 int64_t：for (int64_t i = ...; i < n; i += stride)。")


def offset_hints(lab, paths) -> list[Hint]:
    """实验的每个学习者文件做一遍 32 位下标的源码检查（Triton 看 ``lab.kernel``，CUDA C 看整个文件）。"""
    out = []
    for file, path in paths.items():
        text = path.read_text(encoding="utf-8")
        if lab.backend == "triton" and file.endswith(".py"):
            h = narrow_offset_hint(text, lab.kernel, file)
        elif lab.backend == "cuda" and file.endswith(".cu"):
            h = cuda_narrow_offset_hint(text, str(path), file) or cuda_narrow_counter_hint(text, str(path), file)
        else:
            h = None
        if h is not None:
            out.append(h)
    return out
