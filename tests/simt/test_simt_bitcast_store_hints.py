"""按位重解释（__int_as_float、__float_as_uint ……）、带缓存提示的写（__stcs、__stcg、__stwb、__stwt）与
数组的引用参数 ``float (&f)[N]``：softmax_cluster.cu 的第一版用到它们（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt

BITS = r"""
extern "C" __global__ void bits(const float *x, unsigned int *u, int *i, float *back, float *ninf, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) {
        u[t] = __float_as_uint(x[t]);
        i[t] = __float_as_int(x[t]);
        back[t] = __uint_as_float(u[t]) * __int_as_float(0x3f800000);   // 0x3f800000 是 1.0f
        ninf[t] = __int_as_float(0xff800000);
    }
}
"""


def test_bit_casts_reinterpret_the_same_32_bits():
    x = np.array([1.0, -2.5, 0.0, -0.0, np.inf, 3.4e38, 1e-45], np.float32)
    n = x.size
    u = np.zeros(n, np.uint32)
    i = np.zeros(n, np.int32)
    back = np.zeros(n, np.float32)
    ninf = np.zeros(n, np.float32)
    simt.launch(BITS, "bits", 1, 32, (x, u, i, back, ninf, n))
    assert u.tobytes() == x.tobytes() and i.tobytes() == x.tobytes()
    assert back.tobytes() == x.tobytes()
    assert np.all(np.isneginf(ninf))


@pytest.mark.parametrize("hint", ["__stcs", "__stcg", "__stwb", "__stwt"])
def test_store_hints_store_and_count_like_plain_stores(hint):
    src = rf"""
    extern "C" __global__ void k(const float *x, float *y, float4 *v, int n)
    {{
        int t = blockIdx.x * blockDim.x + threadIdx.x;
        if (t < n) {{
            {hint}(y + t, 2 * x[t]);                       // 值先转换成 float
            {hint}(&v[t], make_float4(x[t], 1.0f, 2.0f, 3.0f));
        }}
    }}
    """
    n = 40
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    v = np.zeros((n, 4), np.float32)
    rep = simt.launch(src, "k", 2, 32, (x, y, v, n))
    assert np.array_equal(y, 2 * x)
    assert np.array_equal(v[:, 0], x) and np.array_equal(v[:, 1:], np.tile([1, 2, 3], (n, 1)))
    assert rep.global_store_bytes == 4 * n + 16 * n


def test_store_hint_out_of_bounds_is_reported_with_its_line():
    src = r"""
extern "C" __global__ void k(float *y, int n)
{
    __stcs(y + threadIdx.x, 1.0f);
}
"""
    y = np.zeros(8, np.float32)
    with pytest.raises(simt.OutOfBoundsError, match="第 4 行"):
        simt.launch(src, "k", 1, 32, (y, 8))


ARRAY_REF = r"""
__device__ void fill(float (&f)[4], float v)
{
    for (int e = 0; e < 4; e++)
        f[e] = v + e;
}

__device__ float total(const float (&f)[4])
{
    return f[0] + f[1] + f[2] + f[3];
}

extern "C" __global__ void k(float *out)
{
    float a[4];
    float b[3][4];
    fill(a, threadIdx.x);
    fill(b[1], 10.0f);                          // 二维数组的一行也能绑定到数组引用
    out[threadIdx.x] = total(a) + total(b[1]);
}
"""


def test_array_reference_parameters_share_the_callers_array():
    out = np.zeros(32, np.float32)
    simt.launch(ARRAY_REF, "k", 1, 32, (out,))
    t = np.arange(32, dtype=np.float32)
    assert np.array_equal(out, 4 * t + 6 + 46)


def test_array_reference_parameter_with_a_different_element_type_is_refused():
    src = r"""
__device__ void fill(float (&f)[4]) { f[0] = 1.0f; }
extern "C" __global__ void k(float *out)
{
    int a[4];
    fill(a);
    out[0] = a[0];
}
"""
    with pytest.raises((simt.CompileError, simt.UnsupportedError)):
        simt.launch(src, "k", 1, 1, (np.zeros(1, np.float32),))


@pytest.mark.parametrize("tname", ["__nv_fp8_e4m3", "__half2_raw"])
def test_cuda_pair_types_are_unsupported_not_compile_errors(tname):
    """模拟器的序言里没有的 CUDA 类型（__nv_fp8_e4m3 ……）：报 UnsupportedError（不说 nvcc 会拒绝），指出行号。"""
    src = f"""
extern "C" __global__ void k(float *out)
{{
    {tname} p;
    out[0] = 0.0f;
}}
"""
    with pytest.raises(simt.UnsupportedError, match=f"第 4 行.*{tname}.*nvcc 接受") as e:
        simt.launch(src, "k", 1, 1, (np.zeros(1, np.float32),))
    assert not isinstance(e.value, simt.CompileError)


@pytest.mark.parametrize("tname", ["Vec3", "__half4"])
def test_unknown_type_that_nvcc_also_rejects_is_a_compile_error(tname):
    src = f"""
extern "C" __global__ void k(float *out)
{{
    {tname} p;
    out[0] = 0.0f;
}}
"""
    with pytest.raises(simt.CompileError, match="第 4 行"):
        simt.launch(src, "k", 1, 1, (np.zeros(1, np.float32),))


PAIRS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void pairs(const float *x, unsigned int *hw, unsigned int *bw, float *back, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) {
        const __half2 h = __floats2half2_rn(x[2 * t], x[2 * t + 1]);
        const __nv_bfloat162 b = __floats2bfloat162_rn(x[2 * t], x[2 * t + 1]);
        hw[t] = *reinterpret_cast<const unsigned int *>(&h);          // .x 在低 16 位
        bw[t] = *reinterpret_cast<const unsigned int *>(&b);
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&hw[t]));
        back[4 * t] = f.x;
        back[4 * t + 1] = f.y;
        back[4 * t + 2] = __low2float(b) + __high2float(__float2bfloat162_rn(0.0f));
        back[4 * t + 3] = __bfloat1622float2(b).y;
    }
}
"""


def test_half_and_bfloat16_pairs_round_and_pack_like_cuda():
    torch = pytest.importorskip("torch")
    n = 33
    x = (np.random.default_rng(0).standard_normal(2 * n) * 100).astype(np.float32)
    hw = np.zeros(n, np.uint32)
    bw = np.zeros(n, np.uint32)
    back = np.zeros(4 * n, np.float32)
    simt.launch(PAIRS, "pairs", 2, 32, (x, hw, bw, back, n))
    xt = torch.from_numpy(x)
    want_h = xt.half().view(torch.int16).numpy().astype(np.uint16).view(np.uint16).reshape(n, 2)
    want_b = xt.bfloat16().view(torch.int16).numpy().astype(np.uint16).view(np.uint16).reshape(n, 2)
    assert np.array_equal(hw & 0xFFFF, want_h[:, 0]) and np.array_equal(hw >> 16, want_h[:, 1])
    assert np.array_equal(bw & 0xFFFF, want_b[:, 0]) and np.array_equal(bw >> 16, want_b[:, 1])
    b = back.reshape(n, 4)
    assert np.array_equal(b[:, 0], xt.half().float().numpy()[0::2])
    assert np.array_equal(b[:, 1], xt.half().float().numpy()[1::2])
    assert np.array_equal(b[:, 2], xt.bfloat16().float().numpy()[0::2])
    assert np.array_equal(b[:, 3], xt.bfloat16().float().numpy()[1::2])


def test_pair_conversion_of_a_wrong_type_is_a_compile_error():
    src = r"""
#include <cuda_fp16.h>
extern "C" __global__ void k(float *out)
{
    float2 f = __half22float2(make_float2(1.0f, 2.0f));
    out[0] = f.x;
}
"""
    with pytest.raises(simt.CompileError):
        simt.launch(src, "k", 1, 1, (np.zeros(1, np.float32),))
