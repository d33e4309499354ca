"""reduction_lab：GPU 归约内核课程的配套包。

同一份代码两种模式运行（见 :mod:`reduction_lab.runtime`）：

* ``gpu``：在 NVIDIA GPU 上运行真实的 Triton / CUDA C / TileLang 内核；
* ``sim``：在 CPU 上运行——Triton 解释器、TileLang 的 C 目标、以及本包的 CUDA C 模拟器
  :mod:`reduction_lab.simt`。

必须先 ``import reduction_lab`` 再导入 triton：sim 模式要在导入 triton 之前打开解释器。
"""

from __future__ import annotations

import importlib

# 模式选择必须最先执行（它决定 TRITON_INTERPRET）。
from .runtime import DEVICE, MODE, ModeError  # noqa: E402

__version__ = "0.1.0"


def _quiet_tqdm_in_notebooks() -> None:
    """Jupyter 里没有装 ipywidgets 时，tqdm.auto（tilelang 导入时用它给日志配进度条）发出
    「TqdmWarning: IProgress not found」：只是缺了进度条的小部件，与内核无关，却会出现在实验页的输出里。
    在 notebook 的内核里先安静地导入一次 tqdm.auto（模块只执行一次，之后导入它的人不再看到这条警告）。"""
    import sys

    if "ipykernel" not in sys.modules:
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        try:
            import tqdm.auto  # noqa: F401
        except ImportError:
            pass


_quiet_tqdm_in_notebooks()

# 公开名字 -> 所在模块。按需导入：import reduction_lab 不会加载 tilelang 或模拟器。
_LAZY = {
    # 统一入口
    "softmax": "reduction_lab.api",
    "reduce_sum": "reduction_lab.api",
    "BACKENDS": "reduction_lab.api",
    # Triton 内核
    "fused_softmax": "reduction_lab.triton_kernels.softmax",
    "row_sum": "reduction_lab.triton_kernels.row_sum",
    "online_softmax": "reduction_lab.triton_kernels.online_softmax",
    "layer_norm": "reduction_lab.triton_kernels.layer_norm",
    "rms_norm": "reduction_lab.triton_kernels.layer_norm",
    "col_sum": "reduction_lab.triton_kernels.col_sum",
    # 朴素 torch 参考实现（带逐步读写计数）
    "naive_softmax": "reduction_lab.reference",
    "naive_softmax_traffic": "reduction_lab.reference",
    # CUDA C（GPU 上经 CuPy，CPU 上经 simt 模拟器）
    "full_sum": "reduction_lab.cuda_kernels",
    "FULL_SUM_VERSIONS": "reduction_lab.cuda_kernels",
    # 访存计数与越界检查（Triton 解释器）
    "count_memory": "reduction_lab.memcount",
    "OutOfBoundsError": "reduction_lab.memcount",
    "MemoryReport": "reduction_lab.memcount",
    "LaunchRecord": "reduction_lab.memcount",
    "UntestedTritonWarning": "reduction_lab.memcount",
    # 随包发布的实测数据（docs/data/*.json）
    "data_path": "reduction_lab.datafiles",
    "load_data": "reduction_lab.datafiles",
}

_SUBMODULES = {"simt", "cuda_kernels", "tilelang_kernels", "bench", "triton_kernels", "reference",
               "memcount", "api", "auto", "checks", "runtime", "autograd", "datafiles"}

__all__ = ["MODE", "DEVICE", "ModeError", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        module = importlib.import_module(f"reduction_lab.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'reduction_lab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)
