"""把一段代码印出的文字收集起来：Python 的 ``sys.stdout``，以及文件描述符 1。

GPU 上内核里的 ``printf`` 由 CUDA 驱动在同步时写到文件描述符 1（C 的 stdout），不经过 Python：notebook 里它出现在
启动 Jupyter 的终端上，而不是单元格的输出里。实验的评分（:mod:`reduction_lab.labs.grading`）与模拟器的 GPU 对照
（scripts/simt_differential.py）用 :class:`captured_output` 把两边都收进来::

    with captured_output() as out:
        kernel_launch_and_synchronize()
    print(out.text)

文件描述符接不过去时（例如标准输出已经关闭）只收 Python 这一边。
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import sys
import tempfile

__all__ = ["captured_output"]


def _flush_c_stdout() -> None:
    """C 库里 stdout 的缓冲区（驱动写的 printf 可能还在里面）。"""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):     # 没有可以 dlopen(NULL) 的 C 库（例如 Windows）：只靠 Python 这一边
        pass


class captured_output:
    """with 块里印出的文字：``text`` 在退出之后可读（Python 这一边在前，文件描述符 1 上的在后）。"""

    def __init__(self):
        self.text = ""
        self._py = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._py)
        self._saved = None
        self._tmp = None

    def __enter__(self):
        sys.stdout.flush()
        _flush_c_stdout()
        try:
            self._tmp = tempfile.TemporaryFile(mode="w+b")
            self._saved = os.dup(1)
            os.dup2(self._tmp.fileno(), 1)
        except OSError:
            if self._tmp is not None:
                self._tmp.close()
            self._tmp = self._saved = None
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc):
        self._redirect.__exit__(*exc)
        fd_text = ""
        if self._saved is not None:
            _flush_c_stdout()
            os.dup2(self._saved, 1)
            os.close(self._saved)
            self._tmp.seek(0)
            fd_text = self._tmp.read().decode("utf-8", "replace")
            self._tmp.close()
        self.text = self._py.getvalue() + fd_text
        return False
