"""命令行：``reduction-lab bench ...``与``reduction-lab report ...``。

    reduction-lab bench all --json docs/data/h200.json          # 完整扫描（GPU）
    reduction-lab bench softmax --total-elems 2^24 --quick       # 小一点、快一点
    reduction-lab bench row-sum --impl triton,torch,cupy --n 1024,4096
    reduction-lab bench softmax --dtype float32,bfloat16,float16 # 几种dtype，每种一张表
    reduction-lab bench percall                                  # 一次调用的墙钟时间与内核时间
    reduction-lab bench softmax --processes one                  # 全部实现在同一个进程里（旧的做法）
    reduction-lab report docs/data/h200.json --out docs/data     # 表格与图
    python -m reduction_lab.bench softmax ...                    # 同reduction-lab bench

默认每个实现在自己的子进程里测量（:mod:`reduction_lab.bench.isolate`）：某个实现结果不符时，
它的格子标成「结果不符」、不计时，其他实现照常，退出码3；``--processes one``时一个不符就在计时前停下。

退出码：0成功；2参数错误（或``--processes one``时结果不符，计时前停止）；3有实现在某些形状上出错或
结果不符（JSON照样写出）。
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .harness import LIBRARIES, SUITES, BenchError, ValidationError, parse_dtypes, parse_int_list

_CHOICES = SUITES + ("all",)


def _int_expr(text: str) -> int:
    try:
        (value,) = parse_int_list(text)
    except (BenchError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _suites(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in _CHOICES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"未知的测试套件{bad or text!r}；可选：{', '.join(_CHOICES)}"
                                         f"(unknown suite)")
    if "all" in names:
        return list(SUITES)
    return list(dict.fromkeys(names))


def _dtypes(text: str) -> list[str]:
    try:
        return parse_dtypes(text)
    except BenchError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _list(text: str) -> list[int]:
    try:
        return parse_int_list(text)
    except BenchError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reduction-lab", description="reduction-lab的基准测试与报告")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="运行基准测试（先验证、再计时）",
                       description="先验证所有配置与torch一致，再用CUDA事件计时（sim模式：perf_counter）。")
    b.add_argument("suite", type=_suites, metavar="SUITE",
                   help=f"测试套件，逗号分隔可以一次测几个：{', '.join(_CHOICES)}")
    b.add_argument("--n", type=_list, default=None,
                   help="softmax/row-sum的行长N列表，如512,1024或2^9,2^10（默认2^9 … 2^18）")
    b.add_argument("--total-elems", type=_int_expr, default=None,
                   help="softmax/row-sum每个输入的元素数M*N（默认2^26；sim模式默认2^13，上限2^16）")
    b.add_argument("--full-sum-n", type=_list, default=None,
                   help="full-sum的数组长度列表（默认2^22,2^28）")
    b.add_argument("--impl", type=lambda s: [t.strip() for t in s.split(",") if t.strip()], default=None,
                   help="只测这些实现，逗号分隔：triton,cuda,tilelang,torch,compile,cupy,quack,liger；"
                        "full-sum里cuda代表全部版本，也可写v1..v8；bank-conflicts写变体名")
    b.add_argument("--dtype", dest="dtypes", type=_dtypes, default=None,
                   help="softmax、row-sum与percall按哪些dtype测，逗号分隔：float32,bfloat16,float16"
                        "（默认float32；percall默认float32,bfloat16）；其余套件总是float32")
    b.add_argument("--processes", choices=("per-impl", "one"), default="per-impl",
                   help="per-impl（默认）：每个实现在自己的子进程里测量；one：全部在本进程里")
    b.add_argument("--child-timeout", type=float, default=None,
                   help="每个子进程的时限（秒）；超时的子进程被终止，它的格子标成出错")
    b.add_argument("--time-limit", type=float, default=None,
                   help="整次运行的时限（秒，分进程时）：时间按进程分配，到时不再开始新的套件、验证阶段收缩，"
                        "保证在时限内写出结果")
    b.add_argument("--iters", type=int, default=None, help="计时次数（默认100；--quick 20；sim 3）")
    b.add_argument("--warmup", type=int, default=None, help="预热次数（默认10；--quick 3；sim 1）")
    b.add_argument("--quick", action="store_true", help="更少的形状和次数")
    b.add_argument("--seed", type=int, default=0, help="输入的随机种子")
    b.add_argument("--budget", type=float, default=None,
                   help="每个套件验证阶段（含JIT编译）的时间预算，秒；超出后不再加新形状，只对已验证的形状计时")
    b.add_argument("--json", dest="json_path", default=None, help="把结果写进这个JSON文件")
    b.add_argument("--merge", action="store_true",
                   help="JSON文件已存在时只替换这次运行的套件，保留其他套件")
    b.add_argument("--report-dir", default=None,
                   help="同时把表格（.md）和图（.png）写进这个目录（需要matplotlib）")
    b.add_argument("--prefix", default=None,
                   help="表格/图片文件名前缀（默认取GPU的型号，如h200、h100；认不出型号时gpu，sim模式h200）")
    b.add_argument("--no-progress", action="store_true", help="不显示tqdm进度条")

    r = sub.add_parser("report", help="从JSON生成Markdown表格与PNG图")
    r.add_argument("json_path", help="reduction-lab bench --json写出的文件")
    r.add_argument("--out", default=None, help="输出目录（默认与JSON同目录）")
    r.add_argument("--prefix", default=None,
                   help="文件名前缀（默认取JSON里GPU的型号，如h200、h100；认不出型号时gpu，sim模式h200）")
    r.add_argument("--no-plots", action="store_true", help="只写表格")
    r.add_argument("--check", action="store_true",
                   help="不写文件，只检查已有表格与JSON生成的结果一致（不一致退出码1）")
    m = sub.add_parser("merge", help="把一次只测了部分实现的运行按列并进已提交的JSON",
                       description="NEW里每个套件、每个dtype、每个形状上测过的实现替换OLD里同一格的结果（其余实现保留），"
                                   "拷贝取各进程的中位数，表格下方的columns_from写明每一列来自哪一次运行。")
    m.add_argument("old", help="已有的JSON（原地改写）")
    m.add_argument("new", help="这次运行写出的JSON")
    return p


def _writable_file(path: Path, what: str) -> None:
    """在开始测量之前确认能写出这个文件：已存在的不能是目录，最近的已存在上级目录可写。"""
    if path.is_dir():
        raise BenchError(f"{what} {path} 是一个目录，需要文件路径({what} is a directory)")
    _writable_dir(path.parent, what)


def _writable_dir(path: Path, what: str) -> None:
    p = path.resolve()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise BenchError(f"{what}的上级{p}不是目录({what}: {p} is not a directory)")
    if not os.access(p, os.W_OK | os.X_OK):
        raise BenchError(f"{what}：没有写{p}的权限({what}: {p} is not writable)")


def _load_results(path: Path) -> dict:
    """读取已有的结果文件；坏文件给出清楚的错误（不是traceback）。"""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as exc:
        raise BenchError(f"{path}不是合法的JSON（第{exc.lineno}行第{exc.colno}列：{exc.msg}）"
                         f"({path} is not valid JSON)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"读不了{path}：{exc}(cannot read {path})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("suites"), dict) or not isinstance(doc.get("meta"), dict):
        raise BenchError(f"{path}不是reduction-lab bench写出的结果文件（缺少meta/suites）"
                         f"({path} is not a reduction-lab results file)")
    return doc


def _validate(args) -> dict | None:
    """在任何测量之前检查所有参数；返回--merge要合并进去的旧文档（没有则None）。"""
    if args.iters is not None and args.iters < 1:
        raise BenchError(f"--iters必须>= 1，得到{args.iters}")
    if args.warmup is not None and args.warmup < 0:
        raise BenchError(f"--warmup必须>= 0，得到{args.warmup}")
    if args.budget is not None and not (args.budget > 0 and args.budget != float("inf")):
        raise BenchError(f"--budget必须是正的有限秒数，得到{args.budget}")
    if args.child_timeout is not None and not (args.child_timeout > 0 and args.child_timeout != float("inf")):
        raise BenchError(f"--child-timeout必须是正的有限秒数，得到{args.child_timeout}")
    for name, value in (("--child-timeout", args.child_timeout), ("--time-limit", args.time_limit)):
        if value is not None and args.processes == "one":
            raise BenchError(f"{name}只用于--processes per-impl({name} needs per-impl processes)")
    if args.time_limit is not None and not (args.time_limit > 0 and args.time_limit != float("inf")):
        raise BenchError(f"--time-limit必须是正的有限秒数，得到{args.time_limit}")
    if args.dtypes is not None and args.dtypes != ["float32"]:
        from .harness import DTYPE_SUITES

        if not any(s in DTYPE_SUITES for s in args.suite):
            raise BenchError(f"{','.join(args.suite)}只有float32；--dtype只用于{', '.join(DTYPE_SUITES)}"
                             f"({','.join(args.suite)} is float32 only)")
    for name, values in (("--n", args.n), ("--full-sum-n", args.full_sum_n)):
        if values is not None and any(v <= 0 for v in values):
            raise BenchError(f"{name}的每一项都必须是正整数，得到{values}")
    if args.total_elems is not None and args.total_elems <= 0:
        raise BenchError(f"--total-elems必须是正整数，得到{args.total_elems}")
    if args.impl is not None and not args.impl:
        raise BenchError("--impl是空列表：至少给出一个实现(--impl is empty)")
    if args.prefix is not None and (os.sep in args.prefix or (os.altsep and os.altsep in args.prefix)
                                    or args.prefix in ("", ".", "..")):
        raise BenchError(f"--prefix只能是文件名前缀，不能含路径，得到{args.prefix!r}")
    if args.merge and not args.json_path:
        raise BenchError("--merge需要和--json一起用(--merge needs --json)")
    old = None
    if args.json_path:
        path = Path(args.json_path)
        _writable_file(path, "--json")
        if args.merge and path.exists():
            old = _load_results(path)
    if args.report_dir:
        _writable_dir(Path(args.report_dir), "--report-dir")
        if Path(args.report_dir).exists() and not Path(args.report_dir).is_dir():
            raise BenchError(f"--report-dir {args.report_dir}不是目录")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BenchError("--report-dir要画图，需要matplotlib：pip install 'reduction_lab[bench]'") from None
    return old


def _cmd_bench(args, argv) -> int:
    try:
        old = _validate(args)
    except BenchError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2
    import reduction_lab  # noqa: F401先于triton导入：sim模式要打开解释器
    from . import harness

    suites = args.suite
    opts = dict(argv=argv, ns=args.n, full_sum_ns=args.full_sum_n, total_elems=args.total_elems,
                impls=args.impl, iters=args.iters, warmup=args.warmup, quick=args.quick, seed=args.seed,
                budget_s=args.budget, dtypes=args.dtypes)
    try:
        if args.processes == "one":
            doc = harness.run(suites, progress=not args.no_progress, **opts)
        else:
            from .isolate import run_isolated

            doc = run_isolated(suites, child_timeout_s=args.child_timeout, time_limit_s=args.time_limit, **opts)
    except ValidationError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2

    from .report import default_prefix, render_table, tables, write_report

    prefix = args.prefix or default_prefix(doc)
    measured = doc["suites"]                   # 这次运行测的套件（--merge 之后 doc 还含旧的）
    for name, text in tables(doc, prefix):
        print()
        print(f"== {name} ==")
        print(text)

    if args.json_path:
        path = Path(args.json_path)
        if old is not None:
            measured = dict(doc["suites"])
            doc = merge_docs(old, doc)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        os.replace(tmp, path)
        print(f"JSON已写入{path}")
    if args.report_dir:
        for p in write_report(doc, args.report_dir, prefix=prefix):
            print(f"已写入{p}")
    if doc["meta"]["mode"] != "gpu":
        print(harness.SIM_BANNER)
    errors = problems(measured)
    if errors:
        print(f"有{len(errors)}个（实现, 形状）运行出错或结果不符，见上表", file=sys.stderr)
        return 3
    return 0


BAD_STATUSES = ("error", "mismatch")


def problems(suites: dict) -> list[tuple]:
    """运行出错或结果不符的(套件, dtype, 形状, 实现)；被实现拒绝的形状、因时间预算未测的不算。
    出错的子进程没有留下任何格子时（例如所有子进程都出错，没有一个报告过形状），记为形状 None 的一项，
    免得整次运行算作成功。"""
    from .harness import dtype_records

    out = []
    for s, rec in suites.items():
        for dt, sub in dtype_records(rec).items():
            seen = set()
            for e in sub["shapes"]:
                for n, r in e["results"].items():
                    if r.get("status") in BAD_STATUSES:
                        out.append((s, e.get("dtype", dt), tuple(e["shape"]), n))
                    seen.add(r.get("process", n))
            out += [(s, dt, None, g) for g in sub.get("process_errors", {}) if g not in seen]
    return out


def merge_docs(old: dict, new: dict) -> dict:
    """--merge：新文档的套件替换旧文档里的同名套件；softmax与row-sum按dtype替换（旧文件里别的dtype保留）。"""
    from .harness import DTYPE_SUITES, SCHEMA, combine_dtype_records, dtype_records

    out = dict(old, schema=SCHEMA, meta=new["meta"], suites=dict(old["suites"]))
    for suite, rec in new["suites"].items():
        if suite in DTYPE_SUITES and suite != "percall" and suite in old["suites"]:
            recs = dtype_records(old["suites"][suite])
            recs.update(dtype_records(rec))
            out["suites"][suite] = combine_dtype_records(recs)
        else:
            out["suites"][suite] = rec
    return out


def _run_label(meta: dict) -> str:
    date = str(meta.get("date", "?"))
    when = date[:16].replace("T", " ") + " UTC" if "T" in date else date
    return f"{when}的运行（命令 {meta.get('command', '?')}）"


def merge_columns(old: dict, new: dict) -> dict:
    """按列合并：``new``里每个套件、每个dtype的记录里测过的实现（它的``processes``）替换``old``里同一形状的结果，
    ``old``里别的实现、别的形状、别的套件原样保留。``copy_by_process``按进程更新，``copy``重新取各进程的中位数。
    记录的``columns_from``写明每一列来自哪一次运行（每一格的比例都相对于它自己进程里的拷贝或torch，所以
    来自不同运行的列可以放进同一张表）。``old``里没有的套件、dtype或形状是错误：按列合并只补列，不补行。"""
    from .harness import DTYPE_SUITES, SCHEMA, combine_dtype_records, dtype_records
    from .isolate import _shape_key, median_process

    out = dict(old, schema=SCHEMA, suites=dict(old["suites"]))
    for suite, rec in new["suites"].items():
        if suite not in old["suites"]:
            raise BenchError(f"旧文件里没有套件{suite}，不能按列合并(suite {suite} not in the old file)")
        split = suite in DTYPE_SUITES and suite != "percall"
        olds = dtype_records(old["suites"][suite]) if split else {"": old["suites"][suite]}
        news = dtype_records(rec) if split else {"": rec}
        for dt, nrec in news.items():
            if dt not in olds:
                raise BenchError(f"旧文件的{suite}里没有dtype {dt}(dtype {dt} not in the old {suite} record)")
            orec = dict(olds[dt])
            names = list(nrec.get("processes") or [i["name"] for i in nrec["impls"]])
            # 各dtype的记录里是子进程自己的命令行：运行的命令取整个文件（或整个套件）记下的那一条
            command = rec.get("meta", {}).get("command") or new.get("meta", {}).get("command")
            label = _run_label(dict(nrec["meta"], **({"command": command} if command else {})))
            known = {i["name"] for i in orec["impls"]}
            orec["impls"] = list(orec["impls"]) + [i for i in nrec["impls"] if i["name"] not in known]
            # 表头列出的库版本：新并进来的列用到、旧记录没记下的（例如旧运行没有导入tilelang）补上
            orec["meta"] = dict(orec["meta"], **{k: nrec["meta"][k] for k, _ in LIBRARIES
                                                 if not orec["meta"].get(k) and nrec["meta"].get(k)})
            # 每个实现来自哪一次运行：旧记录的columns_from，没写的是旧记录自己的那次运行
            origin = {i["name"]: _run_label(orec["meta"]) for i in orec["impls"]}
            for group, run in orec.get("columns_from", {}).items():
                for n in group.split(","):
                    origin[n] = run
            for n in names:
                origin[n] = label
            by_key = {_shape_key(e): e for e in nrec["shapes"]}
            shapes = []
            for e in orec["shapes"]:
                ne = by_key.pop(_shape_key(e), None)
                if ne is None:
                    shapes.append(e)
                    continue
                e = dict(e, results=dict(e["results"]))
                for n in names:
                    if n in ne["results"]:
                        e["results"][n] = ne["results"][n]
                if "copy_by_process" in e and "copy_by_process" in ne:
                    copies = dict(e["copy_by_process"], **{g: v for g, v in ne["copy_by_process"].items()
                                                           if g in names})
                    e["copy_by_process"] = copies
                    group = median_process(copies)
                    if ne["copy"].get("process") == group:
                        e["copy"] = ne["copy"]
                    elif e["copy"].get("process") != group:
                        # 只留着那个进程的带宽：分位数属于原来记下的进程，不再沿用
                        e["copy"] = {k: v for k, v in e["copy"].items() if k not in ("p20_ms", "p80_ms")}
                        e["copy"].update(gbps=copies[group], process=group)
                        if "bytes" in e["copy"]:
                            e["copy"]["median_ms"] = e["copy"]["bytes"] / copies[group] / 1e6
                shapes.append(e)
            if by_key:
                raise BenchError(f"{suite} {dt}：旧文件里没有这些形状：{sorted(by_key)}，按列合并只补列"
                                 f"(shapes not in the old record)")
            orec["shapes"] = shapes
            groups: dict[str, list[str]] = {}
            for i in orec["impls"]:
                groups.setdefault(origin[i["name"]], []).append(i["name"])
            if len(groups) > 1:
                orec["columns_from"] = {",".join(ns): run for run, ns in groups.items()}
            else:
                orec.pop("columns_from", None)
            olds[dt] = orec
        out["suites"][suite] = combine_dtype_records(olds) if split else olds[""]
    return out


def _cmd_merge(args) -> int:
    try:
        old = _load_results(Path(args.old))
        new = _load_results(Path(args.new))
        doc = merge_columns(old, new)
    except BenchError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2
    Path(args.old).write_text(json.dumps(doc, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"已按列合并进{args.old}")
    return 0


def _cmd_report(args) -> int:
    from .report import render_table, stem, write_report

    try:
        doc = _load_results(Path(args.json_path))
        out = Path(args.out) if args.out else Path(args.json_path).parent
        if not args.check:
            _writable_dir(out, "--out")
        return _report(args, doc, out, render_table, stem, write_report)
    except BenchError as exc:
        print(f"错误：{exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        print(f"错误：{args.json_path}的内容不完整或格式不对（{type(exc).__name__}: {exc}）"
              f"({args.json_path} is malformed)", file=sys.stderr)
        return 2


def _report(args, doc, out, render_table, stem, write_report) -> int:
    from .report import default_prefix, tables

    prefix = args.prefix or default_prefix(doc)
    if args.check:
        bad = []
        for name, text in tables(doc, prefix):
            path = out / f"{name}.md"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                bad.append(str(path))
        if bad:
            print("这些表格与JSON不一致，请重新运行reduction-lab report：" + ", ".join(bad), file=sys.stderr)
            return 1
        print("表格与JSON一致")
        return 0
    for p in write_report(doc, out, prefix=prefix, plots=not args.no_plots):
        print(f"已写入{p}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].split(",")[0] in _CHOICES:  # python -m reduction_lab.bench softmax ...
        argv = ["bench"] + argv
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        return _cmd_bench(args, ["reduction-lab"] + argv)
    if args.command == "merge":
        return _cmd_merge(args)
    return _cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
