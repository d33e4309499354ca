"""自动求导：每个 backend 上 softmax 与 reduce_sum 都能 backward，梯度正确；softmax 反向的融合内核
读 y、dy 各一次，写 dx 一次。"""

from __future__ import annotations

import warnings

import pytest
import torch

import reduction_lab as rl
from reduction_lab.autograd import BACKWARD_KERNELS
from reduction_lab.triton_kernels.softmax_backward import fused_softmax_backward, softmax_backward

# float64 gradcheck 需要 float64 的前向：torch 与 triton 有；cuda 与 tilelang 的内核只有 float32，
# 它们在 float32 下做 gradcheck，容差按 float32 的中心差分误差放宽（见 _FP32_GRADCHECK）
_FP64 = ("torch", "triton")
# eps=1e-3 的中心差分：前向误差约 1e-7 / 2e-3 = 5e-5，再加截断误差，远小于下面的容差
_FP32_GRADCHECK = dict(eps=1e-3, atol=5e-3, rtol=1e-2)


def _x(shape, dtype, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=rl.DEVICE, dtype=dtype)


def _gradcheck(fn, x, backend):
    if backend in _FP64:
        return torch.autograd.gradcheck(fn, (x,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # gradcheck 提醒输入不是 float64：这里是有意的
        return torch.autograd.gradcheck(fn, (x,), **_FP32_GRADCHECK)


def test_backward_table_names_every_backend():
    assert sorted(BACKWARD_KERNELS) == sorted(rl.api.IMPLEMENTATIONS)


@pytest.mark.parametrize("shape", [(3, 7), (1, 1), (2, 33)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_gradcheck(backend, shape):
    dtype = torch.float64 if backend in _FP64 else torch.float32
    x = _x(shape, dtype).requires_grad_()
    assert _gradcheck(lambda t: rl.softmax(t, backend=backend), x, backend)


@pytest.mark.parametrize("shape", [(3, 7), (2, 1)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_reduce_sum_gradcheck(backend, shape):
    dtype = torch.float64 if backend in _FP64 else torch.float32
    x = _x(shape, dtype, seed=1).requires_grad_()
    assert _gradcheck(lambda t: rl.reduce_sum(t, backend=backend), x, backend)


def test_grad_is_not_dropped(backend):
    """结果带 autograd 历史，backward 之后 x.grad 有值且等于 float64 的解析梯度。"""
    x = _x((4, 50), torch.float32, seed=2).requires_grad_()
    w = _x((4, 50), torch.float32, seed=3)
    y = rl.softmax(x, backend=backend)
    assert y.requires_grad and y.grad_fn is not None
    (y * w).sum().backward()
    xd = x.detach().double().requires_grad_()
    (torch.softmax(xd, -1) * w.double()).sum().backward()
    torch.testing.assert_close(x.grad.double(), xd.grad, atol=1e-6, rtol=1e-4)

    x.grad = None
    s = rl.reduce_sum(x, backend=backend)
    assert s.grad_fn is not None
    (s * torch.arange(4.0, device=rl.DEVICE)).sum().backward()
    torch.testing.assert_close(x.grad, torch.arange(4.0, device=rl.DEVICE)[:, None].expand(4, 50))


def test_no_grad_gives_plain_tensor(backend):
    x = _x((2, 8), torch.float32).requires_grad_()
    with torch.no_grad():
        assert rl.softmax(x, backend=backend).grad_fn is None
        assert rl.reduce_sum(x, backend=backend).grad_fn is None


# bf16 / fp16 的梯度与 float64 比：按 dtype 的有效位数给出容差（triton 与 torch 支持这两种 dtype）
_LOW = {torch.float16: dict(atol=2e-3, rtol=1e-2), torch.bfloat16: dict(atol=1e-2, rtol=5e-2)}


@pytest.mark.parametrize("impl", ["triton", "torch"])
@pytest.mark.parametrize("dtype", list(_LOW), ids=str)
def test_low_precision_grad_matches_float64(impl, dtype):
    x64 = _x((5, 300), torch.float64, seed=4)
    dy64 = _x((5, 300), torch.float64, seed=5, scale=1.0)
    x = x64.to(dtype).requires_grad_()
    rl.softmax(x, backend=impl).backward(dy64.to(dtype))
    ref = x64.to(dtype).double().requires_grad_()       # 同样舍入过的输入，float64 求导
    torch.softmax(ref, -1).backward(dy64)
    assert x.grad.dtype == dtype
    torch.testing.assert_close(x.grad.double(), ref.grad, **_LOW[dtype])


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 1000), (2, 40000)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_backward_kernel_matches_formula(shape):
    y = torch.softmax(_x(shape, torch.float64, seed=6), -1).to(rl.DEVICE)
    dy = _x(shape, torch.float64, seed=7, scale=1.0)
    want = y * (dy - (y * dy).sum(-1, keepdim=True))
    torch.testing.assert_close(softmax_backward(y, dy), want, atol=1e-12, rtol=1e-10)
    got32 = softmax_backward(y.float(), dy.float())
    torch.testing.assert_close(got32.double(), want, atol=1e-6, rtol=1e-4)
    if shape[1] <= 32768:
        torch.testing.assert_close(fused_softmax_backward(y, dy), want, atol=1e-12, rtol=1e-10)


def test_backward_kernel_strided_inputs():
    """y、dy 是行距大于行长的视图（以及 autograd 给出的步长为 0 的广播梯度）。"""
    big = torch.softmax(_x((6, 40), torch.float32, seed=8), -1)
    y = big[::2, 3:20]
    y = y / y.sum(-1, keepdim=True)
    dy = _x((3, 30), torch.float32, seed=9)[:, :17]
    want = y * (dy - (y * dy).sum(-1, keepdim=True))
    dx = softmax_backward(y, dy)
    assert dx.is_contiguous()
    torch.testing.assert_close(dx, want, atol=1e-6, rtol=1e-5)
    x = _x((3, 9), torch.float32).requires_grad_()
    rl.softmax(x).sum().backward()                      # dy 是 expand 出来的，步长 (0, 0)
    torch.testing.assert_close(x.grad, torch.zeros_like(x), atol=1e-6, rtol=0)


def test_backward_io_count():
    """融合反向：每个元素读一次 y、读一次 dy、写一次 dx。"""
    M, N = 30, 781
    x = _x((M, N), torch.float32).requires_grad_()
    y = rl.softmax(x)
    dy = _x((M, N), torch.float32, seed=1)
    with rl.count_memory() as rep:
        y.backward(dy)
    assert rep.kernels() == ["softmax_backward_rows_kernel"]
    assert (rep.elements_loaded, rep.elements_stored) == (2 * M * N, M * N)
    assert rep[0].loaded_by_arg == {"y_ptr": M * N, "dy_ptr": M * N}
    with rl.count_memory() as rep:
        fused_softmax_backward(y.detach(), dy)
    assert (rep.launches, rep.elements_loaded, rep.elements_stored) == (1, 2 * M * N, M * N)


def test_backward_input_errors():
    y = torch.rand(3, 4, device=rl.DEVICE)
    with pytest.raises(ValueError, match="形状必须相同"):
        softmax_backward(y, torch.rand(3, 5, device=rl.DEVICE))
    with pytest.raises(TypeError, match="dtype 必须相同"):
        softmax_backward(y, torch.rand(3, 4, device=rl.DEVICE, dtype=torch.float64))
    with pytest.raises(ValueError, match="stride"):
        softmax_backward(y, torch.rand(4, 3, device=rl.DEVICE).t())
    with pytest.raises(ValueError, match="最多 32768 列"):
        fused_softmax_backward(torch.rand(1, 40000, device=rl.DEVICE), torch.rand(1, 40000, device=rl.DEVICE))


def test_second_derivative_of_softmax_is_refused_not_zero(backend):
    if backend == "torch":
        pytest.skip("torch 自己的 softmax 有二阶导数；这里测的是本包的 autograd.Function")
    x = _x((2, 6), torch.float32).requires_grad_()
    y = rl.softmax(x, backend=backend)
    (g,) = torch.autograd.grad((y * y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice"):
        g.sum().backward()
    # reduce_sum 的反向是广播：二阶导数存在（为 0）
    s = rl.reduce_sum(x, backend=backend)
    (g,) = torch.autograd.grad((s * s).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(h, torch.full_like(x, 12.0))


@pytest.mark.parametrize("impl,kernels", [("triton", ["softmax_backward_rows_kernel"]),
                                          ("tilelang", []),
                                          ("cuda", [])])
def test_backward_runs_the_documented_kernel(impl, kernels):
    """BACKWARD_KERNELS 写的是实话：triton 的反向启动 Triton 融合内核；cuda 与 tilelang 的反向是各自
    backend 的内核（不经过 Triton，所以 count_memory 数不到它们）；reduce_sum 的反向不启动任何内核。"""
    if impl == "tilelang":
        pytest.importorskip("tilelang", reason="tilelang backend 需要 tilelang")
    x = _x((3, 40), torch.float32).requires_grad_()
    y = rl.softmax(x, backend=impl)
    s = rl.reduce_sum(x, backend=impl)
    with rl.count_memory() as rep:
        y.backward(torch.ones_like(y) * 0.5, retain_graph=True)
        s.backward(torch.ones_like(s))
    assert rep.kernels() == kernels
    assert ("triton" in BACKWARD_KERNELS[impl]) == bool(kernels)


@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="要在 GPU 上经 CuPy 运行 softmax_backward.cu，才能与模拟器比较")
def test_cuda_backward_same_on_gpu_and_in_simulator():
    """同一份 softmax_backward.cu：GPU 上经 CuPy，与 CPU 上经模拟器，结果一致（GPU 会把乘加合成 FMA，
    所以按 float32 的舍入误差比较，不要求逐位相等）。"""
    from reduction_lab import cuda_kernels as ck

    y = torch.softmax(_x((5, 3000), torch.float32, seed=12).cpu(), -1)
    dy = _x((5, 3000), torch.float32, seed=13).cpu()
    on_gpu = ck.softmax_backward(y.cuda(), dy.cuda()).cpu()
    in_sim = ck.softmax_backward(y, dy, mode="sim")
    torch.testing.assert_close(on_gpu, in_sim, atol=1e-7, rtol=1e-5)


def test_tilelang_backward_kernel():
    """TileLang 版反向：与公式一致（奇数宽度、M=1、一行跨几个块），并且能降级成 sm_90 的 CUDA C、
    由 nvcc 编译（不需要 GPU；没有 nvcc 时只比较数值）。"""
    pytest.importorskip("tilelang", reason="tilelang backend 需要 tilelang，当前环境没有安装")
    import shutil

    from reduction_lab import tilelang_kernels as tk

    for shape in [(1, 1), (3, 7), (2, 2100)]:
        y = torch.softmax(_x(shape, torch.float32, seed=14), -1)
        dy = _x(shape, torch.float32, seed=15)
        want = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
        torch.testing.assert_close(tk.softmax_backward(y, dy).double(), want, atol=1e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="行主序连续"):
        tk.softmax_backward(y[:, :50], dy[:, :50])
    if shutil.which("nvcc"):
        assert ".entry" in tk.nvcc_check(tk.cuda_source("softmax_backward", 64, 3000))


def test_long_row_backward_reads_twice():
    """一行装不进一个块（N > 32768）时，生产版反向分块读两遍 y 与 dy：读 4MN，写 MN。"""
    M, N = 2, 40000
    y = torch.softmax(_x((M, N), torch.float32, seed=16), -1)
    dy = _x((M, N), torch.float32, seed=17)
    with rl.count_memory() as rep:
        softmax_backward(y, dy)
    assert rep.kernels() == ["softmax_backward_looped_kernel"]
    assert (rep.elements_loaded, rep.elements_stored) == (4 * M * N, M * N)
