"""每个实现在自己的Python子进程里测量，父进程收集各子进程的JSON并合并。

为什么分进程：在同一个进程里导入quack（CuTe DSL）之后，Triton与Liger的bf16内核慢了一半；一个实现
的导入、JIT编译器、内存池与出错后坏掉的CUDA上下文都不该影响另一个实现的数字。所以
``reduction-lab bench``默认把每个实现（本课程的每个backend、torch、torch.compile、CuPy、quack、Liger）
放进一个子进程（``python -m reduction_lab.bench.isolate --child SPEC OUT``），依次运行，一次只有一个
子进程在用GPU。全数组求和的8个版本与存储体冲突的3个内核都是本课程的CUDA C，合在``cuda``这一个进程里。

* 验证规则不变：子进程在计时之前把每个配置与float64参考比较；不符的实现在表格里标成「结果不符」，
  在这个套件里不计时（``on_mismatch="record"``），其他进程照常测量。
* 拷贝上限：**每个进程在每个形状上自己测一次**``dst.copy_(src)``，每一格的比例``frac_copy``相对于
  同一进程的拷贝。这样比例不受进程之间相隔几分钟的频率、温度变化影响，一个进程若整体变慢，它自己的
  拷贝也会显示出来；合并后的``copy``是各进程拷贝的中位数，``copy_by_process``记着每个进程测得的值。
* 子进程崩溃、超时或某个套件整体出错：它负责的格子标成「出错」并写明原因，其他格子照常。

sim模式下同样分进程（持续集成用小形状检查这套流程）。课程页面：docs/bench/index.md「怎样计时」。
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

ISOLATION_NOTE = ("每个实现在自己的Python子进程里验证和计时；每个进程在每个形状上自己测一次拷贝，"
                  "每一格的比例相对于同一进程的拷贝，拷贝列是各进程的中位数")
#: 本课程的进程排在前面，然后是对照（表格里的列顺序不受进程顺序影响）
_FIRST = ("triton", "cuda", "tilelang")


# ---------------------------------------------------------------- 计划：哪个进程测哪些实现

def _impl_objects(suite: str) -> list:
    """(名字, 进程, dtypes或None) 的列表，按表格的列顺序。"""
    from .impls import impls_for

    if suite == "bank-conflicts":
        from .bank import VARIANTS

        return [(n, "cuda", ("float32",)) for n in VARIANTS]
    if suite == "percall":
        from .percall import OPS, percall_impls

        out, seen = [], set()
        for op in OPS:
            for i in percall_impls(op):
                if i.name not in seen:
                    seen.add(i.name)
                    out.append((i.name, i.process, None))
        return out
    return [(i.name, i.process, i.dtypes) for i in impls_for(suite)]


def select_names(suite: str, impls: Sequence[str] | None) -> list[str]:
    """一个套件这次要测的实现名（full-sum里的cuda展开成全部版本），按表格的列顺序。"""
    objs = _impl_objects(suite)
    if impls is None:
        return [n for n, _, _ in objs]
    want = set(impls)
    out = []
    for n, group, _ in objs:
        if n in want or (suite == "full-sum" and "cuda" in want and group == "cuda"):
            out.append(n)
    return out


def plan(suites: Sequence[str], impls: Sequence[str] | None = None) -> list[tuple[str, dict[str, list[str]]]]:
    """[(进程名, {套件: [实现名]})]：每个进程一个条目，本课程的backend在前。"""
    groups: dict[str, dict[str, list[str]]] = {}
    for suite in suites:
        names = set(select_names(suite, impls))
        for n, group, _ in _impl_objects(suite):
            if n in names:
                groups.setdefault(group, {}).setdefault(suite, []).append(n)
    first = [g for g in _FIRST if g in groups]
    return [(g, groups[g]) for g in first + [g for g in groups if g not in first]]


# ---------------------------------------------------------------- 子进程

def _child_main(spec_path: str, out_path: str) -> int:
    """子进程：按spec在本进程里运行，每个套件单独捕获错误，把文档写进out_path。"""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    import reduction_lab  # noqa: F401  先于triton导入：sim模式要打开解释器
    from . import harness

    seen_banner = []

    def log(msg: str) -> None:
        if msg == harness.SIM_BANNER:   # 每个套件都会打印一次：只留第一次
            if seen_banner:
                return
            seen_banner.append(msg)
        print(msg, flush=True)

    doc = None
    errors: dict[str, str] = {}
    stop_at = spec.get("stop_at")          # 父进程给的截止时间（time.time()）：之后不再开始新的套件
    suites = list(spec["suites"].items())
    for k, (suite, names) in enumerate(suites):
        opts = dict(spec["options"])
        if stop_at is not None:
            left = stop_at - time.time()
            if left <= 0:
                errors[suite] = "分给这个进程的时间用完了，没有开始这个套件"
                log(f"{suite}：{errors[suite]}")
                continue
            # 剩下的时间平分给剩下的套件，其中约一半留给验证（含JIT编译），其余给计时
            share = 0.5 * left / (len(suites) - k)
            opts["budget_s"] = min(opts.get("budget_s") or share, share)
        try:
            part = harness.run([suite], impls={suite: names}, progress=False, log=log,
                               on_mismatch="record", **opts)
        except Exception as exc:  # 整个套件在这个进程里跑不了：记下来，继续下一个套件
            errors[suite] = f"{type(exc).__name__}: {exc}"
            log(f"错误：{suite}：{errors[suite]}")
            continue
        if doc is None:
            doc = part
        else:
            doc["suites"].update(part["suites"])
    if doc is None:
        doc = {"schema": harness.SCHEMA, "meta": harness.metadata(spec.get("argv")), "suites": {}}
    doc["suite_errors"] = errors
    # 这个进程里导入了哪些对照库（分进程的意义就在于别的进程里没有它们）
    doc["meta"]["pid"] = os.getpid()
    doc["meta"]["loaded_modules"] = sorted(m for m in ("quack", "cutlass", "liger_kernel", "cupy", "tilelang")
                                           if m in sys.modules)
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    os.replace(tmp, out_path)
    return 0


def _run_child(group: str, spec: dict, *, python: str, env: dict, timeout_s: float | None,
               log: Callable[[str], None]) -> tuple[dict | None, dict]:
    """运行一个子进程，逐行转发它的输出；返回(文档或None, 运行信息)。"""
    with tempfile.TemporaryDirectory(prefix=f"rl-bench-{group}-") as td:
        spec_path, out_path = os.path.join(td, "spec.json"), os.path.join(td, "out.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        cmd = [python, "-m", "reduction_lab.bench.isolate", "--child", spec_path, out_path]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True, errors="replace")
        tail: list[str] = []

        def pump():
            for line in proc.stdout:
                line = line.rstrip("\n")
                tail.append(line)
                del tail[:-20]
                log(f"[{group}] {line}")

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)   # 子进程自己的进程组（start_new_session）
            except ProcessLookupError:
                pass
            proc.wait()
        reader.join(timeout=10)
        info = {"returncode": proc.returncode, "seconds": round(time.monotonic() - t0, 1),
                "timed_out": timed_out, "pid": proc.pid}
        doc = None
        if os.path.exists(out_path):
            try:
                with open(out_path, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, json.JSONDecodeError) as exc:
                info["error"] = f"读不了子进程的结果：{exc}"
        if doc is None:
            if timed_out:
                why = f"子进程{group}超过{timeout_s:g} s，被终止"
            else:
                last = next((t for t in reversed(tail) if t.strip()), "")
                why = f"子进程{group}没有写出结果（退出码{proc.returncode}）：{last}"
            info.setdefault("error", why)
        return doc, info


# ---------------------------------------------------------------- 合并

def _shape_key(entry: dict):
    if "op" in entry:
        return (entry["op"], tuple(entry["shape"]), entry["dtype"])
    return tuple(entry["shape"])


def median_process(gbps_by_process: dict[str, float]) -> str:
    """各进程在同一形状上测得的拷贝带宽 -> 取中位数的那个进程（偶数个时取较低的一个）。"""
    ranked = sorted(gbps_by_process, key=gbps_by_process.__getitem__)
    return ranked[(len(ranked) - 1) // 2]


def _labels(suite: str) -> dict:
    """实现名 -> 表头（例如 tilelang -> TileLang）；取不到时为空（表头用名字）。"""
    from . import harness

    try:
        return {i.name: i.label for i in harness.impls_for(suite)}
    except Exception:  # noqa: BLE001 —— 只影响表头的写法
        return {}


def _merge_rows(suite: str, dtype: str, contribs: list[tuple[str, dict]], failed: dict[str, tuple[list[str], str]],
                order: list[str]) -> dict:
    """把各进程同一套件、同一dtype的记录合并成一份。``failed``：进程 -> (它负责的实现, 原因)。"""
    base = next((r for _, r in contribs), None)
    if base is None:   # 没有一个进程测了这个套件（全部失败）：说明文字照常写出
        from . import harness

        rec = {"suite": suite, "dtype": dtype, "impls": [], "skipped": {}, "shapes": [], "iters": None}
        if suite in harness.DTYPE_SUITES and suite != "percall":
            rec.update(bytes_formula=harness.byte_formula(suite, dtype), tolerance=harness.tolerance_text(suite, dtype))
        elif suite in harness.BYTE_FORMULAS:
            rec.update(bytes_formula=harness.BYTE_FORMULAS[suite], tolerance=harness.TOLERANCES.get(suite, ""))
        rec["copy_formula"] = harness.BYTE_FORMULAS["copy"]
    else:
        rec = {k: v for k, v in base.items() if k not in ("impls", "skipped", "shapes", "skipped_shapes")}
        rec["impls"], rec["skipped"], rec["shapes"] = [], {}, []
    rank = {n: i for i, n in enumerate(order)}
    entries: dict = {}
    skipped_shapes: dict[str, dict] = {}
    for group, r in contribs:
        rec["impls"] += r.get("impls", [])
        rec["skipped"].update(r.get("skipped", {}))
        if r.get("skipped_shapes"):
            skipped_shapes[group] = r["skipped_shapes"]
        if "versions" in r:
            rec["versions"] = r["versions"]
        for e in r.get("shapes", []):
            slot = entries.setdefault(_shape_key(e), {"entry": {k: v for k, v in e.items()
                                                                if k not in ("results", "copy")},
                                                      "results": {}, "copies": {}})
            if "copy" in e:
                slot["copies"][group] = e["copy"]
            for name, res in e["results"].items():
                res = dict(res, process=group)
                if "copy" in e and res.get("status") == "ok":
                    res["copy_gbps"] = e["copy"]["gbps"]
                slot["results"][name] = res
    if failed:
        rec["process_errors"] = {g: why for g, (_, why) in failed.items()}
    labels = _labels(suite) if failed else {}
    for group, (names, why) in failed.items():
        known = {i["name"] for i in rec["impls"]} | set(rec["skipped"])
        for n in names:
            if n not in known:     # 出错的进程没有写出实现表：名字取自本进程里的实现表
                rec["impls"].append({"name": n, "label": labels.get(n, n),
                                     "kind": "ours" if group in _FIRST else "peer"})
        for slot in entries.values():
            for n in names:
                slot["results"].setdefault(n, {"status": "error", "error": why, "process": group})
    rec["impls"].sort(key=lambda i: rank.get(i["name"], len(rank)))
    # 某个进程因时间预算没测的形状：它的实现在这些形状上标成未测
    for group, ss in skipped_shapes.items():
        names = [i["name"] for i in rec["impls"] if any(
            s_["results"].get(i["name"], {}).get("process") == group for s_ in entries.values())]
        for shape in ss["shapes"]:
            key = tuple(shape) if not (shape and isinstance(shape[0], str)) else (shape[0], tuple(shape[1]), shape[2])
            if key in entries:
                for n in names:
                    entries[key]["results"].setdefault(n, {"status": "skipped", "reason": ss["reason"],
                                                          "process": group})
    if skipped_shapes:
        rec["skipped_shapes_by_process"] = skipped_shapes
        every = [set(map(json.dumps, ss["shapes"])) for ss in skipped_shapes.values()]
        if len(skipped_shapes) == len(contribs) and every:
            common = set.intersection(*every)
            if common:
                rec["skipped_shapes"] = {"shapes": [json.loads(s_) for s_ in sorted(common)],
                                         "reason": next(iter(skipped_shapes.values()))["reason"]}
    # 形状的顺序：N（或操作、dtype、形状）与各子进程里的一致；按第一次出现排序
    for key, slot in entries.items():
        e = dict(slot["entry"])
        copies = slot["copies"]
        if copies:
            e["copy_by_process"] = {g: c["gbps"] for g, c in copies.items()}
            group = median_process(e["copy_by_process"])
            e["copy"] = dict(copies[group], process=group)
        e["results"] = {i["name"]: slot["results"][i["name"]] for i in rec["impls"] if i["name"] in slot["results"]}
        rec["shapes"].append(e)
    rec["isolation"] = ISOLATION_NOTE
    rec["processes"] = [g for g, _ in contribs]
    return rec


def merge(parts: list[tuple[str, dict[str, list[str]], dict | None, dict]], suites: Sequence[str],
          argv: Sequence[str] | None, dtypes: Sequence[str] | None = None) -> dict:
    """parts：[(进程名, {套件: [实现名]}, 子进程的文档或None, 运行信息)] -> 一份完整的文档。"""
    from . import harness

    docs = [d for _, _, d, _ in parts if d is not None]
    meta = dict(docs[0]["meta"]) if docs else harness.metadata(argv)
    for d in docs[1:]:   # 各进程导入的版本号：取第一个写了的
        for k, v in d["meta"].items():
            if meta.get(k) is None and v is not None:
                meta[k] = v
    meta["command"] = " ".join(argv) if argv is not None else " ".join(sys.argv)
    meta["isolation"] = ISOLATION_NOTE
    meta["processes"] = {g: dict(info, loaded_modules=(d or {}).get("meta", {}).get("loaded_modules"))
                         for g, _, d, info in parts}
    meta.pop("pid", None)
    meta.pop("loaded_modules", None)
    out = {"schema": harness.SCHEMA, "meta": meta, "suites": {}}
    for suite in suites:
        order = select_names(suite, None)
        contribs: dict[str, list[tuple[str, dict]]] = {}
        failed: dict[str, dict[str, tuple[list[str], str]]] = {}
        suite_meta = None
        involved = [(g, names[suite], d, info) for g, names, d, info in parts if suite in names]
        if not involved:
            continue
        for group, names, d, info in involved:
            rec = d["suites"].get(suite) if d is not None else None
            if rec is None:
                why = (d or {}).get("suite_errors", {}).get(suite) or info.get("error") or "没有结果"
                why = f"进程{group}：{why}"
                for dt in _planned_dtypes(suite, names, dtypes):
                    failed.setdefault(dt, {})[group] = (names, why)
                continue
            suite_meta = suite_meta or rec.get("meta")
            if suite == "percall":
                contribs.setdefault("*", []).append((group, rec))
            else:
                for dt, sub in harness.dtype_records(rec).items():
                    contribs.setdefault(dt, []).append((group, sub))
        rec_meta = dict(suite_meta or meta, command=meta["command"])
        if suite == "percall":
            rec = _merge_rows(suite, "*", contribs.get("*", []), failed.get("*", {}), order)
            rec.pop("dtype", None)
            rec["suite"] = "percall"
        else:
            dts = list(dict.fromkeys(list(contribs) + list(failed)))
            dts.sort(key=lambda d: list(harness.DTYPES).index(d))
            recs = {dt: _merge_rows(suite, dt, contribs.get(dt, []), failed.get(dt, {}), order) for dt in dts}
            if not recs:
                continue
            for r in recs.values():       # 没有一个进程测到的dtype（例如时间用完）也要有表头的元数据
                r.setdefault("meta", rec_meta)
            rec = harness.combine_dtype_records(recs)
        rec["meta"] = rec_meta
        out["suites"][suite] = rec
    return out


def _planned_dtypes(suite: str, names: list[str], dtypes: Sequence[str] | None) -> list[str]:
    """失败的进程本该测哪些dtype（用于在对应的表格里标出）。"""
    if suite == "percall":
        return ["*"]
    from . import harness

    wanted = harness.suite_dtypes(suite, dtypes)
    accepted = {d for n, _, dts in _impl_objects(suite) if n in names for d in (dts or wanted)}
    return [d for d in wanted if d in accepted] or wanted[:1]


# ---------------------------------------------------------------- 父进程

#: 有总时限时各进程分得时间的权重（JIT编译多的进程多分一些）；没写的是1。TileLang每个(N, dtype)编译一次、
#: 每次几秒：三种dtype的softmax扫描（33次编译）在权重2时超过了分得的时间，所以给4。CUDA C每种配置经NVRTC
#: 编译一次：percall在权重1时把验证时间全花在softmax的6个内核上，按行求和一格也没测到，所以给2
CHILD_WEIGHTS = {"compile": 3.0, "quack": 2.0, "tilelang": 4.0, "triton": 2.0, "cuda": 2.0}
#: 子进程到了截止时间还没结束时，再等多久才终止它（它正在计时的套件一般很快结束）
GRACE_S = 30.0


def run_isolated(suites: Sequence[str], *, argv: Sequence[str] | None = None, impls: Sequence[str] | None = None,
                 dtypes: Sequence[str] | None = None, log: Callable[[str], None] = print,
                 child_timeout_s: float | None = None, time_limit_s: float | None = None,
                 python: str | None = None, env: dict | None = None,
                 only_groups: Sequence[str] | None = None, **options) -> dict:
    """按:func:`plan`每个进程启动一个子进程，依次运行，合并成一份文档（格式与:func:`harness.run`相同）。

    ``options``：ns、total_elems、full_sum_ns、iters、warmup、quick、seed、budget_s（原样传给子进程）。
    ``child_timeout_s``：每个子进程的硬时限。``time_limit_s``：整次运行的时限——剩下的时间按
    :data:`CHILD_WEIGHTS`分给还没运行的进程（前面的进程没用完的时间留给后面的），每个进程到了分得的
    截止时间就不再开始新的套件、验证阶段按剩余时间收缩（``budget_s``），超过截止时间:data:`GRACE_S`秒
    才被终止。``only_groups``：只运行这些进程（测试用）。"""
    from . import harness
    from ..runtime import MODE

    for suite in suites:
        if suite not in harness.SUITES:
            raise harness.BenchError(f"未知的测试套件{suite!r}；可选：{', '.join(harness.SUITES)}, all")
    if dtypes is not None:
        dtypes = harness.parse_dtypes(dtypes)
    if impls is not None:
        seen = {n for s in harness.SUITES for n in harness.known_impls(s)}
        unknown = [n for n in impls if n not in seen]
        if unknown:
            raise harness.BenchError(f"没有叫{unknown}的实现；可选：{sorted(seen)}")
        if len(suites) == 1 and not select_names(suites[0], impls):
            raise harness.BenchError(f"{suites[0]}没有实现{list(impls)}；可选：{sorted(harness.known_impls(suites[0]))}")
    # 形状参数在启动子进程之前检查（显存够不够由子进程检查：父进程不占GPU）
    for suite in suites:
        if suite in ("bank-conflicts", "percall"):
            continue
        harness._defaults(suite, options.get("full_sum_ns") if suite == "full-sum" else options.get("ns"),
                          None if suite == "full-sum" else options.get("total_elems"), options.get("quick", False),
                          options.get("iters"), options.get("warmup"), lambda s: None, check_memory=False)
    groups = plan(suites, impls)
    if only_groups is not None:
        groups = [(g, s) for g, s in groups if g in only_groups]
    if not groups:
        raise harness.BenchError("没有要测的实现(nothing to measure)")
    if MODE != "gpu":
        log(harness.SIM_BANNER)
    log(f"分进程测量：{len(groups)}个子进程（{', '.join(g for g, _ in groups)}）")
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env["REDUCTION_LAB_MODE"] = MODE
    child_env.pop("TRITON_INTERPRET", None)   # 由reduction_lab按模式设置
    src = str(Path(__file__).resolve().parents[2])
    paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in paths:   # 子进程导入的是同一份源码（没有安装、用PYTHONPATH=src运行时）
        child_env["PYTHONPATH"] = os.pathsep.join([src] + paths)
    options = {k: v for k, v in options.items() if v is not None}
    parts = []
    deadline = None if time_limit_s is None else time.time() + time_limit_s
    for k, (group, per_suite) in enumerate(groups):
        spec = {"suites": per_suite, "argv": list(argv) if argv else None,
                "options": dict(options, dtypes=dtypes)}
        timeout = child_timeout_s
        if deadline is not None:
            weights = [CHILD_WEIGHTS.get(g, 1.0) for g, _ in groups[k:]]
            share = max(deadline - time.time() - GRACE_S, 0.0) * weights[0] / sum(weights)
            spec["stop_at"] = time.time() + share
            timeout = min(timeout or float("inf"), share + GRACE_S)
            if timeout == float("inf"):
                timeout = None
        log(f"== 子进程{group}：{', '.join(f'{s}[{len(n)}]' for s, n in per_suite.items())}"
            + (f"，分得{spec['stop_at'] - time.time():.0f} s" if "stop_at" in spec else "") + " ==")
        doc, info = _run_child(group, spec, python=python or sys.executable, env=child_env,
                               timeout_s=timeout, log=log)
        log(f"== 子进程{group}结束：{info['seconds']} s，退出码{info['returncode']}"
            + (f"；{info['error']}" if info.get("error") else "") + " ==")
        parts.append((group, per_suite, doc, info))
    return merge(parts, suites, argv, dtypes)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        sys.exit(_child_main(sys.argv[2], sys.argv[3]))
    print("用法：python -m reduction_lab.bench.isolate --child SPEC.json OUT.json"
          "（由reduction-lab bench启动，不单独使用）", file=sys.stderr)
    sys.exit(2)
