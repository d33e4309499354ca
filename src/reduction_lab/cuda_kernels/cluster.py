"""线程块簇（thread block cluster）上的长行 softmax：softmax_cluster.cu 的包装函数。

课程页面：docs/cuda/cluster-softmax.md。

    from reduction_lab.cuda_kernels.cluster import softmax_cluster, cluster_plan
    y = softmax_cluster(x)        # x：(M, N) 的 float32 或 bfloat16 CUDA 张量，y 的 dtype 与 x 相同
    cluster_plan(262144, torch.float32)   # 不需要 GPU：每簇几块、每块几个线程、多少共享内存

一个簇（``cluster_size`` 个线程块）处理一行：每块把 1/cluster_size 行读进动态共享内存，
块间经分布式共享内存交换各自的 (最大值, exp 之和)，再从共享内存写出结果——全局内存每个元素
读一次、写一次。整行必须放得进一个簇的共享内存：至多 16 块 x 每块 227 KiB（H100/H200），
所以 float32 每行至多约 93 万个元素，bfloat16 约 186 万个。

只有 gpu 模式，而且要计算能力 9.0 以上（Hopper 起才有线程块簇）。CPU 模拟器
（:mod:`reduction_lab.simt`）不模拟线程块簇和分布式共享内存，也不接受这份源码用到的
C++ 写法（数组引用、``reinterpret_cast``、``__nv_bfloat16``），所以 sim 模式下明确报错。

CuPy（14.x）启动内核用的是 ``cuLaunchKernel``，不能在启动时指定簇的形状，所以簇的大小写在
编译期（``__cluster_dims__``），每种簇大小、每种元素类型编译一个变体（``CLUSTER_SIZE``、
``USE_BF16``）。16 块的簇超出可移植的上限 8，启动前要设置内核属性
``CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED``；超过 48 KiB 的动态共享内存要先调大
``max_dynamic_shared_size_bytes``。两者都通过 CuPy 的驱动 API 设置在编译好的内核上。
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .. import runtime
from ..checks import check_int, check_matrix, check_no_overlap, check_out
from .launcher import nvrtc_source, read_source

__all__ = ["softmax_cluster", "cluster_plan", "ClusterPlan", "CLUSTER_SIZES", "SHARED_OPTIN_SM90",
           "KERNEL_SOURCE", "KERNEL_NAME", "DTYPES", "summary_table"]

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
    if cluster_size is not None:
        check_int(cluster_size, "cluster_size", lo=1, hi=16)
        if cluster_size not in CLUSTER_SIZES:
            raise ValueError(f"cluster_size 只能是 {', '.join(map(str, CLUSTER_SIZES))} 之一，得到 {cluster_size} "
                             f"(cluster_size must be one of {CLUSTER_SIZES})")
    if block_size is not None:
        check_int(block_size, "block_size", lo=32, hi=MAX_THREADS)
        if block_size % 32:
            raise ValueError(f"block_size 必须是 32 的倍数，得到 {block_size} (block_size must be a multiple of 32)")
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

SIM_MESSAGE = (
    "softmax_cluster 只能在 gpu 模式下运行：CPU 模拟器（reduction_lab.simt）不模拟线程块簇"
    "（__cluster_dims__、cluster.sync()）和分布式共享内存（cluster.map_shared_rank），"
    "也不接受这份源码的 C++ 写法与 __nv_bfloat16；sim 模式下请用 reduction_lab.softmax(x, backend='triton') "
    "(softmax_cluster needs gpu mode: the CPU simulator models neither thread block clusters nor "
    "distributed shared memory)")


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
def _device_info(index: int) -> tuple[int, int]:
    props = torch.cuda.get_device_properties(index)
    optin = int(getattr(props, "shared_memory_per_block_optin", 0) or SHARED_OPTIN_SM90)
    return props.major, optin


def softmax_cluster(x: torch.Tensor, *, cluster_size: int | None = None, block_size: int | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) float32 / bfloat16 -> 同 dtype 的 (M, N)，一个线程块簇处理一行。

    ``cluster_size``（1、2、4、8、16）与 ``block_size``（32 的倍数，至多 1024）默认由
    :func:`cluster_plan` 选择；``out``：调用者提供的 (M, N) 连续输出，dtype 与 x 相同、与 x 不重叠。
    """
    if runtime.MODE != "gpu":
        raise runtime.ModeError(SIM_MESSAGE)
    check_matrix(x, "x", dtypes=DTYPES, device="cuda")
    M, N = x.shape
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    major, optin = _device_info(index)
    if major < 9:
        raise RuntimeError(f"线程块簇需要计算能力 9.0 以上（Hopper），这块 GPU 是 {major}.x "
                           f"(thread block clusters need compute capability 9.0 or newer)")
    plan = cluster_plan(N, x.dtype, cluster_size, block_size, shared_limit=optin)
    if M * plan.cluster_size > 2**31 - 1:
        raise ValueError(f"M * cluster_size = {M * plan.cluster_size} 超过网格上限 2**31 - 1 (grid too large)")
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    else:
        check_out(out, (M, N), x.dtype, x.device)
        check_no_overlap(out, x)
    bf16 = x.dtype == torch.bfloat16
    import cupy

    with cupy.cuda.Device(index):
        kern = _raw_kernel(plan.cluster_size, bf16)
        _prepare(kern, plan, bf16, index)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(index).cuda_stream, index)
        args = (np.uint64(x.data_ptr()), np.uint64(out.data_ptr()), np.int64(x.stride(0)), np.int64(out.stride(0)),
                np.int32(N), np.int32(plan.vecs_per_cta))
        try:
            with stream:                    # 与 torch 的当前流保持顺序
                kern((M * plan.cluster_size,), (plan.block_size,), args, shared_mem=plan.shared_bytes)
        except cupy.cuda.driver.CUDADriverError as e:
            raise RuntimeError(f"{KERNEL_NAME} 启动失败（簇 {plan.cluster_size} 块、每块 {plan.block_size} 个线程、"
                               f"{plan.shared_bytes} 字节共享内存）：{e} "
                               f"(launch of {KERNEL_NAME} failed for {plan.to_dict()})") from e
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
