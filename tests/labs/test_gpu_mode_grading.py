"""只有 gpu 模式才走到的评分路径，在 CPU 上用同样的输入检查：大形状上串行相加的正确内核不算「和不对」，
在线 softmax 忘了重新缩放时「前几块全是 -inf」的行也认得出，TileLang 在 GPU 上排不出布局时的报错指向原因。"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from reduction_lab import labs
from reduction_lab.labs import cases as C
from reduction_lab.labs.grading import Mismatch, compare, row_sum_tolerance, tolerance
from reduction_lab.labs.online_softmax import no_rescale

from planted import copy_solution

needs_tilelang = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="TileLang 的实验需要 tilelang")


@pytest.mark.parametrize("shape", [(1000, 5000), (4096, 4097)])
def test_a_serial_float32_row_sum_is_within_the_tolerance(shape):
    """gpu 模式的大形状：一个线程依次加完整行（float32，误差最大的合理顺序）的结果在容许值之内；
    漏加一个元素、多加一个元素都在容许值之外。"""
    x = C.make_input(C.Case("大形状", shape), "sim")
    ref = x.double().sum(dim=1)
    # numpy 的 cumsum 在 float32 里按顺序逐个相加（torch 在 CPU 上用 double 累加，不能用）
    serial = torch.from_numpy(np.cumsum(x.numpy(), axis=1, dtype=np.float32)[:, -1].copy())
    atol, rtol = row_sum_tolerance(x)
    assert compare(serial, ref, atol, rtol)[0]
    # 旧的容许值（只随 sqrt(N) 增长的 atol）会把串行相加的好几行判成不对
    assert not compare(serial, ref, tolerance(shape[1], torch.float32)[0], rtol)[0]
    for wrong in (ref - x[:, -1].double(), ref + x[:, 0].double()):
        ok, _, bad = compare(wrong, ref, atol, rtol)
        assert not ok and len(bad) > 0.9 * shape[0]


def test_mismatch_same_uses_the_row_tolerance():
    x = torch.ones(3, 10)
    ref = x.double().sum(dim=1)
    got = ref.clone()
    got[1] = 0.0
    mm = Mismatch(x, got, ref, [1], *row_sum_tolerance(x))
    assert mm.same(torch.tensor([10.0, 0.0, 10.0], dtype=torch.float64))
    assert not mm.same(torch.tensor([10.0, 1.0, 10.0], dtype=torch.float64))


def test_no_rescale_model_matches_a_kernel_with_the_inf_guard():
    """「前几块全是 -inf」的行：骨架用 m_ref（m_new 是 -inf 时取 0）作减数，忘了重新缩放的内核算出有限的值，
    诊断的模型也要如此（否则这一行只得到笼统的「softmax 的值不对」）。"""
    case = C.Case("前几块全是 -inf", (3, 3000), kind="inf-prefix")
    x = C.make_input(case, "sim")
    for block in (128, 1024):
        y = no_rescale(x, block)
        assert torch.isfinite(y).all()
        ref = torch.softmax(x.double(), dim=1)
        assert not torch.allclose(y, ref, rtol=1e-4, atol=1e-6)      # 确实是错的结果
        assert torch.equal(y[:, :2000], torch.zeros(3, 2000, dtype=torch.float64))


def _error(message):
    try:
        raise RuntimeError(message)
    except RuntimeError as e:
        return e


@needs_tilelang
def test_reduce_layout_error_points_at_block_n(tmp_path):
    """gpu 模式下 block_n = 100、128 个线程：TileLang 排不出 T.reduce_sum 的布局。诊断说块宽与线程数配不上，指向 block_n。"""
    dest = copy_solution("reduce-sum-tilelang", tmp_path)
    f = dest / "reduce_sum.py"
    f.write_text(f.read_text(encoding="utf-8").replace("block_n: int = 256", "block_n: int = 100", 1), encoding="utf-8")
    lab = labs.get("reduce-sum-tilelang")
    exc = _error("Check failed: (!analyzer->CanProve(dst_layout->ReplicateExtent() > red_layout->ReplicateExtent())) "
                 "is false: Inconsistent layouts between src and dst in ReduceOp: dst_layout=tl.Fragment(...)")
    h = lab.on_error(C.Case("课程用例", (1, 128)), exc, {"reduce_sum.py": f})
    assert h.key == "block-threads" and h.fix and "threads" in h.fix
    assert "block_n: int = 100" in f.read_text(encoding="utf-8").splitlines()[h.line - 1]


@needs_tilelang
def test_layout_error_from_a_short_loop_is_the_loop_bound(tmp_path):
    """gpu 模式下 exp 的循环只走到 N：T.Parallel 的范围与 fragment 的 block_n 列不一致，TileLang 报
    「no available layout found」。诊断是循环的范围（指向那个循环），不是笼统的 TileLang 报错。"""
    dest = copy_solution("softmax-tilelang", tmp_path)
    f = dest / "softmax.py"
    text = f.read_text(encoding="utf-8")
    old = "        for i, j in tile_loop(1, block_n):\n            tile[i, j] = T.exp(tile[i, j] - row_max[i])\n"
    assert old in text
    f.write_text(text.replace(old, old.replace("block_n", "N"), 1), encoding="utf-8")
    lab = labs.get("softmax-tilelang")
    h = lab.on_error(C.Case("N 不是 2 的幂", (7, 1000)), _error("Check failed: (has_best) is false: no available layout found"),
                     {"softmax.py": f})
    assert h.key == "loop-bound" and "no available layout" in h.detail
    assert "tile_loop(1, N)" in f.read_text(encoding="utf-8").splitlines()[h.line - 1]
    # 别的布局错误（循环都走满）：仍是笼统的诊断
    clean = copy_solution("softmax-tilelang", tmp_path / "clean") / "softmax.py"
    h = lab.on_error(C.Case("N 不是 2 的幂", (7, 1000)), _error("Check failed: (has_best) is false: no available layout found"),
                     {"softmax.py": clean})
    assert h.key == "exception"
