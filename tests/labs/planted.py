"""实验测试共用：参考解的副本，以及在副本里植入错误（tests/labs 下的测试都从这里取）。"""

from __future__ import annotations

import shutil
from pathlib import Path

from reduction_lab import labs

SOLUTIONS = Path(__file__).resolve().parent / "solutions"


def copy_solution(name, tmp_path) -> Path:
    """``lab start`` 到 ``tmp_path / name``，再换成参考解：学习者的目录里是写完的实验。"""
    dest = tmp_path / name
    labs.start(name, dest)
    for f in (SOLUTIONS / name).iterdir():
        shutil.copyfile(f, dest / f.name)
    return dest


def edited_solution(name, tmp_path, edits, label) -> tuple[Path, str]:
    """参考解的副本，学习者文件按 ``edits``（[(原文, 改成)]，各替换第一处）改过；返回 (目录, 改过的文本)。"""
    dest = copy_solution(name, tmp_path)
    f = dest / labs.get(name).files[0]
    text = f.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, label
        text = text.replace(old, new, 1)
    f.write_text(text, encoding="utf-8")
    return dest, text
