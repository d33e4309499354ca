"""统一入口：同一个归约，四种实现。

``reduce_sum(x, dim=1, backend=..., out=None)`` 与 ``softmax(x, dim=-1, backend=..., out=None)``，
``backend`` 取 ``"auto"``（默认：按行长、dtype 与 GPU 选下面的一个，规则见 :mod:`reduction_lab.auto`）、
``"torch"``（PyTorch 自带的算子，作对照）、``"triton"``、``"cuda"``（CUDA C 源码，GPU 上经
CuPy，CPU 上经 :mod:`reduction_lab.simt`）、``"tilelang"``。在哪里运行由模式决定
（:mod:`reduction_lab.runtime`），与 backend 无关。

* 每个 backend 都可以求导（:mod:`reduction_lab.autograd`）：``x.requires_grad`` 时结果带有
  autograd 历史，反向在同一个 backend 上运行（TileLang 的 softmax 反向用 Triton 内核）；
* ``out``：调用者提供的输出，必须是连续张量，形状、dtype、设备与结果一致，且不与 ``x`` 重叠；
  与 torch 一样，需要求导时不接受 ``out``；
* 返回的张量总是新分配的连续张量（或者就是 ``out``），不沿用 ``x`` 的步长；
* 所有参数都在启动任何内核之前检查；gpu 模式下同一形状反复调用时走 :mod:`reduction_lab.fastcall` 的快速路径
  （只做几项便宜的检查，其余由第一次调用的完整检查保证），接受的输入与结果都与完整的路径相同。

dtype：auto、torch 与 triton 接受 float32、float16、bfloat16、float64（float64 按 float64 计算，
``torch.autograd.gradcheck`` 用它）；cuda 与 tilelang 接受 float32、bfloat16、float16：按输入的 dtype 读写，
在 float32 里累加、求 exp，结果与输入同 dtype（前向与反向都是）。sim 模式下 tilelang 不接受 bfloat16
（TileLang 的 C 目标没有 bfloat16，见 ``reduction_lab.tilelang_kernels.BF16_C_TARGET``）。
"""

from __future__ import annotations

import importlib

import torch

from . import fastcall
from .auto import depends_on_alignment as _auto_alignment
from .auto import resolve as _auto
from .checks import MAX_COLS, check_matrix, check_no_overlap, check_out
from .runtime import DEVICE

#: 四种具体实现；BACKENDS 另有 "auto"（按形状选其中之一，见 reduction_lab.auto）
IMPLEMENTATIONS = ("torch", "triton", "cuda", "tilelang")
BACKENDS = ("auto", *IMPLEMENTATIONS)
_BACKEND_SET = frozenset(BACKENDS)

#: 每个 backend 接受的输入 dtype
DTYPES = {
    "auto": (torch.float32, torch.float16, torch.bfloat16, torch.float64),     # float64 总是交给 triton
    "torch": (torch.float32, torch.float16, torch.bfloat16, torch.float64),
    "triton": (torch.float32, torch.float16, torch.bfloat16, torch.float64),
    "cuda": (torch.float32, torch.bfloat16, torch.float16),
    "tilelang": (torch.float32, torch.bfloat16, torch.float16),     # sim 模式没有 bfloat16
}

# 后端注册表：(backend, 操作) -> (模块, 函数名)。这些入口假定输入已经由本模块检查过；
# 第一次用到时导入，之后直接从 _RESOLVED 取（每次调用不再经过 importlib）。
_IMPLS = {
    ("triton", "reduce_sum"): ("reduction_lab.triton_kernels.row_sum", "row_sum_checked"),
    ("triton", "softmax"): ("reduction_lab.triton_kernels.softmax", "softmax_checked"),
    ("cuda", "reduce_sum"): ("reduction_lab.cuda_kernels", "reduce_sum_checked"),
    ("cuda", "softmax"): ("reduction_lab.cuda_kernels", "softmax_checked"),
    ("tilelang", "reduce_sum"): ("reduction_lab.tilelang_kernels", "reduce_sum_checked"),
    ("tilelang", "softmax"): ("reduction_lab.tilelang_kernels", "softmax_checked"),
}
_RESOLVED: dict = {}


def _check_backend(backend) -> None:
    if not isinstance(backend, str) or backend not in _BACKEND_SET:
        raise ValueError(f"未知的 backend {backend!r}，可选：{', '.join(BACKENDS)} "
                         f"(unknown backend {backend!r}; choose one of {BACKENDS})")


def _impl(backend: str, op: str):
    fn = _RESOLVED.get((backend, op))
    if fn is None:
        module, name = _IMPLS[(backend, op)]
        fn = _RESOLVED[(backend, op)] = getattr(importlib.import_module(module), name)
    return fn


def _check_dim(x: torch.Tensor, dim) -> None:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim not in (1, -1):
        raise ValueError(
            f"只支持沿最后一维（dim=1 或 dim=-1）归约，得到 dim={dim!r}；reduce_sum 在 torch 与 triton 后端上"
            f"还支持沿列（dim=0）"
            f"(only dim=1 / dim=-1 is supported; got dim={dim!r})"
        )


#: 沿列（dim=0）求和：torch 与 triton（reduction_lab.triton_kernels.col_sum，课程页面 docs/triton/column-sum.md）
COLUMN_BACKENDS = ("torch", "triton")         # 以及 auto（它用 triton）


_DTYPE_SETS = {b: frozenset(d) for b, d in DTYPES.items()}
_ON_CUDA = DEVICE == "cuda"
_current_device = getattr(torch._C, "_cuda_getDevice", None) if _ON_CUDA else None
_Tensor = torch.Tensor
_strided = torch.strided
_has_storage = torch._C._has_storage
_FAST = fastcall.ENABLED and _current_device is not None


def _remember(op, backend, impl, x, needs_grad):
    """完整路径成功之后：为这一组键建快速路径的 runner（只在 gpu 模式、没有 out=、不求导、连续输入时）。"""
    if needs_grad or impl == "torch" or not x.is_contiguous():
        return
    fastcall.remember(op, backend, impl, x, _RESOLVED.get((impl, op)) or _impl(impl, op),
                      backend == "auto" and _auto_alignment(op, x))


def _check_args(x, dim, backend, out, op):
    """所有参数的检查，在任何内核启动之前。返回是否需要求导。

    常见情形（普通张量、沿最后一维、没有 out=）先走一遍合在一起的快速检查，每次调用约1微秒；
    任何一项不满足时走下面逐项的检查，由它给出指明问题的错误。两条路接受的输入完全相同。"""
    if out is None and type(x) is _Tensor and type(dim) is int and (dim == -1 or dim == 1) and type(backend) is str \
            and x.dtype in _DTYPE_SETS.get(backend, ()) and x.layout is _strided and not x.is_nested \
            and not x.is_neg() and x.dim() == 2 and _has_storage(x):
        # float dtype 没有共轭标记（只有复数张量有），所以不必查 is_conj；连续且元素数不超过 MAX_COLS
        # 时每行的元素数也不超过它（更大的张量、行距不等于行长的切片走逐项的检查）
        if x.is_contiguous() and 0 < x.numel() <= MAX_COLS:
            if _ON_CUDA:
                ok = x.is_cuda and (backend == "torch" or x.get_device() == _current_device())
            else:
                ok = x.device.type == DEVICE
            if ok:
                return x.requires_grad and torch.is_grad_enabled()
    _check_backend(backend)
    check_matrix(x, "x", dtypes=DTYPES[backend], device=DEVICE)
    if backend != "torch" and not _has_storage(x):
        raise TypeError(f"x 是 torch.func 变换（vmap、grad 等）里的包装张量，没有自己的存储，backend={backend!r} 的内核"
                        f"读不了它；请在变换之外调用，或用 backend='torch' "
                        f"(x is a torch.func wrapper without storage; the {backend!r} kernels cannot read it)")
    if op == "reduce_sum" and not isinstance(dim, bool) and dim in (0, -2):
        if backend not in COLUMN_BACKENDS and backend != "auto":
            raise ValueError(f"沿列求和（dim=0）只有 {', '.join(COLUMN_BACKENDS)} 后端支持，得到 backend={backend!r} "
                             f"(dim=0 is supported by the {COLUMN_BACKENDS} backends only)")
        if out is not None:
            check_out(out, (x.shape[1],), x.dtype, x.device)
            if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad):
                raise RuntimeError("需要求导时不能用 out= (out= does not support automatic differentiation)")
            check_no_overlap(out, x, "out", "x")
        return torch.is_grad_enabled() and x.requires_grad
    _check_dim(x, dim)
    if backend != "torch" and x.is_cuda and x.get_device() != torch.cuda.current_device():
        cur = torch.cuda.current_device()
        raise ValueError(f"x 在 {x.device} 上，而当前设备是 cuda:{cur}：内核在当前设备上启动；请先 "
                         f"torch.cuda.set_device({x.device.index})，或在 with torch.cuda.device(x.device) 里调用 "
                         f"(x is on {x.device} but the current device is cuda:{cur})")
    out_shape = (x.shape[0],) if op == "reduce_sum" else tuple(x.shape)
    needs_grad = torch.is_grad_enabled() and x.requires_grad
    if out is not None:
        check_out(out, out_shape, x.dtype, x.device)
        if backend != "torch" and not _has_storage(out):
            raise TypeError("out 是 torch.func 变换里的包装张量，没有自己的存储，内核写不进它 "
                            "(out is a torch.func wrapper without storage)")
        if needs_grad or out.requires_grad:
            raise RuntimeError(
                "需要求导时不能用 out=（与 torch 相同：写进调用者的张量没有 autograd 历史）；"
                "去掉 out，或在 torch.no_grad() 下调用，且 out 不能 requires_grad "
                "(out= does not support automatic differentiation: drop out or call under torch.no_grad())")
        check_no_overlap(out, x, "out", "x")
    return needs_grad


def _into(out, result):
    if out is None or result is out:
        return result
    return out.copy_(result)


def reduce_sum(x: torch.Tensor, dim: int = 1, backend: str = "auto", *,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """每行求和：(M, N) -> (M,)，dtype 与 x 相同。``out``：调用者提供的 (M,) 连续输出。
    ``dim=0``（torch 与 triton 后端，auto 用 triton）：每列求和 (M, N) -> (N,)，不做转置拷贝（docs/triton/column-sum.md）。"""
    if _FAST and out is None:
        res = fastcall.fast("reduce_sum", x, dim, backend)      # guard 与查表：fastcall 的说明
        if res is not None:
            return res
    needs_grad = _check_args(x, dim, backend, out, "reduce_sum")
    asked = backend
    if backend == "auto":
        backend = _auto("reduce_sum", x)
    if dim in (0, -2):
        return _column_sum(x, backend, out, needs_grad)
    if backend == "torch":
        return x.sum(dim=1) if out is None else torch.sum(x, dim=1, out=out)
    if needs_grad:
        from . import autograd

        return autograd.reduce_sum(x, backend)
    if out is None:
        res = (_RESOLVED.get((backend, "reduce_sum")) or _impl(backend, "reduce_sum"))(x)
        if _FAST:
            _remember("reduce_sum", asked, backend, x, needs_grad)
        return res
    if backend in ("triton", "cuda"):
        return _impl(backend, "reduce_sum")(x, out=out)
    return _into(out, _impl(backend, "reduce_sum")(x))


class _ColumnSum(torch.autograd.Function):
    """列求和的反向：dx[i, j] = dy[j]（广播，不启动内核）。"""

    @staticmethod
    def forward(ctx, x):
        from .triton_kernels.col_sum import col_sum

        ctx.rows = x.shape[0]
        return col_sum(x)

    @staticmethod
    def backward(ctx, dy):
        return dy.unsqueeze(0).expand(ctx.rows, -1)


def _column_sum(x, backend, out, needs_grad):
    if backend == "torch":
        return x.sum(dim=0) if out is None else torch.sum(x, dim=0, out=out)
    if needs_grad:
        return _ColumnSum.apply(x)
    from .triton_kernels.col_sum import col_sum

    return _into(out, col_sum(x))


def softmax(x: torch.Tensor, dim: int = -1, backend: str = "auto", *,
            out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)，dtype 与 x 相同。``out``：调用者提供的 (M, N) 连续输出。"""
    if _FAST and out is None:
        res = fastcall.fast("softmax", x, dim, backend)
        if res is not None:
            return res
    needs_grad = _check_args(x, dim, backend, out, "softmax")
    asked = backend
    if backend == "auto":
        backend = _auto("softmax", x)
    if backend == "torch":
        return torch.softmax(x, dim=-1) if out is None else out.copy_(torch.softmax(x, dim=-1))
    if needs_grad:
        from . import autograd

        return autograd.softmax(x, backend)
    if out is None:
        res = (_RESOLVED.get((backend, "softmax")) or _impl(backend, "softmax"))(x)
        if _FAST:
            _remember("softmax", asked, backend, x, needs_grad)
        return res
    if backend in ("triton", "cuda", "tilelang"):
        return _impl(backend, "softmax")(x, out=out)
    return _into(out, _impl(backend, "softmax")(x))
