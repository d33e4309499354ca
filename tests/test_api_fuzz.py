"""随机形状、步长、dtype 下与 torch 对照（每个 backend 一组固定种子的用例），以及行偏移超过 2**31 个
元素的跨步视图（64 位偏移）。"""

from __future__ import annotations

import random

import pytest
import torch

import reduction_lab as rl
from reduction_lab.api import DTYPES

# 每个 backend 的用例数：TileLang 每种形状要编译一次（sim 模式下约 1 秒），所以少一些
_CASES = {"torch": 24, "triton": 24, "cuda": 24, "tilelang": 4}
_TOL = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-12, 1e-10),
        torch.float16: (2e-3, 1e-2), torch.bfloat16: (1e-2, 5e-2)}


def _case(rng: random.Random, backend: str):
    m = rng.choice([1, 2, 3, 5, 8])
    n = rng.choice([1, 2, 7, 31, 64, 100, 257, 1000])
    # sim 模式的 TileLang（C 目标）没有 bfloat16：reduction_lab.tilelang_kernels.BF16_C_TARGET
    dtype = rng.choice([d for d in DTYPES[backend]
                        if not (backend == "tilelang" and rl.MODE == "sim" and d == torch.bfloat16)])
    layout = rng.choice(["contiguous", "row-gap", "col-offset", "broadcast", "overlap"] if backend != "tilelang"
                        else ["contiguous"])
    g = torch.Generator().manual_seed(rng.randrange(2**31))
    scale = rng.choice([0.1, 1.0, 30.0])
    if layout == "contiguous":
        x = torch.randn(m, n, generator=g) * scale
    elif layout == "row-gap":                      # 行距大于行长
        x = (torch.randn(2 * m, n + 3, generator=g) * scale)[::2, :n]
    elif layout == "col-offset":                   # 起点不在存储开头
        x = (torch.randn(m, n + 5, generator=g) * scale)[:, 5:]
    elif layout == "broadcast":                    # 行距为 0：同一行重复 m 次
        x = (torch.randn(1, n, generator=g) * scale).expand(m, n)
    else:                                          # 相邻的行互相重叠（行距是行长的一半）
        x = (torch.randn(m * n, generator=g) * scale).as_strided((m, n), (max(1, n // 2), 1))
    return x.to(dtype=dtype, device=rl.DEVICE), layout


def test_fuzz_against_torch(backend):
    rng = random.Random(f"fuzz-{backend}")
    for i in range(_CASES[backend]):
        x, layout = _case(rng, backend)
        what = f"用例 {i}: shape {tuple(x.shape)} stride {x.stride()} {x.dtype} {layout}"
        atol, rtol = _TOL[x.dtype]
        y = rl.softmax(x, backend=backend)
        assert y.is_contiguous() and y.dtype == x.dtype and y.shape == x.shape, what
        torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=atol, rtol=rtol, msg=what)
        s = rl.reduce_sum(x, backend=backend)
        assert s.is_contiguous() and s.dtype == x.dtype and s.shape == (x.shape[0],), what
        want = x.double().sum(1)
        torch.testing.assert_close(s.double(), want, atol=atol * x.shape[1] ** 0.5 * max(1.0, want.abs().max().item()),
                                   rtol=rtol, msg=what)


# 2 行、每行 64 个 float32，第二行从第 2**31 + 8 个元素开始：int32 的 row * stride 会回绕。
# 缓冲区约 8 GiB，但只写两行；CPU 上未触碰的页不占内存（GPU 上真实分配 8 GiB）。
_ROW_STRIDE = 2**31 + 8


@pytest.fixture(scope="module")
def far_rows():
    buf = torch.empty(_ROW_STRIDE + 64, dtype=torch.float32, device=rl.DEVICE)
    g = torch.Generator().manual_seed(3)
    buf[:64] = (torch.randn(64, generator=g) * 3).to(rl.DEVICE)
    buf[_ROW_STRIDE:_ROW_STRIDE + 64] = (torch.randn(64, generator=g) * 3).to(rl.DEVICE)
    x = buf.as_strided((2, 64), (_ROW_STRIDE, 1))
    yield x
    del x, buf


def test_row_offsets_past_2_31(backend, far_rows):
    x = far_rows
    if backend == "tilelang":
        with pytest.raises(ValueError, match=r"行主序连续.*stride \(2147483656, 1\)"):
            rl.softmax(x, backend=backend)
        return
    torch.testing.assert_close(rl.softmax(x, backend=backend), torch.softmax(x, -1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(rl.reduce_sum(x, backend=backend), x.sum(1), atol=1e-4, rtol=1e-5)


def test_backward_row_offsets_past_2_31(far_rows):
    from reduction_lab.triton_kernels.softmax_backward import softmax_backward

    y = far_rows                                  # 当作 y 与 dy 都可以：只看地址是否算对
    want = y * (y - (y * y).sum(-1, keepdim=True))
    torch.testing.assert_close(softmax_backward(y, y), want, atol=1e-4, rtol=1e-5)
    from reduction_lab.cuda_kernels import softmax_backward as cuda_backward

    torch.testing.assert_close(cuda_backward(y, y), want, atol=1e-4, rtol=1e-5)
