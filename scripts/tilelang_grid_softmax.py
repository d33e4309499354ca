"""TileLang 长行 softmax 的常驻网格（``softmax_grid_kernel``）：候选配置与现有默认、CUDA C、拷贝并排计时。

    REDUCTION_LAB_MODE=gpu python scripts/tilelang_grid_softmax.py --json a.json
    REDUCTION_LAB_MODE=gpu python scripts/tilelang_grid_softmax.py --shapes 64x1048576:float32 \
        --cands 256/4096/6,512/8192/3 --json a.json

候选写成 ``threads/seg_len/min_blocks/delay``：每块 ``threads`` 个线程，一段 ``seg_len`` 个元素（共享内存里
``2 + delay`` 段），``__launch_bounds__(threads, min_blocks)``，发布一项之后隔 ``delay`` 轮再写出它。网格的块数取 ``min_blocks`` x SM 数（每个 SM 同时驻留得下这么多块：
寄存器由 launch bounds 保证，共享内存与线程数在这里核对），``fit`` 再向下取成段数的倍数（一行的各段在同一轮里，
不跨两轮）。

每个形状在同一个进程里测：``copy``（``y.copy_(x)``，同样的字节数）、``cuda``（``rl.softmax(x, backend="cuda")``
的默认配置）、``tilelang``（``tk.softmax`` 的默认配置）与各个候选。每个候选先与 float64 的 torch.softmax 逐元素
比对（float32：rtol 1e-5、atol 1e-9；16 位：rtol 8e-3、atol 1e-6），不符的不计时。计时：``bench.timing.time_gpu``
（CUDA 事件，每次调用前只读地扫过 4 倍 L2，20 次的中位数），全部候选轮流测 3 轮，取 3 轮的中位数，写成 GB/s
（读 MN + 写 MN 个元素的字节数 / 时间）。候选的每次调用含把槽位填成哨兵的一次填充。
课程页面 docs/tilelang/reduce.md 读 ``docs/data/h100_tilelang_grid.json``（这个脚本的默认候选在 H100 上的一次运行，
外加 ``--shapes`` 里的 256x262144:float32）。
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

ROUNDS = 3
DEFAULT_SHAPES = "64x1048576:float32,64x1048576:bfloat16,64x1048576:float16"
#: (元素字节数) -> 候选
DEFAULT_CANDS = {
    4: "256/8192/2/1,128/8192/2/1,512/8192/2/1,256/4096/4/1,128/4096/4/1,256/16384/1/1,128/8192/3/0,256/8192/3/0",
    2: "256/16384/2/1,128/16384/2/1,512/16384/2/1,256/8192/4/1,128/8192/4/1,256/32768/1/1,256/16384/3/0",
}
#: sm_90 每个 SM 的共享内存（228 KiB），每块另有 1 KiB 保留
SMEM_PER_SM = 228 * 1024


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxN:dtype，逗号分隔")
    ap.add_argument("--cands", help="threads/seg_len/min_blocks/delay，逗号分隔（默认按元素字节数取 DEFAULT_CANDS）")
    ap.add_argument("--json", help="写出结果（每个形状测完就写一次）")
    args = ap.parse_args(argv)

    import reduction_lab as rl
    from reduction_lab import tilelang_kernels as tk
    from reduction_lab.bench.sidebyside import interleaved_gbs, new_doc, parse_shapes, print_gbs, softmax_case, validated
    from reduction_lab.bench.timing import L2Flusher, l2_bytes
    from reduction_lab.tilelang_kernels import kernels as K

    if rl.runtime.MODE != "gpu":
        print("需要 GPU：REDUCTION_LAB_MODE=gpu", file=sys.stderr)
        return 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flusher = L2Flusher(l2_bytes())
    out = new_doc(sys.argv[1:], ROUNDS, sms=sms)
    for M, N, dt in parse_shapes(args.shapes):
        x, y, ref, tol = softmax_case(M, N, dt)
        es = x.element_size()
        cands = {"copy": lambda: y.copy_(x), "cuda": lambda: rl.softmax(x, backend="cuda"),
                 "tilelang": lambda: tk.softmax(x, out=y)}
        configs, names, slots = [], [], []
        for text in (args.cands or DEFAULT_CANDS[es]).split(","):
            threads, seg, mb, delay = map(int, text.split("/"))
            n_seg = N // seg
            smem = (2 + delay) * seg * es + 2048
            if N % seg or seg % (threads * 16 // es) or mb * threads > 2048 or mb * (smem + 1024) > SMEM_PER_SM \
                    or n_seg > mb * sms:
                print(f"{M}x{N} {dt} {text}：配置不合用（段长、线程数或共享内存），跳过")
                continue
            for policy in ("fit", "full"):
                P = mb * sms if policy == "full" else (mb * sms // n_seg) * n_seg
                if policy == "full" and P % n_seg == 0:
                    continue
                st = torch.empty(M, n_seg, 2, device="cuda")
                configs.append(dict(x=x, y=y, stats=st, blocks=P, threads=threads, n_seg=n_seg, seg_len=seg,
                                    min_blocks=mb, delay=delay, dtype=dt))
                names.append(f"grid/t{threads}/s{seg}/b{mb}/d{delay}/{policy}{P}")
                slots.append(st)
        kernels = K.softmax_grid_kernel.par_compile(configs, num_workers=12, ignore_error=True)
        for name, kern, st in zip(names, kernels, slots):
            if kern is None:
                print(f"{M}x{N} {dt} {name}：编译失败")
                continue

            def call(kern=kern, st=st):
                st.fill_(-1.0)
                kern(x, y, st)
            cands[name] = call
        checked = validated(cands, y, ref, tol, f"{M}x{N} {dt}")
        med = interleaved_gbs(checked, 2 * x.numel() * x.element_size(), flusher, ROUNDS)
        print_gbs(f"{out['device']} {M}x{N} {dt}", med, 28)
        out["rows"].append({"M": M, "N": N, "dtype": dt, "gbs": med})
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        del x, y, ref
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
