"""基准测试：先验证、再计时；GB/s、占拷贝上限的比例、JSON、表格与图。

命令行见:mod:`reduction_lab.bench.cli`（``reduction-lab bench ...``）。Python里::

    from reduction_lab.bench import run
    doc = run(["row-sum"], ns=[256], total_elems=2**12, impls=["torch", "triton"])

命令行默认把每个实现放进自己的子进程（``from reduction_lab.bench import run_isolated``，
:mod:`reduction_lab.bench.isolate`）；``run``在本进程里测量。

sim模式下计时来自CPU（time.perf_counter），与GPU的性能无关；输出和JSON都会写明。
课程页面：docs/bench/index.md「性能实测」。
"""

from .harness import (BYTE_FORMULAS, SIM_BANNER, SUITES, TOLERANCES, BenchError, ValidationError,
                      bytes_moved, run, run_suite)
from .isolate import run_isolated

__all__ = ["run", "run_isolated", "run_suite", "SUITES", "SIM_BANNER", "BYTE_FORMULAS", "TOLERANCES", "BenchError",
           "ValidationError", "bytes_moved"]
