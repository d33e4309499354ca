#!/usr/bin/env bash
# 安装文档所需的一切，然后在 http://127.0.0.1:8000 上提供本站（改动页面后自动刷新）。
#
#   bash scripts/serve.sh
#
# 可以重复运行：.venv 已存在就复用，依赖没变就跳过安装。可选环境变量：
#   PYTHON            建 .venv 用的解释器（默认 python3.11，没有就 python3）
#   TORCH_SPEC        torch 的版本要求（默认 torch==2.13.0，与 constraints.txt 一致）
#   TORCH_INDEX_URL   从这个索引安装 torch（例如 https://download.pytorch.org/whl/cpu）
#   PORT              端口（默认 8000）
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[serve.sh] %s\n' "$*"; }

# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

t0=$SECONDS
ensure_venv docs test      # test.sh 装的依赖包含 docs 的全部依赖
bash scripts/fetch_web_assets.sh   # 网页字体与 jieba-wasm（npm，版本写死）
log "安装用时 $((SECONDS - t0)) s"

export NO_MKDOCS_2_WARNING=1
log "站点地址：http://127.0.0.1:${PORT:-8000}/（Ctrl-C 停止）"
exec "$PY" -m mkdocs serve -a "127.0.0.1:${PORT:-8000}"
