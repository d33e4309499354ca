"""实验 bank-conflicts：让分块转置读写共享内存都没有存储体冲突。

讲义：docs/cuda/bank-conflicts.md；实验页：docs/labs/bank-conflicts.ipynb。
评分：转置的结果（精确相等）；模拟器的冲突计数（额外的波前 = 0）；gpu 模式下实测比
课程的 32 路冲突版本（bank_conflicts.cu 的 ``transpose_conflict``）快至少 :data:`MIN_SPEEDUP` 倍。
"""

from __future__ import annotations

import torch

from .core import Lab, cuda_precheck, time_against
from .grading import Case, Hint, find_line
from .hints import compile_hint, kernel_name_hint, simt_hint

FILE = "transpose.cu"
KERNEL = "transpose_kernel"
TILE, BLOCK_ROWS = 32, 8
#: gpu 模式下要求的提速（H200 上补一列的版本约为冲突版本的 2 倍快）
MIN_SPEEDUP = 1.5
#: 通用诊断换成这个内核的改法
FIXES = {
    "shared-race": "所有线程把自己的元素写进 tile 之后、任何线程按列读 tile 之前，要有一次 __syncthreads()。",
    "out-of-bounds": "读入时检查 c < cols && r + j < rows，写出时检查 oc < rows && orow + j < cols（是 <，不是 <=）；"
                     "输出是 cols x rows，行距是 rows。",
    "uninitialized-read": "写入 tile 和读出 tile 要用同一个行距 ld；分块的大小要装得下 32 行 x ld 列。",
}
BENCH_SHAPE = (8192, 8192)


def _grid(rows: int, cols: int):
    return (-(-cols // TILE), -(-rows // TILE))


def transpose(path, x: torch.Tensor, mode: str, kernel: str = KERNEL) -> torch.Tensor:
    """用 ``path`` 里的内核转置 ``x``；sim 模式返回 (结果, 模拟器报告)。"""
    from ..cuda_kernels import launch

    rows, cols = x.shape
    out = torch.full((cols, rows), float("nan"), dtype=torch.float32, device=x.device)
    rep = launch(path, kernel, grid=_grid(rows, cols), block=(TILE, BLOCK_ROWS), args=(x, out, rows, cols), mode=mode)
    return out, rep


class BankConflicts(Lab):
    name = "bank-conflicts"
    title = "CUDA C：消除存储体冲突"
    lecture = "cuda/bank-conflicts.md"
    notebook = "labs/bank-conflicts.ipynb"
    files = (FILE,)
    backend = "cuda"

    def cases(self, mode):
        cases = [Case("转置", s) for s in [(32, 32), (64, 96), (33, 70), (100, 37), (1, 1)]]
        cases.append(Case("存储体冲突（模拟器计数）", (64, 64), kind="conflicts"))
        if mode == "gpu":
            cases += [Case("转置：大形状", (4096, 3000), gpu_only=True),
                      Case(f"比冲突版本快 {MIN_SPEEDUP} 倍", BENCH_SHAPE, kind="speedup", gpu_only=True)]
        return cases

    def load(self, paths, mode):
        from ..cuda_kernels import kernel_signature

        sig = kernel_signature(paths[FILE], KERNEL)
        got = [t.replace(" ", "") for _, t, _ in sig]
        if got != ["constfloat*", "float*", "int", "int"]:
            raise TypeError(f"{KERNEL} 的参数应为 (const float *in, float *out, int rows, int cols)，"
                            f"得到 ({', '.join(f'{t} {n}' for n, t, _ in sig)})")
        path = paths[FILE]
        return {"path": path, "text": path.read_text(encoding="utf-8"),
                "op": lambda x: transpose(path, x, mode)[0]}

    def run_case(self, impl, case: Case, mode):
        path = impl["path"]
        if case.kind == "speedup":
            return self._speedup(impl)
        g = torch.Generator().manual_seed(sum(case.shape))
        x = torch.randn(*case.shape, generator=g)
        run_mode = "sim" if case.kind == "conflicts" else mode
        x = x if run_mode == "sim" else x.cuda()
        out, rep = transpose(path, x, run_mode)
        if run_mode == "gpu":
            torch.cuda.synchronize()
        if not torch.equal(out.cpu(), x.cpu().t()):
            nan = torch.isnan(out).sum().item()
            detail = f"{nan} 个输出没有被写入（仍是 NaN）" if nan else "输出与 x.T 不相等"
            return False, None, "转置不对", Hint(
                "wrong-transpose", "转置的结果不对", FILE, find_line(impl["text"], r"=\s*tile\s*\["), detail,
                "写入 tile 和读出 tile 必须用同一个行距 ld；分块的大小要装得下 32 行 x ld 列。")
        if case.kind != "conflicts":
            return True, 0.0, "", None
        extra = rep.shared_load_bank_conflicts + rep.shared_store_bank_conflicts
        note = (f"读 {rep.shared_load_requests} 次请求 {rep.shared_load_wavefronts} 个波前，"
                f"写 {rep.shared_store_requests} 次请求 {rep.shared_store_wavefronts} 个波前")
        if extra == 0:
            return True, None, note, None
        if rep.shared_load_bank_conflicts:
            ways = rep.shared_load_wavefronts / max(1, rep.shared_load_requests)
            line, what = find_line(impl["text"], r"=\s*tile\s*\["), "读"
        else:
            ways = rep.shared_store_wavefronts / max(1, rep.shared_store_requests)
            line, what = find_line(impl["text"], r"tile\s*\[[^\]]*\]\s*="), "写"
        return False, None, note, Hint(
            "bank-conflict", f"{what}共享内存仍有存储体冲突：平均每次请求 {ways:.1f} 个波前（{ways:.0f} 路冲突）",
            FILE, line, f"额外的波前：读 {rep.shared_load_bank_conflicts}，写 {rep.shared_store_bank_conflicts}（应为 0）",
            "一个 warp 的 32 个线程读同一列时，地址相差 ld 个字，第 k 个线程落在存储体 (k * ld) % 32："
            "ld 与 32 的最大公约数是几，就是几路冲突（ld = 32 时 32 路，ld = 34 时 2 路）。"
            "行距要与 32 互质，最省的是 33（分块声明成 TILE * (TILE + 1)），写入和读出都用它。")

    def extra_checks(self, impl, mode, paths):
        from .. import simt

        x = torch.randn(33, 70, generator=torch.Generator().manual_seed(1))

        def run(steps):
            out = torch.full((70, 33), float("nan"))
            simt.launch(str(impl["path"]), KERNEL, _grid(33, 70), (TILE, BLOCK_ROWS), (x, out, 33, 70),
                        max_lane_steps=steps)

        return cuda_precheck(self, mode, paths, run, "33x70")

    def _speedup(self, impl):
        from ..cuda_kernels import launch

        rows, cols = BENCH_SHAPE
        x = torch.randn(rows, cols, device="cuda")
        out = torch.empty(cols, rows, device="cuda")
        grid = _grid(rows, cols)

        def call(path, kernel):
            return lambda: launch(path, kernel, grid=grid, block=(TILE, BLOCK_ROWS), args=(x, out, rows, cols))

        _, rows_t = time_against({"你的内核": call(impl["path"], KERNEL),
                                  "transpose_conflict": call("bank_conflicts.cu", "transpose_conflict")},
                                 2 * x.numel() * 4, x, "")
        mine, conflict = rows_t[0].ms, rows_t[1].ms
        speedup = conflict / mine
        note = f"{speedup:.2f} 倍（{mine * 1e3:.0f} µs 对 {conflict * 1e3:.0f} µs）"
        if speedup >= MIN_SPEEDUP:
            return True, None, note, None
        return False, None, note, Hint("too-slow", f"只比冲突版本快 {speedup:.2f} 倍（要求 {MIN_SPEEDUP} 倍）", FILE,
                                       None, fix="先让模拟器的冲突计数变成 0。")

    def on_error(self, case, exc, paths):
        text = paths[FILE].read_text(encoding="utf-8")
        h = simt_hint(exc, FILE, text, FIXES) or compile_hint(exc, FILE) or kernel_name_hint(exc, FILE, KERNEL, text)
        if h is not None:
            return h
        return Hint("exception", f"运行时抛出 {type(exc).__name__}", FILE, None, detail=str(exc)[:600])

    def bench(self, impl):
        from ..cuda_kernels import launch

        rows, cols = BENCH_SHAPE
        x = torch.randn(rows, cols, device="cuda")
        out = torch.empty(cols, rows, device="cuda")
        same = torch.empty_like(x)
        grid = _grid(rows, cols)

        def call(path, kernel, dst):
            return lambda: launch(path, kernel, grid=grid, block=(TILE, BLOCK_ROWS), args=(x, dst, rows, cols))

        return time_against({"你的内核": call(impl["path"], KERNEL, out),
                             "transpose_conflict（32 路冲突）": call("bank_conflicts.cu", "transpose_conflict", out),
                             "copy_tile（不转置）": call("bank_conflicts.cu", "copy_tile", same)},
                            2 * x.numel() * 4, x, f"{rows}x{cols} float32")
