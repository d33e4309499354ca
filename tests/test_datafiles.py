"""页面代码块读的实测数据随包发布：wheel 里有这些 JSON，非 editable 安装之后 rl.load_data 也能读到。"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import reduction_lab as rl
from reduction_lab.datafiles import DATA_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_every_data_file_loads_and_matches_docs():
    for name in DATA_FILES:
        assert rl.load_data(name) == json.loads((ROOT / "docs" / "data" / name).read_text(encoding="utf-8"))


def test_pages_read_data_through_the_package():
    """没有页面代码块按源码树的相对路径读 docs/data（安装之后那条路径不存在）。"""
    for md in (ROOT / "docs").rglob("*.md"):
        text = md.read_text(encoding="utf-8")
        assert "parents[2]" not in text, md


def test_unknown_name():
    with pytest.raises(ValueError, match="没有随包发布的数据文件"):
        rl.data_path("../pyproject.toml")


@pytest.mark.skipif(importlib.util.find_spec("setuptools") is None,
                    reason="构建 wheel 需要 setuptools（不隔离构建时用已安装的那个），这个环境没有")
def test_wheel_contains_the_data(tmp_path):
    """构建 wheel（不装依赖、不隔离，约 3 秒），检查数据文件在包里。"""
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path)], capture_output=True, text=True)
    if proc.returncode != 0 and "No module named pip" in proc.stderr:
        pytest.skip("这个环境里没有 pip，无法构建 wheel")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(whl).namelist())
    for name in DATA_FILES:
        assert f"reduction_lab/data/{name}" in names
