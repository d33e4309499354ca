"""统一入口：同一个归约，四种实现。

``reduce_sum(x, dim=1, backend=...)`` 与 ``softmax(x, backend=...)``，``backend`` 取
``"torch"``（PyTorch 自带的算子，作对照）、``"triton"``、``"cuda"``（CUDA C 源码，GPU 上经
CuPy，CPU 上经 :mod:`reduction_lab.simt`）、``"tilelang"``。在哪里运行由模式决定
（:mod:`reduction_lab.runtime`），与 backend 无关。
"""

from __future__ import annotations

import importlib

import torch

from .checks import check_matrix
from .runtime import DEVICE

BACKENDS = ("torch", "triton", "cuda", "tilelang")

# (backend, 操作) -> (模块, 函数名)
_IMPLS = {
    ("triton", "reduce_sum"): ("reduction_lab.triton_kernels.row_sum", "row_sum"),
    ("triton", "softmax"): ("reduction_lab.triton_kernels.softmax", "softmax"),
    ("cuda", "reduce_sum"): ("reduction_lab.cuda_kernels", "reduce_sum"),
    ("cuda", "softmax"): ("reduction_lab.cuda_kernels", "softmax"),
    ("tilelang", "reduce_sum"): ("reduction_lab.tilelang_kernels", "reduce_sum"),
    ("tilelang", "softmax"): ("reduction_lab.tilelang_kernels", "softmax"),
}


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"未知的 backend {backend!r}，可选：{', '.join(BACKENDS)} "
                         f"(unknown backend {backend!r}; choose one of {BACKENDS})")


def _impl(backend: str, op: str):
    module, name = _IMPLS[(backend, op)]
    return getattr(importlib.import_module(module), name)


def _check_dim(x: torch.Tensor, dim: int) -> None:
    if dim not in (1, -1):
        raise ValueError(
            f"只支持沿最后一维（dim=1）归约，得到 dim={dim}；对 dim=0 请先转置并 .contiguous() "
            f"(only dim=1 is supported; got dim={dim})"
        )


def reduce_sum(x: torch.Tensor, dim: int = 1, backend: str = "triton") -> torch.Tensor:
    """每行求和：(M, N) -> (M,)。"""
    _check_backend(backend)
    check_matrix(x, "x", device=DEVICE)
    _check_dim(x, dim)
    if backend == "torch":
        return x.sum(dim=1)
    return _impl(backend, "reduce_sum")(x)


def softmax(x: torch.Tensor, dim: int = -1, backend: str = "triton") -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)。"""
    _check_backend(backend)
    check_matrix(x, "x", device=DEVICE)
    _check_dim(x, dim)
    if backend == "torch":
        return torch.softmax(x, dim=-1)
    return _impl(backend, "softmax")(x)
