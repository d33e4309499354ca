"""每个 Triton 内核都能以编译模式编译成 sm_90 机器码（不需要 GPU），
这样 CPU 上的 CI 也能发现只在编译模式下出现的错误。"""

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_all_triton_kernels_compile_for_sm90():
    script = Path(__file__).with_name("triton_compile_check.py")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok ") == 16, r.stdout


@pytest.mark.slow
def test_row_sum_ptx_counts_match_the_committed_record():
    # 页面 docs/triton/tiling.md 打印的指令条数：用装好的 Triton 重新编译，与 JSON 里同一版本的记录逐项相同
    script = Path(__file__).resolve().parents[1] / "scripts" / "triton_row_sum_ptx.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "与 JSON 的记录相同" in r.stdout, r.stdout
