"""快速路径的编译版本：把 runner 的「检查 + 分配输出 + 启动」放进一个 C++ 扩展（``runner.cpp``），每次调用只从
Python 进出一次。

:mod:`reduction_lab.fastcall` 的 Python runner 每次调用要经过十来次 Python 到 torch 的 C++ 的往返（guard 的各项
检查、``empty_like``、取地址、取当前流、启动函数），小形状上这就比 ``torch.softmax`` 的整次调用还长
（docs/bench/index.md 的「一次调用的开销」）。编译版在 C++ 里读张量的元数据、用 ``at::empty_like`` 分配、
直接调用驱动的 ``cuLaunchKernel``。

* 第一次用到时用 ``torch.utils.cpp_extension.load`` 编译（需要 C++ 编译器与 ninja，约半分钟，结果缓存在
  torch 的扩展目录里，之后的进程直接加载）。编译不了（没有编译器、没有 ninja、torch 的头文件不全）时
  :func:`module` 返回 None，快速路径照旧用 Python 的 runner；原因见 :func:`unavailable`；
* ``REDUCTION_LAB_HOST=0`` 关掉它（只用 Python 的 runner）；
* 只用于最普通的内核：一维线程块、一个 CTA 一组、不要 scratch 内存（Triton：与 :mod:`reduction_lab.torch_launcher`
  的条件相同）。
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import torch

__all__ = ["module", "loaded", "unavailable", "make_runner", "triton_runner", "cuda_runner"]

SOURCE = Path(__file__).with_name("runner.cpp")
#: 是否用编译版 runner（``REDUCTION_LAB_HOST=0`` 时关掉；scripts/host_cost.py 也用它与 Python 的 runner 对比）
ENABLED = os.environ.get("REDUCTION_LAB_HOST", "1") != "0"
_LOCK = threading.Lock()
_STATE: dict = {}


def _build():
    from torch.utils import cpp_extension

    try:                                   # pip 装的 ninja：把它的可执行文件放进 PATH（torch 用子进程调用 ninja）
        import ninja

        if ninja.BIN_DIR not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        pass

    return cpp_extension.load(name="reduction_lab_host", sources=[str(SOURCE)], extra_cflags=["-O2"],
                              verbose=False)


def module():
    """编译好的扩展模块，或 None（编译不了；原因见 :func:`unavailable`）。只编译一次。"""
    if "module" not in _STATE:
        with _LOCK:
            if "module" not in _STATE:
                try:
                    _STATE["module"] = _build()
                    _STATE["why"] = None
                except Exception as exc:  # noqa: BLE001 - 编译失败就退回 Python 的 runner
                    _STATE["module"] = None
                    _STATE["why"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    return _STATE["module"]


def loaded():
    """已经编译、加载的扩展模块，或 None（还没有用过、或编译不了）；不会触发编译。"""
    return _STATE.get("module")


def unavailable() -> str | None:
    """扩展为什么不能用（None：能用，或者还没有试过编译）。"""
    return _STATE.get("why")


def _cu_launch_kernel() -> int | None:
    if "launch" not in _STATE:
        try:
            _STATE["launch"] = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
        except OSError:
            _STATE["launch"] = None
    return _STATE["launch"]


def make_runner(launch_addr: int, function: int, grid, block: int, shared: int, device: int, rows: int, cols: int,
                dtype: torch.dtype, row_sum: bool, codes: str, values: tuple, hooks=None):
    """建一个编译版的 runner：``runner(x)`` 返回输出，或 None（x 不符合前提）。``codes`` 每个参数一个字符
    （``X`` / ``Y``：输入、输出的地址，``O``：空指针，``i l I K f``：int32、int64、uint32、uint64、float32，取
    ``values`` 里同一位置的数）。``device = -1``：接受 CPU 张量（测试用，``launch_addr`` 是测试给的函数）。"""
    mod = module() if ENABLED else None
    if mod is None:
        return None
    g = (tuple(int(v) for v in grid) + (1, 1))[:3]
    if device >= 0:
        cur_dev, cur_stream = torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream
    else:
        cur_dev, cur_stream = (lambda: -1), (lambda d: 0)
    return mod.make(int(launch_addr), int(function), g, int(block), int(shared), int(device), int(rows), int(cols),
                    dtype, bool(row_sum), codes, tuple(values), cur_dev, cur_stream, hooks)


def triton_runner(compiled, n_runtime: int, grid, device: int, rows: int, cols: int, dtype: torch.dtype,
                  row_sum: bool, runtime_args: tuple):
    """Triton 已编译内核的编译版 runner，或 None。``runtime_args``：全部运行时参数，输出与输入的地址写成
    ``"Y"`` / ``"X"``，其余是定值（它们是特化键的一部分）。"""
    from .. import torch_launcher
    from ..triton_kernels._launch import hook_chains

    launch = _cu_launch_kernel()
    hooks = hook_chains()
    if launch is None or hooks is None or not torch_launcher.plain_triton_kernel(compiled):
        return None
    types = torch_launcher.triton_arg_types(compiled, n_runtime)
    if types is None:
        return None
    tys, keep, n_scratch = types
    packed = _codes(tys, [runtime_args[i] for i in (range(n_runtime) if keep is None else keep)])
    if packed is None:
        return None
    codes, values = packed
    meta = compiled.metadata
    return make_runner(launch, compiled.function, grid, 32 * meta.num_warps, meta.shared, device, rows, cols,
                       dtype, row_sum, codes + "O" * n_scratch, values + (0,) * n_scratch, hooks)


def _codes(tys: str, args) -> tuple[str, tuple] | None:
    """形参类型（torch_launcher 的类型字符）与参数（地址写成 "X" / "Y"，其余是整数定值）-> (codes, values)；
    有不认识的组合时返回 None。"""
    codes, values = [], []
    for ty, a in zip(tys, args):
        if a in ("X", "Y"):
            if ty != "O":
                return None
            codes.append(a)
            values.append(0)
        elif ty in "ilIK" and type(a) is int:
            codes.append(ty)
            values.append(a)
        else:
            return None
    return "".join(codes), tuple(values)


def cuda_runner(plan, device: int, rows: int, cols: int, dtype: torch.dtype, row_sum: bool, runtime_args: tuple):
    """CUDA C 的启动计划（``cuda_kernels.launcher._Plan``）的编译版 runner，或 None。参数同 :func:`triton_runner`。"""
    launch = _cu_launch_kernel()
    tys = getattr(plan, "tys", None)
    block = getattr(plan, "block", None)
    if launch is None or tys is None or block is None or tuple(block)[1:] != (1, 1) or len(tys) != len(runtime_args):
        return None
    packed = _codes(tys, runtime_args)
    if packed is None:
        return None
    return make_runner(launch, plan.fptr, plan.grid, block[0], plan.shared, device, rows, cols, dtype, row_sum,
                       *packed, None)
