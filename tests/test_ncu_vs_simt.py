"""docs/data/ncu_vs_simt.json：模拟器计数与 H200 上 Nsight Compute 计数的对照（scripts/ncu_vs_simt.py 生成）。

这里不需要 GPU：检查 JSON 里模拟器一侧的数字仍是当前模拟器的输出（页面上的对照不会过时），
并检查页面所说的结论：存储体冲突的各个例子上，11 个指标与 ncu 全部一致。
"""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data" / "ncu_vs_simt.json"


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("ncu_vs_simt")


@pytest.fixture(scope="module")
def committed():
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_simulator_side_is_current(committed, script):
    # 提交的每个例子都还在脚本里、顺序不变，模拟器一侧的数字不变；
    # 脚本里新加、还没有在 GPU 上量过的例子可以不在 JSON 里
    rows = {r["case"]: r for r in script.simulate()}
    names = [c["case"] for c in committed["cases"]]
    assert names == [n for n in rows if n in names]
    for case in committed["cases"]:
        for attr, m in case["metrics"].items():
            assert rows[case["case"]][attr] == m["simt"], (case["case"], attr)


# ncu 在 H200 上量到的宽元素访问（一个 warp 步长 1 地读共享内存）：(波前数, 存储体冲突)
H200_WIDE_STRIDE1 = {"shared_stride_wide(double, stride=1)": (2, 0),
                     "shared_stride_wide(float4, stride=1)": (4, 0)}


def test_wide_accesses_count_conflicts_beyond_the_ideal_wavefronts(script):
    rows = {r["case"]: r for r in script.simulate()}
    for name, (waves, conflicts) in H200_WIDE_STRIDE1.items():
        r = rows[name]
        assert (r["shared_load_wavefronts"], r["shared_load_bank_conflicts"]) == (waves, conflicts), name
        # 顺序写 33 次：每次都是理想波前数，没有冲突
        assert r["shared_store_wavefronts"] == 33 * waves and r["shared_store_bank_conflicts"] == 0, name
    # 步长 2：每相里两个线程落在同一对存储体上，波前加倍，冲突 = 波前 - 理想数
    assert rows["shared_stride_wide(double, stride=2)"]["shared_load_bank_conflicts"] == 2
    assert rows["shared_stride_wide(float4, stride=2)"]["shared_load_bank_conflicts"] == 4


def test_bank_conflict_cases_agree_with_ncu(committed):
    for case in committed["cases"]:
        if case["case"].startswith(("shared_stride", "copy_tile", "transpose")):
            diff = {a: m for a, m in case["metrics"].items() if m["simt"] != m["ncu"]}
            assert not diff, (case["case"], diff)


def test_csv_reproduces_json(committed, script):
    mod = script
    measured = mod.read_ncu(str(ROOT / "docs" / "data" / "ncu_vs_simt.csv"))
    for gpu, case in zip(measured, committed["cases"]):
        for m in case["metrics"].values():
            assert gpu[m["ncu_metric"]] == m["ncu"]
