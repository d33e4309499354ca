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

第二种用法与 quack 比：同样的 bfloat16 形状，quack 的 ``softmax_fwd`` 与寄存器版各启动一次（quack 先调用一次
让它编译，量第二次），看两者的配置（线程数、寄存器、每 SM 块数、同时驻留的簇）是否相同、时间差在哪里：

    # 1) GPU 机器上（quack 的 wheel 见 scripts/install_peer_wheels.sh，PYTHONPATH 按它打印的设置）：
    ncu --clock-control none --kernel-name regex:"(?i)softmax" --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section WarpStateStats --log-file ncu_quack.txt python scripts/ncu_cluster_regs.py run-quack
    # 2) 任何机器上：
    python scripts/ncu_cluster_regs.py parse-quack ncu_quack.txt --json docs/data/h200_ncu_quack_vs_regs.json
"""

from __future__ import annotations

import argparse
import re

from _ncu import metric_values, write_json

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


#: 与 quack 比的形状：(N, 寄存器版每块线程数, 包数)，bfloat16，M = 2^26 / N；两边都是 256 线程、每线程 64 个元素
QUACK_CONFIGS = ((32768, 256, 8), (65536, 256, 8))
_QUACK_KERNEL = "kernel_cutlass_kernel_quacksoftmaxSoftmax"


def run_quack() -> None:
    import torch
    from quack.softmax import softmax_fwd

    import reduction_lab as rl
    from reduction_lab import cuda_kernels as ck

    rl.runtime.require_gpu("ncu_cluster_regs run-quack")
    for n, block, packs in QUACK_CONFIGS:
        x = torch.randn((1 << 26) // n, n, device="cuda").to(torch.bfloat16)
        for _ in range(2):                       # 第一次调用编译，ncu 两次都量，解析时取第二次
            softmax_fwd(x)
        ck.softmax(x, kernel="cluster", block_size=block, packs=packs)
        torch.cuda.synchronize()
    print("done", flush=True)


def _metrics(blk: str, name: str) -> dict:
    rec = metric_values(blk, METRICS)
    missing = [k for k in METRICS.values() if k not in rec]
    if missing:
        raise SystemExit(f"{name}：报告里没有 {missing}")
    return rec


def parse_quack(text: str) -> list[dict]:
    """run-quack 的 ncu 文本报告 -> 每个形状两项（quack 的第二次启动、寄存器版），顺序与 QUACK_CONFIGS 相同。"""
    blocks = re.split(rf"\n(?=  (?:{_QUACK_KERNEL}|softmax_cluster_regs \())", "\n" + text)[1:]
    kinds = ["quack" if b.startswith(f"  {_QUACK_KERNEL}") else "regs" for b in blocks]
    if kinds != ["quack", "quack", "regs"] * len(QUACK_CONFIGS):
        raise SystemExit(f"报告里的启动依次是 {kinds}，预期每个形状 quack、quack、regs "
                         f"(expected quack, quack, regs per shape)")
    out = []
    for i, (n, block, packs) in enumerate(QUACK_CONFIGS):
        for impl, blk in (("quack", blocks[3 * i + 1]), ("regs", blocks[3 * i + 2])):
            rec = {"impl": impl, "dtype": "bfloat16", "N": n, "M": (1 << 26) // n}
            if impl == "regs":
                rec.update(block_size=block, packs=packs)
            rec.update(_metrics(blk, f"{impl} N={n}"))
            out.append(rec)
    return out


def parse(text: str) -> list[dict]:
    """ncu 的文本报告 -> 每次启动一项（顺序与 CONFIGS 相同）。"""
    blocks = re.split(r"\n(?=  softmax_cluster_regs \()", "\n" + text)[1:]
    if len(blocks) != len(CONFIGS):
        raise SystemExit(f"报告里有 {len(blocks)} 次启动，预期 {len(CONFIGS)} 次 (expected one launch per config)")
    out = []
    for (name, dtype, n, block, packs), blk in zip(CONFIGS, blocks):
        rec = {"name": name, "dtype": dtype, "N": n, "block_size": block, "packs": packs,
               "launch": blk.splitlines()[0].strip()}
        rec.update(_metrics(blk, name))
        out.append(rec)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run")
    sub.add_parser("run-quack")
    for name in ("parse", "parse-quack"):
        p = sub.add_parser(name)
        p.add_argument("log")
        p.add_argument("--json")
        p.add_argument("--note", default="", help="写进 JSON 的说明（例如寄存器版当时的交换方式）")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run()
        return
    if args.cmd == "run-quack":
        run_quack()
        return
    with open(args.log, encoding="utf-8") as f:
        text = f.read()
    doc = {"device": "NVIDIA H200", "tool": "Nsight Compute (ncu), --clock-control none, default cache flush"}
    if args.cmd == "parse":
        doc["command"] = ("ncu --clock-control none --kernel-name regex:softmax_cluster_regs --section SpeedOfLight "
                          "--section Occupancy --section WarpStateStats --section LaunchStats "
                          "--section MemoryWorkloadAnalysis --log-file ncu.txt python scripts/ncu_cluster_regs.py run")
        doc["launches"] = parse(text)
    else:
        doc["command"] = ('ncu --clock-control none --kernel-name regex:"(?i)softmax" --section SpeedOfLight '
                          "--section Occupancy --section LaunchStats --section WarpStateStats "
                          "--log-file ncu_quack.txt python scripts/ncu_cluster_regs.py run-quack")
        doc["launches"] = parse_quack(text)
    if args.note:
        doc["note"] = args.note
    write_json(doc, args.json)


if __name__ == "__main__":
    main()
