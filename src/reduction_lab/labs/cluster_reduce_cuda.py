"""实验 cluster-reduce-cuda：一行交给一个线程块簇，块间经分布式共享内存（DSMEM）合并部分和（CUDA C）。

讲义：docs/cuda/cluster-softmax.md（块内归约：docs/cuda/warp-shuffle.md）；实验页：docs/labs/cluster-reduce.ipynb。
grid = 行数 x ``CLUSTER_SIZE``，每 ``CLUSTER_SIZE`` 个相邻的线程块是一个簇（``__cluster_dims__``）。每块按块号交错
读这一行的一部分（第 rank * blockDim.x + tid 列起，步长 CLUSTER_SIZE * blockDim.x），块内用 warp 洗牌归约成一个
``partial``；``cluster.sync()`` 之后 0 号块经 ``cluster.map_shared_rank(&partial, r)`` 读各块的部分和，写出
``out[row]``；最后再 ``cluster.sync()``，没有块在 0 号块还可能读它时退出。线程块大小与簇大小取学习者文件里的
``BLOCK_SIZE`` 与 ``CLUSTER_SIZE``，另有 32、96 个线程与 2、8 块的簇的用例（:func:`.cases.cluster_reduce_cases`）。

sim 模式在模拟器里运行（它检查簇屏障、DSMEM 的竞争与已退出的块）；gpu 模式要计算能力 9.0 以上（Hopper 起才有
线程块簇）：更早的 GPU 上评分说明原因，改在模拟器里运行用例，不计时。

诊断：读别的块的部分和之前少了 ``cluster.sync()``（簇内跨线程块的竞争）、少了最后的 ``cluster.sync()``（访问已退出
的块）、``cluster.sync()`` 写在分支里（簇屏障发散）、``map_shared_rank`` 的编号越界、各块的列重叠或漏掉（按算法的
float64 模型比较）、只加了 0 号块的部分和、没有经 DSMEM 读别的块。
"""

from __future__ import annotations

import re

import torch

from . import cases as C
from .core import cuda_precheck, time_against
from .grading import Case, Hint, error_line, find_line, rows_text, zh_part
from . import reduce_sum_cuda
from .reduce_sum_cuda import RowSumCudaLab, check_row_signature

FILE = "cluster_reduce.cu"
KERNEL = "cluster_reduce_rowwise_kernel"
DEFAULT_BLOCK = 256
DEFAULT_CLUSTER = 4
#: 可移植的簇大小上限（16 要打开非可移植的簇大小，评分程序不这样启动）
MAX_CLUSTER = 8
FIXES = {
    "cluster-race": "0 号块经 cluster.map_shared_rank 读别的块的 partial 之前，整个簇要 cluster.sync() 一次：\n"
                    "__syncthreads() 只排定同一线程块的线程，簇里不同的块之间只有簇屏障能保证「先写完、再读」。",
    "dsmem-exited": "内核的最后再 cluster.sync() 一次（TODO(5)），写在所有分支之外：\n"
                    "别的块要等 0 号块读完它们的 partial 才能退出；块一退出，它的共享内存就被回收了。",
    "dsmem-rank": "簇内编号只能是 0 到 CLUSTER_SIZE - 1：for (int r = 0; r < CLUSTER_SIZE; ++r)。\n"
                  "它是块在簇里的编号 cluster.block_rank()，不是 blockIdx.x。",
    "barrier-divergence": "cluster.sync() 写在 if (rank == 0 ...) 的外面：簇里每一块的每一个线程都要到达它，"
                          "只有一部分到达时真实 GPU 上会死锁。\n"
                          "块内的 __syncthreads() 同样要写在 if (lane == 0)、if (warp == 0) 的外面。",
    "shared-race": "lane 0 写完 warp_sums[warp] 之后、第一个 warp 读 warp_sums 之前，整个线程块要 __syncthreads() 一次。",
    "uninitialized-read": "warp_sums 只有前 n_warps 个槽位被写过：第一个 warp 里 lane >= n_warps 的线程取 0.0f；\n"
                          "partial 要由每一块的线程 0 写好，0 号块才能在 cluster.sync() 之后读它。",
    "global-race": "一行的和只让簇内编号为 0 的块的线程 0 写：if (rank == 0 && tid == 0) { … out[row] = total; }。"
                   "别的块的 partial 经 cluster.map_shared_rank 交给它，读之前 cluster.sync()。",
    "out-of-bounds": "行号是 blockIdx.x / CLUSTER_SIZE（一个簇一行，不是 blockIdx.x）；行偏移 row * cols；"
                     "只读 j < cols 的列（cols 可能比一个线程块的线程还少）。",
}


_MACRO_RE = r"^[ \t]*#[ \t]*define[ \t]+{name}[ \t]+(\S+)"


def macro_of(text: str, name: str) -> tuple[int | str | None, int | None]:
    """学习者文件里 ``#define NAME`` 的值与行号（没有时为 (None, None)）。"""
    code = "\n".join(ln.split("//")[0] for ln in text.splitlines())
    m = re.search(_MACRO_RE.format(name=name), code, re.M)
    if m is None:
        return None, None
    line = code[:m.start()].count("\n") + 1
    v = m.group(1).strip("()")
    return (int(v) if v.isdigit() else v), line


def _block_ok(v) -> bool:
    return isinstance(v, int) and 32 <= v <= 1024 and v % 32 == 0


def _cluster_ok(v) -> bool:
    return isinstance(v, int) and 1 <= v <= MAX_CLUSTER


# ---------------------------------------------------------------- 算法的模型（诊断用）

def counts(n: int, block: int, cluster: int, first: int | None = None, step: int | None = None,
           contiguous: str | None = None) -> torch.Tensor:
    """(cluster, n) 的矩阵：簇里第 r 块的线程一共读了第 j 列几次。

    默认是本实验的分法（按块号交错）：第 r 块的第 t 个线程从 ``first * r + t`` 列起、以 ``step`` 为步长读到行尾，
    ``first`` 默认 block、``step`` 默认 cluster * block。``contiguous``：连续的段，"ceil" 每段 ceil(n / cluster) 列
    （也是对的分法），"floor" 每段 n // cluster 列（漏掉行尾 n % cluster 列），线程在段内以 block 为步长。"""
    first = block if first is None else first
    step = cluster * block if step is None else step
    out = torch.zeros(cluster, n, dtype=torch.float64)
    t = torch.arange(block)
    for r in range(cluster):
        if contiguous is not None:
            per = -(-n // cluster) if contiguous == "ceil" else n // cluster
            begin, end = r * per, min(r * per + per, n)
            for s in range(begin, end, block):
                j = s + t
                out[r, j[j < end]] += 1
            continue
        start = first * r
        for s in range(start, n, step):
            j = s + t
            out[r, j[j < n]] += 1
    return out


def model(x: torch.Tensor, block: int, cluster: int, ranks=None, **layout) -> torch.Tensor:
    """这个内核在 float64 里的结果：按 :func:`counts` 的分法求各块的部分和，0 号块加上 ``ranks`` 里各块的
    （默认全部）。诊断用它算出几种常见错误会得到的结果，与学习者的输出比较。"""
    w = counts(x.shape[1], block, cluster, **layout)
    part = x.double() @ w.T                                   # (M, cluster)：各块的部分和
    ranks = range(cluster) if ranks is None else ranks
    return part[:, list(ranks)].sum(1) if len(ranks) else torch.zeros(x.shape[0], dtype=torch.float64)


def _loop_line(text: str) -> int | None:
    """累加循环所在的行：``acc +=`` 之上最近的 for（至多往上 3 行），没有时就是 ``acc +=`` 那一行。"""
    acc = find_line(text, r"acc\s*\+=")
    if acc is None:
        return None
    lines = text.splitlines()
    for i in range(acc - 1, max(0, acc - 4), -1):
        if re.search(r"\bfor\s*\(", lines[i - 1].split("//")[0]):
            return i
    return acc


def make_op(path, mode: str, block: int = DEFAULT_BLOCK, cluster: int = DEFAULT_CLUSTER, kernel: str = KERNEL):
    """课程的算子接口：``reduce_sum(x, dim=1, out=None)``，检查输入后启动学习者的内核
    （grid = 行数 x ``cluster``，block = ``block``，以 ``-DBLOCK_SIZE=block -DCLUSTER_SIZE=cluster`` 编译）。"""
    return reduce_sum_cuda.make_op(path, mode, block, kernel, cluster=cluster)


def gpu_capability() -> tuple[int, int] | None:
    """当前 GPU 的计算能力；torch 看不到 CUDA 设备时为 None（测试在 CPU 上检查 gpu 模式的模拟器检查）。
    测试里替换它，模拟一块没有线程块簇的 GPU。"""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


class ClusterReduceCuda(RowSumCudaLab):
    name = "cluster-reduce-cuda"
    title = "CUDA C：线程块簇的按行求和（分布式共享内存）"
    lecture = "cuda/cluster-softmax.md"
    notebook = "labs/cluster-reduce.ipynb"
    files = (FILE,)
    kernel = KERNEL
    fixes = FIXES
    not_written_fix = ("cluster.sync() 之后，由簇里的 0 号块的线程 0（rank == 0 && tid == 0）把各块的 partial 加起来，"
                       "写 out[row]；row 是 blockIdx.x / CLUSTER_SIZE。")
    wrong_sum_fix = ("先在最小的用例（1 行）上对照 torch.sum：检查行号 blockIdx.x / CLUSTER_SIZE、每块的起点 "
                     "rank * blockDim.x + tid 与步长 CLUSTER_SIZE * blockDim.x、块内的两级洗牌，以及 0 号块加的是哪几块的 partial。")

    # ---- 模式：gpu 模式要计算能力 9.0 以上
    def run_mode(self, mode: str) -> str:
        """实际运行用例的模式：gpu 模式下 GPU 没有线程块簇（计算能力低于 9.0）时改用模拟器。"""
        cap = gpu_capability() if mode == "gpu" else None
        if cap is not None and cap[0] < 9:
            return "sim"
        return mode

    def _fallback_note(self, mode: str) -> str:
        if mode != "gpu" or self.run_mode(mode) == "gpu":
            return ""
        major, minor = gpu_capability()
        return (f"这块 GPU 的计算能力是 {major}.{minor}，没有线程块簇（要 9.0 以上，Hopper 起）："
                f"用例改在模拟器里运行，不计时。(thread block clusters need compute capability 9.0+; "
                f"the cases ran in the simulator)")

    def cases(self, mode):
        return C.cluster_reduce_cases(self.run_mode(mode))

    # ---- 编译期常量
    def block_size(self, paths) -> int:
        value, _ = macro_of(paths[FILE].read_text(encoding="utf-8"), "BLOCK_SIZE")
        return value if _block_ok(value) else DEFAULT_BLOCK

    def cluster_size(self, paths) -> int:
        value, _ = macro_of(paths[FILE].read_text(encoding="utf-8"), "CLUSTER_SIZE")
        return value if _cluster_ok(value) else DEFAULT_CLUSTER

    def check_source(self, path, text):
        value, line = macro_of(text, "BLOCK_SIZE")
        if value is not None and not _block_ok(value):
            if not isinstance(value, int):
                why = f"BLOCK_SIZE 要写成一个整数（评分程序按它启动），得到 {value}"
            elif value % 32:
                why = (f"BLOCK_SIZE = {value} 不是 32 的倍数：最后一个 warp 只有 {value % 32} 个线程，"
                       f"FULL_MASK 点名的另外 {32 - value % 32} 个 lane 并不存在")
            else:
                why = f"BLOCK_SIZE = {value} 超出 32 到 1024 的范围"
            return Hint("block-size", "线程块大小不合适：BLOCK_SIZE 必须是 32 的倍数（32 到 1024）", FILE, line, why,
                        "改成 32 的倍数，例如 256 或 512；用例没有运行。")
        value, line = macro_of(text, "CLUSTER_SIZE")
        if value is not None and not _cluster_ok(value):
            why = (f"CLUSTER_SIZE 要写成一个整数（评分程序按它启动 rows x CLUSTER_SIZE 个线程块），得到 {value}"
                   if not isinstance(value, int) else
                   f"CLUSTER_SIZE = {value}：一个簇至多 {MAX_CLUSTER} 块（可移植的上限；16 块要先打开"
                   f"非可移植的簇大小），至少 1 块")
            return Hint("cluster-size", f"簇大小不合适：CLUSTER_SIZE 必须在 1 到 {MAX_CLUSTER} 之间", FILE, line, why,
                        "改成 2、4 或 8；用例没有运行。")
        return None

    # ---- 加载与运行
    def load(self, paths, mode):
        run = self.run_mode(mode)
        path = paths[FILE]
        text = path.read_text(encoding="utf-8")
        block, cluster = self.block_size(paths), self.cluster_size(paths)
        check_row_signature(path, self.kernel, {"BLOCK_SIZE": block, "CLUSTER_SIZE": cluster})
        return {"op": make_op(path, run, block, cluster, self.kernel), "path": path, "mode": run, "block": block,
                "cluster": cluster, "text": text, "static": self.check_source(path, text),
                "fallback": self._fallback_note(mode)}

    def run_case(self, impl, case: Case, mode):
        mode = impl["mode"]
        if impl["static"] is not None:          # 簇大小不合法：用例按别的簇大小运行没有意义
            return False, None, "未运行：" + impl["static"].cause, None
        block = case.block or impl["block"]
        cluster = case.cluster or impl["cluster"]
        op = impl["op"] if (block, cluster) == (impl["block"], impl["cluster"]) else \
            make_op(impl["path"], mode, block, cluster, self.kernel)

        def call(x):
            out = torch.full((x.shape[0],), float("nan"), dtype=torch.float32, device=x.device)  # 没写的行是 NaN
            return op(x, out=out)

        return C.run_row_sum_case(self, dict(impl, op=op, block=block, cluster=cluster), case, mode, call)

    def launch_shape(self, impl, M: int) -> tuple[int, dict]:
        return M * impl["cluster"], {"BLOCK_SIZE": impl["block"], "CLUSTER_SIZE": impl["cluster"]}

    def extra_checks(self, impl, mode, paths):
        """模拟器检查：学习者的 BLOCK_SIZE 与 CLUSTER_SIZE，另用 96 个线程、2 块的簇。gpu 模式下 GPU 不报告簇内的
        竞争，读已退出的块、越界的簇内编号可能让内核非法访存：模拟器先指出是哪一行（core.GPU_UNSAFE：这时用例
        不在 GPU 上运行）。"""
        note = [impl["fallback"], ""] if impl["fallback"] else []
        if impl["static"] is not None:
            return note, [impl["static"]]
        from .. import simt

        M, N = 3, 700
        x = torch.randn(M, N, generator=torch.Generator().manual_seed(1))
        configs = list(dict.fromkeys(((impl["block"], impl["cluster"]), (96, 2))))

        def run(steps):
            for b, c in configs:
                out = torch.full((M,), float("nan"))
                simt.launch(str(impl["path"]), self.kernel, M * c, b, (out, x, M, N),
                            defines={"BLOCK_SIZE": b, "CLUSTER_SIZE": c}, max_lane_steps=steps)

        label = f"{M}x{N}，" + "、".join(f"block = {b} 簇 = {c}" for b, c in configs)
        lines, hints = cuda_precheck(self, impl["mode"], paths, run, label)
        return note + lines, hints

    def bench(self, impl):
        if impl["mode"] != "gpu":
            return "", []
        M, N = 4096, 4096
        x = torch.randn(M, N, device="cuda")
        out = torch.empty(M, device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "torch.sum": lambda: torch.sum(x, dim=1, out=out)}
        return time_against(calls, x.numel() * 4 + M * 4, x,
                            f"{M}x{N} float32，block = {impl['block']}，簇 = {impl['cluster']} 块")

    # ---- 诊断
    def on_error(self, case, exc, paths):
        text = paths[FILE].read_text(encoding="utf-8")
        name, msg = type(exc).__name__, str(exc)
        line = error_line(exc)
        if name == "SharedMemoryRaceError" and "簇内跨线程块" in msg:
            return Hint("cluster-race", "簇内跨线程块的数据竞争：读别的块的 partial 时，那一块可能还没写完（模拟器："
                        f"{name}）", FILE, line, zh_part(msg), FIXES["cluster-race"])
        if name == "OutOfBoundsError" and "map_shared_rank" in msg:
            return Hint("dsmem-rank", f"cluster.map_shared_rank 的簇内编号越界（模拟器：{name}）", FILE, line,
                        zh_part(msg), FIXES["dsmem-rank"])
        if name == "BarrierDivergenceError" and "cluster.sync" in msg:
            return Hint("barrier-divergence", "cluster.sync() 没有被簇里所有线程块的所有线程执行到（簇屏障写在了分支里）"
                        f"（模拟器：{name}）", FILE, line, zh_part(msg), FIXES["barrier-divergence"])
        return super().on_error(case, exc, paths)

    def wrong_answer(self, mm, impl):
        got = mm.got[mm.bad]
        if not torch.isnan(got).all():
            h = self.cluster_hints(mm, impl)
            if h is not None:
                return h
            if bool((got == 0).all()):
                return Hint("zero-sum", "结果是 0：0 号块加起来的数里没有这一行的任何元素", FILE,
                            find_line(impl["text"], r"out\s*\["), mm.first_row(),
                            "检查每块的起点与循环条件（TODO(2)）、线程 0 是否写了 partial（TODO(3)），"
                            "以及 0 号块加的是不是 *cluster.map_shared_rank(&partial, r)（TODO(4)）。")
        return super().wrong_answer(mm, impl)

    def cluster_hints(self, mm, impl) -> Hint | None:
        """与算法模型的几种常见错误比较（合并部分和的一步、各块的列怎么分）。"""
        xs, same, first, text = mm.x, mm.same, mm.first_row(), impl["text"]
        B, Cn = impl["block"], impl["cluster"]
        N = xs.shape[1]
        sum_line = find_line(text, r"map_shared_rank") or find_line(text, r"out\s*\[")
        code = "\n".join(ln.split("//")[0] for ln in text.splitlines())
        if Cn > 1:
            # cols <= blockDim.x 时整行都归 0 号块：「只加了 0 号块」与正确的结果相同；cols < CLUSTER_SIZE 时
            # 「漏了 0 号块」与「连续分段向下取整」都得到 0，分不出来
            part = xs @ counts(N, B, Cn).T
            if N > B and same(part[:, 0]):
                return Hint("rank0-only", "结果只是 0 号块的部分和：簇里其他块的 partial 没有加进来", FILE, sum_line,
                            first, "TODO(4)：0 号块对 r = 0 .. CLUSTER_SIZE - 1 逐个加上 *cluster.map_shared_rank(&partial, r)。")
            if N >= Cn and same(part[:, 1:].sum(1)):
                return Hint("missing-partials", "0 号块自己的部分和没有加进来：只加了 1 到 CLUSTER_SIZE - 1 号块的",
                            FILE, find_line(text, r"\br\s*=\s*1\b") or sum_line, first,
                            "从 r = 0 开始加（map_shared_rank(&partial, 0) 就是本块的 partial），或者 total 从 partial 开始。")
            # 源码里没有 map_shared_rank 时才这样判断：cols <= blockDim.x 时它与「各块的起点都是 tid」的结果相同
            if "map_shared_rank" not in code and same(Cn * part[:, 0]):
                return Hint("no-dsmem", f"结果是 0 号块的部分和的 {Cn} 倍：每次读的都是本块自己的 partial，"
                            "没有经分布式共享内存读别的块", FILE, find_line(text, r"\+=\s*partial") or
                            find_line(text, r"out\s*\["), first,
                            "读第 r 块的 partial 要先换地址：total += *cluster.map_shared_rank(&partial, r);")
        if same(xs[:, :Cn * B].sum(1)):
            return Hint("no-stride-loop", f"每个线程只读了一个元素：本行第 CLUSTER_SIZE * blockDim.x = {Cn * B} 列以后的"
                        "元素没有加进来", FILE, _loop_line(text), first,
                        "for (int64_t j = (int64_t)rank * blockDim.x + tid; j < cols; j += (int64_t)CLUSTER_SIZE * blockDim.x)")
        # 各块的列：起点（rank * blockDim.x 或忘了 rank）与步长（k * blockDim.x），以及连续分段漏掉行尾
        # 先试只错一处的（起点或步长），再试两处都错的
        ks = [Cn] + [k for k in range(1, 2 * MAX_CLUSTER + 1) if k != Cn]
        layouts = [dict(contiguous="floor")] if N >= Cn else []
        layouts += [dict(first=0, step=Cn * B)] + [dict(first=B, step=k * B) for k in ks[1:]]
        layouts += [dict(first=0, step=k * B) for k in ks[1:]]
        for lay in layouts:
            w = counts(N, B, Cn, **lay)
            if bool((w.sum(0) == 1).all()):
                continue                                            # 这种分法本来就对（每列正好一次）
            if not same(xs.double() @ w.sum(0)):
                continue
            return self._slice_hint(w.sum(0), lay, B, Cn, text, first)
        return None

    def _slice_hint(self, total, lay, B, Cn, text, first) -> Hint:
        over = torch.nonzero(total > 1).flatten().tolist()
        gap = torch.nonzero(total == 0).flatten().tolist()
        line = _loop_line(text)
        if lay.get("contiguous"):
            how = "分段时每段 cols / CLUSTER_SIZE 列（向下取整），行尾的余数列没有块负责"
            fix = "每段 (cols + CLUSTER_SIZE - 1) / CLUSTER_SIZE 列，end = min(begin + per, cols)；或者改用按块号交错的分法。"
        else:
            parts = []
            if lay["first"] != B:
                parts.append("各块的起点都是第 tid 列（没有加上 rank * blockDim.x）")
            if lay["step"] != Cn * B:
                k = lay["step"] // B
                parts.append(f"步长是 {'' if k == 1 else f'{k} * '}blockDim.x，而簇里有 {Cn} 块"
                             + ("（CLUSTER_SIZE 写死了？）" if lay["step"] // B in (2, 4, 8) else ""))
            how = "；".join(parts) if parts else "各块读的列不对"
            fix = ("第 rank 块的第 tid 个线程从第 rank * blockDim.x + tid 列起，步长 CLUSTER_SIZE * blockDim.x：\n"
                   "这样每 CLUSTER_SIZE * blockDim.x 列里，每块正好读相邻的 blockDim.x 列，每一列只被读一次。")
        if over:
            cause = f"有的列被加了不止一次：各块读的列有重叠（{how}）"
            key = "slice-overlap"
            detail = f"例如第 {over[0]} 列被加了 {int(total[over[0]])} 次" + (f"，第 {gap[0]} 列一次也没有加" if gap else "")
        else:
            cause = f"有的列没有被加进来：各块读的列之间有空隙（{how}）"
            key = "slice-gap"
            detail = f"一次也没有加的列：{rows_text(gap)}"
        return Hint(key, cause, FILE, line, f"{first}\n{detail}", fix)
