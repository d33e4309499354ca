"""统一入口 reduction_lab.softmax / reduce_sum 的错误输入，按类别分组：每个错误在启动任何内核之前
抛出，类型正确，信息里有点明问题的词（中文在前，英文在后）。"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl

OPS = ("softmax", "reduce_sum")


def _call(op, *args, **kwargs):
    return getattr(rl, op)(*args, **kwargs)


def _x(m=3, n=8, **kw):
    return torch.randn(m, n, device=rl.DEVICE, **kw)


def _no_launch(fn):
    """fn 必须抛出异常，且在抛出之前没有启动任何 Triton 内核。"""
    with rl.count_memory() as rep:
        try:
            fn()
        except Exception as e:          # noqa: BLE001
            assert rep.launches == 0, f"报错之前启动了内核：{rep.kernels()}"
            raise e
    raise AssertionError("没有抛出异常")


# ---------------------------------------------------------------- 参数的类型

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bad", [[[1.0, 2.0]], 3.0, None, "x"], ids=["list", "float", "None", "str"])
def test_x_not_a_tensor(backend, op, bad):
    with pytest.raises(TypeError, match=r"必须是 torch\.Tensor.*must be a torch\.Tensor"):
        _call(op, bad, backend=backend)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", [0, 2, -2, 1.0, "1", None, True], ids=repr)
def test_bad_dim(backend, op, dim):
    if op == "reduce_sum" and dim in (0, -2) and dim is not True:
        if backend in rl.api.COLUMN_BACKENDS:       # 沿列求和：这两个后端支持
            assert _call(op, _x(), dim=dim, backend=backend).shape == (_x().shape[1],)
            return
        with pytest.raises(ValueError, match=r"dim=0.*only"):
            _call(op, _x(), dim=dim, backend=backend)
        return
    with pytest.raises(ValueError, match=r"dim=.*only dim=1"):
        _call(op, _x(), dim=dim, backend=backend)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("b", ["numba", "", None, 1, "Triton"], ids=repr)
def test_bad_backend(op, b):
    with pytest.raises(ValueError, match=r"未知的 backend.*unknown backend"):
        _call(op, _x(), backend=b)


@pytest.mark.parametrize("op", OPS)
def test_unknown_keyword(op):
    with pytest.raises(TypeError):
        _call(op, _x(), block_size=128)


# ---------------------------------------------------------------- 形状

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)], ids=str)
def test_not_2d(backend, op, shape):
    with pytest.raises(ValueError, match=r"二维.*must be 2-D"):
        _call(op, torch.ones(shape, device=rl.DEVICE), backend=backend)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(0, 4), (4, 0), (0, 0)], ids=str)
def test_empty(backend, op, shape):
    with pytest.raises(ValueError, match=r"空张量.*is empty"):
        _call(op, torch.ones(shape, device=rl.DEVICE), backend=backend)


@pytest.mark.parametrize("op", OPS)
def test_too_many_columns(backend, op):
    x = torch.ones(1, 1, device=rl.DEVICE).expand(2, 2**31)        # 广播视图：不占内存
    with pytest.raises(ValueError, match=r"超过上限.*32 位.*columns"):
        _call(op, x, backend=backend)


# ---------------------------------------------------------------- dtype

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.complex64, torch.uint8], ids=str)
def test_unsupported_dtype(backend, op, dtype):
    with pytest.raises(TypeError, match=r"dtype .*不受支持.*unsupported dtype"):
        _call(op, torch.ones(2, 3, device=rl.DEVICE).to(dtype), backend=backend)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend_", ["cuda", "tilelang"])
@pytest.mark.parametrize("dtype", [torch.float64], ids=str)
def test_float64_refused_by_cuda_and_tilelang(op, backend_, dtype):
    with pytest.raises(TypeError, match=r"float32, bfloat16, float16"):
        _call(op, _x().to(dtype), backend=backend_)


# ---------------------------------------------------------------- 布局（步长）

@pytest.mark.parametrize("op", OPS)
def test_non_unit_column_stride(backend, op):
    x = _x(6, 4).t()                                     # stride (1, 4)
    with pytest.raises(ValueError, match=r"stride\(1\) == 1.*\(1, 4\)"):
        _call(op, x, backend=backend)
    with pytest.raises(ValueError, match=r"stride"):
        _call(op, _x(4, 10)[:, ::2], backend=backend)    # stride (10, 2)


@pytest.mark.parametrize("op", OPS)
def test_unusual_but_valid_strides(backend, op):
    """能正确处理的步长：行距大于行长（切片）、行距为 0（广播出的重复行）、一列的转置视图。"""
    base = _x(6, 20)
    cases = [base[::2, 3:11], base[:1].expand(4, 20), _x(1, 5).t()]
    if backend == "tilelang":                             # TileLang 内核只接受行主序连续张量
        for x in cases[:2]:
            with pytest.raises(ValueError, match=r"行主序连续.*stride"):
                _call(op, x, backend=backend)
        cases = cases[2:]
    for x in cases:
        got = _call(op, x, backend=backend)
        want = torch.softmax(x.double(), -1) if op == "softmax" else x.double().sum(1)
        assert got.is_contiguous()
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- 设备

@pytest.mark.parametrize("op", OPS)
def test_wrong_device(backend, op):
    other = "meta" if rl.DEVICE == "cpu" else "cpu"
    with pytest.raises(ValueError, match=r"当前模式需要.*expected a"):
        _call(op, torch.ones(2, 3, device=other), backend=backend)


# ---------------------------------------------------------------- out=

def _out_shape(op, x):
    return tuple(x.shape) if op == "softmax" else (x.shape[0],)


@pytest.mark.parametrize("op", OPS)
def test_out_is_written_and_returned(backend, op):
    x = _x(5, 33)
    out = torch.full(_out_shape(op, x), float("nan"), device=rl.DEVICE)
    got = _call(op, x, backend=backend, out=out)
    assert got is out
    want = torch.softmax(x.double(), -1) if op == "softmax" else x.double().sum(1)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_bad_out(backend, op):
    x = _x(4, 6)
    shape = _out_shape(op, x)
    with pytest.raises(TypeError, match=r"out 必须是 torch\.Tensor"):
        _call(op, x, backend=backend, out=[0.0] * 4)
    with pytest.raises(ValueError, match=r"out 的形状应为"):
        _call(op, x, backend=backend, out=torch.empty(7, device=rl.DEVICE))
    with pytest.raises(TypeError, match=r"out 的 dtype 应为 float32"):
        _call(op, x, backend=backend, out=torch.empty(shape, dtype=torch.float64, device=rl.DEVICE))
    wide = torch.empty(shape[::-1] if len(shape) == 2 else (shape[0] * 2,), device=rl.DEVICE)
    strided = wide.t() if len(shape) == 2 else wide[::2]
    with pytest.raises(ValueError, match=r"out 必须是连续张量.*stride"):
        _call(op, x, backend=backend, out=strided)
    other = "meta" if rl.DEVICE == "cpu" else "cpu"
    with pytest.raises(ValueError, match=r"out 在 .* 上"):
        _call(op, x, backend=backend, out=torch.empty(shape, device=other))


def test_out_overlapping_input(backend):
    buf = torch.randn(40, device=rl.DEVICE)
    x = buf[:32].view(4, 8)
    with pytest.raises(ValueError, match=r"内存重叠.*overlaps"):
        rl.softmax(x, backend=backend, out=buf[8:40].view(4, 8))
    with pytest.raises(ValueError, match=r"内存重叠"):
        rl.softmax(x, backend=backend, out=x)
    with pytest.raises(ValueError, match=r"内存重叠"):
        rl.reduce_sum(x, backend=backend, out=buf[30:34])
    if rl.DEVICE == "cpu":                           # 两个存储对象指向同一块内存
        import numpy as np

        a = np.zeros(64, np.float32)
        with pytest.raises(ValueError, match=r"内存重叠"):
            rl.softmax(torch.from_numpy(a[:32]).view(4, 8), backend=backend,
                       out=torch.from_numpy(a[16:48]).view(4, 8))


def test_out_with_autograd_is_refused(backend):
    x = _x(2, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"out=.*automatic differentiation"):
        rl.softmax(x, backend=backend, out=torch.empty(2, 5, device=rl.DEVICE))
    with torch.no_grad():
        out = rl.softmax(x, backend=backend, out=torch.empty(2, 5, device=rl.DEVICE))
    assert out.grad_fn is None


@pytest.mark.parametrize("bad", [
    lambda: rl.softmax(_x(), backend="triton", out=torch.empty(2, 2, device=rl.DEVICE)),
    lambda: rl.reduce_sum(_x(), backend="cuda", dim=0),
    lambda: rl.softmax(_x().t(), backend="triton"),
    lambda: rl.reduce_sum(_x().double(), backend="cuda"),
], ids=["out", "dim", "stride", "dtype"])
def test_errors_come_before_any_launch(bad):
    with pytest.raises((TypeError, ValueError)):
        _no_launch(bad)


# ---------------------------------------------------------------- torch.func 变换

@pytest.mark.parametrize("op", OPS)
def test_torch_func_wrappers_are_refused_before_any_launch(backend, op):
    """vmap / grad 里的张量是没有存储的包装张量（类型仍是 torch.Tensor）：内核读不了它，在启动之前报错并说明；
    backend='torch' 照常可用。"""
    x = torch.randn(3, 4, 64, device=rl.DEVICE)
    if backend == "torch":
        got = torch.vmap(lambda t: _call(op, t, backend=backend))(x)
        want = torch.softmax(x, -1) if op == "softmax" else x.sum(-1)
        torch.testing.assert_close(got, want)
        return
    with pytest.raises(TypeError, match="torch.func"):
        _no_launch(lambda: torch.vmap(lambda t: _call(op, t, backend=backend))(x))
    with pytest.raises(TypeError, match="torch.func"):
        _no_launch(lambda: torch.func.grad(lambda t: _call(op, t, backend=backend).sum())(x[0]))


@pytest.mark.parametrize("op", OPS)
def test_torch_func_wrapper_as_out_is_refused(op):
    x = torch.randn(3, 4, 64, device=rl.DEVICE)
    outs = torch.empty(3, 4, 64, device=rl.DEVICE) if op == "softmax" else torch.empty(3, 4, device=rl.DEVICE)
    with pytest.raises(TypeError, match="out 是 torch.func"):      # x 是普通张量，只有 out 是包装张量
        _no_launch(lambda: torch.vmap(lambda o: _call(op, x[0], backend="triton", out=o))(outs))
