"""实验 softmax-rows-triton：16 位输入的融合 softmax，一个 program 处理 BLOCK_M 行（Triton）。

讲义：docs/triton/half-precision.md（每个线程搬多少字节、每个 program 几行）、docs/triton/fused-softmax.md；
实验页：docs/labs/softmax-rows.ipynb。运行方式同 :mod:`.softmax_triton`：sim 模式下每个用例都在
:func:`reduction_lab.count_memory` 里运行（Triton 解释器 + 越界检查）；gpu 模式下「访存计数」用例同样在解释器里运行，
其余用例在 GPU 上，先在解释器里跑一个 M 不是 BLOCK_M 倍数的小用例。

与一行一个 program 的 softmax-triton 相比，新的是二维的块：行号要带上 program_id 乘 BLOCK_M，mask 同时管行与列，
归约沿 axis=1，每行的结果要写成 ``m[:, None]`` 才能沿列广播；输入输出是 bfloat16 / float16，计算在 float32 里。
诊断：mask 没管行（最后一个 program 越界）、行号没带 program_id（只写了前几行）、归约沿错了轴（axis=0：同一个
program 的几行之间做了 softmax）、没写 ``[:, None]``（形状对不上的编译错误）、行距用了 N、被屏蔽的车道填 0、
没减最大值、结果被舍入成半精度、每行读了不止一遍、越界、没写。GPU 上全部通过之后，同一个内核用默认的 BLOCK_M
与 BLOCK_M = 1 各计时一次，与 ``torch.softmax``、设备拷贝比较。
"""

from __future__ import annotations

import torch

from . import cases as C
from .core import load_learner_module, time_against
from .grading import Case, Hint, find_line, first_bad_row, never_written, zh_part
from .softmax_triton import SoftmaxTriton, low_precision_hint, nan_written_hint

FILE = "softmax_rows.py"
#: 每个 program 的行数至多这么多（包装函数的默认规则，见 :func:`default_block_m`）
MAX_BLOCK_M = 16


def default_block_m(n_cols: int, dtype: torch.dtype) -> int:
    """骨架里 ``rows_per_program`` 的规则：一个 program 约 4096 个 16 位元素或 2048 个 float32，至多 16 行。"""
    block_n = 1 << (n_cols - 1).bit_length()
    elems = 4096 if dtype.itemsize == 2 else 2048
    return max(1, min(MAX_BLOCK_M, elems // block_n))


def wrong_axis_model(x: torch.Tensor, block_m: int, max_axis: int = 0, sum_axis: int = 0) -> torch.Tensor:
    """最大值沿 ``max_axis``、指数和沿 ``sum_axis`` 归约（沿 axis=0 的那个再写成 ``[None, :]`` 让它编译通过）时
    内核写出的结果（float64）。axis=0 的归约在每个 program 的 BLOCK_M 行之间逐列进行。"""
    M, N = x.shape
    P = 1 << (N - 1).bit_length()
    Mp = -(-M // block_m) * block_m
    # 与内核读到的块相同：被屏蔽的行与列都是 -inf（全是 -inf 的一行或一列减去自己的最大值得到 NaN，
    # 沿错了轴的和会把它带进数据行，这也与内核相同）
    xp = torch.full((Mp, P), float("-inf"), dtype=torch.float64)
    xp[:M, :N] = x.detach().cpu().double()
    g = xp.reshape(Mp // block_m, block_m, P)
    e = torch.exp(g - g.amax(dim=1 + max_axis, keepdim=True))
    y = e / e.sum(dim=1 + sum_axis, keepdim=True)
    return y.reshape(Mp, P)[:M, :N]


def _kernel_uses(text: str, kernel: str, name: str) -> bool:
    """内核的函数体（不含参数表与注释）里有没有用到 ``name``。"""
    import re

    lines = text.splitlines()
    start = find_line(text, rf"def {kernel}\b", lang="py")
    if start is None:
        return True
    body, in_sig = [], True
    for ln in lines[start - 1:]:
        code = ln.split("#")[0]
        if in_sig:
            in_sig = not code.rstrip().endswith(":")
            continue
        if code.strip() and not code.startswith((" ", "\t")):
            break                                   # 下一个顶层定义
        body.append(code)
    return re.search(rf"\b{name}\b", "\n".join(body)) is not None


class SoftmaxRowsTriton(SoftmaxTriton):
    name = "softmax-rows-triton"
    title = "Triton：16位softmax，一个program处理几行"
    lecture = "triton/half-precision.md"
    notebook = "labs/softmax-rows.ipynb"
    files = (FILE,)
    kernel = "softmax_rows_kernel"

    def cases(self, mode):
        return C.softmax_rows_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[FILE], "softmax_rows_triton", ("softmax", self.kernel))
        return {"module": module, "op": module.softmax, "path": paths[FILE], "text": paths[FILE].read_text("utf-8")}

    def run_case(self, impl, case: Case, mode):
        if case.block is None:
            return super().run_case(impl, case, mode)
        op = impl["op"]
        return super().run_case(dict(impl, op=lambda x, out=None: op(x, out=out, block_m=case.block)), case, mode)

    def block_m(self, case: Case, x: torch.Tensor) -> int:
        return case.block if case.block is not None else default_block_m(x.shape[1], x.dtype)

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()
        xs = x.detach().cpu()
        M, N = xs.shape
        bm = self.block_m(case, x)
        r = bad[0]
        first = first_bad_row(ref, got, bad)
        # 输出是 16 位时，候选模型也要舍入到同一个 dtype 再比较
        rtol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[x.dtype]

        def same(cand, equal_nan=False):
            return bool(torch.allclose(got[bad], cand.to(x.dtype).double()[bad], rtol=rtol, atol=1e-6, equal_nan=equal_nan))

        # 沿 axis=0 的和会把被屏蔽的行的 NaN 带进数据行，输出可能全是 NaN，看起来和没写一样：
        # 源码里有 axis=0 时先与这几个模型比较（NaN 算相等）
        axis_fix = ("块是 BLOCK_M 行 x BLOCK_N 列，一行的数沿 axis=1 排开：m = tl.max(x, axis=1)、"
                    "d = tl.sum(num, axis=1)，再写成 m[:, None]、d[:, None] 沿列广播。")
        if bm > 1 and find_line(text, r"axis\s*=\s*0", lang="py"):
            for max_axis, sum_axis, cause, where, todo in (
                    (0, 0, f"归约沿错了轴：tl.max 与 tl.sum 都用了 axis=0，同一个 program 的 {bm} 行之间逐列做了 softmax",
                     r"axis\s*=\s*0", "TODO(3)/(4)："),
                    (0, 1, f"最大值沿错了轴：tl.max(x, axis=0) 是同一个 program 的 {bm} 行里每一列的最大值，不是每行的",
                     r"tl\.max\(.*axis\s*=\s*0", "TODO(3)："),
                    (1, 0, f"指数和沿错了轴：tl.sum(num, axis=0) 是同一个 program 的 {bm} 行里每一列的和，不是每行的"
                           "（被屏蔽的行是 NaN，也加了进来）", r"tl\.sum\(.*axis\s*=\s*0", "TODO(4)：")):
                if same(wrong_axis_model(xs, bm, max_axis, sum_axis), equal_nan=True):
                    return Hint("wrong-axis", cause, FILE, find_line(text, where, lang="py"), first, todo + axis_fix)

        nan_rows = torch.isnan(got).all(dim=1)
        if nan_rows.all() and bool(never_written(impl["op"], x, x.shape).all()):
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN，再运行一次也没有写）", FILE,
                        find_line(text, r"tl\.store", lang="py"), first,
                        "TODO(5)：tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], "
                        "y.to(out_ptr.dtype.element_ty), mask=mask)。")
        if nan_rows.all():
            h = nan_written_hint(text, FILE, first)
            if h is not None:
                return h
        if bool(nan_rows[bad].all()) and not nan_rows.all():
            done = (~nan_rows).nonzero().flatten().tolist()
            shown = ", ".join(map(str, done[:8])) + (" …" if len(done) > 8 else "")
            return Hint("row-offset", f"只有 {len(done)} 行被写了（第 {shown} 行）：各个 program 算的是同一组（或互相重叠的）行",
                        FILE, find_line(text, r"\brows\s*=", lang="py"), first,
                        "TODO(1)：rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)：第 pid 个 program 负责第 "
                        "pid * BLOCK_M 行起的 BLOCK_M 行，program 之间不重叠。")
        if case.kind == "large" and not torch.isfinite(got[bad]).all():
            return Hint("no-max-subtraction", "数值很大的行得到 inf 或 NaN：exp 溢出了", FILE,
                        find_line(text, r"tl\.exp", lang="py"), first,
                        "TODO(3)：先减去每行的最大值再取指数：tl.exp(x - m[:, None])。")
        if torch.allclose(got[bad], ref[bad], rtol=2e-2, atol=1e-6):
            h = low_precision_hint(x, got[bad], ref[bad], FILE, text, first)
            if h is not None:
                return h
        P = self.padded_width(N, x)
        if P > N:
            xp = torch.cat([xs.double(), torch.zeros(M, P - N, dtype=torch.float64)], dim=1)
            if same(torch.softmax(xp, dim=1)[:, :N]):
                negative = "；整行为负数时，填进去的 0 比整行都大，成了「最大值」" if case.kind == "negative" else ""
                return Hint("mask-other", f"被屏蔽的车道改变了结果：每行的和小于 1（只在 N 不是 2 的幂时出现）{negative}",
                            FILE, find_line(text, r"other\s*=\s*0", lang="py") or find_line(text, r"tl\.load", lang="py"),
                            first, "TODO(2)：tl.load 的 other 应为 -float(\"inf\")：它不改变最大值，exp(-inf) = 0 也不改变分母。")
        checks = []
        if case.kind == "row-stride":
            checks.append(("row-stride", True, torch.softmax(C.read_with_stride_n(case, x.dtype).double(), dim=1),
                           f"行距用成了 N：x 是更宽的矩阵的一部分（行距 {x.stride(0)}，N = {N}），第 1 行以后读错了位置",
                           r"\*\s*n_cols", "行的起点是 rows[:, None] * in_row_stride，不是乘 n_cols：x 的行之间可能有空隙。"))
        for key, applies, cand, cause, where, fix in checks:
            if applies and same(cand):
                return Hint(key, cause, FILE, find_line(text, where, lang="py"), first, fix)
        sums = got[bad].sum(dim=1)
        return Hint("wrong-softmax", "softmax 的值不对", FILE, None,
                    first + f"\n第 {r} 行的和是 {sums[0].item():.4g}（softmax 每行的和是 1）",
                    "对照讲义：行号带上 pid * BLOCK_M，mask 同时管行与列，沿 axis=1 求最大值与和，再用 [:, None] 广播。")

    def on_error(self, case, exc, paths):
        from ..memcount import OutOfBoundsError
        from .grading import root_cause

        text = paths[FILE].read_text(encoding="utf-8")
        if isinstance(exc, OutOfBoundsError) and not _kernel_uses(text, self.kernel, "n_rows"):
            h = super().on_error(case, exc, paths)
            return Hint("row-mask", "越界访问：mask 只管了列，最后一个 program 里超过 n_rows 的行也读写了", FILE,
                        find_line(text, r"\bmask\s*=", lang="py") or h.line, h.detail,
                        "TODO(1)：mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)：M 不是 BLOCK_M 的倍数时，"
                        "最后一个 program 只有 M % BLOCK_M 行是数据。")
        msg = str(root_cause(exc))
        if "incompatible dimensions" in msg or "Cannot make_shape_compatible" in msg:
            h = super().on_error(case, exc, paths)
            axis0 = find_line(text, r"tl\.(max|sum)\(.*axis\s*=\s*0", lang="py")
            if axis0:                     # [:, None] 已经写了：形状不对是因为归约沿了 axis=0（每列一个数）
                return Hint("wrong-axis", "归约沿错了轴：axis=0 得到的是每列一个数（BLOCK_N 个），不是每行一个数", FILE,
                            axis0, zh_part(msg)[:400],
                            "块是 BLOCK_M 行 x BLOCK_N 列，一行的数沿 axis=1 排开：m = tl.max(x, axis=1)、"
                            "d = tl.sum(num, axis=1)，再写成 m[:, None]、d[:, None] 沿列广播。")
            return Hint("broadcast", "形状对不上：每行一个数（BLOCK_M 个）不能直接与 BLOCK_M x BLOCK_N 的块运算", FILE,
                        h.line, zh_part(msg)[:400],
                        "TODO(3)/(4)：m = tl.max(x, axis=1) 的形状是 (BLOCK_M,)；写成 m[:, None]（BLOCK_M x 1）才沿列广播，"
                        "d[:, None] 也一样。")
        return super().on_error(case, exc, paths)

    def bench(self, impl):
        M, N = 262144, 256           # 短行：BLOCK_M = 1 时 128 个线程各读 2 个 bfloat16（4 字节）
        dt = torch.bfloat16
        x = torch.randn(M, N, device="cuda").to(dt)
        out = torch.empty_like(x)
        op = impl["op"]
        bm = default_block_m(N, dt)
        calls = {f"你的内核（BLOCK_M = {bm}）": lambda: op(x, out=out),
                 "你的内核（BLOCK_M = 1）": lambda: op(x, out=out, block_m=1),
                 "torch.softmax": lambda: torch.softmax(x, dim=-1, out=out)}
        return time_against(calls, 2 * x.numel() * x.element_size(), x, f"{M}x{N} bfloat16")
