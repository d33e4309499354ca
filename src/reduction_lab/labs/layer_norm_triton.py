"""实验 layer-norm-triton：比一个块还长的行上的 LayerNorm（Triton）。一行一个 program，按 BLOCK_SIZE 分块循环：
第 1 遍逐块求出 (n_b, mean_b, m2_b)，用 Chan 的公式并进运行状态 (n, mean, m2)（Welford 的分块形式），第 2 遍归一化；
x 每行读两遍，每行另写出 mean 与 rstd。

讲义：docs/triton/normalization.md（「行比一个块长：Welford与Chan的合并」）、docs/numerics.md；
实验页：docs/labs/layer-norm.ipynb。运行方式同 :mod:`.softmax_triton`（sim 模式下每个用例都在
:func:`reduction_lab.count_memory` 里运行；gpu 模式下「访存计数」用例在解释器里，其余在 GPU 上）。

诊断靠一个 float64 的模型 :func:`model`：它按内核的步骤逐块合并，几个开关各对应一种常见错误（最后一块按
BLOCK_SIZE 计数、被屏蔽的车道没有清零、合并时少了 delta² 项、除以 N - 1、eps 加在 sqrt 外面、没乘权重、
没加偏置），与学习者的输出比较，说出最可能的原因。另有：一遍公式 E[x²] - E[x]² 在均值很大时的灾难性抵消、
全相同的一行没有 eps 得到 NaN、读了三遍、mean / rstd 没写或写错、越界、没写、结果被舍入成半精度。
"""

from __future__ import annotations

import math

import torch

from . import cases as C
from .core import load_learner_module, time_against
from .grading import Case, Hint, find_line, first_bad_row, never_written, rows_text, softmax_tolerance
from .online_softmax import block_for
from .softmax_triton import SoftmaxTriton, low_precision_hint

FILE = "layer_norm.py"
EPS = 1e-5
#: float32 的单位舍入
U32 = 2.0 ** -24


def params_for(n: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """评分用的权重与偏置：w = 1 + 0.5 z，b = 0.3 z'（固定种子），不是全 1 和全 0：没乘权重、没加偏置都看得出来。"""
    g = torch.Generator().manual_seed(n)
    w = 1.0 + 0.5 * torch.randn(n, generator=g)
    b = 0.3 * torch.randn(n, generator=g)
    return w.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def model(x, w, b, block: int, eps: float = EPS, *, count_masked: bool = False, zero_masked: bool = True,
          cross: bool = True, ddof: int = 0, eps_inside: bool = True, weight: bool = True, bias: bool = True):
    """内核的 float64 模型：按 ``block`` 列一块，逐块求 (n_b, mean_b, m2_b) 并用 Chan 的公式合并；返回 (y, mean, rstd)。
    开关各对应一种错误：``count_masked``：每块都按 BLOCK_SIZE 计数（最后一块不满时多算了被屏蔽的车道）；
    ``zero_masked=False``：被屏蔽的车道没有清零，每个给 m2_b 加上 mean_b²；``cross=False``：合并时少了
    delta² n n_b / n_ab；``ddof=1``：方差除以 N - 1；``eps_inside=False``：rstd = 1 / (sqrt(var) + eps)；
    ``weight`` / ``bias``：乘不乘权重、加不加偏置。"""
    x = x.detach().cpu().double()
    w, b = w.detach().cpu().double(), b.detach().cpu().double()
    M, N = x.shape
    n = torch.zeros(M, dtype=torch.float64)
    mean = torch.zeros(M, dtype=torch.float64)
    m2 = torch.zeros(M, dtype=torch.float64)
    for start in range(0, N, block):
        t = x[:, start:start + block]
        valid = t.shape[1]
        n_b = float(block if count_masked else valid)
        mean_b = t.sum(dim=1) / n_b
        m2_b = ((t - mean_b[:, None]) ** 2).sum(dim=1)
        if not zero_masked:
            m2_b = m2_b + (block - valid) * mean_b ** 2
        n_ab = n + n_b
        delta = mean_b - mean
        mean = mean + delta * n_b / n_ab
        m2 = m2 + m2_b + (delta * delta * n * n_b / n_ab if cross else 0.0)
        n = n_ab
    var = m2 / (n - ddof) if ddof else m2 / n
    rstd = 1.0 / torch.sqrt(var + eps) if eps_inside else 1.0 / (torch.sqrt(var) + eps)
    y = (x - mean[:, None]) * rstd[:, None]
    if weight:
        y = y * w
    if bias:
        y = y + b
    return y, mean, rstd


def row_stats(x: torch.Tensor, eps: float = EPS):
    """每行的 (mean, rstd)，float64；方差是有偏的，与 torch.nn.functional.layer_norm 相同。"""
    x = x.detach().cpu().double()
    mean = x.mean(dim=1)
    return mean, 1.0 / torch.sqrt(((x - mean[:, None]) ** 2).mean(dim=1) + eps)


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = EPS):
    """float64 的参考：(y, mean, rstd)。"""
    mean, rstd = row_stats(x, eps)
    xd = x.detach().cpu().double()
    return (xd - mean[:, None]) * rstd[:, None] * w.detach().cpu().double() + b.detach().cpu().double(), mean, rstd


def condition(x: torch.Tensor) -> torch.Tensor:
    """每行的条件数 (|mean| + std) / std（std 为 0 的行记 1）：float32 里求 mean 的舍入（约 u |mean|）被 rstd
    放大成 y 的误差 u |mean| / std。均值 1e4、标准差 1 的行，正确的 float32 内核也只有约 3 位有效数字。"""
    x = x.detach().cpu().double()
    mean, std = x.mean(dim=1), x.std(dim=1, correction=0)
    return torch.where(std > 0, (mean.abs() + std) / std.clamp_min(1e-300), torch.ones_like(std))


def mistakes(N: int, block: int):
    """常见错误的目录：(诊断, :func:`model` 的开关, 原因, 出错的行的正则, 改法)；只列出在 N 列、块宽 block 的行上
    看得出来的那些。y、mean 与 rstd 的诊断共用它（有的错误只改了 rstd，y 还在容差之内）。"""
    partial = N % block != 0             # 最后一块不满：只有这时被屏蔽的车道才参与
    out = [
        ("count-masked", partial, dict(count_masked=True), "最后一块的元素数按 BLOCK_SIZE 算了：被屏蔽的车道也计入了 n",
         r"\bn_b\s*=", f"TODO(1)：n_b = tl.minimum(n_cols - start, BLOCK_SIZE)：最后一块只有 {N % block} 个元素"
         f"（N = {N}，BLOCK_SIZE = {block}），均值要除以真正的元素数，n 最后要等于 N。"),
        ("mask-m2", partial, dict(zero_masked=False),
         "被屏蔽的车道没有从 (x - mean_b)² 里去掉：它们读入 0，x - mean_b 在那里是 -mean_b", r"\bd\s*=|m2_b\s*=",
         "TODO(2)：d = tl.where(mask, x - mean_b, 0.0)，再求 tl.sum(d * d)：读入 0 不改变 sum(x)，减去均值之后就不是 0 了"
         "（RMSNorm 不减均值，所以那里 other=0.0 就够了）。"),
        ("no-cross-term", N > block, dict(cross=False), "合并时少了 delta² n n_b / n_ab：两块的均值不同，平方和要补上这一项",
         r"\bm2\s*\+=|\bm2\s*=\s*m2\b", "TODO(3)：m2 += m2_b + delta * delta * n * n_b / n_ab（用更新 n 之前的 n）。"
         "每块的 m2_b 是相对它自己的均值算的，合并后要换成相对共同的均值。"),
        ("unbiased", N > 1, dict(ddof=1), "方差除以了 N - 1（无偏估计）；LayerNorm 用有偏方差，除以 N",
         r"m2\s*/", "TODO(4)：var = m2 / n：与 torch.nn.functional.layer_norm 相同，是有偏方差。"),
        ("no-eps", True, dict(eps=0.0), "rstd 里没有加 eps：方差很小的行被放大得太多，方差为 0 的行得到 inf", r"tl\.r?sqrt",
         "TODO(4)：rstd = 1 / sqrt(var + eps)：eps 限制了方差很小（或为 0）的行的放大倍数。"),
        ("eps-outside", True, dict(eps_inside=False), "eps 加在了 sqrt 外面：rstd 应为 1 / sqrt(var + eps)", r"tl\.r?sqrt",
         "TODO(4)：rstd = 1.0 / tl.sqrt(m2 / n + eps)（或 tl.rsqrt(m2 / n + eps)）；方差比 eps 小的行差得最多。"),
        ("no-weight", True, dict(weight=False), "没有乘权重 w", r"\by\s*=",
         "TODO(5)：y = (x - mean) * rstd * w + b；w 用 tl.load(w_ptr + cols, mask=mask, other=0.0) 读入。"),
        ("no-bias", True, dict(bias=False), "没有加偏置 b", r"\by\s*=",
         "TODO(5)：y = (x - mean) * rstd * w + b；b 用 tl.load(b_ptr + cols, mask=mask, other=0.0) 读入。"),
    ]
    return [(key, flags, cause, where, fix) for key, applies, flags, cause, where, fix in out if applies]


class LayerNormTriton(SoftmaxTriton):
    name = "layer-norm-triton"
    title = "Triton：长行的LayerNorm（Welford与Chan的合并）"
    lecture = "triton/normalization.md"
    notebook = "labs/layer-norm.ipynb"
    files = (FILE,)
    kernel = "layer_norm_kernel"
    #: 第 1 遍读 x，第 2 遍读 x、w、b
    passes = 4

    def cases(self, mode):
        cases = [
            Case("跨好几块的行", (4, 1000)),
            Case("最后一块只有 1 列", (3, 129)),
            Case("正好两块", (2, 256)),
            Case("一行一列", (1, 1)),
            Case("有一行全相同", (3, 300), kind="constant-row"),
            Case("方差比 eps 还小", (3, 300), kind="tiny-var"),
            Case("均值很大、方差很小", (4, 1000), kind="offset"),
            Case("行距大于 N 的视图", (5, 300), kind="row-stride"),
            Case("访存计数", (4, 1000), kind="memory"),
        ]
        if mode == "gpu":
            cases += [Case("长行", (64, 100000), gpu_only=True),
                      Case("bfloat16 长行", (8, 50000), torch.bfloat16, gpu_only=True),
                      Case("float16", (16, 3000), torch.float16, gpu_only=True)]
        return cases + C.error_cases(torch.int32)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "layer_norm_triton", ("layer_norm", self.kernel))
        params = {}       # 同一个 (N, dtype, 设备) 的权重与偏置只造一次：计时里不含在主机上生成它们的时间
        stats = {}        # 最近一次调用写出的 mean 与 rstd（评分前填满 NaN：没写的看得出来）

        def op(x, dim=-1, out=None):
            key = (x.shape[-1], x.dtype if x.is_floating_point() else torch.float32, x.device)
            if key not in params:
                params[key] = params_for(*key)
            M = x.shape[0] if x.dim() == 2 else 1
            stats["mean"] = torch.full((M,), float("nan"), device=x.device)
            stats["rstd"] = torch.full((M,), float("nan"), device=x.device)
            w, b = params[key]
            return module.layer_norm(x, w, b, EPS, dim=dim, out=out, mean=stats["mean"], rstd=stats["rstd"])

        return {"module": module, "op": op, "stats": stats, "path": paths[FILE], "text": paths[FILE].read_text("utf-8")}

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        return reference(x, *params_for(x.shape[1], x.dtype, "cpu"))[0]

    def check_other_outputs(self, x, impl):
        h = self.stats_hint(x, impl)
        return None if h is None else ("mean / rstd 不对", h)

    def expected_counts(self, M, N):
        return self.passes * M * N, M * N + 2 * M

    def tolerance(self, x: torch.Tensor):
        """逐元素的 (atol, rtol)：atol 每行一个，64 u cond max|w|（:func:`condition`），rtol 同 softmax（输出的 dtype）。"""
        _, rtol = softmax_tolerance(x.dtype)
        w, _ = params_for(x.shape[1], x.dtype, "cpu")
        atol = 64 * U32 * condition(x) * w.double().abs().max() + 1e-9
        return atol[:, None], rtol

    def stats_hint(self, x, impl) -> Hint | None:
        """y 对了，再核对写进 mean_ptr / rstd_ptr 的每行一个数。"""
        text = impl["text"]
        ref_mean, ref_rstd = row_stats(x)          # y 已经对了：只要每行的两个数，不必再算一遍 y
        w, b = params_for(x.shape[1], x.dtype, "cpu")
        block = block_for("gpu" if x.is_cuda else "sim")
        got_mean = impl["stats"]["mean"].detach().cpu().double()
        got_rstd = impl["stats"]["rstd"].detach().cpu().double()
        cond = condition(x)
        tol = 64 * U32 * cond
        for name, got, ref, within in (
                ("mean", got_mean, ref_mean, (got_mean - ref_mean).abs() <= tol * (ref_mean.abs() + 1e-30) + 1e-6),
                ("rstd", got_rstd, ref_rstd, (got_rstd / ref_rstd - 1).abs() <= tol)):
            if bool(within.all()):
                continue
            bad = torch.nonzero(~within).flatten().tolist()
            r = bad[0]
            detail = f"第 {r} 行：{name} 应为 {ref[r].item():.6g}，得到 {got[r].item():.6g}（不对的行：{rows_text(bad)}）"
            line = find_line(text, rf"tl\.store\(\s*{name}_ptr", lang="py")
            if torch.isnan(got[bad]).all() and line is None:
                return Hint(f"{name}-not-written", f"{name}_ptr 没有写：y 对了，但每行的 {name} 没有存下来（反向要用）",
                            FILE, find_line(text, r"rstd\s*=", lang="py"), detail,
                            f"TODO(4)：循环之后 tl.store({name}_ptr + row, {name})：每行一个数，不带 mask。")
            for key, flags, cause, where, fix in mistakes(x.shape[1], block):
                if "weight" in flags or "bias" in flags:
                    continue
                cand = model(x, w, b, block, **flags)[1 if name == "mean" else 2]
                close = ((got - cand).abs() <= tol * cand.abs() + (1e-6 if name == "mean" else 0.0)) \
                    & (torch.isfinite(cand) | (got == cand))          # inf 与任何有限值都不算接近
                if bool(close[bad].all()):
                    return Hint(key, cause, FILE, find_line(text, where, lang="py"), detail, fix)
            if name == "rstd" and torch.allclose(got[bad], (1.0 / ref[bad]) ** 2, rtol=1e-3):
                cause, fix = "rstd_ptr 里写的是方差 var，不是 1 / sqrt(var + eps)", "写 rstd = 1 / sqrt(var + eps)，y 用的也是它。"
            elif name == "rstd" and torch.allclose(got[bad], 1.0 / ref[bad], rtol=1e-3):
                cause, fix = "rstd_ptr 里写的是标准差 sqrt(var + eps)，不是它的倒数", "写 rstd = 1 / sqrt(var + eps)。"
            else:
                cause, fix = f"写进 {name}_ptr 的值不对（y 是对的）", f"写的应是第 1 遍循环结束时的 {name}，第 2 遍用的也是它。"
            return Hint(f"{name}-wrong", cause, FILE, line, detail, fix)
        return None

    def memory_hint(self, rep, M, N, impl) -> Hint:
        text = impl["text"]
        want_r, want_w = self.passes * M * N, M * N + 2 * M
        detail = (f"count_memory()：读了 {rep.elements_loaded} 个元素、写了 {rep.elements_stored} 个，应为读 4MN = {want_r}"
                  f"（x 两遍，w、b 每行一份）、写 MN + 2M = {want_w}（y，每行的 mean 与 rstd）")
        if rep.elements_loaded > want_r:
            loads = [i for i, ln in enumerate(text.splitlines(), 1) if "tl.load" in ln.split("#")[0]]
            return Hint("memory-loads", f"读得比 4MN 多：x 每行读了不止两遍", FILE, loads[0] if loads else None, detail,
                        "不要先用一遍求均值、再用一遍求方差：第 1 遍每读一块就求出这一块的 (n_b, mean_b, m2_b)，"
                        "用 Chan 的公式并进运行状态，均值和方差一遍就都有了；第 2 遍归一化。")
        if rep.elements_stored > want_w:
            return Hint("memory-stores", "写得比 MN + 2M 多：写了被屏蔽的车道、写了不止一次，或 mean / rstd 写了整块",
                        FILE, find_line(text, r"tl\.store", lang="py"), detail,
                        "y 的 tl.store 带上 mask；mean 与 rstd 每行只写一个数。")
        return Hint("memory-count", "读写的元素比 4MN / MN + 2M 少", FILE, None, detail, "每行的每个元素都要读到、写到。")

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()
        M, N = x.shape
        w, b = params_for(N, x.dtype, "cpu")
        first = first_bad_row(ref, got, bad)
        g = got[bad]
        block = block_for("gpu" if x.is_cuda else "sim")
        if torch.isnan(got).all() and bool(never_written(impl["op"], x, x.shape).all()):
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN，再运行一次也没有写）", FILE,
                        find_line(text, r"tl\.store\(\s*y_", lang="py") or find_line(text, r"^\s*y\s*=", lang="py"), first,
                        "TODO(5)：第 2 遍把 y tl.store 回 y_row + cols，带上 mask，先 .to(y_ptr.dtype.element_ty)。")
        flat = [r for r in bad if float(x[r].detach().cpu().double().std(correction=0)) == 0.0]   # 方差为 0 的行
        if flat and not torch.isfinite(got[flat]).all() and not (N == 1 and find_line(text, r"\bn\s*-\s*1\b", lang="py")):
            return Hint("no-eps", "全相同的一行得到了 NaN：方差是 0，1 / sqrt(0) = inf，(x - mean) x inf = 0 x inf = NaN",
                        FILE, find_line(text, r"tl\.r?sqrt", lang="py"), first,
                        "TODO(4)：rstd = 1 / sqrt(var + eps)：eps 让方差为 0 的行也有有限的 rstd，这一行的输出就是 b。")
        atol = self.tolerance(x)[0][bad]           # 这个用例自己的 atol：均值大的行上正确的内核也有 u |mean| / std 的误差

        def same(cand):
            c = cand.double()[bad]
            return bool(((g - c).abs() <= atol + 1e-6 + 1e-4 * c.abs()).all())

        xs = x.detach().cpu()
        for key, flags, cause, where, fix in mistakes(N, block):
            if same(model(xs, w, b, block, **flags)[0]):
                return Hint(key, cause, FILE, find_line(text, where, lang="py"), first, fix)
        if N == 1 and bool(torch.isnan(g).all()) and find_line(text, r"\bn\s*-\s*1\b", lang="py"):
            return Hint("unbiased", "只有一列的行得到了 NaN：方差除以了 N - 1 = 0", FILE,
                        find_line(text, r"\bn\s*-\s*1\b", lang="py"), first,
                        "TODO(4)：var = m2 / n：LayerNorm 用有偏方差，除以 N（与 torch.nn.functional.layer_norm 相同）。")
        if case.kind == "row-stride" and same(reference(C.read_with_stride_n(case, x.dtype), w, b)[0]):
            return Hint("row-stride", f"行距用成了 N：x 是更宽的矩阵的一部分（行距 {x.stride(0)}，N = {N}），第 1 行以后读错了位置",
                        FILE, find_line(text, r"\*\s*n_cols", lang="py") or find_line(text, r"tl\.load", lang="py"), first,
                        "行的起点是 row * x_row_stride，不是 row * n_cols：x 的行之间可能有空隙；写出用 y_row_stride。")
        h = low_precision_hint(x, g, ref[bad], FILE, text, first)
        if h is not None:
            return h
        cond = condition(x)
        if float(cond[bad].max()) > 100:
            r = max(bad, key=lambda i: float(cond[i]))
            row = xs[r].double()
            sq = max(row.mean().item() ** 2, 2.0 ** -126)
            return Hint("cancellation", f"均值比标准差大得多（约 {float(cond[r]):.0f} 倍）的行算错了：方差成了两个很大的数之差，"
                        "灾难性抵消", FILE,
                        find_line(text, r"\bx\s*\*\s*x\b", lang="py") or find_line(text, r"m2_b\s*=", lang="py"),
                        first + f"\n第 {r} 行的均值约 {row.mean().item():.6g}，方差约 {row.var(correction=0).item():.3g}；"
                        f"float32 在 x² ≈ {sq:.3g} 附近相邻两数相差 {2.0 ** (math.floor(math.log2(sq)) - 23):.3g}",
                        "不要用 E[x²] - E[x]²（sum(x * x) / n - mean * mean）：块内先求 mean_b，再求 (x - mean_b)² 的和"
                        "（TODO(2)），块与块之间用 Chan 的公式合并（TODO(3)）。见讲义的「一遍还是两遍：方差的数值问题」。")
        return Hint("wrong-layer-norm", "LayerNorm 的值不对", FILE, None, first,
                    "对照讲义：块内求 mean_b 与 m2_b，Chan 的公式合并，var = m2 / N，rstd = 1 / sqrt(var + eps)，"
                    "y = (x - mean) * rstd * w + b；检查行偏移 row * x_row_stride。")

    def padded_width(self, N: int, x: torch.Tensor) -> int:
        b = block_for("gpu" if x.is_cuda else "sim")
        return -(-N // b) * b

    def bench(self, impl):
        M, N = 256, 65536                     # 长行：一行 256 KiB
        x = torch.randn(M, N, device="cuda")
        w, b = params_for(N, torch.float32, "cuda")
        out = torch.empty_like(x)
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out),
                 "F.layer_norm": lambda: torch.nn.functional.layer_norm(x, (N,), w, b, EPS)}
        return time_against(calls, 2 * x.numel() * 4, x, f"{M}x{N} float32，你的内核读 2 遍；GB/s 按读 1 遍 + 写 1 遍计")
