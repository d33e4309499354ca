"""一次调用的主机开销拆成哪几块：分配输出、输入检查、Triton / CuPy 的启动路径，各自单独计时；
``--profile`` 再给出每个 backend 的 cProfile。只在 GPU 上有意义。

    REDUCTION_LAB_MODE=gpu python scripts/host_cost.py [--json out.json] [--profile]

方法与 ``reduction-lab bench percall`` 相同（reduction_lab.bench.percall.wall_us：预热后连续调用 K 次，
两端 torch.cuda.synchronize，墙钟时间 / K，取几次的中位数）。每个实现一次调用多久（墙钟时间与内核时间
并排）由 percall 套件测，结果在 docs/data/h200_percall.md。
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics

import reduction_lab as rl
import torch
import triton
import triton.language as tl

from reduction_lab.bench.percall import wall_us
from reduction_lab.triton_kernels import _launch

def per_call_us(fn, k: int = 2000, warmup: int = 50) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(wall_us(fn, k, repeats=3, gpu=True))


@triton.jit
def _empty_kernel(x_ptr, n):
    pass


@triton.jit
def _copy_kernel(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(in_ptr + offs, mask=offs < n), mask=offs < n)


def probes() -> dict:
    x = torch.randn(64, 1024, device="cuda")
    y = torch.empty_like(x)
    out = {}
    out["torch.empty_like"] = per_call_us(lambda: torch.empty_like(x))
    out["torch.empty(shape, dtype, device)"] = per_call_us(
        lambda: torch.empty(x.shape, dtype=x.dtype, device=x.device))
    out["torch.softmax"] = per_call_us(lambda: torch.softmax(x, -1))
    out["torch.sum(1)"] = per_call_us(lambda: x.sum(1))
    out["triton empty kernel[grid]"] = per_call_us(lambda: _empty_kernel[(1,)](x, 1))
    out["triton copy kernel[grid]"] = per_call_us(lambda: _copy_kernel[(64,)](y, x, x.numel(), BLOCK=1024))
    if hasattr(_launch, "FastLaunch"):
        fl = _launch.FastLaunch(_copy_kernel)
        y.zero_()
        fl((64,), y, x, x.numel(), BLOCK=1024)
        fl((64,), y, x, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        assert torch.equal(y, x), "FastLaunch 的结果与输入不同"
        out["triton copy FastLaunch"] = per_call_us(lambda: fl((64,), y, x, x.numel(), BLOCK=1024))
        entry = next(iter(fl.cache.values()))
        out["FastLaunch path"] = {_launch._NEW: "C launch function (new Triton)", _launch._V36: "C launch function (Triton 3.6)",
                                  _launch._RUN: "compiled.run", _launch._TORCH: "torch C++ launcher"}[entry[0]] \
            + f" ({type(entry[1]).__name__})"
    from reduction_lab import torch_launcher

    out["torch launcher kind"] = str(torch_launcher.kind())
    out.update(floor_probe(x))
    # 同一个已编译的 Triton 内核，两种启动器各自只启动（参数都已备好）
    compiled = _copy_kernel[(64,)](y, x, x.numel(), BLOCK=1024)
    stream0 = torch._C._cuda_getCurrentRawStream(x.get_device())
    flat0 = (y.data_ptr(), x.data_ptr(), x.numel())
    e_triton = _launch._entry(compiled.run, compiled.function, compiled.packed_metadata, (1024,))   # 末尾是 BLOCK
    out["launch only: Triton's C launcher"] = per_call_us(lambda: _launch._call(e_triton, (64,), stream0, flat0))
    e_torch = _launch._torch_entry(compiled, 3)
    if e_torch is not None:
        y.zero_()
        _launch._call(e_torch, (64,), stream0, flat0)
        torch.cuda.synchronize()
        assert torch.equal(y, x), "torch 的启动器启动的拷贝内核结果与输入不同"
        out["launch only: torch's C++ launcher"] = per_call_us(lambda: _launch._call(e_torch, (64,), stream0, flat0))
    # 一次 rl.softmax 调用里的各段（Triton 默认 backend）：检查、计划、分配输出、启动
    from reduction_lab.triton_kernels import softmax as tsm

    out.update(bound_probe(x))
    out["rl.softmax(x) triton"] = per_call_us(lambda: rl.softmax(x, backend="triton"))
    out["rl.softmax(x) auto"] = per_call_us(lambda: rl.softmax(x))               # 默认 backend：这里选 triton
    out["softmax_checked(x)"] = per_call_us(lambda: tsm.softmax_checked(x))
    out["torch.empty_like"] = per_call_us(lambda: torch.empty_like(x))
    launcher, grid, kw, kw_key = tsm._rows_plan(x.shape[0], x.shape[1], x.dtype)
    args = (y, x, x.stride(0), y.stride(0), x.shape[0], x.shape[1])
    flat = (y.data_ptr(), x.data_ptr(), *args[2:])
    key = ("probe", kw_key)
    launcher.launch_keyed(grid, key, 0, flat, args, kw)
    out["FastLaunch.launch_keyed (precomputed key)"] = per_call_us(lambda: launcher.launch_keyed(grid, key, 0, flat, args, kw))
    entry = launcher.cache.get(key)
    stream = torch._C._cuda_getCurrentRawStream(0)
    if entry is not None:
        out["Triton launch only (_call, all args precomputed)"] = per_call_us(lambda: _launch._call(entry, grid, stream, flat))
        if entry[0] == _launch._TORCH:
            out.update(lean_probe(x, entry, grid))
        if entry[0] != _launch._TORCH:          # torch 的启动器没有 Triton 的元数据元组可拆
            out.update(driver_probe(entry, grid, kw, stream, flat))
    out["torch._C._cuda_getCurrentRawStream(0)"] = per_call_us(lambda: torch._C._cuda_getCurrentRawStream(0))
    out["FastLaunch._hooks_on"] = per_call_us(launcher._hooks_on)
    out["x.data_ptr()"] = per_call_us(lambda: x.data_ptr())
    out["rl.api._check_args"] = per_call_us(lambda: rl.api._check_args(x, -1, "triton", None, "softmax"))
    out["rl.reduce_sum(x) triton"] = per_call_us(lambda: rl.reduce_sum(x, backend="triton"))
    # bf16：同一个计划第二次起应当命中 FastLaunch 的缓存（缓存项的个数不再增长）
    from reduction_lab.triton_kernels import row_sum as trs

    xb = x.to(torch.bfloat16)
    out["rl.softmax(x bf16) triton"] = per_call_us(lambda: rl.softmax(xb, backend="triton"))
    before = len(trs._tiled_launch.cache)
    out["rl.reduce_sum(x bf16) triton"] = per_call_us(lambda: rl.reduce_sum(xb, backend="triton"))
    out["row-sum FastLaunch cache entries before/after bf16 calls"] = \
        f"{before} -> {len(trs._tiled_launch.cache)}"
    out["row_sum_checked(x bf16)"] = per_call_us(lambda: trs.row_sum_checked(xb))
    out["torch.empty(64, bf16)"] = per_call_us(lambda: torch.empty(64, device=xb.device, dtype=torch.bfloat16))
    try:
        out.update(_other_backends(x, y))
    except Exception as exc:  # noqa: BLE001 - 报告而不中断（例如没有装 CUDA C 或 TileLang 的依赖）
        out["cuda / tilelang"] = f"{type(exc).__name__}: {exc}"
    out["torch.cuda.current_stream().cuda_stream"] = per_call_us(lambda: torch.cuda.current_stream().cuda_stream)
    return out


def _other_backends(x, y) -> dict:
    out = {}
    out["rl.softmax(x) cuda"] = per_call_us(lambda: rl.softmax(x, backend="cuda"))
    from reduction_lab import cuda_kernels as ck

    out["cuda softmax_checked(x)"] = per_call_us(lambda: ck.softmax_checked(x))
    lp = next((p[6] for k, p in ck._SOFTMAX_PLANS.items() if k[:3] == (*x.shape, x.dtype)), None)
    if lp is not None:
        out["cuda plan launcher"] = "torch C++ launcher" if getattr(lp, "fast", None) is not None else "cupy launchKernel"
        vals = (x.data_ptr(), y.data_ptr(), x.stride(0), y.stride(0), x.shape[0], x.shape[1])
        if len(lp.checks) == len(vals):
            out["cuda _Plan.launch_values (precomputed)"] = per_call_us(lambda: lp.launch_values(vals))
    out["rl.reduce_sum(x) cuda"] = per_call_us(lambda: rl.reduce_sum(x, backend="cuda"))
    out["rl.softmax(x) tilelang"] = per_call_us(lambda: rl.softmax(x, backend="tilelang"))
    out["rl checks (_check_args)"] = per_call_us(lambda: rl.api._check_args(x, -1, "triton", None, "softmax"))
    try:
        import cupy

        k = cupy.RawKernel(r'extern "C" __global__ void noop(float *x) {}', "noop")
        k((1,), (32,), (x.data_ptr(),))
        out["cupy empty RawKernel"] = per_call_us(lambda: k((1,), (32,), (x.data_ptr(),)))
        # 每次调用都把 torch 的流包一次要多少（reduction_lab 按流缓存包装对象，见 cuda_kernels/launcher.py 的 cupy_stream）
        stream = torch.cuda.current_stream()
        if hasattr(cupy.cuda.Stream, "from_external"):
            out["cupy Stream.from_external wrap"] = per_call_us(lambda: cupy.cuda.Stream.from_external(stream))
        else:
            out["cupy ExternalStream wrap"] = per_call_us(lambda: cupy.cuda.ExternalStream(stream.cuda_stream))
    except Exception as exc:  # noqa: BLE001 - 报告而不中断
        out["cupy"] = f"{type(exc).__name__}: {exc}"
    return out


#: bound_probe 交替测量的轮数：每一轮把四种 runner 各建一次、各测一遍（主机的速度在一次运行之中也会变，
#: 交替让这种漂移落在所有 runner 上），每一项取各轮的中位数
BOUND_ROUNDS = 5


def bound_probe(x) -> dict:
    """api 的快速路径（reduction_lab.fastcall）：编译版 runner（reduction_lab.host；guard 在 C++ 的 dispatch 里，或
    在 Python 的 fastcall._py_fast 里）与 Python 的 runner（经 Triton 的 C 启动函数或 torch 的 C++ 启动器），与同一次
    运行里的 torch 交替测量 :data:`BOUND_ROUNDS` 轮。"""
    from reduction_lab import fastcall, host

    out = {"compiled runner": "built" if host.module() is not None else f"unavailable: {host.unavailable()}",
           "fast path rounds": BOUND_ROUNDS}
    xb = x.to(torch.bfloat16)
    probes = {"rl.softmax(x) triton": lambda: rl.softmax(x, backend="triton"),
              "torch.softmax": lambda: torch.softmax(x, -1),
              "rl.reduce_sum(x) triton": lambda: rl.reduce_sum(x, backend="triton"),
              "x.sum(1)": lambda: x.sum(1),
              "rl.softmax(x bf16) triton": lambda: rl.softmax(xb, backend="triton"),
              "rl.reduce_sum(x bf16) triton": lambda: rl.reduce_sum(xb, backend="triton")}
    got: dict = {}
    for _ in range(BOUND_ROUNDS):
        for which in ("compiled", "compiled, Python guard", "triton", "torch"):
            host.ENABLED = which.startswith("compiled")
            _launch.BOUND_LAUNCHER = "torch" if which == "torch" else "triton"
            fastcall.clear()
            for _ in range(2):
                rl.softmax(x, backend="triton"), rl.reduce_sum(x, backend="triton")
                rl.softmax(xb, backend="triton"), rl.reduce_sum(xb, backend="triton")
            if which == "compiled, Python guard":
                fastcall.fast = fastcall._py_fast
            for name, fn in probes.items():
                got.setdefault(f"fast path, {which}: {name}", []).append(per_call_us(fn, k=1000, warmup=20))
    out.update({k: statistics.median(v) for k, v in got.items()})
    _launch.BOUND_LAUNCHER = "triton"
    host.ENABLED = True
    fastcall.clear()
    return out


def lean_probe(x, entry, grid) -> dict:
    """能做到多少：同一个多行 softmax 内核，只留分配输出、取两个地址、经 torch 的启动器启动这三步（形状、
    行距与启动器都预先取好，不做任何检查）。"""
    _, fn, keep, _ = entry
    n_rows, n_cols = x.shape
    sx = x.stride(0)
    g0 = grid[0]
    stream = torch._C._cuda_getCurrentRawStream
    dev = x.get_device()
    empty_like = torch.empty_like

    def lean():
        out = empty_like(x)
        vals = (out.data_ptr(), x.data_ptr(), sx, sx, n_rows, n_cols)
        fn(g0, 1, 1, stream(dev), *(vals if keep is None else [vals[i] for i in keep]))
        return out

    y = lean()
    torch.cuda.synchronize()
    assert torch.allclose(y, torch.softmax(x, -1), atol=1e-6), "精简路径的结果不对"
    return {"lean: empty_like + 2 data_ptr + torch launcher (softmax rows)": per_call_us(lean),
            "lean: same, torch.softmax in the same run": per_call_us(lambda: torch.softmax(x, -1))}


def floor_probe(x) -> dict:
    """启动本身的下限：一个什么也不做的内核（1 个 program、1 个 warp），参数都已备好，分别经 ctypes 调用驱动的
    cuLaunchKernel、torch 的 C++ 启动器、Triton 的 C 启动函数。GPU 上几乎没有活，量到的是主机端启动一次的开销。"""
    import ctypes

    compiled = _empty_kernel[(1,)](x, 1)
    torch.cuda.synchronize()
    stream = torch._C._cuda_getCurrentRawStream(x.get_device())
    out = {}
    n_scratch = int(hasattr(compiled.metadata, "global_scratch_size")) + \
        int(hasattr(compiled.metadata, "profile_scratch_size"))
    cuda = ctypes.CDLL("libcuda.so.1")
    f = cuda.cuLaunchKernel
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    store = [ctypes.c_uint64(x.data_ptr()), ctypes.c_int32(1)] + [ctypes.c_uint64(0)] * n_scratch
    params = (ctypes.c_void_p * len(store))(*[ctypes.addressof(v) for v in store])
    fn = compiled.function
    warps, shared = compiled.metadata.num_warps, compiled.metadata.shared
    res = f(fn, 1, 1, 1, 32 * warps, 1, 1, shared, stream, params, None)
    torch.cuda.synchronize()
    out["floor: empty kernel, ctypes cuLaunchKernel"] = per_call_us(
        lambda: f(fn, 1, 1, 1, 32 * warps, 1, 1, shared, stream, params, None)) if res == 0 else f"status {res}"
    e_torch = _launch._torch_entry(compiled, 2)
    if e_torch is not None:
        flat = (x.data_ptr(), 1)
        out["floor: empty kernel, torch C++ launcher"] = per_call_us(lambda: _launch._call(e_torch, (1,), stream, flat))
    e_triton = _launch._entry(compiled.run, compiled.function, compiled.packed_metadata, ())
    flat = (x.data_ptr(), 1)
    out["floor: empty kernel, Triton C launcher"] = per_call_us(lambda: _launch._call(e_triton, (1,), stream, flat))
    out["floor: torch.empty_like + x.data_ptr()"] = per_call_us(lambda: torch.empty_like(x).data_ptr())
    out["floor: x.new_empty(x.shape)"] = per_call_us(lambda: x.new_empty(x.shape))
    out["floor: torch.neg(x) (one torch launch)"] = per_call_us(lambda: torch.neg(x))
    out["floor: x.add_(0) in place (launch, no alloc)"] = per_call_us(lambda: x.add_(0))
    return out


def driver_probe(entry, grid, kw, stream, flat) -> dict:
    """同一个已编译的 Triton 内核，绕过 Triton 的启动器，经 ctypes 直接调用驱动的 cuLaunchKernel：
    量驱动这一步本身要多久（与 Triton 的 C 启动函数所用的 cuLaunchKernelEx 比较）。"""
    import ctypes

    how, fn, function, extra = entry
    packed = extra[2] if how != _launch._RUN else extra[0]
    num_warps, num_ctas, shared = packed
    cuda = ctypes.CDLL("libcuda.so.1")
    f = cuda.cuLaunchKernel
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    store = [ctypes.c_uint64(flat[0]), ctypes.c_uint64(flat[1])] + [ctypes.c_int32(v) for v in flat[2:]] \
        + [ctypes.c_uint64(0), ctypes.c_uint64(0)]          # Triton 3.6 的内核末尾有 global / profile scratch 两个指针
    params = (ctypes.c_void_p * len(store))(*[ctypes.addressof(v) for v in store])
    res = f(function, grid[0], 1, 1, 32 * num_warps, 1, 1, shared, stream, params, None)
    torch.cuda.synchronize()
    out = {"ctypes cuLaunchKernel status": res}
    if res == 0:
        out["ctypes cuLaunchKernel (same kernel)"] = per_call_us(
            lambda: f(function, grid[0], 1, 1, 32 * num_warps, 1, 1, shared, stream, params, None))
    try:
        import cupy

        launch = cupy.cuda.driver.launchKernel
        addr = ctypes.addressof(params)
        out["cupy.cuda.driver.launchKernel (same kernel)"] = per_call_us(
            lambda: launch(function, grid[0], 1, 1, 32 * num_warps, 1, 1, shared, stream, addr, 0))
    except Exception as exc:  # noqa: BLE001 - 报告而不中断
        out["cupy.cuda.driver.launchKernel"] = f"{type(exc).__name__}: {exc}"
    return out


def profile(backend: str, op: str) -> str:
    x = torch.randn(64, 1024, device="cuda")
    fn = getattr(rl, op)
    for _ in range(100):
        fn(x, backend=backend)
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        fn(x, backend=backend)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    return s.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    rl.runtime.require_gpu("host_cost")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "method": "back-to-back calls, wall time / K after warmup, synchronize at both ends, median of 3 "
                     "(reduction_lab.bench.percall.wall_us)"}
    res["probes_us"] = probes()
    for k, v in res["probes_us"].items():
        print(f"{k:45s} {v if isinstance(v, str) else f'{v:8.2f} us'}", flush=True)
    if args.profile:
        for backend in ("triton", "cuda", "tilelang"):
            for op in ("softmax", "reduce_sum"):
                try:
                    txt = profile(backend, op)
                except Exception as exc:  # noqa: BLE001
                    txt = repr(exc)
                print(f"==== profile {backend} {op}\n{txt}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
