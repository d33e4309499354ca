"""基准测试工具（reduction_lab.bench）的测试：字节公式、分位数、验证先于计时、sim 模式的命令行、
报告生成，以及提交的表格与提交的 JSON 一致。"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab.bench import harness, report, timing
from reduction_lab.bench.cli import main as cli_main
from reduction_lab.bench.impls import Impl, _full_sum_check

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"


# ---------------------------------------------------------------- 纯函数

def test_quantile_matches_numpy():
    vals = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.0]
    for q in (0.0, 0.2, 0.5, 0.8, 1.0):
        assert timing.quantile(vals, q) == pytest.approx(float(np.quantile(vals, q)))
    with pytest.raises(ValueError):
        timing.quantile([], 0.5)
    with pytest.raises(ValueError):
        timing.quantile([1.0], 1.5)


def test_byte_formulas():
    assert harness.bytes_moved("softmax", (3, 5)) == 2 * 3 * 5 * 4
    assert harness.bytes_moved("row-sum", (3, 5)) == 3 * 5 * 4
    assert harness.bytes_moved("full-sum", (7,)) == 7 * 4
    assert harness.gbps(4 * 10**9, 1000.0) == pytest.approx(4.0)


def test_rotation_count():
    l2 = 60 * 2**20
    assert timing.rotation_count(256 * 2**20, l2) == 1
    assert timing.rotation_count(16 * 2**20, l2) == 12       # 12 x 16 MiB >= 3 x 60 MiB
    assert timing.rotation_count(1024, l2) == 16             # 上限 16 份
    with pytest.raises(ValueError):
        timing.rotation_count(0, l2)


def test_shapes_and_parsing():
    assert harness.parse_int_list("512, 2^10,2**11") == [512, 1024, 2048]
    assert harness.row_shapes([512, 1024], 2**20) == [(2048, 512), (1024, 1024)]
    with pytest.raises(harness.BenchError, match="整除"):
        harness.row_shapes([3], 1024)
    with pytest.raises(harness.BenchError, match="无法解析"):
        harness.parse_int_list("abc")
    assert harness.DEFAULT_NS[0] == 512 and harness.DEFAULT_NS[-1] == 262144
    assert harness.SOFTMAX_LONG_NS == (2**20,)                # softmax 另测 N = 2^20（M = 64）
    assert harness.DEFAULT_TOTAL == 2**26


def test_compare_catches_wrong_results():
    x = harness.make_input("softmax", (4, 33), seed=1)
    ref = harness.reference("softmax", x)
    # 偏移到 100 的行：不减最大值就溢出
    assert not torch.isfinite(torch.exp(x)).all()
    ok, _ = harness.compare("softmax", torch.softmax(x, dim=-1), ref)
    assert ok
    bad = torch.softmax(x, dim=-1)
    bad[2, 5] += 1e-3
    ok, msg = harness.compare("softmax", bad, ref)
    assert not ok and "(2, 5)" in msg
    ok, msg = harness.compare("softmax", torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), ref)
    assert not ok  # nan/inf 也算不符

    x = harness.make_input("row-sum", (3, 1000), seed=2)
    ref = harness.reference("row-sum", x)
    assert set(x.unique().tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert harness.compare("row-sum", x.sum(1), ref)[0]
    nz = int(x[1].nonzero()[0])
    assert not harness.compare("row-sum", x.sum(1) - torch.tensor([0.0, x[1, nz], 0.0], device=x.device),
                               ref)[0]  # 少加一个元素
    assert not harness.compare("row-sum", x.sum(1)[:2], ref)[0]      # 形状不对
    assert not harness.compare("row-sum", x.double().sum(1), ref)[0]  # dtype 不对


# ---------------------------------------------------------------- 验证先于计时

def test_mismatch_stops_before_any_timing(monkeypatch):
    def wrong(x):
        return lambda: x.sum(dim=1) + 1.0

    fake = [Impl("torch", "torch", "peer", lambda x: (lambda: x.sum(dim=1))),
            Impl("wrong", "wrong", "ours", wrong)]
    monkeypatch.setattr(harness, "impls_for", lambda suite: fake)

    def no_timing(*a, **k):
        raise AssertionError("验证失败后不应该计时")

    monkeypatch.setattr(timing, "time_cpu", no_timing)
    monkeypatch.setattr(timing, "time_gpu", no_timing)
    with pytest.raises(harness.ValidationError, match="wrong.*计时之前停止"):
        harness.run_suite("row-sum", ns=[64], total_elems=256, progress=False, log=lambda s: None)


def test_failing_impl_is_recorded_not_timed(monkeypatch):
    def broken(x):
        def call():
            raise ValueError("N 太大")
        return call

    fake = [Impl("torch", "torch", "peer", lambda x: (lambda: x.sum(dim=1))),
            Impl("broken", "broken", "ours", broken)]
    monkeypatch.setattr(harness, "impls_for", lambda suite: fake)
    rec = harness.run_suite("row-sum", ns=[64], total_elems=256, iters=2, warmup=0, progress=False,
                            log=lambda s: None)
    res = rec["shapes"][0]["results"]
    assert res["torch"]["status"] == "ok" and res["broken"]["status"] == "error"
    assert "N 太大" in res["broken"]["error"]


def test_unknown_impl_is_refused():
    with pytest.raises(harness.BenchError, match="没有实现"):
        harness.run_suite("softmax", impls=["cupy"], progress=False, log=lambda s: None)
    with pytest.raises(harness.BenchError, match="没有叫"):
        harness.run(["softmax", "row-sum"], impls=["nope"], progress=False, log=lambda s: None)


def test_in_process_small_run_torch_triton():
    doc = harness.run(["softmax", "row-sum"], ns=[128, 256], total_elems=1024, impls=["torch", "triton"],
                      iters=2, warmup=1, progress=False, log=lambda s: None)
    assert doc["meta"]["mode"] == rl.MODE
    for suite in ("softmax", "row-sum"):
        rec = doc["suites"][suite]
        assert [i["name"] for i in rec["impls"]] == ["triton", "torch"]
        assert [e["N"] for e in rec["shapes"]] == [128, 256]
        for e in rec["shapes"]:
            assert e["M"] * e["N"] == 1024
            assert e["copy"]["gbps"] > 0 and e["copy"]["bytes"] == 2 * 1024 * 4
            for r in e["results"].values():
                assert r["status"] == "ok"
                assert r["p20_ms"] <= r["median_ms"] <= r["p80_ms"]
                assert r["gbps"] == pytest.approx(e["bytes"] / (r["median_ms"] * 1e-3) / 1e9)
                assert r["frac_copy"] == pytest.approx(r["gbps"] / e["copy"]["gbps"])
    text = report.render_table(doc, "softmax")
    assert "| 128 | 8 |" in text and "Triton" in text and "torch（对照）" in text
    if rl.MODE == "sim":
        assert harness.SIM_BANNER in text


@pytest.mark.skipif(_full_sum_check() is not None, reason=f"CUDA C 内核不可用：{_full_sum_check()}")
def test_full_sum_and_bank_conflicts_small():
    doc = harness.run(["full-sum", "bank-conflicts"], full_sum_ns=[1000], impls=["v1", "v8", "torch",
                      "transpose_conflict", "transpose_padded"], iters=1, warmup=0, progress=False,
                      log=lambda s: None)
    fs = doc["suites"]["full-sum"]
    assert [i["name"] for i in fs["impls"]] == ["v1", "v8", "torch"]
    assert fs["versions"]["1"][0] == "reduce1"
    assert all(r["status"] == "ok" for r in fs["shapes"][0]["results"].values())
    table = report.render_table(doc, "full-sum")
    assert "| 1 | `reduce1` |" in table and "1.00x" in table
    bc = doc["suites"]["bank-conflicts"]
    assert set(bc["shapes"][0]["results"]) == {"transpose_conflict", "transpose_padded"}
    assert "32路冲突" in report.render_table(doc, "bank-conflicts")


# ---------------------------------------------------------------- sim 模式的命令行（子进程，任何机器上都跑）

def _run_cli(args, tmp_path, mode="sim"):
    env = dict(os.environ, REDUCTION_LAB_MODE=mode)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "reduction_lab.bench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_sim_mode_clamps_and_warns(tmp_path):
    out = tmp_path / "sim.json"
    p = _run_cli(["all", "--impl", "torch,triton", "--n", "256,4096", "--total-elems", "2^20",
                  "--iters", "2", "--no-progress", "--json", str(out), "--report-dir", str(tmp_path / "rep")], tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert harness.SIM_BANNER in p.stdout
    assert "缩小到65536" in p.stdout
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["meta"]["mode"] == "sim" and doc["meta"]["timer"] == "perf_counter"
    assert doc["meta"]["sim_warning"] == harness.SIM_BANNER
    # full-sum 也有 torch；bank-conflicts 没有所选的实现，整个跳过
    assert set(doc["suites"]) == {"softmax", "row-sum", "full-sum", "layer-norm", "rms-norm",
                                 "layer-norm-bwd", "rms-norm-bwd", "col-sum", "percall"}
    # 默认分进程：triton与torch各一个子进程
    assert set(doc["meta"]["processes"]) == {"triton", "torch"}
    assert [i["name"] for i in doc["suites"]["full-sum"]["impls"]] == ["torch"]
    for rec in (doc["suites"][s] for s in ("softmax", "row-sum", "layer-norm", "rms-norm",
                                                    "layer-norm-bwd", "rms-norm-bwd", "col-sum")):
        assert [(e["M"], e["N"]) for e in rec["shapes"]] == [(256, 256), (16, 4096)]
        assert all(r["status"] == "ok" for e in rec["shapes"] for r in e["results"].values())
    assert (tmp_path / "rep" / "h200_softmax.md").exists()
    assert (tmp_path / "rep" / "h200_row_sum.png").stat().st_size > 10_000
    # report --check：刚写出的表格与 JSON 一致；改一个字节就报告不一致
    assert cli_main(["report", str(out), "--out", str(tmp_path / "rep"), "--check"]) == 0
    md = tmp_path / "rep" / "h200_softmax.md"
    md.write_text(md.read_text(encoding="utf-8") + " ", encoding="utf-8")
    assert cli_main(["report", str(out), "--out", str(tmp_path / "rep"), "--check"]) == 1


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["bench", "nosuch"])
    assert exc.value.code == 2
    assert cli_main(["bench", "softmax", "--impl", "cupy", "--no-progress"]) == 2
    assert "没有实现" in capsys.readouterr().err
    assert cli_main(["report", str(tmp_path / "missing.json")]) == 2


# ---------------------------------------------------------------- GPU 上的计时路径

@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="CUDA 事件计时只在 gpu 模式下可测")
def test_gpu_timing_small():
    doc = harness.run(["row-sum"], ns=[4096], total_elems=2**20, impls=["torch", "triton", "cupy"],
                      iters=5, warmup=2, progress=False, log=lambda s: None)
    rec = doc["suites"]["row-sum"]
    e = rec["shapes"][0]
    assert doc["meta"]["timer"] == "cuda-events" and doc["meta"]["sim_warning"] is None
    assert e["rotating_buffers"] > 1  # 4 MiB 的输入小于 L2：轮换多份
    for r in e["results"].values():
        assert r["status"] == "ok" and r["gbps"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="CUDA图只在gpu模式下可录")
@pytest.mark.skipif(_full_sum_check() is not None, reason=f"CUDA C内核不可用：{_full_sum_check()}")
def test_gpu_full_sum_uses_cuda_graphs():
    logs = []
    doc = harness.run(["full-sum"], full_sum_ns=[2**20], impls=["v1", "v8", "torch"], iters=5, warmup=2,
                      progress=False, log=logs.append)
    e = doc["suites"]["full-sum"]["shapes"][0]
    for name in ("v1", "v8", "torch"):
        assert e["results"][name]["status"] == "ok"
        assert e["results"][name]["timer"] == "cuda-graph", logs
    assert e["copy"]["timer"] == "cuda-events", logs   # 拷贝上限不录CUDA图（复制引擎比内核拷贝慢）


# ---------------------------------------------------------------- 提交的表格与 JSON 一致

@pytest.mark.parametrize("prefix", ["h200", "h100"])
def test_committed_tables_match_json(prefix):
    """docs/data/<prefix>.json 是 GPU 上的运行（H200；H100 上的一次完整运行另存一份），表格与它逐字一致。"""
    doc = report.load(DATA / f"{prefix}.json")
    assert doc["meta"]["mode"] == "gpu", "提交的结果必须来自 GPU"
    assert prefix.upper() in doc["meta"]["device"], doc["meta"]["device"]
    names = [name for name, _ in report.tables(doc, prefix)]
    assert f"{prefix}_softmax" in names and f"{prefix}_targets" in names
    for name, text in report.tables(doc, prefix):
        path = DATA / f"{name}.md"
        hint = f"运行 reduction-lab report docs/data/{prefix}.json --out docs/data"
        assert path.exists(), f"缺少 {path}：{hint}"
        assert path.read_text(encoding="utf-8") == text, f"{path} 与 JSON 生成的表格不一致：{hint}"


def test_time_budget_keeps_validated_shapes():
    rec = harness.run_suite("row-sum", ns=[64, 128], total_elems=256, impls=["torch"], iters=1, warmup=0,
                            progress=False, log=lambda s: None, budget_s=0.0)
    assert [e["N"] for e in rec["shapes"]] == [64]          # 至少验证并计时一个形状
    assert rec["skipped_shapes"]["shapes"] == [[2, 128]]
    assert "时间预算" in report.render_table({"suites": {"row-sum": {**rec, "meta": harness.metadata([])}}},
                                         "row-sum")


def test_spread_order_is_a_permutation_ends_first():
    for n in range(12):
        order = harness.spread_order(n)
        assert sorted(order) == list(range(n))
    assert harness.spread_order(10)[:3] == [0, 9, 4]


@pytest.mark.parametrize("script", ["gpu_suite.sh", "fetch_gpu_wheels.sh", "fetch_peer_wheels.sh",
                                    "install_peer_wheels.sh"])
def test_scripts_parse(script):
    p = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_report_prefix_defaults_to_the_gpu_model(tmp_path):
    gpu = lambda device: {"meta": {"mode": "gpu", "device": device}}      # noqa: E731
    assert report.default_prefix(gpu("NVIDIA H100 80GB HBM3")) == "h100"
    assert report.default_prefix(gpu("NVIDIA H200")) == "h200"
    assert report.default_prefix(gpu("NVIDIA A100-SXM4-80GB")) == "a100"
    assert report.default_prefix(gpu("NVIDIA GeForce RTX 4090")) == "gpu"       # 认不出型号
    assert report.default_prefix({"meta": {"mode": "sim", "device": "CPU (x86_64)"}}) == "h200"
    # 不写 --prefix：H100 的 JSON 写出 h100_*.md，与提交的表格逐字相同
    assert cli_main(["report", str(DATA / "h100.json"), "--out", str(tmp_path), "--no-plots"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names and all(n.startswith("h100_") for n in names), names
    for n in names:
        assert (tmp_path / n).read_text(encoding="utf-8") == (DATA / n).read_text(encoding="utf-8"), n
