"""实验 vector-loads-cuda：bfloat16 的按行求和，主循环每个线程一次读 16 字节（CUDA C）。

讲义：docs/cuda/tree-reduction.md（16字节一包：对齐与请求数）、docs/triton/half-precision.md；实验页：docs/labs/vector-loads.ipynb。
内核 ``vec_row_sum_kernel(float *out, const __nv_bfloat16 *in, int64_t rows, int64_t cols)``，一行一个线程块，
结果是 float32。每行分三段：行首到第一个 16 字节边界（逐个读）、整包（``pack8``，一条 128 位的加载）、结尾不足一包的
元素（逐个读）。启动与评分同 :mod:`.reduce_sum_cuda`：sim 模式在模拟器里，gpu 模式先在模拟器里跑一个行首不对齐的
小用例（16 字节的加载不对齐时，GPU 报 misaligned address，这个进程里的 CUDA 上下文从此不能再用）。

诊断：没有先读到 16 字节边界（模拟器报出不对齐的加载）、漏了结尾、开头没有限制在 cols 之内、整包的步长不对、
主循环没有用整包（模拟器数出的加载请求是整包的 8 倍）、没写，以及模拟器的越界与竞争。
"""

from __future__ import annotations

import torch

from ..checks import check_out
from . import cases as C
from .core import Lab, cuda_precheck, time_against
from .grading import Case, Hint, Mismatch, compare, find_line, row_sum_tolerance, rows_text
from .hints import cuda_error_hint
from .reduce_sum_cuda import check_signature

FILE = "vec_row_sum.cu"
KERNEL = "vec_row_sum_kernel"
BLOCK = 256
VEC = 8
PARAMS = "(float *out, const __nv_bfloat16 *in, int64_t rows, int64_t cols)"
SIGNATURE = ["float *", "const __nv_bfloat16 *", "int64_t", "int64_t"]

FIXES = {
    "out-of-bounds": "每一段都要留在这一行里：开头 head 不超过 cols，整包只读 k < n_pack，结尾从 head + VEC * n_pack 读到 cols - 1。",
}


def heads(x: torch.Tensor, clamp: bool = True) -> list[int]:
    """每行行首到下一个 16 字节边界的元素数，与内核的 TODO(1) 相同（``clamp=False``：不限制在 N 之内）。"""
    M, N = x.shape
    out = []
    for r in range(M):
        addr = x.data_ptr() + r * x.stride(0) * x.element_size()
        h = ((16 - addr % 16) % 16) // x.element_size()
        out.append(min(h, N) if clamp else h)
    return out


def model(x: torch.Tensor, hs: list[int], part: str, block: int = BLOCK) -> torch.Tensor:
    """几种错误在 float64 里的结果：``part`` 是 "no-tail"（漏了结尾）、"no-head"（漏了开头）、"packs-only"，
    或 "pack-stride-1"（整包的步长写成 1：第 k 包被线程 0 .. min(k, block - 1) 各读了一次）。"""
    xs = x.detach().cpu().double()
    M, N = xs.shape
    out = torch.empty(M, dtype=torch.float64)
    for r, h in enumerate(hs):
        n_pack = (N - h) // VEC
        packs = xs[r, h:h + VEC * n_pack].reshape(n_pack, VEC).sum(1)
        body = packs.sum()
        head = xs[r, :h].sum()
        tail = xs[r, h + VEC * n_pack:].sum()
        if part == "pack-stride-1":
            times = torch.clamp(torch.arange(n_pack, dtype=torch.float64) + 1, max=block)
            out[r] = head + tail + (packs * times).sum()
            continue
        out[r] = {"no-tail": head + body, "no-head": body + tail, "packs-only": body}[part]
    return out


def unclamped_model(x: torch.Tensor) -> torch.Tensor:
    """开头没有限制在 cols 之内（head 取到边界为止）时的和：短行多读了下一行开头的元素
    （整包数 (N - head) / 8 在 C 里向零取整成 0，结尾从 head 起，也不读）。"""
    xs = x.detach().cpu().double().reshape(-1)
    M, N = x.shape
    return torch.stack([xs[r * N:r * N + max(h, N)].sum() for r, h in enumerate(heads(x, clamp=False))])


def make_op(path, mode: str, block: int = BLOCK):
    """课程的算子接口：``row_sum(x, dim=1, out=None)``，x 是 bfloat16 的 (M, N)，结果是 float32 的 (M,)。"""
    from ..cuda_kernels import launch

    device = "cuda" if mode == "gpu" else "cpu"

    def row_sum(x, dim=1, out=None):
        out, _ = with_report(x, dim, out)
        return out

    def with_report(x, dim=1, out=None):
        C.check_rows_input(x, dim, device, dtypes=(torch.bfloat16,))
        M, N = x.shape
        if out is None:
            out = torch.empty(M, dtype=torch.float32, device=x.device)
        else:
            check_out(out, (M,), torch.float32, x.device)
        rep = launch(path, KERNEL, grid=M, block=block, args=(out, x, M, N), defines={"BLOCK_SIZE": block}, mode=mode)
        return out, rep

    row_sum.with_report = with_report
    return row_sum


class VectorLoadsCuda(Lab):
    name = "vector-loads-cuda"
    title = "CUDA C：16字节的向量加载（bfloat16按行求和）"
    lecture = "cuda/tree-reduction.md"
    notebook = "labs/vector-loads.ipynb"
    files = (FILE,)
    backend = "cuda"
    kernel = KERNEL

    def cases(self, mode):
        return C.vector_loads_cases(mode)

    def load(self, paths, mode):
        path = paths[FILE]
        check_signature(path, KERNEL, {"BLOCK_SIZE": BLOCK}, SIGNATURE, PARAMS)   # 解析一遍：语法错误在这里报出
        return {"op": make_op(path, mode), "path": path, "text": path.read_text(encoding="utf-8"), "block": BLOCK}

    def run_case(self, impl, case: Case, mode):
        block = case.block or impl["block"]
        # 访存计数：两种模式都在模拟器里运行（计数器是精确的）
        run_mode = "sim" if case.kind == "memory" else mode
        op = impl["op"] if case.block is None and run_mode == mode else make_op(impl["path"], run_mode, block)
        if case.kind == "error":
            return C.run_error_case(op, case, mode)
        x = C.make_input(case, run_mode)
        out = torch.full((x.shape[0],), float("nan"), dtype=torch.float32, device=x.device)   # 没写的行是 NaN
        _, rep = op.with_report(x, out=out)
        if run_mode == "gpu":
            torch.cuda.synchronize()
        ref = x.double().sum(dim=1)
        atol, rtol = row_sum_tolerance(x)
        ok, err, bad = compare(out, ref, atol, rtol)
        if not ok:
            return False, err, f"行 {rows_text(bad)} 不对", self.wrong_answer(case, x, out, ref, bad, impl, block)
        if case.kind == "memory":
            M, N = x.shape
            want = scalar = 0
            for h in heads(x):
                n_pack = (N - h) // VEC
                edge = N - VEC * n_pack
                want += -(-n_pack // 32) + 2 * -(-edge // 32)     # 至多：每 32 包一次请求，开头与结尾各自逐个读
                scalar += -(-N // 32)
            loads = rep.global_load_requests
            if rep.global_load_bytes != 2 * M * N:
                return False, err, "访存量不对", Hint(
                    "memory-loads", f"从显存读了 {rep.global_load_bytes} 字节，应为 2MN = {2 * M * N}", FILE,
                    find_line(impl["text"], r"row_in\s*\["),
                    "模拟器的计数器：每个元素正好读一次（开头、整包、结尾三段不重叠）",
                    "开头是 row_in[0 .. head)，整包从 row_in + head 起，结尾从 head + VEC * n_pack 起。")
            if loads > want:
                return False, err, "加载请求太多", Hint(
                    "scalar-loads", f"加载请求是 {loads} 次：主循环没有整包读（逐个读要 {scalar} 次左右，整包至多 {want} 次）",
                    FILE, find_line(impl["text"], r"pk\s*\[") or find_line(impl["text"], r"row_in\s*\["),
                    f"模拟器的计数器：{M} 行 x {N} 列的 bfloat16 读了 {rep.global_load_bytes} 字节，{loads} 次 warp 级的加载请求。"
                    f"一个 warp 逐个读 bfloat16，一次请求是 64 字节；整包读一次请求是 512 字节",
                    "TODO(3)：主循环读 pk[k]（一个 pack8，16 字节），acc += sum_pack(pk[k])；只有两头逐个读。")
            return True, err, f"读 {rep.global_load_bytes} 字节、{loads} 次加载请求", None
        return True, err, "", None

    def wrong_answer(self, case, x, out, ref, bad, impl, block) -> Hint:
        text = impl["text"]
        mm = Mismatch(x, out, ref, bad, *row_sum_tolerance(x))
        got, same, first = mm.got, mm.same, mm.first_row()
        if torch.isnan(got).all():
            return Hint("not-written", "out[row] 没有被写入（评分前 out 填满了 NaN）", FILE, find_line(text, r"out\s*\["),
                        first, "最后一段已经写好（线程 0 写 out[row]）：检查 TODO 的代码有没有提前 return。")
        if bool((got == 0).all()) and not bool((mm.ref == 0).all()):
            return Hint("nothing-summed", "每行的和都是 0：还没有累加任何元素", FILE, find_line(text, r"\bacc\s*\+?="),
                        first, "TODO(2)–(4)：整包加到 acc 上，两头的元素也逐个加上；最后一段把 acc 归约成 out[row]。")
        hs = heads(x)
        N = x.shape[1]
        checks = [
            ("no-tail", model(x, hs, "no-tail"), "漏了结尾：最后不足一包的元素没有加（N 不是 8 的倍数、或行首不对齐时才少）",
             r"head\s*\+\s*VEC\s*\*\s*n_pack|j\s*<\s*cols", "TODO(4)：结尾是 row_in[head + VEC * n_pack .. cols)，"
             "从 head + VEC * n_pack + tid 开始，以 blockDim.x 为步长逐个读。"),
            ("no-head", model(x, hs, "no-head"), "漏了开头：行首到 16 字节边界之间的元素没有加", r"j\s*<\s*head",
             "TODO(4)：开头是 row_in[0 .. head)，同样按线程分、逐个读。"),
            ("packs-only", model(x, hs, "packs-only"), "只加了整包：开头和结尾都没有读", r"pk\s*\[",
             "TODO(4)：两头逐个读：row_in[0 .. head) 与 row_in[head + VEC * n_pack .. cols)。"),
            ("head-past-end", unclamped_model(x), f"行比到 16 字节边界还短时（N = {N}），head 超过了 cols：多读了下一行的开头",
             r"\bhead\s*=", "TODO(1)：head = min(到边界的元素数, cols)，比如 head = head < cols ? head : cols;"),
            ("pack-stride", model(x, hs, "pack-stride-1", block), "整包的步长不对：k 每次加 1，前面的包被好几个线程重复读了",
             r"k\s*\+=|k\+\+|\+\+k", "TODO(3)：for (int64_t k = tid; k < n_pack; k += blockDim.x)：线程之间按 blockDim.x 错开。"),
        ]
        main = find_line(text, r"sum_pack\s*\(\s*pk")
        for key, cand, cause, where, fix in checks:
            if same(cand):
                return Hint(key, cause, FILE, find_line(text, where) or main, first, fix)
        return Hint("wrong-sum", "和不对", FILE, None, first,
                    "三段要正好拼成整行、互不重叠：[0, head)、整包 [head, head + VEC * n_pack)、[head + VEC * n_pack, cols)；"
                    "整包的下标 k 从 tid 开始，以 blockDim.x 为步长。")

    def on_error(self, case, exc, paths):
        text = paths[FILE].read_text(encoding="utf-8")
        from ..simt.errors import SimtError

        if isinstance(exc, SimtError) and "misaligned" in str(exc):
            from .grading import error_line, zh_part

            return Hint("misaligned", "16 字节的加载不对齐：这一行的行首不在 16 字节边界上（GPU 上是 misaligned address，"
                                      "进程里的 CUDA 上下文从此不能再用）", FILE, error_line(exc), zh_part(str(exc))[:400],
                        "TODO(1)/(2)：先逐个读到 16 字节边界（head 个元素），整包从 row_in + head 开始："
                        "cols 不是 8 的倍数时，第 row 行的行首是 in + row * cols，对齐与否每行不同。")
        return cuda_error_hint(exc, FILE, KERNEL, text, PARAMS, FIXES)

    def extra_checks(self, impl, mode, paths):
        """gpu 模式：先在模拟器里跑一个行首不对齐的小用例（3 x 203）。不对齐的 16 字节加载在 GPU 上让整个进程的
        CUDA 上下文失效，模拟器在那之前报出行号。"""
        from .. import simt

        x = torch.randn(3, 203, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)

        def run(steps):
            simt.launch(str(impl["path"]), KERNEL, 3, 64, (torch.full((3,), float("nan")), x, 3, 203),
                        defines={"BLOCK_SIZE": 64}, max_lane_steps=steps)

        return cuda_precheck(self, mode, paths, run, "3x203 bfloat16，block = 64")

    def bench(self, impl):
        M, N = 16384, 4096
        x = torch.randn(M, N, device="cuda").to(torch.bfloat16)
        out = torch.empty(M, device="cuda")
        op = impl["op"]
        calls = {"你的内核": lambda: op(x, out=out), "x.sum(dim=1, dtype=float32)": lambda: torch.sum(x, dim=1, dtype=torch.float32, out=out)}
        return time_against(calls, x.numel() * 2 + M * 4, x, f"{M}x{N} bfloat16")
