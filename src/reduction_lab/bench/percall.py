"""一次调用要多久：``percall``套件。小形状上，主机端（Python、参数检查、启动内核）的开销比内核本身还长。

做法（每个实现、每个形状与dtype都一样）：

1. 先验证（与其他套件相同的参考与容差，不符就不计时）；
2. 预热``warmup``次，``torch.cuda.synchronize()``；
3. **每次调用的墙钟时间**：连续调用``K``次（前面不让GPU空转，也不清L2：测的就是背靠背调用时
   主机端的开销），两端各``torch.cuda.synchronize()``，用``time.perf_counter``取总时间除以``K``；
   重复``repeats``次取中位数；
   每次重复之后，同一进程里同样测一次 torch eager 的同一个操作（``torch.softmax`` / ``x.sum(1)``），
   记下二者的中位数之比 ``vs_torch``：两个进程、两次运行之间机器的状态不同，同一格可以差好几微秒，
   交替测出的比值不受它影响；
4. **只算内核的时间**：同一个调用用:func:`reduction_lab.bench.timing.time_gpu`计时（先让GPU空转、
   把一批调用排进队列，再在每次调用前后记CUDA事件，不清L2），取中位数。二者之差就是主机端的开销
   没有被GPU的执行盖住的部分。

sim模式下只有墙钟时间（CPU上的模拟），没有内核时间。课程页面：docs/bench/index.md「一次调用的开销」。
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable, Sequence

import torch

from ..runtime import MODE
from . import timing

#: GPU上的形状；sim模式下换成很小的形状（Triton解释器每个program约1 ms）
PERCALL_SHAPES = ((64, 1024), (1024, 1024), (4096, 4096))
SIM_PERCALL_SHAPES = ((4, 64), (8, 128))
#: 两个操作：用softmax与row-sum套件的实现
OPS = ("softmax", "row-sum")

METHOD = ("墙钟时间：预热后连续调用K次（前面不让GPU空转、不清L2），两端torch.cuda.synchronize()，"
          "perf_counter的总时间除以K，重复几次取中位数，每次之后在同一进程里同样测一次torch eager的同一个操作，"
          "比值（实现 / 同进程的torch）取两个中位数之比；内核时间：同一调用先让GPU空转、把一批调用排进队列，"
          "再用每次调用前后的CUDA事件计时（不清L2），取中位数。二者之差是没有被GPU执行盖住的主机端开销")
SIM_METHOD = "sim模式：只有perf_counter的墙钟时间（CPU上的模拟，与GPU无关），没有内核时间"


def percall_impls(op: str):
    from .impls import impls_for

    return impls_for(op)


def _torch_peer(op: str):
    """torch eager 这个对照（每个实现的墙钟时间都与它在同一进程里交替测一次）。"""
    return next(impl for impl in percall_impls(op) if impl.name == "torch")


def percall_impl_names() -> list[str]:
    """两个操作的实现名的并集，按表格的列顺序。"""
    names: list[str] = []
    for op in OPS:
        for impl in percall_impls(op):
            if impl.name not in names:
                names.append(impl.name)
    return names


#: 一次调用的目标（相对同一进程里的 torch eager）：Triton（默认 backend auto 在这些短行上选它）不超过 torch，
#: CUDA C 与 TileLang 不超过 1.5 倍
PERCALL_TARGETS = {"triton": 1.0, "cuda": 1.5, "tilelang": 1.5}


def wall_us(call: Callable[[], object], k: int, repeats: int, gpu: bool) -> list[float]:
    """每次调用的墙钟时间（µs），重复 ``repeats`` 次：连续调用 ``k`` 次，两端同步（gpu 时），总时间 / k。"""
    out = []
    for _ in range(repeats):
        if gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(k):
            call()
        if gpu:
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / k * 1e6)
    return out


def run_percall(*, impls: Iterable[str] | None = None, dtypes: Sequence[str] | None = None,
                shapes: Sequence[tuple[int, int]] | None = None, iters: int | None = None,
                warmup: int | None = None, quick: bool = False, seed: int = 0, progress: bool = True,
                log: Callable[[str], None] = print, budget_s: float | None = None,
                repeats: int | None = None, on_mismatch: str = "raise") -> dict:
    """运行percall套件，返回记录：``shapes``里每一项是一个(操作, 形状, dtype)，``results``按实现。

    ``iters``是每次墙钟测量里连续调用的次数K（GPU默认200，``--quick`` 50，sim 3），也是CUDA事件
    计时的次数；``budget_s``：验证阶段超过它就不再加新的(操作, 形状, dtype)。"""
    from .harness import (BenchError, DTYPE_SHORT, ValidationError, _progress, compare, make_input,
                          parse_dtypes, reference)

    gpu = MODE == "gpu"
    dtypes = parse_dtypes(dtypes) if dtypes is not None else ["float32", "bfloat16"]
    if shapes is None:
        shapes = PERCALL_SHAPES if gpu else SIM_PERCALL_SHAPES
    shapes = [tuple(int(v) for v in s_) for s_ in shapes]
    if iters is None:
        iters = (50 if quick else 200) if gpu else 3
    if warmup is None:
        warmup = (5 if quick else 20) if gpu else 1
    if repeats is None:
        repeats = 5 if gpu else 1
    if iters < 1 or warmup < 0 or repeats < 1:
        raise BenchError(f"iters、repeats必须>= 1、warmup必须>= 0，得到iters={iters}, warmup={warmup}, "
                         f"repeats={repeats}")
    wanted = None if impls is None else list(impls)
    if wanted is not None:
        unknown = [n for n in wanted if n not in percall_impl_names()]
        if unknown:
            raise BenchError(f"percall没有实现{unknown}；可选：{percall_impl_names()}")

    record: dict = {
        "suite": "percall",
        "method": METHOD if gpu else SIM_METHOD,
        "tolerance": "与同名套件（softmax、row-sum）的验证相同",
        "iters": iters,
        "warmup": warmup,
        "repeats": repeats,
        "dtypes": dtypes,
        "impls": [],
        "skipped": {},
        "shapes": [],
    }
    # 每个操作的可用实现
    per_op: dict[str, list] = {}
    for op in OPS:
        per_op[op] = []
        for impl in percall_impls(op):
            if wanted is not None and impl.name not in wanted:
                continue
            reason = impl.unavailable()
            if reason:
                record["skipped"].setdefault(impl.name, reason)
                continue
            per_op[op].append(impl)
            if impl.name not in [i["name"] for i in record["impls"]]:
                record["impls"].append({"name": impl.name, "label": impl.label, "kind": impl.kind})
    # 表格的列顺序：与percall_impl_names()一致
    order = {n: i for i, n in enumerate(percall_impl_names())}
    record["impls"].sort(key=lambda i: order[i["name"]])
    for name in [i["name"] for i in record["impls"]]:
        record["skipped"].pop(name, None)      # 在一个操作里能测就不算跳过

    cases = [(op, shape, dt) for op in OPS for dt in dtypes for shape in shapes if per_op[op]]
    bar = _progress(len(cases), "percall", progress)
    t_start = time.monotonic()
    mismatched: dict[tuple, str] = {}          # (操作, dtype, 实现) -> 说明
    for op, shape, dt in cases:
        if budget_s is not None and record["shapes"] and time.monotonic() - t_start > budget_s:
            rest = [(o, list(s_), d) for o, s_, d in cases[cases.index((op, shape, dt)):]]
            record["skipped_shapes"] = {"shapes": [[o, s_, d] for o, s_, d in rest],
                                        "reason": f"超过时间预算{budget_s:g} s"}
            log(f"percall：超过时间预算{budget_s:g} s，不测{rest}")
            break
        x = make_input(op, shape, seed, dt)
        ref = reference(op, x)
        eager = _torch_peer(op).prepare(x)        # 同一进程里的参照：torch 这个对照本身
        entry = {"op": op, "shape": list(shape), "M": shape[0], "N": shape[1], "dtype": dt, "results": {}}
        for impl in per_op[op]:
            why = impl.dtype_reason(dt) or impl.refuses(shape, dt)
            if why:
                entry["results"][impl.name] = {"status": "unsupported", "reason": why}
                continue
            if (op, dt, impl.name) in mismatched:
                entry["results"][impl.name] = {"status": "skipped", "reason": mismatched[(op, dt, impl.name)]}
                continue
            try:
                call = impl.prepare(x)
                ok, msg = compare(op, call(), ref, dt)
            except Exception as exc:
                entry["results"][impl.name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
                log(f"错误percall/{op}/{impl.name}形状{shape}（{dt}）：{type(exc).__name__}: {exc}")
                continue
            if not ok:
                text = f"结果不符：percall/{op}/{impl.name}（{dt}），形状{shape}：{msg}。"
                if on_mismatch == "raise":
                    if bar is not None:
                        bar.close()
                    raise ValidationError(text + f"在计时之前停止。(result mismatch: {op}/{impl.name})")
                entry["results"][impl.name] = {"status": "mismatch", "error": text}
                mismatched[(op, dt, impl.name)] = f"在形状{shape}上结果不符，这个实现在{op}（{dt}）里不计时"
                log(text)
                continue
            try:
                for _ in range(warmup):
                    call()
                    eager()
                # 与同一进程里的 torch eager 交替测：两次运行之间、两个进程之间机器的状态（CPU 频率、
                # GPU 从空闲升频）可以让同一格差好几微秒，交替测出的比值不受它影响
                walls, torch_walls = [], []
                for _ in range(repeats):
                    walls += wall_us(call, iters, 1, gpu)
                    torch_walls += wall_us(eager, iters, 1, gpu)
                res = {"status": "ok", "wall_us": statistics.median(walls), "wall_us_min": min(walls),
                       "k_calls": iters, "torch_wall_us": statistics.median(torch_walls)}
                res["vs_torch"] = res["wall_us"] / res["torch_wall_us"]
                if gpu:
                    t = timing.time_gpu([call], 0, iters, None)
                    res["kernel_us"] = t.median_ms * 1e3
                    res["kernel_us_p20"], res["kernel_us_p80"] = t.p20_ms * 1e3, t.p80_ms * 1e3
                    res["host_us"] = max(res["wall_us"] - res["kernel_us"], 0.0)
                entry["results"][impl.name] = res
            except Exception as exc:
                entry["results"][impl.name] = {"status": "error", "error": f"计时时出错：{type(exc).__name__}: {exc}"}
                log(f"错误percall/{op}/{impl.name}形状{shape}（{dt}）：{type(exc).__name__}: {exc}")
        record["shapes"].append(entry)
        del x, ref
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    log(f"percall：{len(record['shapes'])}个(操作, 形状, dtype)，"
        f"dtype {', '.join(DTYPE_SHORT[d] for d in dtypes)}")
    return record
