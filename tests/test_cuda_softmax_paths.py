"""softmax.cu 的每条路径（rows、warp、block、split）与包装函数的选择表（cuda_kernels.SOFTMAX_CONFIGS）。

sim 模式用小的线程块和 packs，让每条路径在几百列内就走到（split 一行切成好几段、行首不按 16 字节对齐、
x 与 out 在 16 字节内偏移不同、零散的开头和结尾）；gpu 模式下同样的用例在 GPU 上运行，另有长行的用例。
参考值是 float64 的 torch.softmax（由同一个输入算出）。
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck

GPU = rl.MODE == "gpu"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: 输出舍入的相对误差上限（float32 另加计算误差）
UNIT = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
#: 每条路径的小配置：(kernel, block_size, packs)
#: （warp 与 block 放得下 COLS 里最长的行；split 32 x 1 把 515 列切成 2 到 5 段，64 x 2 的 float32 只有一段）
SMALL = [("rows", 64, None), ("warp", 64, 4), ("block", 64, 2), ("split", 32, 1), ("split", 64, 2)]
#: 奇数、1、不是 4 或 8 的倍数、刚好一包、跨几段的行长
COLS = [1, 3, 8, 13, 100, 257, 515]


def _x(shape, dtype, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(rl.DEVICE)


def _check(y, x, what="", rel=2.0**-20):
    """|y - ref| <= 1.01 * u * |ref| + rel * |ref| + 1e-7，逐元素（rel 是 float32 计算的误差）；值在 [0, 1]。"""
    ref = torch.softmax(x.double().cpu(), dim=-1)
    got = y.double().cpu()
    assert y.dtype == x.dtype and y.shape == x.shape
    bound = 1.01 * UNIT[x.dtype] * ref.abs() + rel * ref.abs() + 1e-7
    err = (got - ref).abs()
    bad = err > bound
    assert not bad.any(), f"{what}: {int(bad.sum())} 个元素超出容差，最大误差 {err.max().item():.3g}"
    assert bool(((got >= 0) & (got <= 1)).all()), what


def _kw(kernel, block, packs):
    return {"kernel": kernel, "block_size": block, **({} if packs is None else {"packs": packs})}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", SMALL, ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def test_every_path_matches_float64(path, dtype):
    kernel, block, packs = path
    for i, n in enumerate(COLS):
        plan = ck.softmax_plan(3, n, dtype, kernel, block, packs)
        assert plan["kernel"] == kernel
        x = _x((3, n), dtype, seed=i)
        y, rep = ck.softmax(x, return_report=True, **_kw(*path))
        _check(y, x, f"{path} N={n}")
        if rep is not None:
            assert rep.kernel == ck._SOFTMAX_NAMES[kernel]
    # split 真的切成了几段（等待与合并的代码走到了）
    if path == ("split", 32, 1):
        assert ck.softmax_plan(3, 515, dtype, kernel, block, packs)["chunks"] >= 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", SMALL, ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def test_misaligned_rows_and_output(path, dtype):
    """x[:, off:] 的切片：行距 263 不是 4 或 8 的倍数，各行行首在 16 字节内的偏移各不相同；
    out 比 16 字节边界多 1 个元素，与 x 的偏移不同时逐个元素写出。"""
    base = _x((4, 263), dtype, seed=5)
    for off in (1, 2, 3, 5):
        x = base[:, off:off + 250]
        _check(ck.softmax(x, **_kw(*path)), x, f"{path} off={off}")
    x = _x((3, 250), dtype, seed=6)
    buf = torch.empty(3 * 250 + 16, dtype=dtype, device=rl.DEVICE)
    out = buf[1:1 + 750].view(3, 250)
    r = ck.softmax(x, out=out, **_kw(*path))
    assert r.data_ptr() == out.data_ptr()
    _check(out, x, f"{path} out 偏移 1 个元素")
    sentinel = torch.full((3 * 250 + 16,), 7.0, dtype=dtype, device=rl.DEVICE)
    out = sentinel[1:1 + 750].view(3, 250)
    ck.softmax(x, out=out, **_kw(*path))
    assert sentinel[0].item() == 7.0 and bool((sentinel[751:] == 7.0).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", SMALL, ids=lambda p: f"{p[0]}-{p[1]}-{p[2]}")
def test_extreme_rows(path, dtype):
    """整行很大的负数（减去最大值），-inf 掩码（一个线程或一整段全是 -inf），整行 -inf（与 torch 一样是 nan）。"""
    big = -6.0e4 if dtype == torch.float16 else -1.0e30
    n = 300
    x = _x((5, n), dtype, seed=3, scale=1.0).cpu()
    x[0] = (big + torch.arange(n, dtype=torch.float64) * (32 if dtype == torch.float16 else 1e24)).to(dtype)
    x[1, :200] = float("-inf")                       # 开头两百个被遮住：几个线程、split 的前几段全是 -inf
    x[2, 1::2] = float("-inf")
    x[3] = 0.0
    x[3, -1] = 100.0                                 # 不减最大值，exp(100) 在 float32 里就溢出
    x[4] = float("-inf")
    x = x.to(rl.DEVICE)
    y = ck.softmax(x, **_kw(*path))
    _check(y[:4], x[:4], f"{path} 极端值")
    assert bool((y[1, :200] == 0).all()) and bool((y[2, 1::2] == 0).all())
    assert bool(torch.isnan(y[4]).all())             # torch.softmax 对整行 -inf 也给 nan
    assert bool(torch.isnan(torch.softmax(x[4:].double(), -1)).all())


def test_one_read_one_write_in_the_simulator():
    """模拟器数出来的全局内存字节：后三个内核读 x 一遍、写 y 一遍；rows 读三遍。split 另外每块读本行
    chunks 个 (m, s)（8 字节）并写一个。"""
    M, N = 4, 509
    x = torch.randn(M, N)
    for kernel, block, packs in SMALL:
        _, rep = ck.softmax(x, return_report=True, mode="sim", **_kw(kernel, block, packs))
        plan = ck.softmax_plan(M, N, torch.float32, kernel, block, packs)
        c = plan["chunks"]
        extra_load = M * c * c * 8 if kernel == "split" else 0
        extra_store = M * c * 8 if kernel == "split" else 0
        reads = 3 if kernel == "rows" else 1
        assert rep.global_load_bytes == reads * M * N * 4 + extra_load, kernel
        assert rep.global_store_bytes == M * N * 4 + extra_store, kernel


def test_kernel_list_matches_the_source():
    """包装函数的内核表、softmax.cu 里的内核与文件开头的说明一致。"""
    names = ck.kernel_names("softmax.cu")
    assert sorted(ck._SOFTMAX_NAMES.values()) == sorted(names)
    # cluster、pipe、grid 在 softmax_cluster.cu
    assert set(ck.SOFTMAX_KERNELS) == {"auto", "cluster", "pipe", "grid", *ck._SOFTMAX_NAMES}
    header = ck.read_source("softmax.cu").split("#ifndef")[0]
    for name in names:
        assert f"//   {name} " in header, name


def test_auto_plan_follows_the_table():
    for itemsize, dtype in ((4, torch.float32), (2, torch.bfloat16)):
        table = ck.SOFTMAX_CONFIGS[itemsize]
        for i, (n_max, kernel, block, packs, *smem) in enumerate(table):
            # 不限列数的最后一项（grid）：落进它的第一个整 16 字节的行长
            n = n_max if n_max is not None else table[i - 1][0] + 16 // itemsize
            plan = ck.softmax_plan(64, n, dtype, clusters=True)
            assert (plan["kernel"], plan["block_size"], plan["packs"]) == (kernel, block, packs), (dtype, n)
            if kernel == "cluster":                  # 表里的 SMEM_PACKS（不写就是 0）原样进计划
                assert plan["smem_packs"] == (smem[0] if smem else 0), (dtype, n, plan)
                if smem:                             # 行首不对齐、差一个向量时多放一包进共享内存，线程数不变
                    un = ck.softmax_plan(64, n, dtype, clusters=True, aligned=False)
                    assert (un["kernel"], un["block_size"], un["smem_packs"]) == ("cluster", block, smem[0] + 1), un
            else:
                assert smem == [], (dtype, n_max)   # 只有 cluster 的项有共享内存的包
            if i > 0:                                # 比上一项的最大列数多一列（grid 要整 16 字节：多一个向量）：落到这一项
                prev = table[i - 1][0]
                step = 16 // itemsize if kernel == "grid" else 1
                assert ck.softmax_plan(64, prev + step, dtype, clusters=True)["kernel"] == kernel
            if kernel == "grid":                     # 没有簇、行的字节数不是 16 的倍数、行首不对齐：不常驻的 split
                fallback = ("split", *ck._SPLIT_FALLBACK[itemsize])
                for plan in (ck.softmax_plan(64, n, dtype), ck.softmax_plan(64, n + 1, dtype, clusters=True),
                             ck.softmax_plan(64, n, dtype, clusters=True, aligned=False)):
                    assert (plan["kernel"], plan["block_size"], plan["packs"]) == fallback, (dtype, n, plan)
            if kernel == "cluster":                  # 没有簇（sim 模式）：不用簇时测得最快的配置，放得下就 block，否则 split
                sim = ck.softmax_plan(64, n, dtype)
                b2, p2 = ck._no_cluster_config(n, dtype)
                fits = n // (16 // itemsize) <= b2 * p2
                assert (sim["kernel"], sim["block_size"], sim["packs"]) == ("block" if fits else "split", b2, p2), \
                    (dtype, n, sim)


def test_table_is_well_formed():
    """列数递增、最后一项不限；每项的线程块放得下它的最大列数（warp / block），配置不超过寄存器的上限。"""
    for itemsize, table in ck.SOFTMAX_CONFIGS.items():
        vec = 16 // itemsize
        limits = [n for n, *_ in table]
        assert limits[-1] is None and all(a < b for a, b in zip(limits[:-2], limits[1:-1]))
        for n_max, kernel, block, packs, *smem in table:
            assert kernel in ("warp", "block", "split", "cluster", "grid")
            assert packs * vec <= 64 and block * packs * vec <= 32768, (n_max, kernel, block, packs)
            if kernel == "cluster":                  # 16 块的簇盖得住这一项的最大列数，共享内存放得下
                total = packs + (smem[0] if smem else 0)
                assert n_max // vec <= 16 * block * total, (n_max, kernel, block, packs, smem)
                assert block * (total - packs) * 16 <= 227 * 1024, (n_max, block, smem)
            elif kernel not in ("split", "grid"):    # 这两个把一行切成段，不限列数
                per_row = 32 if kernel == "warp" else block
                assert n_max // vec <= per_row * packs, (n_max, kernel, block, packs)


def test_auto_with_overrides_moves_to_a_bigger_kernel():
    """auto 下给出的 block_size / packs 覆盖表里的值；整行放不下时 warp -> block -> split；
    split 的段数超过能保证同时驻留的上限时退回 rows（读三遍，仍然正确）。"""
    bf = torch.bfloat16
    assert ck.SOFTMAX_CONFIGS[2][0] == (512, "warp", 128, 4)               # 16 位 N = 400 查到的一项
    assert ck.softmax_plan(2, 400, bf, block_size=32)["kernel"] == "warp"   # 32 个 lane x 4 包 x 8 = 1024
    assert ck.softmax_plan(2, 400, bf, packs=1)["kernel"] == "block"        # warp 只放 256，128 x 1 x 8 = 1024
    assert ck.softmax_plan(2, 400, bf, block_size=32, packs=1)["kernel"] == "split"
    assert ck.SOFTMAX_CONFIGS[4][0] == (512, "block", 64, 2)               # float32 N = 400 查到的一项
    assert ck.softmax_plan(2, 400)["kernel"] == "block"                      # 64 x 2 x 4 = 512
    assert ck.softmax_plan(2, 400, packs=1)["kernel"] == "split"            # 64 x 1 x 4 = 256 放不下
    plan = ck.softmax_plan(2, 2**24, torch.float32)
    assert plan["kernel"] == "rows"
    assert ck.softmax_plan(2, 2**20, torch.float32)["kernel"] == "split"


@pytest.mark.parametrize("call,err,match", [
    (lambda: ck.softmax_plan(2, 100, kernel="nope"), ValueError, "kernel"),
    (lambda: ck.softmax_plan(2, 100, kernel="warp", packs=3), ValueError, "packs"),
    (lambda: ck.softmax_plan(2, 100, kernel="warp", packs=True), ValueError, "packs"),
    (lambda: ck.softmax_plan(2, 100, kernel="rows", packs=2), ValueError, "packs"),
    (lambda: ck.softmax_plan(2, 100, kernel="block", block_size=48), ValueError, "block_size"),
    (lambda: ck.softmax_plan(2, 100, kernel="warp", packs=16, block_size=1024), ValueError, "寄存器"),
    (lambda: ck.softmax_plan(2, 100, torch.bfloat16, kernel="warp", packs=16), ValueError, "寄存器"),
    (lambda: ck.softmax_plan(2, 1000, kernel="warp", packs=1), ValueError, "warp"),
    (lambda: ck.softmax_plan(2, 1000, kernel="block", block_size=32, packs=1), ValueError, "block"),
    (lambda: ck.softmax_plan(2, 2**24, kernel="split", block_size=256, packs=8), ValueError, "同时驻留"),
    (lambda: ck.softmax_plan(2, 100, torch.float64), TypeError, "dtype"),
])
def test_bad_plans_are_refused(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_wrapper_rejects_bad_kernel_arguments():
    x = torch.ones(2, 100, device=rl.DEVICE)
    with pytest.raises(ValueError, match="kernel"):
        ck.softmax(x, kernel="fast")
    with pytest.raises(ValueError, match="packs"):
        ck.softmax(x, kernel="block", packs=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_default_path_through_the_api(dtype):
    for n in (1, 37, 1000, 4097):
        x = _x((2, n), dtype, seed=n)
        _check(rl.softmax(x, backend="cuda"), x, f"auto N={n}")


# ---------------------------------------------------------------- nvcc：不溢出

NVCC = shutil.which("nvcc")


def _variants():
    """选择表里的每一项（warp 的项带上它的最大列数用的 ROW_LANES），加上每种 dtype 允许的极端配置（每个线程
    64 个元素，每块 32768 个；几个 lane 一行时每个线程 64 个元素）。"""
    out = set()
    for itemsize, table in ck.SOFTMAX_CONFIGS.items():
        dtype = torch.float32 if itemsize == 4 else torch.bfloat16
        for n_max, kernel, block, packs, *_ in table:
            lanes = ck.warp_row_lanes(n_max, dtype, packs) if kernel == "warp" else 32
            out.add((itemsize, block, packs, lanes))
    out |= {(4, 32, 16, 32), (4, 512, 16, 32), (4, 1024, 8, 32), (2, 32, 8, 32), (2, 512, 8, 32), (2, 1024, 4, 32),
            (4, 128, 16, 8), (2, 128, 8, 16)}
    return sorted(out)


@pytest.mark.skipif(NVCC is None, reason="nvcc 不在 PATH 上，无法检查寄存器溢出")
@pytest.mark.parametrize("itemsize,block,packs,lanes", _variants())
def test_variants_compile_without_spills(itemsize, block, packs, lanes):
    from reduction_lab.occupancy import cuda_resources

    defines = {"BLOCK_SIZE": block, "PACKS": packs, **({} if lanes == 32 else {"ROW_LANES": lanes})}
    if itemsize == 2:
        defines["ENABLE_BF16"] = 1
    res = cuda_resources("softmax.cu", defines)
    assert sorted(res) == sorted(ck.kernel_names("softmax.cu"))
    for name, r in res.items():
        assert r.spill_stores == 0 and r.spill_loads == 0, (name, r)
        assert r.registers * block <= 65536, (name, r)
    # split：每个 SM 至少驻留 512 个线程（包装函数按这个限制段数）
    assert res["softmax_rows_split"].registers * max(block, 512) <= 65536


# ---------------------------------------------------------------- GPU：长行

@pytest.mark.skipif(not GPU, reason="长行只在 gpu 模式下运行（模拟器上太慢）")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gpu_long_rows_every_path(dtype):
    rel = 1e-5                                              # 一行上百万个元素：float32 的累加误差放宽到 1e-5
    for M, N in ((64, 65536), (16, 262147), (3, 1 << 20), (300, 4099)):
        x = _x((M, N), dtype, seed=N)
        x[:, -1] += 15.0                                    # 最大值在最后一段
        _check(ck.softmax(x), x, f"auto {M}x{N}", rel)
        _check(ck.softmax(x[:, 1:]), x[:, 1:], f"auto 切片 {M}x{N - 1}", rel)
        for block, packs in ((256, 8 if dtype == torch.float32 else 4), (1024, 2)):
            try:
                chunks = ck.softmax_plan(M, N, dtype, "split", block, packs)["chunks"]
            except ValueError:                              # 段数超过能保证同时驻留的上限：包装函数拒绝
                continue
            if chunks > 1:
                _check(ck.softmax(x, kernel="split", block_size=block, packs=packs), x, f"split {block} {packs}", rel)


@pytest.mark.skipif(not GPU, reason="要在 GPU 上运行，才能与模拟器比较")
def test_gpu_and_simulator_agree():
    x = torch.randn(6, 515, generator=torch.Generator().manual_seed(2)) * 5   # 515：SMALL 里每种配置都放得下的最长行
    for kernel, block, packs in SMALL:
        on_gpu = ck.softmax(x.cuda(), **_kw(kernel, block, packs)).cpu()
        in_sim = ck.softmax(x, mode="sim", **_kw(kernel, block, packs))
        torch.testing.assert_close(on_gpu, in_sim, atol=1e-7, rtol=1e-5)
    assert math.isfinite(float(on_gpu.sum()))


def test_short_rows_use_part_of_a_warp():
    """warp 内核的短行：放得下时半个（float32 可到四分之一个）warp 一行，每组 lane 的个数不少于行首行尾零散元素的
    个数（2 * VEC - 2）。"""
    assert ck.warp_row_lanes(512, torch.bfloat16, 4) == 16            # 64 包：16 个 lane x 4 包
    assert ck.warp_row_lanes(512, torch.bfloat16, 2) == 32
    assert ck.warp_row_lanes(100, torch.bfloat16, 4) == 16            # 8 个 lane 拿不下 14 个零散元素
    assert ck.warp_row_lanes(100, torch.float32, 4) == 8
    assert ck.warp_row_lanes(512, torch.float32, 16) == 8
    assert ck.warp_row_lanes(2048, torch.float32, 16) == 32
    plan = ck.softmax_plan(37, 512, torch.bfloat16, "warp", 64, 4)
    assert (plan["lanes"], plan["grid"]) == (16, 10)                   # 一块 4 行，37 行要 10 块


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [5, 100, 250, 512])
def test_part_warp_rows_ragged_and_misaligned(dtype, n):
    """几行一个 warp 时：行数不是每块行数的倍数（最后一个 warp 里多出的组不读不写），行首在 16 字节内的偏移
    各不相同（每组前几个 lane 拿零散元素），输出之外的哨兵不变；模拟器数出只读一遍、写一遍。"""
    for M in (1, 3, 7):
        base = _x((M, n + 9), dtype, seed=M + n)
        for off in (0, 3):
            x = base[:, off:off + n]
            buf = torch.full((M * n + 8,), 7.0, dtype=dtype, device=rl.DEVICE)
            out = buf[:M * n].view(M, n)
            y, rep = ck.softmax(x, out=out, kernel="warp", block_size=64, packs=4, return_report=True)
            _check(y, x, f"M={M} N={n} off={off}")
            assert bool((buf[M * n:] == 7.0).all()), "多出的组写出了输出之外"
            if rep is not None:
                lanes = ck.softmax_plan(M, n, dtype, "warp", 64, 4)["lanes"]
                assert rep.blocks_launched == -(-M // (64 // lanes))
                assert rep.global_load_bytes == M * n * x.element_size()
                assert rep.global_store_bytes == M * n * x.element_size()
