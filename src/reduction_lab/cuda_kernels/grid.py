"""一行放不进一个线程块簇时的 softmax：常驻网格，各段经全局内存交换 (m, s)。softmax_cluster.cu 里
``softmax_grid_pipe`` 的包装函数。

课程页面：docs/cuda/cluster-softmax.md 的「一个簇也放不下：常驻网格」。

    from reduction_lab.cuda_kernels.grid import softmax_grid_pipe, grid_plan
    y = softmax_grid_pipe(x)              # x：(M, N) 的 float32 / bfloat16 / float16 CUDA 张量
    grid_plan(1 << 20, torch.float32)     # 不需要 GPU：每段几个向量、一行几段、几段共享内存

N = 2^20 的 float32 行有 4 MiB，16 块的簇（每块至多 227 KiB 共享内存）也放不下。这里一行切成 ``n_segs`` 段，
网格是同时驻留得下的 P 个块，块 b 依次处理第 b、b + P、……段（行优先编号），后面 ``stages - 1`` 段先用
cp.async 预取进共享内存；每段算出自己的 (m, s) 写进全局内存，等齐同一行的各段再写出——等的时候预取仍在进行，
HBM 不闲着。全局内存：每个元素读一次、写一次，另有每段一个 8 字节的 (m, s) 槽位。

P 个块必须同时驻留、一行的段数不超过 P（见 softmax_cluster.cu 里这个内核前的说明），否则互相等待会死锁：
包装函数按驱动给出的每个 SM 驻留块数定 P，段数超过 P 时报错。只有 gpu 模式：CPU 模拟器不执行这份源码里的
内联 PTX（cp.async、ld.relaxed / st.relaxed），所以 sim 模式下明确报错。cp.async 要计算能力 8.0 以上。
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import torch

from .. import runtime
from ..checks import check_int, check_matrix
from .cluster import (REGS_DTYPES, SHARED_OPTIN_SM90, _compile_cluster_kernel, _device_info, aligned_out,
                      first_launch, launch_on)
from .launcher import blocks_per_sm

__all__ = ["softmax_grid_pipe", "grid_plan", "GridPlan", "grid_launch", "grid_launch_values", "GRID_KERNEL", "MAX_RING", "blocks_per_sm"]

GRID_KERNEL = "softmax_grid_pipe"
#: 每块至多几段共享内存（AHEAD + DELAY + 1，内核里的上限）
MAX_RING = 8
#: 每个线程至多放这么多元素（PACKS * VEC）：再多寄存器会溢出
MAX_THREAD_ELEMS = 64
#: 静态共享内存：每 warp 的 (m, s)（至多 32 个 warp）与整行的 (M, S)
STATIC_BYTES = 32 * 8 + 8

SIM_MESSAGE = (f"{GRID_KERNEL} 只能在 gpu 模式下运行：它用内联 PTX（cp.async、ld.relaxed / st.relaxed），"
               f"CPU 模拟器不执行内联汇编。请在有 NVIDIA GPU 的机器上设 REDUCTION_LAB_MODE=gpu "
               f"({GRID_KERNEL} runs in gpu mode only: it uses inline PTX, which the simulator does not execute)")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class GridPlan:
    """一次启动的配置：每块 ``block_size`` 个线程、每个线程 ``packs`` 个 16 字节向量；一行 ``n_segs`` 段，
    每段 ``seg_vecs`` 个向量（各段一样长，最后一段可能少几个）；每块 ``ahead + delay + 1`` 段共享内存：
    先预取 ``ahead`` 项，发布一项的 (m, s) 之后隔 ``delay`` 轮再写出它。"""

    n_cols: int
    dtype: str
    block_size: int
    packs: int
    ahead: int
    delay: int
    vec: int
    seg_vecs: int
    n_segs: int

    @property
    def shared_bytes(self) -> int:
        # 每段：seg_vecs 个 16 字节向量；float32 的行再加每个线程的最大值（写出时按它缩放共享内存里的 e）
        return (self.ahead + self.delay + 1) * (self.seg_vecs * 16 + (self.block_size * 4 if self.vec == 4 else 0))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shared_bytes"] = self.shared_bytes
        return d


def grid_plan(n_cols: int, dtype=torch.float32, block_size: int = 512, packs: int | None = None,
              ahead: int = 1, delay: int = 1, shared_limit: int = SHARED_OPTIN_SM90) -> GridPlan:
    """softmax_grid_pipe 的配置（纯 Python，任何模式都能调用）。默认值是 H200 上扫描最快的
    （scripts/tune_grid_softmax.py：512 个线程、预取一项、隔一轮写出）；``packs`` 默认让一段是 64 KiB
    （float32 16384 个元素，16 位 32768 个），每个线程至多 64 个元素。每行的字节数必须是 16 的倍数。"""
    check_int(n_cols, "n_cols", lo=1, hi=2**31 - 2**21)
    if dtype not in REGS_DTYPES:
        raise TypeError(f"dtype {dtype} 不受支持，可用：float32, bfloat16, float16 "
                        f"(unsupported dtype {dtype}; use float32, bfloat16 or float16)")
    check_int(block_size, "block_size", lo=32, hi=1024)
    if block_size % 32:
        raise ValueError(f"block_size 必须是 32 的倍数，得到 {block_size} (block_size must be a multiple of 32)")
    check_int(ahead, "ahead", lo=1, hi=MAX_RING - 1)
    check_int(delay, "delay", lo=0, hi=MAX_RING - 1 - ahead)
    check_int(shared_limit, "shared_limit", lo=1024)
    esize = dtype.itemsize
    vec = 16 // esize
    if packs is None:
        packs = max(1, min(MAX_THREAD_ELEMS // vec, 4096 // block_size, 16))
    check_int(packs, "packs", lo=1, hi=16)
    if packs * vec > MAX_THREAD_ELEMS:
        raise ValueError(f"每个线程 {packs * vec} 个元素超过上限 {MAX_THREAD_ELEMS}（寄存器会溢出），请减小 packs "
                         f"({packs * vec} elements per thread exceed {MAX_THREAD_ELEMS})")
    if n_cols % vec:
        raise ValueError(f"{GRID_KERNEL} 按 16 字节搬运整行：每行的字节数（{n_cols} x {esize}）必须是 16 的倍数，"
                         f"即 N 是 {vec} 的倍数 (rows must be a multiple of 16 bytes: N must be a multiple of {vec})")
    row_vecs = n_cols // vec
    n_segs = _cdiv(row_vecs, block_size * packs)
    seg_vecs = _cdiv(row_vecs, n_segs)                 # 各段一样长
    plan = GridPlan(n_cols=n_cols, dtype=str(dtype).removeprefix("torch."), block_size=block_size, packs=packs,
                    ahead=ahead, delay=delay, vec=vec, seg_vecs=seg_vecs, n_segs=n_segs)
    if plan.shared_bytes + STATIC_BYTES > shared_limit:
        ring = ahead + delay + 1
        raise ValueError(f"{ring} 段 x {seg_vecs * 16} 字节的共享内存超过每块的上限 {shared_limit}："
                         f"请减小 ahead、delay、packs 或 block_size "
                         f"({ring} stages of {seg_vecs * 16} bytes exceed the shared memory limit {shared_limit})")
    return plan


@functools.lru_cache(maxsize=None)
def _kernel(plan: GridPlan, dtype, index: int):
    """编译好的 softmax_grid_pipe（每种配置一份）与它的 CUfunction，设置好动态共享内存上限。"""
    import cupy

    kern, func = _compile_cluster_kernel(GRID_KERNEL, 1, plan.block_size, plan.packs, dtype, index,
                                         AHEAD=plan.ahead, DELAY=plan.delay)
    with cupy.cuda.Device(index):
        kern.max_dynamic_shared_size_bytes = plan.shared_bytes
    return kern, func


#: 形参表（launcher._Plan 的格式）：与 softmax_cluster.cu 里 softmax_grid_pipe 的声明一致
_SIG = (("x", "const floatX *", True), ("y", "floatX *", True), ("x_row_stride", "long long", False),
        ("y_row_stride", "long long", False), ("n_rows", "int", False), ("n_cols", "int", False),
        ("seg_vecs", "int", False), ("n_segs", "int", False), ("slots", "unsigned long long *", True))
#: 槽位的哨兵（softmax_cluster.cu 的 SLOT_EMPTY：低 32 位是 -1.0f 的位模式）
SLOT_EMPTY = 0xBF800000
_PLANS: dict = {}


def _resident(plan: GridPlan, M: int, index: int, func_ptr: int, blocks: int | None) -> int:
    """网格的块数 P：默认每个 SM 驻留得下的块数 x SM 数（不超过总段数）；给出 ``blocks`` 时用它，但不能超过
    同时驻留的上限。一行的段数超过 P 时报错。"""
    fit = blocks_per_sm(func_ptr, plan.block_size, plan.shared_bytes) * _device_info(index)[2]
    P = fit if blocks is None else blocks
    if P > fit:
        raise ValueError(f"blocks={P} 超过同时驻留的上限 {fit}：块之间互相等待，必须全部同时驻留 "
                         f"(blocks={P} exceeds the {fit} blocks that can be resident at once)")
    P = max(1, min(P, M * plan.n_segs))
    if plan.n_segs > P:
        raise ValueError(f"一行 {plan.n_segs} 段多于网格的 {P} 块：同一块会拿到同一行的两段而死锁；"
                         f"请加大 packs / block_size ({plan.n_segs} segments per row exceed {P} resident blocks)")
    return P


def _empty_slots(x: torch.Tensor, plan: GridPlan) -> torch.Tensor:
    """每段一个 (m, s) 槽位，填满哨兵：一次填充，与这次调用在同一个流里排队。"""
    return torch.full((x.shape[0] * plan.n_segs,), SLOT_EMPTY, dtype=torch.int64, device=x.device)


def grid_launch(x: torch.Tensor, y: torch.Tensor, plan: GridPlan, blocks: int | None = None):
    """按 ``plan`` 启动，``x`` / ``y`` 已经检查过（含 :func:`pipe_ok`）、在当前设备上。每次调用新建填满哨兵的
    (m, s) 槽位（一次填充，与调用在同一个流里排队，不必同步）。启动计划按形状与配置缓存。"""
    M, N = x.shape
    slots = _empty_slots(x, plan)
    args = (x, y, x.stride(0), y.stride(0), M, N, plan.seg_vecs, plan.n_segs, slots)
    key = (M, N, x.get_device(), plan, blocks)
    hit = _PLANS.get(key)
    if hit is not None and hit(args):
        return hit
    index = key[2]
    _, func = _kernel(plan, x.dtype, index)
    P = _resident(plan, M, index, int(func.ptr), blocks)
    return first_launch(_PLANS, key, GRID_KERNEL, func, P, plan.block_size, plan.shared_bytes, _SIG, args)


def grid_launch_values(lp, x: torch.Tensor, y: torch.Tensor, plan: GridPlan) -> None:
    """热路径：``lp`` 是 :func:`grid_launch` 为同一形状返回的启动计划，``x`` / ``y`` 已经检查过、满足它的条件
    （:mod:`reduction_lab.cuda_kernels` 的 ``softmax_checked`` 按形状、dtype、设备与对齐缓存它）。"""
    M, N = x.shape
    slots = _empty_slots(x, plan)
    lp.launch_values((x.data_ptr(), y.data_ptr(), x.stride(0), y.stride(0), M, N, plan.seg_vecs, plan.n_segs,
                      slots.data_ptr()))


def softmax_grid_pipe(x: torch.Tensor, *, block_size: int = 512, packs: int | None = None, ahead: int = 1,
                      delay: int = 1, blocks: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """按行 softmax：(M, N) float32 / bfloat16 / float16 -> 同 dtype 的 (M, N)。一行切成几段，常驻网格的各块
    依次处理各段，段经 cp.async 预取进共享内存，各段经全局内存交换 (m, s)（softmax_cluster.cu 的
    ``softmax_grid_pipe``）。参数见 :func:`grid_plan`；``blocks``：网格的块数（默认同时驻留得下的块数）。
    x 与 ``out`` 的每一行都要从 16 字节边界开始、每行的字节数是 16 的倍数。只有 gpu 模式（计算能力 8.0 以上）。"""
    if runtime.MODE != "gpu":
        raise runtime.ModeError(SIM_MESSAGE)
    check_matrix(x, "x", dtypes=REGS_DTYPES, device="cuda")
    if blocks is not None:
        check_int(blocks, "blocks", lo=1, hi=2**31 - 1)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    major, optin, _ = _device_info(index)
    if major < 8:
        raise RuntimeError(f"cp.async 需要计算能力 8.0 以上，这块 GPU 是 {major}.x "
                           f"(cp.async needs compute capability 8.0 or newer)")
    plan = grid_plan(x.shape[1], x.dtype, block_size, packs, ahead, delay, shared_limit=optin)
    M, N = x.shape
    if M * plan.n_segs > 2**31 - 1:
        raise ValueError(f"总段数 {M * plan.n_segs} 超过 2**31 - 1 (too many segments)")
    out = aligned_out(x, out, GRID_KERNEL)
    launch_on(index, GRID_KERNEL, plan, grid_launch, x, out, plan, blocks)
    return out


def summary_table(doc: dict) -> str:
    """scripts/tune_grid_softmax.py 写出的 JSON -> 等宽文本表：每个 (dtype, N) 同一次运行里默认 backend 的带宽、
    常驻网格内核最快的配置（线程 x 包 / (ahead, delay) / 网格的块数）与它的带宽，以及表末行 grid 的配置
    （SOFTMAX_CONFIGS 的 512 x 8、GRID_AHEAD_DELAY）测得的带宽；都是拷贝带宽的百分比。"""
    from . import GRID_AHEAD_DELAY, SOFTMAX_CONFIGS

    lines = [f"{'dtype':9s}{'N':>8s}{'默认backend':>12s}{'最快':>6s}{'配置':>18s}{'表里的配置':>10s}"]
    for r in doc["rows"]:
        ok = [c for c in r["cands"] if "frac" in c]
        best = max(ok, key=lambda c: c["frac"])
        _, _, b, p = SOFTMAX_CONFIGS[4 if r["dtype"] == "float32" else 2][-1]
        table = [c["frac"] for c in ok if (c["b"], c["p"], tuple(c["st"]), c["grid"]) == (b, p, GRID_AHEAD_DELAY,
                                                                                            "resident")]
        cfg = f"{best['b']}x{best['p']}/{tuple(best['st'])}/{best['blocks']}"
        tab = f"{100 * table[0]:9.0f}%" if table else f"{'-':>10s}"
        lines.append(f"{r['dtype']:9s}{r['N']:8d}{100 * r['auto']:11.0f}%{100 * best['frac']:5.0f}%{cfg:>18s}{tab}")
    return "\n".join(lines)
