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


def ring(n_slots: int, stride: int, rng):
    """n_slots 个相隔 stride 个元素的槽位连成一个随机的环；返回 (next 数组, 按环的顺序排列的槽位)。"""
    order = rng.permutation(n_slots)
    nxt = np.zeros(n_slots * stride, dtype=np.uint32)
    idx = order * stride
    nxt[idx] = np.roll(idx, -1)
    return nxt, idx


def measure(nxt: np.ndarray, idx: np.ndarray, hops: int, warm: bool) -> float:
    """warm=False（显存）：3 次各从环上互不重叠的一段开始，每一步都是第一次碰到的缓存行；
    warm=True（L2）：先把整个环走一遍装进 L2，再从头计时。取 3 次中最短的。"""
    kern = cp.RawKernel(SRC, "chase")
    d = cp.asarray(nxt)
    out = cp.zeros(1, dtype=cp.uint32)
    kern((1,), (1,), (d, np.uint32(idx[-1]), np.int64(len(idx) if warm else 10), out))   # 编译、预热
    cp.cuda.Device().synchronize()
    best = float("inf")
    for k in range(3):
        start = idx[0] if warm else idx[(k + 1) * hops]
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
    dram_nxt, dram_idx = ring(1 << 22, 32, rng)
    dram = measure(dram_nxt, dram_idx, 200_000, warm=False)
    # L2：8 MiB，槽位相隔 128 字节
    l2_nxt, l2_idx = ring((8 << 20) // 128, 32, rng)
    l2 = measure(l2_nxt, l2_idx, 1_000_000, warm=True)
    res = {"device": props.name, "sm_count": props.multi_processor_count, "dram_latency_ns": round(dram, 1),
           "l2_latency_ns": round(l2, 1),
           "method": "单线程指针追逐（__ldcg，绕过 L1），随机环；显存：512 MiB、步距 128 B（4M 条缓存行），3 段互不重叠的 20 万步，每一步都是没碰过的缓存行；"
                     "L2：8 MiB、步距 128 B，先走一遍装进 L2，再计 100 万步；3 次取最短，含一次启动（约几 µs，摊到每步可以忽略）"}
    print(res)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
