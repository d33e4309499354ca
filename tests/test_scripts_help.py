"""扫描脚本在没有 GPU 的机器上至少能解析参数：``--help`` 在导入与建立参数表时就会暴露缺失的名字
（例如默认值里引用了未定义的常量），不必等到 GPU 上才发现。"""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "scripts").glob("tune_*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_tune_script_parses_its_arguments(name):
    path = Path(__file__).resolve().parents[1] / "scripts" / name
    r = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout
