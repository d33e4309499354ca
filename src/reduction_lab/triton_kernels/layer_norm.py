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
* :func:`layer_norm_backward` / :func:`rms_norm_backward`——反向，一个内核 ``norm_backward_kernel``
  （``IS_RMS`` 区分两者）：dx 要两次（RMSNorm 一次）行归约；dW = sum_i dy * xhat、dB = sum_i dy 是沿列的
  归约。P（约为 SM 数）个 program 各负责连续的一段行，把这些行的贡献累加起来，写出一行部分和（P x N），
  再由 :func:`reduction_lab.triton_kernels.col_sum.col_sum` 按固定顺序相加。x、dy 从显存各读一次，
  写 dx 一次（:class:`BackwardConfig` 的三种做法见内核的文档）。
* :func:`layer_norm` / :func:`rms_norm`——可求导的版本（``torch.autograd.Function``）。

float64 输入按 float64 计算（``torch.autograd.gradcheck`` 需要），其余 dtype 按 float32 计算、
按 x 的 dtype 写出 y；mean / rstd 是 float32（float64 输入时 float64）。
"""

from __future__ import annotations

from dataclasses import dataclass

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
           "LayerNormFunction", "RMSNormFunction", "NORM_DTYPES", "MAX_FUSED_COLS", "BackwardConfig",
           "BACKWARD_STRATEGIES", "backward_config", "backward_programs", "backward_partition"]

#: 接受的 dtype（x、weight、bias、dy）。
NORM_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
#: 生产版前向把整行放进一个块的最大列数；更长的行用分块循环的课程版（读 2MN）。
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


# --8<-- [start:backward-helpers]
@triton.jit
def _xhat_and_g(x, dy, w, mean, rstd, mask, IS_RMS: tl.constexpr):
    """一个 [BLOCK_M, BLOCK_N] 块的 xhat 与 g = dy * w（对 xhat 的梯度）；被屏蔽的车道两者都是 0。"""
    if IS_RMS:
        xhat = x * rstd[:, None]                     # 被屏蔽的车道 x = 0
    else:
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    return xhat, dy * w[None, :]


@triton.jit
def _grad_x(g, xhat, c1, c2, rstd, IS_RMS: tl.constexpr):
    """dx = rstd * (g - xhat * c1 - c2)，c1 = mean(g * xhat)、c2 = mean(g) 是每行的两个归约（RMSNorm 没有 c2）。"""
    dx = g - xhat * c1[:, None]
    if not IS_RMS:
        dx -= c2[:, None]
    return dx * rstd[:, None]


@triton.jit
def _load_tile(x_ptr, dy_ptr, w_ptr, rows, cols, row_mask, n_cols, x_row_stride, dy_row_stride,
               ACC: tl.constexpr, EVICT: tl.constexpr):
    """按列分块的两遍共用：这些行在列 cols 上的 x、dy（转成 ACC）与 w，以及列掩码和二维掩码。"""
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy=EVICT).to(ACC)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0,
                 eviction_policy=EVICT).to(ACC)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(ACC)
    return col_mask, mask, x, dy, w
# --8<-- [end:backward-helpers]


# --8<-- [start:backward]
@triton.jit
def norm_backward_kernel(dx_ptr, dw_part_ptr, db_part_ptr, x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr,
                         x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols, rows_per_program,
                         STRATEGY: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         ACC_TILES: tl.constexpr, IS_RMS: tl.constexpr, HAS_B: tl.constexpr, ACC: tl.constexpr):
    """grid = (P,)：program p 负责连续的 rows_per_program 行，每次 BLOCK_M 行；dW、dB 的部分和写进
    部分和矩阵（P x N）的第 p 行，由 col_sum 沿列相加。STRATEGY：
    "row"：BLOCK_N >= N，整行留在寄存器里，x、dy 只读一次；部分和是 [BLOCK_M, BLOCK_N] 的寄存器；
           行块交错分给各 program（不用 rows_per_program）。
    "tiles"：行按 BLOCK_N 列分块，每 BLOCK_M 行扫两遍（第一遍求 c1、c2 与部分和，第二遍写 dx）；
             整行的部分和是 [ACC_TILES, BLOCK_N] 的寄存器（ACC_TILES * BLOCK_N >= N）。
    "stream"：同 "tiles"，但部分和放在部分和矩阵里，每 BLOCK_M 行读改写一次（行长到寄存器放不下时）。"""
    pid = tl.program_id(0)
    row_start = pid.to(tl.int64) * rows_per_program   # int64：row * stride 可能超过 2**31
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    part = pid.to(tl.int64) * n_cols                 # 部分和矩阵第 p 行的起点
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    if STRATEGY == "row":
        col_mask = offs_n < n_cols
        w = tl.load(w_ptr + offs_n, mask=col_mask, other=0.0).to(ACC)
        dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        # 行块按 p, p + P, p + 2P, ... 交错分给各 program：同一时刻所有 program 读的是相邻的一段行
        # （H200 上这种顺序是拷贝带宽的 90% 左右，见 docs/data/h200.json 的 layer-norm-bwd；连续分块时 N <= 4096 明显更慢）
        for rb in range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
            rows = (rb * BLOCK_M + offs_m).to(tl.int64)
            row_mask = rows < n_rows
            mask = row_mask[:, None] & col_mask[None, :]
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + offs_n[None, :], mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + offs_n[None, :], mask=mask, other=0.0).to(ACC)
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
            mean = rstd                              # RMSNorm 不用 mean
            if not IS_RMS:
                mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            xhat, g = _xhat_and_g(x, dy, w, mean, rstd, mask, IS_RMS)
            c1 = tl.sum(g * xhat, axis=1) / n_cols   # 行归约：mean(g * xhat)
            c2 = tl.sum(g, axis=1) / n_cols          # 行归约：mean(g)（RMSNorm 不用，编译器删掉）
            dx = _grad_x(g, xhat, c1, c2, rstd, IS_RMS)
            tl.store(dx_ptr + rows[:, None] * dx_row_stride + offs_n[None, :], dx.to(dx_ptr.dtype.element_ty),
                     mask=mask)
            dw_acc += dy * xhat                      # 列归约的部分和：只在寄存器里逐元素累加
            if HAS_B:
                db_acc += dy
        tl.store(dw_part_ptr + part + offs_n, tl.sum(dw_acc, axis=0), mask=col_mask)
        if HAS_B:
            tl.store(db_part_ptr + part + offs_n, tl.sum(db_acc, axis=0), mask=col_mask)
    else:
        n_tiles = tl.cdiv(n_cols, BLOCK_N)
        tile_ids = tl.arange(0, ACC_TILES)
        dw_acc = tl.zeros([ACC_TILES, BLOCK_N], dtype=ACC)   # 第 t 行是第 t 个列块的部分和
        db_acc = tl.zeros([ACC_TILES, BLOCK_N], dtype=ACC)
        for r0 in range(0, row_end - row_start, BLOCK_M):
            rows = row_start + r0 + offs_m
            row_mask = rows < row_end
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
            mean = rstd                              # RMSNorm 不用 mean
            if not IS_RMS:
                mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            s1 = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
            s2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
            for t in range(0, n_tiles):              # 第一遍：c1、c2 与 dW、dB 的部分和（都不需要 c1、c2）
                cols = t * BLOCK_N + offs_n
                # evict_last：这些行马上还要再读一遍，尽量留在缓存里
                col_mask, mask, x, dy, w = _load_tile(x_ptr, dy_ptr, w_ptr, rows, cols, row_mask, n_cols,
                                                      x_row_stride, dy_row_stride, ACC, "evict_last")
                xhat, g = _xhat_and_g(x, dy, w, mean, rstd, mask, IS_RMS)
                s1 += g * xhat
                s2 += g
                dw_t = tl.sum(dy * xhat, axis=0)     # 这 BLOCK_M 行对第 t 个列块的贡献
                db_t = tl.sum(dy, axis=0)
                if STRATEGY == "tiles":
                    # 寄存器不能按运行时的下标寻址：用比较选中第 t 行再加
                    hit = (tile_ids == t)[:, None]
                    dw_acc += tl.where(hit, dw_t[None, :], 0.0)
                    if HAS_B:
                        db_acc += tl.where(hit, db_t[None, :], 0.0)
                else:
                    # 读改写部分和矩阵的第 p 行；本 program 的第一块行不读（掩码全关），直接写
                    keep = col_mask & (r0 > 0)
                    p_dw = dw_part_ptr + part + cols
                    tl.store(p_dw, tl.load(p_dw, mask=keep, other=0.0) + dw_t, mask=col_mask)
                    if HAS_B:
                        p_db = db_part_ptr + part + cols
                        tl.store(p_db, tl.load(p_db, mask=keep, other=0.0) + db_t, mask=col_mask)
            c1 = tl.sum(s1, axis=1) / n_cols
            c2 = tl.sum(s2, axis=1) / n_cols
            for k in range(0, n_tiles):              # 第二遍：倒着走，先读最近读过、最可能还在缓存里的列块
                cols = (n_tiles - 1 - k) * BLOCK_N + offs_n
                col_mask, mask, x, dy, w = _load_tile(x_ptr, dy_ptr, w_ptr, rows, cols, row_mask, n_cols,
                                                      x_row_stride, dy_row_stride, ACC, "evict_first")
                xhat, g = _xhat_and_g(x, dy, w, mean, rstd, mask, IS_RMS)
                dx = _grad_x(g, xhat, c1, c2, rstd, IS_RMS)
                tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
                         mask=mask)
        if STRATEGY == "tiles":
            cols2 = tile_ids[:, None] * BLOCK_N + offs_n[None, :]
            tl.store(dw_part_ptr + part + cols2, dw_acc, mask=cols2 < n_cols)
            if HAS_B:
                tl.store(db_part_ptr + part + cols2, db_acc, mask=cols2 < n_cols)
# --8<-- [end:backward]


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

#: :func:`norm_backward_kernel` 的三种做法，见它的文档。
BACKWARD_STRATEGIES = ("row", "tiles", "stream")
#: 默认配置的分界（float32 累加）：N <= ROW_MAX_COLS 用 "row"（整行留在寄存器里），
#: N <= TILES_MAX_COLS 用 "tiles"（整行的 dW、dB 部分和留在寄存器里），更长的行用 "stream"。
ROW_MAX_COLS = 4096
TILES_MAX_COLS = 16384


@dataclass(frozen=True)
class BackwardConfig:
    """反向内核的一组调优参数：做法、每次处理的行数与列数、warp 数、每个 SM 的 program 数。"""

    strategy: str
    block_m: int
    block_n: int
    num_warps: int
    programs_per_sm: int = 2


def backward_config(n_rows: int, n_cols: int, dtype: torch.dtype = torch.float32) -> BackwardConfig:
    """默认配置。"row"：块里至多 4096 个元素（float64 减半），每个 SM 两个 program（16 位输入一个：H200 上
    (65536, 1024) 的 bfloat16 从拷贝带宽的 25%/43% 升到 39%/56%，LayerNorm/RMSNorm，scripts/gpu_norm_bwd_check.py）；
    "tiles"：每个 SM 一个 16 warp 的 program，2 x N 个 float32 部分和约占它寄存器的一半；更长的行（或 float64）用 "stream"。"""
    block_n = next_pow2(n_cols)
    elems = ROW_MAX_COLS // 2 if dtype == torch.float64 else ROW_MAX_COLS
    if block_n <= elems:
        block_m = max(1, min(elems // block_n, next_pow2(n_rows)))
        per_sm = 1 if dtype.itemsize == 2 else 2
        return BackwardConfig("row", block_m, block_n, warps_for(block_m * block_n), per_sm)
    if n_cols <= TILES_MAX_COLS and dtype != torch.float64:
        return BackwardConfig("tiles", 1, 4096, 16, 1)
    return BackwardConfig("stream", 1, 2048, 16, 2)


def _check_config(config, n_cols: int) -> BackwardConfig:
    if not isinstance(config, BackwardConfig):
        raise TypeError(f"config 必须是 BackwardConfig，得到 {type(config).__name__} "
                        f"(config must be a BackwardConfig)")
    if config.strategy not in BACKWARD_STRATEGIES:
        raise ValueError(f"strategy 只能是 {', '.join(map(repr, BACKWARD_STRATEGIES))} 之一，得到 {config.strategy!r} "
                         f"(unknown strategy {config.strategy!r})")
    check_triton_tuning(block_m=config.block_m, block_n=config.block_n, num_warps=config.num_warps,
                        programs_per_sm=config.programs_per_sm)
    for name in ("block_m", "block_n", "num_warps", "programs_per_sm"):
        if getattr(config, name) is None:
            raise TypeError(f"{name} 必须是整数，得到 None ({name} must be an int)")
    if config.strategy == "row" and config.block_n < n_cols:
        raise ValueError(f"strategy='row' 把整行放进一个块：block_n 至少是 N = {n_cols}，得到 {config.block_n} "
                         f"(strategy 'row' needs block_n >= N)")
    if config.strategy == "tiles":                    # 部分和 [ACC_TILES, block_n] 也受一个块的元素上限约束
        check_triton_tuning(block_m=_acc_tiles(config, n_cols), block_n=config.block_n)
    return config


def _acc_tiles(config: BackwardConfig, n_cols: int) -> int:
    return next_pow2(triton.cdiv(n_cols, config.block_n)) if config.strategy == "tiles" else 1


def backward_programs(n_rows: int, config: BackwardConfig) -> int:
    """反向内核的 program 数 P 的上限：GPU 上每个 SM ``programs_per_sm`` 个，sim 模式下至多 4 个；
    不超过行块数。"""
    slots = config.programs_per_sm * sm_count() if MODE == "gpu" and sm_count() > 1 else 4
    return max(1, min(triton.cdiv(n_rows, config.block_m), slots))


def backward_partition(n_rows: int, config: BackwardConfig, programs: int | None = None) -> tuple[int, int]:
    """(P, rows_per_program)：每个 program 连续的 rows_per_program 行（BLOCK_M 的倍数），分不到行的 program
    去掉，所以 P 可能比 ``programs``（默认 :func:`backward_programs`）小。"""
    p = backward_programs(n_rows, config) if programs is None else programs
    rows_per_program = triton.cdiv(triton.cdiv(n_rows, p), config.block_m) * config.block_m
    return triton.cdiv(n_rows, rows_per_program), rows_per_program


def _backward(dy, x, weight, mean, rstd, has_bias: bool, is_rms: bool, programs, config):
    n_rows, n_cols = x.shape
    check_matrix(dy, "dy", dtypes=NORM_DTYPES, device=DEVICE)
    if dy.shape != x.shape or dy.device != x.device:
        raise ValueError(f"dy 的形状应与 x 相同 {tuple(x.shape)}，得到 {tuple(dy.shape)}（{dy.device}） "
                         f"(dy must have the shape and device of x)")
    _check_stats(rstd, "rstd", x)
    if not is_rms:
        _check_stats(mean, "mean", x)
    cfg = backward_config(n_rows, n_cols, x.dtype) if config is None else _check_config(config, n_cols)
    acc_t, acc_torch = _acc(x.dtype)
    p, rows_per_program = backward_partition(n_rows, cfg, programs)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw_part = torch.empty((p, n_cols), dtype=acc_torch, device=x.device)
    db_part = torch.empty((p, n_cols), dtype=acc_torch, device=x.device) if has_bias else dw_part
    norm_backward_kernel[(p,)](dx, dw_part, db_part, x, dy, weight, rstd if is_rms else mean, rstd,
                               x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols, rows_per_program,
                               STRATEGY=cfg.strategy, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                               ACC_TILES=_acc_tiles(cfg, n_cols), IS_RMS=is_rms, HAS_B=has_bias, ACC=acc_t,
                               num_warps=cfg.num_warps)
    # 第二步：P 行部分和按固定顺序沿列相加（没有原子加，结果逐位可复现）
    dw = col_sum(dw_part).to(weight.dtype)
    db = col_sum(db_part).to(weight.dtype) if has_bias else None
    return dx, dw, db


def _check_programs(programs):
    from ..checks import check_int

    check_int(programs, "programs", lo=1)


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                        rstd: torch.Tensor, has_bias: bool = True, programs: int | None = None,
                        config: BackwardConfig | None = None):
    """LayerNorm 反向：返回 (dx, dw, db)（``has_bias=False`` 时 db 为 None）。

    ``programs``：反向内核 program 数 P 的上限（默认见 :func:`backward_programs`），即 dW、dB 部分和的行数；
    ``config``：:class:`BackwardConfig`（默认 :func:`backward_config`）。"""
    _check_params(x, weight, None, need_bias=False)
    if not isinstance(has_bias, bool):
        raise TypeError(f"has_bias 必须是 bool，得到 {has_bias!r} (has_bias must be a bool)")
    _check_programs(programs)
    return _backward(dy, x, weight, mean, rstd, has_bias, False, programs, config)


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      programs: int | None = None, config: BackwardConfig | None = None):
    """RMSNorm 反向：返回 (dx, dw)。参数同 :func:`layer_norm_backward`。"""
    _check_params(x, weight, None, need_bias=False)
    _check_programs(programs)
    dx, dw, _ = _backward(dy, x, weight, None, rstd, False, True, programs, config)
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

