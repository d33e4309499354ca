"""docs/data/ncu_vs_simt.json：模拟器计数与 H200 上 Nsight Compute 计数的对照（scripts/ncu_vs_simt.py 生成）。

这里不需要 GPU：检查 JSON 里模拟器一侧的数字仍是当前模拟器的输出（页面上的对照不会过时），
并检查页面所说的结论：存储体冲突的各个例子上，11 个指标与 ncu 全部一致。
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "ncu_vs_simt.json"


def _script():
    spec = importlib.util.spec_from_file_location("ncu_vs_simt", ROOT / "scripts" / "ncu_vs_simt.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def committed():
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_simulator_side_is_current(committed):
    rows = _script().simulate()
    assert [r["case"] for r in rows] == [c["case"] for c in committed["cases"]]
    for row, case in zip(rows, committed["cases"]):
        for attr, m in case["metrics"].items():
            assert row[attr] == m["simt"], (case["case"], attr)


def test_bank_conflict_cases_agree_with_ncu(committed):
    for case in committed["cases"]:
        if case["case"].startswith(("shared_stride", "copy_tile", "transpose")):
            diff = {a: m for a, m in case["metrics"].items() if m["simt"] != m["ncu"]}
            assert not diff, (case["case"], diff)


def test_csv_reproduces_json(committed):
    mod = _script()
    measured = mod.read_ncu(str(ROOT / "docs" / "data" / "ncu_vs_simt.csv"))
    for gpu, case in zip(measured, committed["cases"]):
        for m in case["metrics"].values():
            assert gpu[m["ncu_metric"]] == m["ncu"]
