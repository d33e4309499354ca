"""随包发布的实测数据（docs/data/*.json）：页面代码块从这里读，安装成普通（非 editable）的包之后也能读到。

``src/reduction_lab/data`` 是指向 ``docs/data`` 的符号链接，构建 wheel 时其中的 JSON 文件作为
包数据复制进包里（pyproject.toml 的 ``[tool.setuptools.package-data]``）。

    import reduction_lab as rl
    doc = rl.load_data("h200.json")          # 与 json.loads(rl.data_path("h200.json").read_text()) 相同
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

__all__ = ["data_path", "load_data", "DATA_FILES"]

#: 随包发布的数据文件
DATA_FILES = ("h200.json", "h100.json", "ncu_vs_simt.json", "h200_latency.json", "simt_coverage.json",
              "h200_tune_softmax_bf16.json",
              "h200_primitives.json", "h200_cluster_softmax.json", "h200_cuda_softmax.json", "h200_tilelang_softmax.json",
              "h200_host_cost.json", "h200_followup.json", "h200_cuda_softmax_cluster.json",
              "h200_tilelang_softmax_long.json", "h200_tilelang_softmax_long_stats.json", "h200_tune_softmax_long.json",
              "h200_cuda_softmax_pipe.json",
              "h200_ncu_cluster_regs.json", "h200_ncu_quack_vs_regs.json",
              "h200_cuda_softmax_cluster_mbar.json",
              "h200_triton_row_sum_sweep.json", "h200_cuda_softmax_grid.json", "h200_cuda_row_sum_warp.json",
              "triton_row_sum_ptx.json", "h200_triton_softmax_short.json", "h200_triton_softmax_short_bf16.json",
              "h200_triton_row_sum_evict.json", "h200_inductor_configs.json",
              "h200_l2_two_pass_softmax.json", "h200_cuda_row_sum_packs.json", "h200_cuda_softmax_smem.json",
              "h200_cuda_softmax_exp.json", "h200_ncu_short_rows.json", "h100_cluster_stagger.json",
              "h200_tilelang_softmax_min_blocks.json", "h200_cuda_softmax_hints.json",
              "h100_tilelang_cluster_smem.json", "h100_cuda_row_sum_short.json", "h200_ticket_grid_softmax.json",
              "h100_tilelang_grid.json")


def data_path(name: str) -> Path:
    """数据文件的路径（只接受 :data:`DATA_FILES` 里的名字）。"""
    if name not in DATA_FILES:
        raise ValueError(f"没有随包发布的数据文件 {name!r}；可选：{', '.join(DATA_FILES)} "
                         f"(no packaged data file {name!r})")
    p = Path(str(resources.files("reduction_lab") / "data" / name))
    if not p.is_file():
        raise FileNotFoundError(f"找不到数据文件 {p}：安装的包不完整 (packaged data file {p} is missing)")
    return p


def load_data(name: str):
    """读取并解析一个随包发布的 JSON 数据文件。"""
    return json.loads(data_path(name).read_text(encoding="utf-8"))
