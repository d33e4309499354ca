"""TileLang 内核里缓冲区下标的静态检查：在编译之前，从内核展开后的 TIR（``jit.get_tir(...)``）证出哪一次读写越界。

sim 模式下 TileLang 把内核编译成 C，块内的缓冲区是栈上的数组：``tile[block_n]`` 越界写一个元素，C 不检查，
常常只是改掉了相邻的变量，答案照样对；GPU 上 fragment 越界同样不一定报错。这里对每一次 ``BufferStore`` /
``BufferLoad``，按外层循环变量的范围（``For`` 的 min、extent、step）、``if`` 与 ``T.if_then_else`` 的条件求下标的
整数上下界（``tvm.arith.Analyzer.const_int_bound``）；只有下标的界是有限的、并且证明得出会越出缓冲区的那一维时才报告。
符号形状（``T.dynamic("M")``：``T.Kernel(M)`` 的 ``bx`` 取 0 … M - 1，``y`` 有 M 行）按符号区间
（``Analyzer.int_set``）求下标的上界，证明得出「上界 >= M」时报告（``y[bx + 1]`` 可以到 M）；写在 ``if`` 或
``T.if_then_else`` 里的读写只按常数界判断（条件可能正好把越界的那一次排除在外）。界无法确定（依赖运行时的值）时不报告：
这个检查只会漏报，不会把对的内核判成错。

``T.copy``、``T.reduce_*`` 等块操作不在这里检查：它们按区域读写，由 TileLang 自己处理行尾之外的部分。

    from reduction_lab.tilelang_kernels.bounds import tile_bounds_issues
    issues = tile_bounds_issues(jit_kernel.get_tir(x, block_n=128, cpu=True))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BoundsIssue", "TileBoundsError", "tile_bounds_issues", "check_tile_bounds", "BoundsChecked",
           "checked_retarget"]


@dataclass(frozen=True)
class BoundsIssue:
    """一次证明会越界的读写。``loops``：外层循环变量的名字（由外到内）；``nest``：同样这组循环变量的循环
    在内核里是第几个（从 0 起，按源码顺序），用来在学习者的文件里找到那一行。"""

    buffer: str
    access: str                 # "写" 或 "读"
    dim: int                    # 越界的那一维（从 0 起）
    lo: int | str               # 下标可能取到的最小值与最大值（符号形状时是表达式，例如 "M"）
    hi: int | str
    extent: int | str           # 这一维的大小（符号形状时是它的名字，例如 "M"）
    index: str                  # 下标表达式（TIR 的写法）
    loops: tuple[str, ...]
    nest: int
    dims: int = 1               # 缓冲区的维数
    over: bool = True           # 越过上界（否则是小于 0）

    def message(self) -> str:
        over = self.over
        reach = self.hi if over else self.lo
        dim = f"第 {self.dim + 1} 维的" if self.dims > 1 else ""
        return (f"{self.access} {self.buffer} 时越界：{dim}下标 {self.index} 可以{'到' if over else '小到'} {reach}，"
                f"{self.buffer} 这一维只有 {self.extent} 个元素（0 … {self.last()}） "
                f"(out-of-bounds {'write' if self.access == '写' else 'read'} of {self.buffer}: index {self.index} "
                f"reaches {reach}, dimension {self.dim} has {self.extent} elements)")

    def last(self) -> str:
        """这一维最后一个合法的下标：``extent - 1``。"""
        return str(self.extent - 1) if isinstance(self.extent, int) else f"{self.extent} - 1"


class TileBoundsError(IndexError):
    """内核里有一次证明会越界的读写（:class:`BoundsIssue`）。"""

    def __init__(self, issue: BoundsIssue):
        super().__init__(issue.message())
        self.issue = issue


def _const(e):
    from tvm import tirx

    return int(e.value) if isinstance(e, tirx.IntImm) else None


class _Checker:
    def __init__(self):
        from tvm import arith

        self.az = arith.Analyzer()
        self.issues: list[BoundsIssue] = []
        self.loops: list[str] = []
        self.nests: dict[tuple[str, ...], int] = {}
        self.nest = 0
        self.inf = arith.ConstIntBound.POS_INF
        self.dom: dict = {}                 # 循环变量 -> 取值的符号区间（arith.IntervalSet），给符号形状用
        self.conditioned = 0                # 外面有几层 if / T.if_then_else 的条件

    # ---------------------------------------------------------------- 语句
    def stmt(self, s):
        from tvm import arith, ir, tirx

        if s is None:
            return
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, tirx.For):
            self.expr(s.min)
            self.expr(s.extent)
            lo, ext, step = _const(s.min), _const(s.extent), _const(s.step) if s.step is not None else 1
            if lo is not None and ext is not None and ext > 0 and step is not None and step > 0:
                # 循环变量取 lo, lo + step, …, 小于 lo + ext 的最后一个
                last = lo + (ext - 1) // step * step
                self.az.bind(s.loop_var, ir.Range.from_min_extent(lo, last - lo + 1), allow_override=True)
                self.dom[s.loop_var] = arith.IntervalSet(lo, last)
            elif lo is not None and ext is None and step == 1 and s.extent.dtype.startswith("int"):
                # 符号范围（T.Kernel(M) 的 bx）：取 lo … lo + extent - 1；extent 可能是 0（那时没有读写，
                # 区间为空，证出的越界不会发生——M = 0 的输入在评分之前就被拒绝）
                self.az.bind(s.loop_var, ir.Range.from_min_extent(lo, s.extent), allow_override=True)
                self.dom[s.loop_var] = arith.IntervalSet(lo, lo + s.extent - 1)
            outer = not self.loops
            self.loops.append(s.loop_var.name)
            if outer or not isinstance(s.body, tirx.For):
                key = tuple(self.loops)
                self.nest = self.nests.get(key, 0)
                self.nests[key] = self.nest + 1
            self.stmt(s.body)
            self.loops.pop()
        elif isinstance(s, tirx.IfThenElse):
            self.expr(s.condition)
            self.conditioned += 1
            with self.az.constraint_scope(s.condition):
                self.stmt(s.then_case)
            if s.else_case is not None:
                with self.az.constraint_scope(tirx.Not(s.condition)):
                    self.stmt(s.else_case)
            self.conditioned -= 1
        elif isinstance(s, tirx.BufferStore):
            self.access(s.buffer, s.indices, "写")
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
        elif isinstance(s, tirx.Bind):
            self.expr(s.value)
            if s.var.dtype.startswith("int") and s.value.dtype.startswith("int"):
                self.az.bind(s.var, s.value, allow_override=True)
        elif isinstance(s, tirx.SBlockRealize):
            for v in s.iter_values:
                self.expr(v)
            self.stmt(s.block)
        elif isinstance(s, tirx.SBlock):
            self.stmt(s.init)
            self.stmt(s.body)
        elif isinstance(s, (tirx.AttrStmt, tirx.While)):
            self.expr(getattr(s, "condition", None))
            self.stmt(s.body)
        elif isinstance(s, tirx.Evaluate):
            self.expr(s.value)
        elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.AssertStmt)):
            pass
        else:                                   # 别的语句：只按已知的范围检查里面的读写
            tirx.stmt_functor.post_order_visit(s, self._loose)

    # ---------------------------------------------------------------- 表达式
    def expr(self, e):
        from tvm import ir, tirx

        if e is None or not isinstance(e, ir.PrimExpr) and not isinstance(e, tirx.BufferRegion):
            return
        if isinstance(e, tirx.Call) and getattr(e.op, "name", "") == "tirx.if_then_else":
            cond, a, b = e.args
            self.expr(cond)
            self.conditioned += 1
            with self.az.constraint_scope(cond):
                self.expr(a)
            with self.az.constraint_scope(tirx.Not(cond)):
                self.expr(b)
            self.conditioned -= 1
            return
        if isinstance(e, tirx.Call) and getattr(e.op, "name", "").startswith("tl."):
            return                              # T.copy、T.reduce 等块操作：按区域读写，由 TileLang 处理
        if isinstance(e, tirx.BufferLoad):
            self.access(e.buffer, e.indices, "读")
            for i in e.indices:
                self.expr(i)
            return
        if isinstance(e, tirx.Let):
            self.expr(e.value)
            if e.var.dtype.startswith("int") and e.value.dtype.startswith("int"):
                self.az.bind(e.var, e.value, allow_override=True)
            self.expr(e.body)
            return
        if isinstance(e, tirx.Call):
            for a in e.args:
                self.expr(a)
            return
        for name in ("a", "b", "value", "condition", "true_value", "false_value", "base"):
            sub = getattr(e, name, None)
            if isinstance(sub, ir.PrimExpr):
                self.expr(sub)

    def _loose(self, node):
        from tvm import tirx

        if isinstance(node, tirx.BufferStore):
            self.access(node.buffer, node.indices, "写")
        elif isinstance(node, tirx.BufferLoad):
            self.access(node.buffer, node.indices, "读")

    # ---------------------------------------------------------------- 一次读写
    def access(self, buf, indices, what):
        from tvm import tirx

        for d, (idx, n) in enumerate(zip(indices, buf.shape)):
            ext = _const(n)
            if not idx.dtype.startswith("int"):
                continue
            base, lanes, stride = idx, 1, 0
            if isinstance(idx, tirx.Ramp):           # 向量下标：base, base + stride, …（lanes 个）
                base, lanes, stride = idx.base, _const(idx.lanes), _const(idx.stride)
                if lanes is None or stride is None:
                    continue
            if ext is None:
                self._symbolic(buf, d, idx, base, n, lanes, stride, what)
                continue
            b = self.az.const_int_bound(base)
            # 界等于下标类型的整个范围（或无限）时什么也证明不了：那一侧不报
            bits = int(re.sub(r"\D", "", base.dtype.split("x")[0]) or 32)
            tmin, tmax = (0, 2 ** bits - 1) if base.dtype.startswith("uint") else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
            lo_known = tmin < b.min_value and abs(b.min_value) < self.inf
            hi_known = b.max_value < tmax and abs(b.max_value) < self.inf
            lo = b.min_value + min(0, stride * (lanes - 1))
            hi = b.max_value + max(0, stride * (lanes - 1))
            over = hi_known and hi >= ext
            if over or (lo_known and lo < 0):
                self.issues.append(BoundsIssue(buf.name, what, d, int(lo), int(hi), ext, str(idx),
                                               tuple(self.loops), self.nest if self.loops else 0, len(buf.shape), over))

    def _symbolic(self, buf, d, idx, base, n, lanes, stride, what):
        """符号大小的一维（``T.dynamic`` 的 M）：按循环变量的符号区间求下标的上下界，证明得出越界时报告。
        在条件里的读写不判断上界：区间不知道条件（``if bx + 1 < M: y[bx + 1] = …`` 是对的）。"""
        if not n.dtype.startswith("int"):
            return
        s = self.az.int_set(base, self.dom)
        hi, lo = s.max_value, s.min_value
        if self.conditioned == 0 and not _infinite(hi):
            top = hi + stride * (lanes - 1) if stride > 0 else hi
            if self.az.can_prove(top >= n):
                self._report(buf, d, idx, what, lo, self.az.simplify(top), n, over=True)
                return
        b = self.az.const_int_bound(base)          # 下界照常数判断（条件已经计入）
        low = b.min_value + min(0, stride * (lanes - 1))
        if abs(b.min_value) < self.inf and b.min_value > -2 ** 31 and low < 0:
            self._report(buf, d, idx, what, int(low), hi, n, over=False)

    def _report(self, buf, d, idx, what, lo, hi, n, over):
        def show(v):
            c = _const(v) if not isinstance(v, int) else v
            return c if c is not None else str(v)

        self.issues.append(BoundsIssue(buf.name, what, d, show(lo), show(hi), show(n), str(idx), tuple(self.loops),
                                       self.nest if self.loops else 0, len(buf.shape), over))


def _infinite(e) -> bool:
    """IntervalSet 的端点是不是 ±∞（``pos_inf`` / ``neg_inf``）。"""
    return str(e) in ("pos_inf", "neg_inf") or "inf" in type(e).__name__.lower()


def tile_bounds_issues(func) -> list[BoundsIssue]:
    """``func``（展开后的 ``PrimFunc``）里每一次证明会越界的读写，按源码顺序。"""
    c = _Checker()
    c.stmt(func.body)
    return c.issues


def check_tile_bounds(func) -> None:
    """有越界的读写时抛出 :class:`TileBoundsError`（第一处）。"""
    issues = tile_bounds_issues(func)
    if issues:
        raise TileBoundsError(issues[0])


class BoundsChecked:
    """``@tilelang.jit`` 内核的包装：每组新的参数（张量的形状、dtype、设备与其余参数）先展开一次、检查下标
    （:func:`check_tile_bounds`），再照常调用。其余属性（``get_tir``、``get_kernel_source`` …）转给原来的内核。"""

    def __init__(self, jit):
        self._jit = jit
        self._seen: set = set()

    def __call__(self, *args, **kwargs):
        import torch

        key = (tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else repr(a) for a in args),
               tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        if key not in self._seen:
            check_tile_bounds(self._jit.get_tir(*args, **kwargs))
            self._seen.add(key)
        return self._jit(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._jit, name)


def checked_retarget(jit_kernel, target):
    """与 :func:`reduction_lab.tilelang_kernels.retarget` 相同，返回的内核每组新参数先检查下标。
    实验的评分程序把学习者文件里的 ``retarget`` 换成它。"""
    from . import retarget

    inner = retarget(jit_kernel, target)
    wrapped = _CHECKED.get(id(inner))
    if wrapped is None or wrapped._jit is not inner:
        wrapped = _CHECKED[id(inner)] = BoundsChecked(inner)
    return wrapped


_CHECKED: dict = {}
