"""CUDA C 内核（本目录下的 .cu 文件）及其 Python 包装函数。

同一份 .cu 源码在 gpu 模式下经 CuPy 编译运行，在 sim 模式下由 :mod:`reduction_lab.simt`
在 CPU 上模拟（见 :mod:`.launcher`）。

* :func:`reduce_sum` ——按行求和（reduce_sum.cu）。课程页面：docs/cuda/tree-reduction.md；
* :func:`softmax` ——按行 softmax（softmax.cu）：课程版一行一个线程块读三遍，生产版整行放在寄存器里只读一遍，
  按 N 查 :data:`SOFTMAX_CONFIGS` 选内核（调参：scripts/tune_cuda_softmax.py）。课程页面：docs/occupancy.md；
* :func:`softmax_backward` ——softmax 的反向 dx = y * (dy - sum(y * dy))（softmax_backward.cu）；
* :func:`full_sum` ——整个数组求和的 8 个版本（full_sum.cu），版本表 :data:`FULL_SUM_VERSIONS`
  从 full_sum.cu 的 ``@version`` 注释解析。课程页面：docs/cuda/seven-versions.md；
* bank_conflicts.cu、tree_demo.cu、warp_shuffle.cu：教学内核，页面直接用 :func:`launch` 启动。

每个包装函数都接受 ``mode="sim"``：在任何机器上用模拟器运行（张量在 CPU 上），
``return_report=True`` 时同时返回模拟器的报告（gpu 模式下报告为 ``None``）。
"""

from __future__ import annotations

import functools
import re

import torch

from .. import runtime
from ..checks import check_matrix, check_vector
from .launcher import (KERNEL_DIR, cached_plan, kernel_names, kernel_signature, launch, read_source, rows_aligned,
                       source_path)

__all__ = [
    "reduce_sum_checked", "softmax_checked",
    "launch", "KERNEL_DIR", "kernel_names", "kernel_signature", "source_path", "read_source",
    "reduce_sum", "split_defaults", "softmax", "softmax_plan", "SOFTMAX_CONFIGS", "SOFTMAX_KERNELS", "softmax_backward",
    "full_sum", "FULL_SUM_VERSIONS", "full_sum_plan", "last_report", "NOMINAL_SM_COUNT", "DTYPES",
]

#: sim 模式下假定的 SM 个数（H200 有 132 个），让模拟的启动配置与 H200 上的一致
NOMINAL_SM_COUNT = 132

_last_report = None


def last_report():
    """最近一次 sim 模式启动的模拟器报告（full_sum 为各级报告的列表）；gpu 模式下为 ``None``。"""
    return _last_report


def _mode(mode):
    if mode not in (None, "sim", "gpu"):
        raise ValueError(f"mode 只能是 None、'sim' 或 'gpu'，得到 {mode!r} (mode must be None, 'sim' or 'gpu')")
    return runtime.MODE if mode is None else mode


def _device_for(mode: str) -> str:
    return "cuda" if mode == "gpu" else "cpu"


@functools.lru_cache(maxsize=None)
def _gpu_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count(x: torch.Tensor, mode: str) -> int:
    if mode == "gpu":
        return _gpu_sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device())
    return NOMINAL_SM_COUNT


def _clusters(x: torch.Tensor, mode: str) -> bool:
    """能否用线程块簇：gpu 模式、计算能力 9.0 以上。"""
    if mode != "gpu":
        return False
    from .cluster import regs_available

    return regs_available(x.device.index if x.device.index is not None else torch.cuda.current_device())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


#: CUDA C 内核接受的 dtype；每种 dtype 编译一份（llm.c 的做法：floatX 在编译期选定，累加用 float）
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_DTYPE_DEFINES = {torch.float32: {}, torch.bfloat16: {"ENABLE_BF16": 1}, torch.float16: {"ENABLE_FP16": 1}}


def _defines(block_size: int, dtype) -> dict:
    """编译期常量：BLOCK_SIZE 与元素类型（ENABLE_BF16 / ENABLE_FP16，float32 不加）。"""
    return {"BLOCK_SIZE": block_size, **_DTYPE_DEFINES[dtype]}


def _check_block(block_size: int, lo: int) -> int:
    if not isinstance(block_size, int) or block_size < lo or block_size > 1024 or block_size & (block_size - 1):
        raise ValueError(f"block_size 必须是 {lo} 到 1024 之间的 2 的幂，得到 {block_size!r} "
                         f"(block_size must be a power of two in [{lo}, 1024])")
    return block_size


def _check_flags(return_report):
    if not isinstance(return_report, bool):
        raise TypeError(f"return_report 必须是 bool，得到 {return_report!r} (return_report must be a bool)")


def _finish(out, reports, return_report):
    global _last_report
    _last_report = reports
    return (out, reports) if return_report else out


# ---------------------------------------------------------------- reduce_sum

_REDUCE_KERNELS = ("auto", "tree", "warp", "split")
#: 一行不超过这么多字节时用 warp-per-row 内核（float32 2048 列、16 位 4096 列）；更长的行用 split
#: （H200 上 docs/data/h200_cuda_row_sum_warp.json 与 h200_cuda_row_sum_packs.json：一行 8 KiB 时 warp 比 split
#: 一行一块快，float32 N = 2048 99% 对 95%，bf16 N = 4096 93% 对 85%；16 KiB 时 split 快）。
#: 两者在一段时都直接写 x 的 dtype、一次启动；split 分成几段时要清零一个 float32 缓冲区，
#: 16 位时最后还要一次转换（三次启动），所以只在行数少于 SM 数时分段
_WARP_MAX_BYTES = 8192


def _warp_block(itemsize: int) -> int:
    """warp-per-row 内核的每块线程数：128 个（一块 4 行）。H200 上的扫描（scripts/tune_cuda_row_sum.py --kernel warp，
    docs/data/h200_cuda_row_sum_warp.json）：每种 dtype 与行长上 64、128、256 个线程各自最好的配置相差不到 1 个百分点
    （bf16 N = 512 除外：64 个线程 73%，128 个 95%，256 个 92%）。"""
    return 128


_UNROLL = 8                    # split 切段的单位：每段的列数是 BLOCK_SIZE * _UNROLL 的倍数


def _warp_rows(n_cols: int, dtype: torch.dtype) -> bool:
    return n_cols * dtype.itemsize <= _WARP_MAX_BYTES


def reduce_sum(x: torch.Tensor, dim: int = 1, kernel: str = "auto", block_size: int | None = None,
               return_report: bool = False, mode: str | None = None, chunks: int | None = None,
               out: torch.Tensor | None = None, packs: int | None = None, evict_first: bool | None = None):
    """每行求和：(M, N) -> (M,)，dtype 取 float32、bfloat16 或 float16，结果与 x 同 dtype（累加用 float32）。

    ``kernel``：``"tree"`` 课程版（一行一个线程块、共享内存树形归约）；``"warp"`` 一个 warp 一行；
    ``"split"`` 长行切段 + atomicAdd；``"auto"``（默认）按 N 在 warp 与 split 之间选择。
    ``chunks``：split 内核的段数（正整数）；``out``：调用者提供的 (M,) 连续输出，dtype 与 x 相同。
    warp 与 split 内核每个线程一次读 16 字节（一包：4 个 float32 或 8 个 16 位元素）；``packs``：它们每个线程同时
    在途的包数（1、2、4、8；默认取 :func:`_sum_packs`），只用于 warp 与
    split 内核。``evict_first``：主循环的包用流式加载（``ld.global.cs``，reduce_sum.cu 的 SUM_EVICT_FIRST），
    默认取 :func:`_sum_evict`；同样只用于 warp 与 split 内核。
    """
    m = _mode(mode)
    _check_flags(return_report)
    check_matrix(x, "x", dtypes=DTYPES, device=_device_for(m))
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维（dim=1）归约，得到 dim={dim} (only dim=1 is supported)")
    if kernel not in _REDUCE_KERNELS:
        raise ValueError(f"kernel 只能是 {', '.join(_REDUCE_KERNELS)} 之一，得到 {kernel!r} "
                         f"(kernel must be one of {_REDUCE_KERNELS})")
    M, N = x.shape
    if N > 2**31 - 1 - 8 * 1024:
        raise ValueError(f"每行最多 2**31 - 8193 个元素，得到 N={N} (row too long for int indices)")
    if kernel == "auto":
        kernel = "warp" if _warp_rows(N, x.dtype) else "split"
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise ValueError(f"chunks 必须是正整数，得到 {chunks!r} (chunks must be a positive int)")
    if chunks is not None and kernel != "split":
        raise ValueError(f"chunks 只用于 kernel='split'，当前 kernel={kernel!r} (chunks applies to the split kernel only)")
    if packs is not None and (isinstance(packs, bool) or packs not in (1, 2, 4, 8)):
        raise ValueError(f"packs 只能是 1、2、4、8，得到 {packs!r} (packs must be 1, 2, 4 or 8)")
    if evict_first is not None and not isinstance(evict_first, bool):
        raise TypeError(f"evict_first 必须是 bool 或 None，得到 {evict_first!r} (evict_first must be a bool)")
    for name, value in (("packs", packs), ("evict_first", evict_first)):
        if value is not None and kernel not in ("warp", "split"):
            raise ValueError(f"{name} 只用于 warp 与 split 内核，当前 kernel={kernel!r} "
                             f"({name} applies to the warp and split kernels only)")
    if block_size is None:
        if kernel == "split" and chunks is None:
            B = _split_block(N, x.element_size())
        elif kernel == "warp":
            B = _warp_block(x.element_size())
        else:
            B = 256
    else:
        B = _check_block(block_size, 32)
    out = _check_out(out, (M,), x)
    defines = _sum_defines(kernel, B, x.dtype, N, packs, evict_first)
    if kernel == "tree":
        rep = launch("reduce_sum.cu", "reduce_sum_rows", grid=M, block=B,
                     args=(x, out, x.stride(0), N), defines=defines, mode=m)
    elif kernel == "warp":
        rep = launch("reduce_sum.cu", "reduce_sum_rows_warp", grid=_cdiv(M, B // 32), block=B,
                     args=(x, out, x.stride(0), M, N), defines=defines, mode=m)
    else:
        if chunks is None:
            cols, chunks = _split_plan(M, N, B, _sm_count(x, m))
        else:
            quantum = B * _UNROLL
            cols = _cdiv(_cdiv(N, chunks), quantum) * quantum
            chunks = _cdiv(N, cols)
        # 一段：内核直接写 out。几段：各段用 atomicAdd 累加到清零的 float32 acc，最后才舍入成 x 的 dtype
        acc = _split_acc(out, chunks)
        rep = launch("reduce_sum.cu", "reduce_sum_rows_split", grid=(chunks, min(M, 65535)), block=B,
                     args=(x, out, acc, x.stride(0), M, N, cols), defines=defines, mode=m)
        if chunks > 1 and acc is not out:
            out.copy_(acc)
    return _finish(out, rep, return_report)


def _split_acc(out: torch.Tensor, chunks: int) -> torch.Tensor:
    """split 内核的形参 acc（float*）：段数 > 1 时是清零的 float32（float32 的 out 本身就是）；一段时内核不写它，
    float32 时传 out，16 位时传一个元素的占位张量（形参的类型要对上）。"""
    if out.dtype == torch.float32:
        return out.zero_() if chunks > 1 else out
    if chunks == 1:
        return torch.empty(1, dtype=torch.float32, device=out.device)
    return torch.zeros(out.shape, dtype=torch.float32, device=out.device)


def _trusted(lp):
    """只缓存包里自带的内核的启动计划（``version_of`` 为 None：源文件不会变），它们可以跳过逐个参数的检查。"""
    return lp if lp is not None and lp.version_of is None else None


#: api 检查过输入之后的默认配置（kernel="auto"、block_size=256）：(M, N, dtype, 设备) -> 启动计划
_SUM_PLANS: dict = {}


def reduce_sum_checked(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """默认参数的 :func:`reduce_sum`，输入（与 ``out``）已经由 :mod:`reduction_lab.api` 检查过：
    启动计划按形状缓存，每次调用不再重复检查与选择内核。sim 模式下就是 :func:`reduce_sum`（留下报告）。"""
    if runtime.MODE != "gpu":
        return reduce_sum(x, out=out)
    M, N = x.shape
    key = (M, N, x.dtype, x.get_device())
    plan = _SUM_PLANS.get(key)
    if plan is None:
        if _warp_rows(N, x.dtype):
            B = _warp_block(x.element_size())
            plan = ["reduce_sum_rows_warp", _cdiv(M, B // 32), B, _sum_defines("warp", B, x.dtype, N), None, None]
        else:
            sms = _sm_count(x, _mode(None))
            B = _split_block(N, x.element_size())
            cols, chunks = _split_plan(M, N, B, sms)
            plan = ["reduce_sum_rows_split", (chunks, min(M, 65535)), B, _sum_defines("split", B, x.dtype, N), (cols, chunks),
                    None]
        _SUM_PLANS[key] = plan
    name, grid, block, defines, split, lp = plan
    if out is None:
        out = torch.empty((M,), dtype=x.dtype, device=x.device)
    # warp 内核与一段的 split 内核直接写 out；分段时 split 内核累加到清零的 float32 acc，最后转成 x 的 dtype
    if split is None:
        if lp is not None:                           # 热路径：见 softmax_checked
            lp.launch_values((x.data_ptr(), out.data_ptr(), x.stride(0), M, N))
            return out
        args = (x, out, x.stride(0), M, N)
    else:
        cols, chunks = split
        if lp is not None and chunks == 1:           # 一段：内核不写 acc，占位的指针就用 out 的
            lp.launch_values((x.data_ptr(), out.data_ptr(), out.data_ptr(), x.stride(0), M, N, cols))
            return out
        acc = _split_acc(out, chunks)
        if lp is not None:
            lp.launch_values((x.data_ptr(), out.data_ptr(), acc.data_ptr(), x.stride(0), M, N, cols))
        args = (x, out, acc, x.stride(0), M, N, cols)
    if lp is None:
        launch("reduce_sum.cu", name, grid, block, args, defines=defines)
        plan[5] = _trusted(cached_plan("reduce_sum.cu", name, grid, block, 0, defines))
    if split is not None and split[1] > 1 and acc is not out:
        out.copy_(acc)
    return out


def _split_block(N: int, itemsize: int) -> int:
    """split 内核默认的每块线程数（H200 上 scripts/tune_cuda_row_sum.py 的扫描，docs/data/h200_cuda_row_sum_packs.json；
    在途的包数见 :func:`_sum_packs`）。float32：一行不到 64 KiB 时 256 个线程，更长时 512 个。16 位：一行不到 32 KiB
    时 256 个，不到 128 KiB 时 512 个，更长时 1024 个（一行一块、只有几百块时，每个 SM 上同时在途的加载要靠更多的
    线程）。"""
    row = N * itemsize
    if itemsize == 2:
        return 256 if row < 32768 else 512 if row < 131072 else 1024
    return 256 if row < 65536 else 512


#: split 内核一行至少这么多字节时，16 位每个线程 :data:`SPLIT_PACKS_16` 个 16 字节包同时在途（float32 见下；reduce_sum.cu 的
#: SUM_PACKS；更短的行用 .cu 里的默认值 2）。H200 上 scripts/tune_cuda_row_sum.py --packs 的扫描
#: （docs/data/h200_cuda_row_sum_packs.json 里的两次，此前另有两次）：bf16 的 N = 8192 … 262144 上 8 包配 :func:`_split_block`
#: 的线程数比原来的 2 包快；N = 4096 每个线程只分到 2 包，8 包反而慢（这一行长现在走 warp 内核）
SPLIT_PACKS_16 = 8
SPLIT_PACKS_MIN_ROW = 16384
#: float32 的 split 内核：一行 16 KiB 起、不到 :data:`SPLIT_F32_PACKS4_ROW` 字节时 8 包在途，更长时 4 包（同一文件的 float32
#: 扫描：一行 512 KiB 以上时 512 个线程 x 4 包比 8 包快 0.3 到 1.5 个百分点）
SPLIT_F32_PACKS4_ROW = 524288
#: reduce_sum.cu 里 SUM_PACKS 的默认值（不定义它时）
_CU_SUM_PACKS = 2


def _sum_packs(kernel: str, N: int, itemsize: int) -> int | None:
    """warp / split 内核默认的 SUM_PACKS（None：用 .cu 里的默认值）。warp（docs/data/h200_cuda_row_sum_warp.json）：
    float32 每个线程 4 包；16 位一行不超过 1 KiB 时 2 包（每个线程正好分到 2 包），更长时 1 包（编译器自己把这个
    循环展开、把加载提前）。"""
    row = N * itemsize
    if kernel == "warp":
        return 4 if itemsize == 4 else 2 if row <= 1024 else 1
    if kernel == "split" and row >= SPLIT_PACKS_MIN_ROW:       # 更短的行每个线程只分到一两个包
        if itemsize == 4:
            return 8 if row < SPLIT_F32_PACKS4_ROW else 4
        return SPLIT_PACKS_16
    return None


def _sum_evict(kernel: str, N: int, itemsize: int) -> bool:
    """warp / split 内核默认是否用流式加载（SUM_EVICT_FIRST）：warp 内核用（H200 上一行不超过 2 KiB 时快一到三个
    百分点，更长的行持平），split 内核不用（有快有慢，都在一两个百分点以内）。"""
    return kernel == "warp"


def split_defaults(N: int, dtype) -> tuple[int, int]:
    """按行求和的 split 内核在行长 ``N`` 上默认的 (每块线程数, 每个线程同时在途的 16 字节包数)。"""
    from ..checks import check_int

    check_int(N, "N", lo=1)
    if dtype not in DTYPES:
        raise TypeError(f"dtype 只能是 float32、bfloat16、float16，得到 {dtype} (unsupported dtype {dtype})")
    B = _split_block(N, dtype.itemsize)
    return B, _sum_packs("split", N, dtype.itemsize) or _CU_SUM_PACKS


def _sum_defines(kernel: str, B: int, dtype, N: int, packs: int | None = None,
                 evict_first: bool | None = None) -> dict:
    """按行求和内核的编译期常量：:func:`_defines`，warp 与 split 内核再加 SUM_PACKS（``packs``；没给时取
    :func:`_sum_packs`，它给 None 时用 .cu 里的默认值）与 SUM_EVICT_FIRST（``evict_first``；没给时取
    :func:`_sum_evict`）。"""
    d = _defines(B, dtype)
    if kernel not in ("warp", "split"):
        return d
    if packs is None:
        packs = _sum_packs(kernel, N, dtype.itemsize)
    if packs is not None:
        d["SUM_PACKS"] = packs
    if evict_first is None:
        evict_first = _sum_evict(kernel, N, dtype.itemsize)
    if evict_first:
        d["SUM_EVICT_FIRST"] = 1
    return d


def _split_plan(M: int, N: int, B: int, sm_count: int) -> tuple[int, int]:
    """长行切段：返回 (每段列数, 段数)。行数不少于 SM 数时一行一段（一个线程块读完一行，直接写出结果，
    一次启动）；更少时切段，目标是约 4 轮常驻线程块（每 SM 2048 个线程），每段至少让每个线程做两轮
    8 路加载；每段列数取 B*8 的倍数，段首按 128 字节对齐。"""
    quantum = B * _UNROLL
    if M >= sm_count:
        return _cdiv(N, quantum) * quantum, 1
    target_blocks = sm_count * (2048 // B) * 4
    chunks = max(1, min(_cdiv(target_blocks, M), _cdiv(N, 2 * quantum)))
    cols = _cdiv(_cdiv(N, chunks), quantum) * quantum
    return cols, _cdiv(N, cols)


# ---------------------------------------------------------------- softmax

#: softmax 的内核：``rows`` 课程版（一行一个线程块，读三遍）；``warp`` 一个 warp 一行；``block`` 一个线程块一行；
#: ``split`` 一行切成几段、一段一个线程块，各段经全局内存交换 (m, s)（softmax.cu 的开头有说明）；
#: ``cluster`` 一行交给一个线程块簇，各段经分布式共享内存交换 (m, s)（softmax_cluster.cu 的 softmax_cluster_regs，
#: 只有 gpu 模式、计算能力 9.0 以上）；``pipe`` 同样一簇一行，但簇常驻、依次处理多行，每块把后面的行异步地预取进
#: 共享内存（softmax_cluster.cu 的 softmax_cluster_pipe：每行从 16 字节边界开始、字节数是 16 的倍数时才能用）；
#: ``grid`` 一个簇也放不下一行时：常驻网格，各块依次处理各段，段预取进共享内存，各段经全局内存交换 (m, s)
#: （softmax_cluster.cu 的 softmax_grid_pipe，包装函数在 grid.py；对齐要求同 pipe）。
#: 后六个整行（或整段）放在片上（寄存器或共享内存），只读一遍。
SOFTMAX_KERNELS = ("auto", "rows", "warp", "block", "split", "cluster", "pipe", "grid")
_SOFTMAX_NAMES = {"rows": "softmax_rows", "warp": "softmax_rows_warp", "block": "softmax_rows_block",
                  "split": "softmax_rows_split"}

#: ``kernel="auto"`` 的选择表，按元素字节数（4：float32；2：bfloat16 / float16）分开。每项是
#: (最大列数, 内核, 线程数, PACKS[, SMEM_PACKS])：取第一项最大列数 >= N 的（None 表示不限）。PACKS 是每个线程放在
#: 寄存器里的 16 字节包数（一包 4 个 float32 或 8 个 16 位元素）；cluster 的项可以多一个 SMEM_PACKS：每个线程另有
#: 这么多包放在共享内存里（softmax_cluster_regs 的 SMEM_PACKS，不写就是 0）。scripts/tune_cuda_softmax.py 在 H200 上验证并计时全部候选，
#: 它写出的 JSON 里 ``best`` 一栏就是这张表的一项，抄过来即可。
SOFTMAX_CONFIGS = {
    # H200，scripts/tune_cuda_softmax.py 的两次运行（docs/data/h200_cuda_softmax.json：warp / block / split；
    # docs/data/h200_cuda_softmax_cluster_mbar.json：cluster，即现在的 st.async + mbarrier 交换）：每个 N 最快的
    # 候选（差不到一个百分点时留用原来的）。docs/data/h200_cuda_softmax_cluster.json 是第一版（cluster.sync 交换）的扫描
    # N <= 2048：指数改成 exp2f、短行半个 warp 一行之后的重扫（docs/data/h200_cuda_softmax_exp.json），float32 的
    # N = 512 改用 64 x 2（两次运行都快一个百分点多），16 位的 512 … 2048 换了三项（快 4 到 28 个百分点）
    4: ((512, "block", 64, 2),
        (1024, "block", 64, 4),
        (2048, "warp", 128, 16),
        (4096, "block", 64, 16),
        (8192, "block", 128, 16),
        (16384, "block", 512, 8),
        (32768, "cluster", 256, 4),
        (65536, "cluster", 128, 8),
        (131072, "cluster", 256, 8),
        (262144, "cluster", 512, 8),
        (None, "grid", 512, 8)),
    2: ((512, "warp", 128, 4),
        (1024, "block", 64, 2),
        (2048, "block", 64, 4),
        (4096, "block", 64, 8),
        (8192, "block", 128, 8),
        # N >= 32768：bfloat16 的重扫（docs/data/h200_cuda_softmax_smem.json，每个线程几包在寄存器里、几包在共享内存
        # 里，有共享内存的包时寄存器里只留原始的包）。32768 … 131072 原来的配置与最快的相差不到一个百分点，留用；
        # N = 262144 每个线程 4 包在寄存器里、4 包在共享内存里（快 2.5 个百分点）；2^20 的一行放得进 16 块
        # （512 x (8 + 8) 包），不再用 grid（快 9 个百分点）
        (32768, "cluster", 256, 4),
        (65536, "cluster", 128, 8),
        (131072, "cluster", 256, 8),
        (262144, "cluster", 256, 4, 4),
        (1048576, "cluster", 512, 8, 8),
        (None, "grid", 512, 8)),
}
#: 表末行 grid 的 (ahead, delay)：scripts/tune_grid_softmax.py 在 H200 上每个 N、每种 dtype 最快的都是 (1, 1)
#: （docs/data/h200_cuda_softmax_grid.json）；grid 用不了（没有簇的 GPU、sim 模式、行首不对齐）时改用
#: split，配置是 _SPLIT_FALLBACK（换成 grid 之前表末行的 split）
GRID_AHEAD_DELAY = (1, 1)
_SPLIT_FALLBACK = {4: (256, 8), 2: (256, 4)}

#: 一个线程块的寄存器里至多放这么多元素（BLOCK_SIZE * PACKS * VEC），每个线程至多 64 个：这样编译出来不溢出
_MAX_BLOCK_ELEMS = 32768
_MAX_THREAD_ELEMS = 64
#: split 内核每个 SM 至少驻留的线程数（softmax.cu 的 SPLIT_MIN_BLOCKS 保证）：同一行的各段要同时驻留，
#: 只用它的一半，另一半留给排在前面、还没退出的行
_SPLIT_THREADS_PER_SM = 512


def _softmax_block(N: int) -> int:
    """softmax_backward 的线程数：每个线程大约 8 个元素，32 到 1024 个线程。"""
    return min(1024, max(32, _next_pow2(_cdiv(N, 8))))


def _check_out(out, shape, x):
    if out is None:
        return torch.empty(shape, dtype=x.dtype, device=x.device)   # 总是连续的
    from ..checks import check_out

    check_out(out, shape, x.dtype, x.device)
    return out


def _vec(dtype) -> int:
    """一个 16 字节包里的元素数。"""
    return 16 // dtype.itemsize


def _table_config(N: int, dtype):
    """表里 N 所在的一项：(内核, 线程数, PACKS, SMEM_PACKS)。"""
    for n_max, kernel, block, packs, *smem in SOFTMAX_CONFIGS[dtype.itemsize]:
        if n_max is None or N <= n_max:
            return kernel, block, packs, (smem[0] if smem else 0)
    raise ValueError(f"SOFTMAX_CONFIGS 的最后一项必须不限列数（None），N={N} 没有配置 "
                     f"(the last SOFTMAX_CONFIGS entry must have no column limit)")


def _no_cluster_config(N: int, dtype) -> tuple[int, int]:
    """表里是 cluster、却没有线程块簇时的 (线程数, 包数)：按 docs/data/h200_cuda_softmax.json 里不用簇时最快的写法
    （H200 上的那次扫描，float32 N = 32768 … 262144、16 位 N = 16384 … 262144）——一块放得下时用 block，
    每个线程 64 个元素、线程数取放得下的最少（256 或 512）；放不下时用表末行 split 的配置。"""
    vec = _vec(dtype)
    packs = _MAX_THREAD_ELEMS // vec
    for block in (256, 512):
        if block * packs >= N // vec and block * packs * vec <= _MAX_BLOCK_ELEMS:
            return block, packs
    return _SPLIT_FALLBACK[dtype.itemsize]


def warp_row_lanes(N: int, dtype, packs: int) -> int:
    """warp 内核一行用几个 lane（softmax.cu 的 ROW_LANES）：放得下整行的最少的 32、16 或 8 个，但不少于
    2 * VEC - 2（行首行尾的零散元素每个 lane 至多拿一个）。短行半个 warp 一行时，每个 lane 的 PACKS 包都是真数据，
    每个元素分到的洗牌少一半以上（H200 上 16 位 N = 512 从拷贝的 57% 到 83%，docs/occupancy.md 的 ncu 一节）。"""
    vec = _vec(dtype)
    lanes = 32
    while lanes > 8 and lanes // 2 >= 2 * vec - 2 and (lanes // 2) * packs >= N // vec:
        lanes //= 2
    return lanes


def softmax_plan(M: int, N: int, dtype=torch.float32, kernel: str = "auto", block_size: int | None = None,
                 packs: int | None = None, sm_count: int = NOMINAL_SM_COUNT, clusters: bool = False,
                 aligned: bool = True) -> dict:
    """:func:`softmax` 的启动计划（不启动内核）：``{"kernel", "block_size", "packs", "chunks", "grid"}``，
    cluster 与 pipe 内核另有 ``"cluster_size"``（这时 ``chunks`` 就是簇大小），cluster 还有 ``"smem_packs"``（每个线程放在共享内存里的包数），pipe 还有 ``"stages"``；pipe 的
    ``grid`` 是常驻网格的名义值（每 ``cluster_size`` 个 SM 一个簇），启动时取驱动给出的同时驻留的簇数。

    ``kernel="auto"`` 从 :data:`SOFTMAX_CONFIGS` 取配置，给出的 ``block_size`` / ``packs`` 覆盖表里的值；
    整行放不进 warp 时改用 block，放不进线程块时改用 split；表里是 cluster 而 ``clusters=False``
    （sim 模式，或 GPU 没有线程块簇）、或 16 块的簇放不下一行时改用 block（放不进线程块时 split），线程数与包数
    取不用簇时测得最快的写法（:func:`_no_cluster_config`；只在两者都没有给出时）；行首不对齐、表里的配置差一个
    向量放不下时，cluster 每块的线程数加倍；split 的段数超出同时驻留的上限时改用 rows。
    显式给出的 ``kernel`` 不会被改掉，放不下就报错。``packs`` 不用于 rows。
    ``aligned``：x 与输出的每一行都从 16 字节边界开始（cluster 的簇大小按它留余量；pipe 只在它为真时可用）。"""
    if kernel not in SOFTMAX_KERNELS:
        raise ValueError(f"kernel 只能是 {', '.join(SOFTMAX_KERNELS)} 之一，得到 {kernel!r} "
                         f"(kernel must be one of {SOFTMAX_KERNELS})")
    if dtype not in DTYPES:
        raise TypeError(f"dtype 只能是 float32、bfloat16 或 float16，得到 {dtype} (unsupported dtype)")
    if packs is not None and (isinstance(packs, bool) or not isinstance(packs, int) or packs < 1 or packs > 16
                              or packs & (packs - 1)):
        raise ValueError(f"packs 必须是 1 到 16 之间的 2 的幂，得到 {packs!r} (packs must be a power of two in [1, 16])")
    vec = _vec(dtype)
    auto = kernel == "auto"
    from_table = auto and block_size is None and packs is None
    smem_packs = 0                              # cluster：每个线程放在共享内存里的包数，只来自表
    if auto:
        kernel, table_block, table_packs, table_smem = _table_config(N, dtype)
        block_size = table_block if block_size is None else block_size
        packs = table_packs if packs is None else packs
        smem_packs = table_smem if from_table else 0
    elif kernel == "rows":
        if packs is not None:
            raise ValueError("packs 只用于 warp、block、split 内核 (packs applies to the warp, block and split kernels)")
        block_size = _softmax_block(N) if block_size is None else block_size
    elif kernel == "grid":                      # 显式的 grid：默认取表末行的配置
        _, _, table_block, table_packs = SOFTMAX_CONFIGS[dtype.itemsize][-1]
        block_size = table_block if block_size is None else block_size
        packs = table_packs if packs is None else packs
    else:
        block_size = 256 if block_size is None else block_size
        packs = 4 if packs is None else packs
    B = _check_block(block_size, 32)
    if kernel == "rows":
        return {"kernel": "rows", "block_size": B, "packs": None, "chunks": 1, "grid": M}
    if kernel == "grid":
        from .grid import grid_plan

        if not clusters and not auto:
            raise runtime.ModeError(
                "kernel='grid' 只在 gpu 模式下、计算能力 9.0 以上的 GPU 上可用：模拟器不执行它的内联 PTX "
                "(kernel='grid' needs gpu mode on a GPU of compute capability 9.0+)")
        try:
            if not aligned:
                raise ValueError("kernel='grid' 要求 x 与输出的每一行都从 16 字节边界开始 "
                                 "(kernel='grid' needs rows that start on 16-byte boundaries)")
            gp = grid_plan(N, dtype, B, packs, *GRID_AHEAD_DELAY)
        except ValueError:
            if not auto:
                raise
            gp = None
        if gp is not None and clusters:
            if gp.n_segs > sm_count:
                if not auto:
                    raise ValueError(f"kernel='grid' 一行 {gp.n_segs} 段多于 SM 数 {sm_count}：各段要同时驻留，"
                                     f"请加大 packs / block_size ({gp.n_segs} segments per row exceed {sm_count} SMs)")
            else:
                return {"kernel": "grid", "block_size": B, "packs": packs, "chunks": gp.n_segs,
                        "ahead": gp.ahead, "delay": gp.delay, "grid": min(M * gp.n_segs, sm_count)}
        kernel = "split"        # auto：没有簇、sim 模式、行不对齐时经全局内存交换、不常驻的 split
        if from_table:
            block_size, packs = _SPLIT_FALLBACK[dtype.itemsize]
            B = _check_block(block_size, 32)
    if kernel == "pipe":
        from .cluster import pipe_plan

        if not clusters and not auto:
            raise runtime.ModeError(
                "kernel='pipe' 需要 gpu 模式与计算能力 9.0 以上的 GPU（线程块簇）；模拟器不执行它的内联 PTX "
                "（mbarrier、st.async、cp.async） "
                "(kernel='pipe' needs gpu mode and a GPU with thread block clusters, compute capability 9.0+)")
        try:
            if not aligned:
                raise ValueError("kernel='pipe' 要求 x 与输出的每一行都从 16 字节边界开始 "
                                 "(kernel='pipe' needs rows that start on 16-byte boundaries)")
            tp = pipe_plan(N, dtype, None, B, packs)
        except ValueError:
            if not auto:
                raise
            tp = None
        if tp is not None and clusters:
            c = tp.cluster_size
            return {"kernel": "pipe", "block_size": B, "packs": packs, "chunks": c, "cluster_size": c,
                    "stages": tp.stages, "grid": min(M, max(1, sm_count // c)) * c}
        kernel = "cluster"      # auto：行不对齐（或放不下）时用寄存器版
    if kernel == "cluster":
        from .cluster import regs_plan

        if not clusters and not auto:
            raise runtime.ModeError(
                "kernel='cluster' 需要 gpu 模式与计算能力 9.0 以上的 GPU（线程块簇）；模拟器不执行它的内联 PTX "
                "（mbarrier、st.async、cp.async） "
                "(kernel='cluster' needs gpu mode and a GPU with thread block clusters, compute capability 9.0+)")
        try:
            rp = regs_plan(N, dtype, None, B, packs, aligned, smem_packs)
        except ValueError:
            if not auto:
                raise
            rp = None
            if from_table and not aligned and clusters:
                # 行首不在 16 字节边界上时每行多占一个向量，表里的配置在 16 块时可能正好差这一个：
                # 有共享内存的那几包时每个线程多放一包进共享内存，否则每块的线程数加倍
                try:
                    if smem_packs:
                        rp = regs_plan(N, dtype, None, B, packs, aligned, smem_packs + 1)
                    else:
                        rp = regs_plan(N, dtype, None, 2 * B, packs, aligned)
                        B = 2 * B
                except ValueError:
                    rp = None
        if rp is not None and clusters:
            return {"kernel": "cluster", "block_size": B, "packs": packs, "chunks": rp.cluster_size,
                    "cluster_size": rp.cluster_size, "smem_packs": rp.smem_packs, "grid": M * rp.cluster_size}
        # auto：没有簇（或放不下）时一个线程块放得下就用 block，否则 split（经全局内存交换 (m, s)）
        kernel = "block"
        if from_table:
            block_size, packs = _no_cluster_config(N, dtype)
            B = _check_block(block_size, 32)
    elems = packs * vec
    if elems > _MAX_THREAD_ELEMS or B * elems > _MAX_BLOCK_ELEMS:
        raise ValueError(f"每个线程 {elems} 个元素、每块 {B * elems} 个：超过上限 {_MAX_THREAD_ELEMS} / "
                         f"{_MAX_BLOCK_ELEMS}（寄存器会溢出），请减小 packs 或 block_size "
                         f"(too many elements in registers: {elems} per thread, {B * elems} per block)")
    n_pack = N // vec                               # 一行至多这么多个对齐的包
    if auto and kernel == "warp" and n_pack > 32 * packs:
        kernel = "block"
    if auto and kernel == "block" and n_pack > B * packs:
        kernel = "split"
    if kernel == "warp":
        if n_pack > 32 * packs:
            raise ValueError(f"warp 内核一行至多 {32 * packs * vec + vec - 1} 个元素（32 x packs={packs} 包），"
                             f"得到 N={N} (row does not fit one warp's registers)")
        lanes = warp_row_lanes(N, dtype, packs)
        return {"kernel": "warp", "block_size": B, "packs": packs, "chunks": 1, "lanes": lanes,
                "grid": _cdiv(M, B // lanes)}
    if kernel == "block":
        if n_pack > B * packs:
            raise ValueError(f"block 内核一行至多 {B * packs * vec + vec - 1} 个元素（{B} 个线程 x packs={packs} 包），"
                             f"得到 N={N} (row does not fit one block's registers)")
        return {"kernel": "block", "block_size": B, "packs": packs, "chunks": 1, "grid": M}
    chunks = max(1, _cdiv(n_pack, B * packs))
    limit = sm_count * _SPLIT_THREADS_PER_SM // 2 // B
    if chunks > limit or M * chunks > 2**31 - 1:
        if auto:
            return softmax_plan(M, N, dtype, "rows", sm_count=sm_count)
        raise ValueError(f"split 内核一行 {chunks} 段、每段 {B} 个线程：超过能保证同时驻留的 {limit} 段"
                         f"（或总段数超过 2**31 - 1），请加大 packs / block_size，或用 kernel='rows' "
                         f"({chunks} segments of {B} threads cannot be guaranteed co-resident)")
    return {"kernel": "split", "block_size": B, "packs": packs, "chunks": chunks, "grid": M * chunks}


def _softmax_defines(plan: dict, dtype) -> dict:
    """softmax.cu 按 :func:`softmax_plan` 的计划编译时的常量：BLOCK_SIZE 与元素类型，PACKS，warp 内核的 ROW_LANES
    （默认的 32 不写，编译出来的变体与原来相同）。"""
    defines = _defines(plan["block_size"], dtype)
    if plan["packs"] is not None:
        defines["PACKS"] = plan["packs"]
    if plan.get("lanes", 32) != 32:
        defines["ROW_LANES"] = plan["lanes"]
    return defines


def softmax(x: torch.Tensor, dim: int = -1, block_size: int | None = None,
            return_report: bool = False, mode: str | None = None, out: torch.Tensor | None = None,
            kernel: str = "auto", packs: int | None = None):
    """按行 softmax：(M, N) -> (M, N)（softmax.cu）。dtype 取 float32、bfloat16 或 float16，
    结果与 x 同 dtype（计算用 float32）。``out``：调用者提供的连续输出。

    ``kernel``：``"auto"``（默认，按 N 查 :data:`SOFTMAX_CONFIGS`）、``"rows"``（课程版，读三遍）、
    ``"warp"``、``"block"``、``"split"``、``"cluster"``（整行或整段放在寄存器里，只读一遍；cluster 只有 gpu 模式）；``block_size`` 是每块的线程数，
    ``packs`` 是每个线程的 16 字节包数。选择规则见 :func:`softmax_plan`。"""
    m = _mode(mode)
    _check_flags(return_report)
    check_matrix(x, "x", dtypes=DTYPES, device=_device_for(m))
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维 softmax（dim=-1），得到 dim={dim} (only the last dim is supported)")
    M, N = x.shape
    if N > 2**31 - 1 - 1024 or M > 2**31 - 1:
        raise ValueError(f"每行最多 2**31 - 1025 个元素、最多 2**31 - 1 行，得到 {tuple(x.shape)} "
                         f"(too many rows or columns for int indices)")
    y = _check_out(out, (M, N), x)
    plan = softmax_plan(M, N, x.dtype, kernel, block_size, packs, _sm_count(x, m), _clusters(x, m),
                        rows_aligned(x) and rows_aligned(y))
    if plan["kernel"] == "grid":
        from .grid import softmax_grid_pipe

        softmax_grid_pipe(x, block_size=plan["block_size"], packs=plan["packs"], ahead=plan["ahead"],
                          delay=plan["delay"], out=y)
        return _finish(y, None, return_report)
    if plan["kernel"] == "pipe":
        from .cluster import softmax_cluster_pipe

        softmax_cluster_pipe(x, cluster_size=plan["cluster_size"], block_size=plan["block_size"],
                            packs=plan["packs"], stages=plan["stages"], out=y)
        return _finish(y, None, return_report)
    if plan["kernel"] == "cluster":
        from .cluster import softmax_cluster_regs

        softmax_cluster_regs(x, cluster_size=plan["cluster_size"], block_size=plan["block_size"],
                             packs=plan["packs"], smem_packs=plan["smem_packs"], out=y)
        return _finish(y, None, return_report)
    B, kname = plan["block_size"], _SOFTMAX_NAMES[plan["kernel"]]
    defines = _softmax_defines(plan, x.dtype)
    xs, ys = x.stride(0), y.stride(0)
    if plan["kernel"] == "rows":
        args = (x, y, xs, ys, N)
    elif plan["kernel"] == "warp":
        args = (x, y, xs, ys, M, N)
    elif plan["kernel"] == "block":
        args = (x, y, xs, ys, N)
    else:
        chunks = plan["chunks"]
        sync = torch.zeros(1 + M, dtype=torch.int32, device=x.device)       # 发号器 + 每行的到达计数
        part = torch.empty(2 * M * chunks, dtype=torch.float32, device=x.device)
        args = (x, y, sync, part, xs, ys, N, chunks)
    rep = launch("softmax.cu", kname, grid=plan["grid"], block=B, args=args, defines=defines, mode=m)
    return _finish(y, rep, return_report)


#: api 检查过输入之后的默认配置（kernel="auto"）：(M, N, dtype, 设备) -> (内核名, grid, 线程数, defines, 种类, 段数)
_SOFTMAX_PLANS: dict = {}


def softmax_checked(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """默认参数的 :func:`softmax`，``x`` 与 ``out`` 已经由 :mod:`reduction_lab.api` 检查过：
    启动计划按形状缓存，每次调用不再重复检查与查表。sim 模式下就是 :func:`softmax`（留下报告）。"""
    if runtime.MODE != "gpu":
        return softmax(x, out=out)
    M, N = x.shape
    y = torch.empty_like(x) if out is None else out       # 最后一维连续的二维张量：empty_like 是连续的
    aligned = rows_aligned(x) and y.data_ptr() & 15 == 0    # y 是连续的：行距就是 N
    key = (M, N, x.dtype, x.get_device(), aligned)
    plan = _SOFTMAX_PLANS.get(key)
    if plan is None:
        p = softmax_plan(M, N, x.dtype, "auto", None, None, _sm_count(x, "gpu"), _clusters(x, "gpu"), aligned)
        B = p["block_size"]
        defines = _softmax_defines(p, x.dtype)
        if p["kernel"] == "cluster":
            from .cluster import RegsPlan

            extra = RegsPlan(n_cols=N, dtype=str(x.dtype)[6:], cluster_size=p["cluster_size"], block_size=B,
                             packs=p["packs"], vec=_vec(x.dtype), smem_packs=p["smem_packs"])
        elif p["kernel"] == "pipe":
            from .cluster import pipe_plan

            extra = pipe_plan(N, x.dtype, p["cluster_size"], B, p["packs"], p["stages"])
        elif p["kernel"] == "grid":
            from .grid import grid_plan

            extra = grid_plan(N, x.dtype, B, p["packs"], p["ahead"], p["delay"])
        else:
            extra = p.get("chunks")
        plan = _SOFTMAX_PLANS[key] = [_SOFTMAX_NAMES.get(p["kernel"]), p["grid"], B, defines, p["kernel"], extra, None]
    kname, grid, B, defines, kind, extra, lp = plan      # extra：split 的段数，或 cluster / pipe / grid 的配置
    xs, ys = x.stride(0), y.stride(0)
    if kind == "grid":
        from .grid import grid_launch, grid_launch_values

        if lp is not None:
            grid_launch_values(lp, x, y, extra)
        else:
            plan[6] = grid_launch(x, y, extra)
        return y
    if kind in ("pipe", "cluster"):
        if lp is not None:                                # 热路径：同下，参数按地址写进启动缓冲区
            lp.launch_values((x.data_ptr(), y.data_ptr(), xs, ys, M, N, extra.seg_vecs) if kind == "pipe"
                             else (x.data_ptr(), y.data_ptr(), xs, ys, N))
            return y
        from .cluster import pipe_launch_cached, regs_launch_cached

        plan[6] = (pipe_launch_cached if kind == "pipe" else regs_launch_cached)(x, y, extra)
        return y
    if lp is not None and kind != "split":
        # 热路径：输入已由 api 检查过，计划按 (形状, dtype, 设备, 对齐) 缓存，参数直接按地址写进启动缓冲区
        lp.launch_values((x.data_ptr(), y.data_ptr(), xs, ys, M, N) if kind == "warp"
                         else (x.data_ptr(), y.data_ptr(), xs, ys, N))
        return y
    if kind == "warp":
        args = (x, y, xs, ys, M, N)
    elif kind == "split":
        sync = torch.zeros(1 + M, dtype=torch.int32, device=x.device)       # 发号器 + 每行的到达计数
        part = torch.empty(2 * M * extra, dtype=torch.float32, device=x.device)
        args = (x, y, sync, part, xs, ys, N, extra)
    else:                                                 # rows、block
        args = (x, y, xs, ys, N)
    if lp is None or not lp(args):                        # lp：launcher 记下的启动计划（第一次启动之后才有）
        launch("softmax.cu", kname, grid, B, args, defines=defines)
        plan[6] = _trusted(cached_plan("softmax.cu", kname, grid, B, 0, defines))
    return y


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, block_size: int | None = None,
                     return_report: bool = False, mode: str | None = None, out: torch.Tensor | None = None):
    """softmax 的反向：y = softmax(x)、上游梯度 dy，都是 (M, N)、同一 dtype（float32、bfloat16 或 float16），
    返回同 dtype 的 dx (M, N)（计算用 float32）。
    一行一个线程块（softmax_backward.cu）：先块内求 sum(y * dy)，再写 dx = y * (dy - sum)。"""
    m = _mode(mode)
    _check_flags(return_report)
    check_matrix(y, "y", dtypes=DTYPES, device=_device_for(m))
    check_matrix(dy, "dy", dtypes=DTYPES, device=_device_for(m))
    if y.shape != dy.shape:
        raise ValueError(f"y 与 dy 的形状必须相同，得到 {tuple(y.shape)} 与 {tuple(dy.shape)} "
                         f"(y and dy must have the same shape)")
    if y.dtype != dy.dtype:
        raise TypeError(f"y 与 dy 的 dtype 必须相同，得到 {str(y.dtype)[6:]} 与 {str(dy.dtype)[6:]} "
                        f"(y and dy must have the same dtype)")
    M, N = y.shape
    B = _check_block(block_size if block_size is not None else _softmax_block(N), 32)
    dx = _check_out(out, (M, N), y)
    rep = launch("softmax_backward.cu", "softmax_backward_rows", grid=M, block=B,
                 args=(y, dy, dx, y.stride(0), dy.stride(0), dx.stride(0), N),
                 defines=_defines(B, y.dtype), mode=m)
    return _finish(dx, rep, return_report)


# ---------------------------------------------------------------- full_sum

_VERSION_LINE = re.compile(r"^//\s*@version\s+(\d+)\s+(\w+)\s+(1|2|grid)\s+(.+?)\s*$", re.M)


def _parse_versions():
    text = read_source("full_sum.cu")
    table, loads = {}, {}
    for num, kname, load, desc in _VERSION_LINE.findall(text):
        table[int(num)] = (kname, desc)
        loads[int(num)] = load
    return dict(sorted(table.items())), loads


#: 版本号 -> (内核名, 一句话说明)，从 full_sum.cu 的 ``@version`` 注释解析，文档与代码不会脱节
FULL_SUM_VERSIONS, _FULL_SUM_LOADS = _parse_versions()


def full_sum_plan(n: int, version: int, block_size: int = 256, max_blocks: int | None = None) -> list[tuple[int, int]]:
    """各级启动的 (输入长度, 线程块数)，直到只剩一个数。版本 7、8 的线程块数不超过 ``max_blocks``。"""
    if isinstance(version, bool) or not isinstance(version, int) or version not in FULL_SUM_VERSIONS:
        raise ValueError(f"version 只能是 {', '.join(map(str, FULL_SUM_VERSIONS))}，得到 {version!r} "
                         f"(unknown full_sum version)")
    if max_blocks is not None and (isinstance(max_blocks, bool) or not isinstance(max_blocks, int) or max_blocks < 1):
        raise ValueError(f"max_blocks 必须是正整数，得到 {max_blocks!r} (max_blocks must be a positive int)")
    load = _FULL_SUM_LOADS[version]
    if load == "grid" and max_blocks is None:
        raise ValueError("版本 7、8 需要 max_blocks >= 1 (versions 7 and 8 need max_blocks >= 1)")
    plan = []
    while True:
        if load == "1":
            blocks = _cdiv(n, block_size)
        elif load == "2":
            blocks = _cdiv(n, 2 * block_size)
        else:
            per_block = block_size * (2 if version == 7 else _UNROLL)
            blocks = min(_cdiv(n, per_block), max_blocks)
        plan.append((n, blocks))
        if blocks == 1:
            return plan
        n = blocks


def full_sum(x: torch.Tensor, version: int = 8, block_size: int = 256, max_blocks: int | None = None,
             return_report: bool = False, mode: str | None = None):
    """一维 float32 数组求和 -> 0 维张量。``version`` 取 :data:`FULL_SUM_VERSIONS` 的键。

    每一级把数组归约成每个线程块一个部分和，再用同一个内核归约部分和，直到只剩一个数
    （不用原子操作）。版本 7、8 的线程块数默认是 SM 数 x 每 SM 常驻块数（2048 / block_size）。
    ``return_report=True`` 时返回 (结果, 各级报告的列表)。
    """
    m = _mode(mode)
    _check_flags(return_report)
    check_vector(x, "x", dtypes=(torch.float32,), device=_device_for(m))
    if x.numel() > 2**31 - 1:
        raise ValueError(f"最多 2**31 - 1 个元素，得到 {x.numel()} (too many elements for unsigned int indices)")
    B = _check_block(block_size, 64)
    if max_blocks is None:
        max_blocks = _sm_count(x, m) * (2048 // B)
    plan = full_sum_plan(x.numel(), version, B, max_blocks)
    kname = FULL_SUM_VERSIONS[version][0]
    shared = 0 if version == 8 else B * 4
    cur, reports = x, []
    for n, blocks in plan:
        out = torch.empty(blocks, dtype=torch.float32, device=x.device)
        reports.append(launch("full_sum.cu", kname, grid=blocks, block=B, args=(cur, out, n),
                              shared_bytes=shared, defines={"BLOCK_SIZE": B}, mode=m))
        cur = out
    result = cur.reshape(())
    return _finish(result, reports if m == "sim" else None, return_report)


def _bound_go(lp, n_ptr: int, consts: tuple):
    """已缓存的启动计划 ``lp`` 的最短启动路径：``go(stream, *n_ptr 个地址)``，其余参数固定为 ``consts``；
    没有 torch 的启动器时返回 None。"""
    fast = getattr(lp, "fast", None)
    if fast is None or lp.version_of is not None:
        return None
    g0, g1, g2 = lp.grid
    if n_ptr == 2:
        return lambda stream, a, b: fast(g0, g1, g2, stream, a, b, *consts)
    return lambda stream, a, b, c: fast(g0, g1, g2, stream, a, b, c, *consts)


def bound_softmax(x: torch.Tensor):
    """:mod:`reduction_lab.fastcall` 用的最短路径：``x`` 是已经经 :func:`softmax_checked` 成功启动过一次的连续
    张量。返回 ``run(x2)``（同形状、dtype、设备的连续张量；它的对齐与建 runner 时不同时返回 None），或 None
    （这个形状的计划不是单次启动的短行内核 warp / rows / block）。"""
    if runtime.MODE != "gpu":
        return None
    M, N = x.shape
    dev = x.get_device()
    row_ok = (N * x.element_size()) % 16 == 0           # 连续张量的行距就是 N
    aligned = x.data_ptr() & 15 == 0 and row_ok
    plan = _SOFTMAX_PLANS.get((M, N, x.dtype, dev, aligned))
    if plan is None or plan[6] is None or plan[4] not in ("warp", "rows", "block"):
        return None
    kind, lp = plan[4], plan[6]
    if aligned and lp.version_of is None:                  # 编译版 runner 只接受首地址 16 字节对齐的输入
        from .. import host

        fast = host.cuda_runner(lp, dev, M, N, x.dtype, False,
                                ("X", "Y", N, N, M, N) if kind == "warp" else ("X", "Y", N, N, N))
        if fast is not None:
            return fast
    go = _bound_go(lp, 2, (N, N, M, N) if kind == "warp" else (N, N, N))
    if go is None:
        return None
    stream = torch._C._cuda_getCurrentRawStream
    empty_like = torch.empty_like

    def run(x2):
        px = x2.data_ptr()
        if (px & 15 == 0 and row_ok) != aligned:
            return None
        y = empty_like(x2)
        py = y.data_ptr()
        if py & 15:
            return None
        go(stream(dev), px, py)
        return y

    return run


def bound_reduce_sum(x: torch.Tensor):
    """同 :func:`bound_softmax`，按行求和：只用于一次启动、直接写出 x 的 dtype 的计划（warp 内核，或只有一段的
    split 内核）。"""
    if runtime.MODE != "gpu":
        return None
    M, N = x.shape
    plan = _SUM_PLANS.get((M, N, x.dtype, x.get_device()))
    if plan is None or plan[5] is None:
        return None
    name, grid, block, defines, split, lp = plan
    if lp.version_of is None and (split is None or split[1] == 1) and x.data_ptr() & 15 == 0:
        from .. import host

        args = ("X", "Y", N, M, N) if split is None else ("X", "Y", "Y", N, M, N, split[0])
        fast = host.cuda_runner(lp, x.get_device(), M, N, x.dtype, True, args)
        if fast is not None:
            return fast
    if split is None:
        go = _bound_go(lp, 2, (N, M, N))
        if go is None:
            return None
        go3 = None
    else:
        cols, chunks = split
        if chunks != 1:
            return None
        go3 = _bound_go(lp, 3, (N, M, N, cols))
        if go3 is None:
            return None
    dev = x.get_device()
    stream = torch._C._cuda_getCurrentRawStream
    empty_like = torch.empty_like
    template = torch.empty((M,), dtype=x.dtype, device=x.device)

    def run(x2):
        y = empty_like(template)
        py = y.data_ptr()
        if go3 is None:
            go(stream(dev), x2.data_ptr(), py)
        else:
            go3(stream(dev), x2.data_ptr(), py, py)
        return y

    return run
