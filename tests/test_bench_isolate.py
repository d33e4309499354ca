"""分进程测量（reduction_lab.bench.isolate）、多种dtype、percall与对照目标的测试。

子进程的测试在sim模式下用很小的形状运行：真的启动子进程、真的验证和计时（CPU上），再合并。
假对照在tests/bench_fake_peers.py（测试夹具）：结果不符、子进程崩溃、超时。"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import reduction_lab as rl
from reduction_lab.bench import harness, isolate, report
from reduction_lab.bench.cli import main as cli_main, merge_docs, problems
from reduction_lab.bench.harness import dtype_records
from reduction_lab.bench.impls import EXTRA_ENV, Impl, LIGER_MAX_N, _liger_check, _liger_refuses

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
SMALL = dict(ns=[128, 256], total_elems=1024, iters=2, warmup=1)
HAVE_LIGER = _liger_check() is None


@pytest.fixture
def sim_children(monkeypatch):
    """子进程在sim模式下运行（与本进程的模式无关），能导入测试夹具。"""
    env = dict(os.environ, REDUCTION_LAB_MODE="sim")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(HERE)] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("TRITON_INTERPRET", None)
    return env


# ---------------------------------------------------------------- 真的分进程（sim模式）

@pytest.mark.skipif(rl.MODE != "sim", reason="子进程的模式跟随本进程；GPU上的分进程测量由scripts/gpu_suite.sh SUITE=peers运行")
def test_each_impl_in_its_own_process(sim_children):
    impls = ["triton", "torch"] + (["liger"] if HAVE_LIGER else [])
    doc = isolate.run_isolated(["softmax", "row-sum"], impls=impls, dtypes=["float32", "bfloat16"],
                               env=sim_children, log=lambda s: None, **SMALL)
    procs = doc["meta"]["processes"]
    assert list(procs) == impls                      # 本课程的在前，然后是对照
    pids = {info["pid"] for info in procs.values()}
    assert len(pids) == len(impls) and os.getpid() not in pids
    assert all(info["returncode"] == 0 and not info["timed_out"] for info in procs.values())
    if HAVE_LIGER:
        # Liger只在它自己的进程里被导入
        assert "liger_kernel" in procs["liger"]["loaded_modules"]
        assert "liger_kernel" not in procs["triton"]["loaded_modules"]
        assert "liger_kernel" not in procs["torch"]["loaded_modules"]
    sm = harness.dtype_records(doc["suites"]["softmax"])
    assert list(sm) == ["float32", "bfloat16"]
    for dt, rec in sm.items():
        assert rec["dtype"] == dt and rec["isolation"] == isolate.ISOLATION_NOTE
        assert [i["name"] for i in rec["impls"]] == impls
        for e in rec["shapes"]:
            assert e["bytes"] == 2 * e["M"] * e["N"] * harness.elem_size(dt)
            assert set(e["copy_by_process"]) == set(impls)            # 每个进程各测一次拷贝
            assert e["copy"]["gbps"] == sorted(e["copy_by_process"].values())[(len(impls) - 1) // 2]
            for name, r in e["results"].items():
                assert r["status"] == "ok" and r["process"] == name
                # 比例相对于同一进程的拷贝
                assert r["frac_copy"] == pytest.approx(r["gbps"] / e["copy_by_process"][name])
    rs = harness.dtype_records(doc["suites"]["row-sum"])
    assert [i["name"] for i in rs["bfloat16"]["impls"]] == ["triton", "torch"]   # Liger没有按行求和
    assert problems(doc["suites"]) == []
    # 表格：每种dtype一张，写明分进程
    names = [n for n, _ in report.tables(doc)]
    assert names == ["h200_softmax", "h200_softmax_bf16", "h200_row_sum", "h200_row_sum_bf16", "h200_targets"]
    text = report.render_table(doc, "softmax", "bfloat16")
    assert "读`M*N`个bf16" in text and "子进程" in text and "最多相差" in text


@pytest.mark.skipif(rl.MODE != "sim", reason="子进程的模式跟随本进程")
def test_failing_children_become_cells(sim_children, monkeypatch):
    """结果不符、崩溃、超时的子进程：它们的格子写明原因，其他进程照常。"""
    monkeypatch.setenv(EXTRA_ENV, "bench_fake_peers")
    monkeypatch.syspath_prepend(str(HERE))
    env = dict(sim_children, **{EXTRA_ENV: "bench_fake_peers"})
    logs: list[str] = []
    # 超时的子进程单独跑一次，时限很短（它在准备时睡 600 s；时限落在导入期间也一样被终止）；
    # 其余的时限放宽，负载高的机器上导入 torch 也不会误判成超时
    slow = isolate.run_isolated(["softmax"], impls=["fake_slow"], env=env, log=logs.append, child_timeout_s=3,
                                **SMALL)
    assert slow["meta"]["processes"]["fake_slow"]["timed_out"]
    rec = slow["suites"]["softmax"]
    # 唯一的子进程出错：没有谁报告过形状，原因记在 process_errors，表格写明，整次运行不算成功
    assert rec["shapes"] == [] and "超过3 s" in rec["process_errors"]["fake_slow"]
    assert "超过3 s" in report.render_table(slow, "softmax")
    assert problems(slow["suites"]) == [("softmax", "float32", None, "fake_slow")]
    doc = isolate.run_isolated(["softmax"], impls=["torch", "fake_ok", "fake_bad", "fake_crash"],
                               env=env, log=logs.append, child_timeout_s=120, **SMALL)
    procs = doc["meta"]["processes"]
    assert procs["fake_crash"]["returncode"] == 17
    assert procs["fake_bad"]["returncode"] == 0 and not any(p["timed_out"] for p in procs.values())
    rec = doc["suites"]["softmax"]
    assert [i["name"] for i in rec["impls"]] == ["torch", "fake_ok", "fake_bad", "fake_crash"]
    for e in rec["shapes"]:
        r = e["results"]
        assert r["torch"]["status"] == "ok" and r["fake_ok"]["status"] == "ok"
        assert r["fake_bad"]["status"] == "mismatch" and "结果不符" in r["fake_bad"]["error"]
        assert "gbps" not in r["fake_bad"]                      # 不符的不计时
        assert r["fake_crash"]["status"] == "error" and "退出码17" in r["fake_crash"]["error"]
    bad = problems(doc["suites"])
    assert {n for *_, n in bad} == {"fake_bad", "fake_crash"}
    text = report.render_table(doc, "softmax")
    assert "结果不符" in text and "退出码17" in text and "| 出错 |" in text
    assert any(line.startswith("[fake_bad] 结果不符") for line in logs)


@pytest.mark.skipif(rl.MODE != "sim", reason="命令行在sim模式下测")
def test_cli_per_impl_processes_and_dtypes(tmp_path, sim_children):
    import subprocess

    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "reduction_lab.bench", "softmax", "--impl", "torch,triton",
                        "--n", "128", "--total-elems", "1024", "--dtype", "fp32,bf16,fp16", "--iters", "2",
                        "--no-progress", "--json", str(out), "--report-dir", str(tmp_path / "rep")],
                       cwd=tmp_path, env=sim_children, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "分进程测量：2个子进程（triton, torch）" in p.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["schema"] == harness.SCHEMA
    assert list(harness.dtype_records(doc["suites"]["softmax"])) == ["float32", "bfloat16", "float16"]
    for name in ("h200_softmax", "h200_softmax_bf16", "h200_softmax_fp16", "h200_targets"):
        assert (tmp_path / "rep" / f"{name}.md").exists()
    assert cli_main(["report", str(out), "--out", str(tmp_path / "rep"), "--check"]) == 0
    # --merge：只测bf16，保留旧文件里的fp32与fp16
    p = subprocess.run([sys.executable, "-m", "reduction_lab.bench", "softmax", "--impl", "torch",
                        "--n", "128", "--total-elems", "1024", "--dtype", "bf16", "--iters", "1",
                        "--no-progress", "--json", str(out), "--merge", "--processes", "one"],
                       cwd=tmp_path, env=sim_children, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    merged = json.loads(out.read_text(encoding="utf-8"))
    recs = harness.dtype_records(merged["suites"]["softmax"])
    assert list(recs) == ["float32", "bfloat16", "float16"]
    assert [i["name"] for i in recs["bfloat16"]["impls"]] == ["torch"]
    assert [i["name"] for i in recs["float16"]["impls"]] == ["triton", "torch"]


@pytest.mark.skipif(rl.MODE != "sim", reason="子进程的模式跟随本进程")
def test_time_limit_marks_what_was_not_started(sim_children):
    """时限用完的进程不再开始新的套件：它的格子写明原因，仍然写出文档。"""
    doc = isolate.run_isolated(["softmax", "row-sum"], impls=["torch"], env=sim_children, log=lambda s: None,
                               time_limit_s=1.0, dtypes=["float32", "bfloat16"], **SMALL)
    assert doc["meta"]["processes"]["torch"]["returncode"] == 0
    for suite in ("softmax", "row-sum"):
        for dt, rec in dtype_records(doc["suites"][suite]).items():
            assert rec["shapes"] == [] or all(e["results"]["torch"]["status"] == "error" for e in rec["shapes"])
            assert "时间用完" in rec["process_errors"]["torch"], dt
            assert "时间用完" in report.render_table(doc, suite, dt)
    assert {name for name, _ in report.tables(doc)} >= {"h200_softmax_bf16", "h200_row_sum_bf16", "h200_targets"}
    # 子进程本身：截止时间已过时每个套件都记成没有开始
    spec = {"suites": {"softmax": ["torch"]}, "options": SMALL, "stop_at": 0}
    out = {}
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        sp, op = os.path.join(td, "s.json"), os.path.join(td, "o.json")
        Path(sp).write_text(json.dumps(spec), encoding="utf-8")
        assert isolate._child_main(sp, op) == 0
        out = json.loads(Path(op).read_text(encoding="utf-8"))
    assert "时间用完" in out["suite_errors"]["softmax"] and out["suites"] == {}


def test_suite_lists_on_the_command_line():
    from reduction_lab.bench.cli import build_parser

    args = build_parser().parse_args(["bench", "softmax,percall,softmax"])
    assert args.suite == ["softmax", "percall"]
    assert build_parser().parse_args(["bench", "all"]).suite == list(harness.SUITES)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "softmax,nosuch"])


# ---------------------------------------------------------------- 合并（纯函数）

def _fake_rec(group: str, copy_gbps: float, gbps: float, dtype="float32", mode="sim"):
    # 元数据固定成 mode 给的模式、没有线程块簇：默认 backend 的判定不随跑测试的机器变（GPU 上 2^20 选 CUDA C）
    meta = {**harness.metadata(["test"]), "mode": mode, "device": "cpu" if mode == "sim" else "NVIDIA A100"}
    meta.pop("compute_capability", None)
    entry = {"shape": [4, 256], "M": 4, "N": 256, "bytes": 8192, "input_bytes": 4096, "rotating_buffers": 1,
             "copy": {"median_ms": 1.0, "gbps": copy_gbps, "bytes": 8192},
             "results": {group: {"status": "ok", "median_ms": 1.0, "gbps": gbps, "frac_copy": gbps / copy_gbps}}}
    kind = "ours" if group == "triton" else "peer"
    return {"suite": "softmax", "dtype": dtype, "bytes_formula": "f", "copy_formula": "c", "tolerance": "t",
            "iters": 1, "warmup": 0, "impls": [{"name": group, "label": group, "kind": kind}], "skipped": {},
            "shapes": [entry], "meta": meta}


def _doc(recs: dict) -> dict:
    return {"schema": 2, "meta": harness.metadata(["test"]), "suites": recs, "suite_errors": {}}


def test_merge_takes_median_copy_and_keeps_own_ratio():
    parts = [("triton", {"softmax": ["triton"]}, _doc({"softmax": _fake_rec("triton", 100.0, 90.0)}), {"pid": 1}),
             ("torch", {"softmax": ["torch"]}, _doc({"softmax": _fake_rec("torch", 200.0, 150.0)}), {"pid": 2}),
             ("compile", {"softmax": ["compile"]}, _doc({"softmax": _fake_rec("compile", 120.0, 60.0)}), {"pid": 3}),
             ("liger", {"softmax": ["liger"]}, None, {"pid": 4, "error": "子进程liger没有写出结果（退出码1）：boom"})]
    doc = isolate.merge(parts, ["softmax"], ["test"])
    e = doc["suites"]["softmax"]["shapes"][0]
    assert e["copy"]["gbps"] == 120.0 and e["copy"]["process"] == "compile"      # 三个进程的中位数
    assert e["copy_by_process"] == {"triton": 100.0, "torch": 200.0, "compile": 120.0}
    assert e["results"]["triton"]["frac_copy"] == pytest.approx(0.9)            # 相对于本进程的拷贝
    assert e["results"]["torch"]["copy_gbps"] == 200.0
    assert e["results"]["liger"]["status"] == "error" and "boom" in e["results"]["liger"]["error"]
    # 列顺序按套件的实现顺序，不按进程顺序
    assert [i["name"] for i in doc["suites"]["softmax"]["impls"]] == ["triton", "torch", "compile", "liger"]
    assert doc["meta"]["processes"]["liger"]["error"].endswith("boom")


def _three_process_doc(values, date):
    parts = [(g, {"softmax": [g]}, _doc({"softmax": _fake_rec(g, c, v)}), {"pid": i})
             for i, (g, (c, v)) in enumerate(values.items())]
    doc = isolate.merge(parts, ["softmax"], ["test"])
    doc["suites"]["softmax"]["meta"] = dict(doc["suites"]["softmax"]["meta"], date=date, command=f"run {date}")
    return doc


def test_merge_columns_replaces_only_the_measured_impls(tmp_path):
    from reduction_lab.bench.cli import merge_columns

    old = _three_process_doc({"triton": (100.0, 90.0), "torch": (200.0, 150.0), "compile": (120.0, 60.0)},
                             "2026-12-01T10:00:00+00:00")
    new = _three_process_doc({"triton": (300.0, 280.0)}, "2026-12-02T11:30:00+00:00")
    merged = merge_columns(old, new)
    rec = merged["suites"]["softmax"]
    e = rec["shapes"][0]
    assert e["results"]["triton"]["gbps"] == 280.0                               # 新测的那一列
    assert e["results"]["torch"] == old["suites"]["softmax"]["shapes"][0]["results"]["torch"]   # 别的列原样
    assert e["copy_by_process"] == {"triton": 300.0, "torch": 200.0, "compile": 120.0}
    assert e["copy"]["gbps"] == 200.0 and e["copy"]["process"] == "torch"       # 重新取中位数
    assert rec["columns_from"] == {"triton": "2026-12-02 11:30 UTC的运行（命令 run 2026-12-02T11:30:00+00:00）",
                                   "torch,compile": "2026-12-01 10:00 UTC的运行（命令 run 2026-12-01T10:00:00+00:00）"}
    text = report.render_table(merged, "softmax")
    assert "`triton`这一列来自2026-12-02 11:30 UTC" in text and "`torch`、`compile`这几列来自2026-12-01" in text
    # 表头的库版本：旧运行没记下、新并进来的运行记下了的补上；两边都有的保留旧的
    old_v = dict(old, suites={"softmax": dict(old["suites"]["softmax"], meta=dict(
        old["suites"]["softmax"]["meta"], tilelang=None, cupy="1.0"))})
    new_v = dict(new, suites={"softmax": dict(new["suites"]["softmax"], meta=dict(
        new["suites"]["softmax"]["meta"], tilelang="0.1.15", cupy="2.0"))})
    meta = merge_columns(old_v, new_v)["suites"]["softmax"]["meta"]
    assert meta["tilelang"] == "0.1.15" and meta["cupy"] == "1.0"
    assert "tilelang 0.1.15" in report.render_table(merge_columns(old_v, new_v), "softmax")
    # 再并一次别的列：已有的columns_from按实现拆开，不丢
    newer = _three_process_doc({"torch": (210.0, 160.0)}, "2026-12-03T09:00:00+00:00")
    again = merge_columns(merged, newer)["suites"]["softmax"]
    assert set(again["columns_from"]) == {"triton", "torch", "compile"}
    assert again["shapes"][0]["results"]["triton"]["gbps"] == 280.0
    # 别的dtype的记录里是子进程自己的命令行：columns_from写的是整次运行的命令
    two = _three_process_doc({"triton": (300.0, 280.0)}, "2026-12-04T08:00:00+00:00")
    half = dict(two["suites"]["softmax"], dtype="bfloat16")
    half["meta"] = dict(half["meta"], command="isolate.py --child spec.json out.json")
    two["suites"]["softmax"]["by_dtype"] = {"bfloat16": half}
    old_bf = dict(old["suites"]["softmax"], by_dtype={"bfloat16": dict(old["suites"]["softmax"], dtype="bfloat16")})
    bf = harness.dtype_records(merge_columns(dict(old, suites={"softmax": old_bf}), two)["suites"]["softmax"])
    assert bf["bfloat16"]["columns_from"]["triton"].endswith("（命令 run 2026-12-04T08:00:00+00:00）")
    # 按列合并只补列：旧文件里没有的套件、形状是错误
    with pytest.raises(harness.BenchError, match="套件"):
        merge_columns(_doc({}), new)
    other = _three_process_doc({"triton": (300.0, 280.0)}, "2026-12-02T11:30:00+00:00")
    other["suites"]["softmax"]["shapes"][0]["shape"] = [8, 128]
    with pytest.raises(harness.BenchError, match="形状"):
        merge_columns(old, other)
    # 命令行：reduction-lab merge OLD NEW 原地改写OLD
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    (tmp_path / "new.json").write_text(json.dumps(new), encoding="utf-8")
    assert cli_main(["merge", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    written = json.loads((tmp_path / "old.json").read_text(encoding="utf-8"))
    assert written["suites"]["softmax"]["columns_from"] == rec["columns_from"]
    assert cli_main(["merge", str(tmp_path / "old.json"), str(tmp_path / "missing.json")]) == 2


def test_schema1_records_read_as_float32_and_merge_by_dtype():
    old = report.load(ROOT / "docs" / "data" / "h200.json") if (ROOT / "docs/data/h200.json").exists() else None
    rec = _fake_rec("triton", 100.0, 90.0)
    del rec["dtype"]                                                   # schema 1：没有dtype字段
    assert list(harness.dtype_records(rec)) == ["float32"]
    new = _fake_rec("triton", 50.0, 40.0, dtype="bfloat16")
    merged = merge_docs(_doc({"softmax": rec}), _doc({"softmax": new}))
    recs = harness.dtype_records(merged["suites"]["softmax"])
    assert list(recs) == ["float32", "bfloat16"] and merged["schema"] == harness.SCHEMA
    assert recs["bfloat16"]["shapes"][0]["copy"]["gbps"] == 50.0
    assert merged["suites"]["softmax"]["shapes"][0]["copy"]["gbps"] == 100.0   # 顶层仍是fp32：旧页面照读
    if old is not None:
        for suite, r in old["suites"].items():
            assert "float32" in harness.dtype_records(r)


# ---------------------------------------------------------------- dtype：输入、字节数、容差

def test_half_precision_inputs_bytes_and_tolerances():
    assert harness.parse_dtypes("fp32, bf16,float16,bf16") == ["float32", "bfloat16", "float16"]
    with pytest.raises(harness.BenchError, match="未知的dtype"):
        harness.parse_dtypes("int8")
    assert harness.bytes_moved("softmax", (3, 5), 2) == 2 * 3 * 5 * 2
    assert harness.bytes_moved("row-sum", (3, 5), 2) == 3 * 5 * 2
    assert harness.byte_formula("softmax", "float32") == harness.BYTE_FORMULAS["softmax"]
    x = harness.make_input("softmax", (6, 300), seed=3, dtype="bfloat16")
    assert x.dtype == torch.bfloat16
    ref = harness.reference("softmax", x)
    y = torch.softmax(x.float(), dim=-1).to(torch.bfloat16)            # 一次舍入：在一个ulp之内
    assert harness.compare("softmax", y, ref, "bfloat16")[0]
    assert not harness.compare("softmax", y.float(), ref, "bfloat16")[0]     # dtype不对
    i = int(ref[2].argmax())
    worse = y.clone()
    worse[2, i] = (ref[2, i] * (1 + 2 ** -5)).to(torch.bfloat16)         # 差4个ulp
    ok, msg = harness.compare("softmax", worse, ref, "bfloat16")
    assert not ok and f"(2, {i})" in msg
    h = harness.make_input("softmax", (6, 300), seed=3, dtype="float16")
    assert harness.compare("softmax", torch.softmax(h.float(), -1).half(), harness.reference("softmax", h),
                           "float16")[0]
    # 按行求和：精确的整数和舍入成bf16；N大时和超过256，bf16要舍入
    s = harness.make_input("row-sum", (4, 65536), seed=1, dtype="bfloat16")
    ref = harness.reference("row-sum", s)
    exact = s.float().sum(1)
    assert harness.compare("row-sum", exact.to(torch.bfloat16), ref, "bfloat16")[0]
    assert not harness.compare("row-sum", (exact + 8).to(torch.bfloat16), ref, "bfloat16")[0]
    with pytest.raises(harness.BenchError, match="只有float32"):
        harness.run_suite("full-sum", dtype="bfloat16", progress=False, log=lambda s: None)


def test_refused_shapes_and_dtypes_are_cells_not_crashes(monkeypatch):
    def picky(shape, dtype):
        return "N > 128时不支持" if shape[1] > 128 else None

    fake = [Impl("torch", "torch", "peer", lambda x: (lambda: torch.softmax(x, -1)), dtypes=("float32", "bfloat16")),
            Impl("picky", "picky", "peer", lambda x: (lambda: torch.softmax(x, -1)), refuses=picky,
                 dtypes=("float32", "bfloat16")),
            Impl("fp32only", "fp32only", "ours", lambda x: (lambda: torch.softmax(x, -1)))]
    monkeypatch.setattr(harness, "impls_for", lambda suite: fake)
    rec = harness.run_suite("softmax", ns=[128, 256], total_elems=1024, iters=1, warmup=0, progress=False,
                            log=lambda s: None, dtype="bfloat16")
    assert rec["skipped"] == {"fp32only": "只接受float32，不接受bfloat16(accepts float32 only)"}
    r = {e["N"]: e["results"] for e in rec["shapes"]}
    assert r[128]["picky"]["status"] == "ok"
    assert r[256]["picky"] == {"status": "unsupported", "reason": "N > 128时不支持"}
    doc = {"suites": {"softmax": {**rec, "meta": harness.metadata([])}}}
    text = report.render_table(doc, "softmax", "bfloat16")
    assert "| 不支持 |" in text and "`picky`在N = 256上不支持：N \\> 128时不支持" in text
    assert problems(doc["suites"]) == []                                 # 拒绝不算出错
    # Liger的规则：next_power_of_2(N) > 65536
    assert _liger_refuses((4, LIGER_MAX_N), "bfloat16") is None
    assert "65536" in _liger_refuses((4, LIGER_MAX_N + 1), "bfloat16")


# ---------------------------------------------------------------- percall

def test_percall_small_in_process():
    doc = harness.run(["percall"], impls=["torch", "triton"], dtypes=["float32", "bfloat16"], iters=2,
                      warmup=1, progress=False, log=lambda s: None)
    rec = doc["suites"]["percall"]
    assert [i["name"] for i in rec["impls"]] == ["triton", "torch"]
    cases = [(e["op"], tuple(e["shape"]), e["dtype"]) for e in rec["shapes"]]
    from reduction_lab.bench import percall

    n_shapes = len(percall.PERCALL_SHAPES if rl.MODE == "gpu" else percall.SIM_PERCALL_SHAPES)
    assert len(cases) == 2 * 2 * n_shapes and {c[0] for c in cases} == {"softmax", "row-sum"}
    for e in rec["shapes"]:
        for r in e["results"].values():
            assert r["status"] == "ok" and r["wall_us"] > 0 and r["k_calls"] == 2
            assert ("kernel_us" in r) == (rl.MODE == "gpu")
            # 同一进程里交替测的 torch eager 与比值
            assert r["torch_wall_us"] > 0 and r["vs_torch"] == pytest.approx(r["wall_us"] / r["torch_wall_us"])
    text = report.render_table(doc, "percall")
    assert "**softmax**" in text and "**row-sum**" in text and "墙钟时间" in text
    assert "相对同一进程的torch eager" in text and "| Triton |" in text
    assert report.tables(doc) == [("h200_percall", text)]


# ---------------------------------------------------------------- 对照目标

def test_target_verdicts():
    rec = _fake_rec("triton", 100.0, 95.0)
    e = rec["shapes"][0]
    e["N"] = 512
    e["results"]["torch"] = {"status": "ok", "gbps": 96.0, "frac_copy": 0.96}
    e["results"]["quack"] = {"status": "unsupported", "reason": "x"}
    rec["impls"] += [{"name": "torch", "label": "torch", "kind": "peer"},
                     {"name": "quack", "label": "quack", "kind": "peer"}]
    doc = {"suites": {"softmax": rec}}
    (row,) = report.target_verdicts(doc, "softmax", "float32")
    assert row["ours"] == "triton" and row["ok_frac"] and row["peer"] == "torch" and row["ok_peer"] is False
    assert report.target_verdicts(doc, "softmax", "bfloat16") == []
    text = report.render_targets(doc)
    assert "| 512 | 95%（triton） | 96（torch） | 低于对照1.0% | — | — | — |" in text
    assert "还没有bf16的结果" in text
    e["results"]["triton"]["frac_copy"] = 0.91
    assert "低于92%、低于对照1.0%" in report.render_targets(doc)
    assert "**按行softmax，fp16**" not in text       # 没有 fp16 的结果：不列 fp16 的表


def test_target_verdicts_list_fp16_softmax_in_its_own_table():
    """issue 的目标里 softmax 也有 fp16：有 fp16 的结果时另列一张表，判定规则相同。"""
    import copy

    rec = _fake_rec("triton", 100.0, 99.0)
    rec["shapes"][0]["N"] = 4096
    rec["shapes"][0]["results"]["torch"] = {"status": "ok", "gbps": 98.0, "frac_copy": 0.98}
    rec["impls"].append({"name": "torch", "label": "torch", "kind": "peer"})
    half = copy.deepcopy(rec)
    half["dtype"] = "float16"
    half["shapes"][0]["results"]["torch"]["gbps"] = 100.0
    doc = {"suites": {"softmax": {**rec, "by_dtype": {"float16": half}}}}
    assert [r["ok_peer"] for r in report.target_verdicts(doc, "softmax", "float16")] == [False]
    text = report.render_targets(doc)
    assert "**按行softmax，fp16**" in text and "| 4096 | 99%（triton） | 100（torch） | 低于对照1.0% |" in text
    assert "| 4096 | 99%（triton） | 98（torch） | 达标 | — | — | — |" in text


def test_language_verdicts_judge_cuda_and_tilelang_fp32_at_85_percent():
    """另一项目标：CUDA C 与 TileLang 的 fp32 softmax 在每个判定的 N 上（含 2^20）都 >= 拷贝的 85%；
    不判定的 N（256）不列，缺一个实现的结果时写明，不算达标。"""
    import copy

    rec = _fake_rec("triton", 100.0, 99.0)
    base = rec["shapes"][0]
    rec["shapes"] = []
    for n, cuda, tl in ((256, 0.5, 0.5), (4096, 0.96, 0.85), (262144, 0.91, 0.84), (2 ** 20, 0.76, None)):
        e = copy.deepcopy(base)
        e["N"] = n
        e["results"]["cuda"] = {"status": "ok", "gbps": 100.0 * cuda, "frac_copy": cuda}
        e["results"]["tilelang"] = ({"status": "error", "reason": "x"} if tl is None else
                                    {"status": "ok", "gbps": 100.0 * tl, "frac_copy": tl})
        rec["shapes"].append(e)
    rec["impls"] += [{"name": "cuda", "label": "CUDA C", "kind": "ours"},
                     {"name": "tilelang", "label": "TileLang", "kind": "ours"}]
    doc = {"suites": {"softmax": rec}}
    rows = report.language_verdicts(doc)
    assert [r["N"] for r in rows] == [4096, 262144, 2 ** 20]
    assert rows[-1]["tilelang"] is None and rows[0]["tilelang"] == 0.85
    text = report.render_targets(doc)
    assert "**CUDA C与TileLang的按行softmax，fp32**" in text
    assert "| 4096 | 96% | 85% | 达标 |" in text
    assert "| 262144 | 91% | 84% | TileLang低于85% |" in text
    assert "| 1048576 | 76% | — | CUDA C低于85%、TileLang没有结果 |" in text
    assert report.language_verdicts({"suites": {}}) == []


def _two_impls(n, triton_frac, cuda_frac, peer_frac, meta_extra):
    rec = _fake_rec("triton", 100.0, 100.0 * triton_frac)
    rec["meta"].update(meta_extra)
    e = rec["shapes"][0]
    e["N"] = n
    e["results"]["cuda"] = {"status": "ok", "gbps": 100.0 * cuda_frac, "frac_copy": cuda_frac}
    e["results"]["quack"] = {"status": "ok", "gbps": 100.0 * peer_frac, "frac_copy": peer_frac}
    rec["impls"] += [{"name": "cuda", "label": "CUDA C", "kind": "ours"},
                     {"name": "quack", "label": "quack", "kind": "peer"}]
    return rec


@pytest.mark.parametrize("meta,subject", [
    ({"mode": "gpu", "device": "NVIDIA H200", "cupy": "14.2.0"}, "cuda"),          # 旧数据：按设备名认出线程块簇
    ({"mode": "gpu", "device": "NVIDIA A100", "compute_capability": "8.0", "cupy": "14.2.0"}, "triton"),
    ({"mode": "gpu", "device": "NVIDIA H200", "compute_capability": "9.0", "cupy": None}, "triton"),   # 没有 CuPy
])
def test_softmax_verdict_judges_the_default_backend(meta, subject):
    """softmax 判定 auto 在那块 GPU 上选的实现，而不是最快的一个；最快的另写在判定后面。"""
    rec = _two_impls(65536, 0.99, 0.93, 0.95, meta)
    (row,) = report.target_verdicts({"suites": {"softmax": rec}}, "softmax", "float32")
    assert row["ours"] == subject and row["best"] == "triton"
    text = report.render_targets({"suites": {"softmax": rec}})
    if subject == "cuda":
        assert "| 65536 | 93%（CUDA C） | 95（quack） | 低于对照2.1%（最好的：triton 99%） |" in text
    else:
        assert "| 65536 | 99%（triton） | 95（quack） | 达标 |" in text


def test_row_sum_verdict_judges_the_slowest_backend():
    rec = _two_impls(4096, 0.99, 0.90, 0.95, {})
    rec["suite"] = "row-sum"
    e = rec["shapes"][0]
    e["results"]["cupy"] = e["results"].pop("quack")
    rec["impls"][-1] = {"name": "cupy", "label": "CuPy", "kind": "peer"}
    doc = {"suites": {"row-sum": rec}}
    (row,) = report.target_verdicts(doc, "row-sum", "float32")
    assert row["ours"] == "cuda" and not row["ok_frac"] and row["ok_peer"] is False and row["best"] == "triton"
    e["results"]["cuda"] = {"status": "error", "reason": "boom"}                 # 有一个 backend 没有结果：不判定
    (row,) = report.target_verdicts(doc, "row-sum", "float32")
    assert row["ours"] is None and "| 4096 | — | — | — |" in report.render_targets(doc)


def test_softmax_long_row_target_is_85_percent():
    rec = _fake_rec("triton", 100.0, 86.0)
    e = rec["shapes"][0]
    e["N"] = 2**20
    e["results"]["torch"] = {"status": "ok", "gbps": 50.0, "frac_copy": 0.50}
    rec["impls"] += [{"name": "torch", "label": "torch", "kind": "peer"}]
    doc = {"suites": {"softmax": rec, "row-sum": rec}}
    (row,) = report.target_verdicts(doc, "softmax", "float32")
    assert row["goal"] == 0.85 and row["ok_frac"] and row["ok_peer"]
    assert report.target_verdicts(doc, "row-sum", "float32") == []          # 按行求和不判定 N = 2^20
    assert f"| {2**20} | 86%（triton） | 50（torch） | 达标 |" in report.render_targets(doc)
    e["results"]["triton"]["frac_copy"] = 0.84
    assert f"| {2**20} | 84%（triton） | 50（torch） | 低于85% |" in report.render_targets(doc)


# ---------------------------------------------------------------- GPU：quack与Liger在各自的进程里

def _peers_missing() -> str | None:
    import importlib.util

    missing = [m for m in ("quack", "liger_kernel") if importlib.util.find_spec(m) is None]
    if missing:
        return f"没有{missing}：在GPU机器上按scripts/install_peer_wheels.sh打印的PYTHONPATH运行"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="quack只在gpu模式下运行")
@pytest.mark.skipif(_peers_missing() is not None, reason=str(_peers_missing()))
def test_gpu_quack_and_liger_isolated():
    doc = isolate.run_isolated(["softmax", "rms-norm"], impls=["triton", "quack", "liger"],
                               dtypes=["float32", "bfloat16"], ns=[1024, 131072], total_elems=2**20,
                               iters=5, warmup=2, log=lambda s: None)
    procs = doc["meta"]["processes"]
    assert "quack" in procs["quack"]["loaded_modules"] and "quack" not in procs["triton"]["loaded_modules"]
    for dt, rec in harness.dtype_records(doc["suites"]["softmax"]).items():
        r = {e["N"]: e["results"] for e in rec["shapes"]}
        assert r[1024]["quack"]["status"] == "ok" and r[1024]["liger"]["status"] == "ok", r
        assert r[131072]["liger"]["status"] == "unsupported"          # Liger拒绝N > 65536
    e = doc["suites"]["rms-norm"]["shapes"][0]["results"]
    assert e["quack"]["status"] == "ok" and e["liger"]["status"] == "ok", e


def test_percall_ratio_table_verdicts():
    """比值表：我们的实现按目标判定（Triton 1 倍、CUDA C 与 TileLang 1.5 倍），对照只写比值。"""
    impls = [{"name": n, "label": l, "kind": k} for n, l, k in
             (("triton", "Triton", "ours"), ("cuda", "CUDA C", "ours"), ("torch", "torch", "peer"),
              ("quack", "quack", "peer"))]
    res = {"triton": {"status": "ok", "wall_us": 9.0, "kernel_us": 4.0, "vs_torch": 0.95},
           "cuda": {"status": "ok", "wall_us": 16.0, "kernel_us": 4.0, "vs_torch": 1.6},
           "torch": {"status": "ok", "wall_us": 9.5, "kernel_us": 6.0, "vs_torch": 1.0},
           "quack": {"status": "ok", "wall_us": 9.0, "kernel_us": 4.0, "vs_torch": 0.9}}
    rec = {"suite": "percall", "meta": {"device": "H200", "torch": "t", "triton": "x", "mode": "gpu",
                                        "date": "2026-12-01"},
           "method": "m", "tolerance": "t", "iters": 2, "warmup": 1, "repeats": 1, "impls": impls, "skipped": {},
           "shapes": [{"op": "softmax", "shape": [64, 1024], "M": 64, "N": 1024, "dtype": "float32", "results": res}]}
    text = report.render_table({"suites": {"percall": rec}}, "percall")
    assert "| 64×1024 | fp32 | 0.95×（达标） | 1.60×（目标1.5×） | 0.90× |" in text
