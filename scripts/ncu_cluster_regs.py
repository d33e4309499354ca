"""ncu 看寄存器版的簇 softmax（softmax_cluster.cu 的 softmax_cluster_regs）：占用率、同时驻留的簇数、显存与 L2 的吞吐。

同样的算法、同样的每块线程数与包数，簇从 1 块变到 2、4 块时带宽为什么往下掉？每个配置在 gpu 模式下启动一次
（第一次调用就是编译后的那次启动），ncu 给每次启动量几组指标；再把 ncu 的文本报告解析成 JSON。

    # 1) GPU 机器上：
    ncu --clock-control none --kernel-name regex:softmax_cluster_regs --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --log-file ncu.txt \\
        python scripts/ncu_cluster_regs.py run
    # 2) 任何机器上：
    python scripts/ncu_cluster_regs.py parse ncu.txt --json docs/data/h200_ncu_cluster_regs.json

ncu 默认在每次重放之前清空缓存（--cache-control all），``--clock-control none`` 不锁频率：百分比是相对峰值的，
一次启动一个数，只用来比较同一次运行里的几个配置。
"""

from __future__ import annotations

import argparse
import json
import re
import sys

#: (名字, dtype, N, 每块线程数, 每个线程的 16 字节包数)；M = 2^26 / N；簇大小 = N / (线程数 x 包数 x 每包元素数)
CONFIGS = (("bf16-16384-c1", "bfloat16", 16384, 512, 4), ("bf16-32768-c2", "bfloat16", 32768, 256, 8),
           ("bf16-65536-c4", "bfloat16", 65536, 256, 8), ("fp32-32768-c2", "float32", 32768, 512, 8))

#: 从 ncu 文本报告里取的指标（报告里的名字 -> JSON 里的键）
METRICS = {"Duration": "duration_us", "DRAM Throughput": "dram_pct_peak", "L2 Cache Throughput": "l2_pct_peak",
           "Compute (SM) Throughput": "sm_pct_peak", "Registers Per Thread": "registers_per_thread",
           "Block Limit Registers": "block_limit_registers", "Theoretical Occupancy": "theoretical_occupancy_pct",
           "Achieved Occupancy": "achieved_occupancy_pct", "Max Active Clusters": "max_active_clusters",
           "Cluster Size": "cluster_size", "Warp Cycles Per Issued Instruction": "warp_cycles_per_issue",
           "Waves Per SM": "waves_per_sm", "SM Frequency": "sm_ghz"}


def run() -> None:
    import torch

    import reduction_lab as rl
    from reduction_lab import cuda_kernels as ck

    rl.runtime.require_gpu("ncu_cluster_regs")
    for name, dtype, n, block, packs in CONFIGS:
        x = torch.randn((1 << 26) // n, n, device="cuda").to(getattr(torch, dtype))
        y = ck.softmax(x, kernel="cluster", block_size=block, packs=packs)
        torch.cuda.synchronize()
        err = (y.double() - torch.softmax(x.double(), -1)).abs().max().item()
        print(name, f"max |y - ref| = {err:.3g}", flush=True)


def parse(text: str) -> list[dict]:
    """ncu 的文本报告 -> 每次启动一项（顺序与 CONFIGS 相同）。"""
    blocks = re.split(r"\n(?=  softmax_cluster_regs \()", "\n" + text)[1:]
    if len(blocks) != len(CONFIGS):
        raise SystemExit(f"报告里有 {len(blocks)} 次启动，预期 {len(CONFIGS)} 次 (expected one launch per config)")
    out = []
    for (name, dtype, n, block, packs), blk in zip(CONFIGS, blocks):
        rec = {"name": name, "dtype": dtype, "N": n, "block_size": block, "packs": packs,
               "launch": blk.splitlines()[0].strip()}
        for line in blk.splitlines():
            for label, key in METRICS.items():
                m = re.match(rf"\s+{re.escape(label)}\s+(?:\S+\s+)?([-\d.,]+)\s*$", line)
                if m and key not in rec:
                    rec[key] = float(m.group(1).replace(",", ""))
        missing = [k for k in METRICS.values() if k not in rec]
        if missing:
            raise SystemExit(f"{name}：报告里没有 {missing}")
        out.append(rec)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run")
    p = sub.add_parser("parse")
    p.add_argument("log")
    p.add_argument("--json")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run()
        return
    with open(args.log, encoding="utf-8") as f:
        recs = parse(f.read())
    doc = {"device": "NVIDIA H200", "tool": "Nsight Compute (ncu), --clock-control none, default cache flush",
           "command": "ncu --clock-control none --kernel-name regex:softmax_cluster_regs --section SpeedOfLight "
                      "--section Occupancy --section WarpStateStats --section LaunchStats "
                      "--section MemoryWorkloadAnalysis --log-file ncu.txt python scripts/ncu_cluster_regs.py run",
           "launches": recs}
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
