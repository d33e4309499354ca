"""库里的归约原语（cuda_kernels/primitives.cu、primitives_cub.cu）：每种写法的和都对（整数逐位相等），
mask 规则的违反由模拟器报出；CUB 在 gpu 模式下经 CuPy 编译，在 sim 模式下由模拟器自带的同接口子集运行。
与模式无关：sim 与 gpu 两种模式下都能运行。页面：docs/cuda/library-primitives.md。"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab import simt
from reduction_lab.cuda_kernels import KERNEL_DIR, kernel_names, launch
from reduction_lab.cuda_kernels import primitives as P

ROOT = Path(__file__).resolve().parents[1]
SIM = rl.MODE == "sim"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="需要 PATH 上的 nvcc 编译 PTX")


# nvcc 的说法与 clang 的说法（模拟器的前端用 clang 解析时，信息来自 clang）
AMBIGUOUS = r"more than one instance of overloaded function|is ambiguous"


def _data(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.int32:
        x = torch.randint(-2**18, 2**18, shape, generator=g, dtype=torch.int32)   # 和不超出 int32
    else:
        x = torch.randn(shape, generator=g) * 3 + 1                                # 均值不为 0
    return x.to(rl.DEVICE)


def _expect_sum(got, x, dim):
    ref = x.double().sum(dim) if x.dtype == torch.float32 else x.long().sum(dim)
    got = got.cpu()
    if x.dtype == torch.int32:
        assert torch.equal(got.long(), ref.cpu()), (got, ref)
    else:
        n = x.shape[-1] if dim is not None else x.numel()
        assert torch.allclose(got.double(), ref.cpu(), rtol=1e-5, atol=1e-5 * n ** 0.5 * 4), (got, ref)


def _cub(name):
    return P.PRIMITIVES[name][0] == "primitives_cub.cu"


# ---------------------------------------------------------------- 每种写法的和

@pytest.mark.parametrize("name", list(P.PRIMITIVES))
@pytest.mark.parametrize("shape", [(1, 1), (3, 1000), (5, 31), (2, 4099)])
def test_row_sum(name, shape):
    dtype = P.PRIMITIVES[name][2]
    x = _data(shape, dtype, seed=shape[1])
    _expect_sum(P.row_sum(x, name), x, 1)


@pytest.mark.parametrize("name", list(P.PRIMITIVES))
@pytest.mark.parametrize("n,blocks", [(1, 4), (1000, 3), (20000, 7)])
def test_full_sum(name, n, blocks):
    x = _data((n,), P.PRIMITIVES[name][2], seed=n)
    got = P.full_sum(x, name, blocks=blocks)
    assert got.shape == ()
    _expect_sum(got.reshape(1), x.reshape(1, -1), 1)


@pytest.mark.parametrize("block_size", [32, 1024])
@pytest.mark.parametrize("name", ["shfl", "cg", "redux", "cub_block", "cub_raking"])
def test_block_sizes(name, block_size):
    x = _data((3, 2500), P.PRIMITIVES[name][2], seed=block_size)
    _expect_sum(P.row_sum(x, name, block_size=block_size), x, 1)


def test_full_sum_plan():
    assert P.full_sum_plan(2**28, 1056) == [(256000, 1049), (1049, 1)]
    assert P.full_sum_plan(1000, 1056) == [(2048, 1)]
    seg, blocks = P.full_sum_plan(10**6 + 1, 13, 64)[0]
    assert seg % (64 * P.UNROLL) == 0 and blocks <= 13 and seg * blocks >= 10**6 + 1


# ---------------------------------------------------------------- CUB 与 CCCL

@pytest.mark.parametrize("name", [n for n in P.PRIMITIVES if _cub(n)])
def test_cub_runs_in_the_simulator(name):
    """模拟器的 CUB 子集：四种写法在 sim 模式下（GPU 机器上也强制用模拟器）逐位给出小整数的和。"""
    x = torch.randint(-50, 50, (3, 777), generator=torch.Generator().manual_seed(5)).float()
    assert torch.equal(P.row_sum(x, name, mode="sim"), x.sum(1))


def test_cub_temp_storage_bytes_needs_the_gpu_in_sim_mode():
    if not SIM:
        pytest.skip("gpu 模式下这个函数在 GPU 上读出 CUB 的大小（见 test_cub_temp_storage_bytes）")
    from reduction_lab import runtime
    with pytest.raises(runtime.ModeError, match="TempStorage"):
        P.cub_temp_storage_bytes(256)


def test_cccl_include_dirs():
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ModuleNotFoundError, match="没有安装 cupy"):
            P.cccl_include_dirs()
        return
    dirs = [Path(d) for d in P.cccl_include_dirs()]
    assert (dirs[0] / "cub" / "block" / "block_reduce.cuh").is_file()
    assert (dirs[0] / "cub" / "warp" / "warp_reduce.cuh").is_file()
    assert (dirs[2] / "cuda" / "std" / "type_traits").is_file()
    assert (dirs[2] / "cuda" / "atomic").is_file()


def test_sources_including_cccl_headers_get_its_include_dirs():
    """gpu 模式下 NVRTC 编译学习者的 .cu：包含 <cuda/atomic>、<cub/...> 时加上 CuPy 自带的 CCCL 头文件目录。"""
    from reduction_lab.cuda_kernels.launcher import _cccl_options

    assert _cccl_options('#include <cuda_fp16.h>\n#include "cuda/atomic"\n// #include <cuda/atomic>\n') == ()
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ModuleNotFoundError, match="没有安装 cupy"):
            _cccl_options("#include <cuda/atomic>\n")
        return
    opts = _cccl_options("  #include <cuda/atomic>\n")
    assert opts[0] == "--std=c++17" and opts[-3:] == tuple(f"-I{d}" for d in P.cccl_include_dirs())


@pytest.mark.skipif(SIM, reason="需要 GPU：CUB 只能在 GPU 上运行")
def test_cub_temp_storage_bytes():
    b = P.cub_temp_storage_bytes(256)
    assert set(b) == {"WarpReduce", "BLOCK_REDUCE_WARP_REDUCTIONS", "BLOCK_REDUCE_RAKING",
                      "BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY"}
    assert all(v > 0 for v in b.values())


# ---------------------------------------------------------------- mask 规则（一律在模拟器里检查）

HALF_LINE = "v += __shfl_down_sync(mask, v, offset, width);"


def _line_of(source, text):
    lines = (KERNEL_DIR / source).read_text(encoding="utf-8").splitlines()
    return next(i + 1 for i, s in enumerate(lines) if text in s)


def _half(mask, width):
    x = torch.arange(32, dtype=torch.float32)
    out = torch.zeros(32)
    launch("primitives.cu", "half_warp_sum", grid=1, block=32, args=(x, out, mask, width), mode="sim")
    return out


def test_half_warp_with_its_own_mask_and_width_16():
    out = _half(0x0000FFFF, 16).tolist()
    v = list(range(32))
    for offset in (8, 4, 2, 1):            # 只有 lane 0..15 执行；源 lane 越过本段（16 个）时取回自己的值
        v = [v[i] + (v[i + offset] if i + offset < 16 else v[i]) if i < 16 else v[i] for i in range(32)]
    assert out == v and out[0] == sum(range(16))


def test_mask_naming_lanes_that_skip_the_shuffle():
    with pytest.raises(simt.WarpSyncError, match="0xffffffff") as ei:
        _half(0xFFFFFFFF, 32)
    assert ei.value.line == _line_of("primitives.cu", HALF_LINE)


def test_source_lane_outside_the_mask():
    with pytest.raises(simt.WarpSyncError, match="source lane 16 of lane 8") as ei:
        _half(0x0000FFFF, 32)
    assert ei.value.line == _line_of("primitives.cu", HALF_LINE) and ei.value.thread == "(8,0,0)"


def test_warp_redux_demo_is_exact():
    x = torch.randint(-2**20, 2**20, (96,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    out = torch.zeros(9, dtype=torch.int32, device=rl.DEVICE)
    launch("primitives.cu", "warp_redux_demo", grid=1, block=96, args=(x.to(rl.DEVICE), out))
    w = x.long().reshape(3, 32)
    assert out.cpu().reshape(3, 3).tolist() == torch.stack([w.sum(1), w.min(1).values, w.max(1).values], 1).tolist()


def test_reduce_add_sync_on_float_is_a_compile_error():
    src = "__global__ void k(float *x) { x[0] = __reduce_add_sync(0xffffffff, x[threadIdx.x]); }"
    with pytest.raises(simt.CompileError, match=AMBIGUOUS):
        simt.launch(src, "k", 1, 32, (np.zeros(32, np.float32),))


# ---------------------------------------------------------------- PTX：库函数编译出来的指令

@needs_nvcc
def test_ptx_of_each_primitive():
    for name, (source, kernel, dtype, _) in P.PRIMITIVES.items():
        c = P.ptx_counts(source, kernel)
        assert c["bar.sync"] == 1, (name, c)              # 块内只有一次屏障
        if name == "redux":
            assert c["redux.sync"] == 1 and c["shfl.sync"] == 0, c
        else:
            assert c["shfl.sync"] == 5 and c["redux.sync"] == 0, (name, c)   # 32 -> 1：5 步
    with pytest.raises(ValueError, match="没有内核"):
        P.ptx_counts("primitives.cu", "no_such_kernel")


# ---------------------------------------------------------------- 文件头与登记表一致

@pytest.mark.parametrize("source", ["primitives.cu", "primitives_cub.cu"])
def test_header_lists_every_kernel(source):
    text = (KERNEL_DIR / source).read_text(encoding="utf-8")
    header = re.findall(r"^//\s{3}(\w+)\s", text, re.M)
    assert header == kernel_names(source)
    assert {k for s, k, _, _ in P.PRIMITIVES.values() if s == source} <= set(kernel_names(source))


# ---------------------------------------------------------------- 错误输入

def test_bad_input():
    x = _data((3, 40), torch.float32, 0)
    with pytest.raises(ValueError, match="没有名为 'nope' 的原语"):
        P.row_sum(x, "nope")
    with pytest.raises(TypeError, match="int32"):
        P.row_sum(x, "redux")
    with pytest.raises(ValueError, match="连续"):
        P.row_sum(x[:, ::2], "shfl")
    with pytest.raises(ValueError, match="seg 必须是正整数"):
        P.segment_sum(x.reshape(-1), 0)
    with pytest.raises(ValueError, match="blocks 必须是正整数"):
        P.full_sum(x.reshape(-1), blocks=0)
    with pytest.raises(ValueError, match="block_size"):
        P.row_sum(x, "shfl", block_size=48)


# ---------------------------------------------------------------- H200 上的实测数据

def test_h200_results_are_consistent():
    """在 H200 上运行 scripts/gpu_primitives.py 之前，这个测试失败并说明怎样生成数据。"""
    doc = P.load_h200_results()
    assert doc["method"] and doc["cases"] and "H200" in doc["device"]
    for case in doc["cases"]:
        names = [r["name"] for r in case["results"]]
        assert names == list(P.PRIMITIVES) + ["torch.sum", "cupy.sum"], names
        for r in case["results"]:
            assert r["gbps"] == pytest.approx(r["bytes"] / r["ms"] / 1e6, rel=1e-3), r
            assert r["pct_of_copy"] == pytest.approx(100 * r["gbps"] / case["copy_gbps"], abs=0.1), r
            assert r["p20_ms"] <= r["ms"] <= r["p80_ms"], r
    md = (ROOT / "docs" / "data" / "h200_primitives.md").read_text(encoding="utf-8")
    assert md == P.results_table(doc)
