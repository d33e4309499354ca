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
    CASES.append((ln.norm_backward_kernel, dict(dx_ptr=H, dw_part_ptr=P, db_part_ptr=P, x_ptr=H, dy_ptr=H, w_ptr=P,
                                                mean_ptr=P, rstd_ptr=P, x_row_stride=I, dy_row_stride=I,
                                                dx_row_stride=I, n_rows=I, n_cols=I),
                  dict(BLOCK_M=4, BLOCK_N=1024, IS_RMS=rms, HAS_B=not rms, ACC=tl.float32), 8))
for rms in (False, True):                   # 长行的两步反向
    CASES.append((ln.norm_backward_stats_kernel, dict(c_ptr=P, x_ptr=H, dy_ptr=H, w_ptr=P, mean_ptr=P, rstd_ptr=P,
                                                      x_row_stride=I, dy_row_stride=I, n_cols=I),
                  dict(BLOCK_SIZE=ln.LONG_BLOCK, IS_RMS=rms, ACC=tl.float32), 8))
CASES.append((ln.norm_backward_tiles_kernel, dict(dx_ptr=H, dw_part_ptr=P, db_part_ptr=P, x_ptr=H, dy_ptr=H, w_ptr=P,
                                                  mean_ptr=P, rstd_ptr=P, c_ptr=P, x_row_stride=I, dy_row_stride=I,
                                                  dx_row_stride=I, n_rows=I, n_cols=I),
              dict(BLOCK_M=ln.LONG_BLOCK_M, BLOCK_N=ln.LONG_BLOCK_N, IS_RMS=False, HAS_B=True, ACC=tl.float32), 8))
# float64（gradcheck 在 GPU 上走这条路）：整个计算按 float64
D = "*fp64"
CASES.append((ln.welford_layer_norm_kernel, dict(y_ptr=D, x_ptr=D, w_ptr=D, b_ptr=D, mean_ptr=D, rstd_ptr=D,
                                                 x_row_stride=I, y_row_stride=I, n_cols=I, eps=F),
              dict(BLOCK_SIZE=256, ACC=tl.float64), 4))
CASES.append((ln.norm_backward_kernel, dict(dx_ptr=D, dw_part_ptr=D, db_part_ptr=D, x_ptr=D, dy_ptr=D, w_ptr=D,
                                            mean_ptr=D, rstd_ptr=D, x_row_stride=I, dy_row_stride=I,
                                            dx_row_stride=I, n_rows=I, n_cols=I),
              dict(BLOCK_M=4, BLOCK_N=256, IS_RMS=False, HAS_B=True, ACC=tl.float64), 4))
CASES.append((cs.col_sum_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_rows=I, n_cols=I, rows_per_split=I),
              dict(BLOCK_M=16, BLOCK_N=256, ACC=tl.float32), 8))

for fn, sig, constexprs, warps in CASES:
    signature = dict(sig)
    signature.update({k: "constexpr" for k in constexprs})
    k = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    assert k.asm["cubin"], fn.__name__
    print("ok", fn.__name__, {n: v for n, v in constexprs.items() if n != "ACC"},
          "regs", getattr(k, "n_regs", "?"), "spills", getattr(k, "n_spills", "?"))
