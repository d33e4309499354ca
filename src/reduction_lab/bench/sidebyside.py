"""同一个进程里并排比较几个候选（``scripts/tilelang_cluster_smem.py``、``scripts/tilelang_grid_softmax.py`` 共用）：
每个候选先与 float64 的参考逐元素比对，不符的不计时；再全部候选轮流计时几轮，每个取几轮的中位数，写成 GB/s。
``copy`` 这一项是同样字节数的拷贝，不比对。"""

from __future__ import annotations

import torch

from .timing import time_gpu

__all__ = ["METHOD", "parse_shapes", "new_doc", "softmax_case", "validated", "interleaved_gbs", "print_gbs"]

METHOD = ("same process, candidates interleaved for 3 rounds, median of the rounds; each round "
          "bench.timing.time_gpu: CUDA events, read-only sweep of 4x L2 before each call, median of 20")


def parse_shapes(text: str) -> list[tuple[int, int, str]]:
    """``"256x262144:float32,64x1048576:bfloat16"`` -> [(M, N, dtype), ...]。"""
    out = []
    for item in text.split(","):
        shape, dtype = item.split(":")
        m, n = shape.split("x")
        out.append((int(m), int(n), dtype))
    return out


def new_doc(argv: list, rounds: int, **extra) -> dict:
    """结果文件的开头：设备、命令行、轮数与方法，``rows`` 由调用者逐个形状填入。"""
    return {"device": torch.cuda.get_device_name(), **extra, "argv": list(argv), "rounds": rounds, "method": METHOD,
            "rows": []}


def softmax_case(M: int, N: int, dtype: str):
    """(x, y, float64 的参考, 比对的容差)：randn 舍入成 ``dtype``；float32 rtol 1e-5、atol 1e-9，16 位 rtol 8e-3、atol 1e-6。"""
    x = torch.randn(M, N, device="cuda").to(getattr(torch, dtype))
    tol = dict(atol=1e-9, rtol=1e-5) if dtype == "float32" else dict(atol=1e-6, rtol=8e-3)
    return x, torch.empty_like(x), torch.softmax(x.double(), 1), tol


def validated(cands: dict, y: torch.Tensor, ref: torch.Tensor, tol: dict, label: str) -> dict:
    """与参考相符的候选（``copy`` 不比对）：每个先把 ``y`` 填成 NaN 再调用一次；调用返回张量时比对它，否则比对 ``y``。"""
    checked = {}
    for name, call in cands.items():
        if name == "copy":
            checked[name] = call
            continue
        y.fill_(float("nan"))
        got = call()
        got = y if got is None else got
        torch.cuda.synchronize()
        if torch.allclose(got.double(), ref, **tol):
            checked[name] = call
        else:
            err = (got.double() - ref).abs().max().item()
            print(f"{label} {name}：与 float64 的参考不符（最大误差 {err:.3g}），不计时")
    return checked


def interleaved_gbs(checked: dict, nbytes: int, flusher, rounds: int = 3) -> dict:
    """全部候选轮流计时 ``rounds`` 轮（每轮 time_gpu：预热 3 次、20 次的中位数），每个取几轮的中位数（GB/s）。"""
    gbs = {name: [] for name in checked}
    for _ in range(rounds):
        for name, call in checked.items():
            gbs[name].append(nbytes / time_gpu([call], warmup=3, iters=20, flusher=flusher).median_ms / 1e6)
    return {k: sorted(v)[len(v) // 2] for k, v in gbs.items()}


def print_gbs(title: str, med: dict, width: int = 16) -> None:
    """按 GB/s 从高到低打印，带占拷贝的比例。"""
    print(f"== {title}：拷贝 {med['copy']:.0f} GB/s", flush=True)
    for k, v in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"   {k:{width}s} {v:7.0f} GB/s {v / med['copy']:6.1%}", flush=True)
