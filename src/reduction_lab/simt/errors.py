"""模拟器报告的错误类型（文档：docs/cuda/simulator.md）。

Error classes raised by the CUDA C simulator. Every message is bilingual
(Chinese first, then English) and names the kernel and the source line.
"""

from __future__ import annotations


class SimtError(Exception):
    """模拟器所有错误的基类 / base class of every simulator error."""


class UnsupportedError(SimtError):
    """源码用到了模拟器不支持的构造 / a construct outside the supported subset."""


class OutOfBoundsError(SimtError, IndexError):
    """全局或共享内存越界访问（在访问发生之前检查）/ out-of-bounds access."""


class BarrierDivergenceError(SimtError):
    """同一线程块的线程没有全部到达同一个 __syncthreads() / divergent barrier."""


class SharedMemoryRaceError(SimtError):
    """两个屏障之间的共享内存数据竞争（RAW/WAR/WAW）/ shared-memory race."""


class WarpSyncError(SimtError):
    """线程束级原语（__shfl_*_sync）读到了不参与的线程 / bad warp-level call."""


class LoopLimitError(SimtError):
    """循环超过迭代上限，疑似死循环 / a loop exceeded the iteration limit."""


class SimtRuntimeError(SimtError):
    """其他运行时错误，例如整数除以零 / other runtime errors (integer division by zero)."""


class LaunchError(SimtError, ValueError):
    """启动配置或参数不合法 / invalid launch configuration or arguments."""
