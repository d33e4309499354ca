"""评分的进度：每个用例开始之前回调一次（编号、总数、用例），--case 跳过的用例不回调；命令行只在终端里显示
一行进度（回车改写，结束时擦掉），管道里的输出与以前一样。"""

from __future__ import annotations

import io
import subprocess
import sys

from reduction_lab import labs
from reduction_lab.labs import cli as lab_cli
from reduction_lab.textcols import columns

from planted import copy_solution


def test_progress_is_called_before_each_case_that_runs(tmp_path):
    dest = copy_solution("full-sum-cuda", tmp_path)
    seen = []
    result = labs.check("full-sum-cuda", dest, bench=False, progress=lambda i, n, c: seen.append((i, n, c.label)))
    n = len(result.results)
    assert [i for i, _, _ in seen] == list(range(1, n + 1)) and {m for _, m, _ in seen} == {n}
    assert [lbl for *_, lbl in seen] == [r.case.label for r in result.results]
    seen.clear()
    labs.check("full-sum-cuda", dest, bench=False, cases=[2, 5], progress=lambda i, n, c: seen.append(i))
    assert seen == [2, 5]                            # 没有运行的用例不显示


def test_terminal_progress_line_is_rewritten_and_cleared():
    out = io.StringIO()
    p = lab_cli._Progress(out)
    case = type("C", (), {"name": "几个线程块", "label": "1000"})()
    p(1, 18, case)
    first = p.width
    assert first == columns("  用例 1/18：几个线程块（1000）……")
    assert columns("几个（1）") == 2 * 4 + 1     # 汉字与全角括号占两列
    short = type("C", (), {"name": "一", "label": "1"})()
    p(2, 18, short)
    p.clear()
    text = out.getvalue()
    assert text.startswith("\r  用例 1/18：几个线程块（1000）……") and "\r  用例 2/18：一（1）……" in text
    second = text.split("\r")[2]                     # 第二次改写：短的一行补空格盖住第一行多出的列
    assert columns(second) == first
    assert text.endswith("\r") and p.width == 0      # 擦掉之后光标回到行首，成绩表从干净的一行开始


def test_no_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    dest = copy_solution("full-sum-cuda", tmp_path)
    r = subprocess.run([sys.executable, "-m", "reduction_lab.cli", "lab", "check", "full-sum-cuda", str(dest)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "用例 1/" not in r.stderr and "\r" not in r.stderr
