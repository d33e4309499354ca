"""测试的公共设置：``--backend`` 选项让内核测试只针对一种实现运行。

    pytest tests/test_kernels.py --backend cuda
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import reduction_lab  # noqa: F401  必须先于 triton 导入（sim 模式要打开解释器）
from reduction_lab.api import IMPLEMENTATIONS

# 每种实现需要的第三方模块；缺了就跳过并说明原因
_REQUIRES = {"tilelang": "tilelang", "cuda": "pycparser"}


# --backend 由随包安装的 pytest 插件定义（reduction_lab/labs/pytest_plugin.py），这里只使用它
_ALIASES = {"nvidia": "cuda"}


def _available(backend: str):
    mod = _REQUIRES.get(backend)
    if mod and importlib.util.find_spec(mod) is None:
        return f"backend {backend!r} 需要 {mod}，当前环境没有安装"
    return None


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--backend")
        chosen = _ALIASES.get(chosen, chosen)
        names = [chosen] if chosen else list(IMPLEMENTATIONS)   # auto 另有测试（test_auto_backend.py）
        params = []
        for name in names:
            reason = _available(name)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(name, id=name, marks=marks))
        metafunc.parametrize("backend", params)


def _tilelang_cpu_pch(root: Path) -> str | None:
    """sim 模式下 TileLang 的 C 目标每个内核调用一次 ``g++ -std=c++17 -fPIC -shared``，生成的源码开头包含
    ``tl_templates/cpp/common.h``（预处理后约 7 万行），一次编译约 0.9 s，几乎都花在这个头文件上；测试要编译
    几百个内核。这里把它用同样的选项预编译一次（g++ 的预编译头），再让 TileLang 经一个 ``g++`` 包装编译：
    包装在最前面加上 ``-I<预编译头的目录>``，g++ 在每个目录里先找 ``common.h.gch``，选项不符时自动忽略它、
    照常读头文件。编出的代码与不用预编译头相同，一次编译约 0.2 s。返回包装所在的目录（没有用上时 None）。"""
    from reduction_lab import MODE

    spec = importlib.util.find_spec("tilelang")
    gxx = shutil.which("g++")
    if MODE != "sim" or spec is None or gxx is None or os.environ.get("CXX") or os.environ.get("CC"):
        return None
    header = Path(spec.submodule_search_locations[0]) / "src" / "tl_templates" / "cpp" / "common.h"
    if not header.is_file():
        return None
    pch = root / "include" / "tl_templates" / "cpp"
    pch.mkdir(parents=True)
    r = subprocess.run([gxx, "-std=c++17", "-fPIC", "-x", "c++-header", str(header), "-o", str(pch / "common.h.gch")],
                       capture_output=True)
    if r.returncode != 0:
        return None
    (root / "bin").mkdir()
    wrapper = root / "bin" / "g++"
    wrapper.write_text(f'#!/bin/sh\nexec "{gxx}" -I"{root / "include"}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def pytest_configure(config):
    # 只在主进程里做一次：xdist 的各个 worker 与 notebook 的内核继承环境变量 CXX
    if hasattr(config, "workerinput"):
        return
    root = Path(tempfile.mkdtemp(prefix="rl-tilelang-pch-"))
    config._tilelang_pch_dir = root
    wrapper = _tilelang_cpu_pch(root)
    if wrapper:
        os.environ["CXX"] = wrapper


def pytest_unconfigure(config):
    root = getattr(config, "_tilelang_pch_dir", None)
    if root is not None:
        if os.environ.get("CXX", "").startswith(str(root)):
            del os.environ["CXX"]
        shutil.rmtree(root, ignore_errors=True)


_SCRIPTS: dict = {}


@pytest.fixture(scope="session")
def load_script():
    """把 scripts/NAME.py 作为模块导入（它们不在包里）；同一个脚本只导入一次。"""
    root = Path(__file__).resolve().parents[1]

    def load(name: str):
        if str(root / "scripts") not in sys.path:       # 脚本之间共用的 scripts/_*.py
            sys.path.insert(0, str(root / "scripts"))
        if name not in _SCRIPTS:
            spec = importlib.util.spec_from_file_location(name, root / "scripts" / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _SCRIPTS[name] = mod
        return _SCRIPTS[name]

    return load


@pytest.fixture
def no_simt_front_end(monkeypatch):
    """模拟一台没有装 libclang 的机器：导入模拟器的 C++ 前端时报 ImportError，解析缓存清空。"""
    import sys

    import reduction_lab.simt as simt_pkg
    from reduction_lab.simt import frontend

    monkeypatch.setitem(sys.modules, "reduction_lab.simt.clang_frontend", None)
    monkeypatch.delattr(simt_pkg, "clang_frontend", raising=False)
    monkeypatch.setattr(frontend, "_CACHE", type(frontend._CACHE)())
