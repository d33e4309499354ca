"""内存：模拟的数组，以及把启动参数变成数组与 C 标量（文档：docs/cuda/simulator.md）。

Memory of the simulator: a :class:`Buffer` is one global array (the caller's
array, shared, so that results are written in place), one ``__shared__`` array
(one copy per block) or one local array (one copy per thread). Two functions
convert launch arguments: numpy arrays or CPU torch tensors (duck-typed through
``.numpy()``) for pointer parameters, Python numbers for scalar parameters.
"""

from __future__ import annotations

import numpy as np

from . import ctype as T


class Buffer:
    """一块内存：global（全局数组）、shared（每个线程块一份）、local（每个线程一份）。"""

    def __init__(self, kind, name, data, elem, per, vol=False, base=0):
        self.kind = kind
        self.name = name
        self.data = data          # 一维 numpy 数组
        self.elem = elem          # 标量 CType
        self.per = per            # 每份的元素个数
        self.vol = vol
        self.base = base          # 字节地址（共享内存：块内偏移）
        self.tracker = None       # 共享内存的竞争记录（SharedTracker）
        self.gtracker = None      # 全局内存的竞争记录（GlobalTracker）
        self.constant = False     # __constant__ 常量内存（只读，不计入全局内存的计数器）
        self.scalar = False       # 共享标量（__shared__ float x;）
        self.t = None             # 声明的类型
        self.init = None          # 共享 / 局部内存：每个单元是否被写过（None：不检查）
        self.init_w = 1           # 每个元素占 init 里的几个单元（动态共享内存按字节记录）
        self.parent = None        # 按字节的视图：原来那块内存（竞争与初始化记录都在它那里）
        self._bytes = None
        self.ctracker = None      # 簇内跨线程块（分布式共享内存）的竞争记录（ClusterTracker）
        self.remote = False       # cluster.map_shared_rank 得到的视图：偏移里编码了目标块的簇内编号
        self.local = None         # 远程视图对应的本地 Buffer
        self._remote = None

    @property
    def raw(self):
        """同一块内存按字节看（numpy 的视图，不复制）。"""
        return self.data.view(np.uint8)

    def byte_view(self):
        """这块内存的按字节视图（unsigned char 为单元，共用数据、竞争与初始化记录）：指针转换成元素更小的类型时用。"""
        if self.elem.size == 1:
            return self
        if self.remote:
            return self.local.byte_view().remote_view()
        b = self._bytes
        if b is None:
            u = self.elem.size
            b = Buffer(self.kind, self.name, self.data.view(np.uint8), T.UCHAR, self.per * u, self.vol, self.base)
            b.parent = self
            b.constant, b.scalar, b.t = self.constant, self.scalar, self.t
            self._bytes = b
        return b


#: 远程（分布式共享内存）指针的偏移 = 簇内编号 x 跨度 + 块内偏移；跨度按字节是 2**28（远大于每块 227 KiB 的
#: 共享内存，越界的偏移不会落进另一块），按存储单元是 RANK_SPAN_BYTES // 单元大小
RANK_SPAN_BYTES = 1 << 28


def remote_view(buf):
    """共享数组 buf 的远程视图（cluster.map_shared_rank 的结果指向它）：数据、竞争与初始化记录都与 buf 共用，
    只是偏移里编码了目标块的簇内编号（见 :data:`RANK_SPAN_BYTES`）。"""
    r = buf._remote
    if r is None:
        r = Buffer(buf.kind, buf.name, buf.data, buf.elem, buf.per, buf.vol, buf.base)
        r.tracker, r.gtracker, r.ctracker = buf.tracker, buf.gtracker, buf.ctracker
        r.constant, r.scalar, r.t, r.init, r.init_w = buf.constant, buf.scalar, buf.t, buf.init, buf.init_w
        r.remote, r.local, r._remote = True, buf, r
        buf._remote = r
        if buf.parent is not None:              # 按字节的视图：转回元素类型时回到远程的元素视图
            r.parent = remote_view(buf.parent)
            r.parent._bytes = r
    return r


Buffer.remote_view = remote_view


def rank_span(buf):
    """远程视图的偏移里一个簇内编号占的存储单元数。"""
    return RANK_SPAN_BYTES // buf.elem.size


def array_arg(a, pname, t):
    """把参数转换成一维 numpy 数组（与原数组共享内存）。"""
    if isinstance(a, np.ndarray):
        arr = a
    elif hasattr(a, "numpy") and hasattr(a, "device"):
        dev = getattr(a.device, "type", str(a.device))
        if dev != "cpu":
            raise TypeError(f"参数 {pname}：张量在 {a.device} 上，模拟器只接受 CPU 张量 / tensor must be on the CPU")
        if str(getattr(a, "dtype", "")) == "torch.bfloat16":
            # numpy 没有 bfloat16：按 16 位整数取出同一块内存，再看成 ml_dtypes 的 bfloat16
            if T.BF16 is None:
                raise TypeError(f"参数 {pname}：{T.BF16_MISSING}")
            import torch

            arr = a.detach().view(torch.int16).numpy().view(T.BF16.dtype)
        else:
            arr = a.detach().numpy()
    else:
        raise TypeError(
            f"参数 {pname} 是指针（{t!r}），需要 numpy 数组或 CPU 张量，得到 {type(a).__name__} / "
            f"pointer parameter {pname} needs an array, got {type(a).__name__}"
        )
    el = T.scalar_of(t.base)
    if el.size == 1 and (t.base.is_void or t.base.is_vec and not t.base.uniform):
        # void* 与按字节布局的结构体（成员大小不同、含指针、联合）：任何连续的数组都按字节看
        if arr.size and not arr.flags.c_contiguous:
            raise ValueError(f"参数 {pname} 不是连续存储的数组（strides={arr.strides}）/ array must be C-contiguous")
        return arr.reshape(-1).view(np.uint8)
    if arr.dtype != el.dtype:
        raise TypeError(
            f"参数 {pname} 的元素类型应为 {el.name}（{el.dtype}），得到 {arr.dtype} / "
            f"parameter {pname} expects {el.dtype} elements, got {arr.dtype}"
        )
    if arr.size and not arr.flags.c_contiguous:
        raise ValueError(f"参数 {pname} 不是连续存储的数组（strides={arr.strides}）/ array must be C-contiguous")
    return arr.reshape(-1)


def scalar_arg(a, pname, t):
    if isinstance(a, (bool, np.bool_)):
        a = int(a)
    if hasattr(a, "item") and not isinstance(a, np.ndarray) and getattr(a, "ndim", 0) == 0 and not isinstance(a, np.generic):
        a = a.item()  # 0 维张量
    if isinstance(a, np.ndarray):
        if a.ndim != 0:
            raise TypeError(f"参数 {pname} 是标量（{t.name}），得到数组 / scalar parameter {pname} got an array")
        a = a[()]
    if t.is_int:
        if isinstance(a, (float, np.floating)):
            raise TypeError(f"参数 {pname} 是 {t.name}，不能传浮点数 {a!r} / integer parameter {pname} got a float")
        if not isinstance(a, (int, np.integer)):
            raise TypeError(f"参数 {pname} 应为整数，得到 {type(a).__name__} / parameter {pname} needs an int")
        a = int(a)
        info = np.iinfo(t.dtype) if t is not T.BOOL else None
        if info is not None and not info.min <= a <= info.max:
            raise OverflowError(f"参数 {pname}={a} 超出 {t.name} 的范围 / out of range for {t.name}")
        return t.dtype.type(a)
    if not isinstance(a, (int, float, np.integer, np.floating)):
        raise TypeError(f"参数 {pname} 应为数值，得到 {type(a).__name__} / parameter {pname} needs a number")
    return t.dtype.type(a)


def vec_arg(a, pname, t):
    """按值传递的向量类型或结构体（uchar4、float3、struct {int a, b;} ...）：n 个数的元组、列表或一维数组。"""
    if hasattr(a, "numpy") and hasattr(a, "device"):
        a = a.detach().cpu().numpy()
    if isinstance(a, np.ndarray):
        a = a.reshape(-1).tolist() if a.ndim == 1 else a
    if not isinstance(a, (tuple, list)) or len(a) != t.n or t.has_ptr:
        raise TypeError(f"参数 {pname} 是按值传递的 {t.name}（{t.n} 个成员 {', '.join(t.fields)}），请传 {t.n} 个数的元组，"
                        f"得到 {type(a).__name__} / parameter {pname} is a {t.name} passed by value: pass a tuple of "
                        f"{t.n} numbers")
    return tuple(scalar_arg(x, f"{pname}.{f}", e) for x, f, e in zip(a, t.fields, t.elems))
