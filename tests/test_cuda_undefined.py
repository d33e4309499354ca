"""屏障放进分支是未定义行为，不是必然的死锁（页面：docs/cuda/tree-reduction.md「屏障放进分支：未定义行为」）。

sim 模式：模拟器在任何机器上都报告 BarrierDivergenceError，报告里说的是「未定义行为」。
gpu 模式（H200）：页面说 tree_bad_sync 在 H200 上反复运行既没有挂起、和也对。这里在子进程里
运行 200 次（挂起时子进程超时，测试失败而不是整个测试会话卡住）。
"""

import subprocess
import sys
import textwrap

import pytest
import torch

import reduction_lab as rl
from reduction_lab import simt
from reduction_lab.cuda_kernels import launch


def test_simulator_reports_barrier_divergence_as_undefined():
    x, out = torch.ones(64), torch.zeros(1)
    with pytest.raises(simt.BarrierDivergenceError) as e:
        launch("tree_demo.cu", "tree_bad_sync", grid=1, block=64, args=(x, out), shared_bytes=64 * 4, mode="sim")
    assert "未定义行为" in str(e.value) and "undefined behaviour" in str(e.value)


def _is_h200():
    return rl.MODE == "gpu" and "H200" in torch.cuda.get_device_name()


@pytest.mark.skipif(not _is_h200(), reason="页面所说的是 H200 上的观察")
def test_tree_bad_sync_does_not_hang_on_the_h200():
    code = textwrap.dedent("""
        import torch
        from reduction_lab.cuda_kernels import launch
        x = torch.ones(4 * 256, device="cuda")
        out = torch.zeros(4, device="cuda")
        sums = set()
        for _ in range(200):
            out.zero_()
            launch("tree_demo.cu", "tree_bad_sync", grid=4, block=256, args=(x, out), shared_bytes=256 * 4)
            torch.cuda.synchronize()
            sums.add(tuple(out.tolist()))
        print(sorted(sums))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[(256.0, 256.0, 256.0, 256.0)]", r.stdout
