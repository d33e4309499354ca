"""沿列求和的 Triton 内核（页面：docs/triton/column-sum.md）。

整数值的输入（每个部分和都是小于 2**24 的整数）让任何求和顺序都得到精确结果：这些测试要求逐位相等；
一般的浮点输入与 float64 参考比较，容差写在测试里。
"""

import pytest
import torch

import reduction_lab as rl
from reduction_lab.triton_kernels import col_sum as cs

DEV = rl.DEVICE


def _ints(m, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (m, n), generator=g).to(torch.float32).to(DEV)


# (1, 1)；M = 1；N = 1；行多列少；列数不是 BLOCK_N 的倍数（700 = 2 * 256 + 188）
SHAPES = [(1, 1), (1, 777), (777, 1), (2000, 3), (37, 700)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_exact_on_integer_inputs(shape):
    x = _ints(*shape)
    ref = x.double().sum(0)
    got = rl.col_sum(x)
    assert got.shape == (shape[1],) and got.dtype == torch.float32
    assert torch.equal(got.double(), ref)


@pytest.mark.parametrize("n_split", [1, 2, 3, 7])
@pytest.mark.parametrize("block_m", [1, 4, 64])
def test_any_split_and_block(n_split, block_m):
    """各段不重叠、覆盖所有行：任何段数、块高都得到同一个精确的和（段数多于行块时空段被去掉）。"""
    x = _ints(50, 300, seed=1)
    got = cs.col_sum(x, n_split=n_split, block_m=block_m, block_n=128)
    assert torch.equal(got.double(), x.double().sum(0))


def test_strided_rows_no_copy():
    """行步长大于列数的视图（大矩阵的左边几列）：按 stride(0) 寻址，不拷贝。"""
    big = _ints(40, 1000, seed=2)
    x = big[:, :300]
    assert x.stride() == (1000, 1)
    with rl.count_memory() as r:
        got = rl.col_sum(x, n_split=1)
    assert torch.equal(got.double(), x.double().sum(0))
    assert (r.launches, r.elements_loaded, r.elements_stored) == (1, 40 * 300, 300)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_accumulates_in_float32(dtype):
    """半精度输入按 float32 累加，只在最后取整一次：与 float64 参考相差不超过半个 ulp（rtol = eps / 2）。
    4096 个 1.0：在 float16 里逐个累加会停在 2048（bfloat16 停在 256），float32 累加得到精确的 4096。"""
    x = torch.ones(4096, 5, dtype=dtype, device=DEV)
    assert rl.col_sum(x).double().tolist() == [4096.0] * 5
    g = torch.Generator().manual_seed(3)
    x = torch.randn(300, 70, generator=g).to(dtype).to(DEV)
    ref = x.double().sum(0)
    got = rl.col_sum(x).double()
    assert bool(((got - ref).abs() <= torch.finfo(dtype).eps / 2 * ref.abs() + 1e-3).all())


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # 解释器里的 numpy 报告 3e38 * 10 溢出
def test_float64_and_extreme_values():
    """float64 按 float64 累加；inf、nan 与上溢照常传播（与 torch 相同）。"""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(100, 30, generator=g, dtype=torch.float64).to(DEV)
    assert torch.allclose(rl.col_sum(x), x.sum(0), rtol=1e-13, atol=1e-13)
    y = torch.zeros(10, 3, device=DEV)
    y[:, 0] = 3e38                                  # 列和超过 float32 的上限：inf，与 torch 相同
    y[:, 1] = float("nan")
    y[0, 2] = float("inf")
    got = rl.col_sum(y)
    assert got[0] == float("inf") and torch.isnan(got[1]) and got[2] == float("inf")


def test_memory_counts_one_and_two_launches():
    """每个元素读一次、每列写一次；切成 n_split 段时第一次启动写 n_split 行部分和，第二次启动读回它们。"""
    m, n = 600, 10
    x = _ints(m, n, seed=5)
    with rl.count_memory() as r:
        cs.col_sum(x, n_split=1)
    assert (r.launches, r.programs, r.elements_loaded, r.elements_stored) == (1, 1, m * n, n)
    with rl.count_memory() as r:
        cs.col_sum(x, n_split=4, block_m=16)           # 每段 160 行（BLOCK_M 的倍数）：4 段
    first, second = r.records
    assert (first.programs, first.elements_loaded, first.elements_stored) == (4, m * n, 4 * n)
    assert (second.programs, second.elements_loaded, second.elements_stored) == (1, 4 * n, n)


def test_deterministic_and_matches_torch_on_floats():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(500, 40, generator=g).to(DEV)
    a, b = cs.col_sum(x, n_split=5), cs.col_sum(x, n_split=5)
    assert torch.equal(a, b)                        # 固定的相加顺序：逐位相同
    assert torch.allclose(a.double(), x.double().sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("call, exc, words", [
    (lambda x: rl.col_sum(x[0]), ValueError, "二维"),
    (lambda x: rl.col_sum(x.t()), ValueError, "最后一维必须连续"),
    (lambda x: rl.col_sum(x.int()), TypeError, "dtype"),
    (lambda x: rl.col_sum(x[:0]), ValueError, "空张量"),
    (lambda x: rl.col_sum(x, n_split=0), ValueError, "n_split"),
    (lambda x: rl.col_sum(x, block_n=100), ValueError, "2 的幂"),
    (lambda x: rl.col_sum(x, block_m=2048, block_n=1024), ValueError, "上限"),
    (lambda x: rl.col_sum(x, num_warps=3), ValueError, "num_warps"),
    (lambda x: rl.col_sum(x, block_m=True), TypeError, "block_m"),
])
def test_bad_arguments_refused_before_any_launch(call, exc, words):
    x = _ints(8, 6)
    with rl.count_memory() as r:
        with pytest.raises(exc, match=words):
            call(x)
    assert r.launches == 0


def test_bench_suite_col_sum(monkeypatch):
    """基准套件 col-sum：先逐位验证，再计时；一个少加一行的实现在计时前被拦下。"""
    from reduction_lab.bench import harness, impls

    doc = harness.run(["col-sum"], ns=[100, 300], total_elems=1200, impls=["triton", "torch"], iters=1,
                      warmup=0, progress=False, log=lambda s: None)
    rec = doc["suites"]["col-sum"]
    assert [(e["M"], e["N"], e["bytes"]) for e in rec["shapes"]] == [(12, 100, 4800), (4, 300, 4800)]
    assert all(r["status"] == "ok" for e in rec["shapes"] for r in e["results"].values())
    wrong = impls.Impl("triton", "Triton", "ours", lambda x: (lambda: cs.col_sum(x[1:])))
    monkeypatch.setattr(harness, "impls_for", lambda suite: [wrong])
    with pytest.raises(harness.ValidationError, match="col-sum/triton"):
        harness.run_suite("col-sum", ns=[100], total_elems=1200, progress=False, log=lambda s: None)
