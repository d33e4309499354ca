"""在 GPU 上扫描 TileLang 行求和与 softmax 的参数，打印 GB/s。

softmax（``--kernel softmax``）：float32 与 bfloat16，N = 512 … 262144（M = total-elems / N；``--ns`` 可以加上
1048576，那时 M = 64），每个 (dtype, N) 试几种配置（默认配置与 row / online / cluster 路径的少数变体），
每个配置先与 float64 的参考比对（不符就不计时），再用 ``triton.testing.do_bench`` 计时，旁边是同样字节数的
``y.copy_(x)``。N >= 16384 时 cluster 路径（每段在寄存器里）扫一个小网格：n_seg 取 2、4、8、16，threads 取
128、256、512、1024，只留一段放得进寄存器的组合（每个线程至多 64 个、一段至多 32768 个元素；放不下的 N 会打印出来）；
N >= 32768 时另有 cluster_smem 路径（段在共享内存里）试 n_seg 8、16 与 threads 256、512（一段至多 192 KiB）；
split 路径（不用簇、两次启动）试 threads 256、512 与每个线程 32、64 个元素（段数 = ceil(N / 段长)）。
这几个网格可以用 ``--cluster-segs``、``--cluster-threads``、``--smem-segs``、``--split-grid`` 缩小（空串：不试那条路径），
例如只在 16 位 N = 16384、32768 上比较两块、四块的簇与默认配置：

    REDUCTION_LAB_MODE=gpu python scripts/tune_tilelang.py --kernel softmax --dtypes bfloat16,float16 \
        --ns 16384,32768 --cluster-segs 2,4 --cluster-threads 256,512 --smem-segs '' --split-grid '' --json out.json

计时调用的是编译好的内核（参数事先选好、stats 事先分配），每个 (dtype, N) 的最佳配置另测一次经
``tk.softmax`` 的整个调用（``call_gbs``）。打印表格、按 ``tilelang_kernels.SOFTMAX_TABLE`` 的格式打印每个
(元素字节数, N) 的最佳配置，``--json`` 写出全部结果。全部候选先并行编译（--jobs）；H200 上全程几分钟
（``--quick``：每个 (dtype, N) 只测默认配置）。长行那几项单独跑：

    REDUCTION_LAB_MODE=gpu python scripts/tune_tilelang.py --kernel softmax --ns 65536,131072,262144,1048576 \
        --dtypes float32,bfloat16 --json out.json

    REDUCTION_LAB_MODE=gpu python scripts/tune_tilelang.py --kernel softmax [--quick] [--dtypes float32,bfloat16]
        [--ns 512,...,262144] [--jobs 12] [--json out.json]

行求和（默认 ``--kernel sum``）：

    REDUCTION_LAB_MODE=gpu python scripts/tune_tilelang.py [--total-elems 67108864]
        [--ns 512,4096,262144] [--threads 128,256,512] [--ept 16,32] [--splits 1,4,16]
        [--jobs 8] [--json out.json]

每个配置要编译一次（几秒）：先用 --jobs 个线程并行编译全部候选（写进 TileLang 的磁盘缓存，
``TILELANG_CACHE_DIR`` 可以指定位置），计时阶段再从缓存取。全部 10 种 N 一次跑完约需十几分钟，
可以用 --ns 分几次跑。

输入 fp32，M x N = total-elems。行求和按「读的字节数」M*N*4 计，softmax 按「读+写」2*M*N*4 计。
输入小于约 240 MB 时轮换使用几份输入（避开 L2 缓存）。每个配置先与 float64 的参考结果比对，
再计时（CUDA 事件，中位数）。同一次运行里测设备拷贝带宽（读+写）、torch.sum 和 torch.softmax 作对照。
结果用来确定 reduction_lab/tilelang_kernels/__init__.py 里 default_config 的默认参数。
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import time

import reduction_lab as rl
import torch

from reduction_lab import tilelang_kernels as tk

from _command import recorded_command


def bench(fns, iters=30, warmup=3):
    """fns：轮换调用的一组函数（每份输入一个）。所有次运行连续排进流里，最后同步一次。
    返回每次调用的中位数秒数。"""
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i, (s, e) in enumerate(zip(starts, ends)):
        s.record()
        fns[i % len(fns)]()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2] * 1e-3


def next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def candidates(M, N, threads_list, ept_list, splits):
    """(block_m, block_n, threads, n_split, defer_reduce) 的候选。"""
    seen = set()
    default = tk.default_config("reduce_sum", M, N, gpu=True)
    out = [dict(default)]
    seen.add(tuple(sorted(default.items())))
    for threads, ept in itertools.product(threads_list, ept_list):
        tile = threads * ept
        block_n = min(next_pow2(N), tile)
        block_m = max(1, tile // block_n)
        for ns in splits:
            if ns > 1 and N < ns * block_n:
                continue
            cfg = dict(block_m=block_m, block_n=block_n, threads=threads, n_split=ns, defer_reduce=True)
            key = tuple(sorted(cfg.items()))
            if key not in seen:
                seen.add(key)
                out.append(cfg)
    # 课程写法（每块都做一次块内归约）作对照
    out.append(dict(default, defer_reduce=False))
    return out


def prewarm(x, cfgs, jobs):
    """并行编译全部候选（以及切分时第二阶段的内核），结果进 TileLang 的磁盘缓存。"""
    M, N = x.shape
    target = tk.current_target(x.device)
    work = []
    for cfg in cfgs:
        work.append(("reduce_sum", (M, N), cfg))
        if cfg["n_split"] > 1:
            work.append(("reduce_sum", (M, cfg["n_split"]),
                         tk.default_config("reduce_sum", M, cfg["n_split"], gpu=True)))

    def one(item):
        kernel, shape, cfg = item
        tk._jit_for(kernel, target).compile(torch.empty(*shape, device="meta"), cpu=False, **cfg)

    errors, seconds = compile_all(work, one, lambda item: f"{item[0]} {item[1]} {item[2]}", jobs)
    print(f"  预编译 {len(work)} 个内核：{seconds:.0f} s，失败 {len(errors)} {errors[:3]}", flush=True)


def compile_all(items, compile_one, describe, jobs):
    """用 ``jobs`` 个线程对每一项调用 ``compile_one``（编译结果进 TileLang 的磁盘缓存）。
    返回 (出错的项的说明, 用时秒数)；出错的配置在验证或计时阶段会再报一次。"""
    from concurrent.futures import ThreadPoolExecutor

    def one(item):
        try:
            compile_one(item)
        except Exception as exc:  # noqa: BLE001
            return f"{describe(item)}: {type(exc).__name__}: {str(exc)[:200]}"
        return None

    t0 = time.time()
    with ThreadPoolExecutor(jobs) as pool:
        errors = [e for e in pool.map(one, items) if e]
    return errors, time.time() - t0


SOFTMAX_NS = "512,1024,2048,4096,8192,16384,32768,65536,131072,262144"


#: cluster 路径（每段在寄存器里）的扫描网格
CLUSTER_SEGS = (2, 4, 8, 16)
CLUSTER_THREADS = (128, 256, 512, 1024)
#: cluster_smem 路径（每段在共享内存里）的扫描网格：寄存器只放一个向量，段长只受共享内存限制
SMEM_SEGS = (8, 16)
SMEM_THREADS = (256, 512)
#: split 路径的扫描网格：(threads, 每个线程的元素数)
SPLIT_GRID = ((256, 32), (256, 64), (512, 32), (512, 64))
#: 命令行参数的默认值（main 按参数改写上面几个网格；再次调用 main 仍从这里的默认值开始）
_GRID_DEFAULTS = dict(cluster_segs=CLUSTER_SEGS, cluster_threads=CLUSTER_THREADS, smem_segs=SMEM_SEGS,
                      split_grid=SPLIT_GRID)


def _accepted(M, N, elem, cfgs):
    """tk._resolve 接受的候选（一段放不下、网格太大等组合不列入）。"""
    out = []
    for cfg in cfgs:
        try:
            out.append(tk._resolve("softmax", M, N, True, cfg, elem_size=elem))
        except (ValueError, TypeError):
            pass
    return out


def split_grid(M, N, elem):
    """split 路径的候选：段长 = threads * 每个线程的元素数，block_n = vec * threads。"""
    vec = 16 // elem
    return _accepted(M, N, elem, [dict(path="split", block_m=1, block_n=vec * threads, threads=threads,
                                       n_seg=-(-N // (threads * per)))
                                  for threads, per in SPLIT_GRID if -(-N // (threads * per)) >= 2])


def cluster_grid(M, N, elem, min_blocks=(0,)):
    """cluster 路径的候选：n_seg x threads x min_blocks，段长取 16 字节向量 x threads 的倍数（block_n = vec * threads）；
    一段放不进寄存器的组合、min_blocks * threads 超过每个 SM 线程数的组合由 tk._resolve 拒绝、不列入。
    min_blocks：``__launch_bounds__`` 的第二个参数（0 = 不加；2 = 让 ptxas 把寄存器压到每个 SM 放得下 2 块）。
    返回 (候选, 被拒绝的组合及原因)。"""
    out, refused = [], []
    vec = 16 // elem
    for n_seg, threads, mb in itertools.product(CLUSTER_SEGS, CLUSTER_THREADS, min_blocks):
        cfg = dict(path="cluster", block_m=1, block_n=vec * threads, threads=threads, n_seg=n_seg, min_blocks=mb)
        try:
            out.append(tk._resolve("softmax", M, N, True, cfg, elem_size=elem))
        except (ValueError, TypeError) as exc:
            if not mb:
                refused.append((n_seg, threads, str(exc).split(" (")[0]))
    return out, refused


def smem_grid(M, N, elem):
    """cluster_smem 路径的候选：n_seg x threads（block_n = vec * threads）；一段放不进共享内存的组合不列入。"""
    vec = 16 // elem
    return _accepted(M, N, elem, [dict(path="cluster_smem", block_m=1, block_n=vec * threads, threads=threads,
                                       n_seg=n_seg) for n_seg, threads in itertools.product(SMEM_SEGS, SMEM_THREADS)])


def softmax_candidates(M, N, elem, min_blocks=(0,)):
    """(dtype, N) 的候选配置：默认配置在前，另加少数变体（编译次数决定了脚本的总时间）。"""
    default = tk.default_config("softmax", M, N, gpu=True, elem_size=elem)
    out = [default]

    def add(**cfg):
        full = dict(path="row", block_m=1, block_n=next_pow2(N), threads=256, n_seg=1)
        full.update(cfg)
        try:
            full = tk._resolve("softmax", M, N, True, full, elem_size=elem)
        except (ValueError, TypeError):
            return
        if full not in out:
            out.append(full)

    bn = next_pow2(N)
    if bn <= 32768:
        elems = default["block_m"] * default["block_n"]
        t = default["threads"]
        for threads, per_block in ((t * 2, elems), (t, elems * 2), (max(32, t // 2), elems)):
            if threads <= 1024 and per_block // threads <= 64 and per_block >= bn:
                add(path="row", block_m=max(1, per_block // bn), block_n=bn, threads=threads)
    if bn >= 16384:
        for cfg in cluster_grid(M, N, elem, min_blocks)[0]:
            add(**cfg)
    if bn >= 32768:
        for cfg in smem_grid(M, N, elem):
            add(**cfg)
        for cfg in split_grid(M, N, elem):
            add(**cfg)
        add(path="online", block_n=4096, threads=256)      # 两遍读的对照
    return out


def softmax_table_entry(cfg, N):
    """把一个配置写成 SOFTMAX_TABLE 的一项。"""
    if cfg["path"] == "row":
        return dict(path="row", threads=cfg["threads"], elems=cfg["block_m"] * cfg["block_n"])
    if cfg["path"] == "grid":
        return dict(path="grid", threads=cfg["threads"], seg=N // cfg["n_seg"], min_blocks=cfg["min_blocks"])
    entry = dict(path=cfg["path"], threads=cfg["threads"], block_n=cfg["block_n"])
    if cfg["path"] in ("cluster", "cluster_smem"):
        entry["n_seg"] = cfg["n_seg"]
    if cfg.get("min_blocks"):
        entry["min_blocks"] = cfg["min_blocks"]
    if cfg["path"] == "split":
        entry["seg"] = tk.cluster_seg_len(N, cfg["n_seg"], cfg["block_n"], cfg["threads"])
    return entry


def kernel_call(x, y, cfg):
    """只启动编译好的内核：参数事先按 tk._resolve 选好，cluster 的 stats 事先分配。"""
    full = tk._resolve("softmax", x.shape[0], x.shape[1], True, dict(cfg), elem_size=x.element_size())
    if full["path"] == "grid":                   # 常驻网格：每次调用前把槽位填成哨兵（与 tk.softmax 相同）
        slots = torch.empty((x.shape[0], full["n_seg"], 2), dtype=torch.float32, device=x.device)

        def grid_call():
            slots.fill_(-1.0)
            tk._run_grid(x, y, slots, full)
        grid_call()
        return grid_call
    if full["path"] in tk._SEGMENTED:
        stats = torch.empty((x.shape[0], full["n_seg"], 2), dtype=torch.float32, device=x.device)
    else:
        stats = tk._no_stats(x.device)
    phases = tk.softmax_phases(full["path"], gpu=True)
    for p in phases:                             # 第一次调用编译（或取缓存）并记下编译好的内核
        tk._run_softmax(x, y, stats, full, p)

    def call():
        for p in phases:
            tk._run_softmax(x, y, stats, full, p)
    return call


def prewarm_softmax(jobs_list, jobs):
    """并行编译 (dtype, M, N, 配置) 的全部内核（进 TileLang 的磁盘缓存）。"""
    target = tk.current_target(torch.device("cuda", torch.cuda.current_device()))
    jit = tk._jit_for("softmax", target)

    def one(item):
        dtype, M, N, cfg = item
        x = torch.empty(M, N, dtype=getattr(torch, dtype), device="meta")
        stats = torch.empty((M if cfg["path"] in tk._SEGMENTED else 1, cfg["n_seg"], 2), device="meta")
        if cfg["path"] == "grid":                # 常驻网格是另一个内核
            sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            tk._jit_for("softmax_grid", target).compile(x, x, stats, **tk.grid_kwargs(M, N, cfg, dtype, sms))
            return
        for phase in tk.softmax_phases(cfg["path"], gpu=True):
            jit.compile(x, x, stats, cpu=False, dtype=dtype, phase=phase, **cfg)

    errors, seconds = compile_all(jobs_list, one, lambda item: f"{item[0]} N={item[2]} {item[3]}", jobs)
    print(f"# 预编译 {len(jobs_list)} 个 softmax 内核：{seconds:.0f} s，失败 {len(errors)}", flush=True)
    for e in errors:
        print(f"#   {e}", flush=True)


def tune_softmax(args):
    from triton.testing import do_bench

    dtypes = args.dtypes.split(",")
    ns = [int(v) for v in (args.ns or SOFTMAX_NS).split(",")]
    plan, no_cluster = [], {}
    for dtype in dtypes:
        elem = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
        for n in ns:
            m = args.total_elems // n
            cfgs = softmax_candidates(m, n, elem, tuple(int(v) for v in args.min_blocks.split(",")))
            plan.append((dtype, m, n, cfgs[:1] if args.quick else cfgs))
            if n >= 32768 and not cluster_grid(m, n, elem)[0]:
                n_seg, threads, why = cluster_grid(m, n, elem)[1][-1]
                no_cluster[(dtype, n)] = f"n_seg={n_seg}, threads={threads}: {why}"
                print(f"# {dtype} N={n}: cluster 路径的网格里没有放得进寄存器的组合，只测 online / 默认配置"
                      f"（最大的组合 {no_cluster[(dtype, n)]}）", flush=True)
    if args.jobs > 0:
        prewarm_softmax([(d, m, n, c) for d, m, n, cfgs in plan for c in cfgs], args.jobs)
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}；GB/s 按读+写 2*M*N*元素字节数计，do_bench 中位数；copy 是同样字节数的 y.copy_(x)",
          flush=True)
    results, best = [], {}
    t_start = time.time()
    for dtype, m, n, cfgs in plan:
        torch.manual_seed(0)
        x = (torch.randn(m, n, device="cuda") * 4).to(getattr(torch, dtype))
        x[0, : n // 2] = float("-inf")          # 一行前一半被遮住
        if m > 1:
            x[1] -= 1000.0                      # 一行全是很大的负数
        if m > 2:
            x[2, n // 3:] += 100.0              # 全行的最大值在后面几段：各段的 (m, s) 相差很远
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), 1)
        atol, rtol = (1e-6, 1e-4) if dtype == "float32" else (1e-5, 1.6e-2)
        nbytes = 2 * x.numel() * x.element_size()
        copy_ms = do_bench(lambda: y.copy_(x))
        row = {"dtype": dtype, "N": n, "M": m, "copy_gbs": nbytes / copy_ms / 1e6, "configs": []}
        if (dtype, n) in no_cluster:
            row["no_cluster"] = no_cluster[(dtype, n)]
        for cfg in cfgs:
            rec = {"cfg": cfg}
            try:
                t0 = time.time()
                got = tk.softmax(x, **cfg)
                rec["first_call_s"] = round(time.time() - t0, 2)
                err = (got.double() - ref).abs()
                bad = err > atol + rtol * ref.abs()
                rec["ok"] = not bool(bad.any())
                rec["max_abs_err"] = float(err.max())
                if rec["ok"]:
                    ms = do_bench(kernel_call(x, y, cfg))
                    rec["gbs"] = nbytes / ms / 1e6
                    rec["pct_copy"] = 100 * rec["gbs"] / row["copy_gbs"]
                del got, err, bad
            except Exception as exc:  # noqa: BLE001  一个配置失败不影响其余配置
                rec["ok"] = False
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            row["configs"].append(rec)
            status = (f"{rec['gbs']:6.0f} GB/s {rec['pct_copy']:5.1f}%" if rec.get("gbs")
                      else f"FAILED {rec.get('error', 'mismatch max_abs_err=%.3g' % rec.get('max_abs_err', -1))}")
            print(f"  {dtype:8} N={n:>6} {cfg} -> {status}", flush=True)
        good = [r for r in row["configs"] if r.get("gbs")]
        top = max(good, key=lambda r: r["gbs"], default=None)
        row["default_pct"] = row["configs"][0].get("pct_copy")
        row["best"] = top and top["cfg"]
        row["best_pct"] = top and top["pct_copy"]
        if top:
            best[(x.element_size(), n)] = softmax_table_entry(top["cfg"], n)
            # 整个调用（检查、选参数、分配 stats）：主机端的开销有没有超过内核的时间
            ms = do_bench(lambda: tk.softmax(x, out=y, **top["cfg"]))
            row["best_call_gbs"] = nbytes / ms / 1e6
            row["best_call_pct"] = 100 * row["best_call_gbs"] / row["copy_gbs"]
        results.append(row)
        del x, y, ref
        torch.cuda.empty_cache()
    print(f"\n# 计时阶段 {time.time() - t_start:.0f} s")
    print(f"{'dtype':8} {'N':>7} {'copy GB/s':>9} {'default %':>9} {'best %':>7} {'call %':>7} {'>=85%':>5}"
          f"  best config")
    for r in results:
        d = f"{r['default_pct']:.1f}" if r["default_pct"] else "FAIL"
        b = f"{r['best_pct']:.1f}" if r["best_pct"] else "FAIL"
        c = f"{r['best_call_pct']:.1f}" if r.get("best_call_pct") else "-"
        hit = "yes" if (r["best_pct"] or 0) >= 85 else "no"
        print(f"{r['dtype']:8} {r['N']:>7} {r['copy_gbs']:9.0f} {d:>9} {b:>7} {c:>7} {hit:>5}  {r['best']}")
    for (dtype, n), why in no_cluster.items():
        print(f"# {dtype} N={n}: 没有 cluster 配置（{why}）")
    print("\n# SOFTMAX_TABLE（最佳配置；bfloat16 的结果用于所有 2 字节的 dtype）：")
    for key in sorted(best):
        print(f"    {key}: dict({', '.join(f'{k}={v!r}' for k, v in best[key].items())}),")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "command": recorded_command("tune_tilelang"),
                       "date": dt.date.today().isoformat(), "total_elems": args.total_elems, "results": results,
                       "table": {f"{e},{n}": v for (e, n), v in sorted(best.items())}}, f, indent=1)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def main():
    global CLUSTER_SEGS, CLUSTER_THREADS, SMEM_SEGS, SPLIT_GRID
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", choices=("sum", "softmax"), default="sum")
    ap.add_argument("--dtypes", default="float32,bfloat16", help="softmax 的 dtype（逗号分隔）")
    ap.add_argument("--quick", action="store_true", help="softmax：每个 (dtype, N) 只测默认配置")
    ap.add_argument("--min-blocks", default="0",
                    help="softmax 的 cluster 路径另试的 __launch_bounds__ 第二个参数（逗号分隔，0 = 不加），如 0,2,3")
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--ns", default=None, help="N 的列表（逗号分隔；默认 512 … 262144）")
    ap.add_argument("--threads", default="128,256,512")
    ap.add_argument("--ept", default="16,32", help="每个线程每块的元素个数（块大小 = threads * ept）")
    ap.add_argument("--splits", default="1,4,16", help="行切分段数的候选（只在行块数少于约两波时试）")
    ap.add_argument("--cluster-segs", default=",".join(map(str, _GRID_DEFAULTS["cluster_segs"])),
                    help="softmax 的 cluster 路径试哪些段数（逗号分隔；空串：不试 cluster 路径）")
    ap.add_argument("--cluster-threads", default=",".join(map(str, _GRID_DEFAULTS["cluster_threads"])),
                    help="cluster 路径每块的线程数（逗号分隔）")
    ap.add_argument("--smem-segs", default=",".join(map(str, _GRID_DEFAULTS["smem_segs"])),
                    help="cluster_smem 路径试哪些段数（逗号分隔；空串：不试这条路径）")
    ap.add_argument("--split-grid", default=",".join(f"{t}x{e}" for t, e in _GRID_DEFAULTS["split_grid"]),
                    help="split 路径的 线程数x每个线程的元素数（逗号分隔，如 256x32；空串：不试这条路径）")
    ap.add_argument("--jobs", type=int, default=8, help="并行预编译的线程数（0：不预编译）")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    CLUSTER_SEGS = _ints(args.cluster_segs)
    CLUSTER_THREADS = _ints(args.cluster_threads)
    SMEM_SEGS = _ints(args.smem_segs)
    SPLIT_GRID = tuple(tuple(int(v) for v in item.split("x")) for item in args.split_grid.split(",") if item)
    rl.runtime.require_gpu("tune_tilelang")
    if args.kernel == "softmax":
        tune_softmax(args)
        return
    threads_list = [int(v) for v in args.threads.split(",")]
    ept_list = [int(v) for v in args.ept.split(",")]
    split_list = [int(v) for v in args.splits.split(",")]
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, {props.multi_processor_count} SMs; GB/s: sum 计读, softmax/copy 计读+写", flush=True)
    results = []
    for n in [int(v) for v in (args.ns or SOFTMAX_NS).split(",")]:
        m = args.total_elems // n
        nbytes = m * n * 4
        n_buf = max(1, -(-240 * 2**20 // nbytes))   # 轮换的输入份数：合计至少 240 MB
        xs = [torch.randn(m, n, device="cuda") for _ in range(n_buf)]
        ys = [torch.empty_like(x) for x in xs]
        refs = [x.double().sum(1).float() for x in xs]
        row = {"N": n, "M": m, "n_buf": n_buf}
        splits = split_list if m < 4 * props.multi_processor_count * 8 else [1]
        cfgs = candidates(m, n, threads_list, ept_list, splits)
        if args.jobs > 0:
            prewarm(xs[0], cfgs, args.jobs)
        row["copy"] = 2 * nbytes / bench([lambda x=x, y=y: y.copy_(x) for x, y in zip(xs, ys)], args.iters) / 1e9
        row["torch_sum"] = nbytes / bench([lambda x=x: x.sum(1) for x in xs], args.iters) / 1e9
        row["torch_softmax"] = 2 * nbytes / bench([lambda x=x: torch.softmax(x, 1) for x in xs], args.iters) / 1e9
        t0 = time.time()
        sm = tk.softmax(xs[0])
        sm_ok = torch.allclose(sm, torch.softmax(xs[0].double(), 1).float(), atol=1e-6, rtol=1e-5)
        row["softmax_compile_s"] = time.time() - t0
        row["softmax_default"] = 2 * nbytes / bench([lambda x=x: tk.softmax(x) for x in xs], args.iters) / 1e9
        row["softmax_ok"] = sm_ok
        row["sum"] = []
        for cfg in cfgs:
            rec = dict(cfg)
            try:
                t0 = time.time()
                out = tk.reduce_sum(xs[0], **cfg)
                rec["compile_s"] = round(time.time() - t0, 2)
                rec["ok"] = all(torch.allclose(tk.reduce_sum(x, **cfg), r, atol=1e-2, rtol=1e-4)
                                for x, r in zip(xs, refs)) and out.shape == (m,)
                if rec["ok"]:
                    rec["gbs"] = nbytes / bench([lambda x=x: tk.reduce_sum(x, **cfg) for x in xs], args.iters) / 1e9
            except Exception as exc:  # noqa: BLE001  一个配置失败不影响其余配置
                rec["ok"] = False
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            row["sum"].append(rec)
            status = f"{rec['gbs']:7.0f} GB/s" if rec.get("gbs") else f"FAILED {rec.get('error', 'mismatch')}"
            print(f"  N={n:>7} {cfg} -> {status}", flush=True)
        good = [r for r in row["sum"] if r.get("gbs")]
        best = max(good, key=lambda r: r["gbs"], default=None)
        row["sum_default"] = row["sum"][0].get("gbs")
        print(f"N={n:>7} M={m:>7} copy {row['copy']:.0f} | torch.sum {row['torch_sum']:.0f} | "
              f"tilelang sum default {row['sum_default'] or float('nan'):.0f}, best {best and round(best['gbs'])} "
              f"{best and {k: best[k] for k in tk.TUNABLES['reduce_sum']}} | torch.softmax "
              f"{row['torch_softmax']:.0f} tilelang softmax {row['softmax_default']:.0f} "
              f"(ok={sm_ok}) | failed {sum(1 for r in row['sum'] if not r['ok'])}", flush=True)
        results.append(row)
        del xs, ys, refs
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
