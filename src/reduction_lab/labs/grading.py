"""评分的公共部分：用例、每个用例的结果、诊断（Hint）、成绩表。

各个实验（:mod:`.registry` 里登记）只负责「怎样运行学习者的内核」和「这个实验特有的诊断」；
表格的格式、数值比较、哪些行不对、TODO 有没有动过，都在这里统一处理。
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..capture import captured_output
from ..textcols import table


class LabError(Exception):
    """实验本身用错了（名字不存在、目录里没有骨架文件等），不是学习者代码的错误。"""


@dataclass(frozen=True)
class Case:
    """一个评分用例。``kind``：random（随机输入）、negative（整行都是负数）、large（大数，
    不减最大值就会溢出）、far-negative（整行是很大的负数，最大值的初值写成 0 就会 0/0）、memory（访存计数）、
    error（输入不合法，必须报错）。"""

    name: str
    shape: tuple
    dtype: torch.dtype = torch.float32
    kind: str = "random"
    gpu_only: bool = False
    #: kind == "error" 时：构造坏输入的方式与必须出现的异常类型
    bad: str = ""
    expect: type | tuple = ()
    #: 这个用例的线程块大小（None：实验的默认值）
    block: int | None = None
    #: 这个用例的簇大小（每簇的线程块数；None：实验的默认值，只有簇的实验用它）
    cluster: int | None = None
    #: 这个用例的线程块数（None：实验的默认值，只有固定网格的实验用它）
    grid: int | None = None

    @property
    def label(self) -> str:
        return "x".join(map(str, self.shape)) if self.shape else "-"


@dataclass
class Hint:
    """一条诊断：用学习者的话说出哪里错了、在哪一行、怎么改。``key`` 供测试识别诊断的种类。"""

    key: str
    cause: str
    file: str | None = None
    line: int | None = None
    detail: str = ""
    fix: str = ""
    cases: list[int] = field(default_factory=list)

    def where(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        return self.file or ""

    def render(self, source_lines: dict[str, list[str]] | None = None) -> str:
        head = self.cause
        if self.cases:
            head += f"（用例 {', '.join(map(str, self.cases))}）"
        out = [f"✗ {head}"]
        if self.file and self.line:
            text = ""
            if source_lines and self.file in source_lines and 0 < self.line <= len(source_lines[self.file]):
                text = source_lines[self.file][self.line - 1].strip()
            out.append(f"    {self.file}:{self.line}    {text}".rstrip())
        for part in (self.detail, self.fix):
            if part:
                out.extend("    " + s for s in part.splitlines())
        return "\n".join(out)


@dataclass
class CaseResult:
    index: int
    case: Case
    ok: bool
    max_err: float | None = None
    note: str = ""
    hint: Hint | None = None
    #: 运行这个用例时印出的文字（模拟器里内核的 printf、学习者代码的 print）；报告只摘一个用例的前几行
    output: str = ""
    #: 只评选中的用例（``lab check --case``）时，没选中的用例不运行、不计入结论
    skipped: bool = False


#: 报告里摘出的 printf 输出最多几行
OUTPUT_LINES = 20


@dataclass
class BenchRow:
    name: str
    ms: float
    gbps: float
    frac_copy: float


@dataclass
class GradeResult:
    """一次评分的结果。``str(result)`` 是给学习者看的中文报告。"""

    lab: str
    title: str
    files: list[Path]
    mode: str
    backend: str
    results: list[CaseResult] = field(default_factory=list)
    hints: list[Hint] = field(default_factory=list)
    bench: list[BenchRow] = field(default_factory=list)
    bench_note: str = ""
    extra: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """运行了的用例全部通过、没有诊断（只评选中的用例时，只看选中的）。"""
        ran = [r for r in self.results if not r.skipped]
        return bool(ran) and all(r.ok for r in ran) and not self.hints

    @property
    def n_passed(self) -> int:
        return sum(r.ok for r in self.results)

    @property
    def partial(self) -> bool:
        """只评了一部分用例（``lab check --case``）。"""
        return any(r.skipped for r in self.results)

    def verdict(self) -> str:
        total = len(self.results)
        if self.partial:
            ran = [r for r in self.results if not r.skipped]
            picked = "、".join(str(r.index) for r in ran)
            got = "都通过" if self.passed else f"通过 {sum(r.ok for r in ran)}/{len(ran)} 个，还没有完成"
            return f"结论：选中的用例 {picked} {got}（共 {total} 个用例，其余没有运行；不加 --case 评全部）。"
        if self.passed:
            return f"结论：全部 {total} 个用例通过。"
        if self.results and self.n_passed == total:
            n = sum(h.key != "todo-elsewhere" for h in self.hints)      # 「代码可能写在别处」只是提醒
            return f"结论：全部 {total} 个用例通过，但上面还有 {n} 个问题（用例之外的检查），还没有完成。"
        return f"结论：{self.n_passed}/{total} 个用例通过，还没有完成。"

    def hint_keys(self) -> list[str]:
        return [h.key for h in self.hints]

    def table(self) -> str:
        rows = [("#", "用例", "形状", "dtype", "结果", "最大误差", "说明")]
        for r in self.results:
            err = "—" if r.max_err is None else "NaN" if math.isnan(r.max_err) else f"{r.max_err:.1e}"
            rows.append((str(r.index), r.case.name, r.case.label, str(r.case.dtype).replace("torch.", ""),
                         "—" if r.skipped else "通过" if r.ok else "失败", err, r.note))
        return _format_rows(rows)

    def report(self) -> str:
        names = ", ".join(p.name for p in self.files)
        lines = [f"实验 {self.lab}（{self.title}）：{names}，模式 {self.mode}，后端 {self.backend}", ""]
        if self.results:
            lines += [self.table(), ""]
        excerpt = output_excerpt(self.results)
        if excerpt is not None:
            lines += [excerpt[0]] + ["    " + x for x in excerpt[1]] + [""]
        lines += self.extra
        if self.hints:
            sources = {}
            for p in self.files:
                try:
                    sources[p.name] = p.read_text(encoding="utf-8").splitlines()
                except OSError:
                    pass
            lines.append("问题：")
            lines += [h.render(sources) for h in self.hints]
            lines.append("")
        if self.bench:
            lines.append(self.bench_note)
            rows = [("实现", "时间 (ms)", "GB/s", "占拷贝带宽")]
            rows += [(b.name, f"{b.ms:.4f}", f"{b.gbps:.0f}", f"{100 * b.frac_copy:.0f}%") for b in self.bench]
            lines += [_format_rows(rows), ""]
        lines.append(self.verdict())
        return "\n".join(lines)

    __str__ = report

    def __repr__(self) -> str:
        return self.report()

    def _repr_html_(self) -> str:
        """notebook 与实验页里的报告：真正的表格（等宽字体里汉字与拉丁字母的宽度不成 2:1，文本表格会错位）。"""
        from html import escape as e

        def table(head, rows):
            th = "".join(f"<th>{e(h)}</th>" for h in head)
            body = "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows)
            return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

        names = ", ".join(p.name for p in self.files)
        out = [f"<p><strong>实验 {e(self.lab)}</strong>（{e(self.title)}）：<code>{e(names)}</code>，"
               f"模式 {e(self.mode)}，后端 {e(self.backend)}</p>"]
        if self.results:
            rows = []
            for r in self.results:
                err = "—" if r.max_err is None else "NaN" if math.isnan(r.max_err) else f"{r.max_err:.1e}"
                rows.append((r.index, r.case.name, r.case.label, str(r.case.dtype).replace("torch.", ""),
                             "—" if r.skipped else "✓ 通过" if r.ok else "✗ 失败", err, r.note))
            out.append(table(("#", "用例", "形状", "dtype", "结果", "最大误差", "说明"), rows))
        excerpt = output_excerpt(self.results)
        if excerpt is not None:
            out.append(f"<p>{e(excerpt[0])}</p><pre><code>{e(chr(10).join(excerpt[1]))}</code></pre>")
        out += [f"<p>{e(x)}</p>" for x in self.extra if x]
        if self.hints:
            sources = {}
            for p in self.files:
                try:
                    sources[p.name] = p.read_text(encoding="utf-8").splitlines()
                except OSError:
                    pass
            for h in self.hints:
                lines = h.render(sources).splitlines()
                out.append(f'<div class="admonition failure"><p class="admonition-title">{e(lines[0][2:])}</p>'
                           f"<pre><code>{e(chr(10).join(x[4:] for x in lines[1:]))}</code></pre></div>")
        if self.bench:
            out.append(f"<p>{e(self.bench_note)}</p>")
            out.append(table(("实现", "时间 (ms)", "GB/s", "占拷贝带宽"),
                             [(b.name, f"{b.ms:.4f}", f"{b.gbps:.0f}", f"{100 * b.frac_copy:.0f}%") for b in self.bench]))
        verdict = self.verdict()
        kind = "success" if self.passed else "warning"
        out.append(f'<div class="admonition {kind}"><p class="admonition-title">{e(verdict)}</p></div>')
        return "\n".join(out)


def _format_rows(rows) -> str:
    return table(rows)


# ---------------------------------------------------------------- 比较

def tolerance(n: int, dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol)。参考结果用 float64 计算；float32 求和的舍入误差大约随 sqrt(N) 增长。"""
    base = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    return base * max(1.0, math.sqrt(n) / 8), base


#: float32 的单位舍入 u = 2^-24
U32 = 2.0 ** -24


def row_sum_tolerance(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """float32 按行求和与 float64 参考之差的容许值：每行 (atol, rtol)，atol 取 :func:`tolerance` 的值与
    2 u sqrt(N) sum|x| 中较大的一个。N 是最长的相加链（一个线程依次加完整行），2 u sqrt(N) sum|x| 是舍入误差的符号
    随机时它的量级；树形归约的链短得多，误差小得多。这样串行相加的正确内核不会被判成「和不对」（它慢，由别的检查
    报出来），漏加、多加一个元素这类错误仍然远超出这个范围。"""
    atol, rtol = tolerance(x.shape[1], torch.float32)
    chain = 2 * U32 * math.sqrt(x.shape[1]) * x.detach().double().abs().sum(dim=1).cpu()
    return torch.clamp(chain, min=atol), rtol


def softmax_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """softmax（以及 RMSNorm）逐元素的 (atol, rtol)：每个输出只依赖一行，误差不随 N 增长；相对误差为主。
    输出约为 1/N，一个不随值缩放的 atol 很快就比输出本身还大（float32 的 1e-5 在 N = 4097、行内数值接近时
    是输出的 4%，32 个 warp 漏掉一个的部分和也能通过）。rtol：float32 是 1e-5（``__expf`` 在 |x| < 87 时误差不到 6e-6），
    16 位是一个单位（解释器把 float32 转成 bfloat16 时截断，误差可到一个单位）；atol 只管下溢的值
    （bfloat16、float32 的指数范围相同，float16 在 6e-5 以下是非规格化数，间距 6e-8）。"""
    rtol = tolerance(8, dtype)[1]
    return {torch.float32: 1e-9, torch.bfloat16: 1e-6, torch.float16: 1e-7}[dtype], rtol


def compare(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float):
    """返回 (是否一致, 最大绝对误差, 不一致的行号列表)。NaN 处算不一致。"""
    g = got.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    if g.shape != r.shape:
        return False, None, []
    diff = (g - r).abs()
    bad = ~(diff <= atol + rtol * r.abs())           # NaN 比较为 False，取反后算作不一致
    if torch.isnan(g).any():
        max_err = float("nan")
    elif not torch.isfinite(diff).all():
        max_err = float("inf")
    else:
        max_err = float(diff.max())
    rows = bad if bad.dim() == 1 else bad.any(dim=1)
    bad_rows = torch.nonzero(rows).flatten().tolist()
    return not bad_rows, max_err, bad_rows


class Mismatch:
    """一个没通过的行和用例：float64 的输入、输出与参考，不对的行，以及判断「输出是否正好是某种常见错误
    会算出的结果」的 :meth:`same`（各实验的诊断用它比较候选结果）。"""

    def __init__(self, x: torch.Tensor, got: torch.Tensor, ref: torch.Tensor, bad: list[int], atol, rtol: float):
        self.x = x.detach().cpu().double()
        self.got = got.detach().cpu().double().reshape(-1)
        self.ref = ref.detach().cpu().double()
        self.bad, self.atol, self.rtol = bad, atol, rtol

    def same(self, candidate: torch.Tensor) -> bool:
        c, g = candidate[self.bad], self.got[self.bad]
        atol = self.atol[self.bad] if torch.is_tensor(self.atol) else self.atol       # 每行一个（row_sum_tolerance）
        return bool(((g - c).abs() <= atol + self.rtol * c.abs()).all())

    def first_row(self) -> str:
        r = self.bad[0]
        return (f"第 {r} 行：应为 {self.ref[r].item():.6g}，得到 {self.got[r].item():.6g}"
                f"（不对的行：{rows_text(self.bad)}）")


def row_preview(t, k: int = 4) -> str:
    """一行的前 ``k`` 个值（诊断里对照「应为」与「得到」）。"""
    vals = ", ".join(f"{v:.4g}" for v in t[:k].tolist())
    return vals + (", …" if t.numel() > k else "")


def first_bad_row(ref, got, bad: list[int]) -> str:
    """逐元素比较的实验（softmax、RMSNorm）诊断的第一句：第一个不对的行，应为与得到的前几个值。"""
    r = bad[0]
    return f"第 {r} 行：应为 [{row_preview(ref[r])}]，得到 [{row_preview(got[r])}]（不对的行：{rows_text(bad)}）"


def rows_text(rows: list[int], limit: int = 8, unit: str = "行") -> str:
    s = ", ".join(map(str, rows[:limit]))
    return s + (f" 等 {len(rows)} {unit}" if len(rows) > limit else "")


# ---------------------------------------------------------------- 源码中的位置

_LINE_RE = re.compile(r"第 (\d+) 行")


def error_line(exc: BaseException) -> int | None:
    """模拟器、memcount 等错误里的源码行号。"""
    line = getattr(exc, "line", None)
    if isinstance(line, int):
        return line
    if isinstance(line, str):
        m = re.search(r":(\d+)", line)
        if m:
            return int(m.group(1))
    m = _LINE_RE.search(str(exc))
    return int(m.group(1)) if m else None


def zh_part(message: str) -> str:
    """双语错误信息的中文部分（" / " 之前）。"""
    return message.split(" / ")[0].strip()


def _docstring_lines(text: str) -> set[int]:
    """Python 源码里文档字符串占的行（模块、函数、类开头的字符串）；解析不了时空集。"""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            out.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return out


def find_line(text: str, pattern: str, flags=0, lang: str = "c") -> int | None:
    """源码里第一处匹配 ``pattern``（正则）的行号；先去掉注释（``lang``：c 或 py；py 另外跳过文档字符串）。"""
    rx = re.compile(pattern, flags)
    marker = "//" if lang == "c" else "#"
    skip = _docstring_lines(text) if lang == "py" else set()
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split(marker)[0]
        if i not in skip and rx.search(code):
            return i
    return None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` 与它的 ``__cause__`` / ``__context__``，由外到内（Triton 解释器把内核里的错误包进 InterpreterError）。"""
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def root_cause(exc: BaseException) -> BaseException:
    """最里层的异常：学习者代码里真正出错的那一个。"""
    return exception_chain(exc)[-1]


def _frames_line(exc: BaseException, target: str) -> int | None:
    tb, line = exc.__traceback__, None
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def traceback_line(exc: BaseException, path: Path) -> int | None:
    """学习者文件 ``path`` 中出错的行：沿异常链由内向外，取最里层的异常落在这个文件里的最后一帧
    （内核里的 NameError 指向内核的那一行，而不是启动内核的那一行）。"""
    target = str(path.resolve())
    for e in reversed(exception_chain(exc)):
        line = _frames_line(e, target)
        if line is not None:
            return line
        if isinstance(e, SyntaxError) and e.filename and Path(e.filename).resolve() == path.resolve():
            return e.lineno
    return None


# ---------------------------------------------------------------- 运行一个用例

#: 再运行一次时输出先填的值：有限、在 float16 / bfloat16 里也能精确表示，正常的结果里不会整片出现
WRITE_MARK = 1536.0


def never_written(op, x, out_shape) -> torch.Tensor:
    """输出里内核从来没有写过的元素（bool，与输出同形，在 CPU 上）：同一个输入再运行一次，输出先填
    :data:`WRITE_MARK`，仍是它的就是没写。第一次运行的输出是 NaN 时，靠它分清「没写」与「写了 NaN（0/0、inf - inf）」。"""
    import numpy as np

    out = torch.full(out_shape, WRITE_MARK, dtype=x.dtype if x.is_floating_point() else torch.float32, device=x.device)
    with np.errstate(all="ignore"):
        op(x, out=out)
    if x.is_cuda:
        torch.cuda.synchronize()
    return (out == WRITE_MARK).cpu()


Runner = Callable[[Case], tuple[bool, float | None, str, Hint | None]]


#: 这些 CUDA 错误之后上下文失效（「粘滞」的错误）：同一进程里之后的每个 CUDA 调用都报同一个错
_CONTEXT_LOST = ("illegal memory access", "misaligned address", "unspecified launch failure", "illegal instruction",
                 "device-side assert", "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS",
                 "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_ASSERT")


def gpu_context_lost(exc: BaseException) -> bool:
    """``exc`` 是不是一个让 CUDA 上下文失效的错误（非法访存、未对齐的访问、设备端断言……）。模拟器的错误不是：
    它们的说明里也写着「GPU 上是 misaligned address 错误」，可模拟器在访问发生之前就停下了。"""
    if type(exc).__module__.startswith("reduction_lab.simt"):
        return False
    text = str(exc)
    return any(s in text for s in _CONTEXT_LOST)


def _context_lost_hint(case: Case, index: int, exc: BaseException, hint: Hint) -> Hint:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Hint("gpu-fault", f"内核在 GPU 上出错（用例 {index}，{case.label}）：{first}", hint.file, hint.line,
                "这个错误之后，这个进程里的 CUDA 上下文已经失效，之后的每个 CUDA 调用都报同一个错：后面的用例没有运行。",
                "最常见的原因是越界的读写（行号、步长或循环边界算错）。改好之后在新的进程里重新评分（notebook 里先重启内核）；"
                "要找出是哪一行，用模拟器运行同样的用例：设置环境变量 REDUCTION_LAB_MODE=sim 再运行 reduction-lab lab check"
                "（模拟器检查每一次访问的边界，指出越界的那一行）。")


#: sim 模式下一个用例最多运行的秒数（参考解的每个用例都在 1 秒以内）。Triton 解释器里的死循环不会自己停下，
#: CUDA C 模拟器另有按步数的上限（LoopLimitError）
CASE_TIME_LIMIT_S = 60


class CaseTimeout(Exception):
    """一个用例运行超过了 :data:`CASE_TIME_LIMIT_S` 秒。"""


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """``seconds`` 秒之后在运行中的代码里抛出 :class:`CaseTimeout`（SIGALRM；只在主线程、有 setitimer 的系统上）。"""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum, frame):
        raise CaseTimeout(f"用例运行了 {seconds:g} 秒还没有结束 (the case ran for {seconds:g} s without finishing)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def timed_out(exc: BaseException | None) -> CaseTimeout | None:
    """``exc`` 或它的起因链里的 :class:`CaseTimeout`（解释器可能把它包在别的异常里）。"""
    return next((e for e in exception_chain(exc) if isinstance(e, CaseTimeout)), None) if exc is not None else None


def timeout_hint(exc: BaseException, files: dict[str, Path]) -> Hint | None:
    """用例超时的诊断：指向超时的那一刻正在执行的、学习者文件里的那一行（:func:`traceback_line`）。"""
    if timed_out(exc) is None:
        return None
    file, line = next(((name, ln) for name, p in files.items() if (ln := traceback_line(exc, Path(p))) is not None),
                      (None, None))
    return Hint("timeout", f"用例运行了 {CASE_TIME_LIMIT_S} 秒还没有结束：很可能是死循环", file, line,
                detail="超时的那一刻正在执行这一行。" if line else "",
                fix="检查循环变量每一轮是否在变（start += BLOCK、range(0, n, BLOCK) 的步长）以及循环条件能否变成假。")


def run_cases(cases: list[Case], runner: Runner, on_error: Callable[[Case, BaseException], Hint],
              only: set[int] | None = None, limit_s: float | None = None,
              progress: Callable[[int, int, Case], None] | None = None) -> list[CaseResult]:
    """逐个运行用例；``runner`` 返回 (是否通过, 最大误差, 备注, 诊断)，异常交给 ``on_error`` 诊断。
    ``only``：只运行这些编号（从 1 起）的用例，其余记为没有运行（``skipped``）。
    ``limit_s``：每个用例最多运行的秒数（:func:`time_limit`）；超时之后不再运行后面的用例（多半同样停不下来）。
    让 CUDA 上下文失效的错误（:func:`gpu_context_lost`）之后不再运行后面的用例：它们只会报同一个错。
    ``progress(i, n, case)``：每个用例开始之前调用（命令行用它显示进度：第一次遇到的形状要先编译，可能要几秒）。"""
    out = []
    for i, case in enumerate(cases, 1):
        if only is not None and i not in only:
            out.append(CaseResult(i, case, False, None, "未运行（--case）", skipped=True))
            continue
        if progress is not None:
            progress(i, len(cases), case)
        printed = captured_output()          # 内核里 printf 的输出（模拟器与 GPU）：记在这个用例上，不让十几个用例的输出挤满终端
        try:
            with printed, time_limit(limit_s):
                ok, err, note, hint = runner(case)
        except Exception as exc:  # noqa: BLE001  学习者的代码可能抛出任何异常：都要诊断，不能让评分崩溃
            ok, err, note, hint = False, None, type(exc).__name__, on_error(case, exc)
            if timed_out(exc):
                out.append(CaseResult(i, case, False, None, f"超时（{limit_s:g} 秒）", hint, printed.text))
                out += [CaseResult(j, c, False, None, f"未运行：用例 {i} 超时") for j, c in enumerate(cases[i:], i + 1)]
                return out
            if gpu_context_lost(exc):
                out.append(CaseResult(i, case, ok, err, note, _context_lost_hint(case, i, exc, hint), printed.text))
                out += [CaseResult(j, c, False, None, f"未运行：用例 {i} 之后 CUDA 上下文已经失效")
                        for j, c in enumerate(cases[i:], i + 1)]
                return out
        out.append(CaseResult(i, case, ok, err, note, hint, printed.text))
    return out


def output_excerpt(results: list[CaseResult]) -> tuple[str, list[str]] | None:
    """报告里摘出的输出：第一个失败且有输出的用例（都通过时第一个有输出的用例），标题与前 :data:`OUTPUT_LINES` 行。"""
    r = next((r for r in results if r.output and not r.ok), None) or next((r for r in results if r.output), None)
    if r is None:
        return None
    lines = r.output.splitlines()
    more = f"，只列出前 {OUTPUT_LINES} 行" if len(lines) > OUTPUT_LINES else ""
    others = sum(1 for x in results if x.output) - 1
    tail = f"；另有 {others} 个用例也有输出" if others else ""
    return (f"用例 {r.index}（{r.case.name}，{r.case.label}）运行时印出了 {len(lines)} 行{more}{tail}：",
            lines[:OUTPUT_LINES])


def merge_hints(results: list[CaseResult]) -> list[Hint]:
    """同一个原因（key、文件、行）只报一次，附上它出现在哪些用例里。"""
    merged: dict[tuple, Hint] = {}
    for r in results:
        h = r.hint
        if h is None:
            continue
        k = (h.key, h.file, h.line)
        if k not in merged:
            merged[k] = Hint(h.key, h.cause, h.file, h.line, h.detail, h.fix, [])
        merged[k].cases.append(r.index)
    return list(merged.values())
