"""模式选择：默认、强制 sim、强制 gpu（无设备时报错）、triton 导入顺序。"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def _run(code: str, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("REDUCTION_LAB_MODE", "TRITON_INTERPRET")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


def test_forced_sim_sets_interpreter_before_triton():
    r = _run("import os, reduction_lab as rl, triton.language as tl\n"
             "from triton.runtime.interpreter import InterpretedFunction\n"
             "print(rl.MODE, rl.DEVICE, os.environ['TRITON_INTERPRET'], isinstance(tl.standard.max, InterpretedFunction))",
             REDUCTION_LAB_MODE="sim")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["sim", "cpu", "1", "True"]


def test_default_mode_follows_the_device():
    r = _run("import reduction_lab as rl; print(rl.MODE)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("gpu" if torch.cuda.is_available() else "sim")


@pytest.mark.skipif(torch.cuda.is_available(), reason="只在没有 GPU 的机器上才能验证这个错误")
def test_forced_gpu_without_device_is_a_clear_error():
    r = _run("import reduction_lab", REDUCTION_LAB_MODE="gpu")
    assert r.returncode != 0
    assert "ModeError" in r.stderr and "CUDA" in r.stderr


def test_invalid_mode_value():
    r = _run("import reduction_lab", REDUCTION_LAB_MODE="tpu")
    assert r.returncode != 0 and "REDUCTION_LAB_MODE" in r.stderr


def test_triton_imported_first_in_sim_mode_is_an_error():
    r = _run("import triton\nimport reduction_lab", REDUCTION_LAB_MODE="sim")
    assert r.returncode != 0
    assert "TRITON_INTERPRET=1" in r.stderr and "import reduction_lab" in r.stderr


def test_triton_imported_first_with_interpreter_env_is_fine():
    r = _run("import triton\nimport reduction_lab as rl\nprint(rl.MODE)", REDUCTION_LAB_MODE="sim", TRITON_INTERPRET="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "sim"
