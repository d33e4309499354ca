"""所有实现共用的内核测试（通过统一入口 reduction_lab.reduce_sum / softmax）。

    pytest tests/test_kernels.py --backend triton     # 只测一种实现
"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl

# 奇数宽度、N=1、M=1、比一个块长的行（sim 模式下保持 CPU 友好）
SHAPES = [(1, 1), (1, 7), (3, 1), (5, 96), (4, 100), (7, 781), (2, 1000), (3, 4097), (2, 20000)]


def _rand(shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(rl.DEVICE)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_reduce_sum_matches_float64(backend, shape):
    x = _rand(shape)
    got = rl.reduce_sum(x, dim=1, backend=backend)
    assert got.shape == (shape[0],)
    want = x.double().sum(dim=1)
    # float32 累加：误差随 sqrt(N) 增长，绝对 + 相对容差
    torch.testing.assert_close(got.double(), want, atol=1e-4 * shape[1] ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_matches_float64(backend, shape):
    x = _rand(shape, seed=1, scale=3.0)
    got = rl.softmax(x, backend=backend)
    assert got.shape == x.shape and got.dtype == x.dtype
    want = torch.softmax(x.double(), dim=1)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-4)
    # 不变量：每行和为 1，输出在 [0, 1]
    torch.testing.assert_close(got.double().sum(1), torch.ones(shape[0], dtype=torch.float64, device=x.device),
                               atol=1e-5, rtol=0)
    assert bool(((got >= 0) & (got <= 1)).all())


def test_softmax_extreme_rows(backend):
    x = torch.tensor([[-1e4, -2e4, -3e4, -1e4 - 1],        # 全负：屏蔽车道若填 0 就会出错
                      [80.0, 81.0, 79.0, 1e4],             # 大值：exp 不减最大值会溢出
                      [0.0, 0.0, 0.0, 0.0]], device=rl.DEVICE)
    got = rl.softmax(x, backend=backend)
    want = torch.softmax(x.double(), dim=1)
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-4)


def test_bad_input_errors(backend):
    with pytest.raises(ValueError, match="二维"):
        rl.reduce_sum(torch.ones(3, device=rl.DEVICE), backend=backend)
    with pytest.raises(ValueError, match="空张量"):
        rl.softmax(torch.ones(0, 4, device=rl.DEVICE), backend=backend)
    with pytest.raises(ValueError, match="stride"):
        rl.reduce_sum(torch.ones(4, 6, device=rl.DEVICE).t(), backend=backend)
    with pytest.raises(TypeError, match="dtype"):
        rl.softmax(torch.ones(2, 3, dtype=torch.int32, device=rl.DEVICE), backend=backend)
    with pytest.raises(ValueError, match="dim"):
        rl.reduce_sum(torch.ones(2, 3, device=rl.DEVICE), dim=2, backend=backend)
    if backend in rl.api.COLUMN_BACKENDS:
        return
    with pytest.raises(ValueError, match="dim=0"):
        rl.reduce_sum(torch.ones(2, 3, device=rl.DEVICE), dim=0, backend=backend)


@pytest.mark.parametrize("shape", [(1, 1), (7, 300), (513, 5)])
def test_reduce_sum_dim0(shape):
    """dim=0：每列求和，torch 与 triton 后端；triton 可求导（反向是广播）。"""
    x = torch.randn(*shape, device=rl.DEVICE)
    for backend in rl.api.COLUMN_BACKENDS:
        torch.testing.assert_close(rl.reduce_sum(x, dim=0, backend=backend), x.sum(0), atol=1e-4, rtol=1e-5)
    out = torch.empty(shape[1], device=rl.DEVICE)
    assert rl.reduce_sum(x, dim=0, out=out) is out
    torch.testing.assert_close(out, x.sum(0), atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="形状"):
        rl.reduce_sum(x, dim=0, out=torch.empty(shape[1] + 1, device=rl.DEVICE))
    xg = x.clone().requires_grad_(True)
    dy = torch.randn(shape[1], device=rl.DEVICE)
    rl.reduce_sum(xg, dim=0).backward(dy)
    torch.testing.assert_close(xg.grad, dy.expand(shape[0], -1))


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        rl.reduce_sum(torch.ones(2, 3, device=rl.DEVICE), backend="numba")
