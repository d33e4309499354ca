"""TileLang softmax 的三条路径（row / online / cluster）：每条都在小形状上与 float64 的 torch 对照，
包括奇数 N、N=1、不是块宽倍数的 N、整行很大的负数、含 -inf 的行、很大的偏移、``out=``、行数变化时复用
同一个编译结果；坏参数的报错；gpu 默认表的选择；生成的 CUDA C（每条路径）能被 nvcc 编译。

两种模式都能跑（张量建在 rl.DEVICE 上）。sim 模式下 cluster 路径分两次启动（C 目标没有簇），
gpu 模式下一次启动、簇内同步。
"""

from __future__ import annotations

import shutil

import pytest
import torch

import reduction_lab as rl

pytest.importorskip("tilelang", reason="TileLang 内核需要 tilelang（pip install reduction_lab[tilelang]）")

from reduction_lab import tilelang_kernels as tk  # noqa: E402

DEV = rl.DEVICE
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if rl.runtime.is_gpu() else [])

# (名字, N, 参数)：每条路径、含行尾不满一块的情形
PATHS = [
    ("row-1", 1, dict(path="row")),
    ("row-7-multirow", 7, dict(path="row", block_m=4, block_n=8)),
    ("row-1000", 1000, dict(path="row")),
    ("online-1000", 1000, dict(path="online", block_n=128, block_m=2)),
    ("online-1024", 1024, dict(path="online", block_n=256)),
    ("cluster-1000", 1000, dict(path="cluster", block_n=64, n_seg=4)),
    ("cluster-odd", 777, dict(path="cluster", block_n=128, n_seg=3)),
    ("cluster-2048", 2048, dict(path="cluster", block_n=256, n_seg=8)),
]


def _x(M, N, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g) * scale
    if M > 1:
        x[1] -= 1000.0                        # 整行很大的负数：不减最大值就全部下溢
    if M > 2 and N > 1:
        x[2, : N // 2] = float("-inf")        # 前一半被遮住
    if M > 3:
        x[3] *= 30.0                          # 很大的值：不减最大值 exp 会溢出
    return x.to(dtype).to(DEV)


def _ref(x):
    return torch.softmax(x.double(), 1)


def _tol(dtype):
    return dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-3, rtol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name,N,kw", PATHS, ids=[p[0] for p in PATHS])
def test_paths_match_torch(name, N, kw, dtype):
    for M in (5, 9):                           # 行数变化：同一个编译结果（M 是运行期变量）
        x = _x(M, N, dtype, seed=M + N)
        y = tk.softmax(x, **kw)
        assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
        torch.testing.assert_close(y.double(), _ref(x), **_tol(dtype))
        assert torch.isfinite(y).all() and ((y >= 0) & (y <= 1)).all()
        if N > 1:
            assert (y[2, : N // 2] == 0).all()
        torch.testing.assert_close(y.double().sum(1), torch.ones(M, dtype=torch.float64, device=DEV),
                                   atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=0)
    keys = [k for k in tk._SOFTMAX_COMPILED if k[0] == N and k[1] == dtype and dict(k[3])["path"] == kw["path"]]
    assert keys, "第二次调用应走编译好的内核"


def test_one_compile_serves_every_row_count():
    cfg = dict(path="online", block_n=128, block_m=1)
    jit = tk._jit_for("softmax", tk.current_target(torch.device(DEV)))
    tk.softmax(_x(3, 300), **cfg)
    before = len(jit._kernel_cache)
    for M in (1, 2, 17, 64):
        x = _x(M, 300, seed=M)
        torch.testing.assert_close(tk.softmax(x, **cfg).double(), _ref(x), atol=1e-6, rtol=1e-5)
    assert len(jit._kernel_cache) == before


def test_large_offset_and_all_masked_row():
    x = _x(4, 600, seed=3)
    x[0] += 1e4                              # 很大的偏移：结果与平移前相同
    x[3] = float("-inf")                     # 整行被遮住：与 torch 一样是 NaN
    for kw in (dict(path="row"), dict(path="online", block_n=128), dict(path="cluster", block_n=64, n_seg=4)):
        y = tk.softmax(x, **kw)
        torch.testing.assert_close(y[:3].double(), _ref(x[:3]), atol=1e-6, rtol=1e-5)
        assert torch.isnan(y[3]).all() and torch.isnan(_ref(x[3:])).all()


def test_out_is_written_in_place():
    x = _x(6, 500, seed=4)
    for kw in (dict(path="row"), dict(path="cluster", block_n=64, n_seg=2)):
        out = torch.full_like(x, 7.0)
        res = tk.softmax(x, out=out, **kw)
        assert res is out
        torch.testing.assert_close(out.double(), _ref(x), atol=1e-6, rtol=1e-5)
    y = rl.softmax(x, backend="tilelang", out=torch.empty_like(x))
    torch.testing.assert_close(y.double(), _ref(x), atol=1e-6, rtol=1e-5)
    with pytest.raises((ValueError, TypeError), match="out"):
        tk.softmax(x, out=torch.empty(6, 499, device=DEV))


def test_backward_still_matches_autograd():
    x = _x(4, 300, seed=5).requires_grad_(True)
    dy = torch.randn(4, 300, device=DEV)
    y = tk.softmax(x.detach())
    dx = tk.softmax_backward(y, dy)
    ref = torch.softmax(x.double(), 1)
    (ref * dy.double()).sum().backward()
    torch.testing.assert_close(dx.double(), x.grad.double(), atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("kw,words", [
    (dict(path="tiles"), "path"),
    (dict(path="row", block_n=256), "block_n"),     # N=1000 装不进 256
    (dict(path="online", n_seg=4), "n_seg"),
    (dict(path="cluster", n_seg=1), "n_seg"),
    (dict(path="cluster", n_seg=16), "n_seg"),
    (dict(path="cluster", n_seg=2, block_m=2), "block_m"),
    (dict(block_n=96), "block_n"),
    (dict(threads=48), "threads"),
    (dict(n_seg=0), "n_seg"),
])
def test_bad_softmax_tunables(kw, words):
    with pytest.raises((ValueError, TypeError), match=words):
        tk.softmax(torch.ones(2, 1000, device=DEV), **kw)


def test_gpu_default_table():
    # 每个 (元素字节数, N) 的默认路径来自 SOFTMAX_TABLE；cluster 的一段要放得进共享内存
    for elem in (4, 2):
        for n in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144):
            m = (1 << 26) // n
            cfg = tk.default_config("softmax", m, n, gpu=True, elem_size=elem)
            assert cfg["path"] == tk.SOFTMAX_TABLE[(elem, n)]["path"]
            if cfg["path"] == "row":
                assert cfg["block_n"] >= n
                assert cfg["block_m"] * cfg["block_n"] // cfg["threads"] <= 64    # 每个线程的元素数
            if cfg["path"] == "cluster":
                seg = -(-n // cfg["n_seg"])
                assert seg * elem <= 128 * 1024 and 2 <= cfg["n_seg"] <= 8
    assert tk.default_config("softmax", 8, 1000, gpu=True)["block_n"] == 1024       # 不是 2 的幂：向上取
    assert tk.default_config("softmax", 2, 1 << 21, gpu=True)["path"] == "online"   # 表尾之外
    assert tk.default_config("softmax", 3, 100, gpu=False)["path"] == "row"
    assert tk.default_config("softmax", 3, 5000, gpu=False)["path"] == "online"


def test_row_path_reduces_within_a_warp():
    # 布局让一个 warp 持有一行（N=512，8 行一块）：按行归约只用 warp 洗牌，不经共享内存
    src = tk.cuda_source("softmax", M=1 << 17, N=512, path="row", block_m=8, block_n=512, threads=128)
    assert "AllReduce<tl::MaxOp, 32," in src and "AllReduce<tl::SumOp, 32," in src
    assert "float4" in src


def test_cluster_path_source():
    src = tk.cuda_source("softmax", M=256, N=262144, path="cluster", block_n=8192, threads=1024, n_seg=8)
    assert "cluster_sync" in src and "keep" in src
    half = tk.cuda_source("softmax", M=256, N=262144, dtype="bfloat16", path="cluster", block_n=8192,
                          threads=1024, n_seg=8)
    assert "bfloat16_t" in half


_NO_NVCC = shutil.which("nvcc") is None


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
@pytest.mark.parametrize("dtype,M,N,kw", [
    ("float32", 1 << 17, 512, {}),
    ("bfloat16", 7, 1001, {}),
    ("float32", 1024, 65536, dict(path="cluster", block_n=4096, threads=512, n_seg=4)),
    ("float16", 64, 3000, dict(path="online", block_n=1024, threads=128)),
], ids=["row", "row-ragged-bf16", "cluster", "online-fp16"])
def test_softmax_paths_compile_with_nvcc(dtype, M, N, kw):
    ptx = tk.nvcc_check(tk.cuda_source("softmax", M=M, N=N, dtype=dtype, **kw))
    assert "softmax_kernel_kernel" in ptx
