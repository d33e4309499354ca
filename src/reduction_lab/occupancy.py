"""占用率与延迟：一个内核每个线程用几个寄存器、每个线程块用多少共享内存，一个 SM 上能同时驻留
几个线程块，以及要掩盖显存延迟需要多少字节同时在途（利特尔定律）。

课程页面：docs/occupancy.md。

* :data:`SM90`——Hopper（sm_90，H100 / H200）每个 SM 的资源上限（CUDA 编程指南的计算能力表）；
* :func:`cuda_resources`——用 ``nvcc -cubin -Xptxas -v`` 编译一个 .cu 文件（不需要 GPU），
  读出每个内核的寄存器数、溢出（spill）字节数、静态共享内存与屏障数；
* :func:`occupancy`——按寄存器、共享内存、线程数、线程块数四个上限算出每个 SM 驻留的线程块数，
  并指出是哪一个上限起作用；
* :func:`bytes_in_flight`——利特尔定律：带宽 x 延迟。
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SM90", "KernelResources", "cuda_resources", "occupancy", "bytes_in_flight"]

#: sm_90 每个 SM 的上限
SM90 = {
    "registers": 65536,           # 32 位寄存器
    "threads": 2048,
    "blocks": 32,
    "shared_bytes": 228 * 1024,   # 每个 SM 的共享内存（配置成最大时）
    "reserved_shared_per_block": 1024,   # 系统为每个线程块保留的共享内存
    "register_unit": 256,         # 寄存器按 warp 分配，每个 warp 分 256 个的整数倍
    "max_registers_per_thread": 255,
    "multiprocessors": 132,       # H100 SXM 与 H200 的 SM 数（协作启动的网格上限按它算）
}


@dataclass(frozen=True)
class KernelResources:
    kernel: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    barriers: int


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\d+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_ptxas(text: str) -> dict[str, KernelResources]:
    """解析 ``ptxas -v`` 的输出：内核名 -> 资源。"""
    out, name, spill = {}, None, (0, 0)
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            name, spill = m.group(1), (0, 0)
        elif (m := _SPILL.search(line)) and name:
            spill = (int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and name:
            out[name] = KernelResources(name, int(m.group(1)), spill[0], spill[1], int(m.group(3) or 0),
                                        int(m.group(2) or 0))
    return out


def cuda_resources(source, defines: dict | None = None, arch: str = "sm_90") -> dict[str, KernelResources]:
    """编译 ``source``（本包 cuda_kernels 里的文件名，或任意 .cu 路径）并返回每个内核的资源。
    需要 PATH 上有 nvcc；不需要 GPU。"""
    from .cuda_kernels.launcher import source_path

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("PATH 上没有 nvcc：无法编译 (nvcc not found on PATH)")
    if not re.fullmatch(r"sm_\d+", arch):
        raise ValueError(f"arch 应形如 sm_90，得到 {arch!r} (bad arch)")
    path = source_path(source)
    cmd = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", str(path)]
    for k, v in (defines or {}).items():
        if not re.fullmatch(r"[A-Za-z_]\w*", str(k)):
            raise ValueError(f"defines 的名字 {k!r} 不是合法的 C 标识符 (bad macro name)")
        cmd.insert(1, f"-D{k}={v}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd += ["-o", str(Path(tmp) / "k.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc 编译失败 (nvcc failed):\n{proc.stderr[-3000:]}")
    return parse_ptxas(proc.stderr + proc.stdout)


def occupancy(threads_per_block: int, registers_per_thread: int, shared_bytes_per_block: int = 0,
              limits: dict = SM90) -> dict:
    """每个 SM 能同时驻留的线程块数，以及四个上限各自允许多少个。

    返回 {"blocks", "warps", "threads", "occupancy"（驻留 warp 数 / 上限）, "limit"（起作用的上限）,
    "by"（每个上限允许的线程块数）}。"""
    for name, v in (("threads_per_block", threads_per_block), ("registers_per_thread", registers_per_thread),
                    ("shared_bytes_per_block", shared_bytes_per_block)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} 必须是非负整数，得到 {v!r} ({name} must be a non-negative int)")
    if not 1 <= threads_per_block <= 1024:
        raise ValueError(f"每个线程块 1 到 1024 个线程，得到 {threads_per_block} (1..1024 threads per block)")
    if registers_per_thread > limits["max_registers_per_thread"]:
        raise ValueError(f"每个线程最多 {limits['max_registers_per_thread']} 个寄存器，得到 {registers_per_thread}")
    warps = -(-threads_per_block // 32)
    unit = limits["register_unit"]
    regs_per_warp = -(-(max(1, registers_per_thread) * 32) // unit) * unit
    by = {
        "threads": limits["threads"] // (warps * 32),
        "blocks": limits["blocks"],
        "registers": (limits["registers"] // regs_per_warp) // warps,
        "shared": limits["shared_bytes"] // (shared_bytes_per_block + limits["reserved_shared_per_block"]),
    }
    limit = min(by, key=lambda k: by[k])
    blocks = by[limit]
    return {"blocks": blocks, "warps": blocks * warps, "threads": blocks * warps * 32,
            "occupancy": blocks * warps * 32 / limits["threads"], "limit": limit, "by": by}


def bytes_in_flight(bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """利特尔定律：要让带宽跑满，同时在途的字节数 = 带宽 x 延迟。"""
    if bandwidth_bytes_per_s <= 0 or latency_s <= 0:
        raise ValueError("带宽与延迟都必须是正数 (bandwidth and latency must be positive)")
    return bandwidth_bytes_per_s * latency_s
