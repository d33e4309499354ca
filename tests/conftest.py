"""测试的公共设置：``--backend`` 选项让内核测试只针对一种实现运行。

    pytest tests/test_kernels.py --backend cuda
"""

from __future__ import annotations

import importlib.util
import os
import sys
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


def pytest_configure(config):
    # sim 模式下 TileLang 的 C 目标经预编译头编译（reduction_lab.tilelang_kernels.cpu_pch）：实验的评分只在
    # 自己的 with 块里这样做，测试还直接编译几百个内核，所以整个测试会话都用它。只在主进程里设置一次：
    # xdist 的各个 worker 与 notebook 的内核继承环境变量 CXX
    if hasattr(config, "workerinput") or os.environ.get("CXX") or os.environ.get("CC"):
        return
    from reduction_lab import MODE
    from reduction_lab.tilelang_kernels.cpu_pch import wrapper

    path = wrapper() if MODE == "sim" else None
    if path:
        os.environ["CXX"] = path
        config._tilelang_cxx = path


def pytest_unconfigure(config):
    path = getattr(config, "_tilelang_cxx", None)
    if path and os.environ.get("CXX") == path:
        del os.environ["CXX"]


def pytest_collection_modifyitems(config, items):
    # xdist 的 loadgroup 按收集的顺序分配：一个 xdist_group 整组在同一个 worker 上运行。站点测试（严格构建与浏览器，
    # 2 核机器上 3-4 分钟）与主机扩展的构建排在最前，别的测试由另一个 worker 先跑、之后两边分担；排在最后时
    # 它们成了一个 worker 独自跑完的尾巴。组内与其余测试的先后不变（sort 是稳定的）
    def first(item):
        marker = item.get_closest_marker("xdist_group")
        return 0 if marker is not None else 1

    items.sort(key=first)


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
