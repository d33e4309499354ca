"""CUDA C 内核（src/reduction_lab/cuda_kernels/*.cu）与启动器的测试。

sim 模式下经模拟器在 CPU 上运行（小尺寸）；gpu 模式下同样的测试在 GPU 上运行真实内核。
标了 ``mode="sim"`` 的测试（计数器、屏障错误）在两种模式下都用模拟器，结果应当一样。
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import launcher

GPU = rl.MODE == "gpu"
WRONG_DEVICE = "cpu" if GPU else "meta"     # 与当前模式不符的设备


def _rand(shape, seed=0, scale=1.0, device=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(device or rl.DEVICE)


def _close_sum(got, x, dim=None):
    want = x.double().sum() if dim is None else x.double().sum(dim=dim)
    n = x.numel() if dim is None else x.shape[dim]
    torch.testing.assert_close(got.double(), want, atol=1e-4 * max(1, n) ** 0.5, rtol=1e-5)


# ---------------------------------------------------------------- reduce_sum

ROW_SHAPES = [(1, 1), (1, 7), (3, 1000), (5, 33), (2, 257), (4, 2049), (2, 5000)]


@pytest.mark.parametrize("kernel", ["tree", "warp", "split", "auto"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_reduce_sum_kernels_match_float64(kernel, shape):
    x = _rand(shape)
    got = ck.reduce_sum(x, kernel=kernel)
    assert got.shape == (shape[0],) and got.dtype == torch.float32 and got.device == x.device
    _close_sum(got, x, dim=1)


@pytest.mark.parametrize("block_size", [32, 64, 1024])
@pytest.mark.parametrize("kernel", ["tree", "warp", "split"])
def test_reduce_sum_block_sizes(kernel, block_size):
    x = _rand((3, 1500), seed=2)
    _close_sum(ck.reduce_sum(x, kernel=kernel, block_size=block_size), x, dim=1)


def test_reduce_sum_split_uses_several_chunks_and_atomics():
    # 2 行 x 5000 列：按 132 个 SM 的规划切成 2 段，各段 atomicAdd 到同一个输出
    cols, chunks = ck._split_plan(2, 5000, 256, 132)
    assert chunks == 2 and cols % (256 * 8) == 0
    x = _rand((2, 5000), seed=3, device="cpu")
    got, rep = ck.reduce_sum(x, kernel="split", return_report=True, mode="sim")
    _close_sum(got, x, dim=1)
    assert rep.grid == (2, 2, 1)
    assert rep.atomic_ops == 4                  # 每个 (段, 行) 一次
    assert rep.global_load_bytes == x.numel() * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reduce_sum_split_one_chunk_writes_dtype_directly(dtype):
    """行数不少于 SM 数时一行一段：split 内核自己把和舍入成 x 的 dtype 写进 out（没有原子加、没有 float32
    缓冲区，也就没有清零与转换两次额外的启动）。写出的字节数 = 行数 x 元素字节数；和与 float64 的精确和舍入后逐位相等。"""
    assert ck._split_plan(132, 5000, 256, 132)[1] == 1 and ck._split_plan(131, 5000, 256, 132)[1] > 1
    x = torch.randint(-3, 4, (3, 5000)).to(dtype)
    out = torch.empty(3, dtype=dtype)
    y, rep = ck.reduce_sum(x, kernel="split", chunks=1, out=out, return_report=True, mode="sim")
    assert y is out and torch.equal(y, x.double().sum(1).to(dtype))
    assert rep.atomic_ops == 0 and rep.global_store_bytes == 3 * x.element_size()
    y, rep = ck.reduce_sum(x, kernel="split", chunks=2, return_report=True, mode="sim")
    assert torch.equal(y, x.double().sum(1).to(dtype)) and rep.atomic_ops == 6


def test_split_defaults_name_the_threads_and_packs():
    assert ck.split_defaults(4096, torch.bfloat16) == (256, 2)          # 一行 8 KiB：每个线程只分到 2 包
    assert ck.split_defaults(8192, torch.bfloat16) == (256, 8)
    assert ck.split_defaults(65536, torch.float16) == (1024, 8)
    assert ck.split_defaults(2048, torch.float32) == (256, 2)           # 一行 8 KiB：每个线程只分到 2 包
    assert ck.split_defaults(4096, torch.float32) == (256, 8)
    assert ck.split_defaults(65536, torch.float32) == (512, 8)
    assert ck.split_defaults(131072, torch.float32) == (512, 4)         # 一行 512 KiB 起 4 包
    with pytest.raises(TypeError, match="dtype"):
        ck.split_defaults(4096, torch.float64)
    with pytest.raises(ValueError, match="N"):
        ck.split_defaults(0, torch.float32)


def test_reduce_sum_split_block_size_follows_row_bytes():
    # float32：一行不到 64 KiB 256 个线程，更长 512 个；16 位：不到 32 KiB 256 个，不到 128 KiB 512 个，更长 1024 个
    # （H200 的扫描，docs/data/h200_cuda_row_sum_packs.json）
    assert ck._split_block(16383, 4) == 256 and ck._split_block(16384, 4) == 512
    assert ck._split_block(262144, 4) == 512
    assert ck._split_block(16384, 2) == 512 and ck._split_block(16383, 2) == 256
    assert ck._split_block(65536, 2) == 1024 and ck._split_block(65535, 2) == 512


def test_reduce_sum_warp_defaults():
    # 一行不超过 8 KiB 走 warp 内核：128 个线程、流式加载；float32 4 包，16 位一行不超过 1 KiB 时 2 包、更长 1 包
    assert ck._warp_rows(2048, torch.float32) and not ck._warp_rows(2049, torch.float32)
    assert ck._warp_rows(4096, torch.bfloat16) and not ck._warp_rows(4097, torch.bfloat16)
    d = ck._sum_defines("warp", 128, torch.float32, 1024)
    assert d["SUM_PACKS"] == 4 and d["SUM_EVICT_FIRST"] == 1
    assert ck._sum_defines("warp", 128, torch.bfloat16, 512)["SUM_PACKS"] == 2
    assert ck._sum_defines("warp", 128, torch.bfloat16, 513)["SUM_PACKS"] == 1
    assert "SUM_EVICT_FIRST" not in ck._sum_defines("split", 512, torch.float32, 65536)
    assert "SUM_PACKS" not in ck._sum_defines("tree", 256, torch.float32, 65536)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kernel", ["warp", "split"])
def test_reduce_sum_streaming_loads_change_nothing_but_the_hint(kernel, dtype):
    """evict_first 只换加载指令（ld.global.cs），加法的顺序不变：结果逐位相同。"""
    x = torch.randn(3, 3001, generator=torch.Generator().manual_seed(5)).to(dtype).to(rl.DEVICE)[:, 1:]
    kw = {"chunks": 2} if kernel == "split" else {}
    a = ck.reduce_sum(x, kernel=kernel, evict_first=True, **kw)
    b = ck.reduce_sum(x, kernel=kernel, evict_first=False, **kw)
    assert torch.equal(a, b)
    ref = x.double().sum(1)
    bound = x.shape[1] * 2.0**-23 * x.double().abs().sum(1)          # float32 累加
    if dtype != torch.float32:
        bound = bound + 2.0**-8 * ref.abs()                             # 最后舍入成 bf16
    assert ((a.double() - ref).abs() <= bound).all()


def test_reduce_sum_strided_rows():
    base = _rand((4, 300), seed=4)
    x = base[:, 10:260]                        # 行距 300，每行 250 个元素
    assert x.stride() == (300, 1)
    for kernel in ("tree", "warp", "split"):
        _close_sum(ck.reduce_sum(x, kernel=kernel), x, dim=1)


def test_reduce_sum_tree_counters_are_exact():
    # 课程版：一行一个线程块，256 个线程，树有 log2(256) = 8 步，每步之后一次屏障
    x = torch.ones(3, 1000)
    out, rep = ck.reduce_sum(x, kernel="tree", return_report=True, mode="sim")
    assert out.tolist() == [1000.0, 1000.0, 1000.0]
    assert rep.blocks_launched == 3
    assert rep.barriers == 3 * (1 + 8)
    assert rep.global_load_bytes == 3 * 1000 * 4
    assert rep.global_store_bytes == 3 * 4
    assert rep.bank_conflicts == 0              # 顺序寻址没有存储体冲突


def test_reduce_sum_routes_through_api():
    x = _rand((3, 100), seed=5)
    _close_sum(rl.reduce_sum(x, backend="cuda"), x, dim=1)


def test_reduce_sum_extreme_values():
    x = torch.tensor([[1e30, -1e30, 1.0], [3.0e38, 3.0e38, -3.0e38]], device=rl.DEVICE)
    got = ck.reduce_sum(x, kernel="tree").tolist()
    # 课程版的加法顺序是固定的树：(x0 + x2) + x1。两种模式给出同一个结果，中间结果不溢出
    assert got[0] == 0.0                                    # 1e30 + 1 被舍入成 1e30，再与 -1e30 相消
    assert got[1] == torch.tensor(3.0e38).item()            # (3e38 - 3e38) + 3e38，不会先算 3e38 + 3e38


# ---------------------------------------------------------------- softmax

SOFTMAX_SHAPES = [(1, 1), (1, 7), (3, 1000), (5, 33), (2, 4097)]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_matches_float64(shape):
    x = _rand(shape, seed=6, scale=4.0)
    y = ck.softmax(x)
    assert y.shape == x.shape and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-4)
    # 不变量：每行和为 1，所有值在 [0, 1]
    torch.testing.assert_close(y.double().sum(1), torch.ones(shape[0], dtype=torch.float64, device=x.device),
                               atol=1e-5, rtol=0)
    assert bool(((y >= 0) & (y <= 1)).all())


@pytest.mark.parametrize("block_size", [32, 128, 1024])
@pytest.mark.parametrize("kernel", ["auto", "rows"])
def test_softmax_block_sizes_and_strided_input(block_size, kernel):
    base = _rand((3, 700), seed=7, scale=3.0)
    x = base[:, :650]
    y = ck.softmax(x, block_size=block_size, kernel=kernel)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-4)


def test_softmax_extreme_rows():
    x = torch.tensor([[-1e4, -2e4, -3e4, -1e4 - 1],     # 全是很负的数：单位元若用 0 就错
                      [80.0, 81.0, 79.0, 1e4],          # 不减最大值 exp 会溢出
                      [0.0, 0.0, 0.0, 0.0],
                      [-math.inf, 0.0, -math.inf, 1.0]], device=rl.DEVICE)
    y = ck.softmax(x)
    assert bool(torch.isfinite(y).all())
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-4)


def test_softmax_routes_through_api():
    x = _rand((2, 50), seed=8)
    torch.testing.assert_close(rl.softmax(x, backend="cuda"), torch.softmax(x, dim=1), atol=1e-6, rtol=1e-4)


# ---------------------------------------------------------------- full_sum

def test_full_sum_versions_table_matches_cu_file():
    assert sorted(ck.FULL_SUM_VERSIONS) == list(range(1, 9))
    names = [ck.FULL_SUM_VERSIONS[v][0] for v in sorted(ck.FULL_SUM_VERSIONS)]
    assert names == [f"reduce{v}" for v in range(1, 9)]
    assert names == ck.kernel_names("full_sum.cu")      # 表里的每个内核都在文件里，反之亦然
    for _, desc in ck.FULL_SUM_VERSIONS.values():
        assert desc and any("\u4e00" <= ch <= "\u9fff" for ch in desc)


def test_full_sum_plan():
    assert ck.full_sum_plan(2**28, 8, 256, 1056) == [(2**28, 1056), (1056, 1)]
    assert ck.full_sum_plan(2**22, 1, 128) == [(2**22, 32768), (32768, 256), (256, 2), (2, 1)]
    assert ck.full_sum_plan(1000, 4, 256) == [(1000, 2), (2, 1)]
    assert ck.full_sum_plan(1, 7, 256, 5) == [(1, 1)]
    with pytest.raises(ValueError, match="version"):
        ck.full_sum_plan(10, 9)


@pytest.mark.parametrize("version", range(1, 9))
@pytest.mark.parametrize("n", [1, 7, 1000, 5003])
def test_full_sum_versions_match_float64(version, n):
    x = _rand(n, seed=n + version)
    got = ck.full_sum(x, version=version, block_size=128)
    assert got.shape == () and got.dtype == torch.float32
    _close_sum(got, x)


@pytest.mark.parametrize("version", [7, 8])
def test_full_sum_grid_stride_loops(version):
    # 只给 3 个线程块：每个线程要循环很多轮，也覆盖不足 8 轮的尾部
    x = _rand(20011, seed=9)
    _close_sum(ck.full_sum(x, version=version, block_size=64, max_blocks=3), x)


@pytest.mark.parametrize("block_size", [64, 1024])
@pytest.mark.parametrize("version", [5, 6, 8])
def test_full_sum_block_sizes(version, block_size):
    x = _rand(3000, seed=10)
    _close_sum(ck.full_sum(x, version=version, block_size=block_size), x)


def test_full_sum_counters_tell_the_versions_apart():
    # 同一份输入（4096 个 1），第一级的计数器体现每个版本改了什么
    x = torch.ones(4096)
    reps = {}
    for v in ck.FULL_SUM_VERSIONS:
        total, r = ck.full_sum(x, version=v, block_size=128, max_blocks=8, return_report=True, mode="sim")
        assert total.item() == 4096.0           # 整数值的 float 求和是精确的
        reps[v] = r[0]
    assert reps[1].divergent_branches > 0 and reps[2].divergent_branches < reps[1].divergent_branches
    assert reps[2].bank_conflicts > 0 and reps[1].bank_conflicts == 0 and reps[3].bank_conflicts == 0
    assert reps[4].blocks_launched == reps[3].blocks_launched // 2
    assert reps[5].barriers < reps[4].barriers
    assert reps[7].blocks_launched == 8                    # min(4096 / 256, max_blocks)
    assert reps[8].blocks_launched == 4                    # 每块一轮 128 x 8 个元素
    assert reps[8].barriers == 4                           # 每块只有一次块级屏障
    assert reps[8].shared_load_bank_conflicts == 0
    for v in ck.FULL_SUM_VERSIONS:
        assert reps[v].global_load_bytes == 4096 * 4


def test_last_report_and_sim_override():
    x = torch.ones(3000)                                    # CPU 张量：两种模式下都能走模拟器
    total = ck.full_sum(x, version=4, block_size=64, mode="sim")
    assert total.item() == 3000.0
    reps = ck.last_report()
    assert [r.kernel for r in reps] == ["reduce4"] * 2      # 3000 -> 24 -> 1
    assert [r.blocks_launched for r in reps] == [b for _, b in ck.full_sum_plan(3000, 4, 64)] == [24, 1]
    y = ck.softmax(torch.zeros(2, 5), mode="sim")
    assert torch.allclose(y, torch.full((2, 5), 0.2))
    assert ck.last_report().kernel == ck._SOFTMAX_NAMES[ck.softmax_plan(2, 5)["kernel"]]   # 按选择表


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("fn", [ck.reduce_sum, ck.softmax])
def test_row_kernels_reject_bad_input(fn):
    with pytest.raises(ValueError, match="二维"):
        fn(torch.ones(3, device=rl.DEVICE))
    with pytest.raises(ValueError, match="空张量"):
        fn(torch.ones(0, 4, device=rl.DEVICE))
    with pytest.raises(ValueError, match="stride"):
        fn(torch.ones(4, 6, device=rl.DEVICE).t())
    with pytest.raises(TypeError, match="dtype"):
        fn(torch.ones(2, 3, dtype=torch.float64, device=rl.DEVICE))
    with pytest.raises(ValueError, match="dim"):
        fn(torch.ones(2, 3, device=rl.DEVICE), dim=0)
    with pytest.raises(ValueError, match="需要"):
        fn(torch.ones(2, 3, device=WRONG_DEVICE))
    with pytest.raises(ValueError, match="block_size"):
        fn(torch.ones(2, 3, device=rl.DEVICE), block_size=48)


def test_full_sum_rejects_bad_input():
    with pytest.raises(ValueError, match="一维"):
        ck.full_sum(torch.ones(2, 3, device=rl.DEVICE))
    with pytest.raises(ValueError, match="空张量"):
        ck.full_sum(torch.ones(0, device=rl.DEVICE))
    with pytest.raises(TypeError, match="dtype"):
        ck.full_sum(torch.ones(3, dtype=torch.int32, device=rl.DEVICE))
    with pytest.raises(ValueError, match="连续"):
        ck.full_sum(torch.ones(6, device=rl.DEVICE)[::2])
    with pytest.raises(ValueError, match="version"):
        ck.full_sum(torch.ones(3, device=rl.DEVICE), version=0)
    with pytest.raises(ValueError, match="block_size"):
        ck.full_sum(torch.ones(3, device=rl.DEVICE), block_size=32)   # 版本 5-7 要读 sdata[tid + 32]


def test_launcher_rejects_bad_arguments():
    x = torch.ones(8, device=rl.DEVICE)
    out = torch.empty(1, device=rl.DEVICE)
    d = {"BLOCK_SIZE": 64}
    with pytest.raises(TypeError, match="需要 3 个参数"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x, out), shared_bytes=256, defines=d)
    with pytest.raises(TypeError, match="指针"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x, 5, 8), shared_bytes=256, defines=d)
    with pytest.raises(TypeError, match="标量"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x, out, x), shared_bytes=256, defines=d)
    with pytest.raises(TypeError, match="dtype"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x.double(), out, 8), shared_bytes=256, defines=d)
    with pytest.raises(OverflowError, match="unsigned int"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x, out, -1), shared_bytes=256, defines=d)
    with pytest.raises(ValueError, match="reduce9"):
        ck.launch("full_sum.cu", "reduce9", 1, 64, (x, out, 8), defines=d)
    with pytest.raises(FileNotFoundError, match="nope.cu"):
        ck.launch("nope.cu", "reduce3", 1, 64, (x, out, 8))
    with pytest.raises(ValueError, match="1024"):
        ck.launch("full_sum.cu", "reduce3", 1, (64, 32), (x, out, 8), defines=d)
    with pytest.raises(TypeError, match="grid"):
        ck.launch("full_sum.cu", "reduce3", 1.5, 64, (x, out, 8), defines=d)
    with pytest.raises(ValueError, match="需要|模拟器"):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (x.to(WRONG_DEVICE) if WRONG_DEVICE == "cpu" else
                                                      torch.ones(8, device="meta"), out, 8), defines=d)


def test_scalar_arguments_get_their_declared_c_type():
    # CuPy 会把裸的 Python int 当成 64 位整数：这里按声明的类型转换
    assert launcher._convert_scalar(5, "int", "n", "k").dtype == np.int32
    assert launcher._convert_scalar(5, "unsigned int", "n", "k").dtype == np.uint32
    assert launcher._convert_scalar(5, "long long", "n", "k").dtype == np.int64
    assert launcher._convert_scalar(2.5, "float", "a", "k").dtype == np.float32
    assert launcher._convert_scalar(True, "bool", "b", "k").dtype == np.bool_
    with pytest.raises(OverflowError):
        launcher._convert_scalar(2**31, "int", "n", "k")
    with pytest.raises(TypeError, match="非整数"):
        launcher._convert_scalar(2.5, "int", "n", "k")
    sig = ck.kernel_signature("reduce_sum.cu", "reduce_sum_rows", {"BLOCK_SIZE": 256})
    assert [(n, launcher._base_type(t), p) for n, t, p in sig] == [
        ("x", "float", True), ("out", "float", True), ("row_stride", "long long", False), ("n_cols", "int", False)]


def test_gpu_launch_refused_in_sim_mode():
    if GPU:
        pytest.skip("只在 sim 模式下检查：gpu 模式下这个启动是合法的")
    with pytest.raises(rl.ModeError):
        ck.launch("full_sum.cu", "reduce3", 1, 64, (torch.ones(8), torch.empty(1), 8),
                  shared_bytes=256, defines={"BLOCK_SIZE": 64}, mode="gpu")


# ---------------------------------------------------------------- 教学内核（两种模式都走模拟器）

def test_tree_trace_steps():
    x = torch.arange(16, dtype=torch.float32)
    trace = torch.zeros(4, 16)
    ck.launch("tree_demo.cu", "tree_trace", 1, 16, (x, trace), shared_bytes=64, mode="sim")
    assert trace[:, 0].tolist() == [8.0, 24.0, 56.0, 120.0]            # 0+8, 8+16, 24+32, 56+64
    assert trace[0, :8].tolist() == [8.0, 10, 12, 14, 16, 18, 20, 22]
    assert trace[0, 8:].tolist() == list(range(8, 16))                  # 后一半不变


def test_barrier_inside_branch_is_reported():
    from reduction_lab import simt

    x = torch.ones(64)
    with pytest.raises(simt.BarrierDivergenceError, match="__syncthreads"):
        ck.launch("tree_demo.cu", "tree_bad_sync", 1, 64, (x, torch.empty(1)), shared_bytes=256, mode="sim")


def test_missing_barrier_is_a_race():
    from reduction_lab import simt

    with pytest.raises(simt.SharedMemoryRaceError):
        ck.launch("tree_demo.cu", "tree_no_sync", 1, 64, (torch.ones(64), torch.empty(1)), shared_bytes=256,
                  mode="sim")


@pytest.mark.parametrize("stride", [1, 2, 3, 4, 8, 16, 32, 33])
def test_shared_stride_conflicts_are_gcd(stride):
    out = torch.zeros(32)
    rep = ck.launch("bank_conflicts.cu", "shared_stride", 1, 32, (out, stride), mode="sim")
    assert out.tolist() == [float((t * stride) % (32 * 33)) for t in range(32)]
    assert rep.shared_load_requests == 1
    assert rep.shared_load_bank_conflicts == math.gcd(stride, 32) - 1
    assert rep.shared_store_bank_conflicts == 0


@pytest.mark.parametrize("kernel,conflicts_per_read", [("copy_tile", 0), ("transpose_conflict", 31),
                                                        ("transpose_padded", 0)])
def test_tile_kernels(kernel, conflicts_per_read):
    rows, cols = 40, 70                                  # 不是 32 的倍数：边缘分块只有一部分
    x = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    out = torch.zeros(rows * cols)
    grid = ((cols + 31) // 32, (rows + 31) // 32)
    rep = ck.launch("bank_conflicts.cu", kernel, grid, (32, 8), (x, out, rows, cols), mode="sim")
    want = x.t() if kernel.startswith("transpose") else x
    assert torch.equal(out.reshape(want.shape), want.contiguous())
    assert rep.shared_store_bank_conflicts == 0
    full = torch.ones(64, 64)
    rep = ck.launch("bank_conflicts.cu", kernel, (2, 2), (32, 8), (full, torch.zeros(64 * 64), 64, 64), mode="sim")
    assert rep.shared_load_requests == 4 * 32            # 4 个分块，每块 8 个 warp x 4 轮
    assert rep.shared_load_bank_conflicts == conflicts_per_read * rep.shared_load_requests


def test_shuffle_traces():
    x = torch.arange(32, dtype=torch.float32)
    down, xor = torch.zeros(5, 32), torch.zeros(5, 32)
    ck.launch("warp_shuffle.cu", "shfl_down_trace", 1, 32, (x, down), mode="sim")
    ck.launch("warp_shuffle.cu", "shfl_xor_trace", 1, 32, (x, xor), mode="sim")
    assert down[4, 0].item() == 496.0                     # 0 + 1 + ... + 31
    assert xor[4].tolist() == [496.0] * 32                # 蝶形：每个 lane 都得到总和
    assert down[0, :16].tolist() == [float(2 * i + 16) for i in range(16)]
    if GPU:   # 同一个内核在 GPU 上给出同样的结果
        xd, dd = x.to("cuda"), torch.zeros(5, 32, device="cuda")
        ck.launch("warp_shuffle.cu", "shfl_down_trace", 1, 32, (xd, dd))
        assert torch.equal(dd.cpu(), down)


# ---------------------------------------------------------------- 只在 GPU 上跑的大尺寸

@pytest.mark.skipif(not GPU, reason="大尺寸只在 gpu 模式下运行（模拟器上太慢）")
def test_gpu_large_shapes():
    x = _rand((70000, 2100), seed=11)             # 行数超过 gridDim.y 上限 65535：split 内核按行循环
    _close_sum(ck.reduce_sum(x, kernel="split"), x, dim=1)
    _close_sum(ck.reduce_sum(x, kernel="warp"), x, dim=1)
    x = _rand((16, 262144), seed=12)              # 长行切段 + atomicAdd
    _close_sum(ck.reduce_sum(x), x, dim=1)
    v = _rand(2**24 + 3, seed=13)
    for version in ck.FULL_SUM_VERSIONS:
        _close_sum(ck.full_sum(v, version=version), v)
    y = ck.softmax(_rand((64, 65536), seed=14))
    torch.testing.assert_close(y.double().sum(1), torch.ones(64, dtype=torch.float64, device="cuda"), atol=1e-4, rtol=0)


# ---------------------------------------------------------------- 同一个 .cu：CuPy 与模拟器的结果一致

@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="要在 GPU 上用 CuPy 运行同一个 .cu，才能与模拟器比较")
def test_same_cu_same_result_on_gpu_and_in_simulator():
    """同一份 .cu 源码：GPU 上经 CuPy 运行，与 CPU 上经模拟器运行（CPU 副本），结果相同。
    输入取小整数：每个部分和都是精确的，求和顺序不同也必须逐位相等。"""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(-3, 4, (6, 3000), generator=g).float()
    for kernel in ("tree", "warp", "split"):
        on_gpu = ck.reduce_sum(x.cuda(), kernel=kernel).cpu()
        in_sim = ck.reduce_sum(x, kernel=kernel, mode="sim")
        assert torch.equal(on_gpu, in_sim), kernel
    v = torch.randint(-3, 4, (50_000,), generator=g).float()
    for version in sorted(ck.FULL_SUM_VERSIONS):
        on_gpu = ck.full_sum(v.cuda(), version=version, block_size=128, max_blocks=16).cpu()
        in_sim = ck.full_sum(v, version=version, block_size=128, max_blocks=16, mode="sim")
        assert torch.equal(on_gpu.reshape(()), in_sim.reshape(())), version
    s = torch.randn(4, 777, generator=g) * 5
    torch.testing.assert_close(ck.softmax(s.cuda()).cpu(), ck.softmax(s, mode="sim"), atol=1e-6, rtol=1e-5)


def test_launch_sees_an_edited_source_file(tmp_path):
    """实验里学员改了 .cu 文件、在同一个进程（notebook）里再检查一次：启动器重新解析、重新编译，
    不沿用缓存里旧的内核或旧的形参表。"""
    import numpy as np

    from reduction_lab.cuda_kernels import launch

    src = tmp_path / "k.cu"
    body = 'extern "C" __global__ void k(float *out, int n) {{ int i = threadIdx.x; if (i < n) out[i] = {v}; }}\n'
    src.write_text(body.format(v="1.0f"))
    out = torch.zeros(32, device=rl.DEVICE)
    launch(src, "k", grid=1, block=32, args=(out, 32))
    assert out.cpu().tolist() == [1.0] * 32
    src.write_text(body.format(v="2.0f + 0.5f"))       # 内容与大小都变了
    launch(src, "k", grid=1, block=32, args=(out, 32))
    assert out.cpu().tolist() == [2.5] * 32
    # 形参表也跟着变：多了一个参数
    src.write_text('extern "C" __global__ void k(float *out, int n, float v) '
                   '{ int i = threadIdx.x; if (i < n) out[i] = v; }\n')
    launch(src, "k", grid=1, block=32, args=(out, 32, np.float32(4.0)))
    assert out.cpu().tolist() == [4.0] * 32


@pytest.mark.parametrize("dtype,n,kernel", [(torch.float32, 2048, "reduce_sum_rows_warp"),
                                            (torch.float32, 2049, "reduce_sum_rows_split"),
                                            (torch.bfloat16, 4096, "reduce_sum_rows_warp"),
                                            (torch.float16, 4097, "reduce_sum_rows_split")])
def test_reduce_sum_auto_picks_warp_kernel_by_row_bytes(dtype, n, kernel):
    """一行不超过 8 KiB 用 warp-per-row 内核（float32 2048 列、16 位 4096 列）：它直接写 x 的 dtype，一次启动；
    更长的行用 split（这里只有 3 行、切成几段：16 位时先在 float32 里累加，再转换）。两条路的和都与 float64 的精确和
    舍入后逐位相等。"""
    x = torch.randint(-3, 4, (3, n)).to(dtype)
    y, rep = ck.reduce_sum(x, return_report=True, mode="sim")
    assert rep.kernel == kernel
    assert torch.equal(y, x.double().sum(1).to(dtype))


@pytest.mark.parametrize("decl", ["__global__ void __cluster_dims__(2, 1, 1) pair_sum",
                                  "__global__ __cluster_dims__(2, 1, 1) void pair_sum",
                                  "__global__ void __launch_bounds__(64) __cluster_dims__(2, 1, 1) pair_sum"])
def test_launch_finds_cpp_kernels_with_cluster_dims(decl, tmp_path):
    """不带 extern "C" 的内核，__cluster_dims__ 写在 void 前或后（与 __launch_bounds__ 一起也行），launch 都认得出来，
    在模拟器里按编译期的簇形状运行：每块把自己的值经 map_shared_rank 加到 0 号块。"""
    src = tmp_path / "pair.cu"
    src.write_text("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                   f"{decl}(const float* x, float* out) {{\n"
                   "    __shared__ float v;\n    cg::cluster_group c = cg::this_cluster();\n"
                   "    if (threadIdx.x == 0) v = x[blockIdx.x];\n    c.sync();\n"
                   "    if (c.block_rank() == 0 && threadIdx.x == 0)\n"
                   "        out[blockIdx.x / 2] = v + *c.map_shared_rank(&v, 1);\n    c.sync();\n}\n",
                   encoding="utf-8")
    x = np.arange(1, 9, dtype=np.float32)
    out = np.zeros(4, np.float32)
    ck.launch(str(src), "pair_sum", grid=8, block=64, args=(x, out), mode="sim")
    np.testing.assert_array_equal(out, x.reshape(4, 2).sum(1))


def test_nvrtc_stdint_substitute_has_the_pointer_sized_integers():
    """NVRTC 没有 <stdint.h>：启动器换成同一行里的 typedef，其中要有 intptr_t / uintptr_t（学习者用
    (uintptr_t)p % 16 检查对齐）；模拟器的前言里也有。"""
    from pathlib import Path

    from reduction_lab import simt
    from reduction_lab.cuda_kernels.launcher import nvrtc_source

    src = nvrtc_source('#include <stdint.h>\nextern "C" __global__ void k(uintptr_t a) {}\n')
    assert "typedef unsigned long long uintptr_t;" in src and "typedef long long intptr_t;" in src
    assert src.count("\n") == 2                                # 行号不变
    text = (Path(simt.__file__).with_name("prelude") / "cuda_prelude.h").read_text(encoding="utf-8")
    assert "uintptr_t;" in text and "intptr_t;" in text
