"""线程块簇上的长行 softmax（cuda_kernels/softmax_cluster.cu 与 cuda_kernels/cluster.py）。

* 任何模式：启动配置（``cluster_plan``）、参数检查、nvcc 编译出的簇属性与寄存器用量；
* sim 模式：第一版 ``softmax_cluster``（float32、bfloat16）在 CPU 模拟器里运行：与 float64 比对、全局内存与
  分布式共享内存的计数；寄存器版、常驻版（内联 PTX）明确报错；
* gpu 模式（计算能力 9.0 以上）：与 float64 的 ``torch.softmax`` 比对 —— float32、bfloat16、
  奇数 N、行首不在 16 字节边界上、指定每一种簇大小、调用者提供的输出；常驻的 softmax_cluster_pipe
  还比对每种段数、两种装法（cp.async 与 TMA）、簇数少于行数（一个簇处理许多行）。
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import torch

import reduction_lab as rl
from reduction_lab import runtime, simt
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import KERNEL_DIR, read_source
from reduction_lab.cuda_kernels import softmax as cuda_softmax
from reduction_lab.cuda_kernels import softmax_plan
from reduction_lab.cuda_kernels.cluster import (CLUSTER_SIZES, PIPE_STAGES, REGS_MAX_BLOCK_ELEMS,
                                                REGS_MAX_THREAD_ELEMS, SHARED_OPTIN_SM90, STATIC_SHARED_BOUND,
                                                cluster_plan, pipe_plan, regs_min_blocks, regs_plan, softmax_cluster,
                                                softmax_cluster_pipe, softmax_cluster_regs)

GPU = rl.MODE == "gpu"
HOPPER = GPU and torch.cuda.get_device_capability()[0] >= 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="需要 gpu 模式与计算能力 9.0 以上的 GPU（线程块簇）")
needs_sim = pytest.mark.skipif(GPU, reason="只在 sim 模式下检查报错；gpu 模式下内核真实运行")
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc 不在 PATH 上，无法检查 .cu 的编译结果")


# ---------------------------------------------------------------- 启动配置（任何模式）

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n", [1, 7, 1000, 16384, 100003, 131072, 262144, 1048576])
def test_plan_covers_the_row(n, dtype):
    vec = 4 if dtype == torch.float32 else 8
    if dtype == torch.float32 and n == 1048576:
        with pytest.raises(ValueError, match="放不进一个簇"):
            cluster_plan(n, dtype)
        return
    p = cluster_plan(n, dtype)
    assert p.cluster_size in CLUSTER_SIZES and p.vec == vec
    # 行首最多右移 vec - 1 个元素：所有块合起来要盖住移位后的整行，且最后一块不能整块空着
    assert p.cluster_size * p.vecs_per_cta * vec >= n + vec - 1
    assert (p.cluster_size - 1) * p.vecs_per_cta * vec < n + vec - 1 or p.cluster_size == 1
    assert p.shared_bytes == 16 * p.vecs_per_cta <= SHARED_OPTIN_SM90 - STATIC_SHARED_BOUND
    assert p.block_size % 32 == 0 and 64 <= p.block_size <= 1024


def test_plan_choices():
    # 1 MB 的 fp32 行：8 块时每块 128 KiB，每个 SM 只能驻留一块，所以取 16 块、每块 64 KiB
    p = cluster_plan(262144, torch.float32)
    assert (p.cluster_size, p.ctas_per_sm) == (16, 3)
    # 2 MB 的 bf16 行只能 16 块、每块 128 KiB
    p = cluster_plan(1 << 20, torch.bfloat16)
    assert p.cluster_size == 16 and p.shared_bytes > 128 * 1024 and p.ctas_per_sm == 1
    # 一个块放得下的行不用簇
    assert cluster_plan(16384, torch.float32).cluster_size == 1
    # 指定的簇大小照用
    assert cluster_plan(50001, torch.bfloat16, cluster_size=2, block_size=96).block_size == 96


def test_plan_bad_arguments():
    with pytest.raises(ValueError, match="cluster_size 只能是"):
        cluster_plan(4096, cluster_size=3)
    with pytest.raises(ValueError, match="cluster_size"):
        cluster_plan(4096, cluster_size=32)
    with pytest.raises(ValueError, match="32 的倍数"):
        cluster_plan(4096, block_size=48)
    with pytest.raises(ValueError, match="block_size"):
        cluster_plan(4096, block_size=2048)
    with pytest.raises(TypeError, match="float16 不受支持"):
        cluster_plan(4096, torch.float16)
    with pytest.raises(ValueError, match="超过上限"):
        cluster_plan(262144, torch.float32, cluster_size=4)
    with pytest.raises(TypeError, match="n_cols"):
        cluster_plan(4096.0)


# ---------------------------------------------------------------- sim 模式

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("M, N, kw", [(3, 1001, dict(cluster_size=4)), (2, 5000, dict(cluster_size=2, block_size=64)),
                                      (2, 100003, {}), (1, 7, dict(cluster_size=16))])
def test_sim_runs_the_first_version(M, N, kw, dtype):
    """在模拟器里：与 float64 比对（bfloat16：输出的一个 ulp）；全局内存每个元素读一次、写一次；每个 warp 里
    lane r 读第 r 块的 (m, s)，读本块的不算分布式共享内存：每个 warp 读 C - 1 个 float2。"""
    torch.manual_seed(N)
    x = 3 * torch.randn(M, N)
    x[:, -1] += 20                                  # 最大值在最后一块的行尾
    x = x.to(dtype)
    y, rep = softmax_cluster(x, mode="sim", return_report=True, **kw)
    assert y.dtype == dtype
    ref = torch.softmax(x.double(), dim=-1)
    rtol = 1e-4 if dtype == torch.float32 else 2**-8
    assert torch.allclose(y.double(), ref, rtol=rtol, atol=1e-7)
    plan = cluster_plan(N, dtype, kw.get("cluster_size"), kw.get("block_size"))
    C, warps = plan.cluster_size, plan.block_size // 32
    assert rep.cluster == (C, 1, 1)
    assert rep.global_load_bytes == rep.global_store_bytes == x.element_size() * M * N
    assert rep.dsmem_load_elements == M * C * warps * (C - 1)
    assert rep.dsmem_load_bytes == 8 * rep.dsmem_load_elements
    assert rep.dsmem_store_elements == 0
    assert rep.cluster_barriers == (2 * M * C if C > 1 else 0)


def test_sim_first_version_unaligned_rows_and_out():
    base = torch.randn(3, 1010)
    x = base[:, 1:1002]                             # 行首不在 16 字节边界上
    out = torch.full((3, 1001), float("nan"))
    y = softmax_cluster(x, cluster_size=4, out=out, mode="sim")
    assert y is out
    assert torch.allclose(out.double(), torch.softmax(x.double(), -1), rtol=1e-4, atol=1e-7)


def test_sim_mode_refuses_what_it_cannot_run():
    x = torch.randn(2, 4096)
    with pytest.raises(TypeError, match="float16"):
        softmax_cluster(x.half(), mode="sim")
    with pytest.raises(ValueError, match="mode"):
        softmax_cluster(x, mode="cpu")
    with pytest.raises(TypeError, match="return_report"):
        softmax_cluster(x, mode="sim", return_report=1)


@needs_sim
def test_sim_mode_refuses_gpu_only_paths_clearly():
    x = torch.randn(2, 4096)
    with pytest.raises(runtime.ModeError, match="gpu 模式"):
        softmax_cluster(x, mode="gpu")
    for fn in (softmax_cluster_regs, softmax_cluster_pipe):
        with pytest.raises(runtime.ModeError, match="内联 PTX") as e:
            fn(x)
        assert "inline PTX" in str(e.value)
    with pytest.raises(runtime.ModeError, match="内联 PTX"):
        cuda_softmax(x, kernel="cluster")


# ---------------------------------------------------------------- nvcc：簇属性、寄存器、#error

def _nvcc(args, defines, tmp_path, suffix):
    out = tmp_path / f"k{suffix}"
    cmd = [NVCC, *args, "-arch=sm_90", *[f"-D{k}={v}" for k, v in defines.items()],
           str(KERNEL_DIR / "softmax_cluster.cu"), "-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300), out


@needs_nvcc
@pytest.mark.parametrize("bf16", [0, 1])
@pytest.mark.parametrize("c", [1, 8, 16])
def test_cluster_dims_and_vector_access_in_ptx(c, bf16, tmp_path):
    r, out = _nvcc(["-ptx"], {"CLUSTER_SIZE": c, "USE_BF16": bf16}, tmp_path, ".ptx")
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    assert ".maxntid 1024, 1, 1" in ptx
    if c > 1:
        assert f".reqnctapercluster {c}, 1, 1" in ptx
        assert "mapa" in ptx and "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    else:
        assert ".reqnctapercluster" not in ptx and "barrier.cluster" not in ptx
    assert "ld.global.v4.u32" in ptx and "st.global.cs.v4.u32" in ptx      # 16 字节的读与写


@needs_nvcc
@pytest.mark.parametrize("load,store", [(0, 0), (1, 0), (2, 0), (0, 1), (3, 0)])
def test_cache_hint_defines(load, store, tmp_path):
    """scripts/tune_cluster_hints.py 的变体：LOAD_HINT / STORE_HINT 只换寄存器版簇内核整向量读写的那条指令，
    越界的值在编译期报错。"""
    r, out = _nvcc(["-ptx"], {"CLUSTER_SIZE": 16, "BLOCK_SIZE": 512, "PACKS": 8, "LOAD_HINT": load,
                              "STORE_HINT": store}, tmp_path, ".ptx")
    if load == 3:
        assert r.returncode != 0 and "LOAD_HINT must be" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    regs = ptx.split(".entry softmax_cluster_regs", 1)[1].split(".entry", 1)[0]
    want = {0: "ld.global.v4.u32", 1: "ld.global.cs.v4.u32", 2: "ld.global.nc.L1::no_allocate.L2::256B.v4.u32"}[load]
    assert want in regs
    assert ("st.global.cs.v4.u32" in regs) == (store == 0)
    assert ("st.global.wb.v4.u32" in regs) == (store == 1)


@needs_nvcc
@pytest.mark.parametrize("bf16", [0, 1])
def test_fits_1024_threads_without_spills(bf16, tmp_path):
    r, _ = _nvcc(["-cubin", "--resource-usage"], {"CLUSTER_SIZE": 16, "USE_BF16": bf16}, tmp_path, ".cubin")
    assert r.returncode == 0, r.stderr
    res = _resources(r.stdout + r.stderr, "softmax_cluster_rows")
    assert res["regs"] <= 64                            # 1024 个线程 x 64 个寄存器 = 整个寄存器文件
    assert res["spills"] == 0
    assert res["smem"] <= STATIC_SHARED_BOUND


def _resources(text, kernel):
    """nvcc --resource-usage 的输出里某个内核的寄存器数、溢出字节与静态共享内存。"""
    block = text.split(f"Function properties for {kernel}", 1)[1].split("Function properties for", 1)[0]
    regs = int(re.search(r"Used (\d+) registers", block).group(1))
    spills = sum(int(v) for v in re.findall(r"(\d+) bytes spill (?:stores|loads)", block))
    smem = re.search(r"(\d+) bytes smem", block)
    return {"regs": regs, "spills": spills, "smem": int(smem.group(1)) if smem else 0}


# 寄存器版的每一种「每线程元素数 x 线程数」上限组合，加上选择表里的每一项与扫描过的共享内存配置：
# 在 __launch_bounds__ 之下都不溢出。(线程数, 寄存器里的包数, bf16, fp16, 共享内存里的包数)
_REGS_EXTREMES = sorted({(1024, 8, 0, 0, 0), (512, 16, 0, 0, 0), (1024, 4, 1, 0, 0), (512, 8, 1, 0, 0),
                         (512, 8, 0, 1, 0), (32, 16, 0, 0, 0), (256, 8, 1, 0, 0), (128, 8, 1, 0, 0), (256, 4, 1, 0, 0),
                         (256, 16, 0, 0, 0), (128, 8, 0, 1, 0), (128, 4, 1, 0, 0), (512, 4, 1, 0, 0),
                         (256, 4, 1, 0, 4), (256, 4, 0, 1, 4), (512, 8, 1, 0, 8), (512, 8, 0, 1, 8), (512, 4, 1, 0, 12),
                         (256, 8, 1, 0, 24), (512, 8, 0, 0, 8)}
                        | {(b, p, int(isz == 2), 0, (smem or [0])[0]) for isz, table in ck.SOFTMAX_CONFIGS.items()
                           for _, k, b, p, *smem in table if k == "cluster"}
                        | {(b, p, 0, 1, (smem or [0])[0]) for _, k, b, p, *smem in ck.SOFTMAX_CONFIGS[2]
                           if k == "cluster"})


@needs_nvcc
@pytest.mark.parametrize("block,packs,bf16,fp16,smem", _REGS_EXTREMES)
def test_regs_kernel_fits_without_spills(block, packs, bf16, fp16, smem, tmp_path):
    vec = 4 if not (bf16 or fp16) else 8
    dtype = torch.bfloat16 if bf16 else torch.float16 if fp16 else torch.float32
    assert packs * vec <= REGS_MAX_THREAD_ELEMS and block * packs * vec <= REGS_MAX_BLOCK_ELEMS
    d = {"CLUSTER_SIZE": 16, "USE_BF16": bf16, "USE_FP16": fp16, "BLOCK_SIZE": block, "PACKS": packs,
         "MIN_BLOCKS": regs_min_blocks(block, packs, dtype, smem), "SMEM_PACKS": smem}
    r, _ = _nvcc(["-cubin", "--resource-usage"], d, tmp_path, ".cubin")
    assert r.returncode == 0, r.stderr
    res = _resources(r.stdout + r.stderr, "softmax_cluster_regs")
    assert res["spills"] == 0, res
    assert res["regs"] * block <= 65536, res             # 一块放得进一个 SM 的寄存器文件
    assert res["smem"] <= 16 * (block // 32) * 8 + 64    # 静态的只有簇里每个 warp 的 (m, s) 与一个 mbarrier
    # 每个 SM 至少驻留 regs_min_blocks 块：寄存器数在 __launch_bounds__ 的上限之内
    assert res["regs"] * block * regs_min_blocks(block, packs, dtype, smem) <= 65536, res


@needs_nvcc
@pytest.mark.parametrize("c", [1, 16])
def test_regs_kernel_ptx(c, tmp_path):
    d = {"CLUSTER_SIZE": c, "USE_BF16": 1, "BLOCK_SIZE": 256, "PACKS": 4, "MIN_BLOCKS": regs_min_blocks(256, 4, torch.bfloat16)}
    r, out = _nvcc(["-ptx"], d, tmp_path, ".ptx")
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    body = ptx.split(".entry softmax_cluster_regs", 1)[1].split(".entry", 1)[0]
    assert ".maxntid 256, 1, 1" in body
    assert "ex2.approx.ftz.f32" in body                  # exp 用一条 MUFU.EX2
    assert body.count("ld.global.nc.v4.u32") + body.count("ld.global.v4.u32") >= 4    # 4 个 16 字节的读一起发出
    if c > 1:
        assert ".reqnctapercluster 16, 1, 1" in body and "mapa" in body
        # 一次簇屏障（开头宣告、交换之前等齐），交换经 st.async + mbarrier，之后不再有簇屏障
        assert body.count("barrier.cluster.arrive") == 1 and body.count("barrier.cluster.wait") == 1
        assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32" in body
        assert "mbarrier.arrive.expect_tx" in body and "mbarrier.try_wait" in body
        assert ".minnctapersm 4" in body                 # 256 个线程 x 32 个元素：每个 SM 至少 4 块
    else:
        assert "barrier.cluster" not in body and "bar.sync" in body and "st.async" not in body


# ---------------------------------------------------------------- 寄存器版的配置（任何模式）

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", [1, 7, 16384, 100003, 131072, 262144, 524288])
@pytest.mark.parametrize("aligned", [True, False])
def test_regs_plan_covers_the_row(n, dtype, aligned):
    vec = 4 if dtype == torch.float32 else 8
    if n == 524288 and not aligned:
        with pytest.raises(ValueError, match="放不进 16 块的寄存器"):
            regs_plan(n, dtype, aligned=aligned)
        return
    p = regs_plan(n, dtype, aligned=aligned)
    need = -(-(n if aligned else n + vec - 1) // vec)
    assert p.cluster_size * p.block_size * p.packs >= need           # 盖住整行
    assert p.cluster_size == 1 or (p.cluster_size // 2) * p.block_size * p.packs < need   # 最小的簇
    assert p.packs * vec <= REGS_MAX_THREAD_ELEMS and p.block_size * p.packs * vec <= REGS_MAX_BLOCK_ELEMS


def test_regs_plan_bad_arguments():
    with pytest.raises(ValueError, match="cluster_size 只能是"):
        regs_plan(4096, cluster_size=3)
    with pytest.raises(ValueError, match="寄存器会溢出"):
        regs_plan(4096, packs=16, block_size=1024)
    with pytest.raises(ValueError, match="只盖住"):
        regs_plan(65536, cluster_size=2, block_size=256, packs=8)
    with pytest.raises(TypeError, match="float64 不受支持"):
        regs_plan(4096, torch.float64)
    with pytest.raises(TypeError, match="aligned"):
        regs_plan(4096, aligned=1)


def test_cuda_softmax_plan_uses_clusters_only_when_available():
    # 表里 N = 2^20 之前的长行：有簇时可以用 cluster，没有簇（sim 模式）时 auto 改用 split
    for n in (65536, 262144):
        for dtype in (torch.float32, torch.bfloat16):
            sim = softmax_plan(64, n, dtype, clusters=False)
            assert sim["kernel"] != "cluster"
    p = softmax_plan(64, 65536, torch.float32, "cluster", 256, 8, clusters=True)
    assert (p["kernel"], p["cluster_size"], p["grid"]) == ("cluster", 8, 64 * 8)
    with pytest.raises(runtime.ModeError, match="线程块簇"):
        softmax_plan(64, 65536, torch.float32, "cluster", 256, 8, clusters=False)


def test_without_clusters_auto_uses_the_fastest_measured_non_cluster_config():
    """表里是 cluster 的每个 N，没有簇时 auto 选的（内核、线程数、包数）就是 h200_cuda_softmax.json 那次扫描里
    不用簇（block / split）时最快的候选；段数由 N 决定。"""
    tune = rl.load_data("h200_cuda_softmax.json")
    checked = 0
    for r in tune["results"]:
        dtype = getattr(torch, r["dtype"])
        if softmax_plan(r["M"], r["N"], dtype, clusters=True)["kernel"] != "cluster":
            continue
        best = max((c for c in r["candidates"] if c["kernel"] in ("block", "split")), key=lambda c: c["frac_copy"])
        plan = softmax_plan(r["M"], r["N"], dtype, clusters=False)
        assert (plan["kernel"], plan["block_size"], plan["packs"]) == (best["kernel"], best["block_size"],
                                                                     best["packs"]), (r["dtype"], r["N"])
        checked += 1
    assert checked >= 7


def test_cluster_entries_are_the_fastest_of_the_mbarrier_sweep():
    """float32：表里每个簇配置在 h200_cuda_softmax_cluster_mbar.json（现在的寄存器版的扫描）里与最快的候选相差不到
    一个百分点；扫过的每个 (dtype, N) 都用簇。bfloat16 的那几行（寄存器里还是拆开的 float）由
    h200_cuda_softmax_smem.json 的重扫代替（见下一个测试）。"""
    tune = rl.load_data("h200_cuda_softmax_cluster_mbar.json")
    assert "mbarrier" in tune["meta"]["kernel"]
    for r in tune["results"]:
        dtype = getattr(torch, r["dtype"])
        plan = softmax_plan(r["M"], r["N"], dtype, clusters=True)
        assert plan["kernel"] == "cluster", (r["dtype"], r["N"])
        if dtype != torch.float32:
            continue
        cands = {(c["block_size"], c["packs"]): c["frac_copy"] for c in r["candidates"] if c["kernel"] == "cluster"}
        assert max(cands.values()) - cands[plan["block_size"], plan["packs"]] < 0.01, (r["dtype"], r["N"])
    assert len(tune["results"]) == 8 and not tune["failures"]


def test_16bit_cluster_entries_follow_the_shared_memory_sweep():
    """16 位的簇配置（N = 32768 … 2^20）在 h200_cuda_softmax_smem.json（寄存器 + 共享内存的包的重扫）里与最快的候选
    相差不到一个百分点，配置与编译开关（有共享内存的包时 KEEP_PACKED）就是扫过的那一个；2^20 上簇比常驻网格快。"""
    tune = rl.load_data("h200_cuda_softmax_smem.json")
    assert tune["meta"]["dtype"] == "bfloat16" and len(tune["rows"]) == 5
    for r in tune["rows"]:
        ok = [c for c in r["cands"] if "frac" in c]
        assert len(ok) == len(r["cands"]), r["N"]                # 每个候选都通过了验证
        plan = softmax_plan(r["M"], r["N"], torch.bfloat16, clusters=True)
        assert plan["kernel"] == "cluster", r["N"]
        mine = [c for c in ok if (c["c"], c["b"], c["p"], c["sp"], c["keep"]) ==
                (plan["cluster_size"], plan["block_size"], plan["packs"], plan["smem_packs"],
                 int(plan["smem_packs"] > 0))]
        assert len(mine) == 1, (r["N"], plan)
        assert max(c["frac"] for c in ok) - mine[0]["frac"] < 0.01, r["N"]
        assert mine[0]["min_blocks"] == regs_min_blocks(plan["block_size"], plan["packs"], torch.bfloat16,
                                                        plan["smem_packs"])
        if "grid" in r:
            assert mine[0]["frac"] > r["grid"] + 0.05


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", [16384, 65536, 131072, 262144, 1 << 20])
def test_unaligned_rows_still_get_a_cluster(n, dtype):
    """行首不在 16 字节边界上时每行多占一个向量；表里的配置放不下时 auto 把每块的线程数加倍（有共享内存的包时
    多放一包进共享内存），仍用簇。"""
    aligned = softmax_plan(64, n, dtype, clusters=True)
    if aligned["kernel"] != "cluster":
        pytest.skip(f"表里 N={n} 不用簇")
    p = softmax_plan(64, n, dtype, clusters=True, aligned=False)
    assert p["kernel"] == "cluster"
    assert p["block_size"] in (aligned["block_size"], 2 * aligned["block_size"])
    assert p["smem_packs"] in (aligned["smem_packs"], aligned["smem_packs"] + 1)
    vec = 16 // dtype.itemsize
    assert p["cluster_size"] * p["block_size"] * (p["packs"] + p["smem_packs"]) >= n // vec + 1   # 盖住多出来的那一个向量


@needs_nvcc
def test_regs_kernel_smem_packs_ptx(tmp_path):
    """SMEM_PACKS > 0：那几个向量经 cp.async 进共享内存（不经寄存器），之后每遍用 volatile 的 ld.shared 读回；
    16 位时寄存器里留原始的包（KEEP_PACKED），exp 算两遍，__launch_bounds__ 按 40 个寄存器。"""
    d = {"CLUSTER_SIZE": 16, "USE_BF16": 1, "BLOCK_SIZE": 256, "PACKS": 4, "SMEM_PACKS": 4,
         "MIN_BLOCKS": regs_min_blocks(256, 4, torch.bfloat16, 4)}
    r, out = _nvcc(["-ptx"], d, tmp_path, ".ptx")
    assert r.returncode == 0, r.stderr
    body = out.read_text().split(".entry softmax_cluster_regs", 1)[1].split(".entry", 1)[0]
    assert body.count("cp.async.cg.shared.global") >= 4 and "cp.async.wait_group 0" in body
    assert body.count("ld.shared.v4.u32") >= 3                # 最大值、求和、写回各读一遍
    assert ".minnctapersm 6" in body
    # 两遍 exp：寄存器里 4 包 x 8 个 + 共享内存里 4 包 x 8 个，求和与写回各算一次
    assert body.count("ex2.approx.ftz.f32") >= 2 * 32


@needs_nvcc
@pytest.mark.parametrize("defines,message", [({"CLUSTER_SIZE": 3}, "CLUSTER_SIZE must be"),
                                             ({"USE_BF16": 2}, "USE_BF16 must be")])
def test_bad_defines_are_compile_errors(defines, message, tmp_path):
    r, _ = _nvcc(["-ptx"], defines, tmp_path, ".ptx")
    assert r.returncode != 0 and message in r.stderr


# ---------------------------------------------------------------- gpu 模式：与 float64 比对

def _input(m, n, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, n, generator=g, device="cuda") * 3
    x += torch.linspace(-100, 100, m, device="cuda").unsqueeze(1)   # 不减最大值就溢出
    x[:, -1] += 20                                                   # 最大值落在最后一块的行尾
    if m > 1:
        x[1, 0] += 40                                                # 或第一块的行首
    return x.to(dtype)


def _check(y, x):
    ref = torch.softmax(x.double(), dim=-1)
    assert y.dtype == x.dtype and y.shape == x.shape
    err = (y.double() - ref).abs()
    if x.dtype == torch.float32:
        tol = 1e-8 + 1e-4 * ref.abs()
    else:                                              # bf16 输出本身有 2**-9 的相对舍入误差
        tol = 1e-7 + 2.0 ** -8 * ref.abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{int(bad.sum())} 个元素超出容差，例如 {i}：得到 {float(y[i]):.6g}，参考 {float(ref[i]):.6g}")
    sums = y.double().sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-4 if x.dtype == torch.float32 else 2e-2)


SHAPES = [(1, 1), (4, 1000), (3, 8191), (5, 16384), (3, 100003), (2, 131072), (2, 262144)]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matches_float64(shape, dtype):
    x = _input(*shape, dtype)
    _check(softmax_cluster(x), x)


@needs_hopper
def test_bf16_million_columns():
    x = _input(3, 1 << 20, torch.bfloat16)
    assert cluster_plan(1 << 20, torch.bfloat16).cluster_size == 16
    _check(softmax_cluster(x), x)


@needs_hopper
def test_fp32_million_columns_does_not_fit():
    with pytest.raises(ValueError, match="放不进一个簇"):
        softmax_cluster(torch.zeros(1, 1 << 20, device="cuda"))


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("c", CLUSTER_SIZES)
def test_every_cluster_size(c, dtype):
    x = _input(5, 50001, dtype, seed=c)
    _check(softmax_cluster(x, cluster_size=c, block_size=128), x)


_MISALIGNED = {"smem": lambda x, out: softmax_cluster(x, cluster_size=4, out=out),
               "regs": lambda x, out: softmax_cluster_regs(x, out=out)}


@needs_hopper
@pytest.mark.parametrize("kernel", sorted(_MISALIGNED))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_misaligned_rows_and_out(dtype, kernel):
    # 行首不在 16 字节边界上、每行的相位都不同；out 是连续的，相位与 x 不同（逐元素写的那条路）
    n = 30011
    base = _input(6, n + 3, dtype, seed=7)
    x = base[:, 1:n + 1]
    out = torch.full((6, n), float("nan"), dtype=dtype, device="cuda")
    y = _MISALIGNED[kernel](x, out)
    assert y.data_ptr() == out.data_ptr()
    _check(y, x)
    # 同一形状再调用一次（缓存的启动计划）：结果逐位相同
    assert torch.equal(_MISALIGNED[kernel](x, torch.empty_like(out)), y)


@needs_hopper
def test_masked_entries_and_constant_rows():
    x = torch.zeros(3, 40000, device="cuda")
    x[1, ::2] = float("-inf")                        # 被屏蔽的位置输出 0
    x[2, :] = 1e4                                    # 常数行：每个元素 1/N
    y = softmax_cluster(x, cluster_size=8)
    assert torch.all(y[1, ::2] == 0)
    _check(y, x)


@needs_hopper
def test_bad_input_on_gpu():
    with pytest.raises(TypeError, match="float16"):
        softmax_cluster(torch.zeros(2, 64, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="cpu|cuda"):
        softmax_cluster(torch.zeros(2, 64))
    x = torch.zeros(2, 64, device="cuda")
    with pytest.raises(ValueError, match="重叠"):
        softmax_cluster(x, out=x)
    with pytest.raises(TypeError, match="dtype"):
        softmax_cluster(x, out=torch.empty(2, 64, device="cuda", dtype=torch.bfloat16))


# ---------------------------------------------------------------- gpu 模式：寄存器版

_REGS_OR_PIPE = {"regs": softmax_cluster_regs, "pipe": softmax_cluster_pipe}
REGS_SHAPES = [(1, 1), (4, 1000), (3, 8191), (5, 16384), (3, 100003), (2, 131072), (2, 262144), (2, 524288)]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", REGS_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_regs_matches_float64(shape, dtype):
    x = _input(*shape, dtype)
    if dtype == torch.float16:
        x = x - x.amax(dim=-1, keepdim=True).float().to(dtype)      # float16 放不下 ±100 的偏移加 20 之后的和
    _check(softmax_cluster_regs(x), x)


@needs_hopper
@pytest.mark.parametrize("kernel", ["regs", "pipe"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("c", CLUSTER_SIZES)
def test_regs_every_cluster_size(c, dtype, kernel):
    vec = 4 if dtype == torch.float32 else 8
    # 最后一块只有一部分在行内；寄存器版用奇数 N，常驻版要求每行是整数个 16 字节向量
    n = c * 128 * 2 * vec - 3 * vec - (kernel == "regs")
    x = _input(9, n, dtype, seed=c)
    _check(_REGS_OR_PIPE[kernel](x, cluster_size=c, block_size=128, packs=2), x)


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("c,b,p,sp,n", [(4, 128, 2, 3, 7001), (4, 256, 4, 4, 65531), (16, 256, 4, 4, 262000),
                                        (8, 128, 1, 12, 100003)])
def test_regs_with_shared_memory_packs_matches_float64(c, b, p, sp, n, dtype):
    """每个线程 sp 包在共享内存里（cp.async）：奇数 N、行首不对齐（x[:, 1:]）、带 out= 都与 float64 一致；
    16 位时寄存器里只留原始的包，exp 算两遍。"""
    vec = 4 if dtype == torch.float32 else 8
    if c * b * (p + sp) * vec < n + vec:
        pytest.skip("这个配置盖不住这一行")
    base = _input(3, n + 1, dtype, seed=n)
    if dtype == torch.float16:
        base = base - base.amax(dim=-1, keepdim=True).float().to(dtype)
    for x in (base[:, :n].contiguous(), base[:, 1:]):
        out = torch.full_like(x, float("nan")).contiguous()
        y = softmax_cluster_regs(x, cluster_size=c, block_size=b, packs=p, smem_packs=sp, out=out)
        assert y is out
        _check(y, x)


@needs_hopper
def test_regs_with_shared_memory_packs_masked_rows():
    x = torch.zeros(3, 40000, device="cuda", dtype=torch.bfloat16)
    x[1, ::2] = float("-inf")
    x[0, :] = float("-inf")                          # 整行 -inf：结果全 0（同寄存器版），不是 nan
    x[2, :] = 1e4
    y = softmax_cluster_regs(x, cluster_size=4, block_size=256, packs=2, smem_packs=3)
    assert torch.all(y[0] == 0) and torch.all(y[1, ::2] == 0)
    _check(y[1:], x[1:])


def test_smem_packs_plan_and_bad_values():
    p = regs_plan(262144, torch.bfloat16, block_size=256, packs=4, smem_packs=4)
    assert (p.cluster_size, p.shared_bytes) == (16, 4 * 256 * 16)
    with pytest.raises(ValueError, match="smem_packs"):
        regs_plan(4096, smem_packs=65)
    with pytest.raises(ValueError, match="动态共享内存"):
        regs_plan(4096, block_size=1024, packs=1, smem_packs=64)          # 1 MiB
    with pytest.raises(ValueError, match="只盖住"):
        regs_plan(262144, torch.bfloat16, cluster_size=8, block_size=256, packs=4, smem_packs=4)


@needs_hopper
@pytest.mark.parametrize("kernel", sorted(_REGS_OR_PIPE))
def test_regs_masked_entries_and_constant_rows(kernel):
    x = torch.zeros(3, 40000, device="cuda")
    x[1, ::2] = float("-inf")
    x[2, :] = 1e4
    x[0, :20000] = float("-inf")                     # 前一半的块整块都是 -inf
    y = _REGS_OR_PIPE[kernel](x, cluster_size=8, block_size=256, packs=8)
    assert torch.all(y[1, ::2] == 0) and torch.all(y[0, :20000] == 0)
    _check(y, x)


@needs_hopper
@pytest.mark.parametrize("kernel", sorted(_REGS_OR_PIPE))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_regs_large_magnitudes_and_min_filled_rows(kernel, dtype):
    """exp 的参数先减最大值：|x| ~ 3e4 时 float32 仍在 1e-4 之内（x * log2(e) - m * log2(e) 的写法误差约 6e-4）；
    整行填成 finfo.min（常见的掩码写法）给出 1/N（那种写法里 m * log2(e) 溢出，结果是 nan）。"""
    x = _input(3, 40000, torch.float32, seed=7) + 3.0e4
    x[1] -= 6.0e4
    x[2] = torch.finfo(dtype).min
    x = x.to(dtype)
    y = _REGS_OR_PIPE[kernel](x, cluster_size=8, block_size=256, packs=8)
    _check(y, x)


@needs_hopper
def test_regs_through_the_cuda_backend():
    x = _input(64, 65536, torch.bfloat16)
    y = cuda_softmax(x, kernel="cluster", block_size=256, packs=4)
    _check(y, x)
    assert torch.equal(rl.softmax(x, backend="cuda"), cuda_softmax(x))    # auto 与 api 的快速路径一致


@needs_hopper
def test_regs_bad_input_on_gpu():
    with pytest.raises(TypeError, match="float64"):
        softmax_cluster_regs(torch.zeros(2, 64, device="cuda", dtype=torch.float64))
    x = torch.zeros(2, 64, device="cuda")
    with pytest.raises(ValueError, match="重叠"):
        softmax_cluster_regs(x, out=x)
    with pytest.raises(ValueError, match="只盖住"):
        softmax_cluster_regs(torch.zeros(2, 65536, device="cuda"), cluster_size=2, block_size=256, packs=8)


# ---------------------------------------------------------------- 常驻、预取后面的行：softmax_cluster_pipe

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("n", [8, 16384, 100000, 262144])
def test_pipe_plan_covers_the_row(n, dtype):
    vec = 4 if dtype == torch.float32 else 8
    p = pipe_plan(n, dtype)
    assert p.cluster_size in CLUSTER_SIZES and p.vec == vec and p.stages == 3 and not p.tma
    # 每块 seg_vecs 个向量，簇里各块合起来盖住整行，最后一块不整块空着；每个线程的 packs 个向量盖住一段
    assert p.cluster_size * p.seg_vecs * vec >= n > (p.cluster_size - 1) * p.seg_vecs * vec
    assert p.block_size * p.packs >= p.seg_vecs
    assert p.shared_bytes == 3 * 16 * p.seg_vecs and p.shared_bytes + p.static_bytes <= SHARED_OPTIN_SM90
    r = regs_plan(n, dtype)
    assert (p.cluster_size, p.block_size, p.packs) == (r.cluster_size, r.block_size, r.packs)


def test_pipe_plan_bad_arguments():
    with pytest.raises(ValueError, match="16 的倍数"):
        pipe_plan(1001)                                   # float32 的行要是 4 个元素的倍数
    with pytest.raises(ValueError, match="16 的倍数"):
        pipe_plan(4100, torch.bfloat16)                   # 16 位的行要是 8 个元素的倍数
    with pytest.raises(ValueError, match="stages"):
        pipe_plan(4096, stages=1)
    with pytest.raises(ValueError, match="超过每块的上限"):
        pipe_plan(262144, torch.float32, stages=4)        # 4 段 x 64 KiB
    with pytest.raises(TypeError, match="tma"):
        pipe_plan(4096, tma=1)
    with pytest.raises(TypeError, match="float64"):
        pipe_plan(4096, torch.float64)
    assert PIPE_STAGES == (2, 3, 4)


def test_pipe_through_softmax_plan():
    p = softmax_plan(256, 262144, torch.float32, "pipe", 512, 8, clusters=True)
    assert (p["kernel"], p["cluster_size"], p["stages"]) == ("pipe", 16, 3)
    with pytest.raises(runtime.ModeError, match="pipe"):
        softmax_plan(256, 262144, torch.float32, "pipe", 512, 8, clusters=False)
    with pytest.raises(ValueError, match="16 字节"):
        softmax_plan(256, 262144, torch.float32, "pipe", 512, 8, clusters=True, aligned=False)


def test_auto_pipe_entry_falls_back(monkeypatch):
    """SOFTMAX_CONFIGS 里的 pipe 项：行不对齐、每行不是整数个 16 字节向量时改用寄存器版，没有簇时改用 block / split。"""
    import reduction_lab.cuda_kernels as ck

    monkeypatch.setitem(ck.SOFTMAX_CONFIGS, 2, ((None, "pipe", 256, 4),))
    p = softmax_plan(64, 32768, torch.bfloat16, clusters=True)
    assert (p["kernel"], p["cluster_size"], p["stages"]) == ("pipe", 4, 3)
    assert softmax_plan(64, 32768, torch.bfloat16, clusters=True, aligned=False)["kernel"] == "cluster"
    assert softmax_plan(64, 32770, torch.bfloat16, clusters=True)["kernel"] == "cluster"
    # 没有簇：不用簇时测得最快的写法，512 个线程 x 64 个元素放得下一行 32768 个 bf16，用 block
    assert softmax_plan(64, 32768, torch.bfloat16)["kernel"] == "block"
    assert softmax_plan(64, 65536, torch.bfloat16)["kernel"] == "split"


@needs_sim
def test_sim_mode_refuses_pipe_kernel_clearly():
    with pytest.raises(runtime.ModeError, match="softmax_cluster_pipe"):
        softmax_cluster_pipe(torch.randn(2, 4096))
    with pytest.raises(runtime.ModeError, match="线程块簇"):
        cuda_softmax(torch.randn(2, 4096), kernel="pipe")


@needs_nvcc
@pytest.mark.parametrize("tma", [0, 1])
@pytest.mark.parametrize("c", [1, 16])
def test_pipe_kernel_ptx(c, tma, tmp_path):
    d = {"CLUSTER_SIZE": c, "USE_BF16": 1, "BLOCK_SIZE": 512, "PACKS": 4, "STAGES": 3, "USE_TMA": tma}
    r, out = _nvcc(["-ptx"], d, tmp_path, ".ptx")
    assert r.returncode == 0, r.stderr
    body = out.read_text().split(".entry softmax_cluster_pipe", 1)[1].split(".entry", 1)[0]
    assert ".maxntid 512, 1, 1" in body and "ex2.approx.ftz.f32" in body
    if tma:       # 一维 TMA，完成时记到 mbarrier 上
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in body
        assert "mbarrier.try_wait.parity" in body and "cp.async.cg" not in body
    else:         # 每个线程 4 个 16 字节的 cp.async，每行一组
        assert body.count("cp.async.cg.shared.global") >= 4 and "cp.async.wait_group 2" in body
        assert "mbarrier" not in body
    assert ("barrier.cluster" in body) == (c > 1)


@needs_nvcc
@pytest.mark.parametrize("block,packs,bf16,tma", [(1024, 4, 0, 0), (512, 16, 0, 0), (1024, 4, 1, 0), (512, 8, 1, 1)])
def test_pipe_kernel_fits_without_spills(block, packs, bf16, tma, tmp_path):
    d = {"CLUSTER_SIZE": 16, "USE_BF16": bf16, "BLOCK_SIZE": block, "PACKS": packs, "STAGES": 3, "USE_TMA": tma}
    r, _ = _nvcc(["-cubin", "--resource-usage"], d, tmp_path, ".cubin")
    assert r.returncode == 0, r.stderr
    res = _resources(r.stdout + r.stderr, "softmax_cluster_pipe")
    assert res["spills"] == 0 and res["regs"] * block <= 65536, res


PIPE_SHAPES = [(1, 8), (7, 4096), (300, 16384), (5, 131072), (2, 262144)]


@needs_hopper
@pytest.mark.parametrize("tma", [False, True], ids=["cp.async", "tma"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", PIPE_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_pipe_matches_float64(shape, dtype, tma):
    x = _input(*shape, dtype)
    if dtype == torch.float16:
        x = x - x.amax(dim=-1, keepdim=True).float().to(dtype)
    _check(softmax_cluster_pipe(x, tma=tma), x)


@needs_hopper
@pytest.mark.parametrize("tma", [False, True], ids=["cp.async", "tma"])
@pytest.mark.parametrize("stages", PIPE_STAGES)
def test_pipe_every_stage_count_and_few_clusters(stages, tma):
    # 37 行交给 1、2、5 个簇：每个簇依次处理许多行，每一段被反复装填；每行的算法与哪个簇处理它无关，结果逐位相同
    x = _input(37, 8192, torch.bfloat16, seed=stages)
    ys = [softmax_cluster_pipe(x, block_size=256, packs=4, stages=stages, tma=tma, n_clusters=k) for k in (1, 2, 5)]
    _check(ys[0], x)
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], ys[2])
    assert torch.equal(ys[0], softmax_cluster_pipe(x, block_size=256, packs=4, stages=stages, tma=tma))


@needs_hopper
def test_pipe_through_the_backend():
    x = _input(64, 65536, torch.bfloat16)
    _check(cuda_softmax(x, kernel="pipe", block_size=256, packs=4), x)


@needs_hopper
def test_pipe_bad_input_on_gpu():
    x = torch.zeros(4, 4100, device="cuda")
    with pytest.raises(ValueError, match="16 字节边界"):
        softmax_cluster_pipe(x[:, 1:4097])                # 行首不在 16 字节边界上
    with pytest.raises(ValueError, match="16 的倍数"):
        softmax_cluster_pipe(x[:, :4098])                 # 每行 4098 x 4 字节
    with pytest.raises(ValueError, match="16 字节边界"):
        softmax_cluster_pipe(x[:, :4096], out=torch.empty(4 * 4096 + 1, device="cuda")[1:].view(4, 4096))
    with pytest.raises(ValueError, match="重叠"):
        softmax_cluster_pipe(x, out=x)
    with pytest.raises(ValueError, match="n_clusters"):
        softmax_cluster_pipe(x[:, :4096], n_clusters=0)
    with pytest.raises(ValueError, match="16 字节"):
        cuda_softmax(x[:, 1:4097], kernel="pipe")


@needs_nvcc
def test_stagger_script_patches_the_regs_kernel(tmp_path):
    """scripts/tune_cluster_stagger.py 在 softmax_cluster_regs 里插入等待（只插一处、在读之前），插入后的源码能编译，
    PTX 里读了 %globaltimer；不定义 STAGGER_NS 时与课程的内核相同（页面上的错开实验由它量出）。"""
    import importlib.util
    from pathlib import Path

    from reduction_lab.cuda_kernels import cluster as cl

    path = Path(__file__).resolve().parents[1] / "scripts" / "tune_cluster_stagger.py"
    spec = importlib.util.spec_from_file_location("tune_cluster_stagger", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    class Fake:
        KERNEL_SOURCE = cl.KERNEL_SOURCE
        read_source = staticmethod(read_source)

    script.patch_source(Fake)
    text = Fake.read_source(cl.KERNEL_SOURCE)
    assert text.count("%%globaltimer") == 2 and text.count("#ifdef STAGGER_NS") == 1
    regs = text[text.index("// --8<-- [start:regs]"):text.index("// --8<-- [end:regs]")]
    assert "#ifdef STAGGER_NS" in regs and regs.index("#ifdef STAGGER_NS") < regs.index("copy_async16")
    src = tmp_path / "softmax_cluster_stagger.cu"
    src.write_text(text, encoding="utf-8")
    defines = {"CLUSTER_SIZE": 16, "BLOCK_SIZE": 512, "PACKS": 8, "SMEM_PACKS": 8, "USE_BF16": 1, "MIN_BLOCKS": 2,
               "STAGGER_NS": 4000, "STAGGER_WAYS": 2, "FIRST_WAVE": 14}
    out = tmp_path / "k.ptx"
    r = subprocess.run([NVCC, "-ptx", "-arch=sm_90", *[f"-D{k}={v}" for k, v in defines.items()], str(src),
                        "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ptx = out.read_text()
    assert "globaltimer" in ptx and "nanosleep" in ptx
    assert Fake.read_source("softmax.cu") == read_source("softmax.cu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_smem_sweep_candidates_cover_a_row(load_script, dtype):
    """scripts/tune_cluster_smem.py 的候选：c * b * (p + sp) 个 16 字节向量正好盖住一行，共享内存不超过上限，
    寄存器里的元素不超过寄存器版的上限；float32 只有拆开的写法（keep = 0），16 位两种都有。"""
    from reduction_lab.cuda_kernels import cluster as cl

    s = load_script("tune_cluster_smem")
    vec = 16 // dtype.itemsize
    for n in (65536, 262144):
        cands = s.candidates(n, dtype)
        assert cands
        for c, b, p, sp, keep in cands:
            assert c * b * (p + sp) * vec == n and sp * b * 16 <= s.SMEM_LIMIT and b * p * vec <= cl.REGS_MAX_BLOCK_ELEMS
        assert {k for *_, k in cands} == ({0} if dtype == torch.float32 else {0, 1})
