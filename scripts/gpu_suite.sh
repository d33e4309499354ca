#!/usr/bin/env bash
# 在 GPU 机器上、仓库根目录里运行：测试套件、页面代码块、基准扫描。
#
#   bash scripts/gpu_suite.sh                         # 全部（测试 + 页面 + 基准）
#   SUITE=tests bash scripts/gpu_suite.sh             # 只跑 pytest tests
#   SUITE=docs  bash scripts/gpu_suite.sh             # 只跑页面代码块
#   SUITE=bench bash scripts/gpu_suite.sh             # 只跑基准扫描，写 docs/data/<GPU型号>.json（如 h200.json）、表格和图
#   SUITE=tests,docs bash scripts/gpu_suite.sh        # 逗号分隔的组合
#   SUITE=bench BENCH_SUITES="softmax row-sum" bash scripts/gpu_suite.sh
#   SUITE=peers bash scripts/gpu_suite.sh             # 对照扫描：quack、Liger、各dtype、一次调用的开销（不含在all里）
#
# 环境变量：
#   SUITE          all | install | tests | docs | labs | bench，或逗号分隔的组合（默认 all；install 只装 wheel）
#   BENCH_SUITES   空格分隔的基准套件：softmax row-sum full-sum bank-conflicts（默认全部）
#   BENCH_ARGS     传给 reduction-lab bench 的其他参数，如 "--quick" 或 "--iters 50"
#   BENCH_TIMEOUT  每个基准套件的硬时限（秒，默认 300；超时的套件不写结果）
#   BENCH_BUDGET   每个基准套件验证阶段（含 JIT 编译）的预算（秒，默认 150）：超出后不再加新形状，
#                  只对已验证的形状计时并写明未测的形状
#   JOBS           pytest-xdist 的进程数（默认 4）
#   OUT            结果目录（设置了就把 JSON、表格、图、日志放进去；默认 .device/out）
#   DATA_DIR       基准结果写到哪里（默认 docs/data；试运行时改到别处，免得覆盖提交的数据）
#   PREFIX         结果文件名的前缀：DATA_DIR/PREFIX.json、PREFIX_*.md/png（默认取 GPU 的型号，如 h200、h100；
#                  认不出型号时 gpu；sim 模式 h200）
#   SKIP_WHEELS=1  不安装 .whl/（环境里已经有这些包时）
#   PEER_SUITES    peers 测哪些套件（逗号分隔，默认 softmax,layer-norm,rms-norm,layer-norm-bwd,rms-norm-bwd,percall）
#   PEER_DTYPES    softmax、row-sum 与 percall 的 dtype（默认 float32,bfloat16,float16；percall 也按它测，三种 dtype
#                  比两种多用一半时间，时限紧时设 PEER_DTYPES=float32,bfloat16）
#   PEER_IMPLS     peers 测哪些实现，逗号分隔（默认全部：triton,cuda,tilelang,torch,compile,cupy,quack,liger）
#   PEER_TIME      peers 整次运行的时限（秒，默认 540）：按进程分配，到时收缩，保证写出结果
#   PEER_ARGS      传给 peers 那次 reduction-lab bench 的其他参数
#   PEERS_SITE     quack 与 Liger 解开到哪里（默认 /tmp/peers，见 scripts/install_peer_wheels.sh）
#   REDUCTION_LAB_MODE  默认 gpu；只在没有 GPU 的机器上试运行本脚本时设为 sim
#
# 需要先在能联网的机器上运行 scripts/fetch_gpu_wheels.sh，把 .whl/ 随仓库带过来。
#
# 一条命令最多 10 分钟时，分几次运行，例如：
#   SUITE=tests,docs bash scripts/gpu_suite.sh
#   SUITE=bench BENCH_SUITES="softmax row-sum" DATA_DIR=/tmp/h200 bash scripts/gpu_suite.sh
#   SUITE=bench BENCH_SUITES="full-sum bank-conflicts" DATA_DIR=/tmp/h200 bash scripts/gpu_suite.sh
# DATA_DIR 在仓库之外时，同一台机器上后一次运行会把结果并进前一次的 <GPU型号>.json（--merge）；
# 每次都把完整的 <GPU型号>.json 和 <GPU型号>_report.tar.gz 放进 $OUT。
#
# 对照扫描（SUITE=peers）：每个实现在自己的子进程里测量（reduction_lab.bench.isolate）。quack 与 Liger
# 的 wheel 约 65 MiB，一次调用带不过去，先分两次带过来（顺序见 scripts/install_peer_wheels.sh 的开头）：
#   carry .peers/part1 .peers/MANIFEST     bash scripts/install_peer_wheels.sh
#   carry .peers/part2 .peers/MANIFEST     SUITE=peers DATA_DIR=/tmp/h200 bash scripts/gpu_suite.sh
# （此前先用 SUITE=install 装好 .whl/：tilelang 等。）最后一步在 H200 上预计 8-9 分钟（默认套件，每个输入
# 2^26 个元素，8 个子进程，JIT 编译占大半；PEER_TIME=540 保证写出结果，来不及测的在表格下方写明）。
# 按行求和的各 dtype 另跑一次（约 4 分钟）：
#   SUITE=peers PEER_SUITES=row-sum PEER_IMPLS=triton,torch,compile,cupy DATA_DIR=/tmp/h200 bash scripts/gpu_suite.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SUITE=${SUITE:-all}
BENCH_SUITES=${BENCH_SUITES:-softmax row-sum full-sum bank-conflicts}
BENCH_ARGS=${BENCH_ARGS:-}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300}
BENCH_BUDGET=${BENCH_BUDGET:-150}
JOBS=${JOBS:-4}
OUT=${OUT:-$ROOT/.device/out}
SITE=${SITE_DIR:-/tmp/site}
PY=${PYTHON:-python3}
DATA_DIR=${DATA_DIR:-docs/data}
mkdir -p "$OUT"
LOG="$OUT/gpu_suite.log"
TMPD=$(mktemp -d)

main() {

declare -a SUMMARY=()
STATUS=0
want() { [[ ",$SUITE," == *",all,"* || ",$SUITE," == *",$1,"* ]]; }
header() { echo; echo "=================== $* ($(date -u +%H:%M:%S) UTC) ==================="; }
# DATA_DIR/PREFIX.json 生成表格与图，并把 JSON 与打包的报告放进 $OUT
publish_report() {
  $PY -m reduction_lab.bench report "$DATA_DIR/${PREFIX}.json" --out "$DATA_DIR" --prefix "$PREFIX" || STATUS=1
  cp "$DATA_DIR/${PREFIX}.json" "$OUT/${PREFIX}.json"
  tar czf "$OUT/${PREFIX}_report.tar.gz" -C "$DATA_DIR" $(cd "$DATA_DIR" && ls ${PREFIX}.json ${PREFIX}_*.md ${PREFIX}_*.png 2>/dev/null)
  echo "已放进 $OUT：${PREFIX}.json、${PREFIX}_report.tar.gz（在仓库根目录解包：tar xzf ${PREFIX}_report.tar.gz -C docs/data）"
}
# pytest 的总结行，如 "120 passed, 3 skipped in 41.2s"（-q 时没有两边的 =）
pytest_line() {
  grep -E "^=* ?[0-9]+ (passed|failed|error|errors|skipped|deselected|xfailed|xpassed)\b.* in [0-9.]+s|no tests ran" "$1" \
    | tail -1 | sed -E 's/^=+ //; s/ =+$//'
}

header "环境"
nvidia-smi -L 2>/dev/null || echo "nvidia-smi 不可用"
$PY --version

# ---------------------------------------------------------------- 安装随仓库带来的 wheel
# .whl/ 与 .whl-clang/（libclang，模拟器的 C++ 前端）合起来超过一次调用能带的 64 MiB，所以分两次调用带过来：
# 第一次只带 .whl-clang/ 并运行 SUITE=install；机器保持热着时第二次带 .whl/ 运行测试（已装过的目录按
# 文件清单的戳记跳过）。
install_dir() {
  local dir=$1
  ls "$dir"/*.whl >/dev/null 2>&1 || return 1
  local stamp
  stamp=$(ls -l "$dir"/*.whl | md5sum | cut -c1-12)
  if [ -f "$SITE/.stamp-$stamp" ]; then
    echo "$dir/ 的 wheel 已安装在 $SITE"
    return 0
  fi
  echo "安装 $dir/ 中的 wheel 到 $SITE ..."
  local t0
  t0=$(date +%s)
  if $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
       --target "$SITE" "$dir"/*.whl; then
    touch "$SITE/.stamp-$stamp"
    echo "安装完成，用时 $(( $(date +%s) - t0 )) s"
  else
    # 没有pip或pip失败：wheel就是zip文件，直接解压到目标目录（这些包不需要入口脚本）
    echo "pip安装失败，改为直接解压wheel"
    if $PY - "$SITE" "$dir"/*.whl <<'PYEOF'
import sys, zipfile
target, wheels = sys.argv[1], sys.argv[2:]
for w in wheels:
    with zipfile.ZipFile(w) as z:
        z.extractall(target)
    print("解压", w)
PYEOF
    then
      touch "$SITE/.stamp-$stamp"
    else
      echo "wheel 安装失败" ; STATUS=1 ; SUMMARY+=("wheels: $dir 安装失败")
    fi
  fi
}

mkdir -p "$SITE"
if [ "${SKIP_WHEELS:-0}" = 1 ]; then
  echo "SKIP_WHEELS=1：不安装 .whl/"
else
  install_dir .whl || echo "没有 .whl/：tilelang、pytest-codeblocks、pycparser 需要先用 scripts/fetch_gpu_wheels.sh 下载"
  install_dir .whl-clang || ls "$SITE"/clang/native/libclang.so >/dev/null 2>&1 \
    || echo "没有 .whl-clang/，$SITE 里也没有 libclang：模拟器的前端（以及 cuda 后端读内核签名）不可用"
  # 精简过的 z3 wheel 只有 libz3.so.4.15；z3 按 libz3.so 这个名字加载
  if [ -f "$SITE/z3/lib/libz3.so.4.15" ]; then
    ln -sf libz3.so.4.15 "$SITE/z3/lib/libz3.so"
  fi
fi
export PYTHONPATH="$SITE:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export REDUCTION_LAB_MODE=${REDUCTION_LAB_MODE:-gpu}
if [ -z "${PREFIX:-}" ]; then   # 与 reduction-lab report 的默认相同（bench.report.default_prefix）
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  PREFIX=$($PY -c 'import sys; from reduction_lab.bench.report import default_prefix
print(default_prefix({"meta": {"mode": sys.argv[1], "device": sys.argv[2]}}))' "$REDUCTION_LAB_MODE" "$GPU_NAME")
fi
export NO_MKDOCS_2_WARNING=1
unset TRITON_INTERPRET
$PY - <<'PYEOF'
import importlib, reduction_lab as rl
print("reduction_lab", rl.__version__, "mode", rl.MODE)
for name in ("torch", "triton", "cupy", "tilelang", "z3", "pycparser", "clang.cindex", "pytest_codeblocks"):
    try:
        mod = importlib.import_module(name)
        print(f"  {name:18s} {getattr(mod, '__version__', '?')}")
    except Exception as exc:
        print(f"  {name:18s} 无法导入：{type(exc).__name__}: {exc}")
PYEOF

# ---------------------------------------------------------------- 测试
if want tests; then
  header "pytest tests（gpu 模式，-n $JOBS）"
  t0=$(date +%s)
  $PY -m pytest -n "$JOBS" tests -q -rs -p no:cacheprovider -p reduction_lab.labs.pytest_plugin --junitxml="$OUT/junit-tests.xml" \
    2>&1 | tee "$TMPD/tests.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && STATUS=1
  SUMMARY+=("tests: $(pytest_line "$TMPD/tests.txt") (exit $rc, $(( $(date +%s) - t0 )) s)")
fi

# ---------------------------------------------------------------- 页面代码块
if want docs; then
  header "pytest --codeblocks docs（gpu 模式，-n $JOBS）"
  t0=$(date +%s)
  $PY -m pytest --codeblocks docs -q -rs -n "$JOBS" -p no:cacheprovider -p reduction_lab.labs.pytest_plugin --junitxml="$OUT/junit-docs.xml" \
    2>&1 | tee "$TMPD/docs.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" -ne 0 ] && STATUS=1
  SUMMARY+=("docs: $(pytest_line "$TMPD/docs.txt") (exit $rc, $(( $(date +%s) - t0 )) s)")
fi

# ---------------------------------------------------------------- 实验：参考解在 gpu 模式下评分（含计时）
if want labs; then
  header "实验：reduction-lab lab check（参考解，gpu 模式）"
  t0=$(date +%s)
  LABS_DIR="$TMPD/labs"
  $PY - "$LABS_DIR" <<'PYEOF'
import shutil, sys
from pathlib import Path
from reduction_lab import labs
root = Path(sys.argv[1])
for name in labs.LABS:
    dest = labs.start(name, root / name)
    for f in (Path("tests/labs/solutions") / name).iterdir():
        shutil.copyfile(f, dest / f.name)
PYEOF
  ok=0; bad=0
  for name in $($PY -m reduction_lab.cli lab list | cut -d' ' -f1); do
    if $PY -m reduction_lab.cli lab check "$name" "$LABS_DIR/$name"; then ok=$((ok + 1)); else bad=$((bad + 1)); STATUS=1; fi
  done
  SUMMARY+=("labs: $ok 个通过，$bad 个没有通过 ($(( $(date +%s) - t0 )) s)")
fi

# ---------------------------------------------------------------- 对照扫描（分进程：quack、Liger、各 dtype、percall）
# all 不含 peers（它要先把 quack 与 Liger 带过来）
if [[ ",$SUITE," == *",peers,"* ]]; then
  PEERS_SITE=${PEERS_SITE:-/tmp/peers}
  PEER_SUITES=${PEER_SUITES:-softmax,layer-norm,rms-norm,layer-norm-bwd,rms-norm-bwd,percall}
  PEER_DTYPES=${PEER_DTYPES:-float32,bfloat16,float16}
  PEER_TIME=${PEER_TIME:-540}
  header "对照实现：quack 与 Liger（$PEERS_SITE）"
  if bash scripts/install_peer_wheels.sh "$PEERS_SITE" && ls "$PEERS_SITE"/.installed-* >/dev/null 2>&1; then
    eval "$(bash scripts/install_peer_wheels.sh --print-env "$PEERS_SITE")"
  else
    echo "quack 与 Liger 没有装齐：它们的格子会写明没有安装（先按 scripts/install_peer_wheels.sh 的顺序带上各部分）"
    SUMMARY+=("peers: quack/Liger 没有装齐")
  fi
  mkdir -p "$DATA_DIR"
  header "对照扫描：$PEER_SUITES（dtype $PEER_DTYPES，时限 ${PEER_TIME}s）"
  t0=$(date +%s)
  impl_args=()
  [ -n "${PEER_IMPLS:-}" ] && impl_args=(--impl "$PEER_IMPLS")
  # 外层 timeout 只防万一：--time-limit 让父进程自己在时限内收尾并写出 JSON
  timeout $((PEER_TIME + 60)) $PY -m reduction_lab.bench bench "$PEER_SUITES" --dtype "$PEER_DTYPES" \
    --time-limit "$PEER_TIME" --json "$DATA_DIR/${PREFIX}.json" --merge --no-progress ${impl_args[@]+"${impl_args[@]}"} ${PEER_ARGS:-}
  rc=$?
  [ "$rc" -ne 0 ] && STATUS=1
  SUMMARY+=("peers $PEER_SUITES: exit $rc ($(( $(date +%s) - t0 )) s；3 = 有格子出错或结果不符，见表格下方)")
  if [ -f "$DATA_DIR/${PREFIX}.json" ]; then
    publish_report
  fi
fi

# ---------------------------------------------------------------- 基准扫描
if want bench; then
  mkdir -p "$DATA_DIR"
  ok=0; bad=0
  for s in $BENCH_SUITES; do
    header "基准：$s"
    t0=$(date +%s)
    # --merge：保留 ${PREFIX}.json 里这次没跑的套件
    timeout "$BENCH_TIMEOUT" $PY -m reduction_lab.bench bench "$s" --json "$DATA_DIR/${PREFIX}.json" --merge \
      --no-progress --budget "$BENCH_BUDGET" $BENCH_ARGS
    rc=$?
    if [ "$rc" -eq 0 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); STATUS=1; fi
    [ "$rc" -eq 124 ] && echo "基准 $s 超过 ${BENCH_TIMEOUT}s 被终止"
    SUMMARY+=("bench $s: exit $rc ($(( $(date +%s) - t0 )) s)")
  done
  header "报告：表格与图"
  if [ -f "$DATA_DIR/${PREFIX}.json" ]; then
    publish_report
  else
    echo "没有 $DATA_DIR/${PREFIX}.json：基准没有写出结果"
  fi
  SUMMARY+=("bench: $ok 个套件成功，$bad 个失败")
fi

rm -rf "$TMPD"
header "总结"
for line in ${SUMMARY[@]+"${SUMMARY[@]}"}; do echo "  $line"; done
echo "  总体：$([ $STATUS -eq 0 ] && echo 通过 || echo 有失败)"
return $STATUS
}

# 全部输出同时写进 $OUT/gpu_suite.log
main 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
