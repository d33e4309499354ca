#!/usr/bin/env bash
# 在能访问 PyPI 的机器上运行：下载基准对照实现 quack 与 Liger 的 wheel（GPU 机器上没有，也连不上
# 软件源），打包成每块不到 PART_MIB MiB 的几部分，放进不进 git 的 .peers/。
# 在 GPU 机器上用 scripts/install_peer_wheels.sh 把各部分拼回来、解开（调用顺序写在那个脚本的开头）。
#
#   bash scripts/fetch_peer_wheels.sh            # 下载、打包（xz -9，两个核上约 5-8 分钟），打印各部分大小
#   FORCE=1 bash scripts/fetch_peer_wheels.sh    # 重新下载并重新打包
#   PART_MIB=40 bash scripts/fetch_peer_wheels.sh
#
# 结果：.peers/part1、.peers/part2 ……（tar.xz 切块），.peers/MANIFEST（各块的 sha256 与块数；
# 每次调用都随块一起带上，install_peer_wheels.sh 靠它核对）。
# .peers/wheels/ 是下载缓存，不用带到 GPU 机器。
# 目标：CPython 3.12、manylinux_2_28 x86_64（与 GPU 机器一致）。
# apache-tvm-ffi 与 torch-c-dlpack-ext 已在 .whl/（scripts/fetch_gpu_wheels.sh），cuda-bindings
# 在 GPU 机器上已有。
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
DEST=.peers
WHEELS=$DEST/wheels
# 一次调用连同工作树（约 4 MiB）最多带 64 MiB
PART_MIB=${PART_MIB:-56}
XZ_THREADS=${XZ_THREADS:-2}

PACKAGES=(
  quack-kernels==0.6.5                  # quack：CuTe DSL 写的 softmax、rmsnorm、layernorm
  nvidia-cutlass-dsl==4.8.1             # CuTe DSL（quack 的依赖）
  nvidia-cutlass-dsl-libs-base==4.8.1
  nvidia-cutlass-dsl-libs-core==4.8.1
  nvidia-cutlass-dsl-libs-cu13==4.8.1   # 约 92 MB：解开后再用 xz 压缩
  einops==0.8.1                         # quack 的依赖（纯 Python）
  liger-kernel==0.8.5                   # Liger：Triton 写的 softmax、RMSNorm、LayerNorm
)
# 这些 wheel 解开后放进 tar（xz 压缩解开的文件比压缩 wheel 小得多）；其余的原样放进 tar
UNPACK_PATTERNS=(nvidia_cutlass_dsl_libs_)

if [ "${FORCE:-0}" = 1 ]; then rm -rf "$DEST"; fi
mkdir -p "$WHEELS"

for spec in "${PACKAGES[@]}"; do
  name=${spec%%==*}
  version=${spec##*==}
  if ls "$WHEELS/${name//-/_}-${version}-"*.whl >/dev/null 2>&1; then
    echo "已有 $spec"
    continue
  fi
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    "$spec" -d "$WHEELS"
done

echo "== 下载的 wheel =="
ls -l "$WHEELS"/*.whl | awk '{printf "%8.1f MiB  %s\n", $5 / 1048576, $9}'

stamp=$(ls -l "$WHEELS"/*.whl | md5sum | cut -c1-12)
if [ -f "$DEST/MANIFEST" ] && grep -q "^stamp $stamp\$" "$DEST/MANIFEST" \
   && [ -z "$(cd "$DEST" && for p in part*; do grep -q " $p\$" MANIFEST || echo "$p"; done)" ]; then
  echo "已打包（$DEST/MANIFEST 与下载的 wheel 一致）"
else
  STAGE=$(mktemp -d "${TMPDIR:-/tmp}/peers-stage.XXXXXX")
  trap 'rm -rf "$STAGE"' EXIT
  mkdir -p "$STAGE/wheels" "$STAGE/unpacked"
  for whl in "$WHEELS"/*.whl; do
    base=$(basename "$whl")
    unpack=0
    for pat in "${UNPACK_PATTERNS[@]}"; do [[ $base == $pat* ]] && unpack=1; done
    if [ $unpack = 1 ]; then
      "$PY" -m zipfile -e "$whl" "$STAGE/unpacked/${base%.whl}"
    else
      cp "$whl" "$STAGE/wheels/"
    fi
  done
  (cd "$STAGE" && ls wheels unpacked > CONTENTS)
  rm -f "$DEST"/part* "$DEST/MANIFEST"
  echo "打包：tar | xz -9 -T$XZ_THREADS（需要几分钟）..."
  t0=$(date +%s)
  tar cf - -C "$STAGE" CONTENTS wheels unpacked | xz -9 -T"$XZ_THREADS" > "$DEST/peers.tar.xz"
  echo "压缩用时 $(( $(date +%s) - t0 )) s"
  size=$(stat -c %s "$DEST/peers.tar.xz")
  limit=$((PART_MIB * 1048576))
  n=$(( (size + limit - 1) / limit ))
  # 切成 n 块大小相近的文件：part1 ... partN
  (cd "$DEST" && split -n "$n" -d -a 1 peers.tar.xz part.tmp. && rm peers.tar.xz)
  for i in $(seq 0 $((n - 1))); do mv "$DEST/part.tmp.$i" "$DEST/part$((i + 1))"; done
  {
    echo "stamp $stamp"
    echo "parts $n"
    (cd "$DEST" && sha256sum part*)
  } > "$DEST/MANIFEST"
fi

echo "== $DEST/ 中的部分（每块上限 $PART_MIB MiB）=="
ls -l "$DEST"/part* | awk '{printf "%8.1f MiB  %s\n", $5 / 1048576, $9}'
cat "$DEST/MANIFEST"
