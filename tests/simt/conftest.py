"""tests/simt：CUDA C 模拟器（reduction_lab.simt）的测试。"""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def coverage_script():
    """scripts/simt_coverage.py 作为模块导入（它不在包里）。"""
    spec = importlib.util.spec_from_file_location("simt_coverage", ROOT / "scripts" / "simt_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
