"""TileLang 内核下标的静态检查（reduction_lab.tilelang_kernels.bounds）：证得出的越界报告出来（哪个缓冲区、哪一维、
下标能到多少、外面是哪组循环），有条件保护的、步长的、依赖运行时值的都不报；课程里每个 TileLang 内核的每条路径
都没有误报；实验用的包装在编译之前检查、每组参数只检查一次。"""

from __future__ import annotations

import pytest

pytest.importorskip("tilelang", reason="TileLang 内核需要 tilelang（pip install reduction_lab[tilelang]）")

import tilelang                                    # noqa: E402
import tilelang.language as T                      # noqa: E402
import torch                                       # noqa: E402

import reduction_lab as rl                         # noqa: E402,F401
from reduction_lab import tilelang_kernels as tk   # noqa: E402
from reduction_lab.tilelang_kernels.bounds import (BoundsChecked, TileBoundsError, checked_retarget,  # noqa: E402
                                                   tile_bounds_issues)


@tilelang.jit
def probe(x, variant: int = 0):
    M, N = T.const("M, N")
    x: T.Tensor[[M, N], T.float32]
    y = T.empty([M, N], T.float32)
    with T.Kernel(M, threads=32) as bx:
        tile = T.alloc_local([128], T.float32)
        grid = T.alloc_local([2, 64], T.float32)
        for j in T.serial(128):
            tile[j] = x[bx, j]
        if variant == 0:                 # 都在界内：条件保护、if_then_else 的分支、步长 4 的循环、二维
            for j in T.serial(128):
                if j < 127:
                    tile[j + 1] = tile[j]
            for j in T.serial(128):
                tile[j] = T.if_then_else(j > 0, tile[j - 1], 0.0)
            for k in T.serial(0, 128, 4):
                tile[k + 3] = tile[k]
            for r, c in T.grid(2, 64):
                grid[r, c] = tile[r * 64 + c]
        elif variant == 1:               # 写过了尾
            for j in T.serial(128):
                tile[j + 1] = tile[j]
        elif variant == 2:               # 读到了 -1
            for j in T.serial(128):
                tile[j] = tile[j - 1]
        elif variant == 3:               # 步长 4、偏移 4：最后一次写 tile[128]
            for k in T.serial(0, 128, 4):
                tile[k + 4] = tile[k]
        elif variant == 4:               # 二维：列多走一格
            for r, c in T.grid(2, 65):
                grid[r, c] = tile[r]
        elif variant == 5:               # 全局的输出：写到下一行（最后一块越过 y）
            for j in T.serial(128):
                y[bx + 1, j] = tile[j]
        elif variant == 6:               # 下标依赖读进来的值：界是无限的，不报（只会漏报，不会误报）
            for j in T.serial(128):
                tile[T.Cast("int32", tile[j])] = 1.0
        for j in T.serial(128):
            y[bx, j] = tile[j]
    return y


def _issues(variant):
    x = torch.zeros(2, 128)
    return tile_bounds_issues(tk.retarget(probe, "c").get_tir(x, variant=variant))


def test_in_bounds_accesses_are_not_reported():
    assert _issues(0) == []
    assert _issues(6) == []


@pytest.mark.parametrize("variant,buf,access,dim,lo,hi,extent", [
    (1, "tile", "写", 0, 1, 128, 128),
    (2, "tile", "读", 0, -1, 126, 128),
    (3, "tile", "写", 0, 4, 128, 128),
    (4, "grid", "写", 1, 0, 64, 64),
    (5, "y", "写", 0, 1, 2, 2),
])
def test_provable_overruns_are_reported(variant, buf, access, dim, lo, hi, extent):
    first = _issues(variant)[0]
    assert (first.buffer, first.access, first.dim, first.lo, first.hi, first.extent) == \
        (buf, access, dim, lo, hi, extent)
    assert first.loops[0] == "bx"                  # 外面的循环：T.Kernel 的块号在最外层
    text = first.message()
    assert f"{access} {buf} 时越界" in text and f"可以{'到' if hi >= extent else '小到'}" in text


@tilelang.jit
def dyn_probe(x, variant: int = 0):
    M = T.dynamic("M")                   # 行数是符号：下标的上界是 M 的表达式
    N = T.const("N")
    x: T.Tensor[[M, N], T.float32]
    y = T.empty([M, N], T.float32)
    with T.Kernel(M, threads=32) as bx:
        tile = T.alloc_local([N], T.float32)
        for j in T.serial(N):
            tile[j] = x[bx, j]
        if variant == 1:                 # 写到下一行：bx + 1 可以到 M
            for j in T.serial(N):
                y[bx + 1, j] = tile[j]
        elif variant == 2:               # 有条件保护：不报（区间不知道条件，所以条件里的只按常数界判断）
            for j in T.serial(N):
                if bx + 1 < M:
                    y[bx + 1, j] = tile[j]
        elif variant == 3:               # 同样有保护，写成 T.if_then_else：读 x 的下一行
            for j in T.serial(N):
                tile[j] = T.if_then_else(bx + 1 < M, x[bx + 1, j], 0.0)
        elif variant == 4:               # 读上一行：bx - 1 可以小到 -1
            for j in T.serial(N):
                tile[j] = x[bx - 1, j]
        elif variant == 5:               # 2 * bx 的上界 2M - 2 >= M 只在 M >= 2 时成立：证不出，不报
            for j in T.serial(N):
                y[2 * bx, j] = tile[j]
        for j in T.serial(N):
            y[bx, j] = tile[j]
    return y


def _dyn_issues(variant):
    return tile_bounds_issues(tk.retarget(dyn_probe, "c").get_tir(torch.zeros(3, 64), variant=variant))


def test_symbolic_rows_overrun_is_reported():
    """T.dynamic 的行数：y[bx + 1] 证得出会到 M（bx 取 0 … M - 1），x[bx - 1] 会小到 -1。"""
    first = _dyn_issues(1)[0]
    assert (first.buffer, first.access, first.dim, first.hi, first.extent, first.over) == ("y", "写", 0, "M", "M", True)
    assert "下标 bx + 1 可以到 M，y 这一维只有 M 个元素（0 … M - 1）" in first.message()
    low = _dyn_issues(4)[0]
    assert (low.buffer, low.access, low.dim, low.lo, low.over) == ("x", "读", 0, -1, False)


def test_symbolic_rows_guarded_or_unprovable_are_not_reported():
    assert _dyn_issues(0) == []
    assert _dyn_issues(2) == []
    assert _dyn_issues(3) == []
    assert _dyn_issues(5) == []


def _course_tirs(kernel, M, N, gpu, dtype):
    es = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    cfg = tk._resolve(kernel, M, N, gpu, {}, elem_size=es)
    jit = tk._jit_for(kernel, tk.SM90_TARGET if gpu else "c")
    x = torch.empty(M, N, dtype=getattr(torch, dtype), device="meta")
    if kernel == "softmax" and cfg["path"] == "grid" and gpu:       # 常驻网格是另一个内核
        stats = torch.empty((M, cfg["n_seg"], 2), device="meta")
        grid = tk._jit_for("softmax_grid", tk.SM90_TARGET)
        yield cfg, grid.get_tir(x, x, stats, **tk.grid_kwargs(M, N, cfg, dtype, 132))
    elif kernel == "softmax":
        if cfg["path"] == "grid":                                  # sim 模式：按 split 分两次启动
            cfg = dict(cfg, path="split")
        stats = torch.empty((M if cfg["path"] in tk._SEGMENTED else 1, cfg.get("n_seg", 1), 2), device="meta")
        for phase in tk.softmax_phases(cfg["path"], gpu):
            yield cfg, jit.get_tir(x, x, stats, cpu=not gpu, dtype=dtype, phase=phase, **cfg)
    else:
        args = (x, x) if kernel == "softmax_backward" else (x,)
        yield cfg, jit.get_tir(*args, cpu=not gpu, dtype=dtype, **cfg)


@pytest.mark.parametrize("kernel", ["softmax", "reduce_sum", "softmax_backward"])
@pytest.mark.parametrize("gpu", [False, True], ids=["sim", "gpu"])
def test_course_kernels_have_no_false_alarms(kernel, gpu):
    """课程的 TileLang 内核（gpu 模式的每条默认路径：row、cluster、cluster_smem、grid、split；sim 模式的 row、online），
    展开成 TIR（不编译）后没有一处被报告。"""
    ns = (1, 7, 100, 1000, 4096, 65536, 262144, 1 << 20, 10**6) if gpu else (1, 7, 100, 1000, 5000)
    paths, n = set(), 0
    for N in ns:
        for dtype in ("float32", "bfloat16"):
            M = max(1, min(4096, (1 << 24) // N)) if gpu else 8
            for cfg, func in _course_tirs(kernel, M, N, gpu, dtype):
                assert tile_bounds_issues(func) == [], (kernel, N, dtype, cfg)
                paths.add(cfg.get("path"))
                n += 1
    assert n >= 2 * len(ns)
    if kernel == "softmax":
        assert paths >= ({"row", "cluster", "cluster_smem", "grid", "split"} if gpu else {"row", "online"})


def test_checked_kernel_refuses_before_compiling_and_checks_each_shape_once():
    jit = checked_retarget(probe, "c")
    assert isinstance(jit, BoundsChecked) and checked_retarget(probe, "c") is jit
    assert jit.get_kernel_source == jit._jit.get_kernel_source        # 其余属性转给原来的内核

    class Counting:                                                    # 数展开与调用的次数
        def __init__(self, inner):
            self.inner, self.tirs, self.runs = inner, 0, 0

        def get_tir(self, *a, **k):
            self.tirs += 1
            return self.inner.get_tir(*a, **k)

        def __call__(self, *a, **k):
            self.runs += 1
            return self.inner(*a, **k)

    c = Counting(jit._jit)
    checked = BoundsChecked(c)
    x = torch.zeros(2, 128)
    with pytest.raises(TileBoundsError, match="写 tile 时越界") as ei:
        checked(x, variant=1)
    assert ei.value.issue.hi == 128 and isinstance(ei.value, IndexError)
    with pytest.raises(TileBoundsError):
        checked(x, variant=1)                                          # 没通过的参数不记下：每次都检查
    assert (c.tirs, c.runs) == (2, 0)                                  # 越界的内核没有编译、没有运行
    y = checked(x + 1.0, variant=0)
    y = checked(x + 2.0, variant=0)                                    # 同样的形状与参数：不再展开
    assert (c.tirs, c.runs) == (3, 2) and torch.equal(y, torch.zeros(2, 128))
