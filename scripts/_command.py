"""扫描脚本写进数据文件的命令行：``python scripts/<脚本>.py 参数…``，输出的 JSON 路径写成它提交后的位置
（docs/data/<文件名>），空参数等加上引号，照抄就能重跑。"""

from __future__ import annotations

import os
import shlex
import sys


def recorded_command(script: str) -> str:
    args = ("docs/data/" + os.path.basename(a) if a.endswith(".json") else a for a in sys.argv[1:])
    return f"python scripts/{script}.py " + " ".join(shlex.quote(a) for a in args)
