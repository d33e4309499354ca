"""终端表格的列宽：汉字与全角标点占两列，其余字符占一列。成绩表、计数表、误差表共用。"""

from __future__ import annotations

import unicodedata


def columns(text: str) -> int:
    """text 在终端里占的列数。"""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int, right: bool = False) -> str:
    """补空格到 width 列；right 为真时右对齐。"""
    fill = " " * max(width - columns(text), 0)
    return fill + text if right else text + fill


def table(rows, right=()) -> str:
    """对齐的多行文本：各列宽取该列最宽的一格，列之间两个空格；right 里的列号右对齐。"""
    rows = [list(r) for r in rows]
    if not rows:
        return ""
    widths = [max(columns(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(pad(c, w, i in right) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)
