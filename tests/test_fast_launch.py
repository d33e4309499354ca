"""FastLaunch：第一次按 Triton 的正常路径启动，之后同一特化直接调用已编译内核的启动器。

特化键必须至少与 Triton 自己的一样细：地址不对齐 16 字节的张量、等于 1 或是 16 的倍数的整数、
超出 int32 的整数都会让 Triton 编译另一个版本；FastLaunch 用错版本时结果会错（或越界）。
这里在两种模式下都检查结果；gpu 模式下还检查每种特化各自进了缓存。
"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl
import triton
import triton.language as tl

from reduction_lab.triton_kernels._launch import FastLaunch


@triton.jit
def _scale_rows(out_ptr, in_ptr, stride, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x * scale, mask=mask)


def _run(fl, x, scale):
    # 与 x 行距相同的输出（内核对两者用同一个 stride）
    out = torch.full((x.shape[0], x.stride(0)), float("nan"), device=x.device, dtype=x.dtype)[:, :x.shape[1]]
    fl((x.shape[0],), out, x, x.stride(0), x.shape[1], scale, BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


def test_fast_launch_matches_reference_across_specialisations():
    fl = FastLaunch(_scale_rows)
    base = torch.randn(8, 40, device=rl.DEVICE)
    cases = [
        (base, 3),                         # 对齐的张量、普通整数
        (base, 1),                         # 整数 1：Triton 把它特化成常量
        (base, 16),                        # 16 的倍数
        (base[:, 1:], 2),                  # 地址不对齐 16 字节、行距不是 16 的倍数
        (base[:, :33], 5),
    ]
    for _ in range(3):                     # 第一轮走正常路径并记下内核，之后走快速路径
        for x, scale in cases:
            got = _run(fl, x, scale)
            torch.testing.assert_close(got, x * scale, msg=f"shape {tuple(x.shape)} scale {scale}")
    if rl.MODE == "gpu":
        assert fl.enabled
        assert len(fl.cache) >= 4         # 至少四种不同的特化
        from reduction_lab import torch_launcher
        from reduction_lab.triton_kernels._launch import _TORCH

        if torch_launcher.kind() is not None:   # torch 带了 C++ 启动器：每种特化（含 scale = 1 被特化掉的）都用它
            assert all(entry[0] == _TORCH for entry in fl.cache.values())
    else:
        assert not fl.enabled             # 解释器里总是走 Triton 的正常路径


def test_fast_launch_refuses_non_tensor_non_int_args():
    """浮点标量等参数不进快速路径（特化规则不同），照常由 Triton 启动，结果仍然正确。"""
    fl = FastLaunch(_scale_rows)
    x = torch.randn(4, 16, device=rl.DEVICE)
    for _ in range(2):
        got = _run(fl, x, 0.5)
        torch.testing.assert_close(got, x * 0.5)
    assert not fl.cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_api_fast_path_repeated_calls(dtype):
    """同一形状连续调用（第二次起走快速路径）与不同形状交替调用，结果都与 torch 一致。"""
    shapes = [(64, 1024), (3, 100), (64, 1024), (5, 4096), (3, 100)]
    for (m, n) in shapes * 2:
        x = torch.randn(m, n, device=rl.DEVICE).to(dtype)
        tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=2e-2)
        torch.testing.assert_close(rl.softmax(x).float(), torch.softmax(x.float(), 1), **tol)
        torch.testing.assert_close(rl.reduce_sum(x).float(), x.float().sum(1),
                                   atol=1e-3 if dtype == torch.float32 else 0.5, rtol=1e-4 if dtype == torch.float32 else 2e-2)
