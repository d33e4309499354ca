"""CUDA C softmax（src/reduction_lab/cuda_kernels/softmax.cu）的调参驱动：先验证全部候选，再计时。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_softmax.py --json /tmp/cuda_softmax.json
    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_softmax.py --quick
    python scripts/tune_cuda_softmax.py --ptxas            # 不要 GPU：nvcc 编译每个候选，列出寄存器与溢出
    REDUCTION_LAB_MODE=sim python scripts/tune_cuda_softmax.py --smoke   # 在模拟器里走一遍流程（计时无意义）

候选（softmax.cu 开头列出的内核，每个 (内核, 线程数, PACKS) 是一个候选，PACKS 是每个线程的 16 字节包数）：
  rows   课程版，一行一个线程块，读三遍（只作对照）；
  warp   一个 warp（短行半个或四分之一个 warp，见 cuda_kernels.warp_row_lanes）一行，整行放在寄存器里；
  block  一个线程块一行：线程数 x PACKS 包放得下一行；
  split  一行切成几段（每段 线程数 x PACKS 包），一段一个线程块，各段经全局内存交换 (m, s)；
  cluster 一行交给一个线程块簇（softmax_cluster.cu 的 softmax_cluster_regs），各段经分布式共享内存交换 (m, s)
         （只在 gpu 模式、计算能力 9.0 以上的 GPU 上，N >= 16384）；
  pipe   同样的配置，但簇常驻、依次处理多行，每块把后面的行异步地预取进共享内存（softmax_cluster_pipe）。
以及 auto（包装函数按 cuda_kernels.SOFTMAX_CONFIGS 的选择）。

每个 (dtype, N)：M = total // N 行（默认 total = 2**26：float32 256 MB），输入 randn * 3 加每行不同的偏移，
行尾加 20（最大值落在最后一段）。
1. 验证：每个候选与 float64 的 torch.softmax 比较（float32：|y - ref| <= 1e-5 |ref| + 1e-9；
   16 位：<= (1.01 * 2**-8 + 1e-5) |ref| + 1e-9 + 最小次正规数），不符的候选记为 FAIL，不计时；
2. 计时：triton.testing.do_bench 的中位数（它在每次调用前写零 256 MB 清空 L2），对照同样字节数的
   y.copy_(x) 与 torch.softmax。GB/s = 2 * M * N * 元素字节数（读一遍 + 写一遍）/ 时间，%copy = 拷贝时间 / 时间。
总时长超过 --budget 秒（默认 230）之后，其余候选只验证、不计时（JSON 里记为 skipped）。
最后打印每个 (dtype, N) 最快的候选，以及由它们拼成、可以直接抄进 SOFTMAX_CONFIGS 的表；--json 写出全部结果。
有候选验证失败时退出码为 1。
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time

import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck

NS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
QUICK_NS = [512, 4096, 32768, 262144]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BLOCKS = (64, 128, 256, 512, 1024)
CHUNKS = (4096, 8192, 16384, 32768)
SPLIT_BLOCKS = (128, 256, 512, 1024)


def candidates(n: int, dtype: torch.dtype, quick: bool = False, clusters: bool = False,
               kernels=None) -> list[tuple[str, int, int | None]]:
    """(内核, 线程数, PACKS) 的列表：每个都是 softmax_plan 接受、不改内核的配置。``kernels``：只要这几种。"""
    out = _candidates(n, dtype, quick, clusters)
    return [c for c in out if kernels is None or c[0] in kernels]


def _candidates(n: int, dtype: torch.dtype, quick: bool, clusters: bool):
    vec = 16 // dtype.itemsize
    out = [("rows", ck.softmax_plan(1, n, dtype, "rows")["block_size"], None)]
    packs_ok = [p for p in (1, 2, 4, 8, 16) if p * vec <= 64]

    def ok(kernel, b, p):
        try:
            return ck.softmax_plan(1, n, dtype, kernel, b, p, clusters=clusters)["kernel"] == kernel
        except ValueError:
            return False

    need = max(1, n // vec)                               # 一行的包数（上取整到 2 的幂之前）
    for b in (32, 64, 128, 256) if not quick else (128,):        # 32、64：一块一两个 warp，先做完的 warp 不等同块的
        for p in packs_ok:
            if 32 * p >= need and ok("warp", b, p):
                lanes = ck.warp_row_lanes(n, dtype, p)        # 短行半个（四分之一个）warp 一行
                if lanes * p < 2 * need or (lanes == 32 and 32 * p < 4 * need):   # 空位不超过一半（32 个 lane：3/4）
                    out.append(("warp", b, p))
    for b in BLOCKS:
        for p in packs_ok:
            if b * p >= need and b * p < 2 * need and ok("block", b, p):
                out.append(("block", b, p))
    if n >= 8192:
        for chunk in CHUNKS:
            if chunk >= n:
                continue
            for b in SPLIT_BLOCKS:
                p = chunk // (b * vec)
                if p in packs_ok and b * p * vec == chunk and ok("split", b, p):
                    if not quick or b in (256, 512):
                        out.append(("split", b, p))
    if clusters and n >= 16384:
        # 簇内核：每个线程 8 到 64 个元素；簇大小是盖住整行的最小的 2 的幂，空位不超过一半
        for b in (128, 256, 512, 1024):
            for p in packs_ok:
                if p * vec < 8 or not ok("cluster", b, p):
                    continue
                c = ck.softmax_plan(1, n, dtype, "cluster", b, p, clusters=True)["cluster_size"]
                if c * b * p < 2 * need and (c > 1 or b * p < 2 * need):
                    out.append(("cluster", b, p))
                    if ok("pipe", b, p):
                        out.append(("pipe", b, p))
    return out


def make_input(m: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    dev = rl.DEVICE
    g = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn(m, n, generator=g, device=dev) * 3
    x += torch.linspace(-100, 100, m, device=dev).unsqueeze(1)
    x[:, -1] += 20
    return x.to(dtype)


def max_violation(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """max(|y - ref| / 容差)：不超过 1 为通过（nan 记为无穷大）。绝对项另加 dtype 的最小次正规数：float16 的
    输出小于 2^-14 时按 2^-24 的间隔舍入，相对容差管不住（bfloat16 与 float32 的这一项小于 1e-38）。"""
    rel = 1e-5 if dtype == torch.float32 else 1.01 * 2.0**-8 + 1e-5
    fi = torch.finfo(dtype)
    err = (y.double() - ref).abs()
    worst = (err / (rel * ref.abs() + 1e-9 + fi.tiny * fi.eps)).max().item()
    return float("inf") if worst != worst else worst


def save_rows(out: dict, path: str | None) -> None:
    """扫描每做完一个形状就把已有的结果整个写出（JSON），中途超时也不丢前面的形状；``path`` 为 None 时不写。"""
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)


def add_row(out: dict, row: dict, path: str | None) -> None:
    """一个形状测完：记进 ``out["rows"]``，释放缓存的显存（调用者先 ``del`` 掉这个形状的张量），再写出 JSON
    （:func:`save_rows`）。"""
    out["rows"].append(row)
    torch.cuda.empty_cache()
    save_rows(out, path)


def ptxas_report(dtypes) -> int:
    """nvcc 编译每个候选（全部 N 的并集），打印每个内核的寄存器数与溢出字节。"""
    from reduction_lab.occupancy import cuda_resources

    bad = 0
    for dname in dtypes:
        dtype = DTYPES[dname]
        variants = sorted({(b, p) for n in NS for k, b, p in candidates(n, dtype) if p is not None})
        for b, p in variants:
            defines = {"BLOCK_SIZE": b, "PACKS": p, **ck._DTYPE_DEFINES[dtype]}
            res = cuda_resources("softmax.cu", defines)
            cells = "  ".join(f"{k.replace('softmax_rows_', '')} {r.registers:3d}"
                              + (f" 溢出 {r.spill_stores} B" if r.spill_stores else "")
                              for k, r in sorted(res.items()) if k != "softmax_rows")
            bad += sum(r.spill_stores + r.spill_loads > 0 for r in res.values())
            print(f"{dname:9s} BLOCK_SIZE={b:5d} PACKS={p:3d}  寄存器：{cells}")
    print("没有溢出" if bad == 0 else f"{bad} 个内核有溢出")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--ns", default=None, help="逗号分隔的 N（默认 512 … 262144）")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--quick", action="store_true", help="4 个 N、较少的候选、较短的计时")
    ap.add_argument("--json", default=None, help="写出全部结果的 JSON 路径")
    ap.add_argument("--ptxas", action="store_true", help="只用 nvcc 编译候选，列出寄存器（不要 GPU）")
    ap.add_argument("--smoke", action="store_true", help="sim 模式：小形状走一遍验证与输出（计时无意义）")
    ap.add_argument("--budget", type=float, default=230.0, help="总时长预算（秒）：超出后其余候选只验证、不计时")
    ap.add_argument("--kernels", default=None, help="只试这几种内核（逗号分隔，例如 cluster,block）；默认全部")
    args = ap.parse_args()
    dtypes = args.dtypes.split(",")
    kernels = None if args.kernels is None else set(args.kernels.split(","))
    if kernels is not None and not kernels <= set(ck.SOFTMAX_KERNELS):
        ap.error(f"未知的内核 {sorted(kernels - set(ck.SOFTMAX_KERNELS))}（可选 {', '.join(ck.SOFTMAX_KERNELS)}）")
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"未知的 dtype {d!r}（可选 {', '.join(DTYPES)}）")
    if args.ptxas:
        return ptxas_report(dtypes)
    gpu = not args.smoke
    if gpu:
        rl.runtime.require_gpu("tune_cuda_softmax")
        import triton.testing

        props = torch.cuda.get_device_properties(0)
        device_name, sm_count = props.name, props.multi_processor_count
        clusters = props.major >= 9
    else:
        device_name, sm_count = "simulator", ck.NOMINAL_SM_COUNT
        clusters = False
        if args.total_elems == 1 << 26:
            args.total_elems = 8192
    ns = [int(v) for v in args.ns.split(",")] if args.ns else ([512, 8192] if args.smoke else
                                                                QUICK_NS if args.quick else NS)
    warmup, rep = (5, 20) if args.quick else (10, 40)

    def bench(fn) -> float:
        if gpu:
            return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median") * 1e-3
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def sync():
        if gpu:
            torch.cuda.synchronize()

    t0 = time.time()
    doc = {"meta": {"device": device_name, "sm_count": sm_count,
                    "torch": torch.__version__, "python": platform.python_version(),
                    "date": dt.datetime.now().isoformat(timespec="seconds"),
                    "total_elems": args.total_elems, "quick": args.quick, "smoke": args.smoke,
                    "command": "python scripts/tune_cuda_softmax.py " + " ".join(sys.argv[1:]),
                    "method": "validate every candidate against float64 torch.softmax, then time with "
                              "triton.testing.do_bench (median, L2 flushed); GB/s = 2*M*N*itemsize / time"},
           "results": [], "failures": [], "table": {}}
    failures = []
    for dname in dtypes:
        dtype = DTYPES[dname]
        best_rows, last_split = [], None
        print(f"\n{dname}：GB/s（% 拷贝）")
        for n in ns:
            m = max(1, args.total_elems // n)
            x = make_input(m, n, dtype, seed=n)
            y = torch.empty_like(x)
            ref = torch.softmax(x.double(), dim=-1)
            nbytes = 2 * x.numel() * x.element_size()
            auto = ck.softmax_plan(m, n, dtype, sm_count=sm_count, clusters=clusters)
            cands = candidates(n, dtype, args.quick, clusters, kernels)
            # 1. 验证全部候选
            valid = []
            for kernel, b, p in cands:
                name = f"{kernel}:{b}:{p}"
                try:
                    kw = {"kernel": kernel, "block_size": b, **({} if p is None else {"packs": p})}
                    ck.softmax(x, out=y, **kw)
                    sync()
                    v = max_violation(y, ref, dtype)
                except Exception as e:          # noqa: BLE001 —— 记下原因，继续别的候选
                    v, kw = float("inf"), {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                if v <= 1.0:
                    valid.append((kernel, b, p, v))
                else:
                    failures.append({"dtype": dname, "N": n, "candidate": name, "violation": v, **kw})
                    print(f"  FAIL {dname} N={n} {name}：误差 / 容差 = {v:.3g}")
            del ref
            # 2. 计时
            t_copy = bench(lambda: y.copy_(x))
            t_torch = bench(lambda: torch.softmax(x, dim=-1))
            entry = {"dtype": dname, "N": n, "M": m, "copy_gbps": nbytes / t_copy / 1e9,
                     "torch_gbps": nbytes / t_torch / 1e9, "torch_frac_copy": t_copy / t_torch,
                     "auto": {k: auto[k] for k in ("kernel", "block_size", "packs", "chunks")}, "candidates": []}
            for kernel, b, p, v in valid:
                kw = {"kernel": kernel, "block_size": b, **({} if p is None else {"packs": p})}
                if time.time() - t0 > args.budget:
                    entry.setdefault("skipped", []).append(f"{kernel}:{b}:{p}")
                    continue
                t = bench(lambda: ck.softmax(x, out=y, **kw))
                plan = ck.softmax_plan(m, n, dtype, kernel, b, p, sm_count, clusters=clusters)
                entry["candidates"].append({"kernel": kernel, "block_size": b, "packs": p, "chunks": plan["chunks"],
                                            **({"lanes": plan["lanes"]} if "lanes" in plan else {}),
                                            "gbps": nbytes / t / 1e9, "frac_copy": t_copy / t, "violation": v})
            t_auto = bench(lambda: ck.softmax(x, out=y))
            entry["auto"].update(gbps=nbytes / t_auto / 1e9, frac_copy=t_copy / t_auto)
            fast = [c for c in entry["candidates"] if c["kernel"] != "rows"]
            best = max(fast, key=lambda c: c["gbps"]) if fast else None
            entry["best"] = None if best is None else [n, best["kernel"], best["block_size"], best["packs"]]
            doc["results"].append(entry)
            doc["failures"] = failures
            save_rows(doc, args.json)                 # 中途超时也留下已做完的形状
            rows = next((c for c in entry["candidates"] if c["kernel"] == "rows"), None)
            print(f"N={n:7d} M={m:7d}  copy {entry['copy_gbps']:5.0f}  torch {entry['torch_frac_copy']:4.0%}  "
                  f"rows {rows['frac_copy'] if rows else float('nan'):4.0%}  "
                  f"auto {entry['auto']['frac_copy']:4.0%} ({auto['kernel']} {auto['block_size']}x{auto['packs']})")
            for c in sorted(entry["candidates"], key=lambda c: -c["gbps"])[:6]:
                print(f"    {c['kernel']:5s} B={c['block_size']:4d} P={c['packs'] or '-':>2}  chunks={c['chunks']:3d}  "
                      f"{c['gbps']:5.0f} GB/s  {c['frac_copy']:4.0%}")
            if best is not None:
                best_rows.append(entry["best"])
            splits = [c for c in fast if c["kernel"] == "split"]
            if splits:
                c = max(splits, key=lambda c: c["gbps"])
                last_split = [None, "split", c["block_size"], c["packs"]]
            del x, y
            if gpu:
                torch.cuda.empty_cache()
        if best_rows:
            if best_rows[-1][1] in ("split", "cluster"):
                best_rows[-1][0] = None                   # 最后一项不限列数：split 或 cluster（放不下时 auto 改用 split）
            elif last_split is not None:
                best_rows.append(last_split)
            key = str(DTYPES[dname].itemsize)
            doc["table"].setdefault(key, best_rows)
            print(f"\n{dname} 的 SOFTMAX_CONFIGS[{key}] 建议（每个 N 最快的候选）：")
            for r in best_rows:
                print(f"    {tuple(r)},")
    doc["failures"] = failures
    doc["meta"]["elapsed_s"] = round(time.time() - t0, 1)
    print(f"\n用时 {doc['meta']['elapsed_s']} 秒；验证失败 {len(failures)} 个")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
        print(f"写出 {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
