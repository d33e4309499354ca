"""CUDA C 按行求和（src/reduction_lab/cuda_kernels/reduce_sum.cu）的扫描：每块线程数、段数、在途的包数与加载方式。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_row_sum.py [--dtypes float32,bfloat16] [--json out.json]
    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_row_sum.py --kernel warp --ns 512,1024,2048 [--json out.json]
    REDUCTION_LAB_MODE=gpu python scripts/tune_cuda_row_sum.py --dtypes bfloat16 --packs 2,4,8 --evict 0,1 [--compile]

每个 (dtype, N)：M = 2^26 // N 行。split 内核（默认）的候选是 (每块线程数, 段数, 在途的包数, 流式加载)，None 是
包装函数的默认值；
``--kernel warp`` 扫短行的 warp-per-row 内核的每块线程数（``--blocks``，默认 64,128,256,512）。验证与计时见
scripts/_row_sum_sweep.py（与基准相同：每次调用前只读地扫过 4 倍 L2；do_bench 的清空是写零，写回的脏行会拖慢只读的
内核）。整个调用都计时：段数 > 1 时调用里还有清零与（16 位时）转换的两次小启动，它们也算在内。
"""

from __future__ import annotations

import argparse
import sys

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck

from _row_sum_sweep import common_args, sweep

NS = (8192, 32768, 131072, 262144)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common_args(ap, NS)
    ap.add_argument("--kernel", choices=("split", "warp"), default="split")
    ap.add_argument("--blocks", default=None, help="每块线程数（逗号分隔；默认 split 256,512,1024，warp 64,128,256,512）")
    ap.add_argument("--chunks", default="None,1,2,4,8", help="段数（逗号分隔；None 是包装函数的默认段数）")
    ap.add_argument("--packs", default="None",
                    help="每个线程同时在途的 16 字节包数（逗号分隔，1,2,4,8；None 是包装函数的默认值）")
    ap.add_argument("--evict", default="None",
                    help="主循环是否用流式加载 ld.global.cs（逗号分隔，0,1；None 是包装函数的默认值）")
    args = ap.parse_args()
    packs = [None if v == "None" else int(v) for v in args.packs.split(",")]
    evicts = [None if v == "None" else bool(int(v)) for v in args.evict.split(",")]

    def with_packs(c, p):
        return [{**c, **({} if p is None else {"packs": p}), **({} if e is None else {"evict_first": e})}
                for e in evicts]
    blocks = [int(v) for v in (args.blocks or ("256,512,1024" if args.kernel == "split" else "64,128,256,512")).split(",")]
    chunks = [None if v == "None" else int(v) for v in args.chunks.split(",")]
    if args.kernel == "warp":
        return sweep("tune_cuda_row_sum", args,
                     lambda n: [d for b in blocks for p in packs for d in with_packs({"kernel": "warp", "block_size": b}, p)],
                     lambda x, c: ck.reduce_sum(x, kernel="warp", block_size=c["block_size"], packs=c.get("packs"),
                                                evict_first=c.get("evict_first")),
                     lambda x: rl.reduce_sum(x, backend="cuda"))
    return sweep("tune_cuda_row_sum", args,
                 lambda n: [d for b in blocks for c in chunks for p in packs
                            for d in with_packs({"block_size": b, "chunks": c}, p)],
                 lambda x, c: ck.reduce_sum(x, kernel="split", **c),
                 lambda x: rl.reduce_sum(x, backend="cuda"))


if __name__ == "__main__":
    sys.exit(main())
