"""归一化的测试套件：``layer-norm``与``rms-norm``（前向，fp32）。

被测：本课程的Triton前向（:func:`reduction_lab.triton_kernels.layer_norm.layer_norm_forward`、
``rms_norm_forward``），对照``F.layer_norm`` / ``F.rms_norm``与torch.compile编译的同一个表达式。
权重与偏置只依赖于N（固定种子），参考与每个实现用同一份。

课程页面：docs/triton/normalization.md「GPU上的实测」。
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runtime import DEVICE

NORM_SUITES = ("layer-norm", "rms-norm")
EPS = {"layer-norm": 1e-5, "rms-norm": 1e-6}

BYTE_FORMULAS = {
    "layer-norm": "`2*M*N*4`：读`M*N`个fp32的x + 写`M*N`个fp32的y（w、b与每行的均值、rstd不计）",
    "rms-norm": "`2*M*N*4`：读`M*N`个fp32的x + 写`M*N`个fp32的y（w与每行的rstd不计）",
}
TOLERANCES = {
    s: f"`|y - y_ref| <= 2e-4 + 2e-4*|y_ref|`，`y_ref`是float64的`F.{s.replace('-', '_')}`（eps={EPS[s]:g}）；"
       "输入为randn加每行不同的偏移（-10 … 10），w = 1 + 0.1*randn，b = 0.1*randn"
    for s in NORM_SUITES
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


def reference(suite: str, x: torch.Tensor) -> torch.Tensor:
    w, b = params(x.shape[1])
    return torch_norm(suite)(x.double(), w.double(), b.double())


def within_tolerance(err: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return err <= 2e-4 + 2e-4 * ref.abs()


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
