"""计时：GPU上用CUDA事件，sim模式下用time.perf_counter。

GPU计时的做法（每个实现、每个形状都一样）：

1. 预热``warmup``次（JIT编译、torch.compile、CuPy内核缓存都在验证阶段已经发生）；
2. 每次计时调用之前，用一个只读内核扫过4倍L2大小的缓冲区，把输入挤出L2。
   只读而不写零：写零会在L2里留下脏行，它们在下一次调用期间被写回，挤占带宽；
   这次扫描也让CPU有时间把下一次调用排进队列，小内核不会因为Python开销而饿着；
3. 输入小于3倍L2时，另外在若干份输入副本之间轮换（rotating buffers）；
4. 在被测调用前后记录CUDA事件，取``iters``次的中位数和p20/p80。
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, asdict
from typing import Callable, Sequence

import torch

from ..runtime import MODE

#: 每批计时调用之前GPU空转的时钟周期数（约50 ms，按2 GHz计），以及每批的调用次数
LEAD_CYCLES = 100_000_000
LEAD_BATCH = 25

#: 拿不到L2大小时的默认值（H100/H200：50–60 MB）
DEFAULT_L2_BYTES = 60 * 1024 * 1024


@dataclass
class Timing:
    """一组计时的统计量（毫秒）。"""

    median_ms: float
    p20_ms: float
    p80_ms: float
    iters: int
    timer: str

    def to_dict(self) -> dict:
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float:
    """线性插值的分位数（与numpy.quantile的默认方法一致）。"""
    if not values:
        raise ValueError("quantile()需要至少一个值(no values)")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"分位数q必须在[0, 1]内，得到{q}")
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(times_ms: Sequence[float], timer: str) -> Timing:
    return Timing(median_ms=quantile(times_ms, 0.5), p20_ms=quantile(times_ms, 0.2),
                  p80_ms=quantile(times_ms, 0.8), iters=len(times_ms), timer=timer)


def l2_bytes() -> int:
    """当前GPU的L2大小（字节）；sim模式下返回默认值（只用来决定轮换份数）。"""
    if MODE == "gpu":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        size = int(getattr(props, "L2_cache_size", 0) or 0)
        if size > 0:
            return size
    return DEFAULT_L2_BYTES


def rotation_count(input_bytes: int, l2: int, max_copies: int = 16) -> int:
    """输入小于3倍L2时需要几份副本轮换，才能让一轮里读到的字节数超过3倍L2。"""
    if input_bytes <= 0:
        raise ValueError(f"input_bytes必须为正，得到{input_bytes}")
    if input_bytes >= 3 * l2:
        return 1
    return max(2, min(max_copies, math.ceil(3 * l2 / input_bytes)))


class L2Flusher:
    """只读地扫过4倍L2大小的缓冲区（一次torch.sum写进预先分配的标量）。"""

    FACTOR = 4

    def __init__(self, l2: int):
        n = (self.FACTOR * l2) // 4
        self.buf = torch.ones(n, dtype=torch.float32, device="cuda")
        self.out = torch.empty((), dtype=torch.float32, device="cuda")

    def __call__(self) -> None:
        torch.sum(self.buf, dim=0, out=self.out)


def time_gpu(calls: Sequence[Callable[[], object]], warmup: int, iters: int,
             flusher: L2Flusher | None) -> Timing:
    """用CUDA事件计时。``calls``是轮换的各份输入上的同一个调用。"""
    k = len(calls)
    for i in range(warmup):
        calls[i % k]()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for first in range(0, iters, LEAD_BATCH):
        # 先让GPU空转一段（torch.cuda._sleep），CPU趁机把这一批调用全部排进队列：
        # 否则包装函数的Python开销比内核还长时，GPU会在开始事件之后等CPU，测到的是主机开销
        torch.cuda._sleep(LEAD_CYCLES)
        for i in range(first, min(first + LEAD_BATCH, iters)):
            if flusher is not None:
                flusher()
            starts[i].record()
            calls[i % k]()
            ends[i].record()
        torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], "cuda-events")


def time_cpu(calls: Sequence[Callable[[], object]], warmup: int, iters: int) -> Timing:
    """sim模式：time.perf_counter计时。这些数字只说明CPU上的模拟有多慢。"""
    k = len(calls)
    for i in range(warmup):
        calls[i % k]()
    times = []
    for i in range(iters):
        t0 = time.perf_counter()
        calls[i % k]()
        times.append((time.perf_counter() - t0) * 1e3)
    return summarize(times, "perf_counter")


def time_gpu_graph(calls: Sequence[Callable[[], object]], warmup: int, iters: int,
                   flusher: L2Flusher | None) -> Timing:
    """把每个调用录成一个CUDA图，计时时重放图：一次调用里有多次启动、每次启动的Python开销
    比内核本身还长时（小数组的全数组求和），测到的才是GPU上的时间。录制失败时抛出异常，
    由调用者改用 :func:`time_gpu`。"""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # 录制前在旁路流上预热（PyTorch文档的建议）
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = []
    for c in calls:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c()
        graphs.append(g)
    t = time_gpu([g.replay for g in graphs], warmup, iters, flusher)
    t.timer = "cuda-graph"
    return t
