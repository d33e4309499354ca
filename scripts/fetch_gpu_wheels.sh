#!/usr/bin/env bash
# 在能访问 PyPI 的机器上运行：把 GPU 机器缺少的 wheel 下载到 .whl/（已被 git 忽略），
# 供 scripts/gpu_suite.sh 离线安装。目标：CPython 3.12、manylinux x86_64。
#
#   bash scripts/fetch_gpu_wheels.sh          # 下载、精简z3、重新压缩，打印各文件大小
#   FORCE=1 bash scripts/fetch_gpu_wheels.sh  # 已有的wheel也重新下载
#
# GPU 机器上已有：torch、triton、cupy、numpy、tqdm、matplotlib、pytest、pytest-xdist 等。
# 随仓库一起传过去的文件总共不能超过 64 MiB，所以 .whl/ 要控制在约 52 MiB 以内。
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
DEST=.whl
LIMIT_MIB=${WHEEL_LIMIT_MIB:-52}
mkdir -p "$DEST"

PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64)
# pip 找不到时再加这些
EXTRA_PLATFORMS=(--platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64
                 --platform manylinux_2_24_x86_64 --platform linux_x86_64 --platform any)

# libclang（模拟器的 C++ 前端，24 MB）单独放进 .whl-clang/：和 .whl/ 合起来超过一次调用能带的 64 MiB，
# gpu_suite.sh 的说明里写了怎样分两次带过去。
CLANG_DEST=.whl-clang
CLANG_PACKAGES=(libclang==18.1.1)

PACKAGES=(
  tilelang==0.1.15          # TileLang 内核
  apache-tvm-ffi==0.1.12    # tilelang 的依赖
  torch-c-dlpack-ext==0.1.5 # tilelang 的依赖
  z3-solver==4.15.4.0       # tilelang 的依赖（下面精简）
  pytest-codeblocks==0.18.0 # 运行页面里的代码块
  pycparser==3.12           # CUDA C 模拟器（纯 Python）
  ml_dtypes==0.6.0          # 模拟器里 bfloat16 的 numpy dtype
)

download() {
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "$@" -d "$DEST"
}

fetch_all() {
local DEST=$1; shift
mkdir -p "$DEST"
for spec in "$@"; do
  name=${spec%%==*}
  version=${spec##*==}
  # 已经下载（并可能已精简）过的不再下载；FORCE=1 强制重新下载
  if [ "${FORCE:-0}" != 1 ] && ls "$DEST/${name//-/_}-${version}-"*.whl >/dev/null 2>&1; then
    echo "已有 $spec"
    continue
  fi
  if ! download "${PLATFORMS[@]}" "$spec"; then
    echo "第一次没找到 $spec，加上更多平台标签重试" >&2
    download "${PLATFORMS[@]}" "${EXTRA_PLATFORMS[@]}" "$spec"
  fi
done
}
fetch_all "$DEST" "${PACKAGES[@]}"
fetch_all "$CLANG_DEST" "${CLANG_PACKAGES[@]}"

# 精简与重新压缩（RECORD 里记的是解压后内容的哈希，换压缩算法不影响它）：
# - z3 的 wheel 里 libz3 有三份（约 29 MB）：只保留 z3/lib/libz3.so.4.15 和 Python 文件，
#   RECORD 随之重写。安装后要在目标目录里 ln -sf libz3.so.4.15 z3/lib/libz3.so（gpu_suite.sh 会做）。
# - tilelang 和 z3 改用 LZMA 压缩（pip 用 Python 的 zipfile 解压，支持 LZMA）：47+9 MiB -> 34+7 MiB。
for whl in "$DEST"/z3_solver-*.whl "$DEST"/tilelang-*.whl "$CLANG_DEST"/libclang-*.whl; do
  [ -e "$whl" ] || continue
  "$PY" - "$whl" <<'PYEOF'
import base64, csv, hashlib, io, os, sys, zipfile

path = sys.argv[1]
is_z3 = os.path.basename(path).startswith("z3_solver-")
LIB = "z3/lib/libz3.so.4.15"
with zipfile.ZipFile(path) as zin:
    infos = zin.infolist()
    if all(i.compress_type == zipfile.ZIP_LZMA for i in infos if i.file_size):
        print(f"{os.path.basename(path)}: 已处理过，不改")
        sys.exit(0)
    names = [i.filename for i in infos]
    if is_z3:
        if LIB not in names:
            sys.exit(f"{path}: 没有 {LIB}，结构与预期不同")
        # 只留 z3/ 下的 Python 文件、一份 libz3 和 dist-info（去掉 z3 可执行文件和 C 头文件）
        keep = [i for i in infos if i.filename == LIB or ".dist-info/" in i.filename
                or (i.filename.startswith("z3/") and not i.filename.startswith(("z3/lib/", "z3/include/")))]
    else:
        keep = infos
    record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
    rows = []
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w") as zout:
        for info in keep:
            if info.filename == record_name:
                continue
            data = zin.read(info.filename)
            info.compress_type = zipfile.ZIP_LZMA
            zout.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append((info.filename, f"sha256={digest}", str(len(data))))
        if is_z3:
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerows(rows)
            w.writerow((record_name, "", ""))
            record = buf.getvalue().encode()
        else:
            record = zin.read(record_name)
        rinfo = zin.getinfo(record_name)
        rinfo.compress_type = zipfile.ZIP_LZMA
        zout.writestr(rinfo, record)
os.replace(tmp, path)
print(f"{os.path.basename(path)}: 去掉 {len(infos) - len(keep)} 个文件，改用 LZMA 压缩")
PYEOF
done

echo "== .whl/ 中的 wheel =="
total=0
for f in "$DEST"/*.whl; do
  size=$(stat -c %s "$f")
  total=$((total + size))
  printf '%8.1f MiB  %s\n' "$(echo "$size / 1048576" | bc -l)" "$(basename "$f")"
done
printf '%8.1f MiB  合计（上限 %s MiB）\n' "$(echo "$total / 1048576" | bc -l)" "$LIMIT_MIB"
for f in "$CLANG_DEST"/*.whl; do
  printf '%8.1f MiB  %s（%s/，另一次调用带过去）\n' "$(echo "$(stat -c %s "$f") / 1048576" | bc -l)" "$(basename "$f")" "$CLANG_DEST"
done
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "超过 ${LIMIT_MIB} MiB：随仓库传到 GPU 机器的文件会超过 64 MiB" >&2
  exit 1
fi
