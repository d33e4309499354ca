"""在 GPU 上量一次访存的延迟（指针追逐）：一个线程沿一个随机排列的环读下去，每次读的地址取决于
上一次读到的值，所以读一个接一个、不会重叠；总时间除以读的次数就是每次读的延迟。

    REDUCTION_LAB_MODE=gpu python scripts/gpu_latency.py --json docs/data/h200_latency.json

两种工作集：远大于 L2（512 MiB，测显存；随机跳跃也包括地址翻译的开销，是上限）与装得进 L2
（8 MiB，测 L2 命中）。页面「占用率与延迟」读这个文件。
"""

from __future__ import annotations

import argparse
import json
import time

import cupy as cp
import numpy as np
import torch

SRC = r"""
extern "C" __global__ void chase(const unsigned int *next, unsigned int start, long long hops, unsigned int *out)
{
    unsigned int i = start;
    for (long long k = 0; k < hops; k++)
        i = __ldcg(next + i);          // 绕过 L1：每一步都到 L2（或更远）
    out[0] = i;
}
"""


def ring(n_slots: int, stride: int, rng) -> np.ndarray:
    """n_slots 个相隔 stride 个元素的槽位连成一个随机的环。"""
    order = rng.permutation(n_slots)
    nxt = np.zeros(n_slots * stride, dtype=np.uint32)
    idx = order * stride
    nxt[idx] = np.roll(idx, -1)
    return nxt, int(idx[0])


def measure(nxt: np.ndarray, start: int, hops: int) -> float:
    kern = cp.RawKernel(SRC, "chase")
    d = cp.asarray(nxt)
    out = cp.zeros(1, dtype=cp.uint32)
    kern((1,), (1,), (d, np.uint32(start), np.int64(hops // 10), out))   # 预热（也把 L2 情形装进 L2）
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        kern((1,), (1,), (d, np.uint32(start), np.int64(hops), out))
        cp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best / hops * 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    props = torch.cuda.get_device_properties(0)
    # 显存：512 MiB 的数组，槽位相隔 128 字节（每个槽位一条缓存行），4M 条缓存行远大于 L2
    dram_nxt, s0 = ring(1 << 22, 32, rng)
    dram = measure(dram_nxt, s0, 200_000)
    # L2：8 MiB，槽位相隔 128 字节
    l2_nxt, s1 = ring((8 << 20) // 128, 32, rng)
    l2 = measure(l2_nxt, s1, 1_000_000)
    res = {"device": props.name, "sm_count": props.multi_processor_count, "dram_latency_ns": round(dram, 1),
           "l2_latency_ns": round(l2, 1),
           "method": "单线程指针追逐（__ldcg，绕过 L1），随机环；显存：512 MiB、步距 128 B（4M 条缓存行），20 万步；"
                     "L2：8 MiB、步距 128 B，100 万步；3 次取最短，含一次启动（约几 µs，摊到每步可以忽略）"}
    print(res)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
