"""构造登记表（reduction_lab.simt.constructs）：每一项要么运行并给出与 numpy 参考一致的输出，要么报
UnsupportedError 并指出文件与行号；有意拒绝的项必须在登记的那一行被拒绝（文档：docs/cuda/simulator.md）。"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from reduction_lab.simt import constructs as C

NAMES = [c.name for c in C.REGISTRY]


@pytest.fixture(scope="module")
def results():
    return {c.name: C.check(c) for c in C.REGISTRY}


@pytest.mark.parametrize("name", NAMES)
def test_entry_runs_exactly_or_is_refused_with_its_location(name, results):
    c, r = C.by_name(name), results[name]
    assert r.status in ("ran", "refused"), f"{name}: {r.status}\n{r.message}"
    if r.status == "ran":
        assert c.status_expected == "run", f"{name} 应被拒绝却运行了 (should be refused but ran)"
        return
    nlines = c.source.count("\n") + 1
    nlines = max([nlines] + [t.count("\n") + 1 for t in c.files.values()])
    assert isinstance(r.line, int) and 1 <= r.line <= nlines, f"{name}: 行号 {r.line!r}\n{r.message}"
    assert f"第 {r.line} 行" in r.message and f"line {r.line}" in r.message, r.message
    # 解析阶段的错误写出文件名；运行时的错误写出内核名（在头文件里时再加头文件名）
    where = r.file or f"{name}.cu"
    assert where in r.message or f"内核 {c.kernel.split('<')[0]}" in r.message, r.message
    if c.status_expected == "refuse":
        assert r.line == c.refused_line, f"{name}: 应在第 {c.refused_line} 行被拒绝，实际第 {r.line} 行\n{r.message}"
        assert f"{name}.cu" in r.message, r.message


def test_supported_entries_match_their_reference(results):
    ran = [n for n, r in results.items() if r.status == "ran"]
    assert ran, "登记表里没有一项能运行"
    for n in ran:
        assert results[n].outputs, f"{n} 没有可比较的输出"


def test_the_registry_is_well_formed():
    assert len(set(NAMES)) == len(NAMES)
    for c in C.REGISTRY:
        assert c.status_expected in ("run", "refuse") and c.description and c.category
        if c.status_expected == "run":
            assert c.expected is not None and c.refused_line is None, c.name
        else:
            assert isinstance(c.refused_line, int), c.name
        # 同样的名字得到同样的输入（固定种子），期望输出至少有一个键
        a, b = C.make_case(c), C.make_case(c)
        assert all(np.array_equal(x, y) for x, y in zip(a.args, b.args))
        if c.expected is not None:
            assert c.expected(a)


def test_a_wrong_reference_is_reported_not_hidden():
    c = C.by_name("warp_shuffle")
    bad = C.Construct(**{**c.__dict__, "expected": lambda case: {1: case.args[0].reshape(-1, 32).sum(1) + 1}})
    r = C.check(bad)
    assert r.status == "wrong" and r.max_error == 1.0


def test_float_bounds_are_not_loose():
    # 界是最坏情况 (n - 1) u sum|x|：256 个 N(0, 1) 的数约 3e-3；超出界的误差被判为不一致
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    b = float(C.sum_bound(np.abs(x.astype(np.float64)).sum(), 256))
    assert 255 * 2**-24 * 150 < b < 255 * 2**-24 * 260
    assert C.compare(np.float32(1.0), np.float64(1.0 + 2 * b), b) == (pytest.approx(2 * b), False)


_NVCC = shutil.which("nvcc")


@pytest.mark.skipif(_NVCC is None, reason="nvcc 不在 PATH 上，无法核对这些源码是真正的 CUDA")
def test_supported_sources_are_real_cuda(tmp_path):
    """status_expected="run" 的每一项都是 nvcc 接受的 CUDA C++（GPU 对照会编译它们）。"""
    paths = [str(C.materialize(c, tmp_path)) for c in C.REGISTRY if c.status_expected == "run"]
    r = subprocess.run([_NVCC, "-ptx", "-arch=sm_90", "-std=c++17", *paths], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_an_internal_error_dressed_as_unsupported_is_a_crash(monkeypatch):
    from reduction_lab.simt import errors

    def boom(*a, **k):
        raise errors.UnsupportedError("kernel.cu 第 3 行：不支持 DECL_REF_EXPR（AttributeError: x） / line 3")

    monkeypatch.setattr(C, "run", boom)
    assert C.check(C.by_name("warp_shuffle")).status == "crash"
