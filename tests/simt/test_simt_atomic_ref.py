"""libcu++ 的 cuda::atomic_ref（模拟器自带的 <cuda/atomic> 子集）：读-改-写是原子操作，load / store 是强的读写，
memory_order 的 release / acquire 是写之前 / 读之后的 __threadfence()，竞争检查据此判断发布。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt

SRC = r"""
#include <cuda/atomic>

// 按票号轮流累加：acquire 读轮次，release 交出轮次
__global__ void ordered(float* out, int* turn, int* ticket) {
    __shared__ int seg;
    if (threadIdx.x == 0) seg = cuda::atomic_ref<int, cuda::thread_scope_device>(*ticket)++;
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<int, cuda::thread_scope_device> r(*turn);
        while (r.load(LOAD) != seg) { }
        *out += 1.0f + seg;
        r.store(seg + 1, STORE);
    }
}

// compare_exchange_weak 的最大值（cuda::std::atomic_ref：系统作用域）
__global__ void cas_max(const int* x, int* m) {
    cuda::std::atomic_ref<int> a(*m);
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    int cur = a.load(cuda::memory_order_relaxed);
    while (cur < v && !a.compare_exchange_weak(cur, v, cuda::memory_order_relaxed)) { }
}

__global__ void block_scope(int* c) {
    cuda::atomic_ref<int, cuda::thread_scope_block> a(*c);
    a.fetch_add(1);
}

__global__ void ops(int* c, int* o) {
    cuda::atomic_ref<int, cuda::thread_scope_device> a(c[0]);
    a += 2; a -= 1; ++a; a--;
    int e = a.exchange(5);
    a.fetch_max(7); a.fetch_min(6); a.fetch_or(8); a.fetch_and(14); a.fetch_xor(1);
    o[0] = a;
    o[1] = e;
}

__global__ void fsum(const float* x, float* s) {
    cuda::atomic_ref<float, cuda::thread_scope_device> a(*s);
    a.fetch_add(x[threadIdx.x], cuda::memory_order_relaxed);
}
"""
ORDERS = {"LOAD": "cuda::memory_order_relaxed", "STORE": "cuda::memory_order_relaxed"}


def _z(n, dt=np.int32):
    return np.zeros(n, dt)


@pytest.mark.parametrize("load, store", [("cuda::memory_order_acquire", "cuda::memory_order_release"),
                                         ("cuda::memory_order_seq_cst", "cuda::memory_order_seq_cst"),
                                         ("", "cuda::memory_order_release")])
def test_acquire_release_turns_run_in_ticket_order(load, store):
    out, turn, ticket = _z(1, np.float32), _z(1), _z(1)
    rep = simt.launch(SRC, "ordered", 5, 32, (out, turn, ticket), defines={"LOAD": load, "STORE": store})
    assert out[0] == 15.0 and turn[0] == 5 and ticket[0] == 5
    assert rep.schedule == "blocks-reversed"
    # 领票号一次原子操作；读轮次是 volatile 读、交出轮次是一次写（ld/st，不是原子操作）
    assert rep.atomic_ops == 5 and rep.global_store_bytes_by_array == {"out": 20, "turn": 20}


def test_relaxed_turns_leave_the_sum_unpublished():
    """relaxed 的 store 之前没有栅栏：*out 的写没有发布，下一块读它是数据竞争。"""
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(SRC, "ordered", 3, 32, (_z(1, np.float32), _z(1), _z(1)), defines=ORDERS)
    e = ei.value
    assert e.hazard == "RAW" and e.array == "out" and e.line == 12    # *out += …


def test_compare_exchange_loop_finds_the_maximum():
    x = np.random.default_rng(1).integers(0, 1000, 256).astype(np.int32)
    m = _z(1)
    simt.launch(SRC, "cas_max", 4, 64, (x, m), defines=ORDERS)
    assert m[0] == x.max()


def test_block_scope_is_atomic_only_within_the_block():
    c = _z(1)
    simt.launch(SRC, "block_scope", 1, 64, (c,), defines=ORDERS)
    assert c[0] == 64
    with pytest.raises(simt.GlobalMemoryRaceError, match="atomicAdd_block|线程块作用域"):
        simt.launch(SRC, "block_scope", 2, 32, (_z(1),), defines=ORDERS)


def test_read_modify_write_operators():
    c, o = _z(1), _z(2)
    simt.launch(SRC, "ops", 1, 1, (c, o), defines=ORDERS)
    # 0 +2 -1 ++ -- = 1；exchange(5) 返回 1；max 7、min 6、or 8 = 14、and 14 = 14、xor 1 = 15
    assert c[0] == 15 and o.tolist() == [15, 1]


def test_float_fetch_add():
    s = _z(1, np.float32)
    rep = simt.launch(SRC, "fsum", 1, 64, (np.arange(64, dtype=np.float32), s), defines=ORDERS)
    assert s[0] == 2016.0 and rep.atomic_ops == 64


SHARED = r"""
#include <cuda/atomic>
// 块内的标志：线程 0 release 写，线程 40（另一个 warp）acquire 读；PLAIN=1 时读的一方不经 atomic_ref
__global__ void shared_flag(int* out) {
    __shared__ int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    cuda::atomic_ref<int, cuda::thread_scope_block> f(flag);
    if (threadIdx.x == 0) f.store(7, cuda::memory_order_release);
    else if (threadIdx.x == 40) out[0] = PLAIN ? flag : f.load(cuda::memory_order_acquire);
}
__global__ void spaces(int* out) {
    __shared__ int s[4];
    int loc[2];
    out[0] = __isShared(s); out[1] = __isShared(out); out[2] = __isGlobal(out); out[3] = __isGlobal(s + 1);
    out[4] = __isShared(loc);
}
"""


def test_shared_memory_atomic_ref_load_and_store_are_not_races():
    """共享内存上 volatile 不算同步，所以 atomic_ref 在那里的 load / store 按原子操作执行；普通的读照样是竞争。"""
    out = _z(1)
    rep = simt.launch(SHARED, "shared_flag", 1, 64, (out,), defines={"PLAIN": 0})
    assert out[0] in (0, 7) and rep.atomic_ops == 2
    with pytest.raises(simt.SharedMemoryRaceError):
        simt.launch(SHARED, "shared_flag", 1, 64, (_z(1),), defines={"PLAIN": 1})


def test_is_shared_and_is_global():
    out = _z(5)
    simt.launch(SHARED, "spaces", 1, 1, (out,), defines={"PLAIN": 0})
    assert out.tolist() == [1, 0, 1, 0, 0]


FENCES = r"""
#include <cuda/atomic>
// relaxed 的标志，另用栅栏排定：FENCE_W 在发布数据之后、写标志之前，FENCE_R 在看到标志之后、读数据之前
__global__ void fenced(float* out, int* flag, int* ticket) {
    __shared__ int my;
    if (threadIdx.x == 0) my = atomicAdd(ticket, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        float prev = 0.0f;
        if (my > 0) {
            cuda::atomic_ref<int, cuda::thread_scope_device> f(flag[my - 1]);
            while (f.load(cuda::memory_order_relaxed) == 0) { }
            FENCE_R;
            prev = out[my - 1];
        }
        out[my] = prev + 1.0f;
        FENCE_W;
        cuda::atomic_ref<int, cuda::thread_scope_device>(flag[my]).store(1, cuda::memory_order_relaxed);
    }
}
"""


@pytest.mark.parametrize("fence_r, fence_w", [
    ("cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device)",
     "cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_device)"),
    ("cuda::std::atomic_thread_fence(cuda::std::memory_order_acquire)",
     "cuda::std::atomic_thread_fence(cuda::std::memory_order_seq_cst)")])
def test_thread_fences_order_relaxed_flags(fence_r, fence_w):
    out = _z(4, np.float32)
    simt.launch(FENCES, "fenced", 4, 32, (out, _z(4), _z(1)), defines={"FENCE_R": fence_r, "FENCE_W": fence_w})
    assert out.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_a_relaxed_fence_orders_nothing():
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(FENCES, "fenced", 4, 32, (_z(4, np.float32), _z(4), _z(1)),
                    defines={"FENCE_R": "(void)0", "FENCE_W": "cuda::atomic_thread_fence(cuda::memory_order_relaxed)"})
    assert ei.value.array == "out" and ei.value.hazard == "RAW"


def test_float_fetch_min_and_max():
    """float 没有 atomicMin / atomicMax：子集用 atomicCAS 循环（按位重解释成 int），结果与 numpy 相同。"""
    src = ("#include <cuda/atomic>\n"
           "__global__ void k(const float* x, float* p) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    cuda::atomic_ref<float, cuda::thread_scope_device>(p[0]).fetch_max(x[i]);\n"
           "    cuda::atomic_ref<float, cuda::thread_scope_block>(p[1 + blockIdx.x]).fetch_min(x[i]);\n}\n")
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    p = np.array([-np.inf] + [np.inf] * 4, np.float32)
    simt.launch(src, "k", 4, 64, (x, p))
    assert p[0] == x.max() and p[1:].tolist() == x.reshape(4, 64).min(1).tolist()


def test_double_fetch_min_and_max():
    """double 同样经 64 位的 atomicCAS 循环（__double_as_longlong / __longlong_as_double）。"""
    src = ("#include <cuda/atomic>\n"
           "__global__ void k(const double* x, double* p) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    cuda::atomic_ref<double, cuda::thread_scope_system>(p[0]).fetch_max(x[i]);\n"
           "    cuda::atomic_ref<double, cuda::thread_scope_device>(p[1]).fetch_min(x[i]);\n}\n")
    x = np.random.default_rng(2).standard_normal(256)
    p = np.array([-np.inf, np.inf])
    simt.launch(src, "k", 2, 128, (x, p))
    assert p.tolist() == [x.max(), x.min()]


OBJECTS = r"""
#include <cuda/atomic>
// 原子对象：参数数组里的 cuda::atomic<int>（主机传 int32 数组）、共享内存里的、文件作用域的，以及 cuda::std::atomic<float>
__device__ cuda::atomic<int, cuda::thread_scope_device> blocks_done;

__global__ void objects(cuda::atomic<int, cuda::thread_scope_device>* count, cuda::std::atomic<float>* total,
                        int* per_block, int* last) {
    __shared__ cuda::atomic<int, cuda::thread_scope_block> hits;
    if (threadIdx.x == 0) hits.store(0, cuda::memory_order_relaxed);     // 写之前没有初始化：store 不读旧值
    __syncthreads();
    count->fetch_add(1, cuda::memory_order_relaxed);
    *total += 0.5f;
    hits++;
    __syncthreads();
    if (threadIdx.x == 0) {
        per_block[blockIdx.x] = hits.load(cuda::memory_order_relaxed);
        int k = blocks_done.fetch_add(1, cuda::memory_order_acq_rel);
        if (k == gridDim.x - 1) *last = count->load();                  // 最后到达的线程块读总数
    }
}

__global__ void read_before_store(int* out) {
    __shared__ cuda::atomic<int, cuda::thread_scope_block> flag;
    out[0] = flag.load();        // 没有线程写过它
}
"""


def test_atomic_objects_in_global_shared_and_file_scope_memory():
    count, total, per_block, last = _z(1), _z(1, np.float32), _z(3), _z(1)
    rep = simt.launch(OBJECTS, "objects", 3, 64, (count, total, per_block, last))
    assert count[0] == 192 and total[0] == 96.0 and per_block.tolist() == [64] * 3 and last[0] == 192
    # 每个线程：count、total、hits 各一次；线程 0 另有 store、load（共享内存上按原子操作）与 blocks_done
    assert rep.atomic_ops == 3 * (64 * 3 + 3)


def test_atomic_object_read_before_any_store_is_uninitialized():
    with pytest.raises(simt.UninitializedReadError, match="flag"):
        simt.launch(OBJECTS, "read_before_store", 1, 32, (_z(1),))


def test_atomic_exchange_still_reads_the_old_value():
    """只有 store 不读旧值；atomicExch 返回旧值，写之前没初始化照样报告。"""
    src = ("__global__ void k(int* out) {\n"
           "    __shared__ int s;\n"
           "    out[0] = atomicExch(&s, 1);\n}\n")
    with pytest.raises(simt.UninitializedReadError, match="第 3 行|line 3"):
        simt.launch(src, "k", 1, 32, (_z(1),))


def test_cast_to_a_reference_names_the_object():
    """const_cast<T&>(x)、(T&)x 与 static_cast<T&>(x) 的结果是原对象本身，经它的写落在原对象上。"""
    src = ("struct Box { int v; __device__ void bump() const { const_cast<int&>(v) += 1; } };\n"
           "__device__ void twice(int& r) { r *= 2; }\n"
           "__global__ void k(int* a) {\n"
           "    Box b{a[0]}; b.bump(); a[0] = b.v;\n"
           "    twice((int&)a[1]);\n"
           "    twice(static_cast<int&>(a[2]));\n"
           "    a[3] = static_cast<int>(a[2]) + 1;\n}\n")
    a = np.array([1, 2, 3, 0], np.int32)
    simt.launch(src, "k", 1, 1, (a,))
    assert a.tolist() == [2, 4, 6, 7]


@pytest.mark.parametrize("decl, use", [("cuda::std::atomic_ref<int> a(*c);", "a.fetch_max(3)"),
                                       ("cuda::std::atomic<int>* a = (cuda::std::atomic<int>*)c;", "a->fetch_min(3)")])
def test_std_types_have_no_fetch_min_or_max(decl, use):
    """fetch_min / fetch_max 是 cuda:: 的扩展：nvcc 对 cuda::std::atomic_ref 与 cuda::std::atomic 报 has no member；
    模拟器同样拒绝，报在学习者调用它的那一行（括号里是子集里的行）。"""
    src = f"#include <cuda/atomic>\n__global__ void k(int* c, int* o) {{\n    {decl}\n    o[0] = {use};\n}}\n"
    with pytest.raises(simt.CompileError, match="cuda::atomic_ref<T, Scope>") as ei:
        simt.launch(src, "k", 1, 1, (_z(1), _z(1)))
    assert ei.value.line == 4 and "<cuda/atomic>" in str(ei.value)


def test_bitwise_read_modify_writes_are_for_integers_only():
    """nvcc：atomic_ref<float> has no member "fetch_and"；模拟器在编译时同样拒绝，报在调用的那一行。"""
    src = ("#include <cuda/atomic>\n__global__ void k(float* a, float* o) {\n"
           "    cuda::atomic_ref<float, cuda::thread_scope_device> r(*a);\n    o[0] = r.fetch_and(3.0f);\n}\n")
    with pytest.raises(simt.CompileError, match="fetch_and") as ei:
        simt.launch(src, "k", 1, 1, (_z(1, np.float32), _z(1, np.float32)))
    assert ei.value.line == 4
