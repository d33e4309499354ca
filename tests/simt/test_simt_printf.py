"""设备端的 printf：格式与 C 的 printf 逐字相同（GPU 上的输出由主机按 C 的规则格式化），每个活跃线程一行、
按线程编号的顺序，返回实参个数；写不出确定结果的用法（格式串不是常量、%s 配变量、%d 配 float、%p……）报
UnsupportedError 并指出行号；一次启动超过 1 MiB 的输出丢掉并说明（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.simt import UnsupportedError

#: 一行里用到的转换：修饰符、标志、宽度与精度；值里有负数、0、超出 8 位与 16 位的数
FORMATS = [
    ("%d|%i|%u|%x|%X|%o", "-7, 42, (unsigned)-1, 255, 48879, 8"),
    ("%#x|%#x|%#o|%#o|%+d|% d|%+u", "0, 255, 0, 8, 5, 7, 5u"),
    ("%05d|%-5d|%.3d|%8.3f|%-8.2f|%08.3f", "42, 42, 7, 3.14159f, 2.5f, -1.5f"),
    ("%e|%.3e|%E|%g|%G|%#g|%g", "12345.678, 12345.678, 1e-7, 1e-5, 1e20, 1.5, 100000.0"),
    ("%hhd|%hd|%hhu|%hu|%ld|%lld|%llu|%lx", "300, 70000, 300, 70000, -5l, -(1ll << 40), 1ull << 63, -1l"),
    ("%c%c|%5c|%-3c|%s|%8s|%-6s|%.2s|%%", "'h', 'i', 'z', 'y', \"ok\", \"right\", \"left\", \"trim\""),
    ("%f|%f|%F|%.0f|%.1f", "1.0f / 3.0f, -0.0f, 2.5, 2.5, 0.05"),
    ("%05.3d|%08.3x|%-05d|%+.0f|%#.0f|%.0e|%05.1u|% 05d|%+05d|%x", "7, 255, 3, 2.5, 3.0, 12345.0, 9u, 42, 42, -1"),
]


def run(src, grid=1, block=1, args=None, capsys=None, tmp_path=None, **kw):
    path = tmp_path / "k.cu"
    path.write_text(src, encoding="utf-8")
    rep = simt.launch(str(path), "k", grid, block, tuple(args or ()), **kw)
    return rep, (capsys.readouterr().out if capsys is not None else None)


def _kernel(fmt, vals):
    return f'#include <cstdio>\n__global__ void k(int* r) {{\n    r[0] = printf("{fmt}\\n", {vals});\n}}\n'


@pytest.mark.parametrize("fmt,vals", FORMATS, ids=[f[0][:12] for f in FORMATS])
def test_formats_match_c(fmt, vals, tmp_path, capsys):
    """每一行与同样的格式串、同样的值在主机的 C 编译器里印出的逐字相同（机器上没有 cc 时只检查不报错、
    有输出、返回值对）。"""
    r = np.zeros(1, np.int32)
    rep, out = run(_kernel(fmt, vals), args=[r], capsys=capsys, tmp_path=tmp_path)
    assert out == rep.printf and out.endswith("\n") and out.count("\n") == 1
    assert r[0] == vals.count(",") + 1                    # CUDA 的 printf 返回格式串之后的实参个数
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("没有 C 编译器：只检查了不报错与返回值")
    c = tmp_path / "ref.c"
    c.write_text(f'#include <stdio.h>\nint main(void) {{ printf("{fmt}\\n", {vals}); return 0; }}\n', encoding="utf-8")
    exe = tmp_path / "ref"
    subprocess.run([cc, "-w", "-o", str(exe), str(c)], check=True, capture_output=True, timeout=120)
    want = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout
    assert out == want


def test_every_active_thread_prints_once_in_thread_order(tmp_path, capsys):
    """分支里的 printf 只有走进分支的线程印出；顺序按线程块、线程编号；设备函数里的 printf 也一样。"""
    src = r"""
#include <cstdio>
__device__ void say(int i, float v) { printf("[%d] %.2f\n", i, v); }
__global__ void k(const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && i % 3 != 1)
        say(i, x[i]);
}
"""
    x = np.arange(8, dtype=np.float32) * 0.5
    rep, out = run(src, grid=2, block=4, args=[x, np.int32(7)], capsys=capsys, tmp_path=tmp_path)
    assert out == "".join(f"[{i}] {x[i]:.2f}\n" for i in range(7) if i % 3 != 1)
    assert rep.printf == out and rep.printf_dropped == 0
    assert "printf" not in rep.as_dict()                  # 不是计数器


def test_output_before_an_error_is_kept(tmp_path, capsys):
    """越界之前印出的行已经在标准输出上：调试时先印出下标，再看模拟器指出的越界。"""
    src = r"""
#include <cstdio>
__global__ void k(const float* x, float* y) {
    int i = threadIdx.x;
    printf("i=%d\n", i);
    y[i] = x[i + 1];
}
"""
    x = np.zeros(4, np.float32)
    with pytest.raises(simt.OutOfBoundsError):
        run(src, block=4, args=[x, np.zeros(4, np.float32)], tmp_path=tmp_path)
    assert capsys.readouterr().out == "i=0\ni=1\ni=2\ni=3\n"


def test_output_beyond_one_mebibyte_is_dropped_and_said(tmp_path, capsys):
    src = '#include <cstdio>\n__global__ void k() {\n    printf("thread %06d of a long launch\\n", threadIdx.x + blockIdx.x * blockDim.x);\n}\n'
    rep, out = run(src, grid=64, block=1024, capsys=capsys, tmp_path=tmp_path)
    line = len("thread 000000 of a long launch\n")
    kept = (1 << 20) // line
    assert rep.printf_bytes == kept * line and rep.printf_dropped == 64 * 1024 - kept
    assert out.startswith("thread 000000 of a long launch\n") and "后面的 " + str(rep.printf_dropped) + " 行丢掉了" in out


@pytest.mark.parametrize("body,what", [
    ('const char* f = "%d\\n";\n    printf(f, 1);', "只支持直接写在 printf 里的"),   # 报在字符串常量的那一行
    ('const char* s = "x";\n    printf("%s\\n", s);', "只支持直接写在 printf 里的"),
    ('printf(threadIdx.x ? "a\\n" : "b\\n");', "格式串不是字符串常量"),
    ('printf("%d\\n", 1.5f);', "未定义行为"),
    ('printf("%f\\n", 3);', "未定义行为"),
    ('printf("%p\\n", (void*)0);', "%p"),
    ('printf("%*d\\n", 4, 1);', "%*d"),
    ('printf("%d %d\\n", 1);', "实参比格式串里的转换少"),
    ('printf("%y\\n", 1);', "无法识别的转换"),
])
def test_printf_it_cannot_print_faithfully_is_refused_at_its_line(body, what, tmp_path):
    src = "#include <cstdio>\n__global__ void k() {\n    " + body + "\n}\n"
    path = tmp_path / "k.cu"
    path.write_text(src, encoding="utf-8")
    with pytest.raises(UnsupportedError) as e:
        simt.launch(str(path), "k", 1, 1, ())
    first = min(i for i in (src.find('"', src.index("{")), src.index("printf")) if i >= 0)
    assert what in str(e.value) and e.value.line == src.count("\n", 0, first) + 1, str(e.value)


def _random_specs(n, seed=0):
    """n 个随机的 (转换说明, C 里的实参)：标志、宽度、精度、长度修饰符与转换都随机，实参是那个类型的随机值
    （整数取满 64 位再由 C 的类型截断；浮点含 0、-0、次正规数、很大很小的数与 inf、nan）。"""
    rng = np.random.default_rng(seed)
    ctype = {None: "int", "hh": "signed char", "h": "short", "l": "long", "ll": "long long"}
    utype = {None: "unsigned", "hh": "unsigned char", "h": "unsigned short", "l": "unsigned long",
             "ll": "unsigned long long"}
    floats = ["0.0", "-0.0", "1e-310", "3.4e38", "-2.5e-7", "123456.789", "0.5", "INFINITY", "-INFINITY", "NAN"]
    out = []
    for _ in range(n):
        flags = "".join(f for f in "-+ #0" if rng.random() < 0.25)
        width = str(rng.integers(1, 14)) if rng.random() < 0.6 else ""
        prec = "." + str(rng.integers(0, 9)) if rng.random() < 0.5 else ""
        if rng.random() < 0.5:
            conv = str(rng.choice(list("eEfFgG")))
            val = str(rng.choice(floats)) if rng.random() < 0.5 else repr(float(rng.standard_normal() * 10.0 ** rng.integers(-8, 9)))
            out.append((f"%{flags}{width}{prec}{conv}", f"(double)({val})"))
        else:
            ln = [None, "hh", "h", "l", "ll"][rng.integers(0, 5)]
            conv = str(rng.choice(list("diuoxX")))
            t = ctype[ln] if conv in "di" else utype[ln]
            v = int(rng.integers(-2**63, 2**63 - 1, dtype=np.int64))
            out.append((f"%{flags}{width}{prec}{ln or ''}{conv}", f"({t})({v}ll)"))
    return out


def test_random_conversions_match_c(tmp_path, capsys):
    """300 个随机的转换说明与值，逐行与主机的 C 编译器印出的相同（没有 cc 时跳过）。"""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("没有 C 编译器：随机格式只能与主机的 printf 对照")
    specs = _random_specs(300)
    body = "".join(f'    printf("[{s}]\\n", {a});\n' for s, a in specs)
    rep, out = run("__global__ void k() {\n" + body + "}\n", capsys=capsys, tmp_path=tmp_path)
    c = tmp_path / "ref.c"
    c.write_text("#include <math.h>\n#include <stdio.h>\nint main(void) {\n" + body + "    return 0;\n}\n",
                 encoding="utf-8")
    exe = tmp_path / "ref"
    subprocess.run([cc, "-w", "-o", str(exe), str(c), "-lm"], check=True, capture_output=True, timeout=120)
    want = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout
    bad = [(s, a, g, w) for (s, a), g, w in zip(specs, out.splitlines(), want.splitlines()) if g != w]
    assert not bad and out == want, bad[:5]
    assert out.count("\n") == 300 and "nan" in out and "inf" in out.lower() and "-0" in out


STD_NAMES = r"""
#include <cmath>
#include <cstdio>
__global__ void k(float* x, int* i) {
    float a = x[0];
    x[1] = std::sqrt(a) + std::exp(a) + std::fmax(a, 1.0f) + std::pow(a, 2.0f) + std::fabs(-a) + std::abs(-a);
    int e;
    x[2] = std::frexp(a, &e);
    i[0] = std::abs(-7) + e + std::printf("e=%d\n", e);
}
"""


def test_std_names_from_cmath_and_cstdio_run(tmp_path, capsys):
    """<cmath> 的 std::sqrt 等与 <cstdio> 的 std::printf 是同样的函数（nvcc 接受；原来报「未声明的标识符 std，
    nvcc 同样报错」，说错了）；机器上有 nvcc 时核对它接受同样的源码。"""
    x = np.array([0.5, 0, 0], np.float32)
    i = np.zeros(1, np.int32)
    rep, out = run(STD_NAMES, args=[x, i], capsys=capsys, tmp_path=tmp_path)
    a = np.float32(0.5)
    want = np.sqrt(a) + np.exp(a) + np.float32(1) + a * a + a + a
    assert abs(x[1] - want) <= 4e-7 * want and x[2] == 0.5 and out == "e=0\n" and i[0] == 7 + 0 + 1
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("没有 nvcc：只检查了模拟器")
    r = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", "/dev/null", str(tmp_path / "k.cu")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
