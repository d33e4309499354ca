"""基准测试的主体：先验证每一个配置，再计时（llm.c的做法）。

流程（每个测试套件）：

1. 对每个形状生成输入（固定随机种子），用float64的torch结果作参考，逐个实现比对；
   任何一个不符就立即停下（:class:`ValidationError`），一毫秒都不计时；
2. 对每个形状：先测同样字节数的设备拷贝``dst.copy_(src)``作带宽上限，再逐个实现计时；
3. 按注释里的字节公式换算GB/s和占拷贝上限的比例。

softmax与row-sum可以按几种dtype测（``dtype="bfloat16"``等，字节数按元素大小计）；一个套件的记录里，
第一个dtype（有float32时是float32）的结果在顶层，其余在``by_dtype[dtype]``（:func:`dtype_records`）。
命令行默认把每个实现放进自己的子进程测量（:mod:`reduction_lab.bench.isolate`），子进程用
``on_mismatch="record"``：结果不符的实现在表格里标出，不计时，也不打断其他实现。

sim模式下只允许小形状（超出就缩小并说明），用time.perf_counter计时，并在输出和
JSON里写明：这些CPU时间与GPU性能无关。

课程页面：docs/bench/index.md「性能实测」。
"""

from __future__ import annotations

import datetime as _dt
import math
import importlib.metadata
import platform
import sys
import time
from typing import Callable, Iterable, Sequence

import torch

from ..runtime import DEVICE, MODE
from . import timing
from . import norm
from .impls import Impl, full_sum_versions, impls_for

SUITES = ("softmax", "row-sum", "full-sum", "bank-conflicts") + norm.NORM_SUITES + ("col-sum", "percall")

#: dtype的名字（JSON与--dtype里用全名）-> torch dtype；简称用在表格和文件名里
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                  "float": "float32", **{k: k for k in DTYPES}}
#: 可以按几种dtype测的套件（其余只有float32）
DTYPE_SUITES = ("softmax", "row-sum", "percall")

SIM_BANNER = ("注意：sim模式——在CPU上用time.perf_counter计时（Triton解释器/CUDA C模拟器），"
              "这些时间与GPU的性能无关。(sim mode: CPU times say nothing about a GPU)")

# 默认扫描：fp32，每个输入M*N = 2^26个元素（256 MB），N = 512 … 262144
DEFAULT_TOTAL = 2 ** 26
DEFAULT_NS = tuple(2 ** k for k in range(9, 19))
QUICK_NS = (512, 4096, 32768, 262144)
#: softmax 的默认扫描另加一行很长的形状：N = 2^20（M = 64），它的目标是拷贝带宽的 85%
SOFTMAX_LONG_NS = (2 ** 20,)
FULL_SUM_NS = (2 ** 22, 2 ** 28)

# sim模式：小形状（Triton解释器每个program约1 ms）
SIM_TOTAL = 2 ** 13
SIM_MAX_TOTAL = 2 ** 16
SIM_NS = (256, 1024)
SIM_FULL_SUM_NS = (2 ** 12, 2 ** 14)

# 每个测试套件的字节公式（GB/s = 字节数/ 中位时间）
BYTE_FORMULAS = {
    "softmax": "`2*M*N*4`：读`M*N`个fp32 + 写`M*N`个fp32",
    "row-sum": "`M*N*4`：只计读入的`M*N`个fp32（写出的`M*4`字节不计）",
    "full-sum": "`N*4`：只计读入的`N`个fp32",
    "col-sum": "`M*N*4`：只计读入的`M*N`个fp32（写出的`N*4`字节不计）",
    "copy": "`2*B`：`dst.copy_(src)`读`B`字节 + 写`B`字节，`B`与被测输入的字节数相同",
    **norm.BYTE_FORMULAS,
}

TOLERANCES = {
    "softmax": "`|y - y_ref| <= 1e-8 + 1e-4*|y_ref|`，`y_ref`是float64的`torch.softmax`；"
               "输入为randn加每行不同的偏移（-100 … 100），不减最大值就会溢出",
    "row-sum": "精确相等：输入是[-2, 2]内的整数，每个部分和都是小于2^24的整数，"
               "任何求和顺序都得到精确结果；参考是float64的`torch.sum`",
    "full-sum": "精确相等：输入是{-1, 0, 1}，部分和远小于2^24，任何求和顺序都精确；"
                "参考是float64的`torch.sum`",
    **norm.TOLERANCES,
    "col-sum": "精确相等：输入是[-2, 2]内的整数，每个部分和都是小于2^24的整数，"
               "任何求和顺序都得到精确结果；参考是float64的`torch.sum(dim=0)`",
}


#: JSON的版本：2起softmax/row-sum的记录可以按dtype分（by_dtype），percall是新套件；1的文件照样能读
SCHEMA = 2


class BenchError(RuntimeError):
    """参数不合法或者环境不满足。"""


def parse_dtypes(text) -> list[str]:
    """'float32,bf16' -> ['float32', 'bfloat16']（去重，保持顺序）。"""
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        key = str(item).strip().lower()
        if not key:
            continue
        if key not in _DTYPE_ALIASES:
            raise BenchError(f"未知的dtype {item!r}；可选：{', '.join(DTYPES)}（或fp32、bf16、fp16）"
                             f"(unknown dtype {item!r})")
        if _DTYPE_ALIASES[key] not in out:
            out.append(_DTYPE_ALIASES[key])
    if not out:
        raise BenchError(f"空的dtype列表{text!r}(empty dtype list)")
    return out


def elem_size(dtype: str) -> int:
    return torch.empty((), dtype=DTYPES[dtype]).element_size()


def byte_formula(suite: str, dtype: str = "float32") -> str:
    """字节公式的说明文字；float32与:data:`BYTE_FORMULAS`相同，其他dtype按元素大小写。"""
    if dtype == "float32":
        return BYTE_FORMULAS[suite]
    s, t = elem_size(dtype), DTYPE_SHORT[dtype]
    if suite == "softmax":
        return f"`2*M*N*{s}`：读`M*N`个{t} + 写`M*N`个{t}"
    if suite == "row-sum":
        return f"`M*N*{s}`：只计读入的`M*N`个{t}（写出的`M*{s}`字节不计）"
    raise BenchError(f"{suite}只有float32(only float32 for {suite})")


#: 半精度输出的容差：不超过输出dtype的一个ulp（相对），加上最小次正规数量级的绝对项
_HALF_TOL = {"bfloat16": (1e-8, 2.0 ** -7), "float16": (2.0 ** -24, 2.0 ** -10)}


def tolerance_text(suite: str, dtype: str = "float32") -> str:
    if dtype == "float32":
        return TOLERANCES[suite]
    if suite == "softmax":
        atol, rtol = _HALF_TOL[dtype]
        return (f"`|y - y_ref| <= {atol:.3g} + {rtol:.3g}*|y_ref|`（输出{DTYPE_SHORT[dtype]}的一个ulp），"
                f"`y_ref`是float64的`torch.softmax`，输入是同样的randn加偏移、舍入成{DTYPE_SHORT[dtype]}")
    if suite == "row-sum":
        return (f"与float64的`torch.sum`舍入成{DTYPE_SHORT[dtype]}后精确相等：输入是[-2, 2]内的整数，"
                f"float32累加是精确的，只在写出时舍入一次")
    raise BenchError(f"{suite}只有float32(only float32 for {suite})")


class ValidationError(BenchError):
    """某个实现的结果与参考不符：在计时之前停下。"""


# ---------------------------------------------------------------- 形状

def row_shapes(ns: Sequence[int], total: int) -> list[tuple[int, int]]:
    """(M, N)列表：M = total // N，要求整除。"""
    shapes = []
    for n in ns:
        if n <= 0 or total <= 0:
            raise BenchError(f"N和元素总数必须为正，得到N={n}, total={total}")
        if total % n:
            raise BenchError(f"元素总数{total}不能被N={n}整除(total elements must be a multiple of N)")
        shapes.append((total // n, n))
    return shapes


def parse_int_list(text: str) -> list[int]:
    """'512,1024'或'2^9,2^10'或'2**9' -> [512, 1024]。"""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "^" in part or "**" in part:
                base, exp = part.replace("**", "^").split("^")
                out.append(int(base) ** int(exp))
            else:
                out.append(int(part))
        except ValueError:
            raise BenchError(f"无法解析的整数{part!r}（例：512,1024或2^9）") from None
    if not out:
        raise BenchError(f"空的整数列表{text!r}")
    return out


# ---------------------------------------------------------------- 输入与参考

def _generator(seed: int) -> torch.Generator:
    g = torch.Generator(device=DEVICE)
    g.manual_seed(seed)
    return g


def make_input(suite: str, shape: tuple[int, ...], seed: int, dtype: str = "float32") -> torch.Tensor:
    x = _make_fp32_input(suite, shape, seed)
    return x if dtype == "float32" else x.to(DTYPES[dtype])


def _make_fp32_input(suite: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = _generator(seed)
    if suite == "softmax":
        m, n = shape
        x = torch.randn(m, n, generator=g, device=DEVICE, dtype=torch.float32)
        # 每行加一个偏移：exp(x)在x > 88.7时溢出fp32，不先减最大值的内核会给出inf/nan
        x += torch.linspace(-100.0, 100.0, m, device=DEVICE).unsqueeze(1)
        return x
    if suite in ("row-sum", "col-sum"):
        return torch.randint(-2, 3, shape, generator=g, device=DEVICE).to(torch.float32)
    if suite == "full-sum":
        return torch.randint(-1, 2, shape, generator=g, device=DEVICE).to(torch.float32)
    if suite in norm.NORM_SUITES:
        return norm.make_input(suite, shape, g)
    raise BenchError(f"未知的测试套件{suite!r}")


def reference(suite: str, x: torch.Tensor) -> torch.Tensor:
    if suite == "softmax":
        return torch.softmax(x.double(), dim=-1)
    if suite == "row-sum":
        return x.double().sum(dim=1)
    if suite == "full-sum":
        return x.double().sum().reshape(1)
    if suite in norm.NORM_SUITES:
        return norm.reference(suite, x)
    if suite == "col-sum":
        return x.double().sum(dim=0)
    raise BenchError(f"未知的测试套件{suite!r}")


def compare(suite: str, got, ref: torch.Tensor, dtype: str = "float32") -> tuple[bool, str]:
    """按:data:`TOLERANCES`（半精度见:func:`tolerance_text`）比对；返回(是否通过, 说明)。"""
    if suite in norm.BWD_SUITES and isinstance(got, (tuple, list)):
        got = norm.flatten(got)  # 反向：(dx, dW[, dB])
    if not isinstance(got, torch.Tensor):
        got = torch.as_tensor(got, device=ref.device)  # CuPy数组、Python数
    if suite == "full-sum":
        if got.numel() != 1:
            return False, f"应得到一个数，得到形状{tuple(got.shape)}"
        got = got.reshape(1)
    if tuple(got.shape) != tuple(ref.shape):
        return False, f"形状{tuple(got.shape)}，应为{tuple(ref.shape)}"
    want = DTYPES[dtype]
    if got.dtype != want:
        return False, f"dtype {got.dtype}，应为{want}"
    got64 = got.to(device=ref.device, dtype=torch.float64)
    if dtype != "float32" and suite != "softmax":
        ref = ref.to(want).to(torch.float64)   # 精确的和舍入成输出dtype
    err = (got64 - ref).abs()
    if suite == "softmax":
        atol, rtol = _HALF_TOL.get(dtype, (1e-8, 1e-4))
        bad = ~(err <= atol + rtol * ref.abs())  # nan也算不符
    elif suite in norm.NORM_SUITES:
        bad = ~norm.within_tolerance(suite, err, ref)
    else:
        bad = ~(err == 0)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        return False, (f"{int(bad.sum())}个元素超出容差，例如下标{idx}：得到{float(got64[idx]):.9g}，"
                       f"参考{float(ref[idx]):.9g}")
    return True, f"最大误差{float(err.max()):.3g}"


# ---------------------------------------------------------------- 字节数

def bytes_moved(suite: str, shape: tuple[int, ...], elem: int = 4) -> int:
    """被测实现的字节数，见:data:`BYTE_FORMULAS`；``elem``是元素的字节数（softmax与row-sum）。"""
    if suite == "softmax":
        m, n = shape
        return 2 * m * n * elem  # 读M*N + 写M*N个元素
    if suite == "row-sum":
        m, n = shape
        return m * n * elem  # 只计读；写出的M个元素不计
    if suite in norm.FWD_SUITES:
        m, n = shape
        return 2 * m * n * 4  # 读M*N + 写M*N个fp32
    if suite in norm.BWD_SUITES:
        m, n = shape
        return 3 * m * n * 4  # 读x、dy + 写dx，各M*N个fp32
    if suite in ("row-sum", "col-sum"):
        m, n = shape
        return m * n * 4  # 只计读；写出的M*4（N*4）字节不计
    if suite == "full-sum":
        (n,) = shape
        return n * 4  # 只计读
    raise BenchError(f"未知的测试套件{suite!r}")


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


# ---------------------------------------------------------------- 元数据

def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        mod = sys.modules.get(dist)
        return getattr(mod, "__version__", None)


#: 元数据里记下版本的可选库：(键, 发布的包名)。cupy 的包名还可能是 cupy-cuda13x / cupy-cuda12x（见 metadata）
LIBRARIES = (("cupy", "cupy"), ("tilelang", "tilelang"), ("quack", "quack-kernels"), ("liger", "liger-kernel"))


def metadata(argv: Sequence[str] | None = None) -> dict:
    if MODE == "gpu":
        device = torch.cuda.get_device_name(torch.cuda.current_device())
    else:
        device = f"CPU ({platform.machine()})，sim模式"
    cupy_version = _version("cupy") or _version("cupy-cuda13x") or _version("cupy-cuda12x")
    meta = {
        "mode": MODE,
        "device": device,
        "timer": "cuda-events" if MODE == "gpu" else "perf_counter",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        **{key: cupy_version if key == "cupy" else _version(name) for key, name in LIBRARIES},
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": " ".join(argv) if argv is not None else " ".join(sys.argv),
        "l2_bytes": timing.l2_bytes() if MODE == "gpu" else None,
        "sim_warning": SIM_BANNER if MODE == "sim" else None,
    }
    if MODE == "gpu":
        meta["cuda"] = torch.version.cuda
        meta["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(torch.cuda.current_device())))
    return meta


# ---------------------------------------------------------------- 运行

def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # 没装tqdm就不显示进度条
        return None
    return tqdm(total=total, desc=desc, leave=False, file=sys.stderr)


def _select(suite: str, names: Iterable[str] | None) -> list[Impl]:
    all_impls = impls_for(suite)
    if names is None:
        return all_impls
    names = list(names)
    known = {i.name for i in all_impls}
    if suite == "full-sum":
        # full-sum里的"cuda"代表全部8个版本
        known |= {"cuda"}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(f"{suite}没有实现{unknown}；可选：{sorted(known)}")
    picked = []
    for impl in all_impls:
        if impl.name in names or (suite == "full-sum" and "cuda" in names and impl.kind == "ours"):
            picked.append(impl)
    return picked


def _defaults(suite: str, ns, total, quick, iters, warmup, log, elem: int = 4, check_memory: bool = True):
    """按模式补全形状和次数；sim模式下把过大的形状缩小并说明。"""
    sim = MODE != "gpu"
    bad = [n for n in (ns or []) if not isinstance(n, int) or isinstance(n, bool) or n <= 0]
    if bad:
        raise BenchError(f"{suite}的长度必须是正整数，得到{bad}(lengths must be positive integers)")
    if total is not None and (not isinstance(total, int) or total <= 0):
        raise BenchError(f"元素总数必须是正整数，得到{total!r}(total elements must be a positive integer)")
    if suite == "full-sum":
        if ns is None:
            ns = SIM_FULL_SUM_NS if sim else FULL_SUM_NS
        if sim and max(ns) > SIM_MAX_TOTAL:
            log(f"[sim] full-sum的N超过{SIM_MAX_TOTAL}，只保留不超过它的（CPU上模拟太慢）")
            ns = [n for n in ns if n <= SIM_MAX_TOTAL] or [SIM_FULL_SUM_NS[0]]
        shapes = [(int(n),) for n in ns]
    else:
        if total is None:
            total = SIM_TOTAL if sim else DEFAULT_TOTAL
        if sim and total > SIM_MAX_TOTAL:
            log(f"[sim]元素总数{total}太大，缩小到{SIM_MAX_TOTAL}（CPU上模拟太慢）")
            total = SIM_MAX_TOTAL
        if ns is None:
            ns = SIM_NS if sim else (QUICK_NS if quick else DEFAULT_NS)
            if suite == "softmax" and not sim and not quick:
                ns = tuple(ns) + SOFTMAX_LONG_NS
        kept = [n for n in ns if n <= total]
        if len(kept) < len(ns):
            log(f"N > 元素总数{total}的形状被跳过：{[n for n in ns if n > total]}")
        shapes = row_shapes(kept, total)
    if not shapes:
        raise BenchError(f"{suite}没有可测的形状：所有N都大于元素总数{total}"
                         f"(nothing to measure: every N exceeds the total of {total} elements)")
    if not sim and check_memory:
        # 在开始之前拒绝显然放不下的形状：输入与输出各一份float32就超过空闲显存
        free, _ = torch.cuda.mem_get_info()
        biggest = max(math.prod(s) for s in shapes)
        if 2 * elem * biggest > free:
            raise BenchError(f"{suite}最大的形状有{biggest}个元素，输入加输出至少{2 * elem * biggest / 2**30:.1f} GiB，"
                             f"超过GPU空闲显存{free / 2**30:.1f} GiB(shape too large for the free GPU memory)")
    if warmup is None:
        warmup = 1 if sim else (3 if quick else 10)
    if iters is None:
        iters = 3 if sim else (20 if quick else 100)
    if iters < 1 or warmup < 0:
        raise BenchError(f"iters必须>= 1、warmup必须>= 0，得到iters={iters}, warmup={warmup}")
    return shapes, iters, warmup


def run_suite(suite: str, *, ns: Sequence[int] | None = None, total_elems: int | None = None,
              impls: Iterable[str] | None = None, iters: int | None = None,
              warmup: int | None = None, quick: bool = False, seed: int = 0,
              progress: bool = True, log: Callable[[str], None] = print,
              budget_s: float | None = None, dtype: str = "float32",
              on_mismatch: str = "raise") -> dict:
    """运行一个测试套件（一种dtype），返回可写进JSON的记录。结果不符时抛出:class:`ValidationError`；
    ``on_mismatch="record"``时改为在记录里标出（状态``mismatch``），这个实现在本套件里不计时。

    ``budget_s``：验证阶段（含全部JIT编译）用时超过它，就不再验证后面的形状，只对已验证的
    形状计时，并在记录里写明哪些形状因此未测（至少测一个形状）。"""
    if on_mismatch not in ("raise", "record"):
        raise BenchError(f"on_mismatch只能是raise或record，得到{on_mismatch!r}")
    if suite not in SUITES:
        raise BenchError(f"未知的测试套件{suite!r}；可选：{', '.join(SUITES)}, all")
    if dtype not in DTYPES:
        raise BenchError(f"未知的dtype {dtype!r}；可选：{', '.join(DTYPES)}")
    if dtype != "float32" and suite not in DTYPE_SUITES:
        raise BenchError(f"{suite}只有float32，不能按{dtype}测；可以按多种dtype测的套件："
                         f"{', '.join(DTYPE_SUITES)}({suite} is float32 only)")
    if suite == "bank-conflicts":
        from .bank import run_bank_conflicts

        return run_bank_conflicts(impls=impls, iters=iters, warmup=warmup, quick=quick,
                                  progress=progress, log=log, seed=seed)
    if suite == "percall":
        from .percall import run_percall

        return run_percall(impls=impls, dtypes=[dtype], iters=iters, warmup=warmup, quick=quick, seed=seed,
                           progress=progress, log=log, budget_s=budget_s, on_mismatch=on_mismatch)
    shapes, iters, warmup = _defaults(suite, ns, total_elems, quick, iters, warmup, log,
                                      elem=elem_size(dtype))
    chosen = _select(suite, impls)

    record: dict = {
        "suite": suite,
        "dtype": dtype,
        "bytes_formula": byte_formula(suite, dtype) if suite in DTYPE_SUITES else BYTE_FORMULAS[suite],
        "copy_formula": BYTE_FORMULAS["copy"],
        "tolerance": tolerance_text(suite, dtype) if suite in DTYPE_SUITES else TOLERANCES[suite],
        "iters": iters,
        "warmup": warmup,
        "impls": [],
        "skipped": {},
        "shapes": [],
    }
    runnable: list[Impl] = []
    for impl in chosen:
        reason = impl.unavailable() or impl.dtype_reason(dtype)
        if reason:
            record["skipped"][impl.name] = reason
            log(f"跳过{suite}/{impl.name}（{dtype}）：{reason}")
        else:
            runnable.append(impl)
            record["impls"].append({"name": impl.name, "label": impl.label, "kind": impl.kind})
    if suite == "full-sum" and any(i.name.startswith("v") for i in runnable):
        record["versions"] = {str(v): list(nd) for v, nd in sorted(full_sum_versions().items())}

    # 1)验证全部配置（也完成所有JIT编译）
    failures: dict[tuple, str] = {}
    refused: dict[tuple, str] = {}
    mismatches: dict[tuple, str] = {}          # record模式：(形状, 实现) -> 不符的说明
    mismatched: dict[str, tuple] = {}          # record模式：实现 -> 第一个不符的形状
    bar = _progress(len(shapes) * len(runnable), f"{suite}验证", progress)
    t_start = time.monotonic()
    validated = []
    # 先验证两端、再验证中间：时间预算用完时丢掉的是中间的形状，扫描的范围保持完整
    for shape in [shapes[i] for i in spread_order(len(shapes))]:
        if budget_s is not None and validated and time.monotonic() - t_start > budget_s:
            rest = [s_ for s_ in shapes if s_ not in validated]
            record["skipped_shapes"] = {"shapes": [list(s_) for s_ in rest],
                                        "reason": f"验证阶段超过时间预算{budget_s:g} s"}
            log(f"{suite}：验证阶段超过时间预算{budget_s:g} s，不测形状{rest}")
            break
        validated.append(shape)
        x = make_input(suite, shape, seed, dtype)
        ref = reference(suite, x)
        for impl in runnable:
            why = impl.refuses(shape, dtype)
            if why:
                refused[(shape, impl.name)] = why
            else:
                try:
                    got = impl.prepare(x)()
                except Exception as exc:  # 实现在这个形状上跑不了：记下来，不计时
                    failures[(shape, impl.name)] = f"{type(exc).__name__}: {exc}"
                    log(f"错误{suite}/{impl.name}形状{shape}：{type(exc).__name__}: {exc}")
                else:
                    ok, msg = compare(suite, got, ref, dtype)
                    del got
                    if not ok:
                        text = (f"结果不符：{suite}/{impl.name}（{dtype}），形状{shape}：{msg}。"
                                f"容差：{record['tolerance']}。")
                        if on_mismatch == "raise":
                            if bar is not None:
                                bar.close()
                            raise ValidationError(
                                text + f"在计时之前停止。(result mismatch: {suite}/{impl.name} at shape {shape})")
                        mismatches[(shape, impl.name)] = text
                        mismatched.setdefault(impl.name, shape)
                        log(text + "这个实现不计时。")
            if bar is not None:
                bar.update(1)
        del x, ref
    if bar is not None:
        bar.close()
    n_bad = len(failures) + len(refused) + len(mismatches)
    log(f"{suite}（{dtype}）：{len(validated) * len(runnable) - n_bad}个配置与参考一致"
        + (f"，{len(failures)}个运行出错" if failures else "")
        + (f"，{len(mismatches)}个结果不符" if mismatches else "")
        + (f"，{len(refused)}个被实现拒绝" if refused else ""))

    # 2)计时
    gpu = MODE == "gpu"
    # 全数组求和的一次调用有多次启动（逐级归约），小数组上Python的启动开销比内核还长：
    # 录成CUDA图再重放计时
    use_graphs = gpu and suite == "full-sum"
    record["timing"] = ("CUDA图重放 + CUDA事件" if use_graphs else "CUDA事件") if gpu else "time.perf_counter"
    l2 = timing.l2_bytes()
    flusher = timing.L2Flusher(l2) if gpu else None
    record["l2_flush"] = (f"每次计时调用前只读地扫过{timing.L2Flusher.FACTOR * l2 // 2**20} MiB（{timing.L2Flusher.FACTOR}倍L2）" if gpu
                          else "无（CPU计时）")
    shapes = [s_ for s_ in shapes if s_ in validated]  # 计时和输出按原来的顺序
    bar = _progress(len(shapes) * (len(runnable) + 1), f"{suite}计时", progress)
    for shape in shapes:
        nbytes_in = elem_size(dtype)
        for d in shape:
            nbytes_in *= d
        k = timing.rotation_count(nbytes_in, l2) if gpu else 1
        base = make_input(suite, shape, seed, dtype)
        bufs = [base] + [base.clone() for _ in range(k - 1)]

        def measure(make_call, name):
            calls = [make_call(b) for b in bufs]
            if not gpu:
                return timing.time_cpu(calls, warmup, iters)
            # 拷贝上限不录CUDA图：图里的拷贝节点走复制引擎，比内核拷贝慢，会把上限压低
            if use_graphs and name != "copy":
                try:
                    return timing.time_gpu_graph(calls, warmup, iters, flusher)
                except Exception as exc:  # 录不成CUDA图（例如录制期间要分配显存）：改用普通的事件计时
                    torch.cuda.synchronize()
                    log(f"{suite}/{name}：无法录制CUDA图（{type(exc).__name__}: {exc}），改用CUDA事件直接计时")
                    calls = [make_call(b) for b in bufs]
            return timing.time_gpu(calls, warmup, iters, flusher)

        def copy_call(src):
            dst = torch.empty_like(src)
            return lambda: dst.copy_(src)

        copy_t = measure(copy_call, "copy")
        copy_bytes = 2 * nbytes_in  # 读B + 写B
        copy_gbps = gbps(copy_bytes, copy_t.median_ms)
        if bar is not None:
            bar.update(1)
        entry = {
            "shape": list(shape),
            "bytes": bytes_moved(suite, shape, elem_size(dtype)),
            "input_bytes": nbytes_in,
            "rotating_buffers": k,
            "copy": {**copy_t.to_dict(), "bytes": copy_bytes, "gbps": copy_gbps},
            "results": {},
        }
        if suite != "full-sum":
            entry["M"], entry["N"] = shape
        else:
            entry["N"] = shape[0]
        nb = entry["bytes"]
        for impl in runnable:
            key = (shape, impl.name)
            if key in refused:
                entry["results"][impl.name] = {"status": "unsupported", "reason": refused[key]}
            elif key in mismatches:
                entry["results"][impl.name] = {"status": "mismatch", "error": mismatches[key]}
            elif key in failures:
                entry["results"][impl.name] = {"status": "error", "error": failures[key]}
            elif impl.name in mismatched:
                bad = mismatched[impl.name]
                entry["results"][impl.name] = {
                    "status": "skipped",
                    "reason": f"在形状{bad}上结果不符，这个实现在本套件（{dtype}）里不计时"}
            else:
                try:
                    t = measure(impl.prepare, impl.name)
                except Exception as exc:  # 计时时才出错（例如显存不够放轮换的副本）：记下来，继续
                    msg = f"计时时出错：{type(exc).__name__}: {exc}"
                    log(f"错误{suite}/{impl.name}形状{shape}：{msg}")
                    entry["results"][impl.name] = {"status": "error", "error": msg}
                else:
                    g = gbps(nb, t.median_ms)
                    entry["results"][impl.name] = {
                        "status": "ok", **t.to_dict(), "gbps": g,
                        "gbps_p20": gbps(nb, t.p80_ms), "gbps_p80": gbps(nb, t.p20_ms),
                        "frac_copy": g / copy_gbps,
                    }
            if bar is not None:
                bar.update(1)
        record["shapes"].append(entry)
        del bufs, base
        if gpu:
            torch.cuda.empty_cache()
    if bar is not None:
        bar.close()
    del flusher
    return record


def spread_order(n: int) -> list[int]:
    """0..n-1的一个排列：先两端，再逐次取各区间的中点（8 -> 0, 7, 3, 1, 5, 2, 4, 6）。"""
    if n <= 0:
        return []
    order = [0] + ([n - 1] if n > 1 else [])
    intervals = [(0, n - 1)]
    while intervals:
        nxt = []
        for lo, hi in intervals:
            if hi - lo < 2:
                continue
            mid = (lo + hi) // 2
            order.append(mid)
            nxt += [(lo, mid), (mid, hi)]
        intervals = nxt
    return order


def dtype_records(rec: dict) -> dict[str, dict]:
    """一个套件的记录按dtype拆开：{dtype: 记录}。schema 1（没有dtype字段）的记录是float32。"""
    top = {k: v for k, v in rec.items() if k != "by_dtype"}
    out = {rec.get("dtype", "float32"): top}
    out.update(rec.get("by_dtype", {}))
    return out


def combine_dtype_records(recs: dict[str, dict]) -> dict:
    """:func:`dtype_records`的逆：有float32时它在顶层，其余放进``by_dtype``。"""
    if not recs:
        raise BenchError("没有记录可合并(no records)")
    primary = "float32" if "float32" in recs else next(iter(recs))
    rec = dict(recs[primary])
    rec.pop("by_dtype", None)
    others = {d: r for d, r in recs.items() if d != primary}
    if others:
        rec["by_dtype"] = others
    return rec


def suite_dtypes(suite: str, dtypes: Sequence[str] | None) -> list[str]:
    """一个套件这次要测的dtype：只有float32的套件总是float32；percall默认float32与bfloat16。"""
    if suite not in DTYPE_SUITES:
        return ["float32"]
    if dtypes is None:
        return ["float32", "bfloat16"] if suite == "percall" else ["float32"]
    return list(dtypes)


def run(suites: Sequence[str], *, argv: Sequence[str] | None = None, ns: Sequence[int] | None = None,
        full_sum_ns: Sequence[int] | None = None, total_elems: int | None = None,
        impls: Sequence[str] | dict | None = None, progress: bool = True,
        log: Callable[[str], None] = print, dtypes: Sequence[str] | None = None, **kwargs) -> dict:
    """在本进程里运行若干测试套件，返回完整的JSON文档（``meta`` + ``suites``）。

    ``ns``/``total_elems``用于softmax与row-sum，``full_sum_ns``用于full-sum。
    ``impls``里某个套件没有的名字对该套件忽略（只跑一个套件时至少要有一个名字属于它），
    哪个套件都没有的名字报错；也可以是{套件: 名字列表}。``dtypes``用于softmax、row-sum与percall
    （默认float32；percall默认float32和bfloat16），其余套件总是float32。
    其余参数（iters、warmup、quick、seed、budget_s、on_mismatch）传给:func:`run_suite`。"""
    for suite in suites:
        if suite not in SUITES:
            raise BenchError(f"未知的测试套件{suite!r}；可选：{', '.join(SUITES)}, all")
    if dtypes is not None:
        dtypes = parse_dtypes(dtypes)
    per_suite: dict[str, list[str] | None] = {s: None for s in suites}
    if isinstance(impls, dict):
        per_suite.update({s: list(v) for s, v in impls.items() if s in per_suite})
    elif impls is not None:
        impls = list(impls)
        seen = {n for s in SUITES for n in known_impls(s)}  # 所有套件的实现名
        for s in suites:
            known = set(known_impls(s))
            per_suite[s] = [n for n in impls if n in known]
            if len(suites) == 1 and not per_suite[s]:
                raise BenchError(f"{s}没有实现{impls}；可选：{sorted(known)}")
        unknown = [n for n in impls if n not in seen]
        if unknown:
            raise BenchError(f"没有叫{unknown}的实现；可选：{sorted(seen)}")
    if MODE != "gpu":
        log(SIM_BANNER)
    doc = {"schema": SCHEMA, "meta": metadata(argv), "suites": {}}
    for suite in suites:
        if per_suite[suite] == []:
            log(f"{suite}：所选实现都不属于这个套件，跳过")
            continue
        opts = dict(kwargs, impls=per_suite[suite])
        if suite == "full-sum":
            opts["ns"] = full_sum_ns
        elif suite not in ("bank-conflicts", "percall"):
            opts["ns"] = ns
            opts["total_elems"] = total_elems
        if suite == "percall":
            from .percall import run_percall

            popts = {k: v for k, v in opts.items() if k in ("impls", "iters", "warmup", "quick", "seed",
                                                           "budget_s", "on_mismatch")}
            rec = run_percall(dtypes=suite_dtypes(suite, dtypes), progress=progress, log=log, **popts)
        else:
            recs = {}
            for dt in suite_dtypes(suite, dtypes):
                recs[dt] = run_suite(suite, progress=progress, log=log, dtype=dt, **opts)
                recs[dt]["meta"] = metadata(argv)
            rec = combine_dtype_records(recs)
        rec["meta"] = metadata(argv)
        doc["suites"][suite] = rec
    return doc


def known_impls(suite: str) -> list[str]:
    """一个套件可选的实现名（用于--impl）。"""
    if suite == "bank-conflicts":
        from .bank import VARIANTS

        return list(VARIANTS)
    if suite == "percall":
        from .percall import percall_impl_names

        return percall_impl_names()
    names = [i.name for i in impls_for(suite)]
    if suite == "full-sum":
        names.append("cuda")
    return names
