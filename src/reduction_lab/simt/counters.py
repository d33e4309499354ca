"""计数器：全局内存合并、共享内存存储体冲突、分布式共享内存、屏障、分支发散（文档：docs/cuda/simulator.md）。

Counters of one simulated launch. Counting is exact and deterministic and is
vectorised per warp: a *request* is one warp executing one memory instruction
with at least one active lane; a *sector* is a 32-byte aligned piece of global
memory; a shared-memory request takes as many *wavefronts* as the largest number
of distinct 4-byte words that its active lanes touch in one of the 32 banks.
8- and 16-byte accesses are served per half-warp and quarter-warp (phase): the
ideal is 1, 2 or 4 wavefronts per request, and bank conflicts are the
wavefronts beyond that ideal.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


#: Report 里不是计数器的字段：不进 as_dict 与打印的计数器表
_NOT_COUNTERS = ("elapsed_s", "printf", "printf_bytes", "printf_dropped", "schedule", "schedule_note",
                 "global_store_bytes_by_array")


@dataclass
class Report:
    """一次模拟启动的报告 / report of one simulated launch."""

    kernel: str = ""
    grid: tuple = (1, 1, 1)
    block: tuple = (1, 1, 1)
    shared_bytes: int = 0
    blocks_launched: int = 0
    threads_launched: int = 0
    warps_launched: int = 0
    global_load_bytes: int = 0
    global_store_bytes: int = 0
    global_load_requests: int = 0
    global_store_requests: int = 0
    global_load_sectors: int = 0
    global_store_sectors: int = 0
    shared_load_requests: int = 0
    shared_store_requests: int = 0
    shared_load_wavefronts: int = 0
    shared_store_wavefronts: int = 0
    shared_load_bank_conflicts: int = 0
    shared_store_bank_conflicts: int = 0
    atomic_ops: int = 0
    barriers: int = 0
    warp_syncs: int = 0
    divergent_branches: int = 0
    #: 线程块簇的形状（__cluster_dims__；没有时是一个块的簇 (1, 1, 1)）
    cluster: tuple = (1, 1, 1)
    #: 簇屏障：每个线程块每经过一次 cluster.sync() 或 barrier_wait() 计 1（与 barriers 对 __syncthreads() 的计法相同）
    cluster_barriers: int = 0
    #: 网格屏障（cooperative groups 的 grid.sync()，协作启动）：每个线程块每经过一次计 1
    grid_barriers: int = 0
    #: 分布式共享内存（经 cluster.map_shared_rank 访问簇里另一个块的共享内存）：请求数（有活跃线程的线程束）、
    #: 元素数（每个线程的一次访问计 1）与字节数；访问本块的不计在这里，计在 shared_* 里
    dsmem_load_requests: int = 0
    dsmem_store_requests: int = 0
    dsmem_load_elements: int = 0
    dsmem_store_elements: int = 0
    dsmem_load_bytes: int = 0
    dsmem_store_bytes: int = 0
    dsmem_atomic_ops: int = 0       # 经 map_shared_rank 对别的块的共享内存做的原子操作（每个线程计 1，也计入 atomic_ops）
    elapsed_s: float = field(default=0.0, compare=False)
    #: 设备端 printf 印出的文字（也已写到标准输出）、字节数与超过 1 MiB 之后丢掉的行数；不是计数器，as_dict 不含
    printf: str = field(default="", compare=False, repr=False)
    printf_bytes: int = field(default=0, compare=False, repr=False)
    printf_dropped: int = field(default=0, compare=False, repr=False)
    #: 这次用的调度："grid"（整个网格一起执行）、"blocks" 或 "blocks-reversed"（一次一个簇，按编号从小到大或从大到小）、
    #: "waves"（按同时驻留得下的块数一波一波）；schedule="auto" 换了调度或没能判断时 schedule_note 写明原因。
    #: 不是计数器，as_dict 不含
    schedule: str = field(default="grid", compare=False)
    schedule_note: str = field(default="", compare=False, repr=False)
    #: global_store_bytes 按数组（内核参数或文件作用域变量的名字）分开：{名字: 字节数}。不是计数器，as_dict 不含
    global_store_bytes_by_array: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def bank_conflicts(self):
        """共享内存读写的额外波前之和 / extra wavefronts of loads and stores."""
        return self.shared_load_bank_conflicts + self.shared_store_bank_conflicts

    @property
    def global_load_sectors_per_request(self):
        return self.global_load_sectors / self.global_load_requests if self.global_load_requests else 0.0

    @property
    def global_store_sectors_per_request(self):
        return self.global_store_sectors / self.global_store_requests if self.global_store_requests else 0.0

    def as_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _NOT_COUNTERS}
        d["bank_conflicts"] = self.bank_conflicts
        return d

    def __str__(self):
        g = "x".join(map(str, self.grid))
        b = "x".join(map(str, self.block))
        rows = [
            f"内核 {self.kernel}：网格 {g}，线程块 {b}，动态共享内存 {self.shared_bytes} 字节",
            f"  线程块 {self.blocks_launched}，线程 {self.threads_launched}，线程束 {self.warps_launched}",
            f"  全局内存读：{self.global_load_bytes} 字节，{self.global_load_requests} 次请求，{self.global_load_sectors} 个扇区",
            f"  全局内存写：{self.global_store_bytes} 字节，{self.global_store_requests} 次请求，{self.global_store_sectors} 个扇区",
            f"  共享内存读：{self.shared_load_requests} 次请求，{self.shared_load_wavefronts} 个波前，存储体冲突 {self.shared_load_bank_conflicts}",
            f"  共享内存写：{self.shared_store_requests} 次请求，{self.shared_store_wavefronts} 个波前，存储体冲突 {self.shared_store_bank_conflicts}",
            f"  原子操作 {self.atomic_ops}，__syncthreads {self.barriers}，__syncwarp {self.warp_syncs}，发散分支 {self.divergent_branches}"
            + (f"，网格屏障 {self.grid_barriers}" if self.grid_barriers else ""),
        ]
        if (tuple(self.cluster) != (1, 1, 1) or self.cluster_barriers or self.dsmem_load_requests or self.dsmem_store_requests
                or self.dsmem_atomic_ops):
            c = "x".join(map(str, self.cluster))
            rows += [
                f"  线程块簇 {c}，簇屏障 {self.cluster_barriers}"
                + (f"，分布式共享内存上的原子操作 {self.dsmem_atomic_ops}" if self.dsmem_atomic_ops else ""),
                f"  分布式共享内存读：{self.dsmem_load_elements} 个元素，{self.dsmem_load_bytes} 字节，{self.dsmem_load_requests} 次请求",
                f"  分布式共享内存写：{self.dsmem_store_elements} 个元素，{self.dsmem_store_bytes} 字节，{self.dsmem_store_requests} 次请求",
            ]
        if self.schedule in ("blocks", "blocks-reversed"):
            rows.append("  调度：逐块执行（一次一个" + ("簇" if tuple(self.cluster) != (1, 1, 1) else "线程块") + "，按编号"
                        + ("从小到大）" if self.schedule == "blocks" else "从大到小）")
                        + (f"：{self.schedule_note}" if self.schedule_note else ""))
        elif self.schedule == "waves" or self.schedule_note:
            rows.append("  调度：" + ("按同时驻留得下的块数一波一波执行" if self.schedule == "waves" else "整个网格一起执行")
                        + (f"：{self.schedule_note}" if self.schedule_note else ""))
        return "\n".join(rows)


def dsmem_access(rep, store, gw, nbytes):
    """记录一条分布式共享内存指令（只算访问别的块的线程）：请求数、元素数与字节数。"""
    n = gw.size
    if n == 0:
        return
    if store:
        rep.dsmem_store_requests += warps_in(gw)
        rep.dsmem_store_elements += n
        rep.dsmem_store_bytes += n * nbytes
    else:
        rep.dsmem_load_requests += warps_in(gw)
        rep.dsmem_load_elements += n
        rep.dsmem_load_bytes += n * nbytes


def _count_distinct_sorted_groups(keys):
    """keys 中不同值的个数（已排序时 O(n)）。"""
    n = keys.size
    if n == 0:
        return 0
    d = np.diff(keys)
    if (d >= 0).all():
        return 1 + int(np.count_nonzero(d))
    return int(np.unique(keys).size)


def warps_in(gw):
    """有序的线程束编号数组中不同线程束的个数。"""
    if gw.size == 0:
        return 0
    return 1 + int(np.count_nonzero(gw[1:] != gw[:-1]))


def global_access(rep, store, gw, byte_addr, nbytes):
    """记录一条全局内存指令。gw：活跃线程的线程束编号（有序）；byte_addr：字节地址。"""
    n = gw.size
    req = warps_in(gw)
    first = byte_addr // 32
    last = (byte_addr + (nbytes - 1)) // 32
    keys = (gw.astype(np.int64) << 36) | first.astype(np.int64)
    if (last != first).any():  # 跨扇区（非对齐的大元素）
        keys = np.concatenate([keys, (gw.astype(np.int64) << 36) | last.astype(np.int64)])
        keys.sort()
    sectors = _count_distinct_sorted_groups(keys)
    if store:
        rep.global_store_bytes += n * nbytes
        rep.global_store_requests += req
        rep.global_store_sectors += sectors
    else:
        rep.global_load_bytes += n * nbytes
        rep.global_load_requests += req
        rep.global_load_sectors += sectors


# --8<-- [start:bank_conflicts]
def shared_access(rep, store, gw, byte_addr, nbytes=4, lane=None):
    """记录一条共享内存指令：请求数、波前数与存储体冲突（波前数减去理想波前数）。

    一个线程访问 nbytes 个字节，即 nbytes // 4 个相邻的 4 字节字（至少 1 个）。8 字节和 16 字节
    的访问一个波前装不下整个 warp（32 x 8 = 256 字节 > 32 个存储体 x 4 字节），硬件按半个 warp
    （8 字节）或四分之一个 warp（16 字节）分相处理，每相至少一个波前：理想波前数是 1、2、4，
    存储体冲突只在一相之内发生。lane：活跃线程在 warp 内的编号（0..31），宽访问时用来分相。
    """
    if gw.size == 0:
        return
    wpl = max(1, nbytes // 4)                                # 每个线程访问的字数：1、2 或 4
    grp = gw.astype(np.int64) << 2                           # (线程束, 相)
    if wpl > 1:
        grp = grp | (np.asarray(lane, np.int64) // (32 // wpl))
    word = (byte_addr // 4).astype(np.int64)
    if wpl > 1:
        word = (word[:, None] + np.arange(wpl, dtype=np.int64)).ravel()
        grp = np.repeat(grp, wpl)
    keys = (grp << 20) | word
    d = np.diff(keys)
    if not (d >= 0).all():
        keys = np.sort(keys)
        d = np.diff(keys)
    keys = keys[np.concatenate(([True], d != 0))]          # 不同的 (线程束, 相, 字)
    gk = keys >> 20
    bk = (gk << 5) | (keys & 31)                             # (线程束, 相, 存储体)
    bk = np.sort(bk)
    starts = np.concatenate(([True], bk[1:] != bk[:-1]))
    ub = bk[starts]
    cnt = np.diff(np.concatenate((np.flatnonzero(starts), [bk.size])))  # 每个存储体的不同字数
    ug = ub >> 5
    gstarts = np.flatnonzero(np.concatenate(([True], ug[1:] != ug[:-1])))
    waves = np.maximum.reduceat(cnt, gstarts)                # 每一相的波前数
    req = warps_in(gw)
    ideal = gstarts.size                                     # 有活跃线程的相数：满 warp 时是 1、2、4 倍请求数
    total = int(waves.sum())
    if store:
        rep.shared_store_requests += req
        rep.shared_store_wavefronts += total
        rep.shared_store_bank_conflicts += total - ideal
    else:
        rep.shared_load_requests += req
        rep.shared_load_wavefronts += total
        rep.shared_load_bank_conflicts += total - ideal
# --8<-- [end:bank_conflicts]
