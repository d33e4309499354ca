"""长行的寄存器版簇 softmax（softmax_cluster.cu 的 softmax_cluster_regs）在 H200 上的扫描：寄存器里留原始的包
（KEEP_PACKED）还是拆成 float，每个线程几包放在寄存器里、几包放在共享内存里（SMEM_PACKS）。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_smem.py --json docs/data/h200_cuda_softmax_smem.json
    REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_smem.py --dtype float32 --ns 32768,65536,131072,262144 \
        --json docs/data/h200_cuda_softmax_smem_fp32.json

每个 N（默认 bfloat16，M = 2**26 // N 行，输入同 scripts/tune_cuda_softmax.py）：
1. 候选：簇大小 c、线程数 b、寄存器里的包数 p、共享内存里的包数 sp，c * b * (p + sp) 正好盖住一行
   （c 取 2 到 16，b 取 128、256、512，p 取 4、8，sp 取 0 到 24，共享内存不超过 120 KiB）。16 位：寄存器里留原始的包
   （``keep`` = 1）；sp = 0 的另试拆成 float（``keep`` = 0，默认的写法只在 sp > 0 时留原始的包）。
   ``__launch_bounds__`` 的第二个参数：keep = 1 时按 64 / 40 个寄存器，keep = 0 时按 80 / 64 个
   （cluster.regs_min_blocks 有、没有共享内存的包时的两种上限）。float32：一包就是 4 个 float，只有 ``keep`` = 0，
   不加寄存器上限（与 cluster.regs_min_blocks 相同）；
2. 验证：与 float64 的 torch.softmax 比对（tune_cuda_softmax.max_violation），不符的不计时；
3. 计时：triton.testing.do_bench 的中位数（每次调用前清空 L2），对照同样字节数的 y.copy_(x)；``frac`` = 拷贝时间 /
   时间。同一次运行里另测 ``auto``（cuda_kernels.softmax 的默认配置），N = 2^20 另测 ``grid``（常驻网格）。
课程页面 docs/cuda/cluster-softmax.md 读它写出的 JSON。
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch

import reduction_lab as rl          # 先于 triton 导入：它按模式设置 Triton 的解释器
import triton.testing
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import cluster as cl
from reduction_lab.cuda_kernels.launcher import cupy_stream
import tune_cuda_softmax as t

TOTAL = 1 << 26
NS = (32768, 65536, 131072, 262144, 1048576)
SMEM_LIMIT = 120 * 1024


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


def candidates(n: int, dtype=torch.bfloat16, blocks=(128, 256, 512), smem_limit=SMEM_LIMIT):
    """(c, b, p, sp, keep)：正好盖住一行的配置。"""
    vec = 16 // dtype.itemsize
    nv = n // vec
    out = []
    for c in (2, 4, 8, 16):
        for b in blocks:
            for p in (4, 8):
                for sp in (0, 2, 4, 8, 12, 24):
                    if c * b * (p + sp) != nv or sp * b * 16 > smem_limit or b * p * vec > cl.REGS_MAX_BLOCK_ELEMS:
                        continue
                    if dtype == torch.float32:
                        out.append((c, b, p, sp, 0))
                        continue
                    out.append((c, b, p, sp, 1))
                    if sp == 0:
                        out.append((c, b, p, sp, 0))
    return out


def min_blocks(b: int, p: int, keep: int, dtype=torch.bfloat16) -> int:
    """regs_min_blocks 的两种寄存器上限：它按「有没有共享内存的包」决定 KEEP_PACKED，这里按 keep 选。"""
    return cl.regs_min_blocks(b, p, dtype, smem_packs=1 if keep else 0)


def compile_kernel(c, b, p, sp, keep, index, dtype=torch.bfloat16):
    mb = min_blocks(b, p, keep, dtype)
    kern, func = cl._compile_cluster_kernel(cl.REGS_KERNEL, c, b, p, dtype, index, MIN_BLOCKS=mb,
                                            SMEM_PACKS=sp, KEEP_PACKED=keep)
    if sp:
        kern.max_dynamic_shared_size_bytes = sp * b * 16
    return kern, func, mb


def launch(kern, c, b, sp, x, y):
    M, N = x.shape
    with cupy_stream():
        kern((M * c,), (b,), (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int64(x.stride(0)),
                             np.int64(y.stride(0)), np.int32(N)), shared_mem=sp * b * 16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    ap.add_argument("--ns", default=",".join(map(str, NS)), help="逗号分隔的行长")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--blocks", default="128,256,512", help="逗号分隔的每块线程数")
    ap.add_argument("--smem-limit", type=int, default=SMEM_LIMIT, help="每块动态共享内存的上限（字节，默认 120 KiB）")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rl.runtime.require_gpu("tune_cluster_smem")
    out = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "date": time.strftime("%Y-%m-%d"), "total_elems": TOTAL, "dtype": args.dtype,
                    "command": "REDUCTION_LAB_MODE=gpu python " + " ".join(sys.argv),
                    "method": "validate against float64 torch.softmax, then triton.testing.do_bench median "
                              "(L2 flushed); frac = copy time / time"},
           "rows": []}
    index = torch.cuda.current_device()
    t0 = time.time()
    for n in map(int, args.ns.split(",")):
        m = TOTAL // n
        x = t.make_input(m, n, dtype, seed=n)
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        nbytes = 2 * x.numel() * x.element_size()
        tc = bench(lambda: y.copy_(x))
        row = {"N": n, "M": m, "copy": nbytes / tc / 1e9, "cands": []}
        ck.softmax(x, out=y)
        row["auto_violation"] = t.max_violation(y, ref, dtype)
        row["auto"] = tc / bench(lambda: ck.softmax(x, out=y))
        row["auto_plan"] = {k: v for k, v in ck.softmax_plan(m, n, dtype, clusters=True).items()
                            if k in ("kernel", "block_size", "packs", "cluster_size", "smem_packs")}
        if n == 1 << 20:
            row["grid"] = tc / bench(lambda: ck.softmax(x, kernel="grid", out=y))
        blocks = tuple(map(int, args.blocks.split(",")))
        for c, b, p, sp, keep in candidates(n, dtype, blocks, args.smem_limit):
            cand = {"c": c, "b": b, "p": p, "sp": sp, "keep": keep}
            try:
                kern, func, mb = compile_kernel(c, b, p, sp, keep, index, dtype)
                cand.update(min_blocks=mb, regs=int(kern.attributes["num_regs"]),
                            spill=int(kern.attributes["local_size_bytes"]),
                            clusters=cl.max_active_clusters(int(func.ptr), c, b, sp * b * 16))
                y.fill_(float("nan"))
                launch(kern, c, b, sp, x, y)
                torch.cuda.synchronize()
                v = t.max_violation(y, ref, dtype)
                if v > 1:
                    cand["violation"] = v
                    print("FAIL", n, cand, flush=True)
                else:
                    cand["frac"] = tc / bench(lambda: launch(kern, c, b, sp, x, y))
            except Exception as e:  # noqa: BLE001 —— 记下原因，继续别的候选
                cand["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                print("ERR", n, cand, flush=True)
            row["cands"].append(cand)
        best = sorted([q for q in row["cands"] if "frac" in q], key=lambda q: -q["frac"])
        print(f"N={n} copy {row['copy']:.0f} auto {row['auto']:.3f} {row['auto_plan']} grid {row.get('grid')} "
              f"t={time.time() - t0:.0f}", flush=True)
        for q in best[:5]:
            print("   ", q, flush=True)
        del x, y, ref
        t.add_row(out, row, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
