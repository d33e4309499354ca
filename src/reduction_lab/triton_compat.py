"""Triton 解释器的版本差异，集中在这里处理（memcount 与 triton_kernels 共用）。

triton < 3.7 的解释器用 ``int(数组)`` 实现张量的 ``__index__``；numpy >= 2.4 不再允许对一维数组
这样转换，于是循环上界是运行时参数的内核（如 row_sum、online_softmax）报
"only 0-dimensional arrays can be converted to Python scalars"。:func:`wrap_patch_lang`
把它换成 triton 3.9 的写法。
"""

from __future__ import annotations

import threading

import numpy as np

#: Triton 解释器不是线程安全的：每次启动（``GridExecutor.__call__``）都临时改写 ``triton.language``，
#: 并用进程内唯一的 builder 记录 program 编号。两个线程同时启动会互相破坏（报 "Did you forget to add
#: @triton.jit"，或者读到别的启动的 program 编号）。所有解释执行的启动都持有这把锁，依次执行；
#: :mod:`reduction_lab.memcount` 用的也是它。
INTERPRETER_LOCK = threading.RLock()


def install_interpreter_lock() -> None:
    """让解释器的每次启动都持有 :data:`INTERPRETER_LOCK`（只装一次）。"""
    from triton.runtime import interpreter

    call = interpreter.GridExecutor.__call__
    if getattr(call, "_reduction_lab_locked", False):
        return

    def __call__(self, *args, **kwargs):
        with INTERPRETER_LOCK:
            return call(self, *args, **kwargs)

    __call__._reduction_lab_locked = True
    __call__.__wrapped__ = call
    interpreter.GridExecutor.__call__ = __call__


def version_tuple(v: str) -> tuple:
    """'3.6.0+git...' -> (3, 6)。"""
    parts = []
    for p in v.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _scalar_index(self) -> int:
    return int(np.asarray(self.handle.data).squeeze())


def wrap_patch_lang(orig):
    """包装解释器的 ``_patch_lang``：在它打的补丁作用域里再换上修正过的 ``tensor.__index__``
    （随作用域一起撤销）。"""
    def _patch_lang(fn):
        scope = orig(fn)
        if scope is not None and hasattr(scope, "set_attr"):
            import triton.language as tl

            scope.set_attr(tl.core.tensor, "__index__", _scalar_index)
        return scope

    _patch_lang._reduction_lab_patched = True
    return _patch_lang


def install_index_fix() -> None:
    """sim 模式、triton < 3.7 时全局安装上面的修正（只装一次）。"""
    import triton
    from triton.runtime import interpreter

    orig = getattr(interpreter, "_patch_lang", None)
    if version_tuple(triton.__version__) >= (3, 7) or orig is None \
            or getattr(orig, "_reduction_lab_patched", False):
        return
    interpreter._patch_lang = wrap_patch_lang(orig)
