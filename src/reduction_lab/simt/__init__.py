"""CUDA C 子集的 CPU 模拟器，带检查器与计数器（文档：docs/cuda/simulator.md）。

A CPU simulator for a subset of CUDA C: the whole grid runs vectorised with
numpy, with an out-of-bounds check, a barrier-divergence check, shared- and
global-memory race checks (also across the blocks of a thread block cluster,
with the exited-block check of distributed shared memory) and exact memory
counters. Front end: libclang parses the CUDA C++ source, which is lowered to the pycparser AST the interpreter runs (numpy for the lanes).
"""

from .api import MAX_LANE_STEPS, MAX_LOOP_ITERATIONS, MAX_THREADS, kernel_signature, launch
from .counters import Report
from .errors import (
    BarrierDivergenceError, CompileError, DeviceAssertError, DsmemExitedBlockError, FrontendMissingError, GlobalMemoryRaceError, LaunchError, LoopLimitError, OutOfBoundsError,
    SpinWaitError,
    SharedMemoryRaceError, SimtError, SimtRuntimeError, UninitializedReadError, UnsupportedError,
    WarpSyncError,
)
from .frontend import parse

__all__ = [
    "launch", "kernel_signature", "parse", "Report",
    "SimtError", "UnsupportedError", "OutOfBoundsError", "BarrierDivergenceError",
    "SharedMemoryRaceError", "GlobalMemoryRaceError", "WarpSyncError", "LoopLimitError", "SpinWaitError", "SimtRuntimeError", "LaunchError",
    "UninitializedReadError", "CompileError", "DeviceAssertError", "DsmemExitedBlockError", "FrontendMissingError",
    "MAX_THREADS", "MAX_LOOP_ITERATIONS", "MAX_LANE_STEPS",
]
