"""CUDA C 模拟器的速度：逐行归约与七个经典全数组求和版本（文档：docs/cuda/simulator.md）。

    python scripts/bench_simt.py [--log2n 20] [--repeat 3]

每项打印最好的一次墙钟时间（秒）、结果误差和几项计数器。只用 CPU。
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from reduction_lab import simt
from reduction_lab.simt.examples import REDUCE, ROW_SUM

# 版本名 -> 每个线程块处理的元素个数相对 blockDim 的倍数
VERSIONS = [("reduce0", 1), ("reduce1", 1), ("reduce2", 1), ("reduce3", 2),
            ("reduce4", 2), ("reduce5", 2), ("reduce6", 64)]


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = fn()
        times.append(time.perf_counter() - t0)
    return min(times), r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=20, help="全数组求和的元素个数取 2 的几次方")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)

    x = rng.standard_normal((32, 128)).astype(np.float32)
    out = np.zeros(32, np.float32)
    t, rep = best(lambda: simt.launch(ROW_SUM, "row_sum", 32, 128, (x, out, 128), defines={"BLOCK": 128}), a.repeat)
    err = float(np.abs(out - x.sum(1)).max())
    print(f"{'row_sum (32, 128)':<24} {t:7.3f} s  max|err|={err:.1e}  目标 < 0.5 s")

    n = 1 << a.log2n
    block = 256
    x = rng.integers(-8, 9, n).astype(np.float32)
    ref = float(x.sum(dtype=np.float64))
    print(f"全数组求和 n=2^{a.log2n}，线程块 {block} 个线程，目标每个版本 < 10 s")
    for name, per in VERSIONS:
        nb = max(1, n // (block * per))
        out = np.zeros(nb, np.float32)
        t, rep = best(lambda: simt.launch(REDUCE, name, nb, block, (x, out, n), shared_bytes=block * 4), a.repeat)
        ok = "ok" if float(out.sum(dtype=np.float64)) == ref else "MISMATCH"
        print(f"  {name:<10} 线程块 {nb:>5}  {t:7.3f} s  {ok}  存储体冲突 {rep.bank_conflicts:>7}  "
              f"发散分支 {rep.divergent_branches:>7}  屏障 {rep.barriers:>6}")
    out = np.zeros(1, np.float32)
    t, rep = best(lambda: (out.fill(0), simt.launch(REDUCE, "reduce_shfl", 256, block, (x, out, n)))[1], a.repeat)
    ok = "ok" if float(out[0]) == ref else "MISMATCH"
    print(f"  {'reduce_shfl':<10} 线程块 {256:>5}  {t:7.3f} s  {ok}  原子操作 {rep.atomic_ops}")

    # 课程的 full_sum.cu（版本 1–8，含逐级归约的全部启动），经启动器在模拟器里运行
    import torch

    from reduction_lab import cuda_kernels as ck

    xt = torch.from_numpy(x)
    print(f"课程的 full_sum.cu，n=2^{a.log2n}，线程块 {block} 个线程（各级启动合计）")
    for version in sorted(ck.FULL_SUM_VERSIONS):
        t, total = best(lambda: ck.full_sum(xt, version=version, block_size=block, mode="sim"), a.repeat)
        ok = "ok" if float(total) == ref else "MISMATCH"
        print(f"  版本 {version}  {ck.FULL_SUM_VERSIONS[version][0]:<10} {t:7.3f} s  {ok}")


if __name__ == "__main__":
    main()
