"""reduction_lab.torch_launcher：什么时候用 torch 的 C++ 启动器、传给它的参数类型与块形状。

没有 GPU 的机器上 torch 是 CPU 版，没有这两个启动器：:func:`make` 必须返回 None（调用者照旧走 Triton / CuPy）。
这里用一个记录调用的假启动器检查包装：warp 数、共享内存、类型串与 scratch 个数，以及不接受的块形状。
gpu 模式下真正的启动由 test_fast_launch.py、test_launch_plans.py 与各内核的测试检查结果。
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reduction_lab import torch_launcher


class _FakeFast:
    made: list = []

    def __init__(self, function, warps, shared, tys, n_scratch):
        self.cfg = (function, warps, shared, tys, n_scratch)
        _FakeFast.made.append(self.cfg)
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def test_kind_matches_torch_build():
    expect = "fast" if hasattr(torch._C, "_FastCudaLauncher") else \
        "static" if hasattr(torch._C, "_StaticCudaLauncher") else None
    assert torch_launcher.kind() == expect
    if expect is None:
        assert torch_launcher.make(1234, 256, 0, "OOi") is None


def test_make_passes_warps_shared_and_types(monkeypatch):
    monkeypatch.setattr(torch_launcher, "_FAST", _FakeFast)
    fn = torch_launcher.make(0xABC, (256, 1, 1), 4096, "OOlli", n_scratch=2)
    assert isinstance(fn, _FakeFast)
    assert fn.cfg == (0xABC, 8, 4096, "OOlli", 2)
    fn(3, 1, 1, 77, 10, 20, 30, 40, 5)
    assert fn.calls == [(3, 1, 1, 77, 10, 20, 30, 40, 5)]


@pytest.mark.parametrize("block", [(96, 2, 1), (100, 1, 1), 16, 2048, (128, 1, 4)])
def test_make_refuses_blocks_it_cannot_express(monkeypatch, block):
    """torch 的启动器总是启动 32 * warp 数个线程的一维块：二维块、不是 32 的倍数的块不能交给它。"""
    monkeypatch.setattr(torch_launcher, "_FAST", _FakeFast)
    assert torch_launcher.make(1, block, 0, "O") is None


def test_make_refuses_unknown_types_and_too_many_args(monkeypatch):
    monkeypatch.setattr(torch_launcher, "_FAST", _FakeFast)
    assert torch_launcher.make(1, 128, 0, "O?") is None            # 启动器不认识的参数类型
    assert torch_launcher.make(1, 128, 0, "O" * 70) is None


def test_static_launcher_appends_scratch(monkeypatch):
    calls = []

    class _Static:
        @staticmethod
        def _launch_kernel(*args):
            calls.append(args)

    monkeypatch.setattr(torch_launcher, "_FAST", None)
    monkeypatch.setattr(torch_launcher, "_STATIC", _Static)
    assert torch_launcher.kind() == "static"
    fn = torch_launcher.make(99, 64, 0, "Oi", n_scratch=1)
    fn(4, 2, 1, 5, 1000, 7)
    assert calls == [(99, 4, 2, 1, 2, 0, "OiO", (1000, 7, None), 5)]


def test_numpy_arg_types():
    assert [torch_launcher.numpy_arg_type(t) for t in (np.int32, np.int64, np.uint32, np.uint64, np.float32,
                                                       np.float64)] == ["i", "l", "I", "K", "f", "d"]
    assert torch_launcher.numpy_arg_type(np.complex64) is None


class _Src:
    class fn:
        arg_names = ["out_ptr", "in_ptr", "stride", "n", "scale", "BLOCK"]

    signature = {"out_ptr": "*fp32", "in_ptr": "*bf16", "stride": "i64", "n": "i32", "scale": "i32",
                 "BLOCK": "constexpr"}
    constants = {(4,): 1, (5,): 1024}          # scale == 1 被特化成常数，BLOCK 是 tl.constexpr


class _Meta:
    global_scratch_size = 0
    profile_scratch_size = 0


class _Compiled:
    src = _Src
    metadata = _Meta


def test_triton_arg_types_drop_specialised_constants():
    assert torch_launcher.triton_arg_types(_Compiled, 5) == ("OOli", (0, 1, 2, 3), 2)


def test_triton_arg_types_refuse_unknown_types():
    class Src(_Src):
        signature = {**_Src.signature, "n": "nvTmaDesc"}

    class C(_Compiled):
        src = Src

    assert torch_launcher.triton_arg_types(C, 5) is None
    assert torch_launcher.triton_arg_types(object(), 5) is None


class _Run:
    launch_cooperative_grid = False
    launch_pdl = False


class _MetaWarps(_Meta):
    num_warps = 8
    shared = 2048
    num_ctas = 1


class _CompiledFull(_Compiled):
    metadata = _MetaWarps
    run = _Run
    function = 0xBEEF


def test_triton_entry_uses_torch_launcher_only_for_plain_kernels(monkeypatch):
    """FastLaunch 的缓存项：普通内核交给 torch 的启动器（warp 数、共享内存、类型串、保留的参数下标都从元数据来）；
    协作启动、PDL、多 CTA、要 scratch 内存的内核照旧用 Triton 的启动器。"""
    from reduction_lab.triton_kernels import _launch

    monkeypatch.setattr(torch_launcher, "_FAST", _FakeFast)
    how, fn, keep, _ = _launch._torch_entry(_CompiledFull, 5)
    assert how == _launch._TORCH and fn.cfg == (0xBEEF, 8, 2048, "OOli", 2) and keep == (0, 1, 2, 3)
    fn.calls.clear()
    _launch._call((how, fn, keep, None), (7,), 99, [10, 20, 30, 40, 1])      # 第 5 个参数（= 1）被特化掉了
    assert fn.calls == [(7, 1, 1, 99, 10, 20, 30, 40)]

    class Coop(_Run):
        launch_cooperative_grid = True

    class Scratch(_MetaWarps):
        global_scratch_size = 256

    class TwoCtas(_MetaWarps):
        num_ctas = 2

    for run, meta in ((Coop, _MetaWarps), (_Run, Scratch), (_Run, TwoCtas)):
        class C(_CompiledFull):
            pass

        C.run, C.metadata = run, meta
        assert _launch._torch_entry(C, 5) is None
    monkeypatch.setattr(torch_launcher, "_FAST", None)
    monkeypatch.setattr(torch_launcher, "_STATIC", None)
    assert _launch._torch_entry(_CompiledFull, 5) is None                   # CPU 版的 torch：没有启动器
