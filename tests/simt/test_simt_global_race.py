"""全局内存的数据竞争（一次启动之内）：故意埋下的竞争要报告，课程里正确的内核不报告（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reduction_lab import cuda_kernels as ck
from reduction_lab import simt

SRC = r"""
__global__ void cross_ww(float* out) {
    out[0] = blockIdx.x;
}
__global__ void cross_rw(float* a, float* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) a[5] = 1.0f;
    if (blockIdx.x == 1 && threadIdx.x == 3) out[0] = a[5];
}
__global__ void cross_war(float* a, float* out) {
    if (blockIdx.x == 0 && threadIdx.x == 2) out[0] = a[7];
    if (blockIdx.x == 1 && threadIdx.x == 0) a[7] = 3.0f;
}
__global__ void same_block(float* a, float* out, int sync) {
    if (threadIdx.x == 0) a[0] = 7.0f;
    if (sync) __syncthreads();
    if (threadIdx.x == 33) out[0] = a[0];
}
__global__ void barrier_other_block(float* a, float* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) a[0] = 7.0f;
    __syncthreads();
    if (blockIdx.x == 1 && threadIdx.x == 0) out[0] = a[0];
}
__global__ void atomics(float* out) {
    atomicAdd(out, 1.0f);
    atomicAdd(out + 1 + blockIdx.x % 2, 2.0f);
}
__global__ void atomic_then_plain(float* out) {
    if (blockIdx.x == 0) atomicAdd(out, 1.0f);
    else if (threadIdx.x == 0) out[0] = 2.0f;
}
__global__ void atomic_then_read(float* out, float* res) {
    atomicAdd(out, 1.0f);
    __syncthreads();
    if (threadIdx.x == 0) res[blockIdx.x] = out[0];
}
__global__ void own_block_atomics(float* out, float* res) {
    atomicAdd(out + blockIdx.x, 1.0f);
    __syncthreads();
    if (threadIdx.x == 0) res[blockIdx.x] = out[blockIdx.x];
}
__global__ void same_value(int* flag) {
    flag[0] = 1;
}
__global__ void fenced_last_block(float* part, float* out, unsigned int* count) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        part[blockIdx.x] = blockIdx.x + 1;
        __threadfence();
        unsigned int t = atomicAdd(count, 1u);
        last = (t == gridDim.x - 1);
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float s = 0;
        for (int i = 0; i < gridDim.x; i++) s += part[i];
        out[0] = s;
    }
}
__global__ void own_words(float* a, float* b, int n, int sync) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * 2.0f + 1.0f;
    if (sync) __syncthreads();
    if (i < n && threadIdx.x > 0) b[i] = a[i] + a[i - 1];
}
__global__ void same_warp_rw(float* a, float* out) {
    if (threadIdx.x == 0) a[0] = 7.0f;
    if (threadIdx.x == 1) out[0] = a[0];
}
"""


def _z(n, dtype=np.float32):
    return np.zeros(n, dtype)


def _race(name, grid, block, args, **kw):
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(SRC, name, grid, block, args, **kw)
    return ei.value


def test_cross_block_write_write():
    e = _race("cross_ww", 2, 1, (_z(1),))
    assert e.hazard == "WAW" and e.array == "out" and e.index == 0
    assert (e.block, e.thread, e.other_block, e.other_thread) == ("(1,0,0)", "(0,0,0)", "(0,0,0)", "(0,0,0)")
    assert isinstance(e.line, int) and e.line == 3 and e.other_line == 3
    zh, en = str(e).split(" / ", 1)
    assert "全局内存数据竞争" in zh and "线程块 (1,0,0)" in zh and "线程块 (0,0,0)" in zh
    assert "global-memory race (WAW)" in en and "different blocks" in en
    assert not any("\u4e00" <= c <= "\u9fff" for c in en)


def test_cross_block_read_after_write():
    e = _race("cross_rw", 2, 32, (_z(8), _z(1)))
    assert (e.hazard, e.array, e.index, e.line, e.other_line) == ("RAW", "a", 5, 7, 6)
    assert (e.block, e.thread, e.other_block, e.other_thread) == ("(1,0,0)", "(3,0,0)", "(0,0,0)", "(0,0,0)")


def test_cross_block_write_after_read():
    e = _race("cross_war", 2, 32, (_z(8), _z(1)))
    assert (e.hazard, e.array, e.index, e.line, e.other_line) == ("WAR", "a", 7, 11, 10)
    assert (e.other_block, e.other_thread) == ("(0,0,0)", "(2,0,0)")


def test_same_block_needs_a_barrier():
    e = _race("same_block", 1, 64, (_z(1), _z(1), 0))
    assert (e.hazard, e.thread, e.other_thread, e.line, e.other_line) == ("RAW", "(33,0,0)", "(0,0,0)", 16, 14)
    assert "__syncthreads()" in str(e).split(" / ")[0]
    out = _z(1)
    simt.launch(SRC, "same_block", 1, 64, (_z(1), out, 1))
    assert out[0] == 7.0


def test_a_barrier_does_not_order_two_blocks():
    e = _race("barrier_other_block", 2, 32, (_z(1), _z(1)))
    assert (e.hazard, e.block, e.other_block) == ("RAW", "(1,0,0)", "(0,0,0)")


def test_same_warp_without_syncwarp_names_volta():
    e = _race("same_warp_rw", 1, 32, (_z(1), _z(1)))
    assert (e.hazard, e.thread, e.other_thread) == ("RAW", "(1,0,0)", "(0,0,0)")
    assert "Volta" in str(e)


def test_one_store_run_by_many_threads_says_let_one_thread_write():
    """同一行的写被一个线程块里的几个线程执行：说「只让一个线程写」，不提 __syncwarp()（同步帮不上忙）；
    不同的线程块执行同一行：两句都说。"""
    e = _race("cross_ww", 1, 2, (_z(1),))
    assert (e.thread, e.other_thread, e.line, e.other_line) == ("(1,0,0)", "(0,0,0)", 3, 3)
    assert "只让一个线程写" in str(e) and "Volta" not in str(e) and "__syncwarp" not in str(e)
    e = _race("cross_ww", 2, 1, (_z(1),))
    assert "只让一个线程写" in str(e) and "different blocks" in str(e)


def test_atomics_on_both_sides_are_benign():
    out = _z(3)
    rep = simt.launch(SRC, "atomics", 8, 64, (out,))
    assert out.tolist() == [512.0, 512.0, 512.0] and rep.atomic_ops == 1024


def test_atomic_and_plain_access_race():
    e = _race("atomic_then_plain", 2, 32, (_z(1),))
    assert e.hazard == "WAW" and "原子操作" in str(e) and "atomically" in str(e)
    e = _race("atomic_then_read", 2, 32, (_z(1), _z(2)))
    assert e.hazard == "RAW"
    res = _z(2)
    simt.launch(SRC, "own_block_atomics", 2, 32, (_z(2), res))
    assert res.tolist() == [32.0, 32.0]


def test_switch_turns_the_check_off():
    out = _z(1)
    simt.launch(SRC, "cross_ww", 2, 1, (out,), global_racecheck=False)
    assert out[0] == 1.0
    with pytest.raises(TypeError, match="global_racecheck"):
        simt.launch(SRC, "cross_ww", 2, 1, (out,), global_racecheck=1)


def test_same_value_writes_are_a_race_unless_marked_benign():
    flag = _z(1, np.int32)
    e = _race("same_value", 4, 32, (flag,))
    assert e.thread != e.other_thread or e.block != e.other_block
    simt.launch(SRC, "same_value", 4, 32, (flag,), benign_same_value=True)
    assert flag[0] == 1
    # 值不同仍是竞争
    _race("cross_ww", 2, 1, (_z(1),), benign_same_value=True)


def test_threadfence_then_flag_is_ordered():
    out, cnt = _z(1), _z(1, np.uint32)
    simt.launch(SRC, "fenced_last_block", 6, 32, (_z(6), out, cnt))
    assert out[0] == 21.0 and cnt[0] == 6


def test_own_words_and_barrier_ordered_neighbours():
    a = np.arange(100, dtype=np.float32)
    ref = a * 2 + 1
    b = _z(100)
    simt.launch(SRC, "own_words", 4, 32, (a, b, 100, 1))
    assert np.array_equal(a, ref) and b[1] == ref[1] + ref[0] and b[32] == 0 and b[33] == ref[33] + ref[32]
    # 没有屏障时，线程 i 读的 a[i - 1] 正被线程 i - 1 改写：竞争
    e = _race("own_words", 4, 32, (a, b, 100, 0))
    assert (e.hazard, e.index, e.thread, e.other_thread) == ("RAW", 0, "(1,0,0)", "(0,0,0)")


def test_course_kernels_stay_clean():
    """按行分段用 atomicAdd 的求和与两趟的全数组求和：都不报竞争。"""
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.integers(-4, 5, (3, 5000)).astype(np.float32))
    for kernel, chunks in (("split", 4), ("split", 1), ("tree", None), ("warp", None)):
        got = ck.reduce_sum(x, kernel=kernel, chunks=chunks, mode="sim")
        assert torch.equal(got, x.sum(1)), kernel
    xf = torch.from_numpy(rng.integers(-8, 9, 1 << 14).astype(np.float32))
    for version in sorted(ck.FULL_SUM_VERSIONS):
        assert float(ck.full_sum(xf, version=version, block_size=128, mode="sim")) == float(xf.sum())


# ---------------------------------------------------------------- 共享内存：消息里的两个线程、同值写入
SHARED = r"""
__global__ void many_readers(int* out) {
    __shared__ int s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    int v = s[0];
    if (threadIdx.x == 0) s[0] = v + 1;
    out[blockIdx.x * 64 + threadIdx.x] = v;
}
__global__ void atomic_then_read(int* out) {
    __shared__ int c;
    if (threadIdx.x == 0) c = 0;
    __syncthreads();
    atomicAdd(&c, 1);
    if (threadIdx.x == 5) out[blockIdx.x] = c;
}
__global__ void own_atomic_then_read(int* out) {
    __shared__ int c[64];
    c[threadIdx.x] = 0;
    __syncthreads();
    atomicAdd(&c[threadIdx.x], 1);
    out[blockIdx.x * 64 + threadIdx.x] = c[threadIdx.x];
}
__global__ void same_flag(int* out) {
    __shared__ int flag;
    flag = 1;
    __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = flag;
}
"""


def _shared_race(name, **kw):
    with pytest.raises(simt.SharedMemoryRaceError) as ei:
        simt.launch(SHARED, name, 2, 64, (_z(128, np.int32),), **kw)
    return ei.value


def test_shared_race_names_a_second_thread_among_several_readers():
    e = _shared_race("many_readers")
    assert e.thread == "(0,0,0)" and "线程 (63,0,0)" in str(e) and "thread (63,0,0)" in str(e)
    assert "多个" not in str(e) and "several" not in str(e)


def test_shared_race_with_atomics_names_the_atomic_thread_in_each_language():
    e = _shared_race("atomic_then_read")
    zh, en = str(e).split(" / ", 1)
    assert "(63,0,0)（原子操作）" in zh and "(63,0,0) (atomic)" in en
    assert not any("\u4e00" <= c <= "\u9fff" for c in en)
    out = _z(128, np.int32)
    simt.launch(SHARED, "own_atomic_then_read", 2, 64, (out,))      # 自己的原子操作之后读：没有竞争
    assert (out == 1).all()


def test_shared_same_value_writes_need_the_option():
    e = _shared_race("same_flag")
    assert e.thread != "(0,0,0)" and "(0,0,0)" in str(e)
    out = _z(128, np.int32)
    simt.launch(SHARED, "same_flag", 2, 64, (out,), benign_same_value=True)
    assert (out == 1).all()
    with pytest.raises(TypeError, match="benign_same_value"):
        simt.launch(SHARED, "same_flag", 2, 64, (out,), benign_same_value="yes")


# 比较并交换的循环（CUDA 编程指南里 double 的 atomicAdd、浮点数的 atomicMax 都这样写）：先普通地读一个猜测值，
# atomicCAS 比较不上就用它返回的值重来。读到旧值无害，所以普通的读与 atomicCAS 的写在两个方向上都不算竞争；
# 普通的写、以及与 atomicAdd 等别的原子操作混在一起时照样算。
CAS = r"""
__device__ float atomic_max_f(float* addr, float v) {
    int* a = (int*)addr;
    int old = *a, assumed;
    do {
        assumed = old;
        old = atomicCAS(a, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed))));
    } while (assumed != old);
    return __int_as_float(old);
}
__global__ void global_max(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_f(out, x[i]);
}
__global__ void block_max(const float* x, float* out) {
    __shared__ float m;
    if (threadIdx.x == 0) m = -INFINITY;
    __syncthreads();
    atomic_max_f(&m, x[blockIdx.x * blockDim.x + threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}
__global__ void cas_then_plain_write(int* flag) {
    if (blockIdx.x == 0) atomicCAS(flag, 0, 1);
    else flag[0] = 7;
}
__global__ void cas_and_add_then_read(int* c, int* out) {
    if (blockIdx.x == 0) atomicCAS(c, 0, 5);
    else atomicAdd(c, 1);
    out[blockIdx.x] = *c;
}
"""


def test_compare_and_swap_loops_are_not_races():
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    out = np.full(1, -np.inf, np.float32)
    simt.launch(CAS, "global_max", 8, 128, (x, out, np.int32(1000)))
    assert out[0] == x.max()
    y = np.resize(x, 1024)
    per_block = np.zeros(8, np.float32)
    simt.launch(CAS, "block_max", 8, 128, (y, per_block))                 # 共享内存上的同一个循环
    assert np.array_equal(per_block, y.reshape(8, 128).max(1))


def test_plain_writes_and_other_atomics_still_race_with_compare_and_swap():
    with pytest.raises(simt.GlobalMemoryRaceError, match="flag") as ei:
        simt.launch(CAS, "cas_then_plain_write", 2, 1, (np.zeros(1, np.int32),))
    assert ei.value.line == CAS.count("\n", 0, CAS.index("else flag[0] = 7")) + 1
    # 这个字也被 atomicAdd 改过：普通的读到的可能是加到一半的计数，照样算竞争
    with pytest.raises(simt.GlobalMemoryRaceError, match="c\\[0\\]"):
        simt.launch(CAS, "cas_and_add_then_read", 2, 1, (np.zeros(1, np.int32), np.zeros(2, np.int32)))


VOL = r"""
// 票号链：发布数据、__threadfence()、再写标志；下一块读标志（WAIT）、再读数据
__global__ void vol_chain(float* out, int* flag, int* ticket) {
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        float prev = 0.0f;
        if (my > 0) {
            while (WAIT == 0) { }
            __threadfence();
            prev = out[my - 1];
        }
        out[my] = prev + 1.0f;
        __threadfence();
        SET;
    }
}
// 轮流：等 *turn == 号的 volatile 读，把 *turn 改成下一个号的 volatile 写
__global__ void vol_turns(float* total, volatile int* turn, int* ticket) {
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        while (*turn != my) { }
        __threadfence();
        *total += 1.0f;
        __threadfence();
        *turn = my + 1;
    }
}
// 别的块的普通写 / 普通读，对上 volatile 的读 / 写
__global__ void vol_vs_plain(int* a, int* out, int mode) {
    if (threadIdx.x == 0) {
        if (mode == 0) { if (blockIdx.x == 0) a[0] = 1; else out[0] = ((volatile int*)a)[0]; }
        else { if (blockIdx.x == 0) out[0] = a[0]; else ((volatile int*)a)[0] = 2; }
    }
}
"""
VOLATILE_WAIT = "((volatile int*)flag)[my - 1]"
VOLATILE_SET = "((volatile int*)flag)[my] = 1"


@pytest.mark.parametrize("wait, set_", [(VOLATILE_WAIT, "atomicExch(&flag[my], 1)"),
                                        (VOLATILE_WAIT, VOLATILE_SET),
                                        ("atomicAdd(&flag[my - 1], 0)", VOLATILE_SET)])
def test_volatile_flags_between_blocks_are_not_races(wait, set_):
    """PTX 内存模型里 volatile 读写是强操作（与 .relaxed.sys 同样）：与原子操作、别的 volatile 读写之间不算数据竞争。"""
    out = _z(5)
    simt.launch(VOL, "vol_chain", 5, 32, (out, _z(5, np.int32), _z(1, np.int32)), defines={"WAIT": wait, "SET": set_})
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    total, turn = _z(1), _z(1, np.int32)
    simt.launch(VOL, "vol_turns", 6, 32, (total, turn, _z(1, np.int32)))
    assert total[0] == 6.0 and turn[0] == 6


def test_volatile_does_not_excuse_a_plain_access_or_a_missing_fence():
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:    # 标志用普通的写
        simt.launch(VOL, "vol_chain", 3, 32, (_z(3), _z(3, np.int32), _z(1, np.int32)),
                    defines={"WAIT": VOLATILE_WAIT, "SET": "flag[my] = 1"})
    assert ei.value.hazard == "RAW" and "flag[0]" in str(ei.value)
    src = VOL.replace("        __threadfence();\n        SET;", "        SET;")    # 数据写完没有 __threadfence()
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(src, "vol_chain", 3, 32, (_z(3), _z(3, np.int32), _z(1, np.int32)),
                    defines={"WAIT": VOLATILE_WAIT, "SET": VOLATILE_SET})
    assert ei.value.hazard == "RAW" and "out[0]" in str(ei.value)
    for mode, hazard in ((0, "RAW"), (1, "WAR")):
        with pytest.raises(simt.GlobalMemoryRaceError) as ei:
            simt.launch(VOL, "vol_vs_plain", 2, 32, (_z(1, np.int32), _z(1, np.int32), mode))
        assert ei.value.hazard == hazard
