"""默认 backend "auto"（reduction_lab.auto）：选择规则、它与实测数据和 CUDA C 选择表的一致性、经 api 的调用。"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl
from reduction_lab import auto
from reduction_lab import cuda_kernels as ck

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ON_HOPPER = rl.MODE == "gpu" and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_without_clusters_or_cupy_auto_is_triton(dtype):
    for n in (1, 512, 32768, 65536, 262144, 2**20):
        assert auto.choice("softmax", n, dtype, clusters=False) == "triton"
        assert auto.choice("softmax", n, dtype, clusters=True, cupy=False) == "triton"
        assert auto.choice("reduce_sum", n, dtype, clusters=True) == "triton"


def test_with_clusters_long_rows_go_to_the_cluster_kernel():
    expect = {torch.float32: {16384: "triton", 32768: "cuda", 65536: "cuda", 262144: "cuda", 2**20: "cuda"},
              torch.bfloat16: {8192: "triton", 16384: "cuda", 131072: "cuda", 262144: "cuda", 2**20: "cuda"}}
    for dtype, cells in expect.items():
        for n, want in cells.items():
            assert auto.choice("softmax", n, dtype, clusters=True) == want, (dtype, n)
    assert auto.choice("softmax", 65536, torch.float64, clusters=True) == "triton"     # cuda 不接受 float64


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_exactly_where_the_cuda_table_uses_a_cluster(dtype):
    """auto 选 cuda 的行长就是 SOFTMAX_CONFIGS 里 cluster 的那几段（每一段的两端与中间都查）。"""
    table = ck.SOFTMAX_CONFIGS[dtype.itemsize]
    lo = 1
    for n_max, kernel, *_ in table[:-1]:
        for n in {lo, (lo + n_max) // 2, n_max}:
            want = "cuda" if kernel == "cluster" else "triton"
            assert auto.choice("softmax", n, dtype, clusters=True) == want, (dtype, n)
        lo = n_max + 1
    # 表末行（grid：常驻网格）也是 cuda；行首不对齐时 grid 用不了（改用 split），那时是 triton
    assert table[-1][1] == "grid"
    for n in (2 * (lo - 1), 4 * (lo - 1)):           # 行的字节数是 16 的倍数（grid 的条件）
        assert auto.choice("softmax", n, dtype, clusters=True) == "cuda", (dtype, n)
        assert auto.choice("softmax", n, dtype, clusters=True, aligned=False) == "triton", (dtype, n)


def test_unknown_op_is_refused():
    with pytest.raises(ValueError, match="op"):
        auto.choice("mean", 1024, torch.float32, clusters=True)


@pytest.mark.parametrize("run", ["h200.json", "h100.json"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_choice_is_the_faster_of_triton_and_cuda_in_the_committed_run(dtype, run):
    """提交的 softmax 套件（docs/data/h200.json 与 h100.json，两块 GPU 都有线程块簇）：auto 在每个 N 上选的实现
    与 Triton、CUDA C 两者中较快的一个相差不到 2 个百分点（占同一进程的拷贝）。"""
    rec = rl.load_data(run)["suites"]["softmax"]
    sub = rec if rec["dtype"] == dtype else rec["by_dtype"][dtype]
    checked = 0
    for e in sub["shapes"]:
        res = e["results"]
        if any(res.get(b, {}).get("status") != "ok" for b in ("triton", "cuda")):
            continue
        pick = auto.choice("softmax", e["N"], getattr(torch, dtype), clusters=True)
        best = max(res[b]["frac_copy"] for b in ("triton", "cuda"))
        assert res[pick]["frac_copy"] >= best - 0.02, (dtype, e["N"], pick)
        checked += 1
    assert checked >= 10


def _x(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype).to(rl.DEVICE)


def _ref(x):
    return torch.softmax(x.double(), -1)


def _close(y, x):
    tol = {torch.float32: 1e-5, torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10}[x.dtype]     # 输出 dtype 的一个 ulp
    assert y.dtype == x.dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), _ref(x), rtol=tol, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_api_default_is_auto_and_runs_the_chosen_backend(dtype):
    n = 65536 if rl.MODE == "gpu" else 4096
    x = _x((3, n), dtype)
    pick = auto.resolve("softmax", x)
    assert pick == ("cuda" if ON_HOPPER else "triton")
    y = rl.softmax(x)
    _close(y, x)
    assert torch.equal(y, rl.softmax(x, backend=pick))                # 同一个内核、同一个计划：逐位相同
    # 按行求和：行数少于 SM 数时 Triton 把一行切成几段、原子加合并，两次调用的加法顺序可以不同
    torch.testing.assert_close(rl.reduce_sum(x), rl.reduce_sum(x, backend="triton"), rtol=1e-5, atol=1e-5)
    out = torch.empty_like(x)
    assert rl.softmax(x, out=out) is out and torch.equal(out, y)


@pytest.mark.skipif(not ON_HOPPER, reason="只有计算能力 9.0 以上的 GPU 有线程块簇，auto 才会选 cuda")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [32768, 131072, 262144])
def test_on_hopper_long_rows_use_cuda_even_when_unaligned(dtype, n):
    base = _x((4, n + 1), dtype, seed=n)
    x = base[:, 1:]                                   # 行首偏一个元素：不在 16 字节边界上，最后一维仍连续
    assert not ck.launcher.rows_aligned(x)
    pick = auto.resolve("softmax", x)
    assert pick == auto.choice("softmax", n, dtype, clusters=True, aligned=False)
    _close(rl.softmax(x), x)
    _close(rl.softmax(base[:, :n].contiguous()), base[:, :n])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_autograd_through_auto(dtype):
    n = 32768 if rl.MODE == "gpu" else 64
    x = _x((2, n), dtype).requires_grad_()
    dy = _x((2, n), dtype, seed=1)
    (rl.softmax(x) * dy).sum().backward()
    ref = x.detach().double().requires_grad_()
    (torch.softmax(ref, -1) * dy.double()).sum().backward()
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(x.grad.double(), ref.grad, rtol=tol, atol=tol)


def test_bad_backend_message_lists_auto():
    with pytest.raises(ValueError, match="auto"):
        rl.softmax(_x((2, 8), torch.float32), backend="fast")
