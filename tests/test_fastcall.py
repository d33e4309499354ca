"""api 的每次调用快速路径（reduction_lab.fastcall）：同一 (操作, backend, dtype, 形状, 设备) 第二次起跳过逐项的
检查，直接分配输出、启动内核。

快速路径只省主机端的工作：它给出的结果必须与完整的路径相同（同一个内核，逐位相同），它不接受的输入
（不连续、不对齐、取负标记、需要求导、out=、坏 dtype）必须照常走完整的路径，得到同样的结果或同样的错误。
runner 只在 gpu 模式下建立；sim 模式下检查它不会被建立（CI 没有 GPU，这几项在 GPU 上运行）。
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import reduction_lab as rl
from reduction_lab import fastcall

GPU = rl.MODE == "gpu"
#: 快速路径测的实现；tilelang 没有安装时跳过它并说明原因
IMPLS = ["auto", "triton", "cuda",
         pytest.param("tilelang", id="tilelang", marks=pytest.mark.skipif(
             importlib.util.find_spec("tilelang") is None, reason="tilelang backend 需要 tilelang，当前环境没有安装"))]
gpu_only = pytest.mark.skipif(not GPU, reason="快速路径只在 gpu 模式下存在（sim 模式下见 test_sim_mode_builds_no_runner）")

OPS = {"softmax": (rl.softmax, lambda x: torch.softmax(x.double(), -1)),
       "reduce_sum": (rl.reduce_sum, lambda x: x.double().sum(1))}


def _tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)


def test_sim_mode_builds_no_runner():
    if GPU:
        pytest.skip("gpu 模式下建 runner：见下面几项")
    fastcall.clear()
    x = torch.randn(4, 64, device=rl.DEVICE)
    for _ in range(3):
        rl.softmax(x)
        rl.reduce_sum(x, backend="triton")
    assert not fastcall.ENABLED and not fastcall.RUNNERS


@gpu_only
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_runner_matches_the_full_path(op, impl, dtype):
    """第一次走完整的路径并建 runner；之后每次走 runner，结果与第一次逐位相同、与 float64 参考一致。"""
    fn, ref = OPS[op]
    g = torch.Generator().manual_seed(3)
    for m, n in [(64, 1024), (3, 1000), (5, 4096), (2, 70000)]:       # 2 x 70000：长行（checked 函数作 runner）
        x = torch.randn(m, n, generator=g).to(dtype).to(rl.DEVICE)
        first = fn(x, backend=impl)
        key = (op, impl, dtype, x.shape, x.get_device())
        assert key in fastcall.RUNNERS, f"{op} {impl} {dtype} {(m, n)}：第一次调用之后没有 runner"
        # 绑定好的启动与完整路径是同一个内核、同一次启动方式：逐位相同；长行的分段内核用原子加合并各段，
        # 相加的顺序每次不同，只比容差
        exact = fastcall.RUNNERS[key].__name__ == "run"
        for _ in range(3):
            got = fn(x, backend=impl)
            assert got.dtype == dtype and got.is_contiguous() and got.shape == first.shape
            torch.testing.assert_close(got, first, **(dict(atol=0, rtol=0) if exact else _tol(dtype)),
                                       msg=f"{op} {impl} {dtype} {(m, n)}：快速路径与完整路径的结果不同")
        torch.testing.assert_close(got.double(), ref(x.double()).to(dtype).double(), **_tol(dtype))


@gpu_only
@pytest.mark.parametrize("op,impl", [("softmax", "triton"), ("reduce_sum", "triton"), ("softmax", "cuda"),
                                        ("reduce_sum", "cuda")])
def test_short_rows_use_a_bound_launch(op, impl):
    """Triton 与 CUDA C 的短行内核用绑定好的启动（不是 backend 的 checked 函数）。"""
    x = torch.randn(64, 1024, device=rl.DEVICE)
    OPS[op][0](x, backend=impl)
    runner = fastcall.RUNNERS[(op, impl, x.dtype, x.shape, x.get_device())]
    assert runner.__name__ == "run", f"{op} {impl}：runner 是 {runner!r}，不是绑定好的启动"


@gpu_only
@pytest.mark.parametrize("impl", IMPLS)
def test_inputs_the_runner_refuses_take_the_full_path(impl):
    """runner 建好之后，同一形状但不连续、首地址不对齐、需要求导、给了 out= 的输入都走完整的路径，结果仍然正确；
    带取负标记的输入得到与完整路径相同的错误。"""
    m, n = 8, 256
    x = torch.randn(m, n, device=rl.DEVICE)
    rl.softmax(x, backend=impl)
    rl.reduce_sum(x, backend=impl)
    wide = torch.randn(m, n + 4, device=rl.DEVICE)
    flat = torch.randn(m * n + 1, device=rl.DEVICE)
    base = torch.randn(m, n, device=rl.DEVICE)
    cases = {
        "行距不等于行长": wide[:, :n],
        "首地址差 4 字节": flat[1:].view(m, n),
    }
    for what, v in cases.items():
        assert v.shape == x.shape
        dense = v.clone()
        if impl == "tilelang" and what == "行距不等于行长":         # TileLang 只接受连续的行：与完整路径相同的错误
            with pytest.raises(ValueError, match="连续"):
                rl.softmax(v, backend=impl)
            continue
        torch.testing.assert_close(rl.softmax(v, backend=impl), torch.softmax(dense, -1), atol=1e-6, rtol=1e-5,
                                   msg=what)
        torch.testing.assert_close(rl.reduce_sum(v, backend=impl), dense.sum(1), atol=1e-4, rtol=1e-5, msg=what)
    with pytest.raises(ValueError, match="取负"):                    # 与完整路径相同的错误
        rl.softmax(torch._neg_view(base), backend=impl)
    g = x.clone().requires_grad_(True)
    y = rl.softmax(g, backend=impl)
    assert y.grad_fn is not None, "需要求导的输入没有走 autograd"
    y.sum().backward()
    assert g.grad is not None and g.grad.abs().max() < 1e-5          # softmax 每行的和是常数：梯度为 0
    out = torch.full_like(x, float("nan"))
    assert rl.softmax(x, backend=impl, out=out) is out
    torch.testing.assert_close(out, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


@gpu_only
def test_bad_input_after_the_runner_exists_still_raises():
    x = torch.randn(4, 64, device=rl.DEVICE)
    for _ in range(2):
        rl.softmax(x)
        rl.reduce_sum(x, backend="cuda")
    with pytest.raises(TypeError, match="dtype"):
        rl.softmax(x.to(torch.int32))
    with pytest.raises(TypeError, match="dtype"):
        rl.reduce_sum(x.double(), backend="cuda")
    with pytest.raises(ValueError, match="dim"):
        rl.softmax(x, dim=0)
    with pytest.raises(ValueError, match="backend"):
        rl.softmax(x, backend="cuDNN")
    with pytest.raises(ValueError, match="expected a cuda"):
        rl.softmax(x.cpu())


@gpu_only
def test_triton_launch_hooks_are_still_called():
    """装了 Triton 的启动钩子（例如 proton）时，绑定好的启动让路，钩子照常被调用。"""
    from triton import knobs

    x = torch.randn(16, 512, device=rl.DEVICE)
    rl.softmax(x, backend="triton")
    seen = []
    hook = lambda *a, **k: seen.append(1)                             # noqa: E731
    chain = knobs.runtime.launch_enter_hook
    if not hasattr(chain, "add"):
        pytest.skip("这个 Triton 的启动钩子不是 HookChain")
    chain.add(hook)
    try:
        y = rl.softmax(x, backend="triton")
    finally:
        chain.remove(hook)
    assert seen, "装了启动钩子，却没有被调用"
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)


def test_python_runner_passes_both_addresses_and_refuses_unaligned(monkeypatch):
    """Python 的 runner（编译版不可用时，triton_kernels._launch.fast_runner）：不用 GPU，换一个假的启动器，
    检查它把输出、输入的地址按顺序交给绑定好的启动，首地址不对齐或装了钩子时返回 None、什么也不启动。"""
    from reduction_lab.triton_kernels import _launch

    launches, hooks = [], []

    class FakeLauncher:
        compiled = {}                      # 没有已编译的内核：不走编译版
        enabled = True
        n_runtime = 6

        def _hooks_on(self):
            return False

        def bound(self, key, grid, n_ptr, consts):
            assert (key, grid, n_ptr, consts) == ("k", (3,), 2, (40, 40, 8, 40))
            return lambda stream, a, b: launches.append((stream, a, b))

        def quiet(self):
            return lambda: not hooks

    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda dev: 1000 + dev, raising=False)
    run = _launch.fast_runner(FakeLauncher(), "k", (3,), 2, 8, 40, torch.float32, False,
                              ("Y", "X", 40, 40, 8, 40), torch.empty_like)
    x = torch.randn(8, 40)
    y = run(x)
    assert launches == [(1002, y.data_ptr(), x.data_ptr())] and y.shape == x.shape
    flat = torch.randn(8 * 40 + 1)
    assert run(flat[1:].view(8, 40)) is None
    hooks.append(print)
    assert run(x) is None
    assert len(launches) == 1
