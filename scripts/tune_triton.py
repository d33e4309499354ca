"""在 GPU 上扫描 Triton 生产版 softmax 内核的参数（块形状、warp 数、分段），打印每个形状的最佳配置。

    REDUCTION_LAB_MODE=gpu python scripts/tune_triton.py [--total-elems 67108864] [--json out.json]
    REDUCTION_LAB_MODE=gpu python scripts/tune_triton.py --dtype bfloat16 --ns 512,1024,2048,4096

输入 fp32（--dtype 可改成 bfloat16 / float16），M x N = total-elems；计 读+写 字节。同一次运行里测设备拷贝带宽作上限。
结果用来确定 softmax.py / online_softmax.py 里的默认参数。按行求和的扫描是 scripts/tune_triton_row_sum.py
（与基准同样的计时：每次调用前只读地扫过 4 倍 L2）。
"""

from __future__ import annotations

import argparse
import itertools
import json

import reduction_lab as rl
import torch

from reduction_lab.bench import timing

from reduction_lab.triton_kernels.online_softmax import online_softmax, split_softmax
from reduction_lab.triton_kernels.softmax import softmax, softmax_persistent


def bench(fn) -> float:
    """中位时间（秒），用基准测试框架的 CUDA 事件计时（批前空转，主机开销不计入）。"""
    return timing.time_gpu([fn], warmup=5, iters=30, flusher=None).median_ms * 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--json")
    ap.add_argument("--ns", default="512,1024,2048,4096,8192,16384,32768,65536,131072,262144")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--kinds", default="rows,split,packed,online,persistent",
                    help="softmax 候选的种类，逗号分隔：rows、split、packed、online、persistent")
    ap.add_argument("--warps", default="4,8,16,32", help="softmax 候选的 num_warps（逗号分隔）")
    ap.add_argument("--chunks", default="4096,8192,16384,32768", help="split / packed 候选的每段列数（逗号分隔）")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    warps_list = [int(v) for v in args.warps.split(",")]
    chunks = [int(v) for v in args.chunks.split(",")]
    kinds = set(args.kinds.split(","))
    rl.runtime.require_gpu("tune_triton")
    results = []
    for n in [int(v) for v in args.ns.split(",")]:
        m = args.total_elems // n
        x = torch.randn(m, n, device="cuda").to(dtype)
        y = torch.empty_like(x)
        nbytes = x.numel() * x.element_size()
        copy = 2 * nbytes / bench(lambda: y.copy_(x))
        ref_sm = torch.softmax(x.float(), 1).to(dtype)
        rows = {"N": n, "M": m, "copy": copy / 1e9, "softmax": []}
        rows["torch_softmax"] = 2 * nbytes / bench(lambda: torch.softmax(x, 1)) / 1e9
        # softmax 候选
        cands = []
        if n <= 65536:
            for elems, warps in itertools.product([2048, 4096, 8192, 16384, 32768, 65536], warps_list):
                bm = elems // n
                if bm < 1 or not (4 <= elems // (32 * warps) <= 64):
                    continue
                cands.append(("rows", dict(block_m=bm, num_warps=warps)))
        if n <= 32768 and "persistent" in kinds:
            for warps, pps, stages in itertools.product([w for w in warps_list if w >= 8], [1, 2, 4], [2, 3]):
                if n // (32 * warps) > 64 or n // (32 * warps) < 4:
                    continue
                cands.append(("persistent", dict(block_m=1, num_warps=warps, programs_per_sm=pps, num_stages=stages)))
        if n >= 8192:
            for chunk, warps in itertools.product(chunks, warps_list):
                if chunk > n or not (8 <= chunk // (32 * warps) <= 64):
                    continue
                cands.append(("split", dict(chunk=chunk, num_warps=warps)))
                cands.append(("packed", dict(chunk=chunk, num_warps=warps)))
        if n >= 65536:
            cands.append(("online", dict(block_size=16384)))
        cands = [c for c in cands if c[0] in kinds]
        for kind, kw in cands:
            try:
                if kind == "online":
                    f = lambda: online_softmax(x, **kw)
                elif kind == "persistent":
                    f = lambda: softmax_persistent(x, **kw)
                elif kind == "packed":
                    f = lambda: split_softmax(x, packed=True, **kw)
                else:
                    f = lambda: softmax(x, **kw)
                out = f()
                tol = 1e-6 if dtype == torch.float32 else 1e-2
                ok = torch.allclose(out.float(), ref_sm.float(), atol=tol, rtol=1e-4 if dtype == torch.float32 else 2e-2)
                gbs = 2 * nbytes / bench(f) / 1e9
                rows["softmax"].append({"kind": kind, **kw, "gbs": gbs, "ok": ok})
            except Exception as exc:  # noqa: BLE001
                rows["softmax"].append({"kind": kind, **kw, "error": str(exc)[:200]})
        rows["softmax_default"] = 2 * nbytes / bench(lambda: softmax(x)) / 1e9
        best_sm = max((r for r in rows["softmax"] if r.get("ok")), key=lambda r: r["gbs"], default=None)
        bad = [r for r in rows["softmax"] if not r.get("ok")]
        print(f"N={n:>7} copy {rows['copy']:.0f} | torch.softmax {rows['torch_softmax']:.0f} "
              f"default {rows['softmax_default']:.0f} best {best_sm} | bad {len(bad)} {bad[:2]}", flush=True)
        results.append(rows)
        del x, y
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
