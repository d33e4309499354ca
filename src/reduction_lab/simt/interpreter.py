"""解释器：整个网格的所有线程一起向量化执行（文档：docs/cuda/simulator.md）。

An AST-walking interpreter over pycparser's tree. Every expression evaluates to
a numpy array over the *active lanes* (one lane per thread of the whole grid),
or to a numpy scalar when it is the same for all of them. Divergent control
flow narrows the set of active lanes (sorted lane indices); loops iterate while
any lane is still in them; ``return``/``break``/``continue`` take lanes out of
the flow. Memory accesses are checked for bounds before they happen, counted
per warp, and shared accesses go through the race tracker.

Memory is byte-addressed like GPU memory. A pointer is (buffer, offset,
pointee type); the offset counts the buffer's storage units (``buf.elem``):
one element of a typed array (the fast path: an ``int*`` into an ``int``
array reads ``data[offset]``), or one byte in a byte buffer (``char`` arrays,
unions, structs whose members differ in size or include pointers, ``void*``).
Casting a pointer changes only its pointee type; a cast to a type smaller than
the unit (``(char*)ints``) moves the pointer to the buffer's byte view, which
shares the data, the race records and the initialisation records; a cast back
to the element type at an aligned offset returns to the typed array. A load
or store of an ``s``-byte type through a unit of another size decodes /
encodes little-endian bytes with numpy views; an address that is not a
multiple of ``s`` raises the misaligned-address error (``SimtRuntimeError``),
as the GPU faults. Counters see the bytes really touched (a 1-byte load is one
request per lane; sectors and wavefronts by the bytes touched); race and
initialisation checks work on the buffer's own units (a word of an ``int``
array, a byte of a byte buffer), so two threads writing different bytes of
one ``int`` element through a ``char*`` count as a conflict on that word.

Pointers stored in memory (struct members, ``__shared__`` and file-scope
pointer variables, arrays of pointers, ``&p``) take 8 bytes each: a 64-bit
handle, the buffer's number (1, 2, ... in the order this launch first stored a
pointer to it) in bits 40..63 and the signed offset in bits 0..39 (units of
that buffer); 0 is the null pointer. A handle loaded back as a pointer gives
the same buffer and offset (pointers to shared memory mean the reading
thread's block, pointers to local memory the reading thread). Function
pointers are stored as their function number. Handles read as integers are
just numbers: only their round trip through memory (including memcpy) is
meaningful. All lanes of one pointer value must point into one buffer (or be
null).
"""

from __future__ import annotations

import math
import os

import numpy as np
from pycparser import c_ast

from . import counters as C
from . import ctype as T
from .errors import (
    BarrierDivergenceError, CompileError, DeviceAssertError, DsmemExitedBlockError, GlobalMemoryRaceError, LaunchError, LoopLimitError,
    OutOfBoundsError, SimtRuntimeError, SpinWaitError,
    UninitializedReadError, UnsupportedError, WarpSyncError,
)
from .frontend import BUILTIN_FUNCS, parse_constant
from .memory import Buffer, rank_span, remote_view
from .sanitizers import (
    ATOMIC_BASE, GLOBAL_BLOCK_NOTE, GLOBAL_BLOCK_SCOPE_NOTE, GLOBAL_CLUSTER_NOTE, GLOBAL_SAME_BLOCK_NOTE, VOLTA_NOTE, ClusterTracker,
    GlobalTracker, SharedTracker, cluster_race_message, global_race_message, race_message,
)

#: 模拟器用 C++ 写成的库（CUB 子集、<cuda/functional>）：错误报在用户调用它的那一行
_PRELUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prelude")
_LIB_DIRS = tuple(os.path.join(_PRELUDE_DIR, d) + os.sep for d in ("cub", "cuda"))


class Lanes:
    """活跃线程集合：idx 为 None 表示网格的全部线程，否则为有序的线程编号。"""

    __slots__ = ("idx", "n")

    def __init__(self, idx, n):
        self.idx = idx
        self.n = n


EMPTY = Lanes(np.empty(0, np.int64), 0)


class Val:
    """一个值：C 类型 t，数据 v（数组或标量），指针另有 buf。"""

    __slots__ = ("t", "v", "buf")

    def __init__(self, t, v, buf=None):
        self.t = t
        self.v = v
        self.buf = buf


class Var:
    """寄存器变量（按线程存储）或者指向内存的变量（共享/局部数组、共享标量）。"""

    __slots__ = ("t", "data", "owned", "buf", "mem")

    def __init__(self, t, data=None, buf=None, mem=False):
        self.t = t
        self.data = data
        self.owned = False
        self.buf = buf
        self.mem = mem


#: occupancy 给出的限制因素的中文名
_LIMIT_ZH = {"threads": "线程数", "blocks": "线程块数", "shared": "共享内存", "registers": "寄存器"}


class Starved(Exception):
    """schedule="auto" 的第一次尝试（整个网格一起执行）里，一个等内存的循环转了一圈什么都没变：api.launch 收到它，
    把数组恢复成启动前的样子，改为逐块执行重来。不是 SimtError：不会漏到用户那里。"""

    def __init__(self, node, lane, waiting):
        super().__init__("spin-wait starved under schedule='grid'")
        self.node, self.lane, self.waiting = node, lane, waiting


class _Loop:
    __slots__ = ("brk", "cont")

    def __init__(self):
        self.brk = []
        self.cont = []


class Frame:
    def __init__(self, func):
        self.func = func
        self.scopes = [{}]
        self.loops = []
        self.ret = None
        self.const_names = set()    # 声明为 const 的局部变量（可作数组长度）

    def lookup(self, name):
        for s in reversed(self.scopes):
            v = s.get(name)
            if v is not None:
                return v
        return None


def _same_lanes(a, b):
    """两个线程集合是否相同（Lanes：idx 为 None 表示全部线程）。"""
    return a.n == b.n and (a.idx is None or b.idx is None or np.array_equal(a.idx, b.idx))


def _same_state(a, b):
    """两次 Machine._frame_state 的结果是否相同（按位比较，NaN 与 NaN 相同）。"""
    if len(a) != len(b):
        return False
    for (ia, ba, va), (ib, bb, vb) in zip(a, b):
        if ia != ib or ba != bb:
            return False
        xs, ys = (va, vb) if isinstance(va, tuple) else ((va,), (vb,))
        if len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys):
            if x.shape != y.shape or x.dtype != y.dtype or x.tobytes() != y.tobytes():
                return False
    return True


def _round_half_away(x):
    """C 的 round：一半时远离零取整。"""
    t = np.trunc(x)
    return (t + np.copysign((np.abs(x - t) >= 0.5).astype(np.asarray(x).dtype), x)).astype(np.asarray(x).dtype)


_MATH1 = {
    "exp": np.exp, "exp10": lambda x: np.power(x.dtype.type(10), x), "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "sqrt": np.sqrt, "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "round": lambda x: _round_half_away(x),
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "rsqrt": lambda x: x.dtype.type(1) / np.sqrt(x),
    "expm1": np.expm1, "log1p": np.log1p, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "cbrt": np.cbrt,
}
_MATH2 = {"fmax": np.fmax, "fmin": np.fmin, "pow": np.power, "fmod": np.fmod, "atan2": np.arctan2, "hypot": np.hypot,
          "copysign": np.copysign}
_FAST = {"__exp10f": "exp10", "__expf": "exp", "__logf": "log", "__fsqrt_rn": "sqrt", "__powf": "pow"}

#: 带缓存提示的加载（.ca / .cg / .cs / .lu / .cv）：提示只影响缓存，模拟器按 __ldg（普通的加载）执行与计数
_HINT_LOADS = ("__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv")
#: 带缓存提示的写（.wb / .cg / .cs / .wt）：同样按普通的写执行与计数
_HINT_STORES = ("__stwb", "__stcg", "__stcs", "__stwt")

#: 原子操作的作用域版本：_block 只对同一线程块的线程是原子的，_system 对主机与其他 GPU 也是（模拟器里同 atomicAdd）
_ATOMIC_OPS = ("Add", "Sub", "Max", "Min", "Exch", "Inc", "Dec", "CAS", "And", "Or", "Xor")
_ATOMIC_SCOPES = ("", "_block", "_system")
_ATOMICS = tuple(f"atomic{op}{suffix}" for op in _ATOMIC_OPS for suffix in _ATOMIC_SCOPES)

BUILTIN_FUNCS.update(
    set(_HINT_LOADS) | set(_HINT_STORES) | set(_MATH1) | {n + "f" for n in _MATH1} | set(_MATH2) | {n + "f" for n in _MATH2}
    | set(_FAST) | {
        "max", "min", "abs", "fma", "fmaf", "__fdividef", "__builtin_inff", "__builtin_nanf",
        "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or", "__activemask",
        "__fmaf_rn", "__syncwarp", "__threadfence", "__threadfence_block",
        "__shfl_down_sync", "__shfl_xor_sync", "__shfl_up_sync", "__shfl_sync",
        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
        "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
        *_ATOMICS, "__ballot_sync", "__any_sync", "__all_sync", "__uni_sync", "__match_any_sync", "__frcp_rn", "clock64", "__nanosleep", "__popc", "__popcll", "__clz", "__clzll", "__ffs",
        "__ffsll", "__brev", "__saturatef", "__int_as_float", "__float_as_int", "__uint_as_float", "__float_as_uint", "__double_as_longlong", "__longlong_as_double", "__builtin_memcpy", "__builtin_memset", "memcpy", "memset", "frexp", "frexpf", "ldexp", "ldexpf", "__fadd_rn", "__fsub_rn", "__fmul_rn", "__fdiv_rn", "__ldg", "__mul24", "__umul24",
        "__simt_tile_mask", "__simt_assert", "__simt_tile_reduce_add", "__simt_tile_reduce_max", "__simt_tile_reduce_min",
        "__simt_cluster_sync", "__simt_grid_sync", "__simt_cluster_arrive", "__simt_cluster_wait", "__simt_cluster_block_rank",
        "__simt_cluster_num_blocks", "__simt_cluster_dim_blocks", "__simt_cluster_block_index", "__simt_map_shared_rank",
        "__simt_cluster_dim_threads", "__simt_cluster_thread_index", "__simt_cluster_query_shared_rank",
        "__simt_printf", "__isShared", "__isGlobal", "__simt_atomic_store", "__simt_atomic_store_block",
    } | {"make_" + v for v in T.VECS}
)

BUILTIN_FUNCS.update({"__float2half", "__float2half_rn", "__half2float",
                      "__float2bfloat16", "__float2bfloat16_rn", "__bfloat162float",
                      "__floats2half2_rn", "__float2half2_rn", "__half22float2",
                      "__floats2bfloat162_rn", "__float2bfloat162_rn", "__bfloat1622float2",
                      "__low2float", "__high2float"})

#: 半精度（__half、__nv_bfloat16）的算术：名字 -> (参数个数, 按 float32 计算的函数)；结果就近舍入到参数的类型
_HALF_ARITH = {
    "__hadd": (2, np.add), "__hsub": (2, np.subtract), "__hmul": (2, np.multiply), "__hdiv": (2, np.divide),
    "__hneg": (1, np.negative), "__habs": (1, np.abs), "__hmax": (2, np.fmax), "__hmin": (2, np.fmin),
    "__hfma": (3, lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32)),
    "hexp": (1, np.exp), "hexp2": (1, np.exp2), "hlog": (1, np.log), "hlog2": (1, np.log2), "hsqrt": (1, np.sqrt),
    "hrsqrt": (1, lambda a: np.float32(1) / np.sqrt(a)), "hrcp": (1, lambda a: np.float32(1) / a),
}
#: 半精度的比较：名字 -> 函数（结果是 bool）
_HALF_CMP = {"__heq": np.equal, "__hne": np.not_equal, "__hlt": np.less, "__hle": np.less_equal,
             "__hgt": np.greater, "__hge": np.greater_equal}
#: 成对的半精度：名字 -> 逐个分量用的 _HALF_ARITH 名字
_PAIR_ARITH = {"__hadd2": "__hadd", "__hsub2": "__hsub", "__hmul2": "__hmul", "__h2div": "__hdiv", "__hmax2": "__hmax",
               "__hmin2": "__hmin", "__hfma2": "__hfma", "__hneg2": "__hneg", "__habs2": "__habs"}
BUILTIN_FUNCS.update(set(_HALF_ARITH) | set(_HALF_CMP) | set(_PAIR_ARITH) |
                     {"__hisnan", "__low2half", "__high2half", "__low2bfloat16", "__high2bfloat16",
                      "__halves2half2", "__halves2bfloat162"})

_BUILTIN_VARS = ("threadIdx", "blockIdx", "blockDim", "gridDim")

#: 报「不支持」时语法树节点的说法（学习者看得懂的写法，而不是解析器的类名）
_NODE_NAMES = {"InitList": "表达式里的花括号列表（这个位置上还不支持）；去掉花括号，或先声明一个有名字的变量再用",
               "NamedInitializer": "指定成员的初始化 {.x = …}",
               "ExprList": "逗号表达式", "Pragma": "这个 #pragma"}

#: 循环每迭代一次至少计这么多「线程步」：解释器每次迭代有固定开销，只剩一个线程在自旋时
#: 预算也要在几秒内用完
MIN_STEPS_PER_ITERATION = 1024
#: 死循环检测从第几圈开始（之后每到 2 的幂的圈数看一次）
ENDLESS_CHECK_FROM = 1024
#: 静态共享内存的上限（nvcc / ptxas：每个内核 48 KiB）
STATIC_SHARED_LIMIT = 48 * 1024
#: 每个线程局部数组的上限（ptxas：512 KiB 的局部内存）
LOCAL_LIMIT = 512 * 1024


def _merge(c, a, b, n):
    """?: 的一个分量：c 为真的线程取 a（按这些线程排列），其余取 b。"""
    a, b = np.asarray(a), np.asarray(b)
    out = np.empty(n, np.result_type(a, b))
    out[c] = a
    out[~c] = b
    return out


def _base_of(t):
    while t.is_array:
        t = t.elem
    return t


def _flat_init(init):
    """嵌套的初始化列表 {{1, 2}, {3}} 按顺序展开（结构体的数组与嵌套成员）。"""
    out = []
    for e in init.exprs:
        if isinstance(e, c_ast.InitList):
            out.extend(_flat_init(e))
        else:
            out.append(e)
    return out


def _walk(node):
    """AST 的所有子孙节点（先序）。"""
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed([c for _, c in n.children()]))   # 按源码顺序


class Machine:
    """一次启动的执行状态 / state of one launch."""

    def __init__(self, prog, kernel, grid, block, shared_bytes, report, racecheck, max_iter,
                 max_lane_steps=None, initcheck=True, shared_limit=232448, global_racecheck=False,
                 benign_same_value=False, symbols=None, cluster=(1, 1, 1), schedule="grid", auto=False,
                 after_grid=None):
        self.prog = prog
        # 调度："grid" 整个网格一起执行；"blocks" 一次一个簇（没有簇时一个线程块），按编号从小到大；"blocks-reversed"
        # 同样一次一个簇，按编号从大到小。auto：schedule="auto" 的一次尝试，等不到时抛 Starved（api.launch 换一种调度
        # 重来），而不是报错
        self.schedule = schedule
        self.auto = auto
        self.after_grid = after_grid    # schedule="auto" 改为逐块执行时：整网格执行等不到的那一处 (行, 线程块, 线程)
        # schedule="auto"：每块全局内存第一次被写之前的副本 [(数组, 副本)]，按记下的先后；换一种调度重来之前倒着恢复。
        # 只复制真的被写的数组（指向 const 的大输入不复制）
        self.saved = [] if auto else None
        self._saved_ids = set()
        # 自旋等待的检测（_loop）：改变了内存的写与原子操作的次数、volatile 读与原子操作的次数；watch > 0 时
        # 普通的写只在真的改了值时才计入 mutations（正在观察一个像是自旋的循环）
        self.mutations = 0
        self.spin_reads = 0
        self.loads = 0
        self.watch = 0
        # 有没有一个循环只读不写地等内存（volatile 读或原子读，一趟里没有改变内存）：这样的内核在整个网格一起
        # 执行时等得到，还要看网格能不能同时驻留（schedule="auto" 按 "waves" 再执行一遍，见 api.launch）
        self.polled = False
        self.wave = None
        self.kernel = kernel
        self.grid = grid
        self.block = block
        self.tpb = block[0] * block[1] * block[2]
        self.nblocks = grid[0] * grid[1] * grid[2]
        self.L = self.tpb * self.nblocks
        self.wpb = (self.tpb + 31) // 32
        self.rep = report
        self.racecheck = racecheck
        self.global_racecheck = global_racecheck
        self.benign_same_value = benign_same_value   # 同值写入不算竞争（共享与全局内存）
        self.symbols = symbols or {}                 # 主机写入的 __constant__ / __device__ 变量（cudaMemcpyToSymbol）
        self.file_bufs = {}                          # 文件作用域变量 -> Buffer
        self.cur = None
        self.max_iter = max_iter                  # 每个循环的迭代上限（None：不限）
        self.max_steps = max_lane_steps           # 整次启动的工作预算：线程步（None：不限）
        self.steps = 0
        self.initcheck = initcheck
        self.shared_limit = shared_limit          # 静态 + 动态共享内存的上限（所选架构每块的最大值）
        self.shared_bytes = shared_bytes
        self.ALL = Lanes(None, self.L)
        L = self.L
        lane = np.arange(L, dtype=np.int64)
        self.arange = lane
        self.blk = lane // self.tpb               # 线程块线性编号
        self.tlin = lane - self.blk * self.tpb    # 块内线程线性编号
        self.gw = self.blk * self.wpb + self.tlin // 32   # 全局线程束编号（有序）
        self.lw = self.tlin % 32                  # 线程束内编号
        self._builtin = {}
        self.shared = {}        # 声明节点 id -> Buffer
        self.shared_off = 0     # 静态共享内存的字节偏移
        self.dyn_raw = None
        self.dyn_init = None    # 动态共享内存每个字节是否写过
        self.locals = {}
        self.epoch = np.zeros(self.nblocks * self.wpb, np.int32)
        self.bar = np.zeros(self.nblocks, np.int32)        # 每个线程块执行过的 __syncthreads() 次数
        self.fence = np.zeros(L if global_racecheck else 0, np.int32)   # 每个线程最近一次 __threadfence() 的时钟
        self.clock = 0                                     # 全局内存访问的时钟
        self.grid_syncs = 0                                # grid.sync() 的次数
        # 线程块簇（__cluster_dims__）：每块的簇编号与簇内编号（x 最快），每个簇按编号排列的块
        self.cluster = tuple(cluster)
        cx, cy, cz = self.cluster
        self.csize = cx * cy * cz
        gx, gy, _ = grid
        bl = np.arange(self.nblocks, dtype=np.int64)
        bx, by, bz = bl % gx, (bl // gx) % gy, bl // (gx * gy)
        ngx, ngy = gx // cx, gy // cy
        self.cid = (bx // cx) + (by // cy) * ngx + (bz // cz) * ngx * ngy
        self.crank = (bx % cx) + (by % cy) * cx + (bz % cz) * cx * cy
        self.members = np.empty((self.nblocks // self.csize, self.csize), np.int64)
        self.members[self.cid, self.crank] = bl
        self.carr = np.zeros(self.nblocks, np.int32)       # 每块完成的簇屏障到达数（cluster.sync() 或 barrier_arrive()）
        self.cwait = np.zeros(self.nblocks, np.int32)      # 每块完成的簇屏障等待数（cluster.sync() 或 barrier_wait()）
        # 对每个块最近一次经分布式共享内存的访问：访问者那时的到达数（-1：没有）、访问者、行（语法树节点的编号）
        self.dx_a = np.full(self.nblocks, -1, np.int32)
        self.dx_lane = np.zeros(self.nblocks, np.int64)
        self.dx_node = np.zeros(self.nblocks, np.int32)
        self.dx_store = np.zeros(self.nblocks, bool)
        self.dx_nodes = []                                 # (语法树节点, 数组名)：每处访问一项
        self.dx_index = {}                                 # (id(节点), 数组名) -> dx_nodes 里的下标
        self.depth = 0
        self.calls = []           # 正在执行的 __device__ 函数调用的节点（库里的错误报在用户调用它的那一行）
        self.consts = prog.consts
        self.handles = []       # 存进内存的指针指向的数组（句柄 = 编号 + 1）
        self._leafu = {}        # (结构体, 单元大小) -> 每个叶子的单元偏移
        self.S = {
            "Compound": self.s_compound, "Decl": self.s_decl, "DeclList": self.s_decllist,
            "If": self.s_if, "For": self.s_for, "While": self.s_while, "DoWhile": self.s_dowhile,
            "Break": self.s_break, "Continue": self.s_continue, "Return": self.s_return,
            "EmptyStatement": lambda n, l, f: l, "Pragma": lambda n, l, f: l,
        }
        self.E = {
            "Constant": self.e_const, "ID": self.e_id, "BinaryOp": self.e_binary,
            "UnaryOp": self.e_unary, "Assignment": self.e_assign, "TernaryOp": self.e_ternary,
            "FuncCall": self.e_call, "ArrayRef": self.e_arrayref, "StructRef": self.e_structref,
            "Cast": self.e_cast, "ExprList": self.e_exprlist, "CompoundLiteral": self.e_compound,
        }

    # ------------------------------------------------------------ 线程集合
    def g(self, arr, lanes):
        return arr if lanes.idx is None else arr[lanes.idx]

    def ids(self, lanes):
        return self.arange if lanes.idx is None else lanes.idx

    def sub(self, lanes, m):
        if np.ndim(m) == 0:
            return lanes if m else EMPTY
        c = int(np.count_nonzero(m))
        if c == lanes.n:
            return lanes
        if c == 0:
            return EMPTY
        return Lanes(np.flatnonzero(m) if lanes.idx is None else lanes.idx[m], c)

    def union(self, parts):
        parts = [p for p in parts if p.n]
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return parts[0]
        for p in parts:
            if p.idx is None:
                return p
        n = sum(p.n for p in parts)
        if n == self.L:
            return self.ALL
        idx = np.concatenate([p.idx for p in parts])
        idx.sort(kind="stable")
        return Lanes(idx, n)

    def split(self, lanes, c, node):
        """按条件拆分，并统计线程束内的发散分支。"""
        if np.ndim(c) == 0:
            return (lanes, EMPTY) if c else (EMPTY, lanes)
        t = self.sub(lanes, c)
        if t.n == 0 or t.n == lanes.n:
            return (t, EMPTY) if t.n else (EMPTY, lanes)
        f = self.sub(lanes, ~c)
        wt = self.gw[t.idx] if t.idx is not None else self.gw
        wf = self.gw[f.idx]
        ut = wt[np.concatenate(([True], wt[1:] != wt[:-1]))]
        uf = wf[np.concatenate(([True], wf[1:] != wf[:-1]))]
        self.rep.divergent_branches += int(np.intersect1d(ut, uf, assume_unique=True).size)
        return t, f

    # ------------------------------------------------------------ 错误信息
    def user_node(self, node):
        """节点在模拟器自带的库（CUB 子集）里时，换成调用链上最里层的、在用户源码里的调用。"""
        if node is None or not node.coord or not str(node.coord.file or "").startswith(_LIB_DIRS):
            return node
        for call in reversed(self.calls):
            if call.coord and not str(call.coord.file or "").startswith(_LIB_DIRS):
                return call
        return node

    def lib_note(self, node):
        """库里的位置（报错时写在用户的行号后面），不在库里时空串。"""
        if node is None or not node.coord or not str(node.coord.file or "").startswith(_LIB_DIRS):
            return ""
        rel = os.path.relpath(str(node.coord.file), _PRELUDE_DIR).replace(os.sep, "/")
        return f"（<{rel}> 第 {node.coord.line} 行）"

    def line(self, node):
        node = self.user_node(node)
        return node.coord.line if node is not None and node.coord else "?"

    def where(self, lane):
        lane = int(lane)
        b = lane // self.tpb
        t = lane - b * self.tpb
        gx, gy, _ = self.grid
        bx, by, _ = self.block
        return (
            f"({b % gx},{(b // gx) % gy},{b // (gx * gy)})",
            f"({t % bx},{(t // bx) % by},{t // (bx * by)})",
        )

    def header(self, node):
        """节点在被 #include 的另一个文件里时返回那个文件名（报错时写在行号前），否则返回空串。"""
        node = self.user_node(node)
        f = getattr(node.coord, "file", None) if node is not None and node.coord else None
        main = self.prog.filename.replace("\\", "/").replace('"', "")
        if not f or f == main or f.startswith("<"):
            return ""
        a, d = os.path.abspath(f), os.path.dirname(os.path.abspath(main))
        if a == os.path.abspath(main):
            return ""
        return os.path.relpath(a, d) if a.startswith(d + os.sep) else f

    def unsupported(self, what, node):
        ln = self.line(node)
        h = self.header(node)
        hz, he = (f" {h}", f" {h},") if h else ("", "")
        note = self.lib_note(node)
        err = UnsupportedError(
            f"内核 {self.kernel}{hz} 第 {ln} 行{note}：不支持 {what} / kernel {self.kernel},{he} line {ln}: unsupported: {what}"
        )
        err.kernel = self.kernel
        err.file = h or None
        err.line = ln if isinstance(ln, int) else None
        return err

    def fail(self, cls, zh, en, node, lane=None):
        ln = self.line(node)
        loc = ""
        b = t = None
        if lane is not None:
            b, t = self.where(lane)
            loc = f"，线程块 {b}，线程 {t}"
            loc_en = f", block {b}, thread {t}"
        else:
            loc_en = ""
        h = self.header(node)
        hz, he = (f" {h}", f" {h},") if h else ("", "")
        note = self.lib_note(node)
        err = cls(f"内核 {self.kernel}{hz} 第 {ln} 行{note}{loc}：{zh} / kernel {self.kernel},{he} line {ln}{loc_en}: {en}")
        err.kernel = self.kernel
        err.file = h or None
        err.line = ln if isinstance(ln, int) else None
        err.block, err.thread = b, t
        return err

    # ------------------------------------------------------------ 运行
    def static_shared_check(self, func):
        """像 nvcc 一样在启动前把内核（及它调用的 __device__ 函数、文件作用域）声明的全部静态
        __shared__ 数组加起来，不管它们在这次运行里有没有被用到。"""
        decls, seen, todo = list(self.prog.shared_decls), set(), [func]
        local_bytes = 0
        while todo:
            f = todo.pop()
            if f.name in seen:
                continue
            seen.add(f.name)
            for n in _walk(f.node.body):
                if isinstance(n, c_ast.Decl) and "_Thread_local" in (n.storage or []) \
                        and "extern" not in (n.storage or []):
                    decls.append(n)
                elif isinstance(n, c_ast.Decl) and isinstance(n.type, c_ast.ArrayDecl):
                    try:
                        t = self.prog.resolve(n.type, n)
                    except UnsupportedError:
                        continue      # 长度用到局部常量：执行到声明时再求值
                    t = t if isinstance(t, T.CType) else t.t
                    if t.is_array and t.n is not None:
                        local_bytes += T.elems_of(t) * T.scalar_of(t).size
                        if local_bytes > LOCAL_LIMIT:
                            raise self.fail(CompileError, f"每个线程的局部数组共 {local_bytes} 字节（算到 {n.name} 为止），"
                                            f"超过 nvcc 的上限 {LOCAL_LIMIT} 字节（512 KiB）",
                                            f"local arrays of {local_bytes} bytes per thread (up to {n.name}) exceed "
                                            f"the {LOCAL_LIMIT}-byte (512 KiB) limit of nvcc", n)
                elif isinstance(n, c_ast.FuncCall) and isinstance(n.name, c_ast.ID) \
                        and n.name.name in self.prog.functions:
                    todo.append(self.prog.functions[n.name.name])
        total = 0
        self.static_shared_bytes = 0
        for d in decls:
            try:
                t = self.prog.resolve(d.type, d)
            except UnsupportedError:
                continue      # 长度用到局部常量：执行到声明时再检查（shared_var）
            if not isinstance(t, T.CType):
                t = t.t
            if t.is_array and t.n is None:
                continue
            sc = T.scalar_of(t)
            align = max(sc.size, 4)
            total = (total + align - 1) // align * align + (T.elems_of(t)) * sc.size
            if total > STATIC_SHARED_LIMIT:
                raise self.fail(CompileError, f"静态共享内存共 {total} 字节（算到 {d.name} 为止，包括这次没有执行到的声明），"
                                f"超过 nvcc 的上限 {STATIC_SHARED_LIMIT} 字节（48 KiB）；更大的共享内存要用 extern __shared__ 动态分配",
                                f"static shared memory of {total} bytes (up to {d.name}, counting declarations not executed) "
                                f"exceeds the {STATIC_SHARED_LIMIT}-byte (48 KiB) limit of nvcc; use dynamic (extern __shared__) memory",
                                d)
        self.static_shared_bytes = total

    def run(self, func, args):
        self.static_shared_check(func)
        if self.schedule in ("blocks", "blocks-reversed", "waves"):
            # blocks：一次一个簇（没有簇时一个线程块），按编号的顺序或倒序；waves：一次同时驻留得下的那么多块
            # （按编号一波一波，每波里的块一起执行），后面的块等前一波全部结束才开始
            tpb = self.tpb
            order = self.members if self.schedule != "blocks-reversed" else self.members[::-1]
            per = 1 if self.schedule != "waves" else max(1, self.resident_blocks()[0] // self.csize)
            for k in range(0, len(order), per):
                self.wave = np.sort(order[k:k + per], axis=None)      # 正在执行的这一波（或这一块、这一簇）
                idx = (self.wave[:, None] * tpb + np.arange(tpb)).ravel()
                self._run_lanes(func, args, Lanes(idx, idx.size))
        else:
            self._run_lanes(func, args, self.ALL)
        self.exited_check()

    def _run_lanes(self, func, args, lanes):
        fr = Frame(func)
        for (name, t, _), a in zip(func.params, args):
            if t.is_vec:                 # 按值传递的结构体：每个成员一个寄存器变量
                var = self.new_var(t)
                self.write_var(var, lanes, a, None)
                fr.scopes[0][name] = var
            else:
                fr.scopes[0][name] = Var(t, a.v, a.buf)
        self.ex(func.node.body, lanes, fr)

    def exited_check(self):
        """内核结束时：经分布式共享内存访问过的块，在那次访问之后必须还完成过一次簇屏障等待，
        否则访问时它可能已经退出（见 DsmemExitedBlockError）。"""
        bad = np.flatnonzero((self.dx_a >= 0) & (self.dx_a >= self.cwait))
        if not bad.size:
            return
        b = int(bad[0])
        node, name = self.dx_nodes[int(self.dx_node[b])]
        lane = int(self.dx_lane[b])
        tb, _ = self.where(b * self.tpb)
        rank = int(self.crank[b])
        rw, rw_en = ("写", "wrote") if self.dx_store[b] else ("读", "read")
        err = self.fail(
            DsmemExitedBlockError,
            f"经分布式共享内存{rw}了线程块 {tb}（簇内编号 {rank}）的共享数组 {name}，而线程块 {tb} 在这次访问之后没有再等"
            f"任何一次簇屏障就结束了（它完成的最后一次簇屏障在这次访问之前）：GPU 上它可能已经退出、共享内存已被回收，"
            f"读到的是无效的值或访问出错。请在内核末尾（每个 return 之前）加 cluster.sync()，让每一块都等簇里的访问全部完成再退出",
            f"{rw_en} shared array {name} of block {tb} (cluster rank {rank}) through distributed shared memory, but block "
            f"{tb} finished without waiting on any cluster barrier after this access: on a GPU it may already have exited "
            f"and its shared memory be gone. Call cluster.sync() at the end of the kernel (before every return) so that no "
            f"block exits while others may still access its shared memory", node, lane=lane)
        err.target_block, err.target_rank, err.array = tb, rank, name
        raise err

    def ex(self, node, lanes, fr):
        self.cur = node      # 正在执行的语句（模拟器内部出错时报告它的行）
        h = self.S.get(type(node).__name__)
        if h is None:
            self.ev(node, lanes, fr)   # 表达式语句
            return lanes
        return h(node, lanes, fr)

    def s_compound(self, node, lanes, fr):
        fr.scopes.append({})
        try:
            for st in node.block_items or ():
                if lanes.n == 0:
                    break
                lanes = self.ex(st, lanes, fr)
        finally:
            fr.scopes.pop()
        return lanes

    def s_decllist(self, node, lanes, fr):
        for d in node.decls:
            self.s_decl(d, lanes, fr)
        return lanes

    def s_decl(self, node, lanes, fr):
        st = node.storage or []
        if "_Thread_local" in st:
            fr.scopes[-1][node.name] = self.shared_var(node, fr)
            return lanes
        if "register" in st and node.init is not None:     # 局部引用 T& r = x;（前端用 register 标记）
            t = self.prog.resolve_plain(node.type)
            v = self.bind_ref(node.init, t, "const" in (node.quals or []), lanes, fr, node)
            if not isinstance(v, Var):
                var = self.new_var(t)
                self.write_var(var, lanes, self.conv(v, t, node), node)
                v = var
            fr.scopes[-1][node.name] = v
            return lanes
        t = self.resolve_decl(node, fr)
        if "const" in (node.quals or []):
            fr.const_names.add(node.name)
        vol = False
        if not isinstance(t, T.CType):  # volatile 标量
            t, vol = t.t, True
        if t.is_array:
            if t.n is None:
                raise self.unsupported("没有长度的局部数组", node)
            self.need_storable(_base_of(t), node)
            key = id(node)
            buf = self.locals.get(key)
            if buf is None:
                n = T.elems_of(t)
                sc = T.scalar_of(t)
                buf = Buffer("local", node.name, np.zeros(self.L * n, sc.dtype), sc, n, vol=t.vol)
                if self.initcheck:
                    buf.init = np.zeros(self.L * n, bool)
                self.locals[key] = buf
            var = Var(t, None, buf, mem=True)
            fr.scopes[-1][node.name] = var
            if node.init is not None:
                if not isinstance(node.init, c_ast.InitList):
                    raise self.unsupported("数组初始化", node)
                vals = node.init.exprs
                n = T.elems_of(t)
                sc = T.scalar_of(t)
                first = None
                if _base_of(t).is_vec and vals:
                    # 结构体（或向量类型）的数组：一项是整个元素（花括号列表或结构体的值），或按花括号省略逐个标量
                    first = vals[0] if isinstance(vals[0], c_ast.InitList) else self.ev(vals[0], lanes, fr)
                    if isinstance(first, c_ast.InitList) or first.t.is_vec or t.elem.is_array:
                        self.init_elements(t, Val(T.Ptr(t.elem), np.int64(0), buf), node.init, first, lanes, fr, node)
                        return lanes
                if t.elem.is_array:
                    raise self.unsupported("多维局部数组的初始化", node)
                el = t.elem if t.elem.is_ptr or t.elem.is_fnptr else sc
                for k in range(n):
                    if k == 0 and first is not None:
                        v = first
                    else:
                        v = self.ev(vals[k], lanes, fr) if k < len(vals) else Val(T.INT, np.int32(0))
                    p = Val(T.Ptr(el), np.int64(k), buf)
                    self.store(p, self.conv(v, el, node), lanes, node)
            return lanes
        var = self.new_var(t)
        if node.init is not None:
            if isinstance(node.init, c_ast.InitList) and t.is_vec:     # float4 v = {1, 2, 3, 4}; P p = {0};
                self.write_var(var, lanes, self.vec_init(t, node.init, lanes, fr, node), node)
                fr.scopes[-1][node.name] = var
                return lanes
            if isinstance(node.init, c_ast.InitList):          # float acc{}; float acc{x}; int n = {3};
                ex = node.init.exprs or []
                if len(ex) > 1:
                    raise self.unsupported(f"标量 {node.name} 的初始化列表有 {len(ex)} 个元素", node)
                if not ex and not (t.is_scalar and getattr(t, "dtype", None) is not None):
                    raise self.unsupported(f"{t!r} 的空初始化列表", node)
                v = self.ev(ex[0], lanes, fr) if ex else Val(t, t.dtype.type(0))
                self.write_var(var, lanes, self.conv(v, t, node), node)
                fr.scopes[-1][node.name] = var
                return lanes
            v = self.ev(node.init, lanes, fr)
            self.write_var(var, lanes, self.conv(v, t, node), node)
        fr.scopes[-1][node.name] = var
        return lanes

    def init_elements(self, t, p0, init, first, lanes, fr, node):
        """数组 ``t``（元素是结构体，或结构体的数组）从 ``p0`` 起按花括号列表 ``init`` 逐个元素初始化：一项是一个
        元素，写成花括号列表或一个结构体的值（``Pr arr[2] = {p, mk(3)};``、``MD parts[2] = {MD(), MD()};``）；
        少写的元素为 0。``first`` 是已经求过值的第一项（或它的花括号列表）。"""
        items = init.exprs or []
        if len(items) > t.n:
            raise self.unsupported(f"数组初始化列表的元素多于数组长度 {t.n}", node)
        for k in range(t.n):
            p = self.ptr_arith("+", p0, Val(T.INT, np.int32(k)), node)
            item = first if k == 0 and first is not None else (items[k] if k < len(items) else None)
            if t.elem.is_array:
                if item is not None and not isinstance(item, c_ast.InitList):
                    raise self.unsupported("多维数组的初始化省略了内层的花括号", node)
                row = Val(T.Ptr(t.elem.elem), p.v, p.buf)
                self.init_elements(t.elem, row, item or c_ast.InitList([]), None, lanes, fr, node)
                continue
            if item is None or isinstance(item, c_ast.InitList):
                v = self.vec_init(t.elem, item or c_ast.InitList([]), lanes, fr, node)
            else:
                v = item if isinstance(item, Val) else self.ev(item, lanes, fr)
                if not v.t.is_vec:
                    raise self.unsupported("结构体数组的初始化列表里一部分元素省略了花括号", node)
            self.store(p, self.conv(v, t.elem, node), lanes, node)

    def vec_init(self, t, init, lanes, fr, node):
        """向量类型与成员都在寄存器里的结构体的花括号初始化 {a, b, …}（缺的成员为 0）-> 值。"""
        ex = _flat_init(init)
        if len(ex) > t.n:
            raise self.unsupported(f"{t!r} 的初始化列表元素过多", node)
        vals = []
        for k in range(t.n):
            e = t.elems[k]
            if k >= len(ex):
                vals.append(Val(e, np.int64(0)) if e.is_ptr or e.is_fnptr else e.dtype.type(0))
                continue
            v = self.conv(self.ev(ex[k], lanes, fr), e, node)
            vals.append(v if e.is_ptr or e.is_fnptr else v.v)      # 指针成员连同它指向的数组
        return Val(t, tuple(vals))

    def e_compound(self, node, lanes, fr):
        """临时对象 T{…} / T()（前端降成的复合字面量 (T){…}）：按 ``T t = {…};`` 求值。"""
        t = self.prog.resolve(node.type, node)
        if not isinstance(t, T.CType):
            t = t.t
        if not t.is_vec:
            ex = node.init.exprs or []
            if len(ex) > 1 or not t.is_scalar:
                raise self.unsupported(f"{t!r} 的临时对象", node)
            return self.conv(self.ev(ex[0], lanes, fr), t, node) if ex else Val(t, t.dtype.type(0))
        if not t.flat:
            raise self.unsupported(f"有数组成员的结构体 {t!r} 的临时对象；先声明一个有名字的变量再用", node)
        return self.vec_init(t, node.init, lanes, fr, node)

    def resolve_decl(self, node, fr):
        """声明的类型；数组长度用到局部常量（const int N = 8; float a[N];）时在这里求值。"""
        try:
            return self.prog.resolve(node.type, node)
        except UnsupportedError:
            d = node.type
            if fr is None or not isinstance(d, c_ast.ArrayDecl) or d.dim is None:
                raise
            dims = []
            while isinstance(d, c_ast.ArrayDecl):
                dims.append(d.dim)
                d = d.type
            names = {n.name for dim in dims for n in _walk(dim) if isinstance(n, c_ast.ID)}
            if not names or not all(n in fr.const_names or fr.lookup(n) is None for n in names):
                raise
            t = self.prog.resolve(d, node)
            vol = not isinstance(t, T.CType)
            if vol:
                t = t.t
            for dim in reversed(dims):
                v = self.ev(dim, self.ALL, fr) if dim is not None else None
                if v is None or np.ndim(v.v) or not v.t.is_int or int(v.v) <= 0:
                    raise self.unsupported("数组长度不是正的整数常量", node)
                t = T.Arr(t, int(v.v), vol)
            return t

    def shared_var(self, node, fr=None):
        key = id(node)
        buf = self.shared.get(key)
        if buf is None:
            if node.init is not None:
                raise self.fail(CompileError, f"__shared__ 变量 {node.name} 不能带初始值（nvcc 报错）；请在内核里由线程写入，再 __syncthreads()",
                                f"initializer not allowed for __shared__ variable {node.name} (nvcc rejects it)", node)
            t = self.resolve_decl(node, fr)
            vol = False
            if not isinstance(t, T.CType):
                t, vol = t.t, True
            self.need_storable(_base_of(t), node)
            if t.is_array and t.n is None:
                if "extern" not in (node.storage or []):
                    raise self.unsupported("没有长度的 __shared__ 数组（动态共享内存要写 extern）", node)
                sc = T.scalar_of(t)
                if self.dyn_raw is None:
                    self.dyn_raw = np.zeros(self.nblocks * self.shared_bytes, np.uint8)
                per = self.shared_bytes // sc.size
                if self.shared_bytes % sc.size:
                    raise self.fail(UnsupportedError, f"shared_bytes={self.shared_bytes} 不是 {sc.name} 大小的整数倍",
                                    f"shared_bytes={self.shared_bytes} is not a multiple of sizeof({sc.name})", node)
                data = self.dyn_raw.view(sc.dtype)
                # 动态共享内存排在静态共享内存之后
                buf = Buffer("shared", node.name, data, sc, per, vol=t.vol, base=-1)
                if self.initcheck:
                    if self.dyn_init is None:
                        self.dyn_init = np.zeros(self.nblocks * self.shared_bytes, bool)
                    buf.init, buf.init_w = self.dyn_init, sc.size      # 按字节记录：几个 extern 数组共用
            else:
                if "extern" in (node.storage or []):
                    raise self.unsupported("extern __shared__ 必须是没有长度的数组", node)
                n = T.elems_of(t)
                sc = T.scalar_of(t)
                align = max(sc.size, 4)
                self.shared_off = (self.shared_off + align - 1) // align * align
                base = self.shared_off
                self.shared_off += n * sc.size
                if self.shared_off > STATIC_SHARED_LIMIT:
                    raise self.fail(CompileError, f"静态共享内存共 {self.shared_off} 字节，超过 nvcc 的上限 {STATIC_SHARED_LIMIT} 字节（48 KiB）；"
                                    "更大的共享内存要用 extern __shared__ 动态分配",
                                    f"static shared memory of {self.shared_off} bytes exceeds the {STATIC_SHARED_LIMIT}-byte (48 KiB) limit "
                                    "of nvcc; use dynamic (extern __shared__) memory", node)
                if self.shared_off + self.shared_bytes > self.shared_limit:
                    raise self.fail(CompileError, f"静态 {self.shared_off} 字节 + 动态 {self.shared_bytes} 字节共享内存，"
                                    f"超过每个线程块的上限 {self.shared_limit} 字节",
                                    f"static {self.shared_off} + dynamic {self.shared_bytes} bytes of shared memory exceed "
                                    f"the per-block maximum of {self.shared_limit} bytes", node)
                buf = Buffer("shared", node.name, np.zeros(self.nblocks * n, sc.dtype), sc, n,
                             vol=(t.vol if t.is_array else vol), base=base)
                if self.initcheck:
                    buf.init = np.zeros(self.nblocks * n, bool)
            if self.racecheck:
                if self.nblocks * buf.per > (1 << 26):
                    raise self.fail(
                        UnsupportedError,
                        f"共享数组 {node.name} 在 {self.nblocks} 个线程块上共 {self.nblocks * buf.per} 个字，竞争检查的记录太大；"
                        "请减少线程块数，或传 racecheck=False 关闭竞争检查",
                        "shared array too large for race tracking over this many blocks; pass racecheck=False", node)
                buf.tracker = SharedTracker(self.nblocks, buf.per)
                if self.csize > 1:
                    buf.ctracker = ClusterTracker(self.nblocks * buf.per)
            buf.scalar = not t.is_array
            buf.t = t
            self.shared[key] = buf
        return Var(buf.t, None, buf, mem=True)

    def s_if(self, node, lanes, fr):
        c = self.truth(self.ev(node.cond, lanes, fr))
        t, f = self.split(lanes, c, node)
        out_t = self.ex(node.iftrue, t, fr) if t.n else EMPTY
        if node.iffalse is not None and f.n:
            out_f = self.ex(node.iffalse, f, fr)
        else:
            out_f = f
        return self.union([out_t, out_f])

    def _loop(self, node, lanes, fr, cond, body, nxt, do_first):
        loop = _Loop()
        fr.loops.append(loop)
        exits = []
        cur = lanes
        it = 0
        spin = None        # 自旋检测：上一个检查点的 (mutations, spin_reads, 线程, 变量的值 或 None)
        pm, pr = self.mutations, self.spin_reads     # 这一趟（条件 + 循环体）开始时：有没有只读不写地等内存
        watching = False
        probe = None       # 死循环检测：第 2^k 圈（k >= 10）检查点的 (mutations, loads, 线程, 变量的值)
        try:
            first = do_first
            while cur.n:
                if not self.polled:
                    if self.spin_reads != pr and self.mutations == pm:
                        self.polled = True
                    pm, pr = self.mutations, self.spin_reads
                if not first and cond is not None:
                    c = self.truth(self.ev(cond, cur, fr))
                    t, f = self.split(cur, c, node)
                    if f.n:
                        exits.append(f)
                    cur = t
                    if not cur.n:
                        break
                first = False
                it += 1
                # 检查点：上一圈（条件 + 循环体）读过 volatile 或做过原子操作、没有改变任何内存、留在循环里的线程
                # 不变，并且这些线程的变量也与上一个检查点相同，那么下一圈与这一圈完全一样：这个调度下永远等下去
                if spin is not None and self.spin_reads != spin[1] and self.mutations == spin[0] and \
                        _same_lanes(spin[2], cur):
                    state = self._frame_state(fr, cur)
                    if spin[3] is not None and _same_state(state, spin[3]):
                        self.starved(node, cur)
                    if not watching:
                        watching = True
                        self.watch += 1
                else:
                    state = None
                    if watching:
                        watching = False
                        self.watch -= 1
                spin = (self.mutations, self.spin_reads, cur, state)
                # 死循环检测（不看读的种类）：第 2^k 圈与下一圈之间什么都没变（内存、线程、变量），它就永远转下去。
                # 只在 2 的幂的圈数上看一次，正常的长循环几乎不多花时间
                if probe is not None:
                    self.watch -= 1
                    if self.mutations == probe[0] and _same_lanes(probe[2], cur) and \
                            _same_state(self._frame_state(fr, cur), probe[3]):
                        self.endless(node, cur, it, self.loads != probe[1])
                    probe = None
                if it >= ENDLESS_CHECK_FROM and not it & (it - 1):
                    probe = (self.mutations, self.loads, cur, self._frame_state(fr, cur))
                    self.watch += 1       # 这一圈写进同样的值不算改变了内存
                self.steps += max(cur.n, MIN_STEPS_PER_ITERATION)
                if self.max_steps is not None and self.steps > self.max_steps:
                    raise self.fail(
                        LoopLimitError,
                        f"这次启动的工作量超过预算 {self.max_steps:,} 个线程步（线程步 = 活跃线程数 x 循环迭代次数，"
                        f"每次迭代至少计 {MIN_STEPS_PER_ITERATION}）：这个循环已迭代 {it:,} 次，还有 {cur.n:,} 个线程没有退出"
                        f"（死循环或自旋等待？确实需要更多时请传入更大的 max_lane_steps）",
                        f"the launch exceeded its work budget of {self.max_steps:,} lane-steps (active threads x loop "
                        f"iterations): this loop ran {it:,} iterations with {cur.n:,} threads still inside "
                        f"(endless loop or spin-wait? pass a larger max_lane_steps if intended)", node,
                        lane=self.ids(cur)[0])
                if self.max_iter is not None and it > self.max_iter:
                    raise self.fail(
                        LoopLimitError, f"循环超过 {self.max_iter} 次迭代仍未结束（死循环？确实需要更多次时请传入更大的 max_loop_iterations）",
                        f"loop did not finish after {self.max_iter} iterations (infinite loop? pass a larger max_loop_iterations if intended)", node,
                        lane=self.ids(cur)[0])
                out = self.ex(body, cur, fr) if body is not None else cur
                cur = self.union([out] + loop.cont)
                loop.cont = []
                if nxt is not None and cur.n:
                    self.ev(nxt, cur, fr)
        finally:
            fr.loops.pop()
            if not self.polled and self.spin_reads != pr and self.mutations == pm:
                self.polled = True
            if watching:
                self.watch -= 1
            if probe is not None:
                self.watch -= 1
        return self.union(exits + loop.brk)

    def _frame_state(self, fr, lanes):
        """这一帧里寄存器变量在这些线程上的值（指针另记它指向的数组）：自旋检测比较前后两圈用。"""
        out = []
        for scope in fr.scopes:
            for var in scope.values():
                if var.mem:
                    continue
                v = self.read_var(var, lanes)
                out.append((id(var), id(var.buf), np.array(v, copy=True) if not isinstance(v, tuple) else
                            tuple(np.array(x.v if isinstance(x, Val) else x, copy=True) for x in v)))
        return out

    def endless(self, node, cur, it, loads):
        """一个循环转一圈什么都没变，又没有 volatile 读或原子操作（那种由 starved 处理）：死循环，或者用普通的读等
        别的线程写的值。"""
        lane = int(self.ids(cur)[0])
        if loads:
            zh = (f"这个循环已经转了 {it:,} 圈，最后一圈读了内存，可是内存和还在循环里的 {cur.n:,} 个线程的变量都没有变，"
                  f"照这样会永远转下去。如果它在等别的线程（或别的线程块）写一个值，要用 volatile 读或原子操作"
                  f"（atomicAdd(p, 0)、atomicCAS）来读：普通的读，nvcc 可以只读一次、把值留在寄存器里，GPU 上就永远等下去；"
                  f"别的线程同时在写，这样读也是数据竞争。用了 volatile 或原子操作，模拟器才把它当作线程块之间的等待"
                  f"（会换一种调度重来）")
            en = (f"this loop ran {it:,} iterations and its last one read memory, yet neither memory nor the variables of "
                  f"the {cur.n:,} threads still inside changed: it would run forever. To wait for a value another thread "
                  f"or block writes, read it with a volatile load or an atomic (atomicAdd(p, 0), atomicCAS): nvcc may "
                  f"load a plain read once and keep it in a register, so the GPU waits forever")
        else:
            zh = (f"死循环：这个循环已经转了 {it:,} 圈，最后一圈里内存和还在循环里的 {cur.n:,} 个线程的变量都没有变，"
                  f"照这样会永远转下去（检查循环条件里的变量有没有在循环里更新）")
            en = (f"endless loop: after {it:,} iterations, the last one changed neither memory nor the variables of the "
                  f"{cur.n:,} threads still inside (is the loop variable updated?)")
        err = self.fail(SpinWaitError if loads else LoopLimitError, zh, en, node, lane=lane)
        if loads:
            err.schedule = self.schedule
            err.plain_load = True
        raise err

    def starved(self, node, cur):
        """一个等内存的循环再也出不来（见 _loop 的检查点）。"""
        ids = self.ids(cur)
        lane = int(ids[0])
        blocks = np.unique(self.blk[ids])
        if self.auto:
            raise Starved(node, lane, blocks)
        raise self.spin_error(node, lane, blocks, self.schedule, other=self.after_grid)

    def spin_error(self, node, lane, blocks, schedule, other=None):
        """SpinWaitError。schedule：这次的调度；other：schedule="auto" 时整网格执行等不到的那一处 (行, 线程块, 线程)
        （这时三种调度都等不到）；schedule="order"：按编号倒序逐块执行等不到、正序等得到，"order-reversed" 反过来
        （都是依赖线程块开始的顺序）。"""
        nb = len(blocks)
        who = "这个线程" + (f"（共有 {nb} 个线程块的线程在这里等）" if nb > 1 else "")
        who_en = "this thread" + (f" ({nb} blocks wait here)" if nb > 1 else "")
        zh = (f"{who}在这个循环里等内存里的值（volatile 读或原子操作），可是转了一圈，内存和这些线程的变量都没有变，"
              f"照这样会永远等下去。")
        en = (f"{who_en} waits in this loop for a value in memory (volatile load or atomic), but a whole iteration "
              f"changed neither memory nor these threads' variables: it would wait forever. ")
        grid_zh = ("整个网格一起执行（schedule=\"grid\"）时，已经离开循环的线程（包括别的线程块）停在循环后面，"
                   "等循环里的线程都出来才往下走，它们在循环之后才写的值就等不到")
        grid_en = ("under schedule=\"grid\" (the whole grid in step) threads that left the loop wait after it until "
                   "every thread has left, so a value they write only after the loop never comes")
        blocks_zh = ("一块接一块执行（schedule=\"blocks\" 按编号从小到大、\"blocks-reversed\" 从大到小，一次一个簇）时，"
                     "等的值只能来自已经执行完的线程块：后面的还没有开始，本块里停在别处的线程也不会再往前走")
        blocks_en = ("under schedule=\"blocks\" / \"blocks-reversed\" (one block, or cluster, at a time in increasing / "
                     "decreasing index order) the value can only come from blocks that already finished")
        if schedule in ("order", "order-reversed"):
            up = schedule == "order"
            good, bad = ("从小到大", "从大到小") if up else ("从大到小", "从小到大")
            bad_s = "blocks-reversed" if up else "blocks"
            zh = (f"{who}在这个循环里等的值，只有线程块按编号{good}开始执行时才等得到：按编号{bad}一块接一块执行"
                  f"（schedule=\"{bad_s}\"）时，它等的是还没有开始的线程块写的值，照这样会永远等下去。"
                  f"CUDA 不保证线程块开始的顺序（线程块必须能以任意顺序执行）"
                  + ("；GPU 通常按编号发出线程块，所以这个错误在 GPU 上多半看不出来，直到别的内核占着 SM、或者块多得不能"
                     "同时驻留" if up else "") +
                  f"。改法：每块开始时用 atomicAdd 从全局计数器领一个号（票号），用它代替 blockIdx 决定这一块处理哪一份、"
                  f"等谁：号比它小的块一定已经开始了。确实要依赖这个顺序时，传 schedule=\"{'blocks' if up else 'blocks-reversed'}\"")
            en = (f"{who_en} waits for a value that only comes if blocks start in {'increasing' if up else 'decreasing'} "
                  f"index order: run one at a time in the other order (schedule=\"{bad_s}\") it waits for a block that "
                  f"has not started. CUDA does not guarantee the order in which blocks start"
                  + ("; GPUs usually issue them in index order, so this rarely shows on a GPU" if up else "") +
                  f". Fix: take a ticket (atomicAdd on a global counter) when the block starts and use it instead of "
                  f"blockIdx: every lower ticket belongs to a block that already started")
        elif schedule == "waves":
            fit, occ = self.resident_blocks()
            zh = (f"{who}在这个循环里等的值要等网格里另一部分线程块来写，可是这个网格有 {self.nblocks} 个线程块，sm_90"
                  f"（132 个 SM）上同时驻留的至多 {fit} 个（每个 SM {occ['blocks']} 个，受{_LIMIT_ZH[occ['limit']]}限制，"
                  f"寄存器未计入，GPU 上可能更少）。按编号一波 {fit} 块执行（schedule=\"waves\"）时，第一波在这里等、不会结束，"
                  f"后面的块就永远开始不了：GPU 上这个内核会卡住（手写的网格屏障、等全部块到齐的计数器都是这样）。CUDA 只在"
                  f"协作启动（cudaLaunchCooperativeKernel）时保证整个网格同时驻留。改法：网格不超过同时驻留的块数，用网格步长"
                  f"循环处理其余的数据（gpu 模式下按 cudaOccupancyMaxActiveBlocksPerMultiprocessor 定块数），或者用"
                  f"协作启动与 grid.sync()")
            en = (f"{who_en} waits for a value that other blocks of the grid write, but the grid has {self.nblocks} blocks "
                  f"and at most {fit} can be resident at once on sm_90 (132 SMs x {occ['blocks']}, limited by "
                  f"{occ['limit']}; registers not counted). Run in waves of {fit} blocks in index order (schedule=\"waves\"), "
                  f"the first wave waits here forever and the rest never start: on a GPU this kernel hangs. Only a "
                  f"cooperative launch guarantees that the whole grid is resident: size the grid to the resident blocks "
                  f"and loop over the data, or use cudaLaunchCooperativeKernel with grid.sync()")
        elif schedule == "grid":
            zh += (grid_zh + "。等的是编号更小的线程块按顺序发布的值（链式的前缀和、按号轮流累加）时，用默认的 "
                   "schedule=\"auto\"")
            en += grid_en.capitalize() + ". If the value comes from earlier blocks in order, use \"auto\""
        elif other is None:
            zh += blocks_zh + "。每一块都要等别的块时（手写的网格屏障），用 schedule=\"grid\" 或默认的 schedule=\"auto\""
            en += blocks_en.capitalize() + ". If every block waits for every other (a hand-written grid barrier), use \"grid\" or \"auto\""
        else:
            ln, ob, ot = other
            zh += (f"几种调度都试过了：{grid_zh}（线程块 {ob} 的线程 {ot} 停在第 {ln} 行）；{blocks_zh}（按编号从小到大时"
                   f"停在这里，从大到小也等不到）。所以要等的值要么没有线程会写，要么来自一个自己也在等本块之后才发布的线程块："
                   f"GPU 上这样的内核会卡住，或者只在这些块恰好同时驻留、恰好按某种顺序执行时才不卡。还有一种可能：等的是"
                   f"同一线程块里停在别处的线程（例如一个 warp 等另一个 warp 在它自己的循环之后才写的标志），GPU 上各 warp "
                   f"各自前进，等得到；模拟器让同一线程块的线程一起前进，不模拟这种等待")
            en += (f"Every schedule was tried: {grid_en} (thread {ot} of block {ob} stuck at line {ln}); {blocks_en} "
                   f"(here, in increasing order). So no thread writes the value, or it comes from a block that itself "
                   f"waits for a later one: on a GPU this kernel hangs, or works only by luck of residency and order. Or "
                   f"it comes from threads of the same block parked elsewhere (one warp waiting for a flag another warp "
                   f"writes after its own loop): GPU warps progress independently, the simulator does not model that")
        err = self.fail(SpinWaitError, zh, en, node, lane=lane)
        err.schedule = {"order": "blocks-reversed", "order-reversed": "blocks"}.get(schedule, schedule)
        err.order_dependent = schedule in ("order", "order-reversed")
        return err

    def s_for(self, node, lanes, fr):
        fr.scopes.append({})
        try:
            if node.init is not None:
                self.ex(node.init, lanes, fr)
            return self._loop(node, lanes, fr, node.cond, node.stmt, node.next, False)
        finally:
            fr.scopes.pop()

    def s_while(self, node, lanes, fr):
        return self._loop(node, lanes, fr, node.cond, node.stmt, None, False)

    def s_dowhile(self, node, lanes, fr):
        return self._loop(node, lanes, fr, node.cond, node.stmt, None, True)

    def s_break(self, node, lanes, fr):
        if not fr.loops:
            raise self.unsupported("循环之外的 break", node)
        fr.loops[-1].brk.append(lanes)
        return EMPTY

    def s_continue(self, node, lanes, fr):
        if not fr.loops:
            raise self.unsupported("循环之外的 continue", node)
        fr.loops[-1].cont.append(lanes)
        return EMPTY

    def s_return(self, node, lanes, fr):
        if node.expr is not None:
            rt = fr.func.ret_type
            if rt.is_void:
                raise self.unsupported("void 函数返回值", node)
            if isinstance(node.expr, c_ast.InitList) and rt.is_vec and rt.flat:     # return {m, d};
                v = self.vec_init(rt, node.expr, lanes, fr, node)
            else:
                v = self.conv(self.ev(node.expr, lanes, fr), rt, node)
            if fr.ret is None:
                fr.ret = self.new_var(rt)
            self.write_var(fr.ret, lanes, v, node)
        return EMPTY

    # ------------------------------------------------------------ 变量
    def new_var(self, t):
        """寄存器变量；向量类型（float4 ...）与成员都是标量的结构体是每个成员一个标量变量；有数组或嵌套结构体
        成员的结构体放在每个线程一份的局部内存里（成员可以按下标访问）。"""
        if t.is_vec:
            if not t.flat:
                self.need_storable(t, None)
                buf = Buffer("local", t.name, np.zeros(self.L * t.units, t.elem.dtype), t.elem, t.units)
                buf.t = t
                if self.initcheck:
                    buf.init = np.zeros(self.L * t.units, bool)
                return Var(t, None, buf, mem=True)
            return Var(t, [self.new_var(e) for e in t.elems])
        return Var(t, t.dtype.type(0) if t.is_scalar else np.int64(0))

    def need_storable(self, t, node):
        """放进内存的结构体：叶子必须是大小相同的标量（含指针、成员大小不同的结构体只能放在寄存器里）。"""
        if t.is_vec and not t.storable:
            raise self.unsupported(f"{t.why}：不能放进内存（数组、指针指向的对象、共享内存、取地址）", node)

    def spill(self, var, name, node=None):
        """&x：把寄存器变量 x 搬进每个线程一份的局部内存，之后对 x 的读写都经过这块内存。"""
        t = var.t
        self.need_storable(t, node)
        sc = T.scalar_of(t)
        n = T.elems_of(t)
        if t.is_ptr or t.is_fnptr or t.is_vec and not t.uniform:
            # 指针、按字节布局的结构体：按 C 的布局写进新的局部内存（指针存成句柄）
            val = Val(t, tuple(Val(c.t, c.data, c.buf) if c.t.is_ptr else c.data for c in var.data) if t.is_vec
                      else var.data, var.buf)
            buf = Buffer("local", name, np.zeros(self.L * n, sc.dtype), sc, n)
            buf.t = t
            self.store(Val(T.Ptr(t), np.int64(0), buf), val, self.ALL, node)
            var.data, var.buf, var.mem, var.owned = None, buf, True, False
            return
        cur = [c.data for c in var.data] if t.is_vec else [var.data]
        data = np.zeros(self.L * n, sc.dtype)
        view = data.reshape(self.L, n)
        leaf = t.elems if t.is_vec else (t,)
        for j, d in enumerate(cur):
            d = np.broadcast_to(np.asarray(d, leaf[j].dtype), (self.L,))
            view[:, j] = d if leaf[j].dtype == sc.dtype else d.view(sc.dtype)    # 成员类型不同：按位存放
        buf = Buffer("local", name, data, sc, n)
        buf.t = t
        var.data, var.buf, var.mem, var.owned = None, buf, True, False

    def var_value(self, var, lanes):
        """变量的值（放在内存里的变量经过一次读）。"""
        if var.mem:
            off = np.int64(0) if var.data is None else self.g(var.data, lanes)
            return self.load(Val(T.Ptr(var.t), off, var.buf), lanes, None).v
        return self.read_var(var, lanes)

    def read_var(self, var, lanes):
        """寄存器变量的值；内存里的变量（data 是每个线程的偏移）返回偏移。结构体的值是叶子的元组，指针叶子
        是带着数组的 Val。"""
        if var.t.is_vec and not var.mem:
            return tuple(Val(c.t, self.read_var(c, lanes), c.buf) if c.t.is_ptr else self.read_var(c, lanes)
                         for c in var.data)
        d = var.data
        if np.ndim(d) == 0:
            return d
        if lanes.idx is None:
            var.owned = False
            return d
        return d[lanes.idx]

    def write_var(self, var, lanes, val, node):
        if var.mem:
            off = np.int64(0) if var.data is None else self.g(var.data, lanes)
            self.store(Val(T.Ptr(var.t), off, var.buf), val, lanes, node)
            return
        if var.t.is_vec:
            for c, x in zip(var.data, val.v):
                self.write_var(c, lanes, x if isinstance(x, Val) else Val(c.t, x), node)
            return
        if var.t.is_ptr:
            if var.buf is not None and val.buf is not var.buf and lanes.n != self.L:
                raise self.unsupported("同一个指针变量在不同线程中指向不同的数组", node)
            var.buf = val.buf
            v = val.v
        else:
            v = val.v
        if lanes.idx is None:
            var.data = v
            var.owned = False
            return
        d = var.data
        if np.ndim(d) == 0:
            nd = np.empty(self.L, np.int64 if var.t.is_ptr else var.t.dtype)
            nd.fill(d)
            var.data = d = nd
            var.owned = True
        elif not var.owned:
            var.data = d = d.copy()
            var.owned = True
        d[lanes.idx] = v

    # ------------------------------------------------------------ 表达式
    def ev(self, node, lanes, fr):
        h = self.E.get(type(node).__name__)
        if h is None:
            name = type(node).__name__
            raise self.unsupported(_NODE_NAMES.get(name, name), node)
        return h(node, lanes, fr)

    def e_const(self, node, lanes, fr):
        cache = self.consts
        c = cache.get(id(node))
        if c is None:
            t, v = parse_constant(node)
            c = Val(t, t.dtype.type(v))
            cache[id(node)] = c
        return c

    def e_exprlist(self, node, lanes, fr):
        v = None
        for e in node.exprs:
            v = self.ev(e, lanes, fr)
        return v

    def e_id(self, node, lanes, fr):
        var = fr.lookup(node.name)
        if var is None:
            if node.name == "warpSize":
                return Val(T.INT, np.int32(32))
            if node.name in self.prog.enum_consts:
                return Val(T.INT, np.int32(self.prog.enum_consts[node.name]))
            if node.name in self.prog.fn_ids:       # 函数名当作函数指针
                return Val(T.FNPTR, np.int64(self.prog.fn_ids[node.name]))
            var = self.global_shared(node.name)
            if var is None:
                raise self.unsupported(f"未声明的标识符 {node.name}", node)
        if var.mem:
            buf = var.buf
            if var.t.is_array:   # 数组退化为指针
                return Val(T.Ptr(var.t.elem, var.t.vol), np.int64(0), buf)
            off = np.int64(0) if var.data is None else self.read_var(var, lanes)   # 引用：每个线程的偏移
            return self.load(Val(T.Ptr(var.t, buf.vol), off, buf), lanes, node)
        return Val(var.t, self.read_var(var, lanes), var.buf)

    def global_shared(self, name):
        for d in self.prog.shared_decls:
            if d.name == name:
                return self.shared_var(d)
        if name in self.prog.file_vars:
            return self.file_var(name)
        return None

    def file_var(self, name):
        """文件作用域的 __constant__（只读）与 __device__ 变量：整个网格共用一份，初值来自初始化列表、
        启动时的 symbols（相当于 cudaMemcpyToSymbol），否则为 0。"""
        buf = self.file_bufs.get(name)
        if buf is None:
            node, readonly = self.prog.file_vars[name]
            if name in self.prog.refused_file_vars:
                raise self.unsupported(self.prog.refused_file_vars[name], node)
            t = self.prog.resolve(node.type, node)
            vol = not isinstance(t, T.CType)
            if vol:
                t = t.t
            self.need_storable(_base_of(t), node)
            sc = T.scalar_of(t)
            n = T.elems_of(t)
            data = np.zeros(n, sc.dtype)
            if node.init is not None:
                exprs = node.init.exprs if isinstance(node.init, c_ast.InitList) else [node.init]
                if t.is_array and t.elem.is_array or len(exprs) > n:
                    raise self.unsupported(f"{name} 的初始化列表（多维数组或元素过多）", node)
                fr = Frame(None)
                for k, e in enumerate(exprs):
                    v = self.ev(e, self.ALL, fr)
                    if np.ndim(v.v):
                        raise self.unsupported(f"{name} 的初值不是常量表达式", node)
                    if sc is T.PTRWORD:       # 指针变量的初值（0 或 &数组[i]）存成句柄
                        v = self.conv(v, _base_of(t), node)
                        data[k] = self._ptr_encode(v, _base_of(t))
                        continue
                    data[k] = self.conv(v, sc, node).v
            if name in self.symbols:
                src = self.symbols[name]
                data[:src.size] = src
            buf = Buffer("global", name, data, sc, n, vol=vol or (t.is_array and t.vol))
            buf.constant = readonly
            buf.scalar = not t.is_array
            buf.t = t
            if self.global_racecheck and not readonly:
                buf.gtracker = GlobalTracker(n)
            self.file_bufs[name] = buf
        return Var(buf.t, None, buf, mem=True)

    def builtin_vec(self, name, f):
        key = (name, f)
        v = self._builtin.get(key)
        if v is None:
            k = "xyz".index(f)
            gx, gy, gz = self.grid
            bx, by, bz = self.block
            if name == "blockDim":
                v = np.uint32(self.block[k])
            elif name == "gridDim":
                v = np.uint32(self.grid[k])
            elif name == "threadIdx":
                if self.block[k] == 1:
                    v = np.uint32(0)
                else:
                    t = self.tlin
                    v = (t % bx if k == 0 else (t // bx) % by if k == 1 else t // (bx * by)).astype(np.uint32)
            else:
                if self.grid[k] == 1:
                    v = np.uint32(0)
                else:
                    b = self.blk
                    v = (b % gx if k == 0 else (b // gx) % gy if k == 1 else b // (gx * gy)).astype(np.uint32)
            self._builtin[key] = v
        return v

    def e_structref(self, node, lanes, fr):
        if isinstance(node.name, c_ast.ID) and node.name.name in _BUILTIN_VARS and node.type == ".":
            f = node.field.name
            if f not in ("x", "y", "z"):
                raise self.unsupported(f"{node.name.name}.{f}", node)
            v = self.builtin_vec(node.name.name, f)
            return Val(T.UINT, v if np.ndim(v) == 0 else self.g(v, lanes))
        kind, x = self.vec_member(node, lanes, fr)
        if kind == "reg":
            return Val(x.t, self.read_var(x, lanes), x.buf)
        if kind == "mem":
            if x.t.base.is_array:      # 数组成员退化为指针
                return Val(T.Ptr(x.t.base.elem, x.t.vol, x.t.const), x.v, x.buf)
            return self.load(x, lanes, node)
        return x

    def vec_member(self, node, lanes, fr):
        """向量类型的分量 v.x、p[i].y、p->z：('reg', 分量变量)、('mem', 分量指针) 或 ('val', 值)。"""
        f = node.field.name
        base = node.name
        if node.type == "->":
            p = self.ev(base, lanes, fr)
            if not (p.t.is_ptr and p.t.base.is_vec):
                raise self.unsupported("结构体成员访问 struct member access (->)", node)
            vt, kind, x = p.t.base, "mem", p
        elif isinstance(base, (c_ast.ID, c_ast.ArrayRef, c_ast.StructRef)) or \
                (isinstance(base, c_ast.UnaryOp) and base.op == "*"):
            kind, x = self.lvalue(base, lanes, fr)
            vt = x.t if kind == "reg" else x.t.base
        else:
            x = self.ev(base, lanes, fr)
            kind, vt = "val", x.t
        if not vt.is_vec:
            raise self.unsupported("结构体成员访问 struct member access", node)
        if f not in vt.members:
            raise self.fail(CompileError, f"{vt.name} 没有成员 .{f}（nvcc 报错）", f'class "{vt.name}" has no member "{f}" '
                            "(nvcc rejects it)", node)
        comp, mt = vt.members[f]
        if kind == "reg":
            if mt.is_vec:                  # 嵌套的结构体：共用叶子变量的视图
                return "reg", Var(mt, x.data[comp:comp + mt.n])
            return "reg", x.data[comp]
        if kind == "mem":
            u = x.buf.elem.size if x.buf is not None else vt.elem.size
            if vt.uniform:
                off = comp if u == vt.elem.size else comp * vt.elem.size // u
            else:
                off = vt.moff[f] // u
            return "mem", Val(T.Ptr(mt, x.t.vol, x.t.const), x.v + off, x.buf)
        if not mt.is_scalar:
            if mt.is_vec:
                return "val", Val(mt, tuple(x.v[comp:comp + mt.n]))
            if mt.is_ptr and isinstance(x.v[comp], Val):
                return "val", x.v[comp]
            if not mt.is_fnptr:
                raise self.unsupported(f"临时结构体值的数组成员 .{f}", node)
        return "val", Val(mt, x.v[comp])

    def truth(self, val):
        if val.t.is_ptr:
            if val.buf is None:
                return np.bool_(False)        # 空指针
            return np.bool_(True) if np.ndim(val.v) == 0 else np.ones(np.shape(val.v), bool)
        v = val.v
        if v.dtype == np.bool_ if isinstance(v, np.ndarray) else isinstance(v, np.bool_):
            return v
        return v != 0

    def conv(self, val, t, node):
        """赋值转换 / conversion as if by assignment."""
        if t.is_fnptr or val.t.is_fnptr:
            if t.is_fnptr and val.t.is_fnptr:
                return Val(t, val.v)
            if t.is_fnptr and np.ndim(val.v) == 0 and not val.t.is_ptr and val.v == 0:
                return Val(t, np.int64(0))
            raise self.unsupported("函数指针与其他类型之间的转换", node)
        if t.is_vec or val.t.is_vec:
            if val.t is t:
                return val
            raise self.unsupported(f"{val.t!r} 与 {t!r} 之间的转换", node)
        if t.is_ptr:
            if not val.t.is_ptr:
                if np.ndim(val.v) == 0 and int(val.v) == 0:
                    return Val(t, np.int64(0), None)
                raise self.unsupported("把整数赋给指针", node)
            if val.buf is None:
                return Val(t, val.v, None)
            return self.retarget(Val(t, val.v, val.buf))
        if val.t.is_ptr:
            if t.is_scalar and t.is_int and t.bits == 64 and val.buf is not None and val.buf.kind == "global":
                # 全局数组的指针转成 64 位整数：CPU 上这块内存的真实地址（用来检查对齐，如 (size_t)p % 16）
                base = np.uint64(val.buf.data.ctypes.data)
                return Val(t, T.cast(base + np.asarray(val.v).astype(np.uint64) * np.uint64(val.buf.elem.size), t))
            raise self.unsupported("把指针转换为整数（只支持全局数组的指针转成 64 位整数）", node)
        if t.is_void:
            return val
        return Val(t, T.cast(val.v, t))

    def retarget(self, p):
        """指针换了指向的类型之后选存储单元：新类型比单元小（(char*)ints）时换到按字节的视图；
        从字节视图转回元素类型、地址对齐时回到原来的数组（快速路径）。"""
        buf = p.buf
        u = buf.elem.size
        need = T.unit_size(p.t.base)
        if need % u == 0:
            par = buf.parent
            if par is not None and need % par.elem.size == 0:
                r = par.elem.size
                v = np.asarray(p.v)
                if not np.any(v % r):
                    v = v // r
                    return Val(p.t, v[()] if v.ndim == 0 else v, par)
            return p
        return Val(p.t, p.v * u, buf.byte_view())

    def e_cast(self, node, lanes, fr):
        t = self.prog.resolve(node.to_type, node)
        if not isinstance(t, T.CType):
            t = t.t
        v = self.ev(node.expr, lanes, fr)
        if t.is_void:
            return Val(T.VOID, np.int32(0))
        return self.conv(v, t, node)

    def arith(self, op, a, b, node, lanes):
        if a.t.is_fnptr or b.t.is_fnptr:
            raise self.unsupported(f"函数指针的运算 {op}", node)
        if a.t.is_vec or b.t.is_vec:
            vt = a.t if a.t.is_vec else b.t
            raise self.fail(CompileError, f"向量类型的运算 {op}：CUDA 没有为 {vt!r} 定义运算符（nvcc 报错），请逐个分量计算",
                            f'no operator "{op}" matches these operands ({vt!r}): nvcc rejects it; compute component by component',
                            node)
        if a.t.is_ptr or b.t.is_ptr:
            return self.ptr_arith(op, a, b, node)
        if op in ("<<", ">>"):
            if not (a.t.is_int and b.t.is_int):
                raise self.unsupported(f"浮点数的移位 {op}", node)
            t = T.promote(a.t)
            x = T.cast(a.v, t)
            # 移位位数为负或不小于位宽在 C 里是未定义行为；这里按 GPU 的 shl / shr 指令：
            # 位数按无符号数钳到位宽，左移与无符号右移得 0，有符号右移得全符号位（0 或 -1）
            cnt = np.asarray(b.v).astype(np.int64)
            over = (cnt < 0) | (cnt >= t.bits)
            y = T.cast(np.where(over, 0, cnt), t)
            r = np.left_shift(x, y) if op == "<<" else np.right_shift(x, y)
            if np.any(over):
                if op == "<<" or t.kind == "u":
                    fill = np.zeros_like(r)
                else:
                    fill = np.where(np.asarray(x) < 0, t.dtype.type(-1), t.dtype.type(0))
                r = np.where(over, fill, r).astype(t.dtype)
                r = r[()] if r.ndim == 0 else r
            return Val(t, r)
        if op in ("<", ">", "<=", ">=", "==", "!="):
            t = T.common(a.t, b.t)
            x, y = T.cast(a.v, t), T.cast(b.v, t)
            r = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal,
                 "==": np.equal, "!=": np.not_equal}[op](x, y)
            return Val(T.BOOL, r)
        t = T.common(a.t, b.t)
        x, y = T.cast(a.v, t), T.cast(b.v, t)
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif op in ("/", "%"):
            if t.is_int:
                z = y == 0
                if np.any(z):
                    i = int(np.flatnonzero(np.broadcast_to(z, (lanes.n,)))[0]) if lanes.n else 0
                    raise self.fail(SimtRuntimeError, "整数除以零", "integer division by zero", node,
                                    lane=self.ids(lanes)[i] if lanes.n else None)
                r = T.idiv(x, y) if op == "/" else T.imod(x, y)
            else:
                if op == "%":
                    raise self.unsupported("浮点数取余 %（请用 fmodf）", node)
                r = x / y
        elif op in ("&", "|", "^"):
            if not t.is_int:
                raise self.unsupported(f"浮点数的位运算 {op}", node)
            r = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op](x, y)
        else:
            raise self.unsupported(f"运算符 {op}", node)
        if isinstance(r, np.ndarray):
            if r.dtype != t.dtype:
                r = r.astype(t.dtype)
        elif not isinstance(r, np.generic) or r.dtype != t.dtype:
            r = t.dtype.type(r)
        return Val(t, r)

    def ptr_arith(self, op, a, b, node):
        if a.t.is_ptr and b.t.is_ptr:
            if a.buf is not b.buf and op in ("==", "!=") and (a.buf is None or b.buf is None):
                same = a.buf is None and b.buf is None        # 与空指针比较
                return Val(T.BOOL, np.bool_(same if op == "==" else not same))
            if a.buf is not b.buf and a.buf is not None and b.buf is not None and \
                    (a.buf.parent or a.buf) is (b.buf.parent or b.buf):
                # 同一块内存的字节视图与元素视图：都换成字节偏移
                a = Val(a.t, a.v * a.buf.elem.size, a.buf.byte_view())
                b = Val(b.t, b.v * b.buf.elem.size, a.buf)
            if op in ("<", ">", "<=", ">=", "==", "!="):
                if a.buf is not b.buf:
                    raise self.unsupported("比较指向不同数组的指针", node)
                r = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal,
                     "==": np.equal, "!=": np.not_equal}[op](a.v, b.v)
                return Val(T.BOOL, r)
            if op == "-":
                if a.buf is not b.buf:
                    raise self.unsupported("相减的指针指向不同的数组", node)
                return Val(T.LONG, (a.v - b.v) // self.stride(a))
            raise self.unsupported(f"指针运算 {op}", node)
        if b.t.is_ptr:
            if op != "+":
                raise self.unsupported(f"指针运算 {op}", node)
            a, b = b, a
        if op not in ("+", "-") or not b.t.is_int:
            raise self.unsupported(f"指针运算 {op}", node)
        k = np.asarray(b.v).astype(np.int64)
        k = k[()] if k.ndim == 0 else k
        st = self.stride(a)
        off = a.v + k * st if op == "+" else a.v - k * st
        return Val(a.t, off, a.buf)

    def stride(self, p):
        """指针加一移动的存储单元个数：指向的类型的字节数 / 单元的字节数。"""
        if p.buf is None:
            return p.t.stride
        return p.t.base.size // p.buf.elem.size or 1

    def e_binary(self, node, lanes, fr):
        op = node.op
        if op in ("&&", "||"):
            a = self.truth(self.ev(node.left, lanes, fr))
            want = op == "&&"
            if np.ndim(a) == 0:
                if bool(a) != want:
                    return Val(T.BOOL, np.bool_(not want))
                return Val(T.BOOL, self.truth(self.ev(node.right, lanes, fr)))
            m = a if want else ~a
            sl = self.sub(lanes, m)
            if sl.n == 0:
                return Val(T.BOOL, a)
            r = self.truth(self.ev(node.right, sl, fr))
            if sl.n == lanes.n:
                return Val(T.BOOL, r)
            out = a.copy()
            out[m] = r
            return Val(T.BOOL, out)
        a = self.ev(node.left, lanes, fr)
        b = self.ev(node.right, lanes, fr)
        return self.arith(op, a, b, node, lanes)

    def e_ternary(self, node, lanes, fr):
        c = self.truth(self.ev(node.cond, lanes, fr))
        if np.ndim(c) == 0:
            return self.ev(node.iftrue if c else node.iffalse, lanes, fr)
        t = self.sub(lanes, c)
        if t.n == lanes.n:
            return self.ev(node.iftrue, lanes, fr)
        if t.n == 0:
            return self.ev(node.iffalse, lanes, fr)
        f = self.sub(lanes, ~c)
        a = self.ev(node.iftrue, t, fr)
        b = self.ev(node.iffalse, f, fr)
        if a.t.is_ptr or b.t.is_ptr:
            if not (a.t.is_ptr and b.t.is_ptr and a.buf is b.buf):
                raise self.unsupported("?: 的两个分支指向不同的数组", node)
            rt = a.t
            out = np.empty(lanes.n, np.int64)
        elif a.t.is_fnptr or b.t.is_fnptr or a.t.is_vec or b.t.is_vec:
            if a.t is not b.t:
                raise self.unsupported(f"?: 的两个分支类型不同（{a.t!r} 与 {b.t!r}）", node)
            if a.t.is_vec:
                return Val(a.t, tuple(_merge(c, x, y, lanes.n) for x, y in zip(a.v, b.v)))
            rt = a.t
            out = np.empty(lanes.n, np.int64)
        else:
            rt = T.common(a.t, b.t)
            out = np.empty(lanes.n, rt.dtype)
        out[c] = a.v if rt.is_ptr else T.cast(a.v, rt)
        out[~c] = b.v if rt.is_ptr else T.cast(b.v, rt)
        return Val(rt, out, a.buf)

    # ------------------------------------------------------------ 左值与内存
    def lvalue(self, node, lanes, fr):
        """返回 ('reg', Var) 或 ('mem', 指针 Val)。"""
        k = type(node).__name__
        if k == "ID":
            var = fr.lookup(node.name) or self.global_shared(node.name)
            if var is None:
                raise self.unsupported(f"未声明的标识符 {node.name}", node)
            if var.mem:
                if var.t.is_array:
                    raise self.unsupported("给数组整体赋值", node)
                off = np.int64(0) if var.data is None else self.read_var(var, lanes)
                return "mem", Val(T.Ptr(var.t, var.buf.vol), off, var.buf)
            return "reg", var
        if k == "ArrayRef":
            p = self.elem_ptr(node, lanes, fr)
            if p.t.base.is_array:
                raise self.unsupported("给数组整体赋值", node)
            return "mem", p
        if k == "UnaryOp" and node.op == "*":
            p = self.ev(node.expr, lanes, fr)
            if not p.t.is_ptr:
                raise self.unsupported("对非指针解引用", node)
            return "mem", p
        if k == "StructRef" and isinstance(node.name, c_ast.ID) and node.name.name in _BUILTIN_VARS:
            raise self.unsupported(f"给只读的 {node.name.name} 赋值", node)
        if k == "StructRef":
            kind, x = self.vec_member(node, lanes, fr)
            if kind == "val":
                raise self.unsupported("给临时值的分量赋值", node)
            return kind, x
        raise self.unsupported(f"左值 {k}", node)

    def elem_ptr(self, node, lanes, fr):
        base = self.ev(node.name, lanes, fr)
        i = self.ev(node.subscript, lanes, fr)
        if not base.t.is_ptr and i.t.is_ptr:
            base, i = i, base
        if not base.t.is_ptr:
            raise self.unsupported("对非数组/指针取下标", node)
        if not i.t.is_int:
            raise self.unsupported("非整数下标", node)
        return self.ptr_arith("+", base, i, node)

    def e_arrayref(self, node, lanes, fr):
        p = self.elem_ptr(node, lanes, fr)
        if p.t.base.is_array:   # 多维数组的一行：退化为指针
            return Val(T.Ptr(p.t.base.elem, p.t.vol), p.v, p.buf)
        return self.load(p, lanes, node)

    def read_lv(self, kind, x, lanes, node):
        if kind == "reg":
            return Val(x.t, self.read_var(x, lanes), x.buf)
        return self.load(x, lanes, node)

    def write_lv(self, kind, x, val, lanes, node):
        if kind == "reg":
            v = self.conv(val, x.t, node)
            self.write_var(x, lanes, v, node)
            return v
        v = self.conv(val, x.t.base, node)
        self.store(x, v, lanes, node)
        return v

    def e_assign(self, node, lanes, fr):
        kind, x = self.lvalue(node.lvalue, lanes, fr)
        r = self.ev(node.rvalue, lanes, fr)
        if node.op != "=":
            cur = self.read_lv(kind, x, lanes, node)
            r = self.arith(node.op[:-1], cur, r, node, lanes)
        return self.write_lv(kind, x, r, lanes, node)

    def e_unary(self, node, lanes, fr):
        op = node.op
        if op in ("++", "--", "p++", "p--"):
            kind, x = self.lvalue(node.expr, lanes, fr)
            cur = self.read_lv(kind, x, lanes, node)
            one = Val(T.INT, np.int32(1))
            new = self.arith("+" if "+" in op else "-", cur, one, node, lanes)
            new = self.write_lv(kind, x, new, lanes, node)
            return cur if op.startswith("p") else new
        if op == "sizeof":
            if isinstance(node.expr, c_ast.Typename):
                t = self.prog.resolve_plain(node.expr)
            else:
                t = self.static_type(node.expr, lanes, fr)
            return Val(T.ULONG, np.uint64(t.size))
        if op == "&":
            e = node.expr
            if isinstance(e, c_ast.ArrayRef):
                return self.elem_ptr(e, lanes, fr)
            if isinstance(e, c_ast.ID) and fr.lookup(e.name) is None and e.name in self.prog.fn_ids:
                return Val(T.FNPTR, np.int64(self.prog.fn_ids[e.name]))      # &f
            if isinstance(e, c_ast.ID):
                kind, x = self.lvalue(e, lanes, fr)
                if kind == "mem":
                    return x
                self.spill(x, e.name, node)
                return Val(T.Ptr(x.t), np.int64(0), x.buf)
            if isinstance(e, c_ast.UnaryOp) and e.op == "*":
                return self.ev(e.expr, lanes, fr)
            if isinstance(e, c_ast.StructRef) and not (isinstance(e.name, c_ast.ID) and e.name.name in _BUILTIN_VARS):
                kind, x = self.lvalue(e, lanes, fr)        # &p->x、&a[i].y、&s.x
                if kind == "reg" and e.type == "." and isinstance(e.name, c_ast.ID):
                    bk, bv = self.lvalue(e.name, lanes, fr)
                    if bk == "reg":
                        self.spill(bv, e.name.name, node)       # 寄存器里的结构体：整体搬进局部内存
                    kind, x = self.lvalue(e, lanes, fr)
                if kind == "mem":
                    return x
            raise self.unsupported("取地址 &", node)
        if op == "*":
            p = self.ev(node.expr, lanes, fr)
            if not p.t.is_ptr:
                raise self.unsupported("对非指针解引用", node)
            if p.t.base.is_array:
                return Val(T.Ptr(p.t.base.elem, p.t.vol), p.v, p.buf)
            return self.load(p, lanes, node)
        a = self.ev(node.expr, lanes, fr)
        if a.t.is_ptr:
            raise self.unsupported(f"指针的一元运算 {op}", node)
        if op == "!":
            return Val(T.BOOL, ~self.truth(a) if np.ndim(self.truth(a)) else np.bool_(not self.truth(a)))
        t = T.promote(a.t)
        x = T.cast(a.v, t)
        if op == "-":
            return Val(t, np.negative(x))
        if op == "+":
            return Val(t, x)
        if op == "~":
            if not t.is_int:
                raise self.unsupported("浮点数的按位取反 ~", node)
            return Val(t, np.invert(x))
        raise self.unsupported(f"一元运算符 {op}", node)

    def static_type(self, e, lanes, fr):
        if isinstance(e, c_ast.ID):
            var = fr.lookup(e.name) or self.global_shared(e.name)
            if var is not None:
                return var.t
        return self.ev(e, lanes, fr).t

    def remote_target(self, buf, off, lanes):
        """远程视图的偏移 -> (目标块, 块内偏移, 簇内编号)；目标块按访问线程所在的簇解释簇内编号。"""
        span = rank_span(buf)
        off = np.asarray(off, np.int64)
        rank = (off + span // 2) // span
        local = off - rank * span
        own = self.g(self.blk, lanes)
        if self.csize == 1:
            return own, local, rank
        rk = np.clip(rank, 0, self.csize - 1)      # 簇内编号已在 map_shared_rank 检查过；越界的偏移由边界检查报告
        return self.members[self.cid[own], rk], local, rank

    def _flat(self, buf, off, lanes):
        if buf.kind == "global":
            return off
        if buf.kind == "shared":
            if buf.remote:
                tgt, local, _ = self.remote_target(buf, off, lanes)
                return tgt * buf.per + local
            return self.g(self.blk, lanes) * buf.per + off
        return self.g(self.arange, lanes) * buf.per + off

    def check_bounds(self, p, lanes, node, what):
        buf = p.buf
        if buf is None:
            raise self.fail(OutOfBoundsError, "通过空指针访问内存", "access through a null pointer", node,
                            lane=self.ids(lanes)[0])
        off = p.v
        rank = None
        if buf.remote:
            _, off, rank = self.remote_target(buf, off, lanes)
        bad = (off < 0) | (off >= buf.per)
        if np.any(bad):
            badv = np.broadcast_to(bad, (lanes.n,))
            offv = np.broadcast_to(off, (lanes.n,))
            i = int(np.flatnonzero(badv)[0])
            o = int(offv[i])
            nbad = int(np.count_nonzero(badv))
            far = f"越过末尾 {o - buf.per + 1} 个元素" if o >= buf.per else f"在开头之前 {-o} 个元素"
            far_en = f"{o - buf.per + 1} element(s) past the end" if o >= buf.per else f"{-o} element(s) before the start"
            space = {"global": "全局", "shared": "共享", "local": "局部"}[buf.kind]
            hint = ""
            if buf.kind == "shared" and buf.per == 0:
                hint = "（动态共享内存大小为 0：启动时请传 shared_bytes）"
            if rank is not None:
                r = int(np.broadcast_to(rank, (lanes.n,))[i])
                space = f"簇内编号 {r} 的线程块（经 cluster.map_shared_rank）的共享"
                hint += f" / through cluster.map_shared_rank into the block of cluster rank {r}"
            raise self.fail(
                OutOfBoundsError,
                f"{what}{space}数组 {buf.name}[{o}] 越界：数组只有 {buf.per} 个 {buf.elem.name}，{far}；"
                f"共 {nbad} 个线程越界{hint}",
                f"out-of-bounds {'write' if what == '写' else 'read'} of {buf.kind} array {buf.name}[{o}] "
                f"(size {buf.per}): {far_en}; {nbad} thread(s) out of bounds",
                node, lane=self.ids(lanes)[i])

    def _account(self, p, lanes, node, store, size=None):
        buf = p.buf
        if buf.kind == "local" or buf.constant:
            return None
        if buf.remote:
            return self._account_remote(p, lanes, node, store, size)
        n = lanes.n
        off = np.broadcast_to(p.v, (n,)) if np.ndim(p.v) == 0 else p.v
        gw = self.g(self.gw, lanes)
        esize = buf.elem.size
        size = esize if size is None else size
        if store and buf.kind == "global":
            by = self.rep.global_store_bytes_by_array
            by[buf.name] = by.get(buf.name, 0) + n * size
        if size != esize:    # 宽访问（float4 ...）：地址仍按元素计
            if buf.kind == "global":
                C.global_access(self.rep, store, gw, off * esize, size)
            else:
                base = buf.base if buf.base >= 0 else 0
                C.shared_access(self.rep, store, gw, base + off * esize, size, self.g(self.lw, lanes))
            return off
        if buf.kind == "global":
            C.global_access(self.rep, store, gw, off * size, size)
        else:
            # 动态共享内存的基址取 0：整体平移不改变存储体冲突的个数
            base = buf.base if buf.base >= 0 else 0
            C.shared_access(self.rep, store, gw, base + off * size, size, self.g(self.lw, lanes))
        return off

    def _account_remote(self, p, lanes, node, store, size=None):
        """经 cluster.map_shared_rank 的访问：指向别的块的线程计入分布式共享内存，并记下对目标块的访问
        （退出检查用）；指向本块的线程按普通的共享内存计（存储体冲突）。"""
        buf = p.buf
        esize = buf.elem.size
        size = esize if size is None else size
        tgt, local, _ = self.remote_target(buf, p.v, lanes)
        n = lanes.n
        tgt = np.broadcast_to(tgt, (n,))
        local = np.broadcast_to(local, (n,))
        own = self.g(self.blk, lanes)
        own = np.broadcast_to(own, (n,))
        rem = tgt != own
        gw = self.g(self.gw, lanes)
        if rem.all():
            C.dsmem_access(self.rep, store, gw, size)
        else:
            C.dsmem_access(self.rep, store, gw[rem], size)
            base = buf.base if buf.base >= 0 else 0
            loc = ~rem
            C.shared_access(self.rep, store, gw[loc], base + local[loc] * esize, size, self.g(self.lw, lanes)[loc])
        if rem.any():
            self._note_remote(buf, tgt[rem], own[rem], self.ids(lanes)[rem], node, store)
        return local

    def _note_remote(self, buf, tgt, own, ids, node, store):
        """记下对别的块的共享内存的访问（访问者那时的簇屏障到达数、线程、行）：那一块结束前要再等一次簇屏障
        （:class:`DsmemExitedBlockError` 的检查）。"""
        name = (buf.local or buf).name if not buf.scalar else buf.name
        k = self.dx_index.get((id(node), name))
        if k is None:
            k = self.dx_index[(id(node), name)] = len(self.dx_nodes)
            self.dx_nodes.append((node, name))
        self.dx_a[tgt] = self.carr[own]
        self.dx_lane[tgt] = ids
        self.dx_node[tgt] = k
        self.dx_store[tgt] = store

    def vec_access(self, p, lanes, node, what, store):
        """向量类型的一次访问（16 字节的 float4 ...）：检查两端的边界与对齐，计作每个线程一次宽访问；
        返回每个分量的指针。"""
        vt = p.t.base
        el = vt.elem
        u = p.buf.elem.size if p.buf is not None else el.size
        step = el.size // u if el.size >= u else 1
        self.check_bounds(p, lanes, node, what)
        self.check_bounds(Val(T.Ptr(el), p.v + (vt.n * step - 1), p.buf), lanes, node, what)
        if p.buf.kind == "global":     # 全局数组：CPU 上这块内存的真实地址（与 (size_t)p % 16 的判断一致）
            base = int(p.buf.data.ctypes.data) % 64
        else:
            base = p.buf.base if p.buf.kind == "shared" and p.buf.base >= 0 else 0
        mis = (base + np.asarray(p.v) * u) % vt.align != 0
        if np.any(mis):
            i = int(np.flatnonzero(np.broadcast_to(mis, (lanes.n,)))[0])
            raise self.fail(SimtRuntimeError, f"{vt.name} 访问 {p.buf.name}[{int(np.broadcast_to(p.v, (lanes.n,))[i])}] 的地址"
                            f"没有按 {vt.align} 字节对齐（GPU 上是 misaligned address 错误）",
                            f"misaligned {vt.align}-byte {vt.name} access to {p.buf.name}", node, lane=self.ids(lanes)[i])
        if vt.size <= 16:
            self._account(p, lanes, node, store, vt.size)
        else:                  # double4 ...：每 16 字节一条宽指令
            per = 16 // el.size
            for k in range(0, vt.n, per):
                self._account(Val(p.t, p.v + k * step, p.buf), lanes, node, store, 16)
        return [Val(T.Ptr(el, p.t.vol, p.t.const), p.v + j * step, p.buf) for j in range(vt.n)]

    def leaf_units(self, vt, buf):
        """结构体每个叶子相对开头的偏移（按 buf 的存储单元计）。"""
        u = buf.elem.size if buf is not None else vt.elem.size
        key = (id(vt), u)
        r = self._leafu.get(key)
        if r is None:
            if vt.uniform:
                r = tuple(range(vt.n)) if u == vt.elem.size else tuple(j * vt.elem.size // u for j in range(vt.n))
            else:
                r = tuple(o // u for o in vt.loff)
            self._leafu[key] = r
        return r

    def load(self, p, lanes, node):
        if p.t.base.is_vec:
            vt = p.t.base
            if not vt.storable:
                self.need_storable(vt, node)
            if lanes.n == 0:
                return Val(vt, tuple(e.dtype.type(0) for e in vt.elems))
            if not vt.wide:    # 结构体：逐个成员读（指针成员是带着数组的 Val）
                offs = self.leaf_units(vt, p.buf)
                out = []
                for j, e in enumerate(vt.elems):
                    x = self.load(Val(T.Ptr(e, p.t.vol, p.t.const), p.v + offs[j], p.buf), lanes, node)
                    out.append(x if e.is_ptr else x.v)
                return Val(vt, tuple(out))
            qs = self.vec_access(p, lanes, node, "读", False)
            if p.buf.elem.size != vt.elem.size:      # 字节内存里的向量：逐个分量按字节解码
                return Val(vt, tuple(self._bread(q, lanes, node) for q in qs))
            return Val(vt, tuple(self._load(q, lanes, node) for q in qs))
        el = p.t.base
        if lanes.n == 0:
            return Val(el, el.dtype.type(0)) if el.is_scalar else Val(el, np.int64(0), None)
        if not el.is_scalar or p.buf is not None and (el.size != p.buf.elem.size or p.buf.parent is not None):
            return self._bload(p, lanes, node)
        self.check_bounds(p, lanes, node, "读")
        self._account(p, lanes, node, False)
        return Val(p.t.base, self._load(p, lanes, node))

    def _load(self, p, lanes, node):
        buf = p.buf
        flat = self._flat(buf, p.v, lanes)
        self._check_read(buf, flat, lanes, node, p.t.vol)
        self.loads += 1
        if p.t.vol or buf.vol:
            self.spin_reads += 1
        v = buf.data[flat]
        el = p.t.base
        if buf.elem.dtype != el.dtype:
            if buf.elem.dtype.itemsize == el.dtype.itemsize:    # 结构体里类型不同、大小相同的成员：按位重新解释
                v = np.asarray(v).view(el.dtype)
                v = v[()] if v.ndim == 0 else v
            else:
                v = T.cast(v, el)
        return v

    def store(self, p, val, lanes, node):
        if lanes.n == 0:
            return
        if p.t.base.is_vec:
            if p.t.const or p.buf is not None and p.buf.constant:
                raise self.const_write(p.buf, node)
            vt = p.t.base
            self.need_storable(vt, node)
            if not vt.wide:    # 结构体：逐个成员写
                offs = self.leaf_units(vt, p.buf)
                for j, x in enumerate(val.v):
                    e = vt.elems[j]
                    self.store(Val(T.Ptr(e, p.t.vol, p.t.const), p.v + offs[j], p.buf),
                               x if isinstance(x, Val) else Val(e, x), lanes, node)
                return
            qs = self.vec_access(p, lanes, node, "写", True)
            wr = self._bwrite if p.buf.elem.size != vt.elem.size else self._store
            for q, x in zip(qs, val.v):
                wr(q, Val(vt.elem, x), lanes, node)
            return
        el = p.t.base
        if not el.is_scalar or p.buf is not None and (el.size != p.buf.elem.size or p.buf.parent is not None):
            self._bstore(p, val, lanes, node)
            return
        self.check_bounds(p, lanes, node, "写")
        self._account(p, lanes, node, True)
        self._store(p, val, lanes, node)

    def _check_writable(self, p, buf, lanes, node):
        """写入之前：不能写 const / __constant__，也不能写调用者传入的只读数组。"""
        if p.t.const or buf.constant:
            raise self.const_write(buf, node)
        if not buf.data.flags.writeable:
            raise self.fail(SimtRuntimeError, f"写入只读数组 {buf.name}（传入的数组不可写）",
                            f"write to read-only array {buf.name}", node, lane=self.ids(lanes)[0])
        if self.saved is not None and buf.kind == "global":
            self.save(buf)

    def save(self, buf):
        """schedule="auto"：这块全局内存第一次被写之前，记下它的内容。"""
        while buf.parent is not None:
            buf = buf.parent
        d = buf.data
        if id(d) not in self._saved_ids:
            self._saved_ids.add(id(d))
            self.saved.append((d, d.copy()))

    def restore(self):
        """把这次执行写过的全局内存恢复成启动前的样子（倒着恢复：几个参数指向同一块内存时，最早的副本留下）。"""
        for d, copy in reversed(self.saved or ()):
            d[...] = copy

    def _store(self, p, val, lanes, node):
        buf = p.buf
        self._check_writable(p, buf, lanes, node)
        flat = self._flat(buf, p.v, lanes)
        el = p.t.base
        if el.is_scalar and el.dtype != buf.elem.dtype and el.dtype.itemsize == buf.elem.dtype.itemsize:
            v = np.asarray(T.cast(val.v, el)).view(buf.elem.dtype)     # 结构体里类型不同的成员：按位存放
            v = v[()] if v.ndim == 0 else v
        else:
            v = T.cast(val.v, buf.elem)
        self._check_write(buf, flat, lanes, node, p.t.vol, v)
        if not self.watch:
            self.mutations += 1
        else:              # 正在观察一个像是自旋的循环：写进同样的值不算改变了内存
            cur = np.asarray(buf.data[flat])
            nv = v[-1] if np.ndim(flat) == 0 and np.ndim(v) else v
            if cur.tobytes() != np.broadcast_to(np.asarray(nv, buf.data.dtype), cur.shape).tobytes():
                self.mutations += 1
        if np.ndim(flat) == 0:
            if np.ndim(v):
                v = v[-1]     # 多个线程写同一个地址：编号最大的线程的值留下
            buf.data[flat] = v
        else:
            buf.data[flat] = v
        if buf.init is not None:
            self.mark_init(buf, flat)

    # ------------------------------------------------------------ 按字节访问
    def _access_checks(self, p, lanes, node, what, s):
        """按字节访问的检查：空指针与两端的边界、按 s 字节对齐。"""
        self.check_bounds(p, lanes, node, what)
        buf = p.buf
        u = buf.elem.size
        if s > u:
            self.check_bounds(Val(p.t, p.v + (s // u - 1), buf), lanes, node, what)
        a = min(s, 16)
        if a > 1:
            if buf.kind == "global":
                base = int(buf.data.ctypes.data) % 256
            else:
                base = buf.base if buf.kind == "shared" and buf.base >= 0 else 0
            mis = (base + np.asarray(p.v) * u) % a != 0
            if np.any(mis):
                i = int(np.flatnonzero(np.broadcast_to(mis, (lanes.n,)))[0])
                o = int(np.broadcast_to(p.v, (lanes.n,))[i])
                el = p.t.base
                rw = {"读": "read", "写": "write"}.get(what, what)
                raise self.fail(SimtRuntimeError, f"{what} {el!r}（{s} 字节）访问 {buf.name} 的第 {o * u} 个字节，地址没有按 {a} 字节"
                                "对齐（GPU 上是 misaligned address 错误）",
                                f"misaligned {s}-byte {rw} of {el!r} at byte {o * u} of {buf.name} (the GPU faults: "
                                "misaligned address)", node, lane=self.ids(lanes)[i])

    def _cells(self, buf, flat, s):
        """访问 buf 的 flat 单元起 s 个字节碰到的记录单元：(记录所在的数组, [每个单元的下标数组])。"""
        root = buf.parent or buf
        c = root.elem.size
        first = flat * buf.elem.size // c if buf is not root else flat
        span = max(1, s // c)
        return root, [first + k for k in range(span)]

    def _bread(self, p, lanes, node):
        """读 p 指向的 s 个字节并按 p 的类型解码（已经检查过边界与对齐）；返回数值，指针是 Val。"""
        buf = p.buf
        el = p.t.base
        s = el.size
        flat = self._flat(buf, p.v, lanes)
        root, cells = self._cells(buf, flat, s)
        for cl in cells:
            self._check_read(root, cl, lanes, node, p.t.vol)
        self.loads += 1
        if p.t.vol or root.vol:
            self.spin_reads += 1
        dt = el.dtype if el.is_scalar or el.is_fnptr else np.dtype(np.uint64)
        b = flat * buf.elem.size
        raw = buf.raw
        if np.ndim(b) == 0:
            v = raw[int(b):int(b) + s].view(dt)[0]
        else:
            v = raw[b[:, None] + np.arange(s)].view(dt).reshape(-1)
        if el.is_ptr:
            return self._ptr_decode(v, p.t.base, lanes, node)
        return v

    def _bload(self, p, lanes, node):
        el = p.t.base
        self._access_checks(p, lanes, node, "读", el.size)
        self._account(p, lanes, node, False, el.size)
        v = self._bread(p, lanes, node)
        return v if isinstance(v, Val) else Val(el, v)

    def _bwrite(self, p, val, lanes, node):
        """把 val 按 p 的类型编码成字节写进去（已经检查过边界与对齐）。"""
        buf = p.buf
        self._check_writable(p, buf, lanes, node)
        el = p.t.base
        s = el.size
        if el.is_ptr:
            v = np.asarray(self._ptr_encode(val, el), np.uint64)
        elif el.is_fnptr:
            v = np.asarray(val.v, np.int64)
        else:
            v = np.asarray(T.cast(val.v, el), el.dtype)
        flat = self._flat(buf, p.v, lanes)
        root, cells = self._cells(buf, flat, s)
        for cl in cells:
            self._check_write(root, cl, lanes, node, p.t.vol, None)
        b = flat * buf.elem.size
        raw = buf.raw
        self.mutations += 1
        bytes_ = v.reshape(-1).view(np.uint8)
        if np.ndim(b) == 0:
            raw[int(b):int(b) + s] = bytes_[-s:]      # 多个线程写同一个地址：编号最大的线程的值留下
        else:
            if v.ndim == 0:
                bytes_ = np.broadcast_to(bytes_, (b.size, s))
            raw[b[:, None] + np.arange(s)] = bytes_.reshape(-1, s)
        if root.init is not None:
            for cl in cells:
                self.mark_init(root, cl)

    def _bstore(self, p, val, lanes, node):
        el = p.t.base
        if lanes.n == 0:
            return
        self._access_checks(p, lanes, node, "写", el.size)
        self._account(p, lanes, node, True, el.size)
        self._bwrite(p, val, lanes, node)

    def _ptr_encode(self, val, t):
        """指针值 -> 64 位句柄（见模块说明）。"""
        if val.buf is None:
            return np.uint64(0)
        buf = val.buf
        for k, h in enumerate(self.handles):
            if h is buf:
                break
        else:
            self.handles.append(buf)
            k = len(self.handles) - 1
        off = np.asarray(val.v).astype(np.int64) & np.int64((1 << 40) - 1)
        r = (np.uint64(k + 1) << np.uint64(40)) | off.astype(np.uint64)
        return r[()] if r.ndim == 0 else r

    def _ptr_decode(self, v, t, lanes, node):
        """64 位句柄 -> 指针 Val；空句柄的线程得到越界的偏移（通过它访问时报告越界）。"""
        v = np.asarray(v, np.uint64)
        h = (v >> np.uint64(40)).astype(np.int64)
        off = (v & np.uint64((1 << 40) - 1)).astype(np.int64)
        off = np.where(off >= (1 << 39), off - (1 << 40), off)
        hs = np.unique(h)
        hs = hs[hs != 0]
        if hs.size == 0:
            return Val(t, np.int64(0), None)
        if hs.size > 1 or int(hs[0]) > len(self.handles):
            raise self.unsupported("从内存读出的指针在不同线程中指向不同的数组", node)
        buf = self.handles[int(hs[0]) - 1]
        off = np.where(h == 0, np.int64(-(1 << 40)), off)
        return Val(t, off[()] if off.ndim == 0 else off, buf)

    def const_write(self, buf, node):
        if buf.constant:
            # 写 const 变量 clang 在解析时就拒绝了；执行到这里的是 __constant__ 变量：nvcc 接受，CUDA 却不允许
            return self.fail(SimtRuntimeError, f"在内核里写入常量内存 {buf.name}（__constant__）：nvcc 能编译，但设备代码不能"
                             "修改常量内存（NVIDIA《CUDA C++ Guidelines for Robust and Safety-Critical Programming》第 1.12 条），常量缓存不随之更新，别的线程读到"
                             "哪个值没有定义；常量内存只能由主机写入：启动时传 symbols={名字: 值}，要在内核里写的数据用 "
                             "__device__ 变量或参数数组",
                             f"write to constant memory {buf.name} (__constant__) in device code: nvcc compiles it, but "
                             "device code must not modify constant memory (the constant cache is not updated); the host "
                             "writes constant memory (pass symbols={name: value}), use a __device__ variable instead", node)
        return self.fail(CompileError, f"通过 const 指针写入 {buf.name}（nvcc 报错：表达式必须是可修改的左值）",
                         f"write through a pointer to const ({buf.name}): nvcc rejects it "
                         "(expression must be a modifiable lvalue)", node)

    def _init_cells(self, buf, flat):
        w = buf.init_w
        if w == 1:
            return np.asarray(flat)
        return (np.asarray(flat)[..., None] * w + np.arange(w)).reshape(-1)

    def mark_init(self, buf, flat):
        buf.init[self._init_cells(buf, flat)] = True

    def check_init(self, buf, flat, lanes, node):
        """compute-sanitizer initcheck 的对应物：共享 / 局部内存读之前必须有线程写过。"""
        cells = self._init_cells(buf, flat)
        ok = buf.init[cells]
        if ok.all():
            return
        if buf.init_w > 1:
            ok = ok.reshape(-1, buf.init_w).all(axis=1)
        okv = np.broadcast_to(ok, (lanes.n,))
        i = int(np.flatnonzero(~okv)[0])
        fl = int(np.broadcast_to(flat, (lanes.n,))[i])
        lane = self.ids(lanes)[i]
        if buf.kind == "shared":
            ow = fl // buf.per if buf.per else int(self.blk[lane])
            word = fl - ow * buf.per
            space, space_en, who = "共享", "shared", "这个线程块里没有任何线程写过它"
            if ow != int(self.blk[lane]):
                tb, _ = self.where(ow * self.tpb)
                space, space_en = f"线程块 {tb}（簇内编号 {int(self.crank[ow])}）的共享", f"block {tb}'s shared"
                who = "那个线程块里没有任何线程写过它"
        else:
            word = fl - int(lane) * buf.per
            space, space_en, who = "局部", "local", "这个线程没有写过它"
        name = buf.name if buf.scalar else f"{buf.name}[{word}]"
        nbad = int(np.count_nonzero(~okv))
        raise self.fail(
            UninitializedReadError,
            f"读了未初始化的{space}内存 {name}：{who}（共 {nbad} 个线程读到未初始化的值）；"
            f"真实 GPU 上读到的是上一次留下的任意值，不是 0",
            f"read of uninitialized {space_en} memory {name}: no thread has written it "
            f"({nbad} thread(s) read uninitialized values); on a GPU this is garbage, not 0",
            node, lane=lane)

    def cluster_race(self, buf, flat, lanes, node, write):
        """簇内的竞争检查（ClusterTracker）；返回只访问本块的线程（它们再由 SharedTracker 检查）与它们的 flat。"""
        n = lanes.n
        flat = np.broadcast_to(flat, (n,)) if np.ndim(flat) == 0 else flat
        blk = self.g(self.blk, lanes)
        blk = np.broadcast_to(blk, (n,))
        owner = flat // buf.per if buf.per else blk
        remote = owner != blk
        line = self.line(node)
        line = line if isinstance(line, int) else 0
        ids = self.ids(lanes)
        hit = buf.ctracker.access(flat, ids.astype(np.int32), blk.astype(np.int32), self.carr[blk], self.cwait[blk],
                                  self.bar[blk], remote, line, bool(write), self.blk, atomic=write in ("atomic", "atomic_cas"))
        if hit is not None:
            kind, i, other, other_line = hit
            lane = int(ids[i])
            b, t = self.where(lane)
            ow = int(owner[i])
            ob, _ = self.where(ow * self.tpb)
            word = int(flat[i]) - ow * buf.per
            if other >= 0:
                xb, xt = self.where(other)
            else:
                xb = xt = None
            msg, cls = cluster_race_message(kind, self.kernel, line, buf.name, word, ob, int(self.crank[ow]), b, t,
                                            xb, xt, other_line or "?")
            err = cls(msg)
            err.kernel, err.line, err.block, err.thread = self.kernel, line or None, b, t
            raise err
        if not remote.any():
            return lanes, flat, None
        keep = ~remote
        return self.sub(lanes, keep), flat[keep], keep

    def race(self, buf, flat, lanes, node, vol, write, val=None):
        flat = np.broadcast_to(flat, (lanes.n,)) if np.ndim(flat) == 0 else flat
        if buf.ctracker is not None:
            lanes, flat, keep = self.cluster_race(buf, flat, lanes, node, write)
            if keep is not None and val is not None and np.ndim(val):
                val = np.broadcast_to(val, keep.shape)[keep]
            if lanes.n == 0:
                return
        tid = self.g(self.tlin, lanes).astype(np.int32)
        ep = self.epoch[self.g(self.gw, lanes)]
        line = self.line(node)
        line = line if isinstance(line, int) else 0
        vol = bool(vol or buf.vol)

        def report(kind, i, other, other_line, same_warp):
            lane = self.ids(lanes)[i]
            b, t = self.where(lane)
            word = int(flat[i]) - int(self.blk[lane]) * buf.per
            blk = int(self.blk[lane])
            if other >= 0:
                other_s = self.where(blk * self.tpb + other)[1]
            elif other <= ATOMIC_BASE:
                ot = self.where(blk * self.tpb + ATOMIC_BASE - other)[1]
                other_s = (f"{ot}（原子操作）", f"{ot} (atomic)")
            else:
                other_s = ("（多个）", "(several)")
            msg, cls = race_message(kind, self.kernel, line, buf.name, word, b, t, other_s, other_line, same_warp)
            err = cls(msg)
            err.kernel, err.line, err.block, err.thread = self.kernel, line or None, b, t
            raise err

        if write in ("atomic", "atomic_cas"):
            buf.tracker.atomic(flat, tid, ep, line, report, cas=write == "atomic_cas")
        elif write:
            same = vals = None
            if self.benign_same_value:
                vals = np.broadcast_to(val, (lanes.n,))
                same = buf.data[flat] == vals
            buf.tracker.write(flat, tid, ep, vol, line, report, same, vals)
        else:
            buf.tracker.read(flat, tid, ep, vol, line, report)

    def _check_read(self, buf, idx, lanes, node, vol):
        """一次读之前的检查：共享内存的竞争、全局内存的竞争、读未初始化的内存。"""
        if buf.tracker is not None:
            self.race(buf, idx, lanes, node, vol, False)
        elif buf.gtracker is not None:
            self.global_race(buf, idx, lanes, node, "vread" if vol else "read")
        if buf.init is not None:
            self.check_init(buf, idx, lanes, node)

    def _check_write(self, buf, idx, lanes, node, vol, val):
        """一次写之前的竞争检查（共享内存或全局内存）。"""
        if buf.tracker is not None:
            self.race(buf, idx, lanes, node, vol, True, val)
        elif buf.kind == "global" and self.global_racecheck:
            if buf.gtracker is None:        # 去掉 const 之后写入只读参数：从现在开始记录
                buf.gtracker = GlobalTracker(buf.per)
            self.global_race(buf, idx, lanes, node, "vwrite" if vol else "write", val)

    def global_race(self, buf, flat, lanes, node, kind, val=None):
        """全局内存竞争检查（GlobalTracker）：一次启动之内，不同线程块之间没有顺序。"""
        n = lanes.n
        flat = np.broadcast_to(flat, (n,)) if np.ndim(flat) == 0 else flat
        ids = self.ids(lanes)
        blk = self.g(self.blk, lanes).astype(np.int32)
        gw = self.g(self.gw, lanes)
        ep = self.bar[blk]
        wep = self.epoch[gw]
        line = self.line(node)
        line = line if isinstance(line, int) else 0
        self.clock += 1
        same = vals = None
        if kind == "write" and self.benign_same_value:
            vals = np.broadcast_to(val, (n,))
            same = buf.data[flat] == vals
        hit = buf.gtracker.access(flat, ids.astype(np.int32), blk, ep, wep, gw, self.gw.__getitem__, self.fence,
                                  self.clock, line, kind, same, vals, self.cid[blk].astype(np.int32), self.carr[blk],
                                  self.cwait[blk], self.grid_syncs)
        if hit is None:
            return
        i, hz, other, other_line, other_atomic = hit
        lane = int(ids[i])
        b, t = self.where(lane)
        if other >= 0:
            ob, ot = self.where(other)
            if other_atomic == "block":
                note = GLOBAL_BLOCK_SCOPE_NOTE
            elif self.blk[other] != self.blk[lane] and self.csize > 1 and \
                    self.cid[self.blk[other]] == self.cid[self.blk[lane]]:
                note = GLOBAL_CLUSTER_NOTE
            elif self.blk[other] != self.blk[lane]:
                note = GLOBAL_BLOCK_NOTE
            elif self.gw[other] == self.gw[lane]:
                note = VOLTA_NOTE
            else:
                note = GLOBAL_SAME_BLOCK_NOTE
        else:
            ob = ot = "?"
            note = GLOBAL_BLOCK_SCOPE_NOTE if other_atomic == "block" else GLOBAL_BLOCK_NOTE
        word = int(flat[i])
        msg = global_race_message(hz, self.kernel, line, buf.name, word, b, t, ob, ot, other_line or "?",
                                  other_atomic, note)
        err = GlobalMemoryRaceError(msg)
        err.kernel, err.line, err.block, err.thread = self.kernel, line or None, b, t
        err.other_block, err.other_thread, err.other_line = ob, ot, other_line or None
        err.array, err.index, err.hazard = buf.name, word, hz
        raise err

    # ------------------------------------------------------------ 函数调用
    def e_call(self, node, lanes, fr):
        name = node.name.name
        args = node.args.exprs if node.args is not None else []
        var = fr.lookup(name)
        if var is not None and var.t.is_fnptr:
            return self.call_fnptr(var, args, node, lanes, fr)
        f = self.prog.functions.get(name)
        if f is not None:
            return self.call_device(f, args, node, lanes, fr)
        h = getattr(self, "b_" + name, None)
        if h is not None:
            return h(node, args, lanes, fr)
        vt = T.VECS.get(name[5:]) if name.startswith("make_") else None
        if vt is not None:
            vals = self._args(args, vt.n, node, lanes, fr, name)
            return Val(vt, tuple(self.conv(v, vt.elem, node).v for v in vals))
        return self.math(name, args, node, lanes, fr)

    def call_fnptr(self, var, args, node, lanes, fr):
        """通过函数指针调用：按每个线程的指针值分组，每组调用一次对应的函数，再把返回值合起来。"""
        ids = np.broadcast_to(np.asarray(self.read_var(var, lanes)), (lanes.n,))
        uniq = np.unique(ids)
        if (uniq == 0).any():
            i = int(np.flatnonzero(ids == 0)[0])
            raise self.fail(SimtRuntimeError, "通过空的函数指针调用", "call through a null function pointer", node,
                            lane=self.ids(lanes)[i])
        fs = [self.prog.functions[self.prog.fn_by_id[int(u)]] for u in uniq]
        if any(f.is_kernel for f in fs):
            raise self.unsupported("通过函数指针启动内核", node)
        rt = fs[0].ret_type
        if any(f.ret_type is not rt or len(f.params) != len(fs[0].params) for f in fs):
            raise self.unsupported("函数指针指向的函数类型不同", node)
        if len(fs) == 1:
            return self.call_device(fs[0], args, node, lanes, fr)
        out = None if rt.is_void else np.zeros(self.L, rt.dtype if rt.is_scalar else np.int64)
        for u, f in zip(uniq, fs):
            sub = self.sub(lanes, ids == u)
            r = self.call_device(f, args, node, sub, fr)
            if out is not None:
                if not rt.is_scalar:
                    raise self.unsupported("通过函数指针调用返回非标量的函数", node)
                out[self.ids(sub)] = r.v
        if out is None:
            return Val(T.VOID, np.int32(0))
        return Val(rt, out[self.ids(lanes)])

    def call_device(self, f, args, node, lanes, fr):
        if len(args) != len(f.params):
            raise self.unsupported(f"{f.name} 的参数个数不对（{len(args)} != {len(f.params)}）", node)
        vals = [self.bind_ref(a, pt, f.refs[pname], lanes, fr, node) if pname in f.refs else self.ev(a, lanes, fr)
                for a, (pname, pt, _) in zip(args, f.params)]
        if self.depth > 64:
            raise self.unsupported("递归太深 recursion", node)
        nf = Frame(f)
        for (pname, pt, _), v in zip(f.params, vals):
            if isinstance(v, Var):      # 引用参数：与实参是同一个变量
                nf.scopes[0][pname] = v
                continue
            var = self.new_var(pt)
            self.write_var(var, lanes, self.conv(v, pt, node), node)
            nf.scopes[0][pname] = var
        self.depth += 1
        self.calls.append(node)
        try:
            self.ex(f.node.body, lanes, nf)
        finally:
            self.depth -= 1
            self.calls.pop()
        if f.ret_type.is_void:
            return Val(T.VOID, np.int32(0))
        if nf.ret is None:
            raise self.fail(UnsupportedError, f"函数 {f.name} 没有 return 语句就结束了",
                            f"function {f.name} ended without return", node)
        return Val(f.ret_type, self.var_value(nf.ret, lanes), nf.ret.buf)

    def bind_ref(self, arg, pt, const, lanes, fr, node):
        """引用参数 T& 绑定到实参：寄存器变量直接共用，内存里的元素（s[i]、*p）变成按线程偏移的内存变量；
        const T& 的实参不是左值时绑定到一个临时值（按值传递）。"""
        if pt.is_ptr:         # 数组的引用 T (&a)[N]：前端记成指针参数，实参（数组或多维数组的一行）退化成指针传入
            p = self.ev(arg, lanes, fr)
            if not p.t.is_ptr or T.scalar_of(p.t.base).dtype != T.scalar_of(pt.base).dtype \
                    or p.t.base.is_vec != pt.base.is_vec:
                raise self.unsupported(f"数组引用参数的实参不是同样元素类型的数组（{p.t!r}）", node)
            return p
        lv = isinstance(arg, (c_ast.ID, c_ast.ArrayRef, c_ast.StructRef)) or \
            (isinstance(arg, c_ast.UnaryOp) and arg.op == "*")
        if not lv:
            if const:
                return self.ev(arg, lanes, fr)
            raise self.fail(CompileError, "非 const 引用参数的实参不是左值（nvcc 报错：initial value of reference to non-const "
                            "must be an lvalue）", "initial value of reference to non-const must be an lvalue (nvcc rejects it)",
                            node)
        kind, x = self.lvalue(arg, lanes, fr)
        if kind == "reg":
            if x.t is not pt and not (x.t.is_scalar and pt.is_scalar and x.t.dtype == pt.dtype):
                if const:
                    return self.ev(arg, lanes, fr)
                raise self.unsupported(f"引用参数类型 {pt!r} 与实参 {x.t!r} 不同", node)
            return x
        if T.scalar_of(x.t.base).dtype != T.scalar_of(pt).dtype or x.t.base.is_vec != pt.is_vec:
            raise self.unsupported(f"引用参数类型 {pt!r} 与实参 {x.t.base!r} 不同", node)
        var = Var(pt, None, x.buf, mem=True)
        off = np.zeros(self.L, np.int64)
        off[self.ids(lanes)] = x.v
        var.data, var.owned = off, True
        return var

    def _args(self, args, n, node, lanes, fr, name):
        if len(args) != n:
            raise self.unsupported(f"{name} 需要 {n} 个参数", node)
        return [self.ev(a, lanes, fr) for a in args]

    def math(self, name, args, node, lanes, fr):
        base = _FAST.get(name, name)
        fsuffix = False
        if base not in _MATH1 and base not in _MATH2 and base.endswith("f") and (base[:-1] in _MATH1 or base[:-1] in _MATH2):
            base = base[:-1]
            fsuffix = True
        if name in ("max", "min", "abs", "fma", "fmaf", "__fdividef", "__builtin_inff", "__builtin_nanf"):
            if name == "__builtin_inff":
                return Val(T.FLOAT, np.float32(np.inf))
            if name == "__builtin_nanf":
                return Val(T.FLOAT, np.float32(np.nan))
            vals = [self.ev(a, lanes, fr) for a in args]
            if name in ("max", "min"):
                a, b = vals
                t = T.common(a.t, b.t)
                x, y = T.cast(a.v, t), T.cast(b.v, t)
                r = (np.fmax if name == "max" else np.fmin)(x, y) if t.is_float else (np.maximum if name == "max" else np.minimum)(x, y)
                return Val(t, r)
            if name == "abs":
                t = T.promote(vals[0].t)
                return Val(t, np.abs(T.cast(vals[0].v, t)))
            if name == "__fdividef":
                return Val(T.FLOAT, T.cast(vals[0].v, T.FLOAT) / T.cast(vals[1].v, T.FLOAT))
            t = T.FLOAT if name == "fmaf" else T.common(T.common(vals[0].t, vals[1].t), vals[2].t)
            if t.is_int:
                t = T.DOUBLE
            # fma：先用双精度计算再舍入，等价于一次舍入
            x, y, z = (T.cast(v.v, T.DOUBLE) for v in vals)
            return Val(t, T.cast(x * y + z, t))
        if base in _MATH1 or base in _MATH2:
            n = 1 if base in _MATH1 else 2
            vals = self._args(args, n, node, lanes, fr, name)
            if fsuffix:
                t = T.FLOAT
            else:
                t = T.DOUBLE
                if all(v.t.is_float for v in vals) and all(v.t is T.FLOAT for v in vals):
                    t = T.FLOAT          # C++ 重载：float 参数得到 float 结果
            xs = [T.cast(v.v, t) for v in vals]
            fn = _MATH1.get(base) or _MATH2[base]
            r = fn(*xs)
            return Val(t, T.cast(r, t) if (np.asarray(r).dtype != t.dtype) else r)
        raise self.unsupported(f"函数 {name}()", node)

    # -- 同步
    # --8<-- [start:syncthreads]
    def _arrivals(self, lanes):
        """到达一个屏障的线程（lanes.idx 按线程编号有序）：每个线程的块号、到达的块（有序）与每块到达的线程数。"""
        b = self.blk[lanes.idx]
        starts = np.concatenate(([True], b[1:] != b[:-1]))
        return b, b[starts], np.diff(np.concatenate((np.flatnonzero(starts), [b.size])))

    def b___syncthreads(self, node, args, lanes, fr):
        if args:
            raise self.unsupported("__syncthreads 带参数", node)
        tpb = self.tpb
        if lanes.idx is None:
            blocks = None
            nb = self.nblocks
        else:
            b, blocks, cnt = self._arrivals(lanes)
            badb = np.flatnonzero(cnt != tpb)
            if badb.size:
                k = int(badb[0])
                blk = int(blocks[k])
                present = np.zeros(tpb, bool)
                present[lanes.idx[b == blk] - blk * tpb] = True
                missing = np.flatnonzero(~present)
                arrived = int(cnt[k])
                bs, _ = self.where(blk * tpb)
                _, t_miss = self.where(blk * tpb + missing[0])
                _, t_arr = self.where(lanes.idx[b == blk][0])
                raise self.fail(
                    BarrierDivergenceError,
                    f"线程块 {bs} 中只有 {arrived} 个线程（例如线程 {t_arr}）到达这个 __syncthreads()，"
                    f"另外 {tpb - arrived} 个线程（例如线程 {t_miss}）没有到达（它们走了另一条分支、停在另一个屏障或已经 return）。"
                    f"真实 GPU 上这是未定义行为，常见后果是死锁或结果错误；请把 __syncthreads() 移到所有线程都会执行的位置",
                    f"only {arrived} threads of block {bs} (e.g. thread {t_arr}) reach this __syncthreads(); "
                    f"{tpb - arrived} others (e.g. thread {t_miss}) do not (other branch, other barrier or returned): "
                    f"undefined behaviour on a GPU (deadlock or wrong results)",
                    node)
            nb = blocks.size
        self.rep.barriers += nb
        if blocks is None:
            self.bar += 1
        else:
            self.bar[blocks] += 1
        for buf in self.shared.values():
            if buf.tracker is not None:
                buf.tracker.reset_blocks(blocks, blocks is None)
        return Val(T.VOID, np.int32(0))
    # --8<-- [end:syncthreads]

    def _syncthreads_pred(self, name, node, args, lanes, fr):
        """__syncthreads_count / _and / _or(pred)：先求每个线程的谓词，再是一次 __syncthreads()（同样的发散检查），
        返回每个线程块里谓词为真的线程数（每个线程得到自己块的值）。"""
        (v,) = self._args(args, 1, node, lanes, fr, name)
        pred = np.broadcast_to(self.truth(v), (lanes.n,))
        self.b___syncthreads(node, [], lanes, fr)
        blk = self.blk if lanes.idx is None else self.blk[lanes.idx]
        count = np.bincount(blk, weights=pred.astype(np.int64), minlength=self.nblocks).astype(np.int64)
        return count[blk]

    def b___syncthreads_count(self, node, args, lanes, fr):
        return Val(T.INT, self._syncthreads_pred("__syncthreads_count", node, args, lanes, fr).astype(np.int32))

    def b___syncthreads_and(self, node, args, lanes, fr):
        c = self._syncthreads_pred("__syncthreads_and", node, args, lanes, fr)
        return Val(T.INT, (c == self.tpb).astype(np.int32))

    def b___syncthreads_or(self, node, args, lanes, fr):
        return Val(T.INT, (self._syncthreads_pred("__syncthreads_or", node, args, lanes, fr) > 0).astype(np.int32))

    def b___activemask(self, node, args, lanes, fr):
        """__activemask()：本线程束里此刻一起执行到这里的线程的位图（不是同步点，也不检查 mask）。"""
        if args:
            raise self.unsupported("__activemask 带参数", node)
        ids = self.ids(lanes)
        lw = self.g(self.lw, lanes)
        gw = self.g(self.gw, lanes)
        first = np.concatenate(([True], gw[1:] != gw[:-1]))
        bits = np.broadcast_to(np.left_shift(np.int64(1), lw), ids.shape)
        acc = np.bitwise_or.reduceat(bits, np.flatnonzero(first)) if ids.size else bits
        return Val(T.UINT, (acc[np.cumsum(first) - 1] & 0xFFFFFFFF).astype(np.uint32))

    def b___fmaf_rn(self, node, args, lanes, fr):
        """__fmaf_rn(a, b, c)：就近舍入的 fmaf（模拟器的 fmaf 本来就是一次舍入）。"""
        return self.math("fmaf", args, node, lanes, fr)

    # -- 线程块簇（cooperative_groups::cluster_group，前端改写而来）
    def _cluster_blocks(self, node, lanes, what):
        """簇屏障：有线程到达的每个簇，它的全部线程块的全部线程都必须到达这同一处（与 __syncthreads() 的规则相同，
        范围是整个簇）。返回到达的线程块（有序）。"""
        tpb, cs = self.tpb, self.csize
        if lanes.idx is None:
            return np.arange(self.nblocks)
        b, blocks, cnt = self._arrivals(lanes)
        cl = self.cid[blocks]
        tot = np.zeros(self.members.shape[0], np.int64)
        np.add.at(tot, cl, cnt)
        pres = np.unique(cl)
        bad = pres[tot[pres] != tpb * cs]
        if bad.size:
            k = int(bad[0])
            mem = self.members[k]
            arrived = lanes.idx[np.isin(b, mem)]
            every = (mem[:, None] * tpb + np.arange(tpb)).ravel()
            missing = every[~np.isin(every, arrived)]
            ab, at = self.where(arrived[0])
            mb, mt = self.where(missing[0])
            first, _ = self.where(int(mem[0]) * tpb)
            last, _ = self.where(int(mem[-1]) * tpb)
            raise self.fail(
                BarrierDivergenceError,
                f"簇（线程块 {first} 到 {last}，共 {cs} 块）中只有 {arrived.size} 个线程（例如线程块 {ab} 的线程 {at}）到达这个 "
                f"{what}，另外 {every.size - arrived.size} 个线程（例如线程块 {mb} 的线程 {mt}）没有到达（它们走了另一条分支、"
                f"停在另一个屏障或已经 return）。簇屏障要等簇里每一块的每一个线程；真实 GPU 上这是未定义行为，常见后果是死锁。"
                f"请把 {what} 移到簇里所有线程都会执行的位置",
                f"only {arrived.size} threads of the cluster of blocks {first}..{last} ({cs} blocks; e.g. thread {at} of "
                f"block {ab}) reach this {what}; {every.size - arrived.size} others (e.g. thread {mt} of block {mb}) do not "
                f"(other branch, other barrier or returned): a cluster barrier waits for every thread of every block of "
                f"the cluster; undefined behaviour on a GPU (deadlock)", node)
        return blocks

    def _cluster_done(self, blocks):
        """一次簇屏障等待完成：同时是这些块的块内屏障（重置共享内存的竞争记录），计数。"""
        self.cwait[blocks] += 1
        self.bar[blocks] += 1
        self.rep.cluster_barriers += int(blocks.size)
        allb = blocks.size == self.nblocks
        for buf in self.shared.values():
            if buf.tracker is not None:
                buf.tracker.reset_blocks(None if allb else blocks, allb)
            if buf.ctracker is not None and buf.per:
                buf.ctracker.barrier(blocks, self.cwait[blocks], buf.per)

    def b___simt_cluster_sync(self, node, args, lanes, fr):
        if lanes.n == 0:
            return Val(T.VOID, np.int32(0))
        blocks = self._cluster_blocks(node, lanes, "cluster.sync()")
        pend = blocks[self.carr[blocks] != self.cwait[blocks]]
        if pend.size:
            b, _ = self.where(int(pend[0]) * self.tpb)
            raise self.fail(SimtRuntimeError, f"线程块 {b} 调用了 barrier_arrive() 还没有 barrier_wait()，就调用 cluster.sync()"
                            "（未定义行为）", f"block {b} calls cluster.sync() between barrier_arrive() and barrier_wait() "
                            "(undefined behaviour)", node)
        self.carr[blocks] += 1
        self._cluster_done(blocks)
        return Val(T.VOID, np.int32(0))

    def b___simt_grid_sync(self, node, args, lanes, fr):
        """grid.sync()（cooperative groups，协作启动）：整个网格的屏障。网格里每一个线程都要到达这同一处；之后
        它是每一块的块内屏障，并且此前所有线程对全局内存的读写都排在此后的读写之前（全局内存的竞争记录清空）。
        模拟器把每次启动都当作协作启动：真实 GPU 上要用 cudaLaunchCooperativeKernel，网格不能大于同时驻留的块数。"""
        if lanes.n == 0:
            return Val(T.VOID, np.int32(0))
        if self.schedule in ("blocks", "blocks-reversed"):
            raise self.unsupported("grid.sync() 与一块接一块的执行：内核里另有一个循环在等别的线程块，整个网格一起执行时"
                                   "等不到，而逐块执行时网格屏障又等不到别的块（模拟器不同时模拟这两种等待）", node)
        self._coresident(node)
        total = self.nblocks * self.tpb
        if lanes.idx is not None and lanes.n != total:
            arrived = lanes.idx
            missing = np.setdiff1d(np.arange(total), arrived, assume_unique=True)
            ab, at = self.where(int(arrived[0]))
            mb, mt = self.where(int(missing[0]))
            raise self.fail(
                BarrierDivergenceError,
                f"网格里只有 {arrived.size} 个线程（例如线程块 {ab} 的线程 {at}）到达这个 grid.sync()，另外 "
                f"{missing.size} 个线程（例如线程块 {mb} 的线程 {mt}）没有到达（它们走了另一条分支、停在另一个屏障或已经 "
                f"return）。网格屏障要等网格里每一块的每一个线程；真实 GPU 上这是未定义行为，常见后果是死锁。"
                f"请把 grid.sync() 移到所有线程都会执行的位置",
                f"only {arrived.size} threads of the grid (e.g. thread {at} of block {ab}) reach this grid.sync(); "
                f"{missing.size} others (e.g. thread {mt} of block {mb}) do not (other branch, other barrier or returned): "
                f"a grid barrier waits for every thread of every block", node)
        self.bar += 1
        self.rep.grid_barriers += self.nblocks
        for buf in self.shared.values():
            if buf.tracker is not None:
                buf.tracker.reset_blocks(None, True)
        self.grid_syncs += 1          # 全局内存的竞争记录在下一次访问时清空（GlobalTracker.access 的 grid_syncs）
        return Val(T.VOID, np.int32(0))

    def resident_blocks(self):
        """同时驻留得下的线程块数的上限与 occupancy 的结果：按 sm_90（H100 SXM 与 H200，132 个 SM）每个 SM 的线程数、
        线程块数与共享内存（静态 + 动态，每块另有 1 KiB 保留）算。寄存器不在模型里，GPU 上的上限可能更小。"""
        from ..occupancy import SM90, occupancy

        occ = occupancy(self.tpb, 0, self.static_shared_bytes + self.shared_bytes)
        return occ["blocks"] * SM90["multiprocessors"], occ

    def _coresident(self, node):
        """协作启动的网格必须同时驻留（resident_blocks），网格更大时 GPU 上的 cudaLaunchCooperativeKernel 会拒绝启动
        （gpu 模式下 reduction_lab 的启动器按驱动的占用率查询核对）。"""
        fit, occ = self.resident_blocks()
        if self.nblocks > fit:
            limit = _LIMIT_ZH[occ["limit"]]
            raise self.fail(LaunchError,
                            f"grid.sync() 要协作启动，网格的 {self.nblocks} 个线程块必须同时驻留；sm_90（132 个 SM）上至多 "
                            f"{fit} 个（每个 SM {occ['blocks']} 个，受{limit}限制，寄存器未计入），GPU 上 "
                            f"cudaLaunchCooperativeKernel 会拒绝启动。请减少块数，例如用网格步长循环",
                            f"grid.sync() needs a cooperative launch: the {self.nblocks} blocks must be resident at once, "
                            f"at most {fit} on sm_90 (132 SMs x {occ['blocks']} per SM, limited by {occ['limit']}; "
                            f"registers not counted)", node)

    def b___simt_cluster_arrive(self, node, args, lanes, fr):
        if lanes.n == 0:
            return Val(T.VOID, np.int32(0))
        blocks = self._cluster_blocks(node, lanes, "cluster.barrier_arrive()")
        pend = blocks[self.carr[blocks] != self.cwait[blocks]]
        if pend.size:
            b, _ = self.where(int(pend[0]) * self.tpb)
            raise self.fail(SimtRuntimeError, f"线程块 {b} 连续两次 barrier_arrive()，中间没有 barrier_wait()（未定义行为）",
                            f"block {b} calls barrier_arrive() twice without barrier_wait() in between "
                            "(undefined behaviour)", node)
        self.carr[blocks] += 1
        return Val(T.VOID, np.int32(0))

    def b___simt_cluster_wait(self, node, args, lanes, fr):
        if lanes.n == 0:
            return Val(T.VOID, np.int32(0))
        blocks = self._cluster_blocks(node, lanes, "cluster.barrier_wait()")
        pend = blocks[self.carr[blocks] == self.cwait[blocks]]
        if pend.size:
            b, _ = self.where(int(pend[0]) * self.tpb)
            raise self.fail(SimtRuntimeError, f"线程块 {b} 调用 barrier_wait() 之前没有 barrier_arrive()（未定义行为）",
                            f"block {b} calls barrier_wait() without a preceding barrier_arrive() (undefined behaviour)",
                            node)
        self._cluster_done(blocks)
        return Val(T.VOID, np.int32(0))

    def b___simt_cluster_block_rank(self, node, args, lanes, fr):
        if self.csize == 1:
            return Val(T.UINT, np.uint32(0))
        return Val(T.UINT, self.crank[self.g(self.blk, lanes)].astype(np.uint32))

    def b___simt_cluster_num_blocks(self, node, args, lanes, fr):
        return Val(T.UINT, np.uint32(self.csize))

    def b___simt_cluster_dim_blocks(self, node, args, lanes, fr):
        return Val(T.VECS["dim3"], tuple(np.uint32(c) for c in self.cluster))

    def b___simt_cluster_block_index(self, node, args, lanes, fr):
        cx, cy, _ = self.cluster
        r = self.crank[self.g(self.blk, lanes)]
        return Val(T.VECS["dim3"], tuple(v.astype(np.uint32) for v in (r % cx, (r // cx) % cy, r // (cx * cy))))

    def b___simt_cluster_dim_threads(self, node, args, lanes, fr):
        return Val(T.VECS["dim3"], tuple(np.uint32(c * b) for c, b in zip(self.cluster, self.block)))

    def b___simt_cluster_thread_index(self, node, args, lanes, fr):
        """簇里的线程坐标：block_index() * blockDim + threadIdx（每一维）。"""
        bi = self.b___simt_cluster_block_index(node, args, lanes, fr).v
        out = []
        for k, f in enumerate("xyz"):
            t = self.builtin_vec("threadIdx", f)
            t = t if np.ndim(t) == 0 else self.g(t, lanes)
            out.append((bi[k] * np.uint32(self.block[k]) + t).astype(np.uint32))
        return Val(T.VECS["dim3"], tuple(out))

    def b___isShared(self, node, args, lanes, fr):
        """指针是否指向共享内存（本块的，或经 map_shared_rank 的别的块的）：1 或 0。"""
        return self._space_is(node, args, lanes, fr, "__isShared", "shared")

    def b___isGlobal(self, node, args, lanes, fr):
        return self._space_is(node, args, lanes, fr, "__isGlobal", "global")

    def _space_is(self, node, args, lanes, fr, name, kind):
        (p,) = self._args(args, 1, node, lanes, fr, name)
        if not p.t.is_ptr:
            raise self.unsupported(f"{name} 的参数不是指针", node)
        return Val(T.UINT, np.uint32(p.buf is not None and p.buf.kind == kind))

    def b___simt_cluster_query_shared_rank(self, node, args, lanes, fr):
        """指针指向的共享内存属于簇里第几块：经 map_shared_rank 得到的指针是那一块，本块的共享内存是本块。"""
        (p,) = self._args(args, 1, node, lanes, fr, "cluster.query_shared_rank")
        if not p.t.is_ptr or p.buf is None or p.buf.kind != "shared":
            raise self.fail(SimtRuntimeError, "cluster.query_shared_rank 的参数必须是指向共享内存的指针（GPU 上是未定义行为）",
                            "cluster.query_shared_rank needs a pointer into shared memory (undefined behaviour on a GPU)",
                            node)
        if p.buf.remote:
            tgt, _, _ = self.remote_target(p.buf, p.v, lanes)
            return Val(T.UINT, np.asarray(self.crank[tgt]).astype(np.uint32))
        return self.b___simt_cluster_block_rank(node, args, lanes, fr)

    def b___simt_map_shared_rank(self, node, args, lanes, fr):
        p, r = self._args(args, 2, node, lanes, fr, "cluster.map_shared_rank")
        if not p.t.is_ptr:
            raise self.unsupported("cluster.map_shared_rank 的第一个参数不是指针（只支持指针的写法）", node)
        if lanes.n == 0:
            return p
        if p.buf is None:
            raise self.fail(OutOfBoundsError, "cluster.map_shared_rank 的指针为空", "cluster.map_shared_rank of a null pointer",
                            node, lane=self.ids(lanes)[0])
        if p.buf.kind != "shared":
            space = {"global": "全局", "local": "局部"}.get(p.buf.kind, p.buf.kind)
            raise self.fail(SimtRuntimeError, f"cluster.map_shared_rank 的指针必须指向共享内存，这里指向{space}数组 {p.buf.name}"
                            "（GPU 上是未定义行为）", f"cluster.map_shared_rank needs a pointer into shared memory, got "
                            f"{p.buf.kind} array {p.buf.name} (undefined behaviour on a GPU)", node, lane=self.ids(lanes)[0])
        rv = np.asarray(T.cast(r.v, T.LLONG)).astype(np.int64)
        bad = (rv < 0) | (rv >= self.csize)
        if np.any(bad):
            i = int(np.flatnonzero(np.broadcast_to(bad, (lanes.n,)))[0])
            rr = int(np.broadcast_to(rv, (lanes.n,))[i])
            c = "x".join(map(str, self.cluster))
            raise self.fail(OutOfBoundsError, f"cluster.map_shared_rank 的簇内编号 {rr} 越界：簇的形状是 {c}，共 {self.csize} 块，"
                            f"编号只能是 0 到 {self.csize - 1}", f"cluster.map_shared_rank: rank {rr} is out of range for a "
                            f"cluster of {self.csize} blocks ({c}): valid ranks are 0..{self.csize - 1}", node,
                            lane=self.ids(lanes)[i])
        buf, off = p.buf, p.v
        if buf.remote:                  # 已经映射过的指针：换一个目标块
            _, off, _ = self.remote_target(buf, off, lanes)
            buf = buf.local
        rb = remote_view(buf)
        v = rv * rank_span(rb) + np.asarray(off, np.int64)
        return Val(p.t, v[()] if np.ndim(v) == 0 else v, rb)

    def b___syncwarp(self, node, args, lanes, fr):
        w = self.g(self.gw, lanes)
        uw = w[np.concatenate(([True], w[1:] != w[:-1]))] if w.size else w
        self.epoch[uw] += 1
        self.rep.warp_syncs += int(uw.size)
        if args:
            self.ev(args[0], lanes, fr)
        return Val(T.VOID, np.int32(0))

    def b___threadfence(self, node, args, lanes, fr):
        if self.global_racecheck and node.name.name == "__threadfence":
            self.clock += 1
            self.fence[self.ids(lanes)] = self.clock
        return Val(T.VOID, np.int32(0))

    b___threadfence_block = b___threadfence

    # -- 线程束洗牌
    def _warp_mask(self, name, mask, lanes, node):
        """warp 级 *_sync 内置函数的 mask 规则：执行它的线程必须在自己的 mask 中，mask 中（存在）的线程
        都必须执行它，且用同一个 mask。返回 (每个线程的 mask, 本线程束里执行它的线程的位图)。"""
        ids = self.ids(lanes)
        lw = self.g(self.lw, lanes)
        tl = self.g(self.tlin, lanes)
        m = np.asarray(T.cast(mask.v, T.UINT)).astype(np.int64)
        gw = self.g(self.gw, lanes)
        starts = np.flatnonzero(np.concatenate(([True], gw[1:] != gw[:-1])))
        bits = np.left_shift(np.int64(1), lw)
        active = np.bitwise_or.reduceat(bits, starts)
        wi = np.cumsum(np.concatenate(([True], gw[1:] != gw[:-1]))) - 1
        act = active[wi]
        # 部分线程束：不存在的线程不要求
        exist_n = np.minimum(32, self.tpb - (tl - lw))
        exist = (np.int64(1) << exist_n) - 1
        need = m & exist
        missing = need & ~act
        selfbit = (m >> lw) & 1
        if np.any(missing != 0) or np.any(selfbit == 0):
            i = int(np.flatnonzero((np.broadcast_to(missing, ids.shape) != 0) | (np.broadcast_to(selfbit, ids.shape) == 0))[0])
            mm = int(np.broadcast_to(m, ids.shape)[i])
            raise self.fail(
                WarpSyncError,
                f"{name} 的 mask 0x{mm:08x} 与实际执行这条指令的线程 0x{int(act[i]):08x} 不一致"
                f"（mask 中的线程都必须执行它，执行它的线程也必须在 mask 中）",
                f"{name} mask 0x{mm:08x} does not match the lanes that execute it (0x{int(act[i]):08x}): "
                f"every lane named in the mask must execute it and every executing lane must be in the mask",
                node, lane=ids[i])
        if np.ndim(m) and m.size > 1 and np.any(m != m[0]):
            # 各线程的 mask 不同：mask 中的每个线程都必须用同一个 mask
            table = np.full((int(wi[-1]) + 1, 32), -1, np.int64)
            table[wi, lw] = m
            named = ((m[:, None] >> np.arange(32)) & 1).astype(bool)
            row = table[wi]
            bad = named & (row != -1) & (row != m[:, None])
            if bad.any():
                i, j = (int(k) for k in np.argwhere(bad)[0])
                raise self.fail(
                    WarpSyncError,
                    f"{name}：lane {int(lw[i])} 的 mask 是 0x{int(m[i]):08x}，其中的 lane {j} 却用 mask 0x{int(row[i, j]):08x} "
                    f"执行这条指令（mask 中的线程必须用同一个 mask），结果未定义",
                    f"{name}: lane {int(lw[i])} uses mask 0x{int(m[i]):08x} but lane {j}, named in it, executes the call "
                    f"with mask 0x{int(row[i, j]):08x}; every lane in the mask must use the same mask (undefined behaviour)",
                    node, lane=ids[i])
        return m, act

    def _shfl(self, kind, node, args, lanes, fr):
        if len(args) not in (3, 4):
            raise self.unsupported(f"__shfl_{kind}_sync 的参数个数", node)
        mask = self.ev(args[0], lanes, fr)
        v = self.ev(args[1], lanes, fr)
        d = self.ev(args[2], lanes, fr)
        width = int(self.ev(args[3], lanes, fr).v) if len(args) == 4 else 32
        if width not in (1, 2, 4, 8, 16, 32):
            raise self.fail(WarpSyncError, f"width={width} 必须是不超过 32 的 2 的幂",
                            f"width={width} must be a power of two <= 32", node)
        if v.t.is_ptr:
            raise self.unsupported("洗牌指针", node)
        ids = self.ids(lanes)
        lw = self.g(self.lw, lanes)
        tl = self.g(self.tlin, lanes)
        dd = np.asarray(d.v).astype(np.int64)
        seg = lw - lw % width
        if kind == "down":
            src = lw + dd
            own = src >= seg + width
        elif kind == "up":
            src = lw - dd
            own = src < seg
        elif kind == "xor":
            src = lw ^ dd
            own = (src < seg) | (src >= seg + width)
        else:
            src = seg + (dd % width)
            own = np.zeros(np.shape(src), bool)
        src = np.where(own, lw, src)
        src_lane = ids - lw + src
        src_t = tl - lw + src
        own = own | (src_t >= self.tpb)
        src_lane = np.where(own, ids, src_lane)
        # 检查 mask：本线程与源线程都必须在 mask 中并且执行到这里
        m, act = self._warp_mask(f"__shfl_{kind}_sync", mask, lanes, node)
        # 源线程必须在 mask 中（拿回自己的值的线程除外）：否则取到的值未定义
        outside = ~own & (((m >> src) & 1) == 0)
        if np.any(outside):
            i = int(np.flatnonzero(np.broadcast_to(outside, ids.shape))[0])
            mm, sl, ln = int(np.broadcast_to(m, ids.shape)[i]), int(np.broadcast_to(src, ids.shape)[i]), int(lw[i])
            raise self.fail(
                WarpSyncError,
                f"__shfl_{kind}_sync：lane {ln} 要读 lane {sl} 的值，但 lane {sl} 不在 mask 0x{mm:08x} 中，读到的值未定义",
                f"__shfl_{kind}_sync: the source lane {sl} of lane {ln} is not in mask 0x{mm:08x}; the value read is undefined",
                node, lane=ids[i])
        full_t = v.t
        buf = np.zeros(self.L, full_t.dtype) if lanes.idx is not None else None
        if buf is None:
            vv = np.broadcast_to(v.v, (self.L,))
            return Val(full_t, vv[src_lane])
        buf[ids] = v.v
        srcbits = (act >> src) & 1
        if np.any(srcbits == 0):
            i = int(np.flatnonzero(srcbits == 0)[0])
            raise self.fail(WarpSyncError, "洗牌的源线程没有执行这条指令", "shuffle source lane is not active",
                            node, lane=ids[i])
        return Val(full_t, buf[src_lane])

    def b___shfl_down_sync(self, node, args, lanes, fr):
        return self._shfl("down", node, args, lanes, fr)

    def b___shfl_up_sync(self, node, args, lanes, fr):
        return self._shfl("up", node, args, lanes, fr)

    def b___shfl_xor_sync(self, node, args, lanes, fr):
        return self._shfl("xor", node, args, lanes, fr)

    def b___shfl_sync(self, node, args, lanes, fr):
        return self._shfl("idx", node, args, lanes, fr)

    # -- warp 级归约 __reduce_*_sync（sm_80 起；只有 32 位整数版本）
    def _reduce_sync(self, op, node, args, lanes, fr):
        name = f"__reduce_{op}_sync"
        mask, v = self._args(args, 2, node, lanes, fr, name)
        t = v.t
        if op in ("add", "min", "max"):
            # 重载只有 (unsigned, unsigned) 与 (unsigned, int)：比 int 窄的整数提升为 int，其他类型两者都能匹配
            ok = t.is_scalar and t.is_int and (t.rank < T.INT.rank or t.bits == 32)
            if not ok:
                raise self.fail(CompileError, f"{name} 只有 unsigned int 与 int 两个版本，参数类型 {t!r} 与两者都能匹配"
                                f"（nvcc 报错）；浮点数请用 __shfl_xor_sync 归约",
                                f'more than one instance of overloaded function "{name}" matches the argument list '
                                f"(argument type {t!r}; only unsigned int and int versions exist)", node)
            rt = T.UINT if t.kind == "u" and t.bits == 32 else T.INT
        else:
            if not t.is_scalar:
                raise self.fail(CompileError, f"{name} 的参数必须能转换成 unsigned int，得到 {t!r}（nvcc 报错）",
                                f"{name} takes an unsigned int, got {t!r}", node)
            rt = T.UINT
        m, _ = self._warp_mask(name, mask, lanes, node)
        ids = self.ids(lanes)
        x = np.broadcast_to(np.asarray(T.cast(v.v, rt)), ids.shape).astype(np.int64)
        # 同一线程束、同一 mask 的线程为一组（规则检查之后，组里恰好是 mask 中存在的线程）
        key = self.g(self.gw, lanes).astype(np.int64) * (1 << 32) + np.broadcast_to(m, ids.shape)
        _, grp = np.unique(key, return_inverse=True)
        ng = int(grp.max()) + 1 if grp.size else 0
        if op == "add":
            acc = np.zeros(ng, np.int64)
            np.add.at(acc, grp, x)
            acc &= 0xFFFFFFFF
        elif op in ("min", "max"):
            f = np.minimum if op == "min" else np.maximum
            acc = np.full(ng, np.iinfo(np.int64).max if op == "min" else np.iinfo(np.int64).min, np.int64)
            f.at(acc, grp, x)
        else:
            f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
            acc = np.full(ng, 0xFFFFFFFF if op == "and" else 0, np.int64)
            f.at(acc, grp, x)
        r = acc[grp]
        out = (r & 0xFFFFFFFF).astype(np.uint32)
        return Val(rt, out.view(np.int32) if rt is T.INT else out)

    def b___reduce_add_sync(self, node, args, lanes, fr):
        return self._reduce_sync("add", node, args, lanes, fr)

    def b___reduce_min_sync(self, node, args, lanes, fr):
        return self._reduce_sync("min", node, args, lanes, fr)

    def b___reduce_max_sync(self, node, args, lanes, fr):
        return self._reduce_sync("max", node, args, lanes, fr)

    def b___reduce_and_sync(self, node, args, lanes, fr):
        return self._reduce_sync("and", node, args, lanes, fr)

    def b___reduce_or_sync(self, node, args, lanes, fr):
        return self._reduce_sync("or", node, args, lanes, fr)

    def b___reduce_xor_sync(self, node, args, lanes, fr):
        return self._reduce_sync("xor", node, args, lanes, fr)

    # -- 原子操作与只读加载
    _ASSERT_KIND = ("__assert", "__global_assert", "__assume", "assert")

    def b___simt_assert(self, node, args, lanes, fr):
        """assert / __assert / __assume：每个活跃线程的条件都要成立，否则报告行号与失败的线程。"""
        kind = self._ASSERT_KIND[int(self.ev(args[1], lanes, fr).v)]
        if lanes.n == 0:
            return Val(T.INT, np.int32(0))
        ok = self.truth(self.ev(args[0], lanes, fr))
        bad = ~np.broadcast_to(ok, (lanes.n,))
        if np.any(bad):
            ids = self.ids(lanes)[np.flatnonzero(bad)]
            where = [self.where(i) for i in ids[:8]]
            shown = "、".join(f"线程块 {b} 线程 {t}" for b, t in where[:4])
            shown_en = ", ".join(f"block {b} thread {t}" for b, t in where[:4])
            more = " 等" if ids.size > 4 else ""
            what = "假设" if kind == "__assume" else "断言"
            err = self.fail(DeviceAssertError, f"{kind}(...) {what}不成立：{shown}{more}（共 {ids.size} 个线程）",
                            f"{kind}(...) failed in {ids.size} thread(s): {shown_en}", node, lane=ids[0])
            err.threads = where
            raise err
        return Val(T.INT, np.int32(0))

    #: printf 的整数转换按长度修饰符取的位数（没有修饰符：int，32 位）
    _PRINTF_BITS = {None: 32, "hh": 8, "h": 16, "l": 64, "ll": 64, "j": 64, "z": 64, "t": 64}
    #: 一次启动最多印出这么多字节：与 GPU 上 printf 缓冲区的默认大小（cudaLimitPrintfFifoSize，1 MiB）相同
    PRINTF_LIMIT = 1 << 20

    def b___simt_printf(self, node, args, lanes, fr):
        """设备端的 printf：每个活跃线程按线程编号的顺序印出一行（GPU 上各线程的输出顺序没有保证），立刻写到
        标准输出，也记进报告的 ``printf``；返回值与 CUDA 相同，是格式串之后的实参个数。一次启动印出的字节数
        超过 :data:`PRINTF_LIMIT` 之后的输出丢掉，报告里记下丢掉了多少行（GPU 上缓冲区满了也是丢掉）。"""
        import sys

        from .clang_frontend import PRINTF_SPEC

        fmt, nargs = self.prog.strings[int(self.ev(args[0], lanes, fr).v)]
        if lanes.n == 0:
            return Val(T.INT, np.int32(nargs))
        pieces, pos, it = [], 0, iter(args[1:])       # 文字段与每个转换格式化好的一列（每个线程一个字符串）
        for m in PRINTF_SPEC.finditer(fmt):
            pieces.append([fmt[pos:m.start()]] * lanes.n)
            pos = m.end()
            if m.group("conv") == "%":
                pieces.append(["%"] * lanes.n)
                continue
            col = np.broadcast_to(np.asarray(self.ev(next(it), lanes, fr).v), (lanes.n,))
            pieces.append(_printf_column(m, col, self._PRINTF_BITS[m.group("len")]))
        pieces.append([fmt[pos:]] * lanes.n)
        rep = self.rep
        for i in range(lanes.n):
            text = "".join(p[i] for p in pieces)
            size = len(text.encode())
            if rep.printf_bytes + size > self.PRINTF_LIMIT:
                rep.printf_dropped += 1
                continue
            rep.printf_bytes += size
            rep.printf += text
            sys.stdout.write(text)
        sys.stdout.flush()
        return Val(T.INT, np.int32(nargs))

    def b___ballot_sync(self, node, args, lanes, fr):
        """__ballot_sync(mask, pred)：mask 中谓词为真的线程的位图（同一线程束的线程得到同一个值）。"""
        mask, v = self._args(args, 2, node, lanes, fr, "__ballot_sync")
        m, _ = self._warp_mask("__ballot_sync", mask, lanes, node)
        return Val(T.UINT, self._ballot(m, v, lanes))

    def _ballot(self, m, v, lanes):
        """每个线程得到它所在线程束里 mask 中谓词 v 为真的线程的位图（uint32）。"""
        ids = self.ids(lanes)
        lw = self.g(self.lw, lanes)
        pred = np.broadcast_to(self.truth(v), ids.shape)
        bits = np.where(pred, np.left_shift(np.int64(1), lw), 0) & np.broadcast_to(m, ids.shape)
        gw = self.g(self.gw, lanes)
        first = np.concatenate(([True], gw[1:] != gw[:-1]))
        starts = np.flatnonzero(first)
        acc = np.bitwise_or.reduceat(bits, starts) if ids.size else bits
        out = acc[np.cumsum(first) - 1] & np.broadcast_to(m, ids.shape)
        return (out & 0xFFFFFFFF).astype(np.uint32)

    def _vote(self, name, args, node, lanes, fr):
        """__any_sync / __all_sync / __uni_sync 的共同部分：(mask 中谓词为真的位图, mask)。"""
        mask, v = self._args(args, 2, node, lanes, fr, name)
        m, _ = self._warp_mask(name, mask, lanes, node)
        ballot = self._ballot(m, v, lanes).astype(np.int64)      # 实参只求值一次
        return ballot, np.broadcast_to(m, ballot.shape) & 0xFFFFFFFF

    def b___any_sync(self, node, args, lanes, fr):
        """__any_sync(mask, pred)：mask 中有一个线程的谓词为真时为 1。"""
        ballot, _ = self._vote("__any_sync", args, node, lanes, fr)
        return Val(T.INT, (ballot != 0).astype(np.int32))

    def b___all_sync(self, node, args, lanes, fr):
        """__all_sync(mask, pred)：mask 中每个线程的谓词都为真时为 1。"""
        ballot, m = self._vote("__all_sync", args, node, lanes, fr)
        return Val(T.INT, (ballot == m).astype(np.int32))

    def b___uni_sync(self, node, args, lanes, fr):
        """__uni_sync(mask, pred)：mask 中各线程的谓词都相同时为 1。"""
        ballot, m = self._vote("__uni_sync", args, node, lanes, fr)
        return Val(T.INT, ((ballot == 0) | (ballot == m)).astype(np.int32))

    def _match(self, name, mask, v, lanes, node):
        """__match_*_sync：每个线程得到 mask 中与它的值相等的线程的位图。"""
        m, _ = self._warp_mask(name, mask, lanes, node)
        if not (v.t.is_scalar and (v.t.is_int or v.t.is_float)):
            raise self.unsupported(f"{name} 的值必须是 32 或 64 位的整数或浮点数", node)
        ids = self.ids(lanes)
        lw = self.g(self.lw, lanes)
        gw = self.g(self.gw, lanes)
        # 按位比较（浮点数的 -0.0 与 0.0 不同，与 GPU 相同）
        val = np.broadcast_to(np.atleast_1d(np.asarray(v.v)).view(np.int32 if v.t.size == 4 else np.int64), ids.shape)
        m = np.broadcast_to(m, ids.shape)
        out = np.zeros(ids.shape, np.int64)
        for w in np.unique(gw):                 # 一个线程束里两两比较
            sel = np.flatnonzero(gw == w)
            eq = val[sel][:, None] == val[sel][None, :]
            out[sel] = (eq * np.left_shift(np.int64(1), lw[sel])[None, :]).sum(1)
        return out & m

    def b___match_any_sync(self, node, args, lanes, fr):
        """__match_any_sync(mask, value)：mask 中与本线程的 value 相等的线程的位图。"""
        mask, v = self._args(args, 2, node, lanes, fr, "__match_any_sync")
        return Val(T.UINT, self._match("__match_any_sync", mask, v, lanes, node).astype(np.uint32))

    def b___frcp_rn(self, node, args, lanes, fr):
        """__frcp_rn(x)：按就近舍入的 1 / x。"""
        (x,) = self._args(args, 1, node, lanes, fr, "__frcp_rn")
        return self.arith("/", Val(T.FLOAT, np.float32(1.0)), Val(T.FLOAT, T.cast(x.v, T.FLOAT)), node, lanes)

    def b_clock64(self, node, args, lanes, fr):
        """clock64()：单调不减的计数。模拟器里是这次启动到此为止执行的车道步数（循环每转一圈加上活跃的线程数），
        不是 GPU 的时钟周期：两次读数之差说明中间做了多少工作，不能换算成时间。"""
        if args:
            raise self.unsupported("clock64 带参数", node)
        self.mutations += 1          # 读数每次都变：用到它的循环不算「什么都没变」
        return Val(T.LLONG, np.int64(self.steps))

    def b___nanosleep(self, node, args, lanes, fr):
        """__nanosleep(ns)：让线程睡一会儿。模拟器里线程按步执行，睡眠不改变结果：只求参数的值（参数里的读写照常检查）。"""
        self._args(args, 1, node, lanes, fr, "__nanosleep")
        return Val(T.VOID, np.int32(0))

    def _bits(self, name, args, node, lanes, fr):
        (v,) = self._args(args, 1, node, lanes, fr, name)
        if not (v.t.is_scalar and v.t.is_int):
            raise self.unsupported(f"{name} 的参数必须是整数", node)
        wide = name.startswith("__popcll") or name.endswith("ll")
        t = T.ULLONG if wide else T.UINT
        return np.asarray(T.cast(v.v, t)).astype(np.uint64), 64 if wide else 32

    def _bit_count_op(self, name, count, node, args, lanes, fr):
        """__popc / __clz / __ffs 及其 64 位版本：按位计数，结果是 int。"""
        x, n = self._bits(name, args, node, lanes, fr)
        r = count(x, n)
        return Val(T.INT, r[()] if r.ndim == 0 else r)

    def _bitcount(self, x, nbits):
        c = np.zeros(x.shape, np.int32)
        for k in range(nbits):
            c += ((x >> np.uint64(k)) & np.uint64(1)).astype(np.int32)
        return c

    def b___popc(self, node, args, lanes, fr):
        return self._bit_count_op("__popc", self._bitcount, node, args, lanes, fr)

    def b___popcll(self, node, args, lanes, fr):
        return self._bit_count_op("__popcll", self._bitcount, node, args, lanes, fr)

    def _clz(self, x, n):
        r = np.full(x.shape, n, np.int32)
        for k in range(n):          # 最高的 1 在第 k 位：前导零 n-1-k
            r = np.where((x >> np.uint64(k)) & np.uint64(1) != 0, n - 1 - k, r).astype(np.int32)
        return r

    def b___clz(self, node, args, lanes, fr):
        return self._bit_count_op("__clz", self._clz, node, args, lanes, fr)

    def b___clzll(self, node, args, lanes, fr):
        return self._bit_count_op("__clzll", self._clz, node, args, lanes, fr)

    def _ffs(self, x, n):
        r = np.zeros(x.shape, np.int32)
        for k in range(n - 1, -1, -1):  # 最低的 1 在第 k 位：返回 k+1；全零返回 0
            r = np.where((x >> np.uint64(k)) & np.uint64(1) != 0, k + 1, r).astype(np.int32)
        return r

    def b___ffs(self, node, args, lanes, fr):
        return self._bit_count_op("__ffs", self._ffs, node, args, lanes, fr)

    def b___ffsll(self, node, args, lanes, fr):
        return self._bit_count_op("__ffsll", self._ffs, node, args, lanes, fr)

    def b___brev(self, node, args, lanes, fr):
        x, n = self._bits("__brev", args, node, lanes, fr)
        r = np.zeros(x.shape, np.uint64)
        for k in range(32):
            r |= ((x >> np.uint64(k)) & np.uint64(1)) << np.uint64(31 - k)
        r = r.astype(np.uint32)
        return Val(T.UINT, r[()] if r.ndim == 0 else r)

    def _frexp(self, name, t, node, args, lanes, fr):
        """frexp(x, &e)：x = m * 2**e，0.5 <= |m| < 1；指数经过指针写回。"""
        x, p = self._args(args, 2, node, lanes, fr, name)
        if not (p.t.is_ptr and p.t.base is T.INT):
            raise self.unsupported(f"{name} 的第二个参数必须是 int*", node)
        m, e = np.frexp(T.cast(x.v, t))
        self.store(p, Val(T.INT, np.asarray(e).astype(np.int32)), lanes, node)
        m = np.asarray(m).astype(t.dtype)
        return Val(t, m[()] if m.ndim == 0 else m)

    def b_frexp(self, node, args, lanes, fr):
        return self._frexp("frexp", T.DOUBLE, node, args, lanes, fr)

    def b_frexpf(self, node, args, lanes, fr):
        return self._frexp("frexpf", T.FLOAT, node, args, lanes, fr)

    def _ldexp(self, name, t, node, args, lanes, fr):
        x, e = self._args(args, 2, node, lanes, fr, name)
        r = np.asarray(np.ldexp(T.cast(x.v, t), np.asarray(T.cast(e.v, T.INT)))).astype(t.dtype)
        return Val(t, r[()] if r.ndim == 0 else r)

    def b_ldexp(self, node, args, lanes, fr):
        return self._ldexp("ldexp", T.DOUBLE, node, args, lanes, fr)

    def b_ldexpf(self, node, args, lanes, fr):
        return self._ldexp("ldexpf", T.FLOAT, node, args, lanes, fr)

    def _mem_ptr(self, v, name, node, lanes):
        if not v.t.is_ptr:
            if np.ndim(v.v) == 0 and int(v.v) == 0 and lanes.n:
                raise self.fail(OutOfBoundsError, f"{name} 的指针为空", f"{name} through a null pointer", node,
                                lane=self.ids(lanes)[0])
            raise self.unsupported(f"{name} 的参数必须是指针", node)
        if v.buf is None:
            if lanes.n:
                raise self.fail(OutOfBoundsError, f"{name} 的指针为空", f"{name} through a null pointer", node,
                                lane=self.ids(lanes)[0])
            return v
        if v.t.base.is_vec:
            self.need_storable(v.t.base, node)
        return v

    def _mem_loop(self, name, d, nbytes, lanes, node, body):
        """memcpy/memset：按存储单元逐个复制，每个线程 nbytes / 单元大小 次（字节数必须是单元大小的整数倍）。"""
        es = d.buf.elem.size
        nb = np.broadcast_to(np.asarray(T.cast(nbytes.v, T.LONG)).astype(np.int64), (lanes.n,))
        if np.any(nb < 0):
            raise self.unsupported(f"{name} 的字节数为负", node)
        cnt = nb // es
        dv = np.broadcast_to(np.asarray(d.v), (lanes.n,))
        for k in range(int(cnt.max()) if cnt.size else 0):
            m = cnt > k
            sub = self.sub(lanes, m)
            body(k, sub, m, Val(T.Ptr(d.buf.elem), dv[m] + k, d.buf))

    def _as_bytes(self, p):
        """同一个地址的 unsigned char 指针（按字节的视图）。"""
        u = p.buf.elem.size
        return Val(T.Ptr(T.UCHAR, p.t.vol, p.t.const), p.v * u, p.buf.byte_view())

    def b___builtin_memcpy(self, node, args, lanes, fr):
        """memcpy(dst, src, n)：两边的存储单元大小相同时按位复制（结构体、不同类型的数组之间也可以）。"""
        if len(args) != 3:
            raise self.unsupported("memcpy 需要 3 个参数", node)
        d, src, n = (self.ev(a, lanes, fr) for a in args)
        d, src = self._mem_ptr(d, "memcpy", node, lanes), self._mem_ptr(src, "memcpy", node, lanes)
        if lanes.n == 0:
            return d
        nb = np.asarray(T.cast(n.v, T.LONG)).astype(np.int64)
        if d.buf.elem.size != src.buf.elem.size or np.any(nb % d.buf.elem.size):
            # 单元大小不同或字节数不是单元的整数倍：两边都按字节复制
            d, src = self._as_bytes(d), self._as_bytes(src)
        sv = np.broadcast_to(np.asarray(src.v), (lanes.n,))

        def body(k, sub, m, q):
            v = np.asarray(self.load(Val(T.Ptr(src.buf.elem), sv[m] + k, src.buf), sub, node).v)
            if v.dtype != d.buf.elem.dtype:
                v = v.view(d.buf.elem.dtype)
            self.store(q, Val(d.buf.elem, v), sub, node)
        self._mem_loop("memcpy", d, n, lanes, node, body)
        return d

    def b___builtin_memset(self, node, args, lanes, fr):
        """memset(dst, c, n)：每个字节写成 c 的低 8 位。"""
        if len(args) != 3:
            raise self.unsupported("memset 需要 3 个参数", node)
        d, c, n = (self.ev(a, lanes, fr) for a in args)
        d = self._mem_ptr(d, "memset", node, lanes)
        if lanes.n == 0:
            return d
        if np.ndim(c.v) and np.any(np.asarray(c.v) != np.asarray(c.v).reshape(-1)[0]):
            raise self.unsupported("memset 的值在各线程不同", node)
        byte = int(np.asarray(c.v).reshape(-1)[0]) & 0xFF
        if np.any(np.asarray(T.cast(n.v, T.LONG)).astype(np.int64) % d.buf.elem.size):
            d = self._as_bytes(d)          # 字节数不是单元的整数倍：按字节写
        pat = np.full(d.buf.elem.size, byte, np.uint8).view(d.buf.elem.dtype)[0]
        self._mem_loop("memset", d, n, lanes, node, lambda k, sub, m, q: self.store(q, Val(d.buf.elem, pat), sub, node))
        return d

    def b_memcpy(self, node, args, lanes, fr):
        return self.b___builtin_memcpy(node, args, lanes, fr)

    def b_memset(self, node, args, lanes, fr):
        return self.b___builtin_memset(node, args, lanes, fr)

    def b___saturatef(self, node, args, lanes, fr):
        """__saturatef(x)：钳到 [0, 1]，NaN 得 0。"""
        (v,) = self._args(args, 1, node, lanes, fr, "__saturatef")
        x = T.cast(v.v, T.FLOAT)
        r = np.where(np.isnan(x), np.float32(0), np.clip(x, np.float32(0), np.float32(1))).astype(np.float32)
        return Val(T.FLOAT, r[()] if r.ndim == 0 else r)

    def _bitcast(self, name, src, dst, node, args, lanes, fr):
        """__int_as_float、__float_as_uint ...：同样的 32 位按另一种类型解释（不做数值转换）。"""
        (v,) = self._args(args, 1, node, lanes, fr, name)
        if v.t.is_ptr or v.t.is_vec:
            raise self.unsupported(f"{name} 的参数必须是标量", node)
        r = np.asarray(T.cast(v.v, src)).view(dst.dtype)
        return Val(dst, r[()] if r.ndim == 0 else r)

    def b___int_as_float(self, node, args, lanes, fr):
        return self._bitcast("__int_as_float", T.INT, T.FLOAT, node, args, lanes, fr)

    def b___uint_as_float(self, node, args, lanes, fr):
        return self._bitcast("__uint_as_float", T.UINT, T.FLOAT, node, args, lanes, fr)

    def b___float_as_int(self, node, args, lanes, fr):
        return self._bitcast("__float_as_int", T.FLOAT, T.INT, node, args, lanes, fr)

    def b___float_as_uint(self, node, args, lanes, fr):
        return self._bitcast("__float_as_uint", T.FLOAT, T.UINT, node, args, lanes, fr)

    def b___double_as_longlong(self, node, args, lanes, fr):
        return self._bitcast("__double_as_longlong", T.DOUBLE, T.LLONG, node, args, lanes, fr)

    def b___longlong_as_double(self, node, args, lanes, fr):
        return self._bitcast("__longlong_as_double", T.LLONG, T.DOUBLE, node, args, lanes, fr)

    def _rn(self, name, op, args, node, lanes, fr):
        """__fadd_rn、__fmul_rn ...：按 IEEE 就近舍入的 float 运算（不会被合成 FMA）。"""
        a, b = self._args(args, 2, node, lanes, fr, name)
        return self.arith(op, Val(T.FLOAT, T.cast(a.v, T.FLOAT)), Val(T.FLOAT, T.cast(b.v, T.FLOAT)), node, lanes)

    def b___fadd_rn(self, node, args, lanes, fr):
        return self._rn("__fadd_rn", "+", args, node, lanes, fr)

    def b___fsub_rn(self, node, args, lanes, fr):
        return self._rn("__fsub_rn", "-", args, node, lanes, fr)

    def b___fmul_rn(self, node, args, lanes, fr):
        return self._rn("__fmul_rn", "*", args, node, lanes, fr)

    def b___fdiv_rn(self, node, args, lanes, fr):
        return self._rn("__fdiv_rn", "/", args, node, lanes, fr)

    def b___mul24(self, node, args, lanes, fr):
        """两个整数的低 24 位相乘（有符号，先对第 24 位做符号扩展），取乘积的低 32 位。"""
        a, b = (self.conv(v, T.INT, node).v.astype(np.int64) for v in self._args(args, 2, node, lanes, fr, "__mul24"))
        a = ((a & 0xFFFFFF) ^ 0x800000) - 0x800000
        b = ((b & 0xFFFFFF) ^ 0x800000) - 0x800000
        return Val(T.INT, np.asarray((a * b) & 0xFFFFFFFF, np.uint64).astype(np.uint32).view(np.int32)[()])

    def b___umul24(self, node, args, lanes, fr):
        """两个无符号整数的低 24 位相乘，取乘积的低 32 位。"""
        a, b = (self.conv(v, T.UINT, node).v.astype(np.uint64) for v in self._args(args, 2, node, lanes, fr, "__umul24"))
        return Val(T.UINT, np.asarray(((a & 0xFFFFFF) * (b & 0xFFFFFF)) & 0xFFFFFFFF, np.uint64).astype(np.uint32)[()])

    # -- cooperative groups 的线程束分块（前端改写而来）
    def _tile_width(self, w, node):
        w = int(np.asarray(w.v).reshape(-1)[0])
        if w not in (1, 2, 4, 8, 16, 32):
            raise self.unsupported(f"tiled_partition<{w}>（只支持不超过 32 的 2 的幂）", node)
        return w

    def b___simt_tile_mask(self, node, args, lanes, fr):
        (w,) = self._args(args, 1, node, lanes, fr, "tiled_partition")
        w = self._tile_width(w, node)
        if w == 32:
            return Val(T.UINT, np.uint32(0xFFFFFFFF))
        lw = self.g(self.lw, lanes).astype(np.int64)
        return Val(T.UINT, ((np.int64((1 << w) - 1)) << (lw - lw % w)).astype(np.uint32))

    def _tile_reduce(self, op, node, args, lanes, fr):
        v, w = self._args(args, 2, node, lanes, fr, "cooperative_groups::reduce")
        w = self._tile_width(w, node)
        if v.t.is_ptr or v.t.is_vec:
            raise self.unsupported("cooperative_groups::reduce 的值必须是标量", node)
        ids = self.ids(lanes)
        tl = self.g(self.tlin, lanes)
        start = ids - tl % w
        grp, cnt = np.unique(start, return_counts=True)
        full = np.minimum(w, self.tpb - (grp - (grp // self.tpb) * self.tpb))
        if np.any(cnt != full):
            k = int(np.flatnonzero(cnt != full)[0])
            raise self.fail(WarpSyncError, f"cooperative_groups::reduce：大小为 {w} 的分块里只有 {int(cnt[k])} 个线程执行它",
                            f"cooperative_groups::reduce: only {int(cnt[k])} threads of a tile of {w} call it",
                            node, lane=int(grp[k]))
        buf = np.zeros(self.L, v.t.dtype)
        buf[ids] = v.v
        f = {"add": np.add, "max": np.maximum, "min": np.minimum}[op]
        k = w // 2
        while k:        # 蝴蝶交换：与 __shfl_xor_sync 的归约同样的加法顺序
            part = ids - tl % w + ((tl % w) ^ k)
            part = np.where(part - (ids - tl) < self.tpb, part, ids)
            buf[ids] = f(buf[ids], buf[part]).astype(v.t.dtype)
            k //= 2
        return Val(v.t, buf[ids])

    def b___simt_tile_reduce_add(self, node, args, lanes, fr):
        return self._tile_reduce("add", node, args, lanes, fr)

    def b___simt_tile_reduce_max(self, node, args, lanes, fr):
        return self._tile_reduce("max", node, args, lanes, fr)

    def b___simt_tile_reduce_min(self, node, args, lanes, fr):
        return self._tile_reduce("min", node, args, lanes, fr)

    # -- 半精度的转换函数（cuda_fp16.h / cuda_bf16.h）：参数先按 float 传入，再就近舍入到偶数
    def _half_conv(self, node, args, lanes, fr, name, src, dst):
        (v,) = self._args(args, 1, node, lanes, fr, name)
        if dst is None:
            raise self.unsupported(T.BF16_MISSING, node)
        if src is not T.FLOAT and v.t is not src:
            raise self.fail(CompileError, f"{name} 的参数应为 {src.name}，得到 {v.t!r}（nvcc 报错）",
                            f"{name} expects a {src.name} argument, got {v.t!r} (nvcc rejects it)", node)
        return Val(dst, T.cast(self.conv(v, src, node).v, dst))

    def b___float2half(self, node, args, lanes, fr):
        return self._half_conv(node, args, lanes, fr, "__float2half", T.FLOAT, T.HALF)

    b___float2half_rn = b___float2half

    def b___half2float(self, node, args, lanes, fr):
        return self._half_conv(node, args, lanes, fr, "__half2float", T.HALF, T.FLOAT)

    def b___float2bfloat16(self, node, args, lanes, fr):
        return self._half_conv(node, args, lanes, fr, "__float2bfloat16", T.FLOAT, T.BF16)

    b___float2bfloat16_rn = b___float2bfloat16

    def b___bfloat162float(self, node, args, lanes, fr):
        if T.BF16 is None:
            raise self.unsupported(T.BF16_MISSING, node)
        return self._half_conv(node, args, lanes, fr, "__bfloat162float", T.BF16, T.FLOAT)

    # -- 成对的半精度（__half2、__nv_bfloat162）：.x 是低 16 位
    def _pair_type(self, name, node, bf16):
        if bf16 and T.BF16 is None:
            raise self.unsupported(T.BF16_MISSING, node)
        return T.VECS["__nv_bfloat162" if bf16 else "__half2"]

    def _floats2pair(self, node, args, lanes, fr, name, bf16, n):
        vt = self._pair_type(name, node, bf16)
        vals = self._args(args, n, node, lanes, fr, name)
        xs = [T.cast(self.conv(v, T.FLOAT, node).v, vt.elem) for v in vals]
        return Val(vt, (xs[0], xs[-1]))           # 一个参数时两个分量相同

    def _pair2floats(self, node, args, lanes, fr, name, want):
        (v,) = self._args(args, 1, node, lanes, fr, name)
        if not v.t.is_vec or v.t.name not in ("__half2", "__nv_bfloat162"):
            raise self.fail(CompileError, f"{name} 的参数应为 __half2 或 __nv_bfloat162，得到 {v.t!r}（nvcc 报错）",
                            f"{name} expects a __half2 or __nv_bfloat162, got {v.t!r} (nvcc rejects it)", node)
        fs = [T.cast(np.asarray(x), T.FLOAT) for x in v.v]
        if want == "pair":
            return Val(T.VECS["float2"], tuple(fs))
        return Val(T.FLOAT, fs[0] if want == "low" else fs[1])

    def b___floats2half2_rn(self, node, args, lanes, fr):
        return self._floats2pair(node, args, lanes, fr, "__floats2half2_rn", False, 2)

    def b___float2half2_rn(self, node, args, lanes, fr):
        return self._floats2pair(node, args, lanes, fr, "__float2half2_rn", False, 1)

    def b___floats2bfloat162_rn(self, node, args, lanes, fr):
        return self._floats2pair(node, args, lanes, fr, "__floats2bfloat162_rn", True, 2)

    def b___float2bfloat162_rn(self, node, args, lanes, fr):
        return self._floats2pair(node, args, lanes, fr, "__float2bfloat162_rn", True, 1)

    def b___half22float2(self, node, args, lanes, fr):
        return self._pair2floats(node, args, lanes, fr, "__half22float2", "pair")

    def b___bfloat1622float2(self, node, args, lanes, fr):
        return self._pair2floats(node, args, lanes, fr, "__bfloat1622float2", "pair")

    def b___low2float(self, node, args, lanes, fr):
        return self._pair2floats(node, args, lanes, fr, "__low2float", "low")

    def b___high2float(self, node, args, lanes, fr):
        return self._pair2floats(node, args, lanes, fr, "__high2float", "high")

    # -- 半精度的算术、比较与成对的半精度（按 float32 计算，结果就近舍入到参数的类型）
    def _half_type(self, vals, name, node):
        for v in vals:
            if v.t is T.HALF or (T.BF16 is not None and v.t is T.BF16):
                return v.t
            if v.t.is_vec and v.t.name in ("__half2", "__nv_bfloat162"):
                return v.t
        raise self.fail(CompileError, f"{name} 的参数应为 __half 或 __nv_bfloat16（成对的版本：__half2、__nv_bfloat162），"
                        f"得到 {', '.join(repr(v.t) for v in vals)}（nvcc 报错）",
                        f"{name} expects half-precision arguments (nvcc rejects it)", node)

    def _half_arith(self, name, args, node, lanes, fr):
        n, fn = _HALF_ARITH[name]
        vals = self._args(args, n, node, lanes, fr, name)
        t = self._half_type(vals, name, node)
        xs = [np.asarray(T.cast(self.conv(v, t, node).v, T.FLOAT), np.float32) for v in vals]
        with np.errstate(all="ignore"):
            r = np.asarray(fn(*xs), np.float32)
        return Val(t, T.cast(r[()] if r.ndim == 0 else r, t))

    def _half_cmp(self, name, args, node, lanes, fr):
        vals = self._args(args, 2, node, lanes, fr, name)
        t = self._half_type(vals, name, node)
        xs = [np.asarray(T.cast(self.conv(v, t, node).v, T.FLOAT), np.float32) for v in vals]
        return Val(T.BOOL, _HALF_CMP[name](*xs))

    def _pair_arith(self, name, args, node, lanes, fr):
        base = _PAIR_ARITH[name]
        n, fn = _HALF_ARITH[base]
        vals = self._args(args, n, node, lanes, fr, name)
        vt = self._half_type(vals, name, node)
        if not vt.is_vec or any(v.t != vt for v in vals):
            raise self.fail(CompileError, f"{name} 的参数应为同一种成对的半精度（__half2 或 __nv_bfloat162）（nvcc 报错）",
                            f"{name} expects __half2 / __nv_bfloat162 arguments (nvcc rejects it)", node)
        out = []
        for k in range(2):
            xs = [np.asarray(T.cast(np.asarray(v.v[k]), T.FLOAT), np.float32) for v in vals]
            with np.errstate(all="ignore"):
                r = np.asarray(fn(*xs), np.float32)
            out.append(T.cast(r[()] if r.ndim == 0 else r, vt.elem))
        return Val(vt, tuple(out))

    def b___hisnan(self, node, args, lanes, fr):
        (v,) = self._args(args, 1, node, lanes, fr, "__hisnan")
        self._half_type([v], "__hisnan", node)          # 参数必须是半精度
        return Val(T.BOOL, np.isnan(np.asarray(T.cast(np.asarray(v.v), T.FLOAT), np.float32)))

    def _pair_part(self, node, args, lanes, fr, name, k):
        (v,) = self._args(args, 1, node, lanes, fr, name)
        vt = self._half_type([v], name, node)
        if not vt.is_vec:
            raise self.fail(CompileError, f"{name} 的参数应为成对的半精度（nvcc 报错）", f"{name} expects a pair (nvcc rejects it)",
                            node)
        return Val(vt.elem, v.v[k])

    def b___low2half(self, node, args, lanes, fr):
        return self._pair_part(node, args, lanes, fr, "__low2half", 0)

    def b___high2half(self, node, args, lanes, fr):
        return self._pair_part(node, args, lanes, fr, "__high2half", 1)

    b___low2bfloat16, b___high2bfloat16 = b___low2half, b___high2half

    def _halves2pair(self, node, args, lanes, fr, name, bf16):
        vt = self._pair_type(name, node, bf16)
        a, b = self._args(args, 2, node, lanes, fr, name)
        return Val(vt, (T.cast(self.conv(a, vt.elem, node).v, vt.elem), T.cast(self.conv(b, vt.elem, node).v, vt.elem)))

    def b___halves2half2(self, node, args, lanes, fr):
        return self._halves2pair(node, args, lanes, fr, "__halves2half2", False)

    def b___halves2bfloat162(self, node, args, lanes, fr):
        return self._halves2pair(node, args, lanes, fr, "__halves2bfloat162", True)

    def b___ldg(self, node, args, lanes, fr, name="__ldg"):
        (p,) = self._args(args, 1, node, lanes, fr, name)
        if not p.t.is_ptr:
            raise self.unsupported(f"{name} 的参数不是指针", node)
        if name in ("__ldcg", "__ldcv"):     # 绕过 L1 的读：轮询别的 SM 写的标志时的写法，自旋检测把它当作 volatile 读
            self.spin_reads += 1
        return self.load(p, lanes, node)

    def _hint_store(self, node, args, lanes, fr, name):
        """__stcs(p, v) 等：*p = v（v 先转换成 *p 的类型，向量类型要与 *p 相同）。"""
        p, v = self._args(args, 2, node, lanes, fr, name)
        if not p.t.is_ptr:
            raise self.unsupported(f"{name} 的第一个参数不是指针", node)
        el = p.t.base
        if el.is_scalar and v.t.is_scalar:
            v = Val(el, T.cast(v.v, el))
        elif el != v.t:
            raise self.unsupported(f"{name} 的值类型 {v.t!r} 与指针指向的类型 {el!r} 不同", node)
        self.store(p, v, lanes, node)
        return Val(T.VOID, np.int32(0))

    def _atomic(self, op, node, args, lanes, fr, scope="device", store=False):
        """atomic{op}；scope 是 "device"（atomicAdd 与 atomicAdd_system）或 "block"（atomicAdd_block：只对同一线程块
        的线程是原子的，别的线程块同时改同一个全局字时算竞争）。store：原子的写（<cuda/atomic> 在共享内存上的
        store，即 atomicExch 而不用旧值），不读旧值，所以写之前没初始化也可以，写完算作已初始化。"""
        cmp_v = None
        name = f"atomic{op}" + ("_block" if scope == "block" else "")
        if op == "CAS":
            p, cmp_v, v = self._args(args, 3, node, lanes, fr, name)
        else:
            p, v = self._args(args, 2, node, lanes, fr, name)
        if not p.t.is_ptr or p.t.base.is_array or not p.t.base.is_scalar:
            raise self.unsupported(f"{name} 的第一个参数必须是标量指针", node)
        el = p.t.base
        if op not in ("Add", "Sub", "Exch") and el.is_float:
            raise self.unsupported(f"{name} 用于浮点数（CUDA 只提供整数版本）", node)
        self.check_bounds(p, lanes, node, "原子")
        buf = p.buf
        if buf.remote and scope == "block":
            raise self.unsupported(f"{name} 经 cluster.map_shared_rank 访问共享内存（簇里的几个线程块都能改它，"
                                   f"线程块作用域的原子操作在这里没有意义；请用 atomic{op}）", node)
        if buf.remote:              # 经 cluster.map_shared_rank：别的块的共享内存（atom.shared::cluster）
            tgt, _, _ = self.remote_target(buf, p.v, lanes)
            tgt = np.broadcast_to(tgt, (lanes.n,))
            own = np.broadcast_to(self.g(self.blk, lanes), (lanes.n,))
            rem = tgt != own
            if rem.any():
                self.rep.dsmem_atomic_ops += int(rem.sum())
                self._note_remote(buf, tgt[rem], own[rem], self.ids(lanes)[rem], node, True)
        if p.t.const or buf.constant:
            raise self.const_write(buf, node)
        if self.saved is not None and buf.kind == "global":
            self.save(buf)
        flat = np.broadcast_to(self._flat(buf, p.v, lanes), (lanes.n,))
        if buf.init is not None:
            if store:
                self.mark_init(buf, flat)
            else:
                self.check_init(buf, flat, lanes, node)
        val = np.broadcast_to(T.cast(v.v, el), (lanes.n,))
        self.rep.atomic_ops += lanes.n
        if buf.tracker is not None:
            self.race(buf, flat, lanes, node, False, "atomic_cas" if op == "CAS" else "atomic")
        elif buf.kind == "global" and self.global_racecheck:
            if buf.gtracker is None:
                buf.gtracker = GlobalTracker(buf.per)
            self.global_race(buf, flat, lanes, node, "atomic_block" if scope == "block" else
                             "atomic_cas" if op == "CAS" else "atomic")
        data = buf.data if buf.data.dtype == el.dtype else buf.data.view(el.dtype)    # 结构体里类型不同的成员
        # 按线程编号顺序依次执行（GPU 上顺序不确定）
        order = np.argsort(flat, kind="stable")
        fs = flat[order]
        vs = val[order]
        starts = np.flatnonzero(np.concatenate(([True], fs[1:] != fs[:-1])))
        ends = np.concatenate((starts[1:], [fs.size]))
        before = data[fs[starts]].tobytes()      # 自旋检测：原子操作真的改了值才算改变了内存
        self.spin_reads += 1
        old_sorted = np.empty(fs.size, el.dtype)
        if op in ("Add", "Sub") and el.is_int:
            vs2 = vs if op == "Add" else -vs
            cs = np.cumsum(vs2, dtype=el.dtype)
            base = data[fs[starts]]
            prev = np.concatenate(([el.dtype.type(0)], cs[:-1]))
            grp = np.repeat(np.arange(starts.size), ends - starts)
            old_sorted = base[grp] + (prev - prev[starts][grp])
            data[fs[starts]] = base + (cs[ends - 1] - prev[starts])
        else:
            # 按“轮”执行：第 k 轮处理每个地址的第 k 个线程，同一地址上的顺序与线程编号一致
            sizes = ends - starts
            rank = np.arange(fs.size) - np.repeat(starts, sizes)
            rorder = np.argsort(rank, kind="stable")
            rb = np.searchsorted(rank[rorder], np.arange(int(sizes.max()) + 1))
            ufunc = {"Add": np.add, "Sub": np.subtract, "Max": np.maximum, "Min": np.minimum, "And": np.bitwise_and,
                     "Or": np.bitwise_or, "Xor": np.bitwise_xor}.get(op)
            cmp = np.broadcast_to(T.cast(cmp_v.v, el), (lanes.n,))[order] if cmp_v is not None else None
            for k in range(int(sizes.max())):
                sel = rorder[rb[k]:rb[k + 1]]
                a = fs[sel]
                cur = data[a]
                old_sorted[sel] = cur
                if op == "Inc":        # ((old >= val) ? 0 : old + 1)
                    data[a] = np.where(cur >= vs[sel], 0, cur + 1).astype(el.dtype)
                elif op == "Dec":      # ((old == 0) | (old > val)) ? val : old - 1
                    data[a] = np.where((cur == 0) | (cur > vs[sel]), vs[sel], cur - 1).astype(el.dtype)
                elif op == "CAS":      # old == compare ? val : old
                    data[a] = np.where(cur == cmp[sel], vs[sel], cur).astype(el.dtype)
                else:
                    data[a] = vs[sel] if ufunc is None else ufunc(cur, vs[sel]).astype(el.dtype)
        if data[fs[starts]].tobytes() != before:
            self.mutations += 1
        old = np.empty(lanes.n, el.dtype)
        old[order] = old_sorted
        return Val(el, old)


def _atomic_method(op, suffix):
    scope = "block" if suffix == "_block" else "device"

    def b(self, node, args, lanes, fr):
        return self._atomic(op, node, args, lanes, fr, scope)
    b.__name__ = f"b_atomic{op}{suffix}"
    return b


# b_atomicAdd 与它的两个作用域版本 b_atomicAdd_block、b_atomicAdd_system ……
for _op in _ATOMIC_OPS:
    for _suffix in _ATOMIC_SCOPES:
        setattr(Machine, f"b_atomic{_op}{_suffix}", _atomic_method(_op, _suffix))


def _atomic_store_method(scope):
    def b(self, node, args, lanes, fr):
        return self._atomic("Exch", node, args, lanes, fr, scope, store=True)
    b.__name__ = "b___simt_atomic_store" + ("_block" if scope == "block" else "")
    return b


# <cuda/atomic> 在共享内存上的 store：原子的写
Machine.b___simt_atomic_store = _atomic_store_method("device")
Machine.b___simt_atomic_store_block = _atomic_store_method("block")


def _half_method(kind, name):
    def method(self, node, args, lanes, fr):
        return getattr(self, kind)(name, args, node, lanes, fr)
    method.__name__ = "b_" + name
    return method


for _n in _HALF_ARITH:
    setattr(Machine, "b_" + _n, _half_method("_half_arith", _n))
for _n in _HALF_CMP:
    setattr(Machine, "b_" + _n, _half_method("_half_cmp", _n))
for _n in _PAIR_ARITH:
    setattr(Machine, "b_" + _n, _half_method("_pair_arith", _n))


def _hint_method(name, impl):
    """带缓存提示的读写（__ldcs、__stcs ……）：按名字交给普通的读（b___ldg）或写（_hint_store）。"""
    def method(self, node, args, lanes, fr):
        return impl(self, node, args, lanes, fr, name)
    return method


for _name in _HINT_LOADS:
    setattr(Machine, "b_" + _name, _hint_method(_name, Machine.b___ldg))
for _name in _HINT_STORES:
    setattr(Machine, "b_" + _name, _hint_method(_name, Machine._hint_store))


def _printf_column(m, col, bits):
    """printf 的一个转换（``m`` 是 PRINTF_SPEC 的匹配）作用在一列值上，按 C 的规则：整数按长度修饰符截成 8 到 64 位，
    %d / %i 按有符号解释，%u %o %x %X 按无符号（不加 + 与空格）；%#x 遇到 0 不加 0x，%#o 让第一位是 0；
    %c 取低 8 位的字符；给了精度的整数转换忽略 0 标志；浮点按 double。"""
    flags, width, prec, conv = m.group("flags"), m.group("width") or "", m.group("prec"), m.group("conv")
    dot = "" if prec is None else "." + (prec or "0")
    if conv in "eEfFgG":                                # inf 与 nan 不补 0（C 用空格补齐）；nan 不印符号：
        f = f"%{flags}{width}{dot}{conv}"                # 模拟器里 0/0 的符号与 GPU 上的不同
        g = f"%{flags.replace('0', '')}{width}{dot}{conv}"
        return [(f if math.isfinite(v) else g) % (abs(v) if v != v else v) for v in col.astype(np.float64).tolist()]
    if prec is not None:                                # C：整数转换给了精度时忽略 0 标志
        flags = flags.replace("0", "")
    u = col.astype(np.int64).astype(np.uint64)
    if bits < 64:
        u = u & np.uint64((1 << bits) - 1)
    vals = [int(v) for v in u]
    if conv == "c":
        f = f"%{flags.replace('0', '')}{width}s"
        return [f % chr(v & 0xFF) for v in vals]
    if conv in "di":
        f = f"%{flags}{width}{dot}d"
        return [f % (v - (1 << bits) if v >> (bits - 1) else v) for v in vals]
    plain = flags.replace("+", "").replace(" ", "")
    out = []
    for v in vals:
        fl = plain
        d = dot
        if "#" in plain and (v == 0 or conv == "o"):
            fl = plain.replace("#", "")
            if conv == "o" and v:                       # C：精度加到第一位是 0
                d = "." + str(max(int(prec or 1) if prec is not None else 1, len(f"{v:o}") + 1))
        out.append(f"%{fl}{width}{d}{'d' if conv == 'u' else conv}" % v)
    return out
