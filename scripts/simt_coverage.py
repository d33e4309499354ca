"""模拟器在公开的真实内核上的覆盖率：哪些内核能运行，哪些被拒绝，拒绝的是哪些构造。

    python scripts/simt_coverage.py CORPUS_DIR [--json OUT]

CORPUS_DIR 下每个含 ``CORPUS.json``（``{"repo": "owner/name", "commit": "...", "paths": [...]}``）的子目录是一个
公开仓库的一部分，由 ``--extract`` 从本地的 git 镜像取出（内核源码不进本仓库）：

    python scripts/simt_coverage.py --extract GITDIR PATH [PATH ...] --repo OWNER/NAME --into CORPUS_DIR/NAME

提交的结果用的语料（GITDIR 是两个公开仓库 mc-imperial/gpuverify 与 mc-imperial/GPUVerifyBenchmarks 的 git 目录）：

    python scripts/simt_coverage.py --extract GPUVERIFY_GITDIR testsuite/CUDA --repo mc-imperial/gpuverify --into C/gpuverify
    python scripts/simt_coverage.py --extract BENCHMARKS_GITDIR CUDA20 CUDA50 gpgpu-sim_ispass2009 \
        --repo mc-imperial/GPUVerifyBenchmarks --into C/benchmarks
    python scripts/simt_coverage.py C --json docs/data/simt_coverage.json && python scripts/simt_page_tables.py

对每个 .cu 文件里的每个 ``__global__`` 内核：用模拟器的前端解析，再用小的合成参数启动（指针给足够大的零数组，
整数给 64，浮点给 1.0；2 个线程块、每块 64 个线程；工作预算 2**20 个线程步、每个内核 20 秒），归为：

* ``ran``：运行结束；``sanitizer``：运行中报告了越界、竞争、屏障分化、工作预算用完等（也算运行了）；
* ``refused``：UnsupportedError，记下被拒绝的构造（未声明的标识符除外：nvcc 同样拒绝，归入 compile_error）；``parse_error``：前端无法解析（UnsupportedError 里的
  "cannot parse"）；``compile_error``：模拟器判定 nvcc 会拒绝；``launch_error``：合成的启动被拒绝；
* ``no_instance``：模板内核，文件里没有可启动的实例；``timeout``：超过 20 秒；
* ``exception``：漏出的 Python 异常——模拟器的缺陷，连同回溯记下来。

nvcc 在 PATH 上时（``--no-nvcc`` 关掉），每个文件再交给 nvcc 13 像编译给 GPU 那样编译一次：

    nvcc -arch=sm_90 -cubin -o /dev/null -include scripts/gpuverify_nvcc.h FILE      （在 FILE 所在的目录里运行）

不加 -rdc（与 CuPy/NVRTC 的路径一样：只声明、没有定义的函数在 ptxas 那里报错），用 nvcc 自己的头文件；
GPUVerify 的规约注解由强制包含的 ``gpuverify_nvcc.h`` 按模拟器对待它们的方式给出（见那个文件的开头）。
每个内核记下 ``nvcc``：``"ok"`` 或 ``"error: <第一条错误>"``，再两边对照着归类：

* 模拟器 CompileError、nvcc 也拒绝：``compile_error``；模拟器 CompileError、nvcc 却接受：算作 ``refused``
  （构造前加「CompileError，但 nvcc 接受：」），是模拟器的缺陷，单独列出；
* 模拟器运行了（``ran``/``sanitizer``）而 nvcc 拒绝：类别不变，另计 ``ran_but_nvcc_rejects`` 并列出；
  模拟器拒绝（``refused``/``parse_error``）而 nvcc 也拒绝：类别不变，另计 ``refused_but_nvcc_rejects``；
* 被拒绝的比例给两个：占全部内核（``refused_share``），占 nvcc 能编译的内核（``refused_share_nvcc_compiles``）。

nvcc 的结论缓存在语料目录下的 ``nvcc_verdicts.json``，键是文件内容的 sha256（另记 nvcc 的版本、命令与
gpuverify_nvcc.h 与它包含的 gpuverify_queries.h 的 sha256，它们变了缓存作废）；最多 2 个进程并行。``--nvcc-verdicts FILE`` 直接给出结论
（``{"owner/name:相对路径": "ok" | "error: ..."}``，测试用），不运行 nvcc。

按路径的稳定哈希（sha256 的首字节的奇偶）把语料分成「开发」与「留出」两半，两半分别统计。
结果写成 JSON（``--json``，默认打印摘要）；提交的结果在 docs/data/simt_coverage.json。
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("REDUCTION_LAB_MODE", "sim")

import numpy as np  # noqa: E402

from reduction_lab import simt  # noqa: E402

GRID, BLOCK = 2, 64
ARRAY_ELEMS = 1 << 14          # 每个指针参数的元素数
INT_ARG, FLOAT_ARG = 64, 1.0
LANE_STEPS = 1 << 20
SECONDS = 20

_DTYPES = {
    "bool": np.bool_, "_Bool": np.bool_, "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8,
    "short": np.int16, "unsigned short": np.uint16, "int": np.int32, "signed": np.int32, "unsigned": np.uint32,
    "unsigned int": np.uint32, "long": np.int64, "long long": np.int64, "unsigned long": np.uint64,
    "unsigned long long": np.uint64, "size_t": np.uint64, "int8_t": np.int8, "uint8_t": np.uint8,
    "int16_t": np.int16, "uint16_t": np.uint16, "int32_t": np.int32, "uint32_t": np.uint32, "int64_t": np.int64,
    "uint64_t": np.uint64, "uint": np.uint32, "float": np.float32, "double": np.float64,
}
_SANITIZER = ("OutOfBoundsError", "BarrierDivergenceError", "SharedMemoryRaceError", "GlobalMemoryRaceError",
              "WarpSyncError", "LoopLimitError", "SpinWaitError", "SimtRuntimeError", "UninitializedReadError",
              "DeviceAssertError")


NVCC_HEADER = Path(__file__).resolve().with_name("gpuverify_nvcc.h")
#: 它包含的、与模拟器的序言共用的验证器查询声明（两个文件一起决定 nvcc 的结论缓存是否作废）
NVCC_QUERIES = Path(__file__).resolve().parents[1] / "src" / "reduction_lab" / "simt" / "prelude" / "gpuverify_queries.h"
NVCC_ARGS = ("-arch=sm_90", "-cubin", "-o", os.devnull)
NVCC_WORKERS = 2
NVCC_SECONDS = 300
NVCC_CACHE = "nvcc_verdicts.json"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def split_of(key: str) -> str:
    """稳定的一分为二：sha256(路径) 首字节为偶数是 development，奇数是 held_out。"""
    return "development" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "held_out"


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def kernels_in(text):
    """(名字, 是否模板, 显式实例名或 None) 的列表，按源码里的 __global__ 定义与声明找出。"""
    t = _strip_comments(text)
    out, seen = [], set()
    for m in re.finditer(r"(template\s*<[^;{}]*>\s*)?(?:[A-Za-z_]\w*\s+)*__global__\s+(?:[A-Za-z_]\w*\s+)*?void\s+"
                         r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*(<[^;{}()]*>)?\s*\(", t):
        tpl, name, inst = m.group(1), m.group(2), m.group(3)
        if inst:                                         # 显式实例化：template __global__ void k<float>(...);
            for i, (n, is_t, _) in enumerate(out):
                if n == name and out[i][2] is None:
                    out[i] = (n, True, f"{name}{inst}")
            if name not in seen:
                seen.add(name)
                out.append((name, True, f"{name}{inst}"))
            continue
        if name in seen:
            continue
        seen.add(name)
        out.append((name, bool(tpl), None))
    return out


# GPUVerify 的规约注解（它自己的 cuda.h 里声明的内建函数）：不是 CUDA，单独归类
_GPUVERIFY = re.compile(r"^函数 (__(requires|ensures|assert|invariant|global_invariant|assume|axiom|read|write|implies|"
                        r"same_group|ptr_base|ptr_offset|other_\w+|uniform_\w+|distinct_\w+|add_noovfl\w*|enabled|"
                        r"no_read|no_write|return_val\w*|old\w*|global_requires|global_ensures|barrier_invariant\w*|"
                        r"function_wide_\w+|non_temporal\w*|array_snapshot|is_pow2|mod_pow2|at_most_one|read_implies|"
                        r"write_implies|reads_from|writes_to|atomic_has_taken_value|\w*_offset_bytes))\(\)")
VERIFIER = "GPUVerify 的规约注解（__requires、__ensures、__assert、__invariant 等）"
DECLARED_ONLY = "只有声明、没有定义的函数（验证器当作任意值）"

# 无法解析时，按出错的那一行认出常见的写法
_PARSE_PATTERNS = [
    (r"\btexture\s*<", "纹理引用 texture<>"),
    (r"__(requires|ensures|axiom|assert|invariant|global_invariant|assume)\b", VERIFIER),
    (r"__attribute__", "__attribute__((...))"),
    (r"\b(struct|class)\s+\w+\s*:", "结构体继承"),
    (r"\bgrid_group\b|\bthis_grid\b", "cooperative groups 的网格组 grid_group"),
    (r"\bcurand\w*", "cuRAND 的类型与函数"),
    (r"\b\w+\s*&\s*\w+\s*=", "引用变量 T& x = ..."),
    (r"\w+\s*=\s*[^,()=]+\)\s*(\{|$)", "参数的默认实参"),
    (r"^\s*#\s*pragma", "#pragma 之后的一行"),
    (r"^\s*#\s*include", "#include 的头文件"),
]


_INTERNAL = re.compile(r"[（(](AttributeError|AssertionError|TypeError|KeyError|ValueError|IndexError|NameError|"
                       r"UnboundLocalError|ZeroDivisionError|RuntimeError)\b")


def _source_line(path, err):
    """出错的那一行（在头文件里时读头文件）。"""
    ln = getattr(err, "line", None)
    if not isinstance(ln, int):
        return ""
    f = Path(path)
    hdr = getattr(err, "file", None)
    if hdr and (f.parent / hdr).is_file():
        f = f.parent / hdr
    try:
        lines = f.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        return ""
    return lines[ln - 1] if 1 <= ln <= len(lines) else ""


def construct_of(msg: str, line_text: str = "", source: str = "") -> str:
    """从 UnsupportedError 的信息里取出被拒绝的构造，去掉行号、路径、标识符，便于合并计数。"""
    if "找不到头文件" in msg or "include not found" in msg:
        m = re.search(r"include not found: (\S+)", msg)
        return f'#include "{m.group(1) if m else "?"}"（找不到头文件）'
    if "无法解析" in msg or "cannot parse" in msg:
        for pat, what in _PARSE_PATTERNS:
            if re.search(pat, line_text):
                return what if what == VERIFIER else f"无法解析：{what}"
        return "无法解析：其他"
    m = re.search(r"不支持\s*(.+)$", msg.split("\n")[0])
    what = m.group(1) if m else msg
    what = re.split(r"\s?/ ", what, maxsplit=1)[0]
    what = re.sub(r"\b结构体 \w+", "结构体", what)
    what = re.sub(r"的成员 \w+：", "的成员：", what)
    what = re.sub(r"^的模板形参", "内核的模板形参", what)
    what = re.sub(r"(内核|参数|变量) [A-Za-z_]\w*", r"\1", what)
    what = re.sub(r"(模板形参|文件作用域数组) '?[^'（）]*'?", r"\1", what)
    what = re.sub(r"(类模板或模板声明|函数重载或重复定义|函数模板的重载或特化) \S+", r"\1", what)
    what = re.sub(r"(空结构体 empty struct|联合 union) \S+", r"\1", what)
    what = re.sub(r"模板实例 .*? 的实参不合适：.*$", "模板实例的实参不合适", what)
    what = re.sub(r"\s+", " ", what).strip()
    what = re.sub(r"^纹理 texture<>.*", "纹理 texture<>", what)
    if _GPUVERIFY.match(what) or what.startswith("GPUVerify 的规约注解"):
        return VERIFIER
    bm = re.match(r"^(__\w+)（模拟器没有实现", what)             # 另一种写法：「__requires（模拟器没有实现……）」
    if bm and _GPUVERIFY.match(f"函数 {bm.group(1)}()"):
        return VERIFIER
    if re.match(r"^没有定义的函数 \w+（只有声明）", what):
        return DECLARED_ONLY
    fm = re.match(r"^函数 ([A-Za-z_]\w*)\(\)$", what)
    if fm and re.search(rf"\b{fm.group(1)}\s*\([^;{{}}]*\)\s*;", _strip_comments(source)):
        return DECLARED_ONLY
    return what[:80]


# ---------------------------------------------------------------- nvcc 交叉检查

def nvcc_command(nvcc, path: Path):
    """在 path 所在的目录里运行的 nvcc 命令（文件名不带目录，报错里不出现本机的路径）。"""
    return [nvcc, *NVCC_ARGS, "-include", str(NVCC_HEADER), path.name]


def first_error(output: str) -> str:
    """nvcc 输出里的第一条错误（去掉 ptxas 临时文件的路径）；找不到时给最后一行。"""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if re.search(r"\berror\b|\bfatal\b", ln)), lines[-1] if lines else "nvcc 失败，没有输出")
    hit = re.sub(r"/tmp/tmpxft_\w+-\d+_", "", hit)
    return re.sub(r"\s+", " ", hit)[:240]


def nvcc_verdict(nvcc, path: Path) -> str:
    try:
        p = subprocess.run(nvcc_command(nvcc, path), cwd=path.parent, capture_output=True, text=True,
                           errors="replace", timeout=NVCC_SECONDS)
    except subprocess.TimeoutExpired:
        return f"error: nvcc 超过 {NVCC_SECONDS} 秒 (timeout)"
    if p.returncode == 0:
        return "ok"
    return "error: " + first_error(p.stdout + "\n" + p.stderr)


def nvcc_setup(nvcc):
    """决定缓存是否有效的东西：nvcc 的版本、参数与强制包含的头文件。"""
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return {"nvcc": ver[-1] if ver else "?", "args": list(NVCC_ARGS) + ["-include", NVCC_HEADER.name],
            "header_sha256": hashlib.sha256(NVCC_HEADER.read_bytes() + NVCC_QUERIES.read_bytes()).hexdigest()}


def nvcc_verdicts(files, cache_path: Path, nvcc, verbose=False):
    """{文件: "ok" | "error: ..."}；结论按文件内容的 sha256 缓存在 cache_path。"""
    setup = nvcc_setup(nvcc)
    cache = {}
    if cache_path.is_file():
        try:
            old = json.loads(cache_path.read_text(encoding="utf-8"))
            if old.get("setup") == setup:
                cache = old.get("verdicts", {})
        except (OSError, ValueError):
            cache = {}
    keys = {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    todo = sorted({f for f in files if keys[f] not in cache})
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=NVCC_WORKERS) as ex:
        for f, v in zip(todo, ex.map(lambda f: nvcc_verdict(nvcc, f), todo)):
            cache[keys[f]] = v
            if verbose:
                print(f"nvcc {v[:70]:70s} {f}", flush=True)
    if todo:
        cache_path.write_text(json.dumps({"setup": setup, "verdicts": cache}, indent=1) + "\n", encoding="utf-8")
        print(f"nvcc：编译了 {len(todo)} 个文件（{time.perf_counter() - t0:.0f} 秒），其余 {len(files) - len(todo)} 个"
              f"用缓存 {cache_path}", flush=True)
    return {f: cache[keys[f]] for f in files}


def reconcile(outcome, detail, verdict):
    """模拟器的结论与 nvcc 的结论对照：返回 (类别, 详情)。verdict 为 None 时（没有 nvcc）不变。"""
    if verdict is None or outcome != "compile_error" or verdict != "ok":
        return outcome, detail
    detail = dict(detail or {})
    detail["construct"] = "CompileError，但 nvcc 接受：" + detail.get("construct", "")
    detail["simulator_bug"] = True
    return "refused", detail


def compile_construct(msg: str) -> str:
    """CompileError 的信息归并成诊断的名字（去掉文件、行号与标识符）。"""
    m = re.search(r"：(.+?)\s?/ ", msg)
    what = re.sub(r"\s+", " ", m.group(1) if m else msg).strip()
    what = re.sub(r"^编译错误（[^）]*）：|; in file included from.*$", "", what)
    if what.startswith("纹理引用 texture<>") or what.startswith("表面引用 surface<>"):
        return what.split(" 在 CUDA 12")[0] + "（CUDA 12 已移除）"
    if re.match(r"^(成员)?函数 \S+ 只有声明、没有定义", what):
        return "调用只有声明、没有定义的函数（ptxas：Unresolved extern function）"
    if what.startswith("GPUVerify 的查询"):
        return "GPUVerify 的查询（__other_int、__read 等，只有验证器能回答；没有函数体）"
    what = re.sub(r"^长度为 0 的数组变量 \w+：.*", "长度为 0 的数组变量（zero-sized variable）", what)
    what = re.sub(r"：nvcc 13 报错（error: ([^；]*)；clang 只给警告.*", r"（nvcc：\1）", what)
    return what[:80]


def _args_for(src, kname):
    sig = simt.kernel_signature(src, kname)
    dts = []
    for _, ctype, is_ptr in sig:
        base = " ".join(re.sub(r"\b(const|volatile|restrict|__restrict__|__restrict)\b|\*", " ", ctype).split())
        dts.append(_DTYPES.get(base, np.float32))
    return sig, dts


def _make_args(sig, dts):
    args = []
    for (_, _, is_ptr), dt in zip(sig, dts):
        if is_ptr:
            args.append(np.zeros(ARRAY_ELEMS, dt))
        else:
            args.append(FLOAT_ARG if np.dtype(dt).kind == "f" else (True if np.dtype(dt).kind == "b" else INT_ARG))
    return args


def run_kernel(path: Path, launch_name: str):
    """启动一个内核，返回 (类别, 详情)。"""
    src = str(path)
    try:
        sig, dts = _args_for(src, launch_name)
        by_value = {}                                # 按值传递的结构体参数：n 个数的元组
        for _ in range(len(sig) + 1):
            try:
                args = _make_args(sig, dts)
                for i, n in by_value.items():
                    if isinstance(n, list):
                        args[i] = tuple(np.zeros(ARRAY_ELEMS, _DTYPES.get(" ".join(re.sub(
                            r"\b(const|volatile)\b|\*", " ", k).split()), np.float32)) if k.endswith("*") else INT_ARG
                            for k in n)
                    else:
                        args[i] = n if isinstance(n, str) else (INT_ARG,) * n
                simt.launch(src, launch_name, GRID, BLOCK, args, shared_bytes=4096, max_lane_steps=LANE_STEPS)
                return "ran", None
            except TypeError as e:
                names = [p[0] for p in sig]
                m = re.search(r"parameter (\w+) expects (\w+) elements", str(e))
                v = re.search(r"parameter (\w+) is a .* passed by value: pass a tuple of (\d+) numbers", str(e))
                sv = re.search(r"parameter (\w+) is a .* passed by value: pass a tuple of \d+ values \(([^)]*)\)", str(e))
                fp = re.search(r"parameter (\w+) is a function pointer: .* one of \[['\"]([^'\"]+)['\"]", str(e))
                if fp and fp.group(1) in names and names.index(fp.group(1)) not in by_value:
                    by_value[names.index(fp.group(1))] = fp.group(2)      # 第一个 __device__ 函数的名字
                elif sv and sv.group(1) in names:              # 含指针成员的结构体：指针给数组，其余给整数
                    by_value[names.index(sv.group(1))] = [k.strip() for k in sv.group(2).split(",")]
                elif m and m.group(1) in names:
                    dts[names.index(m.group(1))] = np.dtype(m.group(2)).type
                elif v and v.group(1) in names:
                    by_value[names.index(v.group(1))] = int(v.group(2))
                else:
                    raise
        raise RuntimeError("参数类型无法确定")
    except _Timeout:
        return "timeout", None
    except simt.UnsupportedError as e:
        m = _INTERNAL.search(str(e))
        if m:                                        # 前端内部的 Python 异常被包成了 UnsupportedError：是缺陷
            inner = re.match(r"[^）)]*", str(e)[m.start() + 1:]).group(0)
            return "exception", {"traceback": "Traceback (UnsupportedError wrapping an internal error)\n" + str(e)[:1500],
                                 "error": f"UnsupportedError 里包着 {inner}（第 {e.line} 行）"}
        u = re.search(r"未声明的标识符 (\w+)（nvcc 同样报错）", str(e))
        if u:                                        # 源码本身有错（nvcc 同样拒绝）：不是模拟器拒绝的构造
            return "compile_error", {"construct": f"未声明的标识符（nvcc 同样报错）", "message": str(e)[:300]}
        c = construct_of(str(e), _source_line(path, e), path.read_text(encoding="utf-8", errors="replace"))
        return ("parse_error" if c.startswith("无法解析") else "refused"), {"construct": c, "line": e.line,
                                                                          "message": str(e)[:300]}
    except simt.CompileError as e:
        return "compile_error", {"construct": compile_construct(str(e)), "message": str(e)[:300]}
    except simt.LaunchError as e:
        return "launch_error", {"message": str(e)[:300]}
    except simt.SimtError as e:
        if type(e).__name__ in _SANITIZER:
            return "sanitizer", {"error": type(e).__name__}
        return "exception", {"traceback": "".join(traceback.format_exception(e))[-3000:],
                             "error": f"{type(e).__name__}: {e}"[:200]}
    except (Exception, RecursionError) as e:
        return "exception", {"traceback": "".join(traceback.format_exception(e))[-3000:],
                             "error": f"{type(e).__name__}: {e}"[:200]}


def scan(corpus: Path, limit=None, verbose=False, nvcc=None):
    """nvcc：None（不交叉检查）、nvcc 的路径，或 {"owner/name:相对路径": 结论} 的字典（直接给出的结论）。"""
    repos, work = [], []
    for manifest in sorted(corpus.glob("*/CORPUS.json")):
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        root = manifest.parent
        repos.append({"repo": meta["repo"], "commit": meta["commit"], "paths": meta.get("paths", [])})
        files = sorted(p for p in root.rglob("*.cu") if p.is_file())
        work.extend((meta, root, p) for p in files[:limit])
    if nvcc is None:
        verdicts = {}
    elif isinstance(nvcc, dict):
        verdicts = {p: nvcc.get(f"{meta['repo']}:{p.relative_to(root).as_posix()}") for meta, root, p in work}
    else:
        verdicts = nvcc_verdicts([p for _, _, p in work], corpus / NVCC_CACHE, nvcc, verbose)
    rows = []
    for meta, root, p in work:
        rel = p.relative_to(root).as_posix()
        key = f"{meta['repo']}:{rel}"
        verdict = verdicts.get(p)
        text = p.read_text(encoding="utf-8", errors="replace")
        for name, is_tpl, inst in kernels_in(text):
            t0 = time.perf_counter()
            if is_tpl and inst is None:
                cat, detail = "no_instance", None
            else:
                signal.setitimer(signal.ITIMER_REAL, SECONDS)
                try:
                    cat, detail = run_kernel(p, inst or name)
                except _Timeout:
                    cat, detail = "timeout", None
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            cat, detail = reconcile(cat, detail, verdict)
            row = {"repo": meta["repo"], "file": rel, "kernel": inst or name, "split": split_of(key),
                   "outcome": cat, "seconds": round(time.perf_counter() - t0, 3)}
            if verdict is not None:
                row["nvcc"] = verdict
            if detail:                           # 信息里不留本机的语料路径
                row.update({k: v.replace(f"{root}/", "") if isinstance(v, str) else v for k, v in detail.items()})
            rows.append(row)
            if verbose:
                print(f"{cat:13s} {key} {inst or name} {(detail or {}).get('construct', '')}", flush=True)
    return repos, rows


OUTCOMES = ("ran", "sanitizer", "refused", "parse_error", "compile_error", "launch_error", "no_instance",
            "timeout", "exception")


REFUSED = ("refused", "parse_error")
RAN = ("ran", "sanitizer")


def summarize(rows):
    counts = collections.Counter(r["outcome"] for r in rows)
    total = len(rows)
    refused = counts["refused"] + counts["parse_error"]
    checked = [r for r in rows if "nvcc" in r]
    compiles = [r for r in checked if r["nvcc"] == "ok"]
    refused_ok = sum(r["outcome"] in REFUSED for r in compiles)
    cons = collections.Counter(r["construct"] for r in rows if r["outcome"] in ("refused", "parse_error"))
    verifier = cons[VERIFIER] + cons[DECLARED_ONLY]
    texture = sum(v for k, v in cons.items() if "纹理" in k or "texture" in k)
    return {
        "kernels": total,
        "files": len({(r["repo"], r["file"]) for r in rows}),
        "outcomes": {k: counts[k] for k in OUTCOMES},
        "ran_total": counts["ran"] + counts["sanitizer"],
        "refused_total": refused,
        "refused_share": round(refused / total, 4) if total else 0.0,
        # 因为 GPUVerify 自己的注解或只声明不定义的函数而被拒绝的内核：不算 CUDA 的构造
        "refused_verifier_specific": verifier,
        "refused_share_cuda_only": round((refused - verifier) / (total - verifier), 4) if total > verifier else 0.0,
        # 其中因为纹理（texture<>、tex1Dfetch ...，模拟器有意不支持）被拒绝的内核
        "refused_texture": texture,
        "refused_constructs": [{"construct": k, "kernels": v} for k, v in sorted(cons.items(), key=lambda kv: (-kv[1], kv[0]))],
        # nvcc 的交叉检查（没有 nvcc 时 nvcc_checked 为 0）
        "nvcc_checked": len(checked),
        "nvcc_compiles": len(compiles),
        "refused_nvcc_compiles": refused_ok,
        "refused_share_nvcc_compiles": round(refused_ok / len(compiles), 4) if compiles else None,
        "compile_error_but_nvcc_accepts": sum(bool(r.get("simulator_bug")) for r in rows),
        "ran_but_nvcc_rejects": sum(r["outcome"] in RAN and r["nvcc"] != "ok" for r in checked),
        "refused_but_nvcc_rejects": sum(r["outcome"] in REFUSED and r["nvcc"] != "ok" for r in checked),
        "nvcc_by_outcome": {k: {"ok": sum(r["nvcc"] == "ok" for r in checked if r["outcome"] == k),
                                "error": sum(r["nvcc"] != "ok" for r in checked if r["outcome"] == k)} for k in OUTCOMES},
        # 模拟器判定 nvcc 会拒绝的内核（CompileError）：按诊断归并
        "compile_errors": [{"construct": k, "kernels": v} for k, v in sorted(
            collections.Counter(r["construct"] for r in rows if r["outcome"] == "compile_error").items(),
            key=lambda kv: (-kv[1], kv[0]))],
    }


def extract(gitdir, paths, repo, into):
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "--git-dir", gitdir, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    arch = subprocess.run(["git", "--git-dir", gitdir, "archive", "--format=tar", commit, *paths],
                          capture_output=True, check=True).stdout
    import io

    with tarfile.open(fileobj=io.BytesIO(arch)) as tf:
        tf.extractall(into, filter="data")
    (into / "CORPUS.json").write_text(json.dumps({"repo": repo, "commit": commit, "paths": list(paths)}), encoding="utf-8")
    print(f"{repo}@{commit[:12]}: {sum(1 for _ in into.rglob('*.cu'))} 个 .cu 文件 -> {into}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", nargs="?", help="语料目录（每个子目录一个 CORPUS.json）")
    ap.add_argument("--json", help="把结果写成 JSON")
    ap.add_argument("--limit", type=int, help="每个仓库最多扫描的文件数（调试用）")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--no-nvcc", action="store_true", help="不做 nvcc 的交叉检查")
    ap.add_argument("--nvcc-verdicts", help="直接给出 nvcc 的结论（JSON：{\"owner/name:相对路径\": \"ok\" | \"error: ...\"}）")
    ap.add_argument("--extract", nargs="+", metavar=("GITDIR", "PATH"), help="从 git 镜像取出语料")
    ap.add_argument("--repo", help="--extract 的仓库名 owner/name")
    ap.add_argument("--into", help="--extract 的目标目录")
    a = ap.parse_args(argv)
    if a.extract:
        if not (a.repo and a.into and len(a.extract) >= 2):
            ap.error("--extract GITDIR PATH ... 需要 --repo 与 --into")
        extract(a.extract[0], a.extract[1:], a.repo, a.into)
        return 0
    if not a.corpus or not Path(a.corpus).is_dir():
        ap.error(f"语料目录不存在：{a.corpus!r} (corpus directory not found)")
    if not list(Path(a.corpus).glob("*/CORPUS.json")):
        ap.error(f"{a.corpus} 下没有 */CORPUS.json：先用 --extract 取出语料 (no CORPUS.json found)")
    signal.signal(signal.SIGALRM, _alarm)
    t0 = time.perf_counter()
    if a.nvcc_verdicts:
        nvcc = json.loads(Path(a.nvcc_verdicts).read_text(encoding="utf-8"))
        how = f"结论由 {Path(a.nvcc_verdicts).name} 给出，没有运行 nvcc"
    elif a.no_nvcc or shutil.which("nvcc") is None:
        nvcc, how = None, None
    else:
        nvcc = shutil.which("nvcc")
        how = nvcc_setup(nvcc)["nvcc"]
    repos, rows = scan(Path(a.corpus), a.limit, a.verbose, nvcc)
    doc = {
        "what": "simt front end and launch on public race-checker kernels (scripts/simt_coverage.py)",
        "method": {
            "simulator": "每个 __global__ 内核用模拟器的前端解析（clang，设备端，模拟器的序言 prelude/cuda_prelude.h 提供 "
                         "CUDA 与 GPUVerify 规约注解的声明），再用合成参数启动一次（见 launch）",
            "nvcc": None if nvcc is None else {
                "version": how,
                "command": "nvcc " + " ".join(NVCC_ARGS) + f" -include scripts/{NVCC_HEADER.name} FILE（在 FILE 所在的目录里）",
                "headers": "nvcc 用自己的头文件（CUDA 13 的 cuda.h 等）与语料自带的头文件；GPUVerify 的规约注解由强制包含的 "
                           f"scripts/{NVCC_HEADER.name} 按模拟器对待它们的方式给出：前提、后置条件、不变式、访问声明是不求值的"
                           "空宏，__assert/__global_assert/__assume 是设备端 assert，__implies、__enabled、__add_noovfl_* "
                           "按含义实现，只有验证器能回答的查询（__other_int、__read ...）只声明不定义，和 GPUVerify 的头文件一样",
                "no_rdc": "不加 -rdc：只声明、没有定义的函数在 ptxas 报 Unresolved extern function（CuPy/NVRTC 同样不链接）",
                "cache": f"语料目录下的 {NVCC_CACHE}，键是文件内容的 sha256",
            },
            "classification": "模拟器 CompileError 且 nvcc 拒绝：compile_error；模拟器 CompileError 而 nvcc 接受：refused"
                              "（模拟器的缺陷，列在 compile_error_but_nvcc_accepts）；运行了而 nvcc 拒绝：类别不变，计入 "
                              "ran_but_nvcc_rejects；拒绝了而 nvcc 也拒绝：类别不变，计入 refused_but_nvcc_rejects",
            "shares": "refused_share = (refused + parse_error) / 全部内核；refused_share_nvcc_compiles = nvcc 能编译的内核里 "
                      "(refused + parse_error) 的个数 / nvcc 能编译的内核数",
        },
        "launch": {"grid": GRID, "block": BLOCK, "array_elements": ARRAY_ELEMS, "int_arg": INT_ARG,
                   "float_arg": FLOAT_ARG, "max_lane_steps": LANE_STEPS, "seconds_per_kernel": SECONDS},
        "corpus": repos,
        "all": summarize(rows),
        "development": summarize([r for r in rows if r["split"] == "development"]),
        "held_out": summarize([r for r in rows if r["split"] == "held_out"]),
        "exceptions": [{k: r[k] for k in ("repo", "file", "kernel", "error", "traceback")} for r in rows
                       if r["outcome"] == "exception"],
        "compile_error_but_nvcc_accepts": [{k: r[k] for k in ("repo", "file", "kernel", "construct")} for r in rows
                                           if r.get("simulator_bug")],
        "ran_but_nvcc_rejects": [{k: r[k] for k in ("repo", "file", "kernel", "outcome", "nvcc")} for r in rows
                                 if r["outcome"] in RAN and r.get("nvcc", "ok") != "ok"],
        "refused_but_nvcc_rejects": [{k: r[k] for k in ("repo", "file", "kernel", "construct", "nvcc")} for r in rows
                                     if r["outcome"] in REFUSED and r.get("nvcc", "ok") != "ok"],
        "kernels": [{k: r[k] for k in ("repo", "file", "kernel", "split", "outcome") if k in r}
                    | ({"construct": r["construct"]} if "construct" in r else {})
                    | ({"nvcc": r["nvcc"]} if "nvcc" in r else {}) for r in rows],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if a.json:                       # 先写结果，再打印摘要
        Path(a.json).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    s = doc["all"]
    print(f"{s['kernels']} 个内核（{s['files']} 个文件）：" + "，".join(f"{k} {v}" for k, v in s["outcomes"].items()))
    print(f"被拒绝（含无法解析）：{s['refused_total']}，占 {s['refused_share']:.1%}；除去验证器自己的注解 "
          f"{s['refused_verifier_specific']} 个：{s['refused_share_cuda_only']:.1%}")
    for c in s["refused_constructs"][:25]:
        print(f"  {c['kernels']:4d}  {c['construct']}")
    if s["compile_errors"]:
        print(f"CompileError（模拟器判定 nvcc 会拒绝）{s['outcomes']['compile_error']} 个：")
        for c in s["compile_errors"][:10]:
            print(f"  {c['kernels']:4d}  {c['construct']}")
    if s["nvcc_compiles"]:
        print(f"nvcc 能编译 {s['nvcc_compiles']} 个（共检查 {s['nvcc_checked']} 个）；其中被拒绝 {s['refused_nvcc_compiles']} 个，"
              f"占 {s['refused_share_nvcc_compiles']:.1%}；模拟器 CompileError 而 nvcc 接受 {s['compile_error_but_nvcc_accepts']}"
              f" 个，运行了而 nvcc 拒绝 {s['ran_but_nvcc_rejects']} 个，拒绝了而 nvcc 也拒绝 {s['refused_but_nvcc_rejects']} 个")
        for key in ("compile_error_but_nvcc_accepts", "ran_but_nvcc_rejects"):
            for r in doc[key]:
                print(f"  {key}: {r['repo']}:{r['file']} {r['kernel']}: {r.get('construct') or r.get('nvcc')}"[:200])
    for part in ("development", "held_out"):
        p = doc[part]
        extra = f"，nvcc 能编译的里 {p['refused_share_nvcc_compiles']:.1%}" if p["nvcc_compiles"] else ""
        print(f"{part}: {p['kernels']} 个内核，被拒绝 {p['refused_share']:.1%}{extra}")
    if doc["exceptions"]:
        print(f"Python 异常 {len(doc['exceptions'])} 个：")
        for e in doc["exceptions"]:
            print(f"  {e['repo']}:{e['file']} {e['kernel']}: {e['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
