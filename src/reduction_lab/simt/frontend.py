"""CUDA C++ 源码到解释器的程序：解析（libclang）、函数与文件作用域变量、类型解析（文档：docs/cuda/simulator.md）。

Front end of the simulator. :mod:`.clang_frontend` parses the source with
clang (its preprocessor, overload resolution, templates, namespaces) and lowers
every function a kernel can reach into ``pycparser.c_ast`` nodes; this module
holds the resulting :class:`Program` (functions, kernels, template instances,
``__shared__``/``__constant__``/``__device__`` variables), the resolution of
type nodes to :mod:`.ctype` types, constants, and the parse cache.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict

from pycparser import c_ast

from . import ctype as T
from .errors import FrontendMissingError, SimtError, UnsupportedError

BUILTIN_FUNCS = set()  # 由解释器填写 / filled by the interpreter

# 显式实例化：template __global__ void kern<256>(float*);
_EXPLICIT = re.compile(r"^[ \t]*template\s+(?![<\s])[^;{}<]*?\b([A-Za-z_][\w:]*)\s*<([^;{}]*?)>\s*\([^;{}]*\)\s*;", re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*")


def read_source(source):
    """source 是 C 源码文本或 .cu 文件路径；返回 (text, filename)。"""
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.endswith((".cu", ".cuh", ".c"))
    ):
        path = os.fspath(source)
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    if not isinstance(source, str):
        raise TypeError(f"source 应为 C 源码字符串或 .cu 路径 / source must be C text or a path, got {type(source).__name__}")
    return source, "kernel.cu"


def _split_args(s):
    """按顶层逗号拆分模板实参（括号里的逗号不拆）。"""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def instance_name(name):
    """规范化的实例名："kern< 256 ,float>" -> "kern<256,float>"。"""
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*<(.*)>\s*", name, flags=re.S)
    if not m:
        return name
    return f"{m.group(1)}<{','.join(' '.join(a.split()) for a in _split_args(m.group(2)))}>"



def _cfile(filename):
    return str(filename).replace("\\", "/").replace('"', "")


class Function:
    """一个降低好的函数：语法树 node（FuncDef），参数 [(名字, CType, 类型写法)]，引用参数 {名字: 是否 const}，
    它调用的函数名 callees；clang 在函数体里报了错时 node 为 None，error 是启动时抛出的错误。"""

    def __init__(self, name, node, is_kernel, ret_type, params, refs, line, callees, error=None):
        self.name = name
        self.node = node
        self.is_kernel = is_kernel
        self.ret_type = ret_type
        self.params = params
        self.refs = refs
        self.line = line
        self.callees = callees
        self.error = error
        self.cluster_dims = None      # 内核的 __cluster_dims__(x, y, z)；没有时为 None（一个块的簇）


class Program:
    """一份解析好的源码：函数、内核、模板实例、文件作用域的共享内存与 __constant__/__device__/const 变量。"""

    def __init__(self, text, filename, defines, instance=None):
        try:
            from . import clang_frontend as CF
        except ImportError as e:     # 环境问题，不是源码的问题：说清楚缺哪个包、怎样装
            raise FrontendMissingError(
                f"模拟器的 C++ 前端需要 libclang 与 pycparser 两个包，这里缺少 {e.name or e}："
                f"pip install libclang==18.1.1 pycparser==3.12（解析 {_cfile(filename)} 之前）/ "
                f"the simulator's C++ front end needs the libclang and pycparser packages; missing {e.name or e}: "
                f"pip install libclang==18.1.1 pycparser==3.12") from e

        self.filename = filename
        self.typedefs = dict(T.TYPEDEFS)
        for t in set(T._SPEC.values()):
            self.typedefs.setdefault(t.name, t)
        self.consts = {}           # 常量节点的缓存（节点随本对象存活）
        self.functions = {}        # 降低后的名字 -> Function
        self.shared_decls = []     # 文件作用域的 __shared__ 声明
        self.file_vars = {}        # 文件作用域的 __constant__、__device__ 与 const 变量：名字 -> (声明, 是否只读)
        self.refused_file_vars = {}  # 要执行构造函数的文件作用域变量：名字 -> 不支持的说明（用到它的内核启动时报）
        self.enum_consts = {}      # 枚举常量已由 clang 求值成常量
        self.instances = {}        # 规范化的实例名 kern<256> -> 函数名
        self.strings = []          # printf 的格式串（%s 的字符串常量已经写进去）与实参个数，按 __simt_printf 的编号
        CF.BUILTIN_FUNCS = BUILTIN_FUNCS
        CF.build(self, text, filename, defines or {}, instance)
        self.kernels = [n for n, f in self.functions.items() if f.is_kernel and "<" not in n]
        self.kernels += [i for i, n in self.instances.items() if self.functions[n].is_kernel]
        self.fn_ids = {name: i + 1 for i, name in enumerate(self.functions)}     # 函数指针的值（0：空指针）
        self.fn_by_id = {i: name for name, i in self.fn_ids.items()}

    def kernel(self, name):
        n = " ".join(str(name).split())
        if "<" in n:
            fn = self.instances.get(instance_name(n))
        else:
            fn = n if n in self.functions else None
            if fn is None:
                tails = [k for k in self.functions if k.split("::")[-1] == n]
                fn = tails[0] if len(tails) == 1 else None
        f = self.functions.get(fn) if fn is not None else None
        if f is None and "<" not in n and n in self.templates:
            params, defined, line = self.templates[n]
            if not defined:
                raise UnsupportedError(
                    f"{_cfile(self.filename)} 第 {line} 行：不支持 只有声明、没有定义的函数模板 {n} / "
                    f"{_cfile(self.filename)}, line {line}: unsupported: template declaration without a definition")
            raise ValueError(f"内核 {n} 是模板：启动时写出模板实参，例如 {n}<256> / kernel {n} is a template: "
                             f"launch it as {n}<...> with its arguments")
        if f is None or not f.is_kernel:
            raise ValueError(
                f"源码中没有名为 {name!r} 的 __global__ 内核 / no __global__ kernel named {name!r}; "
                f"找到 / found: {self.kernels}"
            )
        # 内核能到达的函数里 clang 报过错：现在抛出（像 nvcc 一样，这个内核编译不过）
        seen, todo = set(), [f.name]
        while todo:
            g = self.functions.get(todo.pop())
            if g is None or g.name in seen:
                continue
            seen.add(g.name)
            if g.error is not None:
                raise g.error.make()
            todo.extend(g.callees)
        return f

    # -------------------------------------------------------- 类型解析
    def resolve(self, node, where=None):
        """pycparser 类型节点到 CType。"""
        if isinstance(node, c_ast.TypeDecl):
            inner = node.type
            vol = "volatile" in (node.quals or [])
            if isinstance(inner, c_ast.IdentifierType):
                names = [n for n in inner.names]
                if len(names) == 1 and names[0] in self.typedefs:
                    t = self.typedefs[names[0]]
                else:
                    t = T.spec_type(names)
                if t is None:
                    raise _unsupported(f"类型 {' '.join(names)}", node)
                if vol and t.is_scalar:
                    return _Vol(t)
                return t
            raise _unsupported(type(inner).__name__, node)
        if isinstance(node, c_ast.PtrDecl):
            if isinstance(node.type, c_ast.FuncDecl):
                return T.FNPTR        # 指向 __device__ 函数的指针（调用时按编号分组）
            base = self.resolve(node.type, where)
            vol = isinstance(base, _Vol)
            if vol:
                base = base.t
            const = "const" in (getattr(node.type, "quals", None) or [])
            return T.Ptr(base, vol=vol, const=const)
        if isinstance(node, c_ast.ArrayDecl):
            elem = self.resolve(node.type, where)
            vol = isinstance(elem, _Vol)
            if vol:
                elem = elem.t
            if elem.is_array and elem.vol:
                vol = True
            n = None
            if node.dim is not None:
                n = const_int(node.dim, self)
                if n <= 0:
                    raise _unsupported(f"数组长度必须为正 / array size must be positive ({n})", node)
            return T.Arr(elem, n, vol)
        if isinstance(node, c_ast.Typename):
            return self.resolve(node.type, where)
        if isinstance(node, c_ast.FuncDecl):
            raise _unsupported("函数指针或函数声明 function pointer", node)
        raise _unsupported(type(node).__name__, node)

    def resolve_plain(self, node):
        t = self.resolve(node)
        return t.t if isinstance(t, _Vol) else t



class _Vol:
    """volatile 标量的临时包装 / a volatile-qualified scalar during resolution."""

    def __init__(self, t):
        self.t = t

    is_void = False
    is_array = False
    is_ptr = False
    is_scalar = True



def _unsupported(what, node):
    line = node.coord.line if node is not None and node.coord else "?"
    file = getattr(node.coord, "file", None) if node is not None and node.coord else None
    where_zh, where_en = (f"{file} 第 {line} 行", f"{file}, line {line}") if file else (f"第 {line} 行", f"line {line}")
    err = UnsupportedError(f"{where_zh}：不支持 {what} / {where_en}: unsupported: {what}")
    err.line = line if isinstance(line, int) else None
    err.file = file
    return err



def const_int(node, prog):
    """整数常量表达式求值（数组长度等）/ evaluate an integer constant expression."""
    if isinstance(node, c_ast.Constant):
        v = parse_constant(node)
        if v[0].is_int:
            return int(v[1])
    elif isinstance(node, c_ast.UnaryOp):
        if node.op == "sizeof":
            t = prog.resolve_plain(node.expr) if isinstance(node.expr, c_ast.Typename) else None
            if t is not None:
                return t.size
        else:
            a = const_int(node.expr, prog)
            return {"-": -a, "+": a, "~": ~a, "!": int(not a)}[node.op]
    elif isinstance(node, c_ast.BinaryOp):
        a, b = const_int(node.left, prog), const_int(node.right, prog)
        ops = {
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "/": lambda: int(a / b), "%": lambda: a - int(a / b) * b,
            "<<": lambda: a << b, ">>": lambda: a >> b, "&": lambda: a & b,
            "|": lambda: a | b, "^": lambda: a ^ b,
        }
        if node.op in ops:
            return ops[node.op]()
    elif isinstance(node, c_ast.Cast):
        return const_int(node.expr, prog)
    elif isinstance(node, c_ast.TernaryOp):
        return const_int(node.iftrue if const_int(node.cond, prog) else node.iffalse, prog)
    elif isinstance(node, c_ast.ID) and node.name in getattr(prog, "enum_consts", {}):
        return prog.enum_consts[node.name]
    elif isinstance(node, c_ast.ID) and node.name in getattr(prog, "file_vars", {}):
        d, readonly = prog.file_vars[node.name]
        if readonly and isinstance(d.type, c_ast.TypeDecl) and d.init is not None \
                and not isinstance(d.init, c_ast.InitList):
            return const_int(d.init, prog)      # const int BLOCK = 256;
    raise _unsupported("非常量的数组长度 non-constant array size", node)



_INT_RE = re.compile(r"^(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)$")


def parse_constant(node):
    """常量到 (CType, python 值)。"""
    s = node.value
    if node.type == "char":
        body = s[1:-1]
        esc = {"\\n": 10, "\\t": 9, "\\0": 0, "\\\\": 92, "\\'": 39, '\\"': 34, "\\r": 13}
        v = esc.get(body, ord(body[0]) if len(body) == 1 else None)
        if v is None:
            raise _unsupported(f"字符常量 {s}", node)
        return T.INT, v
    if node.type == "string":
        raise _unsupported("字符串常量（只支持直接写在 printf 里的：格式串与 %s 的实参）string literal outside printf", node)
    m = _INT_RE.match(s)
    if m:
        digits, suf = m.group(1), m.group(2).lower()
        if digits.lower().startswith("0x"):
            v, dec = int(digits, 16), False
        elif digits.lower().startswith("0b"):
            v, dec = int(digits[2:], 2), False
        elif digits.startswith("0") and len(digits) > 1:
            v, dec = int(digits, 8), False
        else:
            v, dec = int(digits), True
        uns = "u" in suf
        lng = "l" in suf
        if uns:
            cands = [T.ULONG] if lng else [T.UINT, T.ULONG]
        elif lng:
            cands = [T.LONG] if dec else [T.LONG, T.ULONG]
        else:
            cands = [T.INT, T.LONG] if dec else [T.INT, T.UINT, T.LONG, T.ULONG]
        for t in cands:
            if v < (1 << (t.bits - (1 if t.kind == "i" else 0))):
                return t, v
        raise _unsupported(f"整数常量过大 {s}", node)
    low = s.lower()
    if low.endswith("f") and not low.startswith("0x"):
        return T.FLOAT, float(s[:-1])
    if low.endswith("l"):
        return T.DOUBLE, float(s[:-1])
    try:
        return T.DOUBLE, float(s) if not low.startswith("0x") else float.fromhex(s)
    except ValueError:
        raise _unsupported(f"常量 {s}", node) from None



_CACHE = OrderedDict()     # (源码, 文件名, defines, 实例) -> Program；最多 _CACHE_SIZE 个
_CACHE_SIZE = 64


def _fresh(prog):
    """被包含的头文件没有改动。"""
    for name, mtime, size in getattr(prog, "deps", ()):
        try:
            st = os.stat(name)
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) != (mtime, size):
            return False
    return True


def _parse_cached(text, filename, defines_key, instance=None):
    key = (text, filename, defines_key, instance)
    prog = _CACHE.get(key)
    if prog is not None and _fresh(prog):
        _CACHE.move_to_end(key)
        return prog
    try:
        prog = Program(text, filename, dict(defines_key), instance)
    except (SimtError, ValueError, TypeError, MemoryError, RecursionError):
        raise
    except Exception as e:     # 没有逐一识别的写法：不让 Python 异常漏出去
        raise UnsupportedError(f"{_cfile(filename)}：无法解析（不在支持的子集内：{type(e).__name__}: {e}）/ "
                               f"{_cfile(filename)}: unsupported construct ({type(e).__name__}: {e})") from e
    _CACHE[key] = prog
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return prog


def parse(source, defines=None, kernel=None):
    """解析（带缓存，键为源码文本、defines 与模板实例）/ parse with a cache keyed by text + defines + instance.
    kernel 是模板内核的实例名（如 "reduce<256>"）时，同时实例化这个模板。"""
    text, filename = read_source(source)
    for k in (defines or {}):
        if not isinstance(k, str) or not _IDENT.fullmatch(k):
            raise ValueError(f"defines 的键必须是标识符 / bad macro name: {k!r}")
    key = tuple(sorted((str(k), str(int(v) if isinstance(v, bool) else v)) for k, v in (defines or {}).items()))
    inst = instance_name(kernel) if isinstance(kernel, str) and "<" in kernel else None
    return _parse_cached(text, filename, key, inst)
