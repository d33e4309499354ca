"""count_memory() 在几个线程里同时使用：每个线程只得到自己的启动，计数精确，没有误报越界。"""

from __future__ import annotations

import threading

import torch

import reduction_lab as rl
from reduction_lab.memcount import _STATE


def _worker(shape, rounds, results, errors, barrier):
    try:
        x = torch.randn(shape, device=rl.DEVICE)
        barrier.wait()
        for _ in range(rounds):
            with rl.count_memory() as rep:
                y = rl.fused_softmax(x)
            results.append((shape, rep.launches, rep.elements_loaded, rep.elements_stored,
                            bool(torch.allclose(y, torch.softmax(x, -1), atol=1e-6))))
    except BaseException as e:          # noqa: BLE001  线程里的异常交给主线程断言
        errors.append(e)


def test_two_threads_count_separately():
    results, errors = [], []
    barrier = threading.Barrier(2)
    shapes = [(3, 40), (5, 17)]
    threads = [threading.Thread(target=_worker, args=(s, 4, results, errors, barrier)) for s in shapes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(results) == 8
    for (m, n), launches, loaded, stored, ok in results:
        assert (launches, loaded, stored, ok) == (1, m * n, m * n, True)
    assert not _STATE.reports          # 全部退出后解释器恢复原状


def test_launch_from_thread_without_report_is_counted():
    """没有打开报告的线程（如 gpu 模式下 autograd 的工作线程）的启动记进打开着的报告。"""
    x = torch.randn(4, 30, device=rl.DEVICE)
    with rl.count_memory() as rep:
        t = threading.Thread(target=rl.fused_softmax, args=(x,))
        t.start()
        t.join(timeout=60)
    assert (rep.launches, rep.elements_loaded) == (1, 4 * 30)


def test_concurrent_launches_without_counting():
    """几个线程同时调用 Triton 内核（sim 模式下经解释器）：启动依次执行，结果都对，不会报
    "Did you forget to add @triton.jit"。"""
    errors, wrong = [], []
    barrier = threading.Barrier(3)

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(200, 50, generator=g).to(rl.DEVICE)
            barrier.wait()
            for _ in range(2):
                if not torch.allclose(rl.fused_softmax(x), torch.softmax(x, -1), atol=1e-6):
                    wrong.append(seed)
        except BaseException as e:      # noqa: BLE001
            errors.append(e)

    rl.fused_softmax(torch.randn(200, 50, device=rl.DEVICE))   # gpu 模式：先在主线程里编译好
    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not wrong, (errors, wrong)
