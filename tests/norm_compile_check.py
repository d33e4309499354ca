"""把 LayerNorm / RMSNorm 与沿列求和的 Triton 内核编译成 sm_90 的 cubin（编译模式，不需要 GPU）。

由 test_layer_norm.py 在子进程里运行（解释器模式下 @triton.jit 函数无法编译）。
每个内核打印一行 "ok 名字 ..."。
"""

import os
import sys
import types

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402  编译模式
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

rt = types.ModuleType("reduction_lab.runtime")
rt.MODE, rt.DEVICE, rt.ModeError = "gpu", "cuda", RuntimeError
sys.modules["reduction_lab.runtime"] = rt

from reduction_lab.triton_kernels import col_sum as cs  # noqa: E402
from reduction_lab.triton_kernels import layer_norm as ln  # noqa: E402

P, H, I, F = "*fp32", "*bf16", "i32", "fp32"
CASES = [
    (ln.welford_layer_norm_kernel, dict(y_ptr=P, x_ptr=P, w_ptr=P, b_ptr=P, mean_ptr=P, rstd_ptr=P,
                                        x_row_stride=I, y_row_stride=I, n_cols=I, eps=F),
     dict(BLOCK_SIZE=1024, ACC=tl.float32), 4),
    (ln.rms_norm_kernel, dict(y_ptr=H, x_ptr=H, w_ptr=H, rstd_ptr=P, x_row_stride=I, y_row_stride=I,
                              n_cols=I, eps=F), dict(BLOCK_SIZE=1024, ACC=tl.float32), 4),
]
for rms in (False, True):
    CASES.append((ln.norm_rows_kernel, dict(y_ptr=H, x_ptr=H, w_ptr=P, b_ptr=P, mean_ptr=P, rstd_ptr=P,
                                            x_row_stride=I, y_row_stride=I, n_rows=I, n_cols=I, eps=F),
                  dict(BLOCK_M=4, BLOCK_N=1024, IS_RMS=rms, HAS_B=not rms, ACC=tl.float32), 8))
BWD_SIG = dict(dx_ptr=H, dw_part_ptr=P, db_part_ptr=P, x_ptr=H, dy_ptr=H, w_ptr=P, mean_ptr=P, rstd_ptr=P,
               x_row_stride=I, dy_row_stride=I, dx_row_stride=I, n_rows=I, n_cols=I, rows_per_program=I)


def backward_case(n, dtype, rms, cfg=None):
    """反向内核在 N 列、默认配置（backward_config）下的一个编译用例；标记 "bwd" 的用例要求没有寄存器溢出。"""
    import torch

    cfg = cfg or ln.backward_config(1 << 16, n, dtype)
    ptr = {torch.float32: P, torch.bfloat16: H, torch.float64: "*fp64"}[dtype]
    sig = dict(BWD_SIG, dx_ptr=ptr, x_ptr=ptr, dy_ptr=ptr)
    if dtype == torch.float64:
        sig.update(dw_part_ptr=ptr, db_part_ptr=ptr, w_ptr=ptr, mean_ptr=ptr, rstd_ptr=ptr)
    acc = tl.float64 if dtype == torch.float64 else tl.float32
    return (ln.norm_backward_kernel, sig,
            dict(STRATEGY=cfg.strategy, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC_TILES=ln._acc_tiles(cfg, n),
                 IS_RMS=rms, HAS_B=not rms, ACC=acc), cfg.num_warps, "bwd")


import torch  # noqa: E402

# 反向：基准测试的三个 N 与一个长行（"stream"），float32 与 bfloat16，LayerNorm 与 RMSNorm
for n in (1024, 4096, 16384, 65536):
    for dtype in (torch.float32, torch.bfloat16):
        for rms in (False, True):
            CASES.append(backward_case(n, dtype, rms))
# float64（gradcheck 在 GPU 上走这条路）：整个计算按 float64
D = "*fp64"
CASES.append((ln.welford_layer_norm_kernel, dict(y_ptr=D, x_ptr=D, w_ptr=D, b_ptr=D, mean_ptr=D, rstd_ptr=D,
                                                 x_row_stride=I, y_row_stride=I, n_cols=I, eps=F),
              dict(BLOCK_SIZE=256, ACC=tl.float64), 4))
CASES.append(backward_case(256, torch.float64, False))
CASES.append((cs.col_sum_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_rows=I, n_cols=I, rows_per_split=I),
              dict(BLOCK_M=16, BLOCK_N=256, ACC=tl.float32), 8))



def resources(cubin: bytes) -> str:
    """cuobjdump --dump-resource-usage 的 "REG:.. STACK:.." 片段（STACK > 0 就是寄存器溢出到了本地内存）。"""
    import re
    import subprocess
    import tempfile

    try:
        tool = triton.knobs.nvidia.cuobjdump.path
    except Exception:                                  # noqa: BLE001  没有 cuobjdump 时只报告编译成功
        return "resources ?"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return f"regs {m.group(1)} stack {m.group(2)}" if m else "resources ?"


for case in CASES:
    fn, sig, constexprs, warps = case[:4]
    signature = dict(sig)
    signature.update({k: "constexpr" for k in constexprs})
    k = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    assert k.asm["cubin"], fn.__name__
    tag = case[4] if len(case) > 4 else "-"
    print("ok", fn.__name__, tag, {n: v for n, v in constexprs.items() if n != "ACC"}, "warps", warps,
          resources(k.asm["cubin"]))
