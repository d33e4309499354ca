"""默认 backend ``"auto"``：每次调用按 (操作, 行长, dtype, GPU) 选一个实现，选择规则只写在这里。

规则（依据 H200 上的实测，docs/data/h200.json 的 softmax 与 row-sum 套件）：

* softmax：GPU 有线程块簇（计算能力 9.0 以上）、装了 CuPy、dtype 是 float32 / bfloat16 / float16，并且
  CUDA C 的启动计划在这个行长上是簇内核（:data:`reduction_lab.cuda_kernels.SOFTMAX_CONFIGS` 里的
  ``cluster``）时用 ``"cuda"``：一行分给一个簇，整行留在寄存器里，HBM 只读一遍——Triton 写不出线程块簇，
  它的长行内核要经全局内存交换 (m, s)；行长到一个簇（寄存器加共享内存）也放不下（表末行的 ``grid``：常驻网格，
  段预取进共享内存，每个元素只算一次 exp）时也用 ``"cuda"``：16 位的 N > 2^20 上常驻网格 bf16 约 70% 对 Triton 的 55%
  （docs/data/h200_cuda_softmax_grid.json）；float32 的 N = 2^20 在 H200 上两者相差在噪声之内（同一次扫描里常驻网格
  78%、Triton 的分段内核 77%，提交的基准运行 docs/data/h200.json 里 76% 对 77%），H100 上的完整运行
  （docs/data/h100.json）里常驻网格 90%、Triton 88%；其余情形用 ``"triton"``
  （短行时它最快，一次调用的主机开销也最少）；
* reduce_sum：总是 ``"triton"``。

sim 模式（没有 GPU）总是 ``"triton"``，所以页面上的代码块在两种模式下走同一条路径时输出相同。
:func:`choice` 是不看设备的纯函数（页面与测试用它列出 H200 上的选择），:func:`resolve` 是每次调用用的
缓存版本。课程页面：docs/bench/index.md 的「默认backend选哪个实现」。
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from .runtime import MODE

__all__ = ["OPS", "choice", "depends_on_alignment", "resolve"]

OPS = ("softmax", "reduce_sum")


def choice(op: str, n_cols: int, dtype: torch.dtype, *, clusters: bool, cupy: bool = True,
           aligned: bool = True) -> str:
    """``backend="auto"`` 在一块 GPU 上选的实现："triton" 或 "cuda"。

    ``clusters``：GPU 有没有线程块簇（计算能力 9.0 以上）；``cupy``：CuPy 能不能导入（CUDA C 经它编译、
    加载内核）；``aligned``：每行是否从 16 字节边界开始（不对齐时簇内核每行多占一个向量，可能放不下）。"""
    if op not in OPS:
        raise ValueError(f"op 只能是 {', '.join(OPS)} 之一，得到 {op!r} (op must be one of {OPS})")
    if op == "reduce_sum" or not (clusters and cupy):
        return "triton"
    from .cuda_kernels import DTYPES, softmax_plan

    if dtype not in DTYPES:                         # CUDA C 不接受的 dtype（float64）
        return "triton"
    plan = softmax_plan(1, n_cols, dtype, clusters=True, aligned=aligned)
    return "cuda" if plan["kernel"] in ("cluster", "pipe", "grid") else "triton"


@functools.lru_cache(maxsize=None)
def _device_can_cluster(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


@functools.lru_cache(maxsize=None)
def _have_cupy() -> bool:
    return importlib.util.find_spec("cupy") is not None


_CACHE: dict = {}


def resolve(op: str, x: torch.Tensor) -> str:
    """这一次调用用哪个 backend（``x`` 已经由 :mod:`reduction_lab.api` 检查过）。按 (操作, 行长, dtype, 设备)
    缓存；选中 "cuda" 时再看这一次的 ``x`` 的行是否对齐（不对齐时按不对齐的计划重新选）。"""
    if MODE != "gpu" or op != "softmax":
        return "triton"
    dev = x.get_device()
    key = (x.shape[1], x.dtype, dev)
    hit = _CACHE.get(key)
    if hit is None:
        clusters, cupy = _device_can_cluster(dev), _have_cupy()
        hit = _CACHE[key] = (choice(op, x.shape[1], x.dtype, clusters=clusters, cupy=cupy),
                             choice(op, x.shape[1], x.dtype, clusters=clusters, cupy=cupy, aligned=False))
    aligned_choice, unaligned_choice = hit
    if aligned_choice == unaligned_choice:
        return aligned_choice
    from .cuda_kernels.launcher import rows_aligned

    return aligned_choice if rows_aligned(x) else unaligned_choice


def depends_on_alignment(op: str, x: torch.Tensor) -> bool:
    """这一组 (操作, 行长, dtype, 设备) 上，``resolve`` 的结果是否取决于 ``x`` 的行是否对齐
    （:mod:`reduction_lab.fastcall` 据此决定 ``auto`` 的快速路径要不要检查对齐）。"""
    if MODE != "gpu" or op != "softmax":
        return False
    resolve(op, x)
    aligned_choice, unaligned_choice = _CACHE[(x.shape[1], x.dtype, x.get_device())]
    return aligned_choice != unaligned_choice
