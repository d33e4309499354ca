"""实验：学习者在骨架文件里完成 TODO，一条命令评分（课程页面：docs/labs/）。

    reduction-lab lab list                       # 所有实验
    reduction-lab lab start reduce-sum-cuda      # 把骨架复制到 ./labs/reduce-sum-cuda
    reduction-lab lab check reduce-sum-cuda      # 评分：用例表、诊断，gpu 模式下计时
    pytest --lab reduce-sum-cuda --backend cuda  # 同样的用例，作为 pytest 测试

Python 里：``labs.start(name, dir)``、``labs.check(name, dir)``（返回 :class:`GradeResult`，
``print`` 它就是报告）。每个实验在 :mod:`.registry` 登记，用例在 :mod:`.cases`，
评分的公共部分在 :mod:`.grading` 与 :mod:`.core`。
"""

from __future__ import annotations

from pathlib import Path

from .core import SKELETON_DIR, default_dir
from .grading import Case, CaseResult, GradeResult, Hint, LabError
from .registry import LABS

__all__ = ["LABS", "get", "list_labs", "start", "check", "op", "skeleton_path", "default_dir",
           "Case", "CaseResult", "GradeResult", "Hint", "LabError", "SKELETON_DIR"]


def get(name: str):
    if name not in LABS:
        raise LabError(f"没有名为 {name!r} 的实验；有：{', '.join(LABS)} (no lab named {name!r})")
    return LABS[name]


def list_labs() -> list[tuple[str, str]]:
    """[(名字, 标题), ...]，按讲义的顺序。"""
    return [(lab.name, lab.title) for lab in LABS.values()]


def skeleton_path(name: str, file: str | None = None) -> Path:
    """实验骨架文件的路径（``file`` 默认是要先打开的那个）。"""
    lab = get(name)
    return lab.skeleton_dir() / (file or lab.open_first)


def start(name: str, directory=None, overwrite: bool = False) -> Path:
    """把骨架复制到 ``directory``（默认 ``./labs/NAME``，环境变量 ``REDUCTION_LAB_LABS`` 改根目录）。"""
    from . import core

    dest, _ = core.start(get(name), directory, overwrite)
    return dest


def check(name: str, directory=None, backend: str | None = None, bench: bool | None = None,
          cases=None, progress=None) -> GradeResult:
    """评分 ``directory``（默认 ``./labs/NAME``）里的代码，返回 :class:`GradeResult`。
    ``cases``：只运行这些编号（成绩表的 # 列）的用例，例如 ``cases=[12]`` 反复调试一个没通过的用例。
    ``progress(i, n, case)``：每个用例开始之前调用（命令行在终端里用它显示进度）。"""
    from . import core

    return core.check(get(name), directory, backend, bench, cases, progress)


def op(name: str, directory=None):
    """加载 ``directory`` 里学习者的代码，返回可以直接调用的算子（例如 ``reduce_sum(x)``），
    供对比与计时。代码有错时抛出原来的异常（评分请用 :func:`check`）。"""
    from .. import runtime
    from .core import _learner_paths

    lab = get(name)
    return lab.load(_learner_paths(lab, directory), runtime.MODE)["op"]
