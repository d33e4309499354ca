#!/usr/bin/env bash
# 在 GPU 机器上运行：把 scripts/fetch_peer_wheels.sh 打好的几部分（.peers/part1、part2 …）拼回来，
# 解开成一个可以放进 PYTHONPATH 的目录 SITE（默认 /tmp/peers），里面是 quack、CuTe DSL、einops 与 Liger。
#
#   bash scripts/install_peer_wheels.sh [SITE]     # 可以重复运行
#   eval "$(bash scripts/install_peer_wheels.sh --print-env)"   # 只打印 export PYTHONPATH=...
#
# 一次调用最多带 64 MiB 的文件，而几部分加起来约 65 MiB，所以分几次调用带过去。GPU 机器在保持
# 预热期间保留 /tmp，本脚本把每次带来的部分存进 $SITE/.parts/（按 .peers/MANIFEST 核对 sha256），
# 部分齐了才解开；已经装好的（$SITE/.installed-<stamp>）直接跳过。调用顺序（每行是一次调用）：
#
#   1. carry [".whl"]                        SUITE=none bash scripts/gpu_suite.sh    # tilelang 等，装进 /tmp/site
#   2. carry [".peers/part1", ".peers/MANIFEST"]   bash scripts/install_peer_wheels.sh
#   3. carry [".peers/part2", ".peers/MANIFEST"]   SUITE=peers bash scripts/gpu_suite.sh
#      （gpu_suite.sh 的 peers 先调用本脚本：拼好、解开，再运行对照扫描）
#
# 机器在两次调用之间被收回（/tmp 没了）时，从第 1 步重来。
#
# 不用 pip install --target：几个 nvidia-cutlass-dsl-libs-* wheel 共用 nvidia_cutlass_dsl/ 目录，
# --target 装后一个时会替换整个目录，丢掉前一个的文件。这里逐个 wheel 用 python3 -m zipfile -e
# 合并进同一个目录（大的几个在打包时已经解开，这里用 cp -a 合并）。wheel 里的 .pth 文件在 PYTHONPATH
# 上不会被读取，所以要把 $SITE/nvidia_cutlass_dsl/dsl_packages 也放进 PYTHONPATH（本脚本最后打印）。
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
PRINT_ENV=0
if [ "${1:-}" = "--print-env" ]; then PRINT_ENV=1; shift; fi
SITE=${1:-${PEERS_SITE:-/tmp/peers}}
PARTS=$SITE/.parts
SRC=.peers
ENVLINE="export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}"

if [ $PRINT_ENV = 1 ]; then echo "$ENVLINE"; exit 0; fi

mkdir -p "$PARTS"
# 这次调用带来的 MANIFEST：与已存的不同（重新打过包）就丢掉已存的部分
if [ -f "$SRC/MANIFEST" ]; then
  if [ -f "$PARTS/MANIFEST" ] && ! cmp -s "$SRC/MANIFEST" "$PARTS/MANIFEST"; then
    echo "MANIFEST 与 $PARTS 里已存的不同：重新收集各部分"
    rm -f "$PARTS"/part* "$PARTS/MANIFEST"
  fi
  cp "$SRC/MANIFEST" "$PARTS/MANIFEST"
fi
if [ ! -f "$PARTS/MANIFEST" ]; then
  echo "错误：没有 .peers/MANIFEST（先在能联网的机器上运行 scripts/fetch_peer_wheels.sh，并随每一部分带上 MANIFEST）" >&2
  exit 2
fi
stamp=$(awk '$1 == "stamp" {print $2}' "$PARTS/MANIFEST")
nparts=$(awk '$1 == "parts" {print $2}' "$PARTS/MANIFEST")

if [ -f "$SITE/.installed-$stamp" ]; then
  echo "对照实现已安装在 $SITE（stamp $stamp）"
else
  # 存下这次带来的部分（核对 sha256）
  for p in "$SRC"/part*; do
    [ -e "$p" ] || continue
    name=$(basename "$p")
    want=$(awk -v n="$name" '$2 == n {print $1}' "$PARTS/MANIFEST")
    if [ -z "$want" ]; then echo "错误：MANIFEST 里没有 $name" >&2; exit 2; fi
    got=$(sha256sum "$p" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then echo "错误：$name 的 sha256 不对（$got，应为 $want）" >&2; exit 2; fi
    cp "$p" "$PARTS/$name.tmp" && mv "$PARTS/$name.tmp" "$PARTS/$name"
    echo "已存 $name 到 $PARTS"
  done
  missing=()
  for i in $(seq 1 "$nparts"); do [ -f "$PARTS/part$i" ] || missing+=("part$i"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "还缺 ${missing[*]}（共 $nparts 部分）：下一次调用带上 .peers/${missing[0]} 和 .peers/MANIFEST 再运行本脚本"
    exit 0
  fi
  echo "$nparts 部分已齐，解开到 $SITE ..."
  t0=$(date +%s)
  TMPX=$(mktemp -d "$SITE/.unpack.XXXXXX")
  trap 'rm -rf "$TMPX"' EXIT
  cat $(for i in $(seq 1 "$nparts"); do echo "$PARTS/part$i"; done) | xz -d | tar xf - -C "$TMPX"
  for whl in "$TMPX"/wheels/*.whl; do
    [ -e "$whl" ] || continue
    "$PY" -m zipfile -e "$whl" "$SITE"
    echo "  合并 $(basename "$whl")"
  done
  for dir in "$TMPX"/unpacked/*/; do
    [ -d "$dir" ] || continue
    cp -a "$dir". "$SITE/"
    echo "  合并 $(basename "$dir")（打包时已解开）"
  done
  rm -rf "$TMPX" "$PARTS"/part*
  touch "$SITE/.installed-$stamp"
  echo "解开用时 $(( $(date +%s) - t0 )) s"
fi

eval "$ENVLINE"
# 只看版本号，不导入（导入 quack 要 CUDA 驱动）
PYTHONPATH=$PYTHONPATH "$PY" - <<'PYEOF' || true
import importlib.metadata as md
for dist in ("quack-kernels", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core",
             "nvidia-cutlass-dsl-libs-cu13", "einops", "liger-kernel"):
    try:
        print(f"  {dist:30s} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"  {dist:30s} 没有找到")
PYEOF
echo "使用：$ENVLINE"
