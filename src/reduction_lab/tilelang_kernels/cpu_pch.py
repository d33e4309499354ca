"""sim 模式下 TileLang 的 C 目标编译得快一些：预编译的 ``tl_templates/cpp/common.h``。

TileLang 给 C 目标生成的每份源码都以 ``#include <tl_templates/cpp/common.h>`` 开头（预处理后约 7 万行，主要是
``half.hpp`` 与 C++ 标准库），再用 ``g++ -std=c++17 -fPIC -shared`` 编成动态库：一个内核约 0.9 s，几乎都花在这个
头文件上，而实验的一次评分要编 6 个内核。这里用同样的选项把头文件预编译一次（g++ 的预编译头，放在用户的缓存
目录里），再经一个 ``g++`` 包装编译：包装在最前面加上 ``-I<预编译头的目录>``，g++ 在每个 include 目录里先找
``common.h.gch``，有效就用它，选项不符时忽略它、照常读头文件。生成的代码与不用时相同，一个内核约 0.2 s。

TileLang 经环境变量 ``CXX`` 选编译器（``tilelang.contrib.cc.get_cplus_compiler``）。:func:`cpu_compiler` 只在
``CXX`` 与 ``CC`` 都没有设置时、只在 with 块里设置它；做不出预编译头（没有 g++、缓存目录不可写）时什么也不改。
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["FLAGS", "cpu_compiler", "template_dir", "wrapper"]

#: TileLang 编译 C 目标时的选项（``tilelang/jit/adapter/libgen.py``）；预编译头必须用同样的选项做出来
FLAGS = ("-std=c++17", "-fPIC")
HEADER = Path("tl_templates") / "cpp" / "common.h"


def template_dir() -> Path | None:
    """TileLang 的模板目录（``-I`` 给编译器的那个），不导入 tilelang；没有安装时 None。"""
    spec = importlib.util.find_spec("tilelang")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "src"
    return path if (path / HEADER).is_file() else None


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "reduction_lab" / "tilelang-pch"


@functools.lru_cache(maxsize=None)
def wrapper() -> str | None:
    """带预编译头的 ``g++`` 包装的路径；做不出来时 None。目录名是编译器、选项与模板头文件内容的哈希，
    换了 g++ 或 TileLang 就另做一份。"""
    gxx = shutil.which("g++")
    templates = template_dir()
    if gxx is None or templates is None:
        return None
    gxx = os.path.realpath(gxx)
    try:
        version = subprocess.run([gxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    h = hashlib.sha256("\0".join((gxx, version, *FLAGS)).encode())
    for f in sorted((templates / HEADER).parent.iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    final = _cache_root() / h.hexdigest()[:16]
    script = final / "bin" / "g++"
    if script.is_file() and (final / "include" / (str(HEADER) + ".gch")).is_file():
        return str(script)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
        gch = work / "include" / (str(HEADER) + ".gch")
        gch.parent.mkdir(parents=True)
        r = subprocess.run([gxx, *FLAGS, "-x", "c++-header", str(templates / HEADER), "-o", str(gch)],
                           capture_output=True, timeout=300)
        if r.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            return None
        (work / "bin").mkdir()
        # 包装里写的是最终目录的路径：整个目录改名之后才有效
        (work / "bin" / "g++").write_text(f'#!/bin/sh\nexec "{gxx}" -I"{final / "include"}" "$@"\n')
        (work / "bin" / "g++").chmod(0o755)
        try:
            os.rename(work, final)
        except OSError:             # 另一个进程先做好了：用它的
            shutil.rmtree(work, ignore_errors=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(script) if script.is_file() else None


@contextlib.contextmanager
def cpu_compiler(enabled: bool = True):
    """with 块里 TileLang 的 C 目标经 :func:`wrapper` 编译（``enabled`` 为假、用户设置了 ``CXX``/``CC``、
    或者做不出预编译头时不改）。只用于 C 目标：gpu 模式下 TileLang 也把 ``CXX`` 交给 nvcc 作主机编译器。"""
    path = wrapper() if enabled and not (os.environ.get("CXX") or os.environ.get("CC")) else None
    if path is None:
        yield None
        return
    os.environ["CXX"] = path
    try:
        yield path
    finally:
        if os.environ.get("CXX") == path:
            del os.environ["CXX"]
