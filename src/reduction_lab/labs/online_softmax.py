"""实验 online-softmax：行长于一个块时的在线 softmax（Triton），每行读两遍、写一遍。

讲义：docs/triton/tiling.md；实验页：docs/labs/online-softmax.ipynb。评分沿用 :mod:`.softmax_triton`
（解释器里的越界检查、访存计数、掩码与溢出的诊断），另加「忘了重新缩放」的诊断。
"""

from __future__ import annotations

import torch

from . import cases as C
from .grading import Case, Hint, find_line, first_bad_row
from .softmax_triton import SoftmaxTriton

FILE = "online_softmax.py"


def block_for(mode: str) -> int:
    """骨架里的默认块宽：解释器 128（少几个 program 内的循环），GPU 1024。"""
    return 128 if mode == "sim" else 1024


def no_rescale(x: torch.Tensor, block: int) -> torch.Tensor:
    """忘了把旧的 d 乘以 exp(m_旧 - m_新) 时内核会算出的结果（float64）。和骨架一样用 m_ref（m_new 是 -inf 时
    取 0）作减数：一行的前几块全是 -inf 时这几块的贡献是 0，不是 NaN。"""
    x = x.detach().cpu().double()
    M, N = x.shape
    m = torch.full((M,), float("-inf"), dtype=torch.float64)
    d = torch.zeros(M, dtype=torch.float64)
    for start in range(0, N, block):
        t = x[:, start:start + block]
        m = torch.maximum(m, t.max(dim=1).values)
        m_ref = torch.where(m == float("-inf"), torch.zeros_like(m), m)
        d = d + torch.exp(t - m_ref[:, None]).sum(dim=1)
    return torch.exp(x - m[:, None]) / d[:, None]


class OnlineSoftmax(SoftmaxTriton):
    name = "online-softmax"
    title = "Triton：在线softmax（长行）"
    lecture = "triton/tiling.md"
    notebook = "labs/online-softmax.ipynb"
    files = (FILE,)
    kernel = "online_softmax_kernel"
    passes = 2

    def cases(self, mode):
        cases = [
            Case("跨 8 块的行", (4, 1000)),
            Case("最后一块只有 1 列", (3, 129)),
            Case("正好两块", (2, 256)),
            Case("一行一列", (1, 1)),
            Case("整行为负数", (4, 1000), kind="negative"),
            Case("数值很大", (4, 700), kind="large"),
            Case("前几块全是 -inf", (3, 3000), kind="inf-prefix"),
            Case("行距大于 N 的视图", (5, 300), kind="row-stride"),
            Case("访存计数", (4, 1000), kind="memory"),
        ]
        if mode == "gpu":
            cases += [Case("长行", (64, 100000), gpu_only=True), Case("很长的行", (8, 262144), gpu_only=True),
                      Case("bfloat16 长行", (8, 50000), torch.bfloat16, gpu_only=True)]
        return cases + C.error_cases(torch.int32)

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        got = out.detach().cpu().double()
        text = impl["text"]
        if not torch.isfinite(got[bad]).all() and find_line(text, r"\bm_new\s*=", lang="py") \
                and not find_line(text, r"^\s*m\s*=\s*(m_new\b|tl\.maximum)", lang="py"):
            return Hint("no-m-update", "第 1 遍循环里 m 一直没有更新：第 2 遍用的 m 还是 -inf，exp(x - m) = inf", self.file,
                        find_line(text, r"\bm_new\s*=", lang="py"), first_bad_row(ref.detach().cpu().double(), got, bad),
                        "TODO(2)：每一块处理完之后 m = m_new：d 是以 m_new 为基准累加的，下一块和第 2 遍都要用它。")
        if case.kind == "inf-prefix" and not torch.isfinite(got[bad]).all():
            return Hint("inf-guard", "一行的前几块全是 -inf 时得到 NaN：m_new 是 -inf，exp(x - m_new) = exp(-inf - (-inf)) = NaN",
                        self.file, find_line(text, r"tl\.exp\(.*m_new", lang="py") or find_line(text, r"tl\.exp", lang="py"),
                        first_bad_row(ref.detach().cpu().double(), got, bad),
                        "TODO(2)：减数用 m_ref = tl.where(m_new == -float(\"inf\"), 0.0, m_new)，"
                        "exp(x - m_ref) 与 exp(m - m_ref) 都用它：这一块全是 -inf 时两项都是 0，d 仍是 0。")
        cand = no_rescale(x, block_for("gpu" if x.is_cuda else "sim"))
        if x.shape[1] > block_for("gpu" if x.is_cuda else "sim") and torch.allclose(got[bad], cand[bad], rtol=1e-4,
                                                                                      atol=1e-6):
            text = impl["text"]
            return Hint("no-rescale", "最大值变大时，之前累加的指数和没有重新缩放", self.file,
                        find_line(text, r"\bd\s*=\s*d\b", lang="py"),
                        f"第 {bad[0]} 行的和是 {got[bad[0]].sum().item():.4g}（应为 1）",
                        "d 是以旧的最大值 m 为基准累加的：更新时 d = d * exp(m - m_new) + sum(exp(x - m_new))。")
        return super().wrong_answer(case, x, out, ref, bad, impl)

    def padded_width(self, N: int, x: torch.Tensor) -> int:
        b = block_for("gpu" if x.is_cuda else "sim")
        return -(-N // b) * b

    def bench(self, impl):
        from .core import softmax_bench

        # 长行：一行 1 MiB，装不进一个块
        return softmax_bench(impl["op"], "，你的内核读 2 遍；GB/s 按读 1 遍 + 写 1 遍计", M=64, N=262144)
