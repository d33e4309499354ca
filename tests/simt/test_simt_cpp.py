"""C++ 的一部分：函数模板（kern<256> 形式的内核名、类型与非类型形参、默认实参、显式实例化、带实参的调用）、
__mul24（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from reduction_lab import simt

SRC = r"""
template <typename T, int WIDTH>
__device__ T warp_sum(T v) {
    for (int k = WIDTH / 2; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffff, v, k);
    return v;
}

template <int BLOCK, typename T = float>
__global__ void block_sum(const T* x, T* out, int n) {
    __shared__ T s[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK + tid;
    s[tid] = i < n ? x[i] : (T)0;
    __syncthreads();
    for (int k = BLOCK / 2; k >= 32; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid < 32) {
        T v = warp_sum<T, 32>(s[tid]);
        if (tid == 0) out[blockIdx.x] = v;
    }
}

template __global__ void block_sum<128>(const float*, float*, int);
"""


@pytest.mark.parametrize("name,block,dtype", [("block_sum<128>", 128, np.float32), ("block_sum< 256 , float >", 256, np.float32),
                                             ("block_sum<64, int>", 64, np.int32)])
def test_template_kernel_launched_by_instance_name(name, block, dtype):
    n = 1000
    x = (np.arange(n) % 13).astype(dtype)
    nb = -(-n // block)
    out = np.zeros(nb, dtype)
    rep = simt.launch(SRC, name, nb, block, (x, out, n))
    assert out.sum() == x.sum() and out[0] == x[:block].sum()
    assert rep.kernel == name and rep.warp_syncs == 0


def test_signature_of_an_instance_binds_the_type_parameter():
    assert simt.kernel_signature(SRC, "block_sum<64,int>") == [
        ("x", "const int*", True), ("out", "int*", True), ("n", "int", False)]


def test_errors_inside_a_template_keep_the_template_line():
    bad = SRC.replace("s[tid] += s[tid + k];", "s[tid] += s[tid + k + 1];")
    with pytest.raises(simt.OutOfBoundsError) as ei:
        simt.launch(bad, "block_sum<128>", 8, 128, (np.ones(1000, np.float32), np.zeros(8, np.float32), 1000))
    assert ei.value.line == 16 and "block_sum<128>" in str(ei.value)


@pytest.mark.parametrize("name,exc,words", [
    ("block_sum", ValueError, "是模板"),
    ("nope<3>", ValueError, "nope"),
    ("block_sum<>", simt.UnsupportedError, "BLOCK"),
    ("block_sum<1,float,3>", simt.UnsupportedError, "too many"),
])
def test_bad_instance_names(name, exc, words):
    with pytest.raises(exc, match=words):
        simt.launch(SRC, name, 1, 64, (np.zeros(64, np.float32), np.zeros(1, np.float32), 64))


@pytest.mark.parametrize("code,want", [
    # 模板实参推导：twice(1.0f) 推出 T = float
    ("template <typename T>\n__device__ T twice(T v) { return v + v; }\n__global__ void k(float* o) {\n"
     "  o[0] = twice(1.5f);\n}", 3.0),
    # 类模板：成员的类型来自类型参数
    ("template <typename T>\nstruct Pair { T a; T b; };\n__global__ void k(float* o) {\n"
     "  Pair<float> p; p.a = 3.0f; p.b = 4.0f; o[0] = p.a + p.b;\n}", 7.0),
])
def test_deduction_and_class_templates_run(code, want):
    out = np.zeros(1, np.float32)
    simt.launch(code, "k", 1, 1, (out,))
    assert out[0] == want


@pytest.mark.parametrize("code,line,words", [
    ("template <float F>\n__global__ void k(float* o) { o[0] = F; }", 1, "template parameter"),
    ("template <int B>\n__global__ void k(float* o);\n__global__ void g(float* o) { o[0] = 1.0f; }", 1,
     "template declaration"),
])
def test_unsupported_template_forms_name_their_line(code, line, words):
    with pytest.raises(simt.UnsupportedError, match=words) as ei:
        simt.launch(code, "k" if "struct" not in code else "k", 1, 1, (np.zeros(1, np.float32),))
    assert f"第 {line} 行" in str(ei.value)


@pytest.mark.parametrize("code", ["template <int B", "template <int B>", "template <int B> __global__ void k(",
                                  "template <int B> __global__ void k(float* o) {", "template <> void f() {}",
                                  "template <int B> __global__ void k(float* o) { o[0] = B; }\n"
                                  "template __global__ void k<>(float*);"])
def test_broken_templates_raise_simulator_errors(code):
    with pytest.raises((simt.SimtError, ValueError)):
        simt.launch(code, "k<1>", 1, 1, (np.zeros(1, np.float32),))


def test_mul24_uses_the_low_24_bits():
    src = r"""
__global__ void k(int* o, unsigned* u, int a, int b) {
    int i = __mul24(blockIdx.x, blockDim.x) + threadIdx.x;
    o[i] = __mul24(a + i, b);
    u[i] = __umul24((unsigned)(a + i), (unsigned)b);
}
"""
    o, u = np.zeros(64, np.int32), np.zeros(64, np.uint32)
    a0, b = 0x1000003 - 5, -7
    simt.launch(src, "k", 2, 32, (o, u, a0, b))
    a = np.arange(64, dtype=np.int64) + a0
    sa = ((a & 0xFFFFFF) ^ 0x800000) - 0x800000
    assert o.tolist() == (sa * b).tolist()          # 第 24 位以上被丢掉：a = 2**24 + 3 时结果是 3 * b
    assert o[5] == 3 * b
    assert u.tolist() == (((a & 0xFFFFFF) * (b & 0xFFFFFF)) & 0xFFFFFFFF).tolist()


# ---------------------------------------------------------------- 文件作用域变量：__constant__、__device__、const
FILEVARS = r"""
#define N 4
const int BLOCK = 32;
__constant__ float weights[N] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ float scale;
__device__ int counter;
__device__ float partial[8];
__global__ void k(const float* x, float* y) {
    __shared__ float s[BLOCK];
    int i = blockIdx.x * BLOCK + threadIdx.x;
    s[threadIdx.x] = x[i] * weights[i % N] * scale;
    __syncthreads();
    y[i] = s[BLOCK - 1 - threadIdx.x];
    atomicAdd(&counter, 1);
    if (threadIdx.x == 0) partial[blockIdx.x] = blockIdx.x + 1;
}
__global__ void write_constant(float* y) {
    weights[0] = y[0];
}
__global__ void racy_device_var(float* y) {
    partial[0] = y[blockIdx.x];
}
"""


def test_constant_and_device_variables():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    part, cnt = np.zeros(8, np.float32), np.zeros(1, np.int32)
    rep = simt.launch(FILEVARS, "k", 2, 32, (x, y), symbols={"scale": 0.5, "partial": part, "counter": cnt})
    w = np.tile([1, 2, 3, 4], 16) * 0.5
    assert y.tolist() == (x * w).reshape(2, 32)[:, ::-1].reshape(-1).tolist()
    assert part.tolist() == [1, 2, 0, 0, 0, 0, 0, 0] and cnt[0] == 64    # __device__ 变量写回
    assert rep.global_load_requests == 2                                   # 常量内存不算全局读
    y2 = np.zeros(64, np.float32)
    simt.launch(FILEVARS, "k", 2, 32, (x, y2), symbols={"weights": [2.0], "scale": 1.0})   # 只覆盖开头
    assert y2[31] == x[0] * 2 and y2[30] == x[1] * 2


def test_constant_memory_is_read_only_in_device_code():
    """nvcc 编译得了在内核里写 __constant__ 的代码，所以不是 CompileError；CUDA 不允许它，执行到时报出。"""
    with pytest.raises(simt.SimtRuntimeError, match="symbols") as ei:
        simt.launch(FILEVARS, "write_constant", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 18


def test_device_variables_are_race_checked():
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(FILEVARS, "racy_device_var", 2, 1, (np.zeros(2, np.float32),))
    assert ei.value.array == "partial" and ei.value.index == 0


@pytest.mark.parametrize("symbols,exc,words", [
    ({"nope": 1}, simt.LaunchError, "nope"), ({"weights": np.ones(9)}, simt.LaunchError, "9"),
    ({"counter": 1.5}, TypeError, "counter"), ([1], TypeError, "symbols"),
])
def test_bad_symbols(symbols, exc, words):
    with pytest.raises(exc, match=words):
        simt.launch(FILEVARS, "k", 2, 32, (np.zeros(64, np.float32), np.zeros(64, np.float32)), symbols=symbols)


# ---------------------------------------------------------------- 向量类型、C++ 的类型转换、内部错误
VEC = r"""
__device__ float4 scale4(float4 v, float s) { return make_float4(v.x * s, v.y * s, v.z * s, v.w * s); }
__global__ void copy4(const float* x, float* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v = scale4(v, 2.0f);
        v.w += 1.0f;
        ((float4*)y)[i] = v;
    }
}
__global__ void sum4(const float4* x, float* out) {
    __shared__ float4 s[32];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    if (t == 0) {
        float acc = 0;
        for (int k = 0; k < 32; k++) acc += s[k].x + s[k].y + s[k].z + s[k].w;
        out[0] = acc;
    }
}
__global__ void misaligned(const float* x, float* y) { float4 v = *(const float4*)(x + 1); y[0] = v.x; }
__global__ void add4(const float4* x, float4* y) { y[0] = x[0] + x[1]; }
__global__ void pairs(float2* y, int2* z) {
    float2 a = make_float2(1.0f, 2.0f);
    a.y = a.x + threadIdx.x;
    y[threadIdx.x] = a;
    y[threadIdx.x].x = 5.0f;
    z[threadIdx.x] = make_int2(threadIdx.x, -static_cast<int>(threadIdx.x));
    (z + threadIdx.x)->y *= 2;
}
__global__ void bad_member(float4* y) { y[0].q = 1.0f; }
__global__ void by_value(float4 v, float* y) { y[0] = v.x; }
"""


def test_float4_loads_and_stores_count_one_wide_request_per_lane():
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(256, np.float32)
    rep = simt.launch(VEC, "copy4", 2, 32, (x, y, 64))
    ref = x * 2
    ref[3::4] += 1
    assert np.array_equal(y, ref)
    # 64 个线程各读 16 字节：2 个请求（每个 warp 一条 128 位指令），每个请求 512 字节 = 16 个扇区
    assert (rep.global_load_requests, rep.global_load_sectors, rep.global_load_bytes) == (2, 32, 1024)
    assert (rep.global_store_requests, rep.global_store_sectors) == (2, 32)


def test_shared_float4_array_and_members():
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(1, np.float32)
    rep = simt.launch(VEC, "sum4", 1, 32, (x, out))
    assert out[0] == x.sum()
    assert (rep.shared_store_requests, rep.shared_store_wavefronts, rep.shared_store_bank_conflicts) == (1, 4, 0)


def test_float2_int2_members_and_arrow():
    y, z = np.zeros(64, np.float32), np.zeros(64, np.int32)
    simt.launch(VEC, "pairs", 1, 32, (y, z))
    t = np.arange(32)
    assert y.reshape(32, 2).tolist() == np.stack([np.full(32, 5.0), 1.0 + t], 1).tolist()
    assert z.reshape(32, 2).tolist() == np.stack([t, -2 * t], 1).tolist()


@pytest.mark.parametrize("name,exc,line,words", [
    ("misaligned", simt.SimtRuntimeError, 23, "对齐"),
    ("add4", simt.CompileError, 24, "no operator"),
    ("bad_member", simt.CompileError, 33, "no member"),
])
def test_vector_errors(name, exc, line, words):
    x = np.zeros(64, np.float32)
    args = (x, x) if name != "bad_member" else (x,)
    with pytest.raises(exc, match=words) as ei:
        simt.launch(VEC, name, 1, 1, args)
    assert ei.value.line == line


def test_vector_passed_by_value_takes_a_tuple():
    y = np.zeros(4, np.float32)
    simt.launch(VEC, "by_value", 1, 1, ((2.5, 0, 0, 0), y))
    assert y[0] == 2.5
    with pytest.raises(TypeError, match="pass a tuple of 4 numbers"):
        simt.launch(VEC, "by_value", 1, 1, (1.0, y))
    with pytest.raises(TypeError, match="tuple of 4"):
        simt.launch(VEC, "by_value", 1, 1, ((1.0, 2.0), y))


def test_internal_errors_become_unsupported_with_the_line(monkeypatch):
    from reduction_lab.simt import interpreter

    def boom(self, *a):
        raise TypeError("internal")
    monkeypatch.setattr(interpreter.Machine, "b___syncthreads", boom)
    src = "__global__ void k(float* o) {\n  o[threadIdx.x] = 1.0f;\n  __syncthreads();\n}"
    with pytest.raises(simt.UnsupportedError, match="TypeError") as ei:
        simt.launch(src, "k", 1, 32, (np.zeros(32, np.float32),))
    assert ei.value.line == 3 and "第 3 行" in str(ei.value)


# ---------------------------------------------------------------- 结构体（成员都是同一种标量）
STRUCTS = r"""
struct Pair { float sum; float max; };
typedef struct { int lo, hi; } Range;
__device__ Pair combine(Pair a, Pair b) {
    Pair r;
    r.sum = a.sum + b.sum;
    r.max = fmaxf(a.max, b.max);
    return r;
}
__global__ void pair_reduce(const float* x, Pair* out, const Range* range) {
    __shared__ Pair s[64];
    int t = threadIdx.x;
    Pair p = {x[t], x[t]};
    s[t] = p;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] = combine(s[t], s[t + k]);
        __syncthreads();
    }
    if (t == 0) {
        out[0] = s[0];
        out[1].sum = range->hi - range[0].lo;
        struct Pair q = {1.0f};
        out[1].max = q.sum + q.max;
    }
}
__global__ void no_member(Pair* out) { out[0].min = 1.0f; }
"""


def test_struct_members_arrays_by_value_and_by_pointer():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(4, np.float32)
    rep = simt.launch(STRUCTS, "pair_reduce", 1, 64, (x, out, np.array([3, 10], np.int32)))
    assert out.tolist() == [x.sum(), 63.0, 7.0, 1.0]
    # 结构体按成员逐个读写：第一次写 s[t] 是两条 4 字节的共享内存写
    assert rep.shared_store_requests >= 4
    assert simt.kernel_signature(STRUCTS, "pair_reduce")[1] == ("out", "Pair*", True)


def test_struct_errors():
    with pytest.raises(simt.CompileError, match=r"\.min") as ei:
        simt.launch(STRUCTS, "no_member", 1, 1, (np.zeros(2, np.float32),))
    assert ei.value.line == 27
    mixed = "struct M { int a; short b; };\n__global__ void k(M* o) { o[1].a = 1; o[1].b = -2; }"
    o = np.zeros(4, np.int32)                   # sizeof(M) == 8：按字节布局
    simt.launch(mixed, "k", 1, 1, (o,))
    assert o.tolist() == [0, 0, 1, 0xFFFE]
    local = "__global__ void k(float* o) {\n  struct L { float a; } l;\n  o[0] = 1.0f;\n}"
    with pytest.raises(simt.UnsupportedError, match="函数内定义") as ei:
        simt.launch(local, "k", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 2


ENUMS = r"""
enum Op { SUM, MAX = 4, MIN };
enum { BLOCK = 32 };
__device__ float apply(Op op, float a, float b) { return op == SUM ? a + b : (op == MAX ? fmaxf(a, b) : fminf(a, b)); }
__global__ void k(const float* x, float* out, int op) {
    __shared__ float s[BLOCK];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    enum Op o = (Op)op;
    if (t == 0) {
        float a = s[0];
        for (int i = 1; i < BLOCK; i++) a = apply(o, a, s[i]);
        out[0] = a;
        out[1] = MIN;
    }
}
"""


@pytest.mark.parametrize("op,want", [(0, 488.0), (4, 31.0), (5, -3.0)])
def test_enums_number_like_c_and_size_arrays(op, want):
    x = np.arange(32, dtype=np.float32)
    x[5] = -3
    out = np.zeros(2, np.float32)
    simt.launch(ENUMS, "k", 1, 32, (x, out, op))
    assert out.tolist() == [want, 5.0]


# ---------------------------------------------------------------- 引用参数、#pragma unroll
REFS = r"""
__device__ void accumulate(float& acc, const float& v, int &count) { acc += v; count++; }
__device__ void swap(float &a, float &b) { float t = a; a = b; b = t; }
__device__ float twice(const float& v) { return v + v; }
__global__ void k(const float* x, float* out, int n) {
    __shared__ float s[64];
    int t = threadIdx.x;
    float acc = 0.0f;
    int cnt = 0;
#pragma unroll 4
    for (int i = t; i < n; i += blockDim.x) accumulate(acc, x[i], cnt);
    s[t] = acc;
    __syncthreads();
    if (t < 32) swap(s[t], s[t + 32]);
    __syncthreads();
    out[t] = s[t];
    out[64 + t] = cnt + twice(acc * 0.0f + 1.0f);
    if ((cnt & 1) == 2) out[0] = 0;
}
__device__ void set(float& a) { a = 1.0f; }
__global__ void rvalue(float* o) { set(o[0] + 1.0f); }
"""


def test_reference_parameters_alias_registers_and_memory():
    x = np.arange(200, dtype=np.float32)
    out = np.zeros(128, np.float32)
    simt.launch(REFS, "k", 1, 64, (x, out, 200))
    ref = np.array([x[t::64].sum() for t in range(64)])
    assert out[:64].tolist() == np.concatenate([ref[32:], ref[:32]]).tolist()      # swap(s[t], s[t + 32])
    assert out[64:].tolist() == [4 + 2.0] * 8 + [3 + 2.0] * 56                     # count++ 与 const T& 的临时值


def test_reference_errors():
    with pytest.raises(simt.CompileError, match="lvalue") as ei:
        simt.launch(REFS, "rvalue", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 21
    with pytest.raises(simt.UnsupportedError, match="引用参数") as ei:
        simt.launch("\n__global__ void kernel_ref(float& o) { o = 1.0f; }", "kernel_ref", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 2


# ---------------------------------------------------------------- cooperative groups
CG = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void block_tile_sum(const float* x, float* out, float* red) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    __shared__ float s[4];
    float v = x[block.thread_rank()];
    for (int k = tile.size() / 2; k > 0; k >>= 1) v += tile.shfl_down(v, k);
    if (tile.thread_rank() == 0) s[tile.meta_group_rank()] = v;
    block.sync();
    if (block.thread_rank() == 0) out[blockIdx.x] = s[0] + s[1] + s[2] + s[3];
    red[block.thread_rank()] = cg::reduce(tile, x[block.thread_rank()], cg::plus<float>());
}
__global__ void tiles8(const int* x, int* out) {
    auto t8 = cg::tiled_partition<8>(cg::this_thread_block());
    int v = x[threadIdx.x];
    if (threadIdx.x < 16) {
        int m = cg::reduce(t8, v, cg::greater<int>());
        int d = t8.shfl_xor(v, 1);
        out[threadIdx.x] = m * 100 + d;
        t8.sync();
    }
}
__global__ void partial_tile(const int* x, int* out) {
    auto t8 = cg::tiled_partition<8>(cg::this_thread_block());
    if (threadIdx.x < 4) out[threadIdx.x] = cg::reduce(t8, x[threadIdx.x], cg::plus<int>());
}
"""


def test_cooperative_groups_block_and_tiles():
    x = np.arange(128, dtype=np.float32)
    out, red = np.zeros(1, np.float32), np.zeros(128, np.float32)
    rep = simt.launch(CG, "block_tile_sum", 1, 128, (x, out, red))
    assert out[0] == x.sum() and rep.barriers == 1
    assert red.tolist() == np.repeat(x.reshape(4, 32).sum(1), 32).tolist()
    xi = np.arange(64, dtype=np.int32)[::-1].copy()
    o = np.zeros(64, np.int32)
    simt.launch(CG, "tiles8", 1, 64, (xi, o))
    lane = np.arange(16)
    assert o[:16].tolist() == ((63 - 8 * (lane // 8)) * 100 + xi[lane ^ 1]).tolist() and not o[16:].any()


def test_cooperative_groups_reduce_needs_the_whole_tile():
    with pytest.raises(simt.WarpSyncError, match="4") as ei:
        simt.launch(CG, "partial_tile", 1, 32, (np.arange(32, dtype=np.int32), np.zeros(32, np.int32)))
    assert ei.value.line == 28


def test_other_cooperative_groups_features_are_refused_with_a_line():
    src = CG + ("\n__device__ float f(cg::thread_block_tile<32> t, float v) { return t.shfl_down(v, 1); }\n"
                "__global__ void uses_f(float* x) { x[0] = f(cg::tiled_partition<32>(cg::this_thread_block()), x[0]); }\n")
    with pytest.raises(simt.UnsupportedError) as ei:
        simt.launch(src, "uses_f", 1, 64, (np.zeros(64, np.float32),))
    assert ei.value.line == 32 and "kernel.cu 第 32 行" in str(ei.value) and "tiled_partition" in str(ei.value)
    # 同一文件里不经过 f 的内核照常运行
    simt.launch(src, "tiles8", 1, 64, (np.zeros(64, np.int32), np.zeros(64, np.int32)))


# ---------------------------------------------------------------- 取局部变量的地址
ADDR = r"""
__device__ void minmax(const float* x, int n, float* lo, float* hi) {
    for (int i = 0; i < n; i++) { *lo = fminf(*lo, x[i]); *hi = fmaxf(*hi, x[i]); }
}
__device__ void inc4(float4* v) { v->x += 1.0f; v->w += 4.0f; }
__global__ void k(const float* x, float* out, int past) {
    float lo = 1e30f, hi = -1e30f;
    minmax(x + threadIdx.x * 4, 4, &lo, &hi);
    out[threadIdx.x * 2] = lo;
    out[threadIdx.x * 2 + 1] = hi;
    float4 v = make_float4(0, 0, 0, threadIdx.x);
    inc4(&v);
    out[64 + threadIdx.x] = v.x + v.w;
    int c = 0;
    atomicAdd(&c, 5);
    out[96 + threadIdx.x] = c;
    float* p = &lo;
    p[past] = 3;
}
"""


def test_address_of_locals():
    x = np.random.default_rng(0).standard_normal(128).astype(np.float32)
    out = np.zeros(128, np.float32)
    simt.launch(ADDR, "k", 1, 32, (x, out, 0))
    r = x.reshape(32, 4)
    assert out[:64:2].tolist() == r.min(1).tolist() and out[1:64:2].tolist() == r.max(1).tolist()
    assert out[64:96].tolist() == (1.0 + 4 + np.arange(32)).tolist() and (out[96:] == 5).all()
    with pytest.raises(simt.OutOfBoundsError, match="lo") as ei:
        simt.launch(ADDR, "k", 1, 32, (x, out, 1))
    assert ei.value.line == 18


def test_errors_in_an_included_header_name_the_header(tmp_path):
    (tmp_path / "util.cuh").write_text("// helpers\n__device__ float get(const float* x, int i) {\n"
                                       "    return x[i + 1];\n}\n", encoding="utf-8")
    (tmp_path / "main.cu").write_text('#include "util.cuh"\n__global__ void k(const float* x, float* y) {\n'
                                      "    y[threadIdx.x] = get(x, threadIdx.x);\n}\n", encoding="utf-8")
    with pytest.raises(simt.OutOfBoundsError) as ei:
        simt.launch(tmp_path / "main.cu", "k", 1, 4, (np.zeros(4, np.float32), np.zeros(4, np.float32)))
    e = ei.value
    assert (e.line, e.file, e.thread) == (3, "util.cuh", "(3,0,0)")
    assert "util.cuh 第 3 行" in str(e) and "util.cuh, line 3" in str(e)
    y = np.zeros(3, np.float32)
    simt.launch(tmp_path / "main.cu", "k", 1, 3, (np.arange(4, dtype=np.float32), y))
    assert y.tolist() == [1, 2, 3]


# ---------------------------------------------------------------- 函数指针
FNPTR = r"""
typedef float (*binop)(float, float);
__device__ float add(float a, float b) { return a + b; }
__device__ float mul(float a, float b) { return a * b; }
__device__ float fold(binop op, const float* x, int n) {
    float a = x[0];
    for (int i = 1; i < n; i++) a = op(a, x[i]);
    return a;
}
__global__ void k(const float* x, float* out, int null_lane) {
    binop op = (threadIdx.x % 2) ? mul : &add;
    float (*g)(float, float) = add;
    float4 v = (threadIdx.x % 2) ? make_float4(1, 2, 3, 4) : make_float4(5, 6, 7, 8);
    out[threadIdx.x] = fold(op, x, 4) + g(0.0f, 0.5f) + v.y;
    binop z = 0;
    if (threadIdx.x == null_lane) out[0] = z(1.0f, 2.0f);
}
"""


def test_function_pointers_per_thread():
    x = np.array([1, 2, 3, 4], np.float32)
    out = np.zeros(8, np.float32)
    simt.launch(FNPTR, "k", 1, 8, (x, out, -1))
    assert out.tolist() == [10.5 + 6, 24.5 + 2] * 4
    with pytest.raises(simt.SimtRuntimeError, match="null function pointer") as ei:
        simt.launch(FNPTR, "k", 1, 8, (x, out, 5))
    assert (ei.value.line, ei.value.thread) == (16, "(5,0,0)")


CONSTEXPR = r"""
constexpr int BLOCK = 64;
constexpr int HALF = BLOCK / 2;
__device__ constexpr float two() { return 2.0f; }
__global__ void k(const float* x, float* out) {
    __shared__ float s[BLOCK];
    constexpr int W = 32;
    static constexpr unsigned FULL = 0xffffffffu;
    s[threadIdx.x] = x[threadIdx.x] * two();
    __syncthreads();
    if (threadIdx.x < HALF) s[threadIdx.x] += s[threadIdx.x + HALF];
    __syncthreads();
    if (threadIdx.x < W) {
        float v = s[threadIdx.x];
        for (int k = W / 2; k > 0; k >>= 1) v += __shfl_down_sync(FULL, v, k);
        if (threadIdx.x == 0) out[0] = v;
    }
}
"""


def test_constexpr_constants_and_functions():
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(1, np.float32)
    simt.launch(CONSTEXPR, "k", 1, 64, (x, out))
    assert out[0] == 2 * x.sum()


LOCAL_CONST = r"""
__global__ void k(const float* x, float* out, int m) {
    const int N = 4;
    constexpr int B = 32;
    __shared__ float s[B * 2];
    float a[N];
    for (int i = 0; i < N; i++) a[i] = x[threadIdx.x * N + i];
    s[threadIdx.x] = a[0] + a[3];
    __syncthreads();
    if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < 2 * B; i++) t += s[i]; out[0] = t; }
#if VLA
    float bad[m];
#endif
}
"""


def test_local_constants_size_arrays_but_variables_do_not():
    x = np.arange(256, dtype=np.float32)
    out = np.zeros(1, np.float32)
    simt.launch(LOCAL_CONST, "k", 1, 64, (x, out, 3))
    r = x.reshape(64, 4)
    assert out[0] == (r[:, 0] + r[:, 3]).sum()
    with pytest.raises(simt.UnsupportedError, match="non-constant array size") as ei:
        simt.launch(LOCAL_CONST, "k", 1, 64, (x, out, 3), defines={"VLA": 1})
    assert ei.value.line == 12


# ---------------------------------------------------------------- 这些源码是真正的 CUDA：nvcc 接受，故意写错的内核 nvcc 同样拒绝
_NVCC = shutil.which("nvcc")
# 临时对象：函数对象 MaxOp{} / SumOp() 作实参，return {m, d}，MD{…} 作值（在线 softmax 的 (m, d) 对）
TEMPS = r"""
struct MaxOp { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };
struct MD { float m; float d; };

template <typename Op>
__device__ float warp_reduce(float v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ MD combine(MD a, MD b) {
    float m = fmaxf(a.m, b.m);
    return {m, a.d * __expf(a.m - m) + b.d * __expf(b.m - m)};
}

__global__ void temps(const float* x, float* out) {
    float v = x[threadIdx.x];
    float mx = warp_reduce(v, MaxOp{});
    float s = warp_reduce(v, SumOp());
    MD acc = MD{-INFINITY, 0.0f};
    acc = combine(acc, MD{v, 1.0f});
    for (int o = 16; o > 0; o >>= 1)
        acc = combine(acc, MD{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.d, o)});
    MD half = MD{1.0f};
    if (threadIdx.x == 0) { out[0] = mx; out[1] = s; out[2] = acc.m; out[3] = acc.d; out[4] = half.m + half.d; }
}

struct Busy { float k; __device__ Busy() : k(2.0f) {} __device__ float operator()(float a) const { return k * a; } };
__device__ float apply(Busy b, float a) { return b(a); }
__global__ void busy_ctor(float* out) {
    out[0] = apply(Busy(), 1.0f);
}
"""


def test_temporaries_functors_and_braced_returns():
    x = np.linspace(-3, 2, 32, dtype=np.float32)
    out = np.zeros(5, np.float32)
    simt.launch(TEMPS, "temps", 1, 32, (x, out))
    d = np.exp(x - x.max()).sum()
    assert out[0] == x.max() and out[2] == x.max() and out[4] == 1.0
    assert abs(out[1] - x.sum()) < 1e-4 and abs(out[3] - d) < 1e-4 * d
    # 做了事情的构造函数（成员初始化 k(2.0f)）的临时对象作实参
    one = np.zeros(1, np.float32)
    simt.launch(TEMPS, "busy_ctor", 1, 1, (one,))
    assert one[0] == 2.0


# lambda：不捕获、按值捕获（[=]、[a, b]）、泛型参数 auto、mutable 的状态、立即调用、作模板实参、外层的常量
LAMBDAS = r"""
template <typename Op>
__device__ float warp_fold(float v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__global__ void lambdas(float* out, const float* in, float scale, int n) {
    constexpr int W = 32;
    float v = in[threadIdx.x];
    auto add = [](auto a, auto b) { return a + b; };
    auto affine = [scale, n](float a) { return a * scale + n; };
    int count = 0;
    auto bump = [count]() mutable { return ++count; };
    bump();
    int twice = bump();
    const float* p = in;
    auto at = [=](int i) { return p[i] * scale; };
    float s = warp_fold(v, add);
    float m = warp_fold(v, [](float a, float b) { return fmaxf(a, b); });
    float lane = [](int i) { return (float)(W - i); }(threadIdx.x);
    out[8 + threadIdx.x] = lane;
    if (threadIdx.x == 0) { out[0] = s; out[1] = m; out[2] = affine(1.0f); out[3] = twice + count; out[4] = at(5); }
}
__global__ void by_reference(float* out) {
    float acc = 0.0f;
    auto add = [&](float a) { acc += a; };
    add(1.0f);
    out[0] = acc;
}
__global__ void shared_inside(float* out) {
    __shared__ float buf[32];
    buf[threadIdx.x] = threadIdx.x;
    __syncthreads();
    auto get = [](int i) { return buf[i]; };
    out[threadIdx.x] = get(31 - threadIdx.x);
}
struct Pair { float m; float s; };
__global__ void references(const float* x, float* out, int n) {
    float sum = 0.0f, last = -1.0f;
    int hits = 0;
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    Pair p = {-INFINITY, 0.0f};
    const float* row = x + threadIdx.x * n;
    auto take = [&](int j) {                    // 隐式按引用：sum、row、hits、part、p、last（第一次用到的顺序）
        float v = row[j];
        sum += v;
        if (v > 0.0f) hits++;
        part[j % 4] += v;
        p.m = fmaxf(p.m, v);
        last = v;
    };
    for (int j = 0; j < n; j++) take(j);
    auto scale = [&sum, n](float k) { sum *= k / n; };   // 显式：sum 按引用，n 按值
    int base = 10;
    auto add = [=, &hits](int k) { hits += k + base; };  // 默认按值，hits 按引用
    base = 1000;                                // 按值捕获的是创建 lambda 时的 10
    scale(2.0f);
    add(1);
    auto outer = [&]() { auto inner = [&]() { p.s += 1.0f; }; inner(); inner(); };   // 嵌套：内层经外层的引用
    outer();
    float m = warp_fold(sum, [&](float a, float b) { return a + b + 0.0f * last; });
    out[threadIdx.x] = sum;
    out[32 + threadIdx.x] = hits;
    out[64 + threadIdx.x] = part[0] + 10.0f * part[3];
    out[96 + threadIdx.x] = p.m + p.s;
    if (threadIdx.x == 0) out[128] = m;
}
__device__ void bump(float& acc, int k) { auto g = [&]() { acc += k; }; g(); g(); }
template <typename T> __device__ T twice(T v) { T r = 0; auto add = [&](T a) { r += a; }; add(v); add(v); return r; }
template <typename T> __device__ T scaled(T v, T k) { auto f = [=](T a) { return a * k; }; return f(v); }
struct Two { float a; float b; };
__global__ void references_more(const float* x, float* out) {
    float acc = 0.0f;
    bump(acc, 3);                                   // 引用形参再按引用捕获
    const float* q = x;
    auto advance = [&]() { q += 1; };               // 按引用捕获的指针：改的是指针本身
    advance();
    advance();
    Two s{1.0f, 2.0f};
    auto swap = [&]() { float t = s.a; s.a = s.b; s.b = t; };
    swap();
    for (int i = 0; i < 3; i++) { auto f = [&]() { acc += i; }; f(); }
    out[threadIdx.x] = acc + q[threadIdx.x] * 100 + s.a * 1000 + twice(0.5f) + twice(2) * 10000
                       + scaled(1.5f, 2.0f) * 100000 + scaled(7, 3) * 1000000;
}
__global__ void racy_lambda(float* out) {
    __shared__ float buf[64];
    auto put = [&](float v) { buf[threadIdx.x] = v; };
    put(threadIdx.x);
    out[threadIdx.x] = buf[63 - threadIdx.x];      // 少了 __syncthreads()
}
__global__ void const_address(float* out) {
    const int k = 3;
    auto f = [&]() { const int* q = &k; return *q; };
    out[0] = f();
}
"""


def test_lambdas_run_by_value_and_use_shared_variables_directly():
    x = np.linspace(-3, 2, 32, dtype=np.float32)
    out = np.zeros(40, np.float32)
    simt.launch(LAMBDAS, "lambdas", 1, 32, (out, x, np.float32(0.5), np.int32(4)))
    assert abs(out[0] - x.sum()) < 1e-4 and out[1] == x.max()
    assert out[2:5].tolist() == [4.5, 2.0, x[5] * np.float32(0.5)]     # 按值捕获：外层的 count 仍是 0
    assert out[8:].tolist() == [32.0 - i for i in range(32)]
    one = np.zeros(1, np.float32)
    simt.launch(LAMBDAS, "by_reference", 1, 1, (one,))                  # [&]：lambda 里改的是外层的 acc
    assert one[0] == 1.0
    # lambda 里直接用外层的 __shared__ 数组（C++ 里不算捕获）：模拟器的闭包存它的地址，读到的是同一块共享内存
    sh = np.zeros(32, np.float32)
    simt.launch(LAMBDAS, "shared_inside", 1, 32, (sh,))
    assert sh.tolist() == [31.0 - i for i in range(32)]


def test_lambdas_capture_by_reference():
    """按引用捕获（[&]、[&x]、[=, &x]、嵌套的 [&]、作模板实参）：lambda 里的修改落在外层的变量上，
    按值捕获的仍是创建时的值。闭包的成员是外层变量的地址（数组是首元素的地址）。"""
    n = 8
    x = np.random.default_rng(7).standard_normal(32 * n).astype(np.float32)
    out = np.zeros(129, np.float32)
    simt.launch(LAMBDAS, "references", 1, 32, (x, out, np.int32(n)))
    r = x.reshape(32, n)
    s = r.sum(1, dtype=np.float32) * np.float32(2.0 / n)
    np.testing.assert_allclose(out[:32], s, rtol=1e-5, atol=1e-6)
    assert out[32:64].tolist() == ((r > 0).sum(1) + 1 + 10).tolist()     # add(1)：hits += 1 + 10（base 在创建时是 10）
    np.testing.assert_allclose(out[64:96], r[:, 0::4].sum(1) + 10 * r[:, 3::4].sum(1), rtol=1e-5, atol=1e-5)
    assert out[96:128].tolist() == (r.max(1) + 2.0).tolist()             # 内层的 lambda 加了两次 1
    np.testing.assert_allclose(out[128], s.sum(), rtol=1e-4)
    # 引用形参、指针、结构体按引用捕获，循环里的 lambda，函数模板里的 lambda（每个实例有自己的闭包类型）
    more = np.zeros(32, np.float32)
    simt.launch(LAMBDAS, "references_more", 1, 32, (np.arange(64, dtype=np.float32), more))
    assert more.tolist() == [9 + (t + 2) * 100 + 2000 + 1 + 40000 + 300000 + 21000000 for t in range(32)]
    # lambda 里写的共享内存照样检查竞争：写在 lambda 里、读在外面，中间少了 __syncthreads()
    with pytest.raises(simt.SharedMemoryRaceError) as ei:
        simt.launch(LAMBDAS, "racy_lambda", 1, 64, (np.zeros(64, np.float32),))
    assert ei.value.line == LAMBDAS.count("\n", 0, LAMBDAS.index("out[threadIdx.x] = buf[63 - threadIdx.x]")) + 1
    # 隐式 [&] 取常量的地址（clang 因此捕获它）：模拟器认不出这种捕获，拒绝并指出 lambda 所在的行
    with pytest.raises(simt.UnsupportedError, match="显式的") as ei:
        simt.launch(LAMBDAS, "const_address", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == LAMBDAS.count("\n", 0, LAMBDAS.index("auto f = [&]() { const int* q")) + 1


# cuda::std::numeric_limits（<cuda/std/limits>）：设备代码里取 -inf 与各类型的上下限
LIMITS = r"""
#include <cuda/std/limits>
template <typename T> __device__ T row_max(const T* x, int n) {
    T m = cuda::std::numeric_limits<T>::lowest();
    for (int k = 0; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}
__global__ void limits(const float* x, float* f, double* d, long long* i, unsigned long long* u, int n) {
    using L = cuda::std::numeric_limits<float>;
    if (threadIdx.x == 0) {
        f[0] = -L::infinity(); f[1] = L::max(); f[2] = L::min(); f[3] = L::lowest(); f[4] = L::epsilon();
        f[5] = L::denorm_min(); f[6] = L::quiet_NaN(); f[7] = row_max(x, n);
        d[0] = cuda::std::numeric_limits<double>::max(); d[1] = cuda::std::numeric_limits<double>::epsilon();
        d[2] = cuda::std::numeric_limits<double>::infinity();
        i[0] = cuda::std::numeric_limits<int>::max(); i[1] = cuda::std::numeric_limits<int>::min();
        i[2] = cuda::std::numeric_limits<long long>::lowest(); i[3] = cuda::std::numeric_limits<short>::max();
        i[4] = cuda::std::numeric_limits<float>::digits + cuda::std::numeric_limits<int>::is_signed;
        u[0] = cuda::std::numeric_limits<unsigned>::max(); u[1] = cuda::std::numeric_limits<unsigned long long>::max();
    }
}
"""


def test_cuda_std_numeric_limits_have_the_libcu_values():
    x = np.array([-3.0, 7.5, 2.0], np.float32)
    f, d = np.zeros(8, np.float32), np.zeros(3, np.float64)
    i, u = np.zeros(5, np.int64), np.zeros(2, np.uint64)
    simt.launch(LIMITS, "limits", 1, 32, (x, f, d, i, u, np.int32(3)))
    fi, di = np.finfo(np.float32), np.finfo(np.float64)
    assert f[0] == -np.inf and f[1] == fi.max and f[2] == fi.tiny and f[3] == fi.min and f[4] == fi.eps
    assert f[5] == np.float32(1.40129846e-45) and np.isnan(f[6]) and f[7] == 7.5
    assert d.tolist() == [di.max, di.eps, np.inf]
    assert i.tolist() == [2 ** 31 - 1, -2 ** 31, -2 ** 63, 2 ** 15 - 1, 25]
    assert u.tolist() == [2 ** 32 - 1, 2 ** 64 - 1]
    # <limits> 的 std::numeric_limits 在内核里 nvcc 也拒绝（constexpr __host__ 函数）：报错里给出设备代码的写法
    with pytest.raises(simt.UnsupportedError, match="cuda::std::numeric_limits") as ei:
        simt.launch("#include <limits>\n__global__ void k(float* o) { o[0] = -std::numeric_limits<float>::infinity(); }",
                    "k", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 1


# <type_traits> 与 <cuda/std/type_traits>：模板里按类型分支（if constexpr）、选类型（conditional_t）、
# 按条件启用重载（enable_if_t）；这些都是编译期的，模拟器看到的是 clang 求出的结果
TRAITS = r"""
#include <type_traits>
#include <cuda/std/type_traits>
#include <cuda_fp16.h>
template <typename T> __device__ float widen(T v) {
    if constexpr (std::is_same_v<T, __half>) return __half2float(v);
    else if constexpr (std::is_floating_point<T>::value) return (float)v;
    else return 1000.0f + (float)v;
}
template <typename T> using acc_t = std::conditional_t<std::is_integral_v<T>, long long, float>;
template <typename T, std::enable_if_t<cuda::std::is_signed_v<T>, int> = 0> __device__ int sign_of(T v) { return v < 0 ? -1 : 1; }
template <typename T, std::enable_if_t<!cuda::std::is_signed_v<T>, int> = 0> __device__ int sign_of(T) { return 2; }
__global__ void traits(const float* x, const int* n, const __half* h, float* out) {
    int t = threadIdx.x;
    acc_t<int> big = (long long)n[t] * 3000000000LL;
    acc_t<float> f = x[t];
    out[t] = widen(x[t]) + widen(n[t]) + widen(h[t]);
    out[32 + t] = (float)(big / 1000000000LL) + f + sizeof(acc_t<int>) + sizeof(acc_t<float>);
    out[64 + t] = sign_of(n[t] - 16) + 10 * sign_of((unsigned)t);
}
"""


def test_type_traits_branch_and_pick_types_at_compile_time():
    x = np.linspace(-2, 2, 32, dtype=np.float32)
    n = np.arange(32, dtype=np.int32)
    h = np.full(32, 0.5, np.float16)
    out = np.zeros(96, np.float32)
    simt.launch(TRAITS, "traits", 1, 32, (x, n, h, out))
    np.testing.assert_allclose(out[:32], x.astype(np.float64) + 1000 + n + 0.5, rtol=1e-6)
    np.testing.assert_allclose(out[32:64], n.astype(np.int64) * 3000000000 // 1000000000 + x.astype(np.float64) + 8 + 4, rtol=1e-6)
    assert out[64:].tolist() == [(-1 if k < 16 else 1) + 20 for k in range(32)]


# 基于范围的 for：定长的局部数组、按引用改写元素、continue、结构体的数组成员、共享内存数组；
# 范围是指针或初始化列表时拒绝（指出行并给出改法）
RANGE_FOR = r"""
struct Acc { float v[3]; };
__global__ void range_for(const float* x, float* o) {
    float a[4];
    for (int j = 0; j < 4; j++) a[j] = x[threadIdx.x * 4 + j];
    float s = 0.0f;
    for (float v : a) s += v;
    for (auto& v : a) v *= 2.0f;
    for (const float &v : a) {
        if (v > 100.0f) continue;
        s += v;
    }
    Acc acc = {{1.0f, 2.0f, 3.0f}};
    for (float w : acc.v) s += w;
    __shared__ int sh[8];
    if (threadIdx.x < 8) sh[threadIdx.x] = threadIdx.x;
    __syncthreads();
    int t = 0;
    for (int q : sh) t += q;
    o[threadIdx.x] = s + t;
}
__global__ void range_racy(float* o) {
    __shared__ float sh[32];
    sh[threadIdx.x] = threadIdx.x;
    float t = 0.0f;
    for (float q : sh) t += q;
    o[threadIdx.x] = t;
}
__global__ void range_list(float* o) {
    float s = 0.0f;
    for (float v : {1.0f, 2.0f}) s += v;
    o[0] = s;
}
__global__ void range_moves(float* o) {
    Acc a = {{1.0f, 2.0f, 3.0f}}, b = {{4.0f, 5.0f, 6.0f}};
    Acc* p = &a;
    float t = 0.0f;
    for (float v : p->v) { t += v; p = &b; }
    o[0] = t;
}
"""
RANGE_ROW = r"""
__global__ void range_row(float* o) {
    float m[2][2] = {{1.0f, 2.0f}, {3.0f, 4.0f}};
    int r = 0;
    float t = 0.0f;
    for (float v : m[r]) { t += v; r = 1; }
    o[0] = t;
}
// 范围带下标：下标里的变量循环体不改，每轮求出的是同一行
__global__ void range_rows(const float* x, float* o) {
    __shared__ float tile[4][32];
    tile[threadIdx.x / 32][threadIdx.x % 32] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x < 4) {
        float t = 0.0f;
        for (float v : tile[threadIdx.x]) t += v;
        int r = threadIdx.x;
        for (float& v : tile[2 * r - r]) v *= 2.0f;
        for (const float& v : tile[r]) t += v;
        o[threadIdx.x] = t;
    }
}
__device__ int pick(int r) { return r; }
__global__ void range_call(float* o) {
    float m[2][2] = {{1.0f, 2.0f}, {3.0f, 4.0f}};
    float t = 0.0f;
    for (float v : m[pick(1)]) t += v;
    o[0] = t;
}
"""


def test_range_for_over_arrays():
    x = (np.arange(32 * 4, dtype=np.float32) * 0.25).reshape(32, 4)
    o = np.zeros(32, np.float32)
    simt.launch(RANGE_FOR, "range_for", 1, 32, (x.reshape(-1), o))
    want = x.sum(1) + np.where(2 * x > 100, 0, 2 * x).sum(1) + 6 + 28
    np.testing.assert_array_equal(o, want.astype(np.float32))
    # 每个线程都读整个共享数组，却没有屏障：与按下标写的循环一样报竞争，指向这个 for 所在的行
    with pytest.raises(simt.SharedMemoryRaceError) as ei:
        simt.launch(RANGE_FOR, "range_racy", 1, 32, (np.zeros(32, np.float32),))
    assert ei.value.line == 26
    # 花括号列表作范围：nvcc 接受（经 CUDA 头文件得到 <initializer_list>），模拟器拒绝并给出改法，不说 nvcc 会报错
    with pytest.raises(simt.UnsupportedError, match="定长数组") as ei:
        simt.launch(RANGE_FOR, "range_list", 1, 1, (np.zeros(1, np.float32),))
    assert "nvcc 接受" in str(ei.value) and ei.value.line == 31
    # C++ 只在开始时求一次范围；循环体改了范围里的变量、或范围带下标时，降低成按下标的循环会每轮重新求它：拒绝
    for src, name, line in ((RANGE_FOR, "range_moves", 38), (RANGE_ROW, "range_row", 6), (RANGE_ROW, "range_call", 27)):
        with pytest.raises(simt.UnsupportedError, match="函数调用、赋值或自增") as ei:
            simt.launch(src, name, 1, 1, (np.zeros(1, np.float32),))
        assert ei.value.line == line
    # 带下标的范围，下标里的变量循环体不改：按行求和
    x = np.arange(128, dtype=np.float32)
    o = np.zeros(4, np.float32)
    simt.launch(RANGE_ROW, "range_rows", 1, 128, (x, o))
    np.testing.assert_array_equal(o, 3 * x.reshape(4, 32).sum(1))


# 结构化绑定：结构体按值（改的是副本）、auto&（改的是原对象）、const auto 接函数的返回值、
# 数组按值与按引用；成员都在基类里的结构体（nvcc 接受）拒绝并说明
BINDINGS = r"""
struct MS { float m, s; };
struct Tagged : MS {};
__device__ MS stats(const float* x, int n) {
    float m = x[0], s = 0.0f;
    for (int i = 1; i < n; i++) m = fmaxf(m, x[i]);
    for (int i = 0; i < n; i++) s += x[i] - m;
    return {m, s};
}
__global__ void bindings(const float* x, float* o) {
    MS p = {1.0f, 2.0f};
    auto [a, b] = p;
    a = 10.0f;
    auto& [c, d] = p;
    d = 5.0f;
    const auto [m, s] = stats(x + 4 * threadIdx.x, 4);
    float arr[2] = {7.0f, 8.0f};
    auto [h, i] = arr;
    h = 0.0f;
    auto& [j, l] = arr;
    j = 100.0f;
    float* out = o + 8 * threadIdx.x;
    out[0] = a; out[1] = b; out[2] = c; out[3] = p.s; out[4] = m; out[5] = s; out[6] = i + l; out[7] = arr[0];
}
__global__ void from_base(float* o) {
    Tagged q;
    q.m = 1.0f;
    q.s = 2.0f;
    auto [u, v] = q;
    o[0] = u + v;
}
"""


def test_structured_bindings_alias_like_cxx():
    x = np.arange(32 * 4, dtype=np.float32) * 0.5
    o = np.zeros(32 * 8, np.float32)
    simt.launch(BINDINGS, "bindings", 1, 32, (x, o))
    r = x.reshape(32, 4)
    m = r.max(1)
    want = np.stack([np.full(32, 10.0), np.full(32, 2.0), np.full(32, 1.0), np.full(32, 5.0), m,
                     (r - m[:, None]).sum(1), np.full(32, 16.0), np.full(32, 100.0)], 1).astype(np.float32)
    np.testing.assert_array_equal(o.reshape(32, 8), want)
    with pytest.raises(simt.UnsupportedError, match="基类") as ei:
        simt.launch(BINDINGS, "from_base", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 29


# 花括号列表作实参与赋值的右边：形参或左边是结构体时是那个类型的临时对象（与 Pair{a, b} 相同）
BRACED = r"""
struct MS { float m, s; };
__device__ MS merge(MS a, MS b) {
    float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
struct Acc {
    MS v;
    __device__ void add(MS o) { v = merge(v, o); }
};
__global__ void braced(const float* x, float* o) {
    float a = x[threadIdx.x];
    MS r = merge({a, 1.0f}, {0.0f, 1.0f});
    Acc acc;
    acc.v = {a, 1.0f};
    acc.add({a, 1.0f});
    o[2 * threadIdx.x] = r.m + r.s;
    o[2 * threadIdx.x + 1] = acc.v.m + acc.v.s;
}
// 标量的花括号列表：实参 f({x})、return {v};、赋值 x = {} 与 x = {7}（空的是 0；收窄的转换 nvcc 与 clang 都拒绝）
__device__ float twice(float v) { return {2.0f * v}; }
__device__ int pick(int a, unsigned b) { return a + (int)b; }
__global__ void braced_scalars(float* o, int* io) {
    float x = o[threadIdx.x];
    o[threadIdx.x] = twice({x});
    io[threadIdx.x] = pick({}, {3u});
    float z = 5.0f;
    z = {};
    int w;
    w = {7};
    if (threadIdx.x == 0) { o[32] = z; io[32] = w; }
}
// 结构体数组的初始化列表：一项是整个元素（结构体的值或它的花括号列表），少写的为 0；二维的逐行写；按花括号省略逐个标量
__device__ MS mk(float x) { return {x, 2.0f * x}; }
__global__ void struct_array_init(float* o) {
    MS p = mk(1.0f);
    MS arr[3] = {p, mk(3.0f)};
    MS grid[2][2] = {{mk(4.0f), {5.0f, 6.0f}}, {p}};
    float4 v[2] = {make_float4(1.0f, 2.0f, 3.0f, 4.0f), {5.0f}};
    MS flat[2] = {7.0f, 8.0f, 9.0f};
    o[0] = arr[1].s; o[1] = arr[2].m + arr[2].s; o[2] = grid[0][1].s; o[3] = grid[1][0].s; o[4] = grid[1][1].m;
    o[5] = v[0].w + v[1].x + v[1].y; o[6] = flat[1].m + flat[1].s;
}
"""


def test_braced_lists_as_arguments_and_right_hand_sides():
    x = np.linspace(-2, 2, 32, dtype=np.float32)
    o = np.zeros(64, np.float32)
    simt.launch(BRACED, "braced", 1, 32, (x, o))
    xd = x.astype(np.float64)
    m = np.maximum(xd, 0)
    want_r = m + np.exp(xd - m) + np.exp(-m)
    np.testing.assert_allclose(o[0::2], want_r, rtol=1e-6)
    np.testing.assert_allclose(o[1::2], xd + 2.0, rtol=1e-6)
    o, io = np.arange(33, dtype=np.float32), np.full(33, -1, np.int32)
    simt.launch(BRACED, "braced_scalars", 1, 32, (o, io))
    assert o[:32].tolist() == (2.0 * np.arange(32)).tolist() and o[32] == 0.0
    assert io.tolist() == [3] * 32 + [7]
    o = np.zeros(7, np.float32)
    simt.launch(BRACED, "struct_array_init", 1, 1, (o,))
    assert o.tolist() == [6.0, 0.0, 6.0, 2.0, 0.0, 9.0, 9.0]
    # 收窄的转换（float 到 int）在花括号里是错误，nvcc 同样拒绝
    narrowing = "__device__ int f(int v) { return v; }\n__global__ void k(float* o, int* io) { io[0] = f({o[0]}); }\n"
    with pytest.raises(simt.CompileError, match="narrow"):
        simt.launch(narrowing, "k", 1, 1, (o, io))
    # 复合赋值的右边是花括号列表：C++ 允许，nvcc 13 拒绝，模拟器跟 nvcc
    compound = "__global__ void k(int* io) {\n    int w = 1;\n    w += {2};\n    io[0] = w;\n}\n"
    with pytest.raises(simt.CompileError, match="brace-enclosed") as ei:
        simt.launch(compound, "k", 1, 1, (io,))
    assert ei.value.line == 3


# 构造函数与默认成员初值：成员初始化列表、默认实参、函数体里调用成员函数、隐式转换、
# 默认成员初值（声明、{} 与 {a} 初始化、T()）、构造时保存共享内存的指针（CUB 的 TempStorage 写法）
CTORS = r"""
struct MD {
    float m = -INFINITY;
    float d = 0.0f;
};
struct Pair {
    float s, m;
    __device__ Pair(float a = 0.0f, float b = -INFINITY) : s(a), m(b) { fix(); }
    __device__ void fix() { if (this->m < s) m = s; }
};
__device__ Pair combine(Pair a, Pair b) { return Pair(a.s + b.s, fmaxf(a.m, b.m)); }
struct Storage { float w[32]; };
struct BlockSum {
    Storage* st;
    __device__ BlockSum(Storage& s) : st(&s) {}
    __device__ float sum(float v) {
        st->w[threadIdx.x] = v;
        __syncthreads();
        float acc = 0.0f;
        for (int i = 0; i < 32; ++i) acc += st->w[i];
        return acc;
    }
};
__global__ void ctors(float* out) {
    MD a;
    MD b{2.0f};
    MD c = MD();
    Pair p = 3.0f;
    Pair q;
    Pair r = combine(p, Pair(1.0f, 7.0f));
    __shared__ Storage storage;
    float total = BlockSum(storage).sum((float)threadIdx.x);
    if (threadIdx.x == 0) {
        out[0] = a.m; out[1] = a.d; out[2] = b.m; out[3] = b.d; out[4] = c.m;
        out[5] = p.s + p.m; out[6] = q.s; out[7] = q.m; out[8] = r.s; out[9] = r.m; out[10] = total;
    }
}
// 逐个元素构造的局部数组：不写初始化列表时每个元素执行默认构造（多维也是）；写全每个元素的列表照写的构造；
// 少写了元素的列表（少的要默认构造）拒绝
struct Q { int n; __device__ Q() : n(7) { n += threadIdx.x; } };
__global__ void ctor_array(float* out) {
    MD parts[4];
    Pair ps[2];
    Q qs[2][3];
    MD given[3] = {MD(), {2.0f}, MD{5.0f, 1.0f}};
    Pair two[2] = {Pair(), Pair(3.0f, 9.0f)};
    parts[1].m = fmaxf(parts[1].m, 3.0f);
    float* r = out + 10 * threadIdx.x;
    r[0] = parts[1].m; r[1] = parts[0].d; r[2] = parts[3].m; r[3] = ps[1].s; r[4] = ps[1].m; r[5] = qs[1][2].n;
    r[6] = given[0].m; r[7] = given[1].m + given[1].d; r[8] = given[2].m + given[2].d; r[9] = two[1].m;
}
// 委托构造：目标构造函数先造出整个对象（含默认成员初值），再执行自己的函数体；可以一层层委托
struct Online {
    float m = -INFINITY, d = 0.0f;
    __device__ Online() {}
    __device__ Online(float x) : Online() { m = x; d = 1.0f; }
};
struct Span {
    float lo, hi;
    __device__ Span(float a, float b) : lo(a), hi(b) {}
    __device__ Span(float a) : Span(a, 2.0f * a) { lo += 1.0f; }
    __device__ Span() : Span(5.0f) {}
};
__global__ void delegating(float* out) {
    Online a, b(3.0f);
    Span p(1.0f), q;
    out[0] = a.m; out[1] = a.d; out[2] = b.m; out[3] = b.d; out[4] = p.lo; out[5] = p.hi; out[6] = q.lo; out[7] = q.hi;
}
// 基类的构造：写出的 Base(args)、没写时基类的默认构造（默认成员初值、自己写的默认构造），一层层往上；
// 派生类自己没有构造函数时也照样构造基类
struct Stat { float m = -INFINITY; float d = 0.0f; };
struct Named { int id; __device__ Named() : id(7) {} __device__ Named(int i) : id(i) {} };
struct Tracked : Stat, Named { float w; __device__ Tracked(float x) : Named(3), w(x) { d = 1.0f; } };
struct Plain : Stat { float w = 2.0f; };
struct Deep : Plain { __device__ Deep() : Plain() { w += 1.0f; } };
struct Given : Stat { __device__ Given(float m0) : Stat{m0, 4.0f} {} };
__global__ void bases(float* out) {
    Tracked t(5.0f);
    Plain p;
    Deep q;
    Given g(6.0f);
    out[0] = t.m; out[1] = t.d; out[2] = (float)t.id; out[3] = t.w; out[4] = p.m; out[5] = p.w;
    out[6] = q.m; out[7] = q.w; out[8] = g.m; out[9] = g.d;
}
__global__ void ctor_array_partial(float* out) {
    MD parts[4] = {MD(), MD()};
    out[0] = parts[3].m;
}
"""


def test_constructors_and_default_member_initialisers():
    out = np.zeros(11, np.float32)
    simt.launch(CTORS, "ctors", 1, 32, (out,))
    assert out.tolist() == [-np.inf, 0.0, 2.0, 0.0, -np.inf, 6.0, 0.0, 0.0, 4.0, 7.0, 496.0]
    # 逐个元素构造的局部数组：每个元素（每个线程各一份）执行默认构造
    out = np.zeros(20, np.float32)
    simt.launch(CTORS, "ctor_array", 1, 2, (out,))
    for t in range(2):
        assert out[10 * t:10 * t + 10].tolist() == [3.0, 0.0, -np.inf, 0.0, 0.0, 7.0 + t, -np.inf, 2.0, 6.0, 9.0]
    # 少写了元素的初始化列表：少的要默认构造，模拟器拒绝并说明改法（不把它们当作 0）
    with pytest.raises(simt.UnsupportedError, match="没有写全") as ei:
        simt.launch(CTORS, "ctor_array_partial", 1, 1, (np.zeros(1, np.float32),))
    assert ei.value.line == 86
    out = np.zeros(10, np.float32)
    simt.launch(CTORS, "bases", 1, 1, (out,))
    assert out.tolist() == [-np.inf, 1.0, 3.0, 5.0, -np.inf, 2.0, -np.inf, 3.0, 6.0, 4.0]
    out = np.zeros(8, np.float32)
    simt.launch(CTORS, "delegating", 1, 1, (out,))
    assert out.tolist() == [-np.inf, 0.0, 3.0, 1.0, 2.0, 2.0, 6.0, 10.0]


# 半精度的原子加（__half、__nv_bfloat16，结果按目标类型舍入）；assert 不写 #include 也能用（nvcc 隐式包含）
HALF_ATOMICS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void half_atomics(const float* x, __half* h, __nv_bfloat16* b) {
    assert(x[threadIdx.x] >= 0.0f);
    atomicAdd(h, __float2half(x[threadIdx.x]));
    atomicAdd(b, __float2bfloat16(x[threadIdx.x]));
}
// cuda_fp16.h / cuda_bf16.h 的算术：warp 内的最大值与和（__hmax、__hadd 配洗牌），成对的 __hadd2、__hmul2
__global__ void half_math(const __half* x, const __nv_bfloat16* y, float* out) {
    __half m = x[threadIdx.x];
    __nv_bfloat16 s = y[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) {
        m = __hmax(m, __shfl_xor_sync(0xffffffffu, m, o));
        s = __hadd(s, __shfl_xor_sync(0xffffffffu, s, o));
    }
    __half2 p = __halves2half2(m, hexp(__float2half(0.0f)));
    p = __hmul2(__hadd2(p, p), p);
    if (threadIdx.x == 0) {
        out[0] = __half2float(m);
        out[1] = __bfloat162float(s);
        out[2] = __low2float(p);
        out[3] = __high2float(p);
        out[4] = __hlt(__low2half(p), __high2half(p)) ? 1.0f : 0.0f;
        out[5] = __bfloat162float(__hfma(s, s, __hneg(s)));
    }
}
// 半精度的共享数组（cuda_fp16.h 的默认构造是平凡的，nvcc 接受 __shared__ __half buf[N]）：块内倒序
__global__ void half_shared(const __half* x, const __nv_bfloat16* y, float* out) {
    __shared__ __half hs[64];
    __shared__ __nv_bfloat16 bs[64];
    __shared__ __half2 ps[32];
    hs[threadIdx.x] = x[threadIdx.x];
    bs[threadIdx.x] = y[threadIdx.x];
    if (threadIdx.x < 32) ps[threadIdx.x] = __halves2half2(x[2 * threadIdx.x], x[2 * threadIdx.x + 1]);
    __syncthreads();
    out[threadIdx.x] = __half2float(hs[63 - threadIdx.x]) + 100.0f * __bfloat162float(bs[63 - threadIdx.x])
                       + 1000.0f * __high2float(ps[threadIdx.x / 2]);
}
"""


def test_half_precision_atomics_and_implicit_assert():
    import ml_dtypes
    x = np.full(64, 0.5, np.float32)
    h, b = np.zeros(1, np.float16), np.zeros(1, ml_dtypes.bfloat16)
    simt.launch(HALF_ATOMICS, "half_atomics", 1, 64, (x, h, b))
    assert float(h[0]) == 32.0 and float(b[0]) == 32.0
    with pytest.raises(simt.SimtError, match="assert"):
        simt.launch(HALF_ATOMICS, "half_atomics", 1, 64, (-x, h, b))


def test_half_precision_arithmetic():
    import ml_dtypes
    xs = np.arange(32, dtype=np.float16) - 7
    ys = np.full(32, 0.25, ml_dtypes.bfloat16)
    out = np.zeros(6, np.float32)
    simt.launch(HALF_ATOMICS, "half_math", 1, 32, (xs, ys, out))
    # max 24、和 8、p = (2m·m, 2·1·1) = (1152, 2)，1152 < 2 为假，fma(8, 8, -8) = 56
    assert out.tolist() == [24.0, 8.0, 1152.0, 2.0, 0.0, 56.0]


def test_half_precision_shared_arrays():
    import ml_dtypes
    xs = np.arange(64, dtype=np.float16)
    ys = (np.arange(64) % 8).astype(ml_dtypes.bfloat16)
    out = np.zeros(64, np.float32)
    simt.launch(HALF_ATOMICS, "half_shared", 1, 64, (xs, ys, out))
    t = np.arange(64)
    assert out.tolist() == (63 - t + 100 * ((63 - t) % 8) + 1000 * (2 * (t // 2) + 1)).astype(np.float32).tolist()


# 作用域版本的原子操作：_block 只对同一线程块的线程是原子的，_system 对主机与其他 GPU 也是
SCOPED = r"""
// 每块一行 4 个桶：桶只归这一块，_block 就够；合计到 total 是几块共用的字，要用设备作用域的 atomicAdd
__global__ void block_hist(const int* x, int* hist, int* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd_block(&hist[blockIdx.x * 4 + x[i] % 4], 1);
    __syncthreads();
    if (threadIdx.x < 4) atomicAdd(&total[threadIdx.x], hist[blockIdx.x * 4 + threadIdx.x]);
}
// 错误：几块共用的桶也用了 _block
__global__ void shared_hist(const int* x, int* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd_block(&total[x[i] % 4], 1);
}
// 一边 _block、一边设备作用域：仍然不是原子的
__global__ void mixed_scope(float* out) {
    if (blockIdx.x == 0) atomicAdd_block(out, 1.0f);
    else atomicAdd(out, 1.0f);
}
// 共享内存只属于一个线程块：_block 正合适
__global__ void smem_scope(const float* x, float* out) {
    __shared__ float s;
    if (threadIdx.x == 0) s = 0.0f;
    __syncthreads();
    atomicAdd_block(&s, x[threadIdx.x]);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd_system(out, s);
}
__global__ void scoped_ops(unsigned int* u, int* v) {
    unsigned int t = threadIdx.x;
    atomicMax_block(&u[0], t);
    atomicInc_block(&u[1], 9u);
    atomicOr_system(&u[2], 1u << (t % 8));
    if (t == 5) v[1] = atomicCAS_block(&v[0], 0, 42);
    if (t == 6) v[2] = atomicExch_system(&v[0], 7);
    __syncthreads();
    if (t == 7) v[3] = atomicSub_block(&v[0], 2);
}
"""


def test_block_scoped_atomics_on_block_owned_words():
    x = (np.arange(256, dtype=np.int32) * 7) % 11
    hist, total = np.zeros(16, np.int32), np.zeros(4, np.int32)
    simt.launch(SCOPED, "block_hist", 4, 64, (x, hist, total, 256))
    want = np.stack([np.bincount(x[b * 64:(b + 1) * 64] % 4, minlength=4) for b in range(4)])
    assert hist.reshape(4, 4).tolist() == want.tolist() and total.tolist() == want.sum(0).tolist()
    out = np.zeros(1, np.float32)
    simt.launch(SCOPED, "smem_scope", 2, 32, (np.full(32, 0.5, np.float32), out))
    assert out[0] == 32.0
    u, v = np.zeros(3, np.uint32), np.zeros(4, np.int32)
    simt.launch(SCOPED, "scoped_ops", 1, 32, (u, v))
    # 32 个线程依次 inc（到 9 归 0）：32 次之后是 32 % 10 = 2；CAS 0 -> 42 返回 0；Exch 返回 42；Sub 返回 7
    assert u.tolist() == [31, 2, 0xFF] and v.tolist() == [5, 0, 42, 7]


def test_block_scoped_atomic_on_a_word_other_blocks_touch_is_a_race():
    """atomicAdd_block 只对同一线程块的线程是原子的：几块一起改同一个全局字会丢更新，GPU 上结果只是偶尔少几次。"""
    x = np.arange(256, dtype=np.int32)
    with pytest.raises(simt.GlobalMemoryRaceError) as ei:
        simt.launch(SCOPED, "shared_hist", 4, 64, (x, np.zeros(4, np.int32), 256))
    e = ei.value
    assert (e.hazard, e.array, e.line, e.other_line) == ("WAW", "total", 12, 12)
    assert e.block != e.other_block
    zh, en = str(e).split(" / ", 1)
    assert "atomicAdd_block" in zh and "线程块作用域" in zh and "block-scoped atomic" in en
    with pytest.raises(simt.GlobalMemoryRaceError, match="block-scoped") as ei:
        simt.launch(SCOPED, "mixed_scope", 2, 32, (np.zeros(1, np.float32),))
    assert {ei.value.line, ei.value.other_line} == {16, 17}
    # 只有一块时没有别的线程块：不是竞争
    total = np.zeros(4, np.int32)
    simt.launch(SCOPED, "shared_hist", 1, 64, (x, total, 64))
    assert total.tolist() == [16, 16, 16, 16]


# 文件作用域的结构体变量有默认成员初值：花括号初始化照默认值补齐；要执行构造的（声明、数组）拒绝，
# 只在用到它的内核启动时报，同一文件的其他内核照常运行
FILE_CTORS = r"""
struct MDf { float m = -INFINITY; float d = 0.0f; };
__device__ MDf given = {1.0f};
__device__ MDf plain;
__device__ MDf many[2];
__global__ void uses_given(float* o) { o[0] = given.m; o[1] = given.d; }
__global__ void uses_plain(float* o) { o[0] = plain.m; }
__global__ void uses_many(float* o) { o[0] = many[1].m; }
"""


def test_file_scope_structs_with_default_member_initialisers():
    out = np.zeros(2, np.float32)
    simt.launch(FILE_CTORS, "uses_given", 1, 1, (out,))
    assert out.tolist() == [1.0, 0.0]
    for kernel, var, line in (("uses_plain", "plain", 4), ("uses_many", "many", 5)):
        with pytest.raises(simt.UnsupportedError, match=f"文件作用域变量 {var} 的构造函数") as ei:
            simt.launch(FILE_CTORS, kernel, 1, 1, (out,))
        assert ei.value.line == line


# 故意写错的内核：nvcc 的报错 -> 模拟器报的错误类
_PLANTED = {"rvalue": "must be an lvalue", "no_member": 'has no member "min"', "add4": 'no operator "+"',
            "bad_member": 'has no member "q"'}


@pytest.mark.skipif(_NVCC is None, reason="nvcc 不在 PATH 上，无法核对这些源码能否编译")
def test_the_cpp_sources_are_what_nvcc_accepts(tmp_path):
    srcs = [SRC, FILEVARS, VEC, STRUCTS, ENUMS, REFS, CG, ADDR, FNPTR, CONSTEXPR, LOCAL_CONST, TEMPS, LAMBDAS, CTORS,
            HALF_ATOMICS, SCOPED, FILE_CTORS, RANGE_FOR, RANGE_ROW, BINDINGS, BRACED, LIMITS, TRAITS]
    good, bad = [], []
    for k, s in enumerate(srcs):
        lines = s.split("\n")
        keep = [ln for ln in lines if not any(f"void {n}(" in ln for n in _PLANTED)]
        undef = "".join(f"#undef {d}\n" for d in re.findall(r"^#define (\w+)", s, flags=re.M))
        good.append(f"namespace t{k} {{\n" + "\n".join(keep) + "\n}\n" + undef)
        bad += [ln for ln in lines if any(f"void {n}(" in ln for n in _PLANTED)]
    heads = ("#include <cooperative_groups.h>", "#include <cooperative_groups/reduce.h>", "#include <cuda/std/limits>",
             "#include <type_traits>", "#include <cuda/std/type_traits>")
    src = "\n".join(good)
    for h in heads:                                     # 头文件放在所有命名空间之外
        src = src.replace(h, "")
    f = tmp_path / "all.cu"
    f.write_text("\n".join(heads) + "\n" + src, encoding="utf-8")
    r = subprocess.run([_NVCC, "-ptx", "-arch=sm_90", "-std=c++17", str(f), "-o", str(tmp_path / "all.ptx")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # 故意写错的内核（连同它们需要的声明）在 nvcc 里同样是错误
    for k, s in enumerate(srcs):
        for n, msg in _PLANTED.items():
            if f"void {n}(" in s:
                g = tmp_path / f"{n}.cu"
                g.write_text(s, encoding="utf-8")
                r = subprocess.run([_NVCC, "-ptx", "-arch=sm_90", "-std=c++17", str(g), "-o", str(tmp_path / "x.ptx")],
                                   capture_output=True, text=True, timeout=600)
                assert r.returncode != 0 and msg in r.stderr, (n, r.stderr[-2000:])
    assert len(bad) == len(_PLANTED)


def test_missing_front_end_is_an_import_error_that_names_the_package(no_simt_front_end):
    from reduction_lab.simt import FrontendMissingError

    with pytest.raises(FrontendMissingError, match="libclang") as e:
        simt.launch('__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }', "k", grid=1, block=32,
                    args=[np.zeros(32, np.float32)])
    assert isinstance(e.value, ImportError) and "pip install" in str(e.value)


def test_scalar_brace_initialisation():
    """C++ 的花括号初始化标量：float acc{} 是 0，float b{2.0f}、int c = {3} 取括号里的值；指针的空列表仍然拒绝。"""
    import torch

    from reduction_lab import simt

    src = r"""
__global__ void k(const float* x, float* o, int* n) {
    float acc{};
    float b{2.0f};
    int c = {3};
    unsigned d{};
    for (int i = 0; i < 4; ++i) acc += x[i];
    o[0] = acc * b; n[0] = c + (int)d;
}
__global__ void null_ptr(float* o) { float* p{}; o[0] = 1.0f; }
"""
    x = torch.arange(4, dtype=torch.float32)
    o, n = torch.zeros(1), torch.zeros(1, dtype=torch.int32)
    simt.launch(src, "k", 1, 1, (x, o, n))
    assert (o.item(), n.item()) == (12.0, 3)
    with pytest.raises(simt.UnsupportedError, match="空初始化列表"):
        simt.launch(src, "null_ptr", 1, 1, (torch.zeros(1),))
