"""LayerNorm 与 RMSNorm：每行一次或两次归约；前向、反向与 autograd。

课程页面：docs/triton/normalization.md。

LayerNorm：y = (x - mean) * rstd * w + b，rstd = 1 / sqrt(var + eps)，mean 与 var 是每行的
均值与（有偏）方差——两次行归约。RMSNorm：y = x * rstd * w，rstd = 1 / sqrt(mean(x**2) + eps)
——一次行归约。

* :func:`welford_layer_norm`——课程版 LayerNorm（``welford_layer_norm_kernel``）：一行一个
  program，按 BLOCK_SIZE 分块循环；每块求出自己的 (count, mean, M2)，用 Chan 的公式并进运行状态
  （与在线 softmax 合并 (m, d) 同构），第二遍归一化：读 2MN、写 MN。
* :func:`looped_rms_norm`——课程版 RMSNorm（``rms_norm_kernel``）：同样两遍，运行状态只是平方和。
* :func:`layer_norm_forward` / :func:`rms_norm_forward`——生产版：N <= MAX_FUSED_COLS 时整行放进
  寄存器（短行时一个 program 处理多行），读 MN、写 MN，外加每行的 mean / rstd；更长的行用课程版。
* :func:`layer_norm_backward` / :func:`rms_norm_backward`——反向：dx 要两次（RMSNorm 一次）行归约；
  dW = sum_i dy * xhat、dB = sum_i dy 是沿列的归约：每个 program 把自己那些行的贡献累加在寄存器里，
  写出一行部分和，再由 :func:`reduction_lab.triton_kernels.col_sum.col_sum` 按固定顺序相加；
  N > MAX_FUSED_COLS 时分两步（先每行求两个行归约，再按二维块写 dx 与部分和）。
* :func:`layer_norm` / :func:`rms_norm`——可求导的版本（``torch.autograd.Function``）。

float64 输入按 float64 计算（``torch.autograd.gradcheck`` 需要），其余 dtype 按 float32 计算、
按 x 的 dtype 写出 y；mean / rstd 是 float32（float64 输入时 float64）。
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ..checks import check_matrix, check_out, check_triton_tuning, check_vector
from ..runtime import DEVICE, MODE
from ._launch import next_pow2, sm_count, warps_for
from .col_sum import col_sum

__all__ = ["welford_layer_norm", "looped_rms_norm", "layer_norm_forward", "rms_norm_forward",
           "layer_norm_backward", "rms_norm_backward", "layer_norm", "rms_norm",
           "LayerNormFunction", "RMSNormFunction", "NORM_DTYPES", "MAX_FUSED_COLS", "backward_programs"]

#: 接受的 dtype（x、weight、bias、dy）。
NORM_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: 生产版把整行放进一个块的最大列数；更长的行：前向用分块循环的课程版（读 2MN），
#: 反向分两步（先每行求 c1、c2，再按二维块写 dx 与部分和，读 4MN）。
MAX_FUSED_COLS = 16384


def _acc(dtype: torch.dtype):
    return (tl.float64, torch.float64) if dtype == torch.float64 else (tl.float32, torch.float32)


# --8<-- [start:welford]
@triton.jit
def welford_layer_norm_kernel(y_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr,
                              x_row_stride, y_row_stride, n_cols, eps,
                              BLOCK_SIZE: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)              # int64：row * stride 可能超过 2**31
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    # 运行状态 (n, mean, m2)：已读元素的个数、均值、与均值之差的平方和
    n = tl.zeros([], dtype=ACC)
    mean = tl.zeros([], dtype=ACC)
    m2 = tl.zeros([], dtype=ACC)
    for start in range(0, n_cols, BLOCK_SIZE):       # 第一遍：分块读，逐块合并
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
        n_b = tl.minimum(n_cols - start, BLOCK_SIZE).to(ACC)   # 这一块的有效元素数
        mean_b = tl.sum(x, axis=0) / n_b
        d = tl.where(mask, x - mean_b, 0.0)          # 被屏蔽的车道不计入 m2
        m2_b = tl.sum(d * d, axis=0)
        # Chan 的合并：(n, mean, m2) + (n_b, mean_b, m2_b)
        n_ab = n + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n_ab)
        m2 = m2 + m2_b + delta * delta * (n * n_b / n_ab)
        n = n_ab
    rstd = 1.0 / tl.sqrt(m2 / n + eps)               # var = m2 / N（有偏方差，与 torch 相同）
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK_SIZE):       # 第二遍：再读一次，归一化
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(ACC)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:welford]


# --8<-- [start:rms]
@triton.jit
def rms_norm_kernel(y_ptr, x_ptr, w_ptr, rstd_ptr, x_row_stride, y_row_stride, n_cols, eps,
                    BLOCK_SIZE: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=ACC)          # 只有一个归约：平方和
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(ACC)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(ACC)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:rms]


# --8<-- [start:fused]
@triton.jit
def norm_rows_kernel(y_ptr, x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, x_row_stride, y_row_stride,
                     n_rows, n_cols, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     IS_RMS: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """生产版前向：BLOCK_M 行 x 整行（BLOCK_N >= N）留在寄存器里，x 只读一次。"""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    if IS_RMS:
        xc = x                                       # RMSNorm：不减均值，一次归约
    else:
        mean = tl.sum(x, axis=1) / n_cols            # 归约 1：均值
        xc = tl.where(mask, x - mean[:, None], 0.0)
        # 修正一次：float32 求和的舍入让 mean 偏了 c，而 x - mean 是精确的，再求一次它的均值就得到 c
        # （整行相同、数值很大时，不修正的话 (x - mean) * rstd 会把这点舍入误差放大成 O(1)）
        c = tl.sum(xc, axis=1) / n_cols
        mean += c
        xc = tl.where(mask, xc - c[:, None], 0.0)
        tl.store(mean_ptr + rows, mean, mask=row_mask)
    var = tl.sum(xc * xc, axis=1) / n_cols           # 归约 2（RMSNorm 唯一的归约）：寄存器里的两遍法
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    y = xc * rstd[:, None] * w[None, :]
    if HAS_B:
        y += tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(ACC)[None, :]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
# --8<-- [end:fused]


# --8<-- [start:backward]
@triton.jit
def norm_backward_kernel(dx_ptr, dw_part_ptr, db_part_ptr, x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr,
                         x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         IS_RMS: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """grid = (P,)：program p 处理行块 p, p + P, p + 2P, ...，dW、dB 的部分和留在寄存器里，
    最后写进部分和矩阵的第 p 行（P x N），由 col_sum 沿列相加。"""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for rb in range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = (rb * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]                          # 对 xhat 的梯度
        c1 = tl.sum(g * xhat, axis=1) / n_cols       # 行归约：mean(g * xhat)
        if IS_RMS:
            dx = (g - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(g, axis=1) / n_cols          # 行归约：mean(g)
            dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                 mask=mask)
        dw_acc += dy * xhat                          # 列归约的部分和：只在寄存器里逐元素累加
        if HAS_B:
            db_acc += dy
    part = pid.to(tl.int64) * n_cols + cols
    tl.store(dw_part_ptr + part, tl.sum(dw_acc, axis=0), mask=col_mask)
    if HAS_B:
        tl.store(db_part_ptr + part, tl.sum(db_acc, axis=0), mask=col_mask)
# --8<-- [end:backward]


@triton.jit
def norm_backward_stats_kernel(c_ptr, x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, x_row_stride, dy_row_stride,
                               n_cols, BLOCK_SIZE: tl.constexpr, IS_RMS: tl.constexpr, ACC: tl.constexpr):
    """长行反向的第 1 步：一行一个 program，分块循环求 c1 = mean(g * xhat)、c2 = mean(g)，写进 c[row, 0:2]。"""
    row = tl.program_id(0).to(tl.int64)
    rstd = tl.load(rstd_ptr + row)
    if IS_RMS:
        mean = 0.0
    else:
        mean = tl.load(mean_ptr + row)
    acc1 = tl.zeros([BLOCK_SIZE], dtype=ACC)
    acc2 = tl.zeros([BLOCK_SIZE], dtype=ACC)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(ACC)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
        g = dy * w
        acc1 += g * tl.where(mask, (x - mean) * rstd, 0.0)
        acc2 += g
    tl.store(c_ptr + 2 * row, tl.sum(acc1, axis=0) / n_cols)
    tl.store(c_ptr + 2 * row + 1, tl.sum(acc2, axis=0) / n_cols)


@triton.jit
def norm_backward_tiles_kernel(dx_ptr, dw_part_ptr, db_part_ptr, x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, c_ptr,
                               x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               IS_RMS: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """长行反向的第 2 步：grid = (P, cdiv(N, BLOCK_N))。program (p, j) 负责第 j 个列块、行块 p, p + P, ...：
    用第 1 步的 c1、c2 写出 dx，并把 dW、dB 的部分和写进部分和矩阵的第 p 行。"""
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for rb in range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
        rows = (rb * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        c1 = tl.load(c_ptr + 2 * rows, mask=row_mask, other=0.0)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        g = dy * w[None, :]
        dx = g - xhat * c1[:, None]
        if not IS_RMS:
            dx -= tl.load(c_ptr + 2 * rows + 1, mask=row_mask, other=0.0)[:, None]
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :],
                 (dx * rstd[:, None]).to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        if HAS_B:
            db_acc += dy
    part = pid.to(tl.int64) * n_cols + cols
    tl.store(dw_part_ptr + part, tl.sum(dw_acc, axis=0), mask=col_mask)
    if HAS_B:
        tl.store(db_part_ptr + part, tl.sum(db_acc, axis=0), mask=col_mask)


#: 长行反向（N > MAX_FUSED_COLS）的块大小：第 1 步每块的列数；第 2 步的二维块是 LONG_BLOCK_M x LONG_BLOCK_N。
LONG_BLOCK, LONG_BLOCK_M, LONG_BLOCK_N = 4096, 4, 1024


# ---------------------------------------------------------------- 参数检查

def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps 必须是数，得到 {type(eps).__name__} {eps!r} (eps must be a number)")
    eps = float(eps)
    if not (eps >= 0.0 and eps != float("inf")):
        raise ValueError(f"eps 必须是非负的有限数，得到 {eps} (eps must be finite and >= 0)")
    return eps


def _check_params(x, weight, bias, *, need_bias: bool) -> None:
    """x 是 (M, N) 矩阵；weight（和 bias）是长 N 的一维张量，与 x 在同一设备上。"""
    check_matrix(x, "x", dtypes=NORM_DTYPES, device=DEVICE)
    n = x.shape[1]
    names = (("weight", weight), ("bias", bias)) if need_bias else (("weight", weight),)
    for name, t in names:
        if t is None and name == "bias":
            continue
        check_vector(t, name, dtypes=NORM_DTYPES, device=DEVICE)
        if t.shape[0] != n:
            raise ValueError(f"{name} 的长度应为 x 的列数 {n}，得到 {t.shape[0]} "
                             f"({name} has length {t.shape[0]}, expected {n} = x.shape[1])")
        if t.device != x.device:
            raise ValueError(f"{name} 在 {t.device} 上，x 在 {x.device} 上 ({name} and x must be on the same device)")


def _check_stats(stats, name: str, x) -> None:
    acc_torch = _acc(x.dtype)[1]
    check_vector(stats, name, dtypes=(acc_torch,), device=DEVICE)
    if stats.shape[0] != x.shape[0] or stats.device != x.device:
        raise ValueError(f"{name} 应是 x 所在设备上长 {x.shape[0]} 的向量，得到长 {stats.shape[0]}（{stats.device}） "
                         f"({name} must have one entry per row of x)")


def _rows_config(n_rows: int, n_cols: int):
    block_n = next_pow2(n_cols)
    block_m = max(1, min(4096 // block_n, next_pow2(n_rows)))
    return block_m, block_n, warps_for(block_m * block_n)


# ---------------------------------------------------------------- 前向

def welford_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
                       block_size: int = 1024):
    """课程版 LayerNorm：一行一个 program、分块循环、Chan 合并。返回 (y, mean, rstd)。"""
    _check_params(x, weight, bias, need_bias=True)
    if bias is None:
        raise TypeError("welford_layer_norm 需要 bias（没有偏置时传 torch.zeros(N)） (bias is required)")
    eps = _check_eps(eps)
    check_triton_tuning(block_size=block_size)
    if block_size is None:
        raise TypeError("block_size 必须是整数，得到 None (block_size must be an int)")
    n_rows, n_cols = x.shape
    acc_t, acc_torch = _acc(x.dtype)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(n_rows, dtype=acc_torch, device=x.device)
    rstd = torch.empty(n_rows, dtype=acc_torch, device=x.device)
    welford_layer_norm_kernel[(n_rows,)](y, x, weight, bias, mean, rstd, x.stride(0), y.stride(0), n_cols, eps,
                                         BLOCK_SIZE=block_size, ACC=acc_t, num_warps=warps_for(block_size))
    return y, mean, rstd


def looped_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, block_size: int = 1024):
    """课程版 RMSNorm：一行一个 program、分块循环两遍。返回 (y, rstd)。"""
    _check_params(x, weight, None, need_bias=False)
    eps = _check_eps(eps)
    check_triton_tuning(block_size=block_size)
    if block_size is None:
        raise TypeError("block_size 必须是整数，得到 None (block_size must be an int)")
    n_rows, n_cols = x.shape
    acc_t, acc_torch = _acc(x.dtype)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(n_rows, dtype=acc_torch, device=x.device)
    rms_norm_kernel[(n_rows,)](y, x, weight, rstd, x.stride(0), y.stride(0), n_cols, eps,
                               BLOCK_SIZE=block_size, ACC=acc_t, num_warps=warps_for(block_size))
    return y, rstd


def _forward(x, weight, bias, eps, is_rms: bool):
    n_rows, n_cols = x.shape
    acc_t, acc_torch = _acc(x.dtype)
    if n_cols > MAX_FUSED_COLS:                      # 长行：分块循环的课程版（读 2MN）
        if is_rms:
            y, rstd = looped_rms_norm(x, weight, eps, block_size=4096)
            return y, None, rstd
        b = bias if bias is not None else torch.zeros_like(weight)
        return welford_layer_norm(x, weight, b, eps, block_size=4096)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    mean = None if is_rms else torch.empty(n_rows, dtype=acc_torch, device=x.device)
    rstd = torch.empty(n_rows, dtype=acc_torch, device=x.device)
    bm, bn, nw = _rows_config(n_rows, n_cols)
    norm_rows_kernel[(triton.cdiv(n_rows, bm),)](
        y, x, weight, bias if bias is not None else weight, mean if mean is not None else rstd, rstd,
        x.stride(0), y.stride(0), n_rows, n_cols, eps,
        BLOCK_M=bm, BLOCK_N=bn, IS_RMS=is_rms, HAS_B=bias is not None, ACC=acc_t, num_warps=nw)
    return y, mean, rstd


def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       eps: float = 1e-5):
    """LayerNorm 前向（生产版），对每行归一化。返回 (y, mean, rstd)。"""
    _check_params(x, weight, bias, need_bias=True)
    return _forward(x, weight, bias, _check_eps(eps), is_rms=False)


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
    """RMSNorm 前向（生产版）。返回 (y, rstd)。"""
    _check_params(x, weight, None, need_bias=False)
    y, _, rstd = _forward(x, weight, None, _check_eps(eps), is_rms=True)
    return y, rstd


# ---------------------------------------------------------------- 反向

def backward_programs(n_rows: int, block_m: int) -> int:
    """反向内核的 program 数 P（部分和矩阵的行数）：GPU 上每个 SM 两个，sim 模式下至多 4 个。"""
    slots = 2 * sm_count() if MODE == "gpu" and sm_count() > 1 else 4
    return max(1, min(triton.cdiv(n_rows, block_m), slots))


def _backward(dy, x, weight, mean, rstd, has_bias: bool, is_rms: bool, programs: int | None):
    n_rows, n_cols = x.shape
    check_matrix(dy, "dy", dtypes=NORM_DTYPES, device=DEVICE)
    if dy.shape != x.shape or dy.device != x.device:
        raise ValueError(f"dy 的形状应与 x 相同 {tuple(x.shape)}，得到 {tuple(dy.shape)}（{dy.device}） "
                         f"(dy must have the shape and device of x)")
    _check_stats(rstd, "rstd", x)
    if not is_rms:
        _check_stats(mean, "mean", x)
    acc_t, acc_torch = _acc(x.dtype)
    if n_cols > MAX_FUSED_COLS:
        return _backward_long(dy, x, weight, mean, rstd, has_bias, is_rms, programs)
    bm, bn, nw = _rows_config(n_rows, n_cols)
    p = backward_programs(n_rows, bm) if programs is None else programs
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw_part = torch.empty((p, n_cols), dtype=acc_torch, device=x.device)
    db_part = torch.empty((p, n_cols), dtype=acc_torch, device=x.device) if has_bias else dw_part
    norm_backward_kernel[(p,)](dx, dw_part, db_part, x, dy, weight, rstd if is_rms else mean, rstd,
                               x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols,
                               BLOCK_M=bm, BLOCK_N=bn, IS_RMS=is_rms, HAS_B=has_bias, ACC=acc_t, num_warps=nw)
    dw = col_sum(dw_part).to(weight.dtype)
    db = col_sum(db_part).to(weight.dtype) if has_bias else None
    return dx, dw, db


def _backward_long(dy, x, weight, mean, rstd, has_bias: bool, is_rms: bool, programs: int | None):
    """N > MAX_FUSED_COLS：整行放不进寄存器。第 1 步每行求 c1、c2（读 x、dy 一次）；第 2 步按二维块写 dx、
    累加 dW、dB 的部分和（再读 x、dy 一次）：读 4MN、写 MN。``programs`` 是第 2 步每个列块的行方向 program 数。"""
    n_rows, n_cols = x.shape
    acc_t, acc_torch = _acc(x.dtype)
    c = torch.empty((n_rows, 2), dtype=acc_torch, device=x.device)
    stats_mean = rstd if is_rms else mean
    norm_backward_stats_kernel[(n_rows,)](c, x, dy, weight, stats_mean, rstd, x.stride(0), dy.stride(0), n_cols,
                                          BLOCK_SIZE=LONG_BLOCK, IS_RMS=is_rms, ACC=acc_t,
                                          num_warps=warps_for(LONG_BLOCK))
    n_col_blocks = triton.cdiv(n_cols, LONG_BLOCK_N)
    if programs is None:
        slots = 2 * sm_count() if MODE == "gpu" and sm_count() > 1 else 4
        programs = max(1, min(triton.cdiv(n_rows, LONG_BLOCK_M), triton.cdiv(slots, n_col_blocks)))
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw_part = torch.empty((programs, n_cols), dtype=acc_torch, device=x.device)
    db_part = torch.empty((programs, n_cols), dtype=acc_torch, device=x.device) if has_bias else dw_part
    norm_backward_tiles_kernel[(programs, n_col_blocks)](
        dx, dw_part, db_part, x, dy, weight, stats_mean, rstd, c, x.stride(0), dy.stride(0), dx.stride(0),
        n_rows, n_cols, BLOCK_M=LONG_BLOCK_M, BLOCK_N=LONG_BLOCK_N, IS_RMS=is_rms, HAS_B=has_bias, ACC=acc_t,
        num_warps=warps_for(LONG_BLOCK_M * LONG_BLOCK_N))
    dw = col_sum(dw_part).to(weight.dtype)
    db = col_sum(db_part).to(weight.dtype) if has_bias else None
    return dx, dw, db


def _check_programs(programs):
    from ..checks import check_int

    check_int(programs, "programs", lo=1)


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                        rstd: torch.Tensor, has_bias: bool = True, programs: int | None = None):
    """LayerNorm 反向：返回 (dx, dw, db)（``has_bias=False`` 时 db 为 None）。

    ``programs``：反向内核的 program 数 P（默认见 :func:`backward_programs`），即 dW、dB 部分和的行数。"""
    _check_params(x, weight, None, need_bias=False)
    if not isinstance(has_bias, bool):
        raise TypeError(f"has_bias 必须是 bool，得到 {has_bias!r} (has_bias must be a bool)")
    _check_programs(programs)
    return _backward(dy, x, weight, mean, rstd, has_bias, False, programs)


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      programs: int | None = None):
    """RMSNorm 反向：返回 (dx, dw)。"""
    _check_params(x, weight, None, need_bias=False)
    _check_programs(programs)
    dx, dw, _ = _backward(dy, x, weight, None, rstd, False, True, programs)
    return dx, dw


# ---------------------------------------------------------------- autograd

def _grad_in(dy, x):
    # dy 来自 autograd：可能是广播出来的（步长为 0）、不连续的，或 dtype 不同
    if dy.dim() != 2 or dy.stride(1) != 1 or dy.stride(0) == 0:
        dy = dy.contiguous()
    return dy.to(x.dtype)


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm：前向 :func:`layer_norm_forward`，反向 :func:`layer_norm_backward`（只能一阶）。"""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layer_norm_forward(x, weight, bias, eps)
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(_grad_in(dy, x), x, weight, mean, rstd, has_bias=ctx.has_bias)
        return dx, dw, db, None


class RMSNormFunction(torch.autograd.Function):
    """RMSNorm：前向 :func:`rms_norm_forward`，反向 :func:`rms_norm_backward`（只能一阶）。"""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(_grad_in(dy, x), x, weight, rstd)
        return dx, dw, None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """可求导的按行 LayerNorm，等价于 ``F.layer_norm(x, (N,), weight, bias, eps)``。"""
    _check_params(x, weight, bias, need_bias=True)
    return LayerNormFunction.apply(x, weight, bias, _check_eps(eps))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """可求导的按行 RMSNorm，等价于 ``F.rms_norm(x, (N,), weight, eps)``。"""
    _check_params(x, weight, None, need_bias=False)
    return RMSNormFunction.apply(x, weight, _check_eps(eps))

