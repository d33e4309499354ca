"""预处理与解析：把 CUDA C 子集变成 pycparser 的语法树（文档：docs/cuda/simulator.md）。

Front end of the simulator: C preprocessing with pcpp (``defines`` become
``#define K V``), translation of the CUDA qualifiers into plain C that pycparser
parses (keeping the original line numbers through ``#line`` directives), and a
static pass that rejects constructs outside the supported subset with the line
where they occur.
"""

from __future__ import annotations

import io
import os
import re
import threading
from functools import lru_cache

from pycparser import c_ast, c_parser
from pcpp import Preprocessor

from . import ctype as T
from .errors import UnsupportedError

# 预置的宏：常量与 CUDA 环境 / predefined macros
PREDEFINED = {
    "INFINITY": "__builtin_inff()",
    "CUDART_INF_F": "__builtin_inff()",
    "NAN": "__builtin_nanf()",
    "FLT_MAX": "3.40282347e+38f",
    "FLT_MIN": "1.17549435e-38f",
    "DBL_MAX": "1.7976931348623157e+308",
    "INT_MAX": "2147483647",
    "INT_MIN": "(-2147483647-1)",
    "UINT_MAX": "4294967295u",
    "NULL": "0",
    "true": "((bool)1)",
    "false": "((bool)0)",
    "nullptr": "0",
    "__CUDACC__": "1",
    "__CUDA_ARCH__": "900",
}

PRELUDE = """#line 1 "<simt-prelude>"
typedef _Bool bool; typedef unsigned long size_t; typedef long ptrdiff_t;
typedef long ssize_t; typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t; typedef int int32_t;
typedef unsigned int uint32_t; typedef long int64_t; typedef unsigned long uint64_t;
typedef unsigned int uint;
typedef int float2; typedef int float4; typedef int double2; typedef int int2; typedef int int4;
typedef int uint2; typedef int uint4;
""" + "".join(f"typedef int {n}; " for n in T.HALF_NAMES) + "\n"
_PRELUDE_TYPEDEFS = set(T.TYPEDEFS)

# 在预处理之后按正则识别的不支持构造 / constructs refused before parsing
_REFUSED = [
    (r"\b(asm|__asm__|__asm)\b", "内联汇编 inline asm"),
    (r"\btemplate\b", "模板 template"),
    (r"\bnamespace\b", "命名空间 namespace"),
    (r"\bclass\b", "类 class"),
    (r"::", "C++ 作用域运算符 ::"),
    (r"\b(static_cast|reinterpret_cast|const_cast|dynamic_cast)\b", "C++ 类型转换运算符"),
    (r"\bextern\s+\"C\"\s*\{", "extern \"C\" { ... } 块"),
    (r"\bauto\b", "auto 类型推导"),
    (r"\b(half2|__half2|__nv_bfloat162|float3|int3|uint3|char4|uchar4|short2|longlong2|double4)\b",
     "这种向量类型"),
    *([(r"\b__nv_bfloat16\b", T.BF16_MISSING)] if T.BF16 is None else []),
    (r"\b(new|delete|operator|using|typename|throw|try|catch)\b", "C++ 语法"),
]

# CUDA 关键字翻译（不改变换行，行号不变）/ CUDA keywords -> plain C
_REWRITE = [
    (re.compile(r"\bextern\s+\"C\""), ""),
    (re.compile(r"__launch_bounds__\s*\([^)]*\)"), ""),
    (re.compile(r"__align__\s*\(\s*\d+\s*\)"), ""),       # 结构体按成员逐个读写：对齐只影响 GPU 上的指令宽度
    (re.compile(r"\b__global__\b"), "_Noreturn"),     # 用 _Noreturn 标记内核
    (re.compile(r"\b__shared__\b"), "_Thread_local"),  # 用 _Thread_local 标记共享内存
    (re.compile(r"\b__constant__\b"), "static"),        # 用 static 标记常量内存
    (re.compile(r"\b(__device__|__host__|__forceinline__|__noinline__|__inline__)\b"), ""),
    (re.compile(r"\b__restrict__\b"), "restrict"),
    (re.compile(r"\b__restrict\b"), "restrict"),
    (re.compile(r"\binline\b"), ""),
    (re.compile(r"\b(?:static\s+)?constexpr\b"), "const"),     # constexpr 变量与函数：当作 const
]


def _line_of(text, pos):
    """输出文本中 pos 对应的原始行号（按 #line 指令推算）。"""
    line = None
    lineno = 1
    for m in re.finditer(r"^#line (\d+)[^\n]*$|\n", text[:pos], flags=re.M):
        if m.group(1):
            line = int(m.group(1)) - 1  # 指令的下一行是第 N 行
        else:
            lineno += 1
            if line is not None:
                line += 1
    return line if line is not None else lineno


class _PP(Preprocessor):
    def __init__(self, filename):
        super().__init__()
        self.line_directive = "#line"
        self.errors = []
        self._fname = filename

    def on_error(self, file, line, msg):
        self.errors.append((line, msg))

    def on_directive_unknown(self, directive, toks, ifpassthru, precedingtoks):
        name = directive.value
        text = "".join(t.value for t in toks).strip()
        if name == "error":
            self.errors.append((directive.lineno, f"#error {text}"))
            return True
        if name == "warning":
            return True
        if name in ("pragma", "line"):
            return None
        self.errors.append((directive.lineno, f"不认识的预处理指令 / unknown directive #{name}"))
        return True

    def on_include_not_found(self, is_malformed, is_system_include, curdir, includepath):
        self.errors.append((None, f"找不到头文件 / include not found: {includepath}"))
        raise UnsupportedError(f"找不到头文件 / include not found: {includepath}")


_lock = threading.Lock()


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


def preprocess(text, filename, defines=None, instances=(), templates=None):
    """运行 C 预处理器并把 CUDA 限定符翻译成 C；返回可交给 pycparser 的文本。instances：要实例化的模板函数
    （如 "kern<256>"）；templates：一个字典，填入 {规范化的实例名: 生成的 C 函数名}。"""
    # 系统头文件（cuda_runtime.h、float.h、math.h ...）的内容由模拟器内置
    text = re.sub(r"^[ \t]*#[ \t]*include[ \t]*<[^>\n]*>", "", text, flags=re.M)
    pp = _PP(filename)
    if os.path.dirname(filename):
        pp.add_path(os.path.dirname(filename))
    for k, v in PREDEFINED.items():
        pp.define(f"{k} {v}")
    for k, v in (defines or {}).items():
        if not re.fullmatch(r"[A-Za-z_]\w*", str(k)):
            raise ValueError(f"defines 的键必须是标识符 / bad macro name: {k!r}")
        if isinstance(v, bool):
            v = int(v)
        pp.define(f"{k} {v}")
    with _lock:
        pp.parse(text, filename)
        out = io.StringIO()
        pp.write(out)
    if pp.errors:
        line, msg = pp.errors[0]
        raise UnsupportedError(f"第 {line} 行：预处理错误 {msg} / line {line}: preprocessor error: {msg}")
    out = out.getvalue()
    # #pragma（例如 #pragma unroll）不影响语义：删掉这一行
    out = re.sub(r"^[ \t]*#[ \t]*pragma[^\n]*$", "", out, flags=re.M)
    out = expand_templates(out, filename, instances, {} if templates is None else templates)
    # C++ 的 reinterpret_cast<T>(e)、static_cast<T>(e)、const_cast<T>(e) 就是 C 的 (T)(e)（长度可以变，不跨行）
    out = _cxx_casts(out)
    out = _references(out)
    out = _coop_groups(out)
    for pat, what in _REFUSED:
        m = re.search(pat, _strip_directives(out))
        if m:
            line = _line_of(out, m.start())
            err = UnsupportedError(
                f"{_cfile(filename)} 第 {line} 行：不支持 {what}（{m.group(0)!r}）/ {_cfile(filename)}, line {line}: "
                f"unsupported construct {m.group(0)!r}")
            err.line, err.file = line, _cfile(filename)
            raise err
    for pat, rep in _REWRITE:
        out = pat.sub(rep, out)
    # C++ 里结构体名不写 struct 也是类型名：预先 typedef（放在序言里，行号不变）
    body = _strip_directives(out)
    names = sorted(set(re.findall(r"\bstruct\s+([A-Za-z_]\w*)\s*\{", body)))
    tds = "".join(f"typedef struct {n} {n};" for n in names)
    tds += "".join(f"typedef int {n};" for n in sorted(set(re.findall(r"\benum\s+([A-Za-z_]\w*)\s*\{", body))))
    return PRELUDE + tds + "\n" + f'#line 1 "{_cfile(filename)}"\n' + out


# ---------------------------------------------------------------- 函数模板
_TEMPLATE_HEAD = re.compile(r"\btemplate\s*<")
_TYPE_PARAM = re.compile(r"^(?:typename|class)\s+([A-Za-z_]\w*)(?:\s*=\s*(.+))?$", re.S)
_VALUE_PARAM = re.compile(r"^(?:const\s+)?(?:unsigned\s+|signed\s+)?(?:int|unsigned|long|long\s+long|short|char|bool|"
                          r"size_t|int32_t|uint32_t|int64_t|uint64_t)\s+([A-Za-z_]\w*)(?:\s*=\s*(.+))?$", re.S)
_EXPLICIT = re.compile(r"\btemplate\s+(?![<\s])([^;{}<]*?)\b([A-Za-z_]\w*)\s*<([^<>;{}]*)>\s*\([^;{}]*\)\s*;")


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


def _blank(text, a, b):
    """把 text[a:b] 换成空格（保留换行与 #line 指令），行号不变。"""
    lines = text[a:b].split("\n")
    mid = "\n".join(ln if ln.startswith("#line") else " " * len(ln) for ln in lines)
    return text[:a] + mid + text[b:]


def _match_close(text, i, open_ch, close_ch):
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return j
    return -1


def expand_templates(out, filename, instances, table):
    """函数模板（__global__ 与 __device__ 函数）：按需要的实参生成普通的 C 函数，原来的模板定义从文本中去掉
    （保留行号）。需要的实例来自启动时的内核名（kern<256>）、显式实例化（template __global__ void
    kern<256>(float*);）和带显式实参的调用（f<BLOCK>(x)）。实参替换形参是按记号进行的，生成的函数前面
    有 #line 指令，报错的行号仍是模板里的行。不支持实参推导、类模板与模板的特化。"""
    if not _TEMPLATE_HEAD.search(out) and not instances:
        return out
    stripped = _strip_directives(out)
    defs = {}
    for m in _EXPLICIT.finditer(stripped):
        instances = tuple(instances) + (f"{m.group(2)}<{m.group(3)}>",)
        out = _blank(out, m.start(), m.end())
    stripped = _strip_directives(out)
    pos = 0
    while True:
        m = _TEMPLATE_HEAD.search(stripped, pos)
        if not m:
            break
        close = _match_close(stripped, m.end() - 1, "<", ">")
        if close < 0:
            break
        params = []
        for ptxt in _split_args(stripped[m.end():close]):
            pm, kind = _TYPE_PARAM.match(ptxt), "type"
            if not pm:
                pm, kind = _VALUE_PARAM.match(ptxt), "value"
            if not pm:
                line = _line_of(out, m.start())
                raise UnsupportedError(f"第 {line} 行：不支持的模板形参 {ptxt!r} / line {line}: unsupported template "
                                       f"parameter {ptxt!r}")
            params.append((pm.group(1), pm.group(2), kind))
        # 模板后面必须是一个函数定义：名字 ( 参数 ) { 函数体 }
        fm = re.compile(r"([A-Za-z_]\w*)\s*\(").search(stripped, close)
        brace = stripped.find("{", close)
        semi = stripped.find(";", close)
        if fm is None or brace < 0 or (0 <= semi < brace) or fm.start() > brace or \
                re.search(r"\b(struct|class|union)\b", stripped[close:fm.start()]):
            line = _line_of(out, m.start())
            raise UnsupportedError(f"第 {line} 行：不支持 类模板或模板声明（只支持函数模板的定义）/ line {line}: "
                                   "unsupported construct: class template or template declaration")
        end = _match_close(stripped, brace, "{", "}")
        if end < 0:
            break
        name = fm.group(1)
        if name in defs:
            line = _line_of(out, m.start())
            raise UnsupportedError(f"第 {line} 行：不支持 函数模板的重载或特化 {name} / line {line}: unsupported "
                                   f"construct: overloaded or specialised template {name}")
        head_line = _line_of(out, close + 1)
        defs[name] = (params, stripped[close + 1:fm.start()], stripped[fm.end():end + 1], head_line)
        out = _blank(out, m.start(), end + 1)
        stripped = _blank(stripped, m.start(), end + 1)
        pos = end + 1
    if not defs:
        if instances:
            bad = instance_name(instances[0])
            raise ValueError(f"源码中没有函数模板 {bad.split('<')[0]} / no function template for {bad}")
        return out
    table[None] = sorted(defs)       # 模板的名字（报错时用）
    cfile = _cfile(filename)
    pieces = []
    todo = list(instances)
    call_re = re.compile(r"\b(" + "|".join(map(re.escape, defs)) + r")\s*<([^<>;{}()]*(?:\([^()]*\)[^<>;{}()]*)*)>\s*\(")

    def rename_calls(code):
        def sub(mc):
            inst = instance_name(f"{mc.group(1)}<{mc.group(2)}>")
            todo.append(inst)
            return _mangle(inst, table) + "("
        return call_re.sub(sub, code)

    out = rename_calls(out)
    bare = re.search(r"\b(" + "|".join(map(re.escape, defs)) + r")\s*\(", _strip_directives(out))
    if bare:
        line = _line_of(out, bare.start())
        raise UnsupportedError(f"第 {line} 行：不支持 模板实参推导（调用 {bare.group(1)} 时请写出模板实参，如 "
                               f"{bare.group(1)}<float>(...)）/ line {line}: unsupported construct: template argument "
                               f"deduction for {bare.group(1)}; write the arguments explicitly")
    done = set()
    while todo:
        inst = instance_name(todo.pop(0))
        if inst in done:
            continue
        done.add(inst)
        name = inst.split("<", 1)[0]
        if name not in defs:
            raise ValueError(f"源码中没有函数模板 {name}（实例 {inst}）/ no function template named {name} (for {inst}); "
                             f"找到 / found: {sorted(defs)}")
        params, head, rest, body_line = defs[name]
        args = _split_args(inst[len(name) + 1:-1])
        if len(args) > len(params):
            raise UnsupportedError(f"模板 {name} 只有 {len(params)} 个形参，得到 {inst} / too many template arguments")
        binding = {}
        kinds = {}
        for k, (pname, default, kind) in enumerate(params):
            kinds[pname] = kind
            if k < len(args):
                binding[pname] = args[k]
            elif default is not None:
                binding[pname] = default.strip()
            else:
                raise UnsupportedError(f"模板 {name} 的形参 {pname} 没有实参：{inst} / missing template argument "
                                       f"{pname} for {inst}")
        code = head + _mangle(inst, table) + "(" + rest
        code = re.sub(r"\b(" + "|".join(map(re.escape, binding)) + r")\b",
                      lambda mm: f"({binding[mm.group(1)]})" if kinds[mm.group(1)] == "value"
                      else binding[mm.group(1)], code)
        code = rename_calls(code)
        pieces.append(f'\n#line {body_line} "{cfile}"\n' + code + "\n")
    return out + "".join(pieces)


def _mangle(inst, table):
    c = table.get(inst)
    if c is None:
        c = f"{inst.split('<', 1)[0]}__tpl{len(table)}"
        table[inst] = c
    return c


_CXX_CAST = re.compile(r"\b(?:reinterpret_cast|static_cast|const_cast)\s*<([^<>;{}\n]*)>\s*\(")


_FUNC_HEAD = re.compile(r"\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*(?:const\s*)?\{")
_REF_PARAM = re.compile(r"^(\s*)([A-Za-z_][\w\s\*]*?)\s*&\s*([A-Za-z_]\w*)(\s*)$", re.S)


def _references(out):
    """函数定义的参数表里的引用参数 T& x 改写成 register T x（C 的 register 在这里只作记号，由解释器按引用绑定）。"""
    def head(m):
        if m.group(1) in ("if", "for", "while", "switch", "return", "sizeof"):
            return m.group(0)
        params = m.group(2).split(",")
        new = []
        for prm in params:
            pm = _REF_PARAM.match(prm)
            new.append(f"{pm.group(1)}register {pm.group(2)} {pm.group(3)}{pm.group(4)}" if pm else prm)
        return m.group(0).replace(m.group(2), ",".join(new), 1) if new != params else m.group(0)
    return _FUNC_HEAD.sub(head, out) if "&" in out else out


_TID = "(threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y)"
_NT = "(blockDim.x * blockDim.y * blockDim.z)"
_CG_OPS = {"plus": "add", "greater": "max", "less": "min"}


def _blank_match(m):
    return re.sub(r"[^\n]", " ", m.group(0))


def _call_args(out, open_paren):
    """从 open_paren（左括号的位置）起的调用：返回 (右括号的位置, 顶层逗号拆开的实参)。"""
    close = _match_close(out, open_paren, "(", ")")
    if close < 0:
        return -1, []
    return close, _split_args(out[open_paren + 1:close])


def _coop_groups(out):
    """cooperative groups 的常用部分改写成内置函数：this_thread_block() 的 sync/thread_rank/size，
    tiled_partition<W>(block) 的 shfl_down/shfl_up/shfl_xor/shfl/sync/thread_rank/size/meta_group_rank，
    以及 reduce(tile, v, plus<T>() / greater<T>() / less<T>())。组对象不能传给函数，其他成员不支持。"""
    if not re.search(r"cooperative_groups|this_thread_block|tiled_partition", out):
        return out
    aliases = re.findall(r"\bnamespace\s+(\w+)\s*=\s*cooperative_groups\s*;", out)
    out = re.sub(r"\bnamespace\s+\w+\s*=\s*cooperative_groups\s*;", _blank_match, out)
    out = re.sub(r"\busing\s+namespace\s+cooperative_groups\s*;", _blank_match, out)
    for a in aliases + ["cooperative_groups"]:
        out = re.sub(rf"\b{a}\s*::\s*", "", out)
    blocks, tiles = {"this_thread_block()"}, {}
    for m in re.finditer(r"\b(?:const\s+)?(?:thread_block|auto)\s*&?\s*(\w+)\s*=\s*this_thread_block\s*\(\s*\)\s*;", out):
        blocks.add(m.group(1))
    out = re.sub(r"\b(?:const\s+)?(?:thread_block|auto)\s*&?\s*(\w+)\s*=\s*this_thread_block\s*\(\s*\)\s*;", _blank_match, out)
    tile_re = (r"\b(?:const\s+)?(?:thread_block_tile\s*<\s*(\d+)\s*>|auto)\s+(\w+)\s*=\s*"
               r"tiled_partition\s*<\s*(\d+)\s*>\s*\(\s*(\w+|this_thread_block\s*\(\s*\))\s*\)\s*;")
    for m in re.finditer(tile_re, out):
        tiles[m.group(2)] = int(m.group(3))
    out = re.sub(tile_re, _blank_match, out)
    for b in blocks:
        e = re.escape(b) if b != "this_thread_block()" else r"this_thread_block\s*\(\s*\)"
        out = re.sub(rf"\b{e}\s*\.\s*sync\s*\(\s*\)", "__syncthreads()", out)
        out = re.sub(rf"\bsync\s*\(\s*{e}\s*\)", "__syncthreads()", out)
        out = re.sub(rf"\b{e}\s*\.\s*thread_rank\s*\(\s*\)", _TID, out)
        out = re.sub(rf"\b{e}\s*\.\s*(?:size|num_threads)\s*\(\s*\)", _NT, out)
    for t, w in tiles.items():
        mask = f"__simt_tile_mask({w})"
        out = re.sub(rf"\b{t}\s*\.\s*thread_rank\s*\(\s*\)", f"({_TID} % {w})", out)
        out = re.sub(rf"\b{t}\s*\.\s*meta_group_rank\s*\(\s*\)", f"({_TID} / {w})", out)
        out = re.sub(rf"\b{t}\s*\.\s*(?:size|num_threads)\s*\(\s*\)", f"{w}", out)
        out = re.sub(rf"\b{t}\s*\.\s*sync\s*\(\s*\)", f"__syncwarp({mask})", out)
        while True:     # t.shfl_down(v, k) -> __shfl_down_sync(mask, v, k, W)
            m = re.search(rf"\b{t}\s*\.\s*(shfl_down|shfl_up|shfl_xor|shfl)\s*\(", out)
            if not m:
                break
            close, args = _call_args(out, m.end() - 1)
            if close < 0 or len(args) != 2:
                break
            out = out[:m.start()] + f"__{m.group(1)}_sync({mask}, {args[0]}, {args[1]}, {w})" + out[close + 1:]
        while True:     # reduce(t, v, plus<T>())
            m = re.search(rf"\breduce\s*\(\s*{t}\s*,", out)
            if not m:
                break
            close, args = _call_args(out, out.index("(", m.start()))
            op = re.match(r"\s*(\w+)\s*<[^<>]*>\s*\(\s*\)\s*$", args[2]) if close >= 0 and len(args) == 3 else None
            if op is None or op.group(1) not in _CG_OPS:
                break
            out = out[:m.start()] + f"__simt_tile_reduce_{_CG_OPS[op.group(1)]}({args[1]}, {w})" + out[close + 1:]
    return out


def _cxx_casts(out):
    """C++ 的 reinterpret_cast<T>(e)、static_cast<T>(e)、const_cast<T>(e) 改写成 C 的 ((T)(e))（同一行之内）。"""
    pos = 0
    while True:
        m = _CXX_CAST.search(out, pos)
        if not m:
            return out
        close = _match_close(out, m.end() - 1, "(", ")")
        if close < 0 or "\n" in out[m.start():close]:
            return out      # 留给后面的检查报“不支持”
        out = out[:m.start()] + f"(({m.group(1)})(" + out[m.end():close] + "))" + out[close + 1:]
        pos = m.start() + 1


def _cfile(filename):
    return filename.replace("\\", "/").replace('"', "")


def _strip_directives(text):
    # 保持长度不变，便于定位
    return re.sub(r"^#line[^\n]*$", lambda m: " " * len(m.group(0)), text, flags=re.M)


# ---------------------------------------------------------------- 程序结构


class Function:
    def __init__(self, fdef, prog):
        self.node = fdef
        decl = fdef.decl
        self.name = decl.name
        self.is_kernel = "_Noreturn" in (decl.funcspec or [])
        ftype = decl.type
        self.ret_type = prog.resolve_plain(ftype.type)
        self.params = []      # (name, CType, type string)
        self.refs = {}        # 引用参数（T&）的名字 -> 是否 const T&
        plist = ftype.args.params if ftype.args else []
        for p in plist:
            if isinstance(p, c_ast.EllipsisParam):
                raise _unsupported("可变参数 variadic parameters", p)
            if isinstance(p, c_ast.Typename):
                t = prog.resolve(p.type, p)
                if t.is_void:
                    continue
                raise _unsupported("没有名字的参数 unnamed parameter", p)
            t = prog.resolve_plain(p.type)
            if t.is_array:  # 数组参数退化为指针
                t = T.Ptr(t.elem, t.vol)
            ts = type_string(p.type)
            if "register" in (p.storage or []):     # 引用参数 T&（前端改写成 register T）
                if self.is_kernel:
                    raise _unsupported(f"内核的引用参数 {p.name}（__global__ 函数的参数不能是引用）", p)
                self.refs[p.name] = "const" in (getattr(p.type, "quals", None) or [])
                ts += "&"
            self.params.append((p.name, t, ts))
        self.line = decl.coord.line if decl.coord else None


class Program:
    """一份解析好的源码：函数、内核、文件作用域的共享内存声明。"""

    def __init__(self, text, filename, defines, instances=()):
        self.filename = filename
        self.typedefs = dict(T.TYPEDEFS)
        self.consts = {}   # 常量节点的缓存（节点随本对象存活）
        self.templates = {}   # 模板实例名（kern<256>）-> 生成的函数名
        self.structs = {}     # 结构体名 -> Vec
        self.enum_consts = {}  # 枚举常量 -> int
        self.enums = set()     # 枚举类型名
        ctext = preprocess(text, filename, defines, instances, self.templates)
        parser = c_parser.CParser()
        try:
            ast = parser.parse(ctext, filename=_cfile(filename))
        except Exception as e:  # pycparser 的 ParseError
            msg = str(e)
            m = re.match(r"[^:]*:(\d+):(\d+): (.*)", msg)
            line, what = (m.group(1), m.group(3)) if m else (_parser_line(parser), msg.split(": ", 1)[-1])
            if line is not None:
                err = UnsupportedError(
                    f"{_cfile(filename)} 第 {line} 行：无法解析（不在支持的 C 子集内）/ {_cfile(filename)}, line {line}: "
                    f"cannot parse: {what}")
                err.line, err.file = int(line), _cfile(filename)
                raise err from None
            raise UnsupportedError(f"无法解析（不在支持的 C 子集内）/ cannot parse: {msg}") from None
        self.functions = {}
        self.shared_decls = []   # 文件作用域的 __shared__ 声明
        self.file_vars = {}      # 文件作用域的 __constant__ 与 __device__ 变量：名字 -> (声明, 是否只读)
        for ext in ast.ext:
            if isinstance(ext, c_ast.FuncDef):
                f = Function(ext, self)
                if f.name in self.functions:
                    raise _unsupported(f"函数重载或重复定义 {f.name}", ext)
                self.functions[f.name] = f
            elif isinstance(ext, c_ast.Typedef):
                if ext.name in _PRELUDE_TYPEDEFS:
                    continue
                st = getattr(ext.type, "type", None)
                if isinstance(st, c_ast.Struct) and st.decls is None and st.name == ext.name:
                    continue      # typedef struct P P;（序言里为 C++ 的写法补上的）
                self.typedefs[ext.name] = self.resolve(ext.type, ext)
            elif isinstance(ext, c_ast.Decl):
                if isinstance(ext.type, c_ast.FuncDecl):
                    continue  # 函数原型
                if "_Thread_local" in (ext.storage or []):
                    self.shared_decls.append(ext)
                    continue
                if isinstance(ext.type, c_ast.Struct) and ext.name is None:
                    self.struct_type(ext.type)        # struct P { float x, y; };
                    continue
                if isinstance(ext.type, c_ast.Enum) and ext.name is None:
                    self.enum_type(ext.type)          # enum Mode { SUM, MAX = 4 };
                    continue
                if isinstance(ext.type, (c_ast.Struct, c_ast.Union, c_ast.Enum)):
                    raise _unsupported("联合/枚举 union/enum", ext)
                if "extern" in (ext.storage or []):
                    raise _unsupported(f"extern 文件作用域变量 {ext.name} / extern file-scope variable", ext)
                t = self.resolve(ext.type, ext)
                base = t.t if isinstance(t, _Vol) else t
                quals = ext.quals or []
                if base.is_ptr:
                    raise _unsupported(f"文件作用域的指针变量 {ext.name} / file-scope pointer variable", ext)
                if base.is_array and base.n is None:
                    raise _unsupported(f"没有长度的文件作用域数组 {ext.name}", ext)
                readonly = "static" in (ext.storage or []) or "const" in quals or \
                    (base.is_array and "const" in (getattr(ext.type.type, "quals", None) or []))
                if ext.name in self.file_vars:
                    raise _unsupported(f"重复定义的文件作用域变量 {ext.name}", ext)
                self.file_vars[ext.name] = (ext, readonly)
            elif isinstance(ext, c_ast.Pragma):
                continue
            else:
                raise _unsupported(type(ext).__name__, ext)
        for f in self.functions.values():
            _Validator(self, f).visit(f.node.body)
        self.template_names = self.templates.pop(None, [])
        back = {c: inst for inst, c in self.templates.items()}
        self.kernels = [back.get(f.name, f.name) for f in self.functions.values() if f.is_kernel]
        self.fn_ids = {name: i + 1 for i, name in enumerate(self.functions)}     # 函数指针的值（0：空指针）
        self.fn_by_id = {i: name for name, i in self.fn_ids.items()}

    def kernel(self, name):
        if "<" in name:
            name = self.templates.get(instance_name(name), name)
        f = self.functions.get(name)
        if f is None and name in self.template_names:
            raise ValueError(f"内核 {name} 是模板：启动时写出模板实参，例如 {name}<256> / kernel {name} is a template: "
                             f"launch it as {name}<...> with its arguments")
        if f is None or not f.is_kernel:
            raise ValueError(
                f"源码中没有名为 {name!r} 的 __global__ 内核 / no __global__ kernel named {name!r}; "
                f"找到 / found: {self.kernels}"
            )
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
                elif len(names) == 1 and names[0] in self.structs:
                    t = self.structs[names[0]]
                elif len(names) == 1 and names[0] in self.enums:
                    t = T.INT
                else:
                    t = T.spec_type(names)
                if t is None:
                    raise _unsupported(f"类型 {' '.join(names)}", node)
                if vol and t.is_scalar:
                    return _Vol(t)
                return t
            if isinstance(inner, c_ast.Struct):
                return self.struct_type(inner)
            if isinstance(inner, c_ast.Enum):
                return self.enum_type(inner)
            raise _unsupported("联合/枚举 union/enum", node)
        if isinstance(node, c_ast.PtrDecl):
            if isinstance(node.type, c_ast.FuncDecl):
                return T.FNPTR        # 指向 __device__ 函数的指针（调用时按编号分组）
            base = self.resolve(node.type, where)
            vol = isinstance(base, _Vol)
            if vol:
                base = base.t
            const = "const" in (getattr(node.type, "quals", None) or [])
            if base.is_void:
                raise _unsupported("void 指针 void*", node)
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

    def struct_type(self, node):
        """结构体：定义（带成员）或引用（只有名字）。只支持成员都是同一种标量的结构体。"""
        if node.decls is None:
            t = self.structs.get(node.name)
            if t is None:
                raise _unsupported(f"没有定义的结构体 struct {node.name}", node)
            return t
        fields, elem = [], None
        for d in node.decls:
            ft = self.resolve(d.type, d) if isinstance(d, c_ast.Decl) else None
            if ft is None or not isinstance(ft, T.Scalar) or d.bitsize is not None:
                raise _unsupported(f"结构体 {node.name or ''} 的成员 {getattr(d, 'name', '')}：只支持标量成员"
                                   "（不支持数组、指针、嵌套结构体、位域、volatile 成员；struct member must be a scalar）", d)
            if elem is not None and ft is not elem:
                raise _unsupported(f"结构体 {node.name or ''} 的成员类型不同（{elem.name} 与 {ft.name}）："
                                   "只支持成员都是同一种标量的结构体（struct with members of different types）", d)
            elem = ft
            fields.append(d.name)
        if not fields:
            raise _unsupported("空结构体 empty struct", node)
        t = T.Vec(f"struct {node.name}" if node.name else "struct", elem, len(fields), fields, wide=False)
        if node.name:
            if node.name in self.structs:
                raise _unsupported(f"重复定义的结构体 struct {node.name}", node)
            self.structs[node.name] = t
        return t

    def enum_type(self, node):
        """枚举：常量按 C 的规则编号（没有写值的比前一个大 1），类型当作 int。"""
        if node.values is None:
            if node.name not in self.enums:
                raise _unsupported(f"没有定义的枚举 enum {node.name}", node)
            return T.INT
        v = -1
        for e in node.values.enumerators:
            v = const_int(e.value, self) if e.value is not None else v + 1
            if e.name in self.enum_consts:
                raise _unsupported(f"重复的枚举常量 {e.name}", e)
            self.enum_consts[e.name] = v
        if node.name:
            self.enums.add(node.name)
        return T.INT

    def resolve_plain(self, node):
        t = self.resolve(node)
        return t.t if isinstance(t, _Vol) else t


def _parser_line(parser):
    """解析失败时解析器所在的行（pycparser 3 的部分错误信息不带行号）。"""
    try:
        tok = parser._peek()
        if tok is not None and getattr(tok, "lineno", None):
            return tok.lineno
        return parser.clex._lineno
    except Exception:
        return None


class _Vol:
    """volatile 标量的临时包装 / a volatile-qualified scalar during resolution."""

    def __init__(self, t):
        self.t = t

    is_void = False
    is_array = False
    is_ptr = False
    is_scalar = True


def type_string(node):
    """参数类型的 C 写法，例如 'const float*'。"""
    if isinstance(node, c_ast.TypeDecl):
        quals = [q for q in (node.quals or []) if q in ("const", "volatile")]
        names = node.type.names if isinstance(node.type, c_ast.IdentifierType) else ["?"]
        return " ".join(quals + list(names))
    if isinstance(node, c_ast.PtrDecl):
        return type_string(node.type) + "*"
    if isinstance(node, c_ast.ArrayDecl):
        return type_string(node.type) + "*"
    return "?"


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
        raise _unsupported("字符串常量（printf 等）string literal", node)
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


BUILTIN_FUNCS = set()  # 由解释器填写 / filled by the interpreter


class _Validator(c_ast.NodeVisitor):
    """静态检查：拒绝子集之外的构造，并报告行号。"""

    def __init__(self, prog, func):
        self.prog = prog
        self.func = func
        # 函数指针类型的参数与局部变量：可以像函数一样调用
        self.fnvars = {n for n, t, _ in func.params if t.is_fnptr}
        for d in _decls(func.node.body):
            try:
                if prog.resolve_plain(d.type).is_fnptr:
                    self.fnvars.add(d.name)
            except UnsupportedError:
                pass

    def generic_visit(self, node):
        name = type(node).__name__
        if name in ("Goto", "Label"):
            raise _unsupported("goto/标签 goto", node)
        if name == "Struct" and node.decls is None:
            return      # struct P p; 引用文件作用域定义的结构体
        if name == "Enum" and node.values is None:
            return      # enum Mode m;
        if name in ("Struct", "Union", "Enum"):
            raise _unsupported("函数内定义的结构体、联合、枚举 struct/union/enum", node)
        if name in ("Switch", "Case", "Default"):
            raise _unsupported("switch 语句（请改用 if/else）switch", node)
        if name in ("CompoundLiteral", "StaticAssert", "Alignas", "NamedInitializer"):
            raise _unsupported(name, node)
        if name == "Typedef":
            raise _unsupported("函数内的 typedef", node)
        if name == "Constant" and node.type == "string":
            raise _unsupported("字符串常量（printf 等）string literal", node)
        if name == "FuncCall":
            fn = node.name
            if not isinstance(fn, c_ast.ID):
                raise _unsupported("通过表达式调用函数（函数指针）function pointer call", node)
            if fn.name not in self.prog.functions and fn.name not in BUILTIN_FUNCS and fn.name not in self.fnvars:
                raise _unsupported(f"函数 {fn.name}()", node)
            if fn.name in self.prog.functions and self.prog.functions[fn.name].is_kernel:
                raise _unsupported(f"在设备代码中启动内核 {fn.name}（动态并行）", node)
        if name == "Decl":
            if isinstance(node.type, c_ast.FuncDecl):
                raise _unsupported("局部函数声明 local function declaration", node)
            st = node.storage or []
            if "static" in st:
                raise _unsupported("static 局部变量", node)
            if "extern" in st and "_Thread_local" not in st:
                raise _unsupported("extern 局部变量", node)
        for c in node:
            self.visit(c)


def _decls(node):
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if isinstance(n, c_ast.Decl):
            yield n
        stack.extend(c for _, c in n.children())


@lru_cache(maxsize=64)
def _parse_cached(text, filename, defines_key, instances=()):
    try:
        return Program(text, filename, dict(defines_key), instances)
    except (UnsupportedError, ValueError, TypeError, MemoryError, RecursionError):
        raise
    except Exception as e:     # 没有逐一识别的写法：不让 Python 异常漏出去
        raise UnsupportedError(f"{_cfile(filename)}：无法解析（不在支持的子集内：{type(e).__name__}: {e}）/ "
                               f"{_cfile(filename)}: unsupported construct ({type(e).__name__}: {e})") from e


def parse(source, defines=None, kernel=None):
    """解析（带缓存，键为源码文本与 defines）/ parse with a cache keyed by text + defines.
    kernel 是模板内核的实例名（如 "reduce<256>"）时，同时生成这个实例。"""
    text, filename = read_source(source)
    key = tuple(sorted((str(k), str(int(v) if isinstance(v, bool) else v)) for k, v in (defines or {}).items()))
    inst = (instance_name(kernel),) if isinstance(kernel, str) and "<" in kernel else ()
    return _parse_cached(text, filename, key, inst)
