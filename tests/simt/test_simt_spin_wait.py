"""线程块之间的等待：一个循环等别的线程块写进内存的值（volatile 读或原子操作）。

模拟器默认（schedule="auto"）先让整个网格一起执行；一个等内存的循环转了一圈什么都没变时，把数组恢复成启动前的
样子，改为按编号从大到小一块接一块执行。按票号顺序发布的写法（链式累加、轮流累加）因此能运行；用 blockIdx 代替
票号的同样写法只在块按编号顺序开始时才对，报 SpinWaitError（order_dependent）；每块都等别的块的写法（手写的网格
屏障）整网格一起执行就能通过；哪种调度都等不到的，报 SpinWaitError 并指出等待的那一行。"""

from __future__ import annotations

import io
import contextlib

import numpy as np
import pytest

from reduction_lab import simt

SRC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// 票号 b 的块等票号 b - 1 的块发布它的前缀和，再发布自己的
__global__ void chain(const float* x, float* out, int* flag, int* ticket) {
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    int b = my;
    if (threadIdx.x == 0) {
        float prev = 0.0f;
        if (b > 0) {
            while (atomicAdd(&flag[b - 1], 0) == 0) { }
            __threadfence();
            prev = out[b - 1];
        }
        out[b] = prev + x[b];
        __threadfence();
        atomicExch(&flag[b], 1);
    }
}

// 同样的链，用 blockIdx 代替票号：只在块按编号顺序开始时才等得到
__global__ void chain_by_index(const float* x, float* out, int* flag) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        float prev = 0.0f;
        if (b > 0) {
            while (atomicAdd(&flag[b - 1], 0) == 0) { }
            __threadfence();
            prev = out[b - 1];
        }
        out[b] = prev + x[b];
        __threadfence();
        atomicExch(&flag[b], 1);
    }
}

// 轮流累加：票号 b 的块等到 turn == b 才把自己那一段的和加进 total，结果与按段的顺序串行求和逐位相同
__global__ void turns(const float* x, float* total, int* turn, int* ticket, int n) {
    __shared__ float s[64];
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    int i = my * 64 + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        while (atomicAdd(turn, 0) != my) { }
        __threadfence();
        *total += s[0];
        __threadfence();
        atomicExch(turn, my + 1);
    }
}

// 线程 0 轮询，经共享内存告诉全块
__global__ void chain_block_poll(const float* x, float* out, int* flag, int* ticket) {
    __shared__ int ready, my;
    __shared__ float prev;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    int b = my;
    if (threadIdx.x == 0) { ready = (b == 0); prev = 0.0f; }
    __syncthreads();
    while (true) {
        int r = ready;
        __syncthreads();
        if (r) break;
        if (threadIdx.x == 0 && atomicAdd(&flag[b - 1], 0) != 0) { __threadfence(); prev = out[b - 1]; ready = 1; }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[b] = prev + x[b];
        __threadfence();
        atomicExch(&flag[b], 1);
    }
}

// 手写的网格屏障：每块都等全部的块到达
__global__ void barrier(float* out, int* count) {
    if (threadIdx.x == 0) {
        out[blockIdx.x] = blockIdx.x;
        __threadfence();
        atomicAdd(count, 1);
        while (atomicAdd(count, 0) < gridDim.x) { }
        __threadfence();
        float s = 0.0f;
        for (int i = 0; i < gridDim.x; ++i) s += out[i];
        out[gridDim.x + blockIdx.x] = s;
    }
}

// 等编号更大的块：哪种调度都等不到
__global__ void wait_later(int* flag) {
    if (threadIdx.x == 0) {
        if (blockIdx.x + 1 < gridDim.x)
            while (atomicAdd(&flag[blockIdx.x + 1], 0) == 0) { }
        atomicExch(&flag[blockIdx.x], 1);
    }
}

// 等不到就放弃：变量在变，不是死等
__global__ void bounded(int* flag, int* tries_out) {
    if (threadIdx.x == 0) {
        int tries = 0;
        while (atomicAdd(flag, 0) == 0 && tries < 100) tries++;
        tries_out[blockIdx.x] = tries;
    }
}

__global__ void timed(volatile int* flag, long long* waited) {
    if (threadIdx.x == 0) {
        long long t0 = clock64();
        while (flag[0] == 0 && clock64() - t0 < 100000) { }
        waited[blockIdx.x] = clock64() - t0 >= 100000;
    }
}

__global__ void chain_printf(int* flag, int* ticket) {
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    int b = my;
    if (threadIdx.x == 0) {
        printf("block %d\n", b);
        if (b > 0) while (atomicAdd(&flag[b - 1], 0) == 0) { }
        atomicExch(&flag[b], 1);
    }
}

// 两块的簇：簇内经 cluster.sync() 交换，簇之间按簇号链式等待
__global__ void __cluster_dims__(2, 1, 1) cluster_chain(const float* x, float* out, int* flag, int* ticket) {
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ float part;
    __shared__ int my;
    if (cluster.block_rank() == 0 && threadIdx.x == 0) my = atomicAdd(ticket, 1);
    int c = blockIdx.x / 2;
    if (threadIdx.x == 0) part = x[blockIdx.x];
    cluster.sync();
    if (cluster.block_rank() == 0 && threadIdx.x == 0) {
        float other = *cluster.map_shared_rank(&part, 1);
        c = my;                   // 簇的票号：这个簇处理第 c 对
        other = x[2 * c + 1];
        float mine = x[2 * c];
        float prev = 0.0f;
        if (c > 0) {
            while (atomicAdd(&flag[c - 1], 0) == 0) { }
            __threadfence();
            prev = out[c - 1];
        }
        out[c] = prev + mine + other;
        __threadfence();
        atomicExch(&flag[c], 1);
    }
    cluster.sync();
}
"""


def _line(fragment):
    """SRC 里含 fragment 的那一行的行号（从 1 数起）。"""
    return next(i for i, ln in enumerate(SRC.splitlines(), 1) if fragment in ln)


CHAIN = _line("while (atomicAdd(&flag[b - 1], 0) == 0) { }")
BY_INDEX = [i for i, ln in enumerate(SRC.splitlines(), 1) if "while (atomicAdd(&flag[b - 1], 0) == 0) { }" in ln][1]
BARRIER = _line("while (atomicAdd(count, 0) < gridDim.x)")
LATER = _line("while (atomicAdd(&flag[blockIdx.x + 1], 0) == 0)")
PRINTF = _line("if (b > 0) while (atomicAdd(&flag[b - 1], 0) == 0)")


def _z(n, dt=np.float32):
    return np.zeros(n, dt)


def test_publication_in_ticket_order_runs_block_by_block():
    x = np.arange(1, 9, dtype=np.float32)
    out, flag, ticket = _z(8), _z(8, np.int32), _z(1, np.int32)
    rep = simt.launch(SRC, "chain", 8, 32, (x, out, flag, ticket))
    assert out.tolist() == np.cumsum(x).tolist()
    assert flag.tolist() == [1] * 8 and ticket[0] == 8
    assert rep.schedule == "blocks-reversed"
    assert f"第 {CHAIN} 行" in rep.schedule_note and "线程块 (1,0,0)" in rep.schedule_note
    assert "调度：逐块执行（一次一个线程块，按编号从大到小）" in str(rep)
    assert rep.atomic_ops == 8 + 7 + 8      # 领号、等一次（票号 0 不等）、发布：重来之前的计数不算进来
    assert "schedule" not in rep.as_dict()


def test_publication_in_block_index_order_depends_on_the_start_order():
    """用 blockIdx 代替票号：GPU 上通常按编号发出线程块，所以多半看不出来；CUDA 并不保证这个顺序。"""
    x = np.ones(4, np.float32)
    with pytest.raises(simt.SpinWaitError, match=rf"第 {BY_INDEX} 行.*按编号从小到大开始执行时才等得到.*票号") as ei:
        simt.launch(SRC, "chain_by_index", 4, 32, (x, _z(4), _z(4, np.int32)))
    e = ei.value
    assert e.order_dependent and (e.schedule, e.block) == ("blocks-reversed", "(3,0,0)")
    out = _z(4)
    rep = simt.launch(SRC, "chain_by_index", 4, 32, (x, out, _z(4, np.int32)), schedule="blocks")
    assert rep.schedule == "blocks" and out.tolist() == [1, 2, 3, 4]


def test_explicit_grid_schedule_reports_the_wait_instead_of_burning_the_budget():
    x = np.ones(8, np.float32)
    with pytest.raises(simt.SpinWaitError, match=rf"第 {CHAIN} 行.*整个网格一起执行.*schedule=\"auto\".*line {CHAIN}") as ei:
        simt.launch(SRC, "chain", 8, 32, (x, _z(8), _z(8, np.int32), _z(1, np.int32)), schedule="grid")
    e = ei.value
    assert isinstance(e, simt.LoopLimitError)
    assert (e.schedule, e.line, e.block, e.thread) == ("grid", CHAIN, "(1,0,0)", "(0,0,0)")
    assert "共有 7 个线程块的线程在这里等" in str(e)


def test_arrays_are_restored_before_the_block_by_block_rerun():
    """第一次（整网格）执行里 ticket 已经加到 5、票号 0 已经加进 total：重来之前恢复，结果只算一次。"""
    n = 5 * 64 - 7
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n).astype(np.float32)
    total, turn, ticket = _z(1), _z(1, np.int32), _z(1, np.int32)
    rep = simt.launch(SRC, "turns", 5, 64, (x, total, turn, ticket, n))
    assert rep.schedule == "blocks-reversed"
    assert ticket[0] == 5 and turn[0] == 5
    # 按块号顺序的串行求和：每块先树形归约，再依次加进 total（float32）
    parts = [np.float32(0)] * 5
    for b in range(5):
        s = np.zeros(64, np.float32)
        seg = x[b * 64:(b + 1) * 64]
        s[:seg.size] = seg
        k = 32
        while k:
            s[:k] = s[:k] + s[k:2 * k]
            k //= 2
        parts[b] = s[0]
    want = np.float32(0)
    for p in parts:
        want = np.float32(want + p)
    assert total[0] == want


def test_block_polls_through_shared_memory():
    x = np.arange(1, 7, dtype=np.float32)
    out = _z(6)
    rep = simt.launch(SRC, "chain_block_poll", 6, 64, (x, out, _z(6, np.int32), _z(1, np.int32)))
    assert rep.schedule == "blocks-reversed"
    assert out.tolist() == np.cumsum(x).tolist()


def test_hand_written_grid_barrier_runs_with_the_whole_grid():
    out, count = _z(2 * 40), _z(1, np.int32)
    rep = simt.launch(SRC, "barrier", 40, 32, (out, count))
    assert rep.schedule == "grid"
    assert count[0] == 40
    assert (out[40:] == sum(range(40))).all()
    with pytest.raises(simt.SpinWaitError, match=rf"第 {BARRIER} 行.*一块接一块执行.*手写的网格屏障") as ei:
        simt.launch(SRC, "barrier", 40, 32, (_z(80), _z(1, np.int32)), schedule="blocks")
    assert (ei.value.schedule, ei.value.block) == ("blocks", "(0,0,0)")


def test_waiting_for_a_later_block_depends_on_the_opposite_order():
    with pytest.raises(simt.SpinWaitError, match=rf"第 {LATER} 行.*按编号从大到小开始执行时才等得到.*票号") as ei:
        simt.launch(SRC, "wait_later", 4, 32, (_z(4, np.int32),))
    e = ei.value
    assert e.order_dependent and (e.schedule, e.line, e.block) == ("blocks", LATER, "(0,0,0)")


@pytest.mark.parametrize("kernel, args", [
    ("bounded", lambda: (_z(1, np.int32), _z(3, np.int32))),
    ("timed", lambda: (_z(1, np.int32), _z(3, np.int64))),
])
def test_a_wait_that_gives_up_is_not_a_deadlock(kernel, args):
    a = args()
    rep = simt.launch(SRC, kernel, 3, 32, a)
    assert rep.schedule == "grid"
    assert (a[1] == (100 if kernel == "bounded" else 1)).all()


def test_printf_of_the_first_attempt_is_explained():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rep = simt.launch(SRC, "chain_printf", 3, 32, (_z(3, np.int32), _z(1, np.int32)))
    out = buf.getvalue()
    assert rep.schedule == "blocks-reversed"
    assert rep.printf == "block 0\nblock 1\nblock 2\n"     # 倒序执行：线程块 2 领到票号 0
    lines = "block 0\nblock 1\nblock 2\n"
    assert out == (lines + f"（模拟器：第 {PRINTF} 行的循环在这种调度下等不到，从头重来；上面的 printf 输出来自上一次执行）\n"
                   + lines + "（模拟器：按编号从小到大执行完了，再按从大到小执行一遍，从头重来；上面的 printf 输出来自上一次执行）\n"
                   + lines)


def test_clusters_run_one_at_a_time():
    x = np.arange(1, 9, dtype=np.float32)
    out = _z(4)
    rep = simt.launch(SRC, "cluster_chain", 8, 32, (x, out, _z(4, np.int32), _z(1, np.int32)))
    assert rep.schedule == "blocks-reversed"
    assert "一次一个簇" in str(rep)
    assert out.tolist() == np.cumsum(x.reshape(4, 2).sum(1)).tolist()
    assert rep.dsmem_load_elements == 4 and rep.cluster_barriers == 16


def test_volatile_spin_with_no_writer_stops_at_once():
    src = ("__global__ void k(volatile int* flag, int* o) {\n"
           "  if (threadIdx.x == 0)\n"
           "    while (flag[0] == 0) { }\n"
           "  o[0] = 1;\n}")
    with pytest.raises(simt.SpinWaitError, match=r"第 3 行.*几种调度都试过了"):
        simt.launch(src, "k", 1, 32, (_z(1, np.int32), _z(1, np.int32)))


def test_schedule_is_checked():
    with pytest.raises(ValueError, match="schedule"):
        simt.launch(SRC, "chain", 1, 32, (_z(1), _z(1), _z(1, np.int32), _z(1, np.int32)), schedule="serial")


def test_plain_load_spin_is_named_at_once():
    """普通的读上的自旋：GPU 上编译器可以只读一次，永远等下去；模拟器在第 1025 圈看出什么都没变，不换调度。"""
    src = ("__global__ void k(int* flag) {\n"
           "  if (threadIdx.x == 0) {\n"
           "    if (blockIdx.x > 0) while (flag[blockIdx.x - 1] == 0) { }\n"
           "    flag[blockIdx.x] = 1;\n  }\n}")
    with pytest.raises(simt.SpinWaitError, match=r"第 3 行.*1,025 圈.*volatile 读或原子操作.*寄存器") as ei:
        simt.launch(src, "k", 4, 32, (_z(4, np.int32),), global_racecheck=False)
    assert ei.value.plain_load and ei.value.schedule == "grid" and not ei.value.order_dependent


def test_loop_that_changes_nothing_is_an_endless_loop():
    src = ("__global__ void k(int* o, int n) {\n"
           "  int i = 0;\n"
           "  if (threadIdx.x == 0 && blockIdx.x == 0) while (i < n) { o[0] = 1; }\n}")
    with pytest.raises(simt.LoopLimitError, match=r"第 3 行.*死循环.*1,025 圈") as ei:
        simt.launch(src, "k", 2, 32, (_z(1, np.int32), 5))
    assert type(ei.value) is simt.LoopLimitError


ALIAS = r"""
// b 指向 a 的后半：票号 s 的块先经 a、再经 b 改同一个数 a[4 + s] == b[s]
__global__ void alias_chain(int* a, int* b, int* turn, int* ticket) {
    __shared__ int s;
    if (threadIdx.x == 0) s = atomicAdd(ticket, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        while (atomicAdd(turn, 0) != s) { }
        a[4 + s] += 1;
        b[s] += 10;
        __threadfence();
        atomicExch(turn, s + 1);
    }
}
"""


def test_reruns_restore_every_written_array_once_even_when_arguments_alias():
    """重来之前恢复的是每块被写过的内存在第一次被写之前的样子；两个参数指向同一块内存也只留最早的副本。"""
    buf = np.zeros(8, np.int32)
    rep = simt.launch(ALIAS, "alias_chain", 4, 32, (buf, buf[4:], _z(1, np.int32), _z(1, np.int32)))
    assert rep.schedule == "blocks-reversed"
    # 整网格、正序、倒序执行了三次，只留最后一次；经 b 的副本是在经 a 写过之后才记下的，按记下的先后恢复就会留下它
    assert buf.tolist() == [0, 0, 0, 0, 11, 11, 11, 11]


def _rss_mib():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) // 1024 for ln in f if ln.startswith("VmRSS"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="读 /proc/self/status 量常驻内存")
def test_inputs_that_are_never_written_are_not_copied():
    """1 GiB 的输入只读了开头几个数（没有碰过的页不占内存）：换调度重来之前不复制它。"""
    big = np.zeros(1 << 28, np.float32)          # calloc：没有碰过的页不占内存
    x = big[:8]
    out, flag, ticket = _z(8), _z(8, np.int32), _z(1, np.int32)
    before = _rss_mib()
    rep = simt.launch(SRC, "chain", 8, 32, (big, out, flag, ticket), global_racecheck=False)
    grown = _rss_mib() - before
    assert rep.schedule == "blocks-reversed" and out.tolist() == np.cumsum(x).tolist()
    assert grown < 256, f"常驻内存多了 {grown} MiB"


def test_grid_sync_together_with_a_wait_between_blocks_is_refused_by_name():
    src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void k(int* flag, int* ticket) {
    cg::grid_group grid = cg::this_grid();
    __shared__ int s;
    if (threadIdx.x == 0) s = atomicAdd(ticket, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        if (s > 0) while (atomicAdd(&flag[s - 1], 0) == 0) { }
        atomicExch(&flag[s], 1);
    }
    grid.sync();
}
"""
    with pytest.raises(simt.UnsupportedError, match=r"第 13 行.*grid.sync\(\) 与一块接一块的执行"):
        simt.launch(src, "k", 3, 32, (_z(3, np.int32), _z(1, np.int32)))


# 同时驻留：每块 120 KiB 动态共享内存，sm_90 上每个 SM 只放得下一块，同时驻留的至多 132 块
WAVES = r"""
// 手写的网格屏障，外加一段大共享内存：网格大于同时驻留的块数时，GPU 上第一批块在屏障前等，后面的块开始不了
__global__ void big_barrier(float* out, int* count) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(count, 1);
        while (atomicAdd(count, 0) < gridDim.x) { }
        out[blockIdx.x] = buf[0] + 1.0f;
    }
}

// 同样的屏障，写成 do-while 与 for (;;) + break
__global__ void big_barrier_do(float* out, int* count) {
    extern __shared__ float buf[];
    if (threadIdx.x == 0) {
        atomicAdd(count, 1);
        int c;
        do { c = atomicAdd(count, 0); } while (c < gridDim.x);
        out[blockIdx.x] = 1.0f;
    }
}

__global__ void big_barrier_for(float* out, int* count) {
    extern __shared__ float buf[];
    if (threadIdx.x == 0) {
        atomicAdd(count, 1);
        for (;;) { if (atomicAdd(count, 0) >= gridDim.x) break; }
        out[blockIdx.x] = 1.0f;
    }
}

// 块 0 算出一个值发布出去，其余的块等它：等的是第一波里的块，网格多大都不会卡住
__global__ void from_first(const float* x, float* out, int* flag) {
    extern __shared__ float buf[];
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) {
            out[0] = x[0] * 2.0f;
            __threadfence();
            atomicExch(flag, 1);
        } else {
            while (atomicAdd(flag, 0) == 0) { }
            __threadfence();
            out[blockIdx.x] = out[0] + blockIdx.x;
        }
    }
}

// 块 0 等其余的块都做完：其余的块不等谁，GPU 上它们做完就腾出位置，不会卡住
__global__ void last_waits(float* out, int* done) {
    extern __shared__ float buf[];
    if (threadIdx.x == 0) {
        if (blockIdx.x != 0) {
            out[blockIdx.x] = blockIdx.x;
            __threadfence();
            atomicAdd(done, 1);
        } else {
            while (atomicAdd(done, 0) < gridDim.x - 1) { }
            __threadfence();
            float s = 0.0f;
            for (int i = 1; i < gridDim.x; ++i) s += out[i];
            out[0] = s;
        }
    }
}
"""
BIG = 120 * 1024
BIG_BARRIER = next(i for i, ln in enumerate(WAVES.splitlines(), 1) if "while (atomicAdd(count, 0) < gridDim.x)" in ln)


def _big(name, grid, args, **kw):
    return simt.launch(WAVES, name, grid, 32, args, shared_bytes=BIG, max_dynamic_shared_bytes=BIG, **kw)


def test_hand_written_grid_barrier_needs_every_block_resident():
    """132 块同时驻留得下，屏障等得到；133 块时第一波 132 块都停在屏障前，GPU 上会卡住。"""
    out, count = _z(132), _z(1, np.int32)
    rep = _big("big_barrier", 132, (out, count))
    assert rep.schedule == "grid" and not rep.schedule_note
    assert out.tolist() == [b + 1.0 for b in range(132)] and count[0] == 132
    out, count = _z(133), _z(1, np.int32)
    with pytest.raises(simt.SpinWaitError, match=rf"第 {BIG_BARRIER} 行.*133 个线程块.*至多 132 个.*共享内存.*"
                                                 r"协作启动.*line " + str(BIG_BARRIER)) as ei:
        _big("big_barrier", 133, (out, count))
    e = ei.value
    assert e.schedule == "waves" and not e.order_dependent
    assert "132 blocks wait here" in str(e)
    assert count[0] == 0 and not out.any()          # 报错之前把数组恢复成启动前的样子


@pytest.mark.parametrize("kernel, fragment", [("big_barrier_do", "do { c = atomicAdd(count, 0); }"),
                                              ("big_barrier_for", "for (;;) { if (atomicAdd(count, 0)")])
def test_barrier_written_as_do_while_or_endless_for_is_checked_too(kernel, fragment):
    line = next(i for i, ln in enumerate(WAVES.splitlines(), 1) if fragment in ln)
    assert _big(kernel, 132, (_z(132), _z(1, np.int32))).schedule == "grid"
    with pytest.raises(simt.SpinWaitError) as ei:
        _big(kernel, 133, (_z(133), _z(1, np.int32)))
    assert (ei.value.schedule, ei.value.line) == ("waves", line)


def test_waiting_for_the_first_wave_runs_in_waves():
    """网格大于同时驻留的块数、循环等的是第一波里的块 0：一波一波执行也等得到，结果与计数来自这一遍。"""
    x = np.full(1, 1.5, np.float32)
    out, flag = _z(300), _z(1, np.int32)
    rep = _big("from_first", 300, (x, out, flag))
    assert rep.schedule == "waves" and "300 个线程块多于 sm_90 上同时驻留得下的 132 个" in rep.schedule_note
    assert "调度：按同时驻留得下的块数一波一波执行" in str(rep)
    assert out.tolist() == [3.0 + b for b in range(300)] and flag[0] == 1
    assert rep.atomic_ops == 300         # 发布一次、其余 299 块各读一次（重来之前的计数不算进来）
    assert "schedule" not in rep.as_dict()


def test_one_block_waiting_for_blocks_that_finish_is_not_called_a_deadlock():
    """一波里只有块 0 在等，其余的块已经做完：GPU 上后面的块会补上它们的位置。模拟器不模拟补位，用整网格的结果并说明。"""
    out, done = _z(140), _z(1, np.int32)
    rep = _big("last_waits", 140, (out, done))
    assert rep.schedule == "grid" and "判断不了" in rep.schedule_note
    assert done[0] == 139 and out[0] == sum(range(1, 140))


def test_explicit_waves_schedule():
    out, count = _z(133), _z(1, np.int32)
    with pytest.raises(simt.SpinWaitError, match="schedule=\"waves\""):
        _big("big_barrier", 133, (out, count), schedule="waves")
    out = _z(140)
    rep = _big("from_first", 140, (np.ones(1, np.float32), out, _z(1, np.int32)), schedule="waves")
    assert rep.schedule == "waves" and out[-1] == 141
