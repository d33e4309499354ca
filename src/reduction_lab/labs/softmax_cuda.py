"""实验 softmax-cuda：按行 softmax，一行一个线程块，整行留在共享内存里（CUDA C）。

讲义：docs/triton/fused-softmax.md（同一个算法的 Triton 写法）、docs/triton/masking.md、docs/cuda/warp-shuffle.md；
实验页：docs/labs/softmax-cuda.ipynb。
整行读进动态共享内存 ``row_buf``（cols 个 float），块内求最大值与和都是「warp 蝶形归约 + 每个 warp 一个槽位 +
``__syncthreads()``」，每个线程都拿到结果。启动与模拟器检查同 :mod:`.reduce_sum_cuda`；线程块大小取学习者文件里的
``BLOCK_SIZE``（:func:`.warp_reduce_cuda.block_size_hint` 检查它）。

诊断：最大值的初值不是 -inf（整行是很大的负数时 0/0）、没减最大值（x 很大时 inf/NaN）、没除以和、
分母只是一部分 warp 的和、改写 ``red`` 之前少了第二次屏障（模拟器的共享内存竞争）、每行从显存读了不止一遍
（「访存计数」用例在模拟器里数 ``global_load_bytes``）。
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from ..checks import check_out
from . import cases as C
from .core import Lab, softmax_bench
from .grading import Case, Hint, compare, find_line, first_bad_row, never_written, rows_text, softmax_tolerance
from .hints import cuda_error_hint
from .reduce_sum_cuda import ROW_PARAMS, check_row_signature, load_request_check
from .warp_reduce_cuda import DEFAULT_BLOCK, block_size_from, block_size_hint, block_sizes_precheck

FILE = "softmax.cu"
KERNEL = "softmax_rowwise_kernel"
#: 整行放进动态共享内存：不申请更大的上限（cudaFuncAttributeMaxDynamicSharedMemorySize）时每块 48 KiB
MAX_COLS = 48 * 1024 // 4

FIXES = {
    "shared-race": "red 在一次内核里用了两次（先放各 warp 的最大值，再放各 warp 的和）：\n"
                   "lane 0 写完 red[warp] 之后要 __syncthreads()，其他 warp 才能读；所有 warp 读完最大值之后还要再 "
                   "__syncthreads() 一次，TODO(4) 才能改写 red。",
    "uninitialized-read": "red 只有前 n_warps 个槽位被写过：lane >= n_warps 的线程取单位元（最大值取 -INFINITY，和取 0.0f），"
                          "不要读 red[lane]。n_warps 按 blockDim.x / 32 计算，不要写死。",
    "out-of-bounds": "行尾之外的线程不能读写：三个循环都是 j < cols；row_buf 只有 cols 个 float；行偏移是 row * cols。",
    "barrier-divergence": "__syncthreads() 写在 if (lane == 0) 的外面：线程块里的每个线程都要到达它。",
    "warp-sync": "warp_max / warp_sum 要整个 warp 一起调用（FULL_MASK）：不要把它们放进只有一部分 lane 执行的分支，"
                 "没有对应 warp 的 lane 取单位元再参加洗牌。",
}


def make_op(path: Path, mode: str, block: int = DEFAULT_BLOCK, kernel: str = KERNEL):
    """课程的算子接口：``softmax(x, dim=1, out=None)``，检查输入后启动学习者的内核
    （grid = 行数，block = ``block``，动态共享内存 cols 个 float，以 ``-DBLOCK_SIZE=block`` 编译）。
    返回 ``(out, report)``：sim 模式下 report 是模拟器的计数器，gpu 模式下是 None。"""
    from ..cuda_kernels import launch

    device = "cuda" if mode == "gpu" else "cpu"

    def softmax(x, dim=1, out=None):
        C.check_rows_input(x, dim, device)
        M, N = x.shape
        if N > MAX_COLS:
            raise ValueError(f"整行要放进共享内存：N = {N} 超过 {MAX_COLS}（48 KiB 的 float）"
                             f"(row of {N} floats does not fit 48 KiB of shared memory)")
        if out is None:
            out = torch.empty((M, N), dtype=torch.float32, device=x.device)
        else:
            check_out(out, (M, N), x.dtype, x.device)
        rep = launch(path, kernel, grid=M, block=block, args=(out, x, M, N), shared_bytes=N * 4,
                     defines={"BLOCK_SIZE": block}, mode=mode)
        return out, rep

    def op(x, dim=1, out=None):
        return softmax(x, dim, out)[0]

    op.with_report = softmax
    return op


def warp_max_model(x: torch.Tensor, block: int) -> torch.Tensor:
    """块内最大值只做了 warp 内那一级时内核算出的结果（float64）：第 j 列由线程 j % block 处理，属于
    warp (j % block) // 32，它的 exp 以那个 warp 见过的最大值为基准，分母是这些值的总和。"""
    x = x.double()
    M, N = x.shape
    warp = (torch.arange(N) % block) // 32
    m = torch.full((M, int(warp.max()) + 1), float("-inf"), dtype=torch.float64)
    m = m.scatter_reduce(1, warp.expand(M, N), x, reduce="amax")
    e = torch.exp(x - m.gather(1, warp.expand(M, N)))
    return e / e.sum(dim=1, keepdim=True)


class SoftmaxCuda(Lab):
    name = "softmax-cuda"
    title = "CUDA C：融合softmax（整行留在共享内存里）"
    lecture = "triton/fused-softmax.md"
    notebook = "labs/softmax-cuda.ipynb"
    files = (FILE,)
    backend = "cuda"
    kernel = KERNEL

    def cases(self, mode):
        return C.softmax_cuda_cases(mode)

    def load(self, paths, mode):
        path = paths[FILE]
        text = path.read_text(encoding="utf-8")
        block = block_size_from(text)
        check_row_signature(path, KERNEL, {"BLOCK_SIZE": block})   # 解析一遍：语法错误在这里报出
        return {"op": make_op(path, mode, block), "path": path, "mode": mode, "block": block, "text": text,
                "static": block_size_hint(FILE, text)}

    def run_case(self, impl, case: Case, mode):
        block = case.block or impl["block"]
        # 访存计数：两种模式都在模拟器里运行（计数器是精确的），输入也在 CPU 上
        run_mode = "sim" if case.kind == "memory" else mode
        op = impl["op"] if case.block is None and run_mode == mode else make_op(impl["path"], run_mode, block)
        if case.kind == "error":
            return C.run_error_case(op, case, mode, out_shape=lambda x: x.shape)
        x = C.make_input(case, run_mode)
        out = torch.full(x.shape, float("nan"), dtype=torch.float32, device=x.device)   # 没写的元素是 NaN
        _, rep = op.with_report(x, out=out)
        if run_mode == "gpu":
            torch.cuda.synchronize()
        ref = torch.softmax(x.double(), dim=1)
        atol, rtol = softmax_tolerance(torch.float32)
        ok, err, bad = compare(out, ref, atol, rtol)
        if not ok:
            def writes_output() -> bool:
                """同一个内核是否写了输出（全是 NaN 时分不清「没写」与 0/0）：:func:`never_written`。"""
                return not bool(never_written(op, x, x.shape).all())

            return False, err, f"行 {rows_text(bad)} 不对", self.wrong_answer(case, x, out, ref, bad, impl,
                                                                            writes_output)
        if case.kind == "memory":
            M, N = x.shape
            if rep.global_load_bytes != 4 * M * N or rep.global_store_bytes != 4 * M * N:
                return False, err, "访存量不对", self.memory_hint(rep, M, N, impl)
            return True, err, f"读 {rep.global_load_bytes // 4}、写 {rep.global_store_bytes // 4} 个 float", None
        return True, err, "", None

    def memory_hint(self, rep, M, N, impl) -> Hint:
        text = impl["text"]
        loads, stores = rep.global_load_bytes // 4, rep.global_store_bytes // 4
        detail = (f"模拟器的计数器：从显存读了 {loads} 个 float、写了 {stores} 个，应为 MN = {M * N} 与 MN = {M * N}"
                  f"（每行读 {loads / (M * N):.2g} 遍）")
        if loads > M * N:
            return Hint("memory-loads", f"每行从显存读了 {loads / (M * N):.2g} 遍：融合 softmax 只读一遍", FILE,
                        find_line(text, r"expf\s*\(\s*row_in") or find_line(text, r"row_out\s*\[.*row_in")
                        or find_line(text, r"=\s*row_in\s*\["), detail,
                        "TODO(1) 已经把整行放进 row_buf：TODO(3) 与 TODO(5) 读 row_buf[j]，不要再读 row_in[j]。")
        if stores > M * N:
            return Hint("memory-stores", "写得比 MN 多：同一个输出写了不止一次", FILE, find_line(text, r"row_out\s*\["),
                        detail, "只在 TODO(5) 写 row_out，每个元素写一次。")
        return Hint("memory-count", "读写的元素比 MN 少", FILE, None, detail, "每行的每个元素都要读到、写到。")

    def wrong_answer(self, case, x, out, ref, bad, impl, writes_output=lambda: True) -> Hint:
        text = impl["text"]
        got = out.detach().cpu().double()
        ref = ref.detach().cpu().double()
        xs = x.detach().cpu().double()
        r = bad[0]
        first = first_bad_row(ref, got, bad)
        g = got[bad]
        if torch.isnan(got).all() and case.kind in ("far-negative", "large") and not writes_output():
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN；普通的输入上也是）", FILE,
                        find_line(text, r"row_out\s*\["), first,
                        "TODO(5)：row_out[j] = row_buf[j] / s，按步长 blockDim.x 写回整行。")
        if case.kind in ("far-negative", "large") and not torch.isfinite(g).all() and not _exp_subtracts(text):
            return Hint("no-max-subtraction", "exp 之前没有减去行最大值：数值很大时上溢成 inf，"
                        "整行是很大的负数时全部下溢成 0（0 / 0 = NaN）", FILE, find_line(text, r"exp2?f\s*\("), first,
                        "先减去行最大值再取指数：expf(row_buf[j] - m) 至多是 1，最大的那一项正好是 1，"
                        "分母至少是 1，结果不变。")
        if case.kind == "far-negative" and not torch.isfinite(g).all():
            return Hint("max-init", "整行都是很大的负数时得到 NaN：最大值的初值不是 -inf", FILE,
                        find_line(text, r"\bm\s*=\s*0") or find_line(text, r"float\s+m\b"), first,
                        "float m = -INFINITY;：行尾之外的线程（以及还没读到元素的线程）不能改变最大值。初值 0 比整行都大时，"
                        "exp(x - 0) 全部下溢成 0，分母是 0，0 / 0 = NaN。")
        if case.kind == "large" and not torch.isfinite(g).all():
            return Hint("no-max-subtraction", "数值很大的行得到 inf 或 NaN：exp 溢出了", FILE,
                        find_line(text, r"expf\s*\("), first,
                        "先减去行最大值再取指数：expf(row_buf[j] - m) 至多是 1，不会溢出，结果不变。")
        if torch.isnan(got).all():
            return Hint("not-written", "输出没有被写入（评分前输出填满了 NaN）", FILE, find_line(text, r"row_out\s*\["),
                        first, "TODO(5)：row_out[j] = row_buf[j] / s，按步长 blockDim.x 写回整行。")
        mx = xs.max(dim=1, keepdim=True).values
        if torch.allclose(g, torch.exp(xs - mx)[bad], rtol=1e-4, atol=1e-7):
            return Hint("no-normalize", "输出是 exp(x - m)，没有除以和：每行的和不是 1", FILE,
                        find_line(text, r"row_out\s*\["), first, "TODO(5)：row_out[j] = row_buf[j] / s。")
        block = case.block or impl["block"]
        if torch.isfinite(g).all() and torch.allclose(g, warp_max_model(xs, block)[bad], rtol=1e-4, atol=1e-7):
            return Hint("partial-max", "每个 warp 用了自己的最大值：块内最大值只做了 warp 内的那一级", FILE,
                        find_line(text, r"warp_max\s*\(\s*m\s*\)"), first,
                        "TODO(2)：warp_max 之后还要经 red 合并各 warp 的最大值（lane 0 写 red[warp]、__syncthreads()、"
                        "每个线程读回 n_warps 个槽位再 warp_max 一次）；各 warp 的 exp(x - m) 基准不同，"
                        "加起来的分母就不是同一个量。")
        ratio = g / ref[bad]
        sums = g.sum(dim=1)
        per_row = ratio.nan_to_num(0).max(dim=1).values
        if torch.isfinite(g).all() and bool((sums > 1 + 1e-3).all()) and torch.allclose(
                ratio, per_row[:, None].expand_as(ratio), rtol=1e-3):
            return Hint("partial-sum", f"每行的值都按同一个倍数偏大（第 {r} 行的和是 {sums[0].item():.4g}）："
                        "分母只是一部分线程的和", FILE, find_line(text, r"warp_sum\s*\("), first,
                        "TODO(4)：各 warp 的 lane 0 写 red[warp]，__syncthreads()，每个线程再读回全部 n_warps 个槽位"
                        "（其余取 0.0f）、warp_sum 一次，人人都拿到整行的和。")
        return Hint("wrong-softmax", "softmax 的值不对", FILE, None,
                    first + f"\n第 {r} 行的和是 {sums[0].item():.4g}（softmax 每行的和是 1）",
                    "对照讲义：读进 row_buf 求最大值、expf(x - m) 求和、除以和；检查行偏移 row * cols 与两次块内归约。")

    def on_error(self, case, exc, paths):
        return cuda_error_hint(exc, FILE, KERNEL, paths[FILE].read_text(encoding="utf-8"), ROW_PARAMS, FIXES)

    def final_checks(self, impl, mode, paths):
        """全部用例通过之后：模拟器里数一遍全局内存的读请求，整行是不是由一个线程块的线程一起读的。"""
        M, N = 2, 4096
        x = torch.randn(M, N, generator=torch.Generator().manual_seed(3))
        _, rep = make_op(impl["path"], "sim", impl["block"]).with_report(x)
        return load_request_check(rep, M, N, FILE, impl["text"], r"row_in\s*\[")

    def extra_checks(self, impl, mode, paths):
        """模拟器检查用学习者的 BLOCK_SIZE，也用 32 与 96 个线程：行比线程数短（行尾之外的线程），
        第二级里没有对应 warp 的 lane，以及 red 的两次使用之间的屏障。"""
        return block_sizes_precheck(self, impl, mode, paths, lambda x: torch.full(x.shape, float("nan")),
                                    shared_bytes=lambda N: 4 * N)

    def bench(self, impl):
        return softmax_bench(impl["op"], f"，block = {impl['block']}")


_EXP_CALL = re.compile(r"\b(?:__)?exp2?f?\s*\(")


def _exp_subtracts(text: str) -> bool:
    """源码里（注释除外）至少有一处 expf / __expf / exp 的参数里有减号：学习者减去了某个最大值。"""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    found = False                       # 一处 exp 也没找到（别的写法）：说不准，当作减过
    for m in _EXP_CALL.finditer(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if "-" in code[m.end():i - 1]:
            return True
        found = True
    return not found

