"""短行 softmax 的 Triton 多行内核：每个 program 的元素数与 warp 数，与同一进程里的 torch.compile 并排比较。

    REDUCTION_LAB_MODE=gpu python scripts/tune_softmax_short.py --json docs/data/h200_triton_softmax_short.json
    REDUCTION_LAB_MODE=gpu python scripts/tune_softmax_short.py --dtype bfloat16 --ns 512,1024,2048,4096,8192 \
        --warps 1,2,4,8,16 --json docs/data/h200_triton_softmax_short_bf16.json

每个 N（M = 2^26 / N）：拷贝 ``y.copy_(x)``、torch.compile（静态形状）的 softmax、``rl.softmax`` 的默认配置、
每个候选 (block_m, num_warps)。先与 float64 的 torch.softmax 比较（float32：atol 1e-6、rtol 1e-4；16 位：输出的
一个 ulp，rtol 2^-7 / 2^-10），再用基准的计时方法
（reduction_lab.bench.timing.time_gpu：CUDA 事件，每次调用前只读地扫过 4 倍 L2，40 次的中位数）；
``--repeats`` 轮交替测量，每个配置取各轮的中位数。frac = 拷贝的时间 / 这个配置的时间（读 + 写同样的字节数）。
结果决定 reduction_lab.triton_kernels.softmax._rows_config 在 float32、N <= 1024 时的规则。
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys

import torch
import triton

import reduction_lab as rl
from reduction_lab.bench import timing
from reduction_lab.triton_kernels.softmax import _rows_config, softmax

from _command import recorded_command

METHOD = ("validate against float64 torch.softmax ({tol}), then reduction_lab.bench.timing.time_gpu "
          "(CUDA events, read-only sweep of 4x L2 before each call, median of 40); {r} interleaved rounds of copy, "
          "torch.compile, the default and every candidate, median of the rounds; frac = copy time / time")


def candidates(n: int, warps_list, elems_list=(1024, 2048, 4096)) -> list[tuple[int, int]]:
    out = []
    for elems, w in itertools.product((n, *elems_list), warps_list):
        if elems < n or not 4 <= elems // (32 * w) <= 64:
            continue
        if (elems // n, w) not in out:
            out.append((elems // n, w))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ns", default="512,1024,2048")
    ap.add_argument("--warps", default="1,2,4,16")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--elems", default="1024,2048,4096", help="每个 program 的元素数（逗号分隔）")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--json")
    args = ap.parse_args()
    rl.runtime.require_gpu("tune_softmax_short")
    torch._dynamo.config.cache_size_limit = 64
    flush = timing.L2Flusher(timing.l2_bytes())
    bench_ms = lambda f: timing.time_gpu([f], warmup=5, iters=40, flusher=flush).median_ms
    warps_list = [int(v) for v in args.warps.split(",")]
    elems_list = [int(v) for v in args.elems.split(",")]
    dtype = getattr(torch, args.dtype)
    rtol, atol = {"float32": (1e-4, 1e-6), "bfloat16": (2 ** -7, 1e-8), "float16": (2 ** -10, 1e-8)}[args.dtype]
    results, failed = [], 0
    for n in (int(v) for v in args.ns.split(",")):
        m = args.total_elems // n
        x = torch.randn(m, n, device="cuda").to(dtype)
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), 1)
        comp = torch.compile(lambda t: torch.softmax(t, -1), dynamic=False)
        calls = {"copy": lambda: y.copy_(x), "torch.compile": lambda: comp(x), "default": lambda: rl.softmax(x)}
        for bm, w in candidates(n, warps_list, elems_list):
            calls[f"block_m={bm},num_warps={w}"] = lambda bm=bm, w=w: softmax(x, block_m=bm, num_warps=w)
        for name, f in list(calls.items()):
            if name != "copy" and not torch.allclose(f().double(), ref, rtol=rtol, atol=atol):
                print(f"N={n} {name}: 结果不对 (wrong result)", file=sys.stderr)
                failed += 1
                del calls[name]
        times = {name: [] for name in calls}
        for _ in range(args.repeats):
            for name, f in calls.items():
                times[name].append(bench_ms(f))
        med = {name: statistics.median(v) for name, v in times.items()}
        bm, _, nw = _rows_config(m, n, x.element_size())
        row = {"dtype": args.dtype, "N": n, "M": m, "copy_gbs": 2 * x.numel() * x.element_size() / med["copy"] / 1e6,
               "default": {"block_m": bm, "num_warps": nw},
               "frac": {name: med["copy"] / t for name, t in med.items() if name != "copy"}}
        best = max((k for k in row["frac"] if k.startswith("block_m")), key=row["frac"].get)
        print(f"N={n:>5} copy {row['copy_gbs']:.0f} GB/s | torch.compile {row['frac']['torch.compile']:.3f} "
              f"default {row['frac']['default']:.3f} ({bm}, {nw}) | best {best} {row['frac'][best]:.3f}", flush=True)
        results.append(row)
        del x, y, ref
        torch.cuda.empty_cache()
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "triton": triton.__version__,
                "method": METHOD.format(r=args.repeats, tol=f"atol {atol:g}, rtol {rtol:g}"),
                "command": recorded_command("tune_softmax_short")}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": results}, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
