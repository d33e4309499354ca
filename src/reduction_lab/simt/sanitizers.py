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
    "并不排定两个线程的先后；请在两次访问之间调用 __syncwarp()（像 v[tid] += v[tid + 16] 这样一条语句里既读别的线程的"
    "元素、又写自己的元素，要拆成两步：先读进寄存器，__syncwarp()，再写，写完再 __syncwarp()），"
    "或改用 warp 洗牌（__shfl_down_sync）。",
    "Since Volta (independent thread scheduling) the lanes of a warp are not guaranteed to run in lockstep; "
    "volatile only keeps the compiler from caching shared values in registers and does not order two lanes: "
    "call __syncwarp() between the accesses (a statement such as v[tid] += v[tid + 16] reads another lane's "
    "element and writes its own, so split it: read into a register, __syncwarp(), write, __syncwarp()), "
    "or use warp shuffles (__shfl_down_sync).",
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
        # 报告时说出另一个线程：最近的读者 / 原子写者，以及与它不同的另一个（-1：没有）
        self.rany = np.full(n, -1, np.int32)
        self.ralt = np.full(n, -1, np.int32)
        self.wany = np.full(n, -1, np.int32)
        self.walt = np.full(n, -1, np.int32)
        # 自上一个屏障以来的原子写者全是 atomicCAS：普通的读不算竞争（CAS 循环先读一个猜测值，比较不上就重来）
        self.wcas = np.zeros(n, bool)
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

    def other(self, kind, i, flat, tid):
        """冲突的另一个线程（块内编号）：多个读者或原子写者时，取与本线程不同的一个。"""
        f = flat[i]
        t = int(tid[i]) if np.ndim(tid) else int(tid)
        a, b = (self.rany[f], self.ralt[f]) if kind == "WAR" else (self.wany[f], self.walt[f])
        o = int(a) if int(a) != t else int(b)
        return o if o != t else -2      # 找不到另一个：报“多个”

    def _check_writer(self, flat, tid, epoch, vol, kind, report, same=None, cas_ok=False):
        """本次访问的字若在上次屏障之后被别的线程写过（同一 warp 内、隔着 __syncwarp 的访问除外），
        报告 kind（RAW 或 WAW）。volatile 不算同步。same：不算竞争的同值写入。``cas_ok``：只被 atomicCAS
        改过的字不算（普通的读）。"""
        w = self.writer[flat]
        haz = (w >= 0) & (w != tid)
        at = w == ATOMIC
        if at.any():    # 原子写者：只有本线程自己做过原子操作时不算
            haz |= at & ((self.wany[flat] != tid) | (self.walt[flat] != -1))
            if cas_ok:
                haz &= ~(at & self.wcas[flat])
        if same is not None:
            haz &= ~(same & (w >= 0))
        if haz.any():
            same = ((w // 32) == (tid // 32)) & (w >= 0)
            ok = same & (self.wep[flat] != epoch)
            haz &= ~ok
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                other = int(w[i]) if w[i] >= 0 else ATOMIC_BASE - self.other("RAW", i, flat, tid)
                report(kind, i, other, int(self.wline[flat[i]]), bool(same[i]))

    def read(self, flat, tid, epoch, vol, line, report):
        """记录一次读；发现 RAW 时调用 report(kind, i, other_tid, other_line, same_warp)。"""
        self.dirty = True
        self._check_writer(flat, tid, epoch, vol, "RAW", report, cas_ok=True)
        r = self.reader[flat]
        rw = self.rwarp[flat]
        warp = tid // 32
        newr = np.where((r == -1) | (r == tid), tid, -2)
        newrw = np.where((rw == -1) | (rw == warp), warp, -2)
        dups = None
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
                dups = True
                # 同一个字的多个读者：最后一次赋值生效，值相同
        self.rvol[flat] = np.where(r == -1, vol, self.rvol[flat] & vol)
        # 报告时说出两个不同的读者：一个字从一个读者变成多个读者时，把这两个线程记进 rany、ralt
        m = (r >= 0) & (r != tid)
        if m.any():
            fm = flat[m]
            self.ralt[fm] = r[m]
            self.rany[fm] = tid[m] if np.ndim(tid) else tid
        if dups is not None:     # 同一条语句里几个线程读同一个字：记下同组里的两个
            a = _alt(flat, tid, np.ones(flat.shape, bool), flat, flat)
            k = a >= 0
            if k.any():
                self.ralt[flat[k]] = a[k]
                self.rany[flat[k]] = np.broadcast_to(tid, flat.shape)[k]
        self.reader[flat] = newr
        self.rwarp[flat] = newrw
        self.rep[flat] = epoch
        self.rline[flat] = line

    def write(self, flat, tid, epoch, vol, line, report, same=None, vals=None):
        """记录一次写；发现 WAW/WAR 时调用 report。把同值写入当作良性时，same 标出写入的值与这个字现有的值
        相同的线程，vals 是写入的值。"""
        self.dirty = True
        self._check_writer(flat, tid, epoch, vol, "WAW", report, same)
        r = self.reader[flat]
        haz = (r == -2) | ((r >= 0) & (r != tid))
        if haz.any():
            rw = self.rwarp[flat]
            same = rw == (tid // 32)
            ok = same & (self.rep[flat] != epoch)
            haz &= ~ok
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report("WAR", i, self.other("WAR", i, flat, tid), int(self.rline[flat[i]]), bool(same[i]))
        if flat.size > 1:
            d = np.diff(flat)
            if not (d > 0).all():
                order = np.argsort(flat, kind="stable")
                fs = flat[order]
                dupm = fs[1:] == fs[:-1]
                if vals is not None:
                    vs = vals[order]
                    dupm &= vs[1:] != vs[:-1]
                dupw = fs[1:][dupm]
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


    def atomic(self, flat, tid, epoch, line, report, cas=False):
        """原子操作：彼此之间不算竞争；与另一个线程的普通读写之间没有屏障则算竞争。``cas``（atomicCAS）与之前
        普通的读不算竞争：CAS 先比较，读到旧值的线程会重来。"""
        self.dirty = True
        w = self.writer[flat]
        haz = (w >= 0) & (w != tid)
        if haz.any():
            same = (w // 32) == (tid // 32)
            haz &= ~(same & (self.wep[flat] != epoch))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report("RAW", i, int(w[i]), int(self.wline[flat[i]]), bool(same[i]))
        self.wcas[flat] = cas & ((w != ATOMIC) | self.wcas[flat])
        r = self.reader[flat]
        haz = (r == -2) | ((r >= 0) & (r != tid))
        if haz.any() and not cas:
            same = self.rwarp[flat] == (tid // 32)
            haz &= ~(same & (self.rep[flat] != epoch))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                report("WAR", i, self.other("WAR", i, flat, tid), int(self.rline[flat[i]]), bool(same[i]))
        self.walt[flat] = _alt(flat, tid, w != ATOMIC, self.wany[flat], self.walt[flat])
        self.wany[flat] = tid
        self.writer[flat] = ATOMIC
        self.wvol[flat] = False
        self.wline[flat] = line


ATOMIC = -3   # writer 的特殊值：自上一个屏障以来被原子操作修改过
ATOMIC_BASE = -10   # 报告里的“另一个线程”：ATOMIC_BASE - t 表示线程 t 的原子操作


def _alt(flat, tid, fresh, old_any, old_alt):
    """每个字“与最近访问者不同的另一个访问者”的新值：fresh 处没有旧记录；同一条语句里几个线程访问同一个字时，
    取同组里的另一个线程。"""
    tid = np.broadcast_to(tid, flat.shape)
    alt = np.where(fresh, -1, np.where(old_any != tid, old_any, old_alt))
    if flat.size > 1 and not (np.diff(flat) > 0).all():
        order = np.argsort(flat, kind="stable")
        fs = flat[order]
        ts = tid[order]
        starts = np.flatnonzero(np.concatenate(([True], fs[1:] != fs[:-1])))
        cnt = np.diff(np.concatenate((starts, [fs.size])))
        tmin = np.repeat(np.minimum.reduceat(ts, starts), cnt)
        tmax = np.repeat(np.maximum.reduceat(ts, starts), cnt)
        a = alt[order]
        a = np.where(tmin != tmax, np.where(ts == tmin, tmax, tmin), a)
        alt = np.empty_like(a)
        alt[order] = a
    return alt

HAZARD_NAMES = {
    "RAW": "写后读 read-after-write",
    "WAR": "读后写 write-after-read",
    "WAW": "写后写 write-after-write",
}


def race_message(kind, kernel, line, bufname, word, block, thread, other, other_line, same_warp):
    """竞争的双语说明；other 是另一个线程的坐标，或 (中文, 英文) 两种写法。"""
    other_zh, other_en = other if isinstance(other, tuple) else (other, other)
    what = {"RAW": "读取", "WAR": "写入", "WAW": "写入"}[kind]
    prev = {"RAW": "写过", "WAR": "读过", "WAW": "写过"}[kind]
    verb = {"RAW": "reads", "WAR": "writes", "WAW": "writes"}[kind]
    prev_en = {"RAW": "wrote", "WAR": "read", "WAW": "wrote"}[kind]
    zh_note, en_note = VOLTA_NOTE if same_warp else CROSS_WARP_NOTE
    return (
        f"共享内存数据竞争（{HAZARD_NAMES[kind]}）：内核 {kernel} 第 {line} 行，线程块 {block} 的线程 {thread} "
        f"{what} {bufname}[{word}]，而同一线程块的线程 {other_zh} 在上一个 __syncthreads() 之后于第 {other_line} 行{prev}这个字。"
        f"{zh_note} / shared-memory race ({kind}) in kernel {kernel}, line {line}: block {block}, thread {thread} "
        f"{verb} {bufname}[{word}], which thread {other_en} of the same block {prev_en} at line {other_line} "
        f"since the last __syncthreads(). {en_note}"
    ), SharedMemoryRaceError


# ---------------------------------------------------------------- 全局内存
# 全局内存的竞争记录：每个字一行，列如下（-1：没有；-2：多个）
# 写者一组、读者一组；读者的列排在最后（写入时 _R1: 一并清掉）。_WQ/_RQ：访问者的簇编号（多个簇为 SEVERAL），
# _WK/_RK：访问时访问者所在块完成的簇屏障到达数（多个访问取最大）；_WS：第 0 位是原子写者里有线程块作用域的
# （atomicAdd_block），第 1 位是原子写者全是 atomicCAS（这时普通的读不算竞争：CAS 循环先读一个猜测值）
_WL, _WB, _WE, _WW, _WC, _WA, _WLN, _WQ, _WK, _WS, _R1, _R2, _RB, _RE, _RW, _RLN, _RQ, _RK = range(18)
_NCOL = 18
NONE, SEVERAL = -1, -2


class GlobalTracker:
    """一个全局数组在整次启动中的竞争记录（compute-sanitizer 的 racecheck 只查共享内存，这里补上全局内存）。

    Per global word: the last writer (lane, block, the block's ``__syncthreads()``
    count and the warp's ``__syncwarp()`` count at the access, the launch clock, the
    line, whether it was an atomic) and up to two readers since that write. Two
    accesses by different threads are ordered only when both are in one block and a
    ``__syncthreads()`` of that block lies between them, or both are in one warp and
    a ``__syncwarp()`` lies between them, or both are in one thread block cluster and
    a cluster barrier lies between them (the earlier access before its block's k-th
    arrival, the later one after its block's k-th wait: arrive releases, wait
    acquires), or the earlier one is a write that its thread followed with
    ``__threadfence()`` (the publish-then-flag pattern). Nothing else orders two blocks
    of one launch. Atomics on both sides never race, unless the two are in different
    blocks and either is block-scoped (``atomicAdd_block``: atomic only among the
    threads of its own block). Volatile loads and stores are strong too (PTX gives
    ``ld/st.volatile`` the semantics of ``.relaxed.sys`` from sm_70 on): they do not race
    with atomics or other volatile accesses, and do with plain ones. A plain read and ``atomicCAS`` writes of one word do not
    race either way: that is the compare-and-swap loop (read a guess, CAS, retry on a
    mismatch), whose stale reads are harmless by construction; a plain write still races.
    """

    def __init__(self, nelem):
        self.s = np.full((nelem, _NCOL), NONE, np.int32)
        self.grid_syncs = 0       # 记录属于第几次 grid.sync() 之后（之前的访问排在之后的一切访问之前）

    @staticmethod
    def _unordered(lane, blk, ep, wep, olane, oblk, oep, owep, ogw, gw, ocl, oca, cl, cw):
        """另一个访问（o*）与本次访问之间没有顺序。olane=-2 表示多个线程（只看线程块）。
        簇：另一个访问在它所在块的第 oca + 1 次簇屏障到达之前，本块已经等完 cw 次簇屏障，oca < cw 时有顺序。"""
        same_block_later = (oblk == blk) & (oep < ep)
        same_warp_synced = (olane >= 0) & (ogw == gw) & (owep != wep)
        same_cluster_synced = (ocl == cl) & (oca < cw)
        return (olane != NONE) & (olane != lane) & ~same_block_later & ~same_warp_synced & ~same_cluster_synced

    def access(self, flat, lane, blk, ep, wep, gw, gw_of, fence, clock, line, kind, same_value, vals, cl, ca, cw,
               grid_syncs=0):
        """记录一次访问（kind：'read'、'write'、'atomic'、'atomic_block'：线程块作用域的原子操作），所有参数都是每个活跃线程一项的数组。``cl``、``ca``、``cw``：
        访问者所在块的簇编号、完成的簇屏障到达数与等待数（没有簇时每块自成一簇）。返回 None，或
        (i, hazard, other_lane, other_line, other_atomic)：第 i 个活跃线程与另一个线程冲突（两个原子操作之间的冲突，
        other_atomic 是 "block"：其中有线程块作用域的）。gw_of(lanes) 给出
        线程所在的全局线程束编号，fence 是每个线程最近一次 __threadfence() 的时钟。把同值写入当作良性时，
        same_value 标出与这个字现有的值相同的写，vals 是写入的值（同一条语句里几个线程写同一个字且值相同不报）。
        ``grid_syncs``：这次启动到此为止的 grid.sync() 次数；比记录里的多时，记录里的访问都排在这次访问之前，先清空。"""
        if grid_syncs != self.grid_syncs:
            self.s[:] = NONE
            self.grid_syncs = grid_syncs
        s = self.s[flat]
        n = flat.shape[0]
        # volatile 读写按 PTX 内存模型是强操作（sm_70 起 ld/st.volatile 与 .relaxed.sys 同样）：volatile 写记成
        # 原子写者，volatile 读是「强」读者（与原子、volatile 写者之间不算竞争）
        strong_read = kind == "vread"
        kind = "read" if strong_read else "atomic" if kind == "vwrite" else kind
        scoped = kind == "atomic_block"
        cas = kind == "atomic_cas"
        kind = "atomic" if scoped or cas else kind
        wl = s[:, _WL]
        # -- 与上一个写者
        if (wl != NONE).any():
            wa = s[:, _WA]
            wgw = gw_of(np.maximum(wl, 0))
            haz = self._unordered(lane, blk, ep, wep, np.where(wa == 2, SEVERAL, wl), s[:, _WB], s[:, _WE],
                                  s[:, _WW], wgw, gw, s[:, _WQ], s[:, _WK], cl, cw)
            plain = wa < 1
            if kind == "atomic":
                # 两个原子操作只在不同的线程块、其中有线程块作用域的时候冲突（_WB 为 SEVERAL：多个块）
                block_scope = ~plain & (scoped | ((s[:, _WS] & 1) == 1)) & (s[:, _WB] != blk)
                haz &= plain | block_scope
                if (haz & block_scope).any():
                    i = int(np.flatnonzero(haz & block_scope)[0])
                    other = int(wl[i]) if int(wl[i]) != int(lane[i]) else int(s[i, _WC])
                    return i, "WAW", other, int(s[i, _WLN]), "block"
            # 写后紧跟 __threadfence() 的写已经发布
            haz &= ~(plain & (wl >= 0) & (fence[np.maximum(wl, 0)] > s[:, _WC]))
            if kind == "write" and same_value is not None:
                haz &= ~(plain & same_value)
            if kind == "read":
                # 只被 atomicCAS 改过的字：普通的读只是 CAS 循环的第一次猜测（比较不上就重来），不算竞争
                haz &= ~(~plain & ((s[:, _WS] & 2) == 2))
                if strong_read:     # volatile 读与原子（设备作用域）或 volatile 写者之间不算竞争
                    haz &= plain | (((s[:, _WS] & 1) == 1) & (s[:, _WB] != blk))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                hz = "RAW" if kind == "read" else "WAW"
                other = int(wl[i]) if int(wl[i]) != int(lane[i]) else int(s[i, _WC])
                return i, hz, other, int(s[i, _WLN]), not plain[i]
        # -- 与上一个写之后的读者（atomicCAS 不算：它先比较，读到旧值的线程会重来）
        if kind != "read" and not cas:
            r1 = s[:, _R1]
            if (r1 != NONE).any():
                r2 = s[:, _R2]
                rb = s[:, _RB]
                several = r2 != NONE
                olane = np.where(several, SEVERAL, r1)
                rgw = gw_of(np.maximum(r1, 0))
                haz = self._unordered(lane, blk, ep, wep, olane, rb, s[:, _RE], s[:, _RW], rgw, gw, s[:, _RQ],
                                      s[:, _RK], cl, cw)
                if kind == "atomic" and not scoped:     # 强写者：只与普通的读者冲突（_WS 第 2 位）
                    haz &= (s[:, _WS] & 4) == 4
                if haz.any():
                    i = int(np.flatnonzero(haz)[0])
                    other = int(r1[i]) if int(r1[i]) != int(lane[i]) else int(r2[i])
                    return i, "WAR", other, int(s[i, _RLN]), False
        # -- 同一条语句里的多个线程访问同一个字
        order = None
        if n > 1 and not (np.diff(flat) > 0).all():
            order = np.argsort(flat, kind="stable")
            fs = flat[order]
            dup = np.concatenate(([False], fs[1:] == fs[:-1]))
            if kind == "write":
                bad = dup
                if vals is not None:
                    vs = vals[order]
                    bad = dup & np.concatenate(([False], vs[1:] != vs[:-1]))
                if bad.any():
                    k = int(np.flatnonzero(bad)[0])
                    return int(order[k]), "WAW", int(lane[order[k - 1]]), line, False
            elif scoped:        # 同一条 atomicAdd_block 语句里不同线程块的线程改同一个字
                bs = blk[order]
                bad = dup & np.concatenate(([False], bs[1:] != bs[:-1]))
                if bad.any():
                    k = int(np.flatnonzero(bad)[0])
                    return int(order[k]), "WAW", int(lane[order[k - 1]]), line, "block"
        # -- 更新记录
        lanev, blkv, new = lane, blk, s
        if kind == "write":
            new[:, _WL] = lanev
            new[:, _WB] = blkv
            new[:, _WE] = ep
            new[:, _WW] = wep
            new[:, _WC] = clock
            new[:, _WA] = 0
            new[:, _WLN] = line
            new[:, _WQ] = cl
            new[:, _WK] = ca
            new[:, _WS] = 0
            new[:, _R1:] = NONE
        else:
            if kind == "atomic":
                cols = (_WL, None, _WB, _WE, _WW, _WLN, _WQ, _WK)
                prev_kept = (wl != NONE) & (s[:, _WA] >= 1)
            else:
                cols = (_R1, _R2, _RB, _RE, _RW, _RLN, _RQ, _RK)
                prev_kept = s[:, _R1] != NONE
            c1, c2, cb, ce, cwc, cln, cq, ck = cols
            ob, oe, o1, oq, ok = s[:, cb], s[:, ce], s[:, c1], s[:, cq], s[:, ck]
            # 同一线程块、隔着 __syncthreads() 的旧记录已经排在本线程块以后的一切访问之前：换掉
            keep = prev_kept & ~((ob == blkv) & (oe < ep))
            nb = np.where(keep & (ob != blkv), SEVERAL, blkv)
            if c2 is not None:
                o2 = s[:, c2]
                new[:, c2] = np.where(keep & (o1 != lanev), o1, np.where(keep, o2, NONE))
                new[:, c1] = lanev
            else:   # 原子写者：_WA 为 1（一个线程 _WL）或 2（多个线程，_WL 与 _WC 是其中两个）
                wa_old, alt_old = s[:, _WA].copy(), s[:, _WC].copy()
                new[:, _WA] = np.where(keep & ((o1 != lanev) | (wa_old == 2)), 2, 1)
                new[:, _WC] = np.where(keep & (o1 != lanev), o1, np.where(keep & (wa_old == 2), alt_old, NONE))
                new[:, c1] = lanev
            new[:, cb] = nb
            new[:, ce] = np.where(keep, np.maximum(oe, ep), ep)
            new[:, cwc] = wep
            new[:, cln] = line
            new[:, cq] = np.where(keep & (oq != cl), SEVERAL, cl)
            new[:, ck] = np.where(keep, np.maximum(ok, ca), ca)
            if kind == "read":
                # 第 2 位：上一个写之后的读者里有普通的（不是 volatile）读
                new[:, _WS] = (s[:, _WS] & 3) | np.where((keep & ((s[:, _WS] & 4) == 4)) | (not strong_read), 4, 0)
            if kind == "atomic":
                # 第 0 位：原子写者里有线程块作用域的；第 1 位：原子写者全是 atomicCAS
                new[:, _WS] = np.where(keep & ((s[:, _WS] & 1) == 1), 1, int(scoped)) | \
                    np.where(cas & (~keep | ((s[:, _WS] & 2) == 2)), 2, 0)
                new[:, _R1:] = NONE
            if order is not None:
                # 同一个字的多个线程：按线程编号依次合并（写回时后面的覆盖前面的）
                fs = flat[order]
                starts = np.flatnonzero(np.concatenate(([True], fs[1:] != fs[:-1])))
                ends = np.concatenate((starts[1:], [fs.size])) - 1
                hi = order[ends]
                lmin = np.minimum.reduceat(lanev[order], starts)
                lmax = np.maximum.reduceat(lanev[order], starts)
                bmin = np.minimum.reduceat(blkv[order], starts)
                bmax = np.maximum.reduceat(blkv[order], starts)
                multi = lmin != lmax
                alt = np.where(lanev[hi] == lmin, lmax, lmin)
                if c2 is not None:
                    new[hi, c2] = np.where(multi, alt, new[hi, c2])
                else:
                    new[hi, _WC] = np.where(multi, alt, new[hi, _WC])
                    new[hi, _WA] = np.where(multi, 2, new[hi, _WA])
                new[hi, cb] = np.where(bmin != bmax, SEVERAL, new[hi, cb])
                qmin = np.minimum.reduceat(cl[order], starts)
                qmax = np.maximum.reduceat(cl[order], starts)
                new[hi, cq] = np.where(qmin != qmax, SEVERAL, new[hi, cq])
                new[hi, ck] = np.maximum(new[hi, ck], np.maximum.reduceat(ca[order], starts))
        self.s[flat] = new
        return None


GLOBAL_BLOCK_NOTE = (
    "两个线程属于不同的线程块：一次启动之内，除了协作启动里的 grid.sync()，没有任何东西排定不同线程块的先后"
    "（__syncthreads() 只同步同一线程块）；请改用原子操作（两边都是），或把依赖别的线程块结果的部分放到下一次启动。",
    "The two threads are in different blocks: nothing but grid.sync() in a cooperative launch orders two blocks "
    "within one launch (__syncthreads() synchronises one block only): use atomics on both sides, or move the "
    "dependent part to a second launch.",
)
GLOBAL_CLUSTER_NOTE = (
    "两个线程属于同一个线程块簇的不同线程块，两次访问之间没有簇屏障：__syncthreads() 只同步同一线程块；"
    "先访问的一方之后要 cluster.sync()（或 barrier_arrive()），后访问的一方在 cluster.sync()（或 barrier_wait()）之后再访问。",
    "The two threads are in different blocks of one thread block cluster and no cluster barrier lies between the "
    "accesses (__syncthreads() synchronises one block only): the first side must reach cluster.sync() (or "
    "barrier_arrive()) after its access, and the second side access only after cluster.sync() (or barrier_wait()).",
)
GLOBAL_BLOCK_SCOPE_NOTE = (
    "两个线程属于不同的线程块，而其中至少一次是线程块作用域的原子操作（atomicAdd_block 等）：它只对同一线程块的线程"
    "是原子的，别的线程块同时改这个字，两次读-改-写可能交错，丢掉一次更新。几个线程块共用的字请用 atomicAdd 等"
    "（设备作用域）；_block 版本只留给一个线程块独占的字。",
    "The two threads are in different blocks and at least one of the accesses is a block-scoped atomic "
    "(atomicAdd_block, ...): it is atomic only with respect to the threads of its own block, so two blocks "
    "updating the word can interleave their read-modify-writes and lose an update. Use atomicAdd (device scope) "
    "for words that several blocks share; keep the _block versions for words that one block owns.",
)
GLOBAL_SAME_BLOCK_NOTE = (
    "两个线程属于同一线程块的不同线程束，两次访问之间没有 __syncthreads()。",
    "The two threads are in different warps of one block and no __syncthreads() lies between the accesses.",
)


GLOBAL_SAME_STORE_NOTE = (
    "两次写是同一行代码，被几个线程执行，写到了同一个位置：每个输出元素只让一个线程写"
    "（例如 if (tid == 0)；几个线程块要合写一个元素时，用原子操作，或只让其中一块写）。",
    "Both writes come from the same line executed by several threads and hit the same element: let one thread "
    "write each output element (e.g. if (tid == 0); when several blocks share one element, use atomics or let "
    "only one of the blocks write it).",
)


def global_race_message(kind, kernel, line, bufname, word, block, thread, oblock, othread, other_line,
                        other_atomic, note):
    """全局内存竞争的双语说明。同一行的两次普通写（几个线程写同一个输出）换成 :data:`GLOBAL_SAME_STORE_NOTE`。"""
    if kind == "WAW" and not other_atomic and str(other_line) == str(line):
        # 同一个线程块里：同步帮不上忙，只说一个线程写；不同的线程块：再说一句块之间没有先后
        note = GLOBAL_SAME_STORE_NOTE if note in (VOLTA_NOTE, GLOBAL_SAME_BLOCK_NOTE) else (
            GLOBAL_SAME_STORE_NOTE[0] + note[0], GLOBAL_SAME_STORE_NOTE[1] + " " + note[1])
    what = {"RAW": "读取", "WAR": "写入", "WAW": "写入"}[kind]
    verb = {"RAW": "reads", "WAR": "writes", "WAW": "writes"}[kind]
    if kind == "WAR":
        prev, prev_en = "读过", "read"
    elif other_atomic == "block" and kind == "WAW":
        what, verb = "用原子操作改", "atomically updates"
        prev, prev_en = "用原子操作改过", "atomically updated"
    elif other_atomic:
        prev, prev_en = "用原子操作改过", "atomically updated"
    else:
        prev, prev_en = "写过", "wrote"
    zh_note, en_note = note
    return (
        f"全局内存数据竞争（{HAZARD_NAMES[kind]}）：内核 {kernel} 第 {line} 行，线程块 {block} 的线程 {thread} "
        f"{what} {bufname}[{word}]，而线程块 {oblock} 的线程 {othread} 在第 {other_line} 行{prev}这个字，"
        f"两次访问之间没有同步。{zh_note} / global-memory race ({kind}) in kernel {kernel}, line {line}: "
        f"block {block}, thread {thread} {verb} {bufname}[{word}], which block {oblock}, thread {othread} "
        f"{prev_en} at line {other_line}, with nothing ordering the two accesses. {en_note}"
    )


# ---------------------------------------------------------------- 分布式共享内存（线程块簇）
CLUSTER_NOTE = (
    "两个线程属于簇里不同的线程块（或者有一方经 cluster.map_shared_rank 访问别的块的共享内存）：__syncthreads() "
    "只排定同一线程块的线程，簇内不同的块之间要用 cluster.sync()（或 barrier_arrive() 之后的 barrier_wait()）。",
    "The accesses come from different blocks of the cluster (or one goes through cluster.map_shared_rank to another "
    "block's shared memory): __syncthreads() orders only the threads of one block; blocks of a cluster are ordered "
    "by cluster.sync() (or barrier_arrive() followed by barrier_wait()).",
)


class ClusterTracker:
    """一个共享数组（所有线程块）的簇内竞争记录：两次访问来自不同的线程块、或至少一次经分布式共享内存访问
    别的块时，由它检查（同一线程块内的本地访问仍由 :class:`SharedTracker` 检查）。

    Per shared word of every block: the last writer and the reader(s) as grid
    lanes, the block's cluster-barrier *arrive* count and ``__syncthreads()`` count
    at the access, the line, and whether the access was remote (made by a block
    other than the owner). Two accesses by different threads, at least one a
    write and at least one remote, are ordered when the later thread's block has
    completed more cluster-barrier *waits* than the earlier block had *arrives* at
    its access (``cluster.sync()`` is an arrive plus a wait), or when both threads
    are in one block and a ``__syncthreads()`` of that block lies between them.
    Two atomics (``atomicAdd`` through ``map_shared_rank`` ...) never race; an atomic
    against a plain read or write does. Records older than a completed cluster
    barrier are dropped at the barrier.
    """

    def __init__(self, n):
        self.wlane = np.full(n, -1, np.int32)
        self.wa = np.zeros(n, np.int32)
        self.wbar = np.zeros(n, np.int32)
        self.wline = np.zeros(n, np.int32)
        self.wrem = np.zeros(n, bool)
        self.watom = np.zeros(n, bool)            # 最后一次写是原子操作
        self.rlane = np.full(n, -1, np.int32)     # -2：多个线程读过
        self.rblk = np.full(n, -1, np.int32)      # 读者所在的线程块，-2：多个块
        self.ra = np.zeros(n, np.int32)
        self.rbar = np.zeros(n, np.int32)
        self.rline = np.zeros(n, np.int32)
        self.rrem = np.zeros(n, bool)

    def access(self, flat, lane, blk, a, w, bar, remote, line, write, blk_of, atomic=False):
        """记录一次访问（flat：每个线程访问的字；lane、blk：线程与它的块；a、w、bar：它的块到达与等待过的簇屏障数、
        __syncthreads() 数；remote：是否访问别的块；atomic：原子操作，算作写）。发现竞争时返回
        (种类, 下标, 另一个线程, 另一次访问的行)，另一个线程为 -2 表示多个；否则返回 None。"""
        wl = self.wlane[flat]
        haz = (wl >= 0) & (wl != lane) & (remote | self.wrem[flat]) & (w <= self.wa[flat])
        if atomic:
            haz &= ~self.watom[flat]
        if haz.any():
            same = blk_of[np.maximum(wl, 0)] == blk
            haz &= ~(same & (self.wbar[flat] < bar))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                return ("WAW" if write else "RAW", i, int(wl[i]), int(self.wline[flat[i]]))
        if write:
            rl = self.rlane[flat]
            haz = (rl != -1) & (rl != lane) & (remote | self.rrem[flat]) & (w <= self.ra[flat])
            haz &= ~((self.rblk[flat] == blk) & (self.rbar[flat] < bar))
            if haz.any():
                i = int(np.flatnonzero(haz)[0])
                return ("WAR", i, int(rl[i]), int(self.rline[flat[i]]))
        dup = None
        if flat.size > 1:
            order = np.argsort(flat, kind="stable")
            fs = flat[order]
            d = fs[1:] == fs[:-1]
            if d.any():
                dup = (order, fs, d)
        if write:
            if dup is not None and not atomic:  # 同一条语句里几个线程写同一个字：有一方是远程访问时算竞争
                order, fs, d = dup
                rs = np.broadcast_to(remote, flat.shape)[order]
                bad = d & (rs[1:] | rs[:-1])
                if bad.any():
                    k = int(np.flatnonzero(bad)[0])
                    return ("WAW", int(order[k + 1]), int(np.broadcast_to(lane, flat.shape)[order[k]]), line)
            self.wlane[flat] = lane
            self.wa[flat] = a
            self.wbar[flat] = bar
            self.wline[flat] = line
            self.wrem[flat] = remote
            self.watom[flat] = atomic
            return None
        rl = self.rlane[flat]
        fresh = rl == -1
        newr = np.where(fresh | (rl == lane), lane, -2)
        rb = self.rblk[flat]
        newb = np.where(fresh | (rb == blk), blk, -2)
        if dup is not None:             # 同一个字的几个读者：记成“多个”
            order, fs, d = dup
            multi = np.zeros(flat.size, bool)
            m = np.concatenate(([False], d)) | np.concatenate((d, [False]))
            multi[order] = m
            newr = np.where(multi, -2, newr)
            bs = np.broadcast_to(blk, flat.shape)[order]
            nb = np.zeros(flat.size, bool)
            e = d & (bs[1:] != bs[:-1])
            nb[order] = np.concatenate(([False], e)) | np.concatenate((e, [False]))
            newb = np.where(nb, -2, newb)
        self.rrem[flat] = np.where(fresh, remote, self.rrem[flat] | remote)
        self.rbar[flat] = np.where(fresh, bar, np.maximum(self.rbar[flat], bar))
        self.ra[flat] = np.maximum(self.ra[flat], a)
        self.rlane[flat] = newr
        self.rblk[flat] = newb
        self.rline[flat] = line
        return None

    def barrier(self, blocks, waits, per):
        """簇屏障的等待完成：这些块的共享内存里，到达数小于新的等待数的记录（屏障之前的访问）不再需要。"""
        wl = self.wlane.reshape(-1, per)
        rl = self.rlane.reshape(-1, per)
        wv = waits[:, None]
        oldw = self.wa.reshape(-1, per)[blocks] < wv
        oldr = self.ra.reshape(-1, per)[blocks] < wv
        sub = wl[blocks]
        sub[oldw] = -1
        wl[blocks] = sub
        sub = rl[blocks]
        sub[oldr] = -1
        rl[blocks] = sub
        rr = self.rrem.reshape(-1, per)
        sub = rr[blocks]
        sub[oldr] = False
        rr[blocks] = sub


def cluster_race_message(kind, kernel, line, bufname, word, owner, owner_rank, block, thread, other_block,
                         other_thread, other_line):
    """簇内竞争的双语说明：owner 是这个字所在的线程块，block/thread 与 other_block/other_thread 是两次访问的线程。"""
    what = {"RAW": "读取", "WAR": "写入", "WAW": "写入"}[kind]
    prev = {"RAW": "写过", "WAR": "读过", "WAW": "写过"}[kind]
    verb = {"RAW": "reads", "WAR": "writes", "WAW": "writes"}[kind]
    prev_en = {"RAW": "wrote", "WAR": "read", "WAW": "wrote"}[kind]
    if other_thread is None:
        oz, oe = "另外的线程（多个）", "other threads (several)"
    else:
        oz, oe = f"线程块 {other_block} 的线程 {other_thread}", f"thread {other_thread} of block {other_block}"
    zh_note, en_note = CLUSTER_NOTE
    return (
        f"共享内存数据竞争（{HAZARD_NAMES[kind]}，簇内跨线程块）：内核 {kernel} 第 {line} 行，线程块 {block} 的线程 {thread} "
        f"{what}线程块 {owner}（簇内编号 {owner_rank}）的 {bufname}[{word}]，而{oz}在上一个簇屏障之后于第 {other_line} 行"
        f"{prev}这个字。{zh_note} / shared-memory race ({kind}) across the blocks of a cluster in kernel {kernel}, "
        f"line {line}: thread {thread} of block {block} {verb} {bufname}[{word}] of block {owner} (cluster rank "
        f"{owner_rank}), which {oe} {prev_en} at line {other_line} since the last cluster barrier. {en_note}"
    ), SharedMemoryRaceError
