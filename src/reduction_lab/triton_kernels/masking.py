"""掩码车道该填什么值：-inf 与 0.0 的对照实验。

课程页面：docs/triton/masking.md。``softmax_with_fill(x, fill)`` 与课程版融合 softmax
只差一处：被屏蔽车道的填充值 ``FILL``。填 -inf 时结果正确；填 0.0 时，
如果一行全是负数，填进来的 0 会变成「最大值」，分母里也多出 exp(0 - max) 项。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..checks import check_matrix
from ..runtime import DEVICE
from ._launch import next_pow2, warps_for


# --8<-- [start:kernel]
@triton.jit
def softmax_fill_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols,
                        BLOCK_SIZE: tl.constexpr, FILL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)          # int64：row * stride 可能超过 2**31
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # 唯一的区别：被屏蔽的车道读到 FILL
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=FILL).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))          # FILL 参与了求最大值……
    y = num / tl.sum(num, axis=0)                # ……也参与了求和
    tl.store(out_ptr + row * out_row_stride + cols, y, mask=mask)
# --8<-- [end:kernel]


def softmax_with_fill(x: torch.Tensor, fill: float) -> torch.Tensor:
    """融合 softmax，被屏蔽车道填 ``fill``（float32 输入）。只用于演示掩码的作用。"""
    check_matrix(x, "x", dtypes=(torch.float32,), device=DEVICE)
    n_rows, n_cols = x.shape
    block = next_pow2(n_cols)
    if block > 32768:
        raise ValueError(f"演示内核把整行放进一个块，最多 32768 列，得到 N={n_cols}")
    out = torch.empty_like(x)
    softmax_fill_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,
                                   BLOCK_SIZE=block, FILL=float(fill), num_warps=warps_for(block))
    return out
