"""输入检查的唯一出处：形状、dtype、步长、空张量。

所有包装函数（Triton / CUDA / TileLang / torch 参考实现）都调用这里，错误信息一致，
并且指出具体问题，不会静默地给出错误结果。
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: 每行最多的元素数：列下标（含块内的余量）按 32 位整数计算
MAX_COLS = 2**31 - 2**21


def _check_layout(x, name: str) -> None:
    """内核按 data_ptr 与步长读原始内存：只接受普通（strided）张量，且没有延迟的取负 / 共轭标记。"""
    if getattr(x, "is_nested", False):
        raise TypeError(f"{name} 是嵌套张量（nested tensor），不受支持 ({name} is a nested tensor: unsupported)")
    if x.layout != torch.strided:
        raise TypeError(f"{name} 的布局是 {x.layout}，只支持普通的 torch.strided 张量；稀疏张量请先 .to_dense() "
                        f"({name} has layout {x.layout}; only torch.strided is supported)")
    if x.is_neg() or x.is_conj():
        raise ValueError(f"{name} 带有延迟的取负 / 共轭标记（内核读到的是原始内存）；请先 .resolve_neg() / .resolve_conj() "
                         f"({name} has a lazy negation/conjugation bit; resolve it first)")


def check_matrix(x, name: str = "x", dtypes=FLOAT_DTYPES, device: str | None = None) -> None:
    """检查 ``x`` 是二维、非空、最后一维连续、dtype 受支持的 torch 张量。"""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(x).__name__} ({name} must be a torch.Tensor)")
    _check_layout(x, name)
    if x.dim() != 2:
        raise ValueError(
            f"{name} 必须是二维张量 (M, N)，得到形状 {tuple(x.shape)} "
            f"({name} must be 2-D, got shape {tuple(x.shape)})"
        )
    if x.numel() == 0:
        raise ValueError(
            f"{name} 是空张量，形状 {tuple(x.shape)}：归约需要至少一行一列 "
            f"({name} is empty, shape {tuple(x.shape)})"
        )
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(
            f"{name} 的 dtype {str(x.dtype).replace('torch.', '')} 不受支持，可用：{names} "
            f"(unsupported dtype {x.dtype})"
        )
    if x.shape[1] > MAX_COLS:
        raise ValueError(
            f"{name} 每行 {x.shape[1]} 个元素，超过上限 {MAX_COLS}（内核的列下标是 32 位整数） "
            f"({name} has {x.shape[1]} columns; at most {MAX_COLS} are supported: column indices are 32-bit)")
    if x.stride(1) != 1 and x.shape[1] != 1:     # 只有一列时 stride(1) 无关紧要
        raise ValueError(
            f"{name} 的最后一维必须连续（stride(1) == 1），得到 stride {tuple(x.stride())}；"
            f"可以先调用 .contiguous() ({name} must have a contiguous last dimension)"
        )
    if device is not None and not (x.is_cuda if device == "cuda" else x.device.type == device):
        raise ValueError(
            f"{name} 在 {x.device} 上，当前模式需要 {device} 张量（用 reduction_lab.DEVICE 创建） "
            f"({name} is on {x.device}, expected a {device} tensor)"
        )


def check_vector(x, name: str = "x", dtypes=FLOAT_DTYPES, device: str | None = None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(x).__name__} ({name} must be a torch.Tensor)")
    _check_layout(x, name)
    if x.dim() != 1:
        raise ValueError(f"{name} 必须是一维张量，得到形状 {tuple(x.shape)} ({name} must be 1-D)")
    if x.numel() == 0:
        raise ValueError(f"{name} 是空张量 ({name} is empty)")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} 的 dtype {str(x.dtype).replace('torch.', '')} 不受支持，可用：{names} "
                        f"(unsupported dtype {x.dtype})")
    if x.stride(0) != 1:
        raise ValueError(f"{name} 必须连续，得到 stride {tuple(x.stride())} ({name} must be contiguous)")
    if device is not None and not (x.is_cuda if device == "cuda" else x.device.type == device):
        raise ValueError(f"{name} 在 {x.device} 上，当前模式需要 {device} 张量 ({name} is on {x.device}, expected {device})")


def check_out(out, shape, dtype, device, name: str = "out") -> None:
    """检查调用者提供的输出张量：类型、形状、dtype、设备、连续布局，且不与输入重叠由调用者负责。"""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(out).__name__} ({name} must be a torch.Tensor)")
    _check_layout(out, name)
    shape = tuple(shape)
    if tuple(out.shape) != shape:
        raise ValueError(
            f"{name} 的形状应为 {shape}，得到 {tuple(out.shape)} "
            f"({name} has shape {tuple(out.shape)}, expected {shape})"
        )
    if out.dtype != dtype:
        want, got = str(dtype).replace("torch.", ""), str(out.dtype).replace("torch.", "")
        raise TypeError(f"{name} 的 dtype 应为 {want}，得到 {got} ({name} has dtype {got}, expected {want})")
    dev = torch.device(device)
    if out.device.type != dev.type or (dev.index is not None and out.device.index != dev.index):
        raise ValueError(f"{name} 在 {out.device} 上，应在 {device} 上 ({name} is on {out.device}, expected {device})")
    if not out.is_contiguous():
        raise ValueError(
            f"{name} 必须是连续张量，得到 stride {tuple(out.stride())}；用 torch.empty(...) 分配 "
            f"({name} must be contiguous, got stride {tuple(out.stride())})"
        )


def _span(t) -> tuple[int, int]:
    """张量元素覆盖的字节区间 [起点, 终点)。"""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    last = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def check_no_overlap(out, x, out_name: str = "out", x_name: str = "x") -> None:
    """``out`` 与 ``x`` 的内存区间不能相交（内核一边读一边写会读到写过的值）。"""
    if out.device != x.device:          # 不看存储对象：两个存储可以指向同一块内存（如 from_numpy 的切片）
        return
    (a0, a1), (b0, b1) = _span(out), _span(x)
    if a0 < b1 and b0 < a1:
        raise ValueError(
            f"{out_name} 与 {x_name} 的内存重叠（字节区间 [{a0:#x}, {a1:#x}) 与 [{b0:#x}, {b1:#x}) 相交）；"
            f"请给 {out_name} 分配新的张量 ({out_name} overlaps {x_name} in memory; allocate a separate output)")


def check_int(value, name: str, lo: int | None = 1, hi: int | None = None, pow2: bool = False,
              allow_none: bool = True) -> None:
    """检查调优参数：整数（不是 bool）、在 [lo, hi] 内、需要时是 2 的幂。"""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} 必须是整数，得到 {type(value).__name__} {value!r} ({name} must be an int)")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise ValueError(f"{name} 必须在 {rng} 之内，得到 {value} ({name} must be in {rng}, got {value})")
    if pow2 and value & (value - 1):
        raise ValueError(f"{name} 必须是 2 的幂，得到 {value} ({name} must be a power of two, got {value})")


#: Triton 张量最多的元素个数（triton.TRITON_MAX_TENSOR_NUMEL）
TRITON_MAX_BLOCK = 1 << 20
_EVICTION = ("", "evict_first", "evict_last")


def check_triton_tuning(*, block_size=None, block_m=None, block_n=None, n_split=None, num_warps=None,
                        programs_per_sm=None, num_stages=None, chunk=None, eviction_policy="") -> None:
    """Triton 包装函数的调优参数：块大小是 2 的幂、块内元素不超过 2**20、warp 数是 1..32 的 2 的幂、
    段数 / 级数是正整数、驱逐策略是 Triton 认得的名字。在启动之前调用。"""
    for name, v in (("block_size", block_size), ("block_m", block_m), ("block_n", block_n), ("chunk", chunk)):
        check_int(v, name, lo=1, hi=TRITON_MAX_BLOCK, pow2=True)
    if block_m is not None and block_n is not None and block_m * block_n > TRITON_MAX_BLOCK:
        raise ValueError(f"block_m * block_n = {block_m * block_n} 超过 Triton 一个块的上限 {TRITON_MAX_BLOCK} "
                         f"(block_m * block_n exceeds Triton's {TRITON_MAX_BLOCK} elements per block)")
    check_int(num_warps, "num_warps", lo=1, hi=32, pow2=True)
    check_int(n_split, "n_split", lo=1)
    check_int(programs_per_sm, "programs_per_sm", lo=1)
    check_int(num_stages, "num_stages", lo=1)
    if eviction_policy not in _EVICTION:
        raise ValueError(f"eviction_policy 只能是 {', '.join(map(repr, _EVICTION))} 之一，得到 {eviction_policy!r} "
                         f"(unknown eviction_policy {eviction_policy!r})")
