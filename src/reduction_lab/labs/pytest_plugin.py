"""pytest 插件（随包安装，pytest 自动加载）：``--backend`` 与 ``--lab``。

    pytest --lab reduce-sum-cuda --backend cuda          # 评分 ./labs/reduce-sum-cuda
    pytest --lab softmax-triton --lab-dir my/softmax     # 评分别的目录

``--lab`` 且没有给出测试文件时，只收集实验的用例：每个用例一个测试，失败时的信息就是评分的诊断。
``--backend`` 也供本仓库的内核测试使用（tests/conftest.py）。这个模块在 pytest 启动时导入，
所以只在需要时才导入 torch 与本包的其余部分。
"""

from __future__ import annotations

from pathlib import Path

#: 与 reduction_lab.api.IMPLEMENTATIONS 相同（测试核对），另加课程原来的别名 nvidia = cuda
BACKEND_CHOICES = ("torch", "triton", "cuda", "tilelang", "nvidia")

_CASES_MODULE = Path(__file__).with_name("lab_cases.py")


def pytest_addoption(parser):
    group = parser.getgroup("reduction-lab")
    group.addoption("--backend", action="store", default=None, choices=BACKEND_CHOICES,
                    help="只测这一种实现（nvidia 等同 cuda）；与 --lab 一起用时必须是实验评的后端")
    group.addoption("--lab", action="store", default=None, metavar="NAME",
                    help="评分实验 NAME（reduction-lab lab list 列出全部）")
    group.addoption("--lab-dir", action="store", default=None, metavar="DIR",
                    help="实验代码所在目录（默认 ./labs/NAME）")


def pytest_configure(config):
    if config.getoption("--lab") is None:
        return
    from _pytest.config import Config

    # 命令行上没有给测试文件时，只收集实验的用例
    if getattr(config, "args_source", None) != Config.ArgsSource.ARGS:
        config.args = [str(_CASES_MODULE)]


def pytest_generate_tests(metafunc):
    if "lab_case" not in metafunc.fixturenames:
        return
    name = metafunc.config.getoption("--lab")
    if name is None:
        import pytest

        metafunc.parametrize("lab_case", [pytest.param(None, marks=pytest.mark.skip(
            reason="实验的用例只在 pytest --lab NAME 时运行"))])
        return
    from . import get
    from .. import runtime

    lab = get(name)
    cases = lab.cases(runtime.MODE)
    ids = [f"{i:02d}-{c.kind}-{c.bad or c.label}" for i, c in enumerate(cases, 1)]   # ASCII：pytest 会转义汉字
    metafunc.parametrize("lab_case", list(range(1, len(cases) + 1)), ids=ids)
