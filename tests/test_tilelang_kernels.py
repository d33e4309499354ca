"""TileLang 内核（reduction_lab.tilelang_kernels）的测试：与 torch 对照、softmax 的不变量、
坏输入的报错、生成的 CUDA C 能否被 nvcc 编译。两种模式都能跑（张量建在 rl.DEVICE 上）。

每种（形状, 参数）编译一次（CPU 上约 1 秒），所以这里的形状刻意少而怪。
"""

from __future__ import annotations

import shutil

import pytest
import torch

import reduction_lab as rl

pytest.importorskip("tilelang", reason="TileLang 内核需要 tilelang（pip install reduction_lab[tilelang]）")

from reduction_lab import tilelang_kernels as tk  # noqa: E402

DEV = rl.DEVICE

# 奇怪的宽度（不是 2 的幂、不是块宽的倍数）、单行、单列；(3, 96)、(64, 96) 是上游报告过
# 出错的宽度（tile-ai/tilelang#2399：N=96、128 线程）
SHAPES = [(1, 1), (1, 7), (3, 96), (5, 100), (4, 1000), (2, 4097), (64, 96)]


def _x(M, N, seed=0, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(M, N, generator=g) * scale + shift).to(DEV)


def _ref_sum(x):
    return x.double().sum(1).float()


def _ref_softmax(x):
    return torch.softmax(x.double(), 1).float()


@pytest.mark.parametrize("M,N", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_reduce_sum_matches_torch(M, N):
    x = _x(M, N, seed=M * 10007 + N)
    y = tk.reduce_sum(x)
    assert y.shape == (M,) and y.dtype == torch.float32 and y.device == x.device
    torch.testing.assert_close(y, _ref_sum(x), atol=1e-4 * N ** 0.5, rtol=1e-5)


@pytest.mark.parametrize("M,N", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_softmax_matches_torch(M, N):
    x = _x(M, N, seed=M * 10007 + N + 1, scale=3.0)
    y = tk.softmax(x)
    assert y.shape == (M, N) and y.dtype == torch.float32
    torch.testing.assert_close(y, _ref_softmax(x), atol=1e-6, rtol=1e-5)


def test_reduce_sum_many_tiles_and_tail_rows():
    # 一行 17 个块（最后一块只有 1 列），每块 4 行、总共 7 行（最后一个行块只有 3 行）
    x = _x(7, 4097, seed=3)
    y = tk.reduce_sum(x, block_m=4, block_n=256, threads=64)
    torch.testing.assert_close(y, _ref_sum(x), atol=1e-2, rtol=1e-5)


def test_reduce_sum_per_tile_reduce():
    # defer_reduce=False：课程里的写法，每块 T.reduce_sum 一次再累加
    x = _x(5, 1000, seed=4)
    y = tk.reduce_sum(x, block_m=2, block_n=128, defer_reduce=False)
    torch.testing.assert_close(y, _ref_sum(x), atol=1e-3, rtol=1e-5)


def test_reduce_sum_split_rows():
    # 一行切成 4 段（段边界不对齐 N），第二阶段再加起来；第 4 段全部越界
    x = _x(3, 1500, seed=5)
    y = tk.reduce_sum(x, block_n=256, n_split=4)
    torch.testing.assert_close(y, _ref_sum(x), atol=1e-3, rtol=1e-5)
    ones = torch.ones(2, 1500, device=DEV)
    assert tk.reduce_sum(ones, block_n=256, n_split=4).tolist() == [1500.0, 1500.0]


def test_reduce_sum_exact_integers():
    # 小整数的和在 float32 中是精确的：结果必须逐位相等
    x = (torch.arange(3 * 1000, dtype=torch.float32).reshape(3, 1000) % 7).to(DEV)
    assert tk.reduce_sum(x).tolist() == x.double().sum(1).tolist()


def test_softmax_invariants_and_extremes():
    M, N = 4, 1000
    x = _x(M, N, seed=6, scale=5.0)
    x[1] -= 1000.0           # 整行都是很大的负数：不减最大值就会全部下溢成 0
    x[2] = x[2] * 100.0      # 很大的值：不减最大值 exp 会溢出成 inf
    x[3, :500] = float("-inf")  # 一半是 -inf（被遮住的位置）
    y = tk.softmax(x, block_n=256)  # 一行 4 块，在线更新最大值和指数和
    assert torch.isfinite(y).all()
    assert ((y >= 0) & (y <= 1)).all()
    torch.testing.assert_close(y.double().sum(1), torch.ones(M, dtype=torch.float64, device=DEV),
                               atol=1e-5, rtol=0)
    assert (y[3, :500] == 0).all()
    torch.testing.assert_close(y, _ref_softmax(x), atol=1e-6, rtol=1e-5)


def test_softmax_constant_rows_are_uniform():
    x = torch.full((2, 100), 7.0, device=DEV)
    y = tk.softmax(x)
    torch.testing.assert_close(y, torch.full_like(x, 0.01), atol=1e-7, rtol=1e-6)


def test_cache_reuses_compiled_kernel():
    x = _x(5, 100, seed=7)
    tk.reduce_sum(x)
    jit = tk._jit_for("reduce_sum", tk.current_target(x.device))
    before = len(jit._kernel_cache)
    tk.reduce_sum(_x(5, 100, seed=8))     # 同形状同参数：不再编译
    assert len(jit._kernel_cache) == before


@pytest.mark.parametrize("bad,exc,words", [
    ("list", TypeError, "torch.Tensor"),
    ("1d", ValueError, "二维"),
    ("empty", ValueError, "空张量"),
    ("float64", TypeError, "float64"),
    ("int32", TypeError, "int32"),
    ("transposed", ValueError, "stride"),
    ("meta", ValueError, "meta"),
])
@pytest.mark.parametrize("fn", ["reduce_sum", "softmax"])
def test_bad_input(fn, bad, exc, words):
    make = {
        "list": lambda: [[1.0, 2.0]],
        "1d": lambda: torch.ones(5, device=DEV),
        "empty": lambda: torch.ones(3, 0, device=DEV),
        "float64": lambda: torch.ones(2, 8, dtype=torch.float64, device=DEV),
        "int32": lambda: torch.ones(2, 8, dtype=torch.int32, device=DEV),
        "transposed": lambda: torch.ones(8, 2, device=DEV).t(),
        "meta": lambda: torch.ones(2, 8, device="meta"),
    }
    with pytest.raises(exc, match=words):
        getattr(tk, fn)(make[bad]())


def test_view_with_storage_offset():
    # 从第 2 行开始的视图：数据指针不在存储的开头
    x = _x(6, 100, seed=10)[2:]
    assert x.storage_offset() == 200
    torch.testing.assert_close(tk.reduce_sum(x), _ref_sum(x), atol=1e-3, rtol=1e-5)
    torch.testing.assert_close(tk.softmax(x), _ref_softmax(x), atol=1e-6, rtol=1e-5)


def test_padded_rows_rejected():
    x = torch.ones(3, 16, device=DEV)[:, :8]   # 最后一维连续，但行之间有空隙
    with pytest.raises(ValueError, match="contiguous"):
        tk.reduce_sum(x)


@pytest.mark.parametrize("kw,words", [
    (dict(block_n=100), "block_n"),
    (dict(block_m=3), "block_m"),
    (dict(threads=100), "threads"),
    (dict(n_split=0), "n_split"),
    (dict(warps=4), "warps"),
])
def test_bad_tunables(kw, words):
    with pytest.raises((ValueError, TypeError), match=words):
        tk.reduce_sum(torch.ones(2, 8, device=DEV), **kw)


def test_default_config_shapes(monkeypatch):
    monkeypatch.setattr(tk, "_sm_count", lambda: 132)          # 规则按 H200 的 SM 数写
    # gpu 默认值：块宽是 2 的幂；短行一块装几行；行块数少于 SM 数时切分
    for n in (512, 1024, 4096, 65536, 262144):
        m = (1 << 26) // n
        cfg = tk.default_config("reduce_sum", m, n, gpu=True)
        assert cfg["block_n"] & (cfg["block_n"] - 1) == 0
        assert cfg["block_m"] * cfg["block_n"] == cfg["threads"] * 16
    assert tk.default_config("reduce_sum", 131072, 512, gpu=True)["block_m"] == 8
    assert tk.default_config("reduce_sum", 256, 262144, gpu=True)["n_split"] == 1   # 行块数 >= SM 数
    assert tk.default_config("reduce_sum", 8, 1 << 20, gpu=True)["n_split"] > 1      # 行太少：切分
    assert tk.default_config("reduce_sum", 32768, 2048, gpu=True)["n_split"] == 1
    # 16 位的长行、行块数不到 2 倍 SM 数：512 个线程、一块 16384 个元素；float32 与行多的 16 位不变
    big = tk.default_config("reduce_sum", 256, 262144, gpu=True, elem_size=2)
    assert (big["threads"], big["block_n"], big["n_split"]) == (512, 16384, 1)
    assert tk.default_config("reduce_sum", 512, 131072, gpu=True, elem_size=2)["threads"] == 256
    assert tk.default_config("reduce_sum", 256, 262144, gpu=True)["threads"] == 256
    with pytest.raises(ValueError, match="未知的内核"):
        tk.default_config("mean", 4, 4)


def test_cuda_source_lowers_without_gpu():
    src = tk.cuda_source("reduce_sum", M=32768, N=4096)
    assert "__global__" in src and "AllReduce<tl::SumOp" in src
    assert "float4" in src     # 对齐的整块：128 位向量加载
    with pytest.raises(ValueError, match="int32"):
        tk.cuda_source("reduce_sum", M=1 << 16, N=1 << 16)


_NO_NVCC = shutil.which("nvcc") is None


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
@pytest.mark.parametrize("kernel,M,N", [("reduce_sum", 256, 262144), ("softmax", 7, 1001)])
def test_generated_cuda_compiles(kernel, M, N):
    # 长行切分（n_split>1）的求和与带尾块的 softmax；gpu 模式下默认参数可能选到的全部配置
    # 见下面的 slow 测试（N = 512 ... 262144，M*N = 2^26，含第二阶段）
    ptx = tk.nvcc_check(tk.cuda_source(kernel, M=M, N=N))
    assert f"{kernel}_kernel_kernel" in ptx


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
def test_batched_nvcc_matches_one_by_one():
    # 几份源码在同一次 nvcc 里编译：第 1 份（改过名、放进命名空间的）内核与单独编译的一样，只有跳转标号的编号
    # 不同；其中一份编译不过时，报错写明是第几份
    import re

    srcs = [tk.cuda_source("reduce_sum", M=3, N=96), tk.cuda_source("softmax", M=3, N=96)]
    labels = lambda p: re.sub(r"\$L__BB\d+_", "$L__BB_", p[p.index(".entry"):]).rstrip()
    many = tk.nvcc_check_many(srcs)
    assert "__rl" not in many[0] + many[1] and ".entry reduce_sum_kernel_kernel(" in many[0]
    assert labels(many[1]) == labels(tk.nvcc_check(srcs[1]))
    with pytest.raises(RuntimeError, match="第 1 份源码"):
        tk.nvcc_check_many([srcs[0], srcs[1] + "\nthis_is_not_cuda;\n"])
    assert tk.nvcc_check_many([]) == []


@pytest.mark.slow  # 20 多次降级 + 一次 nvcc（所有源码在同一个翻译单元里，头文件只解析一次）
@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
def test_generated_cuda_compiles_all_defaults():
    # gpu 模式下默认参数可能选到的全部配置：N = 512 ... 262144，M*N = 2^26，含行切分的第二阶段
    cases = []
    for kernel in ("reduce_sum", "softmax"):
        for N in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144):
            M = (1 << 26) // N
            cases.append((f"{kernel} {M}x{N}", kernel, M, N))
            n_split = tk.default_config(kernel, M, N, gpu=True).get("n_split", 1)
            if n_split > 1:   # 第二阶段：同一内核对 (M, n_split) 的部分和按行求和
                cases.append((f"{kernel} {M}x{N} 第二阶段", kernel, M, n_split))
    ptxs = tk.nvcc_check_many([tk.cuda_source(k, M=M, N=N) for _, k, M, N in cases])
    missing = [name for (name, k, _, _), ptx in zip(cases, ptxs) if f".entry {k}_kernel_kernel(" not in ptx]
    assert not missing, f"PTX 里没有内核：{missing}"


@pytest.mark.skipif(not rl.runtime.is_gpu(), reason="默认参数里的行切分只在 gpu 模式下启用")
def test_gpu_default_split_path():
    x = _x(4, 65536, seed=9)
    assert tk.default_config("reduce_sum", 4, 65536)["n_split"] > 1
    torch.testing.assert_close(tk.reduce_sum(x), _ref_sum(x), atol=1e-2, rtol=1e-5)


@pytest.mark.slow  # 14 次降级 + 一次 nvcc
@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
def test_generated_cuda_compiles_small_shapes():
    # 小块时默认参数会减少线程数（最少 32）：这些配置也要能编译
    cases = [(kernel, M, N) for kernel in ("reduce_sum", "softmax") for M, N in SHAPES]
    ptxs = tk.nvcc_check_many([tk.cuda_source(k, M=M, N=N) for k, M, N in cases])
    missing = [c for c, ptx in zip(cases, ptxs) if f".entry {c[0]}_kernel_kernel(" not in ptx]
    assert not missing, f"PTX 里没有内核：{missing}"


def test_repeated_calls_use_the_compiled_kernel_and_stay_right():
    """同一形状第二次调用起直接调用 TileLang 编译好的内核（省掉 @tilelang.jit 每次的参数解析）；
    结果与第一次一样正确，换了输入的值也是。"""
    from reduction_lab import tilelang_kernels as tk

    for _ in range(3):
        x = torch.randn(5, 96, device=rl.DEVICE)
        torch.testing.assert_close(tk.reduce_sum(x), x.sum(1), atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(tk.softmax(x), torch.softmax(x, 1), atol=1e-6, rtol=1e-5)
    keys = [k for k in tk._COMPILED if k[1] == (5, 96)]
    assert {k[0] for k in keys} == {"reduce_sum"}
    # softmax：M 是运行期变量，快速路径按 (N, dtype, 设备, 参数) 缓存，与行数无关
    assert [k for k in tk._SOFTMAX_COMPILED if k[0] == 96 and k[1] == torch.float32]


@pytest.mark.skipif(not rl.runtime.is_gpu(), reason="api 检查之后的快速路径只在 gpu 模式下启用（sim 模式照常经包装函数）")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_checked_path_calls_the_ffi_executable_and_stays_right(dtype):
    """api 检查过输入之后，同一形状第二次起直接调用 TVM-FFI 的可执行函数（跳过编译好的内核对象的 Python 包装）。
    每次的输出先填满 NaN 再交给内核（softmax），或者由 FFI 新分配（求和）：值只能来自这一次的内核。"""
    x = torch.randn(64, 1000, device=DEV).to(dtype)
    for _ in range(3):
        y = rl.softmax(x, backend="tilelang")
        s = rl.reduce_sum(x, backend="tilelang")
    call, stats = tk._CHECKED[("softmax", 64, 1000, dtype, x.get_device())]
    assert type(call).__name__ != "JITKernel", "softmax 没有走 FFI 的快速路径"
    call_s, ffi = tk._CHECKED[("reduce_sum", 64, 1000, dtype, x.get_device())]
    assert ffi, "求和没有走 FFI 的快速路径"
    for seed in range(3):
        x = (torch.randn(64, 1000, device=DEV) * (seed + 1)).to(dtype)
        out = torch.full_like(x, float("nan"))
        got = rl.softmax(x, backend="tilelang", out=out)
        assert got is out
        tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=8e-3, rtol=1.6e-2)
        torch.testing.assert_close(out.float(), torch.softmax(x.double(), 1).float(), **tol)
        tol = dict(atol=1e-3, rtol=1e-5) if dtype == torch.float32 else dict(atol=0.5, rtol=1.6e-2)
        torch.testing.assert_close(rl.reduce_sum(x, backend="tilelang").float(), x.double().sum(1).float(), **tol)
