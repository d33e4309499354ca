"""课程版 Triton 内核的行偏移是 int64（页面：docs/triton/fused-softmax.md「融合内核：读一次，写一次」）。

``row * stride`` 若按 int32 计算，M * N 超过 2**31 时会回绕成负数，读写矩阵以外的地址。
CPU 上的检查：把内核编译成 sm_90 的 TTIR（编译模式，不需要 GPU），行号乘步长的那条乘法
必须是 i64；顺带检查 4 个 warp 的融合 softmax 用到了共享内存（跨 warp 的 tl.max/tl.sum）。GPU 上的检查：M = 65537、N = 32768（2**31 个元素以上）时最后一行算得对。
"""

import subprocess
import sys
import textwrap

import pytest
import torch

import reduction_lab as rl

KERNELS = ["softmax.fused_softmax_kernel", "online_softmax.online_softmax_kernel",
           "row_sum.row_sum_kernel", "masking.softmax_fill_kernel"]

_SCRIPT = textwrap.dedent(r"""
    import os, re, sys, types
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    rt = types.ModuleType("reduction_lab.runtime")
    rt.MODE, rt.DEVICE, rt.ModeError = "gpu", "cuda", RuntimeError
    sys.modules["reduction_lab.runtime"] = rt
    import importlib
    for name in sys.argv[1:]:
        mod, fn = name.split(".")
        fn = getattr(importlib.import_module("reduction_lab.triton_kernels." + mod), fn)
        sig = {a: ("*fp32" if a.endswith("_ptr") else "i32") for a in fn.arg_names}
        const = {"BLOCK_SIZE": 1024}
        if "FILL" in sig:
            const["FILL"] = 0.0
        sig.update({k: "constexpr" for k in const})
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        ttir = k.asm["ttir"]
        # 行号来自 tt.get_program_id；它与步长相乘的 arith.muli 的类型
        pid = re.search(r"(%\S+) = tt.get_program_id x : i32", ttir).group(1)
        ext = re.search(r"(%\S+) = arith.extsi " + re.escape(pid) + r" : i32 to i64", ttir)
        row = ext.group(1) if ext else pid
        mul = re.search(r"arith.muli (?:" + re.escape(row) + r", %\S+|%\S+, " + re.escape(row) + r")\s*: (\S+)", ttir)
        print(name, mul.group(1) if mul else "none", k.metadata.shared)
""")


@pytest.mark.slow
def test_course_kernels_multiply_row_by_stride_in_int64():
    r = subprocess.run([sys.executable, "-c", _SCRIPT, *KERNELS], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {name: (ty, int(shared)) for name, ty, shared in (line.split() for line in r.stdout.splitlines())}
    assert {k: v[0] for k, v in got.items()} == {k: "i64" for k in KERNELS}, got
    # 页面还说：tl.max / tl.sum 跨 4 个 warp 时要经过共享内存（不只在寄存器里）
    assert got["softmax.fused_softmax_kernel"][1] > 0, got


@pytest.mark.skipif(rl.MODE != "gpu", reason="需要 GPU：2**31 个以上的 float32（8.6 GB）")
def test_course_kernels_past_2_31_elements():
    from reduction_lab.triton_kernels.softmax import fused_softmax
    from reduction_lab.triton_kernels.masking import softmax_with_fill
    from reduction_lab.triton_kernels.online_softmax import online_softmax
    from reduction_lab.triton_kernels.row_sum import row_sum

    M, N = 65537, 32768                              # M * N = 2**31 + 2**15
    x = torch.empty(M, N, device="cuda")
    x[:-2].fill_(0.0)
    torch.manual_seed(0)
    x[-2:] = torch.randn(2, N, device="cuda")
    tail = x[-2:]
    want_p, want_s = torch.softmax(tail, dim=1), tail.sum(dim=1)
    for name, f in [("fused_softmax", lambda: fused_softmax(x)),
                    ("online_softmax", lambda: online_softmax(x, block_size=4096)),
                    ("softmax_with_fill", lambda: softmax_with_fill(x, float("-inf")))]:
        y = f()
        torch.cuda.synchronize()
        assert torch.allclose(y[-2:], want_p, atol=1e-6), name
        del y
    s = row_sum(x, block_size=4096)
    assert torch.allclose(s[-2:], want_s, atol=1e-2), "row_sum"
