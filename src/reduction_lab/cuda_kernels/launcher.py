"""同一份 .cu 源码的唯一启动入口：gpu 模式经 CuPy ``RawKernel``，sim 模式经 :mod:`reduction_lab.simt`。

    launch("reduce_sum.cu", "reduce_sum_rows", grid=M, block=256,
           args=(x, out, x.stride(0), N), defines={"BLOCK_SIZE": 256})

* ``source``：本目录下的文件名（如 ``"full_sum.cu"``）或任意 .cu 文件的路径；
* ``grid`` / ``block``：int 或最多 3 维的元组；
* ``args``：与内核形参一一对应。指针形参传 torch 张量（gpu 模式在 CUDA 上，sim 模式在 CPU 上；
  sim 模式也接受 numpy 数组），标量形参传 Python / numpy 数，按内核声明的 C 类型转换
  （CuPy 会把裸的 Python int 当成 64 位整数传给 ``int`` 形参，悄悄算错，所以这里按签名转换）；
* ``defines``：编译期常量，如 ``{"BLOCK_SIZE": 256}``；
* ``mode``：``None`` 跟随 :data:`reduction_lab.MODE`；``"sim"`` 在任何机器上都用模拟器运行
  （张量必须在 CPU 上），页面用它在 GPU 机器上也打印出同样的计数器。

源码里用了 ``cg::this_grid()``（网格屏障 ``grid.sync()``）的内核，gpu 模式下协作启动（cudaLaunchCooperativeKernel），
启动前按驱动的占用率查询核对网格的块数同时驻留得下；模拟器在 ``grid.sync()`` 处按 sm_90 核对同一条件。

gpu 模式返回 ``None``（内核在 torch 的当前流上异步执行）；sim 模式返回模拟器的报告。
课程页面：docs/cuda/tree-reduction.md、docs/cuda/seven-versions.md。
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import numpy as np
import torch

from .. import runtime

__all__ = ["launch", "KERNEL_DIR", "source_path", "kernel_signature", "kernel_names", "read_source"]

#: .cu 源码所在目录
KERNEL_DIR = Path(__file__).resolve().parent

# C 标量类型 -> numpy dtype（指针所指类型也用这张表检查张量的 dtype）
_SCALAR_DTYPES = {
    "bool": np.bool_, "_Bool": np.bool_,
    "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8,
    "short": np.int16, "unsigned short": np.uint16,
    "int": np.int32, "signed": np.int32, "signed int": np.int32, "int32_t": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32, "uint32_t": np.uint32,
    "long": np.int64, "long int": np.int64, "long long": np.int64, "long long int": np.int64,
    "int64_t": np.int64,
    "unsigned long": np.uint64, "unsigned long long": np.uint64, "uint64_t": np.uint64,
    "size_t": np.uint64,
    "float": np.float32, "double": np.float64,
}

_TORCH_OF_NUMPY = {
    np.bool_: torch.bool, np.int8: torch.int8, np.uint8: torch.uint8, np.int16: torch.int16,
    np.int32: torch.int32, np.int64: torch.int64, np.float32: torch.float32, np.float64: torch.float64,
    # 无符号的 16/32/64 位（torch 2.3 起有这些 dtype）
    **{getattr(np, n): getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)},
}


# 半精度的指针形参（cuda_fp16.h / cuda_bf16.h）：张量的 dtype 按这张表检查
_HALF_POINTEES = {"__half": torch.float16, "__nv_bfloat16": torch.bfloat16}


def source_path(source) -> Path:
    """``"full_sum.cu"`` -> 本目录下的文件；其他字符串或 Path 按路径解释。"""
    p = Path(source)
    if not p.is_absolute() and not p.exists() and (KERNEL_DIR / p).exists():
        p = KERNEL_DIR / p
    if not p.is_file():
        known = ", ".join(sorted(f.name for f in KERNEL_DIR.glob("*.cu")))
        raise FileNotFoundError(f"找不到 CUDA 源文件 {source!r}；本包自带：{known} "
                                f"(CUDA source {source!r} not found)")
    return p.resolve()


def read_source(source) -> str:
    return source_path(source).read_text(encoding="utf-8")


def kernel_names(source) -> list[str]:
    """文件里所有 ``extern "C" __global__`` 内核的名字（按出现顺序）。"""
    text = re.sub(r"//[^\n]*", "", read_source(source))
    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', text)


def _defines_key(defines) -> tuple:
    if defines is None:
        return ()
    if not isinstance(defines, dict):
        raise TypeError(f"defines 必须是 dict，如 {{'BLOCK_SIZE': 256}}，得到 {type(defines).__name__}")
    items = []
    for k, v in defines.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_]\w*", k):
            raise ValueError(f"defines 的名字 {k!r} 不是合法的 C 标识符 (bad macro name)")
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise TypeError(f"defines[{k!r}] 必须是 int、float 或 str，得到 {type(v).__name__}")
        items.append((k, str(v)))
    return tuple(sorted(items))


def _dims(value, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value) if isinstance(value, (tuple, list)) else None
    if dims is None or not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                          for d in dims):
        raise TypeError(f"{what} 必须是 int 或 1 到 3 个 int 组成的元组，得到 {value!r} "
                        f"({what} must be an int or a tuple of up to 3 ints)")
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if any(d < 1 for d in dims):
        raise ValueError(f"{what} 的每一维都必须 >= 1，得到 {value!r} ({what} dims must be positive)")
    return dims


def _version(p: Path):
    """缓存键里源文件的版本：包里自带的内核不会变（None）；别处的文件（实验里学员写的 .cu）
    按修改时间与大小，改过之后重新解析、重新编译，不会沿用旧的内核。"""
    if p.parent == KERNEL_DIR:
        return None
    st = p.stat()
    return st.st_mtime_ns, st.st_size


_SPECS: dict = {}


def _spec(source: str, name: str, dkey: tuple):
    """(源文件路径, 形参表, 是否 C++ 内核, 版本) —— 每个 (文件, 内核, defines) 只解析一次，
    文件没变时启动不再读文件（实验里的文件改过之后重新解析）。"""
    hit = _SPECS.get((source, name, dkey))
    if hit is not None and (hit[3] is None or hit[3] == _version(hit[0])):
        return hit
    from .. import simt

    p = source_path(source)
    version = _version(p)
    names = kernel_names(p)
    cxx = name not in names
    if cxx and not _is_cxx_kernel(p, name):
        raise ValueError(f"{p.name} 里没有名为 {name!r} 的 extern \"C\" __global__ 内核；有：{', '.join(names)} "
                         f"(no kernel {name!r} in {p.name})")
    # 传路径而不是文本：#include "x.h" 从源文件所在的目录读入
    sig = tuple(simt.kernel_signature(str(p), name, defines=dict(dkey) or None))
    hit = _SPECS[(source, name, dkey)] = (p, sig, cxx, version)
    return hit


def _is_cxx_kernel(path, name: str) -> bool:
    """``name`` 是文件里一个不带 ``extern "C"`` 的 ``__global__`` 函数（C++ 名字），或模板内核的实例
    （``"block_sum<256>"``）：gpu 模式经 ``RawModule(name_expressions=[name])`` 取得。"""
    base = name.split("<", 1)[0].strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", base):
        return False
    text = re.sub(r"//[^\n]*", "", read_source(path))
    attr = r"(?:__launch_bounds__|__cluster_dims__)\s*\([^)]*\)\s*"     # 写在 void 前后都可以
    return re.search(rf"__global__\s+(?:{attr})*(?:[A-Za-z_]\w*\s+)*?void\s+(?:{attr})*{base}\s*[(<]",
                     text) is not None


def kernel_signature(source, name: str, defines=None):
    """内核形参表 [(名字, C 类型, 是否指针), ...]（由模拟器的 C 解析器给出）。"""
    return list(_spec(str(source), name, _defines_key(defines))[1])


@functools.lru_cache(maxsize=None)
def _base_type(ctype: str) -> str:
    t = re.sub(r"\b(const|volatile|__restrict__|restrict)\b", " ", str(ctype)).replace("*", " ")
    return " ".join(t.split())


@functools.lru_cache(maxsize=None)
def _scalar_kind(dtype):
    """(numpy 的类别字符, 整数的下界, 上界)：每次启动不再重新查 np.iinfo。"""
    kind = np.dtype(dtype).kind
    if kind in "iu":
        info = np.iinfo(dtype)
        return kind, int(info.min), int(info.max)
    return kind, None, None


def _convert_scalar(value, ctype: str, pname: str, kernel: str):
    base = _base_type(ctype)
    dtype = _SCALAR_DTYPES.get(base)
    if dtype is None:
        raise TypeError(f"{kernel} 的形参 {pname} 的类型 {ctype!r} 不受启动器支持 (unsupported parameter type)")
    if isinstance(value, (torch.Tensor, np.ndarray)):
        raise TypeError(f"{kernel} 的形参 {pname} 是标量 {base}，却传入了数组/张量 "
                        f"(parameter {pname} is a scalar {base}, got an array)")
    if not isinstance(value, (int, float, bool, np.number, np.bool_)):
        raise TypeError(f"{kernel} 的形参 {pname}（{base}）需要数，得到 {type(value).__name__}")
    kind, lo, hi = _scalar_kind(dtype)
    if kind in "iu":
        if isinstance(value, (float, np.floating)):
            if float(value) != int(value):
                raise TypeError(f"{kernel} 的形参 {pname} 是整数 {base}，得到非整数 {value!r}")
        v = int(value)
        if not lo <= v <= hi:
            raise OverflowError(f"{kernel} 的形参 {pname}={v} 超出 {base} 的范围 [{lo}, {hi}] "
                                f"(value out of range for {base})")
        return dtype(v)
    if kind == "b":
        return np.bool_(bool(value))
    return dtype(value)


def _check_pointer(value, ctype: str, pname: str, kernel: str, mode: str):
    base = _base_type(ctype)
    want = _SCALAR_DTYPES.get(base)
    if isinstance(value, torch.Tensor):
        if mode == "gpu" and value.device.type != "cuda":
            raise ValueError(f"{kernel} 的形参 {pname}：gpu 模式需要 CUDA 张量，得到 {value.device} 上的张量"
                             f"（用 reduction_lab.DEVICE 创建张量） (gpu mode needs CUDA tensors)")
        if mode == "sim" and value.device.type != "cpu":
            raise ValueError(f"{kernel} 的形参 {pname}：模拟器只能读写 CPU 张量，得到 {value.device} 上的张量；"
                             f"先 .cpu() (the simulator needs CPU tensors)")
        if base in _HALF_POINTEES and value.dtype != _HALF_POINTEES[base]:
            raise TypeError(f"{kernel} 的形参 {pname} 是 {base}*，张量的 dtype 却是 "
                            f"{str(value.dtype).replace('torch.', '')} (dtype does not match {base}*)")
        if want is not None and value.dtype != _TORCH_OF_NUMPY.get(want, None):
            raise TypeError(f"{kernel} 的形参 {pname} 是 {base}*，张量的 dtype 却是 "
                            f"{str(value.dtype).replace('torch.', '')} (dtype does not match {base}*)")
        if value.numel() == 0:
            raise ValueError(f"{kernel} 的形参 {pname} 是空张量 (empty tensor for pointer {pname})")
        return
    if isinstance(value, np.ndarray):
        if mode == "gpu":
            raise ValueError(f"{kernel} 的形参 {pname}：gpu 模式需要 CUDA 张量，得到 numpy 数组 "
                             f"(gpu mode needs CUDA tensors)")
        if want is not None and value.dtype != np.dtype(want):
            raise TypeError(f"{kernel} 的形参 {pname} 是 {base}*，数组的 dtype 却是 {value.dtype} "
                            f"(dtype does not match {base}*)")
        return
    if mode == "gpu" and hasattr(value, "__cuda_array_interface__"):
        return
    raise TypeError(f"{kernel} 的形参 {pname} 是指针 {ctype}，需要张量，得到 {type(value).__name__} "
                    f"(parameter {pname} is a pointer, pass a tensor)")


# NVRTC 没有 C 标准库的头文件：<stdint.h> / <cstdint> 换成同一行里的 typedef（行号不变，
# 编译错误仍指向源文件里原来的行）。课程的实验按原课程的签名使用 int64_t。
_STDINT = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?:stdint\.h|cstdint)>[ \t]*$", re.M)
_STDINT_TYPES = ("typedef signed char int8_t; typedef short int16_t; typedef int int32_t; "
                 "typedef long long int64_t; typedef unsigned char uint8_t; typedef unsigned short uint16_t; "
                 "typedef unsigned int uint32_t; typedef unsigned long long uint64_t; "
                 "typedef long long intptr_t; typedef unsigned long long uintptr_t;")


def nvrtc_source(text: str) -> str:
    """交给 NVRTC 的源码：标准整数类型的头文件换成 typedef。"""
    return _STDINT.sub(_STDINT_TYPES, text, count=1)


def cccl_include_dirs() -> list[str]:
    """CuPy 自带的 CCCL（CUB、Thrust、libcu++）头文件目录，按 CuPy 自己的搜索顺序。

    只查找已安装的 cupy 包里的文件，不导入 cupy（没有 GPU 的机器上也能调用）。"""
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("没有安装 cupy：CUB 内核经 CuPy 编译 (cupy is not installed; CUB kernels are "
                                  "compiled through CuPy)")
    root = Path(list(spec.submodule_search_locations)[0]) / "_core" / "include" / "cupy" / "_cccl"
    dirs = [root / "cub", root / "thrust", root / "libcudacxx"]
    probe = root / "cub" / "cub" / "block" / "block_reduce.cuh"
    if not probe.is_file():
        raise FileNotFoundError(f"在 cupy 包里找不到 CCCL 头文件 {probe}：这个版本的 CuPy 没有自带 CUB "
                                f"(CCCL headers not found in the cupy package: {probe})")
    return [str(d) for d in dirs]



# 源码包含 CCCL 的头文件（<cuda/atomic>、<cub/...>）时，NVRTC 要用 CuPy 自带的这些头文件
_CCCL_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?:cuda/|cub/|thrust/)", re.M)


# --8<-- [start:cccl_options]
def cccl_options() -> tuple:
    """NVRTC 编译用到 CCCL 的源码时的选项：C++17、CuPy 自带的头文件目录；不要 CCCL 的 bf16 支持，CCCL 因此不去
    包含 cuda_bf16.h（CuPy 编译自己的 CUB 归约时也这样做）。"""
    return ("--std=c++17", "-DCUB_DISABLE_BF16_SUPPORT", "-DCCCL_DISABLE_BF16_SUPPORT",
            *(f"-I{d}" for d in cccl_include_dirs()))
# --8<-- [end:cccl_options]


def _cccl_options(code: str) -> tuple:
    return cccl_options() if _CCCL_INCLUDE.search(code) else ()


@functools.lru_cache(maxsize=128)
def _raw_kernel(path: str, name: str, dkey: tuple, version=None):
    import cupy

    prefix = "".join(f"#define {k} {v}\n" for k, v in dkey)
    code = prefix + f'#line 1 "{Path(path).name}"\n' + nvrtc_source(Path(path).read_text(encoding="utf-8"))
    return cupy.RawKernel(code, name, options=_cccl_options(code))


def _cuda_include_dir():
    """CUDA 工具包的 include 目录（NVRTC 编译 ``#include <cooperative_groups.h>`` 需要），找不到时为 None。"""
    import os
    import shutil

    cands = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(str(Path(nvcc).resolve().parent.parent))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and (Path(c) / "include" / "cooperative_groups.h").is_file():
            return str(Path(c) / "include")
    return None


@functools.lru_cache(maxsize=128)
def _raw_module(path: str, dkey: tuple, cxx_name, version=None, cooperative=False):
    """C++ 内核（``cxx_name``，如 ``"block_sum<256>"``）、要写入文件作用域变量的内核或要协作启动的内核
    （``cooperative``：CuPy 经 cuLaunchCooperativeKernel 启动）：CuPy ``RawModule``。头文件从源文件所在的目录找（``-I``）。"""
    import cupy

    prefix = "".join(f"#define {k} {v}\n" for k, v in dkey)
    code = prefix + f'#line 1 "{Path(path).name}"\n' + nvrtc_source(Path(path).read_text(encoding="utf-8"))
    opts = [f"-I{Path(path).parent}", "--std=c++17"]       # NVRTC 的选项：一个字符串一项
    inc = _cuda_include_dir()
    if inc is not None and "cooperative_groups" in code:
        opts.append(f"-I{inc}")
    opts += _cccl_options(code)[1:]
    return cupy.RawModule(code=code, options=tuple(opts), enable_cooperative_groups=cooperative,
                          name_expressions=[cxx_name] if cxx_name is not None else None)


@functools.lru_cache(maxsize=128)
def uses_grid_sync(path, version=None) -> bool:
    """源文件（去掉注释）里有没有 ``this_grid(``：网格级同步（``grid.sync()``）只在协作启动
    （cudaLaunchCooperativeKernel）里有定义，gpu 模式据此改用协作启动（同 Numba：看内核用没用网格组）。"""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", Path(path).read_text(encoding="utf-8"), flags=re.S)
    return re.search(r"\bthis_grid\s*\(", text) is not None


@functools.lru_cache(maxsize=None)
def blocks_per_sm(func_ptr: int, block_size: int, shared_bytes: int) -> int:
    """每个 SM 同时驻留几个这样的块（驱动的 cuOccupancyMaxActiveBlocksPerMultiprocessor）；查询失败时返回 1。"""
    import ctypes

    try:
        fn = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveBlocksPerMultiprocessor
    except (OSError, AttributeError):
        return 1
    n = ctypes.c_int(0)
    rc = fn(ctypes.byref(n), ctypes.c_void_p(func_ptr), ctypes.c_int(block_size), ctypes.c_size_t(shared_bytes))
    return n.value if rc == 0 and n.value > 0 else 1


def _check_cooperative(kernel, name, grid, block, shared_bytes, index) -> None:
    """协作启动的网格必须同时驻留：块数不超过每个 SM 驻留得下的块数 x SM 数，否则驱动拒绝启动。先查好，报出上限。"""
    n = grid[0] * grid[1] * grid[2]
    fit = blocks_per_sm(int(kernel.kernel.ptr), block[0] * block[1] * block[2], int(shared_bytes))
    sms = _sm_count_of(index)
    if n > fit * sms:
        raise ValueError(f"{name} 用了 grid.sync()，要协作启动：网格的 {n} 个线程块必须同时驻留，这块 GPU 上至多 "
                         f"{fit * sms} 个（每个 SM {fit} 个 x {sms} 个 SM）；请减少块数，例如用网格步长循环 "
                         f"({name} uses grid.sync(): a cooperative launch of {n} blocks exceeds the {fit * sms} "
                         f"blocks that can be resident at once)")


def _symbol_arrays(path: Path, name: str, dkey: tuple, symbols):
    """{变量名: (一维数组, 是否 __constant__)}，名字、大小与类型的检查与模拟器相同。"""
    from .. import simt
    from ..simt.api import _symbols

    prog = simt.parse(str(path), dict(dkey) or None, name)
    return {k: (a, bool(prog.file_vars[k][1])) for k, a in _symbols(prog, symbols).items()}


def rows_aligned(x: torch.Tensor) -> bool:
    """二维张量 x 的每一行是否都从 16 字节边界开始（首地址与行距都是 16 字节的倍数）。"""
    return x.data_ptr() % 16 == 0 and (x.stride(0) * x.element_size()) % 16 == 0


def _pointer_value(value):
    if isinstance(value, torch.Tensor):
        return value.data_ptr()
    iface = value.__cuda_array_interface__
    return iface["data"][0]


@functools.lru_cache(maxsize=None)
def _shared_optin_of(index: int) -> int:
    props = torch.cuda.get_device_properties(index)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 232448)


@functools.lru_cache(maxsize=None)
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _gpu_shared_optin() -> int:
    return _shared_optin_of(torch.cuda.current_device())


#: torch 的流（裸指针、设备号）-> 包装它的 CuPy 流；每次启动不再新建包装对象
_STREAMS: dict = {}


def _wrap_stream(index: int):
    """把 torch 在设备 ``index`` 上的当前流包成 CuPy 的流。CuPy 14 起用 ``Stream.from_external``（CUDA 流协议：
    torch 的流有 ``__cuda_stream__``，包装对象还持有它的引用）；``ExternalStream`` 在 CuPy 14 里已经弃用，只留给
    更早的 CuPy。"""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None:
        return from_external(torch.cuda.current_stream(index))
    return cupy.cuda.ExternalStream(torch.cuda.current_stream(index).cuda_stream, index)


def cupy_stream(index: int | None = None):
    """torch 的当前流（设备 ``index``，默认当前设备）对应的 CuPy 流，按（裸指针、设备号）缓存：在它上面启动的
    CuPy 内核与 torch 的操作、CUDA 事件保持顺序，录 CUDA 图时也在录制流上。"""
    if index is None:
        index = torch.cuda.current_device()
    ptr = torch._C._cuda_getCurrentRawStream(index)
    stream = _STREAMS.get((ptr, index))
    if stream is None:
        if len(_STREAMS) > 64:                         # 流很多时（例如每次新建 torch 流）不无限增长
            _STREAMS.clear()
        stream = _STREAMS[(ptr, index)] = _wrap_stream(index)
    return stream


def _gpu_launch(path: Path, name, grid, block, packed, device, shared_bytes, dkey, max_dyn=None, symbols=None,
                cxx=False, version=None, cooperative=False):
    import cupy

    module = None
    if cxx or symbols or cooperative:
        module = _raw_module(str(path), dkey, name if cxx else None, version, cooperative)
        kernel = module.get_function(name)
    else:
        kernel = _raw_kernel(str(path), name, dkey, version)
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    if max_dyn is not None and max_dyn > 48 * 1024:
        # 驱动的 opt-in：超过 48 KiB 的动态共享内存要先调大这个属性，否则启动失败
        with cupy.cuda.Device(index):
            kernel.max_dynamic_shared_size_bytes = int(max_dyn)
    if cooperative:
        with cupy.cuda.Device(index):
            _check_cooperative(kernel, name, grid, block, shared_bytes, index)
    if not symbols and cupy.cuda.runtime.getDevice() == index:
        # 常见情形：没有要写的符号、当前设备就是张量所在的设备——直接在 torch 的当前流上启动
        kernel(grid, block, tuple(packed), shared_mem=int(shared_bytes), stream=cupy_stream(index))
        return None
    arrays = _symbol_arrays(path, name, dkey, symbols) if symbols else {}
    with cupy.cuda.Device(index):
        stream = cupy_stream(index)
        with stream:                                   # 与 torch 的当前流保持顺序
            for sname, (arr, _) in arrays.items():     # cudaMemcpyToSymbol：只覆盖开头 arr.size 个元素
                arr = np.ascontiguousarray(arr)
                module.get_global(sname).copy_from_host_async(arr.ctypes.data, arr.nbytes, stream)
            kernel(grid, block, tuple(packed), shared_mem=int(shared_bytes))
            for sname, (arr, constant) in arrays.items():
                user = symbols[sname]
                if not constant and isinstance(user, np.ndarray) and user.flags.writeable:
                    back = np.empty_like(arr)          # cudaMemcpyFromSymbol：__device__ 变量写回调用者的数组
                    module.get_global(sname).copy_to_host_async(back.ctypes.data, back.nbytes, stream)
                    stream.synchronize()
                    user.reshape(-1)[:] = back
    return None


def _flat_span(a):
    """模拟器要连续数组：非连续张量（如行距大于行长的切片）换成覆盖同一段内存的一维视图，
    与 GPU 上内核看到的裸指针一致。"""
    if isinstance(a, torch.Tensor) and not a.is_contiguous():
        span = 1 + sum((n - 1) * s for n, s in zip(a.shape, a.stride()))
        return a.as_strided((span,), (1,))
    return a


# ------------------------------------------------------------------ gpu 模式的快速路径
# 同一个 (文件, 内核, defines, grid, block, 共享内存) 第二次启动时不再重复解析与检查：第一次经完整的路径
# 启动成功后记下一个 _Plan（CUfunction、每个形参的检查与 ctypes 存储）；之后每次调用只检查每个实参的
# 类型、dtype、设备与整数范围，交给 torch 自带的 C++ 启动器（reduction_lab.torch_launcher），没有它时写进
# 预先分配好的参数数组，经 cupy.cuda.driver.launchKernel 调用驱动的 cuLaunchKernel。
# 任何一项不符合都退回完整的路径，由它给出同样的错误信息。
_PLANS: dict = {}


def _int_dims(v):
    """可以作缓存键的 grid / block：int 或由 int 组成的元组（bool、numpy 整数、列表走完整的路径）。"""
    if type(v) is int:
        return v
    if type(v) is tuple and all(type(d) is int for d in v):
        return v
    return None


def _plan_key(source, name, grid, block, shared_bytes, defines, max_dyn):
    if type(shared_bytes) is not int or (max_dyn is not None and type(max_dyn) is not int):
        return None
    g, b = _int_dims(grid), _int_dims(block)
    if g is None or b is None:
        return None
    if defines:
        if type(defines) is not dict:
            return None
        items = tuple(defines.items())
        for _, v in items:
            if type(v) is bool:
                return None
    else:
        items = None
    return source, name, items, g, b, shared_bytes, max_dyn


#: numpy 标量类型 -> struct 的格式字符（参数按 C 的自然对齐排在一块缓冲区里）
_STRUCT_CODES = {np.int8: "b", np.uint8: "B", np.int16: "h", np.uint16: "H", np.int32: "i", np.uint32: "I",
                 np.int64: "q", np.uint64: "Q", np.float32: "f", np.float64: "d", np.bool_: "?"}


class _Plan:
    """一个已经成功启动过的 (内核, 配置)：见上面的说明。

    有 torch 的启动器时（``fast``）由它放参数、启动；否则参数存放在一块按 C 的自然对齐排好的缓冲区里
    （``struct`` 的原生对齐与 C 相同），每个形参一个槽位，``params`` 是指向各槽位的指针数组
    （cuLaunchKernel 的 kernelParams）；每次启动用一次 ``pack_into`` 写入全部参数。"""

    def __init__(self, function, grid, block, shared_bytes, sig, args, version_of):
        from .. import torch_launcher

        self.fptr = int(function.ptr)
        self.grid, self.block, self.shared = grid, block, int(shared_bytes)
        self.device = torch.cuda.current_device()
        self.version_of = version_of                 # (路径, 版本)：学员的 .cu 文件改过之后不再沿用
        codes, checks, tys = [], [], []
        for (pname, ctype, is_ptr), a in zip(sig, args):
            if is_ptr:
                codes.append("Q")
                checks.append((True, a.dtype, None, None))
                tys.append("O")
                continue
            dtype = _SCALAR_DTYPES[_base_type(ctype)]
            kind, lo, hi = _scalar_kind(dtype)
            codes.append(_STRUCT_CODES[dtype])
            checks.append((False, kind, lo, hi))
            tys.append(torch_launcher.numpy_arg_type(dtype) or "?")
        self.checks = tuple(checks)
        self.tys = "".join(tys)                      # 每个形参一个类型字符（reduction_lab.host 的编译版 runner 用）
        # torch 自带的 C++ 启动器（有的话）：参数由它写进自己的槽位，不经 struct 与 CuPy，也不必加锁
        self.fast = torch_launcher.make(self.fptr, block, self.shared, "".join(tys))
        if self.fast is not None:
            self.launch_values = self._launch_fast
        else:
            self._buffer(codes)

    def _buffer(self, codes) -> None:
        """没有 torch 的启动器时：参数缓冲区、kernelParams 指针数组与 CuPy 的 launchKernel。"""
        import ctypes
        import struct
        import threading

        import cupy

        self.launch_kernel = cupy.cuda.driver.launchKernel
        self.lock = threading.Lock()
        fmt = "@" + "".join(codes)
        self.pack = struct.Struct(fmt).pack_into
        self.buf = ctypes.create_string_buffer(max(8, struct.calcsize(fmt)))
        base = ctypes.addressof(self.buf)
        # 第 i 个槽位的偏移：前 i 个参数加上第 i 个的对齐（calcsize 对前缀 + 第 i 个，减去它自己的大小）
        offsets = [struct.calcsize("@" + "".join(codes[:i + 1])) - struct.calcsize("@" + codes[i])
                   for i in range(len(codes))]
        self.params = (ctypes.c_void_p * max(1, len(codes)))(*[base + o for o in offsets])
        self.params_addr = ctypes.addressof(self.params)

    def __call__(self, args) -> bool:
        """检查并启动；不符合快速路径的条件时返回 False（什么都没有启动）。"""
        checks = self.checks
        if type(args) not in (tuple, list) or len(args) != len(checks):
            return False
        dev = self.device
        if torch._C._cuda_getDevice() != dev:
            return False
        if self.version_of is not None and _version(self.version_of[0]) != self.version_of[1]:
            return False
        values = []
        for (is_ptr, a_kind, lo, hi), a in zip(checks, args):
            if is_ptr:
                if type(a) is not torch.Tensor or a.dtype is not a_kind or not a.is_cuda or a.get_device() != dev \
                        or a.numel() == 0:
                    return False
                values.append(a.data_ptr())
            elif a_kind in "iu":
                if type(a) is not int or not lo <= a <= hi:
                    return False
                values.append(a)
            elif a_kind == "f":
                if type(a) is not float and type(a) is not int:
                    return False
                values.append(a)
            else:
                return False
        self.launch_values(values)
        return True

    def _launch_fast(self, values) -> None:
        g = self.grid
        self.fast(g[0], g[1], g[2], torch._C._cuda_getCurrentRawStream(self.device), *values)

    def launch_values(self, values) -> None:
        """热路径：``values`` 是已经换成地址的指针与 Python 数，顺序同形参表，调用者保证它们就是 :meth:`__call__`
        会接受的参数（:mod:`reduction_lab.api` 检查过的输入、按形状缓存的计划，当前设备就是计划的设备）。"""
        stream = torch._C._cuda_getCurrentRawStream(self.device)
        g, b = self.grid, self.block
        with self.lock:                              # 参数缓冲区是共用的：写入与启动之间不让别的线程插进来
            self.pack(self.buf, 0, *values)
            self.launch_kernel(self.fptr, g[0], g[1], g[2], b[0], b[1], b[2], self.shared, stream,
                               self.params_addr, 0)


def cached_plan(source, name: str, grid, block, shared_bytes: int = 0, defines=None, max_dynamic_shared_bytes=None):
    """:func:`launch` 为这个配置记下的启动计划（成功启动过一次之后才有，否则 None）。调用者可以把它存在自己的
    按形状缓存里，之后直接 ``plan(args)``：省掉每次拼缓存键；它返回 False 时照常调用 :func:`launch`。"""
    key = _plan_key(source, name, grid, block, shared_bytes, defines, max_dynamic_shared_bytes)
    return None if key is None else _PLANS.get(key)


def _make_plan(key, path, name, grid, block, shared_bytes, dkey, sig, cxx, version, args):
    """完整的路径成功启动之后调用：只为常见情形（参数都是 CUDA 张量与 Python 数）建快速路径。"""
    if not all((type(a) is torch.Tensor) if is_ptr else type(a) in (int, float) for (_, _, is_ptr), a in zip(sig, args)):
        return
    try:
        if cxx:
            function = _raw_module(str(path), dkey, name, version).get_function(name)
        else:
            function = _raw_kernel(str(path), name, dkey, version).kernel
        plan = _Plan(function, grid, block, shared_bytes, sig, args,
                     None if version is None else (path, version))
    except (AttributeError, ImportError, KeyError):  # CuPy 的内部接口不是预期的样子：只用完整的路径
        return
    if len(_PLANS) > 1024:
        _PLANS.clear()
    _PLANS[key] = plan


def launch(source, name: str, grid, block, args, shared_bytes: int = 0, defines=None, mode: str | None = None,
           max_dynamic_shared_bytes: int | None = None, symbols=None):
    """启动一个 CUDA C 内核：gpu 模式在 GPU 上，sim 模式在模拟器里。见模块说明。

    ``name`` 也可以是不带 ``extern "C"`` 的 C++ 内核或模板内核的实例（``"block_sum<256>"``）。
    ``symbols``：{变量名: 数值或 numpy 数组}，启动前写入文件作用域的 ``__constant__`` / ``__device__`` 变量
    （cudaMemcpyToSymbol）；``__device__`` 变量对应的可写 numpy 数组在启动后写回（两种模式相同，gpu 模式会同步）。

    ``shared_bytes`` 超过 48 KiB 时必须给出 ``max_dynamic_shared_bytes``（两种模式规则相同）：
    gpu 模式下据此设置内核的 cudaFuncAttributeMaxDynamicSharedMemorySize，上限是当前 GPU 架构
    每个线程块的最大共享内存；sim 模式按 sm_90。"""
    key = None
    if mode is None and symbols is None and runtime.MODE == "gpu":
        key = _plan_key(source, name, grid, block, shared_bytes, defines, max_dynamic_shared_bytes)
        plan = _PLANS.get(key) if key is not None else None
        if plan is not None and plan(args):
            return None
    mode = runtime.MODE if mode is None else mode
    if mode not in ("gpu", "sim"):
        raise ValueError(f"mode 只能是 None、'gpu' 或 'sim'，得到 {mode!r}")
    if mode == "gpu" and runtime.MODE != "gpu":
        raise runtime.ModeError(f"在 GPU 上启动 {name} 需要 gpu 模式（当前为 sim）(launching {name} on a GPU needs gpu mode)")
    dkey = _defines_key(defines)
    path, sig, cxx, version = _spec(str(source), name, dkey)
    grid = _dims(grid, "grid")
    block = _dims(block, "block")
    if block[0] * block[1] * block[2] > 1024:
        raise ValueError(f"block {block} 共 {block[0] * block[1] * block[2]} 个线程，超过每块 1024 个的上限 "
                         f"(more than 1024 threads per block)")
    if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"grid {grid} 超出上限 (2**31-1, 65535, 65535) (grid too large)")
    if isinstance(shared_bytes, (bool, np.bool_)) or not isinstance(shared_bytes, (int, np.integer)) or shared_bytes < 0:
        raise ValueError(f"shared_bytes 必须是非负整数，得到 {shared_bytes!r} (shared_bytes must be a non-negative int)")
    from ..simt.api import shared_limits

    # 与模拟器同样的规则、同样的信息；gpu 模式的上限取当前 GPU 的 sharedMemPerBlockOptin
    arch = _gpu_shared_optin() if mode == "gpu" else "sm_90"
    shared_limits(int(shared_bytes), max_dynamic_shared_bytes, arch)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args 必须是元组或列表，得到 {type(args).__name__} (args must be a tuple or list)")
    if len(args) != len(sig):
        names = ", ".join(f"{t} {n}" for n, t, _ in sig)
        raise TypeError(f"{name} 需要 {len(sig)} 个参数（{names}），得到 {len(args)} 个 "
                        f"({name} takes {len(sig)} arguments, got {len(args)})")
    packed, device = [], None
    for (pname, ctype, is_ptr), a in zip(sig, args):
        if not is_ptr:
            packed.append(_convert_scalar(a, ctype, pname, name))
            continue
        _check_pointer(a, ctype, pname, name, mode)
        if mode == "sim":
            packed.append(_flat_span(a))
            continue
        if isinstance(a, torch.Tensor):
            if device is None:
                device = a.device
            elif a.device != device:
                raise ValueError(f"{name} 的张量不在同一块 GPU 上：{device} 与 {a.device} (tensors on different GPUs)")
        packed.append(np.uint64(_pointer_value(a)))     # 指针按 64 位地址传入
    if mode == "gpu":
        cooperative = uses_grid_sync(str(path), version)
        _gpu_launch(path, name, grid, block, packed, device, shared_bytes, dkey, max_dynamic_shared_bytes,
                    symbols, cxx, version, cooperative)
        # 快速路径经 cuLaunchKernel：协作启动的内核每次都走完整的路径
        if key is not None and key not in _PLANS and not cooperative \
                and (device is None or device.index == torch.cuda.current_device()):
            _make_plan(key, path, name, grid, block, shared_bytes, dkey, sig, cxx, version, args)
        return None

    from .. import simt

    return simt.launch(str(path), name, grid, block, packed, shared_bytes=int(shared_bytes),
                       defines=dict(dkey) or None, max_dynamic_shared_bytes=max_dynamic_shared_bytes,
                       symbols=symbols)
