"""生成的表格把JSON里的文字按Markdown转义：用本站的Markdown扩展渲染，看到的与JSON里的字相同。"""

from __future__ import annotations

import html
import re

import pytest

from reduction_lab.bench.report import md_code, md_text

markdown = pytest.importorskip("markdown", reason="需要文档依赖：pip install -e '.[docs]'")
pytest.importorskip("pymdownx", reason="需要文档依赖 pymdown-extensions：pip install -e '.[docs]'")

CELLS = [
    "index = 2*s*tid",
    "tid % (2*s) == 0",
    "每块处理2*BLOCK_SIZE个元素",
    "s <= 32时不再需要__syncthreads()",
    "a|b",
    "<tid> & x",
    "花 $5 与 $6",
    "[x](y)",
    "a\\b",
    "`x` 与 ``y``",
]


def _render_cells(cells: list[str]) -> list[tuple[str, str]]:
    md = markdown.Markdown(extensions=["tables", "pymdownx.arithmatex", "pymdownx.superfences",
                                       "pymdownx.inlinehilite", "attr_list", "md_in_html"],
                           extension_configs={"pymdownx.arithmatex": {"generic": True}})
    src = "| 文字 | 代码 | 末列 |\n|---|---|---|\n" + "\n".join(
        f"| {md_text(c)} | {md_code(c)} | 末 |" for c in cells)
    out = md.convert(src)
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>末</td>\s*</tr>", out, re.S)
    assert len(rows) == len(cells), f"表格被拆坏了：\n{src}\n{out}"
    return rows


@pytest.mark.parametrize("cell", CELLS)
def test_cells_render_literally(cell):
    (text_html, code_html), = _render_cells([cell])
    assert "<em>" not in text_html and "<strong>" not in text_html and "<a " not in text_html, text_html
    assert html.unescape(text_html) == cell
    assert re.fullmatch(r"<code>(.*)</code>", code_html, re.S), code_html
    assert html.unescape(code_html[len("<code>"):-len("</code>")]) == cell


def test_columns_from_lines_name_each_run():
    """一张表的列来自几次运行时（columns_from），表下方每次运行一行，列出它的列。"""
    from reduction_lab.bench.report import _skipped_lines

    rec = {"shapes": [], "columns_from": {"triton,cuda": "运行甲", "quack": "运行乙"}}
    lines = _skipped_lines(rec)
    assert lines == [f"- {md_code('triton')}、{md_code('cuda')}这几列来自运行甲", f"- {md_code('quack')}这一列来自运行乙"]


def test_terminal_colour_codes_are_dropped():
    # CuTe DSL 的异常信息带着终端颜色（ESC [91m …）：页面上只留文字
    err = "CUDADialectError: \x1b[91m\x1b[1merror[X]:\x1b[0m launch failed \x1b[92msuggestion:\x1b[0m a<b\x07"
    assert md_text(err) == r"CUDADialectError: error\[X\]: launch failed suggestion: a&lt;b"
    assert md_code("x\x1b[0m = 1") == "`x = 1`"
    assert "\x1b" not in md_text("\x1b[38;5;196mred\x1b[0m") and md_text("\x1b[38;5;196mred\x1b[0m") == "red"
