"""实验 notebook：docs/labs/*.py（jupytext percent）与 .ipynb 配对，用参考解从头到尾执行不出错，
课程要求的各个部分都在，站内链接指向存在的页面。"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from notebook_run import DOCS_LABS, ROOT, execute_notebook, notebook_sources

SOURCES = notebook_sources()
pytestmark = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("nbclient") is None
    or __import__("importlib.util").util.find_spec("jupytext") is None,
    reason="读写与执行 notebook 需要 jupytext、nbclient 与 ipykernel（pip install -e \".[docs]\"）")
# 课程原来的实验的结构：每个 notebook 都要有这些小节
SECTIONS = ["学习目标", "概念", "参考实现", "骨架", "陷阱", "验证", "对比", "扩展", "检查清单"]


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_every_lab_has_a_notebook():
    from reduction_lab import labs

    names = {p.stem for p in SOURCES}
    assert names == {Path(lab.notebook).stem for lab in labs.LABS.values()}
    for lab in labs.LABS.values():
        assert (ROOT / "docs" / lab.notebook).is_file()


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_paired_and_structured(py):
    import jupytext
    import nbformat

    text_nb = jupytext.read(py)
    ipynb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    assert [(c.cell_type, c.source) for c in text_nb.cells] == [(c.cell_type, c.source) for c in ipynb.cells], \
        f"{py.name} 与 {py.with_suffix('.ipynb').name} 不一致：运行 scripts/build_lab_notebooks.py {py.stem}"
    md = _markdown(text_nb)
    heads = re.findall(r"^##\s+(.+)$", md, re.M)
    for s in SECTIONS:
        assert any(s in h for h in heads), f"{py.name} 缺少「{s}」一节"
    # 存好的输出来自执行（网站渲染它们）：每个代码单元都执行过，没有错误输出
    for c in ipynb.cells:
        if c.cell_type == "code":
            assert c.execution_count is not None, f"{py.name} 有没执行过的单元"
            assert all(o.output_type != "error" for o in c.outputs)
    # 骨架从包里嵌入，不是贴进来的
    from reduction_lab import labs

    cells = "\n".join(c.source for c in text_nb.cells)
    assert "labs.skeleton_path(" in cells
    for lab in labs.LABS.values():
        if Path(lab.notebook).stem == py.stem:
            skeleton = lab.skeleton_text(lab.files[0]).splitlines()
            todo_lines = [ln.strip() for ln in skeleton if "TODO(1)" in ln and ln.strip().startswith(("//", "#"))]
            assert todo_lines and all(t not in cells for t in todo_lines), "骨架被贴进了 notebook"


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_links_resolve(py):
    md = _markdown(__import__("jupytext").read(py))
    links = re.findall(r"\]\(([^)]+)\)", md)
    assert links
    for link in links:
        m = re.fullmatch(r"\.\./\.\./([\w-]+)/(?:([\w-]+)/)?(?:#([\w-]+))?", link) \
            or re.fullmatch(r"\.\./([\w-]+)/()()", link)
        assert m, f"{py.name} 的链接 {link} 不是站内页面的地址（../../目录/页面/[#小节] 或 ../实验/）"
        if link.startswith("../../"):
            folder, page = m.group(1), m.group(2) or "index"
            # ../../numerics/ 是 docs/ 下的一页（numerics.md），不是目录
            md_page = ROOT / "docs" / folder / f"{page}.md"
            if not md_page.is_file() and m.group(2) is None:
                md_page = ROOT / "docs" / f"{folder}.md"
            assert md_page.is_file(), link
            if m.group(3):                       # 小节的锚点：页面里要有 {#锚点}
                assert "{#" + m.group(3) + "}" in md_page.read_text(encoding="utf-8"), link
        else:
            assert (DOCS_LABS / f"{m.group(1)}.py").is_file(), link


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.stem)
def test_executes_with_the_solutions(py):
    nb = execute_notebook(py)

    def text(cells):
        return "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for c in cells for o in c.outputs)

    code = [c for c in nb.cells if c.cell_type == "code"]
    broken = [c for c in code if "broken-copy" in c.metadata.get("tags", [])]   # 故意改坏的副本：演示诊断
    outputs = text([c for c in code if c not in broken])
    assert "结论：全部" in outputs                 # 评分单元：参考解全部通过
    assert "TqdmWarning" not in outputs          # tilelang 导入 tqdm.auto 时的小部件警告不进页面
    assert "还没有完成" not in outputs
    for c in broken:
        assert "还没有完成" in text([c]), c.source
