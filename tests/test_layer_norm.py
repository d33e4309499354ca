"""LayerNorm / RMSNorm 的 Triton 内核（页面：docs/triton/normalization.md）。

参考实现都是 float64 的 torch（F.layer_norm / F.rms_norm 与它们的 autograd），输入与被测内核相同
（半精度输入先按半精度取整，再转成 float64）。容差写在每个测试里。
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import reduction_lab as rl
from reduction_lab.triton_kernels import layer_norm as ln

DEV = rl.DEVICE


def _inputs(m, n, dtype=torch.float32, seed=0, offset=0.0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (offset + scale * torch.randn(m, n, generator=g, dtype=torch.float64)).to(dtype)
    w = (1 + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    b = (0.5 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    return x.to(DEV), w.to(DEV), b.to(DEV)


def _ref_ln(x, w, b, eps=1e-5):
    return F.layer_norm(x.double(), (x.shape[1],), w.double(), None if b is None else b.double(), eps)


def _ref_rms(x, w, eps=1e-6):
    return F.rms_norm(x.double(), (x.shape[1],), w.double(), eps)


def _close(got, ref, atol, rtol):
    err = (got.double() - ref).abs()
    bad = ~(err <= atol + rtol * ref.abs())
    assert not bool(bad.any()), f"{int(bad.sum())} 个元素超出容差，最大误差 {float(err.max()):.3g}"


# ---------------------------------------------------------------- 前向：形状、课程版与生产版

# (1, 1)：一行一列，方差为 0；(1, 777) M = 1；(37, 300) 每个 program 多行；(3, 20000) N > MAX_FUSED_COLS
SHAPES = [(1, 1), (1, 777), (37, 300), (3, 20000)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_matches_float64(shape):
    x, w, b = _inputs(*shape, offset=3.0, scale=2.0)
    y, mean, rstd = ln.layer_norm_forward(x, w, b)
    _close(y, _ref_ln(x, w, b), 1e-5, 1e-5)
    x64 = x.double()
    _close(mean, x64.mean(1), 1e-5, 1e-6)
    _close(rstd, 1 / torch.sqrt(x64.var(1, unbiased=False) + 1e-5), 1e-5, 1e-5)
    y, rstd = ln.rms_norm_forward(x, w)
    _close(y, _ref_rms(x, w), 1e-5, 1e-5)
    y = ln.layer_norm_forward(x, w, None)[0]               # 没有偏置
    _close(y, _ref_ln(x, w, None), 1e-5, 1e-5)


@pytest.mark.parametrize("block", [64, 256, 1024])
def test_course_kernels_any_block_size(block):
    """课程版：每块的 (count, mean, M2) 用 Chan 的公式合并；最后一块不满（1000 = 15 * 64 + 40）。"""
    x, w, b = _inputs(5, 1000, offset=-7.0, scale=3.0, seed=1)
    y, mean, rstd = ln.welford_layer_norm(x, w, b, block_size=block)
    _close(y, _ref_ln(x, w, b), 1e-5, 1e-5)
    _close(mean, x.double().mean(1), 1e-5, 1e-6)
    y, rstd = ln.looped_rms_norm(x, w, block_size=block)
    _close(y, _ref_rms(x, w), 1e-5, 1e-5)


def test_large_mean_welford_vs_naive_variance():
    """均值 1e4、标准差 1 的 float32 行：E[x^2] - E[x]^2 损失全部有效数字，Welford / 两遍法不会。"""
    x, w, b = _inputs(4, 1000, offset=1e4, seed=2)
    ref = _ref_ln(x, w, b)
    for y in (ln.welford_layer_norm(x, w, b, block_size=128)[0], ln.layer_norm_forward(x, w, b)[0]):
        assert float((y.double() - ref).abs().max()) < 5e-3
    # 朴素的一遍公式（float32）：误差大到没有意义
    m = x.mean(1, keepdim=True)
    var = (x * x).mean(1, keepdim=True) - m * m
    naive = (x - m) / torch.sqrt(var.clamp_min(0) + 1e-5) * w + b
    err = (naive.double() - ref).abs().max()
    assert not bool(err < 0.1), float(err)


def test_constant_rows_and_tiny_scale():
    """方差为 0 的行：y = b；方差远小于 eps 的行：y ≈ (x - mean) / sqrt(eps) * w + b。"""
    x, w, b = _inputs(3, 500, seed=3)
    x[0] = 0.1
    x[1] = -2.5
    x[2] = 1e-6 * x[2]
    for y in (ln.layer_norm_forward(x, w, b)[0], ln.welford_layer_norm(x, w, b, block_size=128)[0]):
        _close(y, _ref_ln(x, w, b), 1e-5, 1e-5)
        assert torch.allclose(y[1], b, atol=0, rtol=0)         # -2.5 的和精确，x - mean 精确为 0


def test_fp16_near_max_does_not_overflow():
    """float16 的 6e4 平方后超过 float16 的上限 65504：内核按 float32 计算，不会溢出。"""
    n = 300
    x = torch.full((2, n), 6e4, dtype=torch.float16, device=DEV)
    x[1, ::2] = -6e4
    w = torch.ones(n, dtype=torch.float16, device=DEV)
    y, _ = ln.rms_norm_forward(x, w)
    assert torch.isfinite(y).all()
    _close(y, _ref_rms(x, w), 1e-3, 1e-3)
    y = ln.layer_norm_forward(x, w, torch.zeros_like(w))[0]
    _close(y, _ref_ln(x, w, torch.zeros_like(w)), 2e-3, 2e-3)


# 半精度：与 float64 参考（同一份取整后的输入）相比，误差不超过 atol = rtol = 该 dtype 的 eps
# （最后一次取整到半精度只差半个 ulp；float32 的中间计算误差小得多）
HALF = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_forward(dtype):
    eps_d = torch.finfo(dtype).eps
    x, w, b = _inputs(33, 700, dtype=dtype, offset=1.0, scale=2.0, seed=4)
    y, mean, rstd = ln.layer_norm_forward(x, w, b)
    assert y.dtype == dtype and mean.dtype == torch.float32 and rstd.dtype == torch.float32
    _close(y, _ref_ln(x, w, b), eps_d, eps_d)
    y, _ = ln.rms_norm_forward(x, w)
    _close(y, _ref_rms(x, w), eps_d, eps_d)


# 反向内核的三种做法，块都比行短或正好（sim 模式下行也短）：(37, 1000) 的 "tiles" 是 4 个列块、
# 最后一块 1000 - 3 * 256 = 232 列；"stream" 每次 2 行，37 行的最后一块只有 1 行
STRATEGY_CONFIGS = {
    "row": None,                                            # 默认配置：N <= 4096 时整行放进一个块
    "tiles": ln.BackwardConfig("tiles", 1, 256, 4, 1),
    "stream": ln.BackwardConfig("stream", 2, 256, 4, 1),
}


@pytest.mark.parametrize("strategy", list(STRATEGY_CONFIGS))
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_backward(dtype, strategy):
    """dx：atol = eps * max|dx_ref|、rtol = eps；dW、dB（float32 权重）：float32 累加 M 行，rtol = 1e-4。"""
    cfg = STRATEGY_CONFIGS[strategy]
    eps_d = torch.finfo(dtype).eps
    x, _, _ = _inputs(37, 1000, dtype=dtype, seed=5)
    _, w, b = _inputs(37, 1000, seed=6)                     # float32 的权重、半精度的激活（混合精度的常见做法）
    dy = torch.randn(37, 1000, generator=torch.Generator().manual_seed(7)).to(dtype).to(DEV)
    for rms in (False, True):
        xr = x.double().requires_grad_()
        wr = w.double().requires_grad_()
        br = b.double().requires_grad_()
        ref = _ref_rms(xr, wr) if rms else _ref_ln(xr, wr, br)
        ref.backward(dy.double())
        if rms:
            y, rstd = ln.rms_norm_forward(x, w)
            dx, dw = ln.rms_norm_backward(dy, x, w, rstd, programs=3, config=cfg)
        else:
            y, mean, rstd = ln.layer_norm_forward(x, w, b)
            dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, programs=3, config=cfg)
            _close(db, br.grad, 1e-4, 1e-4)
        assert dx.dtype == dtype and dw.dtype == torch.float32
        _close(dx, xr.grad, eps_d * float(xr.grad.abs().max()), eps_d)
        _close(dw, wr.grad, 1e-4 * float(wr.grad.abs().max()), 1e-4)


# ---------------------------------------------------------------- 反向与 autograd

def test_gradcheck_float64():
    """torch.autograd.gradcheck：数值雅可比（有限差分）与内核的反向一致。形状小：每个元素扰动两次。"""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 7, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    w = torch.randn(7, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    b = torch.randn(7, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, b: rl.layer_norm(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: rl.layer_norm(x, w), (x, w))
    assert torch.autograd.gradcheck(lambda x, w: rl.rms_norm(x, w), (x, w))


@pytest.mark.parametrize("strategy", ["tiles", "stream"])
def test_gradcheck_float64_tiled_strategies(strategy, monkeypatch):
    """同样的 gradcheck，反向换成按列分块的两种做法：(3, 10) 分成 3 个 4 列的块（最后一块 2 列），
    每次 2 行、P = 2 个 program（3 行分成 2 + 1）。"""
    cfg = ln.BackwardConfig(strategy, 2, 4, 4, 1)
    monkeypatch.setattr(ln, "backward_config", lambda m, n, dtype=None: cfg)
    monkeypatch.setattr(ln, "backward_programs", lambda m, c: 2)
    g = torch.Generator().manual_seed(18)
    x = torch.randn(3, 10, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    w = torch.randn(10, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    b = torch.randn(10, generator=g, dtype=torch.float64).to(DEV).requires_grad_()
    # fast_mode：雅可比乘随机向量再比较，解释器里只要几次反向
    assert torch.autograd.gradcheck(lambda x, w, b: rl.layer_norm(x, w, b), (x, w, b), fast_mode=True)
    assert torch.autograd.gradcheck(lambda x, w: rl.rms_norm(x, w), (x, w), fast_mode=True)


# (37, 300)：M 不是 program 数的倍数、N 不是 2 的幂；(5, 1000)：行少列多；(130, 64)：行多列少
BACKWARD_SHAPES = [(37, 300), (5, 1000), (130, 64)]
BACKWARD_CONFIGS = [
    None,                                                   # 默认："row"
    ln.BackwardConfig("tiles", 1, 128, 4, 1),               # 列块数 3、8、1；ACC_TILES = 4、8、1
    ln.BackwardConfig("tiles", 4, 64, 4, 1),
    ln.BackwardConfig("stream", 1, 128, 4, 1),
    ln.BackwardConfig("stream", 8, 256, 4, 1),              # 一块 8 行：(5, 1000) 只有一块，部分和不读
]


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("cfg", BACKWARD_CONFIGS, ids=lambda c: "default" if c is None else
                         f"{c.strategy}-{c.block_m}x{c.block_n}")
@pytest.mark.parametrize("shape", BACKWARD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_backward_strategies_match_autograd(shape, cfg, dtype, rms):
    """每种做法、每种形状，P = 3 个 program（上限）：dx、dW、dB 与 float64 的 torch autograd 一致。
    float64 输入按 float64 计算，容差 1e-10；float32 的容差 1e-5。"""
    m, n = shape
    x, w, b = _inputs(m, n, dtype=dtype, seed=15, offset=1.5, scale=2.0)
    dy = torch.randn(m, n, generator=torch.Generator().manual_seed(16), dtype=torch.float64).to(dtype).to(DEV)
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    (_ref_rms(xr, wr) if rms else _ref_ln(xr, wr, br)).backward(dy.double())
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    if rms:
        _, rstd = ln.rms_norm_forward(x, w)
        dx, dw = ln.rms_norm_backward(dy, x, w, rstd, programs=3, config=cfg)
    else:
        _, mean, rstd = ln.layer_norm_forward(x, w, b)
        dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, programs=3, config=cfg)
        assert db.dtype == dtype
        _close(db, br.grad, tol, tol)
    assert dx.dtype == dw.dtype == dtype
    _close(dx, xr.grad, tol * float(xr.grad.abs().max()), tol)
    _close(dw, wr.grad, tol * float(wr.grad.abs().max()), tol)


@pytest.mark.parametrize("strategy", ["row", "tiles", "stream"])
def test_backward_single_row_and_single_column(strategy):
    """M = 1（一个 program、一块行）与 N = 1（方差为 0：xhat = 0，dx = 0，dW = 0，dB = dy 的列和）。"""
    for m, n in ((1, 777), (6, 1)):
        bn = 1024 if strategy == "row" else 128
        cfg = ln.BackwardConfig(strategy, 2, bn, 4, 1)
        x, w, b = _inputs(m, n, dtype=torch.float64, seed=19)
        dy = torch.randn(m, n, generator=torch.Generator().manual_seed(20), dtype=torch.float64).to(DEV)
        xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
        _ref_ln(xr, wr, br).backward(dy)
        _, mean, rstd = ln.layer_norm_forward(x, w, b)
        dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, config=cfg)
        for got, ref in ((dx, xr.grad), (dw, wr.grad), (db, br.grad)):
            _close(got, ref, 1e-10, 1e-10)
        if n == 1:
            assert not bool(dx.any()) and not bool(dw.any())


def test_backward_default_configs():
    """默认配置随 N 变化："row" 到 4096 列（float64 到 2048），"tiles" 到 16384 列，更长的行 "stream"。"""
    assert ln.backward_config(65536, 1024).strategy == "row"
    assert ln.backward_config(65536, 1024).block_m == 4
    assert ln.backward_config(16384, 4096).strategy == "row"
    assert ln.backward_config(16384, 4097).strategy == "tiles"
    cfg = ln.backward_config(4096, 16384, torch.bfloat16)
    assert cfg.strategy == "tiles" and ln._acc_tiles(cfg, 16384) * cfg.block_n == 16384
    assert ln.backward_config(4096, 16385).strategy == "stream"
    assert ln.backward_config(64, 4096, torch.float64).strategy == "stream"
    assert ln.backward_config(64, 2048, torch.float64).strategy == "row"


@pytest.mark.parametrize("programs", [None, 1, 3, 10])
def test_backward_partials_any_program_count(programs):
    """反向内核的 P 个 program 各写一行 dW、dB 部分和，col_sum 再相加：结果与 P 无关（在容差内）。
    (37, 1000)：每个行块 4 行，10 个行块；P = 3 时各 program 处理 4、3、3 个行块。"""
    x, w, b = _inputs(37, 1000, dtype=torch.float64, seed=9)
    dy = torch.randn(37, 1000, generator=torch.Generator().manual_seed(10), dtype=torch.float64).to(DEV)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    _ref_ln(xr, wr, br).backward(dy)
    _, mean, rstd = ln.layer_norm_forward(x, w, b)
    dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, programs=programs)
    for got, ref in ((dx, xr.grad), (dw, wr.grad), (db, br.grad)):
        _close(got, ref, 1e-10, 1e-10)


def test_autograd_with_broadcast_grad_and_deterministic_dw():
    """y.sum() 的上游梯度是步长为 0 的广播张量；dW 两次运行逐位相同（部分和按固定顺序相加，没有原子加）。"""
    x, w, b = _inputs(20, 300, seed=11)
    grads = []
    for _ in range(2):
        wr, br = w.clone().requires_grad_(), b.clone().requires_grad_()
        xr = x.clone().requires_grad_()
        rl.layer_norm(xr, wr, br).sum().backward()
        grads.append((xr.grad, wr.grad, br.grad))
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    _ref_ln(xr, wr, br).sum().backward()
    _close(grads[0][0], xr.grad, 1e-4, 1e-4)
    _close(grads[0][1], wr.grad, 1e-4, 1e-5)
    _close(grads[0][2], br.grad, 0, 0)                     # dB = 每列 20 个 1 之和：精确
    for a, c in zip(*grads):
        assert torch.equal(a, c)
    with pytest.raises(RuntimeError):                       # 只能一阶：二阶导数明确报错
        xr = x.clone().requires_grad_()
        (gx,) = torch.autograd.grad(rl.layer_norm(xr, w, b).pow(2).sum(), xr, create_graph=True)
        gx.sum().backward()


# ---------------------------------------------------------------- 访存计数

def test_memory_counts():
    """生产版前向：x 读一次（MN），w、b 每个 program 读一次；写 y（MN）与每行的 mean、rstd。
    反向：x、dy 各读一次，w 每个 program 一次，mean、rstd 每行一次；写 dx 与 P 行部分和，col_sum 再读它们。"""
    m, n = 37, 300                                          # BLOCK_N = 512，BLOCK_M = 8：5 个 program
    x, w, b = _inputs(m, n, seed=12)
    with rl.count_memory() as r:
        _, mean, rstd = ln.layer_norm_forward(x, w, b)
    assert (r.launches, r.programs) == (1, 5)
    assert r.elements_loaded == m * n + 5 * 2 * n
    assert r.elements_stored == m * n + 2 * m
    dy = torch.ones_like(x)
    with rl.count_memory() as r:
        ln.layer_norm_backward(dy, x, w, mean, rstd, programs=2)
    kernel, dw_sum, db_sum = r.records
    assert kernel.elements_loaded == 2 * m * n + 2 * n + 2 * m
    assert kernel.elements_stored == m * n + 2 * 2 * n
    assert dw_sum.elements_loaded == db_sum.elements_loaded == 2 * n
    assert dw_sum.elements_stored == n
    with rl.count_memory() as r:                            # 课程版：x 读两遍，w、b 每行读一次
        ln.welford_layer_norm(x, w, b, block_size=128)
    assert r.elements_loaded == 2 * m * n + m * 2 * n
    assert r.elements_stored == m * n + 2 * m


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("strategy", ["tiles", "stream"])
def test_memory_counts_tiled_backward(strategy, rms):
    """按列分块的两种做法，(37, 300)、每次 BLOCK_M = 2 行、P = 3 个 program（各 14、14、9 行，共 C = 20 块行）：
    x、dy 每块行读两遍（第一遍求归约，第二遍写 dx；GPU 上第二遍应当命中缓存），w 每块行每遍一次，
    mean、rstd 每行一次；写 dx 一次。部分和："tiles" 在寄存器里，最后写一行；"stream" 每块行读改写一次，
    每个 program 的第一块行只写不读。"""
    m, n, bm, p, chunks = 37, 300, 2, 3, 7 + 7 + 5
    cfg = ln.BackwardConfig(strategy, bm, 128, 4, 1)
    x, w, b = _inputs(m, n, seed=17)
    dy = torch.randn(m, n, generator=torch.Generator().manual_seed(17)).to(DEV)
    if rms:
        _, rstd = ln.rms_norm_forward(x, w)
        stats, parts = 1, 1
        call = lambda: ln.rms_norm_backward(dy, x, w, rstd, programs=p, config=cfg)  # noqa: E731
    else:
        _, mean, rstd = ln.layer_norm_forward(x, w, b)
        stats, parts = 2, 2
        call = lambda: ln.layer_norm_backward(dy, x, w, mean, rstd, programs=p, config=cfg)  # noqa: E731
    with rl.count_memory() as r:
        call()
    kernel = r.records[0]
    assert (kernel.kernel, kernel.programs) == ("norm_backward_kernel", p)
    assert kernel.loaded_by_arg["x_ptr"] == kernel.loaded_by_arg["dy_ptr"] == 2 * m * n
    assert kernel.loaded_by_arg["w_ptr"] == 2 * chunks * n
    assert kernel.stored_by_arg["dx_ptr"] == m * n
    if strategy == "tiles":
        part_loads, part_stores = 0, parts * p * n
    else:
        part_loads, part_stores = parts * (chunks - p) * n, parts * chunks * n
    assert kernel.elements_loaded == 4 * m * n + 2 * chunks * n + stats * m + part_loads
    assert kernel.elements_stored == m * n + part_stores
    assert [rec.elements_loaded for rec in r.records[1:]] == [p * n] * parts     # col_sum 读 P 行部分和


# ---------------------------------------------------------------- 参数检查：在任何启动之前

def _bad_cases():
    x, w, b = _inputs(4, 8)
    return [
        (lambda: ln.layer_norm_forward(x[0], w, b), ValueError, "二维"),
        (lambda: ln.layer_norm_forward(x, w[:7], b), ValueError, "长度应为"),
        (lambda: ln.layer_norm_forward(x, w, b[:5]), ValueError, "长度应为"),
        (lambda: ln.layer_norm_forward(x.t(), w[:4], None), ValueError, "最后一维必须连续"),
        (lambda: ln.layer_norm_forward(x.int(), w, b), TypeError, "dtype"),
        (lambda: ln.layer_norm_forward(x, w, b, eps=-1.0), ValueError, "eps"),
        (lambda: ln.layer_norm_forward(x, w, b, eps="1e-5"), TypeError, "eps"),
        (lambda: ln.rms_norm_forward(x, w.reshape(2, 4)), ValueError, "一维"),
        (lambda: ln.welford_layer_norm(x, w, b, block_size=100), ValueError, "2 的幂"),
        (lambda: ln.welford_layer_norm(x, w, None), TypeError, "bias"),
        (lambda: ln.layer_norm_backward(x[:2], x, w, x[:, 0].contiguous(), x[:, 0].contiguous()),
         ValueError, "dy 的形状"),
        (lambda: ln.layer_norm_backward(x, x, w, x[:2, 0].contiguous(), x[:, 0].contiguous()),
         ValueError, "mean"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].double()), TypeError, "dtype"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), programs=0), ValueError, "programs"),
        (lambda: ln.layer_norm_backward(x, x, w, x[:, 0].contiguous(), x[:, 0].contiguous(), has_bias=1),
         TypeError, "has_bias"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), config=("tiles", 1, 4, 4, 1)),
         TypeError, "BackwardConfig"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), config=ln.BackwardConfig("atomic", 1, 4, 4)),
         ValueError, "strategy"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), config=ln.BackwardConfig("row", 1, 4, 4)),
         ValueError, "block_n 至少"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), config=ln.BackwardConfig("tiles", 1, 6, 4)),
         ValueError, "2 的幂"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(), config=ln.BackwardConfig("stream", 1, 4, 3)),
         ValueError, "num_warps"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(),
                                      config=ln.BackwardConfig("stream", 1, 4, 4, 0)), ValueError, "programs_per_sm"),
        (lambda: ln.rms_norm_backward(x, x, w, x[:, 0].contiguous(),
                                      config=ln.BackwardConfig("tiles", 2048, 1024, 4)),
         ValueError, "block_m \\* block_n"),
    ]


def test_bad_arguments_refused_before_any_launch():
    for call, exc, words in _bad_cases():
        with rl.count_memory() as r:
            with pytest.raises(exc, match=words):
                call()
        assert r.launches == 0, words


@pytest.mark.parametrize("rms", [False, True], ids=["layer_norm", "rms_norm"])
@pytest.mark.parametrize("programs", [None, 2])
def test_backward_long_rows(rms, programs):
    """N > TILES_MAX_COLS：默认配置是 "stream"（部分和放在部分和矩阵里），与 float64 的 autograd 一致。
    N = 20000 = 9 * 2048 + 1568：最后一个列块不满；M = 9：P = 2 时两个 program 各 5、4 行。"""
    m, n = 9, 20000
    assert ln.backward_config(m, n).strategy == "stream"
    x, w, b = _inputs(m, n, seed=13, offset=2.0)
    dy = torch.randn(m, n, generator=torch.Generator().manual_seed(14)).to(DEV)
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    (_ref_rms(xr, wr) if rms else _ref_ln(xr, wr, br)).backward(dy.double())
    if rms:
        _, rstd = ln.rms_norm_forward(x, w)
        dx, dw = ln.rms_norm_backward(dy, x, w, rstd, programs=programs)
    else:
        _, mean, rstd = ln.layer_norm_forward(x, w, b)
        dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, programs=programs)
        _close(db, br.grad, 1e-5, 1e-5)
    _close(dx, xr.grad, 1e-5, 1e-4)
    _close(dw, wr.grad, 1e-5, 1e-4)


@pytest.mark.slow
def test_kernels_compile_for_sm90():
    """编译模式（不解释执行）下每个内核都能编译成 sm_90 的 cubin：只在编译时出现的错误 CPU 上也能发现。"""
    script = Path(__file__).with_name("norm_compile_check.py")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok ") == 23, r.stdout
    # 反向内核的默认配置（N = 1024 … 65536，float32 / bfloat16，LayerNorm / RMSNorm）：寄存器不溢出
    # （STACK > 0 就是溢出到了本地内存；改动之前 N = 16384 的反向有 520 字节，实测只有拷贝带宽的 10%）
    # Triton 3.6（H200 那台机器）给 RMSNorm、N = 4096 的一个 "row" 配置报 24 字节的栈；H200 的扫描里同一配置
    # 的 n_spills 是 0，并且是最快的候选（docs/data/h200_norm_bwd_sweep.json），所以上限定为 32 字节，而不是 0
    bwd = [line for line in r.stdout.splitlines() if " bwd " in line]
    assert len(bwd) == 17, r.stdout
    stacks = [int(line.rsplit(" stack ", 1)[1]) for line in bwd]
    assert max(stacks) <= 32, "\n".join(bwd)


# ---------------------------------------------------------------- 基准测试套件 layer-norm / rms-norm

def test_bench_suites_validate_then_time(monkeypatch):
    from reduction_lab.bench import harness, norm, report

    suites = ["layer-norm", "rms-norm", "layer-norm-bwd", "rms-norm-bwd"]
    doc = harness.run(suites, ns=[100, 300], total_elems=1200, impls=["triton", "torch"],
                      iters=1, warmup=0, progress=False, log=lambda s: None)
    for suite in suites:
        rec = doc["suites"][suite]
        assert [(e["M"], e["N"]) for e in rec["shapes"]] == [(12, 100), (4, 300)]
        for e in rec["shapes"]:
            assert e["bytes"] == (3 if suite.endswith("-bwd") else 2) * e["M"] * e["N"] * 4
            assert {n: r["status"] for n, r in e["results"].items()} == {"triton": "ok", "torch": "ok"}
        assert "| 300 | 4 |" in report.render_table(doc, suite)
    # 一个偏差 1e-3 的实现：验证阶段停下，不计时
    bad = norm.ours("layer-norm")
    monkeypatch.setattr(norm, "ours", lambda suite: (lambda x, w, b: bad(x, w, b) + 1e-3))
    with pytest.raises(harness.ValidationError, match="layer-norm/triton"):
        harness.run_suite("layer-norm", ns=[128], total_elems=256, impls=["triton"], progress=False,
                          log=lambda s: None)
    # 反向：dW 错了
    real = norm.backward_prepare

    def wrong(suite, how):
        def prepare(x):
            call = real(suite, how)(x)

            def broken():
                dx, dw, *rest = call()
                return (dx, dw - x[0], *rest)        # dW 多减了 x 的第一行

            return broken

        return prepare

    monkeypatch.setattr(norm, "backward_prepare", wrong)
    with pytest.raises(harness.ValidationError, match="rms-norm-bwd/triton"):
        harness.run_suite("rms-norm-bwd", ns=[128], total_elems=256, impls=["triton"], progress=False,
                          log=lambda s: None)


@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="需要 GPU：M * N > 2**31 的输入占 8.6 GB，解释器里太慢")
def test_int64_row_offsets_gpu():
    """行号乘行步长超过 2**31：int32 会回绕到矩阵以外。检查最后一行（融合内核、分块的课程内核、沿列求和、
    反向）。"""
    from reduction_lab.triton_kernels.col_sum import col_sum

    m, n = 65537, 32768                                     # m * n = 2**31 + 32768
    x = torch.zeros(m, n, device=DEV)
    x[-1] = torch.arange(n, device=DEV, dtype=torch.float32) % 7
    w, b = torch.ones(n, device=DEV), torch.zeros(n, device=DEV)
    y = ln.layer_norm_forward(x, w, b)[0]                   # N > MAX_FUSED_COLS：分块的 Welford 内核
    _close(y[-1], _ref_ln(x[-1:], w, b)[0], 1e-5, 1e-5)
    assert torch.equal(col_sum(x), x[-1])
    del y
    x2 = x.view(2 * m, n // 2)                              # N = 16384：整行放进寄存器的内核
    w2 = w[: n // 2]
    y, rstd = ln.rms_norm_forward(x2, w2)
    _close(y[-2:], _ref_rms(x2[-2:], w2), 1e-5, 1e-5)
    del y
    # 反向（N = 16384：默认 "tiles"，每个 program 连续的一段行）：dy = x2，只有最后两行不为 0，
    # 所以 dW 只来自这两行；dx 的最后两行与只含这两行的参考一致
    assert ln.backward_config(2 * m, n // 2).strategy == "tiles"
    dx, dw = ln.rms_norm_backward(x2, x2, w2, rstd)
    xr, wr = x2[-2:].double().requires_grad_(), w2.double().requires_grad_()
    _ref_rms(xr, wr).backward(x2[-2:].double())
    _close(dx[-2:], xr.grad, 1e-5, 1e-4)
    _close(dw, wr.grad, 1e-5, 1e-4)
    assert not bool(dx[:-2].any())


def test_backward_default_for_16bit_rows_follows_the_h200_sweep():
    """16 位输入、整行放进一个块时，默认每个 SM 一个 program：H200 的扫描（docs/data/h200_norm_bwd_sweep.json，
    scripts/gpu_norm_bwd_check.py）里它比每个 SM 两个快，float32 则相反或持平。"""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).resolve().parents[1] / "docs/data/h200_norm_bwd_sweep.json").read_text())
    for norm in ("layer_norm", "rms_norm"):
        rows = [r for r in doc["records"] if r["norm"] == norm and (r["M"], r["N"]) == (65536, 1024)
                and r["dtype"] == "bfloat16" and r["strategy"] == "row"]
        by_pps = {r["programs_per_sm"]: r["gbps"] for r in rows}
        assert by_pps[1] > by_pps[2], (norm, by_pps)
    cfg = ln.backward_config(65536, 1024, torch.bfloat16)
    assert (cfg.strategy, cfg.programs_per_sm) == ("row", 1)
    assert ln.backward_config(65536, 1024, torch.float32).programs_per_sm == 2
