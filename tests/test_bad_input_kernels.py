"""各个内核包装函数与 count_memory() 的错误输入，按入口分组：类型、取值、形状、布局。每个错误在启动
之前抛出（Triton 入口用 count_memory 确认没有启动），信息里有参数名。"""

from __future__ import annotations

import pytest
import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck
from reduction_lab.triton_kernels.online_softmax import online_softmax, split_softmax
from reduction_lab.triton_kernels.row_sum import row_sum
from reduction_lab.triton_kernels.softmax import fused_softmax, softmax, softmax_persistent
from reduction_lab.triton_kernels.softmax_backward import fused_softmax_backward, softmax_backward

X = torch.randn(4, 100, device=rl.DEVICE)


def _raises_before_launch(exc, words, fn):
    with rl.count_memory() as rep:
        with pytest.raises(exc, match=words):
            fn()
    assert rep.launches == 0, rep.kernels()


# ---------------------------------------------------------------- Triton：调优参数

TRITON_BAD = [
    ("row_sum", lambda: row_sum(X, 0), ValueError, "block_size"),
    ("row_sum", lambda: row_sum(X, 3), ValueError, "2 的幂"),
    ("row_sum", lambda: row_sum(X, 1.5), TypeError, "block_size"),
    ("row_sum", lambda: row_sum(X, True), TypeError, "block_size"),
    ("row_sum", lambda: row_sum(X, 2**21), ValueError, "block_size"),
    ("row_sum", lambda: row_sum(X, block_m=-1), ValueError, "block_m"),
    ("row_sum", lambda: row_sum(X, block_n=48), ValueError, "block_n"),
    ("row_sum", lambda: row_sum(X, block_m=2048, block_n=1024), ValueError, "block_m \\* block_n"),
    ("row_sum", lambda: row_sum(X, n_split=0), ValueError, "n_split"),
    ("row_sum", lambda: row_sum(X, num_warps=3), ValueError, "num_warps"),
    ("row_sum", lambda: row_sum(X, num_warps=64), ValueError, "num_warps"),
    ("row_sum", lambda: row_sum(X, programs_per_sm=0), ValueError, "programs_per_sm"),
    ("row_sum", lambda: row_sum(X, num_stages=0), ValueError, "num_stages"),
    ("row_sum", lambda: row_sum(X, num_stages=2), ValueError, "n_split=1"),           # 只用于常驻内核
    ("row_sum", lambda: row_sum(X, block_m=2, programs_per_sm=4), ValueError, "n_split=1"),
    ("row_sum", lambda: row_sum(X, eviction_policy="evict_all"), ValueError, "eviction_policy"),
    ("row_sum", lambda: row_sum(X.double(), 128), TypeError, "float64"),
    ("softmax", lambda: softmax(X, block_m=0), ValueError, "block_m"),
    ("softmax", lambda: softmax(X, block_m=2**20), ValueError, "block_m \\* block_n"),
    ("softmax", lambda: softmax(X, chunk=3), ValueError, "chunk"),
    ("softmax", lambda: softmax(X, chunk=2.0), TypeError, "chunk"),
    ("softmax", lambda: softmax(X, num_warps=0), ValueError, "num_warps"),
    ("softmax", lambda: softmax(X.double(), chunk=64), TypeError, "float64"),
    ("softmax_persistent", lambda: softmax_persistent(X, block_m=3), ValueError, "block_m"),
    ("softmax_persistent", lambda: softmax_persistent(X, programs_per_sm=0), ValueError, "programs_per_sm"),
    ("softmax_persistent", lambda: softmax_persistent(X, num_stages=0), ValueError, "num_stages"),
    ("online_softmax", lambda: online_softmax(X, 0), ValueError, "block_size"),
    ("online_softmax", lambda: online_softmax(X, 1.5), TypeError, "block_size"),
    ("online_softmax", lambda: online_softmax(X, None), TypeError, "block_size"),
    ("split_softmax", lambda: split_softmax(X, chunk=-2), ValueError, "chunk"),
    ("split_softmax", lambda: split_softmax(X, num_warps=3), ValueError, "num_warps"),
    ("split_softmax", lambda: split_softmax(X, packed="yes"), TypeError, "packed"),
    ("fused_softmax", lambda: fused_softmax(torch.ones(2, 40000, device=rl.DEVICE)), ValueError, "32768"),
    ("fused_softmax_backward", lambda: fused_softmax_backward(X, X[:, :50]), ValueError, "形状必须相同"),
    ("softmax_backward", lambda: softmax_backward(X, X, out=torch.empty(4, 100, device=rl.DEVICE).t()),
     ValueError, "out"),
]


@pytest.mark.parametrize("fn,exc,words", [c[1:] for c in TRITON_BAD],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(TRITON_BAD)])
def test_triton_tuning_arguments(fn, exc, words):
    _raises_before_launch(exc, words, fn)


# ---------------------------------------------------------------- Triton：输入张量

@pytest.mark.parametrize("fn", [row_sum, softmax, fused_softmax, online_softmax, split_softmax,
                                softmax_persistent], ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad,exc,words", [
    ("list", TypeError, "torch.Tensor"), ("1d", ValueError, "二维"), ("empty", ValueError, "空张量"),
    ("int", TypeError, "dtype"), ("transposed", ValueError, "stride"), ("sparse", TypeError, "strided"),
])
def test_triton_input_tensors(fn, bad, exc, words):
    x = {"list": [[1.0]], "1d": torch.ones(3, device=rl.DEVICE), "empty": torch.ones(0, 3, device=rl.DEVICE),
         "int": torch.ones(2, 3, dtype=torch.int32, device=rl.DEVICE),
         "transposed": torch.ones(3, 5, device=rl.DEVICE).t(),
         "sparse": torch.ones(2, 3).to_sparse()}[bad]
    _raises_before_launch(exc, words, lambda: fn(x))


# ---------------------------------------------------------------- CUDA C 包装函数

CUDA_BAD = [
    (lambda: ck.reduce_sum(X, kernel="tree2"), ValueError, "kernel"),
    (lambda: ck.reduce_sum(X, block_size=48), ValueError, "block_size"),
    (lambda: ck.reduce_sum(X, block_size=16), ValueError, "block_size"),
    (lambda: ck.reduce_sum(X, kernel="split", chunks=0), ValueError, "chunks"),
    (lambda: ck.reduce_sum(X, kernel="warp", chunks=2), ValueError, "chunks"),
    (lambda: ck.reduce_sum(X, kernel="tree", packs=2), ValueError, "warp 与 split"),
    (lambda: ck.reduce_sum(X.bfloat16(), packs=3), ValueError, "packs"),
    (lambda: ck.reduce_sum(X.bfloat16(), packs=True), ValueError, "packs"),
    (lambda: ck.reduce_sum(X, evict_first=1), TypeError, "evict_first"),
    (lambda: ck.reduce_sum(X, kernel="tree", evict_first=True), ValueError, "warp 与 split"),
    (lambda: ck.reduce_sum(X.bfloat16(), kernel="tree", packs=2), ValueError, "warp 与 split"),
    (lambda: ck.reduce_sum(X, mode="cpu"), ValueError, "mode"),
    (lambda: ck.reduce_sum(X, return_report="yes"), TypeError, "return_report"),
    (lambda: ck.reduce_sum(X, out=torch.empty(5, device=rl.DEVICE)), ValueError, "out 的形状"),
    (lambda: ck.reduce_sum(X.double()), TypeError, "dtype"),
    (lambda: ck.softmax(X, block_size=2048), ValueError, "block_size"),
    (lambda: ck.softmax(X, dim=0), ValueError, "dim"),
    (lambda: ck.softmax(X, out=torch.empty(4, 100, dtype=torch.float64, device=rl.DEVICE)), TypeError, "out 的 dtype"),
    (lambda: ck.softmax_backward(X, X[:2]), ValueError, "形状必须相同"),
    (lambda: ck.full_sum(X), ValueError, "一维"),
    (lambda: ck.full_sum(X[0, ::2]), ValueError, "连续"),
    (lambda: ck.full_sum(X[0], version=9), ValueError, "version"),
    (lambda: ck.full_sum(X[0], version=1.0), ValueError, "version"),
    (lambda: ck.full_sum(X[0], block_size=32), ValueError, "block_size"),
    (lambda: ck.full_sum(X[0], max_blocks=0), ValueError, "max_blocks"),
    (lambda: ck.full_sum(X[0], max_blocks=2.5), ValueError, "max_blocks"),
    (lambda: ck.launch("softmax.cu", "nope", 1, 32, ()), ValueError, "nope"),
    (lambda: ck.launch("nope.cu", "k", 1, 32, ()), FileNotFoundError, "nope.cu"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 1, 32, (X, X)), TypeError, "参数"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 1, 32, (X, X, 1.5, 100, 100)), TypeError, "x_row_stride"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 1, 2048, (X, X, 100, 100, 100)), ValueError, "1024"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 0, 32, (X, X, 100, 100, 100)), ValueError, "grid"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 1, 32, (X, X, 100, 100, 100), shared_bytes=-1),
     ValueError, "shared_bytes"),
    (lambda: ck.launch("softmax.cu", "softmax_rows", 1, 32, (X, X, 100, 100, 100), defines=[1]), TypeError, "defines"),
]


@pytest.mark.parametrize("fn,exc,words", CUDA_BAD, ids=[str(i) for i in range(len(CUDA_BAD))])
def test_cuda_wrappers(fn, exc, words):
    with pytest.raises(exc, match=words):
        fn()


# ---------------------------------------------------------------- TileLang 包装函数

def _tilelang():
    return pytest.importorskip("reduction_lab.tilelang_kernels", reason="TileLang backend 需要 tilelang")


@pytest.mark.parametrize("call,exc,words", [
    ("reduce_sum(X, block_n=3)", ValueError, "block_n"),
    ("reduce_sum(X, block_m=True)", ValueError, "block_m"),
    ("reduce_sum(X, threads=33)", ValueError, "threads"),
    ("reduce_sum(X, n_split=0)", ValueError, "n_split"),
    ("reduce_sum(X, defer_reduce='x')", TypeError, "defer_reduce"),
    ("reduce_sum(X, split=2)", TypeError, "split"),
    ("softmax(X, block_n=0)", ValueError, "block_n"),
    ("softmax(X[::2])", ValueError, "stride"),
    ("softmax(X.double())", TypeError, "dtype"),
    ("cuda_source('softmax', dtype='float64')", ValueError, "dtype"),
    ("cuda_source('softmax', M=0)", ValueError, "M"),
    ("cuda_source('nope')", ValueError, "nope"),
])
def test_tilelang_wrappers(call, exc, words):
    tk = _tilelang()
    with pytest.raises(exc, match=words):
        eval(call, {"X": X, **{n: getattr(tk, n) for n in ("reduce_sum", "softmax", "cuda_source")}})


# ---------------------------------------------------------------- count_memory

@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_count_memory_arguments(bad):
    with pytest.raises(TypeError, match="check_bounds"):
        with rl.count_memory(check_bounds=bad):
            pass
    with pytest.raises(TypeError):
        with rl.count_memory(True):           # 只接受关键字参数
            pass
