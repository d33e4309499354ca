"""常驻的簇内核 softmax_cluster_pipe（src/reduction_lab/cuda_kernels/softmax_cluster.cu）在 H200 上的扫描：
与同一次运行里 backend="cuda" 的默认配置（SOFTMAX_CONFIGS：N >= 65536 的 float32、N >= 16384 的 16 位是寄存器版
softmax_cluster_regs）并排比较。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_pipe.py --json docs/data/h200_cuda_softmax_pipe.json

每个 (dtype, N)，M = 2**26 // N 行，输入同 scripts/tune_cuda_softmax.py（randn * 3 加每行不同的偏移，行尾加 20）：
1. 候选：tune_cuda_softmax.candidates 里的 pipe 配置中线程数 >= 256、每个线程 16 或 32 个元素的；每个线程
   32 个元素的再试 4 段（cp.async）与 3 段（TMA），其余只试 3 段（cp.async）；共享内存放不下的跳过；
2. 验证：与 float64 的 torch.softmax 比对（容差同 tune_cuda_softmax.max_violation），不符的不计时；
3. 计时：triton.testing.do_bench 的中位数（每次调用前清空 L2），对照同样字节数的 y.copy_(x)；
   ``frac`` = 拷贝时间 / 时间，``auto`` 是默认配置的同一比值；``n_clusters`` 是网格里的簇数
   （驱动的 cuOccupancyMaxActiveClusters：同时驻留得下的簇数）。
课程页面 docs/cuda/cluster-softmax.md 读它写出的 docs/data/h200_cuda_softmax_pipe.json。
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import reduction_lab as rl          # 先于 triton 导入：它按模式设置 Triton 的解释器
import triton.testing
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import cluster as cl
import tune_cuda_softmax as t

TOTAL = 1 << 26


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    args = ap.parse_args()
    rl.runtime.require_gpu("tune_cluster_pipe")
    out = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "date": time.strftime("%Y-%m-%d"), "total_elems": TOTAL,
                    "method": "validate against float64 torch.softmax, then triton.testing.do_bench median "
                              "(L2 flushed); frac = copy time / time"},
           "rows": []}
    t0 = time.time()
    for dname, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        for n in (16384, 32768, 65536, 131072, 262144):
            m = TOTAL // n
            x = t.make_input(m, n, dtype, seed=n)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            nbytes = 2 * x.numel() * x.element_size()
            tc = bench(lambda: y.copy_(x))
            row = {"dtype": dname, "N": n, "copy": nbytes / tc / 1e9, "cands": []}
            ta = bench(lambda: ck.softmax(x, out=y))
            row["auto"] = tc / ta
            vec = 16 // x.element_size()
            cands = [c for c in t.candidates(n, dtype, clusters=True)
                     if c[0] == "pipe" and c[1] >= 256 and c[2] * vec in (16, 32)]
            for _, b, p in cands:
                for st, tma in (((3, False), (4, False), (3, True)) if p * vec == 32 else ((3, False),)):
                    try:
                        plan = cl.pipe_plan(n, dtype, None, b, p, st, tma)
                    except ValueError:
                        continue
                    try:
                        y.fill_(float("nan"))
                        cl.softmax_cluster_pipe(x, block_size=b, packs=p, stages=st, tma=tma, out=y)
                        torch.cuda.synchronize()
                        v = t.max_violation(y, ref, dtype)
                    except Exception as e:  # noqa: BLE001 —— 记下原因，继续别的候选
                        row["cands"].append({"b": b, "p": p, "st": st, "tma": tma,
                                             "error": f"{type(e).__name__}: {str(e)[:200]}"})
                        print("ERR", dname, n, b, p, st, e, flush=True)
                        continue
                    if v > 1:
                        row["cands"].append({"b": b, "p": p, "st": st, "tma": tma, "violation": v})
                        print("FAIL", dname, n, b, p, st, v, flush=True)
                        continue
                    tt = bench(lambda: cl.softmax_cluster_pipe(x, block_size=b, packs=p, stages=st, tma=tma, out=y))
                    key = [k for k in cl._PIPE_PLANS if k[0] == m and k[1] == n and k[3] == plan]
                    ncl = cl._PIPE_PLANS[key[0]].grid[0] // plan.cluster_size if key else None
                    row["cands"].append({"b": b, "p": p, "st": st, "tma": tma, "c": plan.cluster_size, "frac": tc / tt,
                                         "n_clusters": ncl})
            best = sorted([c for c in row["cands"] if "frac" in c], key=lambda c: -c["frac"])[:5]
            print(f"{dname} N={n} copy {row['copy']:.0f} auto {row['auto']:.3f} best:",
                  [(c['b'], c['p'], c['st'], c['tma'], c['c'], c['n_clusters'], round(c['frac'], 3)) for c in best],
                  f"t={time.time() - t0:.0f}", flush=True)
            del x, y, ref
            t.add_row(out, row, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
