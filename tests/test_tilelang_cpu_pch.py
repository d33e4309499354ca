"""sim 模式下 TileLang 的 C 目标经预编译头编译（reduction_lab.tilelang_kernels.cpu_pch）：预编译头真的被 g++ 用上，
环境变量只在 with 块里改、不覆盖用户自己的 CXX，用它编出的内核与直接用 g++ 编的结果相同。"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from reduction_lab.tilelang_kernels import cpu_pch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or cpu_pch.template_dir() is None,
                                reason="需要 g++ 与 tilelang（TileLang 的 C 目标用 g++ 编译）")


def test_the_precompiled_header_is_used(tmp_path):
    path = cpu_pch.wrapper()
    assert path and os.access(path, os.X_OK)
    src = tmp_path / "k.cpp"
    src.write_text("#include <tl_templates/cpp/common.h>\nextern \"C\" float f(float x) { return half(x); }\n")
    # 与 TileLang 的命令行相同的选项；-H 列出用到的头文件，用上预编译头时第一行以 "! " 开头、指向 .gch
    r = subprocess.run([path, *cpu_pch.FLAGS, "-shared", "-H", str(src), f"-I{cpu_pch.template_dir()}",
                        "-o", str(tmp_path / "k.so")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("! ") and first.endswith("common.h.gch"), r.stderr[:500]


def test_a_mismatched_option_falls_back_to_the_header(tmp_path):
    """选项与预编译头不符（-std=c++14）：g++ 不用它，照常读头文件。"""
    src = tmp_path / "k.cpp"
    src.write_text("#include <tl_templates/cpp/common.h>\nextern \"C\" int g() { return 1; }\n")
    r = subprocess.run([cpu_pch.wrapper(), "-std=c++14", "-fPIC", "-shared", "-H", str(src),
                        f"-I{cpu_pch.template_dir()}", "-o", str(tmp_path / "k.so")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not r.stderr.startswith("! ")
    assert "half.hpp" in r.stderr


def test_cpu_compiler_sets_cxx_only_inside_and_respects_the_users(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    with cpu_pch.cpu_compiler() as path:
        assert path and os.environ["CXX"] == path
    assert "CXX" not in os.environ
    with cpu_pch.cpu_compiler(False) as path:
        assert path is None and "CXX" not in os.environ
    monkeypatch.setenv("CXX", "/usr/bin/my-g++")
    with cpu_pch.cpu_compiler() as path:
        assert path is None and os.environ["CXX"] == "/usr/bin/my-g++"
    assert os.environ["CXX"] == "/usr/bin/my-g++"


def test_code_compiled_through_the_wrapper_gives_the_same_answer(tmp_path):
    """同一份用到头文件里的 half 与向量类型的源码，经包装（预编译头）与直接经 g++ 编译，算出逐位相同的结果。"""
    import ctypes

    src = tmp_path / "k.cpp"
    src.write_text("#include <tl_templates/cpp/common.h>\n"
                   "extern \"C\" float f(const float* x, int n) {\n"
                   "  float4 acc = ((float4)(0.0f, 0.0f, 0.0f, 0.0f));\n"
                   "  for (int i = 0; i + 4 <= n; i += 4) acc = acc + *(float4*)(x + i);\n"
                   "  return (float)half(acc.data[0] + acc.data[1] + acc.data[2] + acc.data[3]);\n}\n")
    x = (ctypes.c_float * 64)(*[((i * 37) % 11 - 5) / 7 for i in range(64)])
    got = []
    for name, cxx in (("pch", cpu_pch.wrapper()), ("plain", shutil.which("g++"))):
        lib = tmp_path / f"{name}.so"
        r = subprocess.run([cxx, *cpu_pch.FLAGS, "-shared", str(src), f"-I{cpu_pch.template_dir()}", "-o", str(lib)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        f = ctypes.CDLL(str(lib)).f
        f.restype, f.argtypes = ctypes.c_float, [ctypes.POINTER(ctypes.c_float), ctypes.c_int]
        got.append(f(x, 64))
    expected = sum(x[i] for i in range(64))
    assert got[0] == got[1]
    assert abs(got[0] - expected) < 1e-2


def test_package_kernels_compile_through_it_in_sim_mode(monkeypatch):
    """rl.softmax / reduce_sum 的 tilelang backend 第一次遇到一组参数时编译：sim 模式下这次编译在 cpu_compiler 里，
    CXX 指向包装；之后的调用不再进入它（编译好的内核直接调用）。"""
    import contextlib

    import torch

    from reduction_lab import MODE
    from reduction_lab import tilelang_kernels as tk

    seen = []

    @contextlib.contextmanager
    def spy(enabled=True):
        with cpu_pch.cpu_compiler(enabled) as path:
            seen.append((enabled, os.environ.get("CXX")))
            yield path

    monkeypatch.setattr(tk, "cpu_compiler", spy)
    x = torch.randn(3, 333, generator=torch.Generator().manual_seed(1)).to(tk.DEVICE)
    y = tk.reduce_sum(x)
    torch.testing.assert_close(y.double().cpu(), x.double().sum(1).cpu(), atol=1e-4, rtol=1e-5)
    p = tk.softmax(x)
    torch.testing.assert_close(p.double().cpu(), torch.softmax(x.double(), 1).cpu(), atol=1e-6, rtol=1e-5)
    # gpu 模式下编译经 nvcc（TileLang 把 CXX 交给它作主机编译器）：cpu_compiler 进入了，但什么也不改
    assert seen and all(enabled == (MODE == "sim") for enabled, _ in seen), seen
    if MODE == "sim":
        assert len(seen) == 2, seen
        # 测试会话已把 CXX 设成包装（tests/conftest.py），或者 cpu_compiler 在块里设置它
        assert all(cxx and cxx.endswith("/bin/g++") for _, cxx in seen), seen
        tk.reduce_sum(x)
        tk.softmax(x)
        assert len(seen) == 2
