"""模拟器自带的 CUB 子集（simt/prelude/cub/reduce.cuh）：WarpReduce 与 BlockReduce 三种算法的和与最大值，
部分有效的线程、每个线程几个值；用错 CUB 的地方报在用户调用它的那一行；源码与 nvcc 13 + CCCL 一致。"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from reduction_lab import simt

_NVCC = shutil.which("nvcc")

SRC = r"""
#include <cub/cub.cuh>
#include <cuda/functional>

template <int BLOCK, cub::BlockReduceAlgorithm ALG>
__global__ void block_ops(const float* x, float* out, int num_valid) {
    using BR = cub::BlockReduce<float, BLOCK, ALG>;
    __shared__ typename BR::TempStorage temp;
    float v = x[blockIdx.x * BLOCK + threadIdx.x];
    float s = BR(temp).Sum(v);
    __syncthreads();                                   // 重用 TempStorage 之前
    float m = BR(temp).Reduce(v, cuda::maximum<>());
    __syncthreads();
    float p = BR(temp).Sum(v, num_valid);
    __syncthreads();
    float items[3] = {v, 2.0f * v, -v};
    float q = BR(temp).Sum(items);
    if (threadIdx.x == 0) {
        out[4 * blockIdx.x] = s;
        out[4 * blockIdx.x + 1] = m;
        out[4 * blockIdx.x + 2] = p;
        out[4 * blockIdx.x + 3] = q;
    }
}
template __global__ void block_ops<32, cub::BLOCK_REDUCE_WARP_REDUCTIONS>(const float*, float*, int);
template __global__ void block_ops<48, cub::BLOCK_REDUCE_WARP_REDUCTIONS>(const float*, float*, int);
template __global__ void block_ops<256, cub::BLOCK_REDUCE_WARP_REDUCTIONS>(const float*, float*, int);
template __global__ void block_ops<48, cub::BLOCK_REDUCE_RAKING>(const float*, float*, int);
template __global__ void block_ops<256, cub::BLOCK_REDUCE_RAKING>(const float*, float*, int);
template __global__ void block_ops<256, cub::BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY>(const float*, float*, int);

template <int W>
__global__ void warp_ops(const float* x, float* out) {
    using WR = cub::WarpReduce<float, W>;
    __shared__ typename WR::TempStorage temp[32 / W];
    int g = threadIdx.x / W;
    float v = x[threadIdx.x];
    float s = WR(temp[g]).Sum(v);
    float m = WR(temp[g]).Reduce(v, cuda::minimum<>());
    float p = WR(temp[g]).Sum(v, 5);
    if (threadIdx.x % W == 0) {
        out[3 * g] = s;
        out[3 * g + 1] = m;
        out[3 * g + 2] = p;
    }
}
template __global__ void warp_ops<32>(const float*, float*);
template __global__ void warp_ops<16>(const float*, float*);

__global__ void in_a_branch(const float* x, float* out) {
    using BR = cub::BlockReduce<float, 128>;
    __shared__ BR::TempStorage temp;
    if (threadIdx.x < 64) {
        float s = BR(temp).Sum(x[threadIdx.x]);
        if (threadIdx.x == 0) out[0] = s;
    }
}

__global__ void reused(const float* x, float* out) {
    using BR = cub::BlockReduce<float, 128>;
    __shared__ BR::TempStorage temp;
    float v = x[threadIdx.x];
    float s = BR(temp).Sum(v);
    float m = BR(temp).Reduce(v, cuda::maximum<>());
    if (threadIdx.x == 0) { out[0] = s; out[1] = m; }
}
"""


def _line(text, after=""):
    """SRC 里（``after`` 那一行之后）第一处含 text 的行号。"""
    lines = SRC.splitlines()
    start = next(i for i, ln in enumerate(lines) if after in ln)
    return next(i for i, ln in enumerate(lines[start:], start + 1) if text in ln)


@pytest.mark.parametrize("block,alg", [(32, "WARP_REDUCTIONS"), (48, "WARP_REDUCTIONS"), (256, "WARP_REDUCTIONS"),
                                       (48, "RAKING"), (256, "RAKING"), (256, "RAKING_COMMUTATIVE_ONLY")])
def test_block_reduce(block, alg):
    rng = np.random.default_rng(block)
    x = rng.integers(-50, 50, 2 * block).astype(np.float32)
    out = np.zeros(8, np.float32)
    valid = block // 3
    simt.launch(SRC, f"block_ops<{block},cub::BLOCK_REDUCE_{alg}>", 2, block, (x, out, np.int32(valid)))
    rows = x.reshape(2, block)
    want = np.stack([rows.sum(1), rows.max(1), rows[:, :valid].sum(1), 2 * rows.sum(1)], 1).reshape(-1)
    assert out.tolist() == want.tolist()                  # 小整数：float32 的和逐位精确


@pytest.mark.parametrize("width", [32, 16])
def test_warp_reduce_per_logical_warp(width):
    x = np.random.default_rng(width).integers(-50, 50, 32).astype(np.float32)
    out = np.zeros(6, np.float32)
    simt.launch(SRC, f"warp_ops<{width}>", 1, 32, (x, out))
    g = x.reshape(-1, width)
    want = np.stack([g.sum(1), g.min(1), g[:, :5].sum(1)], 1).reshape(-1)
    assert out[:want.size].tolist() == want.tolist()


def test_block_reduce_in_a_branch_is_reported_at_the_call():
    with pytest.raises(simt.BarrierDivergenceError) as ei:
        simt.launch(SRC, "in_a_branch", 1, 128, (np.ones(128, np.float32), np.zeros(1, np.float32)))
    assert ei.value.line == _line("float s = BR(temp).Sum(x[threadIdx.x]);")
    assert "<cub/reduce.cuh>" in str(ei.value)


def test_reusing_temp_storage_without_a_barrier_is_a_race():
    with pytest.raises(simt.SharedMemoryRaceError) as ei:
        simt.launch(SRC, "reused", 1, 128, (np.ones(128, np.float32), np.zeros(2, np.float32)))
    assert ei.value.line == _line("float m = BR(temp).Reduce(v, cuda::maximum<>());", after="void reused(")


def test_operators_removed_from_cccl_3_are_not_in_the_subset():
    src = SRC.replace("cuda::maximum<>()", "cub::Max()", 1)
    with pytest.raises(simt.SimtError, match="Max"):
        simt.launch(src, "block_ops<32,cub::BLOCK_REDUCE_WARP_REDUCTIONS>", 1, 32,
                    (np.ones(32, np.float32), np.zeros(4, np.float32), np.int32(32)))


@pytest.mark.skipif(_NVCC is None, reason="nvcc 不在 PATH 上，无法用真正的 CUB 核对这份源码")
def test_the_source_compiles_against_real_cub(tmp_path):
    f = tmp_path / "cub_test.cu"
    f.write_text(SRC, encoding="utf-8")
    r = subprocess.run([_NVCC, "-ptx", "-arch=sm_90", "-std=c++17", str(f), "-o", str(tmp_path / "cub_test.ptx")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    g = tmp_path / "cub_max.cu"
    g.write_text(SRC.replace("cuda::maximum<>()", "cub::Max()", 1), encoding="utf-8")
    r = subprocess.run([_NVCC, "-ptx", "-arch=sm_90", "-std=c++17", str(g), "-o", str(tmp_path / "x.ptx")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "Max" in r.stderr
