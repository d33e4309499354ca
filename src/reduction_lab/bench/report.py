"""从基准测试的JSON生成Markdown表格和PNG图（matplotlib，Agg后端）。

页面docs/bench/index.md用pymdownx.snippets引入生成的表格；测试检查提交的表格与
从提交的JSON重新生成的结果逐字相同，数字不会漂移。

    reduction-lab report docs/data/h200.json --out docs/data

每个套件一张表（``h200_<套件>.md``）；softmax与row-sum的其他dtype各一张（``h200_softmax_bf16.md``），
``percall``一张，另有对照目标的判定表``h200_targets.md``（float32与bfloat16并排，见:func:`target_verdicts`）。
schema 1的文件（只有float32）照样能读，生成的表格与以前逐字相同。
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

SUITE_TITLES = {
    "softmax": "按行softmax",
    "row-sum": "按行求和",
    "full-sum": "全数组求和（七个版本 + warp shuffle）",
    "bank-conflicts": "存储体冲突演示内核",
    "layer-norm": "LayerNorm前向",
    "rms-norm": "RMSNorm前向",
    "col-sum": "沿列求和",
    "layer-norm-bwd": "LayerNorm反向",
    "rms-norm-bwd": "RMSNorm反向",
    "percall": "一次调用的开销",
}
_DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: 格子里的状态（不是ok时）
STATUS_TEXT = {"error": "出错", "mismatch": "结果不符", "unsupported": "不支持", "skipped": "未测"}
_ROW_SUITES = ("softmax", "row-sum", "layer-norm", "rms-norm", "col-sum", "layer-norm-bwd", "rms-norm-bwd")


def stem(suite: str, prefix: str = "h200", dtype: str = "float32") -> str:
    """表格/图片的文件名（不含扩展名），如h200_row_sum、h200_softmax_bf16。"""
    tail = "" if dtype == "float32" else "_" + _DTYPE_SHORT[dtype]
    return f"{prefix}_{suite.replace('-', '_')}{tail}"


def _dtype_records(rec: dict) -> dict:
    from .harness import dtype_records

    return dtype_records(rec)


def default_prefix(doc: dict) -> str:
    """文件名前缀的默认值：JSON里GPU的型号（``NVIDIA H100 80GB HBM3`` -> ``h100``，``NVIDIA A100-SXM4-80GB``
    -> ``a100``），认不出型号的GPU是``gpu``；sim模式是``h200``（与本课程提交的数据同名，页面与测试都按它读）。"""
    meta = doc.get("meta", {})
    if meta.get("mode") != "gpu":
        return "h200"
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", str(meta.get("device", "")))
    return m.group(1).lower() if m else "gpu"


def tables(doc: dict, prefix: str = "h200") -> list[tuple[str, str]]:
    """全部生成的表格：[(文件名不含扩展名, Markdown)]，``write_report``与``report --check``都用它。"""
    out = []
    for suite, rec in doc["suites"].items():
        if suite == "percall":
            out.append((stem(suite, prefix), render_table(doc, suite)))
            continue
        for dt in _dtype_records(rec):
            out.append((stem(suite, prefix, dt), render_table(doc, suite, dt)))
    if any(s in doc["suites"] for s in TARGET_SUITES):
        out.append((f"{prefix}_targets", render_targets(doc)))
    return out


def load(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "suites" not in doc or "meta" not in doc:
        raise ValueError(f"{path}不是reduction-lab bench写出的JSON（缺meta/suites）")
    return doc


# 表格与清单里的文字来自JSON（内核说明、标签、错误信息），常含代码片段（2*s*tid、__syncthreads()）：
# 按Markdown转义，否则*与_被当成强调，|把表格拆成别的列。
_MD_INLINE = re.compile(r"([\\`*_\[\]>|$])")


#: 终端颜色等ANSI转义序列（有的库把它们写进异常信息）与其余控制字符：放进页面之前去掉
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


def md_text(text) -> str:
    """一段普通文字放进Markdown（表格单元格、清单项）：去掉ANSI转义序列，行内标记字符加反斜杠（<写成&lt;），
    换行并成空格。"""
    text = " ".join(_ANSI.sub("", str(text)).split()).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_INLINE.sub(r"\\\1", text)


def md_code(text) -> str:
    """一段代码放进Markdown行内代码：反引号栏比内容里最长的一串反引号多一个。"""
    text = " ".join(_ANSI.sub("", str(text)).split())
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _versions(m: dict) -> list[str]:
    """表头的一串版本：设备、torch、triton，再加这次运行记下了版本的可选库（harness.LIBRARIES）。"""
    from .harness import LIBRARIES

    parts = [f"设备：{m['device']}", f"torch {m['torch']}", f"triton {m['triton']}"]
    parts += [f"{name} {m[key]}" for key, name in LIBRARIES if m.get(key)]
    return parts


def _meta_line(rec: dict) -> str:
    m = rec["meta"]
    parts = _versions(m)
    parts.append(f"日期{m['date'][:10]}")
    if m["timer"] != "cuda-events":
        how = "time.perf_counter（CPU，不代表GPU）"
    else:
        how = rec.get("timing", "CUDA事件")
    parts.append(f"计时：{how}，{rec['iters']}次取中位数" if rec.get("iters") else "没有计时")
    return "，".join(parts) + "。"


def _fmt_gbps(r: dict | None, with_frac: bool = True) -> str:
    if r is None:
        return "—"
    if r.get("status") != "ok":
        return STATUS_TEXT.get(r.get("status"), "出错")
    s = f"{r['gbps']:.0f}"
    if with_frac:
        s += f"（{100 * r['frac_copy']:.0f}%）"
    return s


def _skipped_lines(rec: dict) -> list[str]:
    out = [f"- 子进程{md_code(g)}出错：{md_text(why)}" for g, why in rec.get("process_errors", {}).items()]
    # 一张表的列来自同一天的几次运行时（每一格的比值都在自己的进程里与 torch 交替测出），写明哪几列来自哪一次
    for names, run in rec.get("columns_from", {}).items():
        cols = names.split(",")
        out.append(f"- {'、'.join(md_code(n) for n in cols)}{'这几列' if len(cols) > 1 else '这一列'}来自{md_text(run)}")
    for name, why in rec.get("skipped", {}).items():
        out.append(f"- 未测{md_code(name)}：{md_text(why)}")
    if rec.get("skipped_shapes"):
        sk = rec["skipped_shapes"]
        out.append(f"- 未测的形状{', '.join(str(tuple(x)) for x in sk['shapes'])}：{md_text(sk['reason'])}")
    errors = []
    grouped: dict[tuple, list] = {}   # (状态, 实现, 原因) -> 形状：被拒绝、未测的按原因合并成一行
    for e in rec["shapes"]:
        for name, r in e["results"].items():
            status = r.get("status")
            if status in ("unsupported", "skipped"):
                grouped.setdefault((status, name, r.get("reason", "")), []).append(e)
            elif status == "mismatch":
                errors.append(f"- {md_code(name)}在形状{tuple(e['shape'])}上结果不符：{md_text(r.get('error', ''))}")
            elif status != "ok":
                errors.append(f"- {md_code(name)}在形状{tuple(e['shape'])}上出错：{md_text(r.get('error', ''))}")
    for (status, name, why), entries in grouped.items():
        where = "、".join(_where(e) for e in entries)
        verb = "不支持" if status == "unsupported" else "未测"
        errors.append(f"- {md_code(name)}在{where}上{verb}：{md_text(why)}")
    return out + errors


def _where(e: dict) -> str:
    if "op" in e:
        return f"{e['op']} {e['M']}×{e['N']} {_DTYPE_SHORT[e['dtype']]}"
    return f"N = {e['N']}" if "N" in e else str(tuple(e["shape"]))


def _rows_table(rec: dict) -> list[str]:
    impls = rec["impls"]
    head = "| N | M | 拷贝GB/s | " + " | ".join(md_text(i["label"]) + ("" if i["kind"] == "ours" else "（对照）")
                                                  for i in impls) + " |"
    sep = "|" + "---:|" * (3 + len(impls))
    lines = [head, sep]
    for e in rec["shapes"]:
        cells = [str(e["N"]), str(e["M"]), f"{e['copy']['gbps']:.0f}"]
        cells += [_fmt_gbps(e["results"].get(i["name"])) for i in impls]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _speedups(entry: dict, names: list[str]) -> dict:
    base = None
    prev = None
    out = {}
    for n in names:
        r = entry["results"].get(n)
        if r is None or r.get("status") != "ok":
            out[n] = (None, None)
            prev = None
            continue
        t = r["median_ms"]
        if base is None:
            base = t
        out[n] = (prev / t if prev else None, base / t)
        prev = t
    return out


def _size(nbytes: int) -> str:
    if nbytes >= 2**20:
        return f"{nbytes / 2**20:g} MiB"
    return f"{nbytes / 2**10:g} KiB"


def _full_sum_table(rec: dict) -> list[str]:
    lines = []
    impls = rec["impls"]
    versions = [i for i in impls if i["kind"] == "ours"]
    peers = [i for i in impls if i["kind"] != "ours"]
    desc = rec.get("versions", {})
    for e in rec["shapes"]:
        n = e["N"]
        k = int(round(math.log2(n))) if n > 0 else 0
        size = f"2^{k}" if 2 ** k == n else str(n)
        lines.append(f"**N = {size}个fp32（{_size(n * 4)}）**，同次运行的拷贝带宽"
                     f"{e['copy']['gbps']:.0f} GB/s")
        lines.append("")
        lines.append("| 版本 | 内核 | 做法 | 时间（µs） | GB/s | 占拷贝 | 单步加速 | 累计加速 |")
        lines.append("|---:|---|---|---:|---:|---:|---:|---:|")
        sp = _speedups(e, [i["name"] for i in versions])
        for i in versions:
            r = e["results"].get(i["name"])
            v = i["name"][1:]
            kernel, what = desc.get(v, [i["label"], ""])
            if r is None or r.get("status") != "ok":
                lines.append(f"| {v} | {md_code(kernel)} | {md_text(what)} | 出错 | — | — | — | — |")
                continue
            step, cum = sp[i["name"]]
            lines.append(f"| {v} | {md_code(kernel)} | {md_text(what)} | {1e3 * r['median_ms']:.1f} | {r['gbps']:.0f} | "
                         f"{100 * r['frac_copy']:.0f}% | {'—' if step is None else f'{step:.2f}x'} | "
                         f"{cum:.2f}x |")
        first = next((e["results"].get(i["name"]) for i in versions), None)
        for i in peers:
            r = e["results"].get(i["name"])
            if r is None or r.get("status") != "ok":
                lines.append(f"| 对照 | {md_text(i['label'])} | | 出错 | — | — | — | — |")
                continue
            cum = (f"{first['median_ms'] / r['median_ms']:.2f}x"
                   if first and first.get("status") == "ok" else "—")
            lines.append(f"| 对照 | {md_text(i['label'])} | 库函数 | {1e3 * r['median_ms']:.1f} | {r['gbps']:.0f} | "
                         f"{100 * r['frac_copy']:.0f}% | — | {cum} |")
        direct = [n for n, r in e["results"].items()
                  if r.get("status") == "ok" and r.get("timer") == "cuda-events"]
        if rec["meta"]["mode"] == "gpu" and direct:
            lines.append("")
            lines.append(f"其余实现录成CUDA图重放计时；{'、'.join(md_code(n) for n in direct)}无法录制CUDA图，"
                         f"直接用CUDA事件计时（含Python的启动开销）。")
        lines.append("")
    return lines


def _bank_table(rec: dict) -> list[str]:
    lines = ["| 内核 | 共享内存的访问方式 | 时间（µs） | GB/s | 占拷贝 | 时间/最快 |",
             "|---|---|---:|---:|---:|---:|"]
    e = rec["shapes"][0]
    oks = [r["median_ms"] for r in e["results"].values() if r.get("status") == "ok"]
    best = min(oks) if oks else None
    for i in rec["impls"]:
        r = e["results"].get(i["name"])
        if r is None or r.get("status") != "ok":
            lines.append(f"| {md_code(i['kernel'])} | {md_text(i['label'])} | 出错 | — | — | — |")
            continue
        lines.append(f"| {md_code(i['kernel'])} | {md_text(i['label'])} | {1e3 * r['median_ms']:.1f} | {r['gbps']:.0f} | "
                     f"{100 * r['frac_copy']:.0f}% | {r['median_ms'] / best:.2f}x |")
    return lines


def _isolation_line(rec: dict) -> str | None:
    """分进程测量的说明，和各进程测得的拷贝带宽相差多少。"""
    if not rec.get("isolation"):
        return None
    spreads = []
    for e in rec["shapes"]:
        vals = list(e.get("copy_by_process", {}).values())
        if len(vals) > 1:
            spreads.append(max(vals) / min(vals) - 1)
    text = f"进程：{rec['isolation']}"
    if spreads:
        text += f"（各进程测得的拷贝带宽在同一形状上最多相差{100 * max(spreads):.1f}%）"
    return text + "。"


def render_table(doc: dict, suite: str, dtype: str = "float32") -> str:
    """一个测试套件（一种dtype）的Markdown（说明行 + 表格 + 未测/出错清单），以换行结尾。"""
    if suite == "percall":
        return _render_percall(doc["suites"][suite])
    recs = _dtype_records(doc["suites"][suite])
    if dtype not in recs:
        raise ValueError(f"{suite}没有{dtype}的结果；有：{', '.join(recs)}")
    rec = recs[dtype]
    lines = [f"<!-- 由reduction-lab report从JSON生成；不要手改-->", "",
             _meta_line(rec), ""]
    if rec["meta"]["mode"] != "gpu":
        lines += [f"!!! warning \"sim模式\"", f"    {rec['meta']['sim_warning']}", ""]
    lines.append(f"字节数：{rec['bytes_formula']}；拷贝上限：{rec['copy_formula']}。")
    if "tolerance" in rec:
        lines.append(f"计时前的验证：{rec['tolerance']}。")
    if rec.get("l2_flush") and rec["meta"]["mode"] == "gpu":
        lines.append(f"L2：{rec['l2_flush']}；输入小于3倍L2时在多份副本之间轮换。")
    iso = _isolation_line(rec)
    if iso:
        lines.append(iso)
    lines.append("")
    if suite in _ROW_SUITES:
        lines += _rows_table(rec)
        lines.append("")
        lines.append("表中为GB/s（中位时间），括号里是占同一形状拷贝带宽的比例。")
    elif suite == "full-sum":
        lines += _full_sum_table(rec)
    elif suite == "bank-conflicts":
        lines += _bank_table(rec)
    else:
        raise ValueError(f"未知的测试套件{suite!r}")
    extra = _skipped_lines(rec)
    while lines and lines[-1] == "":
        lines.pop()
    if extra:
        lines += [""] + extra
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- 一次调用的开销

def _render_percall(rec: dict) -> str:
    m = rec["meta"]
    parts = _versions(m)
    parts.append(f"日期{m['date'][:10]}")
    gpu = m["mode"] == "gpu"
    lines = ["<!-- 由reduction-lab report从JSON生成；不要手改-->", "", "，".join(parts) + "。", ""]
    if not gpu:
        lines += ["!!! warning \"sim模式\"", f"    {m['sim_warning']}", ""]
    if rec.get("method"):
        lines.append(f"方法：{rec['method']}（每次连续调用K = {rec['iters']}次，预热{rec['warmup']}次，"
                     f"墙钟时间重复{rec['repeats']}次取中位数）。")
        lines.append(f"计时前的验证：{rec['tolerance']}。")
    iso = rec.get("isolation")
    if iso:
        lines.append("进程：每个实现在自己的Python子进程里验证和计时。")
    impls = rec["impls"]
    for op in ("softmax", "row-sum"):
        entries = [e for e in rec["shapes"] if e["op"] == op]
        names = [i for i in impls if any(i["name"] in e["results"] for e in entries)]
        if not entries or not names:
            continue
        lines += ["", f"**{op}**", ""]
        lines.append("| 形状 | dtype | " + " | ".join(md_text(i["label"]) + ("" if i["kind"] == "ours" else "（对照）")
                                                 for i in names) + " |")
        lines.append("|---|---|" + "---:|" * len(names))
        for e in entries:
            cells = [f"{e['M']}×{e['N']}", _DTYPE_SHORT[e["dtype"]]]
            for i in names:
                r = e["results"].get(i["name"])
                if r is None:
                    cells.append("—")
                elif r.get("status") != "ok":
                    cells.append(STATUS_TEXT.get(r.get("status"), "出错"))
                elif r.get("kernel_us") is not None:
                    cells.append(f"{r['wall_us']:.1f}（{r['kernel_us']:.1f}）")
                else:
                    cells.append(f"{r['wall_us']:.0f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += _percall_ratio_table(entries, names)
    lines.append("")
    if gpu:
        lines.append("每格是一次调用的墙钟时间（µs），括号里是只算内核的时间（µs）；二者之差是主机端的开销。"
                     "比值表：每个实现的墙钟时间除以同一进程里交替测的torch eager（同一个操作、同一个输入）；"
                     "目标：默认backend（auto，短行上它选Triton）不超过1倍，CUDA C与TileLang不超过1.5倍。")
    else:
        lines.append("每格是一次调用的墙钟时间（µs，CPU上的模拟）。")
    extra = _skipped_lines(rec)
    if extra:
        lines += [""] + extra
    return "\n".join(lines) + "\n"


def _percall_ratio_table(entries: list, names: list) -> list[str]:
    """每格：墙钟时间 / 同一进程的 torch eager（percall 的 ``vs_torch``）；我们的实现另写判定。旧数据没有这一项时不画。"""
    from .percall import PERCALL_TARGETS

    if not any("vs_torch" in r for e in entries for r in e["results"].values()):
        return []
    cols = [i for i in names if i["name"] != "torch"]
    lines = ["", "相对同一进程的torch eager（墙钟时间之比）：", "",
             "| 形状 | dtype | " + " | ".join(md_text(i["label"]) for i in cols) + " |",
             "|---|---|" + "---:|" * len(cols)]
    for e in entries:
        cells = [f"{e['M']}×{e['N']}", _DTYPE_SHORT[e["dtype"]]]
        for i in cols:
            r = e["results"].get(i["name"]) or {}
            v = r.get("vs_torch")
            if v is None:
                cells.append("—")
                continue
            goal = PERCALL_TARGETS.get(i["name"])
            verdict = "" if goal is None else ("（达标）" if v <= goal else f"（目标{goal:g}×）")
            cells.append(f"{v:.2f}×{verdict}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# ---------------------------------------------------------------- 对照目标

#: 判定目标的套件、N的范围与比例；对照：softmax比全部对照，row-sum比torch、torch.compile、CuPy
TARGET_SUITES = ("softmax", "row-sum")
TARGET_FRAC = 0.92
TARGET_N = (512, 262144)
TARGET_DTYPES = ("float32", "bfloat16")
#: 判定表：(套件, 并排的 dtype, 只在有结果时才列出)。softmax 的目标另有 fp16（issue 的第 2 条），单独一张表
TARGET_TABLES = (("softmax", TARGET_DTYPES, False), ("softmax", ("float16",), True), ("row-sum", TARGET_DTYPES, False))
#: softmax 另有一行很长的形状（N = 2^20，M = 64）：目标是拷贝带宽的 85%，也要不低于最好的对照
TARGET_LONG = {"softmax": {2 ** 20: 0.85}}


def target_frac(suite: str, n: int) -> float | None:
    """N 上的带宽目标（占拷贝的比例）；不判定的形状返回 None。"""
    if TARGET_N[0] <= n <= TARGET_N[1]:
        return TARGET_FRAC
    return TARGET_LONG.get(suite, {}).get(n)
TARGET_PEERS = {"softmax": None, "row-sum": ("torch", "compile", "cupy")}


#: 判定的对象：softmax 看默认 backend（auto 在这块 GPU 上对每个 N 选的实现），按行求和看每个 backend（最慢的一个）
TARGET_SUBJECT = {"softmax": "default", "row-sum": "every"}
#: 没有记下计算能力的旧数据：按设备名认出有线程块簇（计算能力 9.0 以上）的 GPU
_CLUSTER_GPUS = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "GB200")


def has_clusters(meta: dict) -> bool:
    """结果所在的 GPU 有没有线程块簇：看 ``meta["compute_capability"]``，旧数据看设备名。"""
    cc = meta.get("compute_capability")
    if cc:
        return int(str(cc).split(".")[0]) >= 9
    name = str(meta.get("device", ""))
    return meta.get("mode") == "gpu" and any(g in name.split() for g in _CLUSTER_GPUS)


def _default_impl(suite: str, n: int, dtype: str, meta: dict) -> str:
    import torch

    from ..auto import choice

    op = "softmax" if suite == "softmax" else "reduce_sum"
    return choice(op, n, getattr(torch, dtype), clusters=has_clusters(meta), cupy=meta.get("cupy") is not None)


def target_verdicts(doc: dict, suite: str, dtype: str) -> list[dict]:
    """每个N一行：判定的对象（名字、GB/s、占拷贝）、最好的对照、两项是否达标。

    对象见 :data:`TARGET_SUBJECT`：softmax是默认backend（``backend="auto"``在这块GPU上选的实现，
    :func:`reduction_lab.auto.choice`），按行求和是我们的每个backend里最慢的一个。达标：对象 >= 拷贝带宽的92%
    （``frac_copy``，相对于同一进程的拷贝），并且GB/s不低于最好的对照（softmax：全部对照；row-sum：torch、
    torch.compile、CuPy）。只判定N在512 … 262144之间的形状，以及 :data:`TARGET_LONG` 里的长行
    （softmax 的 N = 2^20：85%）。``best``：我们最好的实现（名字与占拷贝），供对照。"""
    rec = doc["suites"].get(suite)
    if rec is None:
        return []
    sub = _dtype_records(rec).get(dtype)
    if sub is None:
        return []
    kinds = {i["name"]: i for i in sub["impls"]}
    peers = TARGET_PEERS[suite]
    rows = []
    for e in sub["shapes"]:
        goal = target_frac(suite, e["N"])
        if goal is None:
            continue
        ok = {n: r for n, r in e["results"].items() if r.get("status") == "ok" and n in kinds}
        ours = [n for n in kinds if kinds[n]["kind"] == "ours"]
        theirs = [(r["gbps"], n) for n, r in ok.items() if kinds[n]["kind"] != "ours"
                  and (peers is None or n in peers)]
        row = {"N": e["N"], "goal": goal, "ours": None, "peer": None, "frac": None, "ok_frac": None, "ok_peer": None,
               "best": None, "best_frac": None}
        if TARGET_SUBJECT[suite] == "default":
            subject = _default_impl(suite, e["N"], dtype, sub["meta"])
            subject = subject if subject in ours else None
        else:                                   # 每个 backend：最慢的一个（有一个没有结果就不判定）
            subject = None if any(n not in ok for n in ours) or not ours else min(ours, key=lambda n: ok[n]["gbps"])
        if subject is not None and subject in ok:
            r = ok[subject]
            row.update(ours=subject, ours_gbps=r["gbps"], frac=r["frac_copy"], ok_frac=r["frac_copy"] >= goal)
        measured = [n for n in ours if n in ok]
        if measured:
            b = max(measured, key=lambda n: ok[n]["gbps"])
            row.update(best=b, best_frac=ok[b]["frac_copy"])
        if theirs:
            g, n = max(theirs)
            row.update(peer=n, peer_gbps=g)
            if row["ours"] is not None:
                row["ok_peer"] = row["ours_gbps"] >= g
        rows.append(row)
    return rows


def _verdict_cells(row: dict | None, labels: dict) -> list[str]:
    if row is None or row["ours"] is None:
        return ["—", "—", "—"]
    ours = f"{100 * row['frac']:.0f}%（{md_text(labels.get(row['ours'], row['ours']))}）"
    peer = "—" if row["peer"] is None else f"{row['peer_gbps']:.0f}（{md_text(labels.get(row['peer'], row['peer']))}）"
    why = []
    if not row["ok_frac"]:
        why.append(f"低于{100 * row['goal']:.0f}%")
    if row["ok_peer"] is False:                 # 差多少：1 - 我们的 GB/s / 对照的 GB/s
        why.append(f"低于对照{100 * (1 - row['ours_gbps'] / row['peer_gbps']):.1f}%")
    verdict = "达标" if not why and row["ok_peer"] is not None else ("、".join(why) if why else "没有对照")
    if row.get("best") not in (None, row["ours"]):
        verdict += f"（最好的：{md_text(labels.get(row['best'], row['best']))} {100 * row['best_frac']:.0f}%）"
    return [ours, peer, verdict]


_SUBJECT_HEAD = {"default": "默认backend", "every": "最慢的backend"}

#: 另一项目标：同一个 softmax 算法的 CUDA C 与 TileLang 写法（float32）在判定的每个 N 上（含 2^20）都达到拷贝的 85%
LANG_TARGET = {"suite": "softmax", "dtype": "float32", "impls": ("cuda", "tilelang"), "goal": 0.85}


def language_verdicts(doc: dict) -> list[dict]:
    """:data:`LANG_TARGET` 的判定，每个 N 一行：``{"N", "goal", impl: 占拷贝的比例或 None（没有结果）, ...}``。
    判定的 N 与 :func:`target_frac` 相同（N = 512 … 262144 与 2^20），目标一律是 85%。"""
    rec = doc["suites"].get(LANG_TARGET["suite"])
    sub = None if rec is None else _dtype_records(rec).get(LANG_TARGET["dtype"])
    if sub is None:
        return []
    rows = []
    for e in sub["shapes"]:
        if target_frac(LANG_TARGET["suite"], e["N"]) is None:
            continue
        row = {"N": e["N"], "goal": LANG_TARGET["goal"]}
        for name in LANG_TARGET["impls"]:
            r = e["results"].get(name)
            row[name] = r["frac_copy"] if r and r.get("status") == "ok" else None
        rows.append(row)
    return rows


def _render_language_targets(doc: dict) -> list[str]:
    rows = language_verdicts(doc)
    if not rows:
        return []
    rec = _dtype_records(doc["suites"][LANG_TARGET["suite"]])[LANG_TARGET["dtype"]]
    labels = {i["name"]: i["label"] for i in rec["impls"]}
    names = LANG_TARGET["impls"]
    goal = 100 * LANG_TARGET["goal"]
    lines = ["", f"**CUDA C与TileLang的按行softmax，{_DTYPE_SHORT[LANG_TARGET['dtype']]}**", "",
             f"目标：同一个算法的{'与'.join(md_text(labels.get(n, n)) for n in names)}写法在上面每个N上（含N = 1048576）"
             f"都达到拷贝带宽的{goal:.0f}%。", ""]
    lines.append("| N | " + " | ".join(f"{md_text(labels.get(n, n))}/拷贝" for n in names) + " | 判定 |")
    lines.append("|---:|" + "---:|" * len(names) + "---|")
    for row in rows:
        cells = [str(row["N"])]
        why = []
        for n in names:
            f = row[n]
            cells.append("—" if f is None else f"{100 * f:.0f}%")
            if f is None:
                why.append(f"{md_text(labels.get(n, n))}没有结果")
            elif f < row["goal"]:
                why.append(f"{md_text(labels.get(n, n))}低于{goal:.0f}%")
        cells.append("、".join(why) if why else "达标")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_targets(doc: dict) -> str:
    """对照目标的判定表：softmax与row-sum各一张，float32与bfloat16并排；softmax的float16另一张（有结果时）；
    最后是CUDA C与TileLang的float32 softmax（:data:`LANG_TARGET`）。"""
    lines = ["<!-- 由reduction-lab report从JSON生成；不要手改-->", ""]
    lines.append(f"目标：softmax的默认backend（`backend=\"auto\"`在这块GPU上对每个N选的实现）、按行求和的每个backend，"
                 f"在N = {TARGET_N[0]} … {TARGET_N[1]}上达到同一进程拷贝带宽的{100 * TARGET_FRAC:.0f}%，并且不低于"
                 f"最好的对照（softmax：全部对照；按行求和：torch、torch.compile、CuPy）；softmax另有N = 1048576"
                 f"（M = 64）一行，目标是85%，同样要不低于对照。每格：判定的对象（softmax：默认backend选的实现；"
                 f"按行求和：最慢的backend）占拷贝的比例、最好的对照的GB/s、判定（低于对照时写出差多少：1 − 对象的GB/s ÷ 对照的GB/s）；"
                 f"我们最好的实现不是它时写在判定后面。softmax的fp16目标相同，另列一张表。")
    for suite, dtypes, optional in TARGET_TABLES:
        if suite not in doc["suites"]:
            continue
        recs = _dtype_records(doc["suites"][suite])
        labels = {i["name"]: i["label"] for r in recs.values() for i in r["impls"]}
        per = {dt: {row["N"]: row for row in target_verdicts(doc, suite, dt)} for dt in dtypes}
        ns = sorted({n for rows in per.values() for n in rows})
        if optional and not ns:
            continue
        title = SUITE_TITLES[suite] + ("" if dtypes == TARGET_DTYPES else "，" + "、".join(_DTYPE_SHORT[d] for d in dtypes))
        lines += ["", f"**{title}**", ""]
        if not ns:
            lines.append(f"没有N = {TARGET_N[0]} … {TARGET_N[1]}的{'、'.join(_DTYPE_SHORT[d] for d in dtypes)}结果。")
            continue
        head = ["N"]
        who = _SUBJECT_HEAD[TARGET_SUBJECT[suite]]
        for dt in dtypes:
            t = _DTYPE_SHORT[dt]
            head += [f"{t}：{who}/拷贝", f"{t}：最好的对照GB/s", f"{t}：判定"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|---:|" + "---:|---:|---|" * len(dtypes))
        for n in ns:
            cells = [str(n)]
            for dt in dtypes:
                cells += _verdict_cells(per[dt].get(n), labels)
            lines.append("| " + " | ".join(cells) + " |")
        missing = [_DTYPE_SHORT[dt] for dt in dtypes if not per[dt]]
        if missing:
            lines += ["", f"还没有{'、'.join(missing)}的结果（—）。"]
    lines += _render_language_targets(doc)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- 图

def _plot_rows(rec: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    ns = [e["N"] for e in rec["shapes"]]
    ax.plot(ns, [e["copy"]["gbps"] for e in rec["shapes"]], "k--", lw=2, label="device copy (read+write)")
    for i in rec["impls"]:
        xs, ys = [], []
        for e in rec["shapes"]:
            r = e["results"].get(i["name"])
            if r and r.get("status") == "ok":
                xs.append(e["N"])
                ys.append(r["gbps"])
        style = "-o" if i["kind"] == "ours" else ":s"
        ax.plot(xs, ys, style, ms=4, label=i["name"] + ("" if i["kind"] == "ours" else " (peer)"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns)
    ax.set_xticklabels([f"2^{int(round(math.log2(n)))}" for n in ns])
    ax.set_xlabel("N (row length), M*N fixed")
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_full_sum(rec: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = rec["shapes"]
    impls = rec["impls"]
    fig, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 4.4), dpi=120, squeeze=False)
    for ax, e in zip(axes[0], shapes):
        names = [i["name"] for i in impls]
        vals = [e["results"].get(n, {}).get("gbps", 0.0) if e["results"].get(n, {}).get("status") == "ok"
                else 0.0 for n in names]
        colors = ["tab:blue" if i["kind"] == "ours" else "tab:gray" for i in impls]
        ax.bar(range(len(names)), vals, color=colors)
        ax.axhline(e["copy"]["gbps"], color="k", ls="--", lw=1.5, label="device copy (read+write)")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, fontsize=8)
        ax.set_ylabel("GB/s (bytes read)")
        ax.set_title(f"N = 2^{int(round(math.log2(e['N'])))} fp32")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_bank(rec: dict, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    e = rec["shapes"][0]
    names = [i["name"] for i in rec["impls"]]
    vals = [1e3 * e["results"][n]["median_ms"] if e["results"].get(n, {}).get("status") == "ok" else 0.0
            for n in names]
    fig, ax = plt.subplots(figsize=(8, 4.4), dpi=120)
    ax.bar(names, vals, color="tab:blue")
    ax.set_ylabel("time (us), median")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_suite(doc: dict, suite: str, path: str | os.PathLike, dtype: str = "float32") -> Path:
    rec = _dtype_records(doc["suites"][suite])[dtype]
    path = Path(path)
    device = rec["meta"]["device"]
    if rec["meta"]["mode"] != "gpu":
        device = "CPU sim mode: times say nothing about a GPU"
    title = f"{suite}, {_DTYPE_SHORT[dtype]} ({device})"
    if suite in _ROW_SUITES:
        _plot_rows(rec, title, path)
    elif suite == "full-sum":
        _plot_full_sum(rec, title, path)
    elif suite == "bank-conflicts":
        _plot_bank(rec, title, path)
    else:
        raise ValueError(f"未知的测试套件{suite!r}")
    return path


def write_report(doc: dict, out_dir: str | os.PathLike, prefix: str = "h200",
                 plots: bool = True) -> list[Path]:
    """为JSON里的每个测试套件（softmax、row-sum每种dtype）写一份``<prefix>_<suite>[_<dtype>].md``
    （和``.png``；percall只有表格），再写对照目标的判定表``<prefix>_targets.md``。"""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in tables(doc, prefix):
        md = out / f"{name}.md"
        md.write_text(text, encoding="utf-8")
        written.append(md)
    if plots:
        for suite, rec in doc["suites"].items():
            if suite == "percall":
                continue
            for dt in _dtype_records(rec):
                written.append(plot_suite(doc, suite, out / f"{stem(suite, prefix, dt)}.png", dt))
    return written
