"""nvcc 13 拒绝的源码，模拟器同样拒绝（CompileError，带文件、行号与构造）；nvcc 接受的 GPUVerify 注解照常运行。

纹理引用 texture<>/surface<>（CUDA 12 移除）、调用只有声明没有定义的函数（不带 -rdc 时 ptxas 报
Unresolved extern function）、只有验证器能回答的 GPUVerify 查询、长度为 0 的数组、clang 只给警告的存储类错误。
nvcc 在 PATH 上时，同样的源码再交给 nvcc（scripts/simt_coverage.py 的命令）核对它的结论。
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from reduction_lab import simt



TEXTURE = ("// 纹理引用\ntexture<float, 1, cudaReadModeElementType> tref;\n"
           "__global__ void k(float* y) {\n  y[threadIdx.x] = tex1Dfetch(tref, threadIdx.x);\n}\n")
EXTERN = ("__device__ float scale(float v);\n__device__ float twice(float v) { return 2.0f * v; }\n"
          "__global__ void uses(float* y) {\n  y[threadIdx.x] = scale(y[threadIdx.x]);\n}\n"
          "__global__ void fine(float* y) {\n  y[threadIdx.x] = twice(y[threadIdx.x]);\n}\n")


def test_texture_reference_is_a_compile_error_with_file_line_and_construct(tmp_path):
    f = tmp_path / "tex.cu"
    f.write_text(TEXTURE, encoding="utf-8")
    with pytest.raises(simt.CompileError) as ei:
        simt.launch(str(f), "k", 1, 4, [np.zeros(4, np.float32)])
    e = ei.value
    assert e.line == 2 and e.file.endswith("tex.cu")
    assert "纹理引用 texture<>" in str(e) and "CUDA 12" in str(e) and "nvcc 13" in str(e)
    assert "texture is not a template" in str(e) and "cudaTextureObject_t" in str(e)
    assert not isinstance(e, simt.UnsupportedError)


def test_texture_reference_in_a_header_names_the_header_and_wins_over_unsupported_constructs(tmp_path):
    # nvcc 拒绝整个文件：即使文件里先出现模拟器不支持的 union，也报纹理引用的 CompileError
    (tmp_path / "common.h").write_text("union U { int i; float f; };\n\ntexture<int, 2> img;\n", encoding="utf-8")
    (tmp_path / "main.cu").write_text('#include "common.h"\n__global__ void k(int* y) { y[0] = 1; }\n',
                                      encoding="utf-8")
    with pytest.raises(simt.CompileError, match="texture is not a template") as ei:
        simt.launch(str(tmp_path / "main.cu"), "k", 1, 1, [np.zeros(1, np.int32)])
    assert (ei.value.line, ei.value.file) == (3, "common.h")


def test_texture_objects_stay_unsupported_because_nvcc_accepts_them():
    src = "__global__ void k(cudaTextureObject_t t, float* y) {\n  y[0] = tex1Dfetch<float>(t, 0);\n}\n"
    with pytest.raises(simt.UnsupportedError, match="纹理对象") as ei:
        simt.launch(src, "k", 1, 1, [0, np.zeros(1, np.float32)])
    assert ei.value.line == 2 and not isinstance(ei.value, simt.CompileError)


def test_call_to_a_declared_only_device_function_is_a_compile_error(tmp_path):
    f = tmp_path / "ext.cu"
    f.write_text(EXTERN, encoding="utf-8")
    with pytest.raises(simt.CompileError) as ei:
        simt.launch(str(f), "uses", 1, 4, [np.zeros(4, np.float32)])
    e = ei.value
    assert e.line == 4 and e.file.endswith("ext.cu")
    assert "scale 只有声明、没有定义" in str(e) and "Unresolved extern function '_Z5scalef'" in str(e)
    # 不经过 scale 的内核照常运行（nvcc 不生成没有被调用的函数，同样不报错）
    y = np.ones(4, np.float32)
    simt.launch(str(f), "fine", 1, 4, [y])
    assert (y == 2).all()


@pytest.mark.parametrize("src, line, name", [
    ("template <class T> __device__ T f(T v);\n__global__ void k(float* y) {\n  y[0] = f(y[0]);\n}\n", 3, "f"),
    ("struct Op {\n  __device__ float apply(float v) const;\n};\n__global__ void k(float* y) {\n  Op op;\n"
     "  y[0] = op.apply(y[0]);\n}\n", 6, "Op::apply"),
    ("typedef float (*fn)(float);\n__device__ float g(float);\n__global__ void k(float* y) {\n  fn p = g;\n"
     "  y[0] = p(y[0]);\n}\n", 4, "g"),
], ids=["template", "member", "address"])
def test_declared_only_templates_members_and_addresses_are_compile_errors(src, line, name):
    with pytest.raises(simt.CompileError, match="Unresolved extern function") as ei:
        simt.launch(src, "k", 1, 1, [np.zeros(1, np.float32)])
    assert ei.value.line == line and f"{name} 只有声明" in str(ei.value)


def test_annotations_nvcc_accepts_run_and_verifier_queries_are_compile_errors():
    src = ("__global__ void k(int* a, int n) {\n  __requires(n == 4);\n"
           "  for (int i = 0; __invariant(i <= n), __global_invariant(__read(a)), i < n; i++)\n"
           "    a[threadIdx.x] += 1;\n  __assert(__implies(__enabled(), a[threadIdx.x] == 4));\n}\n"
           "__global__ void q(int* a) {\n  __assert(__uniform_int(a[0]));\n}\n")
    a = np.zeros(8, np.int32)
    simt.launch(src, "k", 1, 8, [a, 4])                 # 前提与不变式不求值，__assert 逐线程检查并成立
    assert (a == 4).all()
    with pytest.raises(simt.DeviceAssertError) as ei:
        simt.launch(src, "k", 1, 8, [np.zeros(8, np.int32), 3])
    assert ei.value.line == 5
    with pytest.raises(simt.CompileError, match="__other_int") as ei:
        simt.launch(src, "q", 1, 8, [a])
    assert ei.value.line == 8 and "GPUVerify 的查询" in str(ei.value) and "nvcc 13" in str(ei.value)


@pytest.mark.parametrize("src, line, words", [
    ("__device__ double C[4][0];\n__global__ void k(double* y) { y[0] = 1; }\n", 1, "zero-sized variable"),
    ("template <class T> __device__ static T r(T v) { return v; }\n"
     "template <> __device__ static float r<float>(float v) { return v; }\n"
     "__global__ void k(float* y) { y[0] = r(y[0]); }\n", 2, "a storage class is not allowed in an explicit"),
    ("__device__ static __forceinline__ static void g(int* p) { *p = 1; }\n"
     "__global__ void k(int* y) { g(y); }\n", 1, "more than one storage class"),
], ids=["zero-sized", "specialization-storage", "duplicate-static"])
def test_declarations_nvcc_rejects_and_clang_only_warns_about(src, line, words):
    with pytest.raises(simt.CompileError, match=words) as ei:
        simt.launch(src, "k", 1, 1, [np.zeros(1, np.float64 if "double" in src else np.float32)])
    assert ei.value.line == line


# nvcc 的结论与模拟器的结论一致（nvcc 13 在 CI 机器上）
AGREE = [
    ("texture", TEXTURE, "k", False),
    ("extern", EXTERN, "uses", False),
    ("query", "__global__ void q(int* a) {\n  __assert(__other_int(a[0]) == a[0]);\n}\n", "q", False),
    ("zero", "__device__ double C[4][0];\n__global__ void k(double* y) { y[0] = C[0][0]; }\n", "k", False),
    ("annotations", "__global__ void k(int* a, int n) {\n  __requires(n == 4);\n  __ensures(__read(a));\n"
                    "  for (int i = 0; __invariant(i <= n), i < n; i++)\n    a[threadIdx.x] += 1;\n"
                    "  __assert(__implies(__enabled(), a[threadIdx.x] == n));\n  __assume(n > 0);\n}\n", "k", True),
    ("texture object", "__global__ void k(cudaTextureObject_t t, float* y) { y[0] = tex1Dfetch<float>(t, 0); }\n",
     "k", True),
]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc 不在 PATH 上：无法对照 nvcc 的结论 (nvcc not on PATH)")
@pytest.mark.parametrize("what, src, kernel, nvcc_ok", AGREE, ids=[a[0] for a in AGREE])
def test_nvcc_gives_the_same_verdict(what, src, kernel, nvcc_ok, tmp_path, coverage_script):
    script = coverage_script
    f = tmp_path / "k.cu"
    f.write_text(src, encoding="utf-8")
    verdict = script.nvcc_verdict(shutil.which("nvcc"), f)
    assert (verdict == "ok") == nvcc_ok, verdict
    outcome, detail = script.run_kernel(f, kernel)
    if nvcc_ok:
        assert outcome != "compile_error", detail
    else:
        assert outcome == "compile_error", (outcome, detail)
