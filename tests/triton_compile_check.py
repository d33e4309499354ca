"""在没有 GPU 的机器上把每个 Triton 内核编译成 sm_90 的 cubin（编译模式，不解释执行）。

由 test_triton_compile.py 在子进程里运行：解释器模式下 @triton.jit 得到的是解释执行的函数，
无法编译，所以这里让 triton 以编译模式导入，并替换 reduction_lab.runtime 以跳过设备检测。
用法：python tests/triton_compile_check.py  -> 每个内核打印一行 "ok 名字 寄存器数"
"""

import inspect
import os
import sys
import types

os.environ.pop("TRITON_INTERPRET", None)
import triton  # noqa: E402  编译模式
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

rt = types.ModuleType("reduction_lab.runtime")
rt.MODE, rt.DEVICE, rt.ModeError = "gpu", "cuda", RuntimeError
sys.modules["reduction_lab.runtime"] = rt

from reduction_lab.triton_kernels import online_softmax as osm  # noqa: E402
from reduction_lab.triton_kernels import row_sum as rs  # noqa: E402
from reduction_lab.triton_kernels import softmax as sm  # noqa: E402
from reduction_lab.triton_kernels import masking as mk  # noqa: E402

P, I = "*fp32", "i32"
CASES = [
    (sm.fused_softmax_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(BLOCK_SIZE=1024), 4),
    (sm.softmax_rows_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_rows=I, n_cols=I),
     dict(BLOCK_M=8, BLOCK_N=512, EVICT="evict_first"), 8),
    (sm.softmax_persistent_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_rows=I,
                                        n_cols=I), dict(BLOCK_M=8, BLOCK_N=512, NUM_STAGES=2), 8),
    (osm.online_softmax_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(BLOCK_SIZE=1024), 4),
    (osm.split_softmax_kernel, dict(out_ptr=P, in_ptr=P, pmax_ptr=P, psum_ptr=P, count_ptr="*i32",
                                    in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(CHUNK=8192, N_SPLIT=32, SPLIT_P2=32, PHASE=0), 16),
    (osm.split_softmax_kernel, dict(out_ptr=P, in_ptr=P, pmax_ptr=P, psum_ptr=P, count_ptr="*i32",
                                    in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(CHUNK=8192, N_SPLIT=32, SPLIT_P2=32, PHASE=1), 16),
    (osm.split_softmax_packed_kernel, dict(out_ptr=P, in_ptr=P, slot_ptr="*i64",
                                           in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(CHUNK=8192, N_SPLIT=32, SPLIT_P2=32, SENTINEL=osm._SENTINEL_BITS), 8),
    (mk.softmax_fill_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(BLOCK_SIZE=1024, FILL=0.0), 4),
    (mk.softmax_fill_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, out_row_stride=I, n_cols=I),
     dict(BLOCK_SIZE=1024, FILL=float("-inf")), 4),
    (rs.row_sum_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_cols=I), dict(BLOCK_SIZE=1024), 4),
    (rs.row_sum_persistent_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_rows=I, n_cols=I, n_col_blocks=I),
     dict(BLOCK_M=8, BLOCK_N=1024, NUM_STAGES=3, EVICT=""), 8),
    (rs.row_sum_tiled_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_rows=I, n_cols=I, cols_per_split=I),
     dict(BLOCK_M=2, BLOCK_N=2048, ATOMIC=True, EVICT="evict_first"), 8),
    (rs.row_sum_tiled_kernel, dict(out_ptr=P, in_ptr=P, in_row_stride=I, n_rows=I, n_cols=I, cols_per_split=I),
     dict(BLOCK_M=2, BLOCK_N=2048, ATOMIC=False, PARTIAL=True), 8),
    # 16 位输入的默认配置：短行一块 8192 个元素（与 float32 的 4096 个同样 16 KiB），长行按 4096 列循环
    (rs.row_sum_persistent_kernel, dict(out_ptr="*bf16", in_ptr="*bf16", in_row_stride=I, n_rows=I, n_cols=I,
                                        n_col_blocks=I), dict(BLOCK_M=2, BLOCK_N=4096, NUM_STAGES=3, EVICT=""), 8),
    (rs.row_sum_persistent_kernel, dict(out_ptr="*bf16", in_ptr="*bf16", in_row_stride=I, n_rows=I, n_cols=I,
                                        n_col_blocks=I), dict(BLOCK_M=16, BLOCK_N=512, NUM_STAGES=3, EVICT=""), 16),
    (rs.row_sum_tiled_kernel, dict(out_ptr="*bf16", in_ptr="*bf16", in_row_stride=I, n_rows=I, n_cols=I,
                                   cols_per_split=I), dict(BLOCK_M=1, BLOCK_N=4096, ATOMIC=False, EVICT=""), 16),
]

for fn, sig, constexprs, warps in CASES:
    # 有默认值的 constexpr 参数（如 ACC=tl.float32）ASTSource 不会自己补上
    for name, prm in inspect.signature(fn.fn).parameters.items():
        if name not in sig and name not in constexprs and prm.default is not inspect.Parameter.empty:
            constexprs = {**constexprs, name: prm.default}
    signature = dict(sig)
    signature.update({k: "constexpr" for k in constexprs})
    k = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    assert k.asm["cubin"], fn.__name__
    print("ok", fn.__name__, constexprs, "regs" , getattr(k, "n_regs", "?"), "spills", getattr(k, "n_spills", "?"))
