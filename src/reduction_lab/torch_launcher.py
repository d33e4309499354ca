"""经 PyTorch 自带的 C++ 启动器启动已经编译、加载好的内核（CUfunction）：Triton 与 CUDA C 两个 backend 共用。

一次调用的主机开销里，启动这一步最贵（课程页面 docs/bench/index.md 的「每次调用的开销」）：Triton 3.6 的
C 启动函数要解析二十来个参数、经 ``cuLaunchKernelEx``，CuPy 的 ``driver.launchKernel`` 要 Python 这边先把参数
打包进缓冲区。torch 为 Inductor 编译出来的 Triton 内核带了两个静态编译的启动器（不必在用户机器上编译任何东西）：

* ``torch._C._FastCudaLauncher(函数, warp 数, 共享内存, 参数类型, scratch 数)``：预先绑定函数与参数类型的
  可调用对象，经 vectorcall 调用 ``launcher(gx, gy, gz, stream, *参数)``，参数直接写进它自己的槽位，
  再调用 ``cuLaunchKernel``；
* ``torch._C._StaticCudaLauncher._launch_kernel(函数, gx, gy, gz, warp 数, 共享内存, 参数类型, 参数元组, stream)``：
  较早的版本（例如 2.11）只有它，每次还要解析固定参数。

参数类型一个字符一个参数：``O`` 指针（整数地址或张量）、``i`` / ``l`` int32 / int64、``I`` / ``K`` uint32 / uint64、
``b`` / ``h`` / ``B`` / ``H`` 8、16 位整数、``f`` / ``d`` float / double。线程块总是一维的
（``blockDim.x = 32 * warp 数``），所以只用于块大小是 32 的倍数的一维块；不满足条件、torch 没有这两个启动器
（CPU 版的 torch、很老的版本）时 :func:`make` 返回 None，调用者照旧走 Triton / CuPy 的启动路径。
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["kind", "make", "numpy_arg_type", "plain_triton_kernel", "triton_arg_types"]

_FAST = getattr(torch._C, "_FastCudaLauncher", None)
_STATIC = getattr(torch._C, "_StaticCudaLauncher", None)
#: 参数个数的上限：torch 的启动器把参数放在定长的数组里（MAX_ARGS = 120），这里留足余量
MAX_ARGS = 64


def kind() -> str | None:
    """这个 torch 带的是哪一个启动器："fast"、"static"，或 None（没有）。"""
    if _FAST is not None:
        return "fast"
    if _STATIC is not None and hasattr(_STATIC, "_launch_kernel"):
        return "static"
    return None


def make(function: int, block, shared: int, arg_types: str, n_scratch: int = 0):
    """为一个已加载的 CUfunction 建启动器：返回 ``launch(gx, gy, gz, stream, *参数)``，或 None（不能用）。

    ``block`` 是 (x, y, z) 或整数；只接受 y = z = 1、x 是 32 的倍数。``n_scratch`` 个追加的空指针参数
    （Triton 较新的版本在内核末尾加的 global / profile scratch）由启动器自己补上。"""
    bx, by, bz = (block, 1, 1) if isinstance(block, int) else tuple(block)
    if by != 1 or bz != 1 or bx % 32 or not 32 <= bx <= 1024 or len(arg_types) + n_scratch > MAX_ARGS \
            or not set(arg_types) <= set("OilIKbhBHfd"):
        return None
    warps, shared, function = bx // 32, int(shared), int(function)
    which = kind()
    if which == "fast":
        try:
            return _FAST(function, warps, shared, arg_types, int(n_scratch))
        except (TypeError, ValueError, RuntimeError):
            return None
    if which == "static":
        launch_kernel = _STATIC._launch_kernel
        tys = arg_types + "O" * n_scratch
        tail = (None,) * n_scratch

        def launch(gx, gy, gz, stream, *args):
            launch_kernel(function, gx, gy, gz, warps, shared, tys, args + tail if tail else args, stream)

        return launch
    return None


#: numpy 标量类型 -> 参数类型字符（CUDA C 内核的形参由 launcher 解析成 numpy 类型）
_NUMPY_CODES = {np.int8: "b", np.uint8: "B", np.int16: "h", np.uint16: "H", np.int32: "i", np.uint32: "I",
                np.int64: "l", np.uint64: "K", np.float32: "f", np.float64: "d", np.bool_: "b"}


def numpy_arg_type(dtype) -> str | None:
    return _NUMPY_CODES.get(dtype)


#: Triton 签名里的类型 -> 参数类型字符（与 torch 的 StaticallyLaunchedCudaKernel 用的对应表相同；
#: 布尔按 int32 传，半精度的标量按 float 传）
_TRITON_CODES = {"i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "I", "u8": "B", "u16": "H",
                 "u32": "I", "u64": "K", "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d"}


def triton_arg_types(compiled, n_runtime: int):
    """一个 Triton 已编译内核（``kernel[grid](...)`` 的返回值）的参数类型：返回 (类型串, 保留的参数下标,
    scratch 个数)，或 None（有读不懂的参数类型，例如 TMA 描述符）。

    已编译的内核只接受没有被特化成常数的参数：签名里类型是 ``constexpr`` 的、或出现在 ``src.constants``
    里的（tl.constexpr 形参、Triton 特化掉的等于 1 的整数）都不传。元数据里有 ``global_scratch_size`` /
    ``profile_scratch_size`` 时，内核末尾各有一个 scratch 指针（本包的内核都不用，传空指针）。
    ``n_runtime``：运行时参数（不是 tl.constexpr 的）个数，它们排在签名的最前面。
    这里不导入 torch._inductor（它自己的 StaticallyLaunchedCudaKernel 做同样的解析）：导入要一两秒。"""
    try:
        src, meta = compiled.src, compiled.metadata
        names = list(src.fn.arg_names)

        def index(key):
            if isinstance(key, str):
                return names.index(key)
            return key[0] if isinstance(key, tuple) else int(key)

        types = {index(k): v for k, v in src.signature.items()}
        constants = {index(k) for k in getattr(src, "constants", {})}
    except (AttributeError, ValueError, TypeError, IndexError):
        return None
    keep = tuple(i for i in range(n_runtime) if types.get(i) != "constexpr" and i not in constants)
    codes = []
    for i in keep:
        ty = types.get(i)
        code = "O" if isinstance(ty, str) and ty.startswith("*") else _TRITON_CODES.get(ty)
        if code is None:
            return None
        codes.append(code)
    n_scratch = int(hasattr(meta, "global_scratch_size")) + int(hasattr(meta, "profile_scratch_size"))
    return "".join(codes), (None if keep == tuple(range(n_runtime)) else keep), n_scratch


def plain_triton_kernel(compiled) -> bool:
    """Triton 已编译内核是不是最普通的那种：一个 CTA 一组（num_ctas = 1、没有簇）、不要 global / profile scratch
    内存、不是协作启动也不用 PDL、没有开 gsan。只有这种内核可以绕过 Triton 的启动器、由别的启动器直接启动
    （这里的 :func:`make` 与 :mod:`reduction_lab.host` 的编译版 runner）。"""
    run = getattr(compiled, "run", None)
    meta = getattr(compiled, "metadata", None)
    return not (meta is None or getattr(run, "gsan_enabled", False)
                or getattr(run, "launch_cooperative_grid", True) or getattr(run, "launch_pdl", True)
                or getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "global_scratch_size", 0)
                or getattr(meta, "profile_scratch_size", 0)
                or tuple(getattr(meta, "cluster_dims", (1, 1, 1))) != (1, 1, 1))
