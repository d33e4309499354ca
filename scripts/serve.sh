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
EXTRA=docs

log() { printf '[serve.sh] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "需要 root 权限运行：$*（当前用户不是 root，也没有 sudo）"
    return 1
  fi
}

t0=$SECONDS
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x .venv/bin/python ]; then
  log "创建 .venv（$("$PYTHON" --version 2>&1)）"
  if ! "$PYTHON" -m venv .venv; then
    log "venv 模块不可用，安装 Debian 包 python3-venv"
    rm -rf .venv
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    "$PYTHON" -m venv .venv
  fi
fi
PY=.venv/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK=1

TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
STAMP=.venv/.installed-$EXTRA
WANT=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)-$TORCH_SPEC-$TORCH_INDEX_URL
# test.sh 装的依赖包含 docs 的全部依赖
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] && [ "$(cat .venv/.installed-test 2>/dev/null)" != "$WANT" ]; then
  # 先装 torch：版本写死，避免解析到更宽的范围而下载别的构建
  if [ -n "$TORCH_INDEX_URL" ]; then
    "$PY" -m pip install -q --progress-bar off --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
  else
    "$PY" -m pip install -q --progress-bar off "$TORCH_SPEC"
  fi
  "$PY" -m pip install -q --progress-bar off -c constraints.txt -e ".[$EXTRA]"
  echo "$WANT" > "$STAMP"
else
  log "依赖未变，跳过安装"
fi
log "安装用时 $((SECONDS - t0)) s"

export NO_MKDOCS_2_WARNING=1
log "站点地址：http://127.0.0.1:${PORT:-8000}/（Ctrl-C 停止）"
exec "$PY" -m mkdocs serve -a "127.0.0.1:${PORT:-8000}"
