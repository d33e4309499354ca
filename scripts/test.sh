#!/usr/bin/env bash
# 安装所需的一切，然后运行整套测试：单元测试、站点测试（严格构建 + 浏览器）、每个页面上的代码块。
#
#   bash scripts/test.sh                          # 默认模式：有 GPU 用 gpu，否则 sim
#   REDUCTION_LAB_MODE=gpu bash scripts/test.sh   # 强制 gpu 模式
#
# 可以重复运行：.venv 已存在就复用，依赖没变就跳过安装。可选环境变量：
#   PYTHON            建 .venv 用的解释器（默认 python3.11，没有就 python3）
#   TORCH_SPEC        torch 的版本要求（默认 torch==2.13.0，与 constraints.txt 一致）
#   TORCH_INDEX_URL   从这个索引安装 torch（例如 https://download.pytorch.org/whl/cpu）
#   CHROMIUM          浏览器测试用的 Chromium（默认 /usr/bin/chromium）
#   INSTALL_CHROMIUM  设为 0 时不用 apt-get 安装 Chromium（没有它，浏览器测试跳过并写明原因）
#   PYTEST_WORKERS    pytest-xdist 进程数（默认 2）
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
T_START=$SECONDS
log() { printf '[test.sh] %s\n' "$*"; }

# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

# ---- Python 虚拟环境与依赖 ----
t0=$SECONDS
ensure_venv test
# 网页字体与 jieba-wasm（npm，版本写死）；取不到时其余测试照跑，站点测试报告缺什么
bash scripts/fetch_web_assets.sh || log "警告：scripts/fetch_web_assets.sh 失败，站点测试将失败"
T_INSTALL=$((SECONDS - t0))
log "Python 依赖：${T_INSTALL} s"

# ---- 浏览器测试用的 Chromium ----
t0=$SECONDS
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM" ] && [ "${INSTALL_CHROMIUM:-1}" != 0 ]; then
  if [ "$CHROMIUM" = /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
    log "安装 Debian 包 chromium"
    if ! { as_root apt-get update -qq &&
           as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
      log "警告：chromium 安装失败，浏览器测试将跳过（见 pytest 的跳过原因）"
    fi
  else
    log "没有 $CHROMIUM，也无法用 apt-get 安装：浏览器测试将跳过"
  fi
fi
T_CHROMIUM=$((SECONDS - t0))
log "Chromium：${T_CHROMIUM} s"

# ---- 测试 ----
export NO_MKDOCS_2_WARNING=1
WORKERS=${PYTEST_WORKERS:-2}
"$PY" -c 'import reduction_lab as rl; print(f"[test.sh] 模式 {rl.MODE}，设备 {rl.DEVICE}")'

status=0
t0=$SECONDS
log "单元测试与站点测试：pytest -n $WORKERS --dist loadgroup tests"
"$PY" -m pytest -n "$WORKERS" --dist loadgroup tests -q -rfEs || status=1
T_TESTS=$((SECONDS - t0))

t0=$SECONDS
log "页面代码块：pytest -n $WORKERS --codeblocks docs"
"$PY" -m pytest -n "$WORKERS" --codeblocks docs -q -rfEs || status=1
T_DOCS=$((SECONDS - t0))

log "用时：安装 ${T_INSTALL} s，Chromium ${T_CHROMIUM} s，tests ${T_TESTS} s，docs ${T_DOCS} s，共 $((SECONDS - T_START)) s"
if [ "$status" -ne 0 ]; then
  log "失败"
else
  log "全部通过"
fi
exit "$status"
