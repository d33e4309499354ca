"""扫描脚本在没有 GPU 的机器上至少能解析参数：``--help`` 在导入与建立参数表时就会暴露缺失的名字
（例如默认值里引用了未定义的常量），不必等到 GPU 上才发现。

所有脚本在同一个子进程里依次以 ``__main__`` 运行（``runpy.run_path``，各自的 ``sys.argv``），torch 与 triton
只导入一次；每个脚本的退出码与输出分别记下，各自一个测试。"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("tune_*.py"))

_RUNNER = r"""
import contextlib, io, json, runpy, sys, traceback
out = {}
for path in sys.argv[1:]:
    buf, err = io.StringIO(), io.StringIO()
    code = 0
    saved = sys.argv, list(sys.path)
    sys.argv = [path, "--help"]
    sys.path.insert(0, path.rsplit("/", 1)[0])
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        code, err = 1, io.StringIO(traceback.format_exc())
    finally:
        sys.argv, sys.path[:] = saved
    out[path.rsplit("/", 1)[1]] = {"code": code, "stdout": buf.getvalue(), "stderr": err.getvalue()[-2000:]}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def helps():
    r = subprocess.run([sys.executable, "-c", _RUNNER, *[str(ROOT / "scripts" / n) for n in SCRIPTS]],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", SCRIPTS)
def test_tune_script_parses_its_arguments(name, helps):
    r = helps[name]
    assert r["code"] == 0, r["stderr"]
    assert "usage:" in r["stdout"]
