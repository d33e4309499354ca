"""不常驻、每块一段的长行 softmax（对照实验）：与常驻网格 softmax_grid_pipe 并排，看预取的环省下了什么。

    REDUCTION_LAB_MODE=gpu python scripts/ticket_grid_softmax.py --json docs/data/h100_ticket_grid_softmax.json

对照内核 ``softmax_ticket``（本文件里的 TICKET，接在 src/reduction_lab/cuda_kernels/softmax_cluster.cu 之后编译，
用它的 cp.async、(m, s) 的合并与 64 位槽位的读写）：网格是 M * S 个块，一块只处理一段。块一开始在全局计数器上
原子加一，拿到的「票号」决定它处理哪一行的哪一段：票号按块真正开始运行的先后发放，号小的块都已在运行或已结束，
所以等待不会死锁（一行的段数不超过同时驻留的块数即可）。每块：cp.async 把本段搬进共享内存、算出 (m, s)、
发布、等齐本行的各段、写出。与常驻网格一样每个元素读一次、写一次、exp 算一次，差别只在一块里没有流水：
读下一段与等这一段、写这一段不重叠，只能靠同一个 SM 上的其他块。

每个 (dtype, M, N)：输入 randn * 4 加每行不同的偏移（-100 … 100），先与 float64 的 torch.softmax 比对（float32：
|y - ref| <= 1e-8 + 1e-4 |ref|；bfloat16：1e-8 + 2^-7 |ref|），不符的不计时；再用 reduction_lab.bench.timing.time_gpu
计时（CUDA 事件，每次调用前只读地扫过 4 倍 L2，中位数），同一进程里量同样字节数的 y.copy_(x) 与默认 backend
``reduction_lab.softmax(x)``。``frac`` = 拷贝的时间 / 被测的时间。
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

import reduction_lab as rl

TICKET = r'''
extern "C" __global__ void __launch_bounds__(BLOCK_SIZE)
softmax_ticket(const floatX *__restrict__ x, floatX *__restrict__ y, long long row_stride, int n_cols,
               int seg_vecs, int n_segs, unsigned *counter, unsigned long long *slots)
{
    extern __shared__ uint4 sbuf[];
    __shared__ unsigned s_w;
    __shared__ float2 red[NWARPS];
    __shared__ float2 row_ms;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0)
        s_w = atomicAdd(counter, 1u);            // 票号：第几个开始运行的块
    __syncthreads();
    const long long w = s_w;
    const long long row = w / n_segs;
    const int seg = (int)(w % n_segs);
    const int nv = min(seg_vecs, n_cols / VEC - seg * seg_vecs);
    const uint4 *src = reinterpret_cast<const uint4 *>(x + row * row_stride) + (long long)seg * seg_vecs;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int k = threadIdx.x + p * BLOCK_SIZE;
        if (k < nv)
            copy_async16(sbuf + k, src + k);
    }
    copy_commit();
    copy_wait<0>();                              // 每个线程只读自己搬的向量：不需要屏障
    float bm = NEG_INF, bs = 0.0f;
    float f[PACKS][VEC];
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int k = threadIdx.x + p * BLOCK_SIZE;
        unpack(k < nv ? sbuf[k] : neg_inf_vec(), f[p]);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            bm = fmaxf(bm, f[p][e]);
    }
    const float mb = bm != NEG_INF ? bm : 0.0f;
#pragma unroll
    for (int p = 0; p < PACKS; p++)
#pragma unroll
        for (int e = 0; e < VEC; e++) {
            f[p][e] = fast_exp2((f[p][e] - mb) * LOG2E);   // e 留在寄存器里，写出时只乘一个数
            bs += f[p][e];
        }
    warp_combine(bm, bs);
    if (lane == 0)
        red[warp] = make_float2(bm, bs);
    __syncthreads();
    if (warp == 0) {
        float2 q = lane < NWARPS ? red[lane] : make_float2(NEG_INF, 0.0f);
        warp_combine(q.x, q.y);
        if (lane == 0)
            st_slot(slots + w, q.x, q.y);        // 发布本段的 (m, s)
        const unsigned long long *rs = slots + row * n_segs;
        float M = NEG_INF, S = 0.0f;
        for (int i = lane; i < n_segs; i += 32) {   // 等齐本行的各段
            unsigned long long v = ld_slot(rs + i);
            while ((unsigned)v == SLOT_EMPTY)
                v = ld_slot(rs + i);
            combine(M, S, __uint_as_float((unsigned)(v >> 32)), __uint_as_float((unsigned)v));
        }
        warp_combine(M, S);
        if (lane == 0)
            row_ms = make_float2(M, S);
    }
    __syncthreads();
    const float2 MS = row_ms;
    const float sc = fast_exp2((mb - MS.x) * LOG2E) / MS.y;
    uint4 *yr = reinterpret_cast<uint4 *>(y + row * row_stride) + (long long)seg * seg_vecs;
#pragma unroll
    for (int p = 0; p < PACKS; p++) {
        const int k = threadIdx.x + p * BLOCK_SIZE;
        if (k < nv) {
#pragma unroll
            for (int e = 0; e < VEC; e++)
                f[p][e] *= sc;
            __stcs(yr + k, pack(f[p]));
        }
    }
}
'''

#: (线程数, 每个线程几个 16 字节向量)：每段 16 / 32 / 64 KiB 等
CONFIGS = ((256, 4), (256, 8), (256, 16), (512, 2), (512, 4), (512, 8), (1024, 2), (1024, 4))
SHAPES = ((64, 1 << 20), (256, 1 << 18), (512, 1 << 17))
_DEFINES = {torch.float32: (0, 0), torch.bfloat16: (1, 0)}
_kernels: dict = {}


def _kernel(dtype, block, packs):
    import cupy

    from reduction_lab.cuda_kernels.cluster import KERNEL_SOURCE
    from reduction_lab.cuda_kernels.launcher import nvrtc_source, read_source

    key = (dtype, block, packs)
    if key not in _kernels:
        bf, fp = _DEFINES[dtype]
        code = (f"#define CLUSTER_SIZE 1\n#define USE_BF16 {bf}\n#define USE_FP16 {fp}\n#define BLOCK_SIZE {block}\n"
                f"#define PACKS {packs}\n#define AHEAD 1\n#define DELAY 1\n"
                + nvrtc_source(read_source(KERNEL_SOURCE)) + TICKET)
        _kernels[key] = cupy.RawKernel(code, "softmax_ticket")
    return _kernels[key]


def ticket_softmax(x, y, block, packs, counter, slots):
    """启动一次 softmax_ticket：计数器清零、槽位填哨兵，与启动排在同一个流里。"""
    from reduction_lab.cuda_kernels.grid import SLOT_EMPTY
    from reduction_lab.cuda_kernels.launcher import cupy_stream

    M, N = x.shape
    vec = 16 // x.element_size()
    seg_vecs = block * packs
    n_segs = -(-(N // vec) // seg_vecs)
    k = _kernel(x.dtype, block, packs)
    k.max_dynamic_shared_size_bytes = seg_vecs * 16
    counter.zero_()
    slots[:M * n_segs].fill_(SLOT_EMPTY)
    ptr = np.uint64
    with cupy_stream(x.get_device()):
        k((M * n_segs,), (block,), (ptr(x.data_ptr()), ptr(y.data_ptr()), np.int64(x.stride(0)), np.int32(N),
                                    np.int32(seg_vecs), np.int32(n_segs), ptr(counter.data_ptr()),
                                    ptr(slots.data_ptr())), shared_mem=seg_vecs * 16)
    return y


def summary_table(doc: dict) -> str:
    """写出的 JSON -> 等宽文本表：每个 (dtype, N) 拷贝的 GB/s、默认 backend 与对照内核最快的配置（拷贝的百分比）。"""
    lines = [f"{'dtype':9s}{'N':>8s}{'拷贝GB/s':>9s}{'默认backend':>12s}{'每块一段':>9s}{'配置':>10s}"]
    for r in doc["rows"]:
        best = max(r["ticket"], key=lambda c: c.get("frac", 0))
        lines.append(f"{r['dtype']:9s}{r['N']:8d}{r['copy_gbps']:9.0f}{100 * r['auto']:11.0f}%"
                     f"{100 * best['frac']:8.0f}%{best['block']:>6d}x{best['packs']:<3d}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None, help="写出结果的 JSON 路径（默认不写）")
    args = ap.parse_args(argv)
    rl.runtime.require_gpu("ticket_grid_softmax")
    from reduction_lab.bench.timing import L2Flusher, time_gpu

    props = torch.cuda.get_device_properties(0)
    flusher = L2Flusher(props.L2_cache_size)
    doc = {"meta": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "sm_count": props.multi_processor_count, "date": time.strftime("%Y-%m-%d"),
                    "command": "python scripts/ticket_grid_softmax.py " + " ".join(sys.argv[1:] if argv is None else argv),
                    "method": "validate against float64 torch.softmax, then reduction_lab.bench.timing.time_gpu "
                              "(CUDA events, read-only 4x L2 sweep before each call, median of 40); "
                              "frac = copy time / time, copy = y.copy_(x) in the same process"},
           "rows": []}
    for dtype in _DEFINES:
        for M, N in SHAPES:
            g = torch.Generator(device="cuda").manual_seed(0)
            x = (torch.randn(M, N, device="cuda", generator=g) * 4
                 + torch.linspace(-100, 100, M, device="cuda")[:, None]).to(dtype)
            ref = torch.softmax(x.double(), 1)
            y = torch.empty_like(x)
            counter = torch.zeros(1, dtype=torch.int32, device="cuda")
            slots = torch.empty(M * 512, dtype=torch.int64, device="cuda")
            nbytes = 2 * x.numel() * x.element_size()

            def gbps(fn):
                return nbytes / (time_gpu([fn], 5, 40, flusher).median_ms * 1e-3) / 1e9

            copy = gbps(lambda: y.copy_(x))
            rl.softmax(x)
            row = {"dtype": str(dtype).removeprefix("torch."), "M": M, "N": N, "copy_gbps": copy,
                   "auto": gbps(lambda: rl.softmax(x)) / copy, "ticket": []}
            tol = 1e-4 if dtype == torch.float32 else 2.0 ** -7
            for block, packs in CONFIGS:
                if packs * (16 // x.element_size()) > 64:      # 每个线程至多 64 个元素：再多寄存器会溢出
                    continue
                cand = {"block": block, "packs": packs}
                y.fill_(float("nan"))
                ticket_softmax(x, y, block, packs, counter, slots)
                err = ((y.double() - ref).abs() - tol * ref.abs() - 1e-8).max().item()
                if not err <= 0:
                    cand["error"] = f"exceeds the tolerance by {err:.3g}"
                else:
                    cand["frac"] = gbps(lambda: ticket_softmax(x, y, block, packs, counter, slots)) / copy
                row["ticket"].append(cand)
            print(json.dumps(row), flush=True)
            doc["rows"].append(row)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(doc, f, indent=1)
    print(summary_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
