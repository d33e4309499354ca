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
from .errors import LaunchError
from .frontend import parse
from .interpreter import Machine, Val
from .memory import Buffer, array_arg, scalar_arg

MAX_THREADS = 1 << 24
MAX_LOOP_ITERATIONS = 100_000


def _dims(v, what):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (int(v),)
    try:
        v = tuple(int(x) for x in v)
    except TypeError:
        raise TypeError(f"{what} 应为整数或不超过 3 个整数的元组 / {what} must be an int or a tuple of up to 3 ints") from None
    if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
        raise LaunchError(f"{what}={v} 不合法：需要 1 到 3 个正整数 / invalid {what}: {v}")
    return v + (1,) * (3 - len(v))


def kernel_signature(source, name, defines=None):
    """内核参数列表 [(name, c_type_string, is_pointer), ...]。"""
    f = parse(source, defines).kernel(name)
    return [(pname, ts, t.is_ptr) for pname, t, ts in f.params]


def launch(source, name, grid, block, args, shared_bytes=0, defines=None, *,
           racecheck=True, max_loop_iterations=MAX_LOOP_ITERATIONS):
    """在 CPU 上模拟一次内核启动，把结果写回传入的数组，返回 Report。

    source：C 源码文本或 .cu 文件路径；name：__global__ 函数名；grid/block：整数或
    最多 3 维的元组；args：与内核参数一一对应；shared_bytes：动态共享内存字节数；
    defines：{宏名: 值}，相当于 ``#define 宏名 值``。racecheck=False 关闭共享内存竞争检查。
    """
    prog = parse(source, defines)
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
    shared_bytes = int(shared_bytes)
    if shared_bytes < 0 or shared_bytes > 232448:
        raise LaunchError(f"shared_bytes={shared_bytes} 不合法（0 到 227 KiB）/ invalid shared_bytes")
    args = list(args)
    if len(args) != len(f.params):
        raise TypeError(
            f"内核 {name} 需要 {len(f.params)} 个参数 {[p[0] for p in f.params]}，得到 {len(args)} 个 / "
            f"kernel {name} takes {len(f.params)} arguments, got {len(args)}"
        )
    rep = Report(kernel=name, grid=grid, block=block, shared_bytes=shared_bytes)
    rep.blocks_launched = grid[0] * grid[1] * grid[2]
    rep.threads_launched = nthreads
    rep.warps_launched = rep.blocks_launched * ((tpb + 31) // 32)
    vals = []
    for (pname, t, _), a in zip(f.params, args):
        if t.is_ptr:
            arr = array_arg(a, pname, t)
            buf = Buffer("global", pname, arr, T.scalar_of(t.base), arr.size, vol=t.vol)
            vals.append(Val(t, np.int64(0), buf))
        else:
            vals.append(Val(t, scalar_arg(a, pname, t)))
    m = Machine(prog, name, grid, block, shared_bytes, rep, racecheck, max_loop_iterations)
    t0 = time.perf_counter()
    with np.errstate(all="ignore"):
        m.run(f, vals)
    rep.elapsed_s = time.perf_counter() - t0
    return rep
