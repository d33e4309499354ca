"""libclang 前端：重载、命名空间、模板（启动时给出、显式实例化、从调用推导）、类模板、局部引用、auto、
enum class、头文件里的错误、不支持的构造带文件与行号、奇怪输入不漏出 Python 异常（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from reduction_lab import simt

CPP = r"""
namespace util {
namespace detail { __device__ int sq(int a) { return a * a; } }
__device__ int sq_plus(int a) { return detail::sq(a) + 1; }
}
__device__ float pick(float a) { return a + 0.5f; }
__device__ int pick(int a) { return a * 10; }
__device__ double pick(double a) { return a * 100.0; }

template <typename T> __device__ T twice(T v) { return v + v; }
template <typename T> struct Pair2 { T lo, hi; };
enum class Mode : int { Sum = 2, Max };
using real = float;
typedef unsigned int u32;

template <int BLOCK, typename T>
__global__ void block_sum(const T* x, T* out) {
    __shared__ T s[BLOCK];
    s[threadIdx.x] = x[blockIdx.x * BLOCK + threadIdx.x];
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = twice(s[0]) / T(2);
}
template __global__ void block_sum<32, float>(const float*, float*);

__global__ void mix(float* o, int* q) {
    u32 t = threadIdx.x;
    float& r = o[t];                                   // 局部引用：写 r 就是写 o[t]
    r = pick(1.0f) + pick(2) + util::sq_plus(t);       // 三个重载各调用一次
    int x = t;
    int& rx = x;
    rx += 3;
    auto d = pick(0.25);                               // double 重载
    q[t] = x + twice(2) + (int)d;
    Pair2<real> p = {static_cast<real>(t), 2.0f * t};
    o[32 + t] = twice(p.lo) + p.hi;
    Mode m = Mode::Max;
    q[32 + t] = static_cast<int>(m) + (int)Mode::Sum;
}
"""


def test_overloads_namespaces_local_references_and_implicit_templates():
    o, q = np.zeros(64, np.float32), np.zeros(64, np.int32)
    simt.launch(CPP, "mix", 1, 32, (o, q))
    t = np.arange(32)
    assert o[:32].tolist() == (1.5 + 20 + t * t + 1).tolist()
    assert q[:32].tolist() == (t + 3 + 4 + 25).tolist()
    assert o[32:].tolist() == (4.0 * t).tolist() and (q[32:] == 5).all()
    prog = simt.parse(CPP, kernel="block_sum<32,float>")
    # 每个重载与每个模板实例各降低一份（twice<int>、twice<float> 是两个函数）
    names = set(prog.functions)
    assert {"pick(float)", "pick(int)", "pick(double)", "util::detail::sq", "twice<int>", "twice<float>"} <= names


@pytest.mark.parametrize("name,block,dtype", [("block_sum<32, float>", 32, np.float32), ("block_sum<64,int>", 64, np.int32),
                                             ("block_sum<128, double>", 128, np.float64)])
def test_templates_bound_at_launch_and_by_explicit_instantiation(name, block, dtype):
    x = (np.arange(4 * block) % 7).astype(dtype)
    out = np.zeros(4, dtype)
    simt.launch(CPP, name, 4, block, (x, out))
    assert out.tolist() == x.reshape(4, block).sum(1).tolist()
    ctype = {np.float32: "float", np.int32: "int", np.float64: "double"}[dtype]
    assert simt.kernel_signature(CPP, name)[0][1] == f"const {ctype}*"
    assert "block_sum<32,float>" in simt.parse(CPP).kernels       # 显式实例化的内核不用写在启动里也列出


def test_a_clang_error_stays_with_its_function():
    src = ("__device__ float bad(float4 a) { return a.q; }\n"
           "__global__ void uses_bad(float* o) { o[0] = bad(make_float4(1, 2, 3, 4)); }\n"
           "__global__ void fine(float* o) { o[threadIdx.x] = 1.0f; }\n")
    o = np.zeros(4, np.float32)
    simt.launch(src, "fine", 1, 4, (o,))
    assert (o == 1).all()
    with pytest.raises(simt.CompileError, match='no member "q"') as ei:
        simt.launch(src, "uses_bad", 1, 1, (o,))
    assert ei.value.line == 1


def test_errors_in_a_header_name_the_header_and_its_line(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "ops.cuh").write_text("// ops\n\n__device__ float scale(float v) {\n"
                                               "    return v * undefined_factor;\n}\n", encoding="utf-8")
    (tmp_path / "main.cu").write_text('#include "inc/ops.cuh"\n__global__ void k(float* y) {\n'
                                      "    y[threadIdx.x] = scale(y[threadIdx.x]);\n}\n", encoding="utf-8")
    with pytest.raises(simt.SimtError) as ei:
        simt.launch(tmp_path / "main.cu", "k", 1, 4, (np.zeros(4, np.float32),))
    e = ei.value
    assert (e.line, e.file) == (4, "inc/ops.cuh") and "inc/ops.cuh 第 4 行" in str(e) and "undefined_factor" in str(e)
    (tmp_path / "inc" / "ops.cuh").write_text("__device__ float scale(float v) {\n  return v *;\n}\n", encoding="utf-8")
    with pytest.raises(simt.UnsupportedError, match="cannot parse") as ei:
        simt.launch(tmp_path / "main.cu", "k", 1, 4, (np.zeros(4, np.float32),))
    assert (ei.value.line, ei.value.file) == (2, "inc/ops.cuh")
    with pytest.raises(simt.UnsupportedError, match="include not found") as ei:
        simt.launch('#include "nope.cuh"\n__global__ void k(float* y) {}', "k", 1, 1, (np.zeros(1, np.float32),))


# 不支持的构造：UnsupportedError，带文件与行号
REFUSED = [
    ("texture object", "__global__ void k(cudaTextureObject_t tex, float* y) {\n"
                       "  y[0] = tex1Dfetch<float>(tex, 0);\n}", 2, "texture"),
    ("asm", "__global__ void k(float* y) {\n  int x;\n  asm(\"mov.u32 %0, 1;\" : \"=r\"(x));\n  y[0] = x;\n}", 3, "asm"),
    ("dynamic parallelism", "__global__ void child(float* y) { y[0] = 1; }\n__global__ void k(float* y) {\n"
                            "  child<<<1, 1>>>(y);\n}", 3, "dynamic parallelism"),
    ("new/delete", "__global__ void k(float* y) {\n  float* p = new float[4];\n  y[0] = p[0];\n  delete[] p;\n}", 2,
     "new/delete"),
    ("exceptions", "__global__ void k(float* y) {\n  if (y[0] < 0)\n    throw 1;\n}", 3, "exceptions"),
    ("virtual", "struct Op {\n  virtual __device__ float f(float v) { return v; }\n};\n"
                "__global__ void k(float* y) { y[0] = 1; }", 2, "virtual"),
    ("switch continue", "__global__ void k(float* y) {\n  while (y[0] < 3) switch ((int)y[0]) {\n"
                        "    case 1: y[0] = 2; continue;\n  }\n}", 3, "continue"),
]


@pytest.mark.parametrize("what,src,line,words", REFUSED, ids=[r[0] for r in REFUSED])
def test_unsupported_constructs_are_refused_with_file_and_line(what, src, line, words, tmp_path):
    f = tmp_path / "refused.cu"
    f.write_text(src, encoding="utf-8")
    with pytest.raises(simt.UnsupportedError, match=words) as ei:
        simt.launch(f, "k", 1, 1, (np.zeros(4, np.float32),))
    assert ei.value.line == line, str(ei.value)
    assert f"{f} 第 {line} 行" in str(ei.value) or f"第 {line} 行" in str(ei.value)


BASE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
struct P { float a, b; };
template <typename T> __device__ T f(T v, int k) { return v * k; }
__global__ void k(const float* x, float* y, int n) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    P p = {1.0f, 2.0f};
    float v = i < n ? x[i] : 0.0f;
    for (int s = 16; s > 0; s >>= 1) v += tile.shfl_down(v, s);
    if (tile.thread_rank() == 0) y[blockIdx.x] = f(v, 2) + p.a * p.b;
}
"""


def _mutations(seed, count):
    rng = random.Random(seed)
    toks = BASE.replace("(", " ( ").replace(")", " ) ").replace(";", " ; ").split(" ")
    out = [BASE[:k] for k in range(0, len(BASE), 37)]              # 截断在任意位置
    for _ in range(count):
        t = list(toks)
        for _ in range(rng.randint(1, 3)):
            j = rng.randrange(len(t))
            op = rng.random()
            if op < 0.4:
                del t[j]
            elif op < 0.7:
                t.insert(j, rng.choice(["*", "&", "::", "<", ">", "{", "}", "template", "auto", "(", "int", "0x",
                                        "'", '"', "#", "cg", "->", "..."]))
            else:
                t[j], t[rng.randrange(len(t))] = t[rng.randrange(len(t))], t[j]
        out.append(" ".join(t))
    return out


def test_odd_inputs_never_leak_a_python_exception():
    x = np.ones(64, np.float32)
    for src in _mutations(7, 60):
        try:
            simt.launch(src, "k", 2, 32, (x, np.zeros(2, np.float32), 64))
        except (simt.SimtError, ValueError) as e:      # 模拟器的错误，或者启动参数的错误（中英双语）
            assert isinstance(e, simt.SimtError) or " / " in str(e), (src, e)
            assert not _INTERNAL.search(str(e)), (src, e)


BASE2 = r"""
#include "cuda.h"
#include <string.h>
struct Acc { float v[4]; int n; __device__ void add(float x) { v[n & 3] += x; n++; } };
struct Mix { int a; float b; __device__ float sum() const { return a + b; } };
struct Ref { float* p; Mix m; };
__device__ int pick(int c) { switch (c) { case 0: return 1; case 1: default: return 2; } }
__global__ void k(const float* x, float* y, int n) {
    __requires(n == 64);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    Acc acc; memset(&acc, 0, sizeof(Acc));
    Ref r; r.p = y; r.m.a = i; r.m.b = 0.5f;
    for (int j = 0; __invariant(j <= 4), j < 4; j++) acc.add(x[i] * pick(j));
    unsigned b = __ballot_sync(0xffffffffu, x[i] > 0.0f);
    __assert(__implies(i < n, acc.n == 4));
    if (threadIdx.x == 0) r.p[blockIdx.x] = acc.v[1] + r.m.sum() + __popc(b);
}
"""

_INTERNAL = re.compile(r"[（(](AttributeError|AssertionError|TypeError|KeyError|ValueError|IndexError|NameError|"
                       r"UnboundLocalError|ZeroDivisionError|RuntimeError)\b")


def test_odd_inputs_of_the_newer_constructs_never_leak_a_python_exception():
    global BASE
    x = np.ones(64, np.float32)
    y = np.zeros(2, np.float32)
    simt.launch(BASE2, "k", 2, 32, (x, y, 64))
    assert y.tolist() == [2.0 + 0.5 + 32, 2.0 + 32.5 + 32]
    saved, BASE = BASE, BASE2
    try:
        srcs = _mutations(11, 80)
    finally:
        BASE = saved
    for src in srcs:
        try:
            simt.launch(src, "k", 2, 32, (x, np.zeros(2, np.float32), 64))
        except (simt.SimtError, ValueError) as e:
            assert isinstance(e, simt.SimtError) or " / " in str(e), (src, e)
            assert not _INTERNAL.search(str(e)), (src, e)      # 被包成 UnsupportedError 的内部异常也是缺陷


def test_libclang_objects_freed_after_cindex_teardown_print_nothing(monkeypatch):
    """解释器退出时 clang.cindex 的全局 conf 可能先被清成 None：之后才被回收的 Index / TranslationUnit 不再
    打印「Exception ignored in __del__」（gpu 模式的 pytest 工作进程退出时见过）。未加保护的 __del__ 这时会抛错。"""
    import clang.cindex as ci

    from reduction_lab.simt import clang_frontend as cf

    tu = cf.parse_tu("__global__ void k(float *y) { y[0] = 1.0f; }", "k.cu", {})
    conf = ci.conf
    monkeypatch.setattr(ci, "conf", None)
    with pytest.raises(AttributeError):
        ci.TranslationUnit.__del__.__wrapped__(tu)      # 原来的 __del__：conf 没有了就抛错
    tu.__del__()                                        # 包过的：跳过，不抛
    ci.Index.__del__(cf._index_())
    monkeypatch.setattr(ci, "conf", conf)
    assert [c.spelling for c in tu.cursor.get_children()][-1] == "k"     # 没有被释放：回收时照常释放一次
