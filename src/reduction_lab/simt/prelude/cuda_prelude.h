// 模拟器的 CUDA 声明：由前端用 -include 放在每个源文件之前（文档：docs/cuda/simulator.md）。
// 这里只有声明，语义由解释器实现；没有定义的函数按名字当作内置函数。
#pragma clang system_header
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __inline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
// 线程块簇的形状：前端从这个 annotate 属性读出 1 到 3 个整数常量（可以写在前置声明上）
#define __cluster_dims__(...) __attribute__((annotate("__simt_cluster_dims", __VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define __CUDACC__ 1
#define INFINITY __builtin_inff()
#define CUDART_INF_F __builtin_inff()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.40282347e+38f
#define FLT_MIN 1.17549435e-38f
#define DBL_MAX 1.7976931348623157e+308
#define INT_MAX 2147483647
#define INT_MIN (-2147483647-1)
#define UINT_MAX 4294967295u
#define NULL 0

typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef long ssize_t;
typedef long clock_t;                 /* 与 nvcc 的 <time.h>（经 cuda_runtime.h）相同 */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef unsigned int uint;

// 向量类型（vector_types.h 的全部 48 个）：分量 .x .y .z .w；两个与四个分量的按整体大小对齐（最多 16 字节），
// 一个与三个分量的按分量对齐
#define __SIMT_VEC1(T, N) struct __attribute__((aligned(sizeof(T)))) N { T x; }; __device__ N make_##N(T);
#define __SIMT_VEC2(T, N) struct __attribute__((aligned(2 * sizeof(T)))) N { T x, y; }; \
    __device__ N make_##N(T, T);
#define __SIMT_VEC3(T, N) struct __attribute__((aligned(sizeof(T)))) N { T x, y, z; }; \
    __device__ N make_##N(T, T, T);
#define __SIMT_VEC4(T, N) struct __attribute__((aligned(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16))) N { T x, y, z, w; }; \
    __device__ N make_##N(T, T, T, T);
#define __SIMT_VECS(T, N) __SIMT_VEC1(T, N##1) __SIMT_VEC2(T, N##2) __SIMT_VEC3(T, N##3) __SIMT_VEC4(T, N##4)
__SIMT_VECS(signed char, char) __SIMT_VECS(unsigned char, uchar) __SIMT_VECS(short, short)
__SIMT_VECS(unsigned short, ushort) __SIMT_VECS(int, int) __SIMT_VECS(unsigned int, uint)
__SIMT_VECS(long, long) __SIMT_VECS(unsigned long, ulong) __SIMT_VECS(long long, longlong)
__SIMT_VECS(unsigned long long, ulonglong) __SIMT_VECS(float, float) __SIMT_VECS(double, double)
#undef __SIMT_VEC1
#undef __SIMT_VEC2
#undef __SIMT_VEC3
#undef __SIMT_VEC4
#undef __SIMT_VECS
struct dim3 { unsigned int x, y, z; };
extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;

// 同步与线程束
__device__ void __syncthreads();
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_or(int);
__device__ unsigned int __activemask();
__device__ float __fmaf_rn(float, float, float);
__device__ void __syncwarp(unsigned int = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ unsigned int __isShared(const void *p);
__device__ unsigned int __isGlobal(const void *p);
// <cuda/atomic> 在共享内存上的 store（原子的写，不读旧值）
template <class _Tp> __device__ void __simt_atomic_store(_Tp *, _Tp);
template <class _Tp> __device__ void __simt_atomic_store_block(_Tp *, _Tp);
template <class _Tp> __device__ _Tp __shfl_down_sync(unsigned int, _Tp, unsigned int, int = 32);
template <class _Tp> __device__ _Tp __shfl_up_sync(unsigned int, _Tp, unsigned int, int = 32);
template <class _Tp> __device__ _Tp __shfl_xor_sync(unsigned int, _Tp, int, int = 32);
template <class _Tp> __device__ _Tp __shfl_sync(unsigned int, _Tp, int, int = 32);
// __reduce_*_sync：只有 int 与 unsigned int 两个重载（float、64 位整数在 nvcc 里有歧义）
#define __SIMT_REDUCE(OP) __device__ unsigned int __reduce_##OP##_sync(unsigned int, unsigned int); \
    __device__ int __reduce_##OP##_sync(unsigned int, int);
__SIMT_REDUCE(add) __SIMT_REDUCE(min) __SIMT_REDUCE(max)
#undef __SIMT_REDUCE
__device__ unsigned int __reduce_and_sync(unsigned int, unsigned int);
__device__ unsigned int __reduce_or_sync(unsigned int, unsigned int);
__device__ unsigned int __reduce_xor_sync(unsigned int, unsigned int);

// 原子操作
// 每个原子操作另有 _block（只对同一线程块的线程是原子的）与 _system（对主机与其他 GPU 也是原子的）两个作用域的版本
#define __SIMT_ATOMIC(NAME, T) __device__ T NAME(T*, T); __device__ T NAME##_block(T*, T); \
    __device__ T NAME##_system(T*, T);
#define __SIMT_ATOMIC_INT(NAME) __SIMT_ATOMIC(NAME, int) __SIMT_ATOMIC(NAME, unsigned int) \
    __SIMT_ATOMIC(NAME, unsigned long long)
__SIMT_ATOMIC_INT(atomicAdd) __SIMT_ATOMIC(atomicAdd, float) __SIMT_ATOMIC(atomicAdd, double)
__SIMT_ATOMIC(atomicSub, int) __SIMT_ATOMIC(atomicSub, unsigned int)
__SIMT_ATOMIC_INT(atomicMax) __SIMT_ATOMIC_INT(atomicMin)
__SIMT_ATOMIC_INT(atomicExch) __SIMT_ATOMIC(atomicExch, float)
__SIMT_ATOMIC(atomicInc, unsigned int) __SIMT_ATOMIC(atomicDec, unsigned int)
__SIMT_ATOMIC_INT(atomicAnd) __SIMT_ATOMIC_INT(atomicOr) __SIMT_ATOMIC_INT(atomicXor)
#define __SIMT_ATOMIC_CAS(NAME) __device__ int NAME(int*, int, int); \
    __device__ unsigned int NAME(unsigned int*, unsigned int, unsigned int); \
    __device__ unsigned long long NAME(unsigned long long*, unsigned long long, unsigned long long);
__SIMT_ATOMIC_CAS(atomicCAS) __SIMT_ATOMIC_CAS(atomicCAS_block) __SIMT_ATOMIC_CAS(atomicCAS_system)
#undef __SIMT_ATOMIC_CAS
#undef __SIMT_ATOMIC
#undef __SIMT_ATOMIC_INT
extern "C" __device__ void* memcpy(void*, const void*, size_t);
extern "C" __device__ void* memset(void*, int, size_t);
// 线程束投票与位运算
__device__ unsigned int __ballot_sync(unsigned int, int);
__device__ int __any_sync(unsigned int, int);
__device__ int __all_sync(unsigned int, int);
__device__ int __uni_sync(unsigned int, int);
__device__ unsigned int __match_any_sync(unsigned int, int);
__device__ unsigned int __match_any_sync(unsigned int, unsigned int);
__device__ unsigned int __match_any_sync(unsigned int, long long);
__device__ unsigned int __match_any_sync(unsigned int, unsigned long long);
__device__ unsigned int __match_any_sync(unsigned int, float);
__device__ unsigned int __match_any_sync(unsigned int, double);
__device__ float __frcp_rn(float);
__device__ long long clock64(void);
__device__ void __nanosleep(unsigned int);
__device__ int __popc(unsigned int);
__device__ int __popcll(unsigned long long);
__device__ int __clz(int);
__device__ int __clzll(long long);
__device__ int __ffs(int);
__device__ int __ffsll(long long);
__device__ unsigned int __brev(unsigned int);
__device__ float __saturatef(float);
__device__ float __int_as_float(int); __device__ int __float_as_int(float);
__device__ float __uint_as_float(unsigned int); __device__ unsigned int __float_as_uint(float);
__device__ long long __double_as_longlong(double); __device__ double __longlong_as_double(long long);
__device__ float __fadd_rn(float, float);
__device__ float __fsub_rn(float, float);
__device__ float __fmul_rn(float, float);
__device__ float __fdiv_rn(float, float);
__device__ float __exp10f(float);
template <class _Tp> __device__ _Tp __ldg(const _Tp*);
template <class _Tp> __device__ _Tp __ldca(const _Tp*);
template <class _Tp> __device__ _Tp __ldcg(const _Tp*);
template <class _Tp> __device__ _Tp __ldcs(const _Tp*);
template <class _Tp> __device__ _Tp __ldlu(const _Tp*);
template <class _Tp> __device__ _Tp __ldcv(const _Tp*);
template <class _Tp> __device__ void __stwb(_Tp*, _Tp);
template <class _Tp> __device__ void __stcg(_Tp*, _Tp);
template <class _Tp> __device__ void __stcs(_Tp*, _Tp);
template <class _Tp> __device__ void __stwt(_Tp*, _Tp);
__device__ int __mul24(int, int);
__device__ unsigned int __umul24(unsigned int, unsigned int);

// 数学函数：float 版本（后缀 f）、double 版本与 C++ 的重载
#define __SIMT_MATH1(N) __device__ float N##f(float); __device__ double N(double); __device__ float N(float); \
    template <class _Tp> __device__ double N(_Tp);
#define __SIMT_MATH2(N) __device__ float N##f(float, float); __device__ double N(double, double); \
    __device__ float N(float, float); template <class _Ap, class _Bp> __device__ double N(_Ap, _Bp);
__SIMT_MATH1(exp) __SIMT_MATH1(exp2) __SIMT_MATH1(log) __SIMT_MATH1(log2) __SIMT_MATH1(log10)
__SIMT_MATH1(sqrt) __SIMT_MATH1(fabs) __SIMT_MATH1(floor) __SIMT_MATH1(ceil) __SIMT_MATH1(trunc)
__SIMT_MATH1(round) __SIMT_MATH1(tanh) __SIMT_MATH1(sin) __SIMT_MATH1(cos) __SIMT_MATH1(rsqrt)
__SIMT_MATH1(expm1) __SIMT_MATH1(log1p) __SIMT_MATH1(exp10)
__SIMT_MATH1(tan) __SIMT_MATH1(asin) __SIMT_MATH1(acos) __SIMT_MATH1(atan) __SIMT_MATH1(sinh) __SIMT_MATH1(cosh)
__SIMT_MATH1(asinh) __SIMT_MATH1(acosh) __SIMT_MATH1(atanh) __SIMT_MATH1(cbrt)
__SIMT_MATH2(fmax) __SIMT_MATH2(fmin) __SIMT_MATH2(pow)
__SIMT_MATH2(fmod) __SIMT_MATH2(atan2) __SIMT_MATH2(hypot) __SIMT_MATH2(copysign)
__device__ double frexp(double, int*);
__device__ float frexpf(float, int*);
__device__ float frexp(float, int*);
__device__ double ldexp(double, int);
__device__ float ldexpf(float, int);
__device__ float ldexp(float, int);
#undef __SIMT_MATH1
#undef __SIMT_MATH2
__device__ float __expf(float);
__device__ float __logf(float);
__device__ float __powf(float, float);
__device__ float __fsqrt_rn(float);
__device__ float __fdividef(float, float);
__device__ float fmaf(float, float, float);
__device__ double fma(double, double, double);
__device__ float fma(float, float, float);
template <class _Ap, class _Bp> __device__ decltype(_Ap() + _Bp()) max(_Ap, _Bp);
template <class _Ap, class _Bp> __device__ decltype(_Ap() + _Bp()) min(_Ap, _Bp);
__device__ int abs(int);
__device__ long abs(long);
__device__ long long abs(long long);
__device__ float abs(float);
__device__ double abs(double);

// 半精度（cuda_fp16.h、cuda_bf16.h）：与 float 之间隐式转换；两个同类型的半精度数用它们自己的运算符
// （与其他类型混用时有歧义，nvcc 同样报错）
#define __SIMT_HALF(H) struct __align__(2) H { unsigned short __x; H() = default; __device__ H(float); \
    __device__ operator float() const; }; \
    __device__ H operator+(H, H); __device__ H operator-(H, H); __device__ H operator*(H, H); \
    __device__ H operator/(H, H); __device__ H operator-(H); \
    __device__ H& operator+=(H&, H); __device__ H& operator-=(H&, H); __device__ H& operator*=(H&, H); \
    __device__ H& operator/=(H&, H); \
    __device__ bool operator==(H, H); __device__ bool operator!=(H, H); __device__ bool operator<(H, H); \
    __device__ bool operator>(H, H); __device__ bool operator<=(H, H); __device__ bool operator>=(H, H);
__SIMT_HALF(__half)
__SIMT_HALF(__nv_bfloat16)
#undef __SIMT_HALF
__device__ __half __float2half(float);
__device__ float __half2float(__half);
__device__ __nv_bfloat16 __float2bfloat16(float);
__device__ float __bfloat162float(__nv_bfloat16);
__device__ __half __float2half_rn(float);
__device__ __nv_bfloat16 __float2bfloat16_rn(float);
// 半精度的算术与比较（cuda_fp16.h、cuda_bf16.h 的 __hadd、__hmax、hexp ……）：按 float 计算，结果就近舍入到目标类型
#define __SIMT_HMATH(H) __device__ H __hadd(H, H); __device__ H __hsub(H, H); __device__ H __hmul(H, H); \
    __device__ H __hdiv(H, H); __device__ H __hneg(H); __device__ H __habs(H); __device__ H __hmax(H, H); \
    __device__ H __hmin(H, H); __device__ H __hfma(H, H, H); __device__ H hexp(H); __device__ H hexp2(H); \
    __device__ H hlog(H); __device__ H hlog2(H); __device__ H hsqrt(H); __device__ H hrsqrt(H); __device__ H hrcp(H); \
    __device__ bool __heq(H, H); __device__ bool __hne(H, H); __device__ bool __hlt(H, H); __device__ bool __hle(H, H); \
    __device__ bool __hgt(H, H); __device__ bool __hge(H, H); __device__ bool __hisnan(H);
__SIMT_HMATH(__half)
__SIMT_HMATH(__nv_bfloat16)
#undef __SIMT_HMATH
// 半精度的原子加（sm_70 起的 __half、sm_80 起的 __nv_bfloat16）：结果按目标类型舍入
__device__ __half atomicAdd(__half*, __half);
__device__ __nv_bfloat16 atomicAdd(__nv_bfloat16*, __nv_bfloat16);
// 成对的半精度：两个分量 .x（低 16 位）与 .y
struct __align__(4) __half2 { __half x, y; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
__device__ __half2 __floats2half2_rn(float, float);
__device__ __half2 __float2half2_rn(float);
__device__ float2 __half22float2(__half2);
__device__ float __low2float(__half2);
__device__ float __high2float(__half2);
__device__ __nv_bfloat162 __floats2bfloat162_rn(float, float);
__device__ __nv_bfloat162 __float2bfloat162_rn(float);
__device__ float2 __bfloat1622float2(__nv_bfloat162);
__device__ float __low2float(__nv_bfloat162);
__device__ float __high2float(__nv_bfloat162);
// 成对的半精度：逐个分量计算
#define __SIMT_HMATH2(H2, H) __device__ H2 __hadd2(H2, H2); __device__ H2 __hsub2(H2, H2); __device__ H2 __hmul2(H2, H2); \
    __device__ H2 __h2div(H2, H2); __device__ H2 __hmax2(H2, H2); __device__ H2 __hmin2(H2, H2); \
    __device__ H2 __hfma2(H2, H2, H2); __device__ H2 __hneg2(H2); __device__ H2 __habs2(H2); \
    __device__ H __low2half(H2); __device__ H __high2half(H2);
__SIMT_HMATH2(__half2, __half)
__SIMT_HMATH2(__nv_bfloat162, __nv_bfloat16)
#undef __SIMT_HMATH2
__device__ __half2 __halves2half2(__half, __half);
__device__ __nv_bfloat162 __halves2bfloat162(__nv_bfloat16, __nv_bfloat16);
__device__ __nv_bfloat16 __low2bfloat16(__nv_bfloat162);
__device__ __nv_bfloat16 __high2bfloat16(__nv_bfloat162);

// 模拟器不支持、但要能解析的写法：用到时报告不支持和所在的行
extern "C" __device__ int printf(const char*, ...);
enum cudaTextureReadMode { cudaReadModeElementType, cudaReadModeNormalizedFloat };
#define cudaTextureType1D 0x01
#define cudaTextureType2D 0x02
#define cudaTextureType3D 0x03
#define cudaTextureTypeCubemap 0x0C
#define cudaTextureType1DLayered 0xF1
#define cudaTextureType2DLayered 0xF2
#define cudaTextureTypeCubemapLayered 0xFC
typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;
template <class _Tp, int _Dim = 1, enum cudaTextureReadMode _Mode = cudaReadModeElementType> struct texture { };
template <class _Tp, class _Rp> __device__ _Tp tex1Dfetch(_Rp, int);
template <class _Tp, int _Dim = 1> struct surface { };
#define __SIMT_TEX(N) template <class _Tp, class... _Ap> __device__ _Tp N(_Ap...);
__SIMT_TEX(tex1D) __SIMT_TEX(tex2D) __SIMT_TEX(tex3D) __SIMT_TEX(tex1DLayered) __SIMT_TEX(tex2DLayered)
__SIMT_TEX(texCubemap) __SIMT_TEX(texCubemapLayered) __SIMT_TEX(tex1DLod) __SIMT_TEX(tex2DLod) __SIMT_TEX(tex3DLod)
__SIMT_TEX(tex2Dgather) __SIMT_TEX(tex2DGrad) __SIMT_TEX(surf1Dread) __SIMT_TEX(surf2Dread) __SIMT_TEX(surf3Dread)
__SIMT_TEX(surf2DLayeredread)
#undef __SIMT_TEX
template <class... _Ap> __device__ void surf1Dwrite(_Ap...);
template <class... _Ap> __device__ void surf2Dwrite(_Ap...);
template <class... _Ap> __device__ void surf3Dwrite(_Ap...);
template <class... _Ap> __device__ void surf2DLayeredwrite(_Ap...);

// cooperative groups：线程块与线程束分块（组的大小由类型给出，组对象本身不占寄存器）
namespace cooperative_groups {
struct thread_block {
    __device__ void sync() const;
    __device__ unsigned int thread_rank() const;
    __device__ unsigned int size() const;
    __device__ unsigned int num_threads() const;
};
__device__ thread_block this_thread_block();
template <unsigned int _Np> struct thread_block_tile {
    __device__ void sync() const;
    __device__ unsigned int thread_rank() const;
    __device__ unsigned int size() const;
    __device__ unsigned int num_threads() const;
    __device__ unsigned int meta_group_rank() const;
    __device__ unsigned int meta_group_size() const;
    template <class _Tp> __device__ _Tp shfl_down(_Tp, unsigned int) const;
    template <class _Tp> __device__ _Tp shfl_up(_Tp, unsigned int) const;
    template <class _Tp> __device__ _Tp shfl_xor(_Tp, unsigned int) const;
    template <class _Tp> __device__ _Tp shfl(_Tp, int) const;
};
template <unsigned int _Np, class _Pp> __device__ thread_block_tile<_Np> tiled_partition(const _Pp&);
__device__ void sync(const thread_block&);
template <unsigned int _Np> __device__ void sync(const thread_block_tile<_Np>&);
template <class _Tp> struct plus { __device__ _Tp operator()(_Tp, _Tp) const; };
template <class _Tp> struct greater { __device__ _Tp operator()(_Tp, _Tp) const; };
template <class _Tp> struct less { __device__ _Tp operator()(_Tp, _Tp) const; };
template <class _Gp, class _Tp, class _Op> __device__ _Tp reduce(const _Gp&, _Tp, _Op);
// 线程块簇（sm_90）：成员函数与 CUDA 一样是静态的；map_shared_rank 把指向本块共享内存的指针换成簇里第 rank 块
// 同一位置的指针（分布式共享内存）
struct cluster_group {
    struct arrival_token { };
    static __device__ void sync();
    static __device__ arrival_token barrier_arrive();
    static __device__ void barrier_wait();
    static __device__ void barrier_wait(arrival_token&&);
    static __device__ unsigned int block_rank();
    static __device__ unsigned int num_blocks();
    static __device__ unsigned int thread_rank();
    static __device__ unsigned int num_threads();
    static __device__ unsigned int size();
    static __device__ dim3 dim_blocks();
    static __device__ dim3 block_index();
    static __device__ dim3 thread_index();
    static __device__ dim3 dim_threads();
    static __device__ unsigned int query_shared_rank(const void*);
    template <class _Tp> static __device__ _Tp* map_shared_rank(_Tp*, int);
};
__device__ cluster_group this_cluster();
__device__ void sync(const cluster_group&);
// 模拟器不支持、但 nvcc 接受的组：声明在这里，用到时报告不支持（而不是编译错误）
struct thread_group { __device__ void sync() const; __device__ unsigned int thread_rank() const;
    __device__ unsigned int size() const; __device__ unsigned int num_threads() const; };
struct grid_group { __device__ void sync() const; __device__ unsigned long long thread_rank() const;
    __device__ unsigned long long size() const; __device__ unsigned long long num_threads() const;
    __device__ unsigned long long block_rank() const; __device__ unsigned long long num_blocks() const;
    __device__ bool is_valid() const; __device__ dim3 group_dim() const; };
struct multi_grid_group { __device__ void sync() const; __device__ unsigned long long thread_rank() const;
    __device__ unsigned long long size() const; };
struct coalesced_group { __device__ void sync() const; __device__ unsigned int thread_rank() const;
    __device__ unsigned int size() const; __device__ unsigned int num_threads() const;
    __device__ unsigned int meta_group_rank() const; __device__ unsigned int meta_group_size() const;
    template <class _Tp> __device__ _Tp shfl(_Tp, int) const;
    template <class _Tp> __device__ _Tp shfl_down(_Tp, unsigned int) const;
    template <class _Tp> __device__ _Tp shfl_up(_Tp, unsigned int) const;
    __device__ unsigned int ballot(int) const; __device__ int any(int) const; __device__ int all(int) const; };
__device__ grid_group this_grid();
__device__ multi_grid_group this_multi_grid();
__device__ coalesced_group coalesced_threads();
__device__ thread_group tiled_partition(const thread_group&, unsigned int);
__device__ thread_group tiled_partition(const thread_block&, unsigned int);
__device__ coalesced_group labeled_partition(const coalesced_group&, int);
__device__ coalesced_group binary_partition(const coalesced_group&, bool);
__device__ void sync(const grid_group&);
__device__ void sync(const coalesced_group&);
__device__ void sync(const thread_group&);
}  // namespace cooperative_groups

// GPUVerify 的规约注解（它的 cuda.h 提供；bugle 的 annotations.h 列出全部）：模拟器不做验证，前提、后置条件、
// 循环不变式、访问集合查询等是不求值的空操作；__assert、__global_assert 与 __assume 在运行到它的每个线程上按断言检查
#define __GPUVERIFY_ANNOTATIONS__ 1
__device__ void __requires(bool);
__device__ void __global_requires(bool);
__device__ void __ensures(bool);
__device__ void __global_ensures(bool);
__device__ void __invariant(bool);
__device__ void __global_invariant(bool);
__device__ void __candidate_invariant(bool);
__device__ void __candidate_global_invariant(bool);
__device__ void __assert(bool);
__device__ void __global_assert(bool);
__device__ void __candidate_assert(bool);
__device__ void __candidate_global_assert(bool);
__device__ void __assume(bool);
__device__ void __simt_c_assert(bool);    // <assert.h> 的 assert
__device__ void __non_temporal_loads_begin();
__device__ void __non_temporal_loads_end();
__device__ bool __enabled();
__device__ bool __implies(bool, bool);
#include "gpuverify_queries.h"
template <class _Tp> __device__ void __requires_fresh_array(const volatile _Tp*);
template <class _Tp> __device__ void __reads_from(const volatile _Tp*);
template <class _Tp> __device__ void __writes_to(const volatile _Tp*);
__device__ void __array_snapshot(void*, void*);
template <class... _Ap> __device__ void __barrier_invariant_1(_Ap...);
template <class... _Ap> __device__ void __barrier_invariant_2(_Ap...);
template <class... _Ap> __device__ void __barrier_invariant_3(_Ap...);
template <class... _Ap> __device__ void __barrier_invariant_4(_Ap...);
template <class... _Ap> __device__ void __barrier_invariant_binary_1(_Ap...);
template <class... _Ap> __device__ void __barrier_invariant_binary_2(_Ap...);
#define __is_pow2(x) ((((x) & (x - 1)) == 0))
#define __mod_pow2(x, y) ((y - 1) & (x))
#define __axiom(e) static_assert(true, "")
#define __SIMT_NOOVFL(T, N) __device__ T __add_noovfl_##N(T, T); __device__ unsigned T __add_noovfl_unsigned_##N(unsigned T, unsigned T);
__SIMT_NOOVFL(char, char) __SIMT_NOOVFL(short, short) __SIMT_NOOVFL(int, int) __SIMT_NOOVFL(long, long)
#undef __SIMT_NOOVFL
// nvcc 隐式包含的 cuda_runtime.h 带来 assert（不写 #include <assert.h> 也能用）
#include "assert.h"
