"""实验 rms-norm-triton：RMSNorm，一行一个 program，整行只读一次、写一次（Triton）。

讲义：docs/triton/normalization.md（RMSNorm 一节）、docs/triton/masking.md；实验页：docs/labs/rms-norm.ipynb。
运行方式同 :mod:`.softmax_triton`：sim 模式下每个用例都在 :func:`reduction_lab.count_memory` 里运行（Triton 解释器 +
越界检查）；gpu 模式下「访存计数」用例同样在解释器里运行，其余用例在 GPU 上。

与 softmax 的对照是这个实验的重点：平方和里被屏蔽的车道要填 0，不是 -inf；均值除以 N，不是 BLOCK_SIZE。
诊断：填 -inf（整行变成 0）、除以 BLOCK_SIZE、没有除以 N、没有 eps（全 0 的行得到 NaN）、乘了 sqrt 而不是 1/sqrt、
没乘权重、结果被舍入成半精度、每行读了不止一遍、越界、没写。
"""

from __future__ import annotations

import torch

from . import cases as C
from .core import load_learner_module, time_against
from .grading import Hint, find_line, first_bad_row, never_written
from .softmax_triton import SoftmaxTriton, low_precision_hint

FILE = "rms_norm.py"
EPS = 1e-6


def weight_for(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """评分用的权重：1 + 0.5 z（固定种子），不是全 1：没乘权重的内核在每个用例上都看得出来。"""
    g = torch.Generator().manual_seed(n)
    return (1.0 + 0.5 * torch.randn(n, generator=g)).to(device=device, dtype=dtype)


def model(x: torch.Tensor, w: torch.Tensor, eps: float = EPS, denom: int | None = None, weight: bool = True,
          inverse: bool = True) -> torch.Tensor:
    """RMSNorm 在 float64 里的模型：``denom`` 是均值的分母（None：N；除以 BLOCK_SIZE 的错误就传 BLOCK_SIZE，
    没有除的错误传 1），``weight=False`` 不乘权重，``inverse=False`` 乘 sqrt 而不是 1/sqrt。"""
    x, w = x.double(), w.double()
    ms = (x * x).sum(dim=1, keepdim=True) / (x.shape[1] if denom is None else denom)
    r = torch.rsqrt(ms + eps) if inverse else torch.sqrt(ms + eps)
    return x * r * (w if weight else 1.0)


class RmsNormTriton(SoftmaxTriton):
    name = "rms-norm-triton"
    title = "Triton：RMSNorm与被屏蔽车道的填充值"
    lecture = "triton/normalization.md"
    notebook = "labs/rms-norm.ipynb"
    files = (FILE,)
    kernel = "rms_norm_kernel"
    #: x 读一遍，权重每个 program 读一遍
    passes = 2

    def cases(self, mode):
        return C.rms_norm_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "rms_norm_triton", ("rms_norm", self.kernel))

        weights = {}      # 同一个 (N, dtype, 设备) 的权重只造一次：计时里不含在主机上生成权重的时间

        def op(x, dim=-1, out=None):
            key = (x.shape[-1], x.dtype if x.is_floating_point() else torch.float32, x.device)
            if key not in weights:
                weights[key] = weight_for(*key)
            return module.rms_norm(x, weights[key], EPS, dim=dim, out=out)

        return {"module": module, "op": op, "path": paths[FILE], "text": paths[FILE].read_text("utf-8")}

    def reference(self, x):
        return model(x.cpu(), weight_for(x.shape[1], x.dtype, "cpu"))

    def memory_hint(self, rep, M, N, impl) -> Hint:
        text = impl["text"]
        detail = (f"count_memory()：读了 {rep.elements_loaded} 个元素、写了 {rep.elements_stored} 个，"
                  f"应为 x 的 MN = {M * N} 加上每行一份权重 MN = {M * N}，写 MN = {M * N}")
        if rep.elements_loaded > 2 * M * N:
            loads = [i for i, ln in enumerate(text.splitlines(), 1) if "tl.load" in ln.split("#")[0]]
            return Hint("memory-loads", f"读得比 2MN 多：x 每行读了不止一遍", FILE, loads[-1] if loads else None, detail,
                        "x 只 tl.load 一次，平方和与归一化都用寄存器里的这一份。")
        return super().memory_hint(rep, M, N, impl)

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()
        xs = x.detach().cpu()
        M, N = xs.shape
        w = weight_for(N, x.dtype, "cpu")
        first = first_bad_row(ref, got, bad)
        g = got[bad]
        P = self.padded_width(N, x)

        def same(cand):
            return bool(torch.allclose(g, cand.double()[bad], rtol=1e-4, atol=1e-6))

        if torch.isnan(got).all() and bool(never_written(impl["op"], x, x.shape).all()):
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN，再运行一次也没有写）", FILE,
                        find_line(text, r"tl\.store", lang="py"), first,
                        "把结果 tl.store 回输出：tl.store(指针, y.to(out_ptr.dtype.element_ty), mask=mask)。")
        if case.kind == "zero-row" and bad == [1] and not torch.isfinite(g).all():
            return Hint("no-eps", "全是 0 的一行得到了 NaN：均方是 0，1 / sqrt(0) = inf，0 x inf = NaN", FILE,
                        find_line(text, r"tl\.r?sqrt", lang="py"), first,
                        "TODO(4)：rstd = tl.rsqrt(ms + eps)：eps 让全 0（或很小）的行也有有限的 rstd，这一行的输出是 0。")
        if P > N and bool((g == 0).all()):
            return Hint("mask-other", "N 不是 2 的幂的行整行输出 0：被屏蔽的车道填了 -inf，平方和成了 inf，rstd = 0", FILE,
                        find_line(text, r"other\s*=\s*-", lang="py") or find_line(text, r"tl\.load", lang="py"), first,
                        "平方和里被屏蔽的车道填 0.0：0 的平方不改变和。softmax 填 -inf，是因为 -inf 不改变最大值、"
                        "exp(-inf) = 0 不改变分母；每种归约要填它自己的单位元。")
        checks = [
            ("mean-over-block", P > N, model(xs, w, denom=P), "均值除以了 BLOCK_SIZE（N 不是 2 的幂的行才错）",
             r"/\s*BLOCK_SIZE", f"TODO(3)：ms = tl.sum(x * x, axis=0) / n_cols：被屏蔽的 {P - N} 个车道（这里 N = {N}，"
             f"BLOCK_SIZE = {P}）不是数据，不能算进均值的分母。"),
            ("no-mean", True, model(xs, w, denom=1), "rstd 用的是平方和，没有除以 N", r"tl\.sum",
             "TODO(3)：均方 ms = tl.sum(x * x, axis=0) / n_cols。"),
            ("sqrt-not-rsqrt", True, model(xs, w, inverse=False), "乘的是 sqrt(ms + eps)，不是 1 / sqrt(ms + eps)",
             r"tl\.r?sqrt", "TODO(4)：rstd = tl.rsqrt(ms + eps)（或 1.0 / tl.sqrt(ms + eps)），y = x * rstd * w。"),
            ("no-weight", True, model(xs, w, weight=False), "没有乘权重 w", r"\by\s*=",
             "TODO(4)：y = x * rstd * w；w 用 tl.load(w_ptr + cols, mask=mask, other=0.0) 读入。"),
        ]
        if case.kind == "row-stride":
            checks.append(("row-stride", True, model(C.read_with_stride_n(case, x.dtype), w), f"行距用成了 N：x 是更宽的矩阵的一部分（行距 {x.stride(0)}，"
                           f"N = {N}），第 1 行以后读错了位置", r"\*\s*n_cols",
                           "行的起点是 row * in_row_stride，不是 row * n_cols：x 的行之间可能有空隙；写出用 out_row_stride。"))
        for key, applies, cand, cause, where, fix in checks:
            if applies and same(cand):
                return Hint(key, cause, FILE, find_line(text, where, lang="py"), first, fix)
        if not find_line(text, r"\b(\w+)\s*\*\s*\1\b|\*\*\s*2|tl\.math\.pow|tl\.pow", lang="py"):
            return Hint("mean-square", "均方没有平方：tl.sum(x) 有正有负，它是负数时 rsqrt 得到 NaN", FILE,
                        find_line(text, r"tl\.sum", lang="py"), first,
                        "TODO(3)：均方是 tl.sum(x * x, axis=0) / n_cols：先平方再求和，结果不会是负数。")
        h = low_precision_hint(x, g, ref[bad], FILE, text, first)
        if h is not None:
            return h
        return Hint("wrong-rms-norm", "RMSNorm 的值不对", FILE, None, first,
                    "对照讲义：平方和除以 N、加 eps、取 1/sqrt、乘以 x 与 w；检查行偏移 row * in_row_stride。")

    def bench(self, impl):
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        w = weight_for(N, torch.float32, "cuda")
        out = torch.empty_like(x)
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out),
                 "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (N,), w, EPS)}
        return time_against(calls, 2 * x.numel() * 4 + N * 4, x, f"{M}x{N} float32")
