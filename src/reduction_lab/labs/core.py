"""实验的骨架：一个实验是什么（:class:`Lab`），以及 start / check 的流程。

每个实验是 :class:`Lab` 的一个子类（见 :mod:`.registry`），给出：骨架文件、评分用例、
怎样加载并运行学习者的代码、这个实验特有的诊断，以及 gpu 模式下的计时。
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import itertools
import os
import shutil
import sys
from pathlib import Path

import torch

from .. import runtime
from . import grading, offsets, todo
from .grading import BenchRow, Case, CaseResult, GradeResult, Hint, LabError, merge_hints, run_cases, timeout_hint

SKELETON_DIR = Path(__file__).resolve().parent / "skeletons"

#: 模拟器检查发现这些错误时不再运行用例：屏障发散、死循环、mask 不对的 warp 原语可能让 GPU 挂起
#: （在模拟器里死循环要跑满工作预算）；线程块大小不合法时每个用例都一样错。
#: sim 模式的模拟器检查只报告死循环，其余错误照常在各个用例里报出。
BLOCKING = {"barrier-divergence", "endless-loop", "spin-wait", "order-dependent", "plain-load", "not-resident", "warp-sync",
            "block-size"}
#: 用例之外的检查里，排在用例的诊断之后的（用例的输入上不出错，只在大输入上错）
LATE_HINTS = {"int32-offset", "int32-counter"}

#: gpu 模式下模拟器检查发现这些错误时也不在 GPU 上运行用例：越界访问、读已经退出的块的共享内存、越界的簇内编号、
#: 不对齐的向量加载
#: 在 GPU 上可能是一次非法访存（illegal memory access）。CUDA 上下文从此不能再用：同一进程里之后的每个 CUDA 调用
#: 都报同一个错（notebook 里直到重启内核），后面的用例、别的实验都跟着失败，真正的原因反而被盖住。
GPU_UNSAFE = {"out-of-bounds", "dsmem-exited", "dsmem-rank", "misaligned"}
GPU_UNSAFE_NOTE = "（这个错误可能让 GPU 上的内核非法访存，之后这个进程里的 CUDA 调用都会失败：用例没有在 GPU 上运行。）"

#: ``lab check`` 接受的 backend 别名（课程原来的测试用 ``--backend nvidia`` 表示 CUDA C）
BACKEND_ALIASES = {"nvidia": "cuda"}


class Lab:
    """一个实验。子类覆盖类属性和 ``load`` / ``run_case`` / ``on_error`` 等方法。"""

    name: str = ""
    title: str = ""
    lecture: str = ""          # 对应的讲义页面（docs/ 下的路径）
    notebook: str = ""         # 实验页面（docs/labs/ 下的 .ipynb）
    files: tuple[str, ...] = ()   # 学习者要改的文件；第一个是 lab start 之后提示打开的
    backend: str = ""
    #: sim 模式下每个用例的时间上限（grading.CASE_TIME_LIMIT_S）：Triton 解释器与 CUDA C 模拟器都在 Python 里逐句执行，
    #: 超时的信号能打断它们；TileLang 的 sim 模式运行编译好的 C 代码（信号打断不了），第一次还要编译，不设上限
    case_time_limit: bool = True

    @property
    def file(self) -> str:
        """学习者要改的（第一个）文件。"""
        return self.files[0]

    open_first = file

    # ---- 骨架
    def skeleton_dir(self) -> Path:
        return SKELETON_DIR / self.name

    def skeleton_text(self, file: str) -> str:
        return (self.skeleton_dir() / file).read_text(encoding="utf-8")

    # ---- 子类实现
    def cases(self, mode: str) -> list[Case]:
        raise NotImplementedError

    def load(self, paths: dict[str, Path], mode: str):
        """加载学习者的代码，返回之后 ``run_case`` 用的对象。失败时抛出异常（交给 ``on_load_error``）。"""
        raise NotImplementedError

    def run_case(self, impl, case: Case, mode: str):
        """运行一个用例，返回 (是否通过, 最大误差, 备注, Hint 或 None)。"""
        raise NotImplementedError

    def on_error(self, case: Case, exc: BaseException, paths: dict[str, Path]) -> Hint:
        raise NotImplementedError

    def on_load_error(self, exc: BaseException, paths: dict[str, Path]) -> Hint:
        return self.on_error(None, exc, paths)

    def extra_checks(self, impl, mode: str, paths: dict[str, Path]) -> tuple[list[str], list[Hint]]:
        """用例之外的检查（例如 gpu 模式下先让模拟器检查一遍），返回 (报告里的说明行, 诊断)。"""
        return [], []

    def final_checks(self, impl, mode: str, paths: dict[str, Path]) -> tuple[list[str], list[Hint]]:
        """全部用例通过之后的检查（例如 sim 模式下把 Triton 内核编译成 GPU 的机器码），返回 (说明行, 诊断)。"""
        return [], []

    def bench(self, impl) -> tuple[str, list[BenchRow]]:
        """gpu 模式、全部用例通过之后：学习者的内核与 torch、设备拷贝的计时。"""
        return "", []


def resolve_backend(lab: Lab, backend: str | None) -> str:
    if backend is None:
        return lab.backend
    b = BACKEND_ALIASES.get(backend, backend)
    if b != lab.backend:
        from .registry import LABS

        others = [l.name for l in LABS.values() if l.backend == b]
        hint = f"；{b} 的实验是 {', '.join(others)}" if others else ""
        raise LabError(f"实验 {lab.name} 评的是 {lab.backend} 后端，不能用 --backend {backend}{hint} "
                       f"(lab {lab.name} grades the {lab.backend} backend)")
    return b


def default_dir(name: str) -> Path:
    root = os.environ.get("REDUCTION_LAB_LABS")
    return Path(root) / name if root else Path("labs") / name


def start(lab: Lab, directory=None, overwrite: bool = False) -> tuple[Path, list[Path]]:
    """把骨架复制到 ``directory``（默认 ``./labs/NAME``）。已有的文件不覆盖，除非 ``overwrite``。
    返回 (目录, 新复制的文件)。"""
    dest = Path(directory) if directory is not None else default_dir(lab.name)
    if dest.exists() and not dest.is_dir():
        raise LabError(f"{dest} 已存在且不是目录 ({dest} exists and is not a directory)")
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for src in sorted(lab.skeleton_dir().iterdir()):
        if not src.is_file() or src.name.startswith((".", "__")):
            continue
        target = dest / src.name
        if target.exists() and not overwrite:
            continue
        shutil.copyfile(src, target)
        copied.append(target)
    return dest, copied


def _learner_dir(lab: Lab, directory) -> Path:
    """没给目录时用 ``./labs/NAME``；它不在、而当前目录里有这个实验的全部文件（在实验目录里运行）时用当前目录。"""
    if directory is not None:
        return Path(directory)
    d = default_dir(lab.name)
    if not d.is_dir() and all((Path.cwd() / f).is_file() for f in lab.files):
        return Path(".")
    return d


def _learner_paths(lab: Lab, directory) -> dict[str, Path]:
    d = _learner_dir(lab, directory)
    paths = {}
    for f in lab.files:
        p = d / f
        if not p.is_file():
            raise LabError(f"{d} 里没有 {f}：先运行 reduction-lab lab start {lab.name} {d} "
                           f"({p} not found; run `reduction-lab lab start {lab.name} {d}` first)")
        paths[f] = p
    return paths


def _todo_hints(lab: Lab, paths: dict[str, Path], cases_passed: bool = False) -> list[Hint]:
    """每个文件里第一个没动过的 TODO 作为一条诊断，其余的列在它下面。

    后面的步骤都没动过（学习者停在这一步）：``todo``，没完成。后面有动过的步骤，或者全部用例已经通过
    （``cases_passed``）：这一步的代码可能写在了别的 TODO 下面，``todo-elsewhere`` 只是提醒，
    不挡住全部通过之后的检查。"""
    hints = []
    for f, p in paths.items():
        left = todo.untouched(lab.skeleton_text(f), p.read_text(encoding="utf-8"))
        if not left:
            continue
        if cases_passed:
            left = [dataclasses.replace(t, later_edited=True) for t in left]
        pending = [t for t in left if not t.later_edited]
        if pending:
            t = pending[0]
            rest = "".join(f"、TODO({o.number})（第 {o.line} 行）" for o in pending[1:])
            detail = f"还没动过的步骤：TODO({t.number})（第 {t.line} 行）{rest}" if rest else ""
            hints.append(Hint("todo", f"TODO({t.number}) 还没有完成", f, t.line, detail=detail,
                              fix="按这一步的注释写出代码，再评分。"))
        moved = [t for t in left if t.later_edited]
        if moved:
            t = moved[0]
            names = "、".join(f"TODO({o.number})（第 {o.line} 行）" for o in moved)
            why = "全部用例却都通过了" if cases_passed else "后面的步骤却改过了"
            hints.append(Hint(
                "todo-elsewhere", f"TODO({t.number}) 下面还是骨架的原样，{why}", f, t.line,
                detail=f"下面没有新代码的步骤：{names}。这几步的代码如果写在了别的 TODO 下面，可以不管这一条。",
                fix="把每一步的代码写在它自己的 TODO 注释下面；写在别处的，删掉那一步的 TODO 注释行。"))
    return hints


def check(lab: Lab, directory=None, backend: str | None = None, bench: bool | None = None,
          cases=None, progress=None) -> GradeResult:
    """评分：运行全部用例，给出成绩表和诊断；gpu 模式下全部通过后计时（``bench=False`` 跳过）。
    ``cases``：只运行这些编号（从 1 起，成绩表的 # 列）的用例，其余不运行、不计入结论，也不计时。
    ``progress(i, n, case)``：每个用例开始之前调用（:func:`.grading.run_cases`）。"""
    backend = resolve_backend(lab, backend)
    paths = _learner_paths(lab, directory)
    mode = runtime.MODE
    only = _selected_cases(lab, mode, cases)
    result = GradeResult(lab.name, lab.title, list(paths.values()), mode, backend)
    todos = _todo_hints(lab, paths)
    pending = [h for h in todos if h.key == "todo"]   # 真没完成的步骤：全部通过之后的检查不做
    try:
        impl = lab.load(paths, mode)
    except Exception as exc:  # noqa: BLE001  语法错误、编译错误：诊断后结束
        result.hints = pending[:1] + [lab.on_load_error(exc, paths)]
        cases = lab.cases(mode)
        result.results = [CaseResult(i, c, False, None, "未运行") for i, c in enumerate(cases, 1)]
        return result
    with contextlib.redirect_stdout(io.StringIO()):   # 预检查里内核的 printf：用例自己的输出会摘进报告
        extra_lines, extra_hints = lab.extra_checks(impl, mode, paths)
    extra_hints = extra_hints + offsets.offset_hints(lab, paths)     # 用例测不出的 32 位下标：从源码找
    result.extra = extra_lines
    cases = lab.cases(mode)
    blocking = [h for h in extra_hints if h.key in BLOCKING or (mode == "gpu" and h.key in GPU_UNSAFE)]
    for h in blocking:
        if h.key in GPU_UNSAFE:
            h.detail = (h.detail + "\n" if h.detail else "") + GPU_UNSAFE_NOTE
    if blocking:
        # 模拟器发现的错误在 GPU 上可能让内核挂起或非法访存：不在 GPU 上运行
        result.results = [CaseResult(i, c, False, None, "未运行：" + blocking[0].cause) for i, c in enumerate(cases, 1)]
    else:
        result.results = run_cases(cases, lambda c: lab.run_case(impl, c, mode),
                                   lambda c, e: timeout_hint(e, paths) or lab.on_error(c, e, paths), only,
                                   limit_s=grading.CASE_TIME_LIMIT_S if mode == "sim" and lab.case_time_limit else None,
                                   progress=progress)
    # 顺序：没完成的 TODO（最可能的原因）、模拟器检查（GPU 不会报出的根源）、各用例的诊断
    # 源码检查里只关乎大输入的（32 位的行偏移）排在用例的诊断之后：先改用例里就错的
    late = [h for h in extra_hints if h.key in LATE_HINTS]
    hints = [h for h in extra_hints if h.key not in LATE_HINTS] + merge_hints(result.results) + late
    cases_ok = bool(result.results) and all(r.ok for r in result.results if not r.skipped)
    if pending and cases_ok and not result.partial:
        # 没动过的步骤，用例却全部通过：代码多半写在了别的 TODO 下面（提醒），全部通过之后的检查照做
        todos = _todo_hints(lab, paths, cases_passed=True)
        pending = []
    if not hints and not pending and cases_ok:
        with contextlib.redirect_stdout(io.StringIO()):   # 检查里再运行内核：它的 printf 不进终端
            final_lines, hints = lab.final_checks(impl, mode, paths)
        result.extra = result.extra + final_lines
    if hints and todos:
        hints = todos + hints
    result.hints = hints
    want_bench = (mode == "gpu") if bench is None else bench
    if want_bench and result.passed and mode == "gpu" and not result.partial:
        result.bench_note, result.bench = lab.bench(impl)
    return result


def _selected_cases(lab: Lab, mode: str, cases) -> set[int] | None:
    """``cases``（None、一个编号或编号的序列）-> 编号的集合；编号不存在时报 LabError（在运行任何东西之前）。"""
    if cases is None:
        return None
    picked = [cases] if isinstance(cases, int) else list(cases)
    total = len(lab.cases(mode))
    bad = [c for c in picked if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= total]
    if not picked or bad:
        raise LabError(f"用例编号要在 1 到 {total} 之间（{lab.name} 在 {mode} 模式下有 {total} 个用例），得到 "
                       f"{', '.join(map(repr, bad)) or '空'} (case numbers must be in 1..{total})")
    return set(picked)


# ---------------------------------------------------------------- 学习者的代码

_counter = itertools.count()


def load_module(path: Path, stem: str):
    """按路径导入学习者的 Python 文件（每次一个新名字，改过的内核不会用到旧的缓存）。"""
    import reduction_lab  # noqa: F401  先于 triton：sim 模式要打开解释器

    name = f"_reduction_lab_lab_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_learner_module(path: Path, stem: str, names: tuple[str, ...]):
    """导入学习者的 Python 文件（:func:`load_module`），并检查骨架里的这些名字还在。"""
    module = load_module(path, stem)
    for attr in names:
        if not hasattr(module, attr):
            raise AttributeError(f"{path.name} 里没有 {attr}：保留骨架里的名字 ({path.name} has no {attr})")
    return module


def sim_precheck(lab, mode, paths, run, label):
    """gpu 模式：先在模拟器（或 Triton 解释器）里跑一个小用例。GPU 不报告屏障发散、
    共享内存竞争、越界读与未初始化的读，这里找出它们。sim 模式下用例本身就在模拟器里运行。"""
    if mode != "gpu":
        return [], []
    import numpy as np

    try:
        with np.errstate(all="ignore"):
            run()
    except Exception as exc:  # noqa: BLE001
        h = lab.on_error(None, exc, paths)
        h.cause = f"模拟器检查（{label}）：" + h.cause
        return [f"模拟器检查（{label}）：发现问题，见下。", ""], [h]
    return [f"模拟器检查（{label}）：没有发现屏障发散、数据竞争、越界或未初始化的读。", ""], []


#: CUDA C 实验的模拟器检查用的工作预算（活跃线程 x 循环迭代，见 simt.launch 的 max_lane_steps）。
#: 检查用的小用例上，正确的内核（哪怕一个线程串行加完整行）用不到它的十分之一；死循环在一秒左右报出，
#: 而不是按模拟器默认的 2^28 在每个用例上各跑几十秒。
PROBE_LANE_STEPS = 1 << 22


def cuda_precheck(lab, mode, paths, run, label):
    """CUDA C 实验：先在模拟器里、以很小的工作预算 :data:`PROBE_LANE_STEPS` 跑一个小用例
    （``run(max_lane_steps)`` 调用 ``simt.launch``）。

    * gpu 模式：报告模拟器发现的任何错误——GPU 不报告屏障发散、共享内存竞争、越界与未初始化的读；
    * sim 模式：只报告死循环（其余错误在各个用例里报出，带着用例的形状）。

    死循环（以及屏障发散）是 :data:`BLOCKING` 的：评分不再运行用例，几秒之内给出结论。"""
    import numpy as np

    from .. import simt

    try:
        with np.errstate(all="ignore"):
            run(PROBE_LANE_STEPS)
    except simt.LoopLimitError as exc:
        h = lab.on_error(None, exc, paths)
        h.cause = f"模拟器检查（{label}）：" + h.cause
        if isinstance(exc, simt.SpinWaitError):       # 等不到：一圈下来什么都没变，不是预算用完
            return [f"模拟器检查（{label}）：循环里等的值等不到，用例没有运行。", ""], [h]
        h.detail = (h.detail + "\n" if h.detail else "") + \
            f"（检查用的工作预算是 {PROBE_LANE_STEPS:,} 个线程步：这个小用例上正确的内核远用不到这么多。）"
        return [f"模拟器检查（{label}）：循环停不下来，用例没有运行。", ""], [h]
    except Exception as exc:  # noqa: BLE001
        if mode != "gpu":
            return [], []
        h = lab.on_error(None, exc, paths)
        h.cause = f"模拟器检查（{label}）：" + h.cause
        return [f"模拟器检查（{label}）：发现问题，见下。", ""], [h]
    if mode != "gpu":
        return [], []
    return [f"模拟器检查（{label}）：没有发现屏障发散、数据竞争、越界或未初始化的读。", ""], []


# ---------------------------------------------------------------- gpu 计时

def time_against(calls: dict[str, callable], nbytes: int, copy_src: torch.Tensor, note: str):
    """计时：每个实现与同样字节数的设备拷贝（读 B + 写 B）。返回 (方法说明, BenchRow 列表)。"""
    from ..bench.timing import L2Flusher, l2_bytes, time_gpu

    flusher = L2Flusher(l2_bytes())
    dst = torch.empty_like(copy_src)
    copy_t = time_gpu([lambda: dst.copy_(copy_src)], 10, 50, flusher)
    copy_gbps = 2 * copy_src.numel() * copy_src.element_size() / copy_t.median_ms / 1e6
    rows = []
    for name, call in calls.items():
        t = time_gpu([call], 10, 50, flusher)
        g = nbytes / t.median_ms / 1e6
        rows.append(BenchRow(name, t.median_ms, g, g / copy_gbps))
    rows.append(BenchRow("设备拷贝 copy_", copy_t.median_ms, copy_gbps, 1.0))
    method = (f"计时（{note}）：CUDA 事件，50 次的中位数，每次之前只读扫过 4 倍 L2 的缓冲区；"
              f"GB/s 按读入 + 写出的字节数计，拷贝按读 B + 写 B 计。")
    return method, rows


def softmax_bench(op, note: str, M: int = 4096, N: int = 4096):
    """softmax 实验的计时：M x N 的 float32 上学习者的 ``op(x, out=)``、``torch.softmax`` 与设备拷贝；
    GB/s 按读一遍、写一遍计。"""
    x = torch.randn(M, N, device="cuda")
    out = torch.empty_like(x)
    calls = {"你的内核": lambda: op(x, out=out), "torch.softmax": lambda: torch.softmax(x, dim=-1, out=out)}
    return time_against(calls, 2 * x.numel() * 4, x, f"{M}x{N} float32{note}")
