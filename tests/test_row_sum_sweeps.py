"""按行求和的默认配置与 H200 上的扫描数据对得上：默认选的配置就在扫描的候选里，且离最快的候选不超过测量的噪声
（Triton：docs/data/h200_triton_row_sum_sweep.json，2 个百分点；CUDA C：h200_cuda_row_sum_packs.json 与
h200_cuda_row_sum_warp.json，噪声取 packs 扫描里同一配置两次测量之差的最大值）。扫描的计时与基准相同。"""

import pytest
import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck
from reduction_lab.triton_kernels import row_sum as rs

TOL = 0.02
SMS = 132                                      # 扫描所用的 H200


def _rows(name):
    return [pytest.param(r, id=f"{r['dtype']}-{r['N']}") for r in rl.load_data(name)["results"]]


@pytest.mark.parametrize("r", _rows("h200_triton_row_sum_sweep.json"))
def test_triton_default_is_within_tolerance_of_the_fastest(r, monkeypatch):
    monkeypatch.setattr(rs, "sm_count", lambda: SMS)
    dtype = getattr(torch, r["dtype"])
    bm, bn, ns, nw = rs._tiled_config(r["M"], r["N"], dtype.itemsize)
    assert ns == 1
    ok = [c for c in r["candidates"] if c.get("ok")]
    mine = [c for c in ok if c["kind"] == "tiled" and (c["block_m"], c["block_n"], c["num_warps"]) == (bm, bn, nw)]
    assert mine, f"默认配置 {(bm, bn, nw)} 不在扫描的候选里"
    best = max(c["frac_copy"] for c in ok)
    assert mine[0]["frac_copy"] >= best - TOL, (mine[0], best)


# ---------------------------------------------------------------- CUDA C：split 与 warp 内核的默认配置

def _key(c):
    return c["block_size"], c.get("packs"), bool(c.get("evict_first"))


def _cands(r) -> dict:
    return {_key(c): c["frac_copy"] for c in r["candidates"] if c["ok"]}


def _packs_sweeps():
    d = rl.load_data("h200_cuda_row_sum_packs.json")
    return d["results"], d["repeat"]["results"]


def _cuda_noise() -> float:
    """同一配置在一次扫描里测了两次时两次之差的最大值：16 位的 split 默认配置在两次 packs 扫描时都与现在相同，
    每次扫描每个 N 测了它两次（经 rl.reduce_sum 的默认调用、作为候选）。这就是下面比较所用的噪声。"""
    rows = [r for rs in _packs_sweeps() for r in rs if r["dtype"] != "float32"]
    return max(abs(r["default_frac_copy"] - _cands(r)[_default_key("split", r)]) for r in rows)


def _split_cands(r) -> dict:
    """16 位：两次 packs 扫描都测了的配置取两次的平均（同一配置在两次扫描之间差得比一次之内多）；float32 只扫了一次。"""
    got = _cands(r)
    again = [q for q in _packs_sweeps()[1] if (q["dtype"], q["N"]) == (r["dtype"], r["N"])]
    if not again:
        return got
    other = _cands(again[0])
    return {k: (v + other[k]) / 2 for k, v in got.items() if k in other}


def _default_key(kernel, r):
    n, size = r["N"], getattr(torch, r["dtype"]).itemsize
    B = ck._split_block(n, size) if kernel == "split" else ck._warp_block(size)
    return B, ck._sum_packs(kernel, n, size) or ck._CU_SUM_PACKS, ck._sum_evict(kernel, n, size)


def _old_key(kernel, r):
    """现在的默认配置之前的：float32 split 按一行的字节数取 256 / 512 / 1024 个线程，warp 内核 float32 256 个、
    16 位 128 个线程；都是 2 包、不用流式加载。"""
    n, size = r["N"], getattr(torch, r["dtype"]).itemsize
    if kernel == "warp":
        return (256 if size == 4 else 128), 2, False
    row = n * size
    if size == 2:
        return ck._split_block(n, size), ck._sum_packs("split", n, size) or 2, False
    return (256 if row < 65536 else 512 if row < 524288 else 1024), 2, False


def test_cuda_sweep_noise_is_small_enough_to_choose_by():
    noise = _cuda_noise()
    assert 0 < noise < 0.03, f"同一配置的两次测量差 {noise:.1%}：这个文件太吵，不能用来选配置"


@pytest.mark.parametrize("r", [p for p in _rows("h200_cuda_row_sum_packs.json")
                               if not ck._warp_rows(p.values[0]["N"], getattr(torch, p.values[0]["dtype"]))])
def test_cuda_split_defaults_are_within_noise_of_the_fastest(r):
    """split 内核默认的 (线程数, SUM_PACKS, 流式加载)：在扫描里（16 位是两次扫描的平均）离最快的候选不超过噪声，
    也不比原来的默认慢（差不到半个噪声）。"""
    got = _split_cands(r)
    noise = _cuda_noise()
    mine = got[_default_key("split", r)]
    assert ck._split_plan(r["M"], r["N"], _default_key("split", r)[0], SMS)[1] == 1
    assert mine >= max(got.values()) - noise, (_default_key("split", r), mine, max(got.values()), noise)
    assert mine >= got[_old_key("split", r)] - noise / 2, (mine, got[_old_key("split", r)])


@pytest.mark.parametrize("r", [p for p in _rows("h200_cuda_row_sum_warp.json")
                               if ck._warp_rows(p.values[0]["N"], getattr(torch, p.values[0]["dtype"]))])
def test_cuda_warp_defaults_are_within_noise_of_the_fastest(r):
    got = _cands(r)
    noise = _cuda_noise()
    mine = got[_default_key("warp", r)]
    assert mine >= max(got.values()) - noise, (_default_key("warp", r), mine, max(got.values()), noise)
    assert mine >= got[_old_key("warp", r)] - noise / 2, (mine, got[_old_key("warp", r)])


def test_cuda_warp_or_split_follows_the_sweeps():
    """两个扫描都测了的行长（一行 8 KiB 与 16 KiB）：默认选的内核（_warp_rows）用它的默认配置，不比另一个内核的
    默认配置慢。"""
    warp = {(r["dtype"], r["N"]): r for r in rl.load_data("h200_cuda_row_sum_warp.json")["results"]}
    split = {(r["dtype"], r["N"]): r for r in rl.load_data("h200_cuda_row_sum_packs.json")["results"]}
    both = sorted(set(warp) & set(split))
    assert len(both) >= 4, both
    for key in both:
        w = _cands(warp[key])[_default_key("warp", warp[key])]
        s = _cands(split[key])[_default_key("split", split[key])]
        chosen, other = (w, s) if ck._warp_rows(key[1], getattr(torch, key[0])) else (s, w)
        assert chosen >= other, (key, w, s)


@pytest.mark.parametrize("r", _rows("h200_triton_row_sum_evict.json"))
def test_triton_default_eviction_follows_the_sweep(r, monkeypatch):
    """默认配置的加载提示（rs._default_evict）：扫描（h200_triton_row_sum_evict.json，同一进程里标与不标
    evict_first 的同一配置交替测量）里，选中的那个不比另一个慢（差不到半个百分点）。"""
    monkeypatch.setattr(rs, "sm_count", lambda: SMS)
    dtype = getattr(torch, r["dtype"])
    bm, bn, _, nw = rs._tiled_config(r["M"], r["N"], dtype.itemsize)
    same = {c.get("eviction_policy", ""): c["frac_copy"] for c in r["candidates"]
            if c.get("ok") and (c["block_m"], c["block_n"], c["num_warps"]) == (bm, bn, nw)}
    if len(same) < 2:
        pytest.skip(f"默认配置 {(bm, bn, nw)} 超出这次扫描的块大小（最大 8192 个元素），两种提示都没有测")
    chosen = rs._default_evict(r["N"], dtype.itemsize)
    other = "" if chosen else "evict_first"
    assert same[chosen] >= same[other] - 0.005, (chosen, same)
    assert rs._plan(r["M"], r["N"], dtype)[2]["EVICT"] == chosen
