"""在 GPU 上比较库里的归约原语（课程页面 docs/cuda/library-primitives.md）。

    python scripts/gpu_primitives.py --out docs/data/h200_primitives.json

两个形状：按行求和 (32768, 4096) 与 2^28 个元素的一维求和。每种写法（reduction_lab.cuda_kernels.primitives
的 PRIMITIVES：手写洗牌、tile.shfl_down、cg::reduce、__reduce_add_sync（int32）、CUB 的 WarpReduce 与三种
BlockReduce）和参照 torch.sum、cupy.sum 先验证、再计时；一处不对就停下，不写任何结果。
同时写出同名的 .md 表格（页面用 pymdownx.snippets 嵌入）。在 H200 上约一分钟。
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("REDUCTION_LAB_MODE", "gpu")

import reduction_lab as rl  # noqa: E402  必须先于 triton / cupy 导入

import torch  # noqa: E402

from reduction_lab.bench import timing  # noqa: E402
from reduction_lab.cuda_kernels import primitives as P  # noqa: E402
from reduction_lab.cuda_kernels.launcher import cupy_stream  # noqa: E402

ROWS = (32768, 4096)
N1D = 2**28
BLOCK = 256
WARMUP, ITERS = 10, 100

METHOD = (f"CUDA 事件计时，{ITERS} 次取中位数（先预热 {WARMUP} 次）；每次计时调用之前只读地扫过 4 倍 L2 的缓冲区"
          f"（reduction_lab.bench.timing.L2Flusher）。GB/s 按读入的字节数（输入 + 输出）计算；设备拷贝是同样字节数的 "
          f"dst.copy_(src)，按读 + 写计。每种写法先在奇数形状上与 float64 / int64 参考逐一比对，计时用的输入也比对一次。"
          f"线程块 {BLOCK} 个线程，每个线程 {P.UNROLL} 路加载；一维求和第一级 SM 数 x {2048 // BLOCK} 个线程块，"
          f"第二级一个线程块。")


def fail(msg):
    print("验证失败 (validation failed): " + msg, file=sys.stderr)
    sys.exit(1)


def check(name, got, want, exact, rtol=1e-5):
    """got 与 float64 / int64 参考 want 比较；exact 时要求逐个相等。"""
    got = got.double().cpu() if got.is_floating_point() else got.long().cpu()
    want = want.cpu()
    if exact:
        if got.shape != want.shape or not torch.equal(got, want.to(got.dtype)):
            bad = (got != want.to(got.dtype)).nonzero()[:3].tolist()
            fail(f"{name}：结果不等，例如位置 {bad} (mismatch)")
        return
    err = (got - want).abs()
    tol = rtol * want.abs() + 1e-3
    if got.shape != want.shape or bool((err > tol).any()):
        i = int((err - tol).argmax())
        fail(f"{name}：第 {i} 个结果 {got.reshape(-1)[i].item()} 与参考 {want.reshape(-1)[i].item()} 相差 "
             f"{err.reshape(-1)[i].item():.3g} (mismatch)")


def cupy_call(fn):
    """在 torch 的当前流上运行一个 CuPy 调用。"""
    def run():
        with cupy_stream():
            return fn()
    return run


def validate_small(gen):
    """奇数形状、整数值的 float（部分和都在 2^24 以内，float32 也逐位精确）与 int32。"""
    for M, N in [(1, 1), (3, 1000), (37, 4099), (5, 31)]:
        xf = torch.randint(0, 4, (M, N), generator=gen, device="cuda").float()
        # 和不超出 int32：内核里逐个线程的 int 累加溢出是未定义行为
        xi = torch.randint(-2**18, 2**18, (M, N), generator=gen, device="cuda", dtype=torch.int32)
        want_i = xi.long().sum(1)
        for name, (_, _, dtype, _) in P.PRIMITIVES.items():
            x, want = (xi, want_i) if dtype == torch.int32 else (xf, xf.double().sum(1))
            check(f"{name} row_sum {M}x{N}", P.row_sum(x, name, BLOCK), want, exact=True)
    for n, blocks in [(1, 7), (1000, 3), (10**7 + 3, 1056)]:
        xf = torch.randint(0, 2, (n,), generator=gen, device="cuda").float()
        xi = torch.randint(-1000, 1000, (n,), generator=gen, device="cuda", dtype=torch.int32)
        for name, (_, _, dtype, _) in P.PRIMITIVES.items():
            x = xi if dtype == torch.int32 else xf
            check(f"{name} full_sum n={n}", P.full_sum(x, name, BLOCK, blocks=blocks).reshape(1),
                  x.long().sum().reshape(1), exact=True)


def measure(label, key, shape, xf, xi, copy_src, copy_dst, flusher):
    import cupy

    rows = len(shape) == 2
    n_out = shape[0] if rows else 1
    nbytes = xf.numel() * 4 + n_out * 4
    results = []
    want_f = xf.double().sum(1) if rows else xf.double().sum().reshape(1)
    want_i = xi.long().sum(1) if rows else xi.long().sum().reshape(1)
    calls = {}
    for name, (_, _, dtype, _) in P.PRIMITIVES.items():
        x = xi if dtype == torch.int32 else xf
        fn = (lambda x=x, name=name: P.row_sum(x, name, BLOCK)) if rows else \
             (lambda x=x, name=name: P.full_sum(x, name, BLOCK))
        calls[name] = (fn, dtype == torch.int32)
    cx = cupy.from_dlpack(xf)
    calls["torch.sum"] = ((lambda: torch.sum(xf, 1)) if rows else (lambda: torch.sum(xf)), False)
    calls["cupy.sum"] = (cupy_call((lambda: cx.sum(axis=1)) if rows else (lambda: cx.sum())), False)
    for name, (fn, is_int) in calls.items():
        got = fn()
        if not isinstance(got, torch.Tensor):
            got = torch.from_dlpack(got)
        check(f"{name} {label}", got.reshape(-1), want_i if is_int else want_f, exact=is_int)
    t_copy = timing.time_gpu([lambda: copy_dst.copy_(copy_src)], WARMUP, ITERS, flusher)
    copy_gbps = 2 * copy_src.numel() * copy_src.element_size() / t_copy.median_ms / 1e6
    for name, (fn, is_int) in calls.items():
        t = timing.time_gpu([fn], WARMUP, ITERS, flusher)
        gbps = nbytes / t.median_ms / 1e6
        results.append({"name": name, "dtype": "int32" if is_int else "float32", "ms": round(t.median_ms, 5),
                        "p20_ms": round(t.p20_ms, 5), "p80_ms": round(t.p80_ms, 5), "bytes": nbytes,
                        "gbps": round(gbps, 1), "pct_of_copy": round(100 * gbps / copy_gbps, 1)})
        print(f"{label:<24}{name:<18}{t.median_ms:8.3f} ms {gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}%", flush=True)
    return {"key": key, "label": label, "shape": list(shape), "bytes": nbytes, "copy_gbps": round(copy_gbps, 1),
            "copy_ms": round(t_copy.median_ms, 5), "results": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON 结果文件；同名的 .md 表格写在旁边")
    args = ap.parse_args()
    if rl.MODE != "gpu":
        sys.exit("需要 GPU（gpu 模式） (needs a GPU)")
    import cupy
    import triton

    t0 = time.time()
    gen = torch.Generator(device="cuda").manual_seed(0)
    validate_small(gen)
    print(f"小形状全部一致（{time.time() - t0:.1f} s）；CUB 用 {P.cub_backend(BLOCK)} 编译", flush=True)
    flusher = timing.L2Flusher(timing.l2_bytes())
    cases = []
    M, N = ROWS
    xf = torch.rand(M, N, generator=gen, device="cuda")
    xi = torch.randint(-8, 9, (M, N), generator=gen, device="cuda", dtype=torch.int32)
    dst = torch.empty_like(xf)
    cases.append(measure(f"按行求和 {M}×{N}", "rows", ROWS, xf, xi, xf, dst, flusher))
    del xf, xi, dst
    xf = torch.rand(N1D, generator=gen, device="cuda")
    xi = torch.randint(-8, 9, (N1D,), generator=gen, device="cuda", dtype=torch.int32)
    dst = torch.empty_like(xf)
    cases.append(measure("一维求和 2^28", "full", (N1D,), xf, xi, xf, dst, flusher))
    del xf, xi, dst
    props = torch.cuda.get_device_properties(0)
    labels = {name: desc for name, (_, _, _, desc) in P.PRIMITIVES.items()}
    labels.update({"torch.sum": "torch.sum（参照）", "cupy.sum": "cupy.sum（参照，CUB）"})
    try:
        from cupy._core import _accelerator
        accel = [str(a) for a in _accelerator.get_routine_accelerators()]
    except Exception:                       # 私有接口：拿不到就不记
        accel = None
    doc = {
        "device": props.name, "sm_count": props.multi_processor_count, "method": METHOD,
        "block_size": BLOCK, "blocks_1d": props.multi_processor_count * (2048 // BLOCK),
        "cub_backend": P.cub_backend(BLOCK), "cub_temp_storage_bytes": P.cub_temp_storage_bytes(BLOCK),
        "cupy_routine_accelerators": accel,
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                     "cupy": cupy.__version__, "cuda_runtime": torch.version.cuda},
        "labels": labels, "cases": cases, "seconds": round(time.time() - t0, 1),
    }
    out = Path(args.out)
    out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(P.results_table(doc), encoding="utf-8")
    print(f"写出 {out} 与 {out.with_suffix('.md')}（共 {doc['seconds']} s）")


if __name__ == "__main__":
    main()
