"""TileLang 实验（reduce-sum-tilelang、softmax-tilelang）里学习者常犯的错误：植入参考解的副本，
评分的第一条诊断是这个错误专门的诊断，并指向出错的那一行；看起来像错误、其实是对的写法照样通过。"""

from __future__ import annotations

import importlib.util

import pytest

import reduction_lab as rl
from reduction_lab import labs

from planted import edited_solution

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tilelang") is None, reason="TileLang 的实验需要 tilelang")


RS = "reduce-sum-tilelang"
SM = "softmax-tilelang"
ACCUMULATE = ("            T.reduce_sum(tile, part, dim=1)\n"
              "            for i in tile_loop(1):\n                acc[i] += part[i]\n")
MASK = "T.if_then_else(j < N, tile[i, j], NEG_INF)"
EXP_LOOP = "        for i, j in tile_loop(1, block_n):\n            tile[i, j] = T.exp(tile[i, j] - row_max[i])\n"
SUM = "        T.reduce_sum(tile, row_sum, dim=1)\n"

#: (实验, 错误, [(原文, 改成)], 第一条诊断的 key, 诊断所指的行必须包含的文字)
MISTAKES = [
    # ---- reduce-sum-tilelang
    (RS, "reduce-dim0", [("T.reduce_sum(tile, part, dim=1)", "T.reduce_sum(tile, part, dim=0)")], "reduce-dim",
     "dim=0"),
    (RS, "no-clear", [("        T.clear(acc)\n", "")], "no-init", "acc = alloc("),
    (RS, "copy-same-tile", [("T.copy(x[bx, k * block_n], tile)", "T.copy(x[bx, 0], tile)")], "copy-start",
     "T.copy(x[bx, 0], tile)"),
    (RS, "copy-offset-k", [("T.copy(x[bx, k * block_n], tile)", "T.copy(x[bx, k], tile)")], "copy-start",
     "T.copy(x[bx, k], tile)"),
    # 起点越过一个列块：N <= block_n 的行整块落在行尾之外（sim 模式的 C 目标编译不了），更长的行和不对
    (RS, "copy-past-block", [("T.copy(x[bx, k * block_n], tile)", "T.copy(x[bx, k + block_n], tile)")], "copy-start",
     "T.copy(x[bx, k + block_n], tile)"),
    (RS, "copy-swapped", [("T.copy(x[bx, k * block_n], tile)", "T.copy(x[k * block_n, bx], tile)")], "wrong-row",
     "x[k * block_n, bx]"),
    # 写下一行：最后一块写到 y 之外，越界（指向那次写）
    (RS, "write-next-row", [("y[bx] = acc[i]", "y[bx + 1] = acc[i]")], "out-of-bounds", "y[bx + 1]"),
    (RS, "accumulate-two", [("            for i in tile_loop(1):\n                acc[i] += part[i]\n",
                             "            for i in tile_loop(2):\n                acc[i] += part[i]\n")],
     "out-of-bounds", "tile_loop(2)"),
    (RS, "write-index-i", [("y[bx] = acc[i]", "y[i] = acc[i]")], "wrong-row", "y[i] = acc[i]"),
    (RS, "write-part", [("y[bx] = acc[i]", "y[bx] = part[i]")], "write-part", "y[bx] = part[i]"),
    (RS, "serial-minus-one", [("T.Serial(n_tiles)", "T.Serial(n_tiles - 1)")], "serial-bound",
     "T.Serial(n_tiles - 1)"),
    (RS, "serial-rows", [("T.Serial(n_tiles)", "T.Serial(M)")], "serial-bound", "T.Serial(M)"),
    (RS, "acc-float16", [("acc = alloc([1], T.float32)", "acc = alloc([1], T.float16)")], "dtype",
     "acc = alloc([1], T.float16)"),
    (RS, "y-float16", [("y = T.empty([M], T.float32)", "y = T.empty([M], T.float16)")], "dtype", "T.float16"),
    # 值都对、输出却是 float64：报告输出的 dtype
    (RS, "y-float64", [("y = T.empty([M], T.float32)", "y = T.empty([M], T.float64)")], "dtype", "T.float64"),
    (RS, "tile-int32", [("tile = alloc([1, block_n], T.float32)", "tile = alloc([1, block_n], T.int32)")], "dtype",
     "T.int32"),
    (RS, "parallel-in-sim",
     [("for i in tile_loop(1):\n                acc[i]", "for i in T.Parallel(1):\n                acc[i]")],
     "cpu-target", "T.Parallel(1)"),
    (RS, "fragment-in-sim", [("alloc = T.alloc_local if cpu else T.alloc_fragment", "alloc = T.alloc_fragment")],
     "cpu-target", "alloc = T.alloc_fragment"),
    (RS, "signature-no-cpu", [("threads: int = 128, cpu: bool = False", "threads: int = 128")], "signature",
     "def reduce_sum_kernel("),
    (RS, "part-clear-false", [("T.reduce_sum(tile, part, dim=1)", "T.reduce_sum(tile, part, dim=1, clear=False)")],
     "reduce-clear", "clear=False"),
    (RS, "reduce-into-acc", [(ACCUMULATE, "            T.reduce_sum(tile, acc, dim=1)\n")], "reduce-into-acc",
     "T.reduce_sum(tile, acc, dim=1)"),
    (RS, "accumulate-after-loop",
     [("            for i in tile_loop(1):\n                acc[i] += part[i]\n",
       "        for i in tile_loop(1):\n            acc[i] += part[i]\n")], "accumulate-outside", "acc[i] += part[i]"),
    (RS, "reduce-max", [("T.reduce_sum(tile, part, dim=1)", "T.reduce_max(tile, part, dim=1)")], "wrong-reduce",
     "T.reduce_max"),
    (RS, "misspelt-ceildiv", [("T.ceildiv(N, block_n)", "T.ceil_div(N, block_n)")], "unknown-api", "T.ceil_div"),
    (RS, "copy-one-argument", [("T.copy(x[bx, k * block_n], tile)", "T.copy(x[bx, k * block_n])")], "api-args",
     "T.copy(x[bx, k * block_n])"),
    # ---- softmax-tilelang
    (SM, "mask-fill-zero", [(MASK, "T.if_then_else(j < N, tile[i, j], 0.0)")], "mask-other", "T.if_then_else"),
    (SM, "mask-block-n", [(MASK, "T.if_then_else(j < block_n, tile[i, j], NEG_INF)")], "mask-other",
     "j < block_n"),
    (SM, "mask-le", [(MASK, "T.if_then_else(j <= N, tile[i, j], NEG_INF)")], "mask-bound", "j <= N"),
    (SM, "mask-loop-to-n", [("for i, j in tile_loop(1, block_n):\n            tile[i, j] = T.if_then_else",
                             "for i, j in tile_loop(1, N):\n            tile[i, j] = T.if_then_else")],
     "loop-bound", "tile_loop(1, N)"),
    # 块内的循环多走一列：越界写进 C 栈上相邻的变量，答案常常照样对；编译之前按循环的范围证出越界，指向那个循环
    (SM, "exp-loop-past-tile", [(EXP_LOOP, EXP_LOOP.replace("tile_loop(1, block_n)", "tile_loop(1, block_n + 1)"))],
     "out-of-bounds", "tile_loop(1, block_n + 1)"),
    (SM, "divide-loop-past-tile",
     [("for i, j in tile_loop(1, block_n):\n            tile[i, j] = tile[i, j] / row_sum[i]",
       "for i, j in tile_loop(1, block_n + 1):\n            tile[i, j] = tile[i, j] / row_sum[i]")],
     "out-of-bounds", "tile_loop(1, block_n + 1)"),
    (SM, "exp-loop-to-n", [(EXP_LOOP, EXP_LOOP.replace("tile_loop(1, block_n)", "tile_loop(1, N)"))], "loop-bound",
     "tile_loop(1, N)"),
    # 先求最大值、后换成 -inf：只在整行是很大的负数的行上错（补的 0 成了最大值）
    (SM, "mask-after-max", [("        for i, j in tile_loop(1, block_n):\n            tile[i, j] = " + MASK + "\n"
                             "        T.reduce_max(tile, row_max, dim=1)\n",
                             "        T.reduce_max(tile, row_max, dim=1)\n        for i, j in tile_loop(1, block_n):\n"
                             "            tile[i, j] = " + MASK + "\n")], "mask-order", "T.if_then_else"),
    (SM, "max-clear-false", [("T.reduce_max(tile, row_max, dim=1)", "T.reduce_max(tile, row_max, dim=1, clear=False)")],
     "max-no-clear", "clear=False"),
    (SM, "max-by-sum", [("T.reduce_max(tile, row_max, dim=1)", "T.reduce_sum(tile, row_max, dim=1)")],
     "no-reduce-max", "T.reduce_sum(tile, row_max, dim=1)"),
    (SM, "exp2", [("T.exp(tile[i, j] - row_max[i])", "T.exp2(tile[i, j] - row_max[i])")], "exp2", "T.exp2("),
    (SM, "max-outside-exp", [("T.exp(tile[i, j] - row_max[i])", "T.exp(tile[i, j]) - row_max[i]")], "exp-arg",
     "T.exp(tile[i, j]) - row_max[i]"),
    (SM, "divide-by-max", [("tile[i, j] / row_sum[i]", "tile[i, j] / row_max[i]")], "wrong-denominator",
     "/ row_max[i]"),
    (SM, "multiply-by-sum", [("tile[i, j] / row_sum[i]", "tile[i, j] * row_sum[i]")], "wrong-denominator",
     "* row_sum[i]"),
    (SM, "no-reduce-sum", [(SUM, "")], "wrong-denominator", "/ row_sum[i]"),
    (SM, "sum-before-exp", [(EXP_LOOP + SUM, SUM + EXP_LOOP)], "sum-order", "T.reduce_sum(tile, row_sum, dim=1)"),
    (SM, "read-row-0", [("T.copy(x[bx, 0], tile)", "T.copy(x[0, 0], tile)")], "wrong-row", "x[0, 0]"),
    (SM, "write-swapped", [("T.copy(tile, y[bx, 0])", "T.copy(tile, y[0, bx])")], "wrong-row", "y[0, bx]"),
    (SM, "no-read", [("        T.copy(x[bx, 0], tile)\n", "")], "not-read", "tile = alloc("),
    (SM, "max-dim0", [("T.reduce_max(tile, row_max, dim=1)", "T.reduce_max(tile, row_max, dim=0)")], "reduce-dim",
     "dim=0"),
    (SM, "tile-1d", [("tile = alloc([1, block_n], T.float32)", "tile = alloc([block_n], T.float32)")], "buffer-dims",
     "tile[i, j]"),
    (SM, "sum-float16", [("row_sum = alloc([1], T.float32)", "row_sum = alloc([1], T.float16)")], "dtype",
     "T.float16"),
    (SM, "y-float16", [("y = T.empty([M, N], T.float32)", "y = T.empty([M, N], T.float16)")], "dtype", "T.float16"),
    (SM, "y-float64", [("y = T.empty([M, N], T.float32)", "y = T.empty([M, N], T.float64)")], "dtype", "T.float64"),
    (SM, "y-wider-than-n", [("y = T.empty([M, N], T.float32)", "y = T.empty([M, block_n], T.float32)")],
     "wrong-shape", "T.empty([M, block_n]"),
    (SM, "y-one-dimensional", [("y = T.empty([M, N], T.float32)", "y = T.empty([M * N], T.float32)"),
                               ("T.copy(tile, y[bx, 0])", "T.copy(tile, y[bx * N])")], "copy-shape", "y[bx * N]"),
    (SM, "parallel-in-sim", [(EXP_LOOP, EXP_LOOP.replace("tile_loop(1, block_n)", "T.Parallel(1, block_n)"))],
     "cpu-target", "T.Parallel(1, block_n)"),
    (SM, "extra-parameter", [("def softmax_kernel(x, block_n", "def softmax_kernel(x, y, block_n")], "signature",
     "def softmax_kernel(x, y,"),
    # 多了一个有默认值的参数不妨碍启动：内核里 T.copy 的参数不对，诊断说 T.copy，不说参数改过了
    (SM, "extra-default-parameter-and-copy-one-argument",
     [("cpu: bool = False):", "cpu: bool = False, scale: float = 1.0):"),
      ("T.copy(x[bx, 0], tile)", "T.copy(x[bx, 0])")],
     "api-args", "T.copy(x[bx, 0])"),
    (SM, "signature-no-cpu", [("threads: int = 128, cpu: bool = False", "threads: int = 128")], "signature",
     "def softmax_kernel("),
]

#: 看起来像错误、其实是对的写法：评分必须让它们通过（源码里的检查不能误报）
CORRECT_VARIANTS = [
    (RS, "reduce-into-acc-no-clear", [(ACCUMULATE, "            T.reduce_sum(tile, acc, dim=1, clear=False)\n")]),
    (RS, "fill-zero", [("T.clear(acc)", "T.fill(acc, 0)")]),
    (RS, "serial-with-step", [("for k in T.Serial(n_tiles):\n            T.copy(x[bx, k * block_n], tile)",
                               "for k in T.Serial(0, N, block_n):\n            T.copy(x[bx, k], tile)")]),
    (RS, "write-without-loop",
     [("        for i in tile_loop(1):\n            y[bx] = acc[i]", "        y[bx] = acc[0]")]),
    (RS, "manual-ceildiv", [("n_tiles = T.ceildiv(N, block_n)", "n_tiles = (N + block_n - 1) // block_n")]),
    (RS, "block-100", [("block_n: int = 256", "block_n: int = 100")]),
    (SM, "exp2-log2e", [("T.exp(tile[i, j] - row_max[i])",
                         "T.exp2((tile[i, j] - row_max[i]) * 1.4426950408889634)")]),
    (SM, "fill-then-clear-false",
     [("T.reduce_max(tile, row_max, dim=1)",
       "T.fill(row_max, NEG_INF)\n        T.reduce_max(tile, row_max, dim=1, clear=False)")]),
    (SM, "row-max-index-0", [("T.exp(tile[i, j] - row_max[i])", "T.exp(tile[i, j] - row_max[0])")]),
    (SM, "inline-infinity", [(MASK, "T.if_then_else(j < N, tile[i, j], -T.infinity(T.float32))")]),
]


@pytest.mark.parametrize("name,mistake,edits,key,line_text", [pytest.param(*m, id=f"{m[0]}-{m[1]}") for m in MISTAKES])
def test_tilelang_mistake_gets_its_hint(name, mistake, edits, key, line_text, tmp_path):
    dest, text = edited_solution(name, tmp_path, edits, mistake)
    result = labs.check(name, dest, bench=False)
    if key == "cpu-target" and rl.MODE == "gpu":
        # T.Parallel 与 T.alloc_fragment 正是 GPU 上的写法，只有 sim 模式的 C 目标不接受：gpu 模式下照样通过
        assert result.passed, result.report()
        return
    assert not result.passed
    keys = result.hint_keys()
    assert keys and keys[0] == key, result.report()
    hint = result.hints[0]
    assert hint.line is not None, result.report()
    assert line_text in text.splitlines()[hint.line - 1], result.report()
    assert f"{hint.file}:{hint.line}" in result.report()
    assert hint.fix, result.report()


@pytest.mark.parametrize("name,variant,edits", [pytest.param(*v, id=f"{v[0]}-{v[1]}") for v in CORRECT_VARIANTS])
def test_tilelang_correct_variant_passes(name, variant, edits, tmp_path):
    dest, text = edited_solution(name, tmp_path, edits, variant)
    result = labs.check(name, dest, bench=False)
    if variant == "block-100" and rl.MODE == "gpu":
        # sim 模式的 C 目标是串行的，块宽随意；GPU 上 T.reduce_sum 要把 100 列分给 128 个线程，TileLang 排不出布局：
        # 诊断说块宽与线程数配不上，指向 block_n
        assert not result.passed and result.hint_keys()[0] == "block-threads", result.report()
        assert "block_n: int = 100" in text.splitlines()[result.hints[0].line - 1], result.report()
        return
    assert result.passed, result.report()


def test_softmax_tilelang_has_far_negative_rows():
    """整行是很大的负数的用例：最大值里混进补的 0 的错误只在这样的行上出错（exp 全部下溢，0 / 0）。"""
    cases = labs.get(SM).cases("sim")
    assert any(c.kind == "far-negative" and c.shape[1] & (c.shape[1] - 1) for c in cases)
    assert [c.kind for c in cases].index("far-negative") < [c.kind for c in cases].index("error")


def test_compiler_errors_stay_out_of_the_terminal(tmp_path, capfd):
    """生成的 C 代码编译失败时（输出写成 float16），编译器几十行的模板报错不印到终端（每个用例一遍），
    诊断里只说没能编译，不带临时文件与安装目录的路径。"""
    edit = ("y = T.empty([M, N], T.float32)", "y = T.empty([M, N], T.float16)")
    dest, _ = edited_solution(SM, tmp_path, [edit], "y-float16")
    result = labs.check(SM, dest, bench=False)
    err = capfd.readouterr().err
    assert "error:" not in err and ".cpp" not in err, err
    report = result.report()
    assert result.hint_keys()[0] == "dtype", report
    assert "g++" not in report and "/tmp" not in report and "site-packages" not in report, report


@pytest.mark.parametrize("mistake,key", [("no-normalize", "no-normalize"), ("exp2", "exp2"),
                                         ("divide-by-max", "wrong-denominator"), ("pad-all", "mask-other"),
                                         ("pad-3", "mask-bound")])
def test_softmax_tilelang_diagnosis_of_the_large_gpu_case(mistake, key):
    """gpu 模式的「大形状」用例（1000 x 5000，整行补到 8192 列）上的诊断：由公式解出行尾之外留下了几个补的 0，
    不逐个 k 重算整块的 softmax（逐个试 3192 个 k 要半个小时，评分看起来像卡住了）；只看前 64 个出错的行。"""
    import math
    from pathlib import Path

    import torch

    from reduction_lab.labs.grading import Case, compare, softmax_tolerance
    from reduction_lab.labs.softmax_tilelang import SoftmaxTileLang

    from planted import SOLUTIONS

    text = (Path(SOLUTIONS) / SM / "softmax.py").read_text(encoding="utf-8")
    x = torch.randn(1000, 5000, generator=torch.Generator().manual_seed(0))
    xd = x.double()
    m = xd.max(dim=1, keepdim=True).values
    pad = {"pad-all": 8192 - 5000, "pad-3": 3}.get(mistake)
    out = {"no-normalize": torch.exp(xd - m), "exp2": torch.softmax(xd * math.log(2.0), dim=1),
           "divide-by-max": torch.exp(xd - m) / m}.get(mistake)
    if pad is not None:
        out = torch.softmax(torch.cat([xd, torch.zeros(1000, pad, dtype=torch.float64)], dim=1), dim=1)[:, :5000]
    out = out.float()
    ref = torch.softmax(xd, dim=1)
    atol, rtol = softmax_tolerance(torch.float32)
    ok, _, bad = compare(out, ref, atol, rtol)
    assert not ok
    hint = SoftmaxTileLang().wrong_answer(Case("大形状", (1000, 5000)), x, out, ref, bad,
                                          {"text": text, "path": Path("softmax.py")})
    assert hint.key == key, hint.cause
    if pad == 3:
        assert "多留了 3 个补的 0" in hint.cause


def test_softmax_tilelang_kept_zeros_on_far_negative_rows():
    """整行是很大的负数、行尾之外留着补的 0：最大值成了 0，exp 全部下溢，输出全是 0——认不出留了几个 0，
    按整段没换成 -inf 诊断（与逐个 k 试的结果相同：k = block_n - N 时就已经相符）；输出不是 0 时认不出。"""
    import torch

    from reduction_lab.labs.softmax_tilelang import SoftmaxTileLang

    x = -1000.0 - 10.0 * torch.rand(3, 300, dtype=torch.float64)
    assert SoftmaxTileLang._padded_zeros(x, torch.zeros(3, 300, dtype=torch.float64), 212) == 212
    assert SoftmaxTileLang._padded_zeros(x, torch.full((3, 300), 1 / 300, dtype=torch.float64), 212) is None


def test_gpu_mode_outputs_of_two_mistakes_get_their_hints():
    """gpu 模式下两个错误的输出与 sim 模式不同（在 H100 上看到的样子），诊断仍指向同一处：
    * reduce-sum：T.copy(x[bx, k + block_n], tile) 在短行上每一块都在行外（补 0，和是 0），结果像「一块也没加」，
      源码里的起点要先说；
    * softmax：删掉 T.reduce_sum 之后 row_sum 没有初值，gpu 模式下寄存器里的旧值让整行成了 NaN，看不出与 softmax
      成比例，要从源码看出缺了 T.reduce_sum。"""
    from pathlib import Path

    import torch

    from reduction_lab.labs.grading import Case, Mismatch, compare, row_sum_tolerance, softmax_tolerance
    from reduction_lab.labs.reduce_sum_tilelang import ReduceSumTileLang
    from reduction_lab.labs.softmax_tilelang import SoftmaxTileLang

    from planted import SOLUTIONS

    text = (Path(SOLUTIONS) / RS / "reduce_sum.py").read_text(encoding="utf-8")
    text = text.replace("T.copy(x[bx, k * block_n], tile)", "T.copy(x[bx, k + block_n], tile)")
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(0))
    ref = x.double().sum(1)
    got = torch.zeros(16)                          # 每一块都在行外：和是 0
    atol, rtol = row_sum_tolerance(x)
    hint = ReduceSumTileLang().wrong_answer(Mismatch(x, got, ref, list(range(16)), atol, rtol),
                                            {"text": text, "block_n": 128})
    assert hint.key == "copy-start", hint.cause
    assert "k + block_n" in hint.cause

    text = (Path(SOLUTIONS) / SM / "softmax.py").read_text(encoding="utf-8").replace(SUM, "")
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x.double(), dim=1)
    out = torch.full((16, 128), float("nan"))
    atol, rtol = softmax_tolerance(torch.float32)
    ok, _, bad = compare(out, ref, atol, rtol)
    assert not ok
    hint = SoftmaxTileLang().wrong_answer(Case("课程用例", (16, 128)), x, out, ref, bad,
                                          {"text": text, "path": Path("softmax.py")})
    assert hint.key == "wrong-denominator", hint.cause
    assert "没有 T.reduce_sum" in hint.cause
