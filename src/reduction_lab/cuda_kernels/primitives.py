"""库里的归约原语：同一个分段求和，warp内（或块内）那一步换成CUDA、cooperative groups与CUB提供的原语。
课程页面：docs/cuda/library-primitives.md。

    from reduction_lab.cuda_kernels import primitives as P
    P.row_sum(x, "cg")              # (M, N) -> (M,)：一行一个线程块
    P.full_sum(x, "cub_block")      # 一维 -> 0 维：固定个数的线程块得到部分和，再用一个线程块加起来

原语见 :data:`PRIMITIVES`。两个文件里的内核在两种模式下都能运行（sim 模式交给模拟器）。primitives_cub.cu
在 GPU 上经 CuPy 编译（CuPy 自带 CCCL 头文件，见 :func:`cccl_include_dirs`）；模拟器不解析 CUB 的源码，用自带的
同接口子集（``reduction_lab/simt/prelude/cub/reduce.cuh``）运行它：结果相同，计数是那个子集的实现的。
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from . import _cdiv, _check_block, _device_for, _mode, _sm_count
from .launcher import KERNEL_DIR, cccl_include_dirs, cccl_options, cupy_stream, launch

__all__ = ["PRIMITIVES", "UNROLL", "row_sum", "full_sum", "segment_sum", "full_sum_plan", "cccl_include_dirs",
           "cub_temp_storage_bytes", "ptx_counts", "load_h200_results", "results_table", "RESULTS_FILE"]

#: 原语名 -> (源文件, 内核名, 元素类型, 说明)
PRIMITIVES = {
    "shfl": ("primitives.cu", "seg_sum_shfl", torch.float32, "手写 __shfl_xor_sync"),
    "tile": ("primitives.cu", "seg_sum_tile", torch.float32, "cooperative groups：tile.shfl_down"),
    "cg": ("primitives.cu", "seg_sum_cg", torch.float32, "cg::reduce(tile, v, cg::plus<float>())"),
    "redux": ("primitives.cu", "seg_sum_redux", torch.int32, "__reduce_add_sync（int32）"),
    "cub_warp": ("primitives_cub.cu", "seg_sum_cub_warp", torch.float32, "cub::WarpReduce<float>"),
    "cub_block": ("primitives_cub.cu", "seg_sum_cub_block", torch.float32,
                  "cub::BlockReduce（BLOCK_REDUCE_WARP_REDUCTIONS）"),
    "cub_raking": ("primitives_cub.cu", "seg_sum_cub_raking", torch.float32, "cub::BlockReduce（BLOCK_REDUCE_RAKING）"),
    "cub_raking_comm": ("primitives_cub.cu", "seg_sum_cub_raking_comm", torch.float32,
                        "cub::BlockReduce（BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY）"),
}

#: 每个线程同时在途的加载数（与 .cu 文件里的 UNROLL 相同）
UNROLL = 8

#: H200 上的实测结果（scripts/gpu_primitives.py 生成），随包发布在 reduction_lab/data/ 下
RESULTS_FILE = "h200_primitives.json"


def _primitive(name):
    if name not in PRIMITIVES:
        raise ValueError(f"没有名为 {name!r} 的原语；可选：{', '.join(PRIMITIVES)} (unknown primitive {name!r})")
    return PRIMITIVES[name]


# ---------------------------------------------------------------- CUB：经 CuPy 编译

# --8<-- [start:cub_module]
@functools.lru_cache(maxsize=8)
def _cub_module(block_size: int):
    """编译 primitives_cub.cu：先用 NVRTC（CuPy 默认），失败时改用 nvcc。返回 (模块, 所用后端)。"""
    import cupy

    code = f"#define BLOCK_SIZE {block_size}\n" + (KERNEL_DIR / "primitives_cub.cu").read_text(encoding="utf-8")
    options = cccl_options()       # C++17、CuPy 自带的 CCCL 头文件，不要 bf16 支持（CUB 因此不去包含 cuda_bf16.h）
    try:
        mod = cupy.RawModule(code=code, options=options)
        mod.get_function("seg_sum_cub_block")          # 触发编译
        return mod, "nvrtc"
    except cupy.cuda.compiler.CompileException as e:
        nvrtc_error = str(e)
    try:
        mod = cupy.RawModule(code=code, options=options, backend="nvcc")
        mod.get_function("seg_sum_cub_block")
        return mod, "nvcc"
    except Exception as e:   # 两个后端都失败：两条错误一起报出
        raise RuntimeError(f"primitives_cub.cu 编译失败 (failed to compile primitives_cub.cu)\n"
                           f"NVRTC:\n{nvrtc_error[-3000:]}\nnvcc:\n{str(e)[-3000:]}") from None
# --8<-- [end:cub_module]


def cub_backend(block_size: int = 256) -> str:
    """primitives_cub.cu 在这台 GPU 上用哪个编译器编译成功（"nvrtc" 或 "nvcc"）。"""
    return _cub_module(_check_block(block_size, 32))[1]


def _cub_launch(kernel, grid, block_size, args, m):
    if m == "sim":
        from .. import simt

        # 模拟器的 CUB 子集（prelude/cub/reduce.cuh）：同样的接口，按 CUB 的算法写成
        return simt.launch(str(KERNEL_DIR / "primitives_cub.cu"), kernel, grid, block_size,
                           tuple(a.numpy() if isinstance(a, torch.Tensor) else a for a in args),
                           defines={"BLOCK_SIZE": block_size})
    import cupy

    fn = _cub_module(block_size)[0].get_function(kernel)
    packed = tuple(np.uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else np.int64(a) for a in args)
    index = args[0].device.index if args[0].device.index is not None else torch.cuda.current_device()
    with cupy.cuda.Device(index):
        stream = cupy_stream(index)
        with stream:                                   # 与 torch 的当前流保持顺序
            fn((grid,), (block_size,), packed)
    return None


def cub_temp_storage_bytes(block_size: int = 256) -> dict[str, int]:
    """各个 CUB TempStorage 的字节数（在 GPU 上运行 cub_temp_storage_bytes 内核读出）。"""
    from .. import runtime

    if runtime.MODE != "gpu":
        raise runtime.ModeError("cub_temp_storage_bytes 需要 gpu 模式：TempStorage 的大小取决于 CUB 的实现，"
                                "模拟器的 CUB 子集与它不同 (needs gpu mode: TempStorage sizes are CUB's own)")
    B = _check_block(block_size, 32)
    out = torch.zeros(4, dtype=torch.int32, device="cuda")
    _cub_launch("cub_temp_storage_bytes", 1, B, (out,), "gpu")
    keys = ("WarpReduce", "BLOCK_REDUCE_WARP_REDUCTIONS", "BLOCK_REDUCE_RAKING", "BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY")
    return dict(zip(keys, out.tolist()))


# ---------------------------------------------------------------- 分段求和

def _launch_segments(name, x, out, n, seg, grid, B, m):
    source, kernel, _, _ = PRIMITIVES[name]
    if source == "primitives_cub.cu":
        return _cub_launch(kernel, grid, B, (x, out, n, seg), m)
    return launch(source, kernel, grid=grid, block=B, args=(x, out, n, seg), defines={"BLOCK_SIZE": B}, mode=m)


def segment_sum(x: torch.Tensor, seg: int, primitive: str = "shfl", block_size: int = 256, mode: str | None = None,
                return_report: bool = False):
    """一维连续张量每 ``seg`` 个元素求一次和：返回 ceil(n / seg) 个部分和（最后一段可以不满）。"""
    _, _, dtype, _ = _primitive(primitive)
    m = _mode(mode)
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.numel() == 0 or not x.is_contiguous():
        raise ValueError(f"x 必须是非空、连续的一维张量，得到 {type(x).__name__}"
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''} (x must be a non-empty contiguous 1-D tensor)")
    if x.dtype != dtype:
        raise TypeError(f"原语 {primitive!r} 只处理 {str(dtype).replace('torch.', '')}，得到 "
                        f"{str(x.dtype).replace('torch.', '')} (primitive {primitive!r} takes {dtype})")
    want = _device_for(m)
    if (x.device.type == "cuda") != (want == "cuda"):
        raise ValueError(f"x 在 {x.device} 上，{m} 模式需要 {want} 张量 (x is on {x.device}, {m} mode needs {want})")
    if isinstance(seg, bool) or not isinstance(seg, int) or seg < 1:
        raise ValueError(f"seg 必须是正整数，得到 {seg!r} (seg must be a positive int)")
    B = _check_block(block_size, 32)
    n = x.numel()
    grid = _cdiv(n, seg)
    if grid > 2**31 - 1:
        raise ValueError(f"{grid} 段超过线程块数的上限 2**31 - 1 (too many segments)")
    out = torch.empty(grid, dtype=dtype, device=x.device)
    rep = _launch_segments(primitive, x, out, n, seg, grid, B, m)
    return (out, rep) if return_report else out


def row_sum(x: torch.Tensor, primitive: str = "shfl", block_size: int = 256, mode: str | None = None) -> torch.Tensor:
    """每行求和：(M, N) -> (M,)，一行一个线程块。行必须连续存放（行距等于 N）。"""
    from ..checks import check_matrix

    _, _, dtype, _ = _primitive(primitive)
    m = _mode(mode)
    check_matrix(x, "x", dtypes=(dtype,), device=_device_for(m))
    if not x.is_contiguous():
        raise ValueError(f"x 必须是连续张量，得到 stride {tuple(x.stride())}；可以先调用 .contiguous() "
                         f"(x must be contiguous)")
    M, N = x.shape
    return segment_sum(x.reshape(-1), N, primitive, block_size, m)


def full_sum_plan(n: int, blocks: int, block_size: int = 256) -> list[tuple[int, int]]:
    """一维求和各级的 (段长, 段数)：第一级至多 ``blocks`` 段，段长取 block_size * UNROLL 的倍数
    （段首对齐，循环都是整轮）；之后一个线程块把全部部分和加起来。"""
    for what, v in (("n", n), ("blocks", blocks)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{what} 必须是正整数，得到 {v!r} ({what} must be a positive int)")
    B = _check_block(block_size, 32)
    quantum = B * UNROLL
    seg = _cdiv(_cdiv(n, blocks), quantum) * quantum
    plan = [(seg, _cdiv(n, seg))]
    if plan[0][1] > 1:
        plan.append((plan[0][1], 1))
    return plan


def full_sum(x: torch.Tensor, primitive: str = "shfl", block_size: int = 256, blocks: int | None = None,
             mode: str | None = None) -> torch.Tensor:
    """一维求和 -> 0 维张量：第一级至多 ``blocks`` 个线程块（默认 SM 数 x 2048 / block_size），
    每块一个部分和；第二级一个线程块把部分和加起来。不用原子操作，结果与调度无关。"""
    from ..checks import check_vector

    _, _, dtype, _ = _primitive(primitive)
    m = _mode(mode)
    check_vector(x, "x", dtypes=(dtype,), device=_device_for(m))
    B = _check_block(block_size, 32)
    if blocks is None:
        blocks = _sm_count(x, m) * (2048 // B)
    cur = x
    for seg, _ in full_sum_plan(x.numel(), blocks, B):
        cur = segment_sum(cur, seg, primitive, B, m)
    return cur.reshape(())


# ---------------------------------------------------------------- PTX 里的指令

_OPS = ("shfl.sync", "redux.sync", "bar.sync", "ld.shared", "st.shared", "ld.global", "atom")


@functools.lru_cache(maxsize=16)
def _compile_ptx(nvcc: str, path: str, text: str, block_size: int, arch: str) -> str:
    """nvcc -ptx 编译整个文件；同一份源码（按内容）、同样的参数只编译一次（一个文件里的几个内核共用）。"""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.ptx"
        proc = subprocess.run([nvcc, "-ptx", f"-arch={arch}", f"-DBLOCK_SIZE={block_size}", path, "-o", str(out)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc 编译失败 (nvcc failed):\n{proc.stderr[-3000:]}")
        return out.read_text()


def ptx_counts(source: str, kernel: str, block_size: int = 256, arch: str = "sm_90") -> dict[str, int]:
    """用 nvcc 把 ``source``（本目录下的文件名）编译成 PTX，数 ``kernel`` 里几类指令各有几条：
    shfl.sync、redux.sync、bar.sync（__syncthreads）、ld/st.shared、ld.global、atom。需要 PATH 上的 nvcc。"""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("PATH 上没有 nvcc：无法编译 (nvcc not found on PATH)")
    if not re.fullmatch(r"sm_\d+", arch):
        raise ValueError(f"arch 应形如 sm_90，得到 {arch!r} (bad arch)")
    B = _check_block(block_size, 32)
    path = KERNEL_DIR / source
    if not path.is_file():
        raise FileNotFoundError(f"找不到 {path} (no such CUDA source)")
    ptx = _compile_ptx(nvcc, str(path), path.read_text(encoding="utf-8"), B, arch)
    m = re.search(rf"\.entry\s+{re.escape(kernel)}\s*\(.*?\n}}", ptx, re.S)
    if m is None:
        raise ValueError(f"{source} 的 PTX 里没有内核 {kernel!r} (no kernel {kernel!r} in the PTX)")
    body = m.group(0)
    # 内联汇编（CUB 的洗牌）在同一行里写几条指令：按记号数，不按行首
    return {op: len(re.findall(rf"(?<![\w.%]){re.escape(op)}(?=[.\s])", body)) for op in _OPS}


# ---------------------------------------------------------------- H200 上的实测结果

def load_h200_results() -> dict:
    """读取随包发布的 h200_primitives.json（没有时报错，说明怎样生成）。"""
    p = Path(str(resources.files("reduction_lab") / "data" / RESULTS_FILE))
    if not p.is_file():
        raise FileNotFoundError(
            f"还没有 H200 上的实测数据 {p}：在 H200 上运行 "
            f"`python scripts/gpu_primitives.py --out docs/data/{RESULTS_FILE}` 并提交生成的文件 "
            f"(no H200 results yet: run scripts/gpu_primitives.py on an H200 and commit {RESULTS_FILE})")
    return json.loads(p.read_text(encoding="utf-8"))


def results_table(doc: dict) -> str:
    """实测结果的 Markdown 表：每个原语一行，两种形状各一列 GB/s 与占拷贝的比例。"""
    cases = doc["cases"]
    names = list(dict.fromkeys(r["name"] for c in cases for r in c["results"]))
    head = "| 写法 | " + " | ".join(f"{c['label']} GB/s | 占拷贝" for c in cases) + " |"
    sep = "|---|" + "---:|---:|" * len(cases)
    rows = [head, sep]
    for name in names:
        cells = []
        for c in cases:
            r = next((r for r in c["results"] if r["name"] == name), None)
            cells += [f"{r['gbps']:.0f}", f"{r['pct_of_copy']:.0f}%"] if r else ["—", "—"]
        rows.append(f"| {doc['labels'].get(name, name)} | " + " | ".join(cells) + " |")
    rows.append("| 设备拷贝（读+写） | " + " | ".join(f"{c['copy_gbps']:.0f} | 100%" for c in cases) + " |")
    return "\n".join(rows) + "\n"
