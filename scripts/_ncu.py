"""ncu 文本报告的两个共用步骤：从一次启动的那一段里取指标，把结果写成 JSON（或打印）。"""

from __future__ import annotations

import json
import re
import sys


def metric_values(blk: str, labels: dict[str, str]) -> dict[str, float]:
    """``blk`` 里每个「名字  [单位]  数值」的行：``labels`` 的名字 -> JSON 的键，取每个名字第一次出现的数值。"""
    rec: dict[str, float] = {}
    for line in blk.splitlines():
        for label, key in labels.items():
            m = re.match(rf"\s+{re.escape(label)}\s+(?:\S+\s+)?([-\d.,]+)\s*$", line)
            if m and key not in rec:
                rec[key] = float(m.group(1).replace(",", ""))
    return rec


def write_json(doc: dict, path: str | None) -> None:
    """``path`` 为 None 时打印到标准输出。"""
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
