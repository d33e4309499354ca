"""在 H200 上检验并计时线程块簇 softmax（src/reduction_lab/cuda_kernels/softmax_cluster.cu）。

    REDUCTION_LAB_MODE=gpu python scripts/gpu_cluster_softmax.py --out docs/data/h200_cluster_softmax.json

1. 验证（计时之前，全部配置）：与 float64 的 torch.softmax 比对。float32 与 bfloat16，
   N = 16384 … 262144、奇数 N = 100003、bfloat16 的 N = 2**20（16 块 x 128 KiB）；float32 的 N = 2**20
   放不进 16 块的共享内存，记为 "does not fit"。每个形状都验证自动选择的簇大小和其余放得下的簇大小。
   输入是 randn * 3 加每行不同的偏移（-100 … 100），行尾再加 20：最大值落在最后一块里。
2. 计时：每个 (dtype, N) 取 M = total // N 行（默认 total = 2**26 个元素：float32 256 MB、bfloat16 128 MB），
   输入小于 3 倍 L2 时在几份输入之间轮换。两种计时方法：
   * do_bench：triton.testing.do_bench 的中位数（它在每次调用前写零 256 MB 来清 L2）；
   * harness：reduction_lab.bench.timing（每次调用前只读地扫过 4 倍 L2，CUDA 事件，中位数）。
   对手：设备拷贝 y.copy_(x)（同样的字节数，带宽上限）、torch.softmax、
   reduction_lab.softmax(x, backend="triton")、softmax_cluster（自动选择与其余簇大小）。
   GB/s = 2 * M * N * 元素字节数（读一次 + 写一次）/ 中位时间；%copy = 拷贝时间 / 被测时间。
3. 每个配置单独捕获异常（编译失败、启动失败、结果不符），记进 JSON，进程不会因此退出；
   一次启动把 CUDA 上下文弄坏之后，其后的配置都会记成错误。总时长预算 --budget 秒（默认 160），
   超出后剩下的计时记为 skipped。

JSON：{"meta", "method", "validation": [...], "timing": [...], "summary": [...]}。
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import sys
import time
import traceback

import torch

import reduction_lab as rl
from reduction_lab.cuda_kernels.cluster import CLUSTER_SIZES, cluster_plan, softmax_cluster, summary_table

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NS = {"float32": [16384, 32768, 65536, 100003, 131072, 262144, 1 << 20],
      "bfloat16": [16384, 32768, 65536, 100003, 131072, 262144, 1 << 20]}
QUICK_NS = {"float32": [32768, 100003, 262144], "bfloat16": [32768, 262144, 1 << 20]}
VALIDATE_ROWS = 6


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:600]}"


def make_input(m: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, n, generator=g, device="cuda") * 3
    x += torch.linspace(-100, 100, m, device="cuda").unsqueeze(1)
    x[:, -1] += 20
    return x.to(dtype)


def compare(y: torch.Tensor, x: torch.Tensor) -> tuple[bool, float, str]:
    """容差：float32 |y - ref| <= 1e-8 + 1e-4 |ref|；bfloat16 <= 1e-7 + 2**-8 |ref|（输出舍入 2**-9）。"""
    ref = torch.softmax(x.double(), dim=-1)
    if y.dtype != x.dtype or y.shape != x.shape:
        return False, math.nan, f"dtype/shape {y.dtype} {tuple(y.shape)}"
    err = (y.double() - ref).abs()
    rel = 1e-4 if x.dtype == torch.float32 else 2.0 ** -8
    atol = 1e-8 if x.dtype == torch.float32 else 1e-7
    bad = ~(err <= atol + rel * ref.abs())
    max_rel = float((err / ref.abs().clamp_min(1e-30)).max())
    if bool(bad.any()):
        i = tuple(int(v) for v in bad.nonzero()[0])
        return False, max_rel, f"{int(bad.sum())} bad, e.g. {i}: got {float(y[i]):.6g}, ref {float(ref[i]):.6g}"
    return True, max_rel, "ok"


def cluster_choices(n: int, dtype: torch.dtype) -> tuple[int | None, list[int], str | None]:
    """(自动选择的簇大小, 放得下的全部簇大小, 放不下时的说明)。"""
    try:
        auto = cluster_plan(n, dtype).cluster_size
    except ValueError as e:
        return None, [], str(e)
    fits = []
    for c in CLUSTER_SIZES:
        try:
            cluster_plan(n, dtype, cluster_size=c)
            fits.append(c)
        except ValueError:
            pass
    return auto, fits, None


def validate(ns: dict, log) -> list[dict]:
    rows = []
    for dname, dtype in DTYPES.items():
        for n in ns[dname]:
            auto, fits, why = cluster_choices(n, dtype)
            if auto is None:
                rows.append({"dtype": dname, "N": n, "cluster_size": None, "ok": None, "status": "does not fit",
                             "detail": why})
                log(f"  {dname:8s} N={n:>8d}: does not fit")
                continue
            m = 4 if n >= (1 << 20) else VALIDATE_ROWS
            x = make_input(m, n, dtype, seed=n % 1000)
            x[1, 0] += 40                                        # 另一行的最大值在第一块的行首
            for c in fits:
                p = cluster_plan(n, dtype, cluster_size=c)
                row = {"dtype": dname, "N": n, "M": m, "cluster_size": c, "auto": c == auto, **{
                    k: v for k, v in p.to_dict().items() if k in ("block_size", "shared_bytes", "ctas_per_sm")}}
                try:
                    y = softmax_cluster(x, cluster_size=c)
                    torch.cuda.synchronize()
                    ok, max_rel, detail = compare(y, x)
                    row.update(ok=ok, status="ok" if ok else "mismatch", max_rel_err=max_rel, detail=detail)
                except Exception as e:  # noqa: BLE001 —— 每个配置单独记录，继续下一个
                    row.update(ok=False, status="error", detail=_err(e))
                rows.append(row)
                log(f"  {dname:8s} N={n:>8d} cluster={c:>2d}{'*' if c == auto else ' '}: {row['status']} "
                    f"{row.get('max_rel_err', '')!s:.10s} {row['detail'] if row['status'] != 'ok' else ''}")
            # 行首不在 16 字节边界上（奇数行距的切片）：走半截向量与逐元素写的路径
            if n < (1 << 20):
                base = make_input(3, n + 3, dtype, seed=1)
                xs = base[:, 1:n + 1]
                row = {"dtype": dname, "N": n, "M": 3, "cluster_size": auto, "auto": True, "variant": "misaligned"}
                try:
                    y = softmax_cluster(xs)
                    torch.cuda.synchronize()
                    ok, max_rel, detail = compare(y, xs)
                    row.update(ok=ok, status="ok" if ok else "mismatch", max_rel_err=max_rel, detail=detail)
                except Exception as e:  # noqa: BLE001
                    row.update(ok=False, status="error", detail=_err(e))
                rows.append(row)
                log(f"  {dname:8s} N={n:>8d} misaligned : {row['status']} {row['detail'] if row['status'] != 'ok' else ''}")
    return rows


class Timer:
    def __init__(self, budget_s: float, start: float, iters: int):
        from reduction_lab.bench import timing

        self.timing = timing
        self.l2 = timing.l2_bytes()
        self.flusher = timing.L2Flusher(self.l2)
        self.budget_s, self.start, self.iters = budget_s, start, iters

    def over_budget(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s

    def measure(self, calls) -> dict:
        import triton.testing

        k = len(calls)
        state = {"i": 0}

        def rotating():
            state["i"] += 1
            return calls[state["i"] % k]()

        q = triton.testing.do_bench(rotating, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
        h = self.timing.time_gpu(calls, warmup=3, iters=self.iters, flusher=self.flusher)
        return {"do_bench_ms": q[0], "do_bench_p20_ms": q[1], "do_bench_p80_ms": q[2],
                "harness_ms": h.median_ms, "harness_p20_ms": h.p20_ms, "harness_p80_ms": h.p80_ms}


def time_all(ns: dict, total: int, timer: Timer, validated: set, log) -> list[dict]:
    rows = []
    for dname, dtype in DTYPES.items():
        esize = torch.empty((), dtype=dtype).element_size()
        for n in ns[dname]:
            auto, fits, why = cluster_choices(n, dtype)
            m = max(1, total // n)
            nbytes = 2 * m * n * esize                  # 读 M*N 个元素 + 写 M*N 个元素
            copies = timer.timing.rotation_count(m * n * esize, timer.l2, max_copies=8)
            try:
                xs = [make_input(m, n, dtype, seed=i) for i in range(copies)]
                ys = [torch.empty_like(x) for x in xs]
            except Exception as e:  # noqa: BLE001
                rows.append({"dtype": dname, "N": n, "M": m, "impl": "all", "status": "error", "detail": _err(e)})
                continue
            impls = [("copy", None, lambda i: ys[i].copy_(xs[i])),
                     ("torch", None, lambda i: torch.softmax(xs[i], dim=-1)),
                     ("triton", None, lambda i: rl.softmax(xs[i], backend="triton"))]
            for c in ([auto] if auto else []) + [c for c in fits if c != auto]:
                impls.append((f"cluster{c}", c, lambda i, c=c: softmax_cluster(xs[i], cluster_size=c, out=ys[i])))
            copy_ms = {}
            for name, c, fn in impls:
                row = {"dtype": dname, "N": n, "M": m, "impl": name, "bytes": nbytes, "rotating_inputs": copies}
                if c is not None:
                    p = cluster_plan(n, dtype, cluster_size=c)
                    row.update(cluster_size=c, auto=c == auto, block_size=p.block_size, shared_bytes=p.shared_bytes)
                    if (dname, n, c) not in validated:
                        row.update(status="skipped", detail="not validated")
                        rows.append(row)
                        continue
                if timer.over_budget():
                    row.update(status="skipped", detail="time budget")
                    rows.append(row)
                    continue
                try:
                    if name == "triton":                 # 计时前先比对一次（triton 的 softmax 在这里也要对）
                        ok, _, detail = compare(fn(0)[:4], xs[0][:4])
                        if not ok:
                            raise AssertionError(detail)
                    t = timer.measure([lambda i=i: fn(i) for i in range(copies)])
                    torch.cuda.synchronize()
                    row.update(status="ok", **t)
                    for key in ("do_bench", "harness"):
                        row[f"{key}_gbps"] = nbytes / (t[f"{key}_ms"] * 1e-3) / 1e9
                        if name == "copy":
                            copy_ms[key] = t[f"{key}_ms"]
                        elif key in copy_ms:
                            row[f"{key}_pct_copy"] = 100.0 * copy_ms[key] / t[f"{key}_ms"]
                except Exception as e:  # noqa: BLE001
                    row.update(status="error", detail=_err(e))
                rows.append(row)
                if row["status"] == "ok":
                    log(f"  {dname:8s} N={n:>8d} M={m:>6d} {name:10s} do_bench {row['do_bench_gbps']:7.0f} GB/s "
                        f"({row.get('do_bench_pct_copy', 100.0):5.1f}% copy)  harness {row['harness_gbps']:7.0f} GB/s "
                        f"({row.get('harness_pct_copy', 100.0):5.1f}%)")
                else:
                    log(f"  {dname:8s} N={n:>8d} {name:10s} {row['status']}: {row.get('detail', '')}")
            impls = xs = ys = None                     # 释放这个形状的输入输出
            torch.cuda.empty_cache()
    return rows


def summarize(timing_rows: list[dict]) -> list[dict]:
    """每个 (dtype, N)：拷贝、torch、triton、自动选择的簇、最快的簇（do_bench 与 harness 两种方法）。"""
    out = []
    keys = sorted({(r["dtype"], r["N"]) for r in timing_rows}, key=lambda k: (k[0], k[1]))
    for dname, n in keys:
        rs = [r for r in timing_rows if (r["dtype"], r["N"]) == (dname, n) and r.get("status") == "ok"]
        if not rs:
            continue
        s = {"dtype": dname, "N": n, "M": rs[0]["M"]}
        for r in rs:
            if r["impl"] in ("copy", "torch", "triton"):
                s[f"{r['impl']}_gbps"] = round(r["do_bench_gbps"], 1)
                s[f"{r['impl']}_harness_gbps"] = round(r["harness_gbps"], 1)
        clusters = [r for r in rs if r["impl"].startswith("cluster")]
        auto = [r for r in clusters if r.get("auto")]
        if auto:
            s.update(auto_cluster=auto[0]["cluster_size"], auto_gbps=round(auto[0]["do_bench_gbps"], 1),
                     auto_pct_copy=round(auto[0].get("do_bench_pct_copy", math.nan), 1),
                     auto_harness_pct_copy=round(auto[0].get("harness_pct_copy", math.nan), 1))
        if clusters:
            best = max(clusters, key=lambda r: r["do_bench_gbps"])
            s.update(best_cluster=best["cluster_size"], best_gbps=round(best["do_bench_gbps"], 1),
                     best_pct_copy=round(best.get("do_bench_pct_copy", math.nan), 1),
                     best_harness_pct_copy=round(best.get("harness_pct_copy", math.nan), 1))
        out.append(s)
    return out


def _versions() -> dict:
    import importlib.metadata as md

    v = {}
    for dist in ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            v[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="validate and time the thread-block-cluster softmax on a Hopper GPU")
    ap.add_argument("--out", required=True, help="JSON 输出文件 (output JSON file)")
    ap.add_argument("--total", type=int, default=2 ** 26, help="每个形状的元素数 M*N（默认 2**26）")
    ap.add_argument("--quick", action="store_true", help="只跑 3 个 N / dtype (a few shapes only)")
    ap.add_argument("--budget", type=float, default=160.0, help="总时长预算（秒），超出后跳过剩下的计时")
    ap.add_argument("--iters", type=int, default=50, help="harness 方法每个配置的计时次数")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    if rl.MODE != "gpu" or torch.cuda.get_device_capability()[0] < 9:
        print("需要 gpu 模式与计算能力 9.0 以上的 GPU（线程块簇）(needs gpu mode and a Hopper GPU)", file=sys.stderr)
        return 2
    ns = QUICK_NS if args.quick else NS
    props = torch.cuda.get_device_properties(0)
    doc = {"meta": {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "device": props.name, "sm_count": props.multi_processor_count,
                    "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0),
                    "shared_per_block_optin": int(getattr(props, "shared_memory_per_block_optin", 0) or 0),
                    "python": platform.python_version(), "versions": _versions(), "argv": sys.argv[1:]},
           "method": {"bytes": "2 * M * N * element_size (read once + write once)",
                      "pct_copy": "copy time / impl time, copy = y.copy_(x) of the same bytes, same method",
                      "do_bench": "triton.testing.do_bench median (writes 256 MB of zeros before each call)",
                      "harness": "reduction_lab.bench.timing.time_gpu median (read-only sweep of 4x L2 before "
                                 "each call, CUDA events)",
                      "total_elems": args.total,
                      "tolerance": {"float32": "|y - ref| <= 1e-8 + 1e-4 |ref|",
                                    "bfloat16": "|y - ref| <= 1e-7 + 2**-8 |ref|"},
                      "reference": "torch.softmax in float64 of the same input"}}
    print("1. validation (float64 reference)", flush=True)
    doc["validation"] = validate(ns, lambda s: print(s, flush=True))
    validated = {(r["dtype"], r["N"], r["cluster_size"]) for r in doc["validation"]
                 if r.get("ok") and "variant" not in r}
    print("2. timing", flush=True)
    try:
        timer = Timer(args.budget, start, args.iters)
        doc["timing"] = time_all(ns, args.total, timer, validated, lambda s: print(s, flush=True))
    except Exception as e:  # noqa: BLE001 —— 计时整体失败也要写出验证结果
        doc["timing"] = [{"status": "error", "detail": _err(e), "traceback": traceback.format_exc()[-2000:]}]
    doc["summary"] = summarize([r for r in doc["timing"] if "impl" in r])
    doc["meta"]["elapsed_s"] = round(time.perf_counter() - start, 1)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("3. summary: do_bench GB/s (read + write); the page docs/cuda/cluster-softmax.md prints this table")
    print(summary_table(doc))
    print("harness method (read-only L2 sweep), % of copy for the automatic / fastest cluster:")
    for s in doc["summary"]:
        if "auto_cluster" in s:
            print(f"  {s['dtype']:9s} N={s['N']:>8d}: auto C={s['auto_cluster']} {s['auto_harness_pct_copy']:.1f}%, "
                  f"best C={s['best_cluster']} {s['best_harness_pct_copy']:.1f}%")
    bad = [r for r in doc["validation"] if r.get("ok") is False]
    print(f"validation: {sum(1 for r in doc['validation'] if r.get('ok'))} ok, {len(bad)} failed; "
          f"wrote {args.out} in {doc['meta']['elapsed_s']} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
