"""libclang 前端：像编译器一样解析 CUDA C++，再降低成解释器执行的 pycparser 语法树（文档：docs/cuda/simulator.md）。

clang (through the ``libclang`` wheel) preprocesses and parses the source as
CUDA device code (``-x cuda --cuda-device-only``) after the declarations of
``prelude/cuda_prelude.h``; it resolves overloads, namespaces, templates
(explicit, named at launch, deduced from calls), references, ``auto`` and
casts. Each function that a kernel can reach is lowered once per distinct
template binding into ``pycparser.c_ast`` nodes whose coordinates carry the
original file and line, so the interpreter, counters and sanitizers run
unchanged. Clang's semantic errors are attached to the function they occur in
(other kernels of the file still run); syntax errors refuse the whole file.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import threading
import weakref
from pathlib import Path

import clang.cindex as ci
from pycparser import c_ast
from pycparser.c_parser import Coord

from . import ctype as T
from .errors import CompileError, SimtError, UnsupportedError

PRELUDE_DIR = Path(__file__).with_name("prelude")
PRELUDE = PRELUDE_DIR / "cuda_prelude.h"
#: 用模拟器支持的 C++ 写成的库（CUB 子集、<cuda/functional>）：当作源码降低
LIB_DIRS = tuple(str(PRELUDE_DIR / d) + os.sep for d in ("cub", "cuda"))
#: clang 的参数：只编译设备端，不用系统与 CUDA 的头文件（它们的声明在序言里）
CLANG_ARGS = ("-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_90", "-nocudainc", "-nocudalib", "-std=c++17",
              "-nostdinc", "-nostdinc++", "-isystem", str(PRELUDE_DIR), "-include", str(PRELUDE),
              "-ferror-limit=0")
# 警告照常产生（报错时不看它们），只有 NVCC_DECL_WARNINGS 里的几条在 nvcc 那里是错误

K = ci.CursorKind
TK = ci.TypeKind

#: 报「不支持」时 clang 声明种类的说法（学习者看得懂的写法）
_DECL_NAMES = {"UNEXPOSED_DECL": "这种声明：请写成普通的变量声明",
               "LABEL_STMT": "标号（goto 的目标）"}

_lib = ci.conf.lib
# clang.cindex 没有包装的几个 libclang 函数：(名字, 参数类型, 返回类型)
for _name, _args, _res in (
        ("clang_getCursorBinaryOperatorKind", [ci.Cursor], ctypes.c_int),
        ("clang_getCursorUnaryOperatorKind", [ci.Cursor], ctypes.c_int),
        ("clang_Cursor_Evaluate", [ci.Cursor], ctypes.c_void_p),
        ("clang_EvalResult_getKind", [ctypes.c_void_p], ctypes.c_int),
        ("clang_EvalResult_isUnsignedInt", [ctypes.c_void_p], ctypes.c_uint),
        ("clang_EvalResult_getAsUnsigned", [ctypes.c_void_p], ctypes.c_ulonglong),
        ("clang_EvalResult_getAsLongLong", [ctypes.c_void_p], ctypes.c_longlong),
        ("clang_EvalResult_getAsDouble", [ctypes.c_void_p], ctypes.c_double),
        ("clang_EvalResult_dispose", [ctypes.c_void_p], None)):
    _fn = getattr(_lib, _name)
    _fn.argtypes = _args
    if _res is not None:
        _fn.restype = _res

# CXBinaryOperatorKind / CXUnaryOperatorKind（clang-c/Index.h）
BINARY_OPS = {3: "*", 4: "/", 5: "%", 6: "+", 7: "-", 8: "<<", 9: ">>", 11: "<", 12: ">", 13: "<=", 14: ">=",
              15: "==", 16: "!=", 17: "&", 18: "^", 19: "|", 20: "&&", 21: "||", 22: "=", 23: "*=", 24: "/=",
              25: "%=", 26: "+=", 27: "-=", 28: "<<=", 29: ">>=", 30: "&=", 31: "^=", 32: "|=", 33: ","}
UNARY_OPS = {1: "p++", 2: "p--", 3: "++", 4: "--", 5: "&", 6: "*", 7: "+", 8: "-", 9: "~", 10: "!"}
#: 给左边赋值的二元运算（=、+= ……）与自增自减
_ASSIGN_OPS = {k: op for k, op in BINARY_OPS.items() if op.endswith("=") and op not in ("==", "!=", "<=", ">=")}
_STEP_OPS = ("p++", "p--", "++", "--")

_SCALARS = {
    TK.BOOL: T.BOOL, TK.CHAR_S: T.CHAR, TK.SCHAR: T.CHAR, TK.CHAR_U: T.UCHAR, TK.UCHAR: T.UCHAR,
    TK.SHORT: T.SHORT, TK.USHORT: T.USHORT, TK.INT: T.INT, TK.UINT: T.UINT, TK.LONG: T.LONG, TK.ULONG: T.ULONG,
    TK.LONGLONG: T.LLONG, TK.ULONGLONG: T.ULLONG, TK.FLOAT: T.FLOAT, TK.DOUBLE: T.DOUBLE, TK.VOID: T.VOID,
}
_INT_SUFFIX = {TK.UINT: "u", TK.LONG: "l", TK.ULONG: "ul", TK.LONGLONG: "ll", TK.ULONGLONG: "ull"}
_CASTS = {K.CSTYLE_CAST_EXPR, K.CXX_STATIC_CAST_EXPR, K.CXX_REINTERPRET_CAST_EXPR, K.CXX_CONST_CAST_EXPR,
          K.CXX_FUNCTIONAL_CAST_EXPR}
_SCOPES = {K.NAMESPACE, K.STRUCT_DECL, K.CLASS_DECL, K.UNION_DECL, K.CLASS_TEMPLATE,
           K.CLASS_TEMPLATE_PARTIAL_SPECIALIZATION}
_TID = None     # 由 _tid() 构造

_index = None
_lock = threading.Lock()

BUILTIN_FUNCS = None     # 由 frontend 设置（解释器实现的内置函数名）


def _index_():
    global _index
    if _index is None:
        _index = ci.Index.create()
    return _index


def _guard_del(cls):
    """libclang 的 ``Index`` 与 ``TranslationUnit`` 在 ``__del__`` 里经模块全局 ``conf`` 释放；解释器退出时
    ``clang.cindex`` 的全局可能先被清成 None，还活着的对象（缓存的程序、异常的回溯里留着的）就各打印一段
    「Exception ignored in __del__」。这时进程正在退出，不释放也无妨：``conf`` 已经没有了就跳过。"""
    orig, mod = cls.__del__, ci

    def __del__(self):
        if getattr(mod, "conf", None) is not None:
            orig(self)

    __del__.__wrapped__ = orig
    cls.__del__ = __del__


for _cls in (ci.Index, ci.TranslationUnit):
    if not hasattr(_cls.__del__, "__wrapped__"):      # 模块重新加载时不再包一层
        _guard_del(_cls)
del _cls


def evaluate(c):
    """clang 对常量表达式的求值：int、float 或 None。"""
    r = _lib.clang_Cursor_Evaluate(c)
    if not r:
        return None
    try:
        kind = _lib.clang_EvalResult_getKind(r)
        if kind == 1:
            if _lib.clang_EvalResult_isUnsignedInt(r):
                return int(_lib.clang_EvalResult_getAsUnsigned(r))
            return int(_lib.clang_EvalResult_getAsLongLong(r))
        if kind == 2:
            return float(_lib.clang_EvalResult_getAsDouble(r))
        return None
    finally:
        _lib.clang_EvalResult_dispose(r)


def cfile(filename):
    return str(filename).replace("\\", "/").replace('"', "")


class _Where:
    """把 clang 的位置换成报错用的文件名（主文件用调用者给的名字，头文件用相对主文件目录的路径）。"""

    def __init__(self, main_path, main_display):
        self.main = os.path.abspath(main_path)
        self.main_display = main_display
        self.dir = os.path.dirname(self.main)

    def coord_file(self, f):
        """语法树坐标里的文件名：主文件为调用者给的名字（解释器据此判断不是头文件）。"""
        if f is None:
            return self.main_display
        name = f if isinstance(f, str) else f.name
        if os.path.abspath(name) == self.main:
            return self.main_display
        return name

    def display(self, f):
        name = self.coord_file(f)
        if name == self.main_display:
            return name
        a = os.path.abspath(name)
        if a.startswith(str(PRELUDE_DIR) + os.sep):          # 模拟器自带的头文件：按 #include <...> 的写法
            return "<" + os.path.relpath(a, PRELUDE_DIR).replace(os.sep, "/") + ">"
        return os.path.relpath(a, self.dir) if a.startswith(self.dir + os.sep) else name

    def is_user(self, f):
        """源码里的定义（要降低、执行的）：用户的文件，以及模拟器用 C++ 写成的库（CUB 子集）。"""
        if f is None:
            return False
        name = os.path.abspath(f.name)
        return not name.startswith(str(PRELUDE_DIR) + os.sep) or name.startswith(LIB_DIRS)


def _err(cls, where_file, line, zh, en, header=None):
    loc_zh = f"{where_file} 第 {line} 行" if where_file else f"第 {line} 行"
    loc_en = f"{where_file}, line {line}" if where_file else f"line {line}"
    err = cls(f"{loc_zh}：{zh} / {loc_en}: {en}")
    err.line = line if isinstance(line, int) else None
    err.file = header if header is not None else where_file
    return err


def _nvcc_error(where, c, zh, en):
    loc = c.location if c is not None else None
    line = loc.line if loc is not None and loc.line else "?"
    f = where.display(loc.file if loc is not None else None)
    return _err(CompileError, f, line, zh, en, header=f if f != where.main_display else None)


def texture_reference_error(where, c, kind):
    """纹理引用 texture<> 与表面引用 surface<>：CUDA 12 移除，nvcc 13 报 "texture is not a template"。"""
    zh_kind, obj = ("纹理引用 texture<>", "纹理对象 cudaTextureObject_t") if kind == "texture" else \
        ("表面引用 surface<>", "表面对象 cudaSurfaceObject_t")
    return _nvcc_error(where, c, f"{zh_kind} 在 CUDA 12 中已被移除，nvcc 13 也拒绝编译（error: {kind} is not a "
                                 f"template）；请改用{obj}",
                       f"{kind} references ({kind}<>) were removed in CUDA 12 and nvcc 13 rejects them too "
                       f"(error: {kind} is not a template); use a {obj.split()[1]} instead")


def undefined_function_error(where, c, r, what="函数"):
    """调用（或取地址）只有声明、整个翻译单元里都没有函数体的函数：不带 -rdc 时 ptxas 报 Unresolved extern function。"""
    name = qualified_name(r)
    mangled = r.mangled_name or name
    return _nvcc_error(where, c, f"{what} {name} 只有声明、没有定义（整个翻译单元里都没有函数体），nvcc 13 也拒绝"
                                 f"（不带 -rdc 编译时 ptxas 报 Unresolved extern function '{mangled}'）；请给出函数体",
                       f"{name} is declared but never defined in this translation unit; nvcc 13 rejects it too "
                       f"(without -rdc, ptxas: Unresolved extern function '{mangled}'); give it a body")


#: clang 只给警告、nvcc 13 报错的声明写法：(clang 的警告, 中文, nvcc 的报错)
NVCC_DECL_WARNINGS = (
    (re.compile(r"explicit specialization cannot have a storage class"), "显式特化 template<> 不能带存储类说明符"
     "（例如 static）", "a storage class is not allowed in an explicit specialization"),
    (re.compile(r"duplicate '(?:static|extern|register)' declaration specifier"), "存储类说明符重复（例如 static 写了两次）",
     "more than one storage class may not be specified"),
)


def _zero_sized(t):
    t = t.get_canonical()
    while t.kind == TK.CONSTANTARRAY:
        if t.element_count == 0:
            return True
        t = t.element_type.get_canonical()
    return False


def zero_sized_error(where, c):
    return _nvcc_error(where, c, f"长度为 0 的数组变量 {c.spelling}：nvcc 13 也拒绝（error: zero-sized variable "
                                 f"\"{c.spelling}\" is not allowed in device code）",
                       f'zero-sized variable "{c.spelling}" is not allowed in device code (nvcc 13 rejects it too)')


def nvcc_file_errors(tu, where, sources):
    """clang 接受（或只给警告）、nvcc 13 却拒绝整个翻译单元的写法：返回第一个 CompileError，没有时返回 None。

    sources 是主文件与它包含的用户头文件的文本，只在其中出现 texture< 或 surface< 时才遍历语法树找纹理引用。"""
    for d in tu.diagnostics:
        loc = d.location
        if d.severity != 2 or loc.file is None or not where.is_user(loc.file):
            continue
        for pat, zh, en in NVCC_DECL_WARNINGS:
            if pat.search(d.spelling):
                f = where.display(loc.file)
                return _err(CompileError, f, loc.line, f"{zh}：nvcc 13 报错（error: {en}；clang 只给警告：{d.spelling}）",
                            f"{en} (nvcc 13 rejects it; clang only warns: {d.spelling})",
                            header=f if f != where.main_display else None)
    tex = any(re.search(r"\b(?:texture|surface)\s*<", t) for t in sources)
    for c in user_decls(tu.cursor.get_children(), where):
        if c.kind == K.VAR_DECL and _zero_sized(c.type) and any(
                ch.kind in (K.CUDADEVICE_ATTR, K.CUDASHARED_ATTR, K.CUDACONSTANT_ATTR) for ch in c.get_children()):
            return zero_sized_error(where, c)
        if tex:
            for x in c.walk_preorder():
                r = x.referenced if x.kind == K.TEMPLATE_REF else None
                if r is not None and r.spelling in ("texture", "surface") and not where.is_user(r.location.file):
                    return texture_reference_error(where, x, r.spelling)
    return None


class Deferred:
    """一个函数里 clang 报的错：启动能到达这个函数的内核时再抛出（同一文件的其他内核照常运行）。"""

    def __init__(self, cls, file, line, zh, en, header):
        self.args = (cls, file, line, zh, en, header)

    def make(self):
        return _err(*self.args)


def _leaves_of(t):
    """成员类型展开成存储单元（标量）的列表。"""
    if t.is_scalar or t.is_ptr or t.is_fnptr:
        return [t]
    if t.is_array:
        return _leaves_of(t.elem) * t.n
    return list(t.elems)


def _direct_continue(c):
    """语句里有不在内层循环中的 continue。"""
    if c.kind == K.CONTINUE_STMT:
        return True
    if c.kind in (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT, K.CXX_FOR_RANGE_STMT):
        return False
    return any(_direct_continue(x) for x in c.get_children() if not x.kind.is_expression())


class _Ready:
    """已经构造好的错误，接口与 Deferred 相同。"""

    def __init__(self, err):
        self.err = err

    def make(self):
        return self.err


# ---------------------------------------------------------------- clang 诊断到模拟器的错误

def _operator_at(text, col):
    m = re.match(r"(<<=|>>=|<<|>>|[-+*/%&|^<>=!]=?)", text[col - 1:] if col else "")
    return m.group(1) if m else "?"


def translate_diagnostic(d, text_of):
    """clang 的一条错误：返回 (错误类, 中文, 英文)。text_of(file) 给出源码行。"""
    msg = d.spelling
    notes = [n.spelling for n in d.children]
    allmsg = msg + "".join(f"; {n}" for n in notes)
    m = re.match(r"no member named '(\w+)' in '(?:struct |class )?(.+)'", msg)
    if m:
        return (CompileError, f"{m.group(2)} 没有成员 .{m.group(1)}（nvcc 报错）",
                f'class "{m.group(2)}" has no member "{m.group(1)}" (nvcc rejects it; clang: {msg})')
    m = re.match(r"invalid operands to binary expression \('(.+)' and '(.+)'\)", msg)
    if m:
        line = text_of(d.location.file, d.location.line)
        op = _operator_at(line, d.location.column)
        return (CompileError, f"运算 {op}：CUDA 没有为 {m.group(1)} 与 {m.group(2)} 定义这个运算符（nvcc 报错），"
                              "向量类型请逐个分量计算",
                f'no operator "{op}" matches these operands ({m.group(1)}, {m.group(2)}): nvcc rejects it; '
                "compute vector types component by component")
    if "initialization is not supported for __shared__" in msg:
        return (CompileError, "__shared__ 变量不能带初始值（nvcc 报错）；请在内核里由线程写入，再 __syncthreads()",
                "initializer not allowed for __shared__ variable (nvcc rejects it)")
    if "read-only variable is not assignable" in msg or "with const-qualified type" in msg or \
            "would lose const qualifier" in allmsg:
        return (CompileError, f"通过 const 指针或 const 变量写入（nvcc 报错：表达式必须是可修改的左值；clang：{msg}）",
                f"write through a pointer to const or to a const variable: nvcc rejects it "
                f"(expression must be a modifiable lvalue; clang: {msg})")
    if "expects an lvalue" in allmsg or "non-const lvalue reference" in allmsg:
        return (CompileError, f"非 const 引用参数的实参不是左值（nvcc 报错：initial value of reference to non-const "
                              f"must be an lvalue；clang：{allmsg}）",
                f"initial value of reference to non-const must be an lvalue (nvcc rejects it; clang: {allmsg})")
    if "std::initializer_list was not found" in msg:
        # nvcc 经 CUDA 的头文件得到 <initializer_list>，接受 for (float v : {1.0f, 2.0f})；模拟器不读标准库头文件
        return (UnsupportedError, "不支持 花括号初始化列表作范围或参数（std::initializer_list，nvcc 接受它）；"
                                  "先放进一个定长数组 float a[] = {...}，再 for (float v : a)",
                "unsupported: a braced list as a range or argument (std::initializer_list; nvcc accepts it); "
                "put it in a fixed-size array first")
    if "variable-length array" in msg or "variable length array" in msg:
        return (UnsupportedError, "不支持 非常量的数组长度 non-constant array size", f"unsupported: non-constant array size ({msg})")
    if "reference to __global__ function" in msg or "kernel launch" in msg or "cudaConfigureCall" in msg:
        return (UnsupportedError, "不支持 在设备代码中启动内核（动态并行 dynamic parallelism）",
                f"unsupported: kernel launch from device code (dynamic parallelism; clang: {msg})")
    if "cannot use 'throw'" in msg or "cannot use 'try'" in msg or "exceptions" in msg:
        return (UnsupportedError, "不支持 异常 exceptions（throw/try）", f"unsupported: exceptions ({msg})")
    m = re.match(r"use of undeclared identifier '(__(?:shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all))'", msg)
    if m:                # Volta 之前的线程束函数：CUDA 9 起弃用，sm_70 及以上 nvcc 不再提供
        return (CompileError, f"{m.group(1)} 没有定义（nvcc 对 sm_70 及以上报错：不带 _sync 的线程束函数已经移除），"
                              f"请改用 {m.group(1)}_sync(mask, ...)",
                f'identifier "{m.group(1)}" is undefined (nvcc for sm_70+ removed the warp functions without _sync); '
                f"use {m.group(1)}_sync(mask, ...)")
    m = re.match(r"unknown type name '(__nv_\w+|__half2?_raw|nv_bfloat162|half2)'", msg)
    if m:                # CUDA 头文件里的类型（__nv_fp8_e4m3、__half_raw ……）：nvcc 接受，模拟器的序言里没有
        return (UnsupportedError, f"不支持 类型 {m.group(1)}（模拟器没有实现这个 CUDA 类型，nvcc 接受它）",
                f"unsupported: type {m.group(1)} (a CUDA type the simulator does not implement; nvcc accepts it)")
    m = re.match(r"use of undeclared identifier '(__\w+)'", msg)
    if m:
        return (UnsupportedError, f"不支持 {m.group(1)}（模拟器没有实现这个 CUDA 内置函数或变量）",
                f"unsupported: {m.group(1)} (not implemented by the simulator)")
    m = re.match(r"use of undeclared identifier '(\w+)'", msg)
    if m:
        if re.match(r"(cuda|tex|surf|curand|cub|atomic|clock|nv|make_|warp|lane|printf|malloc|free)", m.group(1)):
            # 像是模拟器的序言里没有的 CUDA 名字：不能断言 nvcc 会拒绝
            return (UnsupportedError, f"不支持 {m.group(1)}（模拟器没有声明这个名字）",
                    f"unsupported: {m.group(1)} (not declared by the simulator)")
        return (UnsupportedError, f"未声明的标识符 {m.group(1)}（nvcc 同样报错）", f"undeclared identifier {m.group(1)}")
    return (CompileError, f"编译错误（nvcc 同样会拒绝）：{allmsg}", f"compile error: {allmsg}")


# ---------------------------------------------------------------- 语法树构造的小工具

def _id(name, co):
    return c_ast.ID(name, co)


def _const(kind, value, co):
    return c_ast.Constant(kind, value, co)


def _sref(base, field, co):
    return c_ast.StructRef(_id(base, co), ".", _id(field, co), co)


def _linear(idx, dim, co):
    """三维编号的线性化 idx.x + idx.y * dim.x + idx.z * dim.x * dim.y（threadIdx / blockDim，或 blockIdx / gridDim）。"""
    dx, dy = _sref(dim, "x", co), _sref(dim, "y", co)
    return c_ast.BinaryOp("+", c_ast.BinaryOp("+", _sref(idx, "x", co),
                                              c_ast.BinaryOp("*", _sref(idx, "y", co), dx, co), co),
                          c_ast.BinaryOp("*", _sref(idx, "z", co),
                                         c_ast.BinaryOp("*", _sref(dim, "x", co), dy, co), co), co)


def _volume(dim, co):
    """dim.x * dim.y * dim.z。"""
    return c_ast.BinaryOp("*", c_ast.BinaryOp("*", _sref(dim, "x", co), _sref(dim, "y", co), co),
                          _sref(dim, "z", co), co)


def _tid(co):
    """块内线程的线性编号。"""
    return _linear("threadIdx", "blockDim", co)


def _nthreads(co):
    return _volume("blockDim", co)


def _block_rank(co):
    """块在网格里的线性编号。"""
    return _linear("blockIdx", "gridDim", co)


def _nblocks(co):
    return _volume("gridDim", co)


def _cast(type_names, e, co):
    """(类型) e，类型按关键字给出，例如 ["bool"]、["unsigned", "long", "long"]。"""
    return c_ast.Cast(c_ast.Typename(None, [], None, c_ast.TypeDecl(None, [], None, c_ast.IdentifierType(
        list(type_names), co), co), co), e, co)


def _call(name, args, co):
    return c_ast.FuncCall(_id(name, co), c_ast.ExprList(list(args), co) if args else None, co)


def _exprs(c):
    return [ch for ch in c.get_children() if ch.kind.is_expression()]


def _plain_lvalue(c):
    """``c`` 只由变量、成员访问、下标与没有副作用的算术组成（``a``、``s.v``、``p->v``、``m[r]``、``m[2 * r + 1]``，
    可带括号与隐式转换）时返回其中变量的名字，否则 None（函数调用、赋值、自增、逗号）。"""
    names = set()
    for n in c.walk_preorder():
        k = n.kind
        if k == K.DECL_REF_EXPR:
            names.add(n.spelling)
        elif k == K.BINARY_OPERATOR:
            kind = _lib.clang_getCursorBinaryOperatorKind(n)
            if BINARY_OPS.get(kind) in (None, ",") or kind in _ASSIGN_OPS:
                return None
        elif k == K.UNARY_OPERATOR:
            if UNARY_OPS.get(_lib.clang_getCursorUnaryOperatorKind(n)) not in ("*", "-", "+", "~", "!"):
                return None
        elif k not in (K.MEMBER_REF_EXPR, K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.ARRAY_SUBSCRIPT_EXPR, K.INTEGER_LITERAL):
            return None
    return names


def _assigned_in(body, names) -> bool:
    """``body`` 里有没有给 ``names`` 中的变量本身赋值（=、+= 之类、++、--）。"""
    for n in body.walk_preorder():
        target = None
        if n.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            if _ASSIGN_OPS.get(_lib.clang_getCursorBinaryOperatorKind(n)):
                target = next(n.get_children(), None)
        elif n.kind == K.UNARY_OPERATOR and UNARY_OPS.get(_lib.clang_getCursorUnaryOperatorKind(n)) in _STEP_OPS:
            target = next(n.get_children(), None)
        if target is not None:
            t = _strip(target)
            if t.kind == K.DECL_REF_EXPR and t.spelling in names:
                return True
    return False


def _cast_to_lvalue_ref(c):
    """显式转换的目标类型是否写成左值引用 T&（libclang 给出的表达式类型不带引用，只能看写出的记号）。"""
    toks = [t.spelling for t in c.get_tokens()]
    start, opener, closer = (0, "(", ")") if c.kind == K.CSTYLE_CAST_EXPR else (1, "<", ">")
    if len(toks) <= start or toks[start] != opener:
        return False
    depth = 0
    for i in range(start, len(toks)):
        t = toks[i]
        depth += (t == opener) - (t == closer) - 2 * (closer == ">" and t == ">>")
        if depth <= 0:
            return toks[i - 1] == "&"
    return False


def _strip(c):
    """去掉隐式转换、括号等只有一个子节点的包装。"""
    while c.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
        ch = _exprs(c)
        if len(ch) != 1:
            break
        c = ch[0]
    return c


#: printf 的一个转换说明（C 的写法）：标志、宽度、精度、长度修饰符、转换字符
PRINTF_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d*))?"
                         r"(?P<len>hh|h|ll|l|j|z|t|L)?(?P<conv>[diouxXeEfFgGaAcspn%])")
_PRINTF_INT, _PRINTF_FLOAT = set("diouxXc"), set("eEfFgG")


def string_literal(c):
    """字符串常量（可能包在隐式转换里；相邻的几段已由 clang 连起来）的内容；不是字符串常量时返回 None。"""
    import ast

    c = _strip(c)
    if c.kind != K.STRING_LITERAL:
        return None
    parts = [t.spelling for t in c.get_tokens() if t.kind == ci.TokenKind.LITERAL]
    try:
        return "".join(ast.literal_eval(p) for p in parts if p.startswith('"'))
    except (ValueError, SyntaxError):           # u8"…"、L"…" 等前缀
        return None


_LAMBDA_SPELLING = re.compile(r"^(?:const |volatile )*\(lambda at .*:(\d+):(\d+)\)$")


class _Capture:
    """lambda 的一个捕获：``cursor`` 是引用那个外层变量的表达式（按值捕获时就是成员的初值），``by_ref`` 是否按引用。
    ``hidden``：C++ 里不算捕获、模拟器替它存地址的外层 ``__shared__`` / static 变量（lambda 体直接用它；闭包类型里没有
    这个成员，模拟器的闭包在 clang 的成员之后另加一个指针）。"""

    __slots__ = ("cursor", "by_ref", "hidden")

    def __init__(self, cursor, by_ref, hidden=False):
        self.cursor, self.by_ref, self.hidden = cursor, by_ref, hidden

    @property
    def referenced(self):
        return self.cursor.referenced

    @property
    def spelling(self):
        return self.cursor.referenced.spelling

    @property
    def is_array(self):
        """按引用捕获的定长数组：闭包里存首元素的地址，体里用到它时就是那个指针（下标照常）。"""
        return self.cursor.referenced.type.get_canonical().kind == TK.CONSTANTARRAY


#: 每个翻译单元里各个闭包类型的名字：函数模板的几个实例里同一处的 lambda 是不同的闭包类型，第二个起加上 #2、#3 …
_lambda_ids = weakref.WeakKeyDictionary()


def lambda_name(spelling, decl=None):
    """闭包类型 ``(lambda at /path/k.cu:8:16)`` -> ``lambda@8:16``（不是 lambda 时 None）。给出闭包类型的声明
    ``decl`` 时，同一处的不同闭包类型（模板的不同实例）名字不同：``lambda@8:16#2``。"""
    m = _LAMBDA_SPELLING.match(spelling)
    if not m:
        return None
    base = f"lambda@{m.group(1)}:{m.group(2)}"
    if decl is None:
        return base
    with _lock:
        ids = _lambda_ids.setdefault(decl.translation_unit, {})
    name = ids.get((base, decl.hash))
    if name is None:
        k = sum(1 for b, _ in ids if b == base)
        name = ids[(base, decl.hash)] = base if k == 0 else f"{base}#{k + 1}"
    return name


def qualified_name(c):
    parts = [c.spelling]
    p = c.semantic_parent
    while p is not None and p.kind != K.TRANSLATION_UNIT:
        if p.kind in _SCOPES and p.spelling:
            parts.append(lambda_name(p.spelling, p) or p.spelling)
        p = p.semantic_parent
    return "::".join(reversed(parts))


def _in_namespace(c, ns):
    p = c.semantic_parent
    while p is not None and p.kind != K.TRANSLATION_UNIT:
        if p.kind == K.NAMESPACE and p.spelling == ns:
            return True
        p = p.semantic_parent
    return False


def type_spelling(t):
    """形参类型的 C 写法（kernel_signature 用），例如 'const float*'、'Pair*'、'size_t'。"""
    s = t.spelling
    s = re.sub(r"\b(?:__restrict__|__restrict|restrict)\b", " ", s)
    s = re.sub(r"\b(?:struct|class|enum|union)\s+", "", s)
    s = re.sub(r"\s*\*\s*", "*", s)
    s = re.sub(r"\s*&\s*", "&", s)
    return " ".join(s.split()).replace(" *", "*").rstrip()


#: GPUVerify 的规约注解里不求值的空操作（前提、后置条件、不变式、访问集合与线程间的谓词只对验证器有意义）
GV_NOOP = {"__requires", "__global_requires", "__ensures", "__global_ensures", "__invariant", "__global_invariant",
           "__candidate_invariant", "__candidate_global_invariant", "__candidate_assert", "__candidate_global_assert",
           "__non_temporal_loads_begin", "__non_temporal_loads_end", "__requires_fresh_array", "__reads_from",
           "__writes_to", "__array_snapshot", "__barrier_invariant_1", "__barrier_invariant_2", "__barrier_invariant_3",
           "__barrier_invariant_4", "__barrier_invariant_binary_1", "__barrier_invariant_binary_2"}
#: 按断言逐线程检查的注解 -> 解释器里的种类编号（0 __assert，1 __global_assert，2 __assume，3 <assert.h> 的 assert）
GV_CHECK = {"__assert": 0, "__global_assert": 1, "__assume": 2, "__simt_c_assert": 3}
#: 只在验证器里有值的查询：另一个线程的值、访问集合、返回值、旧值
GV_QUERY = {"__other_int", "__other_bool", "__read", "__write", "__read_offset", "__write_offset",
            "__read_offset_bytes", "__write_offset_bytes", "__ptr_base", "__ptr_offset", "__ptr_offset_bytes",
            "__not_accessed", "__return_val_int", "__return_val_bool", "__return_val_ptr", "__old_int", "__old_bool",
            "__atomic_has_taken_value"}
GV_NOOVFL = re.compile(r"__add_noovfl_(unsigned_)?(char|short|int|long)$")

#: 成员函数里对象的名字（按引用传入的第一个参数）
THIS = "__this"

_GROUP_RE = re.compile(r"cooperative_groups::(?:thread_block_tile<(\d+)U?>|(thread_block)\b|(cluster_group)\b"
                       r"(::arrival_token)?|(grid_group)\b)")
#: cluster_group 的成员函数 -> 解释器的内置函数（没有参数）
_CLUSTER_CALLS = {"sync": "__simt_cluster_sync", "barrier_arrive": "__simt_cluster_arrive",
                  "barrier_wait": "__simt_cluster_wait", "block_rank": "__simt_cluster_block_rank",
                  "num_blocks": "__simt_cluster_num_blocks", "dim_blocks": "__simt_cluster_dim_blocks",
                  "block_index": "__simt_cluster_block_index", "dim_threads": "__simt_cluster_dim_threads",
                  "thread_index": "__simt_cluster_thread_index"}


class Lowering:
    """一个翻译单元到 Program 的降低（函数按需降低：每个模板绑定一份）。"""

    def __init__(self, prog, tu, where, errors):
        self.prog = prog
        self.tu = tu
        self.where = where
        self.errors = errors          # [(文件, 起始偏移, 结束偏移, Deferred)]：函数体里的 clang 错误
        self.names = {}               # 函数的键 -> 降低后的名字
        self.used = set()
        self.pending = []
        self.overloaded = set()
        self.struct_cache = {}
        self.file_var_names = {}      # 变量声明的键 -> 名字
        self.cur_fn = None
        self.last = None
        self.callees = set()
        self.in_spec = None           # 正在降低的 __assert/__assume（注解里的查询报错时说明位置）
        self.lambdas = None           # 闭包类型的位置 -> LAMBDA_EXPR（第一次用到时建立）
        self.capture_cache = {}       # 闭包类型 -> 捕获的变量（:class:`_Capture`）
        self.lambda_by_decl = {}      # 闭包类型 -> LAMBDA_EXPR（模板的实例各有一个）

    # ------------------------------------------------------------ 位置与报错
    def co(self, c):
        loc = c.location
        return Coord(self.where.coord_file(loc.file), loc.line, loc.column)

    def unsupported(self, what, c):
        loc = c.location if c is not None else None
        line = loc.line if loc is not None and loc.line else "?"
        f = self.where.display(loc.file if loc is not None else None)
        header = f if f != self.where.main_display else None
        err = _err(UnsupportedError, f, line, f"不支持 {what}", f"unsupported: {what}",
                   header=header)
        return err

    def rejected(self, zh, en, c):
        """nvcc 同样拒绝的源码：CompileError，带文件与行号。"""
        return _nvcc_error(self.where, c, zh, en)

    # ------------------------------------------------------------ 类型
    def group_of(self, t, c=None):
        t = t.get_canonical()
        if t.kind in (TK.LVALUEREFERENCE, TK.RVALUEREFERENCE, TK.POINTER):
            t = t.get_pointee().get_canonical()
        if t.kind != TK.RECORD:
            return None
        m = _GROUP_RE.search(t.spelling)
        if not m:
            return None
        if m.group(2):
            return ("block", None)
        if m.group(5):
            return ("grid", None)
        if m.group(3):
            return ("token", None) if m.group(4) else ("cluster", None)
        w = int(m.group(1))
        if w not in (1, 2, 4, 8, 16, 32):
            # nvcc：一个线程束之内的分块是 1/2/4/8/16/32，多线程束的分块是 64/128/256/512（以及 1024）
            if w in (64, 128, 256, 512, 1024):
                raise self.unsupported(f"多线程束的分块 thread_block_tile<{w}>（nvcc 接受；模拟器只支持不超过 32 的"
                                       f" 2 的幂）/ multi-warp tile of {w} threads", c)
            raise _err(CompileError, self.where.display(c.location.file) if c is not None else None,
                       c.location.line if c is not None else "?",
                       f"thread_block_tile<{w}> 的大小不合法（nvcc 报错：Size must be one of 1/2/4/8/16/32，"
                       "多线程束的分块为 64/128/256/512）",
                       f"invalid tile size {w}: nvcc rejects it (static assertion: Size must be one of "
                       "1/2/4/8/16/32, or 64/128/256/512 for multi-warp tiles)")
        return ("tile", w)

    def ctype(self, t, c):
        """clang 类型到 CType（标量、向量、结构体）。"""
        t = t.get_canonical()
        k = t.kind
        s = _SCALARS.get(k)
        if s is not None:
            return s
        if k == TK.ENUM:
            return T.INT
        if k.name in ("HALF", "FLOAT16") and getattr(T, "HALF", None) is not None:
            return T.HALF
        if k.name == "BFLOAT16" and getattr(T, "BF16", None) is not None:
            return T.BF16
        if k == TK.RECORD:
            return self.record(t, c)
        if k == TK.POINTER:
            return T.Ptr(self.ctype(t.get_pointee(), c))
        raise self.unsupported(f"类型 {t.spelling}", c)

    def record(self, t, c):
        decl = t.get_declaration()
        name = re.sub(r"^(?:const |volatile )+", "", t.spelling)
        key = name                      # const V2 与 V2 是同一个结构体类型
        if lambda_name(name) is not None:
            key = (name, decl.hash)     # 函数模板的各个实例里同一处的 lambda：拼写相同，闭包类型不同
        hit = self.struct_cache.get(key)
        if hit is not None:
            return hit
        if not self.where.is_user(decl.location.file):
            base = decl.spelling
            if base in T.VECS:
                return T.VECS[base]
            if self.group_of(t, c):
                raise self.unsupported("cooperative groups 的组对象用在这里（只支持调用它的成员函数）", c)
            if _in_namespace(decl, "cooperative_groups"):
                raise self.unsupported(f"cooperative groups 的 {base}（nvcc 接受；模拟器只支持 thread_block、"
                                       "thread_block_tile<N>（N 为不超过 32 的 2 的幂）、cluster_group 与 grid_group）", c)
            if base in ("texture", "surface"):
                raise texture_reference_error(self.where, c, base)
            half = {"__half": "HALF", "__nv_bfloat16": "BF16"}.get(base)
            if half and getattr(T, half, None) is not None:
                return getattr(T, half)
            raise self.unsupported(f"类型 {name}", c)
        if decl.kind == K.UNION_DECL:
            # 联合：所有成员从第 0 个字节开始，大小与对齐取 clang 给出的（与 nvcc 相同）
            ms = [(f.spelling, self.member_type(f.type.get_canonical(), f, name)) for f in t.get_fields()]
            if not ms:
                raise self.unsupported(f"没有成员的联合 union {name}", decl)
            v = T.union_of(name, ms, size=t.get_size(), align=t.get_align())
            v.why = None
            self.struct_cache[key] = v
            self.prog.typedefs[name] = v
            return v
        self.check_class(decl)
        fields = list(t.get_fields())
        lam = lambda_name(name, decl)
        if lam is not None:
            captures = self.lambda_captures(self.lambda_of(decl, c))
            if sum(not x.hidden for x in captures) != len(fields):
                raise self.unsupported(f"{lam} 的捕获", c)
            name = lam
        leaves, names, members = [], [], {}
        for b in decl.get_children():           # 非虚的基类：成员排在前面（空的基类不占存储）
            if b.kind != K.CXX_BASE_SPECIFIER:
                continue
            bt = self.ctype(b.type, b)
            if not bt.is_vec:
                raise self.unsupported(f"基类 {b.type.spelling}", b)
            for mname, (start, mt) in bt.members.items():
                if mname in members:
                    raise self.unsupported(f"结构体 {name} 的基类里有同名成员 {mname}", b)
                members[mname] = (len(leaves) + start, mt)
            leaves.extend(bt.elems)
            names.extend(bt.fields)
        for i, f in enumerate(fields):
            fname = captures[i].spelling if lam is not None else f.spelling      # 闭包的成员没有名字：用捕获的变量名
            if fname in members:
                raise self.unsupported(f"结构体 {name} 的成员 {fname} 与基类的成员同名", f)
            if f.is_bitfield():
                raise self.unsupported(f"结构体 {name} 的位域成员 {f.spelling}（bit-field）", f)
            ft = f.type.get_canonical()
            if ft.is_volatile_qualified():
                raise self.unsupported(f"结构体 {name} 的 volatile 成员 {f.spelling}", f)
            if lam is not None and captures[i].by_ref:       # 按引用捕获：闭包里存变量的地址（数组：首元素的地址）
                pt = ft.get_pointee().get_canonical()
                mt = T.Ptr(self.member_type(pt.element_type.get_canonical() if pt.kind == TK.CONSTANTARRAY else pt,
                                            f, name))
            else:
                mt = self.member_type(ft, f, name)
            members[fname] = (len(leaves), mt)
            if mt.is_scalar or mt.is_ptr or mt.is_fnptr:
                leaves.append(mt)
                names.append(fname)
            else:
                sub = _leaves_of(mt)
                leaves.extend(sub)
                names.extend(f"{fname}#{k}" for k in range(len(sub)))
        for cap in (captures[len(fields):] if lam is not None else ()):   # 外层的 __shared__ / static 变量：存地址
            vt = cap.referenced.type.get_canonical()
            mt = T.Ptr(self.member_type(vt.element_type.get_canonical() if vt.kind == TK.CONSTANTARRAY else vt,
                                        cap.cursor, name))
            members[cap.spelling] = (len(leaves), mt)
            leaves.append(mt)
            names.append(cap.spelling)
        # 成员大小不同、有填充或含指针的结构体只能放在寄存器里（放进内存时报告不支持）
        storable = bool(leaves) and all(x.is_scalar and x.size == leaves[0].size for x in leaves) and \
            t.get_size() == len(leaves) * leaves[0].size
        if not names:
            v = T.Vec(name, T.UCHAR, 0, (), wide=False)     # 空结构体：只有成员函数（如 SharedMemory<T>），不占存储
            self.struct_cache[key] = v
            self.prog.typedefs[name] = v
            return v
        elem = leaves[0] if leaves[0].is_scalar else T.ULONG
        # 整体按自身大小对齐的结构体（struct __align__(16) { __half v0, ..., v7; }）：nvcc 用一条宽指令读写
        # （超过 16 字节时每 16 字节一条），与 float4 相同；否则按成员逐个读写
        size, align = t.get_size(), t.get_align()
        wide = len(names) > 1 and len(set(leaves)) == 1 and all(m[1].is_scalar for m in members.values()) and (
            (size <= 16 and align == size and size in (2, 4, 8, 16)) or (size > 16 and align >= 16 and size % 16 == 0))
        v = T.Vec(name, elem, len(names), names, wide=wide, align=align if wide else elem.size, elems=leaves,
                  members=members, storable=storable, size=size)
        v.why = None if v.storable else self.layout_reason(name, leaves, t)
        self.struct_cache[key] = v
        self.prog.typedefs[name] = v
        return v

    def lambda_of(self, decl, c):
        """闭包类型的声明 -> 定义它的 LAMBDA_EXPR。函数模板的每个实例有自己的闭包类型（与模板里的同一个位置）：
        先在正在降低的函数（实例）里找类型相同的那个，找不到再按源码位置找。"""
        hit = self.lambda_by_decl.get(decl.hash)
        if hit is not None:
            return hit
        fn = self.cur_fn
        if fn is not None:
            for x in fn.walk_preorder():
                if x.kind == K.LAMBDA_EXPR and x.type.get_declaration().hash == decl.hash:
                    self.lambda_by_decl[decl.hash] = x
                    return x
        if self.lambdas is None:
            self.lambdas = {}
            for x in self.tu.cursor.walk_preorder():
                if x.kind == K.LAMBDA_EXPR:
                    d = x.type.get_declaration()
                    self.lambdas[(d.location.file.name if d.location.file else None, d.location.offset)] = x
        key = (decl.location.file.name if decl.location.file else None, decl.location.offset)
        lam = self.lambdas.get(key)
        if lam is None:
            raise self.unsupported("lambda 表达式", c)
        return lam

    def lambda_captures(self, lam):
        """lambda 捕获的外层变量（:class:`_Capture`，顺序即闭包成员的顺序）：按值的（``[=]``、``[x]``）与按引用的
        （``[&]``、``[&x]``）。捕获 this、带初值的捕获拒绝。每个 lambda 只算一次（闭包的类型、它的每个成员引用都要问）。"""
        key = lam.type.get_declaration().hash       # 模板的各个实例：同一个位置、不同的闭包类型
        hit = self.capture_cache.get(key)
        if hit is None:
            hit = self.capture_cache[key] = self._lambda_captures(lam)
            self.lambda_by_decl.setdefault(key, lam)
        return hit

    def _lambda_captures(self, lam):
        toks = [t.spelling for t in lam.get_tokens()]
        depth, intro = 0, []
        for t in toks:                       # 捕获列表 [...] 里的记号
            if t == "[":
                depth += 1
                if depth == 1:
                    continue
            elif t == "]":
                depth -= 1
                if depth == 0:
                    break
            intro.append(t)
        if "this" in intro:
            raise self.unsupported("lambda 捕获 this", lam)
        items = [[]]
        for t in intro:
            if t == ",":
                items.append([])
            else:
                items[-1].append(t)
        items = [it for it in items if it]
        default = None
        if items and items[0] in (["="], ["&"]):
            default = items.pop(0)[0]
        explicit = []                        # (名字, 按引用)
        for it in items:
            if len(it) == 1 and it[0].isidentifier():
                explicit.append((it[0], False))
            elif len(it) == 2 and it[0] == "&" and it[1].isidentifier():
                explicit.append((it[1], True))
            else:
                raise self.unsupported("lambda 的这种捕获（带初值的捕获 [y = x] 等）", lam)
        named, inits = [], []
        for ch in lam.get_children():
            if ch.kind == K.PARM_DECL or ch.kind == K.COMPOUND_STMT:
                break
            if ch.kind == K.VARIABLE_REF:       # 显式捕获的名字
                named.append(ch)
            elif ch.kind == K.DECL_REF_EXPR:    # 按值捕获的初值（显式的在前，隐式的按第一次使用的顺序）
                inits.append(ch)
            elif ch.kind not in (K.TYPE_REF, K.TEMPLATE_TYPE_PARAMETER):
                raise self.unsupported("lambda 的这种捕获", ch)
        if len(named) != len(explicit) or any(n.spelling != e[0] for n, e in zip(named, explicit)):
            raise self.unsupported("lambda 的这种捕获", lam)
        caps = []
        for cur, (_, by_ref) in zip(named, explicit):
            caps.append(_Capture(cur, True) if by_ref else _Capture(inits.pop(0), False))
        auto_uses, static_uses = self.outer_uses(lam)
        if default == "&":                   # 隐式的按引用捕获：体里第一次用到外层局部变量的顺序
            seen = {c.referenced.hash for c in caps}
            for u in auto_uses:
                if u.referenced.hash not in seen:
                    seen.add(u.referenced.hash)
                    caps.append(_Capture(u, True))
        caps += [_Capture(x, False) for x in inits]
        fields = list(lam.type.get_fields())

        def value_type(t):                   # 引用（形参 float& acc）按它指向的类型比
            t = t.get_canonical()
            return (t.get_pointee() if t.kind == TK.LVALUEREFERENCE else t).get_canonical().spelling

        if len(fields) != len(caps) or any(
                (f.type.kind == TK.LVALUEREFERENCE) != cap.by_ref or cap.by_ref and
                f.type.get_pointee().get_canonical().spelling != value_type(cap.referenced.type)
                for f, cap in zip(fields, caps)):
            raise self.unsupported("lambda 的这种捕获（模拟器认不出按引用捕获了哪些变量；写成显式的 [&x, &y]）", lam)
        seen = set()
        for u in static_uses:                               # lambda 体直接用的外层 __shared__ / static 变量
            if u.referenced.hash not in seen:
                seen.add(u.referenced.hash)
                caps.append(_Capture(u, True, hidden=True))
        return caps

    def outer_uses(self, lam):
        """lambda 体里（含嵌套的 lambda）按源码顺序对外层函数变量的引用，分两组：自动变量（clang 按引用隐式捕获的
        候选；不必捕获的常量——值在编译期可知、只读它的值——不算），与 __shared__、static 变量（不必捕获，lambda 体
        直接用）。"""
        f = lam.location.file.name if lam.location.file else None
        lo, hi = lam.extent.start.offset, lam.extent.end.offset
        body = next((ch for ch in lam.get_children() if ch.kind == K.COMPOUND_STMT), None)
        autos, statics = [], []
        if body is None:
            return autos, statics
        for x in body.walk_preorder():
            if x.kind != K.DECL_REF_EXPR:
                continue
            r = x.referenced
            if r is None or r.kind not in (K.VAR_DECL, K.PARM_DECL):
                continue
            p = r.semantic_parent
            if p is None or p.kind not in (K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE):
                continue
            rf = r.location.file.name if r.location.file else None
            if rf == f and lo <= r.location.offset <= hi:
                continue                      # lambda 自己的形参与局部变量
            if r.kind == K.VAR_DECL and (r.storage_class == ci.StorageClass.STATIC or
                                         any(ch.kind == K.CUDASHARED_ATTR for ch in r.get_children())):
                statics.append(x)
                continue
            t = r.type.get_canonical()
            if t.is_const_qualified() and t.kind in _SCALARS and evaluate(x) is not None:
                continue                      # 常量：不捕获（用到的是它的值）
            autos.append(x)
        return autos, statics

    def lambda_expr(self, c):
        """lambda 表达式 -> 闭包类型的临时对象：按值捕获的变量依次作为成员的初值，按引用捕获的取它的地址
        （闭包的成员是指针，operator() 里用到时解引用；operator() 照成员函数降低）。"""
        co = self.co(c)
        inits = [self.declref(x.cursor) if x.by_ref and x.is_array else
                 c_ast.UnaryOp("&", self.declref(x.cursor), co) if x.by_ref else self.expr(x.cursor)
                 for x in self.lambda_captures(c)]
        return self.temporary(c, c_ast.InitList(inits, co))

    def captured(self, r):
        """正在降低 lambda 的 operator()，r 是它捕获的外层变量：那个 :class:`_Capture`，否则 None。"""
        fn = self.cur_fn
        if fn is None or fn.kind != K.CXX_METHOD or fn.semantic_parent is None or \
                lambda_name(fn.semantic_parent.type.spelling) is None:
            return None
        p = r.semantic_parent
        while p is not None and p.kind not in (K.TRANSLATION_UNIT,):
            if p == fn:
                return None                  # lambda 自己的形参与局部变量
            p = p.semantic_parent
        caps = self.lambda_captures(self.lambda_of(fn.semantic_parent, fn))
        hit = next((x for x in caps if x.referenced == r), None)
        if hit is not None:
            return hit
        return False                         # 外层函数的变量，没有捕获（__shared__、static、常量）

    def layout_reason(self, name, leaves, t):
        if any(x.is_ptr or x.is_fnptr for x in leaves):
            return f"结构体 {name} 含指针成员（只能放在寄存器里）/ struct {name} with pointer members"
        if any(x.size != leaves[0].size for x in leaves):
            kinds = "、".join(dict.fromkeys(x.name for x in leaves))
            return (f"结构体 {name} 的成员大小不同（{kinds}），只能放在寄存器里 / struct with members of different sizes "
                    "(struct with members of different sizes)")
        return f"结构体 {name} 有填充字节（sizeof {t.get_size()}），只能放在寄存器里 / struct with padding"

    def member_type(self, ft, f, sname):
        """结构体成员的类型：标量、标量或结构体的定长数组、嵌套的结构体（含向量类型）。"""
        st = _SCALARS.get(ft.kind) if ft.kind != TK.VOID else None
        if ft.kind == TK.ENUM:
            st = T.INT
        if st is not None:
            return st
        if ft.kind == TK.RECORD:
            sub = self.ctype(ft, f)
            if sub.is_scalar:              # __half、__nv_bfloat16
                return sub
            if sub.n == 0:
                raise self.unsupported(f"结构体 {sname} 的空结构体成员 {f.spelling}", f)
            return sub
        if ft.kind == TK.CONSTANTARRAY:
            et = self.member_type(ft.element_type.get_canonical(), f, sname)
            if ft.element_count <= 0:
                raise self.unsupported(f"结构体 {sname} 的成员 {f.spelling}：长度为 0 的数组", f)
            return T.Arr(et, ft.element_count)
        if ft.kind == TK.POINTER:
            pt = ft.get_pointee().get_canonical()
            if pt.kind in (TK.FUNCTIONPROTO, TK.FUNCTIONNOPROTO):
                return T.FNPTR
            return T.Ptr(self.ctype(pt, f), const=pt.is_const_qualified())
        what = ft.spelling
        raise self.unsupported(f"结构体 {sname} 的成员 {f.spelling}：不支持{what}成员（struct member of type "
                               f"{ft.spelling}）", f)

    def check_class(self, decl):
        for ch in decl.get_children():
            if ch.kind == K.CXX_BASE_SPECIFIER and (ch.is_virtual_base() if hasattr(ch, "is_virtual_base") else
                                                    any(t.spelling == "virtual" for t in ch.get_tokens())):
                raise self.unsupported("虚继承 virtual inheritance", ch)
            if ch.kind == K.CXX_METHOD and ch.is_virtual_method():
                raise self.unsupported(f"虚函数 virtual function {ch.spelling}", ch)

    def type_key(self, ct):
        name = ct.name
        if self.prog.typedefs.get(name) is not ct:
            self.prog.typedefs[name] = ct
        return name

    def tnode(self, t, declname, c, quals_of_decl=True):
        """clang 类型到 pycparser 的类型节点（Program.resolve 再把它变成 CType）。"""
        co = self.co(c)
        t = t.get_canonical()
        k = t.kind
        quals = []
        if t.is_const_qualified():
            quals.append("const")
        if t.is_volatile_qualified():
            quals.append("volatile")
        if k == TK.POINTER:
            pt = t.get_pointee().get_canonical()
            if pt.kind in (TK.FUNCTIONPROTO, TK.FUNCTIONNOPROTO):
                return c_ast.PtrDecl([], c_ast.FuncDecl(None, c_ast.TypeDecl(declname, [], None,
                                                                             c_ast.IdentifierType(["int"], co), co), co), co)
            if self.group_of(pt, c):
                raise self.unsupported("指向 cooperative groups 组对象的指针", c)
            return c_ast.PtrDecl([q for q in quals if q == "const"], self.tnode(pt, declname, c), co)
        if k == TK.CONSTANTARRAY:
            return c_ast.ArrayDecl(self.tnode(t.element_type, declname, c), _const("int", str(t.element_count), co),
                                   [], co)
        if k == TK.INCOMPLETEARRAY:
            return c_ast.ArrayDecl(self.tnode(t.element_type, declname, c), None, [], co)
        if k in (TK.VARIABLEARRAY, TK.DEPENDENTSIZEDARRAY):
            raise self.unsupported("非常量的数组长度 non-constant array size", c)
        if k in (TK.LVALUEREFERENCE, TK.RVALUEREFERENCE):
            raise self.unsupported("这里的引用类型 reference type", c)
        ct = self.ctype(t, c)
        if ct.is_ptr:
            raise self.unsupported(f"类型 {t.spelling}", c)
        return c_ast.TypeDecl(declname, quals, None, c_ast.IdentifierType([self.type_key(ct)], co), co)

    # ------------------------------------------------------------ 函数
    def fkey(self, c):
        return c.mangled_name or (c.get_usr(), c.type.spelling, c.location.line)

    def template_args(self, c):
        out = []
        for i in range(c.get_num_template_arguments()):
            kind = c.get_template_argument_kind(i)
            if kind == ci.TemplateArgumentKind.TYPE:
                ta = c.get_template_argument_type(i)
                try:
                    out.append(self.ctype(ta, c).name)
                except UnsupportedError:
                    out.append(type_spelling(ta))
            elif kind == ci.TemplateArgumentKind.INTEGRAL:
                out.append(str(c.get_template_argument_value(i)))
            else:
                out.append("?")
        return out

    def fname(self, d):
        """函数定义降低后的名字（重载加上参数类型，模板实例加上实参），第一次见到时排进待降低的队列。"""
        key = self.fkey(d)
        n = self.names.get(key)
        if n is not None:
            return n
        base = qualified_name(d)
        if d.get_num_template_arguments() > 0:
            base += "<" + ",".join(self.template_args(d)) + ">"
        elif base in self.overloaded:
            base += "(" + ",".join(type_spelling(a.type) for a in d.get_arguments()) + ")"
        n = base
        while n in self.used:
            n += "'"
        self.used.add(n)
        self.names[key] = n
        self.pending.append(d)
        return n

    def deferred_error(self, d):
        f = d.location.file
        if f is None:
            return None
        fa = os.path.abspath(f.name)
        a, b = d.extent.start.offset, d.extent.end.offset
        for ef, ea, eb, err in self.errors:
            if ef == fa and a <= ea <= b:
                return err
        return None

    def drain(self):
        from .frontend import Function
        while self.pending:
            d = self.pending.pop()
            name = self.names[self.fkey(d)]
            is_kernel = any(ch.kind == K.CUDAGLOBAL_ATTR for ch in d.get_children())
            err = self.deferred_error(d)
            co = self.co(d)
            if err is not None:
                self.prog.functions[name] = Function(name, None, is_kernel, T.VOID, [], {}, d.location.line,
                                                     set(), error=err)
                continue
            try:
                f = self.lower_function(d, name, is_kernel, co)
            except (UnsupportedError, CompileError) as e:
                # 降低不了的函数：启动能到达它的内核时再报（同一文件的其他内核照常运行）
                f = Function(name, None, is_kernel, T.VOID, [], {}, d.location.line, set(), error=_Ready(e))
            self.prog.functions[name] = f

    def lower_function(self, d, name, is_kernel, co):
        from .frontend import Function
        if d.kind == K.CONSTRUCTOR:
            return self.lower_ctor(d, name, co)
        if d.kind not in (K.FUNCTION_DECL, K.CXX_METHOD, K.CONVERSION_FUNCTION):
            raise self.unsupported(f"成员函数 member function {qualified_name(d)}", d)
        params, decls, refs = [], [], {}
        if d.kind != K.FUNCTION_DECL and not d.is_static_method():
            # 成员函数：对象按引用作为第一个参数 __this（this 是 &__this；空结构体没有这个参数）
            st = self.ctype(d.semantic_parent.type, d)
            if st.n:
                tn = c_ast.TypeDecl(THIS, [], None, c_ast.IdentifierType([self.type_key(st)], co), co)
                decls.append(c_ast.Decl(THIS, [], [], ["register"], [], tn, None, None, co))
                params.append((THIS, st, f"{st.name}&"))
                refs[THIS] = True        # 也能绑定到临时对象（C++ 允许在临时对象上调用成员函数）
        p2, d2, r2 = self.lower_params(d, is_kernel)
        params += p2
        decls += d2
        refs.update(r2)
        ret = self.prog.resolve_plain(self.tnode(d.result_type, name, d)) if d.result_type.kind != TK.VOID else T.VOID
        body = next((ch for ch in d.get_children() if ch.kind == K.COMPOUND_STMT), None)
        if body is None:
            raise self.unsupported(f"没有函数体的函数 {name}", d)
        self.cur_fn = d
        self.callees = set()
        cbody = self.stmt(body)
        if ret.is_void:
            rnode = c_ast.TypeDecl(name, [], None, c_ast.IdentifierType([self.type_key(ret)], co), co)
        else:                       # 返回指针的函数：类型节点照常由 tnode 构造
            rnode = self.tnode(d.result_type, name, d)
        fdecl = c_ast.Decl(name, [], [], [], [], c_ast.FuncDecl(c_ast.ParamList(decls, co), rnode, co), None, None, co)
        node = c_ast.FuncDef(fdecl, None, cbody, co)
        f = Function(name, node, is_kernel, ret, params, refs, d.location.line, self.callees)
        if is_kernel:
            f.cluster_dims = self.cluster_dims(d)
        return f

    def lower_params(self, d, is_kernel):
        """函数的形参 -> (params, decls, refs)：引用形参记在 refs 里（值为是否 const）。"""
        params, decls, refs = [], [], {}
        for i, p in enumerate(d.get_arguments()):
            pt = p.type
            pname = p.spelling or f"__unnamed{i}"
            if self.group_of(pt, p):
                raise self.unsupported(f"cooperative groups 的组对象作为参数 {pname}（group object as a parameter）", p)
            ref = pt.kind == TK.LVALUEREFERENCE
            if pt.kind == TK.RVALUEREFERENCE:
                raise self.unsupported(f"右值引用参数 {pname}（T&&）", p)
            base = pt.get_pointee() if ref else pt
            if ref and is_kernel:
                raise self.unsupported(f"内核的引用参数 {pname}（__global__ 函数的参数不能是引用）", p)
            tn = self.tnode(base, pname, p)
            const = base.get_canonical().is_const_qualified()
            decl = c_ast.Decl(pname, ["const"] if const else [], [], ["register"] if ref else [], [], tn, None, None,
                              self.co(p))
            ct = self.prog.resolve_plain(tn)
            if ct.is_array:
                ct = T.Ptr(ct.elem, ct.vol)
            ts = type_spelling(pt)
            if ref:
                refs[pname] = const
            params.append((pname, ct, ts))
            decls.append(decl)
        return params, decls, refs

    def lower_ctor(self, d, name, co):
        """构造函数 -> 返回新对象的函数：``T T::T(参数) { T __this; 成员按声明的顺序取初始化列表里的值或默认成员初值；
        函数体；return __this; }``。函数体里的成员与 this 照成员函数降低（__this 在这里是局部变量）。"""
        from .frontend import Function
        rec = d.semantic_parent
        st = self.ctype(rec.type, d)
        kids = list(d.get_children())
        inits = {}
        delegate = None
        explicit = {}               # 基类 -> 成员初始化列表里写出的基类构造 Base(args) 或 Base{a, b}
        for i, ch in enumerate(kids):
            if ch.kind == K.TYPE_REF:
                nxt = kids[i + 1] if i + 1 < len(kids) else None
                braced = nxt is not None and _strip(nxt).kind == K.INIT_LIST_EXPR      # 聚合的基类 Base{a, b}
                if ch.referenced is None or nxt is None or not braced and (
                        nxt.kind != K.CALL_EXPR or nxt.referenced is None or nxt.referenced.kind != K.CONSTRUCTOR):
                    raise self.unsupported(f"构造函数 {qualified_name(d)} 的这种初始化 {ch.spelling}", ch)
                if braced:
                    if ch.referenced.canonical == rec.canonical:
                        raise self.unsupported(f"构造函数 {qualified_name(d)} 里花括号写法的委托构造；写成 "
                                               f"{rec.spelling}(…)", ch)
                    explicit[ch.referenced.canonical] = _strip(nxt)
                elif ch.referenced.canonical == rec.canonical:
                    delegate = nxt          # 委托构造 Pair(float a) : Pair(a, a) {}
                else:
                    explicit[ch.referenced.canonical] = nxt
                continue
            if ch.kind == K.CALL_EXPR and any(v is not None and ch == v for v in (delegate, *explicit.values())):
                continue
            if ch.kind == K.MEMBER_REF:
                if i + 1 >= len(kids) or kids[i + 1].kind in (K.MEMBER_REF, K.COMPOUND_STMT):
                    raise self.unsupported(f"构造函数 {qualified_name(d)} 的成员初始化 {ch.spelling}()", ch)
                inits[ch.spelling] = kids[i + 1]
        params, decls, refs = self.lower_params(d, False)
        saved = self.cur_fn, self.callees
        self.cur_fn = d
        self.callees = set()
        try:
            tn = c_ast.TypeDecl(THIS, [], None, c_ast.IdentifierType([self.type_key(st)], co), co)
            items = [c_ast.Decl(THIS, [], [], [], [], tn, None, None, co)]
            if delegate is not None:
                # 委托构造：先由目标构造函数造出整个对象（默认成员初值由它负责），再执行自己的函数体
                whole = self.constructed_value(delegate)
                if whole is not None:
                    items.append(c_ast.Assignment("=", _id(THIS, co), whole, self.co(delegate)))
            else:
                # 先构造各个基类（写出的 Base(args)，或者它的默认构造），它们的成员排在前面；再是自己的成员
                for b in self.base_records(rec):
                    items += self.base_init(b, explicit.get(b.canonical), co)
                items += self.member_assignments(rec, inits)
            body = next((ch for ch in kids if ch.kind == K.COMPOUND_STMT), None)
            if body is not None:
                items.append(self.stmt(body))
            items.append(c_ast.Return(_id(THIS, co), co))
            callees = self.callees
        finally:
            self.cur_fn, self.callees = saved
        rnode = c_ast.TypeDecl(name, [], None, c_ast.IdentifierType([self.type_key(st)], co), co)
        fdecl = c_ast.Decl(name, [], [], [], [], c_ast.FuncDecl(c_ast.ParamList(decls, co), rnode, co), None, None, co)
        node = c_ast.FuncDef(fdecl, None, c_ast.Compound(items, co), co)
        return Function(name, node, False, st, params, refs, d.location.line, callees)

    def cluster_dims(self, d):
        """内核的 __cluster_dims__(x[, y[, z]])（序言把它写成 annotate 属性；可以写在前置声明上）：(x, y, z) 或 None。"""
        cands = [d]
        usr = d.get_usr()
        if usr and d.canonical != d:       # 有前置声明：属性可能写在那里（顶层的声明）
            cands += [c for c in self.tu.cursor.get_children()
                      if c.kind == K.FUNCTION_DECL and c != d and c.get_usr() == usr]
        for cur in cands:
            for a in cur.get_children():
                if a.kind != K.ANNOTATE_ATTR or a.spelling != "__simt_cluster_dims":
                    continue
                vals = [evaluate(e) for e in a.get_children()]
                if not 1 <= len(vals) <= 3 or any(not isinstance(v, int) for v in vals):
                    raise self.unsupported("__cluster_dims__ 的参数（需要 1 到 3 个整数常量）", a)
                if any(v < 1 for v in vals):
                    raise self.rejected(f"__cluster_dims__{tuple(vals)} 的每一维都必须是正整数（nvcc 报错）",
                                        f"__cluster_dims__{tuple(vals)}: every dimension must be positive (nvcc rejects it)",
                                        a)
                return tuple(vals) + (1,) * (3 - len(vals))
        return None

    # ------------------------------------------------------------ 语句
    def stmt(self, c):
        self.last = c
        k = c.kind
        co = self.co(c)
        if k == K.COMPOUND_STMT:
            items = []
            for ch in c.get_children():
                r = self.stmt(ch)
                if isinstance(r, list):
                    items.extend(r)
                elif r is not None:
                    items.append(r)
            return c_ast.Compound(items, co)
        if k == K.DECL_STMT:
            return self.decl_stmt(c)
        if k == K.IF_STMT:
            ch = list(c.get_children())
            if len(ch) not in (2, 3) or not ch[0].kind.is_expression():
                raise self.unsupported("带初始化语句或声明的 if", c)
            return c_ast.If(self.expr(ch[0]), self.body(ch[1]), self.body(ch[2]) if len(ch) == 3 else None, co)
        if k == K.FOR_STMT:
            return self.for_stmt(c)
        if k == K.WHILE_STMT:
            ch = list(c.get_children())
            if len(ch) != 2 or not ch[0].kind.is_expression():
                raise self.unsupported("条件里带声明的 while", c)
            return c_ast.While(self.expr(ch[0]), self.body(ch[1]), co)
        if k == K.DO_STMT:
            ch = list(c.get_children())
            return c_ast.DoWhile(self.expr(ch[1]), self.body(ch[0]), co)
        if k == K.RETURN_STMT:
            ch = _exprs(c)
            if ch and _strip(ch[0]).kind == K.INIT_LIST_EXPR and \
                    _strip(ch[0]).type.get_canonical().kind not in (TK.RECORD, TK.CONSTANTARRAY):
                return c_ast.Return(self.value(ch[0]), co)        # 标量的 return {v};
            return c_ast.Return(self.expr(ch[0]) if ch else None, co)
        if k == K.BREAK_STMT:
            return c_ast.Break(co)
        if k == K.CONTINUE_STMT:
            return c_ast.Continue(co)
        if k == K.NULL_STMT:
            return c_ast.EmptyStatement(co)
        if k == K.UNEXPOSED_STMT:       # #pragma unroll 之类的属性语句
            ch = list(c.get_children())
            if len(ch) == 1:
                return self.stmt(ch[0])
            raise self.unsupported("这种语句", c)
        if k in (K.ASM_STMT, K.MS_ASM_STMT):
            raise self.unsupported("内联汇编 inline asm", c)
        if k in (K.GOTO_STMT, K.LABEL_STMT, K.INDIRECT_GOTO_STMT):
            raise self.unsupported("goto/标签 goto", c)
        if k == K.SWITCH_STMT:
            return self.switch_stmt(c)
        if k in (K.CASE_STMT, K.DEFAULT_STMT):
            raise self.unsupported("switch 之外或嵌在其他语句里的 case 标签", c)
        if k in (K.CXX_TRY_STMT, K.CXX_CATCH_STMT):
            raise self.unsupported("异常 exceptions（try/catch）", c)
        if k == K.CXX_FOR_RANGE_STMT:
            return self.range_for(c)
        if k.is_expression():
            return self.expr(c)
        raise self.unsupported(f"语句 {k.name}", c)

    def body(self, c):
        r = self.stmt(c)
        if isinstance(r, list):
            return c_ast.Compound(r, self.co(c))
        return r if r is not None else c_ast.EmptyStatement(self.co(c))

    def switch_stmt(self, c):
        """switch 降低成 do { ... } while (0)：每个 case 段是一个 if，条件为「已经落入」或「值相等」，break 跳出
        do-while；default 的条件是「已经落入」或「没有任何 case 相等」。段里直接的 continue 会被 do-while 截住，拒绝。"""
        co = self.co(c)
        ch = list(c.get_children())
        if len(ch) != 2 or not ch[0].kind.is_expression():
            raise self.unsupported("带初始化语句的 switch", c)
        cond, body = ch
        items = list(body.get_children()) if body.kind == K.COMPOUND_STMT else [body]
        segs = []                       # [(标签值列表, 是否 default, 语句列表)]
        for it in items:
            labels, dflt, x = [], False, it
            while x.kind in (K.CASE_STMT, K.DEFAULT_STMT):
                sub = list(x.get_children())
                if x.kind == K.CASE_STMT:
                    v = evaluate(sub[0])
                    if v is None:
                        raise self.unsupported("case 标签不是整数常量", x)
                    labels.append(int(v))
                else:
                    dflt = True
                x = sub[-1]
            if labels or dflt:
                segs.append((labels, dflt, [x]))
            elif segs:
                segs[-1][2].append(it)
        for _, _, stmts in segs:
            for st in stmts:
                if _direct_continue(st):
                    raise self.unsupported("switch 里的 continue（请改用 if/else）", st)
        n = self.fresh("switch")
        sw, fall = f"__simt_switch{n}", f"__simt_fall{n}"
        ct = c_ast.IdentifierType([self.type_key(self.ctype(cond.type, cond))], co)
        bt = c_ast.IdentifierType(["bool"], co)
        decls = [c_ast.Decl(sw, [], [], [], [], c_ast.TypeDecl(sw, [], None, ct, co), self.expr(cond), None, co),
                 c_ast.Decl(fall, [], [], [], [], c_ast.TypeDecl(fall, [], None, bt, co), _const("int", "0", co), None, co)]
        out = []
        every = [v for labels, _, _ in segs for v in labels]

        def eq(v):
            return c_ast.BinaryOp("==", _id(sw, co), self.number(v, cond.type, co), co)

        def any_of(vs):
            e = None
            for v in vs:
                e = eq(v) if e is None else c_ast.BinaryOp("||", e, eq(v), co)
            return e if e is not None else _const("int", "0", co)

        for labels, dflt, stmts in segs:
            hit = c_ast.UnaryOp("!", any_of(every), co) if dflt else None
            if labels:
                hit = any_of(labels) if hit is None else c_ast.BinaryOp("||", hit, any_of(labels), co)
            body_items = [c_ast.Assignment("=", _id(fall, co), _const("int", "1", co), co)]
            for st in stmts:
                r = self.stmt(st)
                if isinstance(r, list):
                    body_items.extend(r)
                elif r is not None:
                    body_items.append(r)
            out.append(c_ast.If(c_ast.BinaryOp("||", _id(fall, co), hit, co), c_ast.Compound(body_items, co), None, co))
        loop = c_ast.DoWhile(_const("int", "0", co), c_ast.Compound(out, co), co)
        return c_ast.Compound(decls + [loop], co)

    def for_stmt(self, c):
        co = self.co(c)
        ch = list(c.get_children())
        body = ch[-1]
        parts = {"init": None, "cond": None, "next": None}
        if len(ch) == 4:
            parts.update(init=ch[0], cond=ch[1], next=ch[2])
        elif len(ch) > 1:
            # 省略了某一部分：按 for ( ... ; ... ; ... ) 里分号的位置归类
            semis, depth, started = [], 0, False
            for tok in c.get_tokens():
                s = tok.spelling
                if s == "(":
                    depth += 1
                    started = True
                elif s == ")":
                    depth -= 1
                    if started and depth == 0:
                        break
                elif s == ";" and depth == 1:
                    semis.append(tok.extent.start.offset)
            if len(semis) != 2:
                raise self.unsupported("这种 for 语句", c)
            for x in ch[:-1]:
                off = x.extent.start.offset
                parts["init" if off < semis[0] else "cond" if off < semis[1] else "next"] = x
        init = parts["init"]
        if init is not None:
            if init.kind == K.DECL_STMT:
                ds = self.decl_stmt(init)
                init = c_ast.DeclList(ds, co) if ds else None
            else:
                init = self.expr(init)
        cond = self.expr(parts["cond"]) if parts["cond"] is not None else None
        nxt = self.expr(parts["next"]) if parts["next"] is not None else None
        return c_ast.For(init, cond, nxt, self.body(body), co)

    def fresh(self, kind: str) -> int:
        """降低时新引入的隐藏变量（switch 的值、range-for 的下标、结构化绑定的副本）每种各自编号，名字不重复。"""
        counts = self.__dict__.setdefault("_fresh", {})
        counts[kind] = counts.get(kind, 0) + 1
        return counts[kind]

    def range_for(self, c):
        """``for (T v : a)``，a 是定长数组（局部、共享内存、结构体的数组成员）：降低成
        ``for (int i = 0; i < N; i++) { T v = a[i]; ... }``；``auto& v`` / ``const T& v`` 绑定到 a[i] 本身。
        别的范围（初始化列表、有 begin()/end() 的类型、含函数调用的表达式）拒绝并给出改法。"""
        co = self.co(c)
        ch = list(c.get_children())
        if len(ch) != 3 or ch[0].kind != K.VAR_DECL:
            raise self.unsupported("这种基于范围的 for（range-based for）", c)
        var, rng, body = ch
        at = rng.type.get_canonical()
        if at.kind != TK.CONSTANTARRAY:
            raise self.unsupported(f"基于范围的 for 只支持定长数组，这里的范围是 {rng.type.spelling}；"
                                   "请改写成按下标的 for 循环", c)
        # C++ 只在循环开始时求一次范围；降低后每一轮都按 a[i] 重新求它，所以范围必须每次求出同一个数组：
        # 变量、成员与下标（a、s.v、p->v、m[r]），不含函数调用与赋值，循环体也不给其中的变量赋值
        names = _plain_lvalue(rng)
        if names is None or _assigned_in(body, names):
            raise self.unsupported("基于范围的 for 的范围含函数调用、赋值或自增，或循环体给范围里的变量赋值"
                                   "（C++ 只在开始时求一次范围）；先把数组存进一个变量，或改写成按下标的 for 循环", rng)
        i = f"__simt_range{self.fresh('range')}"
        it = c_ast.TypeDecl(i, [], None, c_ast.IdentifierType(["int"], co), co)
        init = c_ast.DeclList([c_ast.Decl(i, [], [], [], [], it, _const("int", "0", co), None, co)], co)
        cond = c_ast.BinaryOp("<", _id(i, co), _const("int", str(at.get_array_size()), co), co)
        nxt = c_ast.UnaryOp("p++", _id(i, co), co)
        elem = self.local_var(var, init_ast=c_ast.ArrayRef(self.expr(rng), _id(i, co), co))
        inner = self.body(body)
        items = (inner.block_items or []) if isinstance(inner, c_ast.Compound) else [inner]
        return c_ast.For(init, cond, nxt, c_ast.Compound([elem, *items], co), co)

    def decl_stmt(self, c):
        out = []
        for ch in c.get_children():
            k = ch.kind
            if k == K.VAR_DECL:
                d = self.local_var(ch)
                if d is not None:
                    out.append(d)
            elif k == K.UNEXPOSED_DECL and ch.spelling.startswith("["):
                out += self.bindings(ch)
            elif k in (K.STRUCT_DECL, K.CLASS_DECL, K.UNION_DECL, K.ENUM_DECL):
                what = {K.UNION_DECL: "union", K.ENUM_DECL: "enum"}.get(k, "struct")
                raise self.unsupported(f"函数内定义的结构体、联合、枚举 struct/union/enum（{what}）", ch)
            elif k in (K.TYPEDEF_DECL, K.TYPE_ALIAS_DECL, K.STATIC_ASSERT, K.USING_DIRECTIVE, K.USING_DECLARATION,
                       K.NAMESPACE_ALIAS):
                continue
            else:
                raise self.unsupported(_DECL_NAMES.get(k.name, f"声明 {k.name}"), ch)
        return out

    def bindings(self, c):
        """结构化绑定 ``auto [a, b] = e;``（``auto&``、``const auto`` 同理），e 是结构体或定长数组：先声明一个隐藏的
        变量（按值时是 e 的副本，``auto&`` 时是 e 的引用），每个名字再是引用，绑定到它的第 i 个成员或元素，
        与 C++ 的语义相同（改 a 改的是副本的成员；``auto&`` 时改的是 e 本身）。"""
        co = self.co(c)
        names = [b for b in c.get_children() if b.kind == K.UNEXPOSED_DECL]
        t = c.type.get_canonical()
        base = t.get_pointee().get_canonical() if t.kind == TK.LVALUEREFERENCE else t
        if t.kind == TK.RVALUEREFERENCE:
            raise self.unsupported("右值引用的结构化绑定 auto&& [a, b]", c)
        if base.kind == TK.CONSTANTARRAY:
            parts = [None] * base.get_array_size()
        elif base.kind == TK.RECORD:
            decl = base.get_declaration()
            parts = [f.spelling for f in decl.get_children() if f.kind == K.FIELD_DECL]
            if any(ch.kind == K.CXX_BASE_SPECIFIER for ch in decl.get_children()):
                raise self.unsupported("对有基类的结构体做结构化绑定；请逐个成员取出", c)
        else:
            raise self.unsupported(f"结构化绑定只支持结构体与定长数组，这里是 {c.type.spelling}"
                                   "（std::pair、std::tuple 之类要 std::get）；请逐个成员取出", c)
        if len(parts) != len(names):
            raise self.unsupported(f"结构化绑定的名字数 {len(names)} 与成员数 {len(parts)} 不同", c)
        if base.kind == TK.CONSTANTARRAY:
            # 数组：名字直接取 arr 的元素。auto& 时是它们的引用（引用不能绑定整个数组），按值时是各元素的副本
            # （与复制整个数组再绑定相同）
            src = _strip(_exprs(c)[-1])
            if src.kind != K.DECL_REF_EXPR and _exprs(src):
                src = _exprs(src)[0]            # 按值复制数组时 clang 包了一层逐元素的初始化
            if _plain_lvalue(src) is None:      # 每个名字各求一次它：只接受变量或成员
                raise self.unsupported("数组的结构化绑定，右边不是一个变量或成员；先把数组存进一个变量", c)
            whole, out, by_ref = self.expr(src), [], t.kind == TK.LVALUEREFERENCE
        else:                                   # 结构体：名字是隐藏变量（副本或引用）的成员的引用
            hidden = f"__simt_bind{self.fresh('bind')}"
            whole, out, by_ref = _id(hidden, co), [self.local_var(c, name=hidden)], True
        for i, (part, b) in enumerate(zip(parts, names)):
            ref = (c_ast.ArrayRef(whole, _const("int", str(i), co), co) if part is None
                   else c_ast.StructRef(whole, ".", _id(part, co), co))
            bt = b.type
            quals = ["const"] if bt.get_canonical().is_const_qualified() else []
            out.append(c_ast.Decl(b.spelling, quals, [], ["register"] if by_ref else [], [],
                                  self.tnode(bt, b.spelling, b), ref, None, self.co(b)))
        return out

    def var_init(self, c):
        """变量声明的初始化表达式（没有时为 None）。数组的子节点前面是长度表达式。"""
        ex = _exprs(c)
        if not ex:
            return None
        t = c.type.get_canonical()
        last = ex[-1]
        if t.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
            return last if _strip(last).kind in (K.INIT_LIST_EXPR, K.STRING_LITERAL) else None
        s = _strip(last)
        if s.kind == K.CALL_EXPR and s.referenced is not None and s.referenced.kind == K.CONSTRUCTOR \
                and not list(s.get_arguments()) and self.ctor_def(s.referenced) is None:
            return None     # 结构体的默认构造，什么也不做：没有初值
        return last

    def local_var(self, c, init_ast=None, name=None):
        """一个局部变量的声明；``init_ast`` 给出时用它（已降低的表达式）作初值，不看 clang 里的初始化；
        ``name`` 给出时用它作变量名（结构化绑定的隐藏变量）。"""
        co = self.co(c)
        name = name or c.spelling
        t = c.type
        g = self.group_of(t, c)
        if g == ("token", None):
            # auto token = cluster.barrier_arrive();：令牌本身没有值，保留初始化里的 barrier_arrive() 调用
            arrive = next((n for n in c.walk_preorder() if n.kind == K.CALL_EXPR and n.spelling == "barrier_arrive"), None)
            return self.expr(arrive) if arrive is not None else None
        if g:
            return None        # 组对象：大小在类型里，成员调用直接降低
        attrs = {ch.kind for ch in c.get_children()}
        shared = K.CUDASHARED_ATTR in attrs
        if _zero_sized(t):
            raise zero_sized_error(self.where, c)
        storage = []
        sc = c.storage_class
        if shared:
            storage.append("_Thread_local")
            if sc == ci.StorageClass.EXTERN:
                storage.insert(0, "extern")
        elif sc == ci.StorageClass.STATIC and not t.get_canonical().is_const_qualified():
            raise self.unsupported("static 局部变量", c)
        elif sc == ci.StorageClass.EXTERN:
            raise self.unsupported("extern 局部变量", c)
        ref = t.kind == TK.LVALUEREFERENCE
        if t.kind == TK.RVALUEREFERENCE:
            raise self.unsupported("右值引用 T&&", c)
        base = t.get_pointee() if ref else t
        if ref:
            storage.append("register")      # 引用：由解释器绑定到初值的左值
        tn = self.tnode(base, name, c)
        init = self.var_init(c)
        ini = None
        ctor = self.element_ctor(base)
        if ctor is not None and base.get_canonical().kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY) and not shared:
            if init is not None and _strip(init).kind == K.INIT_LIST_EXPR:
                self.full_array_list(c, base, _strip(init))
            elif init_ast is None:
                init_ast = self.constructed_array(c, base, init)
        if shared and init is not None and _strip(init).kind == K.CALL_EXPR:
            init = None     # __shared__ 变量不执行构造函数（nvcc 警告 dynamic initialization is not supported）
        if init_ast is not None:
            ini = init_ast
        elif init is not None:
            ini = self.init_expr(init)
        quals = ["const"] if base.get_canonical().is_const_qualified() else []
        return c_ast.Decl(name, quals, [], storage, [], tn, ini, None, co)

    #: 逐个元素构造的局部数组至多这么多个元素（初始化列表按元素展开）
    MAX_CONSTRUCTED_ELEMS = 4096

    def constructed_array(self, c, t, init):
        """有构造函数（或默认成员初值）的结构体的局部数组 ``MD parts[4];``：每个元素执行一次默认构造，降成
        ``{MD(), MD(), …}`` 的初始化列表（多维时嵌套）。带初始化列表的数组见 :meth:`full_array_list`。"""
        call = _strip(init) if init is not None else next(
            (ch for ch in c.get_children() if ch.kind == K.CALL_EXPR and ch.referenced is not None
             and ch.referenced.kind == K.CONSTRUCTOR), None)
        if call is None or call.kind != K.CALL_EXPR or call.referenced is None or \
                call.referenced.kind != K.CONSTRUCTOR:
            raise self.unsupported(f"有构造函数（或默认成员初值）的结构体数组 {c.spelling} 的这种初始化", c)
        d = self.ctor_def(call.referenced)
        dims, tt = [], t.get_canonical()
        while tt.kind == TK.CONSTANTARRAY:
            dims.append(tt.element_count)
            tt = tt.element_type.get_canonical()
        if tt.kind == TK.CONSTANTARRAY or not dims or math.prod(dims) > self.MAX_CONSTRUCTED_ELEMS:
            raise self.unsupported(f"有构造函数的结构体数组 {c.spelling}（长度 {dims or '未知'}，逐个元素构造至多 "
                                   f"{self.MAX_CONSTRUCTED_ELEMS} 个元素）", c)
        co = self.co(c)

        def one():
            return self.ctor_call(call, d) if d is not None else c_ast.InitList([], co)

        def level(k):
            return c_ast.InitList([one() if k == len(dims) - 1 else level(k + 1) for _ in range(dims[k])], co)
        return level(0)

    def full_array_list(self, c, t, lst):
        """有构造函数的结构体数组的初始化列表要写全每个元素（``MD a[2] = {MD(), MD(1.0f)};``）：少写的元素要执行默认
        构造，libclang 不给出它们，模拟器拒绝而不是把它们当作 0。"""
        t = t.get_canonical()
        items = [x for x in _exprs(lst) if x.location.file is not None]
        if t.kind != TK.CONSTANTARRAY or len(items) != t.element_count:
            raise self.unsupported(f"有构造函数（或默认成员初值）的结构体数组 {c.spelling} 的初始化列表没有写全"
                                   f"（{len(items)} 项，数组长度 {t.element_count if t.kind == TK.CONSTANTARRAY else '?'}）；"
                                   "写全每个元素，或不写初始化列表（每个元素执行默认构造）", c)
        if t.element_type.get_canonical().kind == TK.CONSTANTARRAY:
            for x in items:
                if _strip(x).kind != K.INIT_LIST_EXPR:
                    raise self.unsupported(f"多维结构体数组 {c.spelling} 的初始化省略了内层的花括号", c)
                self.full_array_list(c, t.element_type, _strip(x))

    def constructed_value(self, call):
        """构造函数调用 ``T(args)``（CALL_EXPR）的值：执行自己写的构造；编译器生成的复制是实参本身，
        什么也不做的默认构造是 None。"""
        target = self.ctor_def(call.referenced)
        if target is not None:
            return self.ctor_call(call, target)
        args = list(call.get_arguments())
        return self.value(args[0]) if args else None

    @staticmethod
    def base_records(rec):
        """结构体的（非虚）基类，按声明的顺序。"""
        return [b.type.get_canonical().get_declaration() for b in rec.get_children()
                if b.kind == K.CXX_BASE_SPECIFIER]

    def needs_construction(self, rec) -> bool:
        """默认构造这个结构体要做事情：它有默认成员初值，或者某个基类要做（默认成员初值、自己写的默认构造）。"""
        return bool(self.field_inits(rec)) or any(self.element_ctor(b.type) is not None for b in self.base_records(rec))

    def base_init(self, b, call, co) -> list:
        """派生类的构造函数里构造基类 ``b``：``call`` 是写出的 ``Base(args)``，None 时执行它的默认构造。降成一个
        基类类型的隐藏变量，再把它的各个成员（连同更上层基类的）复制给 ``__this`` 里同名的成员。"""
        if call is not None and call.kind == K.INIT_LIST_EXPR:
            val = self.value(call)                      # Base{a, b}：这个类型的临时对象
        elif call is not None:
            val = self.constructed_value(call)
        else:
            d = self.element_ctor(b.type)
            if d is None:
                return []
            if d.kind != K.CONSTRUCTOR:                 # 只有默认成员初值（它自己的或更上层基类的）
                return self.member_defaults(b, co)
            n = self.fname(d)
            self.callees.add(n)
            val = _call(n, [self.expr(_exprs(a)[-1]) for a in d.get_arguments()], co)
        if val is None:
            return []
        tmp = f"__simt_base{self.fresh('base')}"
        bt = self.ctype(b.type, b)
        out = [c_ast.Decl(tmp, [], [], [], [], self.tnode(b.type, tmp, b), val, None, co)]
        for f in bt.fields:
            out.append(c_ast.Assignment("=", c_ast.StructRef(_id(THIS, co), ".", _id(f, co), co),
                                        c_ast.StructRef(_id(tmp, co), ".", _id(f, co), co), co))
        return out

    def member_defaults(self, rec, co) -> list:
        """没有自己写的构造函数的结构体 ``rec`` 的默认构造：先构造它的基类，再按默认成员初值给成员赋值。"""
        out = []
        for b in self.base_records(rec):
            out += self.base_init(b, None, co)
        return out + self.member_assignments(rec, {})

    def member_assignments(self, rec, inits) -> list:
        """构造函数里给 ``rec`` 自己的成员赋初值（按声明的顺序）：``inits`` 是成员初始化列表里写出的
        {成员名: 表达式}，没写出的取默认成员初值，都没有的不赋值。"""
        out = []
        defaults = self.field_inits(rec)
        for f in rec.type.get_canonical().get_fields():
            e = inits.get(f.spelling, defaults.get(f.spelling))
            if e is None:
                continue
            if f.type.get_canonical().kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                raise self.unsupported(f"构造函数里初始化数组成员 {rec.spelling}::{f.spelling}", e)
            fc = self.co(e)
            out.append(c_ast.Assignment("=", c_ast.StructRef(_id(THIS, fc), ".", _id(f.spelling, fc), fc),
                                        self.init_expr(e), fc))
        return out

    @staticmethod
    def field_inits(record_decl):
        """结构体的默认成员初值（``float m = -INFINITY;``）：{成员名: 初值表达式}。"""
        out = {}
        for f in record_decl.get_children():
            if f.kind != K.FIELD_DECL or f.is_bitfield():
                continue
            ex = _exprs(f)
            if f.type.get_canonical().kind == TK.CONSTANTARRAY:       # 数组成员的子节点先是长度
                ex = [x for x in ex if _strip(x).kind == K.INIT_LIST_EXPR]
            if ex:
                out[f.spelling] = ex[-1]
        return out

    def ctor_def(self, ctor):
        """要执行的构造函数：自己写的、做了事情的构造函数（成员初始化、函数体、参数），或者结构体有默认成员初值
        时的默认构造 -> 它的定义；编译器生成的复制、移动与什么也不做的构造 -> None。"""
        if not self.where.is_user(ctor.location.file):
            return None
        d = ctor.get_definition()
        if d is None:
            return None
        body = next((ch for ch in d.get_children() if ch.kind == K.COMPOUND_STMT), None)
        rec = ctor.semantic_parent
        implicit = (d.location.line, d.location.column) == (rec.location.line, rec.location.column)
        copy = ctor.is_copy_constructor() or ctor.is_move_constructor()
        if copy and (implicit or ctor.is_default_method()):
            return None                      # 编译器生成的复制、移动：按值复制
        inits = [ch for ch in d.get_children() if ch.kind in (K.MEMBER_REF, K.TYPE_REF)]
        work = bool(inits) or (body is not None and list(body.get_children())) or bool(list(d.get_arguments()))
        if work or self.needs_construction(ctor.semantic_parent):
            return d
        return None

    def element_ctor(self, t):
        """类型（或数组的元素类型）是要执行默认构造的结构体时，那个构造函数的定义；否则 None。"""
        t = t.get_canonical()
        while t.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
            t = t.element_type.get_canonical()
        if t.kind != TK.RECORD:
            return None
        rec = t.get_declaration()
        if not self.where.is_user(rec.location.file):
            return None
        for ch in rec.get_children():
            if ch.kind == K.CONSTRUCTOR and all(_exprs(a) for a in ch.get_arguments()):    # 默认构造（形参都有默认值）
                return self.ctor_def(ch)
        return rec if self.needs_construction(rec) else None

    def ctor_call(self, s, d):
        """调用构造函数：降成返回新对象的函数（见 lower_ctor）。"""
        n = self.fname(d)
        self.callees.add(n)
        return _call(n, self.args_of(s, d, False), self.co(s))

    def temporary(self, c, init):
        """临时对象 ``T{…}``、``T()``（例如实参里的 ``MaxOp{}``）：降成复合字面量 ``(T){…}``，解释器按
        ``T t = {…};`` 的规则求值。初始化不是花括号列表（``T(other)`` 的复制）时就是那个值本身。"""
        if not isinstance(init, c_ast.InitList):
            return init
        co = self.co(c)
        return c_ast.CompoundLiteral(c_ast.Typename(None, [], None, self.tnode(c.type, None, c), co), init, co)

    def value(self, c):
        """实参与赋值右边的表达式：花括号列表 ``f({a, b})``、``p = {m, s}`` 的类型是结构体时，就是这个类型的临时对象
        （与 ``f(Pair{a, b})`` 相同）；别的表达式照常。"""
        s = _strip(c)
        if s.kind == K.INIT_LIST_EXPR and s.type.get_canonical().kind == TK.RECORD:
            return self.temporary(s, self.expr(s))
        if s.kind == K.INIT_LIST_EXPR and s.type.get_canonical().kind != TK.CONSTANTARRAY:
            # 标量的花括号列表 f({x})、x = {}：一项就是那一项（clang 已把转换放进去，收窄的转换它报错），空的是 0
            items = _exprs(s)
            if len(items) == 1:
                return self.expr(items[0])
            if not items:
                return self.number(0, s.type, self.co(s))
        return self.expr(c)

    def init_expr(self, c):
        s = _strip(c)
        if s.kind == K.CALL_EXPR and s.referenced is not None and s.referenced.kind == K.CONSTRUCTOR:
            d = self.ctor_def(s.referenced)
            if d is not None:
                return self.ctor_call(s, d)
            args = list(s.get_arguments())
            if len(args) == 1:
                return self.init_expr(args[0])
            if not args:
                return c_ast.InitList([], self.co(c))
            raise self.unsupported("构造函数 constructor", c)
        return self.expr(c)

    # ------------------------------------------------------------ 表达式
    def expr(self, c):
        self.last = c
        k = c.kind
        co = self.co(c)
        if k in (K.UNEXPOSED_EXPR, K.PAREN_EXPR):
            ch = _exprs(c)
            if len(ch) == 1:
                return self.expr(ch[0])
            if not ch and c.spelling == "" and k == K.UNEXPOSED_EXPR:
                v = evaluate(c)
                if v is not None:
                    return self.number(v, c.type, co)
            raise self.unsupported(f"表达式（{c.type.spelling}）", c)
        if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL):
            v = evaluate(c)
            if v is None:
                raise self.unsupported("常量", c)
            return self.number(v, c.type, co)
        if k == K.CXX_BOOL_LITERAL_EXPR:
            v = evaluate(c)
            return _cast(["bool"], _const("int", "1" if v else "0", co), co)
        if k in (K.CXX_NULL_PTR_LITERAL_EXPR, K.GNU_NULL_EXPR):
            return _const("int", "0", co)
        if k == K.STRING_LITERAL:
            raise self.unsupported("字符串常量（只支持直接写在 printf 里的：格式串与 %s 的实参）string literal outside printf", c)
        if k == K.DECL_REF_EXPR:
            return self.declref(c)
        if k == K.MEMBER_REF_EXPR:
            return self.member(c)
        if k == K.ARRAY_SUBSCRIPT_EXPR:
            a, b = _exprs(c)
            return c_ast.ArrayRef(self.expr(a), self.expr(b), co)
        if k in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            op = BINARY_OPS.get(_lib.clang_getCursorBinaryOperatorKind(c))
            a, b = _exprs(c)
            if op is None:
                raise self.unsupported("这个二元运算符", c)
            if op == ",":
                return c_ast.ExprList([self.expr(a), self.expr(b)], co)
            if op.endswith("=") and op not in ("==", "!=", "<=", ">="):
                if op != "=" and _strip(b).kind == K.INIT_LIST_EXPR:
                    # C++ 允许标量的 x += {1}，nvcc 13 拒绝（a brace-enclosed list is not allowed here）
                    raise self.rejected(f"复合赋值 {op} 的右边是花括号列表（nvcc 报错：a brace-enclosed list is not "
                                        f"allowed here）；去掉花括号", f"a brace-enclosed list on the right of {op} "
                                        f"(nvcc rejects it: a brace-enclosed list is not allowed here); drop the braces", b)
                return c_ast.Assignment(op, self.expr(a), self.value(b), co)
            return c_ast.BinaryOp(op, self.expr(a), self.expr(b), co)
        if k == K.UNARY_OPERATOR:
            op = UNARY_OPS.get(_lib.clang_getCursorUnaryOperatorKind(c))
            (a,) = _exprs(c)
            if op is None:
                raise self.unsupported("这个一元运算符", c)
            if op == "*" and _strip(a).kind == K.CXX_THIS_EXPR:
                return _id(THIS, co)            # *this
            if op == "&":
                s = _strip(a)
                if s.kind == K.DECL_REF_EXPR and s.referenced is not None and s.referenced.kind == K.FUNCTION_DECL:
                    return self.declref(s)      # &f：函数指针
            return c_ast.UnaryOp(op, self.expr(a), co)
        if k == K.CONDITIONAL_OPERATOR:
            a, b, d = _exprs(c)
            return c_ast.TernaryOp(self.expr(a), self.expr(b), self.expr(d), co)
        if k in _CASTS:
            ex = _exprs(c)
            if not ex:
                raise self.unsupported("类型转换", c)
            if _cast_to_lvalue_ref(c):      # const_cast<T&>(v)、(T&)x：结果是原对象，按 *(T*)&x 执行
                to = c_ast.Typename(None, [], None, c_ast.PtrDecl([], self.tnode(c.type, None, c), co), co)
                return c_ast.UnaryOp("*", c_ast.Cast(to, c_ast.UnaryOp("&", self.expr(ex[-1]), co), co), co)
            if c.type.get_canonical().kind == TK.RECORD:
                return self.temporary(c, self.init_expr(ex[-1]))
            to = c_ast.Typename(None, [], None, self.tnode(c.type, None, c), co)
            return c_ast.Cast(to, self.expr(ex[-1]), co)
        if k == K.CXX_DYNAMIC_CAST_EXPR:
            raise self.unsupported("dynamic_cast", c)
        if k == K.CALL_EXPR:
            return self.call(c)
        if k == K.INIT_LIST_EXPR:
            given = [x for x in _exprs(c) if x.location.file is not None]
            items = [self.init_expr(x) for x in given]
            t = c.type.get_canonical()
            if t.kind == TK.RECORD and self.where.is_user(t.get_declaration().location.file):
                defaults = self.field_inits(t.get_declaration())
                if defaults:                 # 没写出的成员取默认成员初值（libclang 不给出这些表达式）
                    fields = list(t.get_fields())
                    if any(f.type.get_canonical().kind not in _SCALARS for f in fields) or len(given) > len(fields):
                        raise self.unsupported(f"有默认成员初值、成员不全是标量的结构体 {t.spelling} 的初始化列表", c)
                    for f in fields[len(given):]:
                        items.append(self.init_expr(defaults[f.spelling]) if f.spelling in defaults else _const("int", "0", co))
            return c_ast.InitList(items, co)
        if k == K.CXX_UNARY_EXPR:
            v = evaluate(c)
            if v is None:
                raise self.unsupported("sizeof/alignof", c)
            return _const("int", f"{int(v)}ul", co)
        if k in (K.CXX_NEW_EXPR, K.CXX_DELETE_EXPR):
            raise self.unsupported("new/delete（设备端的动态内存分配）", c)
        if k == K.CXX_THROW_EXPR:
            raise self.unsupported("异常 exceptions（throw）", c)
        if k == K.LAMBDA_EXPR:
            return self.lambda_expr(c)
        if k == K.CXX_THIS_EXPR:
            return c_ast.UnaryOp("&", _id(THIS, co), co)
        if "KERNEL" in k.name:
            raise self.unsupported("在设备代码中启动内核（动态并行 dynamic parallelism）", c)
        raise self.unsupported(f"表达式 {k.name}", c)

    def number(self, v, t, co):
        t = t.get_canonical()
        if isinstance(v, float) or t.kind in (TK.FLOAT, TK.DOUBLE):
            if t.kind == TK.FLOAT:
                import numpy as np
                return _const("float", repr(float(np.float32(v))) + "f", co)
            return _const("double", repr(float(v)), co)
        if v < 0:
            return c_ast.UnaryOp("-", _const("int", str(-v) + _INT_SUFFIX.get(t.kind, ""), co), co)
        return _const("int", str(v) + _INT_SUFFIX.get(t.kind, ""), co)

    def declref(self, c):
        co = self.co(c)
        r = c.referenced
        if r is None:
            ch = _exprs(c)
            if len(ch) == 1:
                return self.expr(ch[0])
            raise self.unsupported(f"标识符 {c.spelling}", c)
        rk = r.kind
        if c.spelling == "" and _exprs(c):          # 代入了值的非类型模板形参
            return self.expr(_exprs(c)[0])
        if rk in (K.VAR_DECL, K.PARM_DECL):
            p = r.semantic_parent
            pk = p.kind if p is not None else None
            if rk == K.VAR_DECL and pk in (K.STRUCT_DECL, K.CLASS_DECL):
                v = evaluate(c)
                if v is None:
                    raise self.unsupported(f"静态成员 {qualified_name(r)}", c)
                return self.number(v, c.type, co)
            cap = self.captured(r) if pk in (K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE) else None
            if cap:                     # lambda 捕获的变量：闭包的成员（按引用捕获的成员是指针）
                member = c_ast.StructRef(_id(THIS, co), ".", _id(cap.spelling, co), co)
                return c_ast.UnaryOp("*", member, co) if cap.by_ref and not cap.is_array else member
            if cap is False:
                v = evaluate(c)
                if v is not None and r.type.get_canonical().kind in _SCALARS:
                    return self.number(v, c.type, co)               # 外层的常量：不必捕获
                raise self.unsupported(f"lambda 里用外层函数的变量 {r.spelling}（没有捕获：__shared__ 或 static 变量；"
                                       "把它的指针作为参数传进去）", c)
            lp = r.lexical_parent
            if rk == K.VAR_DECL and pk in (K.TRANSLATION_UNIT, K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL) and \
                    (lp is None or lp.kind in (K.TRANSLATION_UNIT, K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL)):
                if not self.where.is_user(r.location.file):
                    return _id(r.spelling, co)         # threadIdx、warpSize ...
                return _id(self.file_var(r), co)
            return _id(r.spelling, co)
        if rk == K.UNEXPOSED_DECL and r.semantic_parent is not None and \
                r.semantic_parent.kind in (K.NAMESPACE, K.TRANSLATION_UNIT) and \
                r.type.get_canonical().kind in _SCALARS and (v := evaluate(c)) is not None:
            return self.number(v, c.type, co)   # 变量模板的常量：std::is_same_v<T, float>、is_integral_v<T> ...
        if rk == K.UNEXPOSED_DECL and r.spelling.isidentifier() and not r.spelling.startswith("["):
            return _id(r.spelling, co)        # 结构化绑定的名字：bindings() 把它声明成引用
        if rk == K.ENUM_CONSTANT_DECL:
            return self.number(r.enum_value, c.type, co)
        if rk == K.FUNCTION_DECL:
            d = r.get_definition()
            if d is None and self.where.is_user(r.location.file):
                raise undefined_function_error(self.where, c, r)
            if d is None or not self.where.is_user(d.location.file):
                raise self.unsupported(f"指向 CUDA 内置函数 {r.spelling} 的指针（函数指针只能指向源码里定义的函数）", c)
            n = self.fname(d)
            self.callees.add(n)
            return _id(n, co)
        raise self.unsupported(f"对 {r.spelling} 的引用（{rk.name}）", c)

    def file_var(self, r):
        key = r.get_usr() or r.spelling
        n = self.file_var_names.get(key)
        if n is None:
            raise self.unsupported(f"文件作用域变量 {r.spelling}（只支持 __constant__、__device__ 与 const 变量）", r)
        return n

    def member(self, c):
        co = self.co(c)
        ex = _exprs(c)
        r = c.referenced
        if r is not None and r.kind in (K.CXX_METHOD, K.CONVERSION_FUNCTION):
            raise self.unsupported(f"成员函数 member function {c.spelling}", c)
        if not ex:
            if r is not None and r.kind == K.FIELD_DECL and self.cur_fn is not None and \
                    self.cur_fn.kind in (K.CXX_METHOD, K.CONVERSION_FUNCTION, K.CONSTRUCTOR):
                return c_ast.StructRef(_id(THIS, co), ".", _id(c.spelling, co), co)     # 隐式的 this->
            raise self.unsupported(f"成员 {c.spelling}（成员函数里的隐式 this）", c)
        base = ex[0]
        sb = _strip(base)
        if sb.kind == K.DECL_REF_EXPR and sb.spelling in ("threadIdx", "blockIdx", "blockDim", "gridDim") \
                and sb.referenced is not None and not self.where.is_user(sb.referenced.location.file):
            return c_ast.StructRef(_id(sb.spelling, co), ".", _id(c.spelling, co), co)
        if sb.kind == K.CXX_THIS_EXPR:
            return c_ast.StructRef(_id(THIS, co), ".", _id(c.spelling, co), co)       # this->x
        arrow = base.type.get_canonical().kind == TK.POINTER
        return c_ast.StructRef(self.expr(base), "->" if arrow else ".", _id(c.spelling, co), co)

    def args_of(self, c, callee_def, drop_defaults):
        out = []
        params = list(callee_def.get_arguments()) if callee_def is not None else []
        for i, a in enumerate(c.get_arguments()):
            if a.location.file is None and not _exprs(a):       # 默认实参
                if drop_defaults:
                    continue
                if i < len(params):
                    dx = _exprs(params[i])
                    if dx:
                        out.append(self.expr(dx[-1]))
                        continue
                raise self.unsupported("默认实参", c)
            out.append(self.value(a))
        return out

    def call(self, c):
        co = self.co(c)
        r = c.referenced
        ex = _exprs(c)
        if r is None:
            callee = _strip(ex[0]) if ex else None
            if callee is not None and callee.kind == K.UNARY_OPERATOR and \
                    UNARY_OPS.get(_lib.clang_getCursorUnaryOperatorKind(callee)) == "*":
                inner = _strip(_exprs(callee)[0])          # (*f)(...)：通过函数指针调用
                ir = inner.referenced if inner.kind == K.DECL_REF_EXPR else None
                if ir is not None and ir.kind in (K.VAR_DECL, K.PARM_DECL) and \
                        ir.type.get_canonical().kind == TK.POINTER:
                    return _call(ir.spelling, [self.value(a) for a in c.get_arguments()], co)
            raise self.unsupported("这种函数调用", callee or c)
        rk = r.kind
        if rk == K.CONSTRUCTOR:
            return self.temporary(c, self.init_expr(c))
        args = list(c.get_arguments())
        if rk == K.CONVERSION_FUNCTION and not self.where.is_user(r.location.file):
            callee = _strip(ex[0]) if ex else None
            obj = _exprs(callee) if callee is not None and callee.kind == K.MEMBER_REF_EXPR else []
            if obj:
                return self.expr(obj[0])        # __half -> float：解释器按类型转换
        if rk == K.CXX_METHOD and r.spelling == "operator=" and len(args) == 2 and \
                (r.is_copy_assignment_operator_method() or r.is_move_assignment_operator_method()) and \
                (r.is_default_method() or not self.where.is_user(r.location.file) or not r.is_definition()):
            rhs = self.init_expr(args[1])
            if isinstance(rhs, c_ast.InitList):         # p = {m, s};：左边那个类型的临时对象
                rhs = self.temporary(args[0], rhs)
            return c_ast.Assignment("=", self.expr(args[0]), rhs, co)
        if rk in (K.CXX_METHOD, K.CONVERSION_FUNCTION):
            callee = _strip(ex[0]) if ex else None
            if callee is not None and callee.kind == K.MEMBER_REF_EXPR:
                obj = _exprs(callee)
                g = self.group_of(obj[0].type, c) if obj else None
                if g is not None:
                    return self.group_method(g, callee.spelling, self.group_args(g, callee.spelling, args), c, co)
            par = r.semantic_parent
            if par is not None and par.kind in (K.STRUCT_DECL, K.CLASS_DECL) and \
                    not self.where.is_user(r.location.file) and self.group_of(par.type, c) == ("cluster", None):
                # 静态成员函数 cg::cluster_group::sync() 等：不经对象调用
                return self.group_method(("cluster", None), r.spelling, self.group_args(("cluster", None), r.spelling, args),
                                         c, co)
            d = r.get_definition()
            if d is not None and self.where.is_user(d.location.file):
                return self.method_call(r, d, callee, args, c, co)
            if d is None and self.where.is_user(r.location.file):
                raise undefined_function_error(self.where, c, r, "成员函数")
            raise self.unsupported(f"成员函数 member function {r.spelling}（没有定义）", c)
        if rk == K.FUNCTION_DECL and r.spelling.startswith("operator") and not self.where.is_user(r.location.file):
            op = r.spelling[len("operator"):]
            if len(args) == 2 and op in ("+", "-", "*", "/", "==", "!=", "<", ">", "<=", ">="):
                return c_ast.BinaryOp(op, self.expr(args[0]), self.expr(args[1]), co)
            if len(args) == 2 and op in ("+=", "-=", "*=", "/="):
                return c_ast.Assignment(op, self.expr(args[0]), self.expr(args[1]), co)
            if len(args) == 1 and op in ("-", "+"):
                return c_ast.UnaryOp(op, self.expr(args[0]), co)
            raise self.unsupported(f"运算符 {r.spelling}", c)
        if rk in (K.VAR_DECL, K.PARM_DECL, K.FIELD_DECL):
            # 通过函数指针调用
            if r.type.get_canonical().kind == TK.POINTER:
                return _call(r.spelling, [self.value(a) for a in c.get_arguments()], co)
            raise self.unsupported("通过表达式调用函数", c)
        if rk != K.FUNCTION_DECL:
            raise self.unsupported(f"调用 {r.spelling}（{rk.name}）", c)
        if _in_namespace(r, "cooperative_groups") and not self.where.is_user(r.location.file):
            return self.group_function(r.spelling, c, co)
        if not self.where.is_user(r.location.file) and re.match(r"(tex|surf)\w*$", r.spelling):
            for a in args:
                ad = a.type.get_canonical().get_declaration()
                if ad is not None and ad.spelling in ("texture", "surface") and not self.where.is_user(ad.location.file):
                    raise texture_reference_error(self.where, c, ad.spelling)
            raise self.unsupported(f"纹理对象 cudaTextureObject_t 的读写 {r.spelling}（nvcc 接受；读的是主机绑定的纹理"
                                   f"与表面内存，模拟器不支持）/ texture or surface object access {r.spelling}", c)
        if r.spelling == "printf" and not self.where.is_user(r.location.file):
            return self.printf_call(args, c, co)
        if not self.where.is_user(r.location.file):
            sp = self.spec_call(r.spelling, args, c, co)
            if sp is not None:
                return sp
        d = r.get_definition()
        if d is not None and self.where.is_user(d.location.file):
            n = self.fname(d)
            self.callees.add(n)
            return _call(n, self.args_of(c, d, False), co)
        name = r.spelling
        if name == "__builtin_nanf":
            return _call(name, [], co)
        builtin = name in BUILTIN_FUNCS or (name.startswith("make_") and name[5:] in T.VECS)
        if self.where.is_user(r.location.file) and not name.startswith("__builtin") and \
                (not builtin or r.semantic_parent.kind != K.TRANSLATION_UNIT):
            raise undefined_function_error(self.where, c, r)
        if name.startswith("operator"):
            raise self.unsupported(f"运算符 {name}", c)
        if not builtin:
            raise self.unsupported(f"函数 {name}()", c)
        return _call(name, self.args_of(c, None, True), co)

    def method_call(self, r, d, callee, args, c, co):
        """调用自己定义的成员函数（含运算符与类型转换函数）：对象的地址作为第一个实参 this。"""
        n = self.fname(d)
        self.callees.add(n)
        params = list(d.get_arguments())
        if r.is_static_method():
            return _call(n, self.args_of(c, d, False), co)
        if callee is not None and callee.kind == K.MEMBER_REF_EXPR:
            obj = _exprs(callee)
            rest = [self.value(a) for a in args]
        elif len(args) == len(params) + 1:          # 成员运算符 a + b：第一个实参是对象
            obj, rest = [args[0]], [self.value(a) for a in args[1:]]
        else:
            obj, rest = [], [self.value(a) for a in args]
        st = self.ctype(d.semantic_parent.type, c)
        if st.n == 0:                               # 空结构体：没有 __this 参数
            return _call(n, rest, co)
        if not obj:                                 # 成员函数里调用另一个成员函数：隐式的 this
            if self.cur_fn is None or self.cur_fn.kind not in (K.CXX_METHOD, K.CONVERSION_FUNCTION, K.CONSTRUCTOR):
                raise self.unsupported(f"成员函数 {r.spelling} 的调用（没有对象）", c)
            return _call(n, [_id(THIS, co)] + rest, co)
        o = obj[0]
        if o.type.get_canonical().kind == TK.POINTER:
            this = c_ast.UnaryOp("*", self.expr(o), co)     # p->f()：绑定到 *p
        else:
            this = self.init_expr(o)
        return _call(n, [this] + rest, co)

    # ------------------------------------------------------------ printf
    def printf_call(self, args, c, co):
        """设备端的 printf：格式串必须是字符串常量，降低成 __simt_printf(格式串的编号, 实参...)。%s 的实参只能是
        字符串常量，在这里直接写进格式串；整数转换配浮点实参（或反过来）在 C 里是未定义行为，报不支持而不是印出
        一个错的数。格式串存在 Program.strings 里，解释器按它逐个线程地格式化。"""
        fmt = string_literal(args[0]) if args else None
        if fmt is None:
            raise self.unsupported("printf 的格式串不是字符串常量 / printf format that is not a string literal", c)
        rest, vals, out, pos, k = args[1:], [], [], 0, 0
        for m in list(PRINTF_SPEC.finditer(fmt)) + [None]:
            seg = fmt[pos:m.start() if m is not None else len(fmt)]
            if "%" in seg:
                raise self.unsupported(f"printf 格式串里无法识别的转换 {seg[seg.index('%'):][:4]!r}"
                                       f" / unrecognised printf conversion", c)
            out.append(seg)
            if m is None:
                break
            pos = m.end()
            conv, spec = m.group("conv"), m.group(0)
            if conv == "%":
                out.append("%%")
                continue
            if conv in "naAp" or "*" in spec:
                raise self.unsupported(f"printf 的转换 {spec}（模拟器支持 d i o u x X c e E f F g G s 与 %%，"
                                       f"宽度与精度要写成数字）/ printf conversion {spec}", c)
            if k >= len(rest):
                raise self.unsupported(f"printf 的实参比格式串里的转换少（第 {k + 1} 个转换 {spec} 没有实参）"
                                       f" / printf has fewer arguments than conversions", c)
            a = rest[k]
            k += 1
            if conv == "s":
                text = string_literal(a)
                if text is None:
                    raise self.unsupported(f"printf 的 {spec} 实参不是字符串常量（设备端只能印出字符串常量）"
                                           f" / printf {spec} argument that is not a string literal", a)
                out.append((f"%{m.group('flags')}{m.group('width') or ''}"
                            f"{'.' + m.group('prec') if m.group('prec') is not None else ''}s" % text).replace("%", "%%"))
                continue
            at = a.type.get_canonical()
            is_float = at.kind in (TK.FLOAT, TK.DOUBLE, TK.LONGDOUBLE, TK.HALF)
            is_int = not is_float and at.kind not in (TK.POINTER, TK.RECORD, TK.ELABORATED, TK.CONSTANTARRAY)
            if (conv in _PRINTF_INT and not is_int) or (conv in _PRINTF_FLOAT and not is_float):
                raise self.unsupported(f"printf 的 {spec} 配了 {a.type.spelling} 类型的实参（C 里是未定义行为，GPU 上会印出"
                                       f"无意义的数）/ printf {spec} with a {a.type.spelling} argument", a)
            out.append(spec)
            vals.append(self.expr(a))
        self.prog.strings.append(("".join(out), len(args) - 1))
        return _call("__simt_printf", [_const("int", str(len(self.prog.strings) - 1), co)] + vals, co)

    # ------------------------------------------------------------ GPUVerify 的规约注解
    def spec_call(self, name, args, c, co):
        """GPUVerify 的注解：空操作降低成常量 0（实参不求值），__assert/__assume 降低成逐线程的检查；
        不是注解时返回 None。"""
        if name in GV_NOOP:
            return _const("int", "0", co)
        if name in GV_CHECK:
            if len(args) != 1:
                raise self.unsupported(f"{name} 的参数个数", c)
            self.in_spec = name
            try:
                e = self.expr(args[0])
            finally:
                self.in_spec = None
            return _call("__simt_assert", [e, _const("int", str(GV_CHECK[name]), co)], co)
        if name == "__implies" and len(args) == 2:      # a ==> b
            return c_ast.BinaryOp("||", c_ast.UnaryOp("!", self.expr(args[0]), co), self.expr(args[1]), co)
        if name == "__enabled" and not args:           # 运行到这里的线程都是活跃的
            return _cast(["bool"], _const("int", "1", co), co)
        m = GV_NOOVFL.match(name)
        if m and len(args) == 2:                       # 不溢出的加法：验证器假设不溢出，这里按 C 的加法
            return c_ast.BinaryOp("+", self.expr(args[0]), self.expr(args[1]), co)
        if name in GV_QUERY:
            # 只有验证器能回答：GPUVerify 的头文件只声明、不定义它们，nvcc 的头文件里没有它们
            where = f"（在 {self.in_spec} 里）" if getattr(self, "in_spec", None) else ""
            mangled = c.referenced.mangled_name if c.referenced is not None else name
            raise self.rejected(
                f"GPUVerify 的查询 {name}{where}只有验证器能回答（另一个线程的值、访问集合、返回值或旧值），"
                f"模拟器无法逐线程求值；nvcc 13 也拒绝：CUDA 的头文件里没有它，按 GPUVerify 的头文件只声明、不定义时，"
                f"不带 -rdc 的 ptxas 报 Unresolved extern function '{mangled}'",
                f"GPUVerify query {name} has a value only inside the verifier (another thread's value, access sets, "
                f"return or old values) and cannot be evaluated per thread; nvcc 13 rejects it too: CUDA's headers "
                f"do not declare it, and with GPUVerify's declaration (no body) ptxas reports Unresolved extern "
                f"function '{mangled}' without -rdc", c)
        return None

    # ------------------------------------------------------------ cooperative groups
    def group_method(self, g, m, args, c, co):
        kind, w = g
        if kind == "cluster":
            if m in _CLUSTER_CALLS:
                return _call(_CLUSTER_CALLS[m], [], co)      # barrier_wait(token)：令牌不必求值
            rank = _call("__simt_cluster_block_rank", [], co)
            if m == "thread_rank":
                return c_ast.BinaryOp("+", c_ast.BinaryOp("*", rank, _nthreads(co), co), _tid(co), co)
            if m in ("num_threads", "size"):
                return c_ast.BinaryOp("*", _call("__simt_cluster_num_blocks", [], co), _nthreads(co), co)
            if m == "map_shared_rank":
                if len(args) != 2:
                    raise self.unsupported("cluster_group::map_shared_rank 的参数个数", c)
                return _call("__simt_map_shared_rank", args, co)
            if m == "query_shared_rank":
                if len(args) != 1:
                    raise self.unsupported("cluster_group::query_shared_rank 的参数个数", c)
                return _call("__simt_cluster_query_shared_rank", args, co)
            raise self.unsupported(f"cluster_group::{m}（模拟器支持 sync、barrier_arrive、barrier_wait、block_rank、"
                                   "num_blocks、thread_rank、num_threads、size、dim_blocks、block_index、dim_threads、"
                                   "thread_index、map_shared_rank、query_shared_rank）", c)
        if kind == "token":
            raise self.unsupported(f"cluster_group::arrival_token::{m}", c)
        if kind == "grid":
            return self.grid_method(m, c, co)
        if kind == "block":
            if m == "sync":
                return _call("__syncthreads", [], co)
            if m == "thread_rank":
                return _tid(co)
            if m in ("size", "num_threads"):
                return _nthreads(co)
            raise self.unsupported(f"thread_block::{m}", c)
        wc = _const("int", str(w), co)
        mask = _call("__simt_tile_mask", [_const("int", str(w), co)], co)
        if m == "thread_rank":
            return c_ast.BinaryOp("%", _tid(co), wc, co)
        if m == "meta_group_rank":
            return c_ast.BinaryOp("/", _tid(co), wc, co)
        if m == "meta_group_size":
            return c_ast.BinaryOp("/", c_ast.BinaryOp("+", _nthreads(co), _const("int", str(w - 1), co), co), wc, co)
        if m in ("size", "num_threads"):
            return _const("int", f"{w}u", co)
        if m == "sync":
            return _call("__syncwarp", [mask], co)
        if m in ("shfl_down", "shfl_up", "shfl_xor", "shfl"):
            if len(args) != 2:
                raise self.unsupported(f"thread_block_tile::{m} 的参数个数", c)
            return _call(f"__{m}_sync", [mask, args[0], args[1], _const("int", str(w), co)], co)
        raise self.unsupported(f"thread_block_tile::{m}", c)

    def grid_method(self, m, c, co):
        """grid_group（cg::this_grid()）：整个网格。sync() 是整个网格的屏障（协作启动），其余是编号与大小。"""
        def ull(e):
            return _cast(["unsigned", "long", "long"], e, co)

        if m == "sync":
            return _call("__simt_grid_sync", [], co)
        if m == "thread_rank":
            return c_ast.BinaryOp("+", c_ast.BinaryOp("*", ull(_block_rank(co)), ull(_nthreads(co)), co),
                                  ull(_tid(co)), co)
        if m in ("size", "num_threads"):
            return c_ast.BinaryOp("*", ull(_nblocks(co)), ull(_nthreads(co)), co)
        if m == "block_rank":
            return ull(_block_rank(co))
        if m == "num_blocks":
            return ull(_nblocks(co))
        if m == "is_valid":
            return _const("int", "1", co)         # 模拟器里每次启动都当作协作启动（见 __simt_grid_sync）
        raise self.unsupported(f"grid_group::{m}（模拟器支持 sync、thread_rank、size、num_threads、block_rank、"
                               "num_blocks、is_valid）", c)

    def group_args(self, g, m, args):
        """组的成员函数的实参：barrier_wait(令牌) 的令牌不降低（它没有值）。"""
        if g[0] == "cluster" and m == "barrier_wait":
            return []
        return [self.expr(a) for a in args]

    def group_function(self, name, c, co):
        args = list(c.get_arguments())
        if name == "sync" and args:
            g = self.group_of(args[0].type, c)
            if g is not None:
                return self.group_method(g, "sync", [], c, co)
        if name == "reduce" and len(args) == 3:
            g = self.group_of(args[0].type, c)
            op = re.search(r"cooperative_groups::(plus|greater|less)<", args[2].type.get_canonical().spelling)
            if g is not None and g[0] == "tile" and op:
                fn = {"plus": "add", "greater": "max", "less": "min"}[op.group(1)]
                return _call(f"__simt_tile_reduce_{fn}", [self.expr(args[1]), _const("int", str(g[1]), co)], co)
        raise self.unsupported(f"cooperative_groups::{name} 的这种用法（只支持组对象的声明、成员函数、sync 与 reduce"
                               "（plus/greater/less，线程束分块））", c)

    # ------------------------------------------------------------ 文件作用域
    def top(self, cursors):
        """收集文件作用域的声明：函数定义、结构体（检查）、__shared__/__constant__/__device__/const 变量。"""
        defs, file_vars = [], []
        for c in user_decls(cursors, self.where):
            k = c.kind
            if k == K.FUNCTION_DECL:
                if c.is_definition():
                    defs.append(c)
            elif k in (K.STRUCT_DECL, K.CLASS_DECL, K.UNION_DECL):
                if c.is_definition():
                    self.record(c.type, c)
            elif k == K.CLASS_TEMPLATE:
                self.check_class(c)
            elif k == K.VAR_DECL:
                file_vars.append(c)
        return defs, file_vars

    def add_file_var(self, c):
        co = self.co(c)
        attrs = {ch.kind for ch in c.get_children()}
        name = c.spelling
        if name.startswith("__simt_inst"):
            return
        t = c.type
        if self.group_of(t, c):
            raise self.unsupported("文件作用域的组对象", c)
        if t.get_canonical().kind == TK.RECORD and not self.where.is_user(t.get_canonical().get_declaration().location.file) \
                and t.get_canonical().get_declaration().spelling in ("texture", "surface"):
            raise texture_reference_error(self.where, c, t.get_canonical().get_declaration().spelling)
        if c.storage_class == ci.StorageClass.EXTERN and K.CUDASHARED_ATTR not in attrs:
            raise self.unsupported(f"extern 文件作用域变量 {name} / extern file-scope variable", c)
        readonly = K.CUDACONSTANT_ATTR in attrs or t.get_canonical().is_const_qualified() or \
            (t.get_canonical().kind == TK.CONSTANTARRAY and t.get_canonical().element_type.is_const_qualified())
        if not attrs & {K.CUDADEVICE_ATTR, K.CUDACONSTANT_ATTR, K.CUDASHARED_ATTR} and not readonly:
            return          # 主机变量：设备代码用到它时 clang 已经报错（nvcc 同样报错）
        tn = self.tnode(t, name, c)
        init = self.var_init(c)
        refused = None
        if self.element_ctor(t) is not None:
            if K.CUDASHARED_ATTR in attrs:
                init = None     # __shared__ 变量不执行构造函数（nvcc 警告 dynamic initialization is not supported）
            elif init is None or _strip(init).kind != K.INIT_LIST_EXPR or \
                    t.get_canonical().kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                # 用到它的内核启动时才报（同一文件的其他内核照常运行）
                refused = (f"文件作用域变量 {name} 的构造函数或默认成员初值（模拟器不在加载时构造它）；"
                           "写成花括号初始化，或在内核里给它赋值")
                init = None
        ini = self.init_expr(init) if init is not None else None
        key = c.get_usr() or name
        if K.CUDASHARED_ATTR in attrs:
            storage = ["extern", "_Thread_local"] if c.storage_class == ci.StorageClass.EXTERN else ["_Thread_local"]
            d = c_ast.Decl(name, [], [], storage, [], tn, ini, None, co)
            self.prog.shared_decls.append(d)
            self.file_var_names[key] = name
            return
        qn = qualified_name(c)
        vname = name if name not in self.prog.file_vars else qn
        if vname in self.prog.file_vars:
            raise self.unsupported(f"重复定义的文件作用域变量 {name}", c)
        d = c_ast.Decl(vname, ["const"] if readonly else [], [], ["static"] if K.CUDACONSTANT_ATTR in attrs else [],
                       [], tn, ini, None, co)
        self.prog.file_vars[vname] = (d, readonly)
        if refused is not None:
            self.prog.refused_file_vars[vname] = refused
        self.file_var_names[key] = vname


def user_decls(cursors, where):
    """源码（不含模拟器的序言）里的顶层声明，按出现的顺序；命名空间与 extern "C" 块展开成其中的声明。"""
    stack = list(cursors)
    while stack:
        c = stack.pop(0)
        if not where.is_user(c.location.file):
            continue
        if c.kind in (K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL):
            stack[0:0] = list(c.get_children())
            continue
        yield c


def function_templates(cursors, where):
    """源码里的函数模板：限定名 -> [(形参名, 是否有默认值), ...], 是否有定义, 光标。"""
    out = {}
    for c in user_decls(cursors, where):
        if c.kind == K.FUNCTION_TEMPLATE:
            params = []
            for ch in c.get_children():
                if ch.kind in (K.TEMPLATE_TYPE_PARAMETER, K.TEMPLATE_NON_TYPE_PARAMETER, K.TEMPLATE_TEMPLATE_PARAMETER):
                    has_default = any(t.spelling == "=" for t in ch.get_tokens())
                    params.append((ch.spelling, has_default))
            q = qualified_name(c)
            prev = out.get(q)
            if prev is None or (c.is_definition() and not prev[1]):
                out[q] = (params, c.is_definition(), c)
    return out


#: 模拟器没有的标准头文件 -> 设备代码里的写法（报错时附上）
_HEADER_INSTEAD = {
    "limits": "设备代码里用 <cuda/std/limits> 的 cuda::std::numeric_limits<float>::infinity() 等；<limits> 的 "
              "std::numeric_limits 是 constexpr __host__ 函数，nvcc 不加 --expt-relaxed-constexpr 时拒绝在内核里调用",
    "algorithm": "设备代码里用 CUDA 的 min / max（整数）与 fminf / fmaxf（浮点数）；<algorithm> 的 std::min / "
                 "std::max 是 __host__ 函数，模拟器不读它",
}


def parse_tu(text, path, defines):
    args = list(CLANG_ARGS)
    for k, v in (defines or {}).items():
        args.append(f"-D{k}={v}")
    with _lock:
        return _index_().parse(path, args=args, unsaved_files=[(path, text)])


def _instance_parts(inst):
    from .frontend import _split_args
    m = re.fullmatch(r"\s*([A-Za-z_][\w:]*)\s*<(.*)>\s*", inst, flags=re.S)
    if not m:
        return inst, []
    return m.group(1), _split_args(m.group(2))


def _find_template(templates, base):
    if base in templates:
        return base
    tails = [q for q in templates if q.split("::")[-1] == base]
    return tails[0] if len(tails) == 1 else None


def build(prog, text, filename, defines, instance):
    """解析 text（文件名 filename），把函数与文件作用域变量填进 prog。"""
    from .frontend import _EXPLICIT, instance_name

    display = cfile(filename)
    path = filename if os.path.dirname(filename) else os.path.join(os.getcwd(), filename)
    where = _Where(path, display)
    insts = [instance_name(f"{m.group(1)}<{m.group(2)}>") for m in _EXPLICIT.finditer(text)]
    explicit = list(insts)
    if instance is not None:
        insts.append(instance)
    body = text if text.endswith("\n") else text + "\n"
    first_extra = body.count("\n") + 1
    # 要实例化的模板：在文件末尾取它的地址，clang 就会实例化它（行号在原文之后，不影响报错的行）
    tu0 = parse_tu(body, path, defines) if insts else None
    templates = function_templates(tu0.cursor.get_children(), where) if tu0 is not None else {}
    refs = []
    for inst in insts:
        base, args = _instance_parts(inst)
        q = _find_template(templates, base)
        if q is None:
            raise ValueError(f"源码中没有函数模板 {base}（实例 {inst}）/ no function template named {base} (for {inst}); "
                             f"找到 / found: {sorted(templates)}")
        params = templates[q][0]
        if len(args) > len(params):
            raise UnsupportedError(f"模板 {q} 只有 {len(params)} 个形参，得到 {inst} / too many template arguments "
                                   f"for {q}: {inst}")
        for pname, has_default in params[len(args):]:
            if not has_default:
                raise UnsupportedError(f"模板 {q} 的形参 {pname} 没有实参：{inst} / missing template argument {pname} "
                                       f"for {inst}")
        refs.append(f"static auto* const __simt_inst{len(refs)} = &{q}<{', '.join(args)}>;")
    full = body + "\n".join(refs) + ("\n" if refs else "")
    tu = parse_tu(full, path, defines) if refs or tu0 is None else tu0
    lines = full.split("\n")
    file_cache = {}

    def text_of(f, line):
        if f is None:
            return ""
        if os.path.abspath(f.name) == where.main:
            src = lines
        else:
            src = file_cache.get(f.name)
            if src is None:
                try:
                    src = Path(f.name).read_text(encoding="utf-8", errors="replace").split("\n")
                except OSError:
                    src = []
                file_cache[f.name] = src
        return src[line - 1] if 0 < line <= len(src) else ""

    diags = [d for d in tu.diagnostics if d.severity >= 3]

    def extra(d):
        loc = d.location
        return loc.file is not None and os.path.abspath(loc.file.name) == where.main and loc.line >= first_extra

    if any(not extra(d) for d in diags):
        # 源码本身有错时，模板实例化失败只是它的后果：报告源码里的错
        diags = [d for d in diags if not extra(d)]
    # 语法与预处理错误：整个文件不能用
    for d in diags:
        loc = d.location
        f = where.display(loc.file)
        header = f if f != display else None
        in_extra = extra(d)
        if in_extra:
            raise UnsupportedError(f"模板实例 {', '.join(insts)} 的实参不合适：{d.spelling} / bad template arguments "
                                   f"for {', '.join(insts)}: {d.spelling}")
        msg = d.spelling
        if "file not found" in msg:
            m = re.search(r"'([^']+)' file not found", msg)
            instead = _HEADER_INSTEAD.get(m.group(1)) if m else None
            hint = f"（{instead}）" if instead else ""
            raise _err(UnsupportedError, f, loc.line, f"找不到头文件 / include not found: {msg}{hint}",
                       f"include not found: {msg}", header)
        src_line = text_of(loc.file, loc.line).strip()
        if re.match(r"#\s*error\b", src_line):
            raise _err(UnsupportedError, f, loc.line, f"预处理错误 #error {msg}", f"preprocessor error: #error {msg}",
                       header)
        if d.category_name in ("Parse Issue", "Lexical or Preprocessor Issue") or d.severity == 4:
            line = loc.line
            if msg.startswith("expected ';'"):
                # 缺分号：像 nvcc 一样报下一个记号所在的行
                rest = "\n".join([text_of(loc.file, line)[loc.column - 1:]] + [text_of(loc.file, line + i) for i in range(1, 50)])
                skip = len(rest) - len(rest.lstrip())
                line += rest[:skip].count("\n")
            raise _err(UnsupportedError, f, line, f"无法解析（不在支持的 C++ 子集内，或者有语法错误）：{msg}",
                       f"cannot parse: {msg}", header)
        if "template parameter" in msg and "non-type" in msg:
            raise _err(UnsupportedError, f, loc.line, f"不支持的模板形参：{msg}", f"unsupported template parameter: {msg}",
                       header)
    # nvcc 拒绝整个文件的写法（纹理引用、clang 只给警告的声明错误……）：在一切「不支持」之前报
    sources = [full]
    for inc in tu.get_includes():
        if inc.include is not None and where.is_user(inc.include):
            try:
                sources.append(Path(inc.include.name).read_text(encoding="utf-8", errors="replace"))
            except OSError:
                pass
    bad = nvcc_file_errors(tu, where, sources)
    if bad is not None:
        raise bad
    # 语义错误：记在所在的函数上（启动到达它的内核时才报）；函数之外的立即报
    extents = []
    stack = list(tu.cursor.get_children())
    while stack:
        c = stack.pop()
        if not where.is_user(c.location.file):
            continue
        if c.kind in (K.NAMESPACE, K.LINKAGE_SPEC, K.UNEXPOSED_DECL, K.STRUCT_DECL, K.CLASS_DECL, K.CLASS_TEMPLATE):
            stack.extend(c.get_children())
        elif c.kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE, K.CXX_METHOD, K.CONSTRUCTOR) and c.is_definition():
            extents.append((os.path.abspath(c.location.file.name), c.extent.start.offset, c.extent.end.offset))
    errors = []
    for d in diags:
        loc = d.location
        f = where.display(loc.file)
        header = f if f != display else None
        cls, zh, en = translate_diagnostic(d, text_of)
        dfr = Deferred(cls, f, loc.line, zh, en, header)
        if header is not None and f.startswith("<"):
            # 模拟器自带的头文件（<cuda/atomic> 等）里的模板报的错：clang 的附注「… requested here」指出实例化它的、
            # 用户文件里的那一行，报在那里（用户自己的头文件里的错照旧报在头文件里）
            user = [n.location for n in d.children if "requested here" in n.spelling
                    and n.location.file is not None and where.display(n.location.file) == display]
            if user:
                dfr = Deferred(cls, display, user[-1].line, f"{zh}（{f} 第 {loc.line} 行）", f"{en} ({f}, line {loc.line})",
                               None)
        fa = os.path.abspath(loc.file.name) if loc.file is not None else None
        if not any(fa == ef and a <= loc.offset <= b for ef, a, b in extents):
            raise dfr.make()
        errors.append((fa, loc.offset, loc.offset, dfr))

    low = Lowering(prog, tu, where, errors)
    try:
        defs, fvars = low.top(tu.cursor.get_children())
        seen = {}
        for d in defs:
            q = qualified_name(d)
            seen[q] = seen.get(q, 0) + 1
        low.overloaded = {q for q, n in seen.items() if n > 1}
        for v in fvars:
            low.add_file_var(v)
        for d in defs:
            low.fname(d)
        for i, inst in enumerate(insts):
            var = next((c for c in tu.cursor.get_children() if c.kind == K.VAR_DECL and c.spelling == f"__simt_inst{i}"),
                       None)
            ref = next((x.referenced for x in var.walk_preorder() if x.kind == K.DECL_REF_EXPR and x.referenced is not None
                        and x.referenced.kind == K.FUNCTION_DECL), None) if var is not None else None
            spec = ref.get_definition() if ref is not None else None
            if spec is None:
                if errors:                  # 模板本身有错（例如未知的类型）：报告那个错
                    raise errors[0][3].make()
                raise UnsupportedError(f"模板实例 {inst} 没有定义 / no definition for template instance {inst}")
            prog.instances[inst] = low.fname(spec)
        low.drain()
    except SimtError:
        raise
    except (ValueError, TypeError, MemoryError, RecursionError):
        raise
    except Exception as e:      # 降低时没有逐一识别的写法：报告所在的行，不让 Python 异常漏出去
        c = low.last
        line = c.location.line if c is not None else "?"
        f = where.display(c.location.file if c is not None else None)
        kind = c.kind.name if c is not None else "?"
        raise _err(UnsupportedError, f, line, f"不支持 {kind}（{type(e).__name__}: {e}）",
                   f"unsupported construct {kind} ({type(e).__name__}: {e})", f if f != display else None) from e
    prog.templates = {q: (p, dfn, c.extent.start.line) for q, (p, dfn, c) in
                      function_templates(tu.cursor.get_children(), where).items()}
    for q in list(prog.templates):
        tail = q.split("::")[-1]
        prog.templates.setdefault(tail, prog.templates[q])
    prog.explicit = explicit
    deps = []
    for inc in tu.get_includes():
        name = inc.include.name if inc.include is not None else None
        if name and where.is_user(inc.include):
            try:
                st = os.stat(name)
                deps.append((name, st.st_mtime_ns, st.st_size))
            except OSError:
                pass
    prog.deps = tuple(deps)        # 被包含的头文件：改动后缓存失效
