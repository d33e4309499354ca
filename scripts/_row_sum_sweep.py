"""tune_cuda_row_sum.py 与 tune_triton_row_sum.py 共用的扫描循环：每个 (dtype, N) 建 M = total // N 行的输入，
测同样字节数的 y.copy_(x) 作上限，每个候选先与 float64 的 x.sum(1) 比较（float32：|y - ref| <= 1e-4 |ref| + 1e-3；
16 位：输出的一个 ulp），再用基准的计时方法（reduction_lab.bench.timing.time_gpu：CUDA 事件，每次调用前只读地扫过
4 倍 L2，中位数）给整个调用计时。GB/s 按读的字节数（M * N * 元素字节数）算，frac_copy 是它与拷贝的 GB/s
（读 + 写的字节数 / 时间）之比，与基准的 row-sum 套件相同。"""

from __future__ import annotations

import json
import sys
import time

import torch

import reduction_lab as rl
from reduction_lab.bench import timing

from _command import recorded_command

METHOD = ("validate against float64 x.sum(1), then time the whole call with reduction_lab.bench.timing.time_gpu "
          "(CUDA events, read-only sweep of 4x L2 before each call, median of 40); GB/s = M*N*itemsize / time; "
          "frac_copy against y.copy_(x) (read + write bytes / time) timed the same way")


def common_args(ap, ns) -> None:
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--ns", default=",".join(map(str, ns)))
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--repeats", type=int, default=1, help="交替测量的轮数（每个配置取各轮的中位数）")
    ap.add_argument("--json", default=None)
    ap.add_argument("--compile", action="store_true",
                    help="每一轮也测 torch.compile（静态形状）的 x.sum(1)，与候选同一进程、交替测量")


def sweep(script: str, args, candidates, call, default_call, meta: dict | None = None) -> int:
    """``candidates(n)``：这一行长的候选（描述它的 dict 列表）；``call(x, cand)``：用这个候选求和；
    ``default_call(x)``：默认配置。写出 ``{"meta", "results"}``，有候选出错或结果不对时返回 1。
    ``args.repeats`` 轮：每一轮把拷贝、默认配置和全部候选各测一次（轮与轮之间 GPU 的时钟、温度会变，
    交替测量让这种漂移落在所有候选上），每个配置取各轮的中位数。"""
    rl.runtime.require_gpu(script)
    flush = timing.L2Flusher(timing.l2_bytes())
    bench_ms = lambda f: timing.time_gpu([f], warmup=5, iters=40, flusher=flush).median_ms
    repeats = args.repeats
    method = METHOD if repeats == 1 else METHOD + f"; {repeats} interleaved rounds (copy, default, every candidate), median of the rounds"
    if args.compile:
        method += "; torch.compile (dynamic=False) of x.sum(1) validated the same way and timed in every round beside them"
    out = {"meta": {"device": torch.cuda.get_device_name(0),
                    "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
                    "torch": torch.__version__, **(meta or {}),
                    "command": recorded_command(script),
                    "method": method, "date": time.strftime("%Y-%m-%d")}, "results": []}
    bad = 0
    for dname in args.dtypes.split(","):
        dtype = getattr(torch, dname)
        for n in map(int, args.ns.split(",")):
            m = args.total_elems // n
            x = (torch.randn(m, n, device="cuda") + 0.5).to(dtype)
            y = torch.empty_like(x)
            ref = x.double().sum(1)
            tol = 1e-4 * ref.abs() + 1e-3 if dtype == torch.float32 else 2 ** -7 * ref.abs() + 1e-3
            nbytes = x.numel() * x.element_size()
            rows, timed = [], []
            for c in candidates(n):
                f = (lambda c=c: call(x, c))
                try:
                    ok = bool(((f().double() - ref).abs() <= tol).all())
                except Exception as exc:  # noqa: BLE001  记下来，不中断扫描
                    rows.append({**c, "ok": False, "error": str(exc)[:200]})
                    bad += 1
                    continue
                bad += not ok
                rows.append({**c, "ok": ok})
                if ok:
                    timed.append((rows[-1], f))
            comp = None
            if args.compile:
                torch._dynamo.config.cache_size_limit = 256
                comp = torch.compile(lambda t: t.sum(1), dynamic=False)
                if not bool(((comp(x).double() - ref).abs() <= tol).all()):
                    print(f"{dname} N={n}: torch.compile 结果不对 (wrong result)", file=sys.stderr)
                    comp = None
            copy_ms, default_ms, comp_ms, cand_ms = [], [], [], [[] for _ in timed]
            for _ in range(repeats):
                copy_ms.append(bench_ms(lambda: y.copy_(x)))
                default_ms.append(bench_ms(lambda: default_call(x)))
                if comp is not None:
                    comp_ms.append(bench_ms(lambda: comp(x)))
                for i, (_, f) in enumerate(timed):
                    cand_ms[i].append(bench_ms(f))
            med = lambda v: sorted(v)[len(v) // 2]
            copy = 2 * nbytes / (med(copy_ms) * 1e-3)
            for (row, _), t in zip(timed, cand_ms):
                row["gbps"] = nbytes / (med(t) * 1e-3) / 1e9
                row["frac_copy"] = row["gbps"] * 1e9 / copy
            for row in rows:
                if not row["ok"] and "error" not in row:           # 结果不对：不计时
                    row.update(gbps=float("nan"), frac_copy=float("nan"))
            default = nbytes / (med(default_ms) * 1e-3) / 1e9
            ranked = sorted((r for r in rows if r["ok"]), key=lambda r: -r["gbps"])
            compile_frac = nbytes / (med(comp_ms) * 1e-3) / copy if comp_ms else None
            print(f"{dname:9s} N={n:7d} M={m:6d} default {default * 1e9 / copy:5.1%}"
                  + (f" torch.compile {compile_frac:5.1%}" if compile_frac else ""), flush=True)
            for r in ranked[:5]:
                print(f"      {r['frac_copy']:6.1%}  {({k: v for k, v in r.items() if k not in ('ok', 'gbps', 'frac_copy')})}")
            out["results"].append({"dtype": dname, "N": n, "M": m, "copy_gbps": copy / 1e9,
                                   "default_frac_copy": default * 1e9 / copy,
                                   **({"compile_frac_copy": compile_frac} if compile_frac else {}), "candidates": rows})
            del x, y
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if bad else 0
