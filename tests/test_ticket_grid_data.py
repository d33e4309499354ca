"""scripts/ticket_grid_softmax.py（不常驻、每块一段的对照内核）与它提交的 H200 数据：每一行的每个配置都通过了
与 float64 的比对才计时，数据里写明命令与方法；汇总表从数据算出；sim 模式下脚本明确拒绝。"""

from __future__ import annotations

import pytest

import reduction_lab as rl


def test_committed_rows_were_validated_and_timed():
    doc = rl.load_data("h200_ticket_grid_softmax.json")
    assert doc["meta"]["device"] == "NVIDIA H200" and "ticket_grid_softmax.py" in doc["meta"]["command"]
    assert "float64" in doc["meta"]["method"]
    assert {(r["dtype"], r["N"]) for r in doc["rows"]} == {(d, n) for d in ("float32", "bfloat16")
                                                         for n in (1 << 20, 1 << 18, 1 << 17)}
    for r in doc["rows"]:
        assert r["M"] * r["N"] == 1 << 26 and 0 < r["auto"] < 1.2
        assert r["ticket"] and all("frac" in c and "error" not in c for c in r["ticket"])


def test_summary_table_comes_from_the_data(load_script):
    mod = load_script("ticket_grid_softmax")
    doc = rl.load_data("h200_ticket_grid_softmax.json")
    lines = mod.summary_table(doc).splitlines()
    assert len(lines) == 1 + len(doc["rows"])
    first = doc["rows"][0]
    best = max(first["ticket"], key=lambda c: c["frac"])
    assert f"{100 * best['frac']:.0f}%" in lines[1] and f"{best['block']}x{best['packs']}" in lines[1]


@pytest.mark.skipif(rl.MODE == "gpu", reason="sim 模式下的拒绝；gpu 模式下脚本真的运行（几十秒），由数据文件记录")
def test_script_refuses_sim_mode(load_script):
    mod = load_script("ticket_grid_softmax")
    with pytest.raises(rl.runtime.ModeError, match="gpu"):
        mod.main([])
