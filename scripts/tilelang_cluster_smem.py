"""TileLang 长行 softmax：段放在共享内存里的簇路径（``cluster_smem``）与段放在寄存器里的路径并排计时。

    REDUCTION_LAB_MODE=gpu python scripts/tilelang_cluster_smem.py \
        --shapes 256x262144:float32,256x262144:bfloat16,512x131072:bfloat16 --segs 8,16 --threads 256,512 --json a.json
    REDUCTION_LAB_MODE=gpu python scripts/tilelang_cluster_smem.py \
        --shapes 64x1048576:bfloat16,512x131072:float32,1024x65536:bfloat16,1024x65536:float32 --threads 256 --json b.json

每个形状在同一个进程里测：
* ``copy``：``y.copy_(x)``，同样的字节数；
* ``cuda``：``rl.softmax(x, backend="cuda")`` 的默认配置；
* ``registers``：加入 cluster_smem 之前 TileLang 的默认配置（``REGISTER_DEFAULTS``：段在寄存器里的 cluster，
  或读两次的 split）；
* ``smem/s{n_seg}/t{threads}``：cluster_smem 的候选（block_n = 16 字节向量 x threads，一段至多 192 KiB）。
每个候选先与 float64 的 torch.softmax 逐元素比对（float32：rtol 1e-5、atol 1e-9；16 位：rtol 8e-3、atol 1e-6），
不符的不计时。计时：``bench.timing.time_gpu``（CUDA 事件，每次调用前只读地扫过 4 倍 L2，20 次的中位数），
全部候选轮流测 3 轮，每个候选取 3 轮的中位数，写成 GB/s（读 MN + 写 MN 个元素的字节数 / 时间）。
课程页面 docs/tilelang/reduce.md 读 ``docs/data/h100_tilelang_cluster_smem.json``。
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

import reduction_lab as rl
from reduction_lab import tilelang_kernels as tk
from reduction_lab.bench.sidebyside import interleaved_gbs, new_doc, parse_shapes, print_gbs, softmax_case, validated
from reduction_lab.bench.timing import L2Flusher, l2_bytes
from reduction_lab.tilelang_kernels import kernels as K

#: cluster_smem 之前 SOFTMAX_TABLE 的长行项（元素字节数, N）：段在寄存器里的 cluster，或读两次的 split
REGISTER_DEFAULTS = {
    (4, 65536): dict(path="cluster", threads=256, block_n=1024, n_seg=8),
    (4, 131072): dict(path="cluster", threads=256, block_n=1024, n_seg=8),
    (4, 262144): dict(path="cluster", threads=256, block_n=1024, n_seg=16),
    (2, 65536): dict(path="cluster", threads=128, block_n=1024, n_seg=8),
    (2, 131072): dict(path="cluster", threads=256, block_n=2048, n_seg=8),
    (2, 262144): dict(path="split", threads=256, block_n=2048, n_seg=16),
    (2, 1048576): dict(path="split", threads=256, block_n=2048, n_seg=64),
}
ROUNDS = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, help="MxN:dtype，逗号分隔")
    ap.add_argument("--segs", default="8,16", help="cluster_smem 的 n_seg（逗号分隔）")
    ap.add_argument("--threads", default="256,512", help="cluster_smem 的线程数（逗号分隔）")
    ap.add_argument("--json", help="写出结果")
    args = ap.parse_args(argv)
    if rl.runtime.MODE != "gpu":
        print("需要 GPU：REDUCTION_LAB_MODE=gpu", file=sys.stderr)
        return 2
    flusher = L2Flusher(l2_bytes())
    out = new_doc(sys.argv[1:], ROUNDS)
    for M, N, dt in parse_shapes(args.shapes):
        x, y, ref, tol = softmax_case(M, N, dt)
        es = x.element_size()
        vec = 16 // es
        cands = {"copy": lambda: y.copy_(x), "cuda": lambda: rl.softmax(x, backend="cuda")}
        base = REGISTER_DEFAULTS.get((es, N))
        if base:
            cands["registers"] = lambda: tk.softmax(x, out=y, **base)
        for n_seg, threads in itertools.product(map(int, args.segs.split(",")), map(int, args.threads.split(","))):
            cfg = dict(path="cluster_smem", block_n=vec * threads, threads=threads, n_seg=n_seg)
            try:
                tk._resolve("softmax", M, N, True, cfg, elem_size=es)
            except ValueError as exc:
                print(f"{M}x{N} {dt} n_seg={n_seg} threads={threads}：{exc}")
                continue
            stats = torch.empty(M, n_seg, 2, device="cuda")
            cands[f"smem/s{n_seg}/t{threads}"] = (
                lambda cfg=cfg, stats=stats: K.softmax_kernel(x, y, stats, dtype=dt, **cfg))
        checked = validated(cands, y, ref, tol, f"{M}x{N} {dt}")
        med = interleaved_gbs(checked, 2 * x.numel() * x.element_size(), flusher, ROUNDS)
        print_gbs(f"{out['device']} {M}x{N} {dt}", med, 16)
        out["rows"].append({"M": M, "N": N, "dtype": dt, "gbs": med})
        del x, y, ref
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
