"""输入检查的唯一出处：形状、dtype、步长、空张量。

所有包装函数（Triton / CUDA / TileLang / torch 参考实现）都调用这里，错误信息一致，
并且指出具体问题，不会静默地给出错误结果。
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_matrix(x, name: str = "x", dtypes=FLOAT_DTYPES, device: str | None = None) -> None:
    """检查 ``x`` 是二维、非空、最后一维连续、dtype 受支持的 torch 张量。"""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(x).__name__} ({name} must be a torch.Tensor)")
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
    if x.stride(1) != 1:
        raise ValueError(
            f"{name} 的最后一维必须连续（stride(1) == 1），得到 stride {tuple(x.stride())}；"
            f"可以先调用 .contiguous() ({name} must have a contiguous last dimension)"
        )
    if device is not None and x.device.type != device:
        raise ValueError(
            f"{name} 在 {x.device} 上，当前模式需要 {device} 张量（用 reduction_lab.DEVICE 创建） "
            f"({name} is on {x.device}, expected a {device} tensor)"
        )


def check_vector(x, name: str = "x", dtypes=FLOAT_DTYPES, device: str | None = None) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(x).__name__}")
    if x.dim() != 1:
        raise ValueError(f"{name} 必须是一维张量，得到形状 {tuple(x.shape)} ({name} must be 1-D)")
    if x.numel() == 0:
        raise ValueError(f"{name} 是空张量 ({name} is empty)")
    if x.dtype not in dtypes:
        raise TypeError(f"{name} 的 dtype {x.dtype} 不受支持 (unsupported dtype)")
    if x.stride(0) != 1:
        raise ValueError(f"{name} 必须连续，得到 stride {tuple(x.stride())} ({name} must be contiguous)")
    if device is not None and x.device.type != device:
        raise ValueError(f"{name} 在 {x.device} 上，当前模式需要 {device} 张量")


def check_out(out, shape, dtype, device, name: str = "out") -> None:
    """检查调用者提供的输出张量：类型、形状、dtype、设备、连续布局，且不与输入重叠由调用者负责。"""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} 必须是 torch.Tensor，得到 {type(out).__name__} ({name} must be a torch.Tensor)")
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
