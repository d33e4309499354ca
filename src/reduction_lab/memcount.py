"""访存计数与越界检查：在 Triton 解释器里数清每次内核启动读写了多少元素、多少字节。

课程页面：docs/triton/fused-softmax.md（访存计数）与 docs/triton/masking.md（越界与掩码）。

用法::

    import reduction_lab as rl
    with rl.count_memory() as report:
        y = rl.fused_softmax(x)
    print(report.elements_loaded, report.elements_stored)
    print(report)                      # 中文表格：每次启动一行，最后一行合计

在 ``with`` 块里启动的每个 Triton 内核都经过解释器逐个 program 执行：

* 计数：每次启动记下内核名、网格、program 数，以及读取 / 写入的元素数和字节数。
  被掩码屏蔽的车道不计；原子操作单独计（``elements_atomic``）。
* 越界检查（``check_bounds=True``，默认打开）：每次读写之前，检查每个活动车道的地址
  是否落在本次启动的某个张量参数覆盖的内存范围内（从 ``data_ptr()`` 起、到视图最后
  一个元素为止）。越界就在访问发生 *之前* 抛出 :class:`OutOfBoundsError`，指明内核、
  program 编号、读还是写、越过哪个参数多远，以及内核源码的行。

两种模式：

* sim 模式（``TRITON_INTERPRET=1``）：内核本来就由解释器执行，这里只包装解释器的
  builder（``create_masked_load`` / ``create_masked_store`` / ``set_grid_idx`` 等）和
  ``GridExecutor.__call__``（一次启动）。
* gpu 模式（Triton 编译模式）：``with`` 块里的启动改由解释器在张量的 CPU 副本上执行，
  成功后再把结果拷回原来的 CUDA 张量，所以两种模式打印的计数完全相同。内核里调用的
  @jit 辅助函数（如 ``tl.max``）在启动期间也改走解释器，每次调用后立即撤销对
  ``triton.language`` 的修改；离开 ``with`` 块时恢复一切，之后编译模式照常工作。

这些都用到 Triton 解释器的私有接口。它们在 triton 3.0 到 3.9 之间存在；实测过的版本是
3.6.0 与 3.9.0（tests/test_memcount.py 全部通过，编译模式路径用 CPU 张量验证）。gpu 模式还需要
``_patch_lang`` 返回可撤销的补丁作用域（``_LangPatchScope``，3.6 与 3.9 都有）。在这个范围之外
使用会发出 :class:`UntestedTritonWarning`，缺少所需接口时抛出带说明的 ``RuntimeError``。

局限：解释器一个接一个地运行 program（每行大约 1 ms），只适合几百个 program 以内的例子；
计数的是内核发出的访问，不是 DRAM 流量（没有缓存模型）；越界检查按参数视图覆盖的地址
区间判断：跨步视图中间的空隙不算越界，一个指针越界后恰好落进 *另一个* 张量参数也不算
（解释器不记录指针来自哪个参数）。gpu 模式下只拦截 ``kernel[grid](...)`` 形式的启动
（``JITFunction.run``）；torch.compile 生成的内核走自己的启动器，不计数。

报告的属性：``report.records``（:class:`LaunchRecord` 列表，也可以 ``report[i]``、
``len(report)``、``for r in report``）、``report.launches``（启动次数）、
``report.elements_loaded`` / ``elements_stored`` / ``bytes_loaded`` / ``bytes_stored``
（所有启动的合计）、``report.table()``（与 ``str(report)`` 相同的中文表格）。
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import linecache
import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from . import runtime as _runtime  # noqa: F401  保证 sim 模式先设置 TRITON_INTERPRET

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as _interp  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from .textcols import columns, pad  # noqa: E402
from .triton_compat import INTERPRETER_LOCK, install_interpreter_lock, version_tuple, wrap_patch_lang  # noqa: E402

install_interpreter_lock()          # 在任何包装之前：计数期间与计数之外的启动用同一把锁

__all__ = [
    "count_memory",
    "MemoryReport",
    "LaunchRecord",
    "OutOfBoundsError",
    "UntestedTritonWarning",
    "SUPPORTED_TRITON",
    "TESTED_TRITON",
]

#: 依赖的解释器内部接口存在的版本区间（含两端，按 major.minor）。
SUPPORTED_TRITON = ((3, 0), (3, 9))
#: 实测通过的版本。
TESTED_TRITON = ("3.6.0", "3.9.0")


class UntestedTritonWarning(RuntimeWarning):
    """当前 triton 版本不在 :data:`SUPPORTED_TRITON` 区间内。"""


class OutOfBoundsError(IndexError):
    """内核的一次读 / 写访问落在本次启动所有张量参数之外（在访问发生之前抛出）。

    属性：``kernel``、``pid``（program 编号三元组）、``op``（"load" / "store" / "atomic"）、
    ``argument``（离得最近的参数名）、``shape``、``direction``（"after" 末尾之后 /
    "before" 起点之前）、``elements``、``bytes``（最远的越界车道离该参数多远）、
    ``lanes``（越界的活动车道数）、``active``（活动车道总数）、``line``（内核源码位置）。
    """

    def __init__(self, message: str, **info: Any) -> None:
        super().__init__(message)
        self.kernel = info.get("kernel")
        self.pid = info.get("pid")
        self.op = info.get("op")
        self.argument = info.get("argument")
        self.shape = info.get("shape")
        self.direction = info.get("direction")
        self.elements = info.get("elements")
        self.bytes = info.get("bytes")
        self.lanes = info.get("lanes")
        self.active = info.get("active")
        self.line = info.get("line")


# ---------------------------------------------------------------------------
# 报告对象
# ---------------------------------------------------------------------------

@dataclass
class LaunchRecord:
    """一次内核启动的计数。"""

    kernel: str
    grid: tuple = ()
    programs: int = 0
    elements_loaded: int = 0
    elements_stored: int = 0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    #: 执行的读 / 写指令次数（每个 program 每条 tl.load 算一次）。
    loads: int = 0
    stores: int = 0
    #: 原子操作（atomic_add、atomic_cas 等）访问的元素数与字节数，不计入读写。
    elements_atomic: int = 0
    bytes_atomic: int = 0
    #: 张量参数：名字 -> (shape, dtype 字符串)。
    arguments: dict = field(default_factory=dict)
    #: 按参数分的元素数：名字 -> 从它读取 / 向它写入的元素数。越界车道不归入任何参数；
    #: 同一块内存作为几个参数传入（如原地运算）时，归入签名里靠前的那个。
    loaded_by_arg: dict = field(default_factory=dict)
    stored_by_arg: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return (f"{self.kernel} grid={self.grid} programs={self.programs}: "
                f"读 {self.elements_loaded:,} 个元素 / {self.bytes_loaded:,} 字节，"
                f"写 {self.elements_stored:,} 个元素 / {self.bytes_stored:,} 字节")


class MemoryReport:
    """:func:`count_memory` 产出的报告：``records`` 是 :class:`LaunchRecord` 列表（也可以
    直接迭代、索引、``len()``），其余属性是所有启动的合计。"""

    def __init__(self, check_bounds: bool = True) -> None:
        self.check_bounds = check_bounds
        self.records: list[LaunchRecord] = []

    # 合计
    def _total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.records)

    @property
    def launches(self) -> int:
        """内核启动次数。"""
        return len(self.records)

    @property
    def programs(self) -> int:
        return self._total("programs")

    @property
    def elements_loaded(self) -> int:
        return self._total("elements_loaded")

    @property
    def elements_stored(self) -> int:
        return self._total("elements_stored")

    @property
    def bytes_loaded(self) -> int:
        return self._total("bytes_loaded")

    @property
    def bytes_stored(self) -> int:
        return self._total("bytes_stored")

    @property
    def elements_atomic(self) -> int:
        return self._total("elements_atomic")

    @property
    def bytes_atomic(self) -> int:
        return self._total("bytes_atomic")

    @property
    def bytes_total(self) -> int:
        """读 + 写 + 原子访问的总字节数。"""
        return self.bytes_loaded + self.bytes_stored + self.bytes_atomic

    def kernels(self) -> list[str]:
        """按启动顺序列出内核名（可能重复）。"""
        return [r.kernel for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[LaunchRecord]:
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def __repr__(self) -> str:
        return (f"MemoryReport(launches={self.launches}, elements_loaded={self.elements_loaded}, "
                f"elements_stored={self.elements_stored}, bytes_loaded={self.bytes_loaded}, "
                f"bytes_stored={self.bytes_stored})")

    def table(self) -> str:
        """中文表格：每次启动一行，最后一行合计。数字都是精确计数，两种模式下相同。"""
        atomics = any(r.elements_atomic for r in self.records)
        head = ["内核", "网格", "program 数", "读取元素", "写入元素", "读取字节", "写入字节"]
        if atomics:
            head += ["原子元素", "原子字节"]
        rows = []
        for r in self.records:
            grid = "(" + ", ".join(str(g) for g in r.grid) + ("," if len(r.grid) == 1 else "") + ")"
            row = [r.kernel, grid, f"{r.programs:,}", f"{r.elements_loaded:,}", f"{r.elements_stored:,}",
                   f"{r.bytes_loaded:,}", f"{r.bytes_stored:,}"]
            if atomics:
                row += [f"{r.elements_atomic:,}", f"{r.bytes_atomic:,}"]
            rows.append(row)
        total = [f"合计（{self.launches} 次启动）", "", f"{self.programs:,}", f"{self.elements_loaded:,}",
                 f"{self.elements_stored:,}", f"{self.bytes_loaded:,}", f"{self.bytes_stored:,}"]
        if atomics:
            total += [f"{self.elements_atomic:,}", f"{self.bytes_atomic:,}"]
        rows.append(total)
        widths = [max(columns(x) for x in col) for col in zip(head, *rows)]
        lines = []
        for k, row in enumerate([head, *rows]):
            cells = [pad(c, w, right=i >= 2) for i, (c, w) in enumerate(zip(row, widths))]
            lines.append("  ".join(cells).rstrip())
            if k == 0 or k == len(rows) - 1:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __str__(self) -> str:
        if not self.records:
            return "（没有启动任何 Triton 内核）"
        return self.table()




# ---------------------------------------------------------------------------
# 版本与接口检查
# ---------------------------------------------------------------------------

_version_warned = False


def _check_triton(compiled: bool) -> None:
    global _version_warned
    ver = getattr(triton, "__version__", "0.0")
    lo, hi = SUPPORTED_TRITON
    if not (lo <= version_tuple(ver) <= hi) and not _version_warned:
        _version_warned = True
        warnings.warn(
            f"reduction_lab.count_memory 依赖 Triton 解释器的内部接口，只在 triton "
            f"{lo[0]}.{lo[1]}–{hi[0]}.{hi[1]} 上验证过（实测 {', '.join(TESTED_TRITON)}），当前是 {ver}；"
            f"计数或越界检查可能出错 (count_memory relies on private Triton interpreter internals "
            f"tested on triton {', '.join(TESTED_TRITON)}; found {ver})",
            UntestedTritonWarning, stacklevel=3)
    needed = [(_interp.interpreter_builder, "create_masked_load"),
              (_interp.interpreter_builder, "create_masked_store"),
              (_interp.interpreter_builder, "set_grid_idx"),
              (_interp.GridExecutor, "__call__")]
    if compiled:
        needed += [(_interp, "_patch_lang"), (_interp, "_LangPatchScope"), (_interp, "InterpretedFunction"),
                   (JITFunction, "run")]
    missing = [f"{getattr(o, '__name__', type(o).__name__)}.{n}" for o, n in needed if not hasattr(o, n)]
    if missing:
        raise RuntimeError(
            f"当前 triton {ver} 缺少 count_memory 需要的解释器接口：{', '.join(missing)}；"
            f"请使用 triton {lo[0]}.{lo[1]}–{hi[0]}.{hi[1]} "
            f"(triton {ver} lacks interpreter internals needed by count_memory: {', '.join(missing)})")


def _triton_compiled() -> bool:
    """triton 是否处于编译模式（@jit 得到 JITFunction 而不是 InterpretedFunction）。"""
    return not isinstance(tl.standard.max, _interp.InterpretedFunction)


# ---------------------------------------------------------------------------
# 启动期间的状态
# ---------------------------------------------------------------------------

@dataclass
class _Extent:
    name: str
    start: int
    end: int          # 不含
    shape: tuple
    dtype: str


@dataclass
class _Launch:
    record: LaunchRecord
    extents: list
    check: bool
    pid: tuple = (0, 0, 0)
    error: BaseException | None = None


class _State:
    def __init__(self) -> None:
        self.reports: list[tuple[MemoryReport, int]] = []   # (报告, 打开它的线程)
        self.lock = INTERPRETER_LOCK       # 安装 / 卸载、报告列表、每一次启动（与解释器共用一把锁）
        self.undo: list = []               # (obj, name, had_own, old)，按逆序恢复
        self.compiled = False
        self.rewritten: list = []          # 编译模式下由本模块触发改写的函数
        self.injected: list = []           # (globals 字典, {名字: 值})：改写时注入的名字
        self.lang_snapshot: list = []      # 编译模式：triton.language 各对象进入时的属性


_STATE = _State()
_TLS = threading.local()                   # 每个线程自己的当前启动（_Launch 或 None）
_MISSING = object()


def _current_launch():
    return getattr(_TLS, "launch", None)


def _targets() -> list:
    """本线程的启动记进哪些报告：本线程打开的；本线程没有打开的（如 autograd 的工作线程），
    记进所有打开着的报告。"""
    mine = threading.get_ident()
    own = [rep for rep, tid in _STATE.reports if tid == mine]
    return own or [rep for rep, _ in _STATE.reports]


def _set(obj, name, value) -> None:
    had_own = name in vars(obj)
    old = vars(obj)[name] if had_own else None
    _STATE.undo.append((obj, name, had_own, old))
    setattr(obj, name, value)


def _restore_all() -> None:
    while _STATE.undo:
        obj, name, had_own, old = _STATE.undo.pop()
        if had_own:
            setattr(obj, name, old)
        else:
            try:
                delattr(obj, name)
            except AttributeError:
                pass


# ---------------------------------------------------------------------------
# 参数覆盖的内存范围
# ---------------------------------------------------------------------------

def _is_tensor(x) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "untyped_storage")


def _extent_of(name: str, t) -> _Extent | None:
    base = getattr(t, "base", None) if not _is_tensor(t) else t     # triton.reinterpret 的包装
    if base is None or not _is_tensor(base):
        return None
    start = int(base.data_ptr())
    if base.numel() == 0:
        span = 0
    else:
        span = (1 + sum((s - 1) * abs(st) for s, st in zip(base.shape, base.stride()))) * base.element_size()
    dtype = str(getattr(t, "dtype", base.dtype))
    return _Extent(name, start, start + span, tuple(base.shape), dtype)


def _collect_extents(name: str, value, out: list) -> None:
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _collect_extents(f"{name}[{i}]", v, out)
        return
    if hasattr(value, "base") and hasattr(value, "block_shape") and hasattr(value, "strides"):
        _collect_extents(f"{name}.base", value.base, out)              # TensorDescriptor
        return
    if hasattr(value, "data_ptr"):
        ext = _extent_of(name, value)
        if ext is not None:
            out.append(ext)


def _bind(fn, args, kwargs) -> list:
    names = inspect.getfullargspec(fn).args
    pairs = list(zip(names, args))
    pairs += [(k, v) for k, v in kwargs.items() if k in names]
    return pairs


# ---------------------------------------------------------------------------
# 计数与检查（解释器 builder 的包装）
# ---------------------------------------------------------------------------

def _elem_bytes(ptrs) -> int:
    try:
        bits = ptrs.get_element_ty().primitive_bitwidth
    except Exception:
        bits = 64
    return max(1, int(bits) // 8)


def _active(ptrs, mask) -> np.ndarray:
    addr = np.asarray(ptrs.data)
    if mask is None:
        return addr.reshape(-1).astype(np.uint64, copy=False)
    m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
    return addr[m].astype(np.uint64, copy=False)


def _kernel_line() -> str:
    """内核源码里发出这次访问的那一行（跳过 triton 与本模块的栈帧）。"""
    skip = (os.path.dirname(triton.__file__), os.path.abspath(__file__), os.path.dirname(np.__file__))
    f = sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(skip) and not fn.startswith("<"):
            src = linecache.getline(fn, f.f_lineno).strip()
            return f"{os.path.basename(fn)}:{f.f_lineno}" + (f" `{src}`" if src else "")
        f = f.f_back
    return ""


def _locate(launch: _Launch, addr: np.ndarray, es: int):
    """每个活动车道落在哪个参数里。返回 ({参数下标: 车道数}, 越界车道的地址数组或 None)。"""
    if addr.size == 0:
        return {}, None
    lo, hi = int(addr.min()), int(addr.max())
    for k, e in enumerate(launch.extents):
        if e.start <= lo and hi + es <= e.end:
            return {k: int(addr.size)}, None         # 快速路径：全部落在同一个参数里
    inside = np.zeros(addr.shape, dtype=bool)
    counts = {}
    for k, e in enumerate(launch.extents):
        if e.end - e.start >= es:
            hit = (addr >= np.uint64(e.start)) & (addr <= np.uint64(e.end - es)) & ~inside
            n = int(np.count_nonzero(hit))
            if n:
                counts[k] = n
                inside |= hit
    if inside.all():
        return counts, None
    return counts, addr[~inside]


def _account(launch: _Launch, ptrs, mask, op: str) -> tuple:
    """检查（需要时）并按参数归类一次访问；返回 (活动车道数, 每个元素的字节数)。"""
    addr = _active(ptrs, mask)
    es = _elem_bytes(ptrs)
    counts, bad = _locate(launch, addr, es)
    if bad is not None and launch.check:
        _raise_oob(launch, addr, bad, es, op)
    by_arg = {"load": launch.record.loaded_by_arg, "store": launch.record.stored_by_arg}.get(op)
    if by_arg is not None:
        for k, n in counts.items():
            name = launch.extents[k].name
            by_arg[name] = by_arg.get(name, 0) + n
    return int(addr.size), es


def _raise_oob(launch: _Launch, addr: np.ndarray, bad: np.ndarray, es: int, op: str) -> None:
    # 每个越界车道到最近参数的距离（字节），取最远的那个车道来报告
    best_dist = np.full(bad.shape, np.iinfo(np.uint64).max, dtype=np.uint64)
    best_arg = np.full(bad.shape, -1, dtype=np.int64)
    for k, e in enumerate(launch.extents):
        last = np.uint64(max(e.end - es, e.start))
        before = bad < np.uint64(e.start)
        dist = np.where(before, np.uint64(e.start) - bad, bad - last)
        closer = dist < best_dist
        best_dist = np.where(closer, dist, best_dist)
        best_arg = np.where(closer, k, best_arg)
    worst = int(np.argmax(best_dist))
    a = int(bad[worst])
    pid = launch.pid
    kernel = launch.record.kernel
    line = _kernel_line()
    where = f"（{line}）" if line else ""
    where_en = f" at {line}" if line else ""
    op_zh = {"load": "读取", "store": "写入", "atomic": "原子操作"}[op]
    if best_arg[worst] < 0:
        dist_zh = f"地址 {a:#x} 不属于任何张量参数"
        dist_en = f"address {a:#x} belongs to no tensor argument"
        info = {}
    else:
        e = launch.extents[int(best_arg[worst])]
        if a < e.start:
            nbytes, direction = e.start - a, "before"
            zh_dir, en_dir = "起点之前", "before the start of"
        else:
            nbytes, direction = a + es - e.end, "after"
            zh_dir, en_dir = "末尾之后", "past the end of"
        nelem = -(-nbytes // es)
        dist_zh = (f"最远的一个在参数 `{e.name}`（shape {e.shape}，{e.dtype}）{zh_dir} "
                   f"{nelem:,} 个元素 / {nbytes:,} 字节")
        dist_en = (f"the furthest is {nelem:,} element{'s' if nelem != 1 else ''} / {nbytes:,} bytes "
                   f"{en_dir} argument `{e.name}` (shape {e.shape}, {e.dtype})")
        info = dict(argument=e.name, shape=e.shape, direction=direction, elements=nelem, bytes=nbytes)
    msg = (f"越界{op_zh}：内核 `{kernel}` 的 program {pid} 有 {bad.size:,}/{addr.size:,} 个活动车道越界，"
           f"{dist_zh}{where}；访问在发生前被拦下。\n"
           f"out-of-bounds {op} in kernel `{kernel}`, program {pid}: {bad.size:,} of {addr.size:,} active "
           f"lanes out of bounds; {dist_en}{where_en}. The access was not performed.")
    err = OutOfBoundsError(msg, kernel=kernel, pid=pid, op=op, lanes=int(bad.size), active=int(addr.size),
                           line=line, **info)
    launch.error = err
    raise err


def _wrap_load(orig):
    def create_masked_load(ptrs, mask, *args, **kwargs):
        launch = _current_launch()
        if launch is not None:
            n, es = _account(launch, ptrs, mask, "load")
            r = launch.record
            r.loads += 1
            r.elements_loaded += n
            r.bytes_loaded += n * es
        return orig(ptrs, mask, *args, **kwargs)
    return create_masked_load


def _wrap_store(orig):
    def create_masked_store(ptrs, value, mask, *args, **kwargs):
        launch = _current_launch()
        if launch is not None:
            n, es = _account(launch, ptrs, mask, "store")
            r = launch.record
            r.stores += 1
            r.elements_stored += n
            r.bytes_stored += n * es
        return orig(ptrs, value, mask, *args, **kwargs)
    return create_masked_store


def _count_atomic(ptr, mask) -> None:
    launch = _current_launch()
    if launch is None:
        return
    n, es = _account(launch, ptr, mask, "atomic")
    launch.record.elements_atomic += n
    launch.record.bytes_atomic += n * es


def _wrap_atomic_rmw(orig):
    def create_atomic_rmw(rmwOp, ptr, val, mask, *args, **kwargs):
        _count_atomic(ptr, mask)
        return orig(rmwOp, ptr, val, mask, *args, **kwargs)
    return create_atomic_rmw


def _wrap_atomic_cas(orig):
    def create_atomic_cas(ptr, cmp, val, *args, **kwargs):
        _count_atomic(ptr, None)
        return orig(ptr, cmp, val, *args, **kwargs)
    return create_atomic_cas


def _to_int(v) -> int:
    try:
        return int(v)
    except TypeError:
        return int(np.asarray(v.handle.data).reshape(-1)[0])


def _wrap_grid_dim(orig):
    def set_grid_dim(nx, ny, nz):
        launch = _current_launch()
        if launch is not None:
            dims = [_to_int(d) for d in (nx, ny, nz)]
            while len(dims) > 1 and dims[-1] == 1:
                dims.pop()
            launch.record.grid = tuple(dims)
            launch.record.programs = int(np.prod(dims))
        return orig(nx, ny, nz)
    return set_grid_dim


def _wrap_grid_idx(orig):
    def set_grid_idx(x, y, z):
        launch = _current_launch()
        if launch is not None:
            launch.pid = (_to_int(x), _to_int(y), _to_int(z))
            if not hasattr(_interp.InterpreterBuilder, "set_grid_dim"):
                # 老版本没有 set_grid_dim：按出现过的最大编号推出网格
                g = launch.record.grid or (0, 0, 0)
                g = tuple(max(a, b + 1) for a, b in zip(g + (0,) * (3 - len(g)), launch.pid))
                launch.record.grid = g
                launch.record.programs += 1
        return orig(x, y, z)
    return set_grid_idx


# ---------------------------------------------------------------------------
# 一次启动：GridExecutor.__call__ 的包装
# ---------------------------------------------------------------------------

def _to_host(args, kwargs):
    """把不在 CPU 上的张量换成共享 CPU 存储的副本（同一存储的多个视图仍然共享）。
    返回 (host_args, host_kwargs, copies)，copies 是 [(原存储, CPU 存储)]。"""
    storages: dict = {}

    def conv(x):
        if isinstance(x, tuple):
            vals = [conv(v) for v in x]
            return type(x)(*vals) if hasattr(x, "_fields") else type(x)(vals)
        if _is_tensor(x) and x.device.type != "cpu":
            st = x.untyped_storage()
            key = st.data_ptr()
            if key not in storages:
                storages[key] = (st, st.cpu())
            host = x.new_empty(0, device="cpu")
            host.set_(storages[key][1], x.storage_offset(), x.size(), x.stride())
            return host
        base = getattr(x, "base", None)
        if base is not None and not _is_tensor(x) and _is_tensor(base) and base.device.type != "cpu":
            if hasattr(x, "block_shape"):                       # TensorDescriptor
                import dataclasses
                return dataclasses.replace(x, base=conv(base))
            return type(x)(conv(base), x.dtype)                 # triton.reinterpret 的包装
        return x

    hargs = [conv(a) for a in args]
    hkwargs = {k: conv(v) for k, v in kwargs.items()}
    return hargs, hkwargs, list(storages.values())


def _wrap_grid_call(orig):
    def __call__(self, *args, **kwargs):
        if not _STATE.reports or _current_launch() is not None:
            return orig(self, *args, **kwargs)
        # 解释器的 builder 是进程内唯一的对象：被计数的启动一个接一个地执行
        with _STATE.lock:
            targets = _targets()
            if not targets:
                return orig(self, *args, **kwargs)
            return _counted_launch(orig, self, targets, args, kwargs)
    return __call__


def _counted_launch(orig, self, targets, args, kwargs):
    hargs, hkwargs, copies = _to_host(args, kwargs)
    extents: list = []
    for name, value in _bind(self.fn, hargs, hkwargs):
        _collect_extents(name, value, extents)
    record = LaunchRecord(kernel=getattr(self.fn, "__name__", "?"),
                          arguments={e.name: (e.shape, e.dtype) for e in extents})
    for rep in targets:
        rep.records.append(record)
    launch = _Launch(record, extents, any(rep.check_bounds for rep in targets))
    _TLS.launch = launch
    try:
        orig(self, *hargs, **hkwargs)
    except BaseException:
        if launch.error is not None:
            raise launch.error from None
        raise
    finally:
        _TLS.launch = None
    for dev, host in copies:                      # 只在成功时把结果拷回设备
        dev.copy_(host)


# ---------------------------------------------------------------------------
# 编译模式：启动改走解释器，@jit 辅助函数也改走解释器
# ---------------------------------------------------------------------------

def _rewrite(fn):
    """解释器的 AST 改写（带缓存），记下它向模块全局变量里注入的名字，离开时删掉。"""
    cache = _interp.InterpretedFunction.rewritten_fn
    if fn in cache:
        return cache[fn]
    g = fn.__globals__
    before = set(g)
    out = _interp.InterpretedFunction(fn).rewrite()
    _STATE.rewritten.append(fn)
    added = {k: g[k] for k in set(g) - before}
    if added:
        _STATE.injected.append((g, added))
    return out


def _jit_fn_call(self, *args, **kwargs):
    """启动期间 JITFunction.__call__ 的替身：@jit 辅助函数经解释器执行，随后撤销语言补丁。"""
    scope = _interp._patch_lang(self.fn)
    try:
        return _rewrite(self.fn)(*args, **kwargs)
    finally:
        scope.restore()


def _jit_fn_get(self, instance, owner=None):
    if instance is None:
        return self
    return functools.partial(_jit_fn_call, self, instance)


def _compiled_run(orig_run):
    def run(self, *args, grid, warmup, **kwargs):
        with _STATE.lock:
            return _run_locked(self, args, grid, warmup, kwargs)

    def _run_locked(self, args, grid, warmup, kwargs):
        if warmup or not _STATE.reports:
            return orig_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        fn = _rewrite(self.fn)
        arg_names = [p.name for p in inspect.signature(self.fn).parameters.values()]
        hooks = list(getattr(self, "pre_run_hooks", []) or [])
        executor = _interp.GridExecutor(fn, arg_names, grid, hooks)
        # 启动期间：@jit 辅助函数可以调用；作为张量方法（x.sum(axis=0)）时也要绑定 self
        saved = {k: vars(JITFunction).get(k, _MISSING) for k in ("__call__", "__get__")}
        JITFunction.__call__ = _jit_fn_call
        JITFunction.__get__ = _jit_fn_get
        try:
            return executor(*args, **kwargs)
        finally:
            for k, v in saved.items():
                if v is _MISSING:
                    delattr(JITFunction, k)
                else:
                    setattr(JITFunction, k, v)
    return run


def _lang_objects() -> list:
    objs = [tl, tl.core, tl.math, tl.standard, tl.core.tensor, tl.core.dtype, _interp.interpreter_builder]
    for name in ("condition", "tensor_descriptor_base"):
        if hasattr(tl.core, name):
            objs.append(getattr(tl.core, name))
    return objs


def _snapshot_lang() -> None:
    _STATE.lang_snapshot = [(o, dict(vars(o))) for o in _lang_objects()]


def _restore_lang() -> None:
    """把 triton.language 恢复成进入时的样子（解释器的补丁作用域会留下同值的自有属性）。"""
    for obj, saved in _STATE.lang_snapshot:
        now = dict(vars(obj))
        for k in now.keys() - saved.keys():
            try:
                delattr(obj, k)
            except (AttributeError, TypeError):
                pass
        for k, v in saved.items():
            if now.get(k, _MISSING) is not v:
                setattr(obj, k, v)
    _STATE.lang_snapshot = []


def _cleanup_compiled() -> None:
    _restore_lang()
    cache = _interp.InterpretedFunction.rewritten_fn
    for fn in _STATE.rewritten:
        cache.pop(fn, None)
    for g, added in _STATE.injected:
        for k, v in added.items():
            if g.get(k, _MISSING) is v:
                del g[k]
    _STATE.rewritten.clear()
    _STATE.injected.clear()


# ---------------------------------------------------------------------------
# 公开入口
# ---------------------------------------------------------------------------

def _install() -> None:
    compiled = _triton_compiled()
    _check_triton(compiled)
    b = _interp.interpreter_builder
    _STATE.compiled = compiled
    if compiled:
        _snapshot_lang()                  # 先于任何包装：离开时整体恢复
    _set(b, "create_masked_load", _wrap_load(b.create_masked_load))
    _set(b, "create_masked_store", _wrap_store(b.create_masked_store))
    _set(b, "set_grid_idx", _wrap_grid_idx(b.set_grid_idx))
    if hasattr(b, "set_grid_dim"):
        _set(b, "set_grid_dim", _wrap_grid_dim(b.set_grid_dim))
    if hasattr(b, "create_atomic_rmw"):
        _set(b, "create_atomic_rmw", _wrap_atomic_rmw(b.create_atomic_rmw))
    if hasattr(b, "create_atomic_cas"):
        _set(b, "create_atomic_cas", _wrap_atomic_cas(b.create_atomic_cas))
    _set(_interp.GridExecutor, "__call__", _wrap_grid_call(_interp.GridExecutor.__call__))
    if hasattr(_interp, "_patch_lang"):
        _set(_interp, "_patch_lang", wrap_patch_lang(_interp._patch_lang))
    if compiled:
        _set(JITFunction, "run", _compiled_run(JITFunction.run))


def _uninstall() -> None:
    try:
        _restore_all()
    finally:
        if _STATE.compiled:
            _cleanup_compiled()
        _TLS.launch = None
        _STATE.compiled = False


@contextlib.contextmanager
def count_memory(*, check_bounds: bool = True) -> Iterator[MemoryReport]:
    """在 ``with`` 块里数清每次 Triton 内核启动的读写，并检查越界。

    ``check_bounds=False`` 只计数不检查。可以嵌套：外层报告也包含内层的启动；
    只要有一层要求检查就检查。

    线程：每个线程的启动记进本线程打开的报告，几个线程可以同时各自计数；一个没有打开报告的
    线程（例如 gpu 模式下执行反向的 autograd 工作线程）在计数期间的启动记进所有打开着的报告。
    Triton 解释器不是线程安全的（每次启动临时改写 triton.language，builder 是进程内唯一的对象），
    所以解释执行的启动——计数之内与 sim 模式下的所有启动——都持有
    :data:`reduction_lab.triton_compat.INTERPRETER_LOCK`，依次执行。离开 ``with`` 块（包括因异常离开）时恢复解释器和
    ``triton.language`` 的原状。越界时抛出 :class:`OutOfBoundsError`。
    """
    if not isinstance(check_bounds, bool):
        raise TypeError(f"check_bounds 必须是 bool，得到 {check_bounds!r} (check_bounds must be a bool)")
    report = MemoryReport(check_bounds=check_bounds)
    entry = (report, threading.get_ident())
    with _STATE.lock:
        if not _STATE.reports:
            try:
                _install()
            except BaseException:
                _uninstall()
                raise
        _STATE.reports.append(entry)
    try:
        yield report
    finally:
        with _STATE.lock:
            if entry in _STATE.reports:
                _STATE.reports.remove(entry)
            if not _STATE.reports:
                _uninstall()


def is_counting() -> bool:
    """当前是否处在 ``count_memory()`` 之内（此时内核由解释器逐个 program 执行）。

    需要不同 program 互相等待的内核（例如一次启动的分段 softmax）据此改用两次启动，
    否则解释器会一直等下去。"""
    return bool(_STATE.reports)
