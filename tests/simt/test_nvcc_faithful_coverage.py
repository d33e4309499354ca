"""scripts/simt_coverage.py 的 nvcc 交叉检查：两边的结论怎样归类、比例怎样计算（不需要 nvcc：结论直接给出），
以及提交的 docs/data/simt_coverage.json 里这些数彼此相符。"""

from __future__ import annotations

import collections
import json

import pytest

import reduction_lab as rl



@pytest.fixture(scope="module")
def script(coverage_script):
    return coverage_script


FILES = {
    "ok.cu": "__global__ void ok(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1; }\n",
    "tex.cu": "texture<float, 1> t;\n__global__ void tx(float* p) { p[0] = tex1Dfetch(t, 0); }\n",
    "cw.cu": "__global__ void cw(float2* p) { p[0] = p[0] + p[1]; }\n",
    "ck.cu": "__global__ void ck(unsigned* p) { p[blockIdx.x * blockDim.x + threadIdx.x] = 1; }\n",
    "asm.cu": '__global__ void as(int* p) {\n  asm("trap;");\n}\n',
    "asm2.cu": '__global__ void as2(int* p) {\n  asm("trap;");\n}\n',
    "plain.cu": "__global__ void pl(float* p) { p[blockIdx.x * blockDim.x + threadIdx.x] = 2; }\n",
}
# 注入的 nvcc 结论：cw（float2 + float2，模拟器报 CompileError）、ck 与 asm2 的结论是为了测试编的，plain 没有结论
VERDICTS = {
    "ok.cu": "ok",
    "tex.cu": "error: tex.cu(1): error: texture is not a template",
    "cw.cu": "ok",
    "ck.cu": "error: ck.cu(1): error: made up for the test (the simulator runs it)",
    "asm.cu": "ok",
    "asm2.cu": "error: asm2.cu(2): error: made up for the test",
}


@pytest.fixture(scope="module")
def result(script, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cov")
    root = tmp / "corpus" / "demo"
    (root / "a").mkdir(parents=True)
    (root / "CORPUS.json").write_text('{"repo": "someone/demo", "commit": "' + "0" * 40 + '", "paths": ["a"]}')
    for name, text in FILES.items():
        (root / "a" / name).write_text(text, encoding="utf-8")
    verdicts = tmp / "verdicts.json"
    verdicts.write_text(json.dumps({f"someone/demo:a/{k}": v for k, v in VERDICTS.items()}), encoding="utf-8")
    out = tmp / "cov.json"
    assert script.main([str(tmp / "corpus"), "--json", str(out), "--nvcc-verdicts", str(verdicts)]) == 0
    assert not (tmp / "corpus" / script.NVCC_CACHE).exists()         # 给出结论时不运行 nvcc
    return json.loads(out.read_text(encoding="utf-8"))


def test_reconcile_rules(script):
    d = {"construct": "x"}
    assert script.reconcile("compile_error", d, "error: e") == ("compile_error", d)
    cat, det = script.reconcile("compile_error", d, "ok")
    assert cat == "refused" and det["simulator_bug"] and det["construct"] == "CompileError，但 nvcc 接受：x"
    assert d == {"construct": "x"}                                    # 不改动传入的详情
    for outcome in ("ran", "sanitizer", "refused", "parse_error", "timeout"):
        assert script.reconcile(outcome, None, "error: e") == (outcome, None)
        assert script.reconcile(outcome, None, "ok") == (outcome, None)
    assert script.reconcile("compile_error", d, None) == ("compile_error", d)


def test_outcomes_follow_both_verdicts(result):
    rows = {r["kernel"]: r for r in result["kernels"]}
    assert {k: r["outcome"] for k, r in rows.items()} == {
        "ok": "ran", "tx": "compile_error", "cw": "refused", "ck": "ran", "as": "refused", "as2": "refused",
        "pl": "ran"}
    assert rows["cw"]["construct"].startswith("CompileError，但 nvcc 接受：")
    assert rows["tx"]["nvcc"].startswith("error:") and "nvcc" not in rows["pl"]
    lists = {k: [(r["file"], r["kernel"]) for r in result[k]]
             for k in ("compile_error_but_nvcc_accepts", "ran_but_nvcc_rejects", "refused_but_nvcc_rejects")}
    assert lists == {"compile_error_but_nvcc_accepts": [("a/cw.cu", "cw")], "ran_but_nvcc_rejects": [("a/ck.cu", "ck")],
                     "refused_but_nvcc_rejects": [("a/asm2.cu", "as2")]}


def test_both_refused_shares(result):
    s = result["all"]
    assert s["kernels"] == 7 and s["refused_total"] == 3 and s["refused_share"] == round(3 / 7, 4)
    # nvcc 能编译的：ok、cw、asm（plain 没有结论，不算进去）；其中被拒绝的是 cw 与 asm
    assert (s["nvcc_checked"], s["nvcc_compiles"], s["refused_nvcc_compiles"]) == (6, 3, 2)
    assert s["refused_share_nvcc_compiles"] == round(2 / 3, 4)
    assert (s["compile_error_but_nvcc_accepts"], s["ran_but_nvcc_rejects"], s["refused_but_nvcc_rejects"]) == (1, 1, 1)
    assert s["nvcc_by_outcome"]["refused"] == {"ok": 2, "error": 1}
    assert "gpuverify_nvcc.h" in result["method"]["nvcc"]["command"]


def _check_nvcc_fields(s, rows):
    checked = [r for r in rows if "nvcc" in r]
    ok = [r for r in checked if r["nvcc"] == "ok"]
    assert s["nvcc_checked"] == len(checked) and s["nvcc_compiles"] == len(ok)
    refused_ok = sum(r["outcome"] in ("refused", "parse_error") for r in ok)
    assert s["refused_nvcc_compiles"] == refused_ok
    assert s["refused_share_nvcc_compiles"] == (round(refused_ok / len(ok), 4) if ok else None)
    assert s["ran_but_nvcc_rejects"] == sum(r["outcome"] in ("ran", "sanitizer") and r["nvcc"] != "ok" for r in checked)
    assert s["refused_but_nvcc_rejects"] == sum(r["outcome"] in ("refused", "parse_error") and r["nvcc"] != "ok"
                                                for r in checked)
    # compile_error 只在 nvcc 也拒绝时出现
    assert all(r["nvcc"] != "ok" for r in checked if r["outcome"] == "compile_error")
    by = collections.Counter((r["outcome"], r["nvcc"] == "ok") for r in checked)
    assert {k: {"ok": by[(k, True)], "error": by[(k, False)]} for k in s["nvcc_by_outcome"]} == s["nvcc_by_outcome"]


def test_committed_nvcc_cross_check_adds_up():
    doc = rl.load_data("simt_coverage.json")
    if doc.get("method", {}).get("nvcc") is None:
        pytest.skip("提交的覆盖率数据没有 nvcc 的交叉检查 (committed data has no nvcc cross-check)")
    rows = doc["kernels"]
    _check_nvcc_fields(doc["all"], rows)
    for part in ("development", "held_out"):
        _check_nvcc_fields(doc[part], [r for r in rows if r["split"] == part])
    listed = {(r["repo"], r["file"], r["kernel"]) for r in doc["ran_but_nvcc_rejects"]}
    assert listed == {(r["repo"], r["file"], r["kernel"]) for r in rows
                      if r["outcome"] in ("ran", "sanitizer") and r.get("nvcc", "ok") != "ok"}
    bugs = {(r["repo"], r["file"], r["kernel"]) for r in doc["compile_error_but_nvcc_accepts"]}
    assert bugs == {(r["repo"], r["file"], r["kernel"]) for r in rows
                    if r.get("construct", "").startswith("CompileError，但 nvcc 接受")}
    assert doc["all"]["nvcc_checked"] == doc["all"]["kernels"]
