"""真实内核里常见、此前被拒绝的写法：全部 CUDA 向量类型、GPUVerify 的规约注解与断言、按值传递的结构体参数、
线程束投票与位运算内置函数、更多原子操作、结构体成员的地址、cooperative groups 里模拟器不支持的组。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.simt import ctype as T

# ---------------------------------------------------------------- 向量类型

_BASES = {"char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16, "int": np.int32,
          "uint": np.uint32, "long": np.int64, "ulong": np.uint64, "longlong": np.int64, "ulonglong": np.uint64,
          "float": np.float32, "double": np.float64}


def _layout(name, n, dt):
    """vector_types.h 的布局：两个与四个分量整体对齐（最多 16 字节），一个与三个分量按分量对齐。"""
    e = np.dtype(dt).itemsize
    return n * e, (min(n * e, 16) if n in (2, 4) else e)


@pytest.mark.parametrize("base", list(_BASES))
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_vector_type_has_members_make_and_the_cuda_layout(base, n):
    name = f"{base}{n}"
    fields = "xyzw"[:n]
    src = f"""
__global__ void k({name}* v, unsigned long* info) {{
    int i = threadIdx.x;
    {name} a = make_{name}({", ".join(f"({base if base in ('float', 'double', 'int', 'char', 'short', 'long') else 'int'})(i + {j})" for j in range(n))});
    v[i] = a;
    v[i].{fields[-1]} += 1;
    if (i == 0) {{ info[0] = sizeof({name}); info[1] = alignof({name}); }}
}}
"""
    dt = _BASES[base]
    v = np.zeros(8 * n, dt)
    info = np.zeros(2, np.uint64)
    simt.launch(src, "k", 1, 8, [v, info])
    ref = np.arange(8)[:, None] + np.arange(n)[None, :]
    ref[:, -1] += 1
    assert np.array_equal(v.reshape(8, n), ref.astype(dt))
    assert tuple(int(x) for x in info) == _layout(name, n, dt)
    vt = T.VECS[name]
    assert (vt.size, vt.align, vt.wide) == (*_layout(name, n, dt), n in (2, 4))


def test_vector_accesses_count_like_the_gpu():
    src = """
__global__ void k(const float3* a, const uchar4* b, const double4* c, float* out) {
    int i = threadIdx.x;
    float3 f = a[i];
    uchar4 u = b[i];
    double4 d = c[i];
    out[i] = f.x + f.y + f.z + u.x + u.w + (float)(d.x + d.w);
}
"""
    a = np.arange(96, dtype=np.float32)
    b = np.arange(128, dtype=np.uint8)
    c = np.arange(128, dtype=np.float64)
    out = np.zeros(32, np.float32)
    rep = simt.launch(src, "k", 1, 32, [a, b, c, out])
    i = np.arange(32)
    ref = a[3 * i] + a[3 * i + 1] + a[3 * i + 2] + b[4 * i] + b[4 * i + 3] + (c[4 * i] + c[4 * i + 3])
    assert np.allclose(out, ref)
    # float3：三条 4 字节的读（每个分量一条）；uchar4：一条 4 字节的读；double4：两条 16 字节的读
    assert rep.global_load_requests == 3 + 1 + 2
    # uchar4 的一条读覆盖 128 字节 = 4 个扇区；double4 每条 512 字节 = 16 个扇区
    # 扇区：float3 每个分量的 32 个地址跨 384 字节 = 12 个扇区；uchar4 的 128 字节 = 4 个；double4 每条指令
    # 每个线程 16 字节、相隔 32 字节，各占一个扇区 = 32 个
    assert rep.global_load_sectors == 3 * 12 + 4 + 2 * 32


def test_vector_by_value_parameter():
    src = "__global__ void k(uchar4 c, float3 f, float* out) { out[threadIdx.x] = c.x + c.w + f.z; }\n"
    out = np.zeros(4, np.float32)
    simt.launch(src, "k", 1, 4, [(1, 2, 3, 4), (0.5, 0.25, 2.0), out])
    assert out.tolist() == [7.0] * 4
    with pytest.raises(TypeError, match="tuple of 3 numbers"):
        simt.launch(src, "k", 1, 4, [(1, 2, 3, 4), 1.0, out])


def test_uchar4_in_a_header_is_a_known_type(tmp_path):
    (tmp_path / "common.h").write_text("typedef unsigned int uint;\n__device__ uchar4 pack(uint v) {\n"
                                       "    return make_uchar4(v & 0xff, (v >> 8) & 0xff, 0, 255);\n}\n")
    (tmp_path / "k.cu").write_text('#include "common.h"\n__global__ void k(uchar4* o) { o[threadIdx.x] = '
                                   "pack(threadIdx.x * 257u); }\n")
    o = np.zeros(16, np.uint8)
    simt.launch(str(tmp_path / "k.cu"), "k", 1, 4, [o])
    assert o.reshape(4, 4).tolist() == [[t, t, 0, 255] for t in range(4)]


# ---------------------------------------------------------------- GPUVerify 的注解与断言

GV = r"""
#include "cuda.h"
__device__ int twice(int x) {
    __requires(__implies(__enabled(), x > 0));
    __ensures(__return_val_int() == 2 * x);
    return 2 * x;
}
__global__ void annotated(int* a, int n) {
    __requires(n == 64);
    __requires(__is_pow2(blockDim.x));
    int d = 1;
    while (__invariant(__uniform_int(d)), __global_invariant(__write_implies(a, __write_offset_bytes(a) / sizeof(int)
           == threadIdx.x)), d < n) {
        d <<= 1;
    }
    for (int k = 0; __invariant(k <= 4), __invariant(__no_read(a)), k < 4; k++) { }
    a[threadIdx.x] = twice(d);
    __assert(__implies(threadIdx.x != 0, a[threadIdx.x] == 128));
    __assert(__mod_pow2(threadIdx.x * 4, 4) == 0);
}
__global__ void failing(int* a) {
    int x = threadIdx.x;
    __assert(x < 3);
}
__global__ void assumed(int* a, int n) {
    __assume(n < 10);
    a[threadIdx.x] = n;
}
__global__ void two_thread(int* a) {
    __assert(__distinct_int(threadIdx.x));
}
__axiom(blockDim.x == 64);
"""


def test_gpuverify_specifications_are_no_ops_and_asserts_hold():
    a = np.zeros(64, np.int32)
    simt.launch(GV, "annotated", 1, 64, [a, 64])
    assert (a == 128).all()


def test_failed_assert_reports_line_and_threads():
    with pytest.raises(simt.DeviceAssertError) as ei:
        simt.launch(GV, "failing", 2, 4, [np.zeros(4, np.int32)])
    e = ei.value
    assert e.line == 23 and (e.block, e.thread) == ("(0,0,0)", "(3,0,0)")
    assert e.threads == [("(0,0,0)", "(3,0,0)"), ("(1,0,0)", "(3,0,0)")]
    assert "__assert" in str(e) and "2 thread(s)" in str(e) and isinstance(e, AssertionError)


def test_assume_is_checked_like_an_assertion():
    a = np.zeros(4, np.int32)
    simt.launch(GV, "assumed", 1, 4, [a, 7])
    assert (a == 7).all()
    with pytest.raises(simt.DeviceAssertError, match="__assume") as ei:
        simt.launch(GV, "assumed", 1, 4, [a, 12])
    assert ei.value.line == 26


def test_two_thread_predicates_inside_assert_are_refused_with_their_line(tmp_path):
    # 只有验证器能回答的查询没有函数体：nvcc 同样拒绝，CompileError
    f = tmp_path / "gv.cu"
    f.write_text(GV.split("__global__ void failing")[0] + "__global__ void two(int* a) {\n"
                 "  __assert(__distinct_int(threadIdx.x));\n}\n")
    with pytest.raises(simt.CompileError, match="__other_int") as ei:
        simt.launch(str(f), "two", 1, 4, [np.zeros(4, np.int32)])
    assert ei.value.line == GV.split("__global__ void failing")[0].count("\n") + 2


def test_a_refused_kernel_does_not_refuse_its_neighbours():
    # two_thread 被拒绝（第 30 行），同一文件的 annotated 照常运行（上一个测试）
    with pytest.raises(simt.CompileError, match="__other_int") as ei:
        simt.launch(GV, "two_thread", 1, 4, [np.zeros(4, np.int32)])
    assert ei.value.line == 30


def test_c_assert_and_ndebug():
    src = "#include <assert.h>\n__global__ void k(int* a) {\n  assert(a[threadIdx.x] >= 0);\n}\n"
    a = np.array([0, 1, -1, 2], np.int32)
    with pytest.raises(simt.DeviceAssertError, match=r"assert\(\.\.\.\)") as ei:
        simt.launch(src, "k", 1, 4, [a])
    assert ei.value.line == 3 and ei.value.thread == "(2,0,0)"
    simt.launch(src, "k", 1, 4, [a], defines={"NDEBUG": 1})


# ---------------------------------------------------------------- 内置函数与原子操作

def test_ballot_and_bit_intrinsics():
    src = r"""
__global__ void k(const int* x, unsigned* ballot, int* bits) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned m = __ballot_sync(0xffffffff, x[i] > 0);
    ballot[i] = m;
    bits[4 * i] = __popc(m);
    bits[4 * i + 1] = __clz(x[i]);
    bits[4 * i + 2] = __ffs(x[i]);
    bits[4 * i + 3] = __brev((unsigned)x[i]) == 0x80000000u;
}
"""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 1 << 20, 64).astype(np.int32)
    x[5] = 1
    x[7] = 0
    ballot = np.zeros(64, np.uint32)
    bits = np.zeros(256, np.int32)
    simt.launch(src, "k", 2, 32, [x, ballot, bits])
    for w in range(2):
        ref = sum(1 << j for j in range(32) if x[32 * w + j] > 0)
        assert (ballot[32 * w:32 * w + 32] == ref).all()
    b = bits.reshape(64, 4)
    assert (b[:, 0] == np.array([bin(int(m)).count("1") for m in ballot])).all()
    ux = x.astype(np.uint32)
    assert b[:, 1].tolist() == [32 - int(v).bit_length() for v in ux]
    assert b[:, 2].tolist() == [(int(v) & -int(v)).bit_length() for v in ux]
    assert b[5, 3] == 1 and b[7, 3] == 0


def test_ballot_checks_its_mask():
    src = "__global__ void k(unsigned* o) { if (threadIdx.x < 16) o[threadIdx.x] = __ballot_sync(0xffffffff, 1); }\n"
    with pytest.raises(simt.WarpSyncError, match="__ballot_sync"):
        simt.launch(src, "k", 1, 32, [np.zeros(32, np.uint32)])


def test_warp_votes_and_match():
    """__any_sync、__all_sync、__uni_sync 与 __match_any_sync（按线程束求值；mask 照 __ballot_sync 的规则检查）。"""
    src = r"""
__global__ void k(const int* x, const float* f, int* votes, unsigned* match) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    votes[3 * i] = __any_sync(0xffffffffu, x[i] > 100);
    votes[3 * i + 1] = __all_sync(0xffffffffu, x[i] >= 0);
    votes[3 * i + 2] = __uni_sync(0xffffffffu, x[i] % 2);
    match[i] = __match_any_sync(0xffffffffu, x[i] / 8) ^ __match_any_sync(0xffffffffu, f[i]);
}
"""
    x = np.arange(64, dtype=np.int32) * 2
    x[40] = 101
    f = np.where(np.arange(64) % 3 == 0, 1.5, -0.5).astype(np.float32)
    votes = np.zeros(192, np.int32)
    match = np.zeros(64, np.uint32)
    simt.launch(src, "k", 2, 32, [x, f, votes, match])
    v = votes.reshape(64, 3)
    assert v[:32].tolist() == [[0, 1, 1]] * 32                 # 第一个线程束：都不大于 100，都非负，都是偶数
    assert v[32:].tolist() == [[1, 1, 0]] * 32                 # 第二个：x[40] = 101（大于 100，奇数）
    for i in range(64):
        w = range(32 * (i // 32), 32 * (i // 32) + 32)
        a = sum(1 << (j % 32) for j in w if x[j] // 8 == x[i] // 8)
        b = sum(1 << (j % 32) for j in w if f[j] == f[i])
        assert match[i] == a ^ b, i
    with pytest.raises(simt.WarpSyncError, match="__all_sync"):
        simt.launch("__global__ void k(int* o) { if (threadIdx.x < 8) o[0] = __all_sync(0xffffffff, 1); }\n",
                    "k", 1, 32, [np.zeros(1, np.int32)])


def test_clock64_counts_work_and_nanosleep_runs():
    """clock64() 单调不减（模拟器里是执行的车道步数，不是时钟周期）：循环前后的差大于 0；__nanosleep 不改变结果，
    参数里越界的读照样报告。常见的写法：计时的微基准、等待之前退让一下。"""
    src = r"""
__global__ void k(const float* x, float* y, long long* ticks, int n) {
    long long t0 = clock64();
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    __nanosleep(100);
    long long t1 = clock64();
    y[threadIdx.x] = s;
    ticks[2 * threadIdx.x] = t0;
    ticks[2 * threadIdx.x + 1] = t1;
}
"""
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(32, np.float32)
    ticks = np.zeros(64, np.int64)
    simt.launch(src, "k", 1, 32, [x, y, ticks, np.int32(256)])
    assert y.tolist() == [float(x[t::32].sum()) for t in range(32)]
    t = ticks.reshape(32, 2)
    assert (t[:, 1] > t[:, 0]).all() and (t[:, 0] >= 0).all()
    with pytest.raises(simt.OutOfBoundsError):
        simt.launch("__global__ void k(const unsigned* ns) { __nanosleep(ns[threadIdx.x + 1]); }\n", "k", 1, 32,
                    [np.zeros(32, np.uint32)])


def test_more_atomics():
    src = r"""
__global__ void k(unsigned* c, int* first) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicInc(&c[0], 9u);
    atomicDec(&c[1], 100u);
    atomicOr(&c[2], 1u << (t % 32));
    atomicAnd(&c[3], ~(1u << (t % 8)));
    atomicXor(&c[4], t);
    atomicCAS(first, -1, (int)t);
}
"""
    c = np.array([0, 50, 0, 0xFFFFFFFF, 0], np.uint32)
    first = np.array([-1], np.int32)
    simt.launch(src, "k", 2, 32, [c, first])
    x = 0
    for t in range(64):
        x ^= t
    assert c.tolist() == [64 % 10, (50 - 64) % 101, 0xFFFFFFFF, 0xFFFFFF00, x]
    assert first[0] == 0          # 按线程编号执行：线程 0 先交换成功


def test_address_of_struct_members():
    src = r"""
struct Acc { float sum; float sq; };
__global__ void k(const float* x, Acc* out) {
    float v = x[threadIdx.x];
    atomicAdd(&out->sum, v);
    atomicAdd(&out[0].sq, v * v);
    Acc local;
    local.sum = 0.0f;
    float* p = &local.sum;
    *p = v;
    if (local.sum != v) out[1].sum = -1.0f;
}
"""
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(4, np.float32)
    simt.launch(src, "k", 1, 32, [x, out])
    assert out.tolist() == [x.sum(), (x * x).sum(), 0.0, 0.0]


# ---------------------------------------------------------------- 清楚的拒绝

@pytest.mark.parametrize("code, line, exc, words", [
    ("__global__ void k(char** argv) {\n}\n", 1, simt.UnsupportedError, "pointer to pointer"),
    ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n__global__ void k(int* p) {\n"
     "  cg::grid_group g = cg::this_grid();\n  p[0] = g.group_dim().x;\n}\n", 5, simt.UnsupportedError,
     "grid_group::group_dim"),
    ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n__global__ void k(int* p) {\n"
     "  cg::coalesced_group g = cg::coalesced_threads();\n  p[0] = g.thread_rank();\n}\n", 4,
     simt.UnsupportedError, "coalesced_group"),
    ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n__global__ void k(int* p) {\n"
     "  auto t = cg::tiled_partition<64>(cg::this_thread_block());\n  p[0] = t.thread_rank();\n}\n", 4,
     simt.UnsupportedError, "multi-warp tile"),
    ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n__global__ void k(int* p) {\n"
     "  auto t = cg::tiled_partition<48>(cg::this_thread_block());\n  p[0] = t.thread_rank();\n}\n", 4,
     simt.CompileError, "Size must be one of"),
])
def test_clear_refusals(code, line, exc, words):
    with pytest.raises(exc, match=words) as ei:
        simt.launch(code, "k", 1, 32, [np.zeros(32, np.int32)])
    assert ei.value.line == line


def test_function_returning_a_pointer():
    src = "__device__ int* at(int* p, int i) { return p + i; }\n__global__ void k(int* p) { *at(p, threadIdx.x) = 3; }\n"
    p = np.zeros(8, np.int32)
    simt.launch(src, "k", 1, 8, [p])
    assert (p == 3).all()


def test_call_through_a_dereferenced_function_pointer():
    src = r"""
__device__ void twice(float* v, int i) { v[i] *= 2.0f; }
__device__ void half(float* v, int i) { v[i] *= 0.5f; }
typedef void (*op_t)(float*, int);
__global__ void k(float* v, int which) {
    op_t f = which == 1 ? twice : half;
    (*f)(v, threadIdx.x);
}
"""
    v = np.ones(4, np.float32)
    simt.launch(src, "k", 1, 4, [v, 1])
    simt.launch(src, "k", 1, 4, [v, 1])
    simt.launch(src, "k", 1, 4, [v, 0])
    assert v.tolist() == [2.0] * 4


def test_warp_functions_without_sync_are_a_compile_error_as_in_nvcc():
    # nvcc 13 对 sm_90：error: identifier "__shfl_up" is undefined
    src = "__global__ void k(int* p) {\n  p[threadIdx.x] = __shfl_up(p[threadIdx.x], 1);\n}\n"
    with pytest.raises(simt.CompileError, match="__shfl_up_sync") as ei:
        simt.launch(src, "k", 1, 32, [np.zeros(32, np.int32)])
    assert ei.value.line == 2


def test_frexp_ldexp_and_more_math():
    src = r"""
__global__ void k(const float* x, float* m, int* e, float* o) {
    int i = threadIdx.x;
    int ex;
    m[i] = frexpf(x[i], &ex);
    e[i] = ex;
    o[4 * i] = ldexpf(m[i], ex);
    o[4 * i + 1] = fmodf(x[i], 3.0f);
    o[4 * i + 2] = atan2f(x[i], 2.0f);
    o[4 * i + 3] = hypotf(x[i], 4.0f);
}
"""
    x = np.linspace(-40, 100, 32).astype(np.float32)
    m, e, o = np.zeros(32, np.float32), np.zeros(32, np.int32), np.zeros(128, np.float32)
    simt.launch(src, "k", 1, 32, [x, m, e, o])
    rm, re_ = np.frexp(x)
    assert np.array_equal(m, rm) and np.array_equal(e, re_)
    o = o.reshape(32, 4)
    assert np.array_equal(o[:, 0], x)
    assert np.array_equal(o[:, 1], np.fmod(x, np.float32(3)))
    assert np.allclose(o[:, 2], np.arctan2(x, 2), rtol=1e-6) and np.allclose(o[:, 3], np.hypot(x, 4), rtol=1e-6)


def test_access_set_queries_take_any_pointer():
    src = r"""
__global__ void k(volatile unsigned* s, int* out) {
    __requires(__no_read(s) & __no_write(out));
    __ensures(__write_implies(s, __write_offset_bytes(s) == 0));
    out[threadIdx.x] = 1;
}
"""
    out = np.zeros(4, np.int32)
    simt.launch(src, "k", 1, 4, [np.zeros(1, np.uint32), out])
    assert (out == 1).all()


def test_switch_with_fallthrough_default_in_the_middle_and_break():
    src = r"""
__global__ void k(const int* x, int* o) {
    int i = threadIdx.x;
    int r = 0;
    switch (x[i]) {
    case 0: r = 10; break;
    case 1:
    case 2: r = 20;
    case 3: r += 1; break;
    default: r = -1; break;
    case 5: { r = 50; break; }
    }
    for (int j = 0; j < 3; j++) {
        switch (j) { case 1: r += 100; break; default: break; }
    }
    o[i] = r;
}
"""
    x = np.arange(8, dtype=np.int32)
    o = np.zeros(8, np.int32)
    rep = simt.launch(src, "k", 1, 8, [x, o])
    assert o.tolist() == [110, 121, 121, 101, 99, 150, 99, 99]
    assert rep.divergent_branches > 0


def test_function_pointer_parameter_takes_a_device_function_name():
    src = r"""
__device__ float twice(float v) { return 2.0f * v; }
__device__ float neg(float v) { return -v; }
typedef float (*op_t)(float);
__global__ void k(float* v, op_t f) { v[threadIdx.x] = f(v[threadIdx.x]); }
"""
    v = np.ones(4, np.float32)
    simt.launch(src, "k", 1, 4, [v, "twice"])
    simt.launch(src, "k", 1, 4, [v, "neg"])
    assert v.tolist() == [-2.0] * 4
    with pytest.raises(TypeError, match="one of"):
        simt.launch(src, "k", 1, 4, [v, "nope"])
    with pytest.raises(TypeError, match="function pointer"):
        simt.launch(src, "k", 1, 4, [v, 3])


STRUCT_REGS = r"""
struct Span { float* p; int n; };
struct Pair { Span a; Span b; };
struct Small { short s; char c; };
struct Base { int x; };
struct Derived : Base { int y; __device__ int sum() const { return x + y; } };
__device__ void fill(Span s, float v) { for (int i = 0; i < s.n; i++) s.p[i] = v; }
__global__ void spans(Pair q, float v) {
    if (threadIdx.x == 0) { fill(q.a, v); fill(q.b, -v); }
}
__global__ void regs(int* out) {
    Small m; m.s = 300; m.c = 7;
    Derived d; d.x = threadIdx.x; d.y = 10;
    out[threadIdx.x] = m.s + m.c + d.sum();
}
__global__ void spill_small(int* out) {
    Small m; m.s = 1; m.c = 2;
    Small* p = &m;
    out[0] = p->s;
}
"""


def test_struct_with_pointer_members_passed_by_value():
    a, b = np.zeros(3, np.float32), np.zeros(5, np.float32)
    simt.launch(STRUCT_REGS, "spans", 1, 32, [((a, 3), (b, 5)), 1.5])
    assert a.tolist() == [1.5] * 3 and b.tolist() == [-1.5] * 5
    with pytest.raises(TypeError, match=r"tuple of 4 values \(float\*, int, float\*, int\)"):
        simt.launch(STRUCT_REGS, "spans", 1, 32, [(1, 2), 1.5])


def test_register_structs_of_mixed_sizes_and_inheritance():
    out = np.zeros(4, np.int32)
    simt.launch(STRUCT_REGS, "regs", 1, 4, [out])
    assert out.tolist() == [317 + t for t in range(4)]
    simt.launch(STRUCT_REGS, "spill_small", 1, 1, [out])     # &m：按字节布局搬进局部内存
    assert out[0] == 1


def test_memcpy_and_memset():
    src = r"""
#include <string.h>
struct P { int a; float b; };
__global__ void k(const P* in, P* out, int* words, float* f) {
    int t = threadIdx.x;
    memcpy(&out[t], &in[t], sizeof(P));
    __builtin_memset(&words[2 * t], 0xff, 2 * sizeof(int));
    memcpy(&f[t], &in[t].a, sizeof(int));      // 按位复制：int 的位放进 float
}
__global__ void odd(int* w) { memset(w, 0, 3); }
__global__ void null_dst(int* w) { memcpy(0, w, 4); }
"""
    rng = np.random.default_rng(1)
    inp = rng.integers(-100, 100, 16).astype(np.int32)
    inp[1::2] = np.arange(8, dtype=np.float32).view(np.int32)
    out, words, f = np.zeros(16, np.int32), np.zeros(16, np.int32), np.zeros(8, np.float32)
    simt.launch(src, "k", 1, 8, [inp, out, words, f])
    assert np.array_equal(out, inp) and (words == -1).all()
    assert np.array_equal(f.view(np.int32), inp[0::2])
    words[:] = -1
    simt.launch(src, "odd", 1, 1, [words])          # 3 个字节：按字节写
    assert words[0] == np.int32(-16777216) and (words[1:] == -1).all()
    with pytest.raises(simt.OutOfBoundsError, match="null") as ei:
        simt.launch(src, "null_dst", 1, 1, [words])
    assert ei.value.line == 11


def test_pointer_casts_between_elements_of_one_size_reinterpret_the_bits():
    src = r"""
__global__ void k(int* raw, float* out) {
    int i = threadIdx.x;
    float4 v = reinterpret_cast<float4*>(raw)[i];
    out[i] = v.x + v.w;
    float* f = (float*)raw;
    f[4 * i + 1] = 2.5f;
}
__global__ void bytes(unsigned char* b, unsigned* out) { out[0] = ((unsigned*)b)[0]; }
"""
    f = np.arange(128, dtype=np.float32)
    raw, out = f.view(np.int32).copy(), np.zeros(32, np.float32)
    rep = simt.launch(src, "k", 1, 32, [raw, out])
    assert np.array_equal(out, f[0::4] + f[3::4])
    g = raw.view(np.float32)
    assert (g[1::4] == 2.5).all() and np.array_equal(g[0::4], f[0::4])
    assert rep.global_load_requests == 1           # float4：一条 128 位的读
    b, o = np.array([1, 2, 3, 4], np.uint8), np.zeros(1, np.uint32)
    simt.launch(src, "bytes", 1, 1, [b, o])           # 元素大小不同：按字节解码（小端）
    assert o[0] == 0x04030201


def test_texture_fetches_and_surfaces_are_refused_as_textures():
    src = "__global__ void k(cudaTextureObject_t t, float* o) {\n  o[threadIdx.x] = tex2D<float>(t, 0.5f, 0.5f);\n}\n"
    with pytest.raises(simt.UnsupportedError, match="纹理") as ei:
        simt.launch(src, "k", 1, 1, [0, np.zeros(1, np.float32)])
    assert ei.value.line == 2
    with pytest.raises(simt.CompileError, match="surface is not a template") as ei:      # 表面引用：CUDA 12 已移除
        simt.launch("surface<void, 2> s;\n__global__ void w(float* o) { o[0] = 1.0f; }\n", "w", 1, 1,
                    [np.zeros(1, np.float32)])
    assert ei.value.line == 1


def test_a_failed_instance_reports_the_sources_own_error():
    src = "template <typename T> __global__ void k(T* p, curandState* s) { p[0] = 1; }\n"
    with pytest.raises(simt.CompileError, match="curandState") as ei:
        simt.launch(src, "k<float>", 1, 1, [np.zeros(1, np.float32), np.zeros(1, np.float32)])
    assert ei.value.line == 1


def test_votes_evaluate_their_arguments_once():
    """投票函数的实参只求值一次：读 x 计一次请求，i++ 只加一。"""
    src = r"""
__global__ void k(const int* x, int* out) {
    int i = threadIdx.x;
    int any = __any_sync(0xffffffffu, x[i++] > 5);
    out[threadIdx.x] = any * 100 + i;
}
"""
    out = np.zeros(32, np.int32)
    rep = simt.launch(src, "k", 1, 32, [np.arange(32, dtype=np.int32), out])
    assert out.tolist() == [100 + t + 1 for t in range(32)]
    assert rep.global_load_requests == 1
