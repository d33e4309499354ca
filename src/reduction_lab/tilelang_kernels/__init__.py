"""TileLang 版按行求和与 softmax 的包装函数。

课程页面：docs/tilelang/reduce.md（「TileLang 的归约」）。内核源码在 :mod:`.kernels`。

* :func:`reduce_sum` —— (M, N) -> (M,)；
* :func:`softmax` —— (M, N) -> (M, N)，按行；
* :func:`softmax_backward` —— softmax 的反向 dx = y * (dy - sum(y * dy))（:mod:`.backward`）；
* :func:`cuda_source` —— 在任何机器上（不需要 GPU）把内核降级成 sm_90 的 CUDA C 源码；
  :func:`nvcc_check` / :func:`nvcc_resources` 用 nvcc 编译它（PTX，或寄存器数与溢出字节数）；
* :func:`default_config` —— 按 (M, N) 选出的默认参数（可调参数见各函数的关键字参数）。

gpu 模式用 ``{"kind": "cuda", "arch": "sm_XY"}``（XY 取当前设备的计算能力）编译，
sim 模式用 TileLang 的 ``c`` 目标在 CPU 上编译运行。``M, N`` 是编译期常量：每种
（形状, 参数, 目标, dtype）编译一次，缓存在进程内。

dtype：float32、float16、bfloat16，结果与输入同 dtype，归约与 exp 在 float32 里做。sim 模式（``c`` 目标）
不接受 bfloat16，见 :data:`BF16_C_TARGET`。
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile

import torch

from ..checks import check_matrix
from ..runtime import DEVICE, MODE
from .cpu_pch import cpu_compiler

__all__ = ["reduce_sum", "softmax", "reduce_sum_checked", "softmax_checked", "softmax_backward", "cuda_source", "default_config", "nvcc_check",
           "nvcc_resources", "cluster_seg_len",
           "SM90_TARGET", "TUNABLES", "DTYPES", "BF16_C_TARGET", "SOFTMAX_PATHS", "SOFTMAX_TABLE",
           "softmax_phases"]

#: 不依赖 GPU 的 CUDA 目标：lead 机器（H200）的架构。
SM90_TARGET = {"kind": "cuda", "arch": "sm_90"}

#: 接受的输入 dtype（sim 模式没有 bfloat16，见 BF16_C_TARGET）
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: 为什么 sim 模式（TileLang 0.1.15 的 ``c`` 目标）不能运行 bfloat16 内核
BF16_C_TARGET = (
    "TileLang 0.1.15 的 c 目标（sim 模式）不支持 bfloat16：CPU 的编译流程只在主机端模块上把 bfloat16 "
    "存储换成 uint16（BF16StorageLegalize），设备端的 C 代码生成遇到 bfloat16 缓冲区就报 "
    "\"Cannot convert type bfloat16 to C type\"，片上的 bfloat16 缓冲区在这之前就被报告为未传入的变量，"
    "C 包装层也没有 bfloat16 的类型；这里不悄悄换成 float32 计算。请在 gpu 模式下运行，"
    "或在 sim 模式下用 float16 / float32 "
    "(TileLang 0.1.15's c target (sim mode) has no bfloat16: its CPU pipeline legalizes bfloat16 storage "
    "only in the host module, so device C codegen fails with 'Cannot convert type bfloat16 to C type'; "
    "run in gpu mode, or use float16/float32 in sim mode)")

#: 每个内核可调的关键字参数。
TUNABLES = {
    "reduce_sum": ("block_m", "block_n", "threads", "n_split", "defer_reduce"),
    "softmax": ("path", "block_m", "block_n", "threads", "n_seg", "min_blocks"),
    "softmax_backward": ("block_m", "block_n", "threads"),
}

# 生成的下标是 int32：元素个数超过它就会溢出，必须拒绝而不是算错
_MAX_ELEMS = 2**31 - 1
#: 每个 SM 最多驻留的线程数（sm_80 起 2048）：min_blocks * threads 不能超过它
_MAX_THREADS_PER_SM = 2048
# 一维网格的上限（gridDim.x）
_MAX_GRID = 2**31 - 1
# 默认每个块 threads * 16 个元素：每个线程每轮 4 次 128 位加载
_ELEMS_PER_THREAD = 16
#: 16 位按行求和换成大块（512 个线程 x 32 个元素）的最短行长：行块数少于 2 倍 SM 数时才换
_LONG_HALF_TILE = 512 * 32
_CPU_BLOCK_N = 1024
_H200_SMS = 132

_jits: dict = {}
_sources: dict = {}

#: softmax 的五种路径（:mod:`.kernels` 的 ``softmax_kernel`` 的 ``path``）：
#: ``row`` 整行装进一块（读一次）；``online`` 一块一块地走过整行，第 1 遍在线求 (m, s)、第 2 遍再读 x；
#: ``cluster`` 一行分给一个簇里的 n_seg 个线程块，每段读进寄存器、留在那里（读一次，sm_90 起才有簇；各段的
#: (m, s) 用 st.async 写进簇里每一块的共享内存）；``cluster_smem`` 与 cluster 相同，只是整段放在共享内存里
#: （不占寄存器，每个 SM 多驻留几块；求最大值、求和、写回各读一遍共享内存）；
#: ``split`` 同样一段一个线程块，但不用簇：两次启动，第 1 次写各段的 (m, s)，第 2 次重读本段、合并、写 y
#: （读两次；段数不受簇大小限制，行太长、一个簇的寄存器装不下时用它）；
#: ``grid``：一行放不进一个簇时（fp32 的 N = 2^20）读一次的做法。常驻网格（同时驻留得下的块数）的各块依次处理
#: 各段，段用 cp.async 预取进共享内存，各段的 (m, s) 经全局内存的槽位交换（:func:`.kernels.softmax_grid_kernel`；
#: sim 模式的 C 目标一次只运行一个线程块，块之间不能互相等待，与 split 一样分两次启动）。
SOFTMAX_PATHS = ("row", "online", "cluster", "cluster_smem", "split", "grid")
#: 一行分成 n_seg 段的路径（都分配 stats：split 与 sim 模式的 cluster、grid 经它交换各段的 (m, s)，gpu 模式的
#: cluster 也写出它，但交换经分布式共享内存；gpu 模式的 grid 把它当作槽位）
_SEGMENTED = ("cluster", "cluster_smem", "split", "grid")
#: 一次启动、用簇的两条路径（sim 模式没有簇，与 split 一样分两次启动）
_CLUSTERED = ("cluster", "cluster_smem")


def softmax_phases(path: str, gpu: bool) -> tuple[int, ...]:
    """softmax 内核按顺序启动的 ``phase``：split（以及 sim 模式的 cluster，C 目标没有簇）两次，
    第 1 次写各段的 (m, s)，第 2 次合并、重读 x、写 y；其余一次（phase 0）。"""
    return (1, 2) if path == "split" or (path in _CLUSTERED + ("grid",) and not gpu) else (0,)

#: gpu 模式下 softmax 的默认参数：键是 (元素字节数, N 向上取到的 2 的幂)，值是
#: path、threads，以及 row 路径的 ``elems``（每块的元素数，block_m = elems // block_n）、
#: online / cluster / cluster_smem / split 路径的 ``block_n``，cluster 与 cluster_smem 的 ``n_seg``，split 的 ``seg``
#: （段数 = ceil(N / seg)）；cluster / cluster_smem / split 的段长取 block_n 与 vec*threads 的公倍数，见 :func:`.kernels.cluster_unit`。
#: 由 ``scripts/tune_tilelang.py --json`` 在 H200 上的扫描结果改写（它打印同样格式的一张表；cluster_smem 的
#: 几项与 16 位的 16384、32768 除外，它们依据 H100 上的比较，见下）；
#: 表里没有的 N 用最近的较小一项（超过表尾的用 split，见 _SOFTMAX_LONG）。
SOFTMAX_TABLE = {
    # float32：H200 上 scripts/tune_tilelang.py --kernel softmax 的一次运行（docs/data/h200_tilelang_softmax.json）
    (4, 512): dict(path="row", threads=128, elems=4096),
    (4, 1024): dict(path="row", threads=128, elems=4096),
    (4, 2048): dict(path="row", threads=256, elems=8192),
    (4, 4096): dict(path="row", threads=512, elems=4096),
    (4, 8192): dict(path="row", threads=512, elems=8192),
    (4, 16384): dict(path="row", threads=512, elems=32768),
    (4, 32768): dict(path="row", threads=512, elems=32768),
    # N >= 65536：cluster 路径（每段读进寄存器，(m, s) 用 st.async 交换），H200 上的另一次运行
    # （docs/data/h200_tilelang_softmax_long.json）
    (4, 65536): dict(path="cluster", threads=256, block_n=1024, n_seg=8),
    (4, 131072): dict(path="cluster", threads=256, block_n=1024, n_seg=8),
    # N = 262144 与下面 16 位的 131072 … 2^20：段放在共享内存里（cluster_smem），每个 SM 多驻留几块。
    # 依据是 H100 上并排的一次比较（docs/data/h100_tilelang_cluster_smem.json，scripts/tilelang_cluster_smem.py）：
    # float32 262144 从 94% 到 96%，bfloat16 131072 从 85% 到 95%、262144 从 64% 到 93%、2^20 从 57% 到 60%
    (4, 262144): dict(path="cluster_smem", threads=256, block_n=1024, n_seg=16),
    # N = 2^20：一行（4 MiB）在 16 块的寄存器或共享内存里都放不下：常驻网格（grid 路径），每段 seg 个元素，
    # 每个 SM min_blocks 块。依据是 H100 上并排的一次扫描（docs/data/h100_tilelang_grid.json，
    # scripts/tilelang_grid_softmax.py）：fp32 从读两次的 split（64%）到 92%，bf16 从 60% 到 86%，fp16 从 63% 到 87%
    (4, 1048576): dict(path="grid", threads=256, seg=16384, min_blocks=1),
    (2, 512): dict(path="row", threads=128, elems=4096),
    (2, 1024): dict(path="row", threads=128, elems=4096),
    (2, 2048): dict(path="row", threads=128, elems=4096),
    (2, 4096): dict(path="row", threads=256, elems=4096),
    (2, 8192): dict(path="row", threads=256, elems=8192),
    # 16 位 N = 16384、32768：四块的簇（cluster 路径）代替一块读一行（row 路径）。H100 上 scripts/tune_tilelang.py 的扫描
    # （docs/data/h100_tilelang_softmax_mid16.json）：bf16 从 70%、86% 到 100%、100%，fp16 从 71%、84% 到 100%、100%；
    # 同一天的第二次扫描里新的默认在这四格是 99%–101%，两块的簇在 16384 上一样快
    (2, 16384): dict(path="cluster", threads=256, block_n=2048, n_seg=4),
    (2, 32768): dict(path="cluster", threads=256, block_n=2048, n_seg=4),
    (2, 65536): dict(path="cluster", threads=128, block_n=1024, n_seg=8),      # bfloat16 的结果，用于 16 位
    (2, 131072): dict(path="cluster_smem", threads=256, block_n=2048, n_seg=8),
    (2, 262144): dict(path="cluster_smem", threads=256, block_n=2048, n_seg=16),
    (2, 1048576): dict(path="grid", threads=256, seg=16384, min_blocks=2),
}
#: 表尾之外（更长的行）：split 路径，每段 seg 个元素（段数 = ceil(N / seg)），每个线程 64 个
_SOFTMAX_LONG = dict(path="split", threads=256, block_n=1024, seg=16384)
#: cluster 路径的一段整个放在寄存器里：每个线程最多 64 个 float32，一个线程块最多 32768 个（128 KiB，
#: 一个 SM 寄存器堆的一半）。默认表里的每个配置由 tests/test_tilelang_softmax_paths.py 在有 nvcc 的机器上用
#: nvcc -Xptxas -v 检查不溢出；1024 个线程各 64 个（寄存器上限 64）会溢出。簇最多 16 个线程块：超过 8 个
#: （可移植的上限）要先给内核设置 cudaFuncAttributeNonPortableClusterSizeAllowed，TileLang 生成的主机代码
#: 在启动簇内核之前都设置它；sm_90（H100 / H200）支持 16。
_CLUSTER_PER_THREAD = 64
_CLUSTER_SEG_MAX = 32768
_CLUSTER_MAX = 16


def _split_segs(N: int, seg: int) -> int:
    """split 路径每段至多 ``seg`` 个元素时的段数（至少 2）。"""
    return max(2, -(-N // seg))


#: cluster_smem 路径一段在共享内存里的上限（字节）：sm_90 每块至多 227 KiB 动态共享内存，留出归约的工作区
_SMEM_SEG_BYTES = 192 * 1024
#: sm_90 每个 SM 的共享内存与每块的上限（字节），每块另有 1 KiB 保留
_SMEM_PER_SM = 228 * 1024
_SMEM_PER_BLOCK = 227 * 1024
#: grid 路径发布一项之后隔几轮再写出它（共享内存里 2 + GRID_DELAY 段轮流用）：H100 上 1 比 0 快 15–20 个点
GRID_DELAY = 1


def grid_shared_bytes(seg: int, threads: int, elem_size: int) -> int:
    """grid 路径每块的共享内存（字节）：2 + GRID_DELAY 段，加上两次块内归约的工作区与全行的 (M, 1/S)。"""
    return (2 + GRID_DELAY) * seg * elem_size + 8 * threads + 1024


def grid_seg(N: int, seg_max: int, threads: int, elem_size: int) -> int | None:
    """grid 路径的段长：整除 N、是 16 字节向量 x threads 的倍数、不超过 ``seg_max`` 的最大的数；没有时 None。"""
    chunk = (16 // elem_size) * threads
    for k in range(seg_max // chunk, 0, -1):
        if N % (k * chunk) == 0:
            return k * chunk
    return None


def grid_blocks(M: int, n_seg: int, min_blocks: int, sms: int) -> int:
    """grid 路径的块数：每个 SM min_blocks 块（__launch_bounds__ 与共享内存保证驻留得下），不多于总段数。"""
    return min(min_blocks * sms, M * n_seg)


def _cluster_fits(seg: int, threads: int, path: str = "cluster", elem_size: int = 4) -> bool:
    """一段放得下：cluster / split 在寄存器里（每个线程至多 64 个、每段至多 32768 个），cluster_smem 在共享内存里。"""
    if path == "cluster_smem":
        return seg * elem_size <= _SMEM_SEG_BYTES
    return seg // threads <= _CLUSTER_PER_THREAD and seg <= _CLUSTER_SEG_MAX


def cluster_seg_len(N: int, n_seg: int, block_n: int, threads: int, elem_size: int = 4) -> int:
    """cluster 路径一段的元素数：不小于 ceil(N / n_seg)，取 :func:`.kernels.cluster_unit` 的倍数（与内核相同）。"""
    from .kernels import cluster_unit

    unit = cluster_unit(block_n, threads, "float32" if elem_size == 4 else "float16")
    return -(-(-(-N // n_seg)) // unit) * unit


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _is_pow2(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and (n & (n - 1)) == 0


def _kernels():
    from . import backward, kernels

    return {"reduce_sum": kernels.reduce_sum_kernel, "softmax": kernels.softmax_kernel,
            "softmax_grid": kernels.softmax_grid_kernel,
            "softmax_backward": backward.softmax_backward_kernel}


def retarget(jit_kernel, target):
    """同一个 @tilelang.jit 内核换一个编译目标（各自有自己的进程内缓存；同一对只生成一次）。
    实验的骨架也用它在 CPU 的 ``"c"`` 目标与当前 GPU 之间切换。"""
    key = (id(jit_kernel), repr(target))
    if key not in _jits:
        _jits[key] = (jit_kernel, dataclasses.replace(jit_kernel, target=target))
    return _jits[key][1]


def _jit_for(kernel: str, target):
    return retarget(_kernels()[kernel], target)


def current_target(device: torch.device):
    """当前模式的编译目标：sim 模式是 TileLang 的 ``"c"``（CPU），gpu 模式是该设备的 ``sm_XY``。"""
    if MODE == "sim":
        return "c"
    return _cuda_target(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _cuda_target(index: int) -> dict:
    major, minor = torch.cuda.get_device_capability(index)
    return {"kind": "cuda", "arch": f"sm_{major}{minor}"}


@functools.lru_cache(maxsize=None)
def _sm_count() -> int:
    if MODE == "gpu":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return _H200_SMS


def default_config(kernel: str, M: int, N: int, gpu: bool | None = None, elem_size: int = 4) -> dict:
    """按 (M, N) 选默认参数。``gpu=None`` 时按当前模式；``elem_size`` 是元素字节数（softmax 按它查表）。

    softmax：gpu 模式查 :data:`SOFTMAX_TABLE`（表尾之外用 split 路径）；sim 模式 ``N <= 1024`` 时 row 路径，
    更长时 online 路径（``block_n=1024``）。

    gpu：256 个线程，一块 ``threads*16`` 个元素（短行时一块装几行）；16 位的行长到 16384 以上、行块数
    不到 2 倍 SM 数时换成 512 个线程、一块 ``threads*32`` 个元素；行块数不足
    SM 数时，把一行切成 ``n_split`` 段分给几个块，
    再用同一个内核把 (M, n_split) 的部分和加起来（第二阶段）。
    sim（C 目标，单线程）：一块一行，``block_n`` 不超过 1024，不切分。
    """
    if kernel not in TUNABLES:
        raise ValueError(f"未知的内核 {kernel!r}，可选：{', '.join(TUNABLES)} (unknown kernel {kernel!r})")
    gpu = (MODE == "gpu") if gpu is None else gpu
    if kernel == "softmax":
        return _softmax_default(M, N, gpu, elem_size)
    if not gpu:
        cfg = {"block_m": 1, "block_n": min(_next_pow2(N), _CPU_BLOCK_N), "threads": 256}
        if kernel == "reduce_sum":
            cfg.update(n_split=1, defer_reduce=True)
        return cfg
    threads, ept = 256, _ELEMS_PER_THREAD
    if kernel == "reduce_sum" and elem_size == 2 and N >= _LONG_HALF_TILE and M < 2 * _sm_count():
        # 16 位的长行、每个 SM 不到两个行块：每块 512 个线程、每个线程 32 个元素（一块 16384 个），
        # 每个 SM 上同时在途的加载多几倍（H200 上 bf16 的 256 x 262144 到了拷贝的 96%，docs/data/h200.json 的 row-sum）
        threads, ept = 512, 2 * _ELEMS_PER_THREAD
    tile = threads * ept
    block_n = min(_next_pow2(N), tile)
    block_m = max(1, tile // block_n)
    block_m = min(block_m, _next_pow2(M))  # 行很少时不要空转
    # 块很小时（短行且行少）减少线程数：每个线程至少 4 个元素，至少一个 warp
    threads = max(32, min(threads, block_m * block_n // 4))
    cfg = {"block_m": block_m, "block_n": block_n, "threads": threads}
    if kernel == "reduce_sum":
        row_blocks = -(-M // block_m)
        # 行块数少于 SM 数时才切分：H200 上一块一行、段内循环的版本在 N = 512 … 262144
        # 都接近带宽上限，而切分后的第二阶段和更多的块反而更慢
        want = _sm_count()
        n_split = 1
        if row_blocks < want:
            # 每段至少 4 个块，否则切分得不偿失
            n_split = max(1, min(_next_pow2(-(-want // row_blocks)), _prev_pow2(N // (4 * block_n))))
        cfg.update(n_split=n_split, defer_reduce=True)
    return cfg


def _softmax_default(M: int, N: int, gpu: bool, elem_size: int) -> dict:
    block_n = _next_pow2(N)
    if not gpu:
        if block_n <= _CPU_BLOCK_N:
            return {"path": "row", "block_m": 1, "block_n": block_n, "threads": 256, "n_seg": 1}
        return {"path": "online", "block_m": 1, "block_n": _CPU_BLOCK_N, "threads": 256, "n_seg": 1}
    size = 2 if elem_size == 2 else 4
    keys = sorted(n for (e, n) in SOFTMAX_TABLE if e == size)
    bucket = max([n for n in keys if n <= block_n], default=keys[0])
    entry = dict(SOFTMAX_TABLE[(size, bucket)]) if block_n <= keys[-1] else dict(_SOFTMAX_LONG)
    path = entry["path"]
    threads = entry["threads"]
    if path == "row":
        block_m = max(1, min(entry.get("elems", block_n) // block_n, _next_pow2(M)))
        # 块很小时（行少）减少线程数：每个线程至少 4 个元素，至少一个 warp
        threads = max(32, min(threads, block_m * block_n // 4))
        return {"path": "row", "block_m": block_m, "block_n": block_n, "threads": threads, "n_seg": 1}
    if path == "grid":
        seg = grid_seg(N, entry["seg"], threads, size)
        mb = entry["min_blocks"]
        if seg is not None and N // seg <= mb * _sm_count() and N // seg <= threads:
            return {"path": "grid", "block_m": 1, "block_n": (16 // size) * threads, "threads": threads,
                    "n_seg": N // seg, "min_blocks": mb}
        # N 没有合适的段长（例如不是 16 字节向量 x threads 的倍数）：读两次的 split
        entry, path = dict(_SOFTMAX_LONG), "split"
        threads = entry["threads"]
    bn = min(entry["block_n"], block_n)
    if path in _CLUSTERED:
        n_seg = entry["n_seg"]
        seg = cluster_seg_len(N, n_seg, bn, threads, size)
        if _cluster_fits(seg, threads, path, size) and n_seg <= _CLUSTER_MAX and N > bn and M * n_seg <= _MAX_GRID:
            cfg = {"path": path, "block_m": 1, "block_n": bn, "threads": threads, "n_seg": n_seg}
            if entry.get("min_blocks"):
                cfg["min_blocks"] = entry["min_blocks"]
            return cfg
        # 一段放不下（N 在表里两项之间，比这一项长得多）：改用 split，段数随 N 增加
        entry, path = dict(_SOFTMAX_LONG), "split"
        threads, bn = entry["threads"], min(entry["block_n"], block_n)
    if path == "split":
        n_seg = _split_segs(N, entry["seg"])
        seg = cluster_seg_len(N, n_seg, bn, threads, size)
        if N > bn and M * n_seg <= _MAX_GRID and _cluster_fits(seg, threads):
            return {"path": "split", "block_m": 1, "block_n": bn, "threads": threads, "n_seg": n_seg}
    return {"path": "online", "block_m": 1, "block_n": bn, "threads": threads, "n_seg": 1}


def _prev_pow2(n: int) -> int:
    if n < 1:
        return 1
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def _resolve(kernel: str, M: int, N: int, gpu: bool, params: dict, elem_size: int = 4) -> dict:
    unknown = set(params) - set(TUNABLES[kernel])
    if unknown:
        raise TypeError(f"{kernel} 不认识的参数：{', '.join(sorted(unknown))}；可调参数："
                        f"{', '.join(TUNABLES[kernel])} (unknown keyword arguments {sorted(unknown)})")
    if kernel == "softmax":
        return _resolve_softmax(M, N, gpu, elem_size, {k: v for k, v in params.items() if v is not None})
    cfg = default_config(kernel, M, N, gpu, elem_size)
    given = {k: v for k, v in params.items() if v is not None}
    if gpu and "block_n" in given and "block_m" not in given and _is_pow2(given["block_n"]):
        # 只给了块宽：块的元素数仍按每线程 16 个来定行数
        threads = given.get("threads", cfg["threads"])
        if isinstance(threads, int) and threads > 0:
            cfg["block_m"] = max(1, min(_next_pow2(M), threads * _ELEMS_PER_THREAD // given["block_n"]))
    cfg.update(given)
    for name in ("block_m", "block_n"):
        # 非 2 的幂的归约宽度在上游有丢车道的报告（tile-ai/tilelang#2542），这里只收 2 的幂
        if not _is_pow2(cfg[name]):
            raise ValueError(f"{name} 必须是 2 的正整数次幂，得到 {cfg[name]!r} ({name} must be a power of two)")
    if not (isinstance(cfg["threads"], int) and not isinstance(cfg["threads"], bool)
            and cfg["threads"] % 32 == 0 and 32 <= cfg["threads"] <= 1024):
        raise ValueError(f"threads 必须是 32 的倍数且在 32..1024 之间，得到 {cfg['threads']!r} "
                         f"(threads must be a multiple of 32 in 32..1024)")
    if "n_split" in cfg and not (isinstance(cfg["n_split"], int) and not isinstance(cfg["n_split"], bool)
                                 and cfg["n_split"] >= 1):
        raise ValueError(f"n_split 必须是正整数，得到 {cfg['n_split']!r} (n_split must be a positive int)")
    if "defer_reduce" in cfg and not isinstance(cfg["defer_reduce"], bool):
        raise TypeError(f"defer_reduce 必须是 bool，得到 {cfg['defer_reduce']!r} (defer_reduce must be a bool)")
    return cfg


def _check_common(cfg: dict) -> None:
    """softmax 的块形状与线程数。softmax 的每条路径都跨线程归约，TileLang 0.1.15 的 AllReduce（异或蝶形）
    只接受 2 的幂个线程：threads=96 在 gpu 模式下降级时就失败，所以这里两种模式都只收 32..1024 的 2 的幂。"""
    if not (_is_pow2(cfg["threads"]) and 32 <= cfg["threads"] <= 1024):   # 先查线程数：grid 的 block_n 由它推出
        raise ValueError(f"softmax 的 threads 必须是 32..1024 之间的 2 的幂（跨线程归约的要求），得到 "
                         f"{cfg['threads']!r} (softmax threads must be a power of two in 32..1024)")
    for name in ("block_m", "block_n"):
        if not _is_pow2(cfg[name]):
            raise ValueError(f"{name} 必须是 2 的正整数次幂，得到 {cfg[name]!r} ({name} must be a power of two)")


def _resolve_softmax(M: int, N: int, gpu: bool, elem_size: int, given: dict) -> dict:
    """softmax 的参数：没给的按 :func:`default_config`；只给 ``block_n`` 时按它选 row（装得下整行）或
    online 路径，给了 ``n_seg`` 就是 cluster 路径（默认路径是 split 时是 split）。"""
    cfg = default_config("softmax", M, N, gpu, elem_size)
    path = given.get("path")
    if path is None:
        if given.get("n_seg", 1) != 1:
            path = cfg["path"] if cfg["path"] in ("split", "grid") else "cluster"
        elif "block_n" in given:
            path = "row" if isinstance(given["block_n"], int) and given["block_n"] >= N else "online"
        else:
            path = cfg["path"]
    if path not in SOFTMAX_PATHS:
        raise ValueError(f"path 只能是 {', '.join(SOFTMAX_PATHS)} 之一，得到 {path!r} (unknown softmax path {path!r})")
    if path != cfg["path"]:
        # 换了路径：默认值按新路径重新定
        bn = given.get("block_n", _next_pow2(N) if path == "row" else min(_next_pow2(N), 4096 if gpu else 1024))
        n_seg = 1
        if path in _CLUSTERED:
            n_seg = 2
        elif path == "split":     # 没给段数时每段至多 _SOFTMAX_LONG["seg"] 个元素（gpu 模式下放得进寄存器）
            bn = given.get("block_n", min(_next_pow2(N), _SOFTMAX_LONG["block_n"]))
            n_seg = _split_segs(N, _SOFTMAX_LONG["seg"])
        threads = _SOFTMAX_LONG["threads"] if path == "split" else 256
        cfg = {"path": path, "block_m": 1, "block_n": bn, "threads": threads, "n_seg": n_seg}
        if path == "grid":        # 默认每段至多 16384 个元素、每个 SM 一块；线程数不合法时由下面的检查报错
            threads = given.get("threads", 256)
            ok = isinstance(threads, int) and not isinstance(threads, bool) and threads > 0
            seg = grid_seg(N, 16384, threads, elem_size) if ok else None
            cfg = {"path": path, "block_m": 1, "block_n": (16 // elem_size) * threads if ok else 1024,
                   "threads": threads, "n_seg": N // seg if seg else 2, "min_blocks": 1}
    cfg.update(given)
    cfg["path"] = path
    _check_common(cfg)
    n_seg = cfg["n_seg"]
    if not (isinstance(n_seg, int) and not isinstance(n_seg, bool) and n_seg >= 1):
        raise ValueError(f"n_seg 必须是正整数，得到 {n_seg!r} (n_seg must be a positive int)")
    if path == "row" and cfg["block_n"] < N:
        raise ValueError(f"path='row' 要把整行装进一块，block_n={cfg['block_n']} 小于 N={N}；"
                         f"用 path='online' 或更大的 block_n (row path needs block_n >= N)")
    mb = cfg.get("min_blocks", 0)
    if not (isinstance(mb, int) and not isinstance(mb, bool) and mb >= 0):
        raise ValueError(f"min_blocks 必须是非负整数，得到 {mb!r} (min_blocks must be a non-negative int)")
    if mb and path not in _SEGMENTED:
        raise ValueError(f"min_blocks 只用于 path='cluster'、'cluster_smem'、'split' 与 'grid'，得到 path={path!r} "
                         f"(min_blocks is only for the cluster, cluster_smem, split and grid paths)")
    if mb * cfg["threads"] > _MAX_THREADS_PER_SM:
        raise ValueError(f"min_blocks={mb} 个 {cfg['threads']} 线程的块超过每个 SM 的 {_MAX_THREADS_PER_SM} 个线程 "
                         f"(min_blocks * threads exceeds {_MAX_THREADS_PER_SM} threads per SM)")
    if path == "grid" and not mb:
        raise ValueError("path='grid' 的 min_blocks 必须至少是 1：网格的块数是每个 SM min_blocks 块 "
                         "(grid path needs min_blocks >= 1)")
    if not mb:
        cfg.pop("min_blocks", None)   # 0 = 不加 __launch_bounds__ 的第二个参数，与没给相同
    if path not in _SEGMENTED and n_seg != 1:
        raise ValueError(f"n_seg 只用于 path='cluster'、'cluster_smem'、'split' 与 'grid'，得到 path={path!r}、"
                         f"n_seg={n_seg} (n_seg is only for the cluster, cluster_smem, split and grid paths)")
    if path in _SEGMENTED:
        if cfg["block_m"] != 1:
            raise ValueError(f"path={path!r} 一个线程块处理一行的一段，block_m 必须是 1，得到 {cfg['block_m']} "
                             f"({path} path needs block_m=1)")
        if path in _CLUSTERED and (n_seg < 2 or n_seg > _CLUSTER_MAX):
            raise ValueError(f"path={path!r} 的 n_seg 必须在 2..{_CLUSTER_MAX} 之间（簇大小的上限），得到 {n_seg}；"
                             f"段数更多时用 path='split' (cluster size must be in 2..{_CLUSTER_MAX})")
        if path in ("split", "grid") and n_seg < 2:
            raise ValueError(f"path={path!r} 的 n_seg 必须至少是 2，得到 {n_seg} ({path} path needs n_seg >= 2)")
        if path == "grid":
            _check_grid(M, N, cfg, elem_size, gpu)
            return cfg
        if M * n_seg > _MAX_GRID:
            raise ValueError(f"path={path!r}：网格有 M * n_seg = {M * n_seg} 个线程块，超过上限 {_MAX_GRID} "
                             f"(grid of M * n_seg blocks exceeds {_MAX_GRID})")
        seg = cluster_seg_len(N, n_seg, cfg["block_n"], cfg["threads"], elem_size)
        if gpu and path == "cluster_smem" and not _cluster_fits(seg, cfg["threads"], path, elem_size):
            raise ValueError(f"path='cluster_smem'：每段 {seg} 个元素（{seg * elem_size} 字节），共享内存里放不下"
                             f"（每段至多 {_SMEM_SEG_BYTES} 字节）；加大 n_seg，或用 path='split' "
                             f"(segment of {seg * elem_size} bytes exceeds {_SMEM_SEG_BYTES} bytes of shared memory)")
        if gpu and path != "cluster_smem" and not _cluster_fits(seg, cfg["threads"]):
            raise ValueError(f"path={path!r}：每段 {seg} 个元素、{cfg['threads']} 个线程每个持有 "
                             f"{seg // cfg['threads']} 个，寄存器里放不下（每个线程至多 {_CLUSTER_PER_THREAD} 个、"
                             f"每段至多 {_CLUSTER_SEG_MAX} 个）；加大 n_seg 或 threads，或用 path='split' "
                             f"(segment too long for registers: {seg} values, {seg // cfg['threads']} per thread; "
                             f"limits {_CLUSTER_SEG_MAX} and {_CLUSTER_PER_THREAD})")
    return cfg


def _check_grid(M: int, N: int, cfg: dict, elem_size: int, gpu: bool) -> None:
    """grid 路径的参数：各段一样长、整除 N，段长是 16 字节向量 x threads 的倍数（block_n 也是它，sim 模式的
    两次启动按 block_n 分段）；gpu 模式下每个 SM 放得下 min_blocks 块，一行的段数不多于网格的块数（否则同一块
    拿到同一行的两段，互相等待会死锁），段数不多于线程数（一个 warp 的车道各轮询几个槽位）。"""
    n_seg, threads, mb = cfg["n_seg"], cfg["threads"], cfg["min_blocks"]
    vec = 16 // elem_size
    chunk = vec * threads
    if N % n_seg or (N // n_seg) % chunk:
        raise ValueError(f"path='grid'：N={N} 要分成 n_seg={n_seg} 段一样长的段，每段是 {chunk} 个元素"
                         f"（{threads} 个线程各一个 16 字节向量）的倍数；换一个 n_seg 或 threads，或用 path='split' "
                         f"(grid path needs N divisible into n_seg segments of a multiple of {chunk} elements)")
    if cfg["block_n"] != chunk:
        raise ValueError(f"path='grid' 的 block_n 是每个线程一个 16 字节向量：{chunk}（{threads} 个线程），得到 "
                         f"{cfg['block_n']} (grid path uses block_n = 16-byte vector x threads = {chunk})")
    seg = N // n_seg
    smem = grid_shared_bytes(seg, threads, elem_size)
    if gpu and (smem > _SMEM_PER_BLOCK or mb * (smem + 1024) > _SMEM_PER_SM):
        raise ValueError(f"path='grid'：每块 {smem} 字节共享内存（{2 + GRID_DELAY} 段、每段 {seg} 个元素），"
                         f"一个 SM 放不下 min_blocks={mb} 块（每个 SM {_SMEM_PER_SM} 字节）；加大 n_seg 或减小 min_blocks "
                         f"(grid path: {mb} blocks of {smem} bytes of shared memory do not fit on one SM)")
    if n_seg > threads:
        raise ValueError(f"path='grid' 的 n_seg={n_seg} 多于每块的线程数 {threads} (n_seg must not exceed threads)")
    if gpu and n_seg > mb * _sm_count():
        raise ValueError(f"path='grid'：一行 {n_seg} 段多于网格的 {mb * _sm_count()} 块（每个 SM {mb} 块），"
                         f"同一块会拿到同一行的两段而死锁；减小 n_seg 或加大 min_blocks "
                         f"(grid path: {n_seg} segments per row exceed the {mb * _sm_count()} resident blocks)")


#: TileLang 生成的 128 位访存（float4 / uint4）假定每个张量的首地址 16 字节对齐：它从编译期的 N 证明各行
#: 相对首地址对齐，却不检查首地址本身（``flat[1:].view(M, N)`` 这样的视图在 GPU 上报 misaligned address）。
_ALIGN = 16


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """首地址没有 16 字节对齐时换成一份对齐的副本（新分配的存储总是对齐的），否则原样返回。"""
    return t.clone() if t.data_ptr() % _ALIGN else t


def _check(x: torch.Tensor, name: str = "x") -> None:
    check_matrix(x, name, dtypes=DTYPES, device=DEVICE)
    if MODE == "sim" and x.dtype == torch.bfloat16:
        raise TypeError(f"{name}：{BF16_C_TARGET}")
    if x.stride(0) != x.shape[1] and x.shape[0] > 1:
        raise ValueError(f"{name} 必须是行主序连续张量，得到 stride {tuple(x.stride())}；可以先调用 .contiguous() "
                         f"({name} must be contiguous)")
    if x.numel() > _MAX_ELEMS:
        raise ValueError(f"{name} 有 {x.numel()} 个元素，超过 TileLang 生成代码的 int32 下标上限 {_MAX_ELEMS} "
                         f"(too many elements for int32 indexing)")


#: (内核, 形状, dtype, 设备, 参数) -> TileLang 编译好的内核对象。@tilelang.jit 每次调用都要重新解析全部参数、
#: 计算缓存键（几十微秒）；同一形状再次调用时直接调用编译好的内核。
_COMPILED: dict = {}


def _run(kernel: str, x: torch.Tensor, cfg: dict, *more: torch.Tensor) -> torch.Tensor:
    gpu = MODE == "gpu"
    key = (kernel, tuple(x.shape), x.dtype, x.device, tuple(cfg.items()), tuple(tuple(t.shape) for t in more))
    compiled = _COMPILED.get(key)
    if compiled is not None:
        return compiled(x, *more)
    jit = _jit_for(kernel, current_target(x.device))
    kw = dict(cpu=not gpu, dtype=_dtype_name(x.dtype), **cfg)
    with cpu_compiler(MODE == "sim"):   # 第一次调用要编译：sim 模式的 C 目标经预编译头（cpu_pch）
        out = jit(x, *more, **kw)
    compiled = _compiled_kernel(jit, (x, *more), kw)
    if compiled is not None:
        _COMPILED[key] = compiled
    return out


def _compiled_kernel(jit, tensors, kw):
    """TileLang 为这组参数编译好的内核对象（它的调用参数恰好是这些张量时）；接口不是预期的样子时返回 None，
    之后每次照常经 @tilelang.jit 调用。"""
    try:
        key, kernel_args = jit.func.parse_args(*tensors, **kw)
        compiled = jit._kernel_cache.get(key)
    except Exception:       # noqa: BLE001 - 私有接口变了：不走快速路径
        return None
    if compiled is None or len(kernel_args) != len(tensors) \
            or any(a is not t for a, t in zip(kernel_args.values(), tensors)):
        return None
    return compiled


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def reduce_sum(x: torch.Tensor, *, block_m: int | None = None, block_n: int | None = None,
               threads: int | None = None, n_split: int | None = None,
               defer_reduce: bool | None = None) -> torch.Tensor:
    """每行求和：(M, N) -> (M,)，dtype 与 x 相同（float32、float16、bfloat16；用 float32 累加）。

    可调参数（不给就按 :func:`default_config`）：``block_m`` 每块几行，``block_n`` 每块几列
    （都是 2 的幂），``threads`` 每个线程块的线程数，``n_split`` 把一行切成几段分给几个线程块
    （>1 时再用同一内核做第二阶段求和），``defer_reduce`` 为 True 时在循环里逐元素累加、
    循环结束后只做一次块内归约，为 False 时每个块都 ``T.reduce_sum`` 一次再累加。
    gpu 模式下只给 ``block_n`` 时，``block_m`` 取 ``threads*16 // block_n``（每线程 16 个元素）。
    """
    _check(x)
    M, N = x.shape
    gpu = MODE == "gpu"
    cfg = _resolve("reduce_sum", M, N, gpu,
                   dict(block_m=block_m, block_n=block_n, threads=threads, n_split=n_split,
                        defer_reduce=defer_reduce), elem_size=x.element_size())
    partial = _run("reduce_sum", _aligned(x), cfg)  # (M, n_split)；分段时是 float32
    if cfg["n_split"] == 1:
        return partial[:, 0]
    # 第二阶段：同一个内核把每行的 n_split 个 float32 部分和加起来，最后舍入一次到 x 的 dtype
    return reduce_sum(partial).to(x.dtype)


def softmax(x: torch.Tensor, *, path: str | None = None, block_m: int | None = None,
            block_n: int | None = None, threads: int | None = None, n_seg: int | None = None,
            min_blocks: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) -> (M, N)，dtype 与 x 相同（计算用 float32）。五种路径（``path``，见
    :data:`SOFTMAX_PATHS`，默认按 :func:`default_config`）：``row`` 整行装进一块，读一次 x；``online``
    一块一块地走过整行，第 1 遍每个车道在线维护 (m, s)、第 2 遍再读 x；``cluster`` 一行分给一个簇里的
    ``n_seg`` 个线程块，每段读进寄存器、只求一次 exp，各段的 (m, s) 经分布式共享内存交换后写回（sim 模式分两次
    启动，第二次重读 x）；``cluster_smem`` 与 cluster 相同，只是整段用 cp.async 搬进共享内存（gpu 模式下一段至多
    192 KiB，与线程数无关）；
    ``split`` 同样分段，但不用簇、两次启动（两种模式都是），段数不受簇大小限制（gpu 模式下行太长、一个簇的
    寄存器装不下时的默认）。
    cluster / cluster_smem / split 路径的段长是 ``block_n`` 与 ``vec*threads``（vec 是 16 字节的元素数）的公倍数，
    gpu 模式下 cluster / split 的一段至多 32768 个元素、每个线程至多 64 个。
    ``min_blocks``（cluster / cluster_smem / split）：``__launch_bounds__`` 的第二个参数，要 ptxas 把寄存器压到每个 SM 容得下
    这么多块（0 或不给：不加）。

    ``out``：调用者提供的输出（形状、dtype、设备与 x 相同的连续张量），内核直接写进去。
    同一个编译结果服务所有行数 M（M 是运行期变量）：每种 (N, dtype, 参数) 只编译一次。"""
    _check(x)
    M, N = x.shape
    gpu = MODE == "gpu"
    cfg = _resolve("softmax", M, N, gpu, dict(path=path, block_m=block_m, block_n=block_n, threads=threads,
                                              n_seg=n_seg, min_blocks=min_blocks), elem_size=x.element_size())
    if out is None:
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    else:
        from ..checks import check_out

        check_out(out, (M, N), x.dtype, x.device)
        if out.data_ptr() % _ALIGN:    # 内核写进一份对齐的输出，再拷进调用者的 out
            out.copy_(softmax(x, path=path, block_m=block_m, block_n=block_n, threads=threads, n_seg=n_seg))
            return out
    x = _aligned(x)
    if cfg["path"] == "grid" and gpu:
        # 槽位：每段 8 字节，s 填成 -1 作「还没到」的哨兵（一次填充，与这次调用在同一个流里排队）
        stats = torch.full((M, cfg["n_seg"], 2), -1.0, dtype=torch.float32, device=x.device)
        _run_grid(x, out, stats, cfg)
    elif cfg["path"] in _SEGMENTED:
        stats = torch.empty((M, cfg["n_seg"], 2), dtype=torch.float32, device=x.device)
        run_cfg = dict(cfg, path="split") if cfg["path"] == "grid" else cfg   # sim 模式的 grid：两次启动
        for phase in softmax_phases(cfg["path"], gpu):
            _run_softmax(x, out, stats, run_cfg, phase)
    else:
        _run_softmax(x, out, _no_stats(x.device), cfg, 0)
    return out


_NO_STATS: dict = {}


def _no_stats(device: torch.device) -> torch.Tensor:
    """row / online 路径不用 stats：每个设备一份 (1, 1, 2) 的占位张量。"""
    t = _NO_STATS.get(device)
    if t is None:
        t = _NO_STATS[device] = torch.zeros((1, 1, 2), dtype=torch.float32, device=device)
    return t


#: (N, dtype, 设备, 参数, phase) -> 编译好的 softmax 内核；M 是运行期变量，不在键里
_SOFTMAX_COMPILED: dict = {}


def _run_softmax(x: torch.Tensor, y: torch.Tensor, stats: torch.Tensor, cfg: dict, phase: int) -> None:
    key = (x.shape[1], x.dtype, x.device, tuple(cfg.items()), phase)
    _run_cached(key, "softmax", x, y, stats, lambda: dict(cpu=MODE != "gpu", dtype=_dtype_name(x.dtype), phase=phase,
                                                          **cfg))


def _run_cached(key, kernel: str, x: torch.Tensor, y: torch.Tensor, stats: torch.Tensor, kwargs) -> None:
    """按 ``key`` 取编译好的 softmax 内核并调用；第一次经 @tilelang.jit（参数由 ``kwargs()`` 给出）编译、运行、记下。"""
    compiled = _SOFTMAX_COMPILED.get(key)
    if compiled is not None:
        compiled(x, y, stats)
        return
    jit = _jit_for(kernel, current_target(x.device))
    kw = kwargs()
    with cpu_compiler(MODE == "sim"):
        jit(x, y, stats, **kw)
    compiled = _compiled_kernel(jit, (x, y, stats), kw)
    if compiled is not None:
        _SOFTMAX_COMPILED[key] = compiled


def grid_kwargs(M: int, N: int, cfg: dict, dtype: str, sms: int) -> dict:
    """grid 路径的 :func:`.kernels.softmax_grid_kernel` 参数（块数按 M 与 SM 数定）。"""
    n_seg = cfg["n_seg"]
    return dict(blocks=grid_blocks(M, n_seg, cfg["min_blocks"], sms), threads=cfg["threads"], n_seg=n_seg,
                seg_len=N // n_seg, delay=GRID_DELAY, min_blocks=cfg["min_blocks"], dtype=dtype)


def _run_grid(x: torch.Tensor, y: torch.Tensor, stats: torch.Tensor, cfg: dict) -> None:
    M, N = x.shape
    kw = grid_kwargs(M, N, cfg, _dtype_name(x.dtype), _sm_count())
    # 块数随 M（行少时）变：在键里；path 也在（键的第 4 项与别的路径一样能按 path 查）
    key = (N, x.dtype, x.device, tuple(sorted(dict(kw, path="grid").items())), 0)
    _run_cached(key, "softmax_grid", x, y, stats, lambda: kw)


#: reduction_lab.api 检查过输入之后的默认配置：(操作, M, N, dtype, 设备) -> softmax：(可调用对象, 占位的 stats)；
#: 求和：(可调用对象, 是否直接调用 FFI)
_CHECKED: dict = {}


def _ffi_entry(compiled, result_idx: list, callee_allocated: bool):
    """TVM-FFI 适配器下编译好的内核底下的 FFI 可执行函数：它的 Python 包装每次调用要重新数参数、找输出的设备、
    拼参数表（H200 的主机上约 2.5 µs），而这些输入 api 已经检查过，形状、dtype 与步长由编译好的主机代码再查一遍。
    只在输出的约定与预期相同时返回它（softmax：输出由调用者传入；求和：输出由 FFI 分配，最后一个参数是分配器的锚），
    否则返回 None，照常调用编译好的内核对象。"""
    adapter = getattr(compiled, "adapter", None)
    try:
        if type(adapter).__name__ != "TVMFFIKernelAdapter" or list(adapter.result_idx) != result_idx \
                or bool(getattr(adapter, "_ffi_callee_allocated_output_abi", False)) != callee_allocated:
            return None
        return adapter._get_executable()
    except Exception:       # noqa: BLE001 - 私有接口变了：不走快速路径
        return None


def softmax_checked(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """默认参数的 :func:`softmax`，``x`` 与 ``out`` 已由 :mod:`reduction_lab.api` 检查过：同一形状第二次起
    不再选参数、不再拼缓存键，直接调用编译好的内核。cluster 路径、sim 模式、行距不等于行长的输入照常经
    :func:`softmax`（它给出同样的结果与错误）。"""
    M, N = x.shape
    # 每次调用都经过这里：首地址不对齐的输入或输出交给 softmax（它换成对齐的副本）
    if MODE != "gpu" or (M > 1 and x.stride(0) != N) or x.data_ptr() % _ALIGN \
            or (out is not None and out.data_ptr() % _ALIGN):
        return softmax(x, out=out)
    key = ("softmax", M, N, x.dtype, x.get_device())
    entry = _CHECKED.get(key)
    if entry is None:
        y = softmax(x, out=out)
        cfg = _resolve("softmax", M, N, True, {}, elem_size=x.element_size())
        if cfg["path"] not in _SEGMENTED:
            hit = _SOFTMAX_COMPILED.get((N, x.dtype, x.device, tuple(cfg.items()), 0))
            if hit is not None:
                _CHECKED[key] = (_ffi_entry(hit, [], False) or hit, _no_stats(x.device))
        return y
    call, stats = entry
    y = torch.empty_like(x) if out is None else out
    call(x, y, stats)
    return y


def reduce_sum_checked(x: torch.Tensor) -> torch.Tensor:
    """默认参数的 :func:`reduce_sum`，``x`` 已由 :mod:`reduction_lab.api` 检查过（同上）。"""
    M, N = x.shape
    if MODE != "gpu" or (M > 1 and x.stride(0) != N) or x.data_ptr() % _ALIGN:
        return reduce_sum(x)
    key = ("reduce_sum", M, N, x.dtype, x.get_device())
    entry = _CHECKED.get(key)
    if entry is None:
        res = reduce_sum(x)
        cfg = _resolve("reduce_sum", M, N, True, {}, elem_size=x.element_size())
        if cfg["n_split"] == 1:
            hit = _COMPILED.get(("reduce_sum", (M, N), x.dtype, x.device, tuple(cfg.items()), ()))
            if hit is not None:
                ffi = _ffi_entry(hit, [1], True)
                _CHECKED[key] = (ffi, True) if ffi is not None else (hit, False)
        return res
    call, ffi = entry
    # FFI 直接调用时第二个参数是分配器的锚（与编译好的内核对象自己传的一样：第一个输入张量）
    # (M, 1) 的连续输出：view 比下标 [:, 0] 少一次 Python 的下标解析
    return (call(x, x) if ffi else call(x)).view(M)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, *, block_m: int | None = None,
                     block_n: int | None = None, threads: int | None = None) -> torch.Tensor:
    """softmax 的反向：y = softmax(x) 与上游梯度 dy（都是 (M, N)、同一 dtype、行主序连续），返回同 dtype 的 dx。
    两遍：先求每行的 sum(y * dy)，再写 dx = y * (dy - sum)。可调参数同 :func:`softmax`。"""
    _check(y, "y")
    _check(dy, "dy")
    if y.shape != dy.shape:
        raise ValueError(f"y 与 dy 的形状必须相同，得到 {tuple(y.shape)} 与 {tuple(dy.shape)} "
                         f"(y and dy must have the same shape)")
    if y.dtype != dy.dtype:
        raise TypeError(f"y 与 dy 的 dtype 必须相同，得到 {_dtype_name(y.dtype)} 与 {_dtype_name(dy.dtype)} "
                        f"(y and dy must have the same dtype)")
    M, N = y.shape
    cfg = _resolve("softmax_backward", M, N, MODE == "gpu", dict(block_m=block_m, block_n=block_n, threads=threads))
    return _run("softmax_backward", _aligned(y), cfg, _aligned(dy))


def cuda_source(kernel: str = "reduce_sum", M: int = 4096, N: int = 4096, target=None, dtype: str = "float32",
                **params) -> str:
    """把内核降级成 CUDA C 并返回源码；默认目标 sm_90，不需要 GPU，也不需要 nvcc
    （形状用 meta 张量给出，只做降级，不编译成二进制）。

    ``dtype``："float32"、"float16" 或 "bfloat16"；``params`` 是可调参数，不给的按 gpu 模式的默认值。
    """
    names = tuple(_dtype_name(d) for d in DTYPES)
    if dtype not in names:
        raise ValueError(f"dtype 只能是 {', '.join(names)} 之一，得到 {dtype!r} (unsupported dtype {dtype!r})")
    if kernel not in TUNABLES:
        raise ValueError(f"未知的内核 {kernel!r}，可选：{', '.join(TUNABLES)} (unknown kernel {kernel!r})")
    for name, v in (("M", M), ("N", N)):
        if not (isinstance(v, int) and v >= 1):
            raise ValueError(f"{name} 必须是正整数，得到 {v!r} ({name} must be a positive int)")
    if M * N > _MAX_ELEMS:
        raise ValueError(f"M*N={M * N} 超过 int32 下标上限 {_MAX_ELEMS} (too many elements)")
    cfg = _resolve(kernel, M, N, True, params, elem_size=torch.empty(0, dtype=getattr(torch, dtype)).element_size())
    target = target or SM90_TARGET
    key = (kernel, M, N, repr(target), dtype, tuple(sorted(cfg.items())))
    if key not in _sources:
        import tilelang
        from tvm.target import Target

        jit = _jit_for(kernel, target)
        x = torch.empty(M, N, dtype=getattr(torch, dtype), device="meta")
        extra = {}
        if kernel == "softmax" and cfg["path"] == "grid":     # 常驻网格：按 sm_90 的 132 个 SM 定块数
            stats = torch.empty((M, cfg["n_seg"], 2), device="meta")
            jit = _jit_for("softmax_grid", target)
            prim_func = jit.get_tir(x, x, stats, **grid_kwargs(M, N, cfg, dtype, _H200_SMS))
            with Target(target) as tgt:
                _sources[key] = tilelang.lower(prim_func, target=tgt).kernel_source
            return _sources[key]
        if kernel == "softmax":       # softmax 的输出 y 与各段的 (m, s) 也是参数
            stats = torch.empty((M if cfg["path"] in _SEGMENTED else 1, cfg["n_seg"], 2), device="meta")
            # split 路径两次启动：给出最后一次（合并各段、写 y）的源码
            args, extra = (x, x, stats), {"phase": softmax_phases(cfg["path"], True)[-1]}
        else:
            args = (x, x) if kernel == "softmax_backward" else (x,)      # 反向有 y、dy 两个输入
        prim_func = jit.get_tir(*args, cpu=False, dtype=dtype, **cfg, **extra)
        # 只降级、不调用 nvcc：没有 CUDA 工具链的机器上也能看到生成的源码
        with Target(target) as tgt:
            _sources[key] = tilelang.lower(prim_func, target=tgt).kernel_source
    return _sources[key]


def _tilelang_includes() -> list[str]:
    import tilelang

    root = os.path.dirname(tilelang.__file__)
    return [os.path.join(root, "src"), os.path.join(root, "3rdparty", "cutlass", "include")]


def nvcc_check(source: str, arch: str = "sm_90") -> str:
    """用 ``nvcc -ptx`` 编译生成的 CUDA C（只编译、不运行），返回 PTX；失败时抛出 RuntimeError
    并附上 nvcc 的报错。需要 PATH 上有 nvcc。"""
    return _nvcc(source, arch, "ptx")[0]


def nvcc_resources(source: str, arch: str = "sm_90"):
    """用 ``nvcc -cubin -Xptxas -v`` 编译生成的 CUDA C（不需要 GPU），返回内核的寄存器数、溢出字节数与
    共享内存（:class:`reduction_lab.occupancy.KernelResources`）。"""
    from ..occupancy import parse_ptxas

    found = parse_ptxas(_nvcc(source, arch, "cubin")[1])
    if len(found) != 1:
        raise RuntimeError(f"ptxas 的输出里应当恰好有一个内核，得到 {sorted(found)} (expected one kernel)")
    return next(iter(found.values()))


_KERNEL_DECL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(')


def _batch(sources: list[str]) -> tuple[list[str], list[dict[str, str]]]:
    """把几份生成的源码拼成几个翻译单元，头文件只解析一次：开头（第一个 extern "C" 之前的 #include 等）相同的
    源码放进同一个单元，每份的其余部分放进自己的命名空间，内核改名为 ``名字__rlK``（C 链接的名字不能重复）。
    返回 (各单元的源码, 每份源码的 {新名字: 原名字}, 每份源码在第几个单元)。"""
    units: dict[str, list[str]] = {}
    renames: list[dict[str, str]] = []
    where: list[int] = []
    for k, src in enumerate(sources):
        at = src.find('extern "C"')
        if at < 0:
            raise ValueError(f"第 {k} 份源码里没有 extern \"C\" 内核 (source {k} has no extern \"C\" kernel)")
        head, body = src[:at], src[at:]
        names = sorted(set(_KERNEL_DECL.findall(body)))
        ren = {f"{n}__rl{k}": n for n in names}
        for new, old in ren.items():
            body = re.sub(rf"\b{old}\b", new, body)
        renames.append(ren)
        where.append(list(units).index(head) if head in units else len(units))
        units.setdefault(head, []).append(f"namespace rl_batch{k} {{\n{body}\n}}  // namespace rl_batch{k}\n")
    return [head + "".join(bodies) for head, bodies in units.items()], renames, where


def _entries(ptx: str) -> tuple[str, dict[str, str]]:
    """PTX 的开头（版本、目标、模块级声明）与每个 .entry 的全文（名字 -> 文本）。"""
    starts = [m.start() for m in re.finditer(r"^(?:\t// \.globl\t\w+\n)?(?:\.visible )?\.entry ", ptx, re.M)]
    head = re.sub(r"^\t// \.globl\t\w+\n", "", ptx[:starts[0]] if starts else ptx, flags=re.M)
    out = {}
    for a, b in zip(starts, starts[1:] + [len(ptx)]):
        chunk = ptx[a:b]
        name = re.search(r"\.entry (\w+)\(", chunk).group(1)
        end = re.search(r"^}$", chunk, re.M)
        out[name] = chunk[:end.end()] + "\n\n" if end else chunk
    return head, out


def _nvcc_units(units: list[str], sources: list[str], arch: str, kind: str) -> list[tuple[str, str]]:
    """逐个单元调用 nvcc；有一个单元编译失败时逐份编译原来的源码，报错写明是第几份（行号也是那份自己的）。"""
    try:
        return [_nvcc(unit, arch, kind) for unit in units]
    except RuntimeError:
        for k, src in enumerate(sources):
            try:
                _nvcc(src, arch, kind)
            except RuntimeError as e:
                raise RuntimeError(f"第 {k} 份源码 (source {k}): {e}") from None
        raise


def nvcc_check_many(sources: list[str], arch: str = "sm_90") -> list[str]:
    """与逐份调用 :func:`nvcc_check` 等价，但几份源码在同一次 nvcc 里编译（TileLang 的头文件解析一次，
    每份省下约 2.5 s）。返回每份源码的 PTX：模块开头加上它自己的内核（名字已改回）。一起编译失败时逐份编译，
    报错写明是第几份。"""
    if not sources:
        return []
    units, renames, where = _batch(list(sources))
    found: dict[str, str] = {}
    heads = []
    for head, entries in (_entries(ptx) for ptx, _ in _nvcc_units(units, sources, arch, "ptx")):
        heads.append(head)
        found.update(entries)
    out = []
    for ren, u in zip(renames, where):
        text = heads[u]
        for new, old in ren.items():
            text += found.get(new, "").replace(new, old)       # 也改回 NAME__rlK_param_0 之类
        out.append(text)
    return out


def nvcc_resources_many(sources: list[str], arch: str = "sm_90") -> list:
    """与逐份调用 :func:`nvcc_resources` 等价（每份恰好一个内核），在同一次 nvcc 里编译。ptxas 对每个内核
    单独分配寄存器，拼在一起不改变各自的寄存器数与溢出。"""
    from ..occupancy import parse_ptxas

    if not sources:
        return []
    units, renames, _ = _batch(list(sources))
    found = {}
    for _, log in _nvcc_units(units, sources, arch, "cubin"):
        found.update(parse_ptxas(log))
    out = []
    for k, ren in enumerate(renames):
        got = [dataclasses.replace(found[new], kernel=old) for new, old in ren.items() if new in found]
        if len(got) != 1:
            raise RuntimeError(f"第 {k} 份源码应当恰好有一个内核，得到 {sorted(ren.values())} (expected one kernel)")
        out.append(got[0])
    return out


def _nvcc(source: str, arch: str, kind: str) -> tuple[str, str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("PATH 上没有 nvcc (nvcc not found on PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "kernel.cu")
        out = os.path.join(tmp, "kernel." + kind)
        with open(cu, "w") as f:
            f.write(source)
        cmd = [nvcc, f"-{kind}", f"-arch={arch}", "-std=c++20", "-w", cu, "-o", out]
        if kind == "cubin":
            cmd[1:1] = ["-Xptxas", "-v"]
        for inc in _tilelang_includes():
            cmd.insert(1, f"-I{inc}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc 编译失败 (nvcc failed):\n{proc.stderr[-4000:]}")
        if kind == "cubin":
            return "", proc.stderr + proc.stdout
        with open(out) as f:
            return f.read(), proc.stderr
