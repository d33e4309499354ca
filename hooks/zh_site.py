"""本站的 MkDocs 钩子（mkdocs.yml 的 ``hooks:``）：中文搜索与离线资源。

* 检查 docs/assets/vendor/ 里有网页字体与浏览器端的 jieba（``bash scripts/fetch_web_assets.sh`` 取回）；
* 把 Material 的搜索 worker 换成 ``assets/javascripts/workers/search_zh.js``：它包住 Material 自带的
  worker，只在查询进去之前用 jieba 切分、在结果出来之后把高亮词合回整个词；
* 搜索索引里的 TeX（``\\(...\\)``、``\\[...\\]``）换成 Unicode 文本（pylatexenc），搜索结果的预览里
  不再出现原始 TeX。
"""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path
from urllib.parse import quote

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

log = logging.getLogger("mkdocs.hooks.zh_site")

WORKER = "assets/javascripts/workers/search_zh.js"
# 这些文件由 scripts/fetch_web_assets.sh 放进 docs/assets/vendor/，页面与 search_zh.js 引用它们
VENDORED = (
    "assets/vendor/noto-sans-sc/noto-sans-sc.css",
    "assets/vendor/jieba-wasm/jieba_rs_wasm.js",
    "assets/vendor/jieba-wasm/jieba_rs_wasm_bg.wasm",
)

_CONFIG_SCRIPT = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.DOTALL)
# arithmatex（generic）把公式写成 \( .. \) 与 \[ .. \]；索引里汉字之间还插着 jieba 的零宽空格
_TEX = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_ZWSP = "\u200b"


def on_config(config):
    docs = Path(config["docs_dir"])
    missing = [p for p in VENDORED if not (docs / p).is_file()]
    if missing:
        raise PluginError(
            f"缺少 {', '.join(missing)}：先运行 bash scripts/fetch_web_assets.sh"
            "（取回网页字体与 jieba-wasm；serve.sh 与 test.sh 会自动运行它）")
    return config


def on_post_page(output, page, config):
    """页面里 Material 的配置（``<script id="__config">``）指向本站的搜索 worker。

    Material 自带 worker 的文件名带版本哈希，作为参数传给 search_zh.js，由它 importScripts。
    """
    match = _CONFIG_SCRIPT.search(output)
    if not match:
        return output
    data = json.loads(match.group(2))
    material = data.get("search")
    if not material or WORKER in material:
        return output
    base = material.rsplit("assets/javascripts/workers/", 1)
    if len(base) != 2:
        raise PluginError(f"认不出 Material 搜索 worker 的地址：{material}")
    data["search"] = f"{base[0]}{WORKER}?material={quote(base[1])}"
    # 与 Material 的 tojson 一样转义 <、>、&，JSON 放在 <script> 里才安全
    text = (json.dumps(data, ensure_ascii=False, separators=(",", ":"))
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    return output[:match.start(2)] + text + output[match.end(2):]


def tex_to_text(tex: str) -> str:
    """一段 TeX 公式 -> 可读的 Unicode 文本（\\times -> ×，\\sum -> ∑，\\text{..} -> ..）。"""
    from pylatexenc.latex2text import LatexNodes2Text

    text = LatexNodes2Text(math_mode="text").latex_to_text(tex.replace(_ZWSP, ""))
    return re.sub(r"\s+", " ", text).strip()


def strip_tex(text: str, segment) -> str:
    """把索引文本里的每段公式换成 Unicode 文本；公式里的汉字用 ``segment``（搜索插件的 jieba 切分）重新切分。"""
    def replace(m):
        tex = html.unescape(m.group(1) if m.group(1) is not None else m.group(2))
        return html.escape(segment(tex_to_text(tex)), quote=False)
    return _TEX.sub(replace, text)


@event_priority(-100)  # 在搜索插件写出 search_index.json 之后
def on_post_build(config):
    path = Path(config["site_dir"]) / "search" / "search_index.json"
    if not path.is_file():
        return
    search = config["plugins"].get("material/search") or config["plugins"].get("search")
    segment = getattr(search, "_segment_chinese", None) or (lambda s: s)
    index = json.loads(path.read_text(encoding="utf-8"))
    n = 0
    for doc in index["docs"]:
        for field in ("title", "text"):
            value = doc.get(field)
            if value and _TEX.search(value):
                doc[field] = strip_tex(value, segment)
                n += 1
    path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    log.debug("search index: TeX replaced in %d fields", n)
