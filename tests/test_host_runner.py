"""快速路径的编译版 runner（reduction_lab.host，C++ 扩展）：检查与参数打包。

没有 GPU 时也能检查：``device = -1`` 的 runner 接受 CPU 张量，启动函数换成这里的一个 ctypes 回调，它记下
cuLaunchKernel 收到的全部参数（grid、线程数、共享内存、流、每个参数槽位里的值）。这样检查每一项前提不满足时
runner 返回 None（调用者走完整的路径）、满足时输出的形状与 dtype、两个地址与定值写进了对的槽位。
GPU 上 runner 真正启动内核的结果由 tests/test_fastcall.py 检查。
"""

from __future__ import annotations

import ctypes

import pytest
import torch

from reduction_lab import host

LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


@pytest.fixture(scope="module")
def mod():
    m = host.module()
    if m is None:
        pytest.skip(f"这台机器编译不了 reduction_lab.host 的扩展：{host.unavailable()}")
    return m


class Recorder:
    def __init__(self, n_args: int, result: int = 0):
        self.calls = []
        self.result = result

        def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            slots = [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64))[0] for i in range(n_args)]
            self.calls.append(dict(fn=fn, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, stream=stream,
                                   slots=slots, extra=extra))
            return self.result

        self.cb = LAUNCH(launch)                       # 留住回调对象，不让它被回收
        self.addr = ctypes.cast(self.cb, ctypes.c_void_p).value


def _runner(rec, rows=8, cols=256, dtype=torch.float32, row_sum=False, hooks=None,
            codes="YXiilO", values=(0, 0, 256, -3, 2**40, 0)):
    return host.make_runner(rec.addr, 0xABC0, (5, 1), 128, 4096, -1, rows, cols, dtype, row_sum, codes, values,
                            hooks)


def test_runner_allocates_and_packs_the_arguments(mod):
    rec = Recorder(6)
    run = _runner(rec)
    x = torch.randn(8, 256)
    y = run(x)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape and y.dtype == x.dtype and y.is_contiguous()
    assert y.data_ptr() != x.data_ptr()
    (call,) = rec.calls
    assert call["fn"] == 0xABC0 and call["grid"] == (5, 1, 1) and call["block"] == (128, 1, 1)
    assert call["shared"] == 4096 and not call["stream"] and not call["extra"]
    yp, xp, a, b, c, scratch = call["slots"]
    assert (yp, xp) == (y.data_ptr(), x.data_ptr())
    assert a & 0xFFFFFFFF == 256 and b & 0xFFFFFFFF == (-3) & 0xFFFFFFFF      # int32：低 4 字节
    assert c == 2**40 and scratch == 0                                        # int64 与空指针
    y2 = run(x)
    assert rec.calls[1]["slots"][0] == y2.data_ptr()                          # 每次新的输出


def test_row_sum_runner_outputs_one_value_per_row(mod):
    rec = Recorder(5)
    run = _runner(rec, rows=6, cols=100, dtype=torch.bfloat16, row_sum=True, codes="XYYil", values=(0, 0, 0, 100, 6))
    x = torch.randn(6, 100).to(torch.bfloat16)
    y = run(x)
    assert y.shape == (6,) and y.dtype == torch.bfloat16
    xp, yp, acc, n, m = rec.calls[0]["slots"]
    assert (xp, yp, acc) == (x.data_ptr(), y.data_ptr(), y.data_ptr()) and (n, m) == (100, 6)


def test_inputs_outside_the_runners_premise_get_none(mod):
    rec = Recorder(6)
    run = _runner(rec)
    base = torch.randn(8, 256)
    flat = torch.randn(8 * 256 + 1)
    refused = {
        "dtype": base.double(),
        "行数": torch.randn(9, 256),
        "列数": torch.randn(8, 255),
        "三维": torch.randn(8, 256, 1),
        "行距": torch.randn(8, 300)[:, :256],
        "转置": torch.randn(256, 8).t(),
        "取负标记": torch._neg_view(base),
        "子类": torch.nn.Parameter(base.clone(), requires_grad=False),
        "首地址不对齐": flat[1:].view(8, 256),
        "需要求导": base.clone().requires_grad_(True),
        "不是张量": base.numpy(),
    }
    for what, v in refused.items():
        assert run(v) is None, what
    assert not rec.calls
    with torch.no_grad():                                   # 不求导时 requires_grad 的张量可以走快速路径
        assert run(base.clone().requires_grad_(True)) is not None
    assert len(rec.calls) == 1


def test_launch_errors_raise(mod):
    rec = Recorder(6, result=700)
    run = _runner(rec)
    with pytest.raises(RuntimeError, match="CUresult 700"):
        run(torch.randn(8, 256))
    with pytest.raises(TypeError, match="exactly one"):
        run()


def test_installed_launch_hooks_send_calls_to_the_full_path(mod):
    class Chain:
        def __init__(self):
            self.calls = []

    class Runtime:
        pass

    rt = Runtime()
    rt.launch_enter_hook, rt.launch_exit_hook = Chain(), Chain()
    rec = Recorder(6)
    run = _runner(rec, hooks=(rt, rt.launch_enter_hook, rt.launch_exit_hook))
    x = torch.randn(8, 256)
    assert run(x) is not None
    rt.launch_enter_hook.calls.append(print)                # 装上一个钩子
    assert run(x) is None
    rt.launch_enter_hook.calls.clear()
    assert run(x) is not None
    rt.launch_exit_hook = Chain()                            # 换了一条新链：不再认得，走完整的路径
    assert run(x) is None
    assert len(rec.calls) == 2


def test_bad_construction_is_refused(mod):
    rec = Recorder(2)
    with pytest.raises(ValueError, match="X and Y"):
        host.make_runner(rec.addr, 1, (1,), 32, 0, -1, 1, 1, torch.float32, False, "XX", (0, 0))
    with pytest.raises(ValueError, match="unknown argument code"):
        host.make_runner(rec.addr, 1, (1,), 32, 0, -1, 1, 1, torch.float32, False, "XYz", (0, 0, 0))
    with pytest.raises(ValueError, match="as long as"):
        host.make_runner(rec.addr, 1, (1,), 32, 0, -1, 1, 1, torch.float32, False, "XY", (0,))
