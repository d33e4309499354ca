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

#: 同一个工作进程跑完本文件：扩展只编译一次，另一个 pytest-xdist 进程不必等编译的文件锁（约半分钟）
pytestmark = pytest.mark.xdist_group("host_extension")

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


# ---- 查找表与 dispatch：api 每次调用的 guard 与查表（reduction_lab.fastcall） ----

@pytest.fixture
def table(mod):
    from reduction_lab import fastcall

    fastcall.clear()
    yield mod
    fastcall.clear()


class Marker:
    """当作 runner 登记的 Python 可调用对象：记下收到的输入，返回一个可辨认的结果。"""

    def __init__(self):
        self.seen = []

    def __call__(self, x):
        self.seen.append(x)
        return ("ran", len(self.seen))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_dispatch_and_the_python_guards_agree(table):
    """C++ 的 dispatch 与 Python 的 _py_fast 对同一组输入给出同样的判断：要么都调用 runner，要么都返回 None。"""
    from reduction_lab import fastcall

    base = torch.randn(8, 256)
    key = ("softmax", "auto", torch.float32, base.shape, -1)
    fastcall._store(key, Marker())
    assert fastcall.fast is table.dispatch and table.table_size() == 1
    flat = torch.randn(8 * 256 + 1)

    class Name(str):
        pass

    inputs = {
        "普通": (base, -1, "auto"),
        "dim=1": (base, 1, "auto"),
        "首地址不对齐（对齐由 runner 检查）": (flat[1:].view(8, 256), -1, "auto"),
        "dim=0": (base, 0, "auto"),
        "dim=True": (base, True, "auto"),
        "dim=-1.0": (base, -1.0, "auto"),
        "dim 溢出": (base, 2**70, "auto"),
        "另一个 backend": (base, -1, "triton"),
        "backend 是 bytes": (base, -1, b"auto"),
        "backend 是 str 的子类": (base, -1, Name("auto")),
        "dtype": (base.double(), -1, "auto"),
        "行数": (torch.randn(9, 256), -1, "auto"),
        "三维": (torch.randn(8, 256, 1), -1, "auto"),
        "一维": (torch.randn(256), -1, "auto"),
        "行距": (torch.randn(8, 300)[:, :256], -1, "auto"),
        "转置": (torch.randn(256, 8).t(), -1, "auto"),
        "取负标记": (torch._neg_view(base), -1, "auto"),
        "子类": (torch.nn.Parameter(base.clone(), requires_grad=False), -1, "auto"),
        "需要求导": (base.clone().requires_grad_(True), -1, "auto"),
        "稀疏": (base.to_sparse(), -1, "auto"),
        "嵌套": (torch.nested.nested_tensor([base[0], base[1, :100]]), -1, "auto"),
        "meta 设备": (torch.empty(8, 256, device="meta"), -1, "auto"),
        "不是张量": (base.numpy(), -1, "auto"),
    }
    accepted = {"普通", "dim=1", "首地址不对齐（对齐由 runner 检查）"}
    batched = {}

    def inside_vmap(t):                 # vmap 里的张量是没有存储的包装张量，类型仍是 torch.Tensor
        batched["py"] = fastcall._py_fast("softmax", t, -1, "auto")
        batched["cc"] = table.dispatch("softmax", t, -1, "auto")
        return t

    torch.vmap(inside_vmap)(torch.randn(3, 8, 256))
    assert batched == {"py": None, "cc": None}, batched
    for what, (v, dim, backend) in inputs.items():
        py = fastcall._py_fast("softmax", v, dim, backend)
        cc = table.dispatch("softmax", v, dim, backend)
        assert (py is None) == (cc is None), f"{what}：Python 的 guard 给 {py!r}，C++ 的给 {cc!r}"
        assert (cc is not None) == (what in accepted), f"{what}：{cc!r}"
    assert table.dispatch("reduce_sum", base, -1, "auto") is None          # 操作名是键的一部分
    with torch.no_grad():                                                   # 不求导时可以走快速路径
        assert table.dispatch("softmax", base.clone().requires_grad_(True), -1, "auto") is not None
    with pytest.raises(TypeError, match="4 arguments"):
        table.dispatch("softmax", base)


def test_dispatch_calls_a_compiled_runner(table):
    """表里登记的是编译版 runner 时，dispatch 直接启动它：输出与参数槽位与直接调用 runner 相同。"""
    from reduction_lab import fastcall

    rec = Recorder(6)
    run = _runner(rec)
    x = torch.randn(8, 256)
    fastcall._store(("softmax", "triton", torch.float32, x.shape, -1), run)
    y = fastcall.fast("softmax", x, -1, "triton")
    assert isinstance(y, torch.Tensor) and y.shape == x.shape
    (call,) = rec.calls
    assert call["slots"][:2] == [y.data_ptr(), x.data_ptr()]
    unaligned = torch.randn(8 * 256 + 1)[1:].view(8, 256)
    assert fastcall.fast("softmax", unaligned, -1, "triton") is None             # 编译版 runner 自己拒绝不对齐的
    assert len(rec.calls) == 1


def test_compiled_runner_refuses_a_tensor_without_storage(table):
    """直接调用编译版 runner、传进 vmap 的包装张量：返回 None（走完整的路径），不因为读不了地址而终止进程。"""
    rec = Recorder(6)
    run = _runner(rec)
    got = []
    torch.vmap(lambda t: got.append(run(t)) or t)(torch.randn(3, 8, 256))
    assert got == [None] and not rec.calls


def test_table_replaces_clears_and_holds_references(table):
    import sys

    from reduction_lab import fastcall

    x = torch.randn(4, 16)
    first, second = Marker(), Marker()
    before = sys.getrefcount(second)
    fastcall._store(("softmax", "auto", torch.float32, x.shape, -1), first)
    fastcall._store(("softmax", "auto", torch.float32, x.shape, -1), second)     # 同一个键：替换
    assert table.table_size() == 1 and fastcall.fast("softmax", x, -1, "auto") == ("ran", 1)
    assert not first.seen and len(second.seen) == 1
    assert sys.getrefcount(second) == before + 2                                # RUNNERS 与 C++ 的表各一个
    fastcall.clear()
    assert sys.getrefcount(second) == before and table.table_size() == 0
    assert fastcall.fast is fastcall._py_fast and table.dispatch("softmax", x, -1, "auto") is None


def test_a_runner_that_clears_the_table_is_safe(table):
    """runner 运行时清空查找表（例如登记满了）：dispatch 仍然拿着它，调用结束后才释放。"""
    from reduction_lab import fastcall

    x = torch.randn(4, 16)

    def runner(v):
        fastcall.clear()
        return "done"

    fastcall._store(("softmax", "auto", torch.float32, x.shape, -1), runner)
    del runner
    assert table.dispatch("softmax", x, -1, "auto") == "done"
    assert table.table_size() == 0


def test_a_full_table_starts_over(table, monkeypatch):
    from reduction_lab import fastcall

    monkeypatch.setattr(fastcall, "MAX_RUNNERS", 3)
    for n in range(1, 6):
        fastcall._store(("softmax", "auto", torch.float32, torch.Size((2, n)), -1), Marker())
    assert len(fastcall.RUNNERS) == table.table_size() == 2                     # 第 4 项时清空，再登记第 4、5 项
    assert fastcall.fast("softmax", torch.randn(2, 5), -1, "auto") == ("ran", 1)
    assert fastcall.fast("softmax", torch.randn(2, 1), -1, "auto") is None


def test_bad_table_entries_are_refused(table):
    with pytest.raises(TypeError, match="callable"):
        table.table_set("softmax", "auto", torch.float32, 1, 1, -1, 3, None)
    with pytest.raises(TypeError, match="current_device"):
        table.table_set("softmax", "auto", torch.float32, 1, 1, 0, print, None)
    assert table.table_size() == 0


def test_a_runner_built_while_the_extension_was_off_is_registered_later(table, monkeypatch):
    """先在扩展关掉时建了 runner（只在 RUNNERS 里），之后扩展打开：下一次完整路径的 remember 把它补登记进 C++ 的表，
    不会让这一组键从此每次都走完整的路径。"""
    from reduction_lab import fastcall

    x = torch.randn(4, 16)
    key = ("softmax", "tilelang", torch.float32, x.shape, -1)
    monkeypatch.setattr(host, "ENABLED", False)
    fastcall._store(key, Marker())
    assert table.table_size() == 0 and fastcall.fast is fastcall._py_fast
    monkeypatch.setattr(host, "ENABLED", True)
    monkeypatch.setattr(fastcall, "ENABLED", True)
    fastcall.remember("softmax", "tilelang", "tilelang", x, None, False)
    assert table.table_size() == 1 and fastcall.fast is table.dispatch
    assert fastcall.fast("softmax", x, -1, "tilelang") == ("ran", 1)
