"""Triton 解释器的版本差异，集中在这里处理（memcount 与 triton_kernels 共用）。

triton < 3.7 的解释器用 ``int(数组)`` 实现张量的 ``__index__``；numpy >= 2.4 不再允许对一维数组
这样转换，于是循环上界是运行时参数的内核（如 row_sum、online_softmax）报
"only 0-dimensional arrays can be converted to Python scalars"。:func:`wrap_patch_lang`
把它换成 triton 3.9 的写法。
"""

from __future__ import annotations

import numpy as np


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
