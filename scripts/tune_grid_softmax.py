"""常驻网格的长行 softmax softmax_grid_pipe（src/reduction_lab/cuda_kernels/softmax_cluster.cu）在 H200 上的扫描：
与同一次运行里默认 backend（``reduction_lab.softmax(x)``，backend="auto"）并排比较。

    REDUCTION_LAB_MODE=gpu python scripts/tune_grid_softmax.py --json docs/data/h200_cuda_softmax_grid.json

每个 (dtype, N)，M = 2**26 // N 行，输入同 scripts/tune_cuda_softmax.py（randn * 3 加每行不同的偏移，行尾加 20）：
1. 候选：每块 256 / 512 个线程 x 每段 16 / 32 / 64 KiB（每个线程至多 64 个元素）x (预取几项 ahead, 隔几轮写出
   delay)（共享内存放不下的跳过）x 网格取同时驻留得下的全部块、或向下取到一行段数的整数倍；
2. 验证：与 float64 的 torch.softmax 比对（容差同 tune_cuda_softmax.max_violation），不符的不计时；
3. 计时：triton.testing.do_bench 的中位数（每次调用前清空 L2），对照同样字节数的 y.copy_(x)；
   ``frac`` = 拷贝时间 / 时间，``auto`` 是默认 backend 的同一比值。
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import reduction_lab as rl          # 先于 triton 导入：它按模式设置 Triton 的解释器
import triton.testing
from reduction_lab.cuda_kernels import grid as gr
import tune_cuda_softmax as t

TOTAL = 1 << 26


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


def candidates(n: int, dtype):
    vec = 16 // dtype.itemsize
    for b in (256, 512):
        for seg_kib in (16, 32, 48, 64):
            p = seg_kib * 1024 // 16 // b
            if not 1 <= p <= 16 or p * vec > gr.MAX_THREAD_ELEMS:
                continue
            for st in ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (2, 4), (3, 3)):
                try:
                    plan = gr.grid_plan(n, dtype, b, p, *st)
                except ValueError:
                    continue
                yield b, p, st, plan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    ap.add_argument("--ns", default="131072,262144,1048576")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args()
    rl.runtime.require_gpu("tune_grid_softmax")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "sm_count": sms,
                    "date": time.strftime("%Y-%m-%d"), "total_elems": TOTAL,
                    "command": "python scripts/tune_grid_softmax.py " + " ".join(sys.argv[1:]),
                    "method": "validate against float64 torch.softmax, then triton.testing.do_bench median "
                              "(L2 flushed); frac = copy time / time"},
           "rows": []}
    t0 = time.time()
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in map(int, args.ns.split(",")):
            m = TOTAL // n
            x = t.make_input(m, n, dtype, seed=n)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), -1)
            nbytes = 2 * x.numel() * x.element_size()
            tc = bench(lambda: y.copy_(x))
            row = {"dtype": dname, "N": n, "M": m, "copy": nbytes / tc / 1e9, "cands": []}
            row["auto"] = tc / bench(lambda: rl.softmax(x))
            for b, p, st, plan in candidates(n, dtype):
                _, func = gr._kernel(plan, dtype, 0)
                fit = gr.blocks_per_sm(int(func.ptr), b, plan.shared_bytes) * sms
                policies = {"resident": None}
                if fit >= plan.n_segs and fit % plan.n_segs:
                    policies["whole_rows"] = fit // plan.n_segs * plan.n_segs
                for pol, blocks in policies.items():
                    c = {"b": b, "p": p, "st": st, "grid": pol, "n_segs": plan.n_segs, "seg_kib": plan.seg_vecs / 64,
                         "blocks": blocks or min(fit, m * plan.n_segs)}
                    try:
                        y.fill_(float("nan"))
                        gr.softmax_grid_pipe(x, block_size=b, packs=p, ahead=st[0], delay=st[1], blocks=blocks, out=y)
                        torch.cuda.synchronize()
                        v = t.max_violation(y, ref, dtype)
                    except Exception as e:  # noqa: BLE001 —— 记下原因，继续别的候选
                        c["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                        row["cands"].append(c)
                        print("ERR", dname, n, c, flush=True)
                        continue
                    if v > 1:
                        c["violation"] = v
                        row["cands"].append(c)
                        print("FAIL", dname, n, c, flush=True)
                        continue
                    c["frac"] = tc / bench(lambda: gr.softmax_grid_pipe(x, block_size=b, packs=p, ahead=st[0],
                                                                        delay=st[1], blocks=blocks, out=y))
                    row["cands"].append(c)
            best = sorted([c for c in row["cands"] if "frac" in c], key=lambda c: -c["frac"])[:6]
            print(f"{dname} N={n} copy {row['copy']:.0f} auto {row['auto']:.3f} best:",
                  [(c["b"], c["p"], c["st"], c["grid"], c["blocks"], round(c["frac"], 3)) for c in best],
                  f"t={time.time() - t0:.0f}", flush=True)
            del x, y, ref
            t.add_row(out, row, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
