"""scripts/ncu_short_rows.py：ncu 文本报告的解析，与提交的 docs/data/h200_ncu_short_rows.json 对得上。"""

from __future__ import annotations


import pytest

import reduction_lab as rl



@pytest.fixture
def mod(load_script):
    return load_script("ncu_short_rows")


def _fake_launch(mod, name="softmax_rows_warp", executed="34,209,792", duration="us 77.44"):
    lines = [f"  {name} (16384, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"]
    for s in mod.STALLS:
        lines.append(f"    {mod._STALL_METRIC.format(s)}           inst        1.50")
    for label, value in (("SM Frequency", "Ghz 1.97"), ("DRAM Throughput", "% 66.05"), ("Duration", duration),
                         ("Compute (SM) Throughput", "% 43.19"), ("Warp Cycles Per Issued Instruction", "cycle 18.92"),
                         ("Avg. Executed Instructions Per Scheduler", "inst 64,791.27"),
                         ("Executed Instructions", f"inst {executed}"), ("Registers Per Thread", "register/thread 47"),
                         ("Block Size", "128"), ("Grid Size", "16,384"), ("Theoretical Occupancy", "% 62.50"),
                         ("Achieved Occupancy", "% 52.64")):
        lines.append(f"    {label:40s} {value}")
    return "\n".join(lines)


def test_parse_takes_the_second_launch_of_every_config(mod):
    launches = []
    for _ in mod.CONFIGS:
        launches += [_fake_launch(mod, duration="us 999.0", executed="1"), _fake_launch(mod)]
    recs = mod.parse("==PROF== header\n" + "\n".join(launches) + "\n")
    assert [r["name"] for r in recs] == [c[0] for c in mod.CONFIGS]
    assert all(r["duration_us"] == pytest.approx(77.44) for r in recs)         # 第一次（编译那次）被跳过
    r = recs[0]
    assert r["executed_warp_instructions"] == 34209792 and r["grid_size"] == 16384
    assert r["thread_instructions_per_element"] == pytest.approx(34209792 * 32 / (131072 * 512))
    assert set(r["stall_cycles_per_issue"]) == set(mod.STALLS)


def test_parse_refuses_a_report_with_a_missing_launch_or_metric(mod):
    one = _fake_launch(mod)
    with pytest.raises(SystemExit, match="预期"):
        mod.parse("\n".join([one] * (2 * len(mod.CONFIGS) - 1)))
    with pytest.raises(SystemExit, match="executed_warp_instructions"):
        mod.parse("\n".join([one.replace("    Executed Instructions", "    Something")] * 2 * len(mod.CONFIGS)))
    with pytest.raises(SystemExit, match="停顿"):
        mod.parse("\n".join([one.replace("_mio_throttle_", "_other_")] * 2 * len(mod.CONFIGS)))


def test_committed_data_matches_the_configs(mod):
    """每次启动的块形状与网格就是 CONFIGS 里的配置（triton 一项：一个 warp 一个 program，两行一个）。"""
    from reduction_lab import cuda_kernels as ck
    import torch

    d = rl.load_data("h200_ncu_short_rows.json")
    assert [r["name"] for r in d["launches"]] == [c[0] for c in mod.CONFIGS]
    for r, (name, impl, dtype, n, kernel, block, packs) in zip(d["launches"], mod.CONFIGS):
        m = (1 << 26) // n
        if impl == "cuda":
            plan = ck.softmax_plan(m, n, getattr(torch, dtype), kernel, block, packs)
            assert (r["block_size_launched"], r["grid_size"]) == (block, plan["grid"]), name
            assert r["launch"].startswith(ck._SOFTMAX_NAMES[kernel] + " "), name
        else:
            assert r["launch"].startswith("softmax_rows_kernel "), name
        assert r["thread_instructions_per_element"] == pytest.approx(r["executed_warp_instructions"] * 32 / (m * n))
