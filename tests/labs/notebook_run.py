"""执行实验 notebook 的公共部分（测试与 scripts/build_lab_notebooks.py 共用）。"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS_LABS = ROOT / "docs" / "labs"
SOLUTIONS = Path(__file__).resolve().parent / "solutions"


def notebook_sources() -> list[Path]:
    return sorted(DOCS_LABS.glob("*.py"))


def prepare_solutions(workdir: Path) -> None:
    """workdir/labs/NAME：先复制骨架（README 等），再用参考解覆盖。"""
    from reduction_lab import labs

    for name in labs.LABS:
        dest = labs.start(name, workdir / "labs" / name)
        for f in (SOLUTIONS / name).iterdir():
            shutil.copyfile(f, dest / f.name)


def execute_notebook(py: Path, timeout: int = 600):
    """jupytext 读入 .py，在装好参考解的临时目录里用 nbclient 从头到尾执行；出错的单元抛出异常。"""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(py)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare_solutions(work)
        env_backup = os.environ.get("REDUCTION_LAB_LABS")
        os.environ.pop("REDUCTION_LAB_LABS", None)
        try:
            for attempt in range(3):
                client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                                        resources={"metadata": {"path": str(work)}})
                try:
                    client.execute()
                    break
                except RuntimeError as e:       # 内核进程没能启动（几个 notebook 同时启动时偶尔发生）：重新启动
                    if "before replying to kernel_info" not in str(e) or attempt == 2:
                        raise
        finally:
            if env_backup is not None:
                os.environ["REDUCTION_LAB_LABS"] = env_backup
    return nb
