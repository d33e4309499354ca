"""在 GPU 上检查 bfloat16 / float16 的 softmax 与按行求和：先逐个配置与 float64 参考值比较，全部通过之后
才计时，报告 GB/s 和它占设备拷贝带宽（torch 的 y.copy_(x)，同 dtype、同大小）的比例。

    REDUCTION_LAB_MODE=gpu python scripts/gpu_half_check.py --json /tmp/half.json

字节数：softmax 读 MN、写 MN 个元素；reduce_sum 读 MN、写 M 个元素；拷贝读写各 MN 个元素。
计时：triton.testing.do_bench 的中位数（每次调用之前它写 256 MB 冲掉 L2），输入在几份副本之间轮换，
副本合计至少 512 MiB。计的是一次 reduction_lab.softmax / reduce_sum 调用（含 Python 包装的开销），
小形状上这部分占大头。任何一个配置超出容差就打印出来并以状态 1 退出，不计时。
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import reduction_lab as rl

BACKENDS = ("cuda", "tilelang", "triton", "torch")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPS = ("softmax", "reduce_sum")
#: 每种 dtype 的单位舍入（输出舍入的相对误差上限）
UNIT = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
SHAPES = [(4096, 4096), (64, 32768), (1000, 4099), (8192, 1023), (32768, 512)]
ROTATE_BYTES = 512 * 2**20


def _input(shape, dtype, seed, op="softmax"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(*shape, generator=g, device="cuda") * 3
    if op == "softmax":
        # 一整行很大的负数（softmax 与平移无关；求和时这一行会超出 float16 的范围，所以只用于 softmax）
        x[0] = -6.0e4 if dtype == torch.float16 else -1.0e30
        x[0] += torch.arange(shape[1], device="cuda") % 7
    return x.to(dtype)


def _check(op, backend, x):
    """返回 (是否通过, 最大的 误差 / 容差)。"""
    dtype = x.dtype
    u = UNIT[dtype]
    if op == "softmax":
        y = rl.softmax(x, backend=backend)
        ref = torch.softmax(x.double(), dim=-1)
        # 输出舍入 1.01u，exp 的实现误差 2^-20，exp 的参数 z = x - max 在 float32 里的舍入 |z| 2^-24
        # （exp 经 exp2 计算时参数的相对误差变成结果的 |z| 倍）；float16 的下溢：不超过最小次正规数的一半
        z = (x.double() - x.double().amax(dim=-1, keepdim=True)).abs()
        bound = (1.01 * u + 2.0**-20 + z * 2.0**-23) * ref.abs() + (2.0**-25 if dtype == torch.float16 else 1e-30)
        if backend == "torch" or (backend == "triton" and dtype != torch.float32):
            bound = bound * 4          # 对照组：torch / triton 的半精度不保证只舍入一次
    else:
        y = rl.reduce_sum(x, backend=backend)
        ref = x.double().sum(1)
        bound = 1.01 * u * ref.abs() + x.shape[1] * 2.0**-23 * x.double().abs().sum(1) + 1e-30
        if backend == "torch" and dtype != torch.float32:
            bound = bound * 4
    if y.dtype != dtype:
        return False, float("inf")
    ratio = ((y.double() - ref).abs() / bound).max().item()
    return ratio <= 1.0, ratio


def _bytes(op, shape, dtype):
    m, n = shape
    e = torch.finfo(dtype).bits // 8
    return (2 * m * n if op == "softmax" else m * n + m) * e


def _copies(x):
    k = max(2, -(-ROTATE_BYTES // (x.numel() * x.element_size())))
    return [x.clone() for _ in range(k)]


def _bench(fn, xs):
    import triton.testing

    i = [0]

    def call():
        i[0] = (i[0] + 1) % len(xs)
        fn(xs[i[0]])

    return triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="把结果写进这个 JSON 文件")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args(argv)
    if rl.MODE != "gpu":
        print("需要 gpu 模式（REDUCTION_LAB_MODE=gpu，且有 CUDA 设备）")
        return 2
    backends = args.backends.split(",")
    configs = [(b, op, dt, shape) for b in backends for op in OPS for dt in DTYPES for shape in SHAPES]

    # 1. 先验证全部配置
    failures, checked = [], []
    for seed, (b, op, dt, shape) in enumerate(configs):
        x = _input(shape, dt, seed, op)
        try:
            ok, ratio = _check(op, b, x)
        except Exception as e:      # 报告并继续验证其余配置
            ok, ratio = False, f"{type(e).__name__}: {e}"
        checked.append({"backend": b, "op": op, "dtype": str(dt)[6:], "shape": list(shape), "ok": ok,
                        "err_over_tol": ratio})
        if not ok:
            failures.append(checked[-1])
    # 行首不按 16 字节对齐的切片（cuda：开头几个元素单独处理）
    for dt in (torch.bfloat16, torch.float16):
        for op in OPS:
            base = _input((4096, 4096 + 8), dt, 99, op)
            x = base[:, 3:4096 + 3]
            ok, ratio = _check(op, "cuda", x)
            checked.append({"backend": "cuda", "op": op, "dtype": str(dt)[6:], "shape": [4096, 4096],
                            "layout": "row start offset 3", "ok": ok, "err_over_tol": ratio})
            if not ok:
                failures.append(checked[-1])
    torch.cuda.synchronize()
    for f in failures:
        print("不一致:", f)
    if failures:
        print(f"{len(failures)} 个配置超出容差或出错；不计时")
        _write(args.json, {"checked": checked, "timed": []})
        return 1
    print(f"全部 {len(checked)} 个配置与 float64 一致（All results match）")

    # 2. 计时
    timed = []
    print(f"{'backend':<9}{'op':<11}{'dtype':<10}{'shape':<14}{'ms':>9}{'GB/s':>9}{'copy GB/s':>11}{'%copy':>7}")
    copy_gbs = {}
    for b, op, dt, shape in configs:
        key = (dt, shape)
        if key not in copy_gbs:
            xs = _copies(_input(shape, dt, 0))
            ys = [torch.empty_like(xs[0]) for _ in range(2)]
            ms = _bench(lambda x: ys[0].copy_(x), xs)
            copy_gbs[key] = 2 * xs[0].numel() * xs[0].element_size() / ms / 1e6
            del xs
        xs = _copies(_input(shape, dt, 1))
        fn = (lambda x: rl.softmax(x, backend=b)) if op == "softmax" else (lambda x: rl.reduce_sum(x, backend=b))
        ms = _bench(fn, xs)
        gbs = _bytes(op, shape, dt) / ms / 1e6
        row = {"backend": b, "op": op, "dtype": str(dt)[6:], "shape": list(shape), "ms": ms, "gbs": gbs,
               "copy_gbs": copy_gbs[key], "fraction_of_copy": gbs / copy_gbs[key]}
        timed.append(row)
        print(f"{b:<9}{op:<11}{str(dt)[6:]:<10}{str(shape):<14}{ms:9.4f}{gbs:9.0f}{copy_gbs[key]:11.0f}"
              f"{gbs / copy_gbs[key]:7.0%}")
        del xs
    _write(args.json, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "method": "do_bench median (256 MB L2 flush), rotating inputs >= 512 MiB, one API call",
                       "checked": checked, "timed": timed})
    return 0


def _write(path, data):
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    sys.exit(main())
