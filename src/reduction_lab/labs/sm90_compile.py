"""Triton 实验的编译检查：sim 模式下把学习者的内核编译成 sm_90（H100/H200）的机器码，不需要 GPU。

sim 模式用 Triton 解释器执行内核，它逐句运行 Python：有些写法解释器照样执行，编译器却拒绝，学习者要到
GPU 上才发现。常见的两种：内核里读一个普通的 Python 全局变量（编译器只接受 ``tl.constexpr`` 的全局变量），
调用一个没有 ``@triton.jit`` 的辅助函数。评分程序在全部用例通过之后做这一步：

1. 在 sim 模式下照常调用学习者的包装函数一次，截下它启动内核的参数（张量的 dtype、整数、浮点数、constexpr
   与 ``num_warps``）——与真正启动时完全相同；
2. 在子进程里（解释器模式是整个进程的设置）以编译模式导入 Triton，按这些参数把内核编译成 sm_90 的 cubin。

编译失败时返回错误文字（含「at 行:列」），由实验换算成学习者文件里的行号。
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

#: 编译一次的时限（秒）：导入 torch 与 triton 约几秒，编译一个内核约一秒
TIMEOUT_S = 120

_TRITON_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
                  torch.int32: "i32", torch.int64: "i64", torch.int8: "i8", torch.uint8: "u8"}
_cache: dict[str, str | None] = {}


class _Recorder:
    """代替学习者模块里的 ``@triton.jit`` 内核：``kernel[grid](*args, **kwargs)`` 记下参数，再交给真正的内核。"""

    def __init__(self, fn):
        self.fn = fn
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid):
        launch = self.fn[grid]

        def run(*args, **kwargs):
            self.calls.append((args, dict(kwargs)))
            return launch(*args, **kwargs)

        return run

    def __getattr__(self, name):
        return getattr(self.fn, name)


def record_launch(module, kernel: str, call) -> tuple[tuple, dict]:
    """运行 ``call()``（它调用学习者的包装函数），返回包装函数第一次启动 ``module.<kernel>`` 时的 (位置参数, 关键字参数)。"""
    real = getattr(module, kernel)
    rec = _Recorder(real)
    setattr(module, kernel, rec)
    try:
        call()
    finally:
        setattr(module, kernel, real)
    if not rec.calls:
        raise RuntimeError(f"包装函数没有启动 {kernel}")
    return rec.calls[0]


def launch_spec(fn, args: tuple, kwargs: dict) -> dict:
    """由一次启动的参数得到编译用的签名：每个参数的 Triton 类型（constexpr 给出值）与 ``num_warps``。"""
    import inspect

    py = getattr(fn, "fn", fn)                         # 解释器里是 InterpretedFunction，编译模式是 JITFunction
    params = inspect.signature(py).parameters
    names = list(params)
    values = dict(zip(names, args))
    kwargs = dict(kwargs)
    num_warps = kwargs.pop("num_warps", 4)
    values.update(kwargs)
    constexpr_names = {n for n, p in params.items() if "constexpr" in str(p.annotation)}
    signature, constexprs = {}, {}
    for name in names:
        if name not in values:
            raise RuntimeError(f"启动时没有给出参数 {name}")
        v = values[name]
        if name in constexpr_names:
            signature[name] = "constexpr"
            constexprs[name] = v.value if hasattr(v, "value") else v
        elif isinstance(v, torch.Tensor):
            signature[name] = "*" + _TRITON_DTYPES[v.dtype]
        elif isinstance(v, bool):
            signature[name] = "i1"
        elif isinstance(v, int):
            signature[name] = "i32" if -2**31 <= v < 2**31 else "i64"
        elif isinstance(v, float):
            signature[name] = "fp32"
        else:
            raise RuntimeError(f"参数 {name} 的类型 {type(v).__name__} 不认识")
    return {"signature": signature, "constexprs": constexprs, "num_warps": int(num_warps)}


def compile_error(path: Path, kernel: str, spec: dict) -> str | None:
    """在子进程里把 ``path`` 里的 ``kernel`` 按 ``spec`` 编译成 sm_90；成功返回 None，失败返回错误文字。
    同样的源码与签名只编译一次（进程内缓存）。"""
    text = Path(path).read_text(encoding="utf-8")
    key = hashlib.sha256(json.dumps([text, kernel, spec], sort_keys=True, default=str).encode()).hexdigest()
    if key in _cache:
        return _cache[key]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    payload = json.dumps({"path": str(path), "kernel": kernel, **spec})
    try:
        # 按文件路径运行（不用 -m）：-m 会先导入 reduction_lab，它在 sim 模式下打开解释器
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), payload], capture_output=True,
                           text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return f"编译检查超过 {TIMEOUT_S} 秒没有结束 (the sm_90 compile check timed out)"
    if r.returncode == 0 and r.stdout.strip().endswith("ok"):
        err = None
    else:
        err = (r.stdout + r.stderr).strip() or f"编译检查的子进程退出码 {r.returncode}"
    _cache[key] = err
    return err


def environment_problem(err: str) -> bool:
    """编译检查失败的原因在这台机器上（超时、找不到 ptxas 等工具），不在学习者的代码里。"""
    low = err.lower()
    return ("timed out" in low or "no such file" in low or "not found" in low and "ptxas" in low
            or "modulenotfounderror" in low)


def _child(payload: str) -> int:
    """子进程：编译模式的 Triton，替换掉 reduction_lab.runtime（不检测设备、不打开解释器），导入学习者的文件并编译。"""
    import importlib.util
    import types

    spec = json.loads(payload)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    rt = types.ModuleType("reduction_lab.runtime")
    rt.MODE, rt.DEVICE, rt.ModeError = "gpu", "cuda", RuntimeError
    sys.modules["reduction_lab.runtime"] = rt
    mod_spec = importlib.util.spec_from_file_location("learner_sm90", spec["path"])
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    fn = getattr(module, spec["kernel"])
    try:
        src = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constexprs"])
        triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": spec["num_warps"]})
    except Exception as exc:  # noqa: BLE001  编译错误原样交给父进程
        print(f"{type(exc).__name__}: {exc}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    sys.exit(_child(sys.argv[1]))
