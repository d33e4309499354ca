"""长行的寄存器版簇 softmax（softmax_cluster.cu 的 softmax_cluster_regs）：整向量读写的缓存提示在 H200 上值多少。

    REDUCTION_LAB_MODE=gpu python scripts/tune_cluster_hints.py --json docs/data/h200_cuda_softmax_hints.json

每个 (dtype, N)（M = 2**26 // N，输入同 scripts/tune_cuda_softmax.py）取 ``cuda_kernels.softmax`` 的默认配置
（只测它是寄存器版簇内核的那些 N），只换编译期常量：
``LOAD_HINT`` 0 普通的读、1 ``ld.global.cs``（``__ldcs``）、2 ``ld.global.nc.L1::no_allocate.L2::256B``；
``STORE_HINT`` 0 ``st.global.cs``（``__stcs``，流式写）、1 ``st.global.wb``（``__stwb``，普通的写回；
docs/data/h200_cuda_softmax_hints.json 之后的默认）。那次运行里 ``default`` 是当时的默认 (0, 0)，现在叫 ``st.cs``。
每个变体先与 float64 的 torch.softmax 比对，再用 triton.testing.do_bench 的中位数计时（每次调用前清空 L2）；
各变体与同样字节数的 ``y.copy_(x)`` 轮流测 ``--rounds`` 轮，``frac`` = 拷贝时间 / 时间，取各轮的中位数
（主机与 GPU 的状态在一次运行里也会漂：轮流测让每个变体都碰上同样的漂移）。
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import reduction_lab as rl          # 先于 triton 导入：它按模式设置 Triton 的解释器
from reduction_lab import cuda_kernels as ck
from reduction_lab.cuda_kernels import cluster as cl
import tune_cuda_softmax as t
from tune_cluster_smem import bench, launch

TOTAL = 1 << 26
SHAPES = ("float32:131072,float32:262144,bfloat16:65536,bfloat16:131072,bfloat16:262144,float16:65536,"
          "bfloat16:1048576")
#: (名字, LOAD_HINT, STORE_HINT)
VARIANTS = (("st.cs", 0, 0), ("ld.cs", 1, 0), ("ld.L2::256B", 2, 0), ("st.wb", 0, 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    ap.add_argument("--shapes", default=SHAPES, help="逗号分隔的 dtype:N")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rl.runtime.require_gpu("tune_cluster_hints")
    out = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "date": time.strftime("%Y-%m-%d"), "total_elems": TOTAL,
                    "command": "REDUCTION_LAB_MODE=gpu python " + " ".join(sys.argv),
                    "method": "default cuda_kernels.softmax plan, only LOAD_HINT/STORE_HINT changed; validate against "
                              "float64 torch.softmax, then triton.testing.do_bench median (L2 flushed), variants and "
                              "copy interleaved for --rounds rounds; frac = median over rounds of copy time / time"},
           "rows": []}
    index = torch.cuda.current_device()
    for item in args.shapes.split(","):
        dname, n = item.split(":")
        dtype, n = getattr(torch, dname), int(n)
        m = TOTAL // n
        plan = ck.softmax_plan(m, n, dtype, clusters=True)
        if plan["kernel"] != "cluster":
            print(f"{dname} N={n}: 默认配置是 {plan['kernel']}，不是寄存器版簇内核，跳过", flush=True)
            continue
        c, b, p, sp = plan["cluster_size"], plan["block_size"], plan["packs"], plan.get("smem_packs", 0)
        x = t.make_input(m, n, dtype, seed=n)
        y = torch.empty_like(x)
        ref = torch.softmax(x.double(), -1)
        row = {"dtype": dname, "N": n, "M": m, "plan": {"c": c, "b": b, "p": p, "sp": sp}, "variants": {}}
        kerns = {}
        for name, lh, sh in VARIANTS:
            kern, _ = cl._compile_cluster_kernel(cl.REGS_KERNEL, c, b, p, dtype, index,
                                                 MIN_BLOCKS=cl.regs_min_blocks(b, p, dtype, sp), SMEM_PACKS=sp,
                                                 LOAD_HINT=lh, STORE_HINT=sh)
            if sp:
                kern.max_dynamic_shared_size_bytes = sp * b * 16
            y.fill_(float("nan"))
            launch(kern, c, b, sp, x, y)
            torch.cuda.synchronize()
            v = t.max_violation(y, ref, dtype)
            if v > 1:
                row["variants"][name] = {"violation": v}
                print("FAIL", dname, n, name, v, flush=True)
                continue
            kerns[name] = kern
        fracs = {name: [] for name in kerns}
        for _ in range(args.rounds):
            for name, kern in kerns.items():
                tc = bench(lambda: y.copy_(x))
                fracs[name].append(tc / bench(lambda: launch(kern, c, b, sp, x, y)))
        for name, fs in fracs.items():
            row["variants"][name] = {"frac": statistics.median(fs), "rounds": fs}
        print(f"{dname:9s} N={n:7d} {row['plan']}  " + "  ".join(
            f"{k} {v['frac']:.3f}" for k, v in row["variants"].items() if "frac" in v), flush=True)
        del x, y, ref
        t.add_row(out, row, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
