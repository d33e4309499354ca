"""Triton 按行求和（src/reduction_lab/triton_kernels/row_sum.py 的生产版内核）的块形状、warp 数与常驻方式扫描。

    REDUCTION_LAB_MODE=gpu python scripts/tune_triton_row_sum.py [--dtypes float32,bfloat16] [--json out.json]

每个 (dtype, N)：M = 2^26 // N 行。候选有两种：

* ``tiled``：一个 program 读 BLOCK_M 行 x 一段列（grid = 行块数 x 段数，段数按默认）；一块 ``tile`` 个元素，
  短行时 BLOCK_N = N、BLOCK_M = tile / N，长行时 BLOCK_M = 1、BLOCK_N = tile，在 program 内按 BLOCK_N 循环；
* ``persistent``：常驻内核（program 数 = SM 数 x 每 SM 的 program 数），只用于短行。

验证与计时见 scripts/_row_sum_sweep.py（与基准相同，整个调用都计时）。
"""

from __future__ import annotations

import argparse
import itertools
import sys

import reduction_lab as rl
from reduction_lab.triton_kernels.row_sum import row_sum

from _row_sum_sweep import common_args, sweep

NS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)


def candidates(n: int, tiles, warps, pps, evicts=("",)) -> list[dict]:
    out = []
    for tile, w, ev in itertools.product(tiles, warps, evicts):
        e = {"eviction_policy": ev} if ev else {}
        if not 4 <= tile // (32 * w) <= 64:          # 每个线程 4 到 64 个元素
            continue
        if n < tile:
            out.append({"kind": "tiled", "block_m": tile // n, "block_n": n, "num_warps": w, **e})
            out.extend({"kind": "persistent", "block_m": tile // n, "block_n": n, "num_warps": w, "n_split": 1,
                        "programs_per_sm": p, **e} for p in pps)
        else:
            out.append({"kind": "tiled", "block_m": 1, "block_n": tile, "num_warps": w, **e})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_args(ap, NS)
    ap.add_argument("--tiles", default="4096,8192,16384", help="一块的元素数（逗号分隔）")
    ap.add_argument("--warps", default="4,8,16")
    ap.add_argument("--pps", default="2,4", help="常驻内核每个 SM 的 program 数（空串：不测常驻内核）")
    ap.add_argument("--evict", default="", help="加载的 eviction_policy（逗号分隔；空串是默认）")
    args = ap.parse_args()
    ints = lambda s: [int(v) for v in s.split(",")]
    tiles, warps, pps = ints(args.tiles), ints(args.warps), ints(args.pps) if args.pps else []
    evicts = args.evict.split(",")
    return sweep("tune_triton_row_sum", args, lambda n: candidates(n, tiles, warps, pps, evicts),
                 lambda x, c: row_sum(x, **{k: v for k, v in c.items() if k != "kind"}),
                 lambda x: rl.reduce_sum(x, backend="triton"),
                 meta={"triton": __import__("triton").__version__})


if __name__ == "__main__":
    sys.exit(main())
