"""Triton 包装函数共用的小工具：块大小、warp 数、SM 数。"""

from __future__ import annotations

import functools

import triton

from ..runtime import MODE


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(int(n))


def warps_for(block_elems: int) -> int:
    """按每个 program 处理的元素数选 warp 数：每个线程大约 8–32 个元素。"""
    if block_elems >= 32768:
        return 32
    if block_elems >= 8192:
        return 16
    if block_elems >= 2048:
        return 8
    return 4


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """GPU 的 SM 数；sim 模式下返回 1（解释器一个接一个地运行 program）。"""
    if MODE != "gpu":
        return 1
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _patch_old_interpreter() -> None:
    """triton < 3.7 的解释器用 ``int(数组)`` 实现张量的 ``__index__``；numpy >= 2.4 对一维数组
    不再允许这样转换，于是循环上界是运行时参数的内核（如 row_sum、online_softmax）在 sim 模式下
    报 "only 0-dimensional arrays can be converted to Python scalars"。这里换成 triton 3.9 的写法。"""
    import numpy as np
    from triton.runtime import interpreter

    orig = getattr(interpreter, "_patch_lang", None)
    if orig is None or getattr(orig, "_reduction_lab_patched", False):
        return

    def _index(self) -> int:
        return int(np.asarray(self.handle.data).squeeze())

    def _patch_lang(fn):
        scope = orig(fn)
        if scope is not None and hasattr(scope, "set_attr"):
            import triton.language as tl

            scope.set_attr(tl.core.tensor, "__index__", _index)
        return scope

    _patch_lang._reduction_lab_patched = True
    interpreter._patch_lang = _patch_lang


def _triton_older_than(major: int, minor: int) -> bool:
    parts = triton.__version__.split(".")
    return (int(parts[0]), int(parts[1])) < (major, minor)


if MODE == "sim" and _triton_older_than(3, 7):
    _patch_old_interpreter()
