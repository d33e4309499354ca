"""线程块簇（thread block cluster）上的长行 softmax：softmax_cluster.cu 的包装函数。

课程页面：docs/cuda/cluster-softmax.md。

    from reduction_lab.cuda_kernels.cluster import softmax_cluster, cluster_plan
    y = softmax_cluster(x)        # x：(M, N) 的 float32 或 bfloat16 CUDA 张量，y 的 dtype 与 x 相同
    cluster_plan(262144, torch.float32)   # 不需要 GPU：每簇几块、每块几个线程、多少共享内存

一个簇（``cluster_size`` 个线程块）处理一行：每块把 1/cluster_size 行读进动态共享内存，
块间经分布式共享内存交换各自的 (最大值, exp 之和)，再从共享内存写出结果——全局内存每个元素
读一次、写一次。整行必须放得进一个簇的共享内存：至多 16 块 x 每块 227 KiB（H100/H200），
所以 float32 每行至多约 93 万个元素，bfloat16 约 186 万个。

gpu 模式要计算能力 9.0 以上（Hopper 起才有线程块簇）。sim 模式（或 ``mode="sim"``，张量在 CPU 上）
把同一份 ``softmax_cluster_rows`` 交给 CPU 模拟器（:mod:`reduction_lab.simt`）：它模拟簇屏障与分布式共享内存，
检查越界与块之间的竞争，``return_report=True`` 时返回计数（全局内存的读写、分布式共享内存的读）。
寄存器版与常驻版（内联 PTX：mbarrier、st.async、cp.async）只能在 GPU 上运行。

另外两个内核把每块那一段放在寄存器里：``softmax_cluster_regs``（一簇一行，``backend="cuda"`` 的长行默认）与
``softmax_cluster_pipe``（簇常驻、依次处理多行，后面的行先异步地预取进共享内存；要求每行从 16 字节边界开始、
字节数是 16 的倍数）。

CuPy（14.x）启动内核用的是 ``cuLaunchKernel``，不能在启动时指定簇的形状，所以簇的大小写在
编译期（``__cluster_dims__``），每种簇大小、每种元素类型编译一个变体（``CLUSTER_SIZE``、
``USE_BF16``）。16 块的簇超出可移植的上限 8，启动前要设置内核属性
``CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED``；超过 48 KiB 的动态共享内存要先调大
``max_dynamic_shared_size_bytes``。两者都通过 CuPy 的驱动 API 设置在编译好的内核上。
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from .. import runtime
from ..checks import check_int, check_matrix, check_no_overlap, check_out
from .launcher import cupy_stream, nvrtc_source, read_source, rows_aligned

__all__ = ["softmax_cluster", "cluster_plan", "ClusterPlan", "CLUSTER_SIZES", "SHARED_OPTIN_SM90",
           "KERNEL_SOURCE", "KERNEL_NAME", "DTYPES", "summary_table",
           "softmax_cluster_regs", "regs_launch_cached", "regs_plan", "RegsPlan", "REGS_KERNEL",
           "REGS_DTYPES", "regs_available", "rows_aligned",
           "softmax_cluster_pipe", "pipe_launch_cached", "pipe_plan", "PipePlan", "PIPE_KERNEL", "pipe_ok",
           "PIPE_STAGES", "max_active_clusters", "pipe_summary_table", "aligned_out", "launch_on", "first_launch"]

KERNEL_SOURCE = "softmax_cluster.cu"
KERNEL_NAME = "softmax_cluster_rows"
#: 可用的簇大小；8 是可移植的上限，16 要打开非可移植的簇大小
CLUSTER_SIZES = (1, 2, 4, 8, 16)
PORTABLE_CLUSTER_MAX = 8
DTYPES = (torch.float32, torch.bfloat16)
#: sm_90（H100/H200）每个线程块可以申请的共享内存上限（opt-in）：227 KiB
SHARED_OPTIN_SM90 = 232448
#: 内核自己的静态共享内存（块内归约的 2 x 32 个 float 与簇内交换的 float2，实为 256 / 272 字节）的上界
STATIC_SHARED_BOUND = 512
#: 自动选择簇大小时，每块那一段的目标上限：72 KiB 时每个 SM 还能同时驻留 3 块
TARGET_SLICE_BYTES = 72 * 1024
#: 每个线程平均处理的 16 字节向量数（内核里一批 8 个，约两批）
VECS_PER_THREAD = 16
MAX_THREADS = 1024

# CUfunction_attribute（cuda.h）
_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ClusterPlan:
    """一次启动的配置。``vecs_per_cta`` 个 16 字节向量就是每块的动态共享内存。"""

    n_cols: int
    dtype: str
    cluster_size: int
    block_size: int
    vec: int                 # 每个 16 字节向量里的元素数：float32 为 4，bfloat16 为 8
    vecs_per_cta: int
    shared_bytes: int        # 每块的动态共享内存（字节）

    @property
    def ctas_per_sm(self) -> int:
        """只看共享内存时每个 SM 能同时驻留几块（每块另有 1 KiB 系统保留；H200 每 SM 228 KiB，至多 32 块）。"""
        return min(32, (SHARED_OPTIN_SM90 + 1024) // (self.shared_bytes + STATIC_SHARED_BOUND + 1024))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ctas_per_sm"] = self.ctas_per_sm
        return d


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _check_shape_args(cluster_size, block_size) -> None:
    """两个内核共用的检查：簇大小取 :data:`CLUSTER_SIZES` 之一，线程数是 32 的倍数（至多 1024）。"""
    if cluster_size is not None:
        check_int(cluster_size, "cluster_size", lo=1, hi=16)
        if cluster_size not in CLUSTER_SIZES:
            raise ValueError(f"cluster_size 只能是 {', '.join(map(str, CLUSTER_SIZES))} 之一，得到 {cluster_size} "
                             f"(cluster_size must be one of {CLUSTER_SIZES})")
    if block_size is not None:
        check_int(block_size, "block_size", lo=32, hi=MAX_THREADS)
        if block_size % 32:
            raise ValueError(f"block_size 必须是 32 的倍数，得到 {block_size} (block_size must be a multiple of 32)")


def cluster_plan(n_cols: int, dtype=torch.float32, cluster_size: int | None = None, block_size: int | None = None,
                 shared_limit: int = SHARED_OPTIN_SM90) -> ClusterPlan:
    """为每行 ``n_cols`` 个元素选择簇大小、线程数与共享内存（纯 Python，任何模式都能调用）。

    自动选择：最小的簇，使每块那一段不超过 :data:`TARGET_SLICE_BYTES`；16 块都超过时取
    放得下的最小簇。``cluster_size`` / ``block_size`` 指定时只检查。整行放不进 16 块的共享内存时报错。
    """
    check_int(n_cols, "n_cols", lo=1, hi=2**31 - 2**21)
    if dtype not in DTYPES:
        raise TypeError(f"dtype {_dtype_name(dtype)} 不受支持，可用：float32, bfloat16 "
                        f"(unsupported dtype {_dtype_name(dtype)}; use float32 or bfloat16)")
    check_int(shared_limit, "shared_limit", lo=1024)
    _check_shape_args(cluster_size, block_size)
    esize = 4 if dtype == torch.float32 else 2
    vec = 16 // esize
    # 行首可能不在 16 字节边界上：列号右移至多 vec - 1 个元素，最坏情况多占一个向量
    n_vec = _cdiv(n_cols + vec - 1, vec)
    limit = shared_limit - STATIC_SHARED_BOUND

    def slice_bytes(c: int) -> int:
        return _cdiv(n_vec, c) * 16

    if cluster_size is None:
        fits = [c for c in CLUSTER_SIZES if slice_bytes(c) <= limit]
        if not fits:
            raise ValueError(
                f"每行 {n_cols} 个 {_dtype_name(dtype)}（{n_cols * esize} 字节）放不进一个簇：16 块时每块要 "
                f"{slice_bytes(16)} 字节共享内存，上限 {limit}；请用 reduction_lab.softmax(x, backend='triton') "
                f"(a row of {n_cols} {_dtype_name(dtype)} does not fit in the shared memory of a 16-block cluster)")
        small = [c for c in fits if slice_bytes(c) <= TARGET_SLICE_BYTES]
        cluster_size = small[0] if small else fits[0]
    elif slice_bytes(cluster_size) > limit:
        raise ValueError(
            f"cluster_size={cluster_size} 时每块要 {slice_bytes(cluster_size)} 字节共享内存，超过上限 {limit}："
            f"每行 {n_cols} 个 {_dtype_name(dtype)} 需要更大的簇 "
            f"(cluster_size={cluster_size} needs {slice_bytes(cluster_size)} bytes of shared memory per block, "
            f"limit {limit})")
    vpc = _cdiv(n_vec, cluster_size)
    if block_size is None:
        block_size = min(MAX_THREADS, max(64, _cdiv(_cdiv(vpc, VECS_PER_THREAD), 32) * 32))
    return ClusterPlan(n_cols=n_cols, dtype=_dtype_name(dtype), cluster_size=cluster_size, block_size=block_size,
                       vec=vec, vecs_per_cta=vpc, shared_bytes=vpc * 16)


# ---------------------------------------------------------------- GPU

#: 寄存器版与常驻版在 sim 模式下的报错（名字按内核替换）
SIM_MESSAGE = (
    "softmax_cluster 只能在 gpu 模式下运行：它用内联 PTX（mbarrier、st.async、cp.async），CPU 模拟器"
    "（reduction_lab.simt）不执行内联汇编；sim 模式下请用第一版 reduction_lab.cuda_kernels.cluster.softmax_cluster"
    "（在模拟器里运行）或 reduction_lab.softmax(x, backend='triton') "
    "(softmax_cluster needs gpu mode: it uses inline PTX, which the CPU simulator does not execute)")


@functools.lru_cache(maxsize=None)
def _raw_kernel(cluster_size: int, bf16: bool):
    import cupy

    code = (f"#define CLUSTER_SIZE {cluster_size}\n#define USE_BF16 {int(bf16)}\n"
            f'#line 1 "{KERNEL_SOURCE}"\n' + nvrtc_source(read_source(KERNEL_SOURCE)))
    # 不打开 enable_cooperative_groups：那会改用 cuLaunchCooperativeKernel，簇内核用不着它
    return cupy.RawKernel(code, KERNEL_NAME)


# 每个 (簇大小, 类型, 设备) 已经设置过的动态共享内存上限
_attrs_done: dict[tuple[int, bool, int], int] = {}


def _prepare(kern, plan: ClusterPlan, bf16: bool, index: int) -> None:
    import cupy

    key = (plan.cluster_size, bf16, index)
    func = kern.kernel                      # 在当前设备上编译（第一次调用时）
    if key not in _attrs_done:
        static = int(kern.attributes["shared_size_bytes"])
        if static > STATIC_SHARED_BOUND:
            raise RuntimeError(f"{KERNEL_NAME} 的静态共享内存 {static} 字节超过假定的上界 {STATIC_SHARED_BOUND} "
                               f"(static shared memory exceeds the assumed bound)")
        if plan.cluster_size > PORTABLE_CLUSTER_MAX:
            cupy.cuda.driver.funcSetAttribute(func.ptr, _ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        _attrs_done[key] = 48 * 1024
    if plan.shared_bytes > _attrs_done[key]:
        kern.max_dynamic_shared_size_bytes = plan.shared_bytes
        _attrs_done[key] = plan.shared_bytes


@functools.lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[int, int, int]:
    """(计算能力的主版本, 每块可申请的共享内存上限, SM 数)。"""
    props = torch.cuda.get_device_properties(index)
    optin = int(getattr(props, "shared_memory_per_block_optin", 0) or SHARED_OPTIN_SM90)
    return props.major, optin, props.multi_processor_count


def _check_gpu_input(x: torch.Tensor, dtypes, name: str) -> int:
    """两个簇内核共用的检查：gpu 模式、x 是 dtypes 之一的 CUDA 矩阵、GPU 有线程块簇。返回设备号。"""
    if runtime.MODE != "gpu":
        if name == "softmax_cluster":       # 第一版在 sim 模式下交给模拟器；这里是显式要了 mode="gpu"
            raise runtime.ModeError(f"在 GPU 上运行 {name} 需要 gpu 模式（当前为 sim）(running {name} on a GPU needs gpu mode)")
        raise runtime.ModeError(SIM_MESSAGE.replace("softmax_cluster ", f"{name} ", 1))
    check_matrix(x, "x", dtypes=dtypes, device="cuda")
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    major = _device_info(index)[0]
    if major < 9:
        raise RuntimeError(f"线程块簇需要计算能力 9.0 以上（Hopper），这块 GPU 是 {major}.x "
                           f"(thread block clusters need compute capability 9.0 or newer)")
    return index


def _grid_and_out(x: torch.Tensor, out, cluster_size: int) -> torch.Tensor:
    """网格不超过上限；``out`` 为 None 时新建，否则检查形状、dtype、设备与不重叠。"""
    M, N = x.shape
    if M * cluster_size > 2**31 - 1:
        raise ValueError(f"M * cluster_size = {M * cluster_size} 超过网格上限 2**31 - 1 (grid too large)")
    if out is None:
        return torch.empty((M, N), dtype=x.dtype, device=x.device)
    check_out(out, (M, N), x.dtype, x.device)
    check_no_overlap(out, x)
    return out


def _softmax_cluster_sim(x: torch.Tensor, cluster_size, block_size, out, return_report):
    """sim 模式：同一份 softmax_cluster_rows 在 CPU 模拟器里运行（张量在 CPU 上）。"""
    from .launcher import KERNEL_DIR, launch

    check_matrix(x, "x", dtypes=DTYPES, device="cpu")
    M, N = x.shape
    plan = cluster_plan(N, x.dtype, cluster_size, block_size)
    out = _grid_and_out(x, out, plan.cluster_size)
    big = plan.shared_bytes > 48 * 1024
    rep = launch(KERNEL_DIR / KERNEL_SOURCE, KERNEL_NAME, M * plan.cluster_size, plan.block_size,
                 (x, out, x.stride(0), out.stride(0), N, plan.vecs_per_cta), shared_bytes=plan.shared_bytes,
                 defines={"CLUSTER_SIZE": plan.cluster_size, "USE_BF16": int(x.dtype == torch.bfloat16)}, mode="sim",
                 max_dynamic_shared_bytes=plan.shared_bytes if big else None)
    return (out, rep) if return_report else out


def softmax_cluster(x: torch.Tensor, *, cluster_size: int | None = None, block_size: int | None = None,
                    out: torch.Tensor | None = None, mode: str | None = None, return_report: bool = False):
    """按行 softmax：(M, N) float32 / bfloat16 -> 同 dtype 的 (M, N)，一个线程块簇处理一行。

    ``cluster_size``（1、2、4、8、16）与 ``block_size``（32 的倍数，至多 1024）默认由
    :func:`cluster_plan` 选择；``out``：调用者提供的 (M, N) 连续输出，dtype 与 x 相同、与 x 不重叠。
    ``mode``：None（当前模式）、"gpu" 或 "sim"；sim 模式在 CPU 模拟器里运行同一个内核（张量在 CPU 上），
    ``return_report=True`` 时返回 ``(y, 模拟器的报告)``（gpu 模式下报告为 ``None``）。
    """
    if mode not in (None, "sim", "gpu"):
        raise ValueError(f"mode 只能是 None、'sim' 或 'gpu'，得到 {mode!r} (mode must be None, 'sim' or 'gpu')")
    if not isinstance(return_report, bool):
        raise TypeError(f"return_report 必须是 bool，得到 {return_report!r} (return_report must be a bool)")
    if (runtime.MODE if mode is None else mode) == "sim":
        return _softmax_cluster_sim(x, cluster_size, block_size, out, return_report)
    index = _check_gpu_input(x, DTYPES, "softmax_cluster")
    M, N = x.shape
    plan = cluster_plan(N, x.dtype, cluster_size, block_size, shared_limit=_device_info(index)[1])
    out = _grid_and_out(x, out, plan.cluster_size)
    bf16 = x.dtype == torch.bfloat16
    import cupy

    with cupy.cuda.Device(index):
        kern = _raw_kernel(plan.cluster_size, bf16)
        _prepare(kern, plan, bf16, index)
        stream = cupy_stream(index)
        args = (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(x.stride(0)), np.int64(out.stride(0)),
                np.int32(N), np.int32(plan.vecs_per_cta))
        try:
            with stream:                    # 与 torch 的当前流保持顺序
                kern((M * plan.cluster_size,), (plan.block_size,), args, shared_mem=plan.shared_bytes)
        except cupy.cuda.driver.CUDADriverError as e:
            raise RuntimeError(f"{KERNEL_NAME} 启动失败（簇 {plan.cluster_size} 块、每块 {plan.block_size} 个线程、"
                               f"{plan.shared_bytes} 字节共享内存）：{e} "
                               f"(launch of {KERNEL_NAME} failed for {plan.to_dict()})") from e
    return (out, None) if return_report else out


# ---------------------------------------------------------------- 段放在寄存器里：softmax_cluster_regs

REGS_KERNEL = "softmax_cluster_regs"
REGS_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: 每个线程至多放这么多个元素（PACKS * VEC）：再多寄存器就会溢出（nvcc -Xptxas -v，见测试）
REGS_MAX_THREAD_ELEMS = 64
#: 一块的寄存器里至多放这么多个元素（BLOCK_SIZE * PACKS * VEC）：每个 SM 65536 个 32 位寄存器
REGS_MAX_BLOCK_ELEMS = 32768

@dataclass(frozen=True)
class RegsPlan:
    """softmax_cluster_regs 的一次启动：每块 ``block_size`` 个线程，每个线程 ``packs`` 个 16 字节向量放在寄存器里、
    另有 ``smem_packs`` 个放在动态共享内存里（cp.async 搬进去）。"""

    n_cols: int
    dtype: str
    cluster_size: int
    block_size: int
    packs: int
    vec: int
    smem_packs: int = field(default=0, kw_only=True)

    @property
    def elems_per_thread(self) -> int:
        """每个线程放在寄存器里的元素数。"""
        return self.packs * self.vec

    @property
    def shared_bytes(self) -> int:
        """动态共享内存：每个线程 ``smem_packs`` 个 16 字节向量。"""
        return self.smem_packs * self.block_size * 16

    def to_dict(self) -> dict:
        return asdict(self)


def _n_vec(n_cols: int, vec: int, aligned: bool) -> int:
    # 行首不在 16 字节边界上时列号右移至多 vec - 1 个元素，最坏情况多占一个向量
    return _cdiv(n_cols if aligned else n_cols + vec - 1, vec)


def regs_plan(n_cols: int, dtype=torch.float32, cluster_size: int | None = None, block_size: int | None = None,
              packs: int | None = None, aligned: bool = True, smem_packs: int = 0,
              shared_limit: int = SHARED_OPTIN_SM90) -> RegsPlan:
    """softmax_cluster_regs 的配置（纯 Python，任何模式都能调用）。``packs`` 默认每个线程 32 个元素，
    ``block_size`` 默认取 16 块盖得住整行的最少线程数（至少 256），簇大小默认取盖住整行的最小的 2 的幂。
    :func:`reduction_lab.cuda_kernels.softmax` 的 ``kernel="auto"`` 按 ``SOFTMAX_CONFIGS`` 给出线程数、packs 与
    ``smem_packs``（每个线程另有几个向量放在共享内存里，0 到 64，默认 0；要放得进 ``shared_limit``）。
    ``aligned``：每行都从 16 字节边界开始（见 :func:`rows_aligned`），否则每行多留一个向量。
    整行放不进 16 块的寄存器（与共享内存）时报错。"""
    check_int(n_cols, "n_cols", lo=1, hi=2**31 - 2**21)
    if dtype not in REGS_DTYPES:
        raise TypeError(f"dtype {_dtype_name(dtype)} 不受支持，可用：float32, bfloat16, float16 "
                        f"(unsupported dtype {_dtype_name(dtype)}; use float32, bfloat16 or float16)")
    _check_shape_args(cluster_size, block_size)
    if packs is not None:
        check_int(packs, "packs", lo=1, hi=16)
    check_int(smem_packs, "smem_packs", lo=0, hi=64)
    check_int(shared_limit, "shared_limit", lo=1024)
    esize = 4 if dtype == torch.float32 else 2
    vec = 16 // esize
    if not isinstance(aligned, bool):
        raise TypeError(f"aligned 必须是 bool，得到 {aligned!r} (aligned must be a bool)")
    n_vec = _n_vec(n_cols, vec, aligned)
    if packs is None:
        packs = 32 // vec                       # 每个线程 32 个元素：float32 8 个向量，16 位 4 个
    if block_size is None:
        # 16 块盖得住整行的最少线程数（至少 256）
        block_size = next((b for b in (256, 512, 1024) if CLUSTER_SIZES[-1] * b * packs >= n_vec), MAX_THREADS)
    if packs * vec > REGS_MAX_THREAD_ELEMS or block_size * packs * vec > REGS_MAX_BLOCK_ELEMS:
        raise ValueError(f"每个线程 {packs * vec} 个元素、每块 {block_size * packs * vec} 个：超过上限 "
                         f"{REGS_MAX_THREAD_ELEMS} / {REGS_MAX_BLOCK_ELEMS}（寄存器会溢出） "
                         f"(too many elements in registers: {packs * vec} per thread, "
                         f"{block_size * packs * vec} per block)")
    smem = smem_packs * block_size * 16
    if smem + STATIC_SHARED_BOUND > shared_limit:
        raise ValueError(f"smem_packs={smem_packs} 时每块要 {smem} 字节动态共享内存，超过上限 "
                         f"{shared_limit - STATIC_SHARED_BOUND} (smem_packs={smem_packs} needs {smem} bytes of "
                         f"shared memory per block)")
    per_cta = block_size * (packs + smem_packs)
    where = f"{packs} 个在寄存器里" + (f"、{smem_packs} 个在共享内存里" if smem_packs else "")
    if cluster_size is None:
        need = _cdiv(n_vec, per_cta)
        cluster_size = next((c for c in CLUSTER_SIZES if c >= need), None)
        if cluster_size is None:
            raise ValueError(
                f"每行 {n_cols} 个 {_dtype_name(dtype)} 放不进 16 块的寄存器（每块 {block_size} 个线程，每个线程的"
                f" 16 字节向量{where}）；请加大 block_size / packs / smem_packs，或用 softmax_cluster（共享内存）"
                f"或 reduction_lab.softmax(x, backend='triton') "
                f"(a row of {n_cols} {_dtype_name(dtype)} does not fit the registers of a 16-block cluster)")
    elif cluster_size * per_cta < n_vec:
        raise ValueError(
            f"cluster_size={cluster_size}、每块 {block_size} 个线程（每个线程的向量{where}）只盖住 "
            f"{cluster_size * per_cta * vec - vec + 1} 列，得到 N={n_cols} "
            f"(cluster_size={cluster_size} with {block_size} threads x {packs + smem_packs} vectors covers fewer "
            f"than {n_cols} columns)")
    return RegsPlan(n_cols=n_cols, dtype=_dtype_name(dtype), cluster_size=cluster_size, block_size=block_size,
                    packs=packs, vec=vec, smem_packs=smem_packs)


def regs_available(index: int) -> bool:
    """这块 GPU 能否运行簇内核（计算能力 9.0 以上）。"""
    return _device_info(index)[0] >= 9


_REGS_DEFINES = {torch.float32: (0, 0), torch.bfloat16: (1, 0), torch.float16: (0, 1)}


def regs_min_blocks(block_size: int, packs: int, dtype, smem_packs: int = 0) -> int:
    """softmax_cluster_regs 的 ``__launch_bounds__`` 第二个参数（每个 SM 至少驻留的块数），也不超过每个 SM
    2048 个线程。16 位输入：有放在共享内存里的向量（SMEM_PACKS > 0）时寄存器里只留原始的向量（KEEP_PACKED），
    每个线程多于 32 个元素时按 64 个寄存器算，否则按 40 个；没有时拆成 float 留在寄存器里，按 80 / 64 个
    （nvcc 在这些上限下不溢出，见测试）。float32 不加上限（1）：拆包不占寄存器，ptxas 自己分配的就不多。"""
    if dtype == torch.float32:
        return 1
    if smem_packs:
        regs = 64 if packs * 8 > 32 else 40
    else:
        regs = 80 if packs * 8 > 32 else 64
    return max(1, min(2048 // block_size, 65536 // (block_size * regs)))


@functools.lru_cache(maxsize=None)
def _regs_kernel(cluster_size: int, block_size: int, packs: int, dtype, index: int, smem_packs: int = 0):
    """编译好的 softmax_cluster_regs（每种配置一份）与它的 CUfunction；16 块的簇打开非可移植的簇大小，
    有动态共享内存时把它的上限调到所需的字节数。"""
    import cupy

    kern, func = _compile_cluster_kernel(REGS_KERNEL, cluster_size, block_size, packs, dtype, index,
                                         MIN_BLOCKS=regs_min_blocks(block_size, packs, dtype, smem_packs),
                                         SMEM_PACKS=smem_packs)
    if smem_packs:
        with cupy.cuda.Device(index):
            kern.max_dynamic_shared_size_bytes = smem_packs * block_size * 16
    return kern, func


def _compile_cluster_kernel(name: str, cluster_size: int, block_size: int, packs: int, dtype, index: int,
                            **defines):
    """softmax_cluster.cu 里一个寄存器版 / 常驻版内核的一种配置：编译，16 块的簇打开非可移植的簇大小。
    ``defines`` 是这个内核另外的编译期常量（按给出的顺序写在 PACKS 之后）。返回 (RawKernel, CUfunction)。"""
    import cupy

    bf16, fp16 = _REGS_DEFINES[dtype]
    extra = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    code = (f"#define CLUSTER_SIZE {cluster_size}\n#define USE_BF16 {bf16}\n#define USE_FP16 {fp16}\n"
            f"#define BLOCK_SIZE {block_size}\n#define PACKS {packs}\n{extra}"
            f'#line 1 "{KERNEL_SOURCE}"\n' + nvrtc_source(read_source(KERNEL_SOURCE)))
    kern = cupy.RawKernel(code, name)
    with cupy.cuda.Device(index):
        func = kern.kernel
        if cluster_size > PORTABLE_CLUSTER_MAX:
            cupy.cuda.driver.funcSetAttribute(func.ptr, _ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    return kern, func


#: 形参表（launcher._Plan 的格式）：与 softmax_cluster.cu 里 softmax_cluster_regs 的声明一致
_REGS_SIG = (("x", "const floatX *", True), ("y", "floatX *", True), ("x_row_stride", "long long", False),
             ("y_row_stride", "long long", False), ("n_cols", "int", False))

#: (M, N, dtype, 设备) -> launcher._Plan：同一形状的调用直接经 cuLaunchKernel 启动
_REGS_PLANS: dict = {}


def _regs_launch(x: torch.Tensor, y: torch.Tensor, plan: RegsPlan, index: int):
    """编译（或取缓存）、建一个 launcher._Plan 并用它启动；返回这个 _Plan，供同一形状的下一次调用。"""
    from .launcher import _Plan

    M, N = x.shape
    args = (x, y, x.stride(0), y.stride(0), N)
    kern, func = _regs_kernel(plan.cluster_size, plan.block_size, plan.packs, x.dtype, index, plan.smem_packs)
    launcher = _Plan(func, (M * plan.cluster_size, 1, 1), (plan.block_size, 1, 1), plan.shared_bytes, _REGS_SIG,
                     args, None)
    if not launcher(args):
        raise RuntimeError(f"{REGS_KERNEL} 的参数不符合启动计划 (arguments do not match the launch plan)")
    return launcher


def softmax_cluster_regs(x: torch.Tensor, *, cluster_size: int | None = None, block_size: int | None = None,
                         packs: int | None = None, smem_packs: int = 0,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) float32 / bfloat16 / float16 -> 同 dtype 的 (M, N)，一个线程块簇处理一行，
    每块那一段放在寄存器里（softmax_cluster.cu 的 ``softmax_cluster_regs``；``smem_packs`` > 0 时每个线程另有
    这么多个 16 字节向量放在共享内存里）。参数见 :func:`regs_plan`；
    ``out``：调用者提供的 (M, N) 连续输出，dtype 与 x 相同、与 x 不重叠。只有 gpu 模式（计算能力 9.0 以上）。"""
    index = _check_gpu_input(x, REGS_DTYPES, "softmax_cluster_regs")
    plan = regs_plan(x.shape[1], x.dtype, cluster_size, block_size, packs, rows_aligned(x), smem_packs,
                     _device_info(index)[1])
    out = _grid_and_out(x, out, plan.cluster_size)
    launch_on(index, REGS_KERNEL, plan, regs_launch_cached, x, out, plan)
    return out


def launch_on(index: int, kernel: str, plan, launch, *args):
    """在第 ``index`` 块 GPU 上调用 ``launch(*args)``（各内核的 ``*_launch_cached``）；驱动报错时改成写明
    内核名与配置（``plan.to_dict()``）的 RuntimeError。"""
    import cupy

    with cupy.cuda.Device(index):
        try:
            return launch(*args)
        except cupy.cuda.driver.CUDADriverError as e:
            raise RuntimeError(f"{kernel} 启动失败（{plan.to_dict()}）：{e} (launch of {kernel} failed)") from e


def regs_launch_cached(x: torch.Tensor, y: torch.Tensor, plan: RegsPlan):
    """按 ``plan`` 启动，``x`` / ``y`` 已经检查过、在当前设备上：启动计划按 (形状, dtype, 设备, 配置) 缓存，
    之后直接经 cuLaunchKernel 启动。返回这个启动计划（``launcher._Plan``）：同一形状的调用者可以存下它，
    之后用 ``launch_values`` 启动（:mod:`reduction_lab.cuda_kernels` 的 ``softmax_checked``）。"""
    M, N = x.shape
    key = (M, N, x.dtype, x.get_device(), plan.cluster_size, plan.block_size, plan.packs, plan.smem_packs)
    launcher = _REGS_PLANS.get(key)
    if launcher is not None and launcher((x, y, x.stride(0), y.stride(0), N)):
        return launcher
    if len(_REGS_PLANS) > 1024:
        _REGS_PLANS.clear()
    launcher = _REGS_PLANS[key] = _regs_launch(x, y, plan, key[3])
    return launcher


# ---------------------------------------------------------------- 常驻的簇，预取后面的行：softmax_cluster_pipe

PIPE_KERNEL = "softmax_cluster_pipe"
#: 每块几段共享内存（当前行 + 预取的行）
PIPE_STAGES = (2, 3, 4)


@dataclass(frozen=True)
class PipePlan(RegsPlan):
    """softmax_cluster_pipe 的一次启动：簇、线程与 packs 同 :class:`RegsPlan`，另有每块 ``stages`` 段共享内存，
    每段 ``seg_vecs`` 个 16 字节向量；``tma``：用一维 TMA 装段（否则每个线程 cp.async）。"""

    stages: int
    seg_vecs: int
    tma: bool

    @property
    def shared_bytes(self) -> int:
        """动态共享内存：``stages`` 段，每段 ``seg_vecs`` 个 16 字节向量。"""
        return self.stages * self.seg_vecs * 16

    @property
    def static_bytes(self) -> int:
        """静态共享内存：两份 (m, s) 表（簇里每个 warp 一项），TMA 时每段另有一个 8 字节的 mbarrier。"""
        return 8 * self.stages * self.tma + 2 * self.cluster_size * (self.block_size // 32) * 8

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shared_bytes"] = self.shared_bytes
        return d


def pipe_plan(n_cols: int, dtype=torch.float32, cluster_size: int | None = None, block_size: int | None = None,
              packs: int | None = None, stages: int = 3, tma: bool = False,
              shared_limit: int = SHARED_OPTIN_SM90) -> PipePlan:
    """softmax_cluster_pipe 的配置（纯 Python，任何模式都能调用）。簇大小、线程数与 packs 的默认值与
    :func:`regs_plan` 相同。每行的字节数必须是 16 的倍数（按 16 字节搬运）；``stages`` 段共享内存要放得进
    ``shared_limit``。"""
    check_int(n_cols, "n_cols", lo=1, hi=2**31 - 2**21)
    if dtype not in REGS_DTYPES:
        raise TypeError(f"dtype {_dtype_name(dtype)} 不受支持，可用：float32, bfloat16, float16 "
                        f"(unsupported dtype {_dtype_name(dtype)}; use float32, bfloat16 or float16)")
    check_int(stages, "stages", lo=PIPE_STAGES[0], hi=PIPE_STAGES[-1])
    check_int(shared_limit, "shared_limit", lo=1024)
    if not isinstance(tma, bool):
        raise TypeError(f"tma 必须是 bool，得到 {tma!r} (tma must be a bool)")
    esize = 4 if dtype == torch.float32 else 2
    vec = 16 // esize
    if n_cols % vec:
        raise ValueError(f"{PIPE_KERNEL} 按 16 字节搬运整行：每行的字节数（{n_cols} x {esize}）必须是 16 的倍数，"
                         f"即 N 是 {vec} 的倍数；请用 softmax_cluster_regs "
                         f"(rows must be a multiple of 16 bytes: N must be a multiple of {vec})")
    rp = regs_plan(n_cols, dtype, cluster_size, block_size, packs, aligned=True)
    seg_vecs = _cdiv(n_cols // vec, rp.cluster_size)
    plan = PipePlan(**asdict(rp), stages=stages, seg_vecs=seg_vecs, tma=tma)
    if plan.shared_bytes + plan.static_bytes > shared_limit:
        raise ValueError(f"{stages} 段 x {seg_vecs * 16} 字节的共享内存（另有 {plan.static_bytes} 字节静态的）超过每块的"
                         f"上限 {shared_limit}：请减少 stages 或加大簇 "
                         f"({stages} stages of {seg_vecs * 16} bytes exceed the shared memory limit {shared_limit})")
    return plan


def aligned_out(x: torch.Tensor, out, kernel: str, hint: str = "") -> torch.Tensor:
    """按 16 字节整行搬运的内核（softmax_cluster_pipe、grid.py 的 softmax_grid_pipe）共用：新建或检查 ``out``，
    再要求 x 与 ``out`` 满足 :func:`pipe_ok`，否则报错并写出两者的首地址与 x 的行距；``hint`` 接在说明之后。"""
    out = _grid_and_out(x, out, 1)
    if not pipe_ok(x, out):
        raise ValueError(f"{kernel} 要求 x 与 out 的每一行都从 16 字节边界开始（首地址与行距都是 16 字节的倍数），"
                         f"得到 x 的首地址 {x.data_ptr():#x}、行距 {x.stride(0)}，out 的首地址 {out.data_ptr():#x}"
                         f"{hint} (rows of x and out must start on 16-byte boundaries)")
    return out


def pipe_ok(x: torch.Tensor, y: torch.Tensor | None = None) -> bool:
    """x（与 y）的每一行都从 16 字节边界开始、每行的字节数是 16 的倍数：softmax_cluster_pipe 的条件。"""
    if (x.shape[1] * x.element_size()) % 16 or not rows_aligned(x):
        return False
    return y is None or rows_aligned(y)


@functools.lru_cache(maxsize=None)
def _pipe_kernel(plan: PipePlan, dtype, index: int):
    """编译好的 softmax_cluster_pipe 与它的 CUfunction，设置好动态共享内存上限（与非可移植的簇大小）。"""
    import cupy

    kern, func = _compile_cluster_kernel(PIPE_KERNEL, plan.cluster_size, plan.block_size, plan.packs, dtype, index,
                                         STAGES=plan.stages, USE_TMA=int(plan.tma))
    with cupy.cuda.Device(index):
        # 动态与静态共享内存合起来超过 48 KiB 就要先调大这个上限：总是按动态的字节数设置
        kern.max_dynamic_shared_size_bytes = plan.shared_bytes
    return kern, func


@functools.lru_cache(maxsize=None)
def max_active_clusters(func_ptr: int, cluster_size: int, block_size: int, shared_bytes: int) -> int | None:
    """这块 GPU 上同时驻留得下几个这样的簇（驱动的 cuOccupancyMaxActiveClusters；簇的形状写在内核里）。
    驱动没有这个函数或查询失败时返回 None。"""
    import ctypes

    class _LaunchConfig(ctypes.Structure):        # CUlaunchConfig（cuda.h）
        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                    ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                    ("numAttrs", ctypes.c_uint)]

    try:
        fn = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters
    except (OSError, AttributeError):
        return None
    n = ctypes.c_int(0)
    cfg = _LaunchConfig(cluster_size, 1, 1, block_size, 1, 1, shared_bytes, None, None, 0)
    rc = fn(ctypes.byref(n), ctypes.c_void_p(func_ptr), ctypes.byref(cfg))
    return n.value if rc == 0 and n.value > 0 else None


#: 形参表（launcher._Plan 的格式）：与 softmax_cluster.cu 里 softmax_cluster_pipe 的声明一致
_PIPE_SIG = _REGS_SIG[:4] + (("n_rows", "int", False), ("n_cols", "int", False), ("seg_vecs", "int", False))
_PIPE_PLANS: dict = {}


def pipe_launch_cached(x: torch.Tensor, y: torch.Tensor, plan: PipePlan, n_clusters: int | None = None):
    """按 ``plan`` 启动，``x`` / ``y`` 已经检查过（含 :func:`pipe_ok`）、在当前设备上。网格是常驻的：
    ``n_clusters`` 个簇（默认取驱动给出的同时驻留的簇数，不超过行数）。启动计划按形状与配置缓存；
    返回它（``launcher._Plan``，网格里的簇数是 ``grid[0] // cluster_size``），用法同 :func:`regs_launch_cached`。"""
    M, N = x.shape
    key = (M, N, x.get_device(), plan, n_clusters)
    hit = _PIPE_PLANS.get(key)
    args = (x, y, x.stride(0), y.stride(0), M, N, plan.seg_vecs)
    if hit is not None and hit(args):
        return hit
    index = key[2]
    _, func = _pipe_kernel(plan, x.dtype, index)
    if n_clusters is None:
        fit = max_active_clusters(int(func.ptr), plan.cluster_size, plan.block_size, plan.shared_bytes)
        n_clusters = fit or max(1, _device_info(index)[2] // plan.cluster_size)
    n_clusters = max(1, min(M, n_clusters))
    if n_clusters * plan.cluster_size > 2**31 - 1:
        raise ValueError("网格超过上限 2**31 - 1 (grid too large)")
    return first_launch(_PIPE_PLANS, key, PIPE_KERNEL, func, n_clusters * plan.cluster_size, plan.block_size,
                        plan.shared_bytes, _PIPE_SIG, args)


def first_launch(cache: dict, key, kernel: str, func, grid: int, block: int, shared_bytes: int, sig, args):
    """一维网格的常驻内核（pipe、grid.py 的 grid）第一次以某个形状启动：建 ``launcher._Plan``、用它启动，
    再按 ``key`` 存进 ``cache``（超过 1024 项时清空），返回它。"""
    from .launcher import _Plan

    launcher = _Plan(func, (grid, 1, 1), (block, 1, 1), shared_bytes, sig, args, None)
    if not launcher(args):
        raise RuntimeError(f"{kernel} 的参数不符合启动计划 (arguments do not match the launch plan)")
    if len(cache) > 1024:
        cache.clear()
    cache[key] = launcher
    return launcher


def softmax_cluster_pipe(x: torch.Tensor, *, cluster_size: int | None = None, block_size: int | None = None,
                         packs: int | None = None, stages: int = 3, tma: bool = False, n_clusters: int | None = None,
                         out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) float32 / bfloat16 / float16 -> 同 dtype 的 (M, N)。常驻的线程块簇依次处理各行，
    每块把后面 ``stages - 1`` 行的段异步地预取进共享内存（softmax_cluster.cu 的 ``softmax_cluster_pipe``；
    ``tma=True`` 用一维 TMA，否则每个线程 cp.async）。``n_clusters``：网格里的簇数（默认同时驻留得下的簇数）。
    其余参数见 :func:`pipe_plan` 与 :func:`regs_plan`。x 与 ``out`` 的每一行都要从 16 字节边界开始、每行的
    字节数是 16 的倍数。只有 gpu 模式（计算能力 9.0 以上）。"""
    index = _check_gpu_input(x, REGS_DTYPES, PIPE_KERNEL)
    if n_clusters is not None:
        check_int(n_clusters, "n_clusters", lo=1, hi=2**31 - 1)
    plan = pipe_plan(x.shape[1], x.dtype, cluster_size, block_size, packs, stages, tma,
                     shared_limit=_device_info(index)[1])
    out = aligned_out(x, out, PIPE_KERNEL, "；请用 softmax_cluster_regs")
    launch_on(index, PIPE_KERNEL, plan, pipe_launch_cached, x, out, plan, n_clusters)
    return out


# ---------------------------------------------------------------- 实测结果的表格

def summary_table(doc: dict) -> str:
    """scripts/gpu_cluster_softmax.py 写出的 JSON -> 等宽文本表（GB/s 为 do_bench 的中位数，读 + 写）。

    课程页面 docs/cuda/cluster-softmax.md 用它打印 docs/data/h200_cluster_softmax.json。"""
    head = (f"{'dtype':9s}{'N':>8s}{'M':>6s}{'copy':>8s}{'torch':>7s}{'triton':>7s}"
            f"{'C':>5s}{'GB/s':>6s}{'%copy':>9s}{'best C':>8s}{'%copy':>9s}")
    lines = [head]

    def num(v, fmt="{:.0f}"):
        return "-" if v is None or v != v else fmt.format(v)

    for s in doc["summary"]:
        lines.append(f"{s['dtype']:9s}{s['N']:>8d}{s['M']:>6d}{num(s.get('copy_gbps')):>8s}"
                     f"{num(s.get('torch_gbps')):>7s}{num(s.get('triton_gbps')):>7s}"
                     f"{num(s.get('auto_cluster'), '{:d}'):>5s}{num(s.get('auto_gbps')):>6s}"
                     f"{num(s.get('auto_pct_copy'), '{:.0f}%'):>9s}{num(s.get('best_cluster'), '{:d}'):>8s}"
                     f"{num(s.get('best_pct_copy'), '{:.0f}%'):>9s}")
    return "\n".join(lines)


def pipe_summary_table(doc: dict) -> str:
    """scripts/tune_cluster_pipe.py 写出的 JSON -> 等宽文本表：每个 (dtype, N) 默认配置（寄存器版或一块一行）与
    常驻内核两种装法各自最快的配置，都是拷贝带宽的百分比（同一次运行）；簇 x 线程 x 包 / 段数 / 网格里的簇数。"""
    lines = [f"{'dtype':9s}{'N':>7s}{'默认':>6s}{'cp.async':>10s}{'配置':>20s}{'TMA':>6s}{'配置':>20s}"]

    def best(row, tma):
        ok = [c for c in row["cands"] if "frac" in c and c["tma"] == tma]
        return max(ok, key=lambda c: c["frac"]) if ok else None

    def cell(c):
        if c is None:
            return f"{'-':>6s}{'':>20s}"
        cfg = f"{c['c']}x{c['b']}x{c['p']}/{c['st']}/{c['n_clusters']}"
        return f"{100 * c['frac']:5.0f}%{cfg:>20s}"

    for r in doc["rows"]:
        a, b = best(r, False), best(r, True)
        lines.append(f"{r['dtype']:9s}{r['N']:7d}{100 * r['auto']:5.0f}%  {cell(a)}{cell(b)}")
    return "\n".join(lines)
