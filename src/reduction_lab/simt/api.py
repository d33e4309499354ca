"""公开入口：launch 与 kernel_signature（文档：docs/cuda/simulator.md）。

    from reduction_lab import simt
    rep = simt.launch(src, "reduce0", grid=4, block=128, args=(x, out, n),
                      shared_bytes=128 * 4)
    print(rep)

Arrays (numpy, or CPU torch tensors converted with ``.numpy()`` so that they
share memory) are written in place; Python scalars are converted to the C type
of the parameter.
"""

from __future__ import annotations

import time

import numpy as np

from . import ctype as T
from .counters import Report
from .errors import LaunchError, SimtError, UnsupportedError
from .frontend import parse
from .interpreter import Machine, Starved, Val
from .memory import Buffer, array_arg, scalar_arg, vec_arg
from .sanitizers import GlobalTracker

MAX_THREADS = 1 << 24
#: 每个循环的迭代上限：默认不限，由整次启动的工作预算 :data:`MAX_LANE_STEPS` 兜底
MAX_LOOP_ITERATIONS = None
#: 一次启动的工作预算，单位「线程步」：每个循环每迭代一次，计活跃线程数（至少
#: ``interpreter.MIN_STEPS_PER_ITERATION``）。2**28 个线程步在这台 CPU 上约为几十秒的上限；
#: 课程里最大的模拟（64 x 65536 的 softmax）用约 1.3e7 个
MAX_LANE_STEPS = 1 << 28
#: 动态共享内存不需要额外申请就能用的上限（cudaFuncAttributeMaxDynamicSharedMemorySize 的默认值）
DEFAULT_DYNAMIC_SHARED = 48 * 1024
#: 各架构每个线程块最多可申请的共享内存（字节，静态 + 动态，CUDA 编程指南的计算能力表）
ARCH_SHARED_PER_BLOCK = {
    "sm_70": 98304, "sm_75": 65536, "sm_80": 166912, "sm_86": 101376, "sm_87": 166912,
    "sm_89": 101376, "sm_90": 232448, "sm_100": 232448, "sm_120": 101376,
}


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _dims(v, what):
    if _is_int(v):
        v = (int(v),)
    if not isinstance(v, (tuple, list)) or not all(_is_int(x) for x in v):
        raise TypeError(f"{what} 应为整数或不超过 3 个整数的元组，得到 {v!r} / "
                        f"{what} must be an int or a tuple of up to 3 ints, got {v!r}")
    v = tuple(int(x) for x in v)
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise LaunchError(f"{what}={v} 不合法：需要 1 到 3 个正整数 / invalid {what}: {v}")
    return v + (1,) * (3 - len(v))


def _check_count(v, what, allow_none=True):
    if v is None and allow_none:
        return
    if not _is_int(v) or v < 1:
        raise TypeError(f"{what} 应为正整数{'或 None' if allow_none else ''}，得到 {v!r} / "
                        f"{what} must be a positive int{' or None' if allow_none else ''}, got {v!r}")


def shared_limits(shared_bytes, max_dynamic_shared_bytes=None, arch="sm_90"):
    """检查动态共享内存的申请，规则与驱动相同：超过 48 KiB 必须先申请
    （``max_dynamic_shared_bytes``，即 cudaFuncAttributeMaxDynamicSharedMemorySize），申请值不能超过
    所选架构每个线程块的上限。返回该上限（静态 + 动态共享内存之和不能超过它）。
    ``arch`` 是架构名（如 "sm_90"），或直接给出上限的字节数（GPU 上取自设备属性）。"""
    if _is_int(arch):
        limit = int(arch)
    elif arch in ARCH_SHARED_PER_BLOCK:
        limit = ARCH_SHARED_PER_BLOCK[arch]
    else:
        raise LaunchError(f"未知的架构 {arch!r}，可选：{', '.join(ARCH_SHARED_PER_BLOCK)} / unknown arch {arch!r}")
    if not _is_int(shared_bytes) or shared_bytes < 0:
        raise TypeError(f"shared_bytes 应为非负整数，得到 {shared_bytes!r} / shared_bytes must be a non-negative int")
    if max_dynamic_shared_bytes is not None:
        if not _is_int(max_dynamic_shared_bytes) or max_dynamic_shared_bytes < 0:
            raise TypeError(f"max_dynamic_shared_bytes 应为非负整数，得到 {max_dynamic_shared_bytes!r} / "
                            f"max_dynamic_shared_bytes must be a non-negative int")
        if max_dynamic_shared_bytes > limit:
            raise LaunchError(f"max_dynamic_shared_bytes={max_dynamic_shared_bytes} 超过 {arch} 每个线程块的上限 {limit} 字节 / "
                              f"max_dynamic_shared_bytes exceeds the {limit}-byte per-block maximum of {arch}")
    allowed = DEFAULT_DYNAMIC_SHARED if max_dynamic_shared_bytes is None else max(max_dynamic_shared_bytes,
                                                                                 DEFAULT_DYNAMIC_SHARED)
    if shared_bytes > allowed:
        if max_dynamic_shared_bytes is None:
            raise LaunchError(
                f"shared_bytes={shared_bytes} 超过 {DEFAULT_DYNAMIC_SHARED} 字节（48 KiB）：驱动会拒绝这次启动，"
                f"除非先把内核的 cudaFuncAttributeMaxDynamicSharedMemorySize 调大；请传 max_dynamic_shared_bytes"
                f"（最多 {limit}，{arch}） / dynamic shared memory above 48 KiB needs the opt-in: "
                f"pass max_dynamic_shared_bytes (at most {limit} on {arch})")
        raise LaunchError(f"shared_bytes={shared_bytes} 超过申请的 max_dynamic_shared_bytes={max_dynamic_shared_bytes} / "
                          f"shared_bytes exceeds max_dynamic_shared_bytes")
    return limit


#: 每个簇最多的线程块数：8 是可移植的上限；sm_90 另外允许 16（非可移植，GPU 上启动前要把内核属性
#: cudaFuncAttributeNonPortableClusterSizeAllowed 设为 1），模拟器接受到 16 为止
MAX_CLUSTER_BLOCKS = 16
PORTABLE_CLUSTER_BLOCKS = 8


def cluster_shape(f, name, grid):
    """内核的 __cluster_dims__（没有时是一个块的簇），检查它与网格相容：每一维的网格大小都是簇大小的整数倍，
    簇里至多 :data:`MAX_CLUSTER_BLOCKS` 个块（CUDA 同样拒绝这样的启动）。"""
    c = getattr(f, "cluster_dims", None) or (1, 1, 1)
    n = c[0] * c[1] * c[2]
    if n > MAX_CLUSTER_BLOCKS:
        raise LaunchError(f"内核 {name} 第 {f.line} 行：__cluster_dims__{c} 共 {n} 个线程块，超过上限 {MAX_CLUSTER_BLOCKS}"
                          f"（可移植的上限是 {PORTABLE_CLUSTER_BLOCKS}，sm_90 非可移植地允许 16）/ kernel {name}, line {f.line}: "
                          f"cluster of {n} blocks exceeds the maximum of {MAX_CLUSTER_BLOCKS} (portable: {PORTABLE_CLUSTER_BLOCKS})")
    if any(g % k for g, k in zip(grid, c)):
        raise LaunchError(f"内核 {name}：网格 grid={grid} 不能按簇 __cluster_dims__{c} 整分（每一维的网格大小都必须是簇大小的"
                          f"整数倍，CUDA 拒绝这次启动：cudaErrorClusterSizeInvalid 类的错误）/ kernel {name}: grid {grid} is not "
                          f"divisible by the cluster dims {c} (first line of the kernel: {f.line})")
    return c


def kernel_signature(source, name, defines=None):
    """内核参数列表 [(name, c_type_string, is_pointer), ...]。"""
    f = parse(source, defines, name).kernel(name)
    return [(pname, ts, t.is_ptr) for pname, t, ts in f.params]


def launch(source, name, grid, block, args, shared_bytes=0, defines=None, *,
           racecheck=True, initcheck=True, global_racecheck=True, benign_same_value=False, symbols=None,
           max_loop_iterations=MAX_LOOP_ITERATIONS,
           max_lane_steps=MAX_LANE_STEPS, max_dynamic_shared_bytes=None, arch="sm_90", schedule="auto"):
    """在 CPU 上模拟一次内核启动，把结果写回传入的数组，返回 Report。

    source：C 源码文本或 .cu 文件路径；name：__global__ 函数名；grid/block：整数或
    最多 3 维的元组；args：与内核参数一一对应；shared_bytes：动态共享内存字节数；
    defines：{宏名: 值}，相当于 ``#define 宏名 值``。racecheck=False 关闭共享内存竞争检查，
    initcheck=False 关闭未初始化读取的检查（:class:`UninitializedReadError`），global_racecheck=False
    关闭全局内存竞争检查（:class:`GlobalMemoryRaceError`，省下每个可写全局数组每个元素 68 字节的记录与相应的时间）。
    symbols：{变量名: 数值或数组}，在启动前写入文件作用域的 ``__constant__`` 与 ``__device__`` 变量
    （相当于 cudaMemcpyToSymbol）；``__device__`` 变量对应的数组在启动后写回（cudaMemcpyFromSymbol）。
    benign_same_value=True 时，几个线程把同一个值写进同一个字不算竞争（共享与全局内存；默认报告，
    因为 CUDA 内存模型里这仍是数据竞争，只是常见的惯用写法）。

    工作预算：``max_lane_steps``（默认 :data:`MAX_LANE_STEPS`）限制整次启动的「活跃线程 x 循环迭代」，
    死循环与自旋等待在几秒内报 :class:`LoopLimitError`，信息里有循环所在的行（一圈下来内存与变量都没变的循环，
    转到第 1024 圈之后就报，见 :class:`SpinWaitError`）；``max_loop_iterations``
    另外限制每个循环的迭代次数（默认不限）。

    调度（``schedule``）：``"grid"`` 整个网格一起执行（每条语句对全部活跃线程执行一次）；``"blocks"`` 一次一个簇
    （没有簇时一个线程块），按编号从小到大执行完一个再开始下一个；``"blocks-reversed"`` 同样，按编号从大到小。
    ``"auto"``（默认）先按 ``"grid"`` 执行；一个等内存的循环（volatile 读或原子操作）转了一圈什么都没变、照这样
    永远等不到时，把传入的数组恢复成启动前的样子，按 ``"blocks"`` 重来，再恢复、按 ``"blocks-reversed"`` 执行一遍
    （``Report.schedule`` 与 ``schedule_note`` 写明）。只在一种顺序下等得到，说明内核依赖线程块开始的顺序（CUDA
    不保证），报 :class:`SpinWaitError` 并建议用票号；哪种都等不到，也报 :class:`SpinWaitError`。整个网格一起执行
    等得到、有循环只读不写地等内存、网格又大于 sm_90 上同时驻留得下的块数时，恢复数组、按 ``"waves"``（按编号一波
    一波，一波是同时驻留得下的那么多块）再执行一遍：一波的块全都停在循环里，报 :class:`SpinWaitError`（手写的网格
    屏障要求整个网格同时驻留）；一波里只有一部分块在等，模拟器不模拟后面的块补位，用整网格的结果并在
    ``schedule_note`` 里说明判断不了。
    共享内存：``shared_bytes`` 超过 48 KiB 时必须传
    ``max_dynamic_shared_bytes``（驱动的 opt-in 属性），上限按 ``arch`` 取（默认 sm_90：227 KiB）。
    """
    for flag, fname in ((racecheck, "racecheck"), (initcheck, "initcheck"),
                        (global_racecheck, "global_racecheck"), (benign_same_value, "benign_same_value")):
        if not isinstance(flag, bool):
            raise TypeError(f"{fname} 应为 bool，得到 {flag!r} / {fname} must be bool")
    _check_count(max_loop_iterations, "max_loop_iterations")
    _check_count(max_lane_steps, "max_lane_steps")
    shared_limit = shared_limits(shared_bytes, max_dynamic_shared_bytes, arch)
    if not isinstance(name, str):
        raise TypeError(f"name 应为内核名字符串，得到 {type(name).__name__} / name must be a str")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args 应为元组或列表，得到 {type(args).__name__} / args must be a tuple or list")
    prog = parse(source, defines, name)
    f = prog.kernel(name)
    grid = _dims(grid, "grid")
    block = _dims(block, "block")
    tpb = block[0] * block[1] * block[2]
    if tpb > 1024 or block[2] > 64:
        raise LaunchError(f"每个线程块最多 1024 个线程（z 最多 64），得到 block={block} / at most 1024 threads per block")
    if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
        raise LaunchError(f"grid={grid} 超出 CUDA 的限制 / grid exceeds CUDA limits")
    nthreads = tpb * grid[0] * grid[1] * grid[2]
    if nthreads > MAX_THREADS:
        raise LaunchError(
            f"一次模拟最多 {MAX_THREADS} 个线程，得到 {nthreads} / at most {MAX_THREADS} simulated threads, got {nthreads}"
        )
    cluster = cluster_shape(f, name, grid)
    shared_bytes = int(shared_bytes)
    args = list(args)
    if len(args) != len(f.params):
        raise TypeError(
            f"内核 {name} 需要 {len(f.params)} 个参数 {[p[0] for p in f.params]}，得到 {len(args)} 个 / "
            f"kernel {name} takes {len(f.params)} arguments, got {len(args)}"
        )
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule 应为 {' 或 '.join(map(repr, SCHEDULES))}，得到 {schedule!r} / "
                         f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    syms = _symbols(prog, symbols)

    def attempt(sched, auto, after_grid=None):
        rep = Report(kernel=name, grid=grid, block=block, shared_bytes=shared_bytes, cluster=cluster)
        rep.blocks_launched = grid[0] * grid[1] * grid[2]
        rep.threads_launched = nthreads
        rep.warps_launched = rep.blocks_launched * ((tpb + 31) // 32)
        rep.schedule = sched
        vals = _arg_values(prog, f, name, args, global_racecheck)
        m = Machine(prog, name, grid, block, shared_bytes, rep, racecheck, max_loop_iterations,
                    max_lane_steps=max_lane_steps, initcheck=initcheck, shared_limit=shared_limit,
                    global_racecheck=global_racecheck, benign_same_value=benign_same_value,
                    symbols=syms, cluster=cluster, schedule=sched, auto=auto, after_grid=after_grid)
        t0 = time.perf_counter()
        with np.errstate(all="ignore"):
            try:
                m.run(f, vals)
            except Starved as s:
                m.restore()
                s.where = (m.line(s.node), *m.where(s.lane))
                s.printed = bool(rep.printf)
                s.machine = m
                raise
            except (SimtError, MemoryError, RecursionError):
                raise
            except Exception as e:      # 子集之外、没有被逐一识别的写法：报告所在的行，不让 Python 异常漏出去
                ln = m.line(m.cur)
                err = UnsupportedError(
                    f"内核 {name} 第 {ln} 行：模拟器无法执行这一行（不在支持的子集内：{type(e).__name__}: {e}）/ "
                    f"kernel {name}, line {ln}: unsupported construct ({type(e).__name__}: {e})")
                err.kernel, err.line = name, ln if isinstance(ln, int) else None
                raise err from e
        rep.elapsed_s = time.perf_counter() - t0
        if rep.printf_dropped:
            print(f"（模拟器：这次启动的 printf 输出超过 {Machine.PRINTF_LIMIT} 字节，后面的 {rep.printf_dropped} 行丢掉了；"
                  f"GPU 上 printf 的缓冲区默认也是 1 MiB，见 cudaLimitPrintfFifoSize）", flush=True)
        return rep, m

    if schedule == "auto":
        try:
            rep, m = attempt("grid", True)
        except Starved as g:
            _rerun_note(g.printed, g.where[0])
            try:
                rep, m = attempt("blocks", True)
            except Starved as a:
                _rerun_note(a.printed, a.where[0])
                try:
                    attempt("blocks-reversed", True)
                except Starved as r:        # 哪种调度都等不到
                    raise a.machine.spin_error(a.node, a.lane, a.waiting, "blocks", other=g.where) from None
                # 只有按编号从大到小才等得到
                raise a.machine.spin_error(a.node, a.lane, a.waiting, "order-reversed") from None
            # 按编号从小到大等得到；再按从大到小执行一遍：只在一种顺序下才等得到的内核依赖线程块开始的顺序
            m.restore()
            _rerun_note(bool(rep.printf), None)
            try:
                rep, m = attempt("blocks-reversed", True)
            except Starved as r:
                raise r.machine.spin_error(r.node, r.lane, r.waiting, "order") from None
            gline, gb, gt = g.where
            rep.schedule_note = (f"整个网格一起执行时，第 {gline} 行的循环等不到（线程块 {gb} 的线程 {gt}）；按编号从小到大、"
                                 f"从大到小各执行了一遍，都等得到，结果与计数来自从大到小的那一遍")
        else:
            # 整个网格一起执行时等到了；有循环只读不写地等内存、网格又大于同时驻留的块数时，一波一波再执行一遍：
            # 等的是后面几波的块（手写的网格屏障），GPU 上就会卡住
            if m.polled and m.nblocks > (fit := m.resident_blocks()[0]):
                m.restore()
                _rerun_note(bool(rep.printf), None, "waves")
                try:
                    rep, m = attempt("waves", True)
                    rep.schedule_note = (f"有循环在等别的线程块写的值，网格的 {m.nblocks} 个线程块多于 sm_90 上同时驻留得下"
                                         f"的 {fit} 个：按编号一波 {fit} 块执行了一遍，等得到，结果与计数来自这一遍")
                except Starved as w:
                    # 这一波的块全都停在循环里：GPU 上驻留的位置全被等着的块占着，后面的块永远开始不了
                    if np.array_equal(np.sort(w.waiting), w.machine.wave):
                        raise w.machine.spin_error(w.node, w.lane, w.waiting, "waves") from None
                    # 这一波里有的块已经离开了循环：GPU 上它们结束后腾出的位置让后面的块开始，模拟器不模拟这种补位，
                    # 判断不了；用整个网格一起执行的结果
                    _rerun_note(w.printed, w.where[0], "grid")
                    rep, m = attempt("grid", True)
                    rep.schedule_note = (f"有循环在等别的线程块写的值，网格的 {m.nblocks} 个线程块多于 sm_90 上同时驻留得下"
                                         f"的 {fit} 个；按编号一波一波执行时第 {w.where[0]} 行等不到，可这一波里有的块已经"
                                         f"离开了循环，GPU 上它们结束后后面的块会补上，模拟器不模拟补位、判断不了这个网格"
                                         f"会不会卡住。结果与计数来自整个网格一起执行的那一遍")
    else:
        rep, m = attempt(schedule, False)
    for sname, a in (symbols or {}).items():
        buf = m.file_bufs.get(sname)
        if isinstance(a, np.ndarray) and buf is not None and not buf.constant and a.flags.writeable:
            a.reshape(-1)[:] = buf.data       # __device__ 变量：写回
    return rep


#: launch 的 schedule 可取的值
SCHEDULES = ("auto", "grid", "blocks", "blocks-reversed", "waves")


def _rerun_note(printed, line, then="blocks-reversed"):
    """换一种调度从头重来之前：上一次执行已经印出的 printf 要说明来历。line：等不到的循环的行（None：上一次执行完了，
    换一种调度 then 再执行一遍）。"""
    if printed:
        why = (f"第 {line} 行的循环一波一波执行时等不到，再整个网格一起执行一遍" if then == "grid" else
               f"第 {line} 行的循环在这种调度下等不到" if line is not None else
               "按编号从小到大执行完了，再按从大到小执行一遍" if then == "blocks-reversed" else
               "整个网格一起执行完了，再按同时驻留得下的块数一波一波执行一遍")
        print(f"（模拟器：{why}，从头重来；上面的 printf 输出来自上一次执行）", flush=True)


def _arg_values(prog, f, name, args, global_racecheck):
    """launch 的实参 -> 内核参数的值（指针参数是共享传入数组内存的 Buffer）。"""
    vals = []
    for (pname, t, _), a in zip(f.params, args):
        if t.is_ptr:
            if t.base.is_ptr or t.base.is_fnptr:
                err = UnsupportedError(f"内核 {name} 第 {f.line} 行：不支持 参数 {pname} 是指向指针的指针 {t!r}（主机传来的指针数组）"
                                       f" / kernel {name}, line {f.line}: unsupported: parameter {pname} is a pointer to "
                                       f"pointer {t!r}")
                err.kernel, err.line = name, f.line
                raise err
            if t.base.is_vec and not t.base.storable:
                err = UnsupportedError(f"内核 {name} 第 {f.line} 行：不支持 参数 {pname} 指向 {t.base.why}")
                err.kernel, err.line = name, f.line
                raise err
            arr = array_arg(a, pname, t)
            buf = Buffer("global", pname, arr, T.scalar_of(t.base), arr.size, vol=t.vol)
            if global_racecheck and not t.const:
                buf.gtracker = GlobalTracker(buf.per)    # 指向 const 的参数只读：不必记录
            vals.append(Val(t, np.int64(0), buf))
        elif t.is_fnptr:
            vals.append(Val(t, fnptr_arg(prog, a, pname)))
        elif t.is_vec:
            vals.append(Val(t, _struct_value(prog, a, pname, t, global_racecheck)))
        else:
            vals.append(Val(t, scalar_arg(a, pname, t)))
    return vals


def _struct_value(prog, a, pname, t, global_racecheck):
    """按值传递的结构体：数值成员来自 vec_arg；指针成员给数组（与指针参数相同），函数指针成员给函数名。"""
    if not t.has_ptr:
        return vec_arg(a, pname, t)
    kinds = ", ".join(repr(e) for e in t.elems)
    if isinstance(a, (tuple, list)) and len(a) != t.n:
        a = _flatten(a)                 # 嵌套的结构体成员可以写成嵌套的元组
    if not isinstance(a, (tuple, list)) or len(a) != t.n:
        raise TypeError(f"参数 {pname} 是按值传递的 {t.name}：请传 {t.n} 个值的元组（{kinds}；指针成员传数组），"
                        f"得到 {type(a).__name__} / parameter {pname} is a {t.name} passed by value: pass a tuple of "
                        f"{t.n} values ({kinds})")
    out = []
    for x, f, e in zip(a, t.fields, t.elems):
        if e.is_ptr:
            arr = array_arg(x, f"{pname}.{f}", e)
            buf = Buffer("global", f"{pname}.{f}", arr, T.scalar_of(e.base), arr.size)
            if global_racecheck and not e.const:
                buf.gtracker = GlobalTracker(buf.per)
            out.append(Val(e, np.int64(0), buf))
        elif e.is_fnptr:
            out.append(fnptr_arg(prog, x, f"{pname}.{f}"))
        else:
            out.append(scalar_arg(x, f"{pname}.{f}", e))
    return tuple(out)


def _flatten(a):
    out = []
    for x in a:
        out.extend(_flatten(x) if isinstance(x, (tuple, list)) else [x])
    return out


def fnptr_arg(prog, a, pname):
    """函数指针参数：传 __device__ 函数的名字（主机上相当于先用 cudaMemcpyFromSymbol 取得它的设备地址）。"""
    names = [n for n, g in prog.functions.items() if not g.is_kernel and g.error is None]
    if isinstance(a, str):
        hit = a if a in names else None
        if hit is None:
            tails = [n for n in names if n.split("(")[0].split("<")[0].split("::")[-1] == a]
            hit = tails[0] if len(tails) == 1 else None
        if hit is not None:
            return np.int64(prog.fn_ids[hit])
    raise TypeError(f"参数 {pname} 是函数指针：请传 __device__ 函数的名字（可选：{', '.join(names) or '无'}），得到 {a!r} / "
                    f"parameter {pname} is a function pointer: pass the name of a __device__ function: one of {names}")


def _symbols(prog, symbols):
    """检查 symbols 的名字、大小与类型，返回 {名字: 一维 numpy 数组}。"""
    if symbols is None:
        return {}
    if not isinstance(symbols, dict):
        raise TypeError(f"symbols 应为 {{变量名: 值}} 字典，得到 {type(symbols).__name__} / symbols must be a dict")
    out = {}
    for sname, a in symbols.items():
        if sname not in prog.file_vars:
            raise LaunchError(f"源码中没有文件作用域变量 {sname!r}（__constant__ 或 __device__）/ no file-scope variable "
                              f"{sname!r}; 找到 / found: {sorted(prog.file_vars)}")
        node, _ = prog.file_vars[sname]
        t = prog.resolve(node.type, node)
        t = t if isinstance(t, T.CType) else t.t
        sc = T.scalar_of(t)
        n = T.elems_of(t) if t.is_array else 1
        if hasattr(a, "numpy") and hasattr(a, "device"):
            a = a.detach().cpu().numpy()
        arr = np.asarray(a)
        if arr.dtype.kind not in "biuf" or (sc.is_int and arr.dtype.kind == "f"):
            raise TypeError(f"symbols[{sname!r}] 的类型 {arr.dtype} 不能写入 {sc.name} 变量 / bad dtype for {sname}")
        if arr.size > n:
            raise LaunchError(f"symbols[{sname!r}] 有 {arr.size} 个元素，变量 {sname} 只有 {n} 个 / too many elements")
        out[sname] = arr.reshape(-1).astype(sc.dtype)     # 只覆盖开头 arr.size 个元素
    return out
