"""bfloat16 与 float16 在 cuda、tilelang 后端上：按输入的 dtype 读写，float32 里计算，结果与输入同 dtype。

与 float64 的参考值（由同一个半精度输入算出）比较，容差 = 输出舍入（bf16 的单位舍入 2**-8，fp16 的 2**-11）
+ float32 计算的误差；形状包括奇数的行长、不是 8 的倍数的行长（16 字节一包之外的结尾）、行首不按 16 字节
对齐的切片、一整行很大的负数。sim 模式与 gpu 模式用同一组用例（张量在 reduction_lab.DEVICE 上）。
后半部分是模拟器的半精度类型（与模式无关，总在 CPU 上）和 nvcc 编译检查。
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab import simt

HALVES = (torch.bfloat16, torch.float16)
#: 单位舍入：就近舍入的相对误差上限
UNIT = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}
#: 最小的正次正规数的一半：比它小的参考值舍入成 0 也算对
TINY = {torch.bfloat16: 2.0**-134, torch.float16: 2.0**-25, torch.float32: 2.0**-150}
# TileLang 每种形状编译一次（sim 模式约 1 秒），形状少一些
SHAPES = {"cuda": [(3, 1000), (4, 37), (2, 8), (5, 4099), (1, 1), (2, 2056)],
          "tilelang": [(3, 1000), (4, 37), (2, 1)]}
DEV = rl.DEVICE


def _skip_tilelang_bf16(backend, dtype):
    """backend 来自 conftest 的 --backend 参数化；这里只测 cuda 与 tilelang。"""
    if backend not in SHAPES:
        pytest.skip("这个文件只测 cuda 与 tilelang；torch 与 triton 的半精度由 test_api_fuzz 等检查")
    if backend == "tilelang" and dtype == torch.bfloat16 and rl.MODE == "sim":
        pytest.skip("sim 模式的 TileLang（C 目标）没有 bfloat16：由 test_tilelang_bf16_refused_in_sim 检查报错")


def _x(shape, dtype, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


def _close(y, ref, dtype, extra=0.0, what=""):
    """|y - ref| <= 1.01 * u * |ref| + extra + tiny（逐元素），y 与 ref 都按 float64 比较。"""
    y64 = y.double().cpu()
    ref = ref.cpu()
    bound = 1.01 * UNIT[dtype] * ref.abs() + extra + TINY[dtype]
    err = (y64 - ref).abs()
    bad = err > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} 个元素超出容差，最大误差 {err.max().item():.3g}，"
                           f"位置 {tuple(bad.nonzero()[0].tolist())}")


def _softmax_ref(x):
    return torch.softmax(x.double().cpu(), dim=-1)


def _sum_extra(x):
    """float32 累加的误差上限（每次加法相对 2**-24，按 N 次估计）。"""
    n = x.shape[1]
    return (n * 2.0**-23 * x.double().abs().sum(1, keepdim=False)).cpu()


# ---------------------------------------------------------------- 数值

@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_softmax_matches_float64(backend, dtype):
    _skip_tilelang_bf16(backend, dtype)
    for i, shape in enumerate(SHAPES[backend]):
        x = _x(shape, dtype, seed=i)
        y = rl.softmax(x, backend=backend)
        assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
        ref = _softmax_ref(x)
        _close(y, ref, dtype, extra=2.0**-20 * ref.abs(), what=f"{backend} softmax {shape}")
        assert (y.double() >= 0).all() and (y.double() <= 1).all()
        # 每行的概率和：输出舍入的误差最多 N * u，整体不超过 u * 1 的累积
        s = y.double().sum(1).cpu()
        assert ((s - 1).abs() <= 1.01 * UNIT[dtype] + 1e-6).all(), s


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_reduce_sum_matches_float64(backend, dtype):
    _skip_tilelang_bf16(backend, dtype)
    for i, shape in enumerate(SHAPES[backend]):
        x = _x(shape, dtype, seed=10 + i)
        s = rl.reduce_sum(x, backend=backend)
        assert s.dtype == dtype and s.shape == (shape[0],)
        _close(s, x.double().sum(1), dtype, extra=_sum_extra(x), what=f"{backend} reduce_sum {shape}")


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("kernel", ["tree", "warp", "split"])
def test_cuda_reduce_sum_kernels(kernel, dtype):
    from reduction_lab import cuda_kernels as ck

    for shape in [(3, 1000), (2, 4099), (4, 7)]:
        x = _x(shape, dtype, seed=shape[1])
        kw = {"chunks": 3} if kernel == "split" else {}
        s = ck.reduce_sum(x, kernel=kernel, **kw)
        assert s.dtype == dtype
        _close(s, x.double().sum(1), dtype, extra=_sum_extra(x), what=f"{kernel} {shape}")


@pytest.mark.parametrize("dtype", [torch.float32, *HALVES], ids=str)
@pytest.mark.parametrize("kernel", ["warp", "split"])
@pytest.mark.parametrize("packs", [1, 2, 4, 8])
def test_cuda_reduce_sum_packs_in_flight(packs, kernel, dtype):
    """SUM_PACKS（每个线程同时在途的 16 字节包数；float32 一包 4 个、16 位 8 个）的每个取值：行首不对齐
    （开头几个元素单独读）、包数不是线程数 x SUM_PACKS 的倍数（剩下的包逐个读）时，结果都与 float64 一致。"""
    from reduction_lab import cuda_kernels as ck

    base = _x((3, 4200), dtype, seed=packs)
    for off, n in ((0, 4096), (3, 4099), (5, 777), (1, 9)):
        x = base[:, off:off + n]
        kw = {"chunks": 2} if kernel == "split" else {}
        s = ck.reduce_sum(x, kernel=kernel, packs=packs, **kw)
        _close(s, x.double().sum(1), dtype, extra=_sum_extra(x), what=f"{kernel} packs={packs} offset {off} N={n}")


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_cuda_unaligned_rows_and_mismatched_output(dtype):
    """行首不按 16 字节对齐（开头几个元素单独处理），以及 x 与 out 在 16 字节内偏移不同（整行逐个处理）：
    结果与对齐的张量相同（在容差之内）。"""
    base = _x((3, 1011), dtype, seed=5)
    for off in (1, 3, 7):
        x = base[:, off:off + 1000]                 # 行距 1011，行首偏移 off 个元素
        y = rl.softmax(x, backend="cuda")
        _close(y, _softmax_ref(x), dtype, extra=1e-6, what=f"offset {off}")
        s = rl.reduce_sum(x, backend="cuda")
        _close(s, x.double().sum(1), dtype, extra=_sum_extra(x), what=f"sum offset {off}")
    x = _x((2, 1000), dtype, seed=6)
    buf = torch.empty(2 * 1000 + 8, dtype=dtype, device=DEV)
    out = buf[1:1 + 2000].view(2, 1000)             # 与 x 差 2 个字节
    with torch.no_grad():
        r = rl.softmax(x, backend="cuda", out=out)
    assert r.data_ptr() == out.data_ptr()
    _close(out, _softmax_ref(x), dtype, extra=1e-6, what="out 偏移 1 个元素")


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_large_negative_and_masked_rows(backend, dtype):
    _skip_tilelang_bf16(backend, dtype)
    big = -6.0e4 if dtype == torch.float16 else -1.0e30
    x = _x((3, 37), dtype, seed=3, scale=1.0).cpu()
    x[0] = big + torch.arange(37, dtype=torch.float64).to(dtype)   # 整行很大的负数（fp16 里相邻值差 32）
    x[1, :20] = float("-inf")                                        # 前 20 个被遮住
    x = x.to(DEV)
    y = rl.softmax(x, backend=backend)
    assert torch.isfinite(y).all()
    assert (y[1, :20] == 0).all()
    _close(y, _softmax_ref(x), dtype, extra=1e-6, what=f"{backend} 很大的负数")


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_backward(backend, dtype):
    """反向也按输入的 dtype：dx 与 float64 里用同一个 y（前向的半精度输出）算出的参考值一致。"""
    _skip_tilelang_bf16(backend, dtype)
    x = _x((3, 100), dtype, seed=8).requires_grad_(True)
    dy = _x((3, 100), dtype, seed=9, scale=1.0)
    y = rl.softmax(x, backend=backend)
    y.backward(dy)
    assert x.grad.dtype == dtype
    y64, dy64 = y.detach().double().cpu(), dy.double().cpu()
    ref = y64 * (dy64 - (y64 * dy64).sum(1, keepdim=True))
    extra = 100 * 2.0**-23 * (y64 * dy64.abs()).sum(1, keepdim=True) * y64 + 1e-7
    _close(x.grad, ref, dtype, extra=extra, what=f"{backend} backward")
    xs = _x((2, 50), dtype, seed=1).requires_grad_(True)
    rl.reduce_sum(xs, backend=backend).backward(torch.ones(2, dtype=dtype, device=DEV))
    assert xs.grad.dtype == dtype and (xs.grad == 1).all()


def test_out_must_match_the_input_dtype():
    x = _x((2, 16), torch.bfloat16)
    with pytest.raises(TypeError, match="out 的 dtype 应为 bfloat16"):
        rl.softmax(x, backend="cuda", out=torch.empty(2, 16, device=DEV))
    with pytest.raises(TypeError, match="dtype"):
        rl.reduce_sum(x.double(), backend="cuda")
    from reduction_lab import cuda_kernels as ck

    with pytest.raises(TypeError, match="dtype 必须相同"):
        ck.softmax_backward(x, x.half())


@pytest.mark.skipif(rl.MODE != "sim", reason="gpu 模式的 TileLang（CUDA 目标）支持 bfloat16，由上面的数值测试检查")
def test_tilelang_bf16_refused_in_sim():
    x = _x((2, 16), torch.bfloat16)
    for call in (lambda: rl.softmax(x, backend="tilelang"), lambda: rl.reduce_sum(x, backend="tilelang"),
                 lambda: rl.softmax(x.clone().requires_grad_(True), backend="tilelang")):
        with pytest.raises(TypeError, match=r"c 目标.*bfloat16.*Cannot convert type bfloat16"):
            call()


# ---------------------------------------------------------------- 模拟器的半精度类型（总在 CPU 上）

_CONV = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __global__ void conv(const float *f, const double *d, __nv_bfloat16 *b, __nv_bfloat16 *bd,
                                __half *h, __half *hd, float *back, float *mixed, unsigned long long *mis)
{
    int i = threadIdx.x;
    b[i] = __float2bfloat16_rn(f[i]);
    bd[i] = d[i];                                   // double -> bf16：一次舍入
    h[i] = __float2half(f[i]);
    hd[i] = d[i];
    back[i] = __bfloat162float(b[i]) + __half2float(h[i]);
    __half s = h[i] + h[i];                          // 同类型相加：结果再舍入成 __half
    mixed[i] = s;
    mis[i] = (size_t)(b + i) % 16;
}
"""


def _bits_bf16(t):
    return t.view(torch.int16).numpy().view(np.uint16)


def test_simulator_half_conversions_round_to_nearest_even():
    f = np.array([1.00390625, 1.01171875, 1 + 2**-8 + 2**-20, 3.4e38, 65520.0, -0.0, np.inf, 1e-40, 2049.0, 0.1],
                 np.float32)
    n = f.size
    d = np.array([1 + 2**-8 + 2**-40, 1 + 2**-11 + 2**-40] + [1.5] * (n - 2))
    b, bd = torch.zeros(n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)
    h, hd = torch.zeros(n, dtype=torch.float16), torch.zeros(n, dtype=torch.float16)
    back, mixed = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mis = np.zeros(n, np.uint64)
    simt.launch(_CONV, "conv", 1, n, (f, d, b, bd, h, hd, back, mixed, mis))
    # torch 的转换也是就近舍入到偶数：逐位相同
    ft = torch.from_numpy(f)
    assert (_bits_bf16(b) == _bits_bf16(ft.to(torch.bfloat16))).all()
    assert torch.equal(h, ft.to(torch.float16))
    assert _bits_bf16(b)[0] == 0x3F80 and _bits_bf16(b)[1] == 0x3F82      # 两个「正好一半」：舍入到偶数
    assert _bits_bf16(b)[2] == 0x3F81 and torch.isinf(b[3].float())       # 过半向上；超出最大值成为 inf
    assert torch.isinf(h[4].float())                                       # 65520 超过 fp16 的最大值 65504
    # double 直接舍入一次（先转 float32 会在 2**-8 处两次舍入得到 1.0）
    assert _bits_bf16(bd)[0] == 0x3F81
    assert hd[1].item() == 1 + 2**-10
    np.testing.assert_array_equal(back, b.float().numpy() + h.float().numpy())
    np.testing.assert_array_equal(mixed, (h.float() + h.float()).to(torch.float16).float().numpy())
    base = b.data_ptr()
    assert [int(v) for v in mis] == [(base + 2 * i) % 16 for i in range(n)]


def test_simulator_bf16_tensor_is_written_in_place_and_checked():
    src = r"""
    #include <cuda_bf16.h>
    extern "C" __global__ void scale(__nv_bfloat16 *x, int n)
    {
        int i = threadIdx.x;
        if (i < n)
            x[i] = (float)x[i] * 3.0f;
    }
    """
    x = torch.randn(10).to(torch.bfloat16)
    want = (x.float() * 3).to(torch.bfloat16)
    simt.launch(src, "scale", 1, 16, (x, 10))
    assert torch.equal(x, want)
    with pytest.raises(TypeError, match="bfloat16"):
        simt.launch(src, "scale", 1, 16, (torch.zeros(10, dtype=torch.float16), 10))
    with pytest.raises(simt.OutOfBoundsError):
        simt.launch(src, "scale", 1, 16, (x, 16))


# ---------------------------------------------------------------- nvcc

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc 不在 PATH 上，无法检查生成的代码能否编译")
needs_tilelang = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None,
                                    reason="没有安装 tilelang：无法生成 TileLang 内核的 CUDA 源码")


@needs_nvcc
@pytest.mark.parametrize("flag", ["ENABLE_BF16", "ENABLE_FP16"])
@pytest.mark.parametrize("name", ["softmax.cu", "reduce_sum.cu", "softmax_backward.cu"])
def test_half_variants_compile_with_128_bit_accesses(name, flag, tmp_path):
    from reduction_lab.cuda_kernels import KERNEL_DIR, kernel_names

    ptx = tmp_path / "k.ptx"
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_90", f"-D{flag}=1", "-DBLOCK_SIZE=256", str(KERNEL_DIR / name),
                        "-o", str(ptx)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    text = ptx.read_text()
    assert re.findall(r"\.entry\s+(\w+)\s*\(", text) == kernel_names(name)
    assert re.search(r"ld\.global(\.nc)?\.v4\.u32", text), "没有 16 字节的加载"
    if name != "reduce_sum.cu":
        assert "st.global.v4.u32" in text, "没有 16 字节的存储"


@needs_nvcc
@needs_tilelang
def test_tilelang_half_cuda_source_compiles():
    from reduction_lab import tilelang_kernels as tk

    cases = [(k, d) for d in ("bfloat16", "float16") for k in ("reduce_sum", "softmax", "softmax_backward")]
    srcs = [tk.cuda_source(k, M=64, N=4096, dtype=d) for k, d in cases]
    for (k, d), src in zip(cases, srcs):
        ctype = {"bfloat16": "bfloat16_t", "float16": "half_t"}[d]
        assert ctype in src, f"{k} {d}：生成的代码里没有 {ctype}"
    # 一次 nvcc 编译全部六份（头文件只解析一次）；每份自己的内核里都有 16 字节的读
    bad = [c for c, ptx in zip(cases, tk.nvcc_check_many(srcs)) if not re.search(r"ld\.global(\.nc)?\.v4", ptx)]
    assert not bad, f"这些内核没有 16 字节的读：{bad}"
