"""从 docs/labs/*.py（jupytext percent 格式，评审读的文本）生成配对的 .ipynb，并用参考解执行一遍，
把输出存进 .ipynb（网站由 mkdocs-jupyter 渲染这些输出）。

    .venv/bin/python scripts/build_lab_notebooks.py            # 全部
    .venv/bin/python scripts/build_lab_notebooks.py reduce-sum # 一个

执行时的工作目录是一个临时目录，里面 ./labs/NAME 放着 tests/labs/solutions/NAME 的参考解，
所以页面上显示的是完成之后评分的样子。tests/labs/test_notebooks.py 用同样的方法执行并检查配对。
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "labs"))

from notebook_run import execute_notebook, notebook_sources  # noqa: E402


def _stable(nb):
    """重新生成时不变的部分：单元的编号按顺序给（nbformat 默认随机），去掉执行的时间戳。"""
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
        cell.get("metadata", {}).pop("execution", None)
        outs = []
        for o in cell.get("outputs", []):           # 同一个流接连的几段输出合成一段（分段随执行的快慢而变）
            if outs and o.get("output_type") == "stream" and outs[-1].get("output_type") == "stream" \
                    and outs[-1].get("name") == o.get("name"):
                outs[-1]["text"] += o["text"]
            else:
                outs.append(o)
        if "outputs" in cell:
            cell["outputs"] = outs
    return nb


def main(names: list[str]) -> int:
    import nbformat

    for py in notebook_sources():
        if names and py.stem not in names:
            continue
        nb = _stable(execute_notebook(py))
        out = py.with_suffix(".ipynb")
        nbformat.write(nb, out)
        print(f"写出 {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
