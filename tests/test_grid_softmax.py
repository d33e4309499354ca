"""常驻网格的长行 softmax（cuda_kernels/softmax_cluster.cu 的 softmax_grid_pipe 与 cuda_kernels/grid.py）。

* 任何模式：配置（``grid_plan``）与参数检查、nvcc 编译出的寄存器用量与 PTX 里的指令；
* sim 模式：明确报错（模拟器不执行内联 PTX）；
* gpu 模式（计算能力 9.0 以上）：与 float64 的 ``torch.softmax`` 比对——三种 dtype、每一种 (ahead, delay)、
  一块处理很多段（网格远小于总段数）、最后一段不满、网格恰好等于一行的段数、行距大于 N、极端值、调用者给的输出；
  不对齐的行、段数多于网格、网格超过同时驻留的上限都报错；默认 backend 在 16 位 N = 2^20 上走这个内核。
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

import reduction_lab as rl
from reduction_lab import auto, runtime
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import KERNEL_DIR
from reduction_lab.cuda_kernels.grid import MAX_RING, MAX_THREAD_ELEMS, grid_plan, softmax_grid_pipe

GPU = rl.MODE == "gpu"
HOPPER = GPU and torch.cuda.get_device_capability()[0] >= 9
NVCC = shutil.which("nvcc")
needs_hopper = pytest.mark.skipif(not HOPPER, reason="需要 gpu 模式与计算能力 9.0 以上的 GPU")
needs_sim = pytest.mark.skipif(GPU, reason="只在 sim 模式下检查报错；gpu 模式下内核真实运行")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc 不在 PATH 上，无法检查 .cu 的编译结果")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# ---------------------------------------------------------------- 配置

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [8, 1000, 4096, 100008, 262144, 1 << 20])
def test_plan_covers_the_row_with_equal_segments(n, dtype):
    vec = 16 // dtype.itemsize
    p = grid_plan(n, dtype)
    row_vecs = n // vec
    assert p.seg_vecs * p.n_segs >= row_vecs > p.seg_vecs * (p.n_segs - 1)   # 段数最少，最后一段不空
    assert p.seg_vecs <= p.block_size * p.packs and p.packs * vec <= MAX_THREAD_ELEMS
    tmax = p.block_size * 4 if dtype == torch.float32 else 0          # float32：每段每线程的最大值
    assert p.shared_bytes == (p.ahead + p.delay + 1) * (p.seg_vecs * 16 + tmax)


def test_plan_defaults_and_the_table_entry():
    p = grid_plan(1 << 20, torch.float32)
    assert (p.block_size, p.packs, p.ahead, p.delay, p.seg_vecs, p.n_segs) == (512, 8, 1, 1, 4096, 64)          # 每段 64 KiB
    assert grid_plan(1 << 20, torch.bfloat16, 512, 8, 1, 1).n_segs == 32
    # 16 位的 2^20 放得进 16 块的簇（寄存器 + 共享内存），grid 从比它更长的行开始
    assert ck.softmax_plan(64, 1 << 20, torch.bfloat16, clusters=True)["kernel"] == "cluster"
    plan = ck.softmax_plan(64, 1 << 20, torch.bfloat16, "grid", clusters=True)
    assert plan["kernel"] == "grid" and (plan["ahead"], plan["delay"]) == ck.GRID_AHEAD_DELAY
    assert plan["chunks"] == 32 and plan["grid"] <= ck.NOMINAL_SM_COUNT


def test_plan_bad_arguments():
    with pytest.raises(ValueError, match="16 的倍数"):
        grid_plan(1001, torch.float32)                     # 每行 4004 字节
    with pytest.raises(ValueError, match="寄存器"):
        grid_plan(4096, torch.bfloat16, 256, 16)           # 每个线程 128 个元素
    with pytest.raises(ValueError, match="共享内存"):
        grid_plan(1 << 20, torch.float32, 1024, 16, 3, 3)  # 7 段 x 256 KiB
    with pytest.raises(ValueError, match="ahead"):
        grid_plan(4096, torch.float32, ahead=0)
    with pytest.raises(ValueError, match="delay"):
        grid_plan(4096, torch.float32, ahead=2, delay=MAX_RING - 2)
    with pytest.raises(ValueError, match="32 的倍数"):
        grid_plan(4096, torch.float32, block_size=100)
    with pytest.raises(TypeError, match="float64"):
        grid_plan(4096, torch.float64)


def test_explicit_grid_too_many_segments_is_refused():
    with pytest.raises(ValueError, match="段多于 SM 数"):
        ck.softmax_plan(4, 1 << 20, torch.float32, "grid", 32, 1, clusters=True)    # 8192 段


@needs_sim
def test_sim_mode_refuses_clearly():
    with pytest.raises(runtime.ModeError, match="softmax_grid_pipe"):
        softmax_grid_pipe(torch.randn(2, 4096))
    with pytest.raises(runtime.ModeError, match="grid"):
        ck.softmax(torch.randn(2, 4096), kernel="grid")
    assert ck.softmax_plan(2, 1 << 20, torch.float32)["kernel"] == "split"       # auto：sim 模式下不常驻


# ---------------------------------------------------------------- nvcc

def _nvcc(args, defines, tmp_path, suffix):
    out = tmp_path / f"g{suffix}"
    cmd = [NVCC, *args, "-arch=sm_90", *[f"-D{k}={v}" for k, v in defines.items()],
           str(KERNEL_DIR / "softmax_cluster.cu"), "-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300), out


@needs_nvcc
@pytest.mark.parametrize("block,packs,bf16", [(512, 8, 0), (512, 8, 1), (256, 16, 0), (1024, 4, 1)])
def test_compiles_without_spills_and_fits_the_block(block, packs, bf16, tmp_path):
    d = {"CLUSTER_SIZE": 1, "USE_BF16": bf16, "BLOCK_SIZE": block, "PACKS": packs, "AHEAD": 1, "DELAY": 1}
    r, _ = _nvcc(["-cubin", "--resource-usage"], d, tmp_path, ".cubin")
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    part = text.split("Function properties for softmax_grid_pipe", 1)[1].split("Function properties for", 1)[0]
    regs = int(re.search(r"Used (\d+) registers", part).group(1))
    assert regs * block <= 65536
    assert not re.search(r"[1-9]\d* bytes spill", part), part


@needs_nvcc
def test_ptx_has_the_async_copies_and_no_fence(tmp_path):
    """段经 cp.async 进共享内存；(m, s) 是一次 64 位的 relaxed 写，没有 membar（__threadfence）。"""
    r, out = _nvcc(["-ptx"], {"CLUSTER_SIZE": 1, "BLOCK_SIZE": 512, "PACKS": 8}, tmp_path, ".ptx")
    assert r.returncode == 0, r.stderr
    ptx = out.read_text().split(".entry softmax_grid_pipe", 1)[1].split(".entry", 1)[0]
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    assert "st.relaxed.gpu.global.b64" in ptx and "ld.relaxed.gpu.global.b64" in ptx
    assert "membar" not in ptx and "fence" not in ptx and "atom" not in ptx


def test_ring_limit_is_checked_by_the_source(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc 不在 PATH 上，无法检查 #error")
    r, _ = _nvcc(["-ptx"], {"CLUSTER_SIZE": 1, "AHEAD": 4, "DELAY": 4}, tmp_path, ".ptx")
    assert r.returncode != 0 and "AHEAD" in r.stderr


# ---------------------------------------------------------------- gpu：与 float64 比对

def _x(shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, generator=g, device="cuda") * 3
    x += torch.linspace(-50, 50, shape[0], device="cuda").unsqueeze(1)
    return x.to(dtype)


def _check(y, x, what):
    ref = torch.softmax(x.double(), -1)
    rel = 1e-5 if x.dtype == torch.float32 else 1.01 * 2.0**-8 + 1e-5
    tiny = torch.finfo(x.dtype).smallest_normal                  # 输出 dtype 的次正规数：绝对误差至多这么大
    err = ((y.double() - ref).abs() / (rel * ref.abs() + tiny)).max().item()
    assert err <= 1, (what, err)


@needs_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_default_on_long_rows(dtype):
    x = _x((5, 1 << 20), dtype)
    _check(softmax_grid_pipe(x), x, "2^20")
    _check(ck.softmax(x, kernel="grid"), x, "kernel=grid")


@needs_hopper
@pytest.mark.parametrize("ahead,delay", [(1, 0), (1, 1), (2, 2), (3, 0), (1, 4)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_segments_per_block(dtype, ahead, delay):
    """每段 32 个向量、一行 40 多段、最后一段不满；50 行、网格只有 64 块：每块处理三十多段，环转很多圈。"""
    vec = 16 // dtype.itemsize
    n = 32 * vec * 41 + 5 * vec
    x = _x((50, n), dtype, seed=ahead * 10 + delay)
    y = softmax_grid_pipe(x, block_size=32, packs=1, ahead=ahead, delay=delay, blocks=64)
    _check(y, x, (ahead, delay))


@needs_hopper
def test_grid_equal_to_segments_and_row_stride():
    base = _x((7, 4096 + 64), torch.float32, seed=3)
    x = base[:, :4096]                                      # 行距 4160 个元素（16 字节的倍数）
    p = grid_plan(4096, torch.float32, 32, 2)
    y = softmax_grid_pipe(x, block_size=32, packs=2, blocks=p.n_segs)
    _check(y, x, "blocks = n_segs")


@needs_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_extreme_rows(dtype):
    big = -6.0e4 if dtype == torch.float16 else -1.0e30
    n = 8192
    x = _x((4, n), torch.float32, seed=5).cpu()
    x[0] = big
    x[0, 7] = big + (16 if dtype == torch.float16 else 1e24)
    x[1, :5000] = float("-inf")                             # 前几段全是 -inf
    x[2, -1] = 100.0
    x[3] = float("-inf")                                    # 整行 -inf：与 torch 一样是 nan
    x = torch.cat([x, torch.full((1, n), torch.finfo(dtype).min)]).to(dtype).cuda()   # 整行填成最小的有限数
    y = softmax_grid_pipe(x, block_size=64, packs=2, blocks=32)
    _check(y[:3], x[:3], "极端值")
    assert bool((y[1, :5000] == 0).all())
    assert bool(torch.isnan(y[3]).all())
    _check(y[4:], x[4:], "整行 finfo.min：均匀的 1/N")


@needs_hopper
def test_out_and_errors():
    x = _x((3, 4096), torch.bfloat16)
    out = torch.full_like(x, float("nan"))
    assert softmax_grid_pipe(x, out=out).data_ptr() == out.data_ptr()
    _check(out, x, "out")
    with pytest.raises(ValueError, match="16 字节边界"):
        softmax_grid_pipe(_x((3, 4104), torch.bfloat16)[:, 4:4100])
    with pytest.raises(ValueError, match="段多于网格"):
        softmax_grid_pipe(x, block_size=32, packs=1, blocks=8)        # 一行 16 段
    with pytest.raises(ValueError, match="同时驻留"):
        softmax_grid_pipe(x, blocks=10**6)
    with pytest.raises(ValueError, match="重叠|overlap"):
        softmax_grid_pipe(x, out=x)


@needs_hopper
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_default_backend_on_rows_no_cluster_holds(dtype):
    """一个簇放不下的行（float32 2^20，16 位 2^21）：默认 backend 与 backend="cuda" 都走常驻网格（float32 的 2^20
    原来归 Triton，H100 上的完整运行里常驻网格快两个百分点之后改选 CUDA C，见 reduction_lab.auto）。"""
    n = 1 << 20 if dtype == torch.float32 else 1 << 21
    x = _x((3, n), dtype)
    assert ck.softmax_plan(3, n, dtype, clusters=True)["kernel"] == "grid"
    assert auto.resolve("softmax", x) == "cuda"
    _check(rl.softmax(x), x, "rl.softmax")
    _check(rl.softmax(x, backend="cuda"), x, "backend=cuda")
    _check(rl.softmax(x, backend="cuda"), x, "backend=cuda 第二次（缓存的启动计划）")
