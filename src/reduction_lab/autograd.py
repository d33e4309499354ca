"""自动求导：每个操作一个 ``torch.autograd.Function``，前向与反向都在所选 backend 上运行。

课程页面：docs/triton/fused-softmax.md 的「反向传播：又一个行归约」。

``reduction_lab.softmax`` / ``reduction_lab.reduce_sum`` 经过这里，所以在每个 backend 上都可以
``backward()``。反向由哪个内核完成：

==========  ==========================================  ==========================================
backend     softmax 的反向 dx = y * (dy - sum(y * dy))   reduce_sum 的反向 dx[i, j] = dy[i]
==========  ==========================================  ==========================================
torch       torch 自己的 softmax 反向                     torch 自己的 sum 反向
triton      Triton 融合内核（softmax_backward.py）        广播：dy[:, None].expand(M, N)，不启动内核
cuda        CUDA C 内核（softmax_backward.cu）            同上
tilelang    TileLang 内核（tilelang_kernels/backward.py）  同上
==========  ==========================================  ==========================================

reduce_sum 的反向只是把每行的 dy 广播到整行：返回的是一个步长为 (1, 0) 的视图，不搬运数据。
如果需要普通的连续张量（比如原地修改它），请调用 ``.contiguous()``。

dtype：反向与前向同 dtype（cuda 与 tilelang 的 bfloat16 / float16 反向内核也按输入的 dtype 读写、float32 里计算；
上游梯度 dy 先转成 y 的 dtype）。

softmax 的反向只需要前向的输出 y，不需要 x：前向保存 y，反向读 y 与 dy 各一次、写 dx 一次。
softmax 只能求一阶导数（``create_graph=True`` 之后再求导会报错）；reduce_sum 的反向是 torch 的广播，
可以求高阶导数。
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

__all__ = ["SoftmaxFunction", "ReduceSumFunction", "softmax", "reduce_sum", "BACKWARD_KERNELS"]

#: backend -> softmax 反向所用的内核（文档与测试共用这张表）
BACKWARD_KERNELS = {
    "torch": "torch",
    "triton": "triton_kernels.softmax_backward.softmax_backward",
    "cuda": "cuda_kernels.softmax_backward (softmax_backward.cu)",
    "tilelang": "tilelang_kernels.softmax_backward (tilelang_kernels/backward.py)",
}


def _softmax_forward(x, backend, kwargs):
    if backend == "triton":
        from .triton_kernels.softmax import softmax as f
    elif backend == "cuda":
        from .cuda_kernels import softmax as f
    elif backend == "tilelang":
        from .tilelang_kernels import softmax as f
    else:
        raise ValueError(f"未知的 backend {backend!r} (unknown backend {backend!r})")
    return f(x, **kwargs)


def _softmax_backward(y, dy, backend):
    # dy 来自 autograd，可能是广播出来的（步长为 0）或不连续的：内核要最后一维连续
    if dy.dim() != 2 or dy.stride(1) != 1:
        dy = dy.contiguous()
    if dy.dtype != y.dtype:
        dy = dy.to(y.dtype)
    if backend == "cuda":
        from .cuda_kernels import softmax_backward

        return softmax_backward(y, dy)
    if backend == "tilelang":
        from .tilelang_kernels import softmax_backward

        return softmax_backward(y.contiguous(), dy.contiguous())    # TileLang 内核要行主序连续
    from .triton_kernels.softmax_backward import softmax_backward

    return softmax_backward(y, dy)


def _reduce_sum_forward(x, backend, kwargs):
    if backend == "triton":
        from .triton_kernels.row_sum import row_sum as f
    elif backend == "cuda":
        from .cuda_kernels import reduce_sum as f
    elif backend == "tilelang":
        from .tilelang_kernels import reduce_sum as f
    else:
        raise ValueError(f"未知的 backend {backend!r} (unknown backend {backend!r})")
    return f(x, **kwargs)


class SoftmaxFunction(torch.autograd.Function):
    """按行 softmax。前向：所选 backend 的内核；反向：见模块说明里的表。"""

    @staticmethod
    def forward(ctx, x, backend, kwargs):
        y = _softmax_forward(x, backend, kwargs)
        ctx.backend = backend
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable          # 反向内核不记录 autograd 历史：二阶导数会明确报错，而不是悄悄为 0
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return _softmax_backward(y, dy, ctx.backend), None, None


class ReduceSumFunction(torch.autograd.Function):
    """每行求和。反向：dx[i, j] = dy[i]，一个广播视图。"""

    @staticmethod
    def forward(ctx, x, backend, kwargs):
        ctx.shape = x.shape
        ctx.dtype = x.dtype
        return _reduce_sum_forward(x, backend, kwargs)

    @staticmethod
    def backward(ctx, dy):
        return dy.to(ctx.dtype)[:, None].expand(ctx.shape), None, None


def softmax(x: torch.Tensor, backend: str = "triton", **kwargs) -> torch.Tensor:
    """可求导的按行 softmax（``backend`` 取 triton、cuda、tilelang）。"""
    return SoftmaxFunction.apply(x, backend, kwargs)


def reduce_sum(x: torch.Tensor, backend: str = "triton", **kwargs) -> torch.Tensor:
    """可求导的每行求和（``backend`` 取 triton、cuda、tilelang）。"""
    return ReduceSumFunction.apply(x, backend, kwargs)
