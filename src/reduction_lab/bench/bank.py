"""存储体冲突演示内核的计时（src/reduction_lab/cuda_kernels/bank_conflicts.cu）。

三个内核做同样多的全局读写（读rows*cols个fp32、写rows*cols个fp32），只有共享内存的
访问方式不同：

* ``copy_tile``——按行写、按行读（顺序寻址，无冲突），作对照；
* ``transpose_conflict``——按列读32x32的分块：同一列的32个数在同一存储体，32路冲突；
* ``transpose_padded``——分块每行补一个空位（33列）：一列的32个数落在32个不同存储体。

先验证（复制：输出等于输入；转置：输出等于``x.T``，都要求精确相等），再计时。
课程页面：docs/cuda/bank-conflicts.md、docs/bench/index.md。
"""

from __future__ import annotations

from typing import Callable

import torch

from ..runtime import DEVICE, MODE
from . import timing

#: 变体名-> (内核名, 访问方式, 是否转置)
VARIANTS = {
    "copy_tile": ("copy_tile", "顺序寻址（按行读写，无冲突）", False),
    "transpose_conflict": ("transpose_conflict", "按列读32x32分块（32路冲突）", True),
    "transpose_padded": ("transpose_padded", "补一列成32x33（无冲突）", True),
}

SOURCE = "bank_conflicts.cu"
TILE, BLOCK_ROWS = 32, 8

GPU_SHAPE = (8192, 8192)      # 256 MB输入
QUICK_SHAPE = (4096, 4096)
SIM_SHAPE = (64, 96)          # 6个线程块，每块256个线程

BYTE_FORMULA = "`2*R*C*4`：读`R*C`个fp32 + 写`R*C`个fp32（共享内存的读写不计）"
TOLERANCE = "精确相等：复制的输出等于输入，转置的输出等于`x.T`"


def harness_copy_formula() -> str:
    from .harness import BYTE_FORMULAS

    return BYTE_FORMULAS["copy"]


def _unavailable() -> str | None:
    from .impls import cuda_missing

    if cuda_missing():
        return cuda_missing()
    try:
        from ..cuda_kernels import kernel_names
    except ImportError as exc:
        return f"reduction_lab.cuda_kernels无法导入：{exc}"
    missing = [k for k, _, _ in VARIANTS.values() if k not in kernel_names(SOURCE)]
    if missing:
        return f"{SOURCE}里没有内核{missing}"
    return None


def _prepare(kernel: str, transpose: bool) -> Callable[[torch.Tensor], Callable[[], torch.Tensor]]:
    def prepare(x: torch.Tensor):
        from ..cuda_kernels import launch

        rows, cols = x.shape
        grid = (-(-cols // TILE), -(-rows // TILE))

        def call():
            out = torch.empty((cols, rows) if transpose else (rows, cols), dtype=x.dtype, device=x.device)
            launch(SOURCE, kernel, grid=grid, block=(TILE, BLOCK_ROWS), args=(x, out, rows, cols))
            return out

        return call

    return prepare


def run_bank_conflicts(*, impls=None, iters=None, warmup=None, quick=False, progress=True,
                       log: Callable[[str], None] = print, shape=None, seed: int = 0,
                       budget_s: float | None = None) -> dict:
    from .harness import BenchError, ValidationError, _progress, gbps

    sim = MODE != "gpu"
    if shape is None:
        shape = SIM_SHAPE if sim else (QUICK_SHAPE if quick else GPU_SHAPE)
    if warmup is None:
        warmup = 1 if sim else (3 if quick else 10)
    if iters is None:
        iters = 3 if sim else (20 if quick else 100)
    names = list(VARIANTS) if impls is None else list(impls)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise BenchError(f"bank-conflicts没有变体{unknown}；可选：{list(VARIANTS)}")
    record = {"suite": "bank-conflicts", "bytes_formula": BYTE_FORMULA,
              "copy_formula": harness_copy_formula(),
              "tolerance": TOLERANCE, "iters": iters, "warmup": warmup, "impls": [], "skipped": {},
              "shapes": []}
    reason = _unavailable()
    if reason:
        for n in names:
            record["skipped"][n] = reason
        log(f"跳过bank-conflicts：{reason}")
        return record
    for n in names:
        kernel, label, _ = VARIANTS[n]
        record["impls"].append({"name": n, "label": label, "kind": "ours", "kernel": kernel})

    rows, cols = shape
    g = torch.Generator(device=DEVICE)
    g.manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, device=DEVICE, dtype=torch.float32)
    # 验证
    for n in names:
        kernel, _, transpose = VARIANTS[n]
        got = _prepare(kernel, transpose)(x)()
        want = x.t() if transpose else x
        if tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
            raise ValidationError(f"结果不符：bank-conflicts/{n}，形状{shape}：输出与"
                                  f"{'x.T' if transpose else '输入'}不相等。在计时之前停止。")
    log(f"bank-conflicts：全部{len(names)}个内核的输出正确")

    # 计时
    nbytes = rows * cols * 4
    l2 = timing.l2_bytes()
    k = timing.rotation_count(nbytes, l2) if not sim else 1
    bufs = [x] + [x.clone() for _ in range(k - 1)]
    flusher = timing.L2Flusher(l2) if not sim else None

    def measure(make_call):
        calls = [make_call(b) for b in bufs]
        if sim:
            return timing.time_cpu(calls, warmup, iters)
        return timing.time_gpu(calls, warmup, iters, flusher)

    def copy_call(src):
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    bar = _progress(len(names) + 1, "bank-conflicts计时", progress)
    copy_t = measure(copy_call)
    copy_gbps = gbps(2 * nbytes, copy_t.median_ms)
    if bar is not None:
        bar.update(1)
    entry = {"shape": [rows, cols], "M": rows, "N": cols, "bytes": 2 * nbytes, "input_bytes": nbytes,
             "rotating_buffers": k, "copy": {**copy_t.to_dict(), "bytes": 2 * nbytes, "gbps": copy_gbps},
             "results": {}}
    for n in names:
        kernel, _, transpose = VARIANTS[n]
        t = measure(_prepare(kernel, transpose))
        gb = gbps(2 * nbytes, t.median_ms)
        entry["results"][n] = {"status": "ok", **t.to_dict(), "gbps": gb, "gbps_p20": gbps(2 * nbytes, t.p80_ms),
                               "gbps_p80": gbps(2 * nbytes, t.p20_ms), "frac_copy": gb / copy_gbps}
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    record["shapes"].append(entry)
    record["l2_flush"] = (f"每次计时调用前只读地扫过{timing.L2Flusher.FACTOR * l2 // 2**20} MiB（{timing.L2Flusher.FACTOR}倍L2）" if not sim
                          else "无（CPU计时）")
    return record
