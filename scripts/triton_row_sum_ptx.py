"""数一数 Triton 分块行求和内核三种写法的 PTX：循环 + 列掩码、循环不要列掩码、整行一块不循环（不需要 GPU）。

    python scripts/triton_row_sum_ptx.py            # 编译、打印，并把这个 Triton 版本的结果写进 JSON
    python scripts/triton_row_sum_ptx.py --check    # 与 JSON 里同一 Triton 版本的记录逐项比较，不同时退出码 1

编译模式（不解释执行）把 ``row_sum_tiled_kernel`` 编译成 sm_90 的 PTX：输入 bf16，整数参数按 GPU 上的启动那样
特化成 16 的倍数（行距、行长、段长；两个指针 16 字节对齐）。块形状是 16 位短行的默认配置
（``row_sum._tiled_config``）。每种写法记下 PTX 的指令条数（以 ``;`` 结尾、不以 ``.`` 开头的行）、比较指令
``setp``、分支 ``bra`` 与 16 字节的加载 ``ld.global.*.v4``。结果按 Triton 版本存进
docs/data/triton_row_sum_ptx.json（H200 上的测量用 3.6，CI 用 constraints.txt 钉住的版本）。
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import sys
import types
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402  编译模式
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
_rt = types.ModuleType("reduction_lab.runtime")          # 不做设备检测
_rt.MODE, _rt.DEVICE, _rt.ModeError = "gpu", "cuda", RuntimeError
sys.modules["reduction_lab.runtime"] = _rt
from reduction_lab.triton_kernels import row_sum as rs  # noqa: E402

DATA = ROOT / "docs" / "data" / "triton_row_sum_ptx.json"
NS = (512, 1024, 2048)
#: (名字, ONE_TILE, EVEN_N)
VARIANTS = (("loop+mask", False, False), ("loop", False, True), ("one-tile", True, True))
SIGNATURE = dict(out_ptr="*bf16", in_ptr="*bf16", in_row_stride="i32", n_rows="i32", n_cols="i32",
                 cols_per_split="i32")
DIVISIBLE = (0, 1, 2, 4, 5)        # 两个指针、行距、行长、段长：16 的倍数（n_rows 不特化）


def count(ptx: str) -> dict:
    lines = [ln.strip() for ln in ptx.splitlines()]
    instr = [ln for ln in lines if ln.endswith(";") and not ln.startswith((".", "//"))]
    return {"instructions": len(instr),
            "setp": sum("setp." in ln for ln in instr),
            "bra": sum(bool(re.search(r"\bbra", ln)) for ln in instr),
            "ld_v4": sum(bool(re.search(r"ld\.global\S*\.v4", ln)) for ln in instr)}


def compile_variant(bm: int, bn: int, warps: int, one_tile: bool, even_n: bool) -> dict:
    fn = rs.row_sum_tiled_kernel
    c = dict(BLOCK_M=bm, BLOCK_N=bn, ATOMIC=False, ONE_TILE=one_tile, EVEN_N=even_n)
    for name, prm in inspect.signature(fn.fn).parameters.items():   # ASTSource 不补有默认值的 constexpr
        if name not in SIGNATURE and name not in c and prm.default is not inspect.Parameter.empty:
            c[name] = prm.default
    sig = {**SIGNATURE, **{k: "constexpr" for k in c}}
    attrs = {(i,): [["tt.divisibility", 16]] for i in DIVISIBLE}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=c, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    return count(k.asm["ptx"])


def measure() -> list[dict]:
    rows = []
    for n in NS:
        bm, bn, _, warps = rs._tiled_config(2**26 // n, n, 2)
        for name, one, even in VARIANTS:
            rows.append({"N": n, "block_m": bm, "block_n": bn, "num_warps": warps, "variant": name,
                         **compile_variant(bm, bn, warps, one, even)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="与 JSON 里同一 Triton 版本的记录比较")
    args = ap.parse_args()
    rows = measure()
    for r in rows:
        print(f"N={r['N']:5d} {r['block_m']}x{r['block_n']} {r['num_warps']}w {r['variant']:10s} "
              f"instr {r['instructions']:4d}  setp {r['setp']:2d}  bra {r['bra']}  ld.v4 {r['ld_v4']}")
    doc = json.loads(DATA.read_text()) if DATA.exists() else {"meta": {}, "by_triton": {}}
    if args.check:
        want = doc["by_triton"].get(triton.__version__)
        if want is None:
            print(f"JSON 里没有 Triton {triton.__version__} 的记录（有：{', '.join(doc['by_triton'])}）")
            return 1
        if want != rows:
            print("与 JSON 的记录不同")
            return 1
        print("与 JSON 的记录相同")
        return 0
    doc["meta"] = {"target": "sm_90 PTX (triton.compile, no GPU)", "dtype": "bfloat16",
                   "command": "python scripts/triton_row_sum_ptx.py",
                   "counted": "instructions: PTX lines ending in ';' that are not directives; setp; bra; "
                              "ld.global.*.v4 (16-byte loads)"}
    doc["by_triton"][triton.__version__] = rows
    DATA.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"已写入 {DATA.relative_to(ROOT)}（Triton {triton.__version__}）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
