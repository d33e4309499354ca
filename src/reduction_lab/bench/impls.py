"""被测的实现：本课程的内核（triton / cuda / tilelang）与对照（torch、torch.compile、CuPy、quack、Liger）。

每个实现是一个:class:`Impl`：``prepare(x)``返回一个无参的可调用对象，它在输入``x``
上算一次结果。准备工作（CuPy视图、torch.compile的函数对象、前向保存的统计量）放在``prepare``里，
不计入时间。``dtypes``是它接受的输入dtype，``refuses(shape, dtype)``说明它拒绝哪些形状
（例如Liger的softmax拒绝N > 65536），``group``是它在分进程测量时所在的进程
（:mod:`reduction_lab.bench.isolate`）。

quack（quack-kernels 0.6.5，CuTe DSL，只在Hopper及更新的GPU上运行）与Liger（liger-kernel 0.8.5，Triton）
按各自的公开函数调用：``quack.softmax.softmax_fwd``、``quack.rmsnorm.rmsnorm_fwd`` / ``rmsnorm_bwd`` /
``layernorm_fwd`` / ``layernorm_bwd``；``liger_kernel.ops``里的``LigerSoftmaxFunction``、
``LigerRMSNormFunction``、``LigerLayerNormFunction``（反向经autograd调用它们的backward）。
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..runtime import MODE


ALL_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Impl:
    name: str
    label: str
    kind: str  # "ours"（本课程）或"peer"（对照）
    prepare: Callable[[torch.Tensor], Callable[[], object]] = field(repr=False)
    check: Callable[[], str | None] = field(default=lambda: None, repr=False)
    dtypes: tuple[str, ...] = ("float32",)
    refuses: Callable[[tuple, str], str | None] = field(default=lambda shape, dtype: None, repr=False)
    group: str | None = None  # 分进程测量时所在的进程（默认与name相同）

    def unavailable(self) -> str | None:
        """不能运行时返回原因（缺模块、需要GPU……），否则None。"""
        return self.check()

    def dtype_reason(self, dtype: str) -> str | None:
        """不接受这个dtype时返回原因，否则None。"""
        if dtype not in self.dtypes:
            return f"只接受{'、'.join(self.dtypes)}，不接受{dtype}(accepts {', '.join(self.dtypes)} only)"
        return None

    @property
    def process(self) -> str:
        return self.group or self.name


# ---------------------------------------------------------------- 本课程的实现

_API_OPS = {"softmax": "softmax", "row-sum": "reduce_sum"}


def cuda_missing() -> str | None:
    """CUDA C 内核在当前模式下缺的依赖（gpu 模式要 cupy，sim 模式要模拟器用的 pycparser）。"""
    need = "cupy" if MODE == "gpu" else "pycparser"
    if importlib.util.find_spec(need) is None:
        return f"cuda实现在{MODE}模式下需要{need}，当前环境没有安装"
    return None


def _api_check(backend: str, op: str) -> Callable[[], str | None]:
    def check() -> str | None:
        from .. import api

        if backend == "tilelang" and importlib.util.find_spec("tilelang") is None:
            return "没有安装tilelang (tilelang is not installed)"
        if backend == "cuda" and cuda_missing():
            return cuda_missing()
        table = getattr(api, "_IMPLS", {})
        if (backend, op) in table:
            module, name = table[(backend, op)]
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:
                return f"{module}无法导入：{exc}"
            if not hasattr(mod, name):
                return f"{module}里还没有{name}"
        return None

    return check


def _api_impl(suite: str, backend: str) -> Impl:
    op = _API_OPS[suite]
    labels = {"triton": "Triton", "cuda": "CUDA C", "tilelang": "TileLang"}

    def prepare(x: torch.Tensor):
        from .. import api

        fn = getattr(api, op)
        return lambda: fn(x, backend=backend)

    # 接受的dtype取自reduction_lab.api.DTYPES（float64只给gradcheck用，不测）
    from .. import api

    names = {str(d).replace("torch.", "") for d in api.DTYPES[backend]}
    dtypes = tuple(d for d in ALL_DTYPES if d in names)
    return Impl(backend, labels[backend], "ours", prepare, _api_check(backend, op), dtypes=dtypes)


# ---------------------------------------------------------------- 对照

def _gpu_only(what: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if MODE != "gpu":
            return f"{what}只在gpu模式下计时({what} is timed in gpu mode only)"
        return None

    return check


def _cupy_check() -> str | None:
    if MODE != "gpu":
        return "CuPy需要GPU，只在gpu模式下计时(CuPy needs a GPU)"
    if importlib.util.find_spec("cupy") is None:
        return "没有安装cupy (cupy is not installed)"
    return None


_COMPILED: dict[str, Callable] = {}


def compiled(key: str, fn: Callable) -> Callable:
    """同一个表达式的torch.compile版本（每个形状静态编译一次，不自动转成动态形状）。"""
    if key not in _COMPILED:
        import torch._dynamo as dynamo

        # 默认最多为8个形状重新编译，扫描有10个形状
        for attr in ("recompile_limit", "cache_size_limit"):  # 新名字在前，旧名字是它的别名
            if hasattr(dynamo.config, attr):
                setattr(dynamo.config, attr, max(64, getattr(dynamo.config, attr)))
                break
        _COMPILED[key] = torch.compile(fn, dynamic=False)
    return _COMPILED[key]


def _torch_softmax(t):
    return torch.softmax(t, dim=-1)


def _torch_row_sum(t):
    return t.sum(dim=1)


def _torch_col_sum(t):
    return t.sum(dim=0)


def _torch_full_sum(t):
    return t.sum()


def _peer(name, label, fn, check=lambda: None, dtypes=("float32",)) -> Impl:
    return Impl(name, label, "peer", lambda x: (lambda: fn(x)), check, dtypes=dtypes)


def _compile_peer(key, fn, dtypes=("float32",)) -> Impl:
    def prepare(x):
        cfn = compiled(key, fn)
        return lambda: cfn(x)

    return Impl("compile", "torch.compile", "peer", prepare, _gpu_only("torch.compile"), dtypes=dtypes)


# ---------------------------------------------------------------- quack与Liger

QUACK_DIST, LIGER_DIST = "quack-kernels", "liger-kernel"
#: Liger的calculate_settings：next_power_of_2(N)超过65536就拒绝（MAX_FUSED_SIZE）
LIGER_MAX_N = 65536


def _quack_check() -> str | None:
    if MODE != "gpu":
        return "quack（CuTe DSL）只在gpu模式下运行(quack runs in gpu mode only)"
    if importlib.util.find_spec("quack") is None:
        return ("没有安装quack-kernels：在GPU机器上运行scripts/install_peer_wheels.sh，"
                "并按它打印的PYTHONPATH运行(quack-kernels is not installed)")
    major, minor = torch.cuda.get_device_capability()
    if major < 9:
        return f"quack需要Hopper（sm_90）或更新的GPU，当前是sm_{major}{minor}(quack needs sm_90+)"
    return None


def _liger_check() -> str | None:
    # Liger是Triton内核：sim模式下在Triton解释器上也能运行（CPU张量）
    if importlib.util.find_spec("liger_kernel") is None:
        return ("没有安装liger-kernel：pip install 'reduction_lab[peers]'，GPU机器上见"
                "scripts/install_peer_wheels.sh(liger-kernel is not installed)")
    return None


def _liger_refuses(shape, dtype) -> str | None:
    n = shape[-1]
    if 1 << max(n - 1, 0).bit_length() > LIGER_MAX_N:
        return f"Liger拒绝N > {LIGER_MAX_N}（一行必须放进一个Triton块）(Liger refuses N > {LIGER_MAX_N})"
    return None


def _quack_softmax(x):
    from quack.softmax import softmax_fwd

    return lambda: softmax_fwd(x)


def _liger_softmax(x):
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return lambda: LigerSoftmaxFunction.apply(x)


def quack_peer(prepare, dtypes=ALL_DTYPES) -> Impl:
    return Impl("quack", "quack", "peer", prepare, _quack_check, dtypes=dtypes)


def liger_peer(prepare, dtypes=ALL_DTYPES) -> Impl:
    return Impl("liger", "Liger", "peer", prepare, _liger_check, dtypes=dtypes, refuses=_liger_refuses)


def _cupy_peer(axis, dtypes=("float32",)) -> Impl:
    def prepare(x):
        import cupy

        from ..cuda_kernels.launcher import cupy_stream

        xc = cupy.asarray(x)  # 零拷贝视图（__cuda_array_interface__）
        def call():
            # 在torch的当前流上启动：CUDA事件记录在同一个流上，录CUDA图时也在录制流上
            with cupy_stream():
                return cupy.sum(xc, axis=axis)

        return call

    return Impl("cupy", "CuPy (CUB)", "peer", prepare, _cupy_check, dtypes=dtypes)


# ---------------------------------------------------------------- 全数组求和：七个版本 + shuffle

def full_sum_versions() -> dict:
    from ..cuda_kernels import FULL_SUM_VERSIONS

    return dict(FULL_SUM_VERSIONS)


def _full_sum_check() -> str | None:
    if cuda_missing():
        return cuda_missing()
    try:
        from ..cuda_kernels import FULL_SUM_VERSIONS, full_sum  # noqa: F401
    except ImportError as exc:
        return f"reduction_lab.cuda_kernels还没有full_sum / FULL_SUM_VERSIONS：{exc}"
    return None


def _full_sum_impl(version: int, kernel: str) -> Impl:
    def prepare(x):
        from ..cuda_kernels import full_sum

        return lambda: full_sum(x, version=version)

    return Impl(f"v{version}", f"{version}: {kernel}", "ours", prepare, _full_sum_check, group="cuda")


#: 环境变量：逗号分隔的模块名，每个模块提供``bench_impls(suite) -> list[Impl]``，加在内置实现之后。
#: 用来把自己的实现放进同一套验证与计时（分进程测量时子进程也按它导入）。
EXTRA_ENV = "REDUCTION_LAB_BENCH_EXTRA"


def extra_impls(suite: str) -> list[Impl]:
    import os

    out = []
    for name in filter(None, (m.strip() for m in os.environ.get(EXTRA_ENV, "").split(","))):
        try:
            mod = importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"{EXTRA_ENV}里的模块{name}无法导入：{exc}(cannot import {name})") from None
        if not hasattr(mod, "bench_impls"):
            raise ValueError(f"{EXTRA_ENV}里的模块{name}没有bench_impls(suite)函数({name} has no bench_impls)")
        out += list(mod.bench_impls(suite))
    return out


def impls_for(suite: str) -> list[Impl]:
    """一个测试套件的全部实现，按表格里的列顺序（:data:`EXTRA_ENV`里的实现在最后）。"""
    return _builtin_impls(suite) + (extra_impls(suite) if suite != "full-sum" else [])


def _builtin_impls(suite: str) -> list[Impl]:
    if suite == "softmax":
        # CuPy没有softmax库函数：不比
        return [_api_impl(suite, b) for b in ("triton", "cuda", "tilelang")] + [
            _peer("torch", "torch", _torch_softmax, dtypes=ALL_DTYPES),
            _compile_peer("softmax", _torch_softmax, dtypes=ALL_DTYPES),
            quack_peer(_quack_softmax),
            liger_peer(_liger_softmax),
        ]
    if suite == "row-sum":
        # quack与Liger没有按行求和的公开函数
        return [_api_impl(suite, b) for b in ("triton", "cuda", "tilelang")] + [
            _peer("torch", "torch", _torch_row_sum, dtypes=ALL_DTYPES),
            _compile_peer("row-sum", _torch_row_sum, dtypes=ALL_DTYPES),
            _cupy_peer(axis=1, dtypes=("float32", "float16")),   # CuPy 没有 bfloat16 的 dtype
        ]
    if suite in ("layer-norm", "rms-norm"):
        from . import norm

        label = "F." + suite.replace("-", "_")
        return [Impl("triton", "Triton", "ours", norm.bind(norm.ours(suite))),
                Impl("torch", label, "peer", norm.bind(norm.torch_norm(suite))),
                Impl("compile", "torch.compile", "peer",
                     lambda x, s=suite: norm.bind(compiled(s, norm.torch_norm(s)))(x), _gpu_only("torch.compile")),
                quack_peer(norm.bind(norm.quack_forward(suite)), dtypes=("float32",)),
                liger_peer(norm.bind(norm.liger_forward(suite)), dtypes=("float32",))]
    if suite in ("layer-norm-bwd", "rms-norm-bwd"):
        from . import norm

        return [Impl("triton", "Triton", "ours", norm.backward_prepare(suite, "triton")),
                Impl("torch", "torch autograd", "peer", norm.backward_prepare(suite, "torch")),
                Impl("compile", "torch.compile", "peer", norm.backward_prepare(suite, "compile"),
                     _gpu_only("torch.compile")),
                quack_peer(norm.backward_prepare(suite, "quack"), dtypes=("float32",)),
                liger_peer(norm.backward_prepare(suite, "liger"), dtypes=("float32",))]
    if suite == "col-sum":
        def ours(x):
            from ..triton_kernels.col_sum import col_sum

            return lambda: col_sum(x)

        return [Impl("triton", "Triton", "ours", ours),
                _peer("torch", "torch", _torch_col_sum),
                _compile_peer("col-sum", _torch_col_sum),
                _cupy_peer(axis=0)]
    if suite == "full-sum":
        out = []
        if _full_sum_check() is None:
            out = [_full_sum_impl(v, name) for v, (name, _desc) in sorted(full_sum_versions().items())]
        else:
            out = [Impl("v*", "full_sum", "ours", lambda x: None, _full_sum_check, group="cuda")]
        return out + [_peer("torch", "torch", _torch_full_sum), _cupy_peer(axis=None)]
    raise ValueError(f"未知的测试套件{suite!r}")
