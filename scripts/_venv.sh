# serve.sh 与 test.sh 共用：在仓库根目录建/复用 .venv，按 constraints.txt 安装 reduction_lab 的某个附加依赖组。
# 用法（先 cd 到仓库根目录并定义 log）：source scripts/_venv.sh; as_root ...; ensure_venv docs|test
# 可选环境变量：PYTHON、TORCH_SPEC（默认 torch==2.13.0）、TORCH_INDEX_URL、UV_SPEC（默认 uv==0.13.9）。

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

# ensure_venv EXTRA [另一个也满足要求的 EXTRA]：之后 $PY 是 .venv 里的解释器
ensure_venv() {
  local extra=$1 also=${2:-}
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
  UV_SPEC=${UV_SPEC:-uv==0.13.9}
  TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
  # 依赖描述没变就不再调用 pip（重复运行时省下几十秒）
  local stamp=.venv/.installed-$extra want
  want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)-$TORCH_SPEC-$TORCH_INDEX_URL
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] ||
     { [ -n "$also" ] && [ "$(cat ".venv/.installed-$also" 2>/dev/null)" = "$want" ]; }; then
    log "依赖未变，跳过安装"
    return 0
  fi
  # 先装 torch：版本写死，避免解析到更宽的范围而下载别的（CUDA）构建
  if [ -n "$TORCH_INDEX_URL" ]; then
    "$PY" -m pip install -q --progress-bar off --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
  else
    "$PY" -m pip install -q --progress-bar off "$TORCH_SPEC"
  fi
  # 其余的依赖交给 uv 解析与安装（与 pip 装出同一组包，2 核机器上快一倍多）；装不上 uv 时照旧用 pip。
  # --compile-bytecode：uv 默认不写 .pyc（pip 会写）。设置了 PYTHONDONTWRITEBYTECODE 的机器上，每个新进程
  # （xdist 的 worker、notebook 的内核、子进程里的基准）都要重新编译 tilelang/TVM 的几千个源文件：导入 tilelang
  # 从约 2.7 s 变成 4.6 s。安装时编译一次约 20 s
  if "$PY" -m pip install -q --progress-bar off "$UV_SPEC"; then
    .venv/bin/uv pip install -q --compile-bytecode --python "$PY" -c constraints.txt -e ".[$extra]"
  else
    log "uv 装不上，改用 pip 安装依赖"
    "$PY" -m pip install -q --progress-bar off -c constraints.txt -e ".[$extra]"
  fi
  echo "$want" > "$stamp"
}
