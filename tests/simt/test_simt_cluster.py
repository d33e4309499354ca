"""线程块簇：__cluster_dims__、cluster_group、分布式共享内存（DSMEM）的计数、簇内竞争与“访问已退出的块”的检查
（文档：docs/cuda/simulator.md；课程内核：cuda_kernels/cluster_demo.cu）。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.cuda_kernels import KERNEL_DIR, launch

DEMO = KERNEL_DIR / "cluster_demo.cu"
DEMO_TEXT = DEMO.read_text(encoding="utf-8")


def line_of(text, needle, start=0):
    """text 里从第 start 个字符起第一次出现 needle 的行号（从 1 数起）。"""
    i = text.index(needle, start)
    return text.count("\n", 0, i) + 1


def demo_line(kernel, needle):
    return line_of(DEMO_TEXT, needle, DEMO_TEXT.index(f"void {kernel}(const float *__restrict__ x, float *__restrict__ out, int n)\n"))


def row_sum(kernel, m, n, c=4, block=128, seed=0, **kw):
    x = np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)
    out = np.zeros(m, np.float32)
    defines = {"CLUSTER_SIZE": c, "BLOCK": block} if (c, block) != (4, 128) else None
    rep = simt.launch(DEMO, kernel, m * c, block, (x, out, n), defines=defines, **kw)
    return x, out, rep


# ---------------------------------------------------------------- 正确的内核：结果与计数

@pytest.mark.parametrize("m, n, c, block", [(3, 1001, 4, 128), (1, 7, 4, 32), (5, 333, 2, 64), (2, 4099, 8, 128)])
def test_cluster_row_sum_matches_float64(m, n, c, block):
    x, out, rep = row_sum("cluster_row_sum", m, n, c, block)
    ref = x.astype(np.float64).sum(1)
    bound = n * 2.0**-24 * np.abs(x.astype(np.float64)).sum(1)
    assert np.all(np.abs(out - ref) <= bound), (out, ref)
    # 计数：0 号块的一个线程读 C - 1 个别的块的部分和（每行），没有 DSMEM 写；两次 cluster.sync() 每块各计一次
    assert rep.cluster == (c, 1, 1)
    assert rep.dsmem_load_elements == m * (c - 1) and rep.dsmem_load_bytes == 4 * m * (c - 1)
    assert rep.dsmem_load_requests == m * (c - 1)
    assert rep.dsmem_store_elements == rep.dsmem_store_bytes == rep.dsmem_store_requests == 0
    assert rep.cluster_barriers == 2 * m * c
    assert "线程块簇" in str(rep) and f"分布式共享内存读：{m * (c - 1)} 个元素" in str(rep)


def test_the_launcher_runs_the_demo_in_sim_mode():
    x = np.random.default_rng(1).standard_normal((4, 300)).astype(np.float32)
    out = np.zeros(4, np.float32)
    rep = launch(DEMO, "cluster_row_sum", grid=16, block=128, args=(x, out, 300), mode="sim")
    assert np.allclose(out, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    assert rep.dsmem_load_elements == 4 * 3


def test_reports_without_a_cluster_print_no_cluster_rows():
    src = "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }"
    rep = simt.launch(src, "k", 1, 32, (np.zeros(32, np.float32),))
    assert rep.cluster == (1, 1, 1) and rep.cluster_barriers == 0 and "线程块簇" not in str(rep)


# ---------------------------------------------------------------- 故意留下的错误

def test_missing_final_cluster_sync_is_an_access_to_an_exited_block():
    with pytest.raises(simt.DsmemExitedBlockError) as e:
        row_sum("cluster_row_sum_no_final_sync", 2, 500)
    ln = demo_line("cluster_row_sum_no_final_sync", "map_shared_rank")
    assert e.value.line == ln and f"第 {ln} 行" in str(e.value) and f"line {ln}" in str(e.value)
    assert e.value.target_rank == 1 and e.value.target_block == "(1,0,0)" and e.value.array == "sdata"
    assert "cluster.sync()" in str(e.value) and "may already have exited" in str(e.value)


def test_missing_first_cluster_sync_is_a_race_across_blocks():
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        row_sum("cluster_row_sum_no_first_sync", 2, 500)
    ln = demo_line("cluster_row_sum_no_first_sync", "map_shared_rank")
    writer = line_of(DEMO_TEXT, "sdata[tid] += sdata[tid + s]")
    msg = str(e.value)
    assert e.value.line == ln and f"第 {ln} 行" in msg and f"于第 {writer} 行写过" in msg
    assert "簇内跨线程块" in msg and "(RAW)" in msg and "of block (1,0,0) (cluster rank 1)" in msg


# ---------------------------------------------------------------- 启动配置

CLUSTER_IDS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2, 2) ids(unsigned* out) {
    auto cluster = cg::this_cluster();
    unsigned g = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
    dim3 d = cluster.dim_blocks();
    dim3 bi = cluster.block_index();
    out[8 * g + 0] = cluster.block_rank();
    out[8 * g + 1] = cluster.num_blocks();
    out[8 * g + 2] = cluster.thread_rank();
    out[8 * g + 3] = cluster.num_threads();
    out[8 * g + 4] = cluster.size();
    out[8 * g + 5] = d.x * 100 + d.y * 10 + d.z;
    out[8 * g + 6] = bi.x * 10 + bi.y;
    out[8 * g + 7] = cg::cluster_group::block_rank();
    cg::cluster_group::sync();
}
"""


def test_cluster_ids_follow_cuda_x_fastest_ranks():
    grid, block = (4, 2), 8
    out = np.zeros(8 * 4 * 2 * block, np.uint32)
    rep = simt.launch(CLUSTER_IDS, "ids", grid, block, (out,))
    o = out.reshape(2, 4, block, 8)
    by, bx, t = np.meshgrid(np.arange(2), np.arange(4), np.arange(block), indexing="ij")
    rank = (bx % 2) + (by % 2) * 2
    assert (o[..., 0] == rank).all() and (o[..., 1] == 4).all() and (o[..., 7] == rank).all()
    assert (o[..., 2] == rank * block + t).all() and (o[..., 3] == 4 * block).all() and (o[..., 4] == 4 * block).all()
    assert (o[..., 5] == 221).all() and (o[..., 6] == (bx % 2) * 10 + by % 2).all()
    assert rep.cluster == (2, 2, 1) and rep.cluster_barriers == 8


def test_grid_not_divisible_by_the_cluster_is_refused():
    out = np.zeros(8 * 3 * 2 * 8, np.uint32)
    with pytest.raises(simt.LaunchError, match=r"grid=\(3, 2, 1\).*__cluster_dims__\(2, 2, 1\)"):
        simt.launch(CLUSTER_IDS, "ids", (3, 2), 8, (out,))
    with pytest.raises(simt.LaunchError, match="not divisible"):
        launch(DEMO, "cluster_row_sum", grid=6, block=128, args=(np.zeros(6, np.float32), np.zeros(2, np.float32), 3),
               mode="sim")


def test_cluster_size_limit_is_16_blocks():
    src = "#include <cooperative_groups.h>\n__global__ void __cluster_dims__(N) k(float* y) {" \
          " cooperative_groups::this_cluster().sync(); }"
    simt.launch(src, "k", 16, 32, (np.zeros(1, np.float32),), defines={"N": 16})     # sm_90 的非可移植上限
    with pytest.raises(simt.LaunchError, match="32 个线程块，超过上限 16"):
        simt.launch(src, "k", 32, 32, (np.zeros(1, np.float32),), defines={"N": 32})
    with pytest.raises(simt.CompileError, match="正整数"):
        simt.launch(src, "k", 1, 32, (np.zeros(1, np.float32),), defines={"N": 0})


def test_no_cluster_dims_is_a_cluster_of_one_block():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(int* out, int r) {
    __shared__ int s;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) s = 7 + blockIdx.x;
    cluster.sync();
    if (threadIdx.x == 0)
        out[blockIdx.x] = *cluster.map_shared_rank(&s, r) * 10 + cluster.num_blocks() + cluster.block_rank();
}"""
    out = np.zeros(3, np.int32)
    rep = simt.launch(src, "k", 3, 32, (out, 0))
    assert out.tolist() == [71, 81, 91] and rep.cluster == (1, 1, 1) and rep.dsmem_load_elements == 0
    with pytest.raises(simt.OutOfBoundsError, match="簇内编号 1 越界"):
        simt.launch(src, "k", 3, 32, (out, 1))


# ---------------------------------------------------------------- 簇屏障

def test_cluster_sync_in_a_divergent_branch_is_reported():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2) k(float* y) {
    cg::cluster_group cluster = cg::this_cluster();
    if (cluster.block_rank() == 0) {
        cluster.sync();
    }
    y[blockIdx.x] = 1.0f;
}"""
    with pytest.raises(simt.BarrierDivergenceError) as e:
        simt.launch(src, "k", 4, 32, (np.zeros(4, np.float32),))
    ln = line_of(src, "cluster.sync()")
    assert e.value.line == ln and f"第 {ln} 行" in str(e.value) and "cluster.sync()" in str(e.value)
    assert "线程块 (1,0,0)" in str(e.value)


def test_threads_returning_before_cluster_sync_are_reported():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2) k(float* y) {
    if (threadIdx.x >= 16) return;
    y[blockIdx.x * 32 + threadIdx.x] = 1.0f;
    cg::this_cluster().sync();
}"""
    with pytest.raises(simt.BarrierDivergenceError, match=r"第 7 行.*另外 32 个线程"):
        simt.launch(src, "k", 2, 32, (np.zeros(64, np.float32),))


SPLIT = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(4) k(int* out) {
    __shared__ int s[32];
    cg::cluster_group cluster = cg::this_cluster();
    int rank = cluster.block_rank();
    s[threadIdx.x] = rank * 100 + threadIdx.x;
    cluster.sync();
    int* next = cluster.map_shared_rank(s, (rank + 1) % 4);
    int v = next[threadIdx.x];                       // 读下一块
    auto token = cluster.barrier_arrive();           // 宣告：不再读别的块
    WINDOW
    cluster.barrier_wait(TOKEN);
    out[blockIdx.x * 32 + threadIdx.x] = v + s[threadIdx.x];
}
"""


def split_src(window="", token=""):
    return SPLIT.replace("WINDOW", window).replace("TOKEN", token)


@pytest.mark.parametrize("token", ["", "static_cast<cg::cluster_group::arrival_token&&>(token)"])
def test_split_barrier_orders_reads_before_the_owner_exits(token):
    out = np.zeros(8 * 32, np.int32)
    rep = simt.launch(split_src(token=token), "k", 8, 32, (out,))
    o = out.reshape(8, 32)
    b = np.arange(8)[:, None]
    t = np.arange(32)[None, :]
    assert (o == ((b % 4 + 1) % 4) * 100 + t + (b % 4) * 100 + t).all()
    assert rep.dsmem_load_elements == 8 * 32 and rep.dsmem_load_requests == 8 and rep.cluster_barriers == 16


def test_split_barrier_misuse_is_reported():
    with pytest.raises(simt.SimtRuntimeError, match="barrier_arrive\\(\\) twice"):
        simt.launch(split_src(window="cluster.barrier_arrive();"), "k", 4, 32, (np.zeros(128, np.int32),))
    with pytest.raises(simt.SimtRuntimeError, match="between barrier_arrive\\(\\) and barrier_wait\\(\\)"):
        simt.launch(split_src(window="cluster.sync();"), "k", 4, 32, (np.zeros(128, np.int32),))
    src = split_src().replace("auto token = cluster.barrier_arrive();", "")
    with pytest.raises(simt.SimtRuntimeError, match="without a preceding barrier_arrive"):
        simt.launch(src, "k", 4, 32, (np.zeros(128, np.int32),))


def test_a_write_between_arrive_and_wait_races_with_the_remote_read():
    # 0 号块在 barrier_arrive 之后改写自己的 s：1 号块之前从下一块（经 DSMEM）读 s 的操作与它之间没有簇屏障
    with pytest.raises(simt.SharedMemoryRaceError, match="WAR") as e:
        simt.launch(split_src(window="s[threadIdx.x] = 0;"), "k", 4, 32, (np.zeros(128, np.int32),))
    assert e.value.line == line_of(SPLIT, "WINDOW")


# ---------------------------------------------------------------- DSMEM 的竞争、越界与计数

PUSH = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2) push(float* out) {
    __shared__ float box[64];
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    if (rank == 1)
        cluster.map_shared_rank(box, 0)[threadIdx.x] = threadIdx.x + 0.5f;   // 1 号块写 0 号块的 box
    BARRIER;
    if (rank == 0)
        out[blockIdx.x / 2 * 64 + threadIdx.x] = box[threadIdx.x];
    cluster.sync();
}
"""


def test_remote_writes_after_cluster_sync_are_seen_and_counted():
    out = np.zeros(3 * 64, np.float32)
    rep = simt.launch(PUSH.replace("BARRIER", "cluster.sync()"), "push", 6, 64, (out,), initcheck=True)
    assert (out.reshape(3, 64) == np.arange(64) + 0.5).all()
    assert rep.dsmem_store_elements == 3 * 64 and rep.dsmem_store_bytes == 3 * 64 * 4
    assert rep.dsmem_store_requests == 3 * 2 and rep.dsmem_load_elements == 0


def test_syncthreads_does_not_order_blocks_of_a_cluster():
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        simt.launch(PUSH.replace("BARRIER", "__syncthreads()"), "push", 2, 64, (np.zeros(64, np.float32),))
    msg = str(e.value)
    reader, writer = line_of(PUSH, "= box[threadIdx.x]"), line_of(PUSH, "map_shared_rank(box, 0)")
    assert e.value.line == reader and f"于第 {writer} 行写过" in msg and "RAW" in msg
    assert "线程块 (1,0,0) 的线程" in msg and "__syncthreads() orders only the threads of one block" in msg


def test_two_blocks_writing_one_remote_word_race():
    src = PUSH.replace("if (rank == 1)\n", "").replace("BARRIER", "cluster.sync()")
    with pytest.raises(simt.SharedMemoryRaceError, match="WAW"):
        simt.launch(src, "push", 2, 64, (np.zeros(64, np.float32),))


def test_dsmem_out_of_bounds_names_the_rank_and_line():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(4) k(float* out, int extra) {
    extern __shared__ float dyn[];
    cg::cluster_group cluster = cg::this_cluster();
    dyn[threadIdx.x] = 1.0f;
    cluster.sync();
    float* far = cluster.map_shared_rank(dyn, 3);
    out[blockIdx.x * 32 + threadIdx.x] = far[threadIdx.x + extra];
    cluster.sync();
}"""
    out = np.zeros(4 * 32, np.float32)
    simt.launch(src, "k", 4, 32, (out, 0), shared_bytes=32 * 4)
    assert (out == 1.0).all()
    with pytest.raises(simt.OutOfBoundsError) as e:
        simt.launch(src, "k", 4, 32, (out, 1), shared_bytes=32 * 4)
    ln = line_of(src, "far[threadIdx.x + extra]")
    assert e.value.line == ln and "簇内编号 3" in str(e.value) and "dyn[32]" in str(e.value)
    assert "cluster rank 3" in str(e.value)


def test_map_shared_rank_checks_rank_and_pointer():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(4) k(float* out, int r) {
    __shared__ float s[32];
    cg::cluster_group cluster = cg::this_cluster();
    s[threadIdx.x] = 2.0f;
    cluster.sync();
    float* p = GLOBAL ? cluster.map_shared_rank(out, r) : cluster.map_shared_rank(s, r);
    out[blockIdx.x * 32 + threadIdx.x] = p[threadIdx.x];
    cluster.sync();
}"""
    out = np.zeros(4 * 32, np.float32)
    ln = line_of(src, "float* p =")
    for r in (4, -1):
        with pytest.raises(simt.OutOfBoundsError) as e:
            simt.launch(src, "k", 4, 32, (out, r), defines={"GLOBAL": 0})
        assert e.value.line == ln and f"rank {r} is out of range for a cluster of 4 blocks" in str(e.value)
    with pytest.raises(simt.SimtRuntimeError, match="needs a pointer into shared memory"):
        simt.launch(src, "k", 4, 32, (out, 1), defines={"GLOBAL": 1})


def test_forward_declared_cluster_dims_and_remote_atomics():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(int* out);
extern "C" __global__ void k(int* out) {
    __shared__ int c;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) c = 0;
    cluster.sync();
    if (ATOMIC) atomicAdd(cluster.map_shared_rank(&c, 0), 1);
    cluster.sync();
    if (threadIdx.x == 0) out[blockIdx.x] = cluster.num_blocks() * 10 + c;
}"""
    out = np.zeros(4, np.int32)
    rep = simt.launch(src, "k", 4, 32, (out,), defines={"ATOMIC": 0})
    assert out.tolist() == [20, 20, 20, 20] and rep.cluster == (2, 1, 1)
    # 两块的每个线程都给 0 号块的 c 加 1：0 号块 64，1 号块的 32 个线程经分布式共享内存（每个簇 32 次）
    rep = simt.launch(src, "k", 4, 32, (out,), defines={"ATOMIC": 1})
    assert out.tolist() == [84, 20, 84, 20] and rep.dsmem_atomic_ops == 2 * 32 and rep.atomic_ops == 4 * 32


def test_spinning_on_a_remote_flag_hits_the_work_budget():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2) k(int* out) {
    __shared__ volatile int flag;
    cg::cluster_group cluster = cg::this_cluster();
    flag = 0;
    cluster.sync();
    volatile int* other = cluster.map_shared_rank(&flag, cluster.block_rank() ^ 1);
    while (*other == 0) { }
    cluster.sync();
    out[blockIdx.x] = 1;
}"""
    with pytest.raises(simt.LoopLimitError, match=f"第 {line_of(src, 'while')} 行"):
        simt.launch(src, "k", 2, 32, (np.zeros(2, np.int32),), racecheck=False, max_lane_steps=1 << 16)


def test_cluster_member_errors_name_their_line():
    """cluster_group 没有的成员像 nvcc 一样是 CompileError；query_shared_rank 传全局内存的指针是运行时错误。"""
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2) k(unsigned* out) {
    cg::cluster_group cluster = cg::this_cluster();
    out[0] = cluster.is_valid();
}"""
    with pytest.raises(simt.CompileError, match="第 6 行.*is_valid"):
        simt.launch(src, "k", 2, 32, (np.zeros(1, np.uint32),))
    # query_shared_rank 只对共享内存的地址有意义：全局内存的指针是未定义行为
    with pytest.raises(simt.SimtRuntimeError, match="第 6 行.*query_shared_rank"):
        simt.launch(src.replace("cluster.is_valid()", "cluster.query_shared_rank(out)"), "k", 2, 32,
                    (np.zeros(1, np.uint32),))


# ---------------------------------------------------------------- 簇屏障与全局内存
GLOBAL_SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 簇里 0 号块写 buf，1 号块读（mode 2：1 号块先读、簇屏障之后 0 号块再写）；peer = 1 时 1 号块读另一个簇写的那一段
__global__ void __cluster_dims__(2, 1, 1) k(float* buf, float* out, int mode, int peer) {
    cg::cluster_group cluster = cg::this_cluster();
    unsigned int r = cluster.block_rank();
    unsigned int base = (blockIdx.x / 2) * 32;                          // 本簇写的那一段
    unsigned int from = ((blockIdx.x / 2 + peer) % (gridDim.x / 2)) * 32; // 1 号块读的那一段
    if (mode == 4) {                                    // 拆开的屏障：写在到达之前
        if (r == 0) buf[base + threadIdx.x] = threadIdx.x + 1.0f;
        cluster.barrier_arrive();
        cluster.barrier_wait();
    } else if (mode == 5) {                             // 写在到达与等待之间：不排在对方的读之前
        cluster.barrier_arrive();
        if (r == 0) buf[base + threadIdx.x] = threadIdx.x + 1.0f;
        cluster.barrier_wait();
    } else if (mode == 2) {                             // 先读（1 号块）后写（0 号块）
        if (r == 1) out[base + threadIdx.x] = buf[from + 31 - threadIdx.x];
        cluster.sync();
        if (r == 0) buf[base + threadIdx.x] = -1.0f;
        return;
    } else {
        if (r == 0) buf[base + threadIdx.x] = threadIdx.x + 1.0f;
        if (mode == 0) cluster.sync();
        else __syncthreads();
    }
    if (r == 1) out[base + threadIdx.x] = buf[from + 31 - threadIdx.x];
}"""


@pytest.mark.parametrize("mode", [0, 4])
def test_cluster_barrier_orders_global_memory_across_blocks_of_one_cluster(mode):
    """簇屏障（arrive 释放、wait 获取）也排定同一个簇里各块对全局内存的访问：0 号块写、簇屏障、1 号块读不是竞争。"""
    buf, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    simt.launch(GLOBAL_SRC, "k", 4, 32, (buf, out, mode, 0))
    assert out.tolist() == [32.0 - i for i in range(32)] * 2


def test_cluster_barrier_orders_a_read_before_a_later_write():
    buf, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    simt.launch(GLOBAL_SRC, "k", 4, 32, (buf, out, 2, 0))
    assert out[:32].tolist() == [31.0 - i for i in range(32)] and (buf == -1).all()


@pytest.mark.parametrize("mode,what", [(1, "写后读"), (5, "写后读")])
def test_global_race_across_blocks_of_one_cluster_names_the_cluster_barrier(mode, what):
    """__syncthreads() 不排定簇里的两块；拆开的屏障里，到达之后才写的不排在对方等待之后的读前面。"""
    buf, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(simt.GlobalMemoryRaceError, match=what) as e:
        simt.launch(GLOBAL_SRC, "k", 4, 32, (buf, out, mode, 0))
    assert "同一个线程块簇的不同线程块" in str(e.value) and e.value.line is not None


def test_cluster_barrier_does_not_order_blocks_of_different_clusters():
    """peer = 1：1 号块读的是另一个簇的 0 号块写的那一段，簇屏障管不到。"""
    buf, out = np.zeros(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(simt.GlobalMemoryRaceError, match="不同的线程块") as e:
        simt.launch(GLOBAL_SRC, "k", 4, 32, (buf, out, 0, 1))
    assert "线程块簇" not in str(e.value).split(" / ")[0]


# ---------------------------------------------------------------- 分布式共享内存上的原子操作
HIST_SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 簇里每块管 nbins / 簇大小 个桶：元素按桶号 atomicAdd 到那一块的共享内存里，最后各块把自己的桶加进 bins
__global__ void __cluster_dims__(2, 1, 1) hist(int* bins, const int* in, int n, int nbins, int final_sync) {
    extern __shared__ int smem[];
    cg::cluster_group cluster = cg::this_cluster();
    int per = nbins / cluster.num_blocks();
    for (int i = threadIdx.x; i < per; i += blockDim.x) smem[i] = 0;
    cluster.sync();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int b = in[i];
        int* dst = cluster.map_shared_rank(smem, b / per);
        atomicAdd(dst + b % per, 1);
    }
    if (final_sync) cluster.sync();
    int* mine = bins + cluster.block_rank() * per;
    for (int i = threadIdx.x; i < per; i += blockDim.x) atomicAdd(&mine[i], smem[i]);
}"""


def test_histogram_with_atomics_in_distributed_shared_memory():
    """CUDA 编程指南里分布式共享内存的直方图写法：原子操作之间不算竞争，结果与 bincount 相同；对别的块的原子操作
    计入 dsmem_atomic_ops（处理第 i 个元素的块的簇内编号与桶所在的块不同的那些）。"""
    x = np.random.default_rng(0).integers(0, 16, 1000).astype(np.int32)
    bins = np.zeros(16, np.int32)
    rep = simt.launch(HIST_SRC, "hist", 4, 64, (bins, x, 1000, 16, 1), shared_bytes=8 * 4)
    assert bins.tolist() == np.bincount(x, minlength=16).tolist()
    rank = (np.arange(1000) // 64) % 4 % 2                 # 网格步长循环里处理第 i 个元素的块的簇内编号
    assert rep.dsmem_atomic_ops == int(((x // 8) != rank).sum())
    assert rep.atomic_ops == 1000 + 4 * 8
    assert "分布式共享内存上的原子操作" in str(rep)


def test_reading_buckets_without_the_final_cluster_sync_is_a_race():
    """少了最后的 cluster.sync()：本块读自己的桶时，别的块可能还在往里加。"""
    x = np.random.default_rng(0).integers(0, 16, 1000).astype(np.int32)
    with pytest.raises(simt.SharedMemoryRaceError, match="簇内跨线程块") as e:
        simt.launch(HIST_SRC, "hist", 4, 64, (np.zeros(16, np.int32), x, 1000, 16, 0), shared_bytes=8 * 4)
    assert e.value.line == 18


#: 0 号块经分布式共享内存给 1 号块的 s 加 1；TAIL 是之后的部分
REMOTE_ATOMIC_SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2, 1, 1) k(int* out) {
    __shared__ int s;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) s = 0;
    cluster.sync();
    if (cluster.block_rank() == 0) atomicAdd(cluster.map_shared_rank(&s, 1), 1);
    TAIL
}"""


def test_atomic_against_a_plain_write_in_another_block_races():
    tail = "else if (threadIdx.x == 0) s = 5;\n    cluster.sync();\n    if (threadIdx.x == 0) out[blockIdx.x] = s;"
    with pytest.raises(simt.SharedMemoryRaceError, match="簇内跨线程块"):
        simt.launch(REMOTE_ATOMIC_SRC.replace("TAIL", tail), "k", 2, 32, (np.zeros(2, np.int32),))


def test_atomic_into_a_block_that_may_have_exited_is_reported():
    with pytest.raises(simt.DsmemExitedBlockError) as e:
        simt.launch(REMOTE_ATOMIC_SRC.replace("TAIL", ""), "k", 2, 32, (np.zeros(2, np.int32),))
    assert e.value.line == 9


def test_cluster_thread_index_dim_threads_and_query_shared_rank():
    """2x2 块的簇、3x2 个线程的块：thread_index() = block_index() * blockDim + threadIdx，dim_threads() = 簇形状 x
    blockDim；query_shared_rank 对 map_shared_rank(s, r) 给出 r，对本块的共享内存给出本块的编号。"""
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2, 2, 1) k(unsigned int* out) {
    __shared__ int s[4];
    cg::cluster_group cluster = cg::this_cluster();
    dim3 ti = cluster.thread_index();
    dim3 dt = cluster.dim_threads();
    unsigned int g = (blockIdx.y * gridDim.x + blockIdx.x) * (blockDim.x * blockDim.y) + threadIdx.y * blockDim.x + threadIdx.x;
    unsigned int r = (cluster.block_rank() + 1) % cluster.num_blocks();
    out[5 * g + 0] = ti.x;
    out[5 * g + 1] = ti.y;
    out[5 * g + 2] = dt.x * 100 + dt.y * 10 + dt.z;
    out[5 * g + 3] = cluster.query_shared_rank(cluster.map_shared_rank(s, r));
    out[5 * g + 4] = cluster.query_shared_rank(&s[1]);
}"""
    out = np.zeros(5 * 8 * 6, np.uint32)
    simt.launch(src, "k", (4, 2), (3, 2), (out,))
    o = out.reshape(8, 2, 3, 5)                              # 块（行主序）、threadIdx.y、threadIdx.x
    for b in range(8):
        bx, by = b % 4, b // 4
        rank = (bx % 2) + 2 * (by % 2)
        for ty in range(2):
            for tx in range(3):
                assert o[b, ty, tx].tolist() == [(bx % 2) * 3 + tx, (by % 2) * 2 + ty, 641, (rank + 1) % 4, rank]
