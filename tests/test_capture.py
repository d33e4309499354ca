"""reduction_lab.capture：Python 的 print、直接写文件描述符 1 的与 C 库的 printf 都收得到，退出之后标准输出照旧。"""

from __future__ import annotations

import ctypes
import os

from reduction_lab.capture import captured_output


def test_collects_python_fd_and_c_stdio_output(capfd):
    with captured_output() as out:
        print("from python")
        os.write(1, b"from fd 1\n")
        ctypes.CDLL(None).printf(b"from libc %d\n", 7)      # 驱动写 printf 的方式：C 库的 stdout，带缓冲
    assert out.text.splitlines() == ["from python", "from fd 1", "from libc 7"]
    print("after")
    os.write(1, b"fd after\n")
    assert capfd.readouterr().out == "after\nfd after\n"


def test_text_is_kept_when_the_block_raises():
    out = captured_output()
    try:
        with out:
            os.write(1, b"before the error\n")
            raise ValueError("x")
    except ValueError:
        pass
    assert out.text == "before the error\n"
