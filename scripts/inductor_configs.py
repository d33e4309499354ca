"""torch.compile（静态形状）为按行 softmax 与按行求和生成的 Triton 内核：它选了什么配置。

    REDUCTION_LAB_MODE=gpu python scripts/inductor_configs.py --json docs/data/h200_inductor_configs.json

每个 (op, dtype, N)，M = 2^26 / N：编译 ``torch.softmax(x, -1)`` 或 ``x.sum(1)``，跑一次（Inductor 在第一次调用时
定下配置，有几个候选时计时挑选），然后从生成的模块里取出每个内核选中的配置（XBLOCK、R0_BLOCK、num_warps、num_stages）、
它是「整行一块」（persistent_reduction）还是分块循环（reduction），以及加载用了哪种 eviction_policy。
这些是与 :mod:`reduction_lab.triton_kernels` 的默认配置对照的事实，不计时（计时见 tune_softmax_short.py
与 tune_triton_row_sum.py，同一进程里与 torch.compile 交替测量）。
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

import torch

from _command import recorded_command

NS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
OPS = {"softmax": lambda t: torch.softmax(t, -1), "row_sum": lambda t: t.sum(1)}


def kernels_of(code: str):
    """生成代码里每个 Triton 内核：(名字, 装饰器名, 源码里 eviction_policy 的取值集合)。"""
    out = []
    for m in re.finditer(r"@triton_heuristics\.(\w+)\((.*?)\n@triton\.jit\ndef (\w+)\(", code, re.S):
        start = m.end()
        end = code.find("''', device_str=", start)
        body = code[start:end if end > 0 else None]
        out.append((m.group(3), m.group(1), sorted(set(re.findall(r"eviction_policy='(\w+)'", body)))))
    return out


def chosen_configs():
    """已加载的 Inductor 模块里每个自动调优器选中的配置。"""
    from torch._inductor.codecache import PyCodeCache

    found = {}
    mods = getattr(PyCodeCache, "modules", None) or list(getattr(PyCodeCache, "cache", {}).values())
    for mod in mods:
        for name, obj in vars(mod).items():
            launchers = getattr(obj, "launchers", None)
            if launchers:
                cfg = launchers[0].config
                found[name] = {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
                               "n_candidates": len(getattr(obj, "configs", []) or [])}
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="softmax,row_sum")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--ns", default=",".join(map(str, NS)))
    ap.add_argument("--total-elems", type=int, default=1 << 26)
    ap.add_argument("--json")
    ap.add_argument("--code-dir", help="把生成的代码也写进这个目录（每个形状一个 .py）")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("需要 NVIDIA GPU (needs a CUDA GPU)", file=sys.stderr)
        return 2
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.config.cache_size_limit = 256
    rows = []
    for op in args.ops.split(","):
        for dname in args.dtypes.split(","):
            for n in map(int, args.ns.split(",")):
                x = torch.randn(args.total_elems // n, n, device="cuda").to(getattr(torch, dname))
                torch._dynamo.reset()
                fn = torch.compile(OPS[op], dynamic=False)
                _, codes = run_and_get_code(fn, x)
                if args.code_dir:
                    d = pathlib.Path(args.code_dir)
                    d.mkdir(parents=True, exist_ok=True)
                    (d / f"{op}_{dname}_{n}.py").write_text("\n\n".join(codes))
                chosen = chosen_configs()
                ks = [k for code in codes for k in kernels_of(code)]
                rec = {"op": op, "dtype": dname, "N": n, "M": x.shape[0],
                       "kernels": [{"name": k, "kind": kind, "eviction": ev, "config": chosen.get(k)}
                                   for k, kind, ev in ks]}
                rows.append(rec)
                print(op, dname, n, [(k["kind"], k["eviction"], k["config"]) for k in rec["kernels"]], flush=True)
                del x
                torch.cuda.empty_cache()
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "triton": __import__("triton").__version__,
                "command": recorded_command("inductor_configs")}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
