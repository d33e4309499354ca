"""重新生成模拟器页面上「支持的构造」与「覆盖率」两节的期望输出。

    python scripts/simt_page_tables.py [docs/cuda/simulator.md]

在这两节里，逐个运行 ```python 代码块（sim 模式），把它打印的内容写进紧跟其后的
``<!--pytest-codeblocks:expected-output-->`` 代码块。登记表里某一项的状态变了（前端支持了新的写法），
或者 docs/data/simt_coverage.json 重新生成之后，运行一次即可；页面的其他部分不动。
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("REDUCTION_LAB_MODE", "sim")

SECTIONS = ("## 支持的构造", "## 覆盖率")
MARK = "<!--pytest-codeblocks:expected-output-->"


def _section_bounds(text, title):
    start = text.find(f"\n{title}\n")
    if start < 0:
        raise SystemExit(f"页面里没有「{title}」一节 (section {title!r} not found)")
    nxt = re.search(r"\n## ", text[start + 1:])
    return start, (start + 1 + nxt.start()) if nxt else len(text)


def update(text):
    for title in SECTIONS:
        a, b = _section_bounds(text, title)
        part = text[a:b]
        out, pos = [], 0
        for m in re.finditer(r"```python\n(.*?)```\n" + re.escape(MARK) + r"\n```\n(.*?)```", part, flags=re.S):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(m.group(1), f"<{title}>", "exec"), {"__name__": "__page__"})
            out.append(part[pos:m.start(2)] + buf.getvalue())
            pos = m.end(2)
        out.append(part[pos:])
        text = text[:a] + "".join(out) + text[b:]
    return text


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    page = Path(argv[0] if argv else Path(__file__).resolve().parents[1] / "docs" / "cuda" / "simulator.md")
    old = page.read_text(encoding="utf-8")
    new = update(old)
    if new != old:
        page.write_text(new, encoding="utf-8")
        print(f"已更新 {page}")
    else:
        print(f"{page} 不需要更新")
    return 0


if __name__ == "__main__":
    sys.exit(main())
