"""LayerNorm / RMSNorm 反向在 GPU 上的验证与调参：一次运行（约 1–2 分钟）比较几组候选配置。

对 (M, N) = (65536, 1024)、(16384, 4096)、(4096, 16384)，float32 与 bfloat16 的 x、dy（w、b 是 float32），
LayerNorm 与 RMSNorm：每个候选配置（第一个是 ``backward_config`` 的默认配置）先与 float64 的 torch autograd
比对 dx、dW（、dB），不通过就以非零状态退出；全部通过以后才计时（``triton.testing.do_bench`` 的中位数，
每次调用前清空 L2）。

字节数：读 x、dy，写 dx，共 3 * M * N * 元素字节数（w、mean、rstd、部分和不计）；
拷贝上限：``dst.copy_(src)``，读写各 M * N * 元素字节数。

用法（gpu 模式）::

    python scripts/gpu_norm_bwd_check.py [--shapes 4096x16384,16384x4096] [--dtypes float32] [--json out.json]

每行打印：做法、BLOCK_M x BLOCK_N、warp 数、program 数 P 与每个 program 的行数、列块数、部分和的寄存器
列块数（"tiles"）、编译后每个线程的寄存器数与溢出、时间、GB/s 与占拷贝带宽的比例；最后按形状列出最快的配置。
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import reduction_lab as rl
from reduction_lab.triton_kernels import layer_norm as ln

C = ln.BackwardConfig
SHAPES = [(65536, 1024), (16384, 4096), (4096, 16384)]
#: 每个 N 的候选（默认配置总是第一个，另加这里的几组；重复的去掉）
CANDIDATES = {
    1024: [C("row", 2, 1024, 4, 4), C("row", 4, 1024, 8, 1)],
    4096: [C("row", 1, 4096, 16, 2), C("tiles", 1, 2048, 8, 2)],
    16384: [C("tiles", 1, 4096, 32, 1), C("stream", 1, 2048, 16, 2)],
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


class _Recorder:
    """包住 ``ln.norm_backward_kernel``：记下最近一次启动返回的已编译内核（读寄存器数与溢出）。"""

    def __init__(self, kernel):
        self.kernel = kernel
        self.last = None

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            self.last = launch(*args, **kwargs)
            return self.last

        return run


def _inputs(m, n, dtype):
    g = torch.Generator(device=rl.DEVICE).manual_seed(1234 + n)
    x = torch.randn(m, n, generator=g, device=rl.DEVICE)
    x += torch.linspace(-10.0, 10.0, m, device=rl.DEVICE).unsqueeze(1)   # 每行不同的均值
    dy = torch.randn(m, n, generator=g, device=rl.DEVICE)
    w = 1 + 0.1 * torch.randn(n, generator=g, device=rl.DEVICE)
    b = 0.1 * torch.randn(n, generator=g, device=rl.DEVICE)
    return x.to(dtype), dy.to(dtype), w, b


def _reference(norm, x, dy, w, b):
    xr, wr, br = (t.double().requires_grad_() for t in (x, w, b))
    if norm == "layer_norm":
        y = F.layer_norm(xr, (x.shape[1],), wr, br, EPS[norm])
        return torch.autograd.grad(y, (xr, wr, br), dy.double())
    y = F.rms_norm(xr, (x.shape[1],), wr, EPS[norm])
    return torch.autograd.grad(y, (xr, wr), dy.double())


def _max_violation(got, ref, dtype, name):
    """最大的 |g - ref| / (atol + rtol * |ref|)：不超过 1 才算通过。dx 的容差随输入 dtype；dW、dB 按 float32。"""
    if name == "dx" and dtype == torch.bfloat16:
        e = torch.finfo(dtype).eps
        atol, rtol = e * float(ref.abs().max()), e
    else:
        atol, rtol = 1e-3, 1e-3
    return float(((got.double() - ref).abs() / (atol + rtol * ref.abs())).max())


def _gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}" for m, n in SHAPES))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--norms", default="layer_norm,rms_norm")
    ap.add_argument("--json", default=None, help="把全部结果写进这个 JSON 文件")
    args = ap.parse_args(argv)
    if rl.MODE != "gpu":
        print("需要 gpu 模式（REDUCTION_LAB_MODE=gpu 与一块 NVIDIA GPU） (needs gpu mode)", file=sys.stderr)
        return 2
    from triton.testing import do_bench

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    norms = args.norms.split(",")
    recorder = _Recorder(ln.norm_backward_kernel)
    ln.norm_backward_kernel = recorder
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"设备 {torch.cuda.get_device_name(0)}（{sms} 个 SM），torch {torch.__version__}，"
          f"triton {__import__('triton').__version__}")
    print("GB/s 按 3*M*N*元素字节数（读 x、dy，写 dx）；拷贝按读写各 M*N*元素字节数；do_bench 中位数")
    records, failed = [], []
    for m, n in shapes:
        for dtype in dtypes:
            x, dy, w, b = _inputs(m, n, dtype)
            es = x.element_size()
            dst = torch.empty_like(x)
            copy_ms = do_bench(lambda: dst.copy_(x), warmup=10, rep=50, return_mode="median")
            copy_gbps = _gbps(2 * m * n * es, copy_ms)
            print(f"\n== M={m} N={n} {str(dtype)[6:]}：拷贝 {copy_gbps:.0f} GB/s")
            for norm in norms:
                refs = _reference(norm, x, dy, w, b)
                if norm == "layer_norm":
                    _, mean, rstd = ln.layer_norm_forward(x, w, b, EPS[norm])

                    def call(cfg):
                        return ln.layer_norm_backward(dy, x, w, mean, rstd, config=cfg)
                else:
                    _, rstd = ln.rms_norm_forward(x, w, EPS[norm])

                    def call(cfg):
                        return ln.rms_norm_backward(dy, x, w, rstd, config=cfg)
                default = ln.backward_config(m, n, dtype)
                configs = [default] + [c for c in CANDIDATES.get(n, []) if c != default]
                for cfg in configs:
                    grads = call(cfg)
                    bad = {name: v for name, g, r in zip(("dx", "dw", "db"), grads, refs)
                           if (v := _max_violation(g, r, dtype, name)) > 1}
                    kernel = recorder.last
                    regs, spills = getattr(kernel, "n_regs", "?"), getattr(kernel, "n_spills", "?")
                    p, rows = ln.backward_partition(m, cfg)
                    n_tiles = -(-n // cfg.block_n)
                    acc_tiles = ln._acc_tiles(cfg, n)
                    rec = dict(norm=norm, M=m, N=n, dtype=str(dtype)[6:], default=cfg == default,
                               strategy=cfg.strategy, block_m=cfg.block_m, block_n=cfg.block_n,
                               num_warps=cfg.num_warps, programs_per_sm=cfg.programs_per_sm, programs=p,
                               rows_per_program=rows, col_tiles=n_tiles, acc_tiles=acc_tiles,
                               regs=regs, spills=spills, copy_gbps=copy_gbps)
                    del grads
                    if bad:
                        failed.append(rec)
                        rec["violations"] = bad
                        print(f"  {norm:<10} {cfg} 验证失败（|误差| / 容差的最大值）：{bad}")
                        records.append(rec)
                        continue
                    ms = do_bench(lambda: call(cfg), warmup=10, rep=50, return_mode="median")
                    gbps = _gbps(3 * m * n * es, ms)
                    rec.update(ms=ms, gbps=gbps, frac_copy=gbps / copy_gbps)
                    records.append(rec)
                    print(f"  {norm:<10} {'默认' if rec['default'] else '    '} {cfg.strategy:<6} "
                          f"{cfg.block_m}x{cfg.block_n:<5} warps={cfg.num_warps:<2} P={p:<4}（每个 {rows} 行）"
                          f"列块 {n_tiles} 寄存器列块 {acc_tiles}  regs={regs} spills={spills}  "
                          f"{ms * 1e3:8.1f} µs {gbps:6.0f} GB/s（{gbps / copy_gbps:.0%}）", flush=True)
                del refs
            torch.cuda.empty_cache()
    print("\n最快的配置（每个形状、dtype、归一化）：")
    best = {}
    for r in records:
        if "gbps" in r:
            key = (r["norm"], r["M"], r["N"], r["dtype"])
            if key not in best or r["gbps"] > best[key]["gbps"]:
                best[key] = r
    for (norm, m, n, dt), r in best.items():
        default = next(d for d in records
                       if d["default"] and (d["norm"], d["M"], d["N"], d["dtype"]) == (norm, m, n, dt))
        print(f"  {norm:<10} {m}x{n} {dt:<8} BackwardConfig({r['strategy']!r}, {r['block_m']}, {r['block_n']}, "
              f"{r['num_warps']}, {r['programs_per_sm']})：{r['gbps']:.0f} GB/s（{r['frac_copy']:.0%}）"
              + ("  = 默认" if r["default"] else f"  默认 {default.get('gbps', 0):.0f} GB/s"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "records": records}, f, ensure_ascii=False, indent=1)
    if failed:
        print(f"\n{len(failed)} 个配置验证失败", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
