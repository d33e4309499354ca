"""测试夹具（不是真实现）：给分进程测量的测试用的几个假对照，经环境变量
REDUCTION_LAB_BENCH_EXTRA=bench_fake_peers 加进softmax套件。它们在CPU/GPU上用torch真的算出结果，
计时也是真的计时（只是测的是torch）：

* ``fake_ok``：torch.softmax，验证通过；
* ``fake_bad``：结果加了1e-3，验证不符；
* ``fake_crash``：准备时让子进程以退出码17直接退出；
* ``fake_slow``：准备时睡很久，用来测子进程的时限。
"""

from __future__ import annotations

import os
import time

import torch

from reduction_lab.bench.impls import ALL_DTYPES, Impl


def _ok(x):
    return lambda: torch.softmax(x, dim=-1)


def _bad(x):
    return lambda: torch.softmax(x, dim=-1) + 1e-3


def _crash(x):
    os._exit(17)


def _slow(x):
    time.sleep(600)
    return _ok(x)


def bench_impls(suite: str) -> list[Impl]:
    if suite != "softmax":
        return []
    return [Impl("fake_ok", "fake ok", "peer", _ok, dtypes=ALL_DTYPES),
            Impl("fake_bad", "fake bad", "peer", _bad, dtypes=ALL_DTYPES),
            Impl("fake_crash", "fake crash", "peer", _crash),
            Impl("fake_slow", "fake slow", "peer", _slow)]
