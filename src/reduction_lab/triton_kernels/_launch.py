"""Triton 包装函数共用的小工具：块大小、warp 数、SM 数。"""

from __future__ import annotations

import functools

import triton

from ..runtime import MODE


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(int(n))


def warps_for(block_elems: int) -> int:
    """按每个 program 处理的元素数选 warp 数：每个线程大约 8–32 个元素。"""
    if block_elems >= 32768:
        return 32
    if block_elems >= 8192:
        return 16
    if block_elems >= 2048:
        return 8
    return 4


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """GPU 的 SM 数；sim 模式下返回 1（解释器一个接一个地运行 program）。"""
    if MODE != "gpu":
        return 1
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


if MODE == "sim":
    from ..triton_compat import install_index_fix, install_interpreter_lock

    install_index_fix()
    install_interpreter_lock()      # 解释器不是线程安全的：几个线程的启动依次执行
