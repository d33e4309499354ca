"""C 类型与 C 语义的算术（文档：docs/cuda/simulator.md）。

C types of the simulated subset and arithmetic with C semantics on numpy
arrays: integer promotion, usual arithmetic conversions, truncating division,
wrap-around of fixed-width integers, float32 kept float32.
"""

from __future__ import annotations

import numpy as np


class CType:
    is_scalar = False
    is_ptr = False
    is_array = False
    is_void = False
    is_vec = False
    is_fnptr = False


class FnPtr(CType):
    """指向 __device__ 函数的指针：值是函数的编号（0 是空指针）。"""
    is_fnptr = True
    name = "function pointer"
    size = 8
    dtype = np.dtype(np.int64)

    def __repr__(self):
        return "function pointer"


FNPTR = FnPtr()


class Scalar(CType):
    is_scalar = True

    def __init__(self, name, dtype, kind, bits, rank):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.kind = kind          # 'b' bool, 'i' signed, 'u' unsigned, 'f' floating
        self.bits = bits
        self.rank = rank
        self.size = self.dtype.itemsize

    @property
    def is_float(self):
        return self.kind == "f"

    @property
    def is_int(self):
        return self.kind in "iub"

    def __repr__(self):
        return self.name


class Void(CType):
    is_void = True
    name = "void"
    size = 1

    def __repr__(self):
        return "void"


class Ptr(CType):
    is_ptr = True
    size = 8

    def __init__(self, base, vol=False, const=False):
        self.base = base
        self.vol = vol
        self.const = const

    @property
    def stride(self):
        """指针加一移动的标量元素个数 / scalar elements per pointee."""
        return elems_of(self.base)

    def __repr__(self):
        q = "volatile " if self.vol else ""
        return f"{q}{self.base!r}*"


class Vec(CType):
    """CUDA 的向量类型（float4、int2 ...）：n 个相同标量的分量 .x .y .z .w，按 align 字节对齐；wide 为真时一次读写
    是一条宽指令（两个或四个分量、整体对齐的向量；超过 16 字节时按 16 字节一条）。成员都是同一种标量的结构体也用
    它表示（fields 是成员名）：整体按自身大小对齐（__align__(16) 的 8 个 __half）时同样是宽访问，否则按成员逐个读写。"""
    is_vec = True

    def __init__(self, name, elem, n, fields=None, wide=True, align=None, elems=None, members=None, storable=True,
                 size=None, union=False):
        self.name = name
        self.elem = elem          # 存储单元的类型（成员大小相同时为第一个成员的类型；按字节布局时为 unsigned char）
        self.n = n
        self.size = elem.size * n
        self.dtype = elem.dtype
        self.fields = tuple(fields) if fields is not None else ("x", "y", "z", "w")[:n]
        self.wide = wide
        self.align = align if align is not None else (min(self.size, 16) if wide else elem.size)
        #: 每个存储单元（叶子）的标量类型：与 elem 不同时按位重新解释（int 与 float 的成员）
        self.elems = tuple(elems) if elems is not None else (elem,) * n
        #: 成员名 -> (第一个存储单元的下标, 成员类型)：标量、数组（Arr）或嵌套的结构体（Vec）
        self.members = dict(members) if members is not None else {f: (j, self.elems[j]) for j, f in enumerate(self.fields)}
        #: 联合：所有成员从第 0 个字节开始，共用同一块内存（只放在内存里）
        self.union = union
        #: 没有数组成员（嵌套的结构体也没有）：变量放在寄存器里（每个叶子一个）；否则放在每个线程一份的局部内存里
        self.flat = not union and all(not m[1].is_array and (not m[1].is_vec or m[1].flat) for m in self.members.values())
        #: 含指针成员（放进内存时每个指针占 8 个字节，见 interpreter 模块的说明）
        self.has_ptr = any(e.is_ptr or e.is_fnptr for e in self.elems)
        #: 叶子都是大小相同的标量、没有填充：内存里按叶子类型的数组存放（快速路径，单元 = 一个叶子）
        self.uniform = (storable and not union and not self.has_ptr and n > 0
                        and all(e.is_scalar and e.size == elem.size for e in self.elems))
        #: 能放进内存：成员大小不同、有填充、含指针的结构体与联合按 C 的布局逐字节存放
        self.storable = True
        #: 每个成员的字节偏移，每个叶子的字节偏移（按字节布局时用）
        self.moff, self.loff = {}, ()
        if n > 0 and not self.uniform:
            self._byte_layout(size, align)
        #: 内存里占几个存储单元（elem 的个数）
        self.units = self.n if self.uniform or n == 0 else self.size

    def _byte_layout(self, size, align):
        """C 的自然对齐布局（与 nvcc 在 x86-64 上相同）：成员按自身对齐，整体按最大的成员对齐、补齐尾部。"""
        offs, moff, end, al = [], {}, 0, 1
        for f, (start, mt) in sorted(self.members.items(), key=lambda kv: kv[1][0]):
            a = align_of(mt)
            al = max(al, a)
            o = 0 if self.union else (end + a - 1) // a * a
            moff[f] = o
            offs.extend(o + x for x in leaf_offsets(mt))
            end = max(end, o + mt.size)
        if align is not None and not self.wide:
            al = max(al, align)
        sz = (end + al - 1) // al * al
        if size is not None:
            sz = max(sz, size)
        self.moff, self.loff = moff, tuple(offs)
        if self.union:                      # 联合的值：整块字节
            self.elems = (UCHAR,) * sz
            self.n = sz
            self.loff = tuple(range(sz))
            self.fields = tuple(f"#{k}" for k in range(sz))
        self.size, self.align = sz, al
        self.elem, self.dtype = UCHAR, UCHAR.dtype

    def __repr__(self):
        return self.name


def union_of(name, members, size=None, align=None):
    """联合类型：members 是 [(成员名, 成员类型)]，所有成员从第 0 个字节开始；size / align 是编译器给出的
    sizeof 与对齐（不给时按自然对齐计算）。"""
    if not members:
        raise ValueError(f"联合 {name} 没有成员 / union {name} has no members")
    mem = {f: (0, mt) for f, mt in members}
    return Vec(name, UCHAR, 1, [f for f, _ in members], wide=False, align=align, elems=[UCHAR], members=mem,
               size=size, union=True)


def _vec_names():
    """CUDA 的全部向量类型（vector_types.h）：名字 -> (分量类型名, 分量个数)。"""
    bases = {"char": "signed char", "uchar": "unsigned char", "short": "short", "ushort": "unsigned short",
             "int": "int", "uint": "unsigned int", "long": "long", "ulong": "unsigned long",
             "longlong": "long long", "ulonglong": "unsigned long long", "float": "float", "double": "double"}
    return {f"{k}{n}": (v, n) for k, v in bases.items() for n in (1, 2, 3, 4)}


#: 支持的向量类型：名字 -> (分量类型名, 分量个数)
VEC_NAMES = _vec_names()


class Arr(CType):
    is_array = True

    def __init__(self, elem, n, vol=False):
        self.elem = elem
        self.n = n
        self.vol = vol

    @property
    def size(self):
        return self.elem.size * (self.n or 0)

    def __repr__(self):
        return f"{self.elem!r}[{self.n}]"


def elems_of(t):
    """存储单元的个数（标量、一个叶子，或按字节布局的结构体的字节数）/ number of storage units in a type."""
    n = 1
    while t.is_array:
        n *= t.n
        t = t.elem
    return n * t.units if t.is_vec else n


def scalar_of(t):
    """存储单元的类型：数组的元素、结构体的 elem；指针存成 8 字节的句柄，void 按字节。"""
    while t.is_array:
        t = t.elem
    if t.is_vec:
        return t.elem
    if t.is_ptr or t.is_fnptr:
        return PTRWORD
    if t.is_void:
        return UCHAR
    return t


def align_of(t):
    """C 的对齐字节数 / alignment in bytes."""
    while t.is_array:
        t = t.elem
    if t.is_vec:
        return t.align
    return 8 if t.is_ptr or t.is_fnptr else max(1, t.size)


def leaf_offsets(t):
    """类型 t 的每个叶子（寄存器里的一个标量）相对开头的字节偏移。"""
    if t.is_array:
        sub = leaf_offsets(t.elem)
        return [k * t.elem.size + x for k in range(t.n or 0) for x in sub]
    if t.is_vec:
        return list(t.loff) if not t.uniform and t.n else [j * t.elem.size for j in range(t.n)]
    return [0]


def unit_size(t):
    """按 t 访问时需要的最小存储单元（字节）：访问的标量大小，按字节布局的结构体与 void 为 1。"""
    while t.is_array:
        t = t.elem
    if t.is_vec:
        return t.elem.size if t.uniform else 1
    if t.is_void:
        return 1
    return t.size


VOID = Void()
BOOL = Scalar("bool", np.bool_, "b", 1, 0)
CHAR = Scalar("char", np.int8, "i", 8, 1)
UCHAR = Scalar("unsigned char", np.uint8, "u", 8, 1)
SHORT = Scalar("short", np.int16, "i", 16, 2)
USHORT = Scalar("unsigned short", np.uint16, "u", 16, 2)
INT = Scalar("int", np.int32, "i", 32, 3)
UINT = Scalar("unsigned int", np.uint32, "u", 32, 3)
LONG = Scalar("long", np.int64, "i", 64, 4)
ULONG = Scalar("unsigned long", np.uint64, "u", 64, 4)
LLONG = Scalar("long long", np.int64, "i", 64, 5)
ULLONG = Scalar("unsigned long long", np.uint64, "u", 64, 5)
FLOAT = Scalar("float", np.float32, "f", 32, 10)
DOUBLE = Scalar("double", np.float64, "f", 64, 11)

# 半精度（cuda_fp16.h / cuda_bf16.h）：存储 16 位，转换按就近舍入到偶数（与 CUDA 的 __float2half、
# __float2bfloat16 相同）。两个同类型的半精度数运算得到同类型（float 精度计算再舍入，对 + - * / 与
# 逐个舍入的 CUDA 运算符结果相同）；与其他类型混合时按 float 计算（nvcc 在这里常报「有歧义」）。
HALF = Scalar("__half", np.float16, "f", 16, 8)
try:                      # bfloat16 的 numpy 类型来自 ml_dtypes（tilelang 的依赖）
    import ml_dtypes as _ml_dtypes
except ImportError:       # pragma: no cover - 没有 ml_dtypes 时模拟器不认识 __nv_bfloat16
    _ml_dtypes = None
BF16 = Scalar("__nv_bfloat16", _ml_dtypes.bfloat16, "f", 16, 9) if _ml_dtypes is not None else None
#: 没有 ml_dtypes 时，遇到 __nv_bfloat16 的说明
#: 存放在内存里的指针：8 字节的句柄（见 interpreter 模块的说明）
PTRWORD = Scalar("pointer", np.uint64, "u", 64, 4)
BF16_MISSING = ("模拟器的 __nv_bfloat16 需要 Python 包 ml_dtypes（pip install ml_dtypes）"
                "(the simulator's __nv_bfloat16 needs the ml_dtypes package)")

# 类型名（按单词排序后）到类型 / sorted specifier words -> type
_SPEC = {
    ("void",): VOID,
    ("_Bool",): BOOL, ("bool",): BOOL,
    ("char",): CHAR, ("char", "signed"): CHAR, ("char", "unsigned"): UCHAR,
    ("short",): SHORT, ("int", "short"): SHORT, ("short", "signed"): SHORT,
    ("int", "short", "signed"): SHORT,
    ("short", "unsigned"): USHORT, ("int", "short", "unsigned"): USHORT,
    ("int",): INT, ("signed",): INT, ("int", "signed"): INT,
    ("unsigned",): UINT, ("int", "unsigned"): UINT,
    ("long",): LONG, ("int", "long"): LONG, ("long", "signed"): LONG,
    ("int", "long", "signed"): LONG,
    ("long", "unsigned"): ULONG, ("int", "long", "unsigned"): ULONG,
    ("long", "long"): LLONG, ("int", "long", "long"): LLONG,
    ("long", "long", "signed"): LLONG, ("int", "long", "long", "signed"): LLONG,
    ("long", "long", "unsigned"): ULLONG, ("int", "long", "long", "unsigned"): ULLONG,
    ("float",): FLOAT, ("double",): DOUBLE,
}

# 两个与四个分量的向量整体对齐（最多 16 字节），一次宽访问；一个与三个分量的按分量对齐、逐个访问
VECS = {name: Vec(name, _SPEC[tuple(sorted(base.split()))], n, wide=n in (2, 4))
        for name, (base, n) in VEC_NAMES.items()}
VECS["dim3"] = Vec("dim3", _SPEC[("int", "unsigned")], 3, wide=False)      # blockDim、gridDim 的类型

#: 半精度类型名（只认带双下划线的名字：half 这样的短名常被用作变量名）
HALF_NAMES = {"__half": HALF, **({"__nv_bfloat16": BF16} if BF16 is not None else {})}
# 成对的半精度（cuda_fp16.h 的 __half2、cuda_bf16.h 的 __nv_bfloat162）：两个分量 .x .y，4 字节对齐，一次宽访问
VECS["__half2"] = Vec("__half2", HALF, 2)
if BF16 is not None:
    VECS["__nv_bfloat162"] = Vec("__nv_bfloat162", BF16, 2)

# 预置的 typedef（LP64，与 nvcc 在 Linux x86-64 上一致）
TYPEDEFS = {
    "size_t": ULONG, "ptrdiff_t": LONG, "ssize_t": LONG,
    "int8_t": CHAR, "uint8_t": UCHAR, "int16_t": SHORT, "uint16_t": USHORT,
    "int32_t": INT, "uint32_t": UINT, "int64_t": LONG, "uint64_t": ULONG,
    "uint": UINT, "bool": BOOL, **VECS, **HALF_NAMES,
}


def spec_type(names):
    """类型说明符单词列表到类型；不认识时返回 None。"""
    if len(names) == 1 and names[0] in TYPEDEFS:
        return TYPEDEFS[names[0]]
    return _SPEC.get(tuple(sorted(names)))


def promote(t):
    """整数提升 / integer promotion."""
    if t.kind in "iub" and t.bits < 32:
        return INT
    return t


def common(a, b):
    """常用算术转换 / usual arithmetic conversions."""
    a, b = promote(a), promote(b)
    if a is b:
        return a
    if a.kind == "f" or b.kind == "f":
        if a is DOUBLE or b is DOUBLE:
            return DOUBLE
        return FLOAT
    if a.kind == b.kind:
        return a if a.rank >= b.rank else b
    s, u = (a, b) if a.kind == "i" else (b, a)
    if u.bits >= s.bits:
        return u
    return s  # 有符号类型更宽，能表示无符号类型的所有值


def cast(x, t):
    """把数值数组（或 numpy 标量）转换为 C 类型 t / convert to C type t."""
    dt = t.dtype
    a = np.asarray(x)
    if a.dtype == dt:
        return x
    if BF16 is not None and a.dtype == BF16.dtype:
        a = a.astype(np.float32)          # bfloat16 -> float 是精确的；之后按 float 转换
        if dt == a.dtype:
            return a[()] if a.ndim == 0 else a
    if t is BF16:
        r = _to_bf16(a)
        return r[()] if r.ndim == 0 else r
    if t is BOOL:
        r = a != 0
    elif a.dtype.kind == "f" and dt.kind in "iu":
        # 浮点转整数：向零截断。超出范围在 C 里是未定义行为；这里按 GPU 的 cvt.rzi 指令：
        # 饱和到目标类型的范围（负数转无符号得 0），NaN 转成 0
        info = np.iinfo(dt)
        with np.errstate(invalid="ignore", over="ignore"):
            f = a.astype(np.float64)
            nan = np.isnan(f)
            big = f >= float(info.max)
            small = f <= float(info.min)
            r = np.trunc(np.where(nan | big | small, 0.0, f)).astype(dt)
            r = np.where(big, dt.type(info.max), np.where(small, dt.type(info.min), r)).astype(dt)
    else:
        r = a.astype(dt)
    return r[()] if r.ndim == 0 else r


def _to_bf16(a):
    """转换成 bfloat16，一次就近舍入到偶数（float32 直接转换；其他类型先精确或按奇数舍入到 float32，
    避免两次舍入：round-to-odd 多保留的位足以让第二次舍入得到正确结果）。"""
    if a.dtype == np.float32:
        return a.astype(BF16.dtype)
    d = a.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        f = d.astype(np.float32)
        fin = np.isfinite(f) & (f.astype(np.float64) != d)
        # 向零截断到 float32，不精确时把最低位置 1（round-to-odd）
        toward0 = np.where(np.abs(f.astype(np.float64)) > np.abs(d), np.nextafter(f, np.float32(0)), f)
        bits = toward0.view(np.uint32) | np.uint32(1)
        f = np.where(fin, bits.view(np.float32), f)
    return np.asarray(f, np.float32).astype(BF16.dtype)


def idiv(a, b):
    """C 整数除法：向零截断 / C integer division truncating toward zero."""
    q = np.floor_divide(a, b)
    r = a - q * b
    fix = (r != 0) & ((a < 0) != (b < 0))
    out = np.where(fix, q + 1, q).astype(np.asarray(q).dtype)
    return out[()] if out.ndim == 0 else out


def imod(a, b):
    """C 取余：结果符号与被除数相同 / remainder with the sign of the dividend."""
    out = np.asarray(a - idiv(a, b) * b)
    return out[()] if out.ndim == 0 else out
