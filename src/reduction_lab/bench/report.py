"""从基准测试的JSON生成Markdown表格和PNG图（matplotlib，Agg后端）。

页面docs/bench/index.md用pymdownx.snippets引入生成的表格；测试检查提交的表格与
从提交的JSON重新生成的结果逐字相同，数字不会漂移。

    reduction-lab report docs/data/h200.json --out docs/data
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
}
_ROW_SUITES = ("softmax", "row-sum", "layer-norm", "rms-norm", "col-sum", "layer-norm-bwd", "rms-norm-bwd")


def stem(suite: str, prefix: str = "h200") -> str:
    """表格/图片的文件名（不含扩展名），如h200_row_sum。"""
    return f"{prefix}_{suite.replace('-', '_')}"


def load(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if "suites" not in doc or "meta" not in doc:
        raise ValueError(f"{path}不是reduction-lab bench写出的JSON（缺meta/suites）")
    return doc


# 表格与清单里的文字来自JSON（内核说明、标签、错误信息），常含代码片段（2*s*tid、__syncthreads()）：
# 按Markdown转义，否则*与_被当成强调，|把表格拆成别的列。
_MD_INLINE = re.compile(r"([\\`*_\[\]>|$])")


def md_text(text) -> str:
    """一段普通文字放进Markdown（表格单元格、清单项）：行内标记字符加反斜杠（<写成&lt;），换行并成空格。"""
    text = " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;")
    return _MD_INLINE.sub(r"\\\1", text)


def md_code(text) -> str:
    """一段代码放进Markdown行内代码：反引号栏比内容里最长的一串反引号多一个。"""
    text = " ".join(str(text).split())
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _meta_line(rec: dict) -> str:
    m = rec["meta"]
    parts = [f"设备：{m['device']}", f"torch {m['torch']}", f"triton {m['triton']}"]
    if m.get("cupy"):
        parts.append(f"cupy {m['cupy']}")
    if m.get("tilelang"):
        parts.append(f"tilelang {m['tilelang']}")
    parts.append(f"日期{m['date'][:10]}")
    if m["timer"] != "cuda-events":
        how = "time.perf_counter（CPU，不代表GPU）"
    else:
        how = rec.get("timing", "CUDA事件")
    parts.append(f"计时：{how}，{rec['iters']}次取中位数")
    return "，".join(parts) + "。"


def _fmt_gbps(r: dict | None, with_frac: bool = True) -> str:
    if r is None:
        return "—"
    if r.get("status") != "ok":
        return "出错"
    s = f"{r['gbps']:.0f}"
    if with_frac:
        s += f"（{100 * r['frac_copy']:.0f}%）"
    return s


def _skipped_lines(rec: dict) -> list[str]:
    out = []
    for name, why in rec.get("skipped", {}).items():
        out.append(f"- 未测{md_code(name)}：{md_text(why)}")
    if rec.get("skipped_shapes"):
        sk = rec["skipped_shapes"]
        out.append(f"- 未测的形状{', '.join(str(tuple(x)) for x in sk['shapes'])}：{md_text(sk['reason'])}")
    errors = []
    for e in rec["shapes"]:
        for name, r in e["results"].items():
            if r.get("status") != "ok":
                errors.append(f"- {md_code(name)}在形状{tuple(e['shape'])}上出错：{md_text(r.get('error', ''))}")
    return out + errors


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


def render_table(doc: dict, suite: str) -> str:
    """一个测试套件的Markdown（说明行 + 表格 + 未测/出错清单），以换行结尾。"""
    rec = doc["suites"][suite]
    lines = [f"<!-- 由reduction-lab report从JSON生成；不要手改-->", "",
             _meta_line(rec), ""]
    if rec["meta"]["mode"] != "gpu":
        lines += [f"!!! warning \"sim模式\"", f"    {rec['meta']['sim_warning']}", ""]
    lines.append(f"字节数：{rec['bytes_formula']}；拷贝上限：{rec['copy_formula']}。")
    if "tolerance" in rec:
        lines.append(f"计时前的验证：{rec['tolerance']}。")
    if rec.get("l2_flush") and rec["meta"]["mode"] == "gpu":
        lines.append(f"L2：{rec['l2_flush']}；输入小于3倍L2时在多份副本之间轮换。")
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


def plot_suite(doc: dict, suite: str, path: str | os.PathLike) -> Path:
    rec = doc["suites"][suite]
    path = Path(path)
    device = rec["meta"]["device"]
    if rec["meta"]["mode"] != "gpu":
        device = "CPU sim mode: times say nothing about a GPU"
    title = f"{suite}, fp32 ({device})"
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
    """为JSON里的每个测试套件写一份``<prefix>_<suite>.md``（和``.png``）。"""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for suite in doc["suites"]:
        md = out / f"{stem(suite, prefix)}.md"
        md.write_text(render_table(doc, suite), encoding="utf-8")
        written.append(md)
        if plots:
            written.append(plot_suite(doc, suite, out / f"{stem(suite, prefix)}.png"))
    return written
