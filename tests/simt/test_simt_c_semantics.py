"""模拟器按 GPU 的规则办事：工作预算（线程步）、C 未定义处按 GPU 指令、拒绝 nvcc / 驱动拒绝的东西、
未初始化读取、启动参数的类型检查。每个错误都带 kernel / line / block / thread 属性。"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab import simt
from reduction_lab.cuda_kernels import launch as cuda_launch

F = np.float32


def _z(n=4, dt=np.float32):
    return np.zeros(n, dt)


# ---------------------------------------------------------------- 工作预算

def test_spin_wait_stops_within_seconds_and_names_the_loop():
    """每一圈都在变的循环（计数器一直加）停不下来：工作预算兜底。一圈下来什么都不变的，见 test_simt_spin_wait.py。"""
    src = ("__global__ void k(int* flag, int* o) {\n"
           "  int k = 0; if (threadIdx.x == 0)\n"
           "    while (flag[0] == 0) { k++; }\n"
           "  o[0] = 1;\n}")
    t0 = time.perf_counter()
    with pytest.raises(simt.LoopLimitError, match=r"第 3 行.*线程步.*line 3.*lane-steps") as ei:
        simt.launch(src, "k", 1, 32, (_z(1, np.int32), _z(1, np.int32)), max_lane_steps=1 << 22)
    assert time.perf_counter() - t0 < 10
    assert (ei.value.line, ei.value.block, ei.value.thread, ei.value.kernel) == (3, "(0,0,0)", "(0,0,0)", "k")


def test_budget_counts_active_lanes():
    """同样 100 次迭代：1 个线程块很便宜，4096 个线程块 x 256 线程超出 2**24 线程步的预算。"""
    src = "__global__ void k(float* o) {\n  float a = 0;\n  for (int i = 0; i < 100; i++) a += 1.0f;\n  if (threadIdx.x == 0) o[0] = a;\n}"
    simt.launch(src, "k", 1, 256, (_z(1),), max_lane_steps=1 << 24)
    with pytest.raises(simt.LoopLimitError, match="第 3 行"):
        simt.launch(src, "k", 4096, 256, (_z(1),), max_lane_steps=1 << 24)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "10", True])
def test_budget_argument_is_checked(bad):
    with pytest.raises(TypeError, match="max_lane_steps"):
        simt.launch("__global__ void k(float* o) { o[0] = 1; }", "k", 1, 1, (_z(1),), max_lane_steps=bad)


# ---------------------------------------------------------------- C 未定义处按 GPU 指令

CONV = """__global__ void k(const float* x, int* o, unsigned* u, long long* l, unsigned char* c) {
  int i = threadIdx.x;
  o[i] = (int)x[i]; u[i] = (unsigned)x[i]; l[i] = (long long)x[i]; c[i] = x[i];
}"""


def test_float_to_int_saturates_and_nan_is_zero():
    x = np.array([1e10, -1e10, np.nan, -3.7, 3.7, np.inf, -np.inf, 300.0], F)
    n = x.size
    o, u, ll, c = _z(n, np.int32), _z(n, np.uint32), _z(n, np.int64), _z(n, np.uint8)
    simt.launch(CONV, "k", 1, n, (x, o, u, ll, c))
    i32, u32, i64 = np.iinfo(np.int32), np.iinfo(np.uint32), np.iinfo(np.int64)
    assert o.tolist() == [i32.max, i32.min, 0, -3, 3, i32.max, i32.min, 300]
    assert u.tolist() == [u32.max, 0, 0, 0, 3, u32.max, 0, 300]
    assert ll.tolist() == [10**10, -10**10, 0, -3, 3, i64.max, i64.min, 300]
    assert c.tolist() == [255, 0, 0, 0, 3, 255, 0, 255]


def test_shift_counts_beyond_the_width():
    src = """__global__ void k(const int* n, int* a, int* b, unsigned* c) {
  int i = threadIdx.x;
  a[i] = 1 << n[i]; b[i] = -8 >> n[i]; c[i] = 0x80000000u >> n[i];
}"""
    n = np.array([0, 3, 31, 32, 40, -1], np.int32)
    a, b, c = _z(6, np.int32), _z(6, np.int32), _z(6, np.uint32)
    simt.launch(src, "k", 1, 6, (n, a, b, c))
    assert a.tolist() == [1, 8, -2**31, 0, 0, 0]
    assert b.tolist() == [-8, -1, -1, -1, -1, -1]
    assert c.tolist() == [2**31, 2**28, 1, 0, 0, 0]


def test_integer_division_by_zero_is_an_error():
    src = "__global__ void k(const int* d, int* o) {\n  o[threadIdx.x] = 7 / d[threadIdx.x];\n}"
    with pytest.raises(simt.SimtRuntimeError, match=r"第 2 行.*线程 \(1,0,0\).*division by zero") as ei:
        simt.launch(src, "k", 1, 2, (np.array([1, 0], np.int32), _z(2, np.int32)))
    assert ei.value.thread == "(1,0,0)"


# ---------------------------------------------------------------- nvcc 与驱动拒绝的

@pytest.mark.parametrize("code,line,words", [
    ("__global__ void k(const float* x, float* o) {\n  o[0] = 1;\n  x[0] = 2.0f;\n}", 3, "const 指针"),
    ("__global__ void k(const float* x, float* o) {\n  const float* p = x + 1;\n  *p = 1.0f;\n}", 3, "const 指针"),
    ("__global__ void k(const int* x, int* o) {\n  atomicAdd(o, 1);\n  atomicAdd(x, 1);\n}", 3, "const 指针"),
    ("__global__ void k(float* o) {\n  __shared__ float s[4] = {0};\n  o[0] = s[0];\n}", 2, "不能带初始值"),
    ("__shared__ int g = 3;\n__global__ void k(float* o) {\n  o[0] = g;\n}", 1, "不能带初始值"),
    ("__global__ void k(float* o) {\n  __shared__ float s[12289];\n  s[0] = 1; o[0] = s[0];\n}", 2, "48 KiB"),
    ("__global__ void k(float* o) {\n  __shared__ float a[8192];\n  __shared__ float b[8192];\n"
     "  a[0] = 1; b[0] = 1; o[0] = a[0] + b[0];\n}", 3, "48 KiB"),
], ids=["const-param", "const-local", "const-atomic", "shared-init", "global-shared-init", "static-48k",
        "static-48k-two-arrays"])
def test_what_nvcc_rejects(code, line, words):
    dt = np.int32 if "int* o" in code else np.float32
    args = (_z(4, dt), _z(4, dt)) if "const" in code else (_z(4),)
    with pytest.raises(simt.CompileError, match=words) as ei:
        simt.launch(code, "k", 1, 1, args)
    assert ei.value.line == line


def test_cast_away_const_is_allowed():
    """C 允许把 const 去掉再写（数组本身可写）：nvcc 接受，模拟器也接受。"""
    x = _z(2)
    simt.launch("__global__ void k(const float* x) { float* p = (float*)x; p[1] = 5.0f; }", "k", 1, 1, (x,))
    assert x.tolist() == [0.0, 5.0]


DYN = ("__global__ void k(float* o) {\n  extern __shared__ float d[];\n  d[threadIdx.x] = 1.0f;\n"
       "  if (threadIdx.x == 0) o[0] = 1.0f;\n}")


def test_dynamic_shared_above_48k_needs_the_opt_in():
    with pytest.raises(simt.LaunchError, match=r"48 KiB.*max_dynamic_shared_bytes"):
        simt.launch(DYN, "k", 1, 32, (_z(1),), shared_bytes=64 * 1024)
    simt.launch(DYN, "k", 1, 32, (_z(1),), shared_bytes=64 * 1024, max_dynamic_shared_bytes=64 * 1024)
    with pytest.raises(simt.LaunchError, match=r"超过申请的 max_dynamic_shared_bytes"):
        simt.launch(DYN, "k", 1, 32, (_z(1),), shared_bytes=80 * 1024, max_dynamic_shared_bytes=64 * 1024)
    with pytest.raises(simt.LaunchError, match=r"sm_90 每个线程块的上限 232448"):
        simt.launch(DYN, "k", 1, 32, (_z(1),), shared_bytes=64 * 1024, max_dynamic_shared_bytes=240 * 1024)
    with pytest.raises(simt.LaunchError, match=r"sm_86 每个线程块的上限 101376"):
        simt.launch(DYN, "k", 1, 32, (_z(1),), shared_bytes=64 * 1024, max_dynamic_shared_bytes=110 * 1024,
                    arch="sm_86")


def test_static_plus_dynamic_over_the_block_maximum():
    src = ("__global__ void k(float* o) {\n  __shared__ float s[8192];\n  extern __shared__ float d[];\n"
           "  s[0] = 1; d[0] = 1; o[0] = s[0] + d[0];\n}")
    with pytest.raises(simt.CompileError, match="每个线程块的上限 232448") as ei:
        simt.launch(src, "k", 1, 1, (_z(1),), shared_bytes=200 * 1024, max_dynamic_shared_bytes=200 * 1024)
    assert ei.value.line == 2


# ---------------------------------------------------------------- 未初始化读取（initcheck）

@pytest.mark.parametrize("code,line,words", [
    ("__global__ void k(float* o) {\n  __shared__ float s[64];\n  if (threadIdx.x < 32) s[threadIdx.x] = 1;\n"
     "  __syncthreads();\n  o[threadIdx.x] = s[threadIdx.x];\n}", 5, r"共享内存 s\[32\]"),
    ("__global__ void k(float* o) {\n  __shared__ float t;\n  o[0] = t;\n}", 3, r"共享内存 t："),
    ("__global__ void k(float* o) {\n  float a[4];\n  a[0] = 1;\n  o[threadIdx.x] = a[threadIdx.x % 4];\n}", 4, r"局部内存 a\[1\]"),
    ("__global__ void k(float* o) {\n  extern __shared__ float d[];\n  if (threadIdx.x == 0) d[0] = 1;\n  __syncthreads();\n"
     "  o[threadIdx.x] = d[threadIdx.x % 8 + 1];\n}", 5, r"共享内存 d\[1\]"),
    ("__global__ void k(int* o) {\n  __shared__ int c;\n  atomicAdd(&c, 1);\n  o[0] = 1;\n}", 3, r"共享内存 c"),
], ids=["shared-array-half-written", "shared-scalar", "local-array", "dynamic", "atomic-on-uninit"])
def test_uninitialized_reads(code, line, words):
    out = _z(64, np.int32) if "int* o" in code else _z(64)
    with pytest.raises(simt.UninitializedReadError, match=words + r".*uninitialized") as ei:
        simt.launch(code, "k", 1, 64, (out,), shared_bytes=64 * 4)
    e = ei.value
    assert isinstance(e, simt.SimtError) and e.line == line and e.block == "(0,0,0)" and e.thread is not None


def test_initcheck_can_be_switched_off_and_initialised_memory_passes():
    code = "__global__ void k(float* o) {\n  __shared__ float s[8];\n  o[threadIdx.x] = s[threadIdx.x];\n}"
    out = np.ones(8, F)
    simt.launch(code, "k", 1, 8, (out,), initcheck=False)
    assert out.tolist() == [0.0] * 8
    ok = "__global__ void k(float* o) {\n  float a[3] = {1.0f};\n  o[threadIdx.x] = a[2] + a[0];\n}"
    simt.launch(ok, "k", 1, 8, (out,))                 # 初始化列表剩下的元素是 0：已初始化
    assert out.tolist() == [1.0] * 8


def test_course_kernels_pass_initcheck():
    """课程自己的内核不触发未初始化读取（各种块大小、不满的最后一个线程块）。"""
    from reduction_lab import cuda_kernels as ck

    x = torch.randn(5, 333)
    for kernel in ("tree", "warp", "split"):
        for bs in (32, 64, 256):
            torch.testing.assert_close(ck.reduce_sum(x, kernel=kernel, block_size=bs, mode="sim"), x.sum(1),
                                       atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ck.softmax(x, block_size=64, mode="sim"), torch.softmax(x, 1), atol=1e-6, rtol=1e-5)
    v = torch.randn(3000)
    for version in sorted(ck.FULL_SUM_VERSIONS):
        torch.testing.assert_close(ck.full_sum(v, version=version, block_size=64, max_blocks=4, mode="sim"),
                                   v.sum(), atol=1e-3, rtol=1e-5)


# ---------------------------------------------------------------- 启动参数的类型

K = "__global__ void k(float* o, int n) { o[0] = n; }"


@pytest.mark.parametrize("kw,exc,words", [
    (dict(grid=2.5), TypeError, "grid"), (dict(grid=True), TypeError, "grid"), (dict(grid="3"), TypeError, "grid"),
    (dict(grid=(1, 2.0)), TypeError, "grid"), (dict(grid=0), simt.LaunchError, "grid"),
    (dict(block=(32, 1, 1, 1)), simt.LaunchError, "block"), (dict(block=[64.0]), TypeError, "block"),
    (dict(block=2048), simt.LaunchError, "1024"),
    (dict(shared_bytes=1.5), TypeError, "shared_bytes"), (dict(shared_bytes=-1), TypeError, "shared_bytes"),
    (dict(shared_bytes="64"), TypeError, "shared_bytes"),
    (dict(args=(_z(1), 2.5)), TypeError, "n"), (dict(args=(_z(1), "3")), TypeError, "n"),
    (dict(args=(_z(1), 2**40)), OverflowError, "n"), (dict(args=(_z(1, np.int32), 3)), TypeError, "o"),
    (dict(args=(3, 3)), TypeError, "o"), (dict(args=(_z(1),)), TypeError, "2"),
    (dict(args=_z(1)), TypeError, "args"), (dict(racecheck="yes"), TypeError, "racecheck"),
])
def test_launch_arguments_are_type_checked(kw, exc, words):
    call = dict(grid=1, block=1, args=(_z(1), 3))
    call.update(kw)
    args = call.pop("args")
    with pytest.raises(exc, match=words):
        simt.launch(K, "k", call.pop("grid"), call.pop("block"), args, **call)


def test_cuda_launcher_applies_the_same_shared_rules(tmp_path):
    cu = tmp_path / "dyn.cu"
    cu.write_text('extern "C" ' + DYN)
    o = torch.zeros(1, device=rl.DEVICE)
    with pytest.raises(ValueError, match=r"max_dynamic_shared_bytes"):
        cuda_launch(cu, "k", 1, 32, (o,), shared_bytes=64 * 1024)
    with pytest.raises(ValueError, match=r"shared_bytes"):
        cuda_launch(cu, "k", 1, 32, (o,), shared_bytes=True)
    cuda_launch(cu, "k", 1, 32, (o,), shared_bytes=64 * 1024, max_dynamic_shared_bytes=64 * 1024)
    assert o.item() == 1.0


def test_static_shared_limit_counts_declarations_not_executed():
    """nvcc 按声明算静态共享内存：没有执行到的分支、被调用的 __device__ 函数里的数组也算。"""
    src = ("__device__ float helper(int i) {\n  __shared__ float big[8192];\n  big[i] = 1; return big[i];\n}\n"
           "__global__ void k(float* o, int flag) {\n  __shared__ float a[6144];\n  a[0] = 1;\n"
           "  if (flag) o[0] = helper(0);\n  o[1] = a[0];\n}")
    with pytest.raises(simt.CompileError, match=r"57344 字节.*big.*48 KiB") as ei:
        simt.launch(src, "k", 1, 1, (_z(2), 0))
    assert ei.value.line == 2


def test_local_arrays_over_512k_per_thread():
    src = "__global__ void k(float* o) {\n  float a[100000];\n  float b[40000];\n  a[0] = 1; b[0] = 1; o[0] = a[0] + b[0];\n}"
    with pytest.raises(simt.CompileError, match=r"560000 字节.*b.*512 KiB") as ei:
        simt.launch(src, "k", 1, 1, (_z(1),))
    assert ei.value.line == 3
