"""每次调用的快速路径（gpu 模式）：``reduce_sum`` / ``softmax`` 在一个循环里反复以同样的形状调用时，
第二次起跳过逐项的检查、``auto`` 的选择和各 backend 的计划查找，直接分配输出、启动内核。

做法：完整的路径（:mod:`reduction_lab.api`）第一次成功处理一个连续的输入之后，:func:`remember` 为
(操作, backend, dtype, 形状, 设备) 建一个 *runner*。下一次调用时 api 先调 :data:`fast`，做几项便宜的检查
（guard）：普通的 ``torch.Tensor``、不是嵌套张量、有自己的存储（不是 torch.func 的包装张量）、按行主序连续、
没有取负标记、在当前设备上、不需要求导、没有 ``out=``（api 查）、``dim`` 是最后一维；形状、dtype、设备由查表的
键保证，与第一次相同。
guard 通过就调用 runner；guard 不通过、或 runner 返回 None（例如这一次的首地址不是 16 字节对齐、装了 Triton
的启动钩子），照常走完整的路径，由它检查并给出指明问题的错误。两条路接受同样的输入、给出同样的结果。

每次调用的 guard 与查表在哪里做：能编译 :mod:`reduction_lab.host` 的 C++ 扩展时，:data:`fast` 是它的
``dispatch``，guard、查表（扩展里的一张表，与 :data:`RUNNERS` 同步）和调用 runner 都在 C++ 里，一次调用只从
Python 进出一次；否则 :data:`fast` 是这里的 :func:`_py_fast`，同样的 guard 用 Python 写（两者接受的输入相同，
tests/test_host_runner.py 逐项对照）。

runner 有两种：

* 绑定好的启动（Triton 与 CUDA C 的短行内核）：内核、grid 与除两个地址以外的全部参数都已固定。能编译
  :mod:`reduction_lab.host` 的 C++ 扩展时，runner 是它的编译版（检查、``at::empty_like``、``cuLaunchKernel``
  都在 C++ 里，一次调用只从 Python 进出一次）；否则是 Python 写的同样几步：``empty_like``、取两个地址、一次
  C 启动函数（``triton_kernels.softmax.bound_softmax`` 等）；
* 其余情形（长行的分段与簇内核、TileLang）：就是该 backend 的 ``*_checked`` 函数，省掉的是 api 的检查与选择。

一次调用各步要多久：``scripts/host_cost.py``；每个实现与同进程的 torch 比：``reduction-lab bench percall``
（课程页面 docs/bench/index.md 的「一次调用的开销」）。
"""

from __future__ import annotations

import importlib

import torch

from .runtime import MODE

__all__ = ["ENABLED", "RUNNERS", "fast", "remember", "clear"]

#: 只在 gpu 模式下有快速路径（sim 模式的开销在模拟器里，与主机端的启动无关）
ENABLED = MODE == "gpu"
#: (操作, backend, dtype, 形状, 设备号) -> runner(x)
RUNNERS: dict = {}
MAX_RUNNERS = 4096
#: RUNNERS 里同时登记进 C++ 扩展的表的键
_IN_TABLE: set = set()

_Tensor = torch.Tensor
_strided = torch.strided
_grad_enabled = torch.is_grad_enabled
_cuda_device = getattr(torch._C, "_cuda_getDevice", None)
_has_storage = torch._C._has_storage          # torch.func 的包装张量（vmap、grad）没有自己的存储


def _py_fast(op: str, x, dim, backend):
    """guard 通过、有 runner 时返回 runner(x)，否则 None（调用者走完整的路径）。guard 之外的条件（形状、dtype、
    设备、backend 可用）由查表的键保证：runner 只为完整路径接受过的键建立。C++ 扩展的 ``dispatch`` 做同样的
    检查；设备号 -1（CPU 张量）的项只有测试登记。"""
    if type(x) is _Tensor and type(dim) is int and (dim == -1 or dim == 1) and type(backend) is str \
            and not x.is_nested:
        d = x.get_device()
        run = RUNNERS.get((op, backend, x.dtype, x.shape, d))
        if run is not None and x.layout is _strided and _has_storage(x) and x.is_contiguous() and not x.is_neg() \
                and (d == _cuda_device() if d >= 0 else x.is_cpu) and not (x.requires_grad and _grad_enabled()):
            return run(x)
    return None


#: api 每次调用先调 ``fast(op, x, dim, backend)``：C++ 扩展的 ``dispatch``（登记过第一项之后），或 :func:`_py_fast`
fast = _py_fast


def _table():
    """登记 runner 用的 C++ 扩展模块（关掉或编译不了时 None）。"""
    from . import host

    return host.module() if host.ENABLED else None

# 绑定好的启动：(实现, 操作) -> (模块, 函数)；函数收一个已经成功处理过的输入，返回 runner 或 None
_BOUND = {
    ("triton", "softmax"): ("reduction_lab.triton_kernels.softmax", "bound_softmax"),
    ("triton", "reduce_sum"): ("reduction_lab.triton_kernels.row_sum", "bound_row_sum"),
    ("cuda", "softmax"): ("reduction_lab.cuda_kernels", "bound_softmax"),
    ("cuda", "reduce_sum"): ("reduction_lab.cuda_kernels", "bound_reduce_sum"),
}


def clear() -> None:
    """丢掉所有 runner（测试用；学员改过内核源文件之后也可以调用；切换 ``host.ENABLED`` 之后也要调用）。"""
    global fast
    RUNNERS.clear()
    _IN_TABLE.clear()
    fast = _py_fast
    from . import host

    mod = host.loaded()
    if mod is not None:
        mod.table_clear()


def remember(op: str, backend: str, impl: str, x: torch.Tensor, checked, aligned_matters: bool) -> None:
    """完整的路径刚成功处理了 ``x``（已检查、连续、没有 ``out=``、不求导）之后调用：为这一组键建 runner。

    ``backend`` 是调用者给的（可以是 ``"auto"``），``impl`` 是实际运行的实现，``checked`` 是它的 ``*_checked``
    函数；``aligned_matters``：``auto`` 的选择是否取决于这一次的首地址是否对齐（是的话只用会检查对齐的绑定启动）。"""
    if not ENABLED or impl == "torch" or not x.is_contiguous():
        return
    key = (op, backend, x.dtype, x.shape, x.get_device())
    if key in RUNNERS:
        if key not in _IN_TABLE:              # 登记时扩展还不能用（或被关掉）：现在能用就补登记
            _store(key, RUNNERS[key])
        return
    runner = None
    where = _BOUND.get((impl, op))
    if where is not None and x.data_ptr() & 15 == 0:
        try:
            runner = getattr(importlib.import_module(where[0]), where[1])(x)
        except (AttributeError, TypeError, ValueError):      # 内部接口不是预期的样子：用 checked
            runner = None
    if runner is None:
        if aligned_matters:
            return
        runner = checked
    _store(key, runner)


def _store(key, runner) -> None:
    """登记一项：:data:`RUNNERS`，能用 C++ 扩展时也登记进它的表，并让 :data:`fast` 用它的 ``dispatch``。"""
    global fast
    if len(RUNNERS) >= MAX_RUNNERS:
        clear()
    RUNNERS[key] = runner
    op, backend, dtype, shape, device = key
    mod = _table()
    if mod is not None and len(shape) == 2:
        mod.table_set(op, backend, dtype, shape[0], shape[1], device, runner, _cuda_device)
        _IN_TABLE.add(key)
        fast = mod.dispatch
