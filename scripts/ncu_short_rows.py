"""ncu 看 16 位短行的 softmax：CUDA C 的 warp 内核（一个 warp 一行、半个 warp 一行）与 Triton 在 N = 512 上差在哪里。

每个配置在 gpu 模式下先调用一次（编译），再启动一次让 ncu 量；两次 ncu 都量，解析时取每个配置的第二次。
每次启动记下时间、显存吞吐、占用率、执行的指令数（换算成每个元素几条线程指令）与每条指令之间 warp 等了几个周期、
等在什么上（几种主要的停顿原因）。

    # 1) GPU 机器上：
    ncu --clock-control none --kernel-name regex:^softmax_rows --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section WarpStateStats --section InstructionStats --metrics METRICS \\
        --log-file ncu_short.txt python scripts/ncu_short_rows.py run
    （METRICS 是 ``python scripts/ncu_short_rows.py metrics`` 打印的逗号分隔列表）
    # 2) 任何机器上：
    python scripts/ncu_short_rows.py parse ncu_short.txt --json docs/data/h200_ncu_short_rows.json

ncu 默认在每次重放之前清空缓存；``--clock-control none`` 不锁频率。时间是一次启动的，只用来比较同一次运行里的
几个配置；带宽的比较以 scripts/tune_cuda_softmax.py 的 do_bench 中位数为准。
"""

from __future__ import annotations

import argparse
import re

from _ncu import metric_values, write_json

#: (名字, 实现, dtype, N, 内核, 每块线程数, 包数)；M = 2^26 / N。triton 一项用默认配置（后三栏不用）
CONFIGS = (("cuda-bf16-512-half-warp", "cuda", "bfloat16", 512, "warp", 128, 4),
           ("cuda-bf16-512-warp", "cuda", "bfloat16", 512, "warp", 128, 2),
           ("triton-bf16-512", "triton", "bfloat16", 512, None, None, None),
           ("cuda-bf16-2048-block", "cuda", "bfloat16", 2048, "block", 64, 4),
           ("cuda-fp32-512-block", "cuda", "float32", 512, "block", 64, 2))

#: ncu 文本报告里各节的指标（报告里的名字 -> JSON 里的键）
METRICS = {"Duration": "duration_us", "DRAM Throughput": "dram_pct_peak", "Compute (SM) Throughput": "sm_pct_peak",
           "Registers Per Thread": "registers_per_thread", "Theoretical Occupancy": "theoretical_occupancy_pct",
           "Achieved Occupancy": "achieved_occupancy_pct", "Warp Cycles Per Issued Instruction": "warp_cycles_per_issue",
           "Executed Instructions": "executed_warp_instructions", "Block Size": "block_size_launched",
           "Grid Size": "grid_size", "SM Frequency": "sm_ghz"}

#: 每条发出的指令平均等待的周期，按停顿原因（--metrics 要的原始指标）
STALLS = ("long_scoreboard", "short_scoreboard", "wait", "math_pipe_throttle", "mio_throttle", "lg_throttle",
          "not_selected", "selected", "dispatch_stall", "no_instruction", "branch_resolving", "barrier", "drain")
_STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def metric_list() -> str:
    return ",".join(_STALL_METRIC.format(s) for s in STALLS)


def run() -> None:
    import torch

    import reduction_lab as rl
    from reduction_lab import cuda_kernels as ck

    rl.runtime.require_gpu("ncu_short_rows")
    for name, impl, dtype, n, kernel, block, packs in CONFIGS:
        x = torch.randn((1 << 26) // n, n, device="cuda").to(getattr(torch, dtype))
        for _ in range(2):                           # 第一次编译，ncu 两次都量，解析时取第二次
            if impl == "cuda":
                ck.softmax(x, kernel=kernel, block_size=block, packs=packs)
            else:
                rl.softmax(x, backend="triton")
        torch.cuda.synchronize()
        print(name, flush=True)


def _metrics(blk: str, name: str) -> dict:
    rec = metric_values(blk, METRICS)
    stalls = metric_values(blk, {_STALL_METRIC.format(s): s for s in STALLS})
    missing = [k for k in METRICS.values() if k not in rec]
    if missing or len(stalls) != len(STALLS):
        raise SystemExit(f"{name}：报告里没有 {missing or '全部停顿原因'}")
    rec["stall_cycles_per_issue"] = {s: stalls[s] for s in STALLS}
    return rec


def parse(text: str) -> list[dict]:
    """ncu 的文本报告 -> 每个配置一项（取第二次启动），顺序与 CONFIGS 相同。"""
    blocks = re.split(r"\n(?=  softmax_rows\w* \()", "\n" + text)[1:]
    if len(blocks) != 2 * len(CONFIGS):
        raise SystemExit(f"报告里有 {len(blocks)} 次启动，预期 {2 * len(CONFIGS)} 次（每个配置两次）")
    out = []
    for i, (name, impl, dtype, n, kernel, block, packs) in enumerate(CONFIGS):
        blk = blocks[2 * i + 1]
        m = (1 << 26) // n
        rec = {"name": name, "impl": impl, "dtype": dtype, "N": n, "M": m, "kernel": kernel,
               "block_size": block, "packs": packs, "launch": blk.splitlines()[0].strip()}
        rec.update(_metrics(blk, name))
        rec["thread_instructions_per_element"] = rec["executed_warp_instructions"] * 32 / (m * n)
        out.append(rec)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run")
    sub.add_parser("metrics")
    p = sub.add_parser("parse")
    p.add_argument("log")
    p.add_argument("--json")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run()
        return
    if args.cmd == "metrics":
        print(metric_list())
        return
    with open(args.log, encoding="utf-8") as f:
        text = f.read()
    doc = {"device": "NVIDIA H200", "tool": "Nsight Compute (ncu), --clock-control none, default cache flush",
           "command": ("ncu --clock-control none --kernel-name regex:^softmax_rows --section SpeedOfLight "
                       "--section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats "
                       "--metrics $(python scripts/ncu_short_rows.py metrics) --log-file ncu_short.txt "
                       "python scripts/ncu_short_rows.py run"),
           "launches": parse(text)}
    write_json(doc, args.json)


if __name__ == "__main__":
    main()
