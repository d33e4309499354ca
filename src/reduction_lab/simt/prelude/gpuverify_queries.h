// GPUVerify 里只有验证器能回答的查询（另一个线程的值、访问集合、返回值、旧值）：只声明、不定义，与 GPUVerify
// 自己的头文件相同。被调用时模拟器报 CompileError，ptxas 报 Unresolved extern function。
// 模拟器的序言（cuda_prelude.h）与 nvcc 交叉检查用的 scripts/gpuverify_nvcc.h 共用这一份。
#pragma once
__device__ int __return_val_int();
__device__ bool __return_val_bool();
__device__ void* __return_val_ptr();
#define __return_val_funptr(T) ((T)__return_val_ptr())
__device__ int __old_int(int);
__device__ bool __old_bool(bool);
__device__ int __other_int(int);
__device__ bool __other_bool(bool);
template <class _Tp> __device__ bool __read(const volatile _Tp*);
template <class _Tp> __device__ bool __write(const volatile _Tp*);
template <class _Tp> __device__ size_t __read_offset(const volatile _Tp*);
template <class _Tp> __device__ size_t __write_offset(const volatile _Tp*);
template <class _Tp> __device__ size_t __read_offset_bytes(const volatile _Tp*);
template <class _Tp> __device__ size_t __write_offset_bytes(const volatile _Tp*);
template <class _Tp> __device__ int __ptr_base(const volatile _Tp*);
template <class _Tp> __device__ size_t __ptr_offset(const volatile _Tp*);
template <class _Tp> __device__ size_t __ptr_offset_bytes(const volatile _Tp*);
template <class _Tp> __device__ size_t __not_accessed(const volatile _Tp*);
__device__ bool __atomic_has_taken_value(unsigned int*, unsigned int, unsigned int);
#define __uniform_int(X) ((X) == __other_int(X))
#define __uniform_bool(X) ((X) == __other_bool(X))
#define __uniform_ptr_base(X) ((X) == __other_int(__ptr_base(X)))
#define __distinct_int(X) ((X) != __other_int(X))
#define __distinct_bool(X) ((X) != __other_bool(X))
#define __no_read(p) !__read(p)
#define __no_write(p) !__write(p)
#define __read_implies(p, e) __implies(__read(p), e)
#define __write_implies(p, e) __implies(__write(p), e)
#define __accessed(p, e) (__not_accessed(p) != e)
#define __same_group (blockIdx.x == __other_int(blockIdx.x) & blockIdx.y == __other_int(blockIdx.y) & \
    blockIdx.z == __other_int(blockIdx.z))
