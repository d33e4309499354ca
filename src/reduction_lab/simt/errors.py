"""模拟器报告的错误类型（文档：docs/cuda/simulator.md）。

Error classes raised by the CUDA C simulator. Every message is bilingual
(Chinese first, then English) and names the kernel and the source line.
"""

from __future__ import annotations


class SimtError(Exception):
    """模拟器所有错误的基类 / base class of every simulator error.

    运行时发现的错误带有属性（不知道时为 None）：``kernel``（内核名）、``line``（源码行号，int）、
    ``block`` 与 ``thread``（出错线程的 blockIdx / threadIdx，字符串 "(x,y,z)"）。
    """

    kernel = None
    line = None
    block = None
    thread = None


class UnsupportedError(SimtError):
    """源码用到了模拟器不支持的构造 / a construct outside the supported subset."""


class OutOfBoundsError(SimtError, IndexError):
    """全局或共享内存越界访问（在访问发生之前检查）/ out-of-bounds access."""


class BarrierDivergenceError(SimtError):
    """同一线程块的线程没有全部到达同一个 __syncthreads() / divergent barrier."""


class SharedMemoryRaceError(SimtError):
    """两个屏障之间的共享内存数据竞争（RAW/WAR/WAW），包括簇内不同线程块经分布式共享内存的两次访问之间没有
    簇屏障（cluster.sync() 或 barrier_arrive/barrier_wait）/ shared-memory race (also across the blocks of a cluster)."""


class GlobalMemoryRaceError(SimtError):
    """一次启动之内的全局内存数据竞争：两个线程（同一或不同线程块）访问同一个字，至少一个是写，不是两边
    都用原子操作，且两次访问之间没有顺序（__syncthreads() 只排定同一线程块的线程）/ global-memory race.

    另有属性 ``array``、``index``（数组名与元素下标）、``hazard``（"RAW"、"WAR" 或 "WAW"）、
    ``other_block``、``other_thread``、``other_line``（另一个线程与它的访问所在的行）。
    """

    array = None
    index = None
    hazard = None
    other_block = None
    other_thread = None
    other_line = None


class DsmemExitedBlockError(SimtError):
    """通过分布式共享内存（cluster.map_shared_rank）访问了簇里另一个线程块的共享内存，而那个块在这次访问之后
    没有再参加任何一次簇屏障就结束了：GPU 上它可能已经退出，共享内存已被回收 / DSMEM access to a block that may
    have exited.

    规则：块 A 在它完成第 k 次簇屏障到达（cluster.sync() 或 barrier_arrive()）之后访问块 B 的共享内存，只有当
    B 结束前完成的簇屏障等待（cluster.sync() 或 barrier_wait()）多于 k 次时才合法。另有属性 ``target_block``、
    ``target_rank``（被访问的块与它的簇内编号）与 ``array``（共享数组名）。
    """

    target_block = None
    target_rank = None
    array = None


class WarpSyncError(SimtError):
    """线程束级原语（__shfl_*_sync）读到了不参与的线程 / bad warp-level call."""


class LoopLimitError(SimtError):
    """一次启动的工作量超过预算（按「活跃线程 x 循环迭代」计），疑似死循环或自旋等待；信息里有
    循环所在的行 / a loop used up the launch's work budget (lane-steps): endless loop or spin-wait."""


class SpinWaitError(LoopLimitError):
    """一个等内存的循环（volatile 读或原子操作）转了一圈，内存与等待的线程的变量都没有变：在这种调度下永远
    等不到。``schedule`` 属性是报错时的调度（"grid"、"blocks"、"blocks-reversed" 或 "waves"）/ a spin-wait that can never finish under the
    simulator's schedule: an iteration changed neither memory nor the waiting threads' variables."""

    schedule = None
    #: 倒序逐块执行等不到、正序等得到：内核依赖线程块开始的顺序（CUDA 不保证）
    order_dependent = False
    #: 用普通的读（不是 volatile、不是原子操作）等：GPU 上编译器可以把值留在寄存器里
    plain_load = False


class SimtRuntimeError(SimtError):
    """其他运行时错误，例如整数除以零 / other runtime errors (integer division by zero)."""


class DeviceAssertError(SimtError, AssertionError):
    """设备代码里的断言失败：``assert(e)``，或 GPUVerify 的 ``__assert(e)``、``__global_assert(e)``、``__assume(e)``
    （模拟器在运行到它的每个线程上检查）。信息里有行号、失败的线程数与前几个线程 / a device-side assertion failed.

    另有属性 ``threads``：失败线程的 (blockIdx, threadIdx) 列表（最多 8 个）。
    """

    threads = None


class LaunchError(SimtError, ValueError):
    """启动配置或参数不合法 / invalid launch configuration or arguments."""


class UninitializedReadError(SimtError):
    """读了没有任何线程写过的共享内存或局部数组（compute-sanitizer initcheck 的对应物）/
    read of shared or local memory that no thread has written."""


class FrontendMissingError(SimtError, ImportError):
    """这台机器没有模拟器的 C++ 前端（libclang 与 pycparser 两个包）：与被模拟的源码无关 /
    the simulator's C++ front end (the libclang and pycparser packages) is not installed."""


class CompileError(SimtError):
    """nvcc 会拒绝的源码（例如通过 const 指针写、__shared__ 变量带初始值、静态共享内存超过 48 KiB）/
    source that nvcc rejects."""
