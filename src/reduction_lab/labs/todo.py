"""骨架里的 ``TODO(n)``：找出学习者还没动过的步骤，并指出文件和行。

骨架的第 n 步从以 ``// TODO(n)`` 或 ``# TODO(n)`` 开头的注释行开始，到下一个 ``TODO(`` 或 ``TODO 结束`` 为止。
学习者文件里同一个 ``TODO(n)`` 之后的内容与骨架逐行相同（忽略空白与空行），就算没动过；
删掉了 ``TODO(n)`` 这一行，就算动过。没动过的一步后面若有动过的步骤（``later_edited``），
这一步的代码可能写在了别的 TODO 下面：评分只把它当作提醒，不当作没完成。
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MARK = re.compile(r"^\s*(?://|#)\s*TODO\((\d+)\)")
_END = "TODO 结束"


@dataclass(frozen=True)
class Todo:
    number: int
    line: int          # 学习者文件里 TODO(n) 所在的行（从 1 起）
    text: str          # 这一行（去掉首尾空白）
    later_edited: bool = False   # 同一文件里编号更大的某一步动过了


def _regions(lines: list[str]) -> dict[int, tuple[int, list[str]]]:
    marks = [(i, int(m.group(1))) for i, ln in enumerate(lines) if (m := _MARK.search(ln))]
    ends = [i for i, ln in enumerate(lines) if _END in ln]
    out = {}
    for k, (i, n) in enumerate(marks):
        stop = marks[k + 1][0] if k + 1 < len(marks) else len(lines)
        stop = min([stop] + [e for e in ends if e > i])
        body = [ln.strip() for ln in lines[i:stop] if ln.strip()]
        out.setdefault(n, (i, body))
    return out


def untouched(skeleton: str, learner: str) -> list[Todo]:
    """学习者文件里原样保留的 TODO 步骤，按编号排序。"""
    sk = _regions(skeleton.splitlines())
    lines = learner.splitlines()
    mine = _regions(lines)
    edited = {n for n, (_, body) in sk.items() if n not in mine or mine[n][1] != body}
    out = []
    for n, (i, body) in sorted(mine.items()):
        if n in sk and n not in edited:
            out.append(Todo(n, i + 1, lines[i].strip(), later_edited=any(e > n for e in edited)))
    return out


def count(skeleton: str) -> int:
    return len(_regions(skeleton.splitlines()))
