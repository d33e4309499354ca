"""Triton 包装函数共用的小工具：块大小、warp 数、SM 数。"""

from __future__ import annotations

import functools

import triton

from ..runtime import MODE


def next_pow2(n: int) -> int:
    """>= n 的最小 2 的幂（n >= 1）。用整数运算：triton.next_power_of_2 每次调用要几微秒。"""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    """向上取整的整除（与 triton.cdiv 相同，但是普通的 Python 函数）。"""
    return -(-a // b)


def warps_for(block_elems: int) -> int:
    """按每个 program 处理的元素数选 warp 数：每个线程大约 8–32 个元素。"""
    if block_elems >= 32768:
        return 32
    if block_elems >= 8192:
        return 16
    if block_elems >= 2048:
        return 8
    return 4


@functools.lru_cache(maxsize=None)
def sm_count() -> int:
    """GPU 的 SM 数；sim 模式下返回 1（解释器一个接一个地运行 program）。"""
    if MODE != "gpu":
        return 1
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


if MODE == "sim":
    from ..triton_compat import install_index_fix, install_interpreter_lock

    install_index_fix()
    install_interpreter_lock()      # 解释器不是线程安全的：几个线程的启动依次执行


def hook_chains():
    """Triton 的两条启动钩子链 ``(knobs.runtime, enter, exit)``：Triton 3.5 起它们是 HookChain（``calls`` 是
    列表，装钩子就是往里追加）；较旧的 Triton（钩子是一个函数或 None）返回 None。"""
    try:
        from triton import knobs
    except ImportError:
        return None
    rt = knobs.runtime
    enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
    if isinstance(getattr(enter, "calls", None), list) and isinstance(getattr(leave, "calls", None), list):
        return rt, enter, leave
    return None


def _hooked(hook) -> bool:
    """启动钩子是否装了东西：旧版 Triton 用 None 表示没有，新版是一个 calls 为空的 HookChain。"""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return not (isinstance(calls, list) and not calls)


class FastLaunch:
    """``kernel[grid](*args, **constexprs)`` 的轻量版本（gpu 模式）：省掉 Triton 每次启动时的参数绑定、
    特化键计算与缓存查找。

    第一次遇到一种「特化」时走 Triton 的正常路径（编译并启动），记下它返回的已编译内核；之后同一特化
    直接调用已编译内核的启动器。特化键至少与 Triton 自己的一样细：张量看 dtype 与地址是否 16 字节对齐，
    整数看是否等于 1、是否是 16 的倍数、落在 i32 / i64 / u64 的哪个范围，constexpr 与 num_warps 看取值。
    运行时参数按位置给出（在所有 constexpr 之前），constexpr 与 num_warps 按关键字给出。
    有启动钩子（profiler）、sim 模式、或 Triton 的内部接口不是预期的样子时，总是走正常路径。
    """

    def __init__(self, kernel):
        self.kernel = kernel
        params = getattr(kernel, "params", None) or []
        self.n_runtime = sum(1 for p in params if not p.is_constexpr)
        ok = MODE == "gpu" and all(not p.is_constexpr for p in params[:self.n_runtime])
        # constexpr 参数的名字与默认值（按签名顺序）
        self.constexprs = [(p.name, p.default) for p in params[self.n_runtime:]] if ok else []
        self.enabled = ok and all(p.is_constexpr for p in params[self.n_runtime:])
        self.cache: dict = {}
        self.triton_entries: dict = {}           # 同一特化经 Triton 自己的 C 启动函数的缓存项（bound 用）
        self.compiled: dict = {}                 # 同一特化的已编译内核（reduction_lab.host 的编译版 runner 用）
        if self.enabled:
            import torch

            # 当前流的裸指针与设备号：直接用 torch._C 的函数，省掉每次的 Python 包装；
            # 没有 CUDA 的 torch（只编译、不运行内核时）没有它们，就不走快速路径
            self._stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            self._device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
            self.enabled = self._stream is not None
            self._tensor = torch.Tensor
            try:
                from triton import knobs

                self._hooks = knobs.runtime
            except ImportError:
                self.enabled = False

    def _key(self, args, kw_key):
        """(特化键, 传给启动器的参数)。张量换成它的地址（整数）：启动器对整数不再逐个向驱动查询指针属性，
        张量的设备已由调用者检查过（只在 reduction_lab 检查过输入的包装函数里使用）。"""
        key = [self._device(), kw_key]
        flat = []
        for a in args:
            if isinstance(a, self._tensor):
                p = a.data_ptr()
                key.append(a.dtype)
                key.append(p % 16 == 0)
                flat.append(p)
            elif isinstance(a, bool) or not isinstance(a, int):
                return None, None                # 只处理张量与整数参数
            else:
                # 1、16 的倍数、i32 / i64 / u64 范围：Triton 按这些特化整数参数
                key.append((a == 1) + 2 * (a % 16 == 0) + 4 * (-2**31 <= a < 2**31) + 8 * (a >= 2**63))
                flat.append(a)
        return tuple(key), flat

    def __call__(self, grid, *args, **kwargs):
        return self.launch(grid, args, kwargs, tuple(kwargs.items()))

    def _hooks_on(self) -> bool:
        return _hooked(self._hooks.launch_enter_hook) or _hooked(self._hooks.launch_exit_hook)

    def bound(self, key, grid, n_ptr: int, consts: tuple):
        """已经编译过的特化 ``key`` 的最短启动路径：返回 ``go(stream, *n_ptr 个地址)``，运行时参数的其余部分
        固定为 ``consts``（它们是特化键的一部分，调用者保证不变）；没有这个特化、有启动钩子、或缓存项的样子
        不认识时返回 None。经哪个启动器由 :data:`BOUND_LAUNCHER` 决定：``"triton"``（Triton 的 C 启动函数）或
        ``"torch"``（torch 的 C++ 启动器）。每次调用只剩一次 C 函数调用；钩子由调用者用 :meth:`quiet` 查。"""
        if not self.enabled or self._hooks_on():
            return None
        which = BOUND_LAUNCHER
        entry = self.triton_entries.get(key) if which == "triton" else self.cache.get(key)
        if entry is None or (which == "torch" and entry[0] != _TORCH):
            return None
        g0, g1, g2 = (tuple(grid) + (1, 1))[:3]
        how, fn, function, extra = entry
        if how == _TORCH:
            keep = function
            if keep is not None:
                if any(i not in keep for i in range(n_ptr)):
                    return None
                rest = tuple(consts[i - n_ptr] for i in keep if i >= n_ptr)
            else:
                rest = tuple(consts)
            if n_ptr == 2:
                return lambda stream, a, b: fn(g0, g1, g2, stream, a, b, *rest)
            return lambda stream, *ptrs: fn(g0, g1, g2, stream, *ptrs, *rest)
        if how == _V36:
            coop, pdl, packed, tail = extra
            rest = (*consts, *tail)
            if n_ptr == 2:
                return lambda stream, a, b: fn(g0, g1, g2, stream, function, coop, pdl, None, None, packed, None, None,
                                               None, a, b, *rest)
            return lambda stream, *ptrs: fn(g0, g1, g2, stream, function, coop, pdl, None, None, packed, None, None,
                                            None, *ptrs, *rest)
        if how == _NEW:
            coop, pdl, packed, ann, sig, tail = extra
            rest = (*consts, *tail)
            return lambda stream, *ptrs: fn(g0, g1, g2, stream, function, coop, pdl, packed, None, None, None, None,
                                            None, ann, sig, (*ptrs, *rest))
        packed, tail = extra
        rest = (*consts, *tail)
        return lambda stream, *ptrs: fn(g0, g1, g2, stream, function, packed, None, None, None, *ptrs, *rest)

    def quiet(self):
        """返回一个检查「Triton 没有装启动钩子」的无参函数，比 :meth:`_hooks_on` 便宜：钩子是 HookChain
        （Triton 3.5 起）时只看两条链是否为空、对象是否还是同一个；否则退回 :meth:`_hooks_on`。"""
        chains = hook_chains()
        if chains is not None:
            rt, enter, leave = chains
            return lambda: not enter.calls and not leave.calls and rt.launch_enter_hook is enter \
                and rt.launch_exit_hook is leave
        return lambda: not self._hooks_on()

    def _compile_and_store(self, grid, args, kwargs, key):
        compiled = self.kernel[grid](*args, **kwargs)
        if key is not None and hasattr(compiled, "packed_metadata") and callable(getattr(compiled, "run", None)):
            tail = tuple(kwargs.get(name, default) for name, default in self.constexprs)
            # 已编译内核的这几个属性每次访问都要经过 Python（旧版 Triton 重载了 __getattribute__）：取一次存起来
            triton_entry = _entry(compiled.run, compiled.function, compiled.packed_metadata, tail)
            self.cache[key] = _torch_entry(compiled, self.n_runtime) or triton_entry
            self.triton_entries[key] = triton_entry
            self.compiled[key] = compiled

    def launch(self, grid, args, kwargs: dict, kw_key):
        """``kw_key`` 是 ``kwargs`` 的可哈希形式（调用者可以预先算好，每次调用不再重建）。"""
        if not self.enabled or len(args) != self.n_runtime or self._hooks_on():
            return self.kernel[grid](*args, **kwargs)
        key, flat = self._key(args, kw_key)
        hit = self.cache.get(key) if key is not None else None
        if hit is None:
            self._compile_and_store(grid, args, kwargs, key)
            return None
        _call(hit, grid, self._stream(key[0]), flat)
        return None

    def launch_keyed(self, grid, key, device: int, flat, args, kwargs: dict):
        """热路径：调用者自己给出特化键 ``key``（必须至少与 Triton 的特化一样细，见 :meth:`_key`；
        同一个启动计划里 dtype、constexpr 与大部分整数参数已经固定，键只需要含会变的部分）和启动器参数
        ``flat``（指针已换成地址）。``args`` 是原始参数（张量），只在第一次编译时用到。"""
        hit = self.cache.get(key)
        if hit is None or not self.enabled or self._hooks_on():
            if not self.enabled or self._hooks_on():
                return self.kernel[grid](*args, **kwargs)
            self._compile_and_store(grid, args, kwargs, key)
            return None
        _call(hit, grid, self._stream(device), flat)
        return None


def fast_runner(launcher: FastLaunch, key, grid, device: int, n_rows: int, n_cols: int, dtype, row_sum: bool,
                runtime_args: tuple, alloc):
    """快速路径（:mod:`reduction_lab.fastcall`）的 runner，启动 ``launcher`` 已编译的特化 ``key``。
    ``runtime_args`` 是全部运行时参数：前两个是 ``"Y"``、``"X"``（输出与输入的地址），其余是定值（它们是
    特化键的一部分）；``alloc(x)`` 分配输出。能编译 :mod:`reduction_lab.host` 时返回它的编译版 runner，否则
    返回 Python 的 ``run(x)``（首地址不是 16 字节对齐或装了启动钩子时返回 None，由调用者走完整的路径）；
    没有这个特化时返回 None。"""
    import torch

    compiled = launcher.compiled.get(key)
    if compiled is not None and launcher.enabled and not launcher._hooks_on():
        from .. import host

        fast = host.triton_runner(compiled, launcher.n_runtime, grid, device, n_rows, n_cols, dtype, row_sum,
                                  runtime_args)
        if fast is not None:
            return fast
    go = launcher.bound(key, grid, 2, runtime_args[2:])
    if go is None:
        return None
    quiet = launcher.quiet()
    stream = torch._C._cuda_getCurrentRawStream

    def run(x2):
        px = x2.data_ptr()
        if px & 15 or not quiet():
            return None
        y = alloc(x2)
        py = y.data_ptr()
        if py & 15:
            return None
        go(stream(device), py, px)
        return y

    return run


#: :meth:`FastLaunch.bound` 默认用哪个启动器：H200 上两者一次只差零点几微秒（scripts/host_cost.py 的 floor 一项）
BOUND_LAUNCHER = "triton"

# 启动方式：新版 Triton 的 C 函数、Triton 3.6 的 C 函数、已编译内核的 run（通用）、或 torch 的 C++ 启动器
_NEW, _V36, _RUN, _TORCH = 0, 1, 2, 3


def _torch_entry(compiled, n_runtime: int):
    """能用 torch 自带的启动器（:mod:`reduction_lab.torch_launcher`）时的缓存项：(方式, 启动器, 保留的参数下标, None)。
    只用于最普通的内核：一个 CTA 一组（num_ctas = 1）、不要 scratch 内存、不是协作启动也不用 PDL；
    否则返回 None，照旧用 Triton 的启动器。"""
    from .. import torch_launcher

    if torch_launcher.kind() is None or not torch_launcher.plain_triton_kernel(compiled):
        return None
    meta = compiled.metadata
    types = torch_launcher.triton_arg_types(compiled, n_runtime)
    if types is None:
        return None
    tys, keep, n_scratch = types
    fn = torch_launcher.make(compiled.function, 32 * meta.num_warps, meta.shared, tys, n_scratch)
    return None if fn is None else (_TORCH, fn, keep, None)


def _entry(run, function, packed, tail):
    """缓存项：(方式, 启动函数, CUfunction, 额外参数)。内核不需要 scratch 内存（global / profile scratch
    都是 0 字节）、没有开 gsan 时，跳过 ``CudaLauncher.__call__`` 这一层 Python（它每次调用都要建几个闭包、
    查 scratch 分配器），直接调用它包着的 C 启动函数，参数与它传的相同。"""
    if getattr(run, "gsan_enabled", False) or not callable(getattr(run, "launch", None)) \
            or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1) \
            or not hasattr(run, "launch_cooperative_grid") or not hasattr(run, "launch_pdl"):
        return _RUN, run, function, (packed, tail)
    if hasattr(run, "arg_annotations") and hasattr(run, "kernel_signature"):
        # 新版：launch(gx, gy, gz, stream, fn, coop, pdl, packed, launch_metadata, 两个钩子, 两个 scratch,
        #             arg_annotations, kernel_signature, 参数元组)
        return _NEW, run.launch, function, (run.launch_cooperative_grid, run.launch_pdl, packed,
                                            run.arg_annotations, run.kernel_signature, tail)
    # Triton 3.6：launch(gx, gy, gz, stream, fn, coop, pdl, 两个 scratch, packed, launch_metadata, 两个钩子, *参数)
    return _V36, run.launch, function, (run.launch_cooperative_grid, run.launch_pdl, packed, tail)


def _call(entry, grid, stream, flat):
    how, fn, function, extra = entry
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    if how == _TORCH:                        # function 这一格是保留的参数下标（None：全部保留）
        fn(grid[0], g1, g2, stream, *(flat if function is None else [flat[i] for i in function]))
    elif how == _V36:
        coop, pdl, packed, tail = extra
        fn(grid[0], g1, g2, stream, function, coop, pdl, None, None, packed, None, None, None, *flat, *tail)
    elif how == _NEW:
        coop, pdl, packed, ann, sig, tail = extra
        fn(grid[0], g1, g2, stream, function, coop, pdl, packed, None, None, None, None, None, ann, sig,
           (*flat, *tail))
    else:
        packed, tail = extra
        fn(grid[0], g1, g2, stream, function, packed, None, None, None, *flat, *tail)
