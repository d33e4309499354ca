#!/usr/bin/env bash
# 取回站点在浏览器里用的两个 npm 包，放进 docs/assets/vendor/（不进 git，构建时复制进站点）：
#
#   @fontsource/noto-sans-sc  思源黑体（Noto Sans SC）网页字体，按 unicode-range 切成约 100 个子集：
#                             页面只下载自己用到的字所在的子集，没有中文字体的机器上中文也不会显示成方框。
#   jieba-wasm                jieba 分词（jieba-rs 编译成 WebAssembly）：搜索框里的查询用和建索引时
#                             （Python 的 jieba）同一套词典与算法切分。
#
#   bash scripts/fetch_web_assets.sh
#
# 版本与 sha512 写死在下面；已取回同样的版本就什么都不做。serve.sh 与 test.sh 会先运行它。
# 需要 npm（没有时用 apt-get 安装 Debian 包 npm）。
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf '[fetch_web_assets.sh] %s\n' "$*"; }
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

VENDOR=docs/assets/vendor
FONT_PKG=@fontsource/noto-sans-sc@5.3.0
FONT_SHA512=HeqIlGm0+ohOKxZLuHj1qW6r6avHH0OWdKERAcSDI0RQ+MXrteuLKA+M+5eOA8rYy0MFvOR5AT0fQo2rUkye0Q==
JIEBA_PKG=jieba-wasm@2.4.0
JIEBA_SHA512=ZvQdS+FGifrFXZIXSgOyOgEz+1wdy1P4vSvwe37FVtku9ycSdHTZbHqF5i9tMN1JucoAmeiLBeI6/YaqcGD+KA==
# 正文用的字重：400（正文、h1–h3 的 300 也落到它）与 700（粗体、h4+）
FONT_WEIGHTS="400 700"

want="$FONT_PKG $FONT_SHA512 $FONT_WEIGHTS $JIEBA_PKG $JIEBA_SHA512"
if [ "$(cat "$VENDOR/.fetched" 2>/dev/null)" = "$want" ]; then
  log "已是 $FONT_PKG 与 $JIEBA_PKG，跳过"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  log "没有 npm，安装 Debian 包 npm"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fetch PKG SHA512 DIR：npm pack 取回 tarball，核对 sha512（npm 元数据里的 dist.integrity），解到 DIR
fetch() {
  local pkg=$1 sha=$2 dir=$3 tgz got
  tgz=$(cd "$tmp" && npm pack --silent "$pkg" | tail -n 1)
  got=$(openssl dgst -sha512 -binary "$tmp/$tgz" | base64 -w0)
  if [ "$got" != "$sha" ]; then
    log "$pkg 的 sha512 不符：期望 $sha，得到 $got"
    exit 1
  fi
  mkdir -p "$dir"
  tar xzf "$tmp/$tgz" -C "$dir" --strip-components=1
  log "$pkg：$(du -sh "$tmp/$tgz" | cut -f1)"
}

fetch "$FONT_PKG" "$FONT_SHA512" "$tmp/font"
fetch "$JIEBA_PKG" "$JIEBA_SHA512" "$tmp/jieba"

rm -rf "$VENDOR"
mkdir -p "$VENDOR/noto-sans-sc/files" "$VENDOR/jieba-wasm"

# 字体：只要所选字重的 woff2（所有现代浏览器都认 woff2），CSS 里去掉 woff 的后备地址
{
  printf '/* %s：fontsource 的 CSS（所选字重），只保留 woff2 */\n' "$FONT_PKG"
  for w in $FONT_WEIGHTS; do
    sed -e "s#, url(./files/[^)]*\.woff) format('woff')##" "$tmp/font/$w.css"
  done
} > "$VENDOR/noto-sans-sc/noto-sans-sc.css"
for w in $FONT_WEIGHTS; do
  cp "$tmp/font/files/"*"-$w-normal.woff2" "$VENDOR/noto-sans-sc/files/"
done
cp "$tmp/font/LICENSE" "$VENDOR/noto-sans-sc/LICENSE"

# 分词：浏览器用的 ES 模块版本（pkg/web）
cp "$tmp/jieba/pkg/web/jieba_rs_wasm.js" "$tmp/jieba/pkg/web/jieba_rs_wasm_bg.wasm" "$tmp/jieba/LICENSE" \
   "$VENDOR/jieba-wasm/"

# 每个 CSS 里引用的字体文件都必须在
missing=$(grep -o 'url(./files/[^)]*)' "$VENDOR/noto-sans-sc/noto-sans-sc.css" | sed 's#url(./##;s#)##' |
          while read -r f; do [ -f "$VENDOR/noto-sans-sc/$f" ] || echo "$f"; done)
if [ -n "$missing" ]; then
  log "CSS 引用了不存在的字体文件：$missing"
  exit 1
fi
echo "$want" > "$VENDOR/.fetched"
log "写入 $VENDOR（$(du -sh "$VENDOR" | cut -f1)）"
