"""评分用例：评分程序和计时共用同一份（形状、dtype、输入的构造、课程的报错约定）。

形状沿用课程原来的测试：(1, 128) (16, 128) (16, 256) (32, 128)，再加上不规整的形状
（N 不是 2 的幂、N 比线程数少、只有一行）、整行为负数和数值很大的行。gpu 模式另加大形状。
``kind == "error"`` 的用例是课程的报错约定：错误的 dim、不支持的 dtype、形状不对的 out、
转置的输入、一维输入，都必须抛出指明问题的异常。
"""

from __future__ import annotations

import dataclasses

import torch

from ..checks import check_matrix
from .grading import Case, Hint, Mismatch, compare, row_sum_tolerance, rows_text

SEED_SHAPES = [(1, 128), (16, 128), (16, 256), (32, 128)]

def error_cases(unsupported: torch.dtype = torch.float16) -> list[Case]:
    """课程的报错约定；``unsupported`` 是这个算子不支持的 dtype。"""
    name = str(unsupported).replace("torch.", "")
    return [
        Case("报错：dim=0", (16, 128), kind="error", bad="dim0", expect=ValueError),
        Case(f"报错：{name} 输入", (16, 128), unsupported, kind="error", bad="dtype", expect=TypeError),
        Case("报错：out 形状不对", (16, 128), kind="error", bad="out_shape", expect=ValueError),
        Case("报错：转置的输入", (16, 128), kind="error", bad="transposed", expect=ValueError),
        Case("报错：一维输入", (128,), kind="error", bad="1d", expect=ValueError),
    ]


def row_sum_cases(mode: str, extra: tuple[Case, ...] = ()) -> list[Case]:
    """行和的用例；``extra`` 插在报错用例之前（例如 warp 实验的不同线程块大小）。"""
    cases = [Case("课程用例", s) for s in SEED_SHAPES]
    cases += [
        Case("N 不是 2 的幂", (3, 1000)),
        Case("N 比线程数少", (5, 37)),
        Case("一行一列", (1, 1)),
        Case("整行为负数", (4, 513), kind="negative"),
    ]
    cases += list(extra)
    if mode == "gpu":
        cases += [Case("大形状", (1000, 5000), gpu_only=True), Case("大形状", (4096, 4097), gpu_only=True)]
    return cases + error_cases(torch.float16)


def warp_reduce_cases(mode: str) -> list[Case]:
    """warp-reduce-cuda：行和的用例（学习者文件里的 BLOCK_SIZE），另用 1 个、3 个（不是 2 的幂）和 32 个 warp
    的线程块各跑一次：第二级归约里有效的 warp 和可能只有 1 个，也可能正好 32 个。"""
    return row_sum_cases(mode, (
        Case("一个 warp（block = 32）", (3, 100), block=32),
        Case("3 个 warp（block = 96）", (4, 1000), block=96),
        Case("32 个 warp（block = 1024）", (2, 3000), block=1024),
    ))



def cluster_reduce_cases(mode: str) -> list[Case]:
    """cluster-reduce-cuda：行和的用例（学习者文件里的 BLOCK_SIZE 与 CLUSTER_SIZE），另加一行要走好几轮的长行
    （N 不是 簇 x 线程块 的倍数），一个 warp 的线程块，以及 2 块和 8 块（可移植的上限）的簇：
    步长里把簇大小写死成 4 的内核，在别的簇大小上漏掉或重复一些列。"""
    return row_sum_cases(mode, (
        Case("好几轮（N 不是 簇 x 线程块 的倍数）", (2, 5000)),
        Case("一个 warp（block = 32）", (3, 700), block=32),
        Case("2 块的簇、3 个 warp（block = 96）", (4, 1000), block=96, cluster=2),
        Case("8 块的簇", (2, 3000), cluster=8),
    ))


def softmax_cuda_cases(mode: str) -> list[Case]:
    """softmax-cuda：融合 softmax 的用例，另加整行是很大的负数（最大值的初值写成 0 时 0/0）、行比线程数短、
    1 个、3 个（不是 2 的幂）和 32 个 warp 的线程块；「访存计数」在模拟器里数从显存读写的字节。"""
    cases = [Case("课程用例", s) for s in SEED_SHAPES]
    cases += [
        Case("N 不是 2 的幂", (7, 1000)),
        Case("N 比线程数少", (5, 37)),
        Case("一行一列", (1, 1)),
        Case("整行为负数", (4, 1000), kind="negative"),
        Case("数值很大", (4, 300), kind="large"),
        Case("整行是很大的负数", (3, 300), kind="far-negative"),
        Case("一个 warp（block = 32）", (3, 100), block=32),
        Case("3 个 warp（block = 96）", (4, 1000), block=96),
        Case("32 个 warp（block = 1024）", (2, 3000), block=1024),
        Case("访存计数", (8, 781), kind="memory"),
    ]
    if mode == "gpu":
        cases += [Case("大形状", (1000, 5000), gpu_only=True), Case("大形状", (4096, 4097), gpu_only=True)]
    return cases + error_cases(torch.float16)


def full_sum_cases(mode: str) -> list[Case]:
    """full-sum-cuda：一维数组的和。n 从 1 到比整个网格的线程数多得多（每个线程要走几十轮网格步长），
    1 块与 3 块（不是 2 的幂）的网格，1 个、3 个与 32 个 warp 的线程块；「原子操作计数」在模拟器里数
    ``atomic_ops``（每块一次）与读的字节数。报错约定换成一维输入的：dtype、不连续、空数组、二维、out 的形状。"""
    cases = [
        Case("一个元素", (1,)),
        Case("比一个 warp 少", (31,)),
        Case("正好一个线程块", (256,)),
        Case("几个线程块", (1000,)),
        Case("网格步长好几轮", (20000,)),
        Case("网格步长几十轮", (100003,)),
        Case("全是负数", (5000,), kind="negative"),
        Case("只有一个线程块", (3000,), grid=1),
        Case("3 个线程块", (4097,), grid=3),
        Case("一个 warp（block = 32）", (1000,), block=32),
        Case("3 个 warp（block = 96）", (5000,), block=96),
        Case("32 个 warp（block = 1024）", (30000,), block=1024),
        Case("原子操作计数", (5000,), kind="atomics"),
    ]
    if mode == "gpu":
        cases += [Case("大数组", (1 << 24,), gpu_only=True), Case("大数组", ((1 << 26) + 5,), gpu_only=True)]
    return cases + [
        Case("报错：float16 输入", (128,), torch.float16, kind="error", bad="dtype", expect=TypeError),
        Case("报错：不连续的输入", (128,), kind="error", bad="strided", expect=ValueError),
        Case("报错：空数组", (0,), kind="error", bad="empty", expect=ValueError),
        Case("报错：二维输入", (16, 128), kind="error", bad="2d", expect=ValueError),
        Case("报错：out 形状不对", (128,), kind="error", bad="out_shape", expect=ValueError),
    ]


def grid_sum_cases(mode: str) -> list[Case]:
    """grid-sum-cuda：与 full-sum-cuda 同样的数组与报错约定；另有块比线程多的网格（0 号块的每个线程要读好几个
    部分和），「计数」在模拟器里数 ``atomic_ops``（应为 0）、``grid_barriers``（每块一次）与读的字节数。"""
    cases = [c for c in full_sum_cases(mode) if c.kind != "atomics"]
    i = next(k for k, c in enumerate(cases) if c.kind == "error")
    return cases[:i] + [Case("块比线程多（grid = 40, block = 32）", (5000,), grid=40, block=32),
                        Case("原子操作与网格屏障的计数", (5000,), kind="atomics")] + cases[i:]


def ordered_sum_cases(mode: str) -> list[Case]:
    """ordered-sum-cuda：与 grid-sum-cuda 同样的数组、网格与报错约定；「计数」在模拟器里数 ``*out`` 的写（每块一次
    普通的写）与读的字节数。"""
    return [Case("*out 的写与访存的计数", c.shape, kind="atomics") if c.kind == "atomics" else c
            for c in grid_sum_cases(mode)]


def softmax_cases(mode: str) -> list[Case]:
    cases = [Case("课程用例", s) for s in SEED_SHAPES]
    cases += [
        Case("N 不是 2 的幂", (7, 1000)),
        Case("N 不是 2 的幂", (3, 781)),
        Case("一行一列", (1, 1)),
        Case("整行为负数", (4, 1000), kind="negative"),
        Case("数值很大", (4, 300), kind="large"),
        Case("行距大于 N 的视图", (9, 50), kind="row-stride"),
        Case("访存计数", (8, 781), kind="memory"),
    ]
    if mode == "gpu":
        cases += [Case("大形状", (1000, 5000), gpu_only=True), Case("bfloat16", (256, 3000), torch.bfloat16,
                                                                     gpu_only=True)]
    return cases + error_cases(torch.int32)


def softmax_rows_cases(mode: str) -> list[Case]:
    """softmax-rows-triton：课程的形状换成 bfloat16（一个 program 装下好几行，(1, 128) 里只有一行是数据），
    另加 float32 与 float16、M 不是 BLOCK_M 的倍数、BLOCK_M = 1 与 16（``block`` 在这个实验里是 BLOCK_M）、
    整行为负数、数值很大、行距大于 N 的视图；访存计数读写各 MN 个元素。"""
    bf = torch.bfloat16
    cases = [Case("课程用例（bfloat16）", s, bf) for s in SEED_SHAPES]
    cases += [
        Case("float32", (16, 256)),
        Case("float16，N 不是 2 的幂", (3, 781), torch.float16),
        Case("M 不是 BLOCK_M 的倍数", (37, 100), bf),
        Case("一行一列", (1, 1), bf),
        Case("BLOCK_M = 1", (5, 300), bf, block=1),
        Case("BLOCK_M = 16，长一点的行", (20, 1000), bf, block=16),
        Case("整行为负数", (6, 1000), bf, kind="negative"),
        Case("数值很大", (4, 300), bf, kind="large"),
        Case("行距大于 N 的视图", (9, 50), bf, kind="row-stride"),
        Case("访存计数", (8, 781), bf, kind="memory"),
    ]
    if mode == "gpu":
        cases += [Case("大形状", (4096, 4097), bf, gpu_only=True),
                  Case("大形状", (100000, 64), torch.float16, gpu_only=True)]
    return cases + error_cases(torch.int32)


def vector_loads_cases(mode: str) -> list[Case]:
    """vector-loads-cuda：bfloat16 的按行求和。N 是 8 的倍数时每行都从 16 字节边界开始（课程的形状）；N 不是 8 的倍数时
    各行的行首错开（每行的开头 head 不同）；行比一包短、比到边界还短（1 列、5 列）；1 个与 32 个 warp 的线程块；
    「访存计数」在模拟器里数读的字节与 warp 级的加载请求。报错约定的输入是 bfloat16，不支持的 dtype 是 float32。"""
    bf = torch.bfloat16
    cases = [Case("课程用例（行首都对齐）", s, bf) for s in SEED_SHAPES]
    cases += [
        Case("N 不是 8 的倍数：行首不对齐", (7, 1003), bf),
        Case("N 比线程数少", (3, 37), bf),
        Case("行比一包短", (5, 5), bf),
        Case("一行一列", (3, 1), bf),
        Case("整行为负数", (4, 1001), bf, kind="negative"),
        Case("一个 warp（block = 32）", (3, 300), bf, block=32),
        Case("32 个 warp（block = 1024）", (2, 20001), bf, block=1024),
        Case("访存计数", (8, 1003), bf, kind="memory"),
    ]
    if mode == "gpu":
        cases += [Case("大形状", (4096, 4099), bf, gpu_only=True), Case("大形状", (1000, 8000), bf, gpu_only=True)]
    errors = [c if c.bad == "dtype" else dataclasses.replace(c, dtype=bf) for c in error_cases(torch.float32)]
    return cases + errors


def rms_norm_cases(mode: str) -> list[Case]:
    """rms-norm-triton：:func:`softmax_cases` 的形状，另加一行全是 0 的输入（没有 eps 时 0 / 0）；访存计数同 softmax。"""
    cases = softmax_cases(mode)
    at = next(i for i, c in enumerate(cases) if c.kind == "memory")
    return cases[:at] + [Case("有一行全是 0", (3, 300), kind="zero-row")] + cases[at:]


def col_sum_cases(mode: str) -> list[Case]:
    """col-sum-triton：M 与 N 都不是 32（块大小）的倍数、只有一行或一列、整列为负数、行距大于 N 的视图
    （行距写成 N 时才错）；访存计数读 MN、写 N。报错约定的「错误的 dim」是 dim=1。"""
    cases = [Case("课程用例", s) for s in SEED_SHAPES]
    cases += [
        Case("M、N 都不是 32 的倍数", (300, 700)),
        Case("N 比块窄", (100, 20)),
        Case("只有一行", (1, 1000)),
        Case("只有一列", (1000, 1)),
        Case("整列为负数", (70, 50), kind="negative"),
        Case("行距大于 N 的视图", (50, 40), kind="row-stride"),
        Case("访存计数", (100, 300), kind="memory"),
    ]
    if mode == "gpu":
        cases += [Case("大形状", (4096, 4097), gpu_only=True), Case("大形状", (100000, 33), gpu_only=True)]
    errors = error_cases(torch.float16)
    return cases + [Case("报错：dim=1", (16, 128), kind="error", bad="dim1", expect=ValueError)] + errors[1:]


def softmax_tilelang_cases(mode: str) -> list[Case]:
    """softmax-tilelang：:func:`softmax_cases` 去掉访存计数（TileLang 没有计数器）、行距大于 N 的视图（实验的内核
    要求各行首尾相接，输入检查拒绝这样的视图）与 bfloat16（实验只收 float32）；在「数值很大」之后另加整行是很大的
    负数：最大值里混进了补的 0（先求最大值、后换成 -inf，或 ``clear=False`` 的 ``T.reduce_max``）时 exp 全部下溢成 0，
    0 / 0。数值不大的行上 softmax 与减去哪个数无关，这样的错误测不出来。"""
    out = []
    for c in softmax_cases(mode):
        if c.kind in ("memory", "row-stride") or c.dtype == torch.bfloat16:
            continue
        out.append(c)
        if c.kind == "large":
            out.append(Case("整行是很大的负数", (3, 300), kind="far-negative"))
    return out


def device_of(mode: str) -> str:
    return "cuda" if mode == "gpu" else "cpu"


def make_input(case: Case, mode: str, seed: int = 0) -> torch.Tensor:
    """用例的输入：固定种子的正态分布；negative 整行为负（-5 - |z|）；large 乘以 1000；
    far-negative 整行是很大的负数（-1000 - 10|z|：减去 0 再取 exp 全部下溢成 0）；zero-row 第 1 行全是 0；
    inf-prefix 每行的前 2/3 是 -inf（长行的前几块全是 -inf）；constant-row 第 1 行全是 7（方差为 0）；
    tiny-var 是 3 + 0.001 z（方差 1e-6，比 LayerNorm 的 eps 小）；offset 是 1e4 + z（均值很大、方差很小）；
    row-stride 是更宽的矩阵（:func:`row_stride_base`）的前 N 列。"""
    g = torch.Generator().manual_seed(seed + sum(case.shape))
    x = torch.randn(*case.shape, generator=g, dtype=torch.float32)
    if case.kind == "negative":
        x = -5.0 - x.abs()
    elif case.kind == "large":
        x = x * 1000.0
    elif case.kind == "far-negative":
        x = -1000.0 - 10.0 * x.abs()
    elif case.kind == "zero-row":
        x[1] = 0.0
    elif case.kind == "constant-row":
        x[1] = 7.0
    elif case.kind == "tiny-var":
        x = 3.0 + 1e-3 * x
    elif case.kind == "offset":
        x = 1e4 + x
    elif case.kind == "inf-prefix":
        x[:, :case.shape[1] * 2 // 3] = float("-inf")
    elif case.kind == "row-stride":
        # 先搬到设备上再切片：非稠密的视图 .to() 之后是连续的拷贝，行距就不再大于 N
        return row_stride_base(case, seed).to(device=device_of(mode), dtype=case.dtype)[:, :case.shape[1]]
    return x.to(device=device_of(mode), dtype=case.dtype)


def read_with_stride_n(case: Case, dtype=torch.float32) -> torch.Tensor:
    """``kind == "row-stride"`` 的用例里，把行距当成 N 的内核读到的 (M, N)：更宽的矩阵（:func:`row_stride_base`）
    按行主序摊平后的前 MN 个元素。"""
    M, N = case.shape
    return row_stride_base(case).to(dtype).reshape(-1)[:M * N].reshape(M, N)


def row_stride_base(case: Case, seed: int = 0) -> torch.Tensor:
    """``kind == "row-stride"`` 的用例：x 是这个更宽（多 7 列）的矩阵的前 N 列，行距 N + 7。"""
    M, N = case.shape
    return torch.randn(M, N + 7, generator=torch.Generator().manual_seed(seed + M + N), dtype=torch.float32)


def run_row_sum_case(lab, impl, case: Case, mode: str, call):
    """行和用例（CUDA C 与 TileLang 实验共用）：``call(x)`` 返回输出；与 float64 的参考比较，
    不对时交给 ``lab.wrong_answer(Mismatch, impl)``。"""
    if case.kind == "error":
        return run_error_case(impl["op"], case, mode)
    x = make_input(case, mode)
    out = call(x)
    if mode == "gpu":
        torch.cuda.synchronize()
    ref = x.double().sum(dim=1)
    atol, rtol = row_sum_tolerance(x)
    ok, err, bad = compare(out.reshape(-1) if out.numel() == x.shape[0] else out, ref, atol, rtol)
    if ok:
        return True, err, "", None
    if out.numel() != x.shape[0]:
        return False, err, "形状不对", lab.wrong_shape(out, x, impl)
    return False, err, f"行 {rows_text(bad)} 不对", lab.wrong_answer(Mismatch(x, out, ref, bad, atol, rtol), impl)


# ---------------------------------------------------------------- 课程的报错约定

def check_rows_input(x, dim, device: str, dtypes=(torch.float32,)) -> None:
    """实验算子的输入检查：二维、非空、dtype、在正确的设备上、行主序连续，dim 是最后一维。"""
    check_matrix(x, "x", dtypes=dtypes, device=device)
    if dim not in (1, -1):
        raise ValueError(f"只支持沿最后一维（dim=1）归约，得到 dim={dim} (only dim=1 is supported, got {dim})")
    if x.shape[0] > 1 and x.stride(0) != x.shape[1]:
        raise ValueError(f"x 的行必须首尾相接（stride(0) == N），得到 stride {tuple(x.stride())}；先 .contiguous() "
                         f"(rows of x must be contiguous, got stride {tuple(x.stride())})")


def bad_call(op, case: Case, mode: str, out_shape):
    dev = device_of(mode)
    # 输入的 dtype：dtype 用例之外是用例的 dtype（只收 bfloat16 的实验用 bfloat16 的坏输入，别的都是 float32）
    base = torch.float32 if case.bad == "dtype" else case.dtype
    x = torch.randn(16, 128, device=dev).to(base)
    if case.bad == "dim0":
        return op(x, dim=0)
    if case.bad == "dim1":
        return op(x, dim=1)
    if case.bad == "dtype":
        return op(x.to(case.dtype))
    if case.bad == "out_shape":
        # 给一个多一行的 out（行和的 out 应为 (M,)，softmax 的应为 (M, N)）
        shape = tuple(out_shape(x))
        return op(x, out=torch.empty((shape[0] + 1,) + shape[1:], device=dev))
    if case.bad == "transposed":
        return op(torch.randn(128, 16, device=dev).to(base).t())
    if case.bad == "1d":
        return op(torch.randn(128, device=dev).to(base))
    raise AssertionError(case.bad)


def bad_vector_call(op, case: Case, mode: str):
    """一维输入的算子（全数组求和）的坏输入。"""
    dev = device_of(mode)
    if case.bad == "dtype":
        return op(torch.randn(128, device=dev).to(case.dtype))
    if case.bad == "strided":
        return op(torch.randn(256, device=dev)[::2])
    if case.bad == "empty":
        return op(torch.empty(0, device=dev))
    if case.bad == "2d":
        return op(torch.randn(16, 128, device=dev))
    if case.bad == "out_shape":
        return op(torch.randn(128, device=dev), out=torch.empty(1, device=dev))
    raise AssertionError(case.bad)


def run_vector_error_case(op, case: Case, mode: str):
    """运行一维输入的算子的一个报错用例。"""
    return run_error_case(op, case, mode, call=lambda: bad_vector_call(op, case, mode))


def run_error_case(op, case: Case, mode: str, out_shape=lambda x: x.shape[:1], call=None):
    """运行一个报错用例；``out_shape(x)`` 是正确的输出形状；``call()``：另一种构造坏输入的方式。"""
    try:
        if call is not None:
            call()
        else:
            bad_call(op, case, mode, out_shape)
    except case.expect as exc:
        return True, None, f"{type(exc).__name__}", None
    except Exception as exc:  # noqa: BLE001
        return False, None, type(exc).__name__, Hint(
            "error-contract", f"{case.name}：应抛出 {case.expect.__name__}，得到 {type(exc).__name__}",
            detail=str(exc)[:300])
    return False, None, "没有报错", Hint("error-contract", f"{case.name}：应抛出 {case.expect.__name__}，却没有报错",
                                       fix="在启动内核之前检查输入（reduction_lab.checks）。")
