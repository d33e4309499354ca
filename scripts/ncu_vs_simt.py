"""把模拟器的计数器与 Nsight Compute 在 GPU 上量到的同名指标逐项对照。

同一份 .cu、同样的网格和参数：GPU 上经 CuPy 启动并由 ncu 计数，CPU 上由 reduction_lab.simt 计数。

    # 1) GPU 机器上（gpu 模式）：ncu 给每次启动量一组指标，写成 CSV
    ncu --csv --log-file ncu.csv --clock-control none --metrics "$(python scripts/ncu_vs_simt.py metrics)" \\
        python scripts/ncu_vs_simt.py run
    # 2) 任何机器上：用模拟器跑同样的启动，与 CSV 对照，写 JSON（docs/data/ncu_vs_simt.json）
    python scripts/ncu_vs_simt.py compare ncu.csv --json docs/data/ncu_vs_simt.json

网站上的「CUDA C 模拟器」页展示这份 JSON；tests/test_ncu_vs_simt.py 检查其中模拟器一侧的数字
与当前模拟器的输出仍然相同。
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

import numpy as np

#: (报告属性, ncu 指标)：含义相同的一对计数
METRICS = [
    ("global_load_requests", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    ("global_store_requests", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
    ("global_load_sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    ("global_store_sectors", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
    ("shared_load_requests", "smsp__inst_executed_op_shared_ld.sum"),
    ("shared_store_requests", "smsp__inst_executed_op_shared_st.sum"),
    ("shared_load_wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"),
    ("shared_store_wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"),
    ("shared_load_bank_conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    ("shared_store_bank_conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    ("divergent_branches", "smsp__sass_branch_targets_threads_divergent.sum"),
]


def cases():
    """(名字, .cu 文件, 内核, grid, block, defines, 参数构造函数)。参数都是 numpy 数组或整数。"""
    out = []
    for stride in (1, 2, 32, 33):
        out.append((f"shared_stride(stride={stride})", "bank_conflicts.cu", "shared_stride", 1, 32, None,
                    lambda s=stride: [np.zeros(32, np.float32), s]))
    for k in ("copy_tile", "transpose_conflict", "transpose_padded"):
        out.append((f"{k}(64x64)", "bank_conflicts.cu", k, (2, 2), (32, 8), None,
                    lambda: [np.arange(64 * 64, dtype=np.float32).reshape(64, 64), np.zeros((64, 64), np.float32), 64, 64]))
    # 宽元素：double（8 字节）在模拟器里运行；float4（16 字节）模拟器不支持，见 _model_float4
    for stride in (1, 2, 33):
        out.append((f"shared_stride_wide(double, stride={stride})", "bank_conflicts.cu", "shared_stride_wide", 1, 32,
                    None, lambda s=stride: [np.zeros(32, np.float32), s]))
    for stride in (1, 2):
        out.append((f"shared_stride_wide(float4, stride={stride})", "bank_conflicts.cu", "shared_stride_wide", 1, 32,
                    {"WIDE_FLOAT4": 1}, lambda s=stride: [np.zeros(32, np.float32), s]))
    out.append(("reduce_sum_rows(32x128)", "reduce_sum.cu", "reduce_sum_rows", 32, 128, {"BLOCK_SIZE": 128},
                lambda: [np.ones((32, 128), np.float32), np.zeros(32, np.float32), 128, 128]))
    return out


def run_on_gpu() -> None:
    import torch

    import reduction_lab as rl
    from reduction_lab.cuda_kernels import launch

    rl.runtime.require_gpu("ncu_vs_simt run")
    for name, src, kernel, grid, block, defines, make in cases():
        args = [torch.from_numpy(a).cuda() if isinstance(a, np.ndarray) else a for a in make()]
        if defines and "WIDE_FLOAT4" in defines:
            # 启动器用模拟器的前端解析形参表，而模拟器不认 float4：这里直接交给 CuPy
            import cupy

            from reduction_lab.cuda_kernels.launcher import source_path

            mod = cupy.RawModule(code=source_path(src).read_text(encoding="utf-8"),
                                 options=("-DWIDE_FLOAT4=1",))
            out, stride = args
            mod.get_function(kernel)((grid,), (block,), (cupy.from_dlpack(out), np.int32(stride)))
        else:
            launch(src, kernel, grid, block, args, defines=defines)
        torch.cuda.synchronize()
        print("launched", name, flush=True)


def read_ncu(path: str) -> list[dict]:
    """按启动顺序返回每次启动的 {指标: 值}（只保留 cases() 里的内核）。"""
    kernels = {c[2] for c in cases()}
    launches: dict[str, dict] = {}
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for row in csv.DictReader(lines):
        name = row["Kernel Name"].split("(")[0]
        if name not in kernels:
            continue
        rec = launches.setdefault(row["ID"], {"kernel": name})
        rec[row["Metric Name"]] = int(float(row["Metric Value"].replace(",", "")))
    return [launches[k] for k in sorted(launches, key=int)]


def _model_float4(rep, stride):
    """shared_stride_wide 的 float4 版本：模拟器不支持向量类型。全局内存访问与 double 版本相同
    （rep 是 double 版本的报告），共享内存的计数由模拟器用的同一个计数函数按 16 字节重新计算。"""
    from reduction_lab.simt import counters as C

    n, lane = 32 * 33, np.arange(32)
    for f in ("requests", "wavefronts", "bank_conflicts"):
        setattr(rep, f"shared_load_{f}", 0)
        setattr(rep, f"shared_store_{f}", 0)
    warp = np.zeros(32, np.int64)
    for k0 in range(0, n, 32):                       # 顺序写：buf[k] = WIDE(k)
        C.shared_access(rep, True, warp, (k0 + lane) * 16, 16, lane)
    C.shared_access(rep, False, warp, ((lane * stride) % n) * 16, 16, lane)
    return rep


def simulate() -> list[dict]:
    from reduction_lab import simt
    from reduction_lab.cuda_kernels.launcher import source_path

    rows = []
    for name, src, kernel, grid, block, defines, make in cases():
        if defines and "WIDE_FLOAT4" in defines:
            rep = _model_float4(simt.launch(str(source_path(src)), kernel, grid, block, make()), *make()[1:])
        else:
            rep = simt.launch(str(source_path(src)), kernel, grid, block, make(), defines=defines)
        rows.append({"case": name, "kernel": kernel, **{attr: int(getattr(rep, attr)) for attr, _ in METRICS}})
    return rows


def compare(csv_path: str, json_path: str | None) -> int:
    measured = read_ncu(csv_path)
    simulated = simulate()
    if len(measured) != len(simulated):
        print(f"ncu 记录了 {len(measured)} 次启动，期望 {len(simulated)} 次", file=sys.stderr)
        return 2
    result = []
    for sim, gpu in zip(simulated, measured):
        assert sim["kernel"] == gpu["kernel"], (sim, gpu)
        result.append({"case": sim["case"],
                       "metrics": {attr: {"ncu_metric": metric, "simt": sim[attr], "ncu": gpu.get(metric)}
                                   for attr, metric in METRICS}})
    for r in result:
        diff = {a: (m["simt"], m["ncu"]) for a, m in r["metrics"].items() if m["simt"] != m["ncu"]}
        print(f"{r['case']:32s} {'全部一致' if not diff else diff}")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({"device": "NVIDIA H200", "tool": "Nsight Compute (ncu --clock-control none)",
                       "cases": result}, f, ensure_ascii=False, indent=1)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("metrics", help="打印 ncu --metrics 的参数")
    sub.add_parser("run", help="在 GPU 上依次启动各个内核（在 ncu 之下运行）")
    c = sub.add_parser("compare", help="用模拟器跑同样的启动，与 ncu 的 CSV 对照")
    c.add_argument("csv")
    c.add_argument("--json")
    a = ap.parse_args(argv)
    if a.cmd == "metrics":
        print(",".join(m for _, m in METRICS))
        return 0
    if a.cmd == "run":
        run_on_gpu()
        return 0
    return compare(a.csv, a.json)


if __name__ == "__main__":
    sys.exit(main())
