"""TileLang softmax 的六条路径（row / online / cluster / cluster_smem / split / grid）：每条都在小形状上与 float64 的 torch 对照，
包括奇数 N、N=1、不是块宽倍数的 N、整行很大的负数、含 -inf 的行、很大的偏移、``out=``、行数变化时复用
同一个编译结果；坏参数的报错；gpu 默认表的选择；生成的 CUDA C（每条路径）能被 nvcc 编译。

两种模式都能跑（张量建在 rl.DEVICE 上）。sim 模式下 cluster 路径分两次启动（C 目标没有簇），
gpu 模式下一次启动、簇内同步；split 路径两种模式都分两次启动，段数可以多于簇的上限；grid 路径 gpu 模式下一次启动
（常驻网格，各段经全局内存交换），sim 模式下与 split 一样分两次启动（C 目标一次只运行一个线程块）。cluster / split 的段长是 block_n 与 vec*threads 的公倍数：这里用 threads=32，
让小形状也分成几段（有的段伸到行尾之外，有的段完全是空的）。
"""

from __future__ import annotations

import shutil

import pytest
import torch

import reduction_lab as rl

pytest.importorskip("tilelang", reason="TileLang 内核需要 tilelang（pip install reduction_lab[tilelang]）")

from reduction_lab import tilelang_kernels as tk  # noqa: E402

DEV = rl.DEVICE
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if rl.runtime.is_gpu() else [])

# (名字, N, 参数)：每条路径、含行尾不满一块的情形
PATHS = [
    ("row-1", 1, dict(path="row")),
    ("row-7-multirow", 7, dict(path="row", block_m=4, block_n=8)),
    ("row-1000", 1000, dict(path="row")),
    ("online-1000", 1000, dict(path="online", block_n=128, block_m=2)),
    ("online-1024", 1024, dict(path="online", block_n=256)),
    ("cluster-1000", 1000, dict(path="cluster", block_n=64, n_seg=4, threads=32)),
    ("cluster-odd", 777, dict(path="cluster", block_n=128, n_seg=3, threads=32)),    # fp16：第 3 段是空的
    ("cluster-2048", 2048, dict(path="cluster", block_n=256, n_seg=8, threads=32)),  # 正好分完：不遮行尾
    ("cluster-1", 1, dict(path="cluster", block_n=128, n_seg=2, threads=32)),
    ("cluster-4100", 4100, dict(path="cluster", block_n=128, n_seg=4, threads=64)),
    ("cluster-default-threads", 1000, dict(path="cluster", block_n=128, n_seg=2)),  # 一段 1024：第 2 段空
    ("cluster-16", 4100, dict(path="cluster", block_n=64, n_seg=16, threads=32)),  # 16 块的簇（不可移植的大小）
    ("smem-1000", 1000, dict(path="cluster_smem", block_n=64, n_seg=4, threads=32)),
    ("smem-odd", 777, dict(path="cluster_smem", block_n=128, n_seg=3, threads=32)),
    ("smem-2048", 2048, dict(path="cluster_smem", block_n=256, n_seg=8, threads=32)),
    ("smem-1", 1, dict(path="cluster_smem", block_n=128, n_seg=2, threads=32)),
    ("smem-16", 4100, dict(path="cluster_smem", block_n=64, n_seg=16, threads=32)),
    ("split-1000", 1000, dict(path="split", block_n=64, n_seg=4, threads=32)),
    ("split-40", 4100, dict(path="split", block_n=64, n_seg=40, threads=32)),      # 比簇的上限多的段，末尾几段空
    ("split-1", 1, dict(path="split", block_n=128, n_seg=2, threads=32)),
    ("split-2048", 2048, dict(path="split", block_n=256, n_seg=8, threads=32)),    # 正好分完：不遮行尾
    # grid：各段一样长、是 16 字节向量 x threads 的倍数（fp32 的 32 个线程 128 个元素，16 位 256 个）
    ("grid-2048", 2048, dict(path="grid", n_seg=8, threads=32)),
    ("grid-1024", 1024, dict(path="grid", n_seg=4, threads=32)),
    ("grid-4096", 4096, dict(path="grid", n_seg=2, threads=64)),
]


def _x(M, N, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g) * scale
    if M > 1:
        x[1] -= 1000.0                        # 整行很大的负数：不减最大值就全部下溢
    if M > 2 and N > 1:
        x[2, : N // 2] = float("-inf")        # 前一半被遮住
    if M > 3:
        x[3] *= 30.0                          # 很大的值：不减最大值 exp 会溢出
    return x.to(dtype).to(DEV)


def _ref(x):
    return torch.softmax(x.double(), 1)


def _tol(dtype):
    return dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-3, rtol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("name,N,kw", PATHS, ids=[p[0] for p in PATHS])
def test_paths_match_torch(name, N, kw, dtype):
    for M in (5, 9):                           # 行数变化：同一个编译结果（M 是运行期变量）
        x = _x(M, N, dtype, seed=M + N)
        y = tk.softmax(x, **kw)
        assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
        torch.testing.assert_close(y.double(), _ref(x), **_tol(dtype))
        assert torch.isfinite(y).all() and ((y >= 0) & (y <= 1)).all()
        if N > 1:
            assert (y[2, : N // 2] == 0).all()
        torch.testing.assert_close(y.double().sum(1), torch.ones(M, dtype=torch.float64, device=DEV),
                                   atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=0)
    # sim 模式的 grid 路径按 split 分两次启动
    want = "split" if kw["path"] == "grid" and not rl.runtime.is_gpu() else kw["path"]
    keys = [k for k in tk._SOFTMAX_COMPILED if k[0] == N and k[1] == dtype and dict(k[3])["path"] == want]
    assert keys, "第二次调用应走编译好的内核"


def test_one_compile_serves_every_row_count():
    cfg = dict(path="online", block_n=128, block_m=1)
    jit = tk._jit_for("softmax", tk.current_target(torch.device(DEV)))
    tk.softmax(_x(3, 300), **cfg)
    before = len(jit._kernel_cache)
    for M in (1, 2, 17, 64):
        x = _x(M, 300, seed=M)
        torch.testing.assert_close(tk.softmax(x, **cfg).double(), _ref(x), atol=1e-6, rtol=1e-5)
    assert len(jit._kernel_cache) == before


def test_large_offset_and_all_masked_row():
    x = _x(4, 600, seed=3)
    x[0] += 1e4                              # 很大的偏移：结果与平移前相同
    x[3] = float("-inf")                     # 整行被遮住：与 torch 一样是 NaN
    for kw in (dict(path="row"), dict(path="online", block_n=128),
               dict(path="cluster", block_n=64, n_seg=4, threads=32),
               dict(path="cluster_smem", block_n=64, n_seg=4, threads=32),
               dict(path="split", block_n=64, n_seg=5, threads=32)):
        y = tk.softmax(x, **kw)
        torch.testing.assert_close(y[:3].double(), _ref(x[:3]), atol=1e-6, rtol=1e-5)
        assert torch.isnan(y[3]).all() and torch.isnan(_ref(x[3:])).all()


@pytest.mark.parametrize("path", ["cluster", "cluster_smem", "split"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_cluster_segments_with_far_apart_maxima(dtype, path):
    # 每行 4 段（threads=32、float32 一段 256 个元素）：各段的最大值相差 ±100，全行最大值落在不同的段里；
    # 一段全是 -inf 而别的段有限；合并时要把每段的 e 换到全行的最大值下
    N, kw = 1000, dict(path=path, block_n=128, n_seg=4, threads=32)
    seg = tk.cluster_seg_len(N, 4, 128, 32, torch.empty(0, dtype=dtype).element_size())
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, N, generator=g)
    x[0, :seg] += 100.0                         # 第 1 段高出 100：其余段的概率都下溢成 0
    x[1, :seg] -= 100.0                         # 第 1 段低 100
    x[2, 3 * seg:] += 100.0                     # 最大值在最后（不满的）一段
    x[3, seg:2 * seg] = float("-inf")           # 一整段被遮住
    x[4, :] = -100.0                            # 常数行：均匀分布
    x[5, ::2] += 100.0                          # 每段里都有高出 100 的元素
    x = x.to(dtype).to(DEV)
    y = tk.softmax(x, **kw)
    torch.testing.assert_close(y.double(), _ref(x), **_tol(dtype))
    assert (y[3, seg:2 * seg] == 0).all()
    torch.testing.assert_close(y.double().sum(1), torch.ones(6, dtype=torch.float64, device=DEV),
                               atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=0)


def test_cluster_seg_len_is_a_common_multiple():
    # 段长：不短于 ceil(N / n_seg)，是 block_n 与 vec*threads（一个线程一个 16 字节向量）的公倍数
    for N, n_seg, block_n, threads, elem in ((1000, 4, 64, 32, 4), (777, 3, 128, 32, 2), (262144, 8, 4096, 1024, 4),
                                             (262144, 8, 8192, 1024, 2), (70000, 8, 2048, 512, 4), (1, 2, 128, 64, 4)):
        seg = tk.cluster_seg_len(N, n_seg, block_n, threads, elem)
        vec = 16 // elem
        assert seg * n_seg >= N and seg % block_n == 0 and seg % (vec * threads) == 0
        assert seg - -(-N // n_seg) < max(block_n, vec * threads)     # 两个 2 的幂的公倍数就是较大的那个
    assert tk.cluster_seg_len(262144, 8, 4096, 1024) == 32768


def test_out_is_written_in_place():
    x = _x(6, 500, seed=4)
    for kw in (dict(path="row"), dict(path="cluster", block_n=64, n_seg=2, threads=32)):
        out = torch.full_like(x, 7.0)
        res = tk.softmax(x, out=out, **kw)
        assert res is out
        torch.testing.assert_close(out.double(), _ref(x), atol=1e-6, rtol=1e-5)
    y = rl.softmax(x, backend="tilelang", out=torch.empty_like(x))
    torch.testing.assert_close(y.double(), _ref(x), atol=1e-6, rtol=1e-5)
    with pytest.raises((ValueError, TypeError), match="out"):
        tk.softmax(x, out=torch.empty(6, 499, device=DEV))


def test_backward_still_matches_autograd():
    x = _x(4, 300, seed=5).requires_grad_(True)
    dy = torch.randn(4, 300, device=DEV)
    y = tk.softmax(x.detach())
    dx = tk.softmax_backward(y, dy)
    ref = torch.softmax(x.double(), 1)
    (ref * dy.double()).sum().backward()
    torch.testing.assert_close(dx.double(), x.grad.double(), atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("kw,words", [
    (dict(path="tiles"), "path"),
    (dict(path="row", block_n=256), "block_n"),     # N=1000 装不进 256
    (dict(path="online", n_seg=4), "n_seg"),
    (dict(path="cluster", n_seg=1), "n_seg"),
    (dict(path="cluster", n_seg=17), "n_seg.*split"),   # 簇至多 16 块：报错指向 split
    (dict(path="cluster", n_seg=2, block_m=2), "block_m"),
    (dict(path="split", n_seg=1), "n_seg"),
    (dict(path="split", n_seg=2, block_m=2), "block_m"),
    (dict(path="split", n_seg=True), "n_seg"),
    (dict(block_n=96), "block_n"),
    (dict(threads=48), "threads"),
    (dict(threads=96), "threads"),                  # 32 的倍数但不是 2 的幂：跨线程归约要 2 的幂
    (dict(n_seg=0), "n_seg"),
    (dict(path="row", block_n=1024, min_blocks=2), "min_blocks.*cluster"),   # 只有分段的路径加这个上限
    (dict(path="cluster", n_seg=2, min_blocks=-1), "min_blocks"),
    (dict(path="cluster", n_seg=2, min_blocks=True), "min_blocks"),
    (dict(path="split", n_seg=2, threads=1024, min_blocks=3), "min_blocks.*2048"),
    (dict(path="grid", n_seg=3, threads=32), "grid.*n_seg=3.*一样长"),          # 1000 分不成 3 段一样长的段
    (dict(path="grid", n_seg=8, threads=32, min_blocks=0), "min_blocks"),
    (dict(path="grid", n_seg=1, threads=32), "n_seg"),
    (dict(path="grid", threads=48), "threads"),
    (dict(path="grid", threads="32"), "threads"),
])
def test_bad_softmax_tunables(kw, words):
    with pytest.raises((ValueError, TypeError), match=words):
        tk.softmax(torch.ones(2, 1000, device=DEV), **kw)


def test_cluster_segment_must_fit_registers_on_gpu():
    # gpu 模式下一段整个在寄存器里：每个线程至多 64 个、一段至多 32768 个元素
    for N, threads in ((1 << 20, 1024), (1 << 19, 1024), (1 << 19, 512), (1 << 18, 256)):
        with pytest.raises(ValueError, match="寄存器.*registers"):
            tk._resolve("softmax", 64, N, True, dict(path="cluster", n_seg=8, block_n=4096, threads=threads))
    for N, threads in ((1 << 18, 1024), (1 << 18, 512), (1 << 17, 256)):
        cfg = tk._resolve("softmax", 64, N, True, dict(path="cluster", n_seg=8, block_n=4096, threads=threads))
        assert cfg["n_seg"] == 8 and tk.cluster_seg_len(N, 8, 4096, threads) <= 32768
    # split 路径同样把一段放在寄存器里
    with pytest.raises(ValueError, match="寄存器.*registers"):
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="split", n_seg=16, block_n=4096, threads=1024))
    assert tk._resolve("softmax", 64, 1 << 20, True, dict(path="split", n_seg=64, threads=256))["n_seg"] == 64
    # sim 模式没有寄存器的限制（C 目标里是线程私有的数组）
    assert tk._resolve("softmax", 64, 1 << 20, False, dict(path="cluster", n_seg=8, block_n=4096))["n_seg"] == 8


def test_cluster_smem_segment_must_fit_shared_memory_on_gpu():
    # gpu 模式下 cluster_smem 的一段整个在共享内存里（至多 192 KiB），与线程数无关；寄存器的限制不适用
    for N, elem in ((1 << 20, 4), (1 << 21, 2), (1 << 19, 4)):
        with pytest.raises(ValueError, match="共享内存.*shared memory"):
            tk._resolve("softmax", 64, N, True, dict(path="cluster_smem", n_seg=2, block_n=1024, threads=256),
                        elem_size=elem)
    cfg = tk._resolve("softmax", 64, 1 << 20, True, dict(path="cluster_smem", n_seg=16, block_n=1024, threads=256),
                      elem_size=2)
    assert cfg["path"] == "cluster_smem" and tk.cluster_seg_len(1 << 20, 16, 1024, 256, 2) * 2 <= 192 * 1024
    # 同一段放在寄存器里放不下（每个线程 256 个）
    with pytest.raises(ValueError, match="寄存器.*registers"):
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="cluster", n_seg=16, block_n=1024, threads=256),
                    elem_size=2)
    with pytest.raises(ValueError, match="cluster_smem.*n_seg.*2..16"):
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="cluster_smem", n_seg=32, block_n=1024, threads=256))
    assert tk.softmax_phases("cluster_smem", gpu=True) == (0,) and tk.softmax_phases("cluster_smem", gpu=False) == (1, 2)


def test_split_without_n_seg_picks_segments_that_fit():
    # 只给 path="split"：段数按每段至多 16384 个元素选，gpu 模式下一段放得进寄存器
    for N in (1 << 20, 3 * 10**6 + 7, 70000):
        cfg = tk._resolve("softmax", 4, N, True, dict(path="split"))
        seg = tk.cluster_seg_len(N, cfg["n_seg"], cfg["block_n"], cfg["threads"])
        assert cfg["path"] == "split" and seg * cfg["n_seg"] >= N and seg // cfg["threads"] <= 64
    x = _x(3, 700, seed=8)
    torch.testing.assert_close(tk.softmax(x, path="split").double(), _ref(x), atol=1e-6, rtol=1e-5)


def test_grid_path_checks():
    # grid 的段数与线程数、block_n、每个 SM 的共享内存与驻留的块数；gpu 默认表在 2^20 选它，分不成一样长的段时选 split
    with pytest.raises(ValueError, match="block_n.*1024"):
        tk._resolve("softmax", 4, 4096, False, dict(path="grid", n_seg=4, threads=256, block_n=512))
    with pytest.raises(ValueError, match="n_seg=512 多于每块的线程数 256"):
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="grid", n_seg=512, threads=256))
    with pytest.raises(ValueError, match="共享内存.*min_blocks=2"):      # 3 段 x 64 KiB 的块，一个 SM 放不下两块
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="grid", n_seg=64, threads=256, min_blocks=2))
    with pytest.raises(ValueError, match="共享内存"):                    # 一段 256 KiB：一块也放不下
        tk._resolve("softmax", 64, 1 << 20, True, dict(path="grid", n_seg=16, threads=256))
    with pytest.raises(ValueError, match="多于网格的 132 块.*死锁"):
        tk._resolve("softmax", 64, 1 << 22, True, dict(path="grid", n_seg=256, threads=256))
    for elem, mb in ((4, 1), (2, 2)):
        cfg = tk.default_config("softmax", 64, 1 << 20, gpu=True, elem_size=elem)
        assert cfg == {"path": "grid", "block_m": 1, "block_n": 16 // elem * 256, "threads": 256, "n_seg": 64,
                       "min_blocks": mb}
        assert tk._resolve("softmax", 64, 1 << 20, True, {}, elem_size=elem) == cfg
        assert mb * (tk.grid_shared_bytes((1 << 20) // 64, 256, elem) + 1024) <= 228 * 1024
        kw = tk.grid_kwargs(64, 1 << 20, cfg, "float32", 132)
        assert kw["blocks"] == 132 * mb and kw["seg_len"] == 16384 and kw["delay"] == 1
        assert tk.grid_kwargs(1, 1 << 20, cfg, "float32", 132)["blocks"] == 64     # 只有一行：64 段、64 块
    assert tk.default_config("softmax", 64, 3 << 18, gpu=True)["n_seg"] == 48       # 3 x 2^18：48 段，每段 16384
    assert tk.default_config("softmax", 64, 10**6, gpu=True)["path"] == "split"     # 不是 1024 的倍数
    assert tk.softmax_phases("grid", gpu=True) == (0,) and tk.softmax_phases("grid", gpu=False) == (1, 2)
    # 给了 n_seg、没给 path：默认是 grid 时仍是 grid
    assert tk._resolve("softmax", 64, 1 << 20, True, dict(n_seg=128))["path"] == "grid"


def test_grid_path_source():
    # 常驻网格：132 块（每个 SM 一块，__launch_bounds__(256, 1)），段经 cp.async 进共享内存、不等，
    # 发布 (m, s) 是一次 64 位的 st.relaxed.gpu，写出之前由 warp 0 轮询这一行的槽位；3 段共享内存轮流用
    full = tk.cuda_source("softmax", M=64, N=1 << 20)
    src = full[full.index("softmax_grid_kernel_kernel(", full.index("__launch_bounds__")):]
    assert "__launch_bounds__(256, 1) softmax_grid_kernel_kernel(" in full
    assert "st.relaxed.gpu.global.b64" in full and "ld.relaxed.gpu.global.b64" in full
    assert src.count("rl_put_pair(") == 1 and src.count("rl_row_total(") == 1
    assert "cp_async_gs<16>" in src and "cp_async_wait<1>()" in src and "% 3" in src
    assert "/ 132)" in src                                           # 本块的项数：ceil((M * 64 - b) / 132)
    assert "expf(" not in src
    stores = [ln for ln in src.splitlines() if "*(" in ln and "(y + " in ln]
    assert stores and all("float4" in ln for ln in stores), stores


def test_split_grid_limit():
    # 网格是一维的 M * n_seg 个线程块：超过 gridDim.x 的上限时报错，而不是启动失败或少算几行
    with pytest.raises(ValueError, match="n_seg.*grid"):
        tk._resolve("softmax", 2**27, 16, False, dict(path="split", n_seg=16, block_n=1, threads=32))
    with pytest.raises(ValueError, match="n_seg.*grid"):
        tk._resolve("softmax", 2**27, 16, False, dict(path="cluster", n_seg=16, block_n=1, threads=32))


def test_split_needs_two_launches():
    # 内核本身拒绝 split 的单次启动（phase=0 会在各段写完 stats 之前合并）
    jit = tk._jit_for("softmax", tk.current_target(torch.device(DEV)))
    x = torch.empty(4, 1000, device="meta")
    stats = torch.empty((4, 4, 2), device="meta")
    with pytest.raises(ValueError, match="phase"):
        jit.get_tir(x, x, stats, path="split", block_n=64, threads=32, n_seg=4, phase=0,
                    cpu=not rl.runtime.is_gpu(), dtype="float32")


def test_gpu_default_table():
    # 每个 (元素字节数, N) 的默认路径来自 SOFTMAX_TABLE；cluster 的一段要放得进寄存器
    for elem in (4, 2):
        for n in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144):
            m = (1 << 26) // n
            cfg = tk.default_config("softmax", m, n, gpu=True, elem_size=elem)
            assert cfg["path"] == tk.SOFTMAX_TABLE[(elem, n)]["path"]
            if cfg["path"] == "row":
                assert cfg["block_n"] >= n
                assert cfg["block_m"] * cfg["block_n"] // cfg["threads"] <= 64    # 每个线程的元素数
            if cfg["path"] in ("cluster", "cluster_smem", "split"):
                seg = tk.cluster_seg_len(n, cfg["n_seg"], cfg["block_n"], cfg["threads"], elem)
                if cfg["path"] == "cluster_smem":
                    assert seg * elem <= 192 * 1024 and cfg["n_seg"] >= 2                   # 放得进共享内存
                else:
                    assert seg // cfg["threads"] <= 64 and seg <= 32768 and cfg["n_seg"] >= 2   # 放得进寄存器
                assert seg * cfg["n_seg"] == n                                     # 2 的幂：正好分完
            if cfg["path"] in ("cluster", "cluster_smem"):
                assert cfg["n_seg"] <= 16                                          # 簇的上限
    assert tk.default_config("softmax", 8, 1000, gpu=True)["block_n"] == 1024       # 不是 2 的幂：向上取
    # 2^20：常驻网格（见 test_grid_path_checks）；更长的行与分不成一样长的段的行：split，一段在寄存器里
    assert tk.default_config("softmax", 64, 1 << 20, gpu=True, elem_size=2)["path"] == "grid"
    for M, N, elems in ((2, 1 << 21, (4, 2)), (64, 10**6, (4,)), (3, 3 * 10**6 + 7, (4, 2))):
        for elem in elems:
            cfg = tk.default_config("softmax", M, N, gpu=True, elem_size=elem)
            assert cfg["path"] == "split", cfg
            seg = tk.cluster_seg_len(N, cfg["n_seg"], cfg["block_n"], cfg["threads"], elem)
            assert seg * cfg["n_seg"] >= N and seg // cfg["threads"] <= 64 and seg <= 32768
            tk._resolve("softmax", M, N, True, cfg, elem_size=elem)               # 默认配置通过检查
    odd = tk.default_config("softmax", 64, 70000, gpu=True)                          # 不是 2 的幂：段长向上取
    assert odd["path"] == "cluster"
    assert tk.cluster_seg_len(70000, odd["n_seg"], odd["block_n"], odd["threads"]) // odd["threads"] <= 64
    assert tk.default_config("softmax", 3, 100, gpu=False)["path"] == "row"
    assert tk.default_config("softmax", 3, 5000, gpu=False)["path"] == "online"


def test_row_path_reduces_within_a_warp():
    # 布局让一个 warp 持有一行（N=512，8 行一块）：按行归约只用 warp 洗牌，不经共享内存
    src = tk.cuda_source("softmax", M=1 << 17, N=512, path="row", block_m=8, block_n=512, threads=128)
    assert "AllReduce<tl::MaxOp, 32," in src and "AllReduce<tl::SumOp, 32," in src
    assert "float4" in src


def _kernel_body(src):
    return src[src.index("softmax_kernel_kernel(", src.index("__global__ void __launch_bounds__")):]


@pytest.mark.parametrize("dtype,block_n", [("float32", 4096), ("bfloat16", 8192)])
def test_cluster_path_source(dtype, block_n):
    # 寄存器版本：一段 32768 个元素分给 1024 个线程（每个 32 个），不经共享内存保存整段；各段的 (m, s)
    # 由前 n_seg 个线程各用一条 st.async 写进簇里一块的共享内存，每块只等自己的 mbarrier 收齐 n_seg * 8 个字节，
    # 没有整簇的同步在依赖链上（只有开头那半个簇屏障）；每个元素一次 exp2（没有 expf），读写都是 128 位
    src = _kernel_body(tk.cuda_source("softmax", M=256, N=262144, dtype=dtype, path="cluster", block_n=block_n,
                                      threads=1024, n_seg=8))
    full = tk.cuda_source("softmax", M=256, N=262144, dtype=dtype, path="cluster", block_n=block_n,
                          threads=1024, n_seg=8)
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32" in full
    assert "cluster_sync" not in src
    assert src.count("rl_send_pair(") == 1 and "if (((int)threadIdx.x) < 8) {" in src
    assert "rl_expect_bytes((&(received[0])), 64);" in src and "received[0].init(1)" in src
    assert src.count("received[0].wait(0)") == 1
    assert src.count("tl::cluster_arrive_relaxed()") == 1 and src.count("tl::cluster_wait()") == 1
    assert "tl::cluster_arrive()" not in src
    assert "expf(" not in src and "exp2f(" in src
    assert "float e[32];" in src                                   # 整段留在寄存器里：每个线程 32 个 float32
    assert "keep" not in src and "__shared__" in src              # 共享内存只有归约的工作区和交换的格子
    # 收 (m, s) 的格子是静态共享内存，不与归约的工作区（动态共享内存，按生存期复用）重叠
    assert "__shared__ __align__(16) float slots[32];" in src and "slots = ((void*)" not in src
    vec = "float4" if dtype == "float32" else "uint4"
    loads = [ln for ln in src.splitlines() if "= *(" in ln and "(x + " in ln]
    stores = [ln for ln in src.splitlines() if "*(" in ln and "(y + " in ln]
    assert loads and all(vec in ln for ln in loads), loads
    assert stores and all(vec in ln for ln in stores), stores
    if dtype == "bfloat16":
        assert "bfloat16_t" in src


@pytest.mark.parametrize("dtype,vec", [("float32", "float4"), ("bfloat16", "uint4")])
def test_cluster_smem_path_source(dtype, vec):
    # 共享内存版本：整段用 cp.async 从显存直接搬进共享内存（不经寄存器），每个线程只有一个 16 字节向量的
    # 片段；求最大值、求和、写回各读一遍共享内存，写回是 128 位的；交换与寄存器版本相同（st.async + mbarrier）
    full = tk.cuda_source("softmax", M=256, N=262144, dtype=dtype, path="cluster_smem", block_n=1024, threads=256,
                          n_seg=16)
    src = _kernel_body(full)
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32" in full
    assert "cp_async_gs<16>" in src and "cp_async_wait<0>()" in src
    assert src.count("rl_send_pair(") == 1 and "rl_expect_bytes((&(received[0])), 128);" in src
    assert "cluster_sync" not in src and "expf(" not in src
    frag = "float cf[4];" if dtype == "float32" else "bfloat16_t cf[8];"
    assert frag in src                                              # 寄存器里只有一个向量
    stores = [ln for ln in src.splitlines() if "*(" in ln and "(y + " in ln]
    assert stores and all(vec in ln for ln in stores), stores


@pytest.mark.parametrize("path,block_n,threads,n_seg,words", [
    # gpu 的簇内核里第 g 个线程把 (m, s) 发给第 g 块：段数多于线程数
    ("cluster", 64, 8, 16, "n_seg=16 多于每块的线程数 8"),
    # grid 是另一个内核：交给 softmax_kernel 的 path="grid" 不能悄悄生成一个不交换的分段内核
    ("grid", 1024, 256, 4, "softmax_grid_kernel"),
])
def test_softmax_kernel_refuses_before_lowering(path, block_n, threads, n_seg, words):
    # 直接调用内核的构造（不经 tk.softmax 的检查）：降级之前报错
    jit = tk._jit_for("softmax", tk.SM90_TARGET)
    x = torch.empty(4, 4096, device="meta")
    with pytest.raises(ValueError, match=words):
        jit.get_tir(x, x, torch.empty(4, n_seg, 2, device="meta"), path=path, block_m=1, block_n=block_n,
                    threads=threads, n_seg=n_seg, phase=0, cpu=False, dtype="float32")


_NO_NVCC = shutil.which("nvcc") is None


_PATH_CONFIGS = [
    ("float32", 1 << 17, 512, {}),
    ("bfloat16", 7, 1001, {}),
    ("float32", 1024, 65536, dict(path="cluster", block_n=4096, threads=512, n_seg=4)),
    ("float16", 64, 3000, dict(path="online", block_n=1024, threads=128)),
    ("float32", 64, 1 << 20, dict(path="split", block_n=1024, threads=256, n_seg=64)),
    ("float32", 512, 131072, dict(path="cluster", block_n=1024, threads=256, n_seg=16)),
    ("float32", 256, 262144, dict(path="cluster_smem", block_n=1024, threads=256, n_seg=16)),
    ("bfloat16", 7, 100003, dict(path="cluster_smem", block_n=1024, threads=128, n_seg=8)),
    ("float32", 64, 1 << 20, {}),
    ("bfloat16", 64, 1 << 20, {}),
]
_PATH_IDS = ["row", "row-ragged-bf16", "cluster", "online-fp16", "split", "cluster-16", "cluster-smem",
             "cluster-smem-ragged", "grid", "grid-bf16"]


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法检查生成的 CUDA C 能否编译")
def test_softmax_paths_compile_with_nvcc():
    # 每条路径生成的 CUDA C 都能编译（一次 nvcc，头文件只解析一次）
    srcs = [tk.cuda_source("softmax", M=M, N=N, dtype=dtype, **kw) for dtype, M, N, kw in _PATH_CONFIGS]
    ptxs = tk.nvcc_check_many(srcs)
    missing = [i for i, ptx in zip(_PATH_IDS, ptxs)
               if ".entry softmax_kernel_kernel(" not in ptx and ".entry softmax_grid_kernel_kernel(" not in ptx]
    assert not missing, f"PTX 里没有内核：{missing}"


_TABLE_CLUSTER = sorted((e, n) for (e, n), v in tk.SOFTMAX_TABLE.items()
                        if v["path"] in ("cluster", "cluster_smem", "split", "grid"))


def test_min_blocks_is_the_second_launch_bound():
    # min_blocks 写成 __launch_bounds__(threads, min_blocks)；0 与不给相同（生成同一份源码）
    kw = dict(M=256, N=262144, dtype="float32", path="cluster", block_n=2048, threads=512, n_seg=16)
    two = tk.cuda_source("softmax", min_blocks=2, **kw)
    assert "__launch_bounds__(512, 2)" in two
    assert tk.cuda_source("softmax", min_blocks=0, **kw) == tk.cuda_source("softmax", **kw)
    assert "__launch_bounds__(512, 1)" in tk.cuda_source("softmax", **kw)


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法数生成代码的寄存器")
def test_min_blocks_caps_registers():
    # 512 个线程、每个线程 32 个 float32：不加上限时 ptxas 用 70 多个寄存器（每个 SM 只放得下 1 块），
    # min_blocks=2 时压到 64 个以内、不溢出，每个 SM 放得下 2 块
    kw = dict(M=256, N=262144, dtype="float32", path="cluster", block_n=2048, threads=512, n_seg=16)
    free = tk.nvcc_resources(tk.cuda_source("softmax", **kw))
    capped = tk.nvcc_resources(tk.cuda_source("softmax", min_blocks=2, **kw))
    assert free.registers * 512 * 2 > 65536, free
    assert capped.registers * 512 * 2 <= 65536 and capped.spill_stores == 0 and capped.spill_loads == 0, capped


@pytest.mark.skipif(_NO_NVCC, reason="PATH 上没有 nvcc，无法数生成代码的寄存器")
def test_default_cluster_configs_do_not_spill():
    # 默认表里每个 cluster / cluster_smem / split / grid 配置：ptxas 不溢出，寄存器数容得下一个线程块
    assert _TABLE_CLUSTER
    cfgs, srcs = [], []
    for elem, N in _TABLE_CLUSTER:
        dtype = "float32" if elem == 4 else "bfloat16"
        M = (1 << 26) // N
        cfg = tk.default_config("softmax", M, N, gpu=True, elem_size=elem)
        cfgs.append(cfg)
        srcs.append(tk.cuda_source("softmax", M=M, N=N, dtype=dtype, **cfg))
    bad = [(f"{e}B-{n}", res) for (e, n), cfg, res in zip(_TABLE_CLUSTER, cfgs, tk.nvcc_resources_many(srcs))
           if res.spill_stores or res.spill_loads or res.registers * cfg["threads"] > 65536]
    assert not bad, bad



def test_misaligned_views_reach_the_kernel_aligned(monkeypatch):
    # TileLang 生成的 128 位访存假定首地址 16 字节对齐（GPU 上否则报 misaligned address）：首地址差 4 字节的
    # 连续视图先换成对齐的副本，对齐的 out 之外的 out 先写进对齐的输出再拷过去；结果与对齐的输入相同
    seen = []
    real_softmax_run, real_run = tk._run_softmax, tk._run

    def spy_softmax(x, y, stats, cfg, phase):
        seen.append((x.data_ptr() % 16, y.data_ptr() % 16))
        return real_softmax_run(x, y, stats, cfg, phase)

    def spy_run(kernel, x, cfg, *more):
        seen.append((x.data_ptr() % 16,) + tuple(t.data_ptr() % 16 for t in more))
        return real_run(kernel, x, cfg, *more)

    monkeypatch.setattr(tk, "_run_softmax", spy_softmax)
    monkeypatch.setattr(tk, "_run", spy_run)
    M, N = 6, 300
    flat = _x(1, M * N + 1, seed=12)[0]
    v = flat[1:].view(M, N)
    assert v.is_contiguous() and v.data_ptr() % 16 == 4
    ref = _ref(v)
    for kw in ({}, dict(path="online", block_n=128), dict(path="cluster", block_n=64, n_seg=4, threads=32),
               dict(path="split", block_n=64, n_seg=5, threads=32)):
        torch.testing.assert_close(tk.softmax(v, **kw).double(), ref, atol=1e-6, rtol=1e-5)
    out = torch.full((M * N + 1,), float("nan"), device=DEV)[1:].view(M, N)
    assert tk.softmax(v, out=out) is out
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(tk.reduce_sum(v).double(), v.double().sum(1), atol=1e-4, rtol=1e-5)
    dy = torch.randn(M * N + 1, device=DEV)[1:].view(M, N)
    y = tk.softmax(v)
    torch.testing.assert_close(tk.softmax_backward(y[:, :], dy), tk.softmax_backward(y.clone(), dy.clone()),
                               atol=1e-6, rtol=1e-5)
    # 经 api（gpu 模式下同一形状第二次起走 softmax_checked 的快速路径）
    for _ in range(2):
        torch.testing.assert_close(rl.softmax(v, backend="tilelang").double(), ref, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(rl.reduce_sum(v, backend="tilelang").double(), v.double().sum(1),
                                   atol=1e-4, rtol=1e-5)
    assert seen and all(a == 0 for rec in seen for a in rec), seen


def test_tune_script_grid_flags(load_script, monkeypatch):
    """scripts/tune_tilelang.py 的 --cluster-segs、--cluster-threads、--smem-segs、--split-grid 只缩小这一次运行的
    候选网格（空串去掉一条路径），再运行一次又回到默认的网格。"""
    import sys

    t = load_script("tune_tilelang")
    for name in ("CLUSTER_SEGS", "CLUSTER_THREADS", "SMEM_SEGS", "SPLIT_GRID"):   # 测试结束后还原
        monkeypatch.setattr(t, name, getattr(t, name))
    monkeypatch.setattr(t.rl.runtime, "require_gpu", lambda *a: None)
    seen = []

    def fake_tune(args):
        seen.append((t.CLUSTER_SEGS, t.CLUSTER_THREADS, t.SMEM_SEGS, t.SPLIT_GRID,
                     {(c["n_seg"], c["threads"]) for c in t.cluster_grid(4096, 16384, 2)[0]},
                     t.smem_grid(2048, 32768, 2)))

    monkeypatch.setattr(t, "tune_softmax", fake_tune)
    monkeypatch.setattr(sys, "argv", ["tune_tilelang.py", "--kernel", "softmax", "--cluster-segs", "2,4",
                                      "--cluster-threads", "256", "--smem-segs", "", "--split-grid", "256x32"])
    t.main()
    monkeypatch.setattr(sys, "argv", ["tune_tilelang.py", "--kernel", "softmax"])
    t.main()
    narrow, default = seen
    assert narrow[:4] == ((2, 4), (256,), (), ((256, 32),))
    assert narrow[4] == {(2, 256), (4, 256)} and narrow[5] == []
    d = t._GRID_DEFAULTS
    assert default[:4] == (d["cluster_segs"], d["cluster_threads"], d["smem_segs"], d["split_grid"])
    assert len(default[4]) > 2 and default[5]

