"""cooperative groups 的网格屏障 grid.sync()（协作启动）：一次启动里先各块求部分和、grid.sync()、再由一个线程合并。
网格屏障让不同线程块对全局内存的读写有了先后：去掉它，全局内存的竞争检查报告读在写之前；只有一部分线程到达时
报告屏障发散；thread_rank、size、block_rank、num_blocks 与网格的编号一致；计数里有网格屏障。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt

SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define THREADS 64

__global__ void grid_sum(const float* x, float* partial, float* out, int n) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[THREADS];
    float acc = 0.0f;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
        acc += x[i];
    s[threadIdx.x] = acc;
    block.sync();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        block.sync();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
#ifndef NO_GRID_SYNC
    grid.sync();
#endif
    if (grid.thread_rank() == 0) {
        float t = 0.0f;
        for (unsigned b = 0; b < grid.num_blocks(); b++) t += partial[b];
        *out = t;
    }
}

__global__ void ranks(unsigned long long* r, unsigned long long* meta) {
    cg::grid_group grid = cg::this_grid();
    r[grid.thread_rank()] = grid.block_rank() * 1000 + threadIdx.x;
    if (grid.thread_rank() == 0) { meta[0] = grid.size(); meta[1] = grid.num_blocks(); meta[2] = grid.is_valid(); }
}

__global__ void half_grid(float* out) {
    cg::grid_group grid = cg::this_grid();
    if (blockIdx.x > 0) grid.sync();
    out[0] = 1.0f;
}
"""


def _inputs(n=1000, blocks=4):
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    return x, np.zeros(blocks, np.float32), np.zeros(1, np.float32)


def test_grid_sync_orders_the_blocks():
    x, partial, out = _inputs()
    rep = simt.launch(SRC, "grid_sum", 4, 64, [x, partial, out, np.int32(x.size)])
    assert abs(float(out[0]) - float(x.astype(np.float64).sum())) < 1e-3
    assert partial.sum() == pytest.approx(float(out[0]), abs=1e-5)
    assert rep.grid_barriers == 4                       # 每块经过一次
    assert "网格屏障 4" in str(rep)


def test_without_grid_sync_the_final_read_races_with_other_blocks():
    x, partial, out = _inputs()
    with pytest.raises(simt.GlobalMemoryRaceError, match="partial"):
        simt.launch(SRC, "grid_sum", 4, 64, [x, partial, out, np.int32(x.size)], defines={"NO_GRID_SYNC": 1})


def test_grid_ranks_and_sizes():
    r = np.zeros(3 * 32, np.uint64)
    meta = np.zeros(3, np.uint64)
    simt.launch(SRC, "ranks", 3, 32, [r, meta])
    assert r.tolist() == [b * 1000 + t for b in range(3) for t in range(32)]
    assert meta.tolist() == [96, 3, 1]


def test_grid_sync_reached_by_part_of_the_grid_is_barrier_divergence():
    with pytest.raises(simt.BarrierDivergenceError, match=r"grid\.sync\(\)"):
        simt.launch(SRC, "half_grid", 3, 32, [np.zeros(1, np.float32)])


BIG = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 每块 100 KiB 动态共享内存：sm_90 的一个 SM（228 KiB，每块另有 1 KiB 保留）只驻留得下 2 块，132 个 SM 共 264 块
__global__ void staged(float* out) {
    extern __shared__ float s[];
    cg::grid_group grid = cg::this_grid();
    s[threadIdx.x] = 1.0f;
    grid.sync();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}
"""


def test_a_cooperative_grid_must_fit_on_the_gpu_at_once():
    """grid.sync() 要协作启动：网格大于 sm_90 上同时驻留得下的块数（这里 264）时报 LaunchError，指出上限与原因；
    恰好 264 块照常运行。"""
    shared = 100 * 1024
    out = np.zeros(264 * 32, np.float32)
    rep = simt.launch(BIG, "staged", 264, 32, [out], shared_bytes=shared, max_dynamic_shared_bytes=shared)
    assert (out == 1).all() and rep.grid_barriers == 264
    with pytest.raises(simt.LaunchError, match=r"265 个线程块.*至多 264 个（每个 SM 2 个，受共享内存限制") as e:
        simt.launch(BIG, "staged", 265, 32, [np.zeros(265 * 32, np.float32)], shared_bytes=shared,
                    max_dynamic_shared_bytes=shared)
    assert e.value.line == 9                            # grid.sync() 那一行（源码第 1 行是空行）


def test_gpu_mode_launches_kernels_that_use_the_grid_group_cooperatively(tmp_path):
    """gpu 模式的启动器从源码（去掉注释）看内核用没用 this_grid()，用了就协作启动（不走 cuLaunchKernel 的快速路径）。"""
    from reduction_lab.cuda_kernels.launcher import uses_grid_sync

    a = tmp_path / "a.cu"
    a.write_text(BIG)
    b = tmp_path / "b.cu"
    b.write_text("// cg::this_grid() 只出现在注释里\n/* auto g = cg::this_grid(); */\n"
                 "__global__ void k(float* o) { o[threadIdx.x] = 0.0f; }\n")
    assert uses_grid_sync(str(a)) and not uses_grid_sync(str(b))
