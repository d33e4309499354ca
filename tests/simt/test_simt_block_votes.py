"""块级投票 __syncthreads_count / _and / _or、__activemask、__fmaf_rn（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import pytest
import torch

from reduction_lab import simt

SRC = r"""
__global__ void votes(const float* x, int* out) {
    int t = threadIdx.x;
    int c = __syncthreads_count(x[blockIdx.x * blockDim.x + t] > 0.0f);
    int a = __syncthreads_and(x[blockIdx.x * blockDim.x + t] > -100.0f);
    int o = __syncthreads_or(t == blockDim.x - 1 && blockIdx.x == 1);
    if (t == 0) { out[blockIdx.x * 3] = c; out[blockIdx.x * 3 + 1] = a; out[blockIdx.x * 3 + 2] = o; }
}
__global__ void active(int* out) {
    int t = threadIdx.x;
    if (t < 40) {
        unsigned m = __activemask();
        if (t % 32 == 0) out[t / 32] = (int)m;
    }
}
__global__ void vote_in_branch(int* out) {
    if (threadIdx.x < 16) out[0] = __syncthreads_count(1);
}
__global__ void fma_rn(float* f) { f[0] = __fmaf_rn(f[0], f[1], f[2]); }
"""


def test_block_votes_count_each_block():
    x = torch.randn(3 * 96, generator=torch.Generator().manual_seed(1))
    out = torch.zeros(9, dtype=torch.int32)
    rep = simt.launch(SRC, "votes", 3, 96, (x, out))
    want = [int((x[b * 96:(b + 1) * 96] > 0).sum()) for b in range(3)]
    assert out.view(3, 3)[:, 0].tolist() == want
    assert out.view(3, 3)[:, 1].tolist() == [1, 1, 1]
    assert out.view(3, 3)[:, 2].tolist() == [0, 1, 0]
    assert rep.barriers == 3 * 3                  # 每次投票也是一次 __syncthreads()


def test_activemask_is_the_lanes_that_got_here():
    out = torch.zeros(2, dtype=torch.int32)
    simt.launch(SRC, "active", 1, 64, (out,))
    assert [v & 0xFFFFFFFF for v in out.tolist()] == [0xFFFFFFFF, 0xFF]


def test_block_vote_in_a_branch_is_barrier_divergence():
    with pytest.raises(simt.BarrierDivergenceError):
        simt.launch(SRC, "vote_in_branch", 1, 64, (torch.zeros(1, dtype=torch.int32),))


def test_fmaf_rn_rounds_once():
    a, b = 1.0 + 2.0 ** -12, 1.0 - 2.0 ** -12
    f = torch.tensor([a, b, -1.0], dtype=torch.float32)
    simt.launch(SRC, "fma_rn", 1, 1, (f,))
    assert f[0].item() == pytest.approx(-(2.0 ** -24), rel=0)   # a*b - 1 舍入一次：不是 0
