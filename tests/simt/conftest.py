"""tests/simt：CUDA C 模拟器（reduction_lab.simt）的测试。"""

import pytest


@pytest.fixture(scope="module")
def coverage_script(load_script):
    """scripts/simt_coverage.py 作为模块导入。"""
    return load_script("simt_coverage")
