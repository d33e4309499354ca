"""运行模式的唯一出处：``gpu``（真实内核）或 ``sim``（CPU 模拟器）。

两条轴互相独立：

* ``backend``——用哪种实现：torch、triton、cuda、tilelang；
* ``mode``——在哪里跑：``gpu`` 在 NVIDIA GPU 上运行真实内核，``sim`` 在 CPU 上通过
  Triton 解释器、TileLang 的 C 目标和 :mod:`reduction_lab.simt` 运行同一份源码。

默认：有可用的 CUDA 设备就是 ``gpu``，否则 ``sim``。环境变量
``REDUCTION_LAB_MODE=sim|gpu`` 可以强制指定。sim 模式下本模块在导入 triton *之前*
设置 ``TRITON_INTERPRET=1``；如果 triton 已经以编译模式导入，就报错并说明怎么做。

课程页面：首页（docs/index.md）中的「两种模式」。
"""

from __future__ import annotations

import os
import sys

__all__ = ["MODE", "DEVICE", "ModeError", "mode", "is_sim", "is_gpu", "require_gpu"]

_VALID = ("gpu", "sim")


class ModeError(RuntimeError):
    """运行模式无法满足（例如强制 gpu 却没有 CUDA 设备）。"""


def _cuda_usable() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # 驱动损坏等情况按「没有 GPU」处理
        return False


def _select_mode() -> str:
    forced = os.environ.get("REDUCTION_LAB_MODE", "").strip().lower()
    if forced and forced not in _VALID:
        raise ModeError(
            f"REDUCTION_LAB_MODE={forced!r} 无效，只能是 'gpu' 或 'sim' "
            f"(REDUCTION_LAB_MODE must be 'gpu' or 'sim')"
        )
    if forced == "gpu":
        if not _cuda_usable():
            raise ModeError(
                "REDUCTION_LAB_MODE=gpu，但 torch 找不到可用的 CUDA 设备；"
                "在没有 GPU 的机器上请用 REDUCTION_LAB_MODE=sim 或不设置该变量 "
                "(REDUCTION_LAB_MODE=gpu but no usable CUDA device was found)"
            )
        return "gpu"
    if forced == "sim":
        return "sim"
    return "gpu" if _cuda_usable() else "sim"


def _triton_is_interpreted() -> bool:
    """已导入的 triton 是否处于解释器模式（看标准库里的 @jit 函数是什么类型）。"""
    from triton.runtime.interpreter import InterpretedFunction
    import triton.language as tl

    return isinstance(tl.standard.max, InterpretedFunction)


def _prepare_triton(selected: str) -> None:
    if selected == "sim":
        if "triton" in sys.modules:
            if not _triton_is_interpreted():
                raise ModeError(
                    "sim 模式需要 Triton 解释器，但 triton 已经在没有 TRITON_INTERPRET=1 的情况下"
                    "被导入了。请先 `import reduction_lab`（它会在导入 triton 前设置该变量），"
                    "或者在启动 Python 前 `export TRITON_INTERPRET=1`。"
                    " (triton was imported before reduction_lab without TRITON_INTERPRET=1: "
                    "import reduction_lab first, or set TRITON_INTERPRET=1 before starting Python)"
                )
        else:
            os.environ["TRITON_INTERPRET"] = "1"
    else:
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise ModeError(
                "gpu 模式下设置了 TRITON_INTERPRET=1，Triton 内核会在 CPU 上解释执行；"
                "请去掉该变量，或用 REDUCTION_LAB_MODE=sim "
                "(TRITON_INTERPRET=1 is set in gpu mode: unset it or use REDUCTION_LAB_MODE=sim)"
            )


MODE: str = _select_mode()
_prepare_triton(MODE)
#: 代码片段里创建张量用的 torch 设备字符串："cuda" 或 "cpu"。
DEVICE: str = "cuda" if MODE == "gpu" else "cpu"


def mode() -> str:
    return MODE


def is_sim() -> bool:
    return MODE == "sim"


def is_gpu() -> bool:
    return MODE == "gpu"


def require_gpu(what: str) -> None:
    if MODE != "gpu":
        raise ModeError(f"{what} 需要 gpu 模式（当前为 sim）({what} needs gpu mode)")
