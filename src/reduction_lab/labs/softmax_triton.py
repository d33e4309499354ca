"""实验 softmax-triton：融合 softmax（一行一个 program，被屏蔽的车道填 -inf）。

讲义：docs/triton/fused-softmax.md、docs/triton/masking.md；实验页：docs/labs/softmax-triton.ipynb。
sim 模式下每个用例都在 :func:`reduction_lab.count_memory` 里运行（Triton 解释器 + 越界检查）；
gpu 模式下「访存计数」用例同样在解释器里运行，其余用例在 GPU 上。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .core import Lab, load_learner_module, sim_precheck, softmax_bench
from .grading import (Case, Hint, compare, never_written, error_line, find_line, first_bad_row, root_cause, rows_text,
                      softmax_tolerance, traceback_line, zh_part)

FILE = "softmax.py"


class SoftmaxTriton(Lab):
    name = "softmax-triton"
    title = "Triton：融合softmax与-inf掩码"
    lecture = "triton/fused-softmax.md"
    notebook = "labs/softmax-triton.ipynb"
    files = (FILE,)
    backend = "triton"
    kernel = "softmax_kernel"
    #: 每个输入元素读几遍（融合 softmax 读一遍；在线 softmax 两遍：先求 (m, d)，再归一化）
    passes = 1

    def cases(self, mode):
        return C.softmax_cases(mode)

    def load(self, paths, mode):
        module = load_learner_module(paths[self.file], self.name.replace("-", "_"), ("softmax", self.kernel))
        return {"module": module, "op": module.softmax, "path": paths[self.file], "text": paths[self.file].read_text("utf-8")}

    def run_case(self, impl, case: Case, mode):
        op = impl["op"]
        if case.kind == "error":
            return C.run_error_case(op, case, mode, out_shape=lambda x: x.shape)
        x = C.make_input(case, mode)
        out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=x.device)
        rep = run_counted(op, x, out, mode, case)
        ref = self.reference(x)
        atol, rtol = self.tolerance(x)
        ok, err, bad = compare(out, ref, atol, rtol)
        if not ok:
            return False, err, f"行 {rows_text(bad)} 不对", self.wrong_answer(case, x, out, ref, bad, impl)
        extra = self.check_other_outputs(x, impl)
        if extra is not None:
            return False, err, extra[0], extra[1]
        if case.kind == "memory":
            M, N = x.shape
            if (rep.elements_loaded, rep.elements_stored) != self.expected_counts(M, N):
                return False, err, "访存量不对", self.memory_hint(rep, M, N, impl)
            return True, err, f"读 {rep.elements_loaded}、写 {rep.elements_stored} 个元素", None
        return True, err, "", None

    def check_other_outputs(self, x: torch.Tensor, impl) -> tuple[str, Hint] | None:
        """输出之外内核还写出的东西（例如 LayerNorm 每行的 mean 与 rstd）：不对时返回 (说明, 诊断)。"""
        return None

    def expected_counts(self, M: int, N: int) -> tuple[int, int]:
        """访存计数用例里应读、应写的元素数：每个元素读 ``passes`` 遍、写一遍。"""
        return self.passes * M * N, M * N

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """float64 的参考结果。"""
        return torch.softmax(x.double(), dim=1)

    def tolerance(self, x: torch.Tensor) -> tuple[float, float]:
        return softmax_tolerance(x.dtype)

    def memory_hint(self, rep, M, N, impl) -> Hint:
        text = impl["text"]
        want = self.passes * M * N
        reads = "MN" if self.passes == 1 else f"{self.passes}MN"
        detail = (f"count_memory()：读了 {rep.elements_loaded} 个元素、写了 {rep.elements_stored} 个，"
                  f"应为 {reads} = {want} 与 MN = {M * N}（{rep.launches} 次启动）")
        if rep.elements_loaded > want:
            loads = [i for i, ln in enumerate(text.splitlines(), 1) if "tl.load" in ln.split("#")[0]]
            if len(loads) > 1:
                detail += f"\ntl.load 出现在第 {'、'.join(map(str, loads))} 行"
            fix = ("只 tl.load 一次，把整行留在寄存器里，求最大值、求和、归一化都用这一份。" if self.passes == 1 else
                   "第 1 遍同时更新最大值 m 和指数和 d（旧的 d 乘以 exp(m_旧 - m_新) 重新缩放），"
                   "第 2 遍归一化：一共只读两遍。")
            return Hint("memory-loads", f"读得比 {reads} 多：每行读了 {rep.elements_loaded / (M * N):.0f} 遍",
                        self.file, loads[-1] if loads else None, detail, fix)
        if rep.elements_stored > M * N:
            return Hint("memory-stores", "写得比 MN 多：写了被屏蔽的车道或写了不止一次", self.file,
                        find_line(text, r"tl\.store", lang="py"), detail, "tl.store 只调用一次，并且带上 mask。")
        return Hint("memory-count", f"读写的元素比 {reads} / MN 少", self.file, None, detail,
                    "每行的每个元素都要读到、写到。")

    def wrong_answer(self, case, x, out, ref, bad, impl) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()            # gpu 模式下参考值在 GPU 上：候选结果都在 CPU 上比较
        M, N = x.shape
        r = bad[0]
        first = first_bad_row(ref, got, bad)
        if torch.isnan(got).all() and bool(never_written(impl["op"], x, x.shape).all()):
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN，再运行一次也没有写）", self.file,
                        find_line(text, r"tl\.store", lang="py"), first,
                        "把结果 tl.store 回输出：tl.store(指针, y.to(out_ptr.dtype.element_ty), mask=mask)。")
        if not torch.isfinite(got[bad]).all() and not (case.kind == "large" and find_line(text, r"tl\.exp", lang="py")):
            h = nan_written_hint(text, self.file, first)
            if h is not None:
                return h
        if case.kind == "large" and not torch.isfinite(got[bad]).all():
            return Hint("no-max-subtraction", "数值很大的行得到 inf 或 NaN：exp 溢出了", self.file,
                        find_line(text, r"tl\.exp", lang="py"), first,
                        "先减去行最大值再取指数：exp(x - max(x)) 的最大值是 1，不会溢出，结果不变。")
        sums = got[bad].sum(dim=1)
        line = find_line(text, r"other\s*=\s*0", lang="py") or find_line(text, r"tl\.load", lang="py")
        if torch.allclose(got[bad], ref[bad], rtol=2e-2, atol=1e-6):
            h = low_precision_hint(x, got[bad], ref[bad], self.file, text, first)
            if h is not None:
                return h
        P = self.padded_width(N, x)
        if P > N:
            # 被屏蔽的车道读成 0 时内核算出的结果：补 0 到 P 列的 softmax 的前 N 列
            xp = torch.cat([x.detach().cpu().double(), torch.zeros(M, P - N, dtype=torch.float64)], dim=1)
            cand = torch.softmax(xp, dim=1)[:, :N]
            if torch.allclose(got[bad], cand[bad], rtol=1e-4, atol=1e-7):
                negative = "；整行为负数时，填进去的 0 比整行都大，成了「最大值」" if case.kind == "negative" else ""
                return Hint("mask-other", f"被屏蔽的车道改变了结果：每行的和小于 1（只在 N 不是块宽的倍数时出现）{negative}",
                            self.file, line, first + f"\n第 {r} 行的和是 {sums[0].item():.4g}",
                            "tl.load 的 other 应为 -float(\"inf\")：它不改变最大值，exp(-inf) = 0 也不改变分母；"
                            "填 0 会让每个多余的车道给分母加上 exp(0 - max)。")
        if case.kind == "row-stride":
            cand = self.reference(C.read_with_stride_n(case, x.dtype)).double()
            if torch.allclose(got[bad], cand[bad], rtol=2e-3, atol=1e-6):
                return Hint("row-stride", f"行距用成了 N：x 是更宽的矩阵的一部分（行距 {x.stride(0)}，N = {N}），"
                            "第 1 行以后读错了位置", self.file,
                            find_line(text, r"\*\s*n_cols", lang="py") or find_line(text, r"tl\.load", lang="py"), first,
                            "行的起点是 row * in_row_stride，不是 row * n_cols：x 的行之间可能有空隙；"
                            "写出用 out_row_stride。")
        return Hint("wrong-softmax", "softmax 的值不对", self.file, None,
                    first + f"\n第 {r} 行的和是 {sums[0].item():.4g}（softmax 每行的和是 1）",
                    "对照讲义：减去最大值、取指数、除以和；检查行偏移 row * in_row_stride。")

    def padded_width(self, N: int, x: torch.Tensor) -> int:
        """内核读一行时实际用到的车道数：整行放进一个不小于 N 的 2 的幂的块。"""
        return 1 << (N - 1).bit_length()

    def on_error(self, case, exc, paths):
        from ..memcount import OutOfBoundsError

        path = paths[self.file]
        text = path.read_text(encoding="utf-8")
        if isinstance(exc, OutOfBoundsError):
            pid = "" if exc.pid is None else f"program {tuple(exc.pid)}，"
            line = error_line(exc)
            lines = text.splitlines()
            masked = line is not None and 0 < line <= len(lines) and "mask" in lines[line - 1].split("#")[0]
            fix = ("这一行已经带了 mask：检查它的条件（是 <，不是 <=）、它是否同时管住行与列（二维块要 "
                   "(rows < n_rows)[:, None] & (cols < n_cols)[None, :]），以及指针用的行距与偏移（行距用对应张量的 "
                   "stride，偏移没有多加 1）。" if masked else "tl.load 和 tl.store 都要带 mask=cols < n_cols。")
            return Hint("out-of-bounds", "越界访问：没有屏蔽的车道越过了张量", self.file, line,
                        detail=pid + zh_part(str(exc)).split("\n")[0][:400], fix=fix)
        if isinstance(exc, SyntaxError):
            return Hint("syntax-error", f"语法错误：{exc.msg}", self.file, exc.lineno, fix="按 Python 的提示修改这一行。")
        line = traceback_line(exc, path) or _compile_line(exc, text, self.kernel)
        root = root_cause(exc)
        msg = f"{type(root).__name__}: {root}"
        if "Cannot access global variable" in str(exc) or "Unsupported function referenced" in msg \
                or "Loop-carried variable" in str(exc):
            return self.compile_hint(str(exc) if "Cannot access global variable" in str(exc) else msg, text)
        if isinstance(root, NameError):
            name = getattr(root, "name", None) or (re.findall(r"'(\w+)'", str(root)) or ["?"])[0]
            return Hint("undeclared", f"用到了没有定义的名字 {name}", self.file, line, detail=str(root),
                        fix=f"先给 {name} 赋值再使用（或检查拼写）。")
        for pattern, cause, fix in _TRITON_ERRORS:
            if re.search(pattern, msg):
                return Hint("triton-error", cause, self.file, line, detail=zh_part(str(root))[:400], fix=fix)
        return Hint("exception", f"运行时抛出 {type(root).__name__}", self.file, line, detail=zh_part(str(root))[:600])

    def extra_checks(self, impl, mode, paths):
        from ..memcount import count_memory

        def run():
            x = torch.randn(3, 781, device="cuda")
            with count_memory():                      # 解释器在 CPU 副本上运行，越界在发生之前报出
                impl["op"](x)

        return sim_precheck(self, mode, paths, run, "Triton 解释器，3x781")

    def final_checks(self, impl, mode, paths):
        """sim 模式：把内核编译成 sm_90 的机器码（:mod:`.sm90_compile`），找出解释器接受、GPU 上编译不过的写法。
        启动参数取自包装函数在第一个用例的输入上真正启动内核的那一次。"""
        if mode != "sim":
            return [], []
        from . import sm90_compile

        import numpy as np

        case = next(c for c in self.cases(mode) if c.kind != "error")
        x = C.make_input(case, mode)
        with np.errstate(all="ignore"):               # 被屏蔽的车道里 -inf - (-inf)：与用例里一样不报警告
            args, kwargs = sm90_compile.record_launch(impl["module"], self.kernel, lambda: impl["op"](x))
        spec = sm90_compile.launch_spec(getattr(impl["module"], self.kernel), args, kwargs)
        label = f"编译检查（sm_90，{case.label} {str(case.dtype).replace('torch.', '')} 的启动参数，不需要 GPU）"
        err = sm90_compile.compile_error(impl["path"], self.kernel, spec)
        if err is None:
            return [f"{label}：内核能编译成 GPU 的机器码。", ""], []
        if sm90_compile.environment_problem(err):      # 这台机器上编译不了（不是学习者代码的问题）：说明，不判错
            return [f"{label}：没有运行（{err.strip().splitlines()[-1][:200]}）。", ""], []
        return [f"{label}：编译失败。", ""], [self.compile_hint(err, impl["text"])]

    def compile_hint(self, err: str, text: str) -> Hint:
        """编译器拒绝内核时的诊断（sim 模式的编译检查与 gpu 模式的真正编译共用）。"""
        line = _compile_line(err, text, self.kernel)
        if "Cannot access global variable" in err:
            name = (re.findall(r"global variable (\w+)", err) or ["?"])[0]
            cause = f"GPU 上编译不过：内核读了普通的 Python 全局变量 {name}（Triton 解释器接受，编译器不接受）"
            fix = (f"编译器只接受 tl.constexpr 的全局变量：写成 {name} = tl.constexpr(…)，"
                   f"或者把 {name} 作为内核的参数传进来。")
            line = line or find_line(text, rf"\b{name}\b", lang="py")
        elif "Unsupported function referenced" in err:
            cause = "GPU 上编译不过：内核调用了没有 @triton.jit 的函数（Triton 解释器照样执行，编译器不接受）"
            fix = "内核里调用的辅助函数也要加 @triton.jit（它只能用 tl 的运算）。"
            name = (re.findall(r"<function (\w+)", err) or [None])[0]
            if name and line is None:
                start = find_line(text, rf"def {self.kernel}\b", lang="py") or 1
                at = find_line("\n".join(text.splitlines()[start:]), rf"\b{name}\s*\(", lang="py")
                line = start + at if at else find_line(text, rf"def {name}\b", lang="py")
        elif m := re.search(r"Loop-carried variable (\w+) has initial type <[^>]*?(\w+)> but is re-assigned to "
                            r"<[^>]*?(\w+)>", err):
            name, t0, t1 = m.groups()
            cause = (f"GPU 上编译不过：循环里的 {name} 初值是 {t0}，循环里算出的却是 {t1}"
                     "（Triton 解释器不管类型，编译器要求循环前后的类型一致）")
            fix = f"让 {name} 的初值就是 {t1}：例如 tl.zeros(..., dtype=tl.float32)；累加用 float32，存回时再转成输出的类型。"
            line = find_line(text, rf"^\s*{name}\s*=", lang="py") or line
        else:
            cause = "GPU 上编译不过：Triton 解释器接受了这段代码，编译器不接受"
            fix = "按编译器的提示修改这一行；解释器逐句执行 Python，编译器只接受 Triton 语言里的写法。"
        return Hint("gpu-compile", cause, self.file, line, zh_part(err)[:600], fix)

    def bench(self, impl):
        return softmax_bench(impl["op"], "")



def low_precision_hint(x, got, ref, file: str, text: str, first: str) -> Hint | None:
    """float32 的输入、结果却正好是 bfloat16 或 float16 的值（而参考不是）：写回之前舍入成了半精度。
    先试更粗的 bfloat16（它的值也都是 float16 的值）。Triton 实验共用。"""
    if x.dtype != torch.float32:
        return None
    for low, digits in ((torch.bfloat16, 2), (torch.float16, 3)):
        if torch.equal(got, got.to(low).double()) and not torch.equal(ref, ref.to(low).double()):
            name = str(low).replace("torch.", "")
            return Hint("low-precision", f"结果被舍入成了 {name}（只有约 {digits} 位有效数字），超过了 float32 的容差", file,
                        find_line(text, rf"tl\.{name}", lang="py") or find_line(text, r"tl\.store", lang="py"), first,
                        "在 float32 里计算，写回之前转换成输出指针的 dtype：y.to(out_ptr.dtype.element_ty)。")
    return None


#: Triton 常见的报错 -> (原因, 改法)：按报错的正文匹配
_TRITON_ERRORS = [
    (r"arange's range must be a power of 2", "tl.arange 的长度必须是 2 的幂",
     "块宽取 2 的幂：BLOCK_SIZE = triton.next_power_of_2(n_cols)，多出来的车道用 mask 屏蔽。"),
    (r"axis \d+ out of bounds|invalid axis", "归约的 axis 超出了块的维数",
     "一维的块只有 axis=0；二维块 [BLOCK_M, BLOCK_N] 里一行的数沿 axis=1 排开。"),
    (r"Value argument cannot be block type if pointer argument is not a block",
     "tl.store 的指针是一个标量，要存的值却是一个块",
     "指针也要是同形的块（out_ptr + cols），或者先把值归约成一个数（tl.sum(..., axis=0)）再存。"),
    (r"Expected pointer argument to have shape|[Cc]annot broadcast|incompatible (dimensions|shapes)|"
     r"[Cc]annot make_shape_compatible", "指针、值与 mask 的形状对不上",
     "行号沿第 0 维、列号沿第 1 维：rows[:, None] 与 cols[None, :] 广播成 [BLOCK_M, BLOCK_N]，值与 mask 也要是这个形状。"),
]

def run_counted(op, x, out, mode: str, case: Case):
    """运行 ``op(x, out=out)``：sim 模式与访存计数用例在 Triton 解释器里（:func:`reduction_lab.count_memory`：越界的读写
    在发生之前报出，并数清读写了多少元素），返回计数；gpu 模式在 GPU 上运行并同步，返回 None。"""
    import numpy as np

    from ..memcount import count_memory

    if mode == "sim" or case.kind == "memory":
        with count_memory() as rep, np.errstate(all="ignore"):
            op(x, out=out)
        return rep
    op(x, out=out)
    torch.cuda.synchronize()
    return None


def _compile_line(exc: BaseException, text: str, kernel: str) -> int | None:
    """Triton 编译错误写的是相对内核开头的「at 行:列」：换算成文件里的行号。"""
    m = re.search(r"at (\d+):(\d+):", str(exc))
    start = find_line(text, rf"def {kernel}\b", lang="py")
    if m and start:
        return start + int(m.group(1)) - 1      # 第 1 行是 def 这一行
    return None


def nan_written_hint(text: str, file: str, first: str) -> Hint | None:
    """内核写出了 NaN / inf（不是没写）：被屏蔽的车道填了 +inf（-inf 写成了 inf）时 x - max 是 inf - inf。"""
    line = find_line(text, r"other\s*=\s*(float\(\s*[\"']inf[\"']\s*\)|math\.inf|float\(\s*[\"']\+inf)", lang="py")
    if line:
        return Hint("mask-other", "内核写出了 NaN：被屏蔽的车道填的是 +inf，它成了每行的最大值，x - max 与 inf - inf 都不对",
                    file, line, first, "tl.load 的 other 应为 -float(\"inf\")（负无穷）：它不改变最大值，exp(-inf) = 0。")
    return None

