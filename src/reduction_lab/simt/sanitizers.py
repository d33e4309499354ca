"""检查器：共享内存数据竞争（racecheck 的 RAW/WAR/WAW）（文档：docs/cuda/simulator.md）。

Shared-memory race tracking. For every shared word of every block it keeps,
since the last ``__syncthreads()`` of that block, the last writer thread and
the reader thread(s), whether those accesses were volatile, and the
``__syncwarp()`` epoch of their warp. A hazard between two different threads is
reported unless both threads are in the same warp and a ``__syncwarp()`` of that
warp lies between them. ``volatile`` does not excuse a hazard: since Volta
(independent thread scheduling) the lanes of a warp need not run in lockstep, so
the classic volatile-only last-warp unrolling is a data race.
"""

from __future__ import annotations

import numpy as np

from .errors import SharedMemoryRaceError

VOLTA_NOTE = (
    "同一线程束内的线程自 Volta 架构（独立线程调度）起不再保证锁步执行，volatile 只阻止编译器把值留在寄存器里，"
    "并不排定两个线程的先后；请在两次访问之间调用 __syncwarp()，或改用 warp 洗牌（__shfl_down_sync）。",
    "Since Volta (independent thread scheduling) the lanes of a warp are not guaranteed to run in lockstep; "
    "volatile only keeps the compiler from caching shared values in registers and does not order two lanes: "
    "call __syncwarp() between the accesses, or use warp shuffles (__shfl_down_sync).",
)
CROSS_WARP_NOTE = (
    "两个线程属于不同的线程束，只有 __syncthreads() 能保证它们的先后顺序。",
    "The two threads are in different warps: only __syncthreads() orders their accesses.",
)


class SharedTracker:
    """一个共享数组（所有线程块）的竞争记录。"""

    def __init__(self, nblocks, nelem):
        n = nblocks * nelem
        self.nelem = nelem
        self.writer = np.full(n, -1, np.int32)
        self.wvol = np.zeros(n, bool)
        self.wep = np.zeros(n, np.int32)
        self.wline = np.zeros(n, np.int32)
        self.reader = np.full(n, -1, np.int32)    # -2：多个线程读过
        self.rwarp = np.full(n, -1, np.int32)     # 读者所在的线程束（块内编号），-2：多个线程束
        self.rvol = np.zeros(n, bool)
        self.rep = np.zeros(n, np.int32)
        self.rline = np.zeros(n, np.int32)
        self.dirty = False

    def reset_blocks(self, blocks, all_blocks):
        """__syncthreads()：清空这些线程块的记录。"""
        if not self.dirty:
            return
        if all_blocks:
            self.writer.fill(-1)
            self.reader.fill(-1)
            self.rwarp.fill(-1)
            self.dirty = False
            return
        w = self.writer.reshape(-1, self.nelem)
        r = self.reader.reshape(-1, self.nelem)
        rw = self.rwarp.reshape(-1, self.nelem)
        w[blocks] = -1
        r[blocks] = -1
        rw[blocks] = -1

    def _check_writer(self, flat, tid, epoch, vol, kind, report):
        """本次访问的字若在上次屏障之后被别的线程写过（同一 warp 内、隔着 __syncwarp 的访问除外），
        报告 kind（RAW 或 WAW）。volatile 不算同步。"""
        w = self.writer[flat]
        haz = ((w >= 0) & (w != tid)) | (w == ATOMIC)
        if haz.any():
            same = ((w // 32) == (tid // 32)) & (w >= 0)
            ok = same & (self.wep[flat] != epoch)
            haz &= ~ok
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report(kind, i, int(w[i]), int(self.wline[flat[i]]), bool(same[i]))

    def read(self, flat, tid, epoch, vol, line, report):
        """记录一次读；发现 RAW 时调用 report(kind, i, other_tid, other_line, same_warp)。"""
        self.dirty = True
        self._check_writer(flat, tid, epoch, vol, "RAW", report)
        r = self.reader[flat]
        rw = self.rwarp[flat]
        warp = tid // 32
        newr = np.where((r == -1) | (r == tid), tid, -2)
        newrw = np.where((rw == -1) | (rw == warp), warp, -2)
        if flat.size > 1:
            d = np.diff(flat)
            if not (d > 0).all():
                order = np.argsort(flat, kind="stable")
                fs = flat[order]
                dup = np.concatenate(([False], fs[1:] == fs[:-1]))
                grp = np.cumsum(~dup) - 1
                starts = np.flatnonzero(~dup)
                cnt = np.diff(np.concatenate((starts, [fs.size])))
                ws = warp[order] if np.ndim(warp) else np.full(fs.size, warp)
                wmin = np.minimum.reduceat(ws, starts)
                wmax = np.maximum.reduceat(ws, starts)
                multi = (cnt > 1)[grp]
                mw = (wmin != wmax)[grp]
                nr = newr[order]
                nrw = newrw[order]
                nr[multi] = -2
                nrw[mw] = -2
                newr = np.empty_like(nr)
                newrw = np.empty_like(nrw)
                newr[order] = nr
                newrw[order] = nrw
                # 同一个字的多个读者：最后一次赋值生效，值相同
        self.rvol[flat] = np.where(r == -1, vol, self.rvol[flat] & vol)
        self.reader[flat] = newr
        self.rwarp[flat] = newrw
        self.rep[flat] = epoch
        self.rline[flat] = line

    def write(self, flat, tid, epoch, vol, line, report):
        """记录一次写；发现 WAW/WAR 时调用 report。"""
        self.dirty = True
        self._check_writer(flat, tid, epoch, vol, "WAW", report)
        r = self.reader[flat]
        haz = (r == -2) | ((r >= 0) & (r != tid))
        if haz.any():
            rw = self.rwarp[flat]
            same = rw == (tid // 32)
            ok = same & (self.rep[flat] != epoch)
            haz &= ~ok
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                other = int(r[i])
                report("WAR", i, other, int(self.rline[flat[i]]), bool(same[i]))
        if flat.size > 1:
            d = np.diff(flat)
            if not (d > 0).all():
                fs = np.sort(flat)
                dupw = fs[1:][fs[1:] == fs[:-1]]
                if dupw.size:
                    word = dupw[0]
                    lanes = np.flatnonzero(flat == word)
                    t = tid if np.ndim(tid) == 0 else tid[lanes]
                    same = bool(np.ndim(t) == 0 or (t // 32 == t[0] // 32).all())
                    report("WAW", int(lanes[1]), int(t[0] if np.ndim(t) else t), line, same)
        self.writer[flat] = tid
        self.wvol[flat] = vol
        self.wep[flat] = epoch
        self.wline[flat] = line


    def atomic(self, flat, tid, epoch, line, report):
        """原子操作：彼此之间不算竞争；与另一个线程的普通读写之间没有屏障则算竞争。"""
        self.dirty = True
        w = self.writer[flat]
        haz = (w >= 0) & (w != tid)
        if haz.any():
            same = (w // 32) == (tid // 32)
            haz &= ~(same & (self.wep[flat] != epoch))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report("RAW", i, int(w[i]), int(self.wline[flat[i]]), bool(same[i]))
        r = self.reader[flat]
        haz = (r == -2) | ((r >= 0) & (r != tid))
        if haz.any():
            same = self.rwarp[flat] == (tid // 32)
            haz &= ~(same & (self.rep[flat] != epoch))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report("WAR", i, int(r[i]), int(self.rline[flat[i]]), bool(same[i]))
        self.writer[flat] = ATOMIC
        self.wvol[flat] = False
        self.wline[flat] = line


ATOMIC = -3   # writer 的特殊值：自上一个屏障以来被原子操作修改过

HAZARD_NAMES = {
    "RAW": "写后读 read-after-write",
    "WAR": "读后写 write-after-read",
    "WAW": "写后写 write-after-write",
}


def race_message(kind, kernel, line, bufname, word, block, thread, other, other_line, same_warp):
    """竞争的双语说明；other 是另一个线程的坐标（或“多个线程”）。"""
    what = {"RAW": "读取", "WAR": "写入", "WAW": "写入"}[kind]
    prev = {"RAW": "写过", "WAR": "读过", "WAW": "写过"}[kind]
    verb = {"RAW": "reads", "WAR": "writes", "WAW": "writes"}[kind]
    prev_en = {"RAW": "wrote", "WAR": "read", "WAW": "wrote"}[kind]
    zh_note, en_note = VOLTA_NOTE if same_warp else CROSS_WARP_NOTE
    return (
        f"共享内存数据竞争（{HAZARD_NAMES[kind]}）：内核 {kernel} 第 {line} 行，线程块 {block} 的线程 {thread} "
        f"{what} {bufname}[{word}]，而同一线程块的线程 {other} 在上一个 __syncthreads() 之后于第 {other_line} 行{prev}这个字。"
        f"{zh_note} / shared-memory race ({kind}) in kernel {kernel}, line {line}: block {block}, thread {thread} "
        f"{verb} {bufname}[{word}], which thread {other} of the same block {prev_en} at line {other_line} "
        f"since the last __syncthreads(). {en_note}"
    ), SharedMemoryRaceError
