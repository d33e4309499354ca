"""实验 warp-reduce-cuda：按行求和，线程块内用 warp 洗牌归约（CUDA C）。

讲义：docs/cuda/warp-shuffle.md（mask 的规则：docs/cuda/library-primitives.md）；实验页：docs/labs/warp-reduce.ipynb。
每个 warp 用 ``__shfl_down_sync`` 归约成一个数，lane 0 写进共享内存，一次 ``__syncthreads()`` 之后
第一个 warp 读回这些数再洗牌一次。启动、评分与计时同 :mod:`.reduce_sum_cuda`；线程块大小取学习者文件里的
``BLOCK_SIZE``，另有 32、96、1024 个线程的用例（:func:`.cases.warp_reduce_cases`）。

诊断：mask 不含源线程（模拟器的 WarpSyncError）、读 ``warp_sums`` 之前没有屏障、``BLOCK_SIZE`` 不是 32 的倍数、
行尾之外的线程和没有对应 warp 的 lane、只有第 0 个 warp 的和、洗牌少了一步。offset 从 1 开始每步翻倍
（1, 2, 4, 8, 16）同样让 lane 0 得到总和，不是错误，评分让它通过。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .grading import Hint, find_line
from .reduce_sum_cuda import RowSumCudaLab

FILE = "warp_reduce.cu"
KERNEL = "warp_reduce_rowwise_kernel"
DEFAULT_BLOCK = 256
_BLOCK_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+BLOCK_SIZE[ \t]+(\S+)", re.M)

FIXES = {
    "warp-sync": "__shfl_down_sync(mask, v, offset) 里 lane l 读 lane l + offset 的 v：被读的 lane 也必须在 mask 里，"
                 "而且 mask 里的每个 lane 都要执行这条指令。\n"
                 "两级都让整个 warp 用 FULL_MASK（0xffffffff）执行洗牌；第二级没有对应 warp 的 lane 取 0.0f，"
                 "而不是把它们排除在 mask 之外。",
    "shared-race": "lane 0 写完 warp_sums[warp] 之后、第一个 warp 读 warp_sums 之前，整个线程块要 __syncthreads() 一次：\n"
                   "不同 warp 之间只有块级屏障能保证先后顺序（洗牌只在一个 warp 之内交换数据）。",
    "uninitialized-read": "warp_sums 只有前 n_warps 个槽位被写过：第一个 warp 里 lane >= n_warps 的线程要取 0.0f，\n"
                          "v = lane < n_warps ? warp_sums[lane] : 0.0f;（真实 GPU 上读到的是上一次留下的任意值）\n"
                          "n_warps 按 blockDim.x / 32 计算，不要写死：评分也用 32、96、1024 个线程的线程块。",
    "out-of-bounds": "行尾之外的线程不能读：acc 从 0.0f 开始，只累加 j < cols 的元素（cols 可能比线程数少，"
                     "甚至比一个 warp 少）；行偏移是 row * cols。",
    "barrier-divergence": "__syncthreads() 写在 if (lane == 0) 与 if (warp == 0) 的外面：线程块里的每个线程都要到达它。",
}


def block_of(text: str) -> tuple[int | str | None, int | None]:
    """学习者文件里 ``#define BLOCK_SIZE`` 的值与行号（没有时为 (None, None)）。"""
    code = "\n".join(ln.split("//")[0] for ln in text.splitlines())
    m = _BLOCK_RE.search(code)
    if m is None:
        return None, None
    line = code[:m.start()].count("\n") + 1
    v = m.group(1).strip("()")
    return (int(v) if v.isdigit() else v), line


def block_size_from(text: str) -> int:
    """启动用的线程块大小：学习者文件里合适的 ``BLOCK_SIZE``（32 到 1024 之间的 32 的倍数），否则默认值
    （不合适的值由 :func:`block_size_hint` 报出，用例不运行）。"""
    value, _ = block_of(text)
    return value if isinstance(value, int) and 32 <= value <= 1024 and value % 32 == 0 else DEFAULT_BLOCK


def block_size_hint(file: str, text: str) -> Hint | None:
    """``#define BLOCK_SIZE`` 不是 32 到 1024 之间的 32 的倍数时的诊断（按整个 warp 洗牌的实验共用）；合适时返回 None。"""
    value, line = block_of(text)
    if value is None or (isinstance(value, int) and 32 <= value <= 1024 and value % 32 == 0):
        return None
    if not isinstance(value, int):
        why = f"BLOCK_SIZE 要写成一个整数（评分程序按它启动），得到 {value}"
    elif value % 32:
        full, rest = divmod(value, 32)
        why = (f"BLOCK_SIZE = {value} 不是 32 的倍数：最后一个 warp 只有 {rest} 个线程，"
               f"FULL_MASK 点名的另外 {32 - rest} 个 lane 并不存在，洗牌读到它们的值是未定义的；"
               f"n_warps = blockDim.x / 32 = {full} 还会把这个 warp 漏掉")
    else:
        why = f"BLOCK_SIZE = {value} 超出 32 到 1024 的范围"
    return Hint("block-size", "线程块大小不合适：BLOCK_SIZE 必须是 32 的倍数（32 到 1024）", file, line, why,
                "改成 32 的倍数，例如 256 或 512；用例没有运行。")


def block_sizes_precheck(lab, impl, mode, paths, make_out, shared_bytes=lambda N: 0):
    """按整个 warp 归约的 CUDA C 实验的模拟器检查（:func:`.core.cuda_precheck`）：3x200 的输入，学习者的
    BLOCK_SIZE 之外另用 32 与 96 个线程（1 个、3 个 warp）各启动一次内核 ``(out, x, M, N)``；
    ``make_out(x)`` 给出填满 NaN 的输出，``shared_bytes(N)`` 是动态共享内存的字节数。"""
    if impl["static"] is not None:
        return [], [impl["static"]]
    from .. import simt
    from .core import cuda_precheck

    M, N = 3, 200
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(1))
    blocks = list(dict.fromkeys((impl["block"], 32, 96)))

    def run(steps):
        for b in blocks:
            simt.launch(str(impl["path"]), lab.kernel, M, b, (make_out(x), x, M, N), shared_bytes=shared_bytes(N),
                        defines={"BLOCK_SIZE": b}, max_lane_steps=steps)

    return cuda_precheck(lab, mode, paths, run, f"{M}x{N}，block = {'、'.join(map(str, blocks))}")


def model(x: torch.Tensor, block: int, offsets1=(16, 8, 4, 2, 1), offsets2=(16, 8, 4, 2, 1),
          second: bool = True) -> torch.Tensor:
    """这个内核的算法在 float64 里的模型：按 ``block`` 个线程的步长求部分和，每个 warp 按 ``offsets1`` 做
    ``__shfl_down_sync``（越过 lane 31 取回自己的值），第一个 warp 按 ``offsets2`` 归约各 warp 的和。
    ``second=False``：只有第 0 个 warp 的和。诊断用它算出几种常见错误会得到的结果。"""
    M, N = x.shape
    pad = -(-N // block) * block
    xp = torch.zeros(M, pad, dtype=torch.float64)
    xp[:, :N] = x.double()
    part = xp.reshape(M, pad // block, block).sum(1)             # (M, block)：每个线程的部分和

    def shfl(v, offsets):
        lanes = torch.arange(32)
        for off in offsets:
            src = torch.where(lanes + off < 32, lanes + off, lanes)
            v = v + v[..., src]
        return v[..., 0]

    warp_sums = shfl(part.reshape(M, block // 32, 32), offsets1)  # (M, n_warps)
    if not second:
        return warp_sums[:, 0]
    v = torch.zeros(M, 32, dtype=torch.float64)
    v[:, :warp_sums.shape[1]] = warp_sums
    return shfl(v, offsets2)


class WarpReduceCuda(RowSumCudaLab):
    name = "warp-reduce-cuda"
    title = "CUDA C：warp洗牌的按行求和"
    lecture = "cuda/warp-shuffle.md"
    notebook = "labs/warp-reduce.ipynb"
    files = (FILE,)
    kernel = KERNEL
    fixes = FIXES
    not_written_fix = "第一个 warp 洗牌之后，由 lane 0（也就是 tid == 0）写 out[row] = v；row 就是 blockIdx.x。"
    wrong_sum_fix = ("先在最小的用例（1 行）上对照 torch.sum：检查步长循环、两级洗牌的 offset（16, 8, 4, 2, 1）、"
                     "warp_sums 的下标 warp 与 lane，以及第二级的 n_warps。")

    def cases(self, mode):
        return C.warp_reduce_cases(mode)

    def block_size(self, paths) -> int:
        return block_size_from(paths[FILE].read_text(encoding="utf-8"))

    def check_source(self, path, text):
        return block_size_hint(FILE, text)

    def extra_checks(self, impl, mode, paths):
        """模拟器检查用学习者的 BLOCK_SIZE，也用 32 与 96 个线程：gpu 模式下第二级的错误（n_warps 写死、
        lane >= n_warps 读了没写过的 warp_sums）在 GPU 上只是悄悄算错，模拟器能指出是哪一行。"""
        # 行比 256 个线程短：行尾之外的线程读了下一行（最后一行越界）时也能发现
        return block_sizes_precheck(self, impl, mode, paths, lambda x: torch.full((x.shape[0],), float("nan")))

    def specific_hints(self, mm, impl):
        xs, same, first, text = mm.x, mm.same, mm.first_row(), impl["text"]
        block = impl["block"]
        if block > 32 and same(model(xs, block, second=False)):
            return Hint("no-second-stage", "结果只是第 0 个 warp 的和：其他 warp 写进 warp_sums 的数没有加进来", FILE,
                        find_line(text, r"out\s*\["), first,
                        "TODO(5)：第一个 warp 读回 warp_sums[0..n_warps-1]（其余 lane 取 0），再洗牌一次，由 lane 0 写 out[row]。")
        full = (16, 8, 4, 2, 1)
        for k in range(1, 5):
            short = full[:5 - k]
            for o1, o2 in ((short, full), (full, short), (short, short)):
                if same(model(xs, block, o1, o2)):
                    return Hint("shfl-steps", f"洗牌少了 {k} 步：offset 只走到了 {short[-1]}，lane 0 只加了一部分 lane 的值",
                                FILE, find_line(text, r"offset\s*>\s*[1-9]") or find_line(text, r"__shfl_down_sync"),
                                first, "offset 从 16 开始每步减半，一直到 1（条件 offset > 0）：一共 5 步，32 个 lane 都加进来。")
        return None
