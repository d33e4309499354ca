"""C 语义：整数除法与取余、无符号回绕、移位、float32、三元运算、复合赋值、循环控制、设备函数、三维下标。"""

import numpy as np
import pytest

from reduction_lab import simt


def run1(body, out_dtype=np.int32, n=1, block=1, extra=""):
    """用一个线程执行 body，body 把结果写进 out[...]。"""
    src = extra + "\n__global__ void k(%s* out) {\n%s\n}\n" % (
        {np.int32: "int", np.uint32: "unsigned int", np.float32: "float", np.float64: "double",
         np.int64: "long long", np.uint64: "unsigned long long"}[out_dtype], body)
    out = np.zeros(n, out_dtype)
    simt.launch(src, "k", 1, block, (out,))
    return out


def test_int_division_truncates_toward_zero():
    out = run1("out[0] = -7 / 2; out[1] = 7 / -2; out[2] = -7 % 2; out[3] = 7 % -2; out[4] = -8 / 3; out[5] = -8 % 3;", n=6)
    assert out.tolist() == [-3, -3, -1, 1, -2, -2]


def test_division_by_zero_is_an_error():
    with pytest.raises(simt.SimtRuntimeError, match="除以零"):
        run1("int z = threadIdx.x; out[0] = 5 / z;")


def test_unsigned_wrap_and_usual_conversions():
    out = run1("unsigned int a = 0; a = a - 1; out[0] = a; out[1] = (unsigned)(-1) / 2u;"
               "out[2] = (-1 < 0u);  out[3] = 4294967295u + 2u;", out_dtype=np.uint32, n=4)
    assert out.tolist() == [4294967295, 2147483647, 0, 1]


def test_int32_overflow_wraps_and_int64_does_not():
    out = run1("int a = 2147483647; a += 1; long long b = 2147483647; b += 1; out[0] = a; out[1] = b;"
               "out[2] = 3000000000u; out[3] = 1LL << 40;", out_dtype=np.int64, n=4)
    assert out.tolist() == [-2147483648, 2147483648, 3000000000, 1 << 40]


def test_shifts():
    out = run1("int a = -16; out[0] = a >> 2; out[1] = 1 << 10; unsigned int u = 0x80000000u; out[2] = (int)(u >> 31);"
               "out[3] = 5 & 3; out[4] = 5 | 3; out[5] = 5 ^ 3; out[6] = ~5;", n=7)
    assert out.tolist() == [-4, 1024, 1, 1, 7, 6, -6]


def test_float32_stays_float32_and_double_literals_promote():
    out = run1("float a = 16777216.0f; float b = a + 1.0f; out[0] = b - a;"  # float32 丢失 1
               "out[1] = (a + 1.0) - a;"  # 1.0 是 double：算式在 double 中进行
               "out[2] = 7 / 2; out[3] = 7 / 2.0f; out[4] = (float)(int)2.9f; out[5] = (float)(int)-2.9f;",
               out_dtype=np.float32, n=6)
    assert out.tolist() == [0.0, 1.0, 3.0, 3.5, 2.0, -2.0]


def test_ternary_compound_and_increments():
    out = run1("int a = 5; int b = a++ + ++a; out[0] = a; out[1] = b; a *= 3; a -= 1; a /= 4; a <<= 2; a %= 7;"
               "out[2] = a; out[3] = a > 3 ? 10 : 20; int c = 0; c += (a == 6) && (b == 12); out[4] = c; out[5] = !c;", n=6)
    # a=5; b = 5 + 7 = 12; a=7 -> 21 -> 20 -> 5 -> 20 -> 6
    assert out.tolist() == [7, 12, 6, 10, 1, 0]


def test_loops_break_continue_do_while():
    body = """
    int s = 0;
    for (int i = 0; i < 100; ++i) { if (i % 2) continue; if (i >= 10) break; s += i; }
    out[0] = s;
    int j = 0; do { j += 3; } while (j < 10); out[1] = j;
    int w = threadIdx.x; int steps = 0; while (w > 0) { w >>= 1; steps++; } out[2 + threadIdx.x] = steps;
    """
    src = "__global__ void k(int* out) {\n if (threadIdx.x == 0) {\n %s\n }\n}" % body.replace(
        "out[2 + threadIdx.x] = steps;", "")
    out = np.zeros(2, np.int32)
    simt.launch(src, "k", 1, 32, (out,))
    assert out.tolist() == [20, 12]
    # 每个线程的迭代次数不同：按线程分别退出循环
    src2 = "__global__ void k(int* out) { int w = threadIdx.x; int steps = 0; while (w > 0) { w >>= 1; steps++; } out[threadIdx.x] = steps; }"
    out2 = np.zeros(40, np.int32)
    rep = simt.launch(src2, "k", 1, 40, (out2,))
    assert out2.tolist() == [int(t).bit_length() for t in range(40)]
    assert rep.divergent_branches > 0


def test_device_functions_with_return_under_masks():
    src = r"""
    __device__ int collatz_steps(int v) {
        int s = 0;
        while (v != 1) { if (v % 2 == 0) v /= 2; else v = 3 * v + 1; s++; if (s > 1000) return -1; }
        return s;
    }
    __device__ float clampf(float v, float lo, float hi) { if (v < lo) return lo; if (v > hi) return hi; return v; }
    __global__ void k(int* steps, float* c) {
        int t = threadIdx.x;
        if (t > 0) steps[t] = collatz_steps(t);
        c[t] = clampf((float)t - 4.0f, 0.0f, 10.0f);
    }"""
    steps = np.zeros(20, np.int32)
    c = np.zeros(20, np.float32)
    simt.launch(src, "k", 1, 20, (steps, c))

    def ref(v):
        s = 0
        while v != 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            s += 1
        return s
    assert steps.tolist() == [0] + [ref(v) for v in range(1, 20)]
    assert c.tolist() == [min(max(t - 4.0, 0.0), 10.0) for t in range(20)]


def test_3d_thread_and_block_indices():
    src = r"""
    __global__ void k(int* out) {
        int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        int nt = blockDim.x * blockDim.y * blockDim.z;
        out[bx * nt + tx] = threadIdx.x * 1000000 + threadIdx.y * 100000 + threadIdx.z * 10000
                          + blockIdx.x * 100 + blockIdx.y * 10 + blockIdx.z;
    }"""
    grid, block = (2, 3, 2), (4, 2, 3)
    out = np.zeros(12 * 24, np.int32)
    simt.launch(src, "k", grid, block, (out,))
    exp = []
    for bz in range(2):
        for by in range(3):
            for bx in range(2):
                for tz in range(3):
                    for ty in range(2):
                        for tx in range(4):
                            exp.append(tx * 1000000 + ty * 100000 + tz * 10000 + bx * 100 + by * 10 + bz)
    assert out.tolist() == exp


def test_pointer_arithmetic_and_scalar_conversion(torch_or_numpy=None):
    src = r"""
    __global__ void scale_rows(const float* x, float* y, int n, float a, long long off) {
        const float* row = x + blockIdx.x * n;
        float* yr = y + blockIdx.x * n;
        for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = a * row[i] + (float)off;
    }"""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.zeros_like(x)
    simt.launch(src, "scale_rows", 3, 2, (x, y, 4, 2, 1))
    assert (y == 2 * x + 1).all()
    assert simt.kernel_signature(src, "scale_rows") == [
        ("x", "const float*", True), ("y", "float*", True), ("n", "int", False),
        ("a", "float", False), ("off", "long long", False)]


def test_torch_tensors_are_written_in_place():
    torch = pytest.importorskip("torch", reason="torch 张量接口需要 torch")
    src = "__global__ void k(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 2.0f; }"
    x = torch.arange(100, dtype=torch.float32)
    y = torch.zeros(100)
    simt.launch(src, "k", 2, 64, (x, y, 100))
    assert torch.equal(y, x * 2)


def test_math_builtins_and_constants():
    out = run1("out[0] = expf(0.0f); out[1] = fmaxf(-INFINITY, 2.0f); out[2] = sqrtf(16.0f); out[3] = fabsf(-3.5f);"
               "out[4] = FLT_MAX > 1e38f; out[5] = fminf(1.0f, -1.0f); out[6] = (float)warpSize; out[7] = max(3, 7);",
               out_dtype=np.float32, n=8)
    assert out.tolist() == [1.0, 2.0, 4.0, 3.5, 1.0, -1.0, 32.0, 7.0]


def test_defines_and_local_arrays():
    src = r"""
    __global__ void k(int* out) {
        int v[N];
        for (int i = 0; i < N; ++i) v[i] = i * threadIdx.x;
        int s = 0;
        for (int i = 0; i < N; ++i) s += v[i];
        out[threadIdx.x] = s * SCALE;
    }"""
    out = np.zeros(8, np.int32)
    simt.launch(src, "k", 1, 8, (out,), defines={"N": 5, "SCALE": 3})
    assert out.tolist() == [t * 10 * 3 for t in range(8)]


def test_bad_arguments_are_refused():
    src = "__global__ void k(const float* x, float* y, int n) { y[0] = x[0]; }"
    x = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="float32"):
        simt.launch(src, "k", 1, 1, (x.astype(np.float64), x, 4))
    with pytest.raises(TypeError, match="参数"):
        simt.launch(src, "k", 1, 1, (x, x))
    with pytest.raises(TypeError, match="浮点"):
        simt.launch(src, "k", 1, 1, (x, x, 4.5))
    with pytest.raises(ValueError, match="连续"):
        simt.launch(src, "k", 1, 1, (np.zeros((4, 4), np.float32)[:, 1], x, 4))
    with pytest.raises(ValueError, match="内核"):
        simt.launch(src, "nope", 1, 1, (x, x, 4))
    with pytest.raises(simt.LaunchError, match="1024"):
        simt.launch(src, "k", 1, 2048, (x, x, 4))
    with pytest.raises(OverflowError):
        simt.launch(src, "k", 1, 1, (x, x, 2**40))


def test_core_runs_without_torch():
    """模拟器本身只依赖 numpy、pycparser、pcpp（以后要在浏览器里用 Pyodide 运行）。"""
    import pathlib
    import subprocess
    import sys
    pkg_parent = pathlib.Path(simt.__file__).resolve().parent.parent
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
        f"sys.path.insert(0, {str(pkg_parent)!r})\n"
        "import numpy as np, simt\n"
        "o = np.zeros(4, np.int32)\n"
        "simt.launch('__global__ void k(int* o) { o[threadIdx.x] = threadIdx.x * 2; }', 'k', 1, 4, (o,))\n"
        "print(o.tolist())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0, 2, 4, 6]"


def test_preprocessor_lines_and_errors():
    src = "// 注释\n#if N > 2\n#error N too big\n#endif\n__global__ void k(int* o) {\n#pragma unroll\n  for (int i = 0; i < N; ++i) o[i] = i * K;\n  o[N] = o[N + 5];\n}\n"
    o = np.zeros(4, np.int32)
    with pytest.raises(simt.UnsupportedError, match="line 3.*#error"):
        simt.launch(src, "k", 1, 1, (o,), defines={"N": 3, "K": 1})
    # defines 不改变行号：越界报在第 8 行
    with pytest.raises(simt.OutOfBoundsError, match="line 8"):
        simt.launch(src, "k", 1, 1, (o,), defines={"N": 2, "K": 10})
    assert o[:2].tolist() == [0, 10]
    with pytest.raises(simt.UnsupportedError, match="line 7"):
        simt.launch(src.replace("i * K;", "i * ;"), "k", 1, 1, (o,), defines={"N": 1, "K": 1})


def test_parse_is_cached_per_source_and_defines():
    src = "__global__ void k(int* o) { o[0] = V; }"
    assert simt.parse(src, {"V": 1}) is simt.parse(src, {"V": 1})
    assert simt.parse(src, {"V": 1}) is not simt.parse(src, {"V": 2})
    o = np.zeros(1, np.int32)
    simt.launch(src, "k", 1, 1, (o,), defines={"V": 2})
    assert o[0] == 2


def test_signature_types():
    src = ("__global__ void k(const float* __restrict__ x, unsigned int n, const int m, size_t s,"
           " int64_t big, double* d, bool flag) {}")
    assert simt.kernel_signature(src, "k") == [
        ("x", "const float*", True), ("n", "unsigned int", False), ("m", "const int", False),
        ("s", "size_t", False), ("big", "int64_t", False), ("d", "double*", True), ("flag", "bool", False)]


def test_write_to_read_only_array_is_reported():
    y = np.zeros(4, np.float32)
    y.flags.writeable = False
    with pytest.raises(simt.SimtRuntimeError, match="只读"):
        simt.launch("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }", "k", 1, 4, (y,))
