"""一次调用的快速路径：按形状缓存的启动计划，第二次起不再重复检查与解析。

快速路径只省主机端的工作，不能改变结果，也不能放过坏输入：这里在同一个计划上反复调用，
换对齐、换行距、换 out=，结果都要与参考一致；计划已经建好之后再传坏参数，错误与第一次相同。
CUDA C 启动器的计划（直接调用 cuLaunchKernel）只在 gpu 模式下存在；sim 模式下检查它不会被建立。
"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl
from reduction_lab.cuda_kernels import launcher

GPU = rl.MODE == "gpu"


def _ref_softmax(x):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_repeated_softmax_calls_across_alignment_and_strides(impl):
    g = torch.Generator().manual_seed(0)
    big = (torch.randn(6, 80, generator=g) * 4).to(rl.DEVICE)
    cases = [big[:, :40], big[:, 1:41], big[:, 3:43], big[:, :40].contiguous(), big[::2, :40]]
    for _ in range(2):                                   # 第二轮全部命中已经建好的计划
        for x in cases:
            y = rl.softmax(x, backend=impl)
            assert y.is_contiguous() and y.shape == x.shape
            torch.testing.assert_close(y, _ref_softmax(x), atol=1e-6, rtol=1e-5)
            out = torch.empty_like(y)
            assert rl.softmax(x, backend=impl, out=out) is out
            torch.testing.assert_close(out, y, atol=0, rtol=0)


@pytest.mark.parametrize("impl", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_repeated_row_sums(impl, dtype):
    g = torch.Generator().manual_seed(1)
    for shape in [(5, 33), (3, 3000), (4, 9000)]:       # cuda：warp 内核与分段（split）内核（16 位时 9000 列）
        x = torch.randn(*shape, generator=g).to(dtype).to(rl.DEVICE)
        ref = x.double().sum(1)
        for _ in range(3):
            got = rl.reduce_sum(x, backend=impl)
            assert got.dtype == dtype
            torch.testing.assert_close(got.double(), ref, atol=2e-2 if dtype != torch.float32 else 1e-4,
                                       rtol=1e-2 if dtype != torch.float32 else 1e-5)
        out = torch.full((shape[0],), float("nan"), dtype=dtype, device=rl.DEVICE)
        assert rl.reduce_sum(x, backend=impl, out=out) is out
        torch.testing.assert_close(out, rl.reduce_sum(x, backend=impl), atol=0, rtol=0)


def test_bad_input_after_the_plan_exists_still_raises():
    x = torch.randn(4, 64, device=rl.DEVICE)
    rl.softmax(x)                                        # 建好 (4, 64, float32) 的计划
    rl.reduce_sum(x, backend="cuda")
    with pytest.raises(TypeError, match="dtype"):
        rl.softmax(x.to(torch.int32))
    with pytest.raises(ValueError, match="stride"):
        rl.softmax(x.t().contiguous().t())
    with pytest.raises(ValueError, match="dim"):
        rl.softmax(x, dim=0)
    with pytest.raises(ValueError, match="backend"):
        rl.softmax(x, backend="cudnn")
    with pytest.raises(ValueError, match="backend"):
        rl.softmax(x, backend=["triton"])
    with pytest.raises(ValueError, match="dim"):
        rl.reduce_sum(x, dim=True, backend="cuda")


def _launch_sum(x, out, defines=None):
    return launcher.launch("reduce_sum.cu", "reduce_sum_rows_warp", grid=1, block=256,
                           args=(x, out, x.stride(0), x.shape[0], x.shape[1]), defines=defines or {"BLOCK_SIZE": 256})


@pytest.mark.skipif(GPU, reason="检查 sim 模式不建 GPU 启动计划；gpu 模式由下面的测试检查")
def test_sim_mode_builds_no_gpu_plan():
    before = len(launcher._PLANS)
    x = torch.ones(2, 40)
    out = torch.empty(2)
    _launch_sum(x, out)
    _launch_sum(x, out)
    assert out.tolist() == [40.0, 40.0]
    assert len(launcher._PLANS) == before


@pytest.mark.skipif(not GPU, reason="CUDA C 启动计划（直接调用 cuLaunchKernel）只在 gpu 模式下存在")
def test_cuda_plan_is_built_used_and_checks_arguments():
    x = torch.arange(80, dtype=torch.float32, device="cuda").reshape(2, 40)
    out = torch.empty(2, device="cuda")
    _launch_sum(x, out)
    key = launcher._plan_key("reduce_sum.cu", "reduce_sum_rows_warp", 1, 256, 0, {"BLOCK_SIZE": 256}, None)
    assert key in launcher._PLANS
    for k in range(3):                                   # 走快速路径：每次新的输入与输出
        x2 = x + k
        out2 = torch.full((2,), float("nan"), device="cuda")
        assert launcher._PLANS[key](  # 计划自己判断参数都符合，启动并返回 True
            (x2, out2, x2.stride(0), 2, 40))
        torch.cuda.synchronize()
        torch.testing.assert_close(out2, x2.sum(1))
    # 计划在，但参数不符合：退回完整的路径，错误与第一次启动时相同
    with pytest.raises(TypeError, match="dtype"):
        _launch_sum(x.double(), out)
    with pytest.raises(OverflowError):
        launcher.launch("reduce_sum.cu", "reduce_sum_rows_warp", grid=1, block=256,
                        args=(x, out, x.stride(0), 2**40, 40), defines={"BLOCK_SIZE": 256})
    with pytest.raises(ValueError, match="CUDA"):
        _launch_sum(x.cpu(), out)
    with pytest.raises(TypeError, match="参数"):
        launcher.launch("reduce_sum.cu", "reduce_sum_rows_warp", grid=1, block=256,
                        args=(x, out, x.stride(0), 2), defines={"BLOCK_SIZE": 256})
    with pytest.raises(TypeError, match="grid"):
        launcher.launch("reduce_sum.cu", "reduce_sum_rows_warp", grid=True, block=256,
                        args=(x, out, x.stride(0), 2, 40), defines={"BLOCK_SIZE": 256})


@pytest.mark.skipif(not GPU, reason="cuda 后端的缓存计划只在 gpu 模式下与完整路径不同（sim 模式下它就调用完整路径）")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_softmax_plan_matches_the_full_path(dtype):
    from reduction_lab import cuda_kernels as ck

    g = torch.Generator().manual_seed(3)
    for M, N in ((7, 100), (5, 3000), (3, 40000), (2, 70000), (4, 262147)):   # warp、block、split 各种
        x = (torch.randn(M, N, generator=g) * 3).to(dtype).cuda()
        kind = ck.softmax_plan(M, N, dtype, sm_count=torch.cuda.get_device_properties(0).multi_processor_count)
        for _ in range(2):
            # 同一个内核、同样的配置：只允许舍入到输出 dtype 时的一个单位之差（split 的段合并顺序固定，通常逐位相同）
            tol = 2.0**-7 if dtype == torch.bfloat16 else 1e-6
            torch.testing.assert_close(rl.softmax(x, backend="cuda"), ck.softmax(x), atol=1e-9, rtol=tol,
                                       msg=lambda m: f"{kind['kernel']} {M}x{N}: {m}")


class _FakeStream:
    """假的 CuPy 流：记下它是怎样建出来的。"""

    def __init__(self, how, arg):
        self.how, self.arg = how, arg


def _fake_cupy(with_from_external: bool):
    import types

    made = []

    class Stream:
        pass

    if with_from_external:
        def from_external(obj):
            made.append(_FakeStream("from_external", obj))
            return made[-1]
        Stream.from_external = staticmethod(from_external)

    def external(ptr, device_id=-1):
        made.append(_FakeStream("ExternalStream", (ptr, device_id)))
        return made[-1]

    cuda = types.SimpleNamespace(Stream=Stream, ExternalStream=external)
    return types.SimpleNamespace(cuda=cuda), made


@pytest.mark.parametrize("with_from_external", [True, False])
def test_cupy_stream_wraps_torchs_stream_once_per_stream(monkeypatch, with_from_external):
    """CuPy 14 起用 Stream.from_external（拿 torch 的流对象），更早的 CuPy 用 ExternalStream(裸指针, 设备号)；
    同一个流只包一次，换了流（裸指针不同）再包一次。"""
    import sys

    fake, made = _fake_cupy(with_from_external)
    torch_streams = {}

    class TorchStream:
        def __init__(self, ptr):
            self.cuda_stream = ptr

    current = {"ptr": 0x1000}
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: current["ptr"], raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda index=None: torch_streams.setdefault(current["ptr"], TorchStream(current["ptr"])))
    monkeypatch.setattr(launcher, "_STREAMS", {})
    a = launcher.cupy_stream(0)
    assert launcher.cupy_stream(0) is a and len(made) == 1
    if with_from_external:
        assert a.how == "from_external" and a.arg is torch_streams[0x1000]
    else:
        assert a.how == "ExternalStream" and a.arg == (0x1000, 0)
    current["ptr"] = 0x2000
    b = launcher.cupy_stream(0)
    assert b is not a and len(made) == 2
    assert (b.arg.cuda_stream if with_from_external else b.arg[0]) == 0x2000


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="CuPy 的流包装只在 gpu 模式下使用")
def test_cupy_launches_on_torchs_stream_without_deprecated_api():
    """CUDA C 的启动在 torch 的当前流上（换一个 torch 流，结果照样与这个流上的其他操作保持顺序），
    不经过 CuPy 14 弃用的 ExternalStream。"""
    import warnings

    x = torch.randn(64, 1000, device="cuda")
    s = torch.cuda.Stream()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.stream(s):
            x.mul_(2.0)                                   # 同一个流上，启动之前的写
            y = rl.softmax(x, backend="cuda")
            r = rl.reduce_sum(x, backend="cuda")
        s.synchronize()
    assert not [w for w in caught if "ExternalStream" in str(w.message)], [str(w.message) for w in caught]
    torch.testing.assert_close(y, _ref_softmax(x), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(r, x.double().sum(1).float(), atol=1e-3, rtol=1e-5)
    assert launcher.cupy_stream().ptr == torch.cuda.current_stream().cuda_stream
