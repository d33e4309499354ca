"""CUDA C 按行求和（src/reduction_lab/cuda_kernels/reduce_sum.cu 的 split 内核）的线程数与段数扫描。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_row_sum.py [--dtypes float32,bfloat16] [--json out.json]

每个 (dtype, N)：M = 2^26 // N 行。每个候选 (线程数, 段数) 先与 float64 的 x.sum(1) 比较（float32：
|y - ref| <= 1e-4 |ref| + 1e-3；16 位：输出的一个 ulp），再用基准的计时方法（reduction_lab.bench.timing.time_gpu：CUDA 事件，
每次调用前只读地扫过 4 倍 L2，中位数；do_bench 的清空是写零，写回的脏行会拖慢只读的内核）给整个调用计时：
段数 > 1 时调用里还有清零与（16 位时）转换的两次小启动，它们也算在内。段数 None 是包装函数的默认段数。GB/s 按读的字节数
（M * N * 元素字节数）算，%copy 是它与同样字节数的 y.copy_(x) 的 GB/s（读 + 写的字节数 / 时间）之比，
与基准的 row-sum 套件相同。
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import reduction_lab as rl
from reduction_lab import cuda_kernels as ck
from reduction_lab.bench import timing

NS = (8192, 32768, 131072, 262144)
FLUSH = None


def bench_ms(f) -> float:
    return timing.time_gpu([f], warmup=5, iters=40, flusher=FLUSH).median_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--blocks", default="256,512,1024", help="每块线程数（逗号分隔）")
    ap.add_argument("--chunks", default="None,1,2,4,8", help="段数（逗号分隔；None 是包装函数的默认段数）")
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    global FLUSH
    rl.runtime.require_gpu("tune_cuda_row_sum")
    FLUSH = timing.L2Flusher(timing.l2_bytes())
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {"meta": {"device": torch.cuda.get_device_name(0), "sm_count": sms, "torch": torch.__version__,
                    "command": "python scripts/tune_cuda_row_sum.py " + " ".join(sys.argv[1:]),
                    "method": "validate against float64 x.sum(1), then time the whole call with "
                              "reduction_lab.bench.timing.time_gpu (CUDA events, read-only sweep of 4x L2 before "
                              "each call, median of 40); GB/s = M*N*itemsize / time; frac_copy against y.copy_(x) "
                              "(read + write bytes / time) timed the same way",
                    "date": time.strftime("%Y-%m-%d")}, "results": []}
    bad = 0
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in map(int, args.ns.split(",")):
            m = args.total_elems // n
            x = (torch.randn(m, n, device="cuda") + 0.5).to(dtype)
            y = torch.empty_like(x)
            ref = x.double().sum(1)
            copy = 2 * x.numel() * x.element_size() / (bench_ms(lambda: y.copy_(x)) * 1e-3)
            rows = []
            for b in map(int, args.blocks.split(",")):
                for c in (None if v == "None" else int(v) for v in args.chunks.split(",")):
                    f = (lambda b=b, c=c: ck.reduce_sum(x, kernel="split", block_size=b, chunks=c))
                    got = f().double()
                    tol = 1e-4 * ref.abs() + 1e-3 if dtype == torch.float32 else 2 ** -7 * ref.abs() + 1e-3
                    ok = bool(((got - ref).abs() <= tol).all())
                    bad += not ok
                    ms = bench_ms(f) if ok else float("nan")
                    gbps = x.numel() * x.element_size() / (ms * 1e-3) / 1e9
                    rows.append({"block_size": b, "chunks": c, "ok": ok, "gbps": gbps, "frac_copy": gbps * 1e9 / copy})
            auto_ms = bench_ms(lambda: rl.reduce_sum(x, backend="cuda"))
            auto = x.numel() * x.element_size() / (auto_ms * 1e-3) / 1e9
            best = max((r for r in rows if r["ok"]), key=lambda r: r["gbps"])
            print(f"{dname:9s} N={n:7d} M={m:6d} auto {auto * 1e9 / copy:5.1%}  best B={best['block_size']} "
                  f"chunks={best['chunks']} {best['frac_copy']:5.1%}", flush=True)
            for r in sorted(rows, key=lambda r: -r["gbps"] if r["ok"] else 0)[:6]:
                print(f"      B={r['block_size']:4d} chunks={str(r['chunks']):4s} {r['frac_copy']:5.1%} ok={r['ok']}")
            out["results"].append({"dtype": dname, "N": n, "M": m, "copy_gbps": copy / 1e9,
                                   "auto_frac_copy": auto * 1e9 / copy, "candidates": rows})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
