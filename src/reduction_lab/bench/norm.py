"""归一化的测试套件（fp32）：前向``layer-norm``、``rms-norm``，反向``layer-norm-bwd``、``rms-norm-bwd``。

被测：本课程的Triton前向（:func:`reduction_lab.triton_kernels.layer_norm.layer_norm_forward`、
``rms_norm_forward``）与反向（``layer_norm_backward``、``rms_norm_backward``：dx、dW（与dB））。
前向对照``F.layer_norm`` / ``F.rms_norm``、torch.compile编译的同一个表达式、quack与Liger；反向对照torch的autograd
（``torch.autograd.grad``，保留计算图反复求导）、torch.compile编译的同一个反向公式、quack的
``rmsnorm_bwd`` / ``layernorm_bwd``（统计量由它自己的前向给出）与Liger（经autograd调用它的backward）。
权重、偏置与上游梯度dy只依赖于形状（固定种子），参考与每个实现用同一份。

课程页面：docs/triton/normalization.md「GPU上的实测」。
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runtime import DEVICE

FWD_SUITES = ("layer-norm", "rms-norm")
BWD_SUITES = ("layer-norm-bwd", "rms-norm-bwd")
NORM_SUITES = FWD_SUITES + BWD_SUITES
EPS = {"layer-norm": 1e-5, "rms-norm": 1e-6, "layer-norm-bwd": 1e-5, "rms-norm-bwd": 1e-6}

BYTE_FORMULAS = {
    "layer-norm": "`2*M*N*4`：读`M*N`个fp32的x + 写`M*N`个fp32的y（w、b与每行的均值、rstd不计）",
    "rms-norm": "`2*M*N*4`：读`M*N`个fp32的x + 写`M*N`个fp32的y（w与每行的rstd不计）",
    "layer-norm-bwd": "`3*M*N*4`：读`M*N`个fp32的x、`M*N`个dy + 写`M*N`个dx（w、均值、rstd、dW、dB不计）",
    "rms-norm-bwd": "`3*M*N*4`：读`M*N`个fp32的x、`M*N`个dy + 写`M*N`个dx（w、rstd、dW不计）",
}
_INPUTS = "输入为randn加每行不同的偏移（-10 … 10），w = 1 + 0.1*randn，b = 0.1*randn"
TOLERANCES = {
    **{s: f"`|y - y_ref| <= 2e-4 + 2e-4*|y_ref|`，`y_ref`是float64的`F.{s.replace('-', '_')}`（eps={EPS[s]:g}）；"
          + _INPUTS for s in FWD_SUITES},
    **{s: "dx、dW" + ("、dB" if s == "layer-norm-bwd" else "") + "逐个元素`|g - g_ref| <= 1e-3 + 1e-3*|g_ref|`，"
          f"`g_ref`是float64的`F.{s[:-4].replace('-', '_')}`经autograd求出的梯度；dy = randn；" + _INPUTS
       for s in BWD_SUITES},
}

_PARAMS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def params(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """长N的(w, b)，固定种子；同一个N总是同一对张量。"""
    if n not in _PARAMS:
        g = torch.Generator(device=DEVICE)
        g.manual_seed(1234 + n)
        w = 1 + 0.1 * torch.randn(n, generator=g, device=DEVICE)
        b = 0.1 * torch.randn(n, generator=g, device=DEVICE)
        _PARAMS[n] = (w, b)
    return _PARAMS[n]


def make_input(suite: str, shape: tuple[int, int], g: torch.Generator) -> torch.Tensor:
    m, n = shape
    x = torch.randn(m, n, generator=g, device=DEVICE, dtype=torch.float32)
    x += torch.linspace(-10.0, 10.0, m, device=DEVICE).unsqueeze(1)   # 每行不同的均值
    return x


def torch_norm(suite: str):
    """(x, w, b) -> y 的torch表达式（也用作torch.compile的输入）。"""
    if suite == "layer-norm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, EPS["layer-norm"])
    return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, EPS["rms-norm"])


_DY: dict[tuple, torch.Tensor] = {}


def upstream(shape) -> torch.Tensor:
    """反向套件的上游梯度dy（固定种子）；只缓存最近一个形状，免得扫描时占着每个形状的显存。"""
    shape = tuple(shape)
    if shape not in _DY:
        _DY.clear()
        g = torch.Generator(device=DEVICE)
        g.manual_seed(4321 + shape[1])
        _DY[shape] = torch.randn(shape, generator=g, device=DEVICE)
    return _DY[shape]


def flatten(grads) -> torch.Tensor:
    """反向的结果(dx, dW[, dB])连成一个向量，供验证比较。"""
    return torch.cat([t.reshape(-1) for t in grads if t is not None])


def reference(suite: str, x: torch.Tensor) -> torch.Tensor:
    w, b = params(x.shape[1])
    if suite in FWD_SUITES:
        return torch_norm(suite)(x.double(), w.double(), b.double())
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    fwd = suite[:-4]
    inputs = (xr, wr, br) if fwd == "layer-norm" else (xr, wr)
    y = torch_norm(fwd)(xr, wr, br)
    return flatten(torch.autograd.grad(y, inputs, upstream(x.shape).double()))


def within_tolerance(suite: str, err: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    if suite in BWD_SUITES:
        return err <= 1e-3 + 1e-3 * ref.abs()
    return err <= 2e-4 + 2e-4 * ref.abs()


def _stats(x, w, eps, rms: bool):
    """反向要用的每行统计量（与前向保存的相同）：(mean, rstd)，RMSNorm的mean为None。"""
    if rms:
        return None, torch.rsqrt((x * x).mean(dim=1) + eps)
    return x.mean(dim=1), torch.rsqrt(x.var(dim=1, unbiased=False) + eps)


def _backward_formula(x, w, dy, mean, rstd):
    """LayerNorm（mean不为None）或RMSNorm的反向公式，torch.compile编译它。"""
    xhat = (x if mean is None else x - mean[:, None]) * rstd[:, None]
    g = dy * w
    dx = g - xhat * (g * xhat).mean(dim=1, keepdim=True)
    if mean is not None:
        dx = dx - g.mean(dim=1, keepdim=True)
    dw = (dy * xhat).sum(dim=0)
    return (dx * rstd[:, None], dw) if mean is None else (dx * rstd[:, None], dw, dy.sum(dim=0))


def quack_forward(suite: str):
    """quack的前向：x -> y（quack.rmsnorm里的rmsnorm_fwd与layernorm_fwd）。"""
    def fwd(x, w, b):
        from quack.rmsnorm import layernorm_fwd, rmsnorm_fwd

        if suite == "layer-norm":
            return layernorm_fwd(x, w, b, eps=EPS[suite])
        return rmsnorm_fwd(x, w, eps=EPS[suite])[0]

    return fwd


def liger_forward(suite: str):
    """Liger的前向：x -> y（LigerLayerNormFunction、LigerRMSNormFunction，offset 0、llama的类型转换规则）。"""
    def fwd(x, w, b):
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        if suite == "layer-norm":
            return LigerLayerNormFunction.apply(x, w, b, EPS[suite])
        return LigerRMSNormFunction.apply(x, w, EPS[suite], 0.0, "llama", False)

    return fwd


def backward_prepare(suite: str, how: str):
    """反向套件的prepare(x)：how = "triton" | "torch" | "compile" | "quack" | "liger"。
    统计量与dy在prepare里准备，不计时。"""
    from .impls import compiled

    rms = suite == "rms-norm-bwd"
    eps = EPS[suite]

    def prepare(x: torch.Tensor):
        w, b = params(x.shape[1])
        dy = upstream(x.shape)
        if how == "triton":
            from ..triton_kernels.layer_norm import (layer_norm_backward, layer_norm_forward, rms_norm_backward,
                                                     rms_norm_forward)

            if rms:
                _, rstd = rms_norm_forward(x, w, eps)
                return lambda: rms_norm_backward(dy, x, w, rstd)
            _, mean, rstd = layer_norm_forward(x, w, b, eps)
            return lambda: layer_norm_backward(dy, x, w, mean, rstd)
        if how == "quack":
            from quack.rmsnorm import layernorm_bwd, layernorm_fwd, rmsnorm_bwd, rmsnorm_fwd

            if rms:
                _, _, rstd = rmsnorm_fwd(x, w, eps=eps, store_rstd=True)
                return lambda: rmsnorm_bwd(x, w, dy, rstd)[:2]          # (dx, dw)
            _, rstd, mean = layernorm_fwd(x, w, b, eps=eps, return_rstd=True, return_mean=True)
            return lambda: layernorm_bwd(x, w, dy, rstd, mean, has_bias=True)   # (dx, dw, db)
        if how in ("torch", "liger"):
            xr, wr, br = (t.detach().requires_grad_() for t in (x, w, b))
            fwd = torch_norm if how == "torch" else liger_forward
            y = fwd(suite[:-4])(xr, wr, br)
            inputs = (xr, wr) if rms else (xr, wr, br)
            return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)
        mean, rstd = _stats(x, w, eps, rms)
        fn = compiled(suite, _backward_formula)
        return lambda: fn(x, w, dy, mean, rstd)

    return prepare


def ours(suite: str):
    """本课程的Triton前向：x -> y。"""
    from ..triton_kernels.layer_norm import layer_norm_forward, rms_norm_forward

    if suite == "layer-norm":
        return lambda x, w, b: layer_norm_forward(x, w, b, EPS[suite])[0]
    return lambda x, w, b: rms_norm_forward(x, w, EPS[suite])[0]


def bind(fn):
    """prepare(x)：按x的列数取出(w, b)，返回无参调用。"""
    def prepare(x: torch.Tensor):
        w, b = params(x.shape[1])
        return lambda: fn(x, w, b)

    return prepare
