"""scripts/ncu_cluster_regs.py：ncu 文本报告的解析，与提交的 docs/data/h200_ncu_cluster_regs.json 对得上。"""

from __future__ import annotations


import pytest

import reduction_lab as rl



@pytest.fixture
def mod(load_script):
    return load_script("ncu_cluster_regs")


def _fake_launch(cluster: int, head: str = "softmax_cluster_regs (4096, 1, 1)x(256, 1, 1)") -> str:
    lines = [f"  {head}, Context 1, Stream 7, Device 0, CC 9.0"]
    for label, value in (("SM Frequency", "Ghz 1.95"), ("DRAM Throughput", "% 69.44"), ("Duration", "us 72.58"),
                         ("L2 Cache Throughput", "% 85.53"), ("Compute (SM) Throughput", "% 39.88"),
                         ("Warp Cycles Per Issued Instruction", "cycle 13.81"), ("Cluster Size", str(cluster)),
                         ("Registers Per Thread", "register/thread 80"), ("Waves Per SM", "10.34"),
                         ("Max Active Clusters", "cluster 198"), ("Block Limit Registers", "block 3"),
                         ("Theoretical Occupancy", "% 37.50"), ("Achieved Occupancy", "% 35.68")):
        lines.append(f"    {label:40s} {value}")
    return "\n".join(lines)


def test_parse_reads_every_metric_of_every_launch(mod):
    text = "==PROF== header\n" + "\n".join(_fake_launch(c) for c in (0, 2, 4, 2)) + "\n"
    recs = mod.parse(text)
    assert [r["name"] for r in recs] == [c[0] for c in mod.CONFIGS]
    assert recs[1]["cluster_size"] == 2 and recs[1]["max_active_clusters"] == 198
    assert recs[0]["dram_pct_peak"] == pytest.approx(69.44)


def test_parse_refuses_a_report_with_a_missing_launch_or_metric(mod):
    with pytest.raises(SystemExit, match="预期 4 次"):
        mod.parse("\n".join(_fake_launch(2) for _ in range(3)))
    broken = "\n".join(_fake_launch(2) for _ in range(4)).replace("Max Active Clusters", "Something Else")
    with pytest.raises(SystemExit, match="max_active_clusters"):
        mod.parse(broken)


def test_committed_data_matches_the_configs(mod):
    """每次启动的簇大小与块形状就是 CONFIGS 里的配置：簇大小 = N / (线程数 x 包数 x 每包元素数)，1 记作 0。"""
    d = rl.load_data("h200_ncu_cluster_regs.json")
    assert [r["name"] for r in d["launches"]] == [c[0] for c in mod.CONFIGS]
    for r, (name, dtype, n, block, packs) in zip(d["launches"], mod.CONFIGS):
        vec = 8 if dtype == "bfloat16" else 4
        cluster = n // (block * packs * vec)
        assert int(r["cluster_size"]) == (0 if cluster == 1 else cluster), name
        assert f"x({block}, 1, 1)" in r["launch"], name


_QUACK_HEAD = "kernel_cutlass_kernel_quacksoftmaxSoftmax_object_at__tensorptrbf16gmemalign16o32768_TiledCopy"


def test_parse_quack_keeps_the_second_quack_launch_and_the_regs_launch(mod):
    launches = []
    for _ in mod.QUACK_CONFIGS:
        launches += [_fake_launch(2, _QUACK_HEAD).replace("us 72.58", "us 99.0"), _fake_launch(2, _QUACK_HEAD),
                     _fake_launch(2)]
    recs = mod.parse_quack("==PROF== header\n" + "\n".join(launches) + "\n")
    assert [(r["impl"], r["N"]) for r in recs] == [(i, n) for n, _, _ in mod.QUACK_CONFIGS for i in ("quack", "regs")]
    assert all(r["duration_us"] == pytest.approx(72.58) for r in recs)      # 第一次（编译那次）被跳过
    assert recs[1]["block_size"] == 256 and "block_size" not in recs[0]


def test_parse_quack_refuses_a_report_out_of_order(mod):
    text = "\n".join([_fake_launch(2, _QUACK_HEAD), _fake_launch(2), _fake_launch(2, _QUACK_HEAD)] * 2)
    with pytest.raises(SystemExit, match="预期每个形状"):
        mod.parse_quack(text)


def test_committed_quack_comparison_has_the_same_launch_shape(mod):
    """提交的对比：同一形状上 quack 与寄存器版的线程数、寄存器、每 SM 块数、同时驻留的簇都相同，只是时间不同。"""
    d = rl.load_data("h200_ncu_quack_vs_regs.json")
    recs = d["launches"]
    assert [(r["impl"], r["N"]) for r in recs] == [(i, n) for n, _, _ in mod.QUACK_CONFIGS for i in ("quack", "regs")]
    for q, r in zip(recs[::2], recs[1::2]):
        for key in ("registers_per_thread", "block_limit_registers", "max_active_clusters", "cluster_size"):
            assert q[key] == r[key], (q["N"], key)
