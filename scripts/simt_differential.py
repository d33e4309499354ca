"""GPU 与模拟器的对照：同一份 CUDA C 源码、同样的输入（固定种子），在 GPU 上经 CuPy、在 CPU 上经模拟器各跑一次，比较输出。

    python3 scripts/simt_differential.py --out docs/data/gpu_simt_differential.json   # 在 GPU 机器上
    python3 scripts/simt_differential.py --sim-only                                    # 任何机器：只跑模拟器一半

内核：构造登记表（reduction_lab.simt.constructs）里模拟器能运行的每一项，以及课程的内核
（reduce_sum.cu、softmax.cu、softmax_backward.cu、full_sum.cu 的 8 个版本、warp_shuffle.cu、bank_conflicts.cu、
tree_demo.cu）。两边都经 reduction_lab.cuda_kernels.launch（或它的包装函数）启动。

比较的界：整数逐位相等。浮点求和（n 个数，任意结合顺序）与精确和之差不超过 (n - 1) u sum|x_i|
（u = 2**-24），两边各自满足，所以 |gpu - sim| <= 2 (n - 1) u sum|x_i|；softmax 再加上 expf 的误差
（CUDA 不超过 2 ulp）：|gpu - sim| <= (2n + 16) u |y|；其余见每个用例的 ``bound`` 说明。登记表里的浮点项用它们
自己的界（相对 float64 的 numpy 参考），GPU 与模拟器之差取两倍。

输出 JSON：每个内核一条，含所属的构造、最大误差、界、是否通过，以及内核源码的 sha256
（tests/simt/test_differential_data.py 据此判断数据是否过期）。
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
U = 2.0 ** -24

#: 课程内核所在的文件：每个文件里的每个 extern "C" __global__ 内核都要有用例（测试核对）
COURSE_FILES = ("reduce_sum.cu", "softmax.cu", "softmax_backward.cu", "full_sum.cu", "warp_shuffle.cu",
                "bank_conflicts.cu", "tree_demo.cu")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compare(got, want, bound):
    from reduction_lab.simt.constructs import compare

    return compare(got, want, bound)


# ---------------------------------------------------------------- 课程内核的用例
# 每个用例：(内核名, 文件, 说明, 运行函数 run(mode) -> {名字: numpy 数组}, 界函数 bound(inputs) -> {名字: 界})
# 运行函数自己用固定种子造输入，两种模式看到相同的数。

def _torch():
    import torch

    return torch


def _dev(mode):
    return "cuda" if mode == "gpu" else "cpu"


def _x(shape, seed, ints=False):
    torch = _torch()
    g = np.random.default_rng(seed)
    a = g.integers(-8, 8, shape).astype(np.float32) if ints else g.standard_normal(shape).astype(np.float32)
    return torch.from_numpy(a)


def _np(t):
    return t.detach().cpu().numpy().copy()


def _row_sum_case(kernel, shape, seed, **kw):
    def run(mode):
        from reduction_lab.cuda_kernels import reduce_sum

        x = _x(shape, seed).to(_dev(mode))
        return {"out": _np(reduce_sum(x, kernel=kernel, mode=mode, **kw))}

    def bound():
        x = _np(_x(shape, seed)).astype(np.float64)
        return {"out": 2 * (shape[1] - 1) * U * np.abs(x).sum(1)}

    return run, bound


def _softmax_case(shape, seed, **kw):
    def run(mode):
        from reduction_lab.cuda_kernels import softmax

        x = (3 * _x(shape, seed)).to(_dev(mode))
        return {"y": _np(softmax(x, mode=mode, **kw))}

    def bound():
        torch = _torch()
        y = torch.softmax(3 * _x(shape, seed).double(), 1).numpy()
        return {"y": (2 * shape[1] + 16) * U * np.abs(y) * 1.01 + 1e-37}

    return run, bound


def _softmax_bwd_case(shape, seed):
    def inputs():
        torch = _torch()
        y = torch.softmax(_x(shape, seed).double(), 1).float()
        dy = _x(shape, seed + 1)
        return y, dy

    def run(mode):
        from reduction_lab.cuda_kernels import softmax_backward

        y, dy = inputs()
        return {"dx": _np(softmax_backward(y.to(_dev(mode)), dy.to(_dev(mode)), mode=mode))}

    def bound():
        y, dy = (t.double().numpy() for t in inputs())
        s = (y * dy).sum(1, keepdims=True)
        ds = 2 * (shape[1] + 1) * U * np.abs(y * dy).sum(1, keepdims=True)
        return {"dx": np.abs(y) * ds + 6 * U * np.abs(y) * (np.abs(dy) + np.abs(s)) + 1e-37}

    return run, bound


def _full_sum_case(version, n, seed):
    def run(mode):
        from reduction_lab.cuda_kernels import full_sum

        x = _x((n,), seed).to(_dev(mode))
        return {"sum": _np(full_sum(x, version=version, block_size=256, max_blocks=24, mode=mode)).reshape(1)}

    def bound():
        x = _np(_x((n,), seed)).astype(np.float64)
        return {"sum": np.array([2 * (n - 1) * U * np.abs(x).sum()])}

    return run, bound


def _launch_case(fname, kernel, grid, block, make_args, outputs, shared=0, defines=None, exact=True, bound_fn=None):
    """直接用 launch 启动；make_args(torch, device) -> 参数元组，outputs：作为输出的参数下标 {名字: 下标}。"""
    def run(mode):
        from reduction_lab.cuda_kernels import launch

        torch = _torch()
        args = make_args(torch, _dev(mode))
        launch(fname, kernel, grid=grid, block=block, args=args, shared_bytes=shared, defines=defines, mode=mode)
        if mode == "gpu":
            torch.cuda.synchronize()
        return {k: _np(args[i]) for k, i in outputs.items()}

    def bound():
        return bound_fn() if bound_fn else {k: 0.0 for k in outputs}

    return run, bound


def _tile_args(torch, dev):
    x = torch.from_numpy(np.arange(64 * 96, dtype=np.float32).reshape(64, 96)).to(dev)
    return x, torch.zeros(96 * 64, device=dev), 64, 96


def _trace_args(n, steps):
    return lambda torch, dev: (torch.arange(n, dtype=torch.float32, device=dev), torch.zeros(steps * n, device=dev))


def course_cases():
    """[(名字, 文件, 内核, 说明, run, bound, 模拟器应报的错误类名或 None)]"""
    cases = []

    def add(name, fname, kernel, desc, rb, expect_error=None):
        cases.append((name, fname, kernel, desc, rb[0], rb[1], expect_error))

    add("reduce_sum_rows", "reduce_sum.cu", "reduce_sum_rows", "按行求和（树形），(8, 1000)",
        _row_sum_case("tree", (8, 1000), 1))
    add("reduce_sum_rows_warp", "reduce_sum.cu", "reduce_sum_rows_warp", "按行求和（一个warp一行），(37, 1000)",
        _row_sum_case("warp", (37, 1000), 2))
    add("reduce_sum_rows_split", "reduce_sum.cu", "reduce_sum_rows_split", "按行求和（切段 + atomicAdd），(3, 9000)，3段",
        _row_sum_case("split", (3, 9000), 3, chunks=3))
    add("reduce_sum_rows_split_one", "reduce_sum.cu", "reduce_sum_rows_split", "按行求和（一行一段，直接写出），(5, 9000)",
        _row_sum_case("split", (5, 9000), 5, chunks=1))
    add("softmax_rows", "softmax.cu", "softmax_rows", "按行softmax（课程版，读三遍），(6, 1000)",
        _softmax_case((6, 1000), 4, kernel="rows"))
    add("softmax_rows_warp", "softmax.cu", "softmax_rows_warp", "按行softmax，一个warp一行，(37, 1000)",
        _softmax_case((37, 1000), 11, kernel="warp", packs=8))
    add("softmax_rows_block", "softmax.cu", "softmax_rows_block", "按行softmax，一个线程块一行，(6, 4097)",
        _softmax_case((6, 4097), 12, kernel="block", block_size=256, packs=4))
    add("softmax_rows_split", "softmax.cu", "softmax_rows_split", "按行softmax，一行分5段，(3, 9000)",
        _softmax_case((3, 9000), 13, kernel="split", block_size=128, packs=4))
    add("softmax_backward_rows", "softmax_backward.cu", "softmax_backward_rows", "softmax的反向，(6, 1000)",
        _softmax_bwd_case((6, 1000), 5))
    for v in range(1, 9):
        add(f"full_sum_v{v}", "full_sum.cu", f"reduce{v}", f"整个数组求和，版本{v}，n = 50000",
            _full_sum_case(v, 50000, 10 + v))
    add("shfl_down_trace", "warp_shuffle.cu", "shfl_down_trace", "__shfl_down_sync的5步", _launch_case(
        "warp_shuffle.cu", "shfl_down_trace", 1, 32, _trace_args(32, 5), {"trace": 1}))
    add("shfl_xor_trace", "warp_shuffle.cu", "shfl_xor_trace", "__shfl_xor_sync的5步", _launch_case(
        "warp_shuffle.cu", "shfl_xor_trace", 1, 32, _trace_args(32, 5), {"trace": 1}))
    for stride in (1, 2, 33):
        add(f"shared_stride_{stride}", "bank_conflicts.cu", "shared_stride", f"步长{stride}读共享内存", _launch_case(
            "bank_conflicts.cu", "shared_stride", 1, 32, lambda torch, dev, s=stride: (torch.zeros(32, device=dev), s),
            {"out": 0}))
    for wide, defs in (("double", None), ("float4", {"WIDE_FLOAT4": 1})):
        add(f"shared_stride_wide_{wide}", "bank_conflicts.cu", "shared_stride_wide", f"宽元素（{wide}）步长2",
            _launch_case("bank_conflicts.cu", "shared_stride_wide", 1, 32,
                         lambda torch, dev: (torch.zeros(32, device=dev), 2), {"out": 0}, defines=defs))
    for k in ("copy_tile", "transpose_conflict", "transpose_padded"):
        add(k, "bank_conflicts.cu", k, "32x32分块，64x96", _launch_case(
            "bank_conflicts.cu", k, (3, 2), (32, 8), _tile_args, {"out": 1}))
    add("tree_trace", "tree_demo.cu", "tree_trace", "树形归约每一步的共享数组，64个线程", _launch_case(
        "tree_demo.cu", "tree_trace", 1, 64, _trace_args(64, 6), {"trace": 1}, shared=64 * 4))
    # 故意写错的两个内核：模拟器必须报出错误；GPU 上的结果没有意义（第二个可能挂起），不在 GPU 上运行
    add("tree_no_sync", "tree_demo.cu", "tree_no_sync", "错误示范：去掉屏障（模拟器应报竞争）", _launch_case(
        "tree_demo.cu", "tree_no_sync", 1, 64, lambda torch, dev: (torch.ones(64, device=dev), torch.zeros(1, device=dev)),
        {"out": 1}, shared=64 * 4), expect_error="SharedMemoryRaceError")
    add("tree_bad_sync", "tree_demo.cu", "tree_bad_sync", "错误示范：屏障在分支里（模拟器应报屏障分化）", _launch_case(
        "tree_demo.cu", "tree_bad_sync", 1, 64, lambda torch, dev: (torch.ones(64, device=dev), torch.zeros(1, device=dev)),
        {"out": 1}, shared=64 * 4), expect_error="BarrierDivergenceError")
    return cases


# ---------------------------------------------------------------- 登记表的用例

def _registry_side(c, workdir, mode):
    """按登记项造输入（固定种子），经 launch 在 mode 下运行，返回 {键: numpy 数组}。"""
    from reduction_lab.cuda_kernels import launch
    from reduction_lab.simt import constructs as C

    torch = _torch()
    case = C.make_case(c)
    keys = list(c.expected(C.make_case(c)))
    path = C.materialize(c, workdir)
    if mode == "gpu":
        args = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in case.args]
    else:
        args = list(case.args)
    from reduction_lab.capture import captured_output

    with captured_output() as printed:       # 内核里 printf 印出的文字：GPU 上由驱动写到文件描述符 1，同步时才写出
        launch(str(path), c.kernel, grid=c.grid, block=c.block, args=args, shared_bytes=c.shared_bytes, mode=mode,
               symbols=dict(case.symbols) or None)
        if mode == "gpu":
            torch.cuda.synchronize()
    out = {}
    for k in keys:
        v = case.symbols[k] if isinstance(k, str) else args[k]
        out[str(k)] = _np(v) if hasattr(v, "detach") else np.copy(v)
    return out, case, printed.text


def run_registry(sim_only, log):
    from reduction_lab.simt import constructs as C

    rows = []
    with tempfile.TemporaryDirectory(prefix="simt_diff_") as tmp:
        for c in C.REGISTRY:
            if c.status_expected != "run":
                continue
            t0 = time.perf_counter()
            row = {"kernel": c.name, "kind": "construct", "construct": f"{c.category}：{c.description}",
                   "source": f"reduction_lab.simt.constructs:{c.name}", "launch": c.kernel,
                   "sha256": C.source_sha256(c)}
            r = C.check(c)
            row["sim_status"] = r.status
            if r.status != "ran":
                row.update(gpu_status="not run", passed=None, note="模拟器不运行这一项 (not supported by the simulator)")
                rows.append(row)
                log(row)
                continue
            d = Path(tmp) / c.name
            sim, case, sim_text = _registry_side(c, d, "sim")
            want = c.expected(C.make_case(c))
            bounds = c.bound(C.make_case(c)) if c.bound else {}
            row["sim_vs_reference"] = max(_compare(sim[str(k)], w, bounds.get(k, 0.0))[0] for k, w in want.items())
            if sim_only:
                row.update(gpu_status="not run", passed=None)
            else:
                try:
                    gpu, _, gpu_text = _registry_side(c, d, "gpu")
                except Exception as e:          # 编译或启动失败：记下来，不中断其他项
                    row.update(gpu_status=f"error: {type(e).__name__}: {str(e)[:300]}", passed=False)
                    rows.append(row)
                    log(row)
                    continue
                errs, oks, bnd = [], [], []
                for k, w in want.items():
                    b = 2 * np.asarray(bounds.get(k, 0.0), np.float64)
                    e1, ok1 = _compare(gpu[str(k)], sim[str(k)], b)
                    e2, ok2 = _compare(gpu[str(k)], w, bounds.get(k, 0.0))
                    errs.append(e1)
                    oks += [ok1, ok2]
                    bnd.append(float(np.max(b)))
                    row.setdefault("gpu_vs_reference", 0.0)
                    row["gpu_vs_reference"] = max(row["gpu_vs_reference"], e2)
                if sim_text or gpu_text:        # printf：同样的行（GPU 上各线程的顺序没有保证，所以按排序后比较）
                    row.update(printf_lines=sim_text.count("\n"),
                               printf_match=sorted(sim_text.splitlines()) == sorted(gpu_text.splitlines()))
                    if not row["printf_match"]:
                        row["printf_gpu"], row["printf_sim"] = gpu_text[:2000], sim_text[:2000]
                    oks.append(row["printf_match"])
                row.update(gpu_status="ran", max_error=max(errs), bound=max(bnd), passed=bool(all(oks)))
            row["seconds"] = round(time.perf_counter() - t0, 3)
            rows.append(row)
            log(row)
    return rows


def run_course(sim_only, log):
    from reduction_lab.simt import errors

    rows = []
    kdir = ROOT / "src" / "reduction_lab" / "cuda_kernels"
    for name, fname, kernel, desc, run, bound, expect_error in course_cases():
        t0 = time.perf_counter()
        row = {"kernel": name, "kind": "course", "construct": desc, "source": f"cuda_kernels/{fname}",
               "launch": kernel, "sha256": _sha(kdir / fname)}
        if expect_error:
            try:
                run("sim")
                row.update(sim_status="ran", passed=False, note=f"模拟器没有报 {expect_error}")
            except errors.SimtError as e:
                ok = type(e).__name__ == expect_error
                row.update(sim_status=type(e).__name__, gpu_status="not run", passed=ok,
                           note="故意写错的内核：通过 = 模拟器报出这个错误 (planted bug reported)")
            rows.append(row)
            log(row)
            continue
        sim = run("sim")
        row["sim_status"] = "ran"
        if sim_only:
            row.update(gpu_status="not run", passed=None)
        else:
            try:
                gpu = run("gpu")
            except Exception as e:              # 编译或启动失败：记下来，不中断其他内核
                row.update(gpu_status=f"error: {type(e).__name__}: {str(e)[:300]}", passed=False)
                rows.append(row)
                log(row)
                continue
            b = bound()
            errs, oks, bnd = [], [], []
            for k in sim:
                e, ok = _compare(gpu[k], sim[k], b[k])
                errs.append(e)
                oks.append(ok)
                bnd.append(float(np.max(b[k])))
            row.update(gpu_status="ran", max_error=max(errs), bound=max(bnd), passed=bool(all(oks)))
        row["seconds"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
        log(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="写出 JSON 的路径")
    ap.add_argument("--sim-only", action="store_true", help="只跑模拟器一半（没有 GPU 的机器上检查脚本）")
    a = ap.parse_args(argv)
    import reduction_lab as rl

    if not a.sim_only and rl.MODE != "gpu":
        ap.error("需要 GPU（gpu 模式）；没有 GPU 时用 --sim-only (a GPU is needed; use --sim-only)")

    def log(row):
        st = {True: "通过", False: "不通过", None: "-"}[row.get("passed")]
        extra = f" 误差 {row['max_error']:.3g} <= {row['bound']:.3g}" if "max_error" in row else ""
        print(f"{st:4s} {row['kind']:9s} {row['kernel']:24s} sim={row.get('sim_status')} "
              f"gpu={row.get('gpu_status')}{extra}", flush=True)

    t0 = time.perf_counter()
    rows = run_registry(a.sim_only, log) + run_course(a.sim_only, log)
    device = None
    if not a.sim_only:
        import torch

        device = torch.cuda.get_device_name(0)
    doc = {
        "what": "GPU (CuPy) vs simulator on the same sources and inputs (scripts/simt_differential.py)",
        "device": device,
        "sim_only": a.sim_only,
        "bound_rule": "integers exact; float sums |gpu - sim| <= 2 (n - 1) u sum|x_i| (u = 2**-24); softmax "
                      "(2n + 16) u |y|; registry entries: twice their own bound against the float64 reference",
        "kernels": rows,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    bad = [r["kernel"] for r in rows if r.get("passed") is False]
    print(f"{len(rows)} 个内核，{sum(r.get('passed') is True for r in rows)} 个通过，不通过：{bad or '无'}；"
          f"{doc['seconds']} 秒")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
