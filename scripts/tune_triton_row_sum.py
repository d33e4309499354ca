"""Triton 按行求和（src/reduction_lab/triton_kernels/row_sum.py 的生产版内核）的块形状、warp 数与常驻方式扫描。

    REDUCTION_LAB_MODE=gpu python scripts/tune_triton_row_sum.py [--dtypes float32,bfloat16] [--json out.json]

每个 (dtype, N)：M = 2^26 // N 行。候选有两种：

* ``tiled``：一个 program 读 BLOCK_M 行 x 一段列（grid = 行块数 x 段数，段数按默认）；一块 ``tile`` 个元素，
  短行时 BLOCK_N = N、BLOCK_M = tile / N，长行时 BLOCK_M = 1、BLOCK_N = tile，在 program 内按 BLOCK_N 循环；
* ``persistent``：常驻内核（program 数 = SM 数 x 每 SM 的 program 数），只用于短行。

每个候选先与 float64 的 x.sum(1) 比较（float32：|y - ref| <= 1e-4 |ref| + 1e-3；16 位：输出的一个 ulp），再用基准的
计时方法（reduction_lab.bench.timing.time_gpu：CUDA 事件，每次调用前只读地扫过 4 倍 L2，中位数）给整个调用计时。
GB/s 按读的字节数算，%copy 相对同样字节数的 y.copy_(x)（读 + 写的字节数 / 时间），与基准的 row-sum 套件相同。
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import torch
import reduction_lab as rl
from reduction_lab.bench import timing
from reduction_lab.triton_kernels.row_sum import row_sum

NS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
FLUSH = None


def bench_ms(f) -> float:
    return timing.time_gpu([f], warmup=5, iters=40, flusher=FLUSH).median_ms


def candidates(n: int, tiles, warps, pps) -> list[dict]:
    out = []
    for tile, w in itertools.product(tiles, warps):
        if not 8 <= tile // (32 * w) <= 64:          # 每个线程 8 到 64 个元素
            continue
        if n < tile:
            out.append({"kind": "tiled", "block_m": tile // n, "block_n": n, "num_warps": w})
            out.extend({"kind": "persistent", "block_m": tile // n, "block_n": n, "num_warps": w, "n_split": 1,
                        "programs_per_sm": p} for p in pps)
        else:
            out.append({"kind": "tiled", "block_m": 1, "block_n": tile, "num_warps": w})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--tiles", default="4096,8192,16384", help="一块的元素数（逗号分隔）")
    ap.add_argument("--warps", default="4,8,16")
    ap.add_argument("--pps", default="2,4", help="常驻内核每个 SM 的 program 数")
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    global FLUSH
    rl.runtime.require_gpu("tune_triton_row_sum")
    FLUSH = timing.L2Flusher(timing.l2_bytes())
    ints = lambda s: [int(v) for v in s.split(",")]
    out = {"meta": {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                    "triton": __import__("triton").__version__,
                    "command": "python scripts/tune_triton_row_sum.py " + " ".join(sys.argv[1:]),
                    "method": "validate against float64 x.sum(1), then time the whole call with "
                              "reduction_lab.bench.timing.time_gpu (CUDA events, read-only sweep of 4x L2 before "
                              "each call, median of 40); GB/s = M*N*itemsize / time; frac_copy against y.copy_(x) "
                              "(read + write bytes / time) timed the same way",
                    "date": time.strftime("%Y-%m-%d")},
           "results": []}
    bad = 0
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in ints(args.ns):
            m = args.total_elems // n
            x = (torch.randn(m, n, device="cuda") + 0.5).to(dtype)
            y = torch.empty_like(x)
            ref = x.double().sum(1)
            tol = 1e-4 * ref.abs() + 1e-3 if dtype == torch.float32 else 2 ** -7 * ref.abs() + 1e-3
            copy = 2 * x.numel() * x.element_size() / (bench_ms(lambda: y.copy_(x)) * 1e-3)
            rows = []
            for c in candidates(n, ints(args.tiles), ints(args.warps), ints(args.pps)):
                kw = {k: v for k, v in c.items() if k != "kind"}
                f = (lambda kw=kw: row_sum(x, **kw))
                try:
                    ok = bool(((f().double() - ref).abs() <= tol).all())
                except Exception as exc:  # noqa: BLE001  记下来，不中断扫描
                    rows.append({**c, "ok": False, "error": str(exc)[:200]})
                    bad += 1
                    continue
                bad += not ok
                ms = bench_ms(f) if ok else float("nan")
                gbps = x.numel() * x.element_size() / (ms * 1e-3) / 1e9
                rows.append({**c, "ok": ok, "gbps": gbps, "frac_copy": gbps * 1e9 / copy})
            auto_ms = bench_ms(lambda: rl.reduce_sum(x, backend="triton"))
            auto = x.numel() * x.element_size() / (auto_ms * 1e-3) / 1e9
            best = max((r for r in rows if r["ok"]), key=lambda r: r["gbps"])
            print(f"{dname:9s} N={n:7d} M={m:6d} default {auto * 1e9 / copy:5.1%}  best {best}", flush=True)
            for r in sorted((r for r in rows if r["ok"]), key=lambda r: -r["gbps"])[1:5]:
                print(f"      {r}")
            out["results"].append({"dtype": dname, "N": n, "M": m, "copy_gbps": copy / 1e9,
                                   "default_frac_copy": auto * 1e9 / copy, "candidates": rows})
            del x, y
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
