"""计数器：手算得出的精确值。"""

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.simt.examples import BANK, REDUCE

COPY = r"""
__global__ void copy_strided(const float* x, float* y, int stride) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    y[t] = x[t * stride];
}
__global__ void copy_double(const double* x, double* y) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    y[t] = x[t];
}
"""


@pytest.mark.parametrize("stride,extra", [(1, 0), (2, 1), (4, 3), (32, 31), (33, 0), (17, 0), (16, 15)])
def test_strided_shared_access_bank_conflicts(stride, extra):
    out = np.zeros(64, np.float32)
    rep = simt.launch(BANK, "strided", 1, 64, (out, stride))
    # 两个线程束，各一次写与一次读
    assert rep.shared_store_requests == 2 and rep.shared_load_requests == 2
    assert rep.shared_store_bank_conflicts == 2 * extra
    assert rep.shared_load_bank_conflicts == 2 * extra
    assert rep.shared_load_wavefronts == 2 * (1 + extra)
    assert rep.bank_conflicts == 4 * extra
    assert out.tolist() == list(range(64))


@pytest.mark.parametrize("pad,conflicts", [(0, 32 * 31), (1, 0)])
def test_transpose_tile_padding(pad, conflicts):
    x = np.arange(1024, dtype=np.float32)
    y = np.zeros(1024, np.float32)
    rep = simt.launch(BANK, "transpose_tile", 1, (32, 32), (x, y), defines={"PAD": pad})
    assert rep.shared_store_bank_conflicts == 0          # 按行写：32 个不同的存储体
    assert rep.shared_load_bank_conflicts == conflicts   # 按列读：同一个存储体 32 次（不填充时）
    assert rep.global_load_requests == 32 and rep.global_load_sectors == 128
    assert rep.global_store_requests == 32 and rep.global_store_sectors == 128
    assert rep.barriers == 1 and rep.warps_launched == 32


def test_broadcast_read_is_not_a_conflict():
    src = r"""
__global__ void k(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[0] + s[threadIdx.x / 2];
}"""
    out = np.zeros(64, np.float32)
    rep = simt.launch(src, "k", 1, 64, (out,))
    assert rep.shared_load_requests == 4 and rep.shared_load_bank_conflicts == 0
    assert out.tolist() == [t // 2 for t in range(64)]


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (8, 32), (64, 32)])
def test_global_coalescing_sectors(stride, sectors):
    x = np.zeros(64 * 64, np.float32)
    y = np.zeros(64, np.float32)
    rep = simt.launch(COPY, "copy_strided", 2, 32, (x, y, stride))
    assert rep.global_load_requests == 2
    assert rep.global_load_sectors == 2 * sectors
    assert rep.global_load_bytes == 64 * 4
    assert rep.global_store_sectors == 2 * 4 and rep.global_store_bytes == 256
    assert rep.global_load_sectors_per_request == sectors


def test_double_loads_take_eight_sectors():
    x = np.zeros(64, np.float64)
    rep = simt.launch(COPY, "copy_double", 2, 32, (x, x.copy()))
    assert rep.global_load_sectors == 16 and rep.global_load_bytes == 512


def test_partial_warp_counts():
    y = np.zeros(40, np.float32)
    rep = simt.launch(COPY, "copy_strided", 1, 40, (np.zeros(40, np.float32), y, 1))
    # 40 个线程 = 一个完整线程束 + 8 个线程的线程束
    assert rep.warps_launched == 2
    assert rep.global_load_requests == 2 and rep.global_load_sectors == 4 + 1


def test_reduce_counters_per_block():
    x = np.ones(512, np.float32)
    out = np.zeros(2, np.float32)
    r0 = simt.launch(REDUCE, "reduce0", 2, 256, (x, out, 512), shared_bytes=1024)
    r1 = simt.launch(REDUCE, "reduce1", 2, 256, (x, out, 512), shared_bytes=1024)
    r2 = simt.launch(REDUCE, "reduce2", 2, 256, (x, out, 512), shared_bytes=1024)
    # 发散分支：reduce0 每块 5*8 + 4 + 2 + 1（树形各步）+ 1（tid == 0）
    assert r0.divergent_branches == 2 * 48
    # reduce2：只有活跃线程少于 32 的 5 步以及 tid == 0 发散
    assert r2.divergent_branches == 2 * 6
    # 屏障：加载后 1 次 + 8 步
    assert r0.barriers == r1.barriers == r2.barriers == 2 * 9
    # reduce1 的存储体冲突：每条指令每块 4+6+7+7+7+3+1 = 35 个额外波前，两次读一次写
    assert r1.shared_load_bank_conflicts == 2 * 70 and r1.shared_store_bank_conflicts == 2 * 35
    assert r0.bank_conflicts == 0 and r2.bank_conflicts == 0
    # reduce2 的共享内存请求：写 8 + 12，读 2*12 + 1
    assert r2.shared_store_requests == 2 * 20 and r2.shared_load_requests == 2 * 25
    for r in (r0, r1, r2):
        assert r.global_load_requests == 16 and r.global_load_sectors == 64 and r.global_load_bytes == 2048
        assert r.global_store_requests == 2 and r.global_store_sectors == 2
    assert out.tolist() == [256.0, 256.0]


def test_report_is_deterministic_and_readable():
    x = np.ones(1024, np.float32)
    out = np.zeros(4, np.float32)
    a = simt.launch(REDUCE, "reduce4", 4, 128, (x, out, 1024), shared_bytes=512)
    b = simt.launch(REDUCE, "reduce4", 4, 128, (x, out, 1024), shared_bytes=512)
    assert a == b and str(a) == str(b)
    s = str(a)
    assert "存储体冲突" in s and "扇区" in s and "reduce4" in s
    assert a.as_dict()["threads_launched"] == 512


PACK8 = r"""
#include <cuda_fp16.h>
struct __align__(16) pack8 { __half v0, v1, v2, v3, v4, v5, v6, v7; };
struct loose8 { __half v0, v1, v2, v3, v4, v5, v6, v7; };
__global__ void packed(const __half* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    pack8 p = reinterpret_cast<const pack8*>(x)[i];
    out[i] = (float)p.v0 + (float)p.v7;
}
__global__ void loose(const __half* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    loose8 p = reinterpret_cast<const loose8*>(x)[i];
    out[i] = (float)p.v0 + (float)p.v7;
}
__global__ void packed_store(__half* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    pack8 p;
    p.v0 = p.v1 = p.v2 = p.v3 = p.v4 = p.v5 = p.v6 = p.v7 = __float2half((float)i);
    reinterpret_cast<pack8*>(y)[i] = p;
}
"""


def test_packed_half_struct_is_one_128_bit_request_per_lane():
    x = np.arange(512, dtype=np.float16)
    out = np.zeros(64, np.float32)
    rep = simt.launch(PACK8, "packed", 2, 32, (x, out))
    assert out.tolist() == (x[0::8].astype(np.float32) + x[7::8].astype(np.float32)).tolist()
    # 两个线程束各一条 128 位的读，每条 512 字节 = 16 个扇区，与 reinterpret_cast<float4*> 相同
    assert (rep.global_load_requests, rep.global_load_sectors, rep.global_load_bytes) == (2, 32, 1024)
    # 没有 __align__(16) 的结构体：按成员逐个读（每个线程束 8 条 2 字节的读）
    rep = simt.launch(PACK8, "loose", 2, 32, (x, out))
    assert rep.global_load_requests == 16 and rep.global_load_bytes == 1024
    y = np.zeros(512, np.float16)
    rep = simt.launch(PACK8, "packed_store", 2, 32, (y,))
    assert (y.reshape(64, 8) == np.arange(64, dtype=np.float16)[:, None]).all()
    assert (rep.global_store_requests, rep.global_store_sectors) == (2, 32)


def test_packed_half_struct_must_be_aligned():
    x = np.zeros(520, np.float16)
    src = PACK8 + "__global__ void off(const __half* x, float* out) {\n" \
        "    pack8 p = reinterpret_cast<const pack8*>(x + 1)[threadIdx.x];\n    out[threadIdx.x] = (float)p.v0;\n}\n"
    with pytest.raises(simt.SimtRuntimeError, match="16"):
        simt.launch(src, "off", 1, 32, (x, np.zeros(32, np.float32)))
