"""occupancy：ptxas 报告的解析、驻留线程块数的四个上限、利特尔定律，以及坏输入。"""

from __future__ import annotations

import shutil

import pytest

from reduction_lab import occupancy as oc

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'k2' for 'sm_90'
ptxas info    : Function properties for k2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
"""


def test_parse_ptxas():
    r = oc.parse_ptxas(PTXAS)
    assert r["k1"] == oc.KernelResources("k1", 128, 8, 4, 2048, 1)
    assert r["k2"] == oc.KernelResources("k2", 12, 0, 0, 0, 0)


@pytest.mark.parametrize("threads,regs,smem,blocks,limit", [
    (256, 31, 1024, 8, "threads"),
    (256, 64, 0, 4, "registers"),        # 64*32 = 2048 个/ warp，65536 / 2048 = 32 个 warp
    (256, 33, 0, 6, "registers"),        # 33*32 = 1056 -> 按 256 取整为 1280，65536 // 1280 = 51 个 warp，51 // 8 = 6 块
    (128, 16, 48 * 1024, 4, "shared"),   # 228 KiB // (48 KiB + 1 KiB) = 4
    (32, 16, 0, 32, "blocks"),
    (1024, 32, 0, 2, "threads"),
])
def test_occupancy_limits(threads, regs, smem, blocks, limit):
    o = oc.occupancy(threads, regs, smem)
    assert (o["blocks"], o["limit"]) == (blocks, limit)
    assert o["warps"] == blocks * (-(-threads // 32))


@pytest.mark.parametrize("args,words", [((0, 32), "1 到 1024"), ((2048, 32), "1 到 1024"), ((256, 300), "255"),
                                        ((256, -1), "非负整数"), ((256, 32, 1.5), "非负整数")])
def test_occupancy_bad_input(args, words):
    with pytest.raises(ValueError, match=words):
        oc.occupancy(*args)


def test_littles_law():
    assert oc.bytes_in_flight(4e12, 500e-9) == pytest.approx(2e6)
    with pytest.raises(ValueError):
        oc.bytes_in_flight(0, 1e-9)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="PATH 上没有 nvcc：无法编译")
def test_cuda_resources_of_course_kernels():
    r = oc.cuda_resources("reduce_sum.cu", {"BLOCK_SIZE": 256})
    assert set(r) == {"reduce_sum_rows", "reduce_sum_rows_warp", "reduce_sum_rows_split"}
    assert r["reduce_sum_rows"].shared_bytes == 256 * 4          # __shared__ float sdata[BLOCK_SIZE]
    assert r["reduce_sum_rows"].barriers == 1 and r["reduce_sum_rows_warp"].shared_bytes == 0
    with pytest.raises(ValueError, match="arch"):
        oc.cuda_resources("reduce_sum.cu", arch="90")
