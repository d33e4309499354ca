"""长行 softmax 的「波」：一行一个线程块簇（softmax_cluster.cu 的 softmax_cluster_regs）在 H200 上的两个假设。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_stagger.py --json docs/data/h200_cluster_stagger.json

同时驻留的簇（一「波」）同时开始，做一样多的事。假设它们一直步调一致：同时读、同时在簇内交换 (m, s)、同时写，
交换的那一段里谁也不读写显存。检验两种改法：

1. 错开第一波：第一波里第 k 个簇（行号 k < 同时驻留的簇数）开始前先等 (k mod W) / W x F 个「一行的时间」
   （一行的时间 = 同一进程里测得的拷贝时间 x 同时驻留的簇数 / 行数；用 %globaltimer 等）。后面的簇
   在前面的簇退出后才开始，错开会保留下来。等待写在内核最前面（由本脚本在编译前插入，课程的内核不变）；
2. 每个 SM 一块大的：1024 个线程（或 512 个线程、更多放在共享内存里的包），簇更小。

每个 (dtype, N)（M = 2^26 // N 行，输入同 scripts/tune_cuda_softmax.py）：每个配置先与 float64 的 torch.softmax
比对（tune_cuda_softmax.max_violation），不符的不计时；再用 triton.testing.do_bench 的中位数计时（每次调用前清空
L2），全部配置与拷贝、包装函数的默认配置（auto）交替测三轮，各取三轮的中位数；frac = 拷贝时间 / 时间。
课程页面 docs/cuda/cluster-softmax.md 读它写出的 JSON。
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TOTAL = 1 << 26
#: (dtype, N, [(簇大小, 线程数, 寄存器里的包, 共享内存里的包)])：第一个是 SOFTMAX_CONFIGS 里的配置
CASES = (
    ("bfloat16", 1 << 20, [(16, 512, 8, 8), (8, 1024, 8, 8)]),
    ("float32", 1 << 20, [(16, 1024, 4, 12)]),
    ("bfloat16", 262144, [(16, 256, 4, 4), (4, 512, 8, 8), (2, 1024, 8, 8)]),
)
#: 错开的方式：(W, F)
STAGGERS = ((2, 0.25), (2, 0.5), (4, 1.0))
ROUNDS = 3

#: 插在 softmax_cluster_regs 里算出 v0 的那一行之后（此时还没有初始化 mbarrier、没有到达簇屏障）
ANCHOR = "    const int v0 = rank * (BLOCK_SIZE * TPACKS) + threadIdx.x;"
STAGGER_CODE = r"""
#ifdef STAGGER_NS
    if (row < FIRST_WAVE) {
        const unsigned long long d = (unsigned long long)(row % STAGGER_WAYS) * STAGGER_NS / STAGGER_WAYS;
        unsigned long long t0, t1;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do {
            __nanosleep(256);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        } while (t1 - t0 < d);
    }
#endif
"""


def patch_source(cl) -> None:
    """让 cluster._compile_cluster_kernel 编译带错开代码的源码（只在定义了 STAGGER_NS 时生效）。"""
    original = cl.read_source

    def read(name):
        text = original(name)
        if name != cl.KERNEL_SOURCE:
            return text
        lines = text.splitlines(keepends=True)
        at = [i for i, ln in enumerate(lines) if ln.startswith(ANCHOR)]
        if len(at) != 1:
            raise SystemExit(f"{cl.KERNEL_SOURCE} 里找不到插入点 {ANCHOR!r}：内核改过了，请更新本脚本")
        return "".join(lines[:at[0] + 1]) + STAGGER_CODE + "".join(lines[at[0] + 1:])

    cl.read_source = read


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    args = ap.parse_args()

    import numpy as np
    import torch

    import reduction_lab as rl          # 先于 triton 导入：它按模式设置 Triton 的解释器
    import triton.testing
    from reduction_lab import cuda_kernels as ck
    from reduction_lab.cuda_kernels import cluster as cl
    from reduction_lab.cuda_kernels.launcher import cupy_stream
    import tune_cuda_softmax as t

    rl.runtime.require_gpu("tune_cluster_stagger")
    patch_source(cl)
    index = torch.cuda.current_device()
    out = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "sm_count": torch.cuda.get_device_properties(index).multi_processor_count,
                    "date": time.strftime("%Y-%m-%d"), "total_elems": TOTAL,
                    "command": "REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_stagger.py "
                               + " ".join(sys.argv[1:]),
                    "method": f"validate against float64 torch.softmax, then triton.testing.do_bench median (L2 "
                              f"flushed), {ROUNDS} interleaved rounds, median of the rounds; frac = copy time / time"},
           "rows": []}

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e-3

    for dname, n, configs in CASES:
        dtype = getattr(torch, dname)
        m = TOTAL // n
        x = t.make_input(m, n, dtype, seed=n)
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        nbytes = 2 * x.numel() * x.element_size()
        t_copy = bench(lambda: y.copy_(x))
        plan = ck.softmax_plan(m, n, dtype, clusters=True)
        row = {"dtype": dname, "N": n, "M": m, "auto_plan": {k: v for k, v in plan.items() if k in (
            "kernel", "block_size", "packs", "cluster_size", "smem_packs")}, "cands": []}
        runs = []                                   # (候选, 启动函数)

        def launcher(kern, c, b, sp):
            def go():
                with cupy_stream():
                    kern((m * c,), (b,), (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(x.stride(0)),
                                         np.int64(y.stride(0)), np.int32(n)), shared_mem=sp * b * 16)
            return go

        for c, b, p, sp in configs:
            mb = cl.regs_min_blocks(b, p, dtype, sp)
            base, func = cl._compile_cluster_kernel(cl.REGS_KERNEL, c, b, p, dtype, index, MIN_BLOCKS=mb,
                                                    SMEM_PACKS=sp)
            if sp:
                base.max_dynamic_shared_size_bytes = sp * b * 16
            active = cl.max_active_clusters(int(func.ptr), c, b, sp * b * 16)
            row_ns = t_copy * 1e9 * active / m
            common = {"c": c, "b": b, "p": p, "sp": sp, "regs": int(base.attributes["num_regs"]),
                      "spill": int(base.attributes["local_size_bytes"]), "active": active,
                      "waves": m / active, "row_us": row_ns / 1e3}
            runs.append((dict(common, stagger=None), launcher(base, c, b, sp)))
            if (c, b, p, sp) != configs[0]:
                continue                            # 只错开表里的配置；大块的配置只测不错开的
            for ways, frac in STAGGERS:
                ns = int(frac * row_ns)
                kern, _ = cl._compile_cluster_kernel(cl.REGS_KERNEL, c, b, p, dtype, index, MIN_BLOCKS=mb,
                                                     SMEM_PACKS=sp, STAGGER_NS=ns, STAGGER_WAYS=ways,
                                                     FIRST_WAVE=active)
                if sp:
                    kern.max_dynamic_shared_size_bytes = sp * b * 16
                runs.append((dict(common, stagger={"ways": ways, "frac": frac, "ns": ns}), launcher(kern, c, b, sp)))
        ok = []
        for cand, go in runs:
            y.fill_(float("nan"))
            go()
            torch.cuda.synchronize()
            v = t.max_violation(y, ref, dtype)
            if v > 1:
                cand["violation"] = v
                print("FAIL", dname, n, cand, flush=True)
            else:
                ok.append((cand, go))
            row["cands"].append(cand)
        times = {"copy": [], "auto": [], **{id(cand): [] for cand, _ in ok}}
        for _ in range(ROUNDS):
            times["copy"].append(bench(lambda: y.copy_(x)))
            times["auto"].append(bench(lambda: ck.softmax(x, out=y)))
            for cand, go in ok:
                times[id(cand)].append(bench(go))
        tc = statistics.median(times["copy"])
        row["copy_gbps"] = nbytes / tc / 1e9
        row["auto"] = tc / statistics.median(times["auto"])
        for cand, _ in ok:
            cand["frac"] = tc / statistics.median(times[id(cand)])
            cand["fracs"] = [tc / q for q in times[id(cand)]]
        print(f"{dname} N={n} M={m} copy {row['copy_gbps']:.0f} GB/s auto {100 * row['auto']:.1f}% "
              f"{row['auto_plan']}", flush=True)
        for cand in row["cands"]:
            s = cand["stagger"]
            tag = "—" if s is None else f"W={s['ways']} F={s['frac']}"
            print(f"   {cand['c']:2d} x {cand['b']:4d} x {cand['p']}+{cand['sp']:<2d} active {cand['active']:3d} "
                  f"waves {cand['waves']:5.2f}  {tag:12s} {100 * cand.get('frac', float('nan')):5.1f}%", flush=True)
        del x, y, ref
        t.add_row(out, row, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
