"""模拟器的构造登记表：每种 C/C++/CUDA 写法一个小而真实的内核（文档：docs/cuda/simulator.md 的「支持的构造」）。

Registry of constructs. Each :class:`Construct` holds one small kernel that uses
one construct, a builder for its launch arguments (fixed seed), a numpy
reference for its outputs, and what the simulator should do with it:
``"run"`` (intended to be supported) or ``"refuse"`` (outside the subset on
purpose: it must raise :class:`~reduction_lab.simt.UnsupportedError` naming the
file and the line given in ``refused_line``).

Whether an entry actually runs is never written down here: :func:`check` runs
it and reports what happened, and the page table, the tests and
``scripts/simt_differential.py`` all call it.

    from reduction_lab.simt import constructs
    for c in constructs.REGISTRY:
        print(c.name, constructs.check(c).status)
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Construct", "Case", "Result", "REGISTRY", "by_name", "check", "run", "make_case", "materialize",
           "source_sha256", "sum_bound", "U32"]

#: float32 的单位舍入 u = 2**-24
U32 = float(np.finfo(np.float32).eps) / 2


def sum_bound(abs_sum, n):
    """n 个 float32 按任意顺序相加，与精确和之差不超过 (n - 1) u sum|x_i|（递归求和的经典界，任何结合顺序都成立）。"""
    return max(int(n) - 1, 0) * U32 * np.asarray(abs_sum, dtype=np.float64)


@dataclass
class Case:
    """一次启动的输入：``args`` 与内核形参一一对应（numpy 数组或 numpy 标量，类型与形参一致），
    ``symbols`` 是启动前写入的文件作用域变量（``simt.launch(..., symbols=...)``）。"""

    args: list
    symbols: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Construct:
    """一个构造的登记项。

    ``inputs(rng)`` 造出 :class:`Case`；``expected(case)`` 用 numpy 算出期望的输出 ``{键: 数组}``，
    键是 ``args`` 的下标（int）或 ``symbols`` 的名字（str），在启动之前调用（看到的是输入）；
    ``bound(case)`` 是浮点输出允许的绝对误差 ``{键: 标量或数组}``（缺省为 0：逐位相等）；
    ``files`` 是放在源文件旁边的头文件 ``{文件名: 内容}``；``status_expected`` 是 ``"run"`` 或
    ``"refuse"``，后者的 ``refused_line`` 是该写法所在的行（源文件里从 1 数起）。"""

    name: str
    category: str
    description: str
    source: str
    kernel: str
    grid: object
    block: object
    inputs: Callable
    expected: Callable | None = None
    bound: Callable | None = None
    shared_bytes: int = 0
    files: dict = field(default_factory=dict)
    status_expected: str = "run"
    refused_line: int | None = None


@dataclass
class Result:
    """:func:`check` 的结果。``status``：``"ran"``（运行且输出与参考一致）、``"wrong"``（运行了，输出不一致）、
    ``"refused"``（UnsupportedError）、``"error"``（其他 SimtError）、``"crash"``（漏出的 Python 异常，或被包成
    UnsupportedError 的内部异常，是缺陷）。"""

    status: str
    line: int | None = None
    file: str | None = None
    message: str = ""
    max_error: float = 0.0
    outputs: dict = field(default_factory=dict)


# ---------------------------------------------------------------- 输入的小工具

def _rng_of(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def _ints(rng, n, lo=-50, hi=50, dtype=np.int32):
    return rng.integers(lo, hi, n).astype(dtype)


def _floats(rng, n):
    return rng.standard_normal(n).astype(np.float32)


def _zeros(n, dtype=np.float32):
    return np.zeros(n, dtype)


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def _block_sums(x, b):
    return _f64(x).reshape(-1, b).sum(1)


def _records(x):
    """_MIXED_STRUCT 的参考：Rec 的 numpy 结构化类型（与 C 的布局相同），按相反的顺序排好后按字节看。"""
    rec = np.dtype({"names": ["tag", "flag", "delta", "value", "scale"],
                    "formats": [np.uint8, np.uint8, np.int16, np.int32, np.float64], "offsets": [0, 1, 2, 4, 8], "itemsize": 16})
    t = np.arange(32)
    r = np.zeros(32, rec)
    r["tag"] = (t * 9).astype(np.uint8)
    r["flag"] = 1
    r["delta"] = (x - 1000).astype(np.int16)
    r["value"] = x * 3
    r["scale"] = 0.5 * t
    return r[::-1].copy().view(np.uint8)


def _block_bound(x, b):
    return sum_bound(np.abs(_f64(x)).reshape(-1, b).sum(1), b)


# ---------------------------------------------------------------- 课程自己的写法

_TREE = r"""
#define BLOCK 128
// 共享内存树形归约（顺序寻址），每个线程块写一个部分和
__global__ void tree_sum(const float* x, float* out, int n) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK + tid;
    s[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
"""

_DYN_SHARED = r"""
// 动态共享内存（extern __shared__，大小由启动参数给出）+ 网格步长循环
__global__ void grid_stride_sum(const float* x, float* out, int n) {
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) acc += x[i];
    sdata[tid] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
"""

_WARP = r"""
// 一个 warp 求和：5 次 __shfl_down_sync 之后 lane 0 持有 32 个数的和
__device__ int warp_sum(int v) {
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}
__global__ void warp_sums(const int* x, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = warp_sum(x[i]);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
"""

_XOR = r"""
// 蝶形归约：__shfl_xor_sync 之后 warp 里每个线程都持有最大值
__global__ void warp_allmax(const float* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    out[i] = v;
}
"""

_ATOMIC = r"""
// 原子操作：每个线程块先在共享内存里做直方图，再 atomicAdd 到全局；atomicMax 求全局最大值
#define BINS 16
__global__ void histogram(const int* x, int* hist, int* vmax, int n) {
    __shared__ int h[BINS];
    int tid = threadIdx.x;
    if (tid < BINS) h[tid] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&h[x[i] & (BINS - 1)], 1);
        atomicMax(vmax, x[i]);
    }
    __syncthreads();
    if (tid < BINS) atomicAdd(&hist[tid], h[tid]);
}
"""

_BALLOT = r"""
// warp 投票：__ballot_sync 得到谓词为真的线程的位掩码，__popc 数出个数
__global__ void count_positive(const float* x, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned mask = __ballot_sync(0xffffffff, x[i] > 0.0f);
    if ((threadIdx.x & 31) == 0) out[i / 32] = __popc(mask);
}
"""

# ---------------------------------------------------------------- 结构体、枚举、typedef

_STRUCT = r"""
// 结构体：成员、局部变量、按值传给 __device__ 函数并返回
struct MinMax { float lo; float hi; };
__device__ MinMax merge(MinMax a, MinMax b) {
    MinMax r;
    r.lo = fminf(a.lo, b.lo);
    r.hi = fmaxf(a.hi, b.hi);
    return r;
}
__global__ void minmax(const float* x, float* out) {
    __shared__ MinMax s[64];
    int t = threadIdx.x;
    MinMax m = {x[t], x[t]};
    s[t] = m;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] = merge(s[t], s[t + k]);
        __syncthreads();
    }
    if (t == 0) { out[0] = s[0].lo; out[1] = s[0].hi; }
}
"""

_STRUCT_ARRAY = r"""
// 结构体数组放在全局内存：每个线程读一个 Point，按指针访问成员（p->x、pts[i].y）
struct Point { float x; float y; };
__device__ float norm2(const Point* p) { return p->x * p->x + p->y * p->y; }
__global__ void centroid(const Point* pts, Point* out, float* r2, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        r2[i] = norm2(&pts[i]);
        atomicAdd(&out->x, pts[i].x);
        atomicAdd(&out->y, pts[i].y);
    }
}
"""

_STRUCT_MIXED = r"""
// 成员类型不同的结构体（int 与 float 混在一起），真实代码里很常见
struct Stat { int count; float sum; };
__global__ void stats(const float* x, Stat* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&out->count, 1);
        atomicAdd(&out->sum, x[i]);
    }
}
"""

_STRUCT_NESTED = r"""
// 数组成员与嵌套结构体：每个线程一个直方图，放在局部结构体里，按下标访问成员数组
struct Range { float lo; float hi; };
struct Hist { Range r; int count[4]; };
__global__ void histogram4(const float* x, Hist* out, int n) {
    int t = threadIdx.x;
    Hist h;
    h.r.lo = -2.0f; h.r.hi = 2.0f;
    for (int k = 0; k < 4; k++) h.count[k] = 0;
    for (int j = t; j < n; j += blockDim.x) {
        float v = fminf(fmaxf(x[j], h.r.lo), h.r.hi - 1e-3f);
        h.count[(int)((v - h.r.lo) / (h.r.hi - h.r.lo) * 4.0f)] += 1;
    }
    for (int k = 0; k < 4; k++) atomicAdd(&out->count[k], h.count[k]);
    if (t == 0) out->r = h.r;
}
"""

_METHODS = r"""
// 结构体的成员函数与运算符：this、隐式的成员访问、const 成员函数
struct Vec2 {
    float x, y;
    __device__ Vec2 operator+(const Vec2& o) const { Vec2 r; r.x = x + o.x; r.y = y + o.y; return r; }
    __device__ float dot(const Vec2& o) const { return x * o.x + y * o.y; }
    __device__ void scale(float s) { x *= s; this->y *= s; }
    __device__ float norm2() const { return dot(*this); }
};
__global__ void methods(const float* xy, float* out) {
    int i = threadIdx.x;
    Vec2 a; a.x = xy[2 * i]; a.y = xy[2 * i + 1];
    Vec2 b = a + a;
    b.scale(0.5f);
    out[i] = b.norm2();
}
"""

_SHARED_MEMORY_T = r"""
// 空结构体的类型转换运算符取得动态共享内存（CUDA 示例 reduction 的 SharedMemory<T> 写法）
template <class T> struct SharedMemory {
    __device__ inline operator T*() { extern __shared__ int __smem[]; return (T*)__smem; }
};
template <class T> __global__ void reduce_t(const T* x, T* out) {
    T* sdata = SharedMemory<T>();
    unsigned t = threadIdx.x;
    sdata[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sdata[t] += sdata[t + s];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = sdata[0];
}
template __global__ void reduce_t<int>(const int*, int*);
"""

_VEC_TYPES = r"""
// 其他向量类型：uchar4（像素）、float3（坐标），make_* 构造
__global__ void shade(const float3* p, uchar4* rgba, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float3 v = p[i];
        float s = v.x + v.y + v.z;
        rgba[i] = make_uchar4((unsigned char)v.x, (unsigned char)v.y, (unsigned char)v.z, (unsigned char)s);
    }
}
"""

_GV_H = r"""
// GPUVerify 的注解在它自己的 cuda.h 里；nvcc 不认识它们：在 nvcc 下把这里用到的几个定义成空操作与 __trap()
// （模拟器的序言声明了全部注解，并定义 __GPUVERIFY_ANNOTATIONS__）
#ifndef __GPUVERIFY_ANNOTATIONS__
#define __requires(e)
#define __invariant(e) 0
#define __is_pow2(x) ((((x) & (x - 1)) == 0))
#define __implies(a, b) (!(a) || (b))
#define __assert(e) do { if (!(e)) __trap(); } while (0)
#endif
"""

_GPUVERIFY = r"""
#include "gv.h"
// GPUVerify 的规约注解：前提、不变式、访问集合是空操作；__assert 在每个线程上检查
__global__ void scaled(const int* x, int* y, int n) {
    __requires(n == 64);
    __requires(__is_pow2(blockDim.x));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int acc = 0;
    for (int k = 0; __invariant(k <= 3), __invariant(__uniform_int(k)), k < 3; k++) acc += x[i];
    y[i] = acc;
    __assert(__implies(x[i] >= 0, y[i] >= x[i]));
}
"""

_ATOMIC_MORE = r"""
// atomicInc 的环形计数、atomicCAS 循环（x > 0 的最大下标：结果与线程的先后无关）、atomicOr 拼出位图
__global__ void ring(const int* x, unsigned* ctr, int* owner, unsigned* bits) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicInc(&ctr[0], 6u);
    if (x[i] > 0) {
        int old = -1, assumed;         // 先猜 owner 的初值；猜错时 atomicCAS 返回真实值（不用普通读，免得与原子写竞争）
        do {
            assumed = old;
            old = atomicCAS(owner, assumed, max(assumed, i));
        } while (old != assumed);
    }
    atomicOr(&bits[i / 32], (x[i] > 0 ? 1u : 0u) << (i % 32));
}
"""

_SCOPED_ATOMIC = r"""
// 作用域版本的原子操作：每块自己的一行桶只有本块的线程改，atomicAdd_block 就够；几块共用的合计用 atomicAdd
__global__ void block_bins(const int* x, int* bins, int* total, unsigned* top) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int b = (x[i] % 4 + 4) % 4;
    atomicAdd_block(&bins[blockIdx.x * 4 + b], 1);
    atomicMax_block(&top[blockIdx.x], (unsigned)(x[i] + 100));
    __syncthreads();
    if (threadIdx.x < 4) atomicAdd_system(&total[threadIdx.x], bins[blockIdx.x * 4 + threadIdx.x]);
}
"""

_SWITCH = r"""
// switch：case 的贯穿（没有 break）、default、break 跳出
__global__ void classify(const int* x, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int r = 0;
    switch (x[i] & 3) {
    case 0: r = 100; break;
    case 1:
    case 2: r = 10;
    default: r += 1; break;
    }
    out[i] = r;
}
"""

_STRUCT_PTR_MEMBER = r"""
// 指针成员的结构体（放在寄存器里）：一段数组的视图按值传给 __device__ 函数
struct Span { const float* p; int n; };
struct Base { float scale; };
struct Scaled : Base { Span s; };        // 继承：基类的成员排在前面
__device__ float total(Scaled v) {
    float acc = 0.0f;
    for (int i = 0; i < v.s.n; i++) acc += v.s.p[i];
    return acc * v.scale;
}
__global__ void row_totals(const float* x, float* out, int n) {
    Scaled v;
    v.scale = 0.5f;
    v.s.p = x + threadIdx.x * n;
    v.s.n = n;
    out[threadIdx.x] = total(v);
}
"""

_MEMCPY = r"""
// memcpy 复制整个结构体，memset 清零
struct Rec { int id; float w; };
__global__ void copy_recs(const Rec* in, Rec* out, int* flags) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    memcpy(&out[t], &in[t], sizeof(Rec));
    memset(&flags[2 * t], 0, 2 * sizeof(int));
}
"""

_ENUM = r"""
// 枚举：选择归约运算，也用作数组长度
enum Op { OP_SUM, OP_MAX, OP_MIN, NUM_OPS };
__device__ float apply(Op op, float a, float b) {
    return op == OP_SUM ? a + b : (op == OP_MAX ? fmaxf(a, b) : fminf(a, b));
}
__global__ void three_reductions(const float* x, float* out) {
    __shared__ float s[NUM_OPS][32];
    int t = threadIdx.x;
    for (int op = 0; op < NUM_OPS; op++) s[op][t] = x[t];
    __syncthreads();
    for (int k = 16; k > 0; k >>= 1) {
        if (t < k)
            for (int op = 0; op < NUM_OPS; op++) s[op][t] = apply((Op)op, s[op][t], s[op][t + k]);
        __syncthreads();
    }
    if (t < NUM_OPS) out[t] = s[t][0];
}
"""

_TYPEDEF = r"""
// typedef 给标量类型起名（real、index_t），也给指针起名
typedef float real;
typedef unsigned int index_t;
typedef const real* real_cptr;
__global__ void scale_add(real_cptr x, real* y, float a, int n) {
    index_t i = blockIdx.x * blockDim.x + threadIdx.x;
    real s = a;
    if (i < (index_t)n) y[i] = s * x[i] + y[i];
}
"""

# ---------------------------------------------------------------- 模板

_TPL_KERNEL = r"""
// 整数模板形参的内核：块大小是编译期常量，启动时写出实参 block_sum<256>
template <int BLOCK>
__global__ void block_sum(const float* x, float* out) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    s[tid] = x[blockIdx.x * BLOCK + tid];
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = s[0];
}
template __global__ void block_sum<256>(const float*, float*);
"""

_TPL_TYPE = r"""
// 类型模板形参：同一个内核用于 int 与 float，显式实参调用 __device__ 模板
template <typename T>
__device__ T warp_reduce(T v) {
    for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffff, v, k);
    return v;
}
template <typename T>
__global__ void warp_totals(const T* x, T* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    T v = warp_reduce<T>(x[i]);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
template __global__ void warp_totals<int>(const int*, int*);
"""

_TPL_IMPLICIT = r"""
// 隐式实例化：调用函数模板时不写实参，由实参类型推导出 T
template <typename T>
__device__ T square(T v) { return v * v; }
__global__ void sum_squares(const int* x, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(out, square(x[i]));
}
"""

_TPL_CLASS = r"""
// 类模板：一个小的定长累加器，成员函数在设备上调用
template <typename T, int N>
struct Accum {
    T v[N];
    __device__ void clear() { for (int i = 0; i < N; i++) v[i] = 0; }
    __device__ void add(int k, T x) { v[k % N] += x; }
    __device__ T total() const { T s = 0; for (int i = 0; i < N; i++) s += v[i]; return s; }
};
__global__ void accum_rows(const int* x, int* out, int n) {
    Accum<int, 4> acc;
    acc.clear();
    for (int j = 0; j < n; j++) acc.add(j, x[threadIdx.x * n + j]);
    out[threadIdx.x] = acc.total();
}
"""

# ---------------------------------------------------------------- C++ 的其他写法

_REFS = r"""
// 引用参数：T& 改写调用者的变量，const T& 只读
__device__ void accumulate(float& acc, int& count, const float& v) {
    acc += v;
    count += 1;
}
__global__ void row_mean(const float* x, float* out, int n) {
    float acc = 0.0f;
    int count = 0;
    for (int j = 0; j < n; j++) accumulate(acc, count, x[threadIdx.x * n + j]);
    out[threadIdx.x] = acc / count;
}
"""

_ADDR = r"""
// 取局部变量的地址：&lo、&hi 交给 __device__ 函数写回两个结果
__device__ void range_of(const int* x, int n, int* lo, int* hi) {
    for (int i = 0; i < n; i++) {
        *lo = min(*lo, x[i]);
        *hi = max(*hi, x[i]);
    }
}
__global__ void spans(const int* x, int* out, int n) {
    int lo = 2147483647, hi = -2147483647;
    range_of(x + threadIdx.x * n, n, &lo, &hi);
    out[threadIdx.x] = hi - lo;
}
"""

_FNPTR = r"""
// 指向 __device__ 函数的指针：同一个归约循环，运算由参数选择
typedef int (*binop)(int, int);
__device__ int add(int a, int b) { return a + b; }
__device__ int bigger(int a, int b) { return a > b ? a : b; }
__device__ int fold(binop op, const int* x, int n) {
    int a = x[0];
    for (int i = 1; i < n; i++) a = op(a, x[i]);
    return a;
}
__global__ void fold_rows(const int* x, int* out, int n) {
    binop op = (threadIdx.x % 2 == 0) ? add : &bigger;
    out[threadIdx.x] = fold(op, x + threadIdx.x * n, n);
}
"""

_OVERLOAD = r"""
// 重载：同名的 __device__ 函数按参数类型选择
__device__ int twice(int v) { return 2 * v; }
__device__ float twice(float v) { return 2.0f * v; }
__global__ void doubled(const int* a, const float* b, float* out) {
    int i = threadIdx.x;
    out[i] = twice(a[i]) + twice(b[i]);
}
"""

_NAMESPACE = r"""
// 自己的命名空间：工具函数放在 util 里，调用时写 util::
namespace util {
__device__ float square(float v) { return v * v; }
}
__global__ void squares(const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = util::square(x[i]);
}
"""

_AUTO = r"""
// auto：局部变量的类型由初值推导
__global__ void auto_sum(const int* x, int* out, int n) {
    auto tid = threadIdx.x;
    auto acc = 0;
    for (auto j = 0; j < n; j++) acc += x[tid * n + j];
    out[tid] = acc;
}
"""

_CONSTEXPR = r"""
// constexpr 常量与函数：块大小与 warp 数都在编译期算出
constexpr int BLOCK = 64;
__host__ __device__ constexpr int warps(int b) { return b / 32; }
__global__ void per_warp_max(const int* x, int* out) {
    __shared__ int s[BLOCK];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * BLOCK + t];
    __syncthreads();
    if (t < warps(BLOCK)) {
        int m = s[t * 32];
        for (int j = 1; j < 32; j++) m = max(m, s[t * 32 + j]);
        out[blockIdx.x * warps(BLOCK) + t] = m;
    }
}
"""

_STATIC_CAST = r"""
// C++ 的类型转换运算符：static_cast 在 int 与 float 之间转换
__global__ void to_fixed(const float* x, int* q, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    q[i] = static_cast<int>(x[i] * scale);
}
"""

_TEMPORARIES = r"""
// 临时对象：MaxOp{} 作实参、Pair{a, b} 作值、return {lo, hi};
struct MaxOp { __device__ float operator()(float a, float b) const { return a > b ? a : b; } };
struct Pair { float lo, hi; };
template <class Op> __device__ float fold(const float* p, int n, Op op) {
    float acc = p[0];
    for (int k = 1; k < n; k++) acc = op(acc, p[k]);
    return acc;
}
__device__ Pair span(const float* p, int n) {
    float lo = p[0], hi = p[0];
    for (int k = 1; k < n; k++) { lo = fminf(lo, p[k]); hi = fmaxf(hi, p[k]); }
    return {lo, hi};
}
__global__ void row_spans(const float* x, float* top, float* width, int n) {
    int t = threadIdx.x;
    const float* row = x + t * n;
    Pair s = span(row, n);
    Pair both = Pair{fold(row, n, MaxOp{}), s.hi - s.lo};
    top[t] = both.lo;
    width[t] = both.hi;
}
"""

_LAMBDA = r"""
// lambda：按值捕获 [w] 与 [=]、auto 形参，作模板实参传给 __device__ 函数
template <class F> __device__ float fold_row(const float* p, int n, F f) {
    float acc = 0.0f;
    for (int k = 0; k < n; k++) acc = f(acc, p[k]);
    return acc;
}
__global__ void weighted_squares(const float* x, float* out, float w, int n) {
    int t = threadIdx.x;
    auto add_scaled = [w](float acc, float v) { return acc + w * v; };
    auto square = [=](auto v) { return v * v; };
    out[t] = square(fold_row(x + t * n, n, add_scaled));
}
"""

_LAMBDA_REF = r"""
// lambda 按引用捕获：[&] 累加进外层的 acc 与 seen；lambda 体直接用外层的 __shared__ 数组 part
__global__ void ref_lambda_sums(const float* x, float* out, int n) {
    __shared__ float part[32];
    int t = threadIdx.x;
    float acc = 0.0f;
    int seen = 0;
    auto take = [&](float v) { acc += v; seen++; };
    for (int k = 0; k < n; k++) take(x[t * n + k]);
    auto publish = [&acc, seen]() { part[threadIdx.x] = acc * seen; };
    publish();
    __syncthreads();
    auto fold = [&](int i) { return part[i] + part[31 - i]; };
    out[t] = fold(t);
}
"""

_CONSTRUCTORS = r"""
// 构造函数与默认成员初始值：MD acc; 从 (m, d) = (-inf, 0) 开始，MD(x) 是一个元素
// （-inf 写成位模式：NVRTC 没有 math.h 的 INFINITY）
struct MD {
    float m = __int_as_float(0xff800000);
    float d = 0.0f;
    __device__ MD() {}
    __device__ MD(float x) : m(x), d(1.0f) {}
    __device__ void add(MD o) {
        float M = fmaxf(m, o.m);
        d = d * expf(m - M) + o.d * expf(o.m - M);
        m = M;
    }
};
__global__ void online_max_den(const float* x, float* mx, float* den, int n) {
    int t = threadIdx.x;
    MD acc;
    for (int k = 0; k < n; k++) acc.add(MD(x[t * n + k]));
    mx[t] = acc.m;
    den[t] = acc.d;
}
"""


# ---------------------------------------------------------------- 文件作用域变量

_CONSTANT = r"""
// __constant__ 内存：主机在启动前写入（cudaMemcpyToSymbol，simt 里是 symbols=）
#define TAPS 5
__constant__ float taps[TAPS];
__constant__ int offset;
__global__ void fir(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int k = 0; k < TAPS; k++) {
        int j = i + k - offset;
        if (j >= 0 && j < n) acc += taps[k] * x[j];
    }
    y[i] = acc;
}
"""

_DEVICE_VAR = r"""
// 文件作用域的 __device__ 变量：整个网格共用一份，内核结束后由主机读回（cudaMemcpyFromSymbol）
__device__ int total;
__device__ int per_block[4];
__global__ void count_even(const int* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if ((x[i] & 1) == 0) {
        atomicAdd(&total, 1);
        atomicAdd(&per_block[blockIdx.x], 1);
    }
}
"""

# ---------------------------------------------------------------- 向量类型

_VEC = r"""
// 向量类型：make_float4 构造，.x/.y/.z/.w 读写
__global__ void swizzle(const float* x, float4* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 v = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
    float4 w;
    w.x = v.w; w.y = v.z; w.z = v.y; w.w = v.x + v.y;
    out[i] = w;
}
"""

_VEC_LOAD = r"""
// 16 字节的向量化读：reinterpret_cast<const float4*> 一次读 4 个 float
__global__ void sum4(const float* x, float* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        out[i] = (v.x + v.y) + (v.z + v.w);
    }
}
"""

# ---------------------------------------------------------------- cooperative groups

_CG_BLOCK = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// cooperative groups 的线程块：block.sync() 代替 __syncthreads()，thread_rank()、size()
__global__ void cg_block_sum(const float* x, float* out) {
    cg::thread_block block = cg::this_thread_block();
    __shared__ float s[128];
    unsigned int t = block.thread_rank();
    s[t] = x[blockIdx.x * block.size() + t];
    block.sync();
    for (unsigned int k = block.size() / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        block.sync();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
"""

_CG_TILE = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
// cooperative groups 的分块：tiled_partition<32> 的 shfl_down 与 cg::reduce
__global__ void cg_tile_sums(const int* x, int* by_shfl, int* by_reduce) {
    auto block = cg::this_thread_block();
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    for (int k = tile.size() / 2; k > 0; k >>= 1) v += tile.shfl_down(v, k);
    int r = cg::reduce(tile, x[i], cg::plus<int>());
    tile.sync();
    if (tile.thread_rank() == 0) by_shfl[i / 32] = v;
    by_reduce[i] = r;
}
"""

_CG_CLUSTER = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 线程块簇（sm_90）：__cluster_dims__ 在编译期给出簇的形状；各块的部分和经分布式共享内存（map_shared_rank）
// 交给簇里的 0 号块。第一次 cluster.sync()：各块的部分和都写好；第二次：0 号块读完之前别的块不能退出
__global__ void __cluster_dims__(4, 1, 1) cg_cluster_sums(const float* x, float* out, unsigned int* ranks) {
    cg::cluster_group cluster = cg::this_cluster();
    __shared__ float s[64];
    __shared__ float partial;
    unsigned int t = threadIdx.x;
    s[t] = x[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) partial = s[0];
    ranks[blockIdx.x * blockDim.x + t] = cluster.thread_rank() * 16 + cluster.block_rank();
    cluster.sync();
    if (cluster.block_rank() == 0 && t == 0) {
        float total = 0.0f;
        for (unsigned int r = 0; r < cluster.num_blocks(); ++r)
            total += *cluster.map_shared_rank(&partial, r);
        out[blockIdx.x / cluster.num_blocks()] = total;
    }
    cluster.sync();
}
"""

_PRINTF = r"""
// 设备端的 printf（CUDA 的头文件已经声明，NVRTC 里没有 <cstdio>）：格式串是字符串常量，返回格式串之后的实参个数；每个线程印出一行（GPU 上顺序没有保证）
__global__ void printf_count(const float* x, int* n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    n[i] = i % 2 ? printf("i=%3d u=%u h=%#x f=%8.3f e=%.2e g=%g c=%c %s\n", i, (unsigned)(i - 4), i * 4099, x[i],
                          x[i] * 1e5f, x[i], 'a' + i, "odd")
                 : printf("even\n");
}
"""

# ---------------------------------------------------------------- 内置函数与预处理

_MUL24 = r"""
// __mul24：24 位整数乘法（老代码里常用来算下标）
__global__ void mul24_index(const int* x, int* y) {
    int i = __mul24(blockIdx.x, blockDim.x) + threadIdx.x;
    y[i] = __mul24(x[i], 3);
}
"""

_LDCS = r"""
// 带缓存提示的加载：__ldcs（流式）读float4，__ldg（只读缓存）读标量
__global__ void ldcs_sum4(const float4* x, const float* b, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float4 v = __ldcs(x + i);
    y[i] = (v.x + v.y) + (v.z + v.w) + __ldg(b + i);
}
"""

_INCLUDE = r"""
#include "local.h"
// #include "local.h"：源文件旁边的头文件提供 warp 求和
__global__ void include_sum(const float* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_sum_f(x[i]);
    if ((threadIdx.x & 31) == 0) out[i / 32] = v;
}
"""

_LOCAL_H = r"""// local.h
__device__ float warp_sum_f(float v) {
    for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffff, v, k);
    return v;
}
"""

_UNROLL = r"""
// #pragma unroll：每个线程同时发出 4 次独立的读
#define PER_THREAD 4
__global__ void unrolled_sum(const float* x, float* out) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * PER_THREAD;
    float acc[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; k++) acc[k] = x[base + k];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < PER_THREAD; k++) s += acc[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""

# ---------------------------------------------------------------- 有意拒绝的写法（行号从源文件第 1 行数起）

_TEXTURE = r"""
// 纹理对象：tex1Dfetch<T> 从主机绑定的纹理读（纹理引用 texture<> 在 CUDA 12 中已移除，nvcc 报 CompileError）
__global__ void from_texture(cudaTextureObject_t tex, float* y) {
    int i = threadIdx.x;
    y[i] = tex1Dfetch<float>(tex, i);
}
"""

_ASM = r"""
// 内联 PTX 汇编：读 %laneid
__global__ void lane_ids(int* out) {
    int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    out[threadIdx.x] = lane;
}
"""

_DYNPAR = r"""
// 动态并行：内核里再启动一个内核
__global__ void child(float* y) { y[threadIdx.x] = 1.0f; }
__global__ void parent(float* y) {
    if (threadIdx.x == 0)
        child<<<1, 32>>>(y);
}
"""

_NEW = r"""
// 设备端 new / delete（堆分配）
__global__ void heap_scratch(float* y) {
    float* tmp = new float[4];
    for (int k = 0; k < 4; k++) tmp[k] = k;
    y[threadIdx.x] = tmp[threadIdx.x % 4];
    delete[] tmp;
}
"""

_VIRTUAL = r"""
// 虚函数：按对象的动态类型调用
struct Shape {
    __device__ virtual float area() const { return 0.0f; }
};
__global__ void areas(float* y) {
    Shape s;
    y[threadIdx.x] = s.area();
}
"""

_EXCEPT = r"""
// 异常：设备代码里的 throw
__global__ void checked(const float* x, float* y) {
    if (x[threadIdx.x] < 0.0f)
        throw 1;
    y[threadIdx.x] = x[threadIdx.x];
}
"""


_MIXED_STRUCT = r"""
// 成员大小不同的结构体放在共享内存与全局内存里：按 C 的布局逐字节存放（sizeof(Rec) == 16）
struct Rec { unsigned char tag; unsigned char flag; short delta; int value; double scale; };
__global__ void pack_records(const int* x, Rec* out, int* sizes) {
    __shared__ Rec s[32];
    int t = threadIdx.x;
    s[t].tag = (unsigned char)(t * 9);
    s[t].flag = 1;
    s[t].delta = (short)(x[t] - 1000);
    s[t].value = x[t] * 3;
    s[t].scale = 0.5 * t;
    __syncthreads();
    out[t] = s[31 - t];
    if (t == 0) sizes[0] = (int)sizeof(Rec);
}
"""

_BYTE_CAST = r"""
// 跨元素大小的指针转换：字节数组按 4 字节的字读，int 数组按字节写
__global__ void bytes_to_words(const unsigned char* b, unsigned int* w, int* y) {
    int i = threadIdx.x;
    const unsigned int* p = (const unsigned int*)b;
    w[i] = p[i];
    unsigned char* c = (unsigned char*)(y + i);
    c[0] = b[4 * i];
    c[3] = 0x80;
}
"""

_VOID_PTR = r"""
// void* 参数：在内核里转换成真正的元素类型再用
__device__ void put(void* dst, int i, int v) { ((int*)dst)[i] = v; }
__global__ void through_void(void* buf, const int* x) {
    int i = threadIdx.x;
    void* p = buf;
    put(p, i, x[i] * 2);
}
"""

_PTR_VARS = r"""
// __shared__ 指针变量：指针的值存在共享内存里，其他线程读回来仍指向同一个数组
__device__ int table[64];
__global__ void pick_rows(const int* x, int* out, int which) {
    __shared__ const int* row;
    int t = threadIdx.x;
    table[t] = x[t] + 1;
    if (t == 0) row = x + which * 32;
    __syncthreads();
    int* cursor = table;
    int** where = &cursor;             // 指向指针的指针：cursor 搬进局部内存
    out[t] = row[t] + (*where)[t];
}
"""

_UNION = r"""
// 联合：几个成员共用同样的字节（这里用来看 float 的位模式）
union Bits { float f; unsigned int u; unsigned char b[4]; };
__global__ void float_bits(const float* x, unsigned int* out, unsigned int* top) {
    __shared__ Bits s[32];
    int t = threadIdx.x;
    Bits v;
    v.f = x[t];
    s[t] = v;
    __syncthreads();
    out[t] = s[31 - t].u;
    top[t] = v.b[3];                   // 小端：第 3 个字节是符号位与指数的高 7 位
}
"""

_FILE_PTR = r"""
// 文件作用域的指针变量：一个线程写进去，屏障之后别的线程经它访问
__device__ int* g_dst;
__global__ void via_global_pointer(int* out, const int* x) {
    int t = threadIdx.x;
    if (t == 0) g_dst = out;
    __syncthreads();
    g_dst[t] = x[t] + t;
}
"""


_GRID_SYNC = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// 网格屏障：各块先写出部分和，grid.sync() 之后第 0 个线程把它们加起来（一次启动；要协作启动）
__global__ void grid_total(const int* x, int* partial, int* out, int n) {
    cg::grid_group grid = cg::this_grid();
    __shared__ int s[64];
    int acc = 0;
    for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size()) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
    grid.sync();
    if (grid.thread_rank() == 0) {
        int t = 0;
        for (unsigned int b = 0; b < grid.num_blocks(); b++) t += partial[b];
        out[0] = t;
    }
}
"""

_CLOCK = r"""
// clock64() 单调不减，__nanosleep 让线程停一会儿：计时本身不进结果，结果只取决于先后
__global__ void clock_order(const int* x, int* out) {
    long long t0 = clock64();
    __nanosleep(100);
    int v = 2 * x[threadIdx.x];
    long long t1 = clock64();
    out[threadIdx.x] = t1 >= t0 ? v : -1;
}
"""


_VOTES = r"""
// warp 投票：__any_sync、__all_sync、__uni_sync，与 __match_any_sync（值与本车道相同的车道的位图）
__global__ void votes(const int* x, int* out, unsigned* match) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    int any = __any_sync(0xffffffff, v > 5);
    int all = __all_sync(0xffffffff, v >= 0);
    int uni = __uni_sync(0xffffffff, v >= 0);
    match[i] = __match_any_sync(0xffffffff, v);
    out[i] = any + 2 * all + 4 * uni;
}
"""

_HALF_SHARED = r"""
#include <cuda_fp16.h>
// __half 放在共享内存里（每个 2 字节）；__hadd 的和按 float 算、舍入回 __half
__global__ void half_pairs(const __half* x, __half* out) {
    __shared__ __half s[64];
    int t = threadIdx.x;
    s[t] = x[t];
    __syncthreads();
    out[t] = __hadd(s[t], s[63 - t]);
}
"""


def _votes_inputs(rng):
    x = rng.integers(0, 8, 64).astype(np.int32)
    x[32 + 5] = -1                       # 第 2 个 warp 有一个负数：__all_sync 为假，谓词也不一致
    return Case([x, _zeros(64, np.int32), _zeros(64, np.uint32)])


def _votes_expected(c):
    x = c.args[0].reshape(2, 32)
    flags = (x > 5).any(1) * 1 + (x >= 0).all(1) * 2 + ((x >= 0).all(1) | (x < 0).all(1)) * 4
    match = [sum(1 << j for j in range(32) if w[j] == w[k]) for w in x for k in range(32)]
    return {1: np.repeat(flags, 32).astype(np.int32), 2: np.array(match, np.uint32)}


# ---------------------------------------------------------------- 登记表

def _c(name, category, description, source, kernel, grid, block, inputs, expected=None, bound=None, **kw):
    return Construct(name=name, category=category, description=description, source=source, kernel=kernel,
                     grid=grid, block=block, inputs=inputs, expected=expected, bound=bound, **kw)


def _refused(name, description, source, kernel, line, args):
    return _c(name, "有意拒绝", description, source, kernel, 1, 32, lambda rng: Case(args()),
              status_expected="refuse", refused_line=line)


REGISTRY: tuple[Construct, ...] = (
    # 课程写法
    _c("shared_tree", "课程写法", "共享内存树形归约（顺序寻址）", _TREE, "tree_sum", 3, 128,
       lambda rng: Case([_floats(rng, 384), _zeros(3), np.int32(384)]),
       lambda c: {1: _block_sums(c.args[0], 128)}, lambda c: {1: _block_bound(c.args[0], 128)}),
    _c("dynamic_shared", "课程写法", "动态共享内存extern __shared__与网格步长循环", _DYN_SHARED, "grid_stride_sum", 2, 64,
       lambda rng: Case([_floats(rng, 1000), _zeros(2), np.int32(1000)]),
       lambda c: {1: np.array([_f64(c.args[0])[(np.arange(1000) // 64) % 2 == b].sum() for b in range(2)])},
       lambda c: {1: sum_bound(np.abs(_f64(c.args[0])).sum(), 1000)}, shared_bytes=64 * 4),
    _c("warp_shuffle", "课程写法", "__shfl_down_sync求一个warp之和", _WARP, "warp_sums", 2, 64,
       lambda rng: Case([_ints(rng, 128), _zeros(4, np.int32)]),
       lambda c: {1: c.args[0].reshape(-1, 32).sum(1)}),
    _c("warp_xor", "课程写法", "__shfl_xor_sync蝶形归约求最大值", _XOR, "warp_allmax", 1, 64,
       lambda rng: Case([_floats(rng, 64), _zeros(64)]),
       lambda c: {1: np.repeat(c.args[0].reshape(-1, 32).max(1), 32)}),
    _c("atomics", "课程写法", "共享内存直方图 + atomicAdd / atomicMax", _ATOMIC, "histogram", 2, 64,
       lambda rng: Case([_ints(rng, 300, 0, 1000), _zeros(16, np.int32), np.full(1, -1, np.int32), np.int32(300)]),
       lambda c: {1: np.bincount(c.args[0] & 15, minlength=16), 2: np.array([c.args[0].max()])}),
    _c("ballot", "内置函数", "__ballot_sync与__popc数出满足条件的线程", _BALLOT, "count_positive", 1, 64,
       lambda rng: Case([_floats(rng, 64), _zeros(2, np.int32)]),
       lambda c: {1: (c.args[0].reshape(-1, 32) > 0).sum(1)}),
    # 结构体、枚举、typedef
    _c("struct_by_value", "结构体", "结构体的成员、初始化列表、共享内存数组，按值传参与返回", _STRUCT, "minmax", 1, 64,
       lambda rng: Case([_floats(rng, 64), _zeros(2)]),
       lambda c: {1: np.array([c.args[0].min(), c.args[0].max()])}),
    _c("struct_by_pointer", "结构体", "全局内存里的结构体数组，按指针访问成员（p->x、pts[i].y）", _STRUCT_ARRAY, "centroid", 2, 32,
       lambda rng: Case([_ints(rng, 120, -9, 9).astype(np.float32), _zeros(2), _zeros(60), np.int32(60)]),
       lambda c: {1: c.args[0].reshape(-1, 2).astype(np.float64).sum(0),
                  2: (c.args[0].reshape(-1, 2).astype(np.float64) ** 2).sum(1)}),
    _c("struct_mixed_members", "结构体", "成员类型不同的结构体（int与float）", _STRUCT_MIXED, "stats", 2, 32,
       lambda rng: Case([_ints(rng, 50, -9, 9).astype(np.float32), _zeros(2, np.int32), np.int32(50)]),
       # out 是 Stat 的存储（两个 4 字节的单元）：count 是 int，sum 是按位存放的 float
       lambda c: {1: np.array([50, np.float32(_f64(c.args[0]).sum()).view(np.int32)], np.int32)}),
    _c("struct_nested_members", "结构体", "数组成员与嵌套结构体（局部结构体的成员数组按下标访问，&p->a[k]）",
       _STRUCT_NESTED, "histogram4", 1, 32,
       # out 是 Hist 的存储（6 个 4 字节的单元，按第一个成员记为 float）：count[] 是按位存放的 int
       lambda rng: Case([_floats(rng, 100), _zeros(6), np.int32(100)]),
       lambda c: {1: np.concatenate([np.array([-2.0, 2.0], np.float32), np.bincount(
           np.floor((np.clip(c.args[0], np.float32(-2), np.float32(2) - np.float32(1e-3)) - np.float32(-2)) /
                    np.float32(4) * np.float32(4)).astype(int), minlength=4).astype(np.int32).view(np.float32)])}),
    _c("struct_methods", "结构体", "结构体的成员函数与运算符（this、隐式成员、const成员函数）", _METHODS, "methods", 1, 32,
       lambda rng: Case([_ints(rng, 64, -9, 9).astype(np.float32), _zeros(32)]),
       lambda c: {1: (_f64(c.args[0]).reshape(-1, 2) ** 2).sum(1)}),
    _c("shared_memory_template", "结构体", "空结构体SharedMemory<T>的operator T*()取得动态共享内存", _SHARED_MEMORY_T,
       "reduce_t<int>", 2, 64,
       lambda rng: Case([_ints(rng, 128), _zeros(2, np.int32)]),
       lambda c: {1: c.args[0].reshape(2, 64).sum(1)}, shared_bytes=256),
    _c("vector_types", "向量类型", "uchar4、float3与make_uchar4（全部48种向量类型）", _VEC_TYPES, "shade", 1, 32,
       lambda rng: Case([rng.integers(0, 60, 90).astype(np.float32), _zeros(120, np.uint8), np.int32(30)]),
       lambda c: {1: np.concatenate([c.args[0].reshape(-1, 3), c.args[0].reshape(-1, 3).sum(1, keepdims=True)],
                                    1).reshape(-1).astype(np.uint8)}),
    _c("gpuverify_annotations", "内置函数", "GPUVerify的__requires、__invariant（空操作）与逐线程检查的__assert", _GPUVERIFY,
       "scaled", 2, 32,
       lambda rng: Case([_ints(rng, 64, 0, 20), _zeros(64, np.int32), np.int32(64)]),
       lambda c: {1: 3 * c.args[0]}, files={"gv.h": _GV_H}),
    _c("atomics_more", "内置函数", "atomicInc、atomicCAS循环与atomicOr", _ATOMIC_MORE, "ring", 2, 32,
       lambda rng: Case([_ints(rng, 64), _zeros(1, np.uint32), np.full(1, -1, np.int32), _zeros(2, np.uint32)]),
       lambda c: {1: np.array([64 % 7], np.uint32),
                  2: np.array([int(np.flatnonzero(c.args[0] > 0)[-1]) if (c.args[0] > 0).any() else -1], np.int32),
                  3: np.array([sum(1 << j for j in range(32) if c.args[0][32 * w + j] > 0) for w in range(2)],
                              np.uint32)}),
    _c("scoped_atomics", "内置函数", "atomicAdd_block等线程块作用域与_system的原子操作", _SCOPED_ATOMIC, "block_bins", 2, 32,
       lambda rng: Case([_ints(rng, 64), _zeros(8, np.int32), _zeros(4, np.int32), _zeros(2, np.uint32)]),
       lambda c: {1: np.stack([np.bincount(c.args[0][32 * k:32 * (k + 1)] % 4, minlength=4) for k in range(2)])
                  .astype(np.int32).ravel(),
                  2: np.bincount(c.args[0] % 4, minlength=4).astype(np.int32),
                  3: (c.args[0].reshape(2, 32).max(1) + 100).astype(np.uint32)}),
    _c("struct_pointer_members", "结构体", "指针成员与继承的结构体（放在寄存器里，按值传给__device__函数）",
       _STRUCT_PTR_MEMBER, "row_totals", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 5, -9, 9).astype(np.float32), _zeros(32), np.int32(5)]),
       lambda c: {1: 0.5 * _f64(c.args[0]).reshape(32, 5).sum(1)}),
    _c("memcpy_memset", "内置函数", "memcpy复制结构体、memset清零", _MEMCPY, "copy_recs", 2, 32,
       lambda rng: Case([_ints(rng, 128), _zeros(128, np.int32), np.ones(128, np.int32)]),
       lambda c: {1: c.args[0].copy(), 2: np.zeros(128, np.int32)}),
    _c("switch", "控制流", "switch语句：case贯穿、default与break", _SWITCH, "classify", 2, 32,
       lambda rng: Case([_ints(rng, 64, 0, 100), _zeros(64, np.int32)]),
       lambda c: {1: np.select([c.args[0] % 4 == 0, c.args[0] % 4 < 3], [100, 11], 1)}),
    _c("enum", "枚举", "枚举选择归约运算，枚举常量作数组长度", _ENUM, "three_reductions", 1, 32,
       lambda rng: Case([_floats(rng, 32), _zeros(3)]),
       lambda c: {1: np.array([_f64(c.args[0]).sum(), c.args[0].max(), c.args[0].min()])},
       lambda c: {1: np.array([sum_bound(np.abs(_f64(c.args[0])).sum(), 32), 0, 0])}),
    _c("typedef", "typedef", "typedef定义的标量与指针类型", _TYPEDEF, "scale_add", 2, 32,
       lambda rng: Case([_floats(rng, 50), _floats(rng, 50), np.float32(0.5), np.int32(50)]),
       lambda c: {1: c.args[2] * c.args[0] + c.args[1]},
       # nvcc 可能把 a * x + y 合成一条 FMA（只舍入一次）：允许两次舍入之差
       lambda c: {1: 2 * U32 * (np.abs(_f64(c.args[2]) * c.args[0]) + np.abs(_f64(c.args[1])))}),
    # 模板
    _c("template_int_kernel", "模板", "整数模板形参的内核，以block_sum<256>启动，显式实例化", _TPL_KERNEL, "block_sum<256>", 2, 256,
       lambda rng: Case([_floats(rng, 512), _zeros(2)]),
       lambda c: {1: _block_sums(c.args[0], 256)}, lambda c: {1: _block_bound(c.args[0], 256)}),
    _c("template_type", "模板", "类型模板形参，显式实参调用__device__模板", _TPL_TYPE, "warp_totals<int>", 2, 64,
       lambda rng: Case([_ints(rng, 128), _zeros(4, np.int32)]),
       lambda c: {1: c.args[0].reshape(-1, 32).sum(1)}),
    _c("template_implicit", "模板", "隐式实例化：调用函数模板不写实参，由实参推导", _TPL_IMPLICIT, "sum_squares", 2, 32,
       lambda rng: Case([_ints(rng, 64), _zeros(1, np.int32)]),
       lambda c: {1: np.array([(c.args[0].astype(np.int64) ** 2).sum()])}),
    _c("class_template", "模板", "类模板（带成员函数的定长累加器）", _TPL_CLASS, "accum_rows", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 6), _zeros(32, np.int32), np.int32(6)]),
       lambda c: {1: c.args[0].reshape(32, 6).sum(1)}),
    # C++ 的其他写法
    _c("reference_params", "C++", "__device__函数的引用参数T&与const T&", _REFS, "row_mean", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 8, -8, 8).astype(np.float32), _zeros(32), np.int32(8)]),
       lambda c: {1: c.args[0].reshape(32, 8).astype(np.float64).sum(1) / 8}),
    _c("address_of_local", "C++", "取局部变量的地址&x，交给__device__函数写回", _ADDR, "spans", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 5), _zeros(32, np.int32), np.int32(5)]),
       lambda c: {1: np.ptp(c.args[0].reshape(32, 5), axis=1)}),
    _c("function_pointer", "C++", "指向__device__函数的指针，各线程指向不同的函数", _FNPTR, "fold_rows", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 4), _zeros(32, np.int32), np.int32(4)]),
       lambda c: {1: np.where(np.arange(32) % 2 == 0, c.args[0].reshape(32, 4).sum(1), c.args[0].reshape(32, 4).max(1))}),
    _c("overload", "C++", "重载的__device__函数（按参数类型选择）", _OVERLOAD, "doubled", 1, 32,
       lambda rng: Case([_ints(rng, 32), _ints(rng, 32, -8, 8).astype(np.float32), _zeros(32)]),
       lambda c: {2: 2.0 * c.args[0] + 2.0 * c.args[1]}),
    _c("namespace", "C++", "自己的命名空间与util::f调用", _NAMESPACE, "squares", 1, 32,
       lambda rng: Case([_ints(rng, 32, -8, 8).astype(np.float32), _zeros(32)]),
       lambda c: {1: _f64(c.args[0]) ** 2}),
    _c("auto", "C++", "auto推导局部变量的类型", _AUTO, "auto_sum", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 3), _zeros(32, np.int32), np.int32(3)]),
       lambda c: {1: c.args[0].reshape(32, 3).sum(1)}),
    _c("constexpr", "C++", "constexpr常量与函数作数组长度和条件", _CONSTEXPR, "per_warp_max", 2, 64,
       lambda rng: Case([_ints(rng, 128), _zeros(4, np.int32)]),
       lambda c: {1: c.args[0].reshape(-1, 32).max(1)}),
    _c("static_cast", "C++", "static_cast在float与int之间转换", _STATIC_CAST, "to_fixed", 1, 32,
       lambda rng: Case([_floats(rng, 32), _zeros(32, np.int32), np.float32(100.0)]),
       lambda c: {1: np.trunc(c.args[0] * np.float32(100.0)).astype(np.int32)}),
    _c("struct_temporaries", "C++", "临时对象：MaxOp{}作实参、Pair{a, b}作值、return {lo, hi};", _TEMPORARIES,
       "row_spans", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 7, -20, 20).astype(np.float32), _zeros(32), _zeros(32), np.int32(7)]),
       lambda c: {1: c.args[0].reshape(32, 7).max(1), 2: np.ptp(c.args[0].reshape(32, 7), axis=1)}),
    _c("lambda", "C++", "lambda：按值捕获[w]与[=]、auto形参，作模板实参", _LAMBDA, "weighted_squares", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 6, -9, 9).astype(np.float32), _zeros(32), np.float32(0.5), np.int32(6)]),
       # 整数乘 0.5 与它们的和、平方都能用 float32 精确表示：逐位相等
       lambda c: {1: (0.5 * _f64(c.args[0]).reshape(32, 6).sum(1)) ** 2}),
    _c("lambda_by_reference", "C++", "lambda：按引用捕获[&]与[&acc, seen]，体里直接用外层的__shared__数组", _LAMBDA_REF,
       "ref_lambda_sums", 1, 32,
       lambda rng: Case([_ints(rng, 32 * 6, -9, 9).astype(np.float32), _zeros(32), np.int32(6)]),
       # 小整数的和乘 6 再两两相加：float32 精确，逐位相等
       lambda c: {1: (lambda p: p + p[::-1])(6 * _f64(c.args[0]).reshape(32, 6).sum(1))}),
    _c("constructors", "C++", "构造函数（成员初始化列表）与默认成员初始值（float m = -inf;）", _CONSTRUCTORS,
       "online_max_den", 1, 32,
       lambda rng: Case([_floats(rng, 32 * 8), _zeros(32), _zeros(32), np.int32(8)]),
       lambda c: {1: c.args[0].reshape(32, 8).max(1),
                  2: np.exp(_f64(c.args[0]).reshape(32, 8) - _f64(c.args[0]).reshape(32, 8).max(1, keepdims=True)).sum(1)},
       # 每步一次乘加、两次 expf（CUDA 至多 2 ulp）：8 步的相对误差不超过 8 * 8 u
       lambda c: {2: 64 * U32 * np.exp(_f64(c.args[0]).reshape(32, 8)
                                        - _f64(c.args[0]).reshape(32, 8).max(1, keepdims=True)).sum(1)}),
    # 文件作用域变量
    _c("constant_memory", "文件作用域变量", "__constant__数组与标量，由主机在启动前写入（symbols=）", _CONSTANT, "fir", 2, 32,
       lambda rng: Case([_ints(rng, 60, -5, 5).astype(np.float32), _zeros(60), np.int32(60)],
                        {"taps": np.array([1, -2, 3, -2, 1], np.float32), "offset": np.int32(2)}),
       lambda c: {1: np.convolve(_f64(c.args[0]), _f64(c.symbols["taps"])[::-1], mode="same")}),
    _c("device_variable", "文件作用域变量", "文件作用域的__device__变量，启动后读回", _DEVICE_VAR, "count_even", 4, 32,
       lambda rng: Case([_ints(rng, 128)], {"total": np.zeros(1, np.int32), "per_block": np.zeros(4, np.int32)}),
       lambda c: {"total": np.array([(c.args[0] % 2 == 0).sum()]),
                  "per_block": (c.args[0].reshape(4, 32) % 2 == 0).sum(1)}),
    # 向量类型
    _c("float4_members", "向量类型", "float4的.x/.y/.z/.w与make_float4", _VEC, "swizzle", 1, 32,
       lambda rng: Case([_ints(rng, 128, -9, 9).astype(np.float32), _zeros(128)]),
       lambda c: {1: (lambda v: np.stack([v[:, 3], v[:, 2], v[:, 1], v[:, 0] + v[:, 1]], 1).reshape(-1))(
           _f64(c.args[0]).reshape(-1, 4))}),
    _c("float4_load", "向量类型", "reinterpret_cast<const float4*>的16字节读", _VEC_LOAD, "sum4", 1, 32,
       lambda rng: Case([_floats(rng, 120), _zeros(30), np.int32(30)]),
       lambda c: {1: _f64(c.args[0]).reshape(-1, 4).sum(1)},
       lambda c: {1: sum_bound(np.abs(_f64(c.args[0])).reshape(-1, 4).sum(1), 4)}),
    # cooperative groups
    _c("cg_block", "cooperative groups", "this_thread_block()的sync、thread_rank、size", _CG_BLOCK, "cg_block_sum", 2, 128,
       lambda rng: Case([_floats(rng, 256), _zeros(2)]),
       lambda c: {1: _block_sums(c.args[0], 128)}, lambda c: {1: _block_bound(c.args[0], 128)}),
    _c("cg_tile", "cooperative groups", "tiled_partition<32>的shfl_down、sync与cg::reduce", _CG_TILE, "cg_tile_sums", 2, 64,
       lambda rng: Case([_ints(rng, 128), _zeros(4, np.int32), _zeros(128, np.int32)]),
       lambda c: {1: c.args[0].reshape(-1, 32).sum(1), 2: np.repeat(c.args[0].reshape(-1, 32).sum(1), 32)}),
    _c("cg_cluster", "cooperative groups", "线程块簇：__cluster_dims__、this_cluster()的sync、block_rank、thread_rank、"
       "num_blocks与map_shared_rank（分布式共享内存）", _CG_CLUSTER, "cg_cluster_sums", 8, 64,
       lambda rng: Case([_floats(rng, 512), _zeros(2), _zeros(512, np.uint32)]),
       lambda c: {1: _block_sums(c.args[0], 256),
                  2: ((np.arange(512) % 256) * 16 + (np.arange(512) // 64) % 4).astype(np.uint32)},
       lambda c: {1: _block_bound(c.args[0], 256)}),
    _c("grid_sync", "cooperative groups", "this_grid()的sync、thread_rank、size与num_blocks（网格屏障，协作启动）",
       _GRID_SYNC, "grid_total", 4, 64,
       lambda rng: Case([_ints(rng, 1000), _zeros(4, np.int32), _zeros(1, np.int32), np.int32(1000)]),
       lambda c: {1: np.array([c.args[0][(np.arange(1000) % 256) // 64 == b].sum() for b in range(4)], np.int32),
                  2: np.array([c.args[0].sum()], np.int32)}),
    _c("warp_votes", "内置函数", "__any_sync、__all_sync、__uni_sync与__match_any_sync", _VOTES, "votes", 2, 32,
       _votes_inputs, _votes_expected),
    _c("half_shared", "内置函数", "__half放在共享内存里，__hadd的和舍入回__half", _HALF_SHARED, "half_pairs", 1, 64,
       lambda rng: Case([(rng.standard_normal(64) * 8).astype(np.float16), _zeros(64, np.float16)]),
       lambda c: {1: c.args[0] + c.args[0][::-1]}),
    _c("clock64", "内置函数", "clock64()单调不减与__nanosleep", _CLOCK, "clock_order", 1, 32,
       lambda rng: Case([_ints(rng, 32), _zeros(32, np.int32)]),
       lambda c: {1: 2 * c.args[0]}),
    _c("printf", "内置函数", "设备端的printf：格式串与%s的实参是字符串常量，返回实参个数", _PRINTF, "printf_count", 2, 4,
       lambda rng: Case([_floats(rng, 8), _zeros(8, np.int32)]),
       lambda c: {1: np.where(np.arange(8) % 2 == 1, 8, 0).astype(np.int32)}),
    # 内置函数与预处理
    _c("mul24", "内置函数", "__mul24算下标与乘积", _MUL24, "mul24_index", 2, 32,
       lambda rng: Case([_ints(rng, 64, -1000, 1000), _zeros(64, np.int32)]),
       lambda c: {1: c.args[0] * 3}),
    _c("cache_hint_loads", "内置函数", "__ldcs读float4、__ldg读标量（缓存提示按普通的加载执行）", _LDCS, "ldcs_sum4", 2, 32,
       lambda rng: Case([_floats(rng, 256), _floats(rng, 64), _zeros(64)]),
       lambda c: {2: _f64(c.args[0]).reshape(-1, 4).sum(1) + _f64(c.args[1])},
       lambda c: {2: 4 * 2.0**-24 * (np.abs(_f64(c.args[0])).reshape(-1, 4).sum(1) + np.abs(_f64(c.args[1])))}),
    _c("include_local", "预处理", "#include \"local.h\"读入源文件旁边的头文件", _INCLUDE, "include_sum", 1, 64,
       lambda rng: Case([_ints(rng, 64, -9, 9).astype(np.float32), _zeros(2)]),
       lambda c: {1: _f64(c.args[0]).reshape(-1, 32).sum(1)}, files={"local.h": _LOCAL_H}),
    _c("pragma_unroll", "预处理", "#pragma unroll展开的局部数组循环", _UNROLL, "unrolled_sum", 1, 32,
       lambda rng: Case([_floats(rng, 128), _zeros(32)]),
       lambda c: {1: _f64(c.args[0]).reshape(-1, 4).sum(1)},
       lambda c: {1: sum_bound(np.abs(_f64(c.args[0])).reshape(-1, 4).sum(1), 4)}),
    # 按字节寻址的内存
    _c("mixed_struct_memory", "按字节寻址", "成员大小不同的结构体放在共享内存和全局数组里（按C的布局）", _MIXED_STRUCT,
       "pack_records", 1, 32,
       lambda rng: Case([_ints(rng, 32, 0, 2000), np.zeros(32 * 16, np.uint8), _zeros(1, np.int32)]),
       lambda c: {1: _records(c.args[0]), 2: np.array([16])}),
    _c("byte_pointer_cast", "按字节寻址", "unsigned char*与unsigned int*、int*与unsigned char*之间的指针转换", _BYTE_CAST,
       "bytes_to_words", 1, 32,
       lambda rng: Case([_ints(rng, 128, 0, 256, np.uint8), _zeros(32, np.uint32), _ints(rng, 32, 0, 1 << 20)]),
       lambda c: {1: c.args[0].view(np.uint32),
                  2: (c.args[2] & 0x00FFFF00) | c.args[0][0::4].astype(np.int32) | np.int32(-(1 << 31))}),
    _c("void_pointer", "按字节寻址", "void*参数与void*局部变量，转换回int*再写", _VOID_PTR, "through_void", 1, 32,
       lambda rng: Case([np.zeros(32, np.int32), _ints(rng, 32)]),
       lambda c: {0: c.args[1] * 2}),
    _c("pointer_variables", "按字节寻址", "__shared__指针变量与指向指针的指针（指针存进内存再读回）", _PTR_VARS,
       "pick_rows", 1, 32,
       lambda rng: Case([_ints(rng, 96), _zeros(32, np.int32), np.int32(2)]),
       lambda c: {1: c.args[0][64:96] + c.args[0][:32] + 1}),
    _c("union", "按字节寻址", "联合union：放在寄存器里与共享内存里，读另一个成员看到同样的字节", _UNION,
       "float_bits", 1, 32,
       lambda rng: Case([(rng.standard_normal(32) * 100).astype(np.float32), _zeros(32, np.uint32),
                         _zeros(32, np.uint32)]),
       lambda c: {1: c.args[0].view(np.uint32)[::-1], 2: c.args[0].view(np.uint32) >> 24}),
    _c("file_scope_pointer", "按字节寻址", "文件作用域的__device__指针变量（一个线程写入，其他线程经它访问）",
       _FILE_PTR, "via_global_pointer", 1, 32,
       lambda rng: Case([_zeros(32, np.int32), _ints(rng, 32)]),
       lambda c: {0: c.args[1] + np.arange(32, dtype=np.int32)}),
    # 有意拒绝的写法
    _refused("texture", "纹理对象cudaTextureObject_t与tex1Dfetch<T>", _TEXTURE, "from_texture", 5,
             lambda: [0, _zeros(32)]),
    _refused("inline_asm", "内联PTX汇编asm(...)", _ASM, "lane_ids", 5, lambda: [_zeros(32, np.int32)]),
    _refused("dynamic_parallelism", "动态并行：内核里用<<<...>>>启动内核", _DYNPAR, "parent", 6, lambda: [_zeros(32)]),
    _refused("new_delete", "设备端new / delete", _NEW, "heap_scratch", 4, lambda: [_zeros(32)]),
    _refused("virtual", "虚函数", _VIRTUAL, "areas", 4, lambda: [_zeros(32)]),
    _refused("exceptions", "设备代码里的throw", _EXCEPT, "checked", 5, lambda: [_zeros(32), _zeros(32)]),
)

_BY_NAME = {c.name: c for c in REGISTRY}
assert len(_BY_NAME) == len(REGISTRY), "登记表里有重名的项"


def by_name(name: str) -> Construct:
    """按名字取登记项。"""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"没有名为 {name!r} 的构造；可选：{', '.join(_BY_NAME)} (no construct {name!r})") from None


# ---------------------------------------------------------------- 运行与核对

def make_case(c: Construct) -> Case:
    """固定种子（由名字得出）造出输入：两次调用得到相同的数组。"""
    return c.inputs(_rng_of(c.name))


def materialize(c: Construct, directory) -> Path:
    """把源文件（``NAME.cu``）与它的头文件写进 ``directory``，返回 .cu 的路径。"""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for fname, text in c.files.items():
        (d / fname).write_text(text, encoding="utf-8")
    p = d / f"{c.name}.cu"
    p.write_text(c.source, encoding="utf-8")
    return p


def source_sha256(c: Construct) -> str:
    """源码与头文件的 sha256：GPU 对照数据据此判断是否过期。"""
    h = hashlib.sha256(c.source.encode())
    for fname in sorted(c.files):
        h.update(b"\0" + fname.encode() + b"\0" + c.files[fname].encode())
    return h.hexdigest()


def _copy(case: Case) -> Case:
    return Case([np.copy(a) if isinstance(a, np.ndarray) else a for a in case.args],
                {k: np.copy(v) for k, v in case.symbols.items()})


def outputs_of(c: Construct, case: Case) -> dict:
    """``expected`` 的键在 ``case`` 里对应的数组。"""
    return {k: (case.symbols[k] if isinstance(k, str) else case.args[k]) for k in c.expected(case)}


def compare(got, want, bound):
    """(最大误差, 是否在界内)：整数逐位相等，浮点 |got - want| <= bound。"""
    got = np.asarray(got).reshape(-1)
    want = np.asarray(want).reshape(-1)
    if got.shape != want.shape:
        return float("inf"), False
    if got.dtype.kind in "iub":
        err = np.abs(got.astype(np.int64) - want.astype(np.int64))
        return float(err.max(initial=0)), bool((err == 0).all())
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = np.isnan(err) & ~(np.isnan(got) & np.isnan(want))
    err = np.where(np.isnan(err), 0.0, err)
    bound = np.asarray(bound, np.float64)
    if bound.ndim:                         # 逐元素的界与结果一样按一维比较
        bound = bound.reshape(-1)
        if bound.shape != err.shape:
            return float("inf"), False
    return float(err.max(initial=0)), bool(not bad.any() and (err <= bound).all())


def run(c: Construct, case: Case | None = None, workdir=None):
    """在模拟器里启动一次，返回 (case, report)；``case`` 的数组被原地写入。
    模拟器的错误照常抛出。内核里 printf 的输出只记在 ``report.printf`` 里，不写到标准输出（登记表的表格照常干净）。"""
    import contextlib
    import io

    from . import api

    case = make_case(c) if case is None else case
    with tempfile.TemporaryDirectory(prefix="simt_construct_") as tmp, contextlib.redirect_stdout(io.StringIO()):
        path = materialize(c, workdir or tmp)
        rep = api.launch(path, c.kernel, c.grid, c.block, case.args, shared_bytes=c.shared_bytes,
                         symbols=dict(case.symbols) or None)
    return case, rep


_INTERNAL = re.compile(r"[（(](AttributeError|AssertionError|TypeError|KeyError|ValueError|IndexError|NameError|"
                       r"UnboundLocalError|ZeroDivisionError|RuntimeError)\b")


def check(c: Construct) -> Result:
    """运行一项并与 numpy 参考比较。从不抛出：结果的 ``status`` 说明发生了什么。"""
    from .errors import SimtError, UnsupportedError

    case = make_case(c)
    try:
        want = c.expected(_copy(case)) if c.expected is not None else {}
        bounds = c.bound(_copy(case)) if c.bound is not None else {}
    except Exception as e:                          # 参考本身出错：登记表的缺陷
        return Result("crash", message=f"reference: {type(e).__name__}: {e}")
    try:
        case, _ = run(c, case)
    except UnsupportedError as e:
        if _INTERNAL.search(str(e)):        # 模拟器内部的 Python 异常被包成了 UnsupportedError：仍是缺陷
            return Result("crash", line=e.line, file=getattr(e, "file", None), message=str(e))
        return Result("refused", line=e.line, file=getattr(e, "file", None), message=str(e))
    except SimtError as e:
        return Result("error", line=e.line, file=getattr(e, "file", None), message=f"{type(e).__name__}: {e}")
    except Exception as e:
        return Result("crash", message="".join(traceback.format_exception(e))[-4000:])
    worst, ok = 0.0, True
    outs = {}
    for k, w in want.items():
        got = case.symbols[k] if isinstance(k, str) else case.args[k]
        err, good = compare(got, w, bounds.get(k, 0.0))
        outs[k] = np.copy(got)
        worst, ok = max(worst, err), ok and good
    return Result("ran" if ok else "wrong", max_error=worst, outputs=outs,
                  message="" if ok else f"输出与 numpy 参考不一致，最大误差 {worst} / output differs from the reference")
