"""warp 级 *_sync 内置函数的 mask 规则，以及 __reduce_*_sync。

规则（CUDA 编程指南）：执行它的线程必须在自己的 mask 中；mask 中的线程都必须执行同一条指令、用同一个
mask；洗牌只能读 mask 中（参与这次调用的）线程的值。违反时结果未定义，模拟器报 WarpSyncError 并给出行号。
__reduce_add/min/max_sync 只有 int 与 unsigned int 两个重载：float、long long 等 nvcc 报「more than one
instance of overloaded function」，模拟器报 CompileError。
"""

import shutil
import subprocess

import numpy as np
import pytest

from reduction_lab import simt

# nvcc 的说法与 clang 的说法（模拟器的前端用 clang 解析时，信息来自 clang）
AMBIGUOUS = r"more than one instance of overloaded function|is ambiguous"


HALVES = r"""
__global__ void halves(const float* x, float* o) {
    int lane = threadIdx.x & 31;
    float v = x[threadIdx.x];
    unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;   // 两个半 warp 各用自己的 mask
    for (int k = 8; k > 0; k >>= 1)
        v += __shfl_xor_sync(m, v, k);
    o[threadIdx.x] = v;
}
__global__ void halves_down(const float* x, float* o) {
    int lane = threadIdx.x & 31;
    float v = x[threadIdx.x];
    unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    v += __shfl_down_sync(m, v, 8);                      // lane 8..15 读 lane 16..23：不在自己的 mask 中
    o[threadIdx.x] = v;
}
__global__ void halves_down16(const float* x, float* o) {
    int lane = threadIdx.x & 31;
    float v = x[threadIdx.x];
    unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    v += __shfl_down_sync(m, v, 8, 16);                  // width 16：越过本段的线程拿回自己的值
    o[threadIdx.x] = v;
}
__global__ void odd_mask(const float* x, float* o) {
    int lane = threadIdx.x & 31;
    unsigned m = lane == 1 ? 0x3u : 0xffffffffu;         // lane 1 的 mask 与其他线程不同
    o[threadIdx.x] = __shfl_sync(m, x[threadIdx.x], 0);
}
"""


def _line(src, text):
    """text 在 src 里第一次出现的行号（从 1 数）。"""
    return src[:src.index(text)].count("\n") + 1


def _x(n=32):
    return np.arange(n, dtype=np.float32)


def test_two_half_warps_with_their_own_masks_are_legal():
    x, o = _x(64), np.zeros(64, np.float32)
    simt.launch(HALVES, "halves", 1, 64, (x, o))
    want = np.repeat(x.reshape(4, 16).sum(1), 16)
    assert o.tolist() == want.tolist()
    o = np.zeros(64, np.float32)
    simt.launch(HALVES, "halves_down16", 1, 64, (x, o))
    lane = np.arange(64) % 16
    up8 = x[np.minimum(np.arange(64) + 8, 63)]
    assert o.tolist() == np.where(lane < 8, x + up8, 2 * x).tolist()


def test_source_lane_outside_the_mask_is_reported():
    with pytest.raises(simt.WarpSyncError) as ei:
        simt.launch(HALVES, "halves_down", 1, 32, (_x(), np.zeros(32, np.float32)))
    msg = str(ei.value)
    assert "source lane 16 of lane 8" in msg and "0x0000ffff" in msg and "lane 16 不在 mask" in msg
    assert ei.value.line == _line(HALVES, "v += __shfl_down_sync(m, v, 8);") and ei.value.thread == "(8,0,0)"


def test_lanes_named_in_a_mask_must_use_the_same_mask():
    with pytest.raises(simt.WarpSyncError) as ei:
        simt.launch(HALVES, "odd_mask", 1, 32, (_x(), np.zeros(32, np.float32)))
    msg = str(ei.value)
    assert "lane 0 uses mask 0xffffffff but lane 1" in msg and "0x00000003" in msg
    assert ei.value.line == _line(HALVES, "__shfl_sync(m,")


def test_mask_naming_lanes_that_skip_the_call_is_still_reported():
    src = r"""
__global__ void k(const int* x, int* o) {
    int v = x[threadIdx.x];
    if (threadIdx.x < 16) v = __reduce_add_sync(0xffffffff, v);
    o[threadIdx.x] = v;
}"""
    with pytest.raises(simt.WarpSyncError, match="__reduce_add_sync mask 0xffffffff does not match") as ei:
        simt.launch(src, "k", 1, 32, (np.zeros(32, np.int32), np.zeros(32, np.int32)))
    assert ei.value.line == 4


REDUCE = r"""
__global__ void red_int(const int* x, int* o) {
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    o[3 * t] = __reduce_add_sync(0xffffffff, v);
    o[3 * t + 1] = __reduce_min_sync(0xffffffff, v);
    o[3 * t + 2] = __reduce_max_sync(0xffffffff, v);
}
__global__ void red_uint(const unsigned* x, unsigned* o) {
    unsigned v = x[threadIdx.x];
    o[6 * threadIdx.x] = __reduce_add_sync(0xffffffff, v);
    o[6 * threadIdx.x + 1] = __reduce_min_sync(0xffffffff, v);
    o[6 * threadIdx.x + 2] = __reduce_max_sync(0xffffffff, v);
    o[6 * threadIdx.x + 3] = __reduce_and_sync(0xffffffff, v);
    o[6 * threadIdx.x + 4] = __reduce_or_sync(0xffffffff, v);
    o[6 * threadIdx.x + 5] = __reduce_xor_sync(0xffffffff, v);
}
__global__ void red_halves(const short* x, int* o) {
    int lane = threadIdx.x & 31;
    short v = x[threadIdx.x];                             // 比 int 窄：提升为 int 版本
    unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    o[threadIdx.x] = __reduce_add_sync(m, v);
}
"""


def test_reduce_sync_int_exact_and_wrapping():
    rng = np.random.default_rng(0)
    x = rng.integers(-2**31, 2**31, size=96, dtype=np.int64).astype(np.int32)   # 和会溢出：按 2^32 回绕
    x[5] = -2**31
    o = np.zeros(3 * 96, np.int32)
    simt.launch(REDUCE, "red_int", 1, 96, (x, o))
    o = o.reshape(96, 3)
    for w in range(3):
        seg = x[32 * w:32 * w + 32].astype(np.int64)
        s = int(seg.sum()) & 0xFFFFFFFF
        s = s - 2**32 if s >= 2**31 else s
        assert (o[32 * w:32 * w + 32] == [s, seg.min(), seg.max()]).all(), w


def test_reduce_sync_unsigned_compares_unsigned():
    x = np.arange(32, dtype=np.uint32) * 3 + 1
    x[7] = 0xFFFFFFF0          # 无符号最大；按有符号比较会是最小
    o = np.zeros(6 * 32, np.uint32)
    simt.launch(REDUCE, "red_uint", 1, 32, (x, o))
    a, o_ = x.astype(np.uint64), o.reshape(32, 6)
    want = [int(a.sum()) & 0xFFFFFFFF, int(a.min()), int(a.max()),
            int(np.bitwise_and.reduce(x)), int(np.bitwise_or.reduce(x)), int(np.bitwise_xor.reduce(x))]
    assert (o_ == want).all()


def test_reduce_sync_groups_by_mask_and_promotes_short():
    x = (np.arange(64) - 20).astype(np.int16)
    o = np.zeros(64, np.int32)
    simt.launch(REDUCE, "red_halves", 1, 64, (x, o))
    assert o.tolist() == np.repeat(x.astype(np.int64).reshape(4, 16).sum(1), 16).tolist()


@pytest.mark.parametrize("ctype", ["float", "double", "long long", "unsigned long long"])
def test_reduce_sync_refuses_what_nvcc_refuses(ctype):
    src = f"__global__ void k({ctype}* x) {{ x[0] = __reduce_add_sync(0xffffffff, x[threadIdx.x]); }}"
    dt = {"float": np.float32, "double": np.float64, "long long": np.int64, "unsigned long long": np.uint64}[ctype]
    with pytest.raises(simt.CompileError, match=AMBIGUOUS) as ei:
        simt.launch(src, "k", 1, 32, (np.zeros(32, dt),))
    assert ei.value.line == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="需要 nvcc 核对 sm_90 的重载规则")
def test_nvcc_agrees(tmp_path):
    ok = tmp_path / "ok.cu"
    ok.write_text(HALVES + REDUCE)
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", str(ok), "-o", str(tmp_path / "ok.ptx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k(float* x) { x[0] = __reduce_add_sync(0xffffffff, x[threadIdx.x]); }\n")
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", str(bad), "-o", str(tmp_path / "bad.ptx")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "more than one instance of overloaded function" in r.stderr
