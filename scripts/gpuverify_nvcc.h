// scripts/simt_coverage.py 用 nvcc 交叉检查语料时强制包含的头文件（nvcc -include）。
//
// 语料里的内核来自 GPUVerify 的测试集与基准集，它们的规约注解（__requires、__invariant、__assert ...）
// 由 GPUVerify 自己的头文件提供，nvcc 的头文件里没有。这里按模拟器（src/reduction_lab/simt）对待它们的
// 方式给 nvcc 同样的含义：
// * 前提、后置条件、循环不变式、访问声明与屏障不变式：不求值的空宏（GPUVerify 不做验证时的写法也是空宏），
//   模拟器同样不求值它们的实参；
// * __assert、__global_assert、__assume：设备端 assert（模拟器在运行到它的每个线程上检查）；
// * __implies、__enabled、__add_noovfl_*、__is_pow2、__mod_pow2、__axiom：按它们的含义；
// * 只有验证器能回答的查询（另一个线程的值、访问集合、返回值、旧值）：只声明、不定义，和 GPUVerify 的头文件
//   一样；被调用时 ptxas 报 Unresolved extern function，模拟器报 CompileError。
#pragma once
#include <assert.h>
#include <stddef.h>

#define __simt_gv_nop(...) ((void)0)
#define __requires(...) __simt_gv_nop()
#define __global_requires(...) __simt_gv_nop()
#define __ensures(...) __simt_gv_nop()
#define __global_ensures(...) __simt_gv_nop()
#define __invariant(...) __simt_gv_nop()
#define __global_invariant(...) __simt_gv_nop()
#define __candidate_invariant(...) __simt_gv_nop()
#define __candidate_global_invariant(...) __simt_gv_nop()
#define __candidate_assert(...) __simt_gv_nop()
#define __candidate_global_assert(...) __simt_gv_nop()
#define __non_temporal_loads_begin(...) __simt_gv_nop()
#define __non_temporal_loads_end(...) __simt_gv_nop()
#define __requires_fresh_array(...) __simt_gv_nop()
#define __reads_from(...) __simt_gv_nop()
#define __writes_to(...) __simt_gv_nop()
#define __array_snapshot(...) __simt_gv_nop()
#define __barrier_invariant_1(...) __simt_gv_nop()
#define __barrier_invariant_2(...) __simt_gv_nop()
#define __barrier_invariant_3(...) __simt_gv_nop()
#define __barrier_invariant_4(...) __simt_gv_nop()
#define __barrier_invariant_binary_1(...) __simt_gv_nop()
#define __barrier_invariant_binary_2(...) __simt_gv_nop()

static __device__ __forceinline__ void __assert(bool e) { assert(e); }
static __device__ __forceinline__ void __global_assert(bool e) { assert(e); }
static __device__ __forceinline__ void __assume(bool e) { assert(e); }
static __device__ __forceinline__ bool __implies(bool a, bool b) { return !a || b; }
static __device__ __forceinline__ bool __enabled() { return true; }
#define __simt_gv_noovfl(T, N) \
    static __device__ __forceinline__ T __add_noovfl_##N(T x, T y) { return x + y; } \
    static __device__ __forceinline__ unsigned T __add_noovfl_unsigned_##N(unsigned T x, unsigned T y) { return x + y; }
__simt_gv_noovfl(char, char) __simt_gv_noovfl(short, short) __simt_gv_noovfl(int, int) __simt_gv_noovfl(long, long)
#undef __simt_gv_noovfl
#define __is_pow2(x) ((((x) & (x - 1)) == 0))
#define __mod_pow2(x, y) ((y - 1) & (x))
#define __axiom(e) static_assert(true, "")

// 只有验证器能回答的查询：没有函数体
#include "../src/reduction_lab/simt/prelude/gpuverify_queries.h"
