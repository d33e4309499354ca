"""本站的 MkDocs 钩子（mkdocs.yml 的 ``hooks:``）：中文搜索与离线资源。

* 检查 docs/assets/vendor/ 里有网页字体与浏览器端的 jieba（``bash scripts/fetch_web_assets.sh`` 取回）；
* 把 Material 的搜索 worker 换成 ``assets/javascripts/workers/search_zh.js``：它包住 Material 自带的
  worker，只在查询进去之前用 jieba 切分、在结果出来之后把高亮词合回整个词；
* 搜索索引里的 TeX（``\\(...\\)``、``\\[...\\]``，notebook 页面里还有 ``$...$``）换成 Unicode 文本
  （pylatexenc），搜索结果的预览里不再出现原始 TeX；代码里的字符原样保留；
* notebook 里中文标题的锚点是空的（nbconvert 的 slug 只留 ASCII）：补上中文锚点，标题的 ¶ 链接与
  搜索结果都能跳到那一节；提示符、复制按钮与复制用的第二份源码不进搜索索引；
* 术语表（``GLOSSARY``）的每一行有自己的锚点，并在索引里单独成一条（标题是术语）：搜一个术语，
  结果直接指向术语表里的那一行；
* 页面的一级标题没有包含导航标题里的词时（首页的导航标题是「首页」），把导航标题附在索引里这一页的
  标题后面：按导航里的写法搜索，总能找到这一页；notebook 标题末尾的锚点符号「¶」去掉。
"""

from __future__ import annotations

import html
import json
import logging
import re
import sys
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
# notebook 的 Markdown 单元格由 MathJax 直接处理 $..$ 与 $$..$$
_TEX_DOLLAR = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?=\S)([^$]+?)(?<=\S)\$", re.DOTALL)
# 代码（行内与代码块）里的 \( 与 $ 是字面字符，不是公式
_CODE = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>)", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_ZWSP = "\u200b"

GLOSSARY = "glossary.md"
_EMPTY_ID_HEADING = re.compile(r'<(h[1-6]) id="">(.*?)<a class="anchor-link" href="#">', re.DOTALL)
# notebook 里不该进搜索索引的部分：In [1]: 提示符、复制按钮（「Copied!」）、给复制按钮用的第二份源码
_NOTEBOOK_NOISE = re.compile(
    r'<div (class="(?:jp-InputPrompt|jp-OutputPrompt|zeroclipboard-container|clipboard-copy-txt)\b)')
_GLOSSARY_ROW = re.compile(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>", re.DOTALL)

_glossary_rows: list[dict] = []    # 术语表每一行：{"location", "title", "text"}
_nav_titles: dict[str, str] = {}   # 页面 URL -> 导航标题
_notebooks: set[str] = set()       # notebook 页面的 URL


def on_config(config):
    docs = Path(config["docs_dir"])
    missing = [p for p in VENDORED if not (docs / p).is_file()]
    if missing:
        raise PluginError(
            f"缺少 {', '.join(missing)}：先运行 bash scripts/fetch_web_assets.sh"
            "（取回网页字体与 jieba-wasm；serve.sh 与 test.sh 会自动运行它）")
    return config


def on_nav(nav, config, files):
    _nav_titles.clear()
    _nav_titles.update({page.url: page.title for page in nav.pages if page.title})
    _notebooks.clear()
    _notebooks.update(page.url for page in nav.pages if page.file.src_uri.endswith(".ipynb"))
    return nav


def _unique_id(text: str, used: set[str], prefix: str = "") -> str:
    from markdown.extensions.toc import slugify_unicode

    base = prefix + (slugify_unicode(html.unescape(_TAG.sub("", text)), "-") or "section")
    slug, n = base, 1
    while slug in used:
        slug, n = f"{base}_{n}", n + 1
    used.add(slug)
    return slug


def on_page_content(content, page, config, files):
    if page.file.src_uri.endswith(".ipynb"):
        used = set(re.findall(r'\bid="([^"]+)"', content))

        def heading(m):
            slug = _unique_id(m.group(2), used)
            return f'<{m.group(1)} id="{slug}">{m.group(2)}<a class="anchor-link" href="#{slug}">'
        content = _EMPTY_ID_HEADING.sub(heading, content)
        content = _NOTEBOOK_NOISE.sub(r"<div data-search-exclude \1", content)
    if page.file.src_uri == GLOSSARY:
        _glossary_rows.clear()
        used = set(re.findall(r'\bid="([^"]+)"', content))

        def row(m):
            term, english, text = m.groups()
            slug = _unique_id(term, used, prefix="term-")
            _glossary_rows.append({"location": f"{page.url}#{slug}", "title": f"{term}（{english}）",
                                   "text": f"<p>{text}</p>"})
            return f'<tr id="{slug}">\n<td>{term}</td>\n<td>{english}</td>\n<td>{text}</td>\n</tr>'
        content = _GLOSSARY_ROW.sub(row, content)
    return content


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


def strip_tex(text: str, segment, dollars: bool = False) -> str:
    """把索引文本里代码之外的每段公式换成 Unicode 文本；公式里的汉字用 ``segment``（搜索插件的 jieba 切分）重新切分。"""
    def replace(m):
        tex = html.unescape(next(g for g in m.groups() if g is not None))
        return html.escape(segment(tex_to_text(tex)), quote=False)

    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # 偶数下标是代码之外的文字
        parts[i] = _TEX.sub(replace, parts[i])
        if dollars:
            parts[i] = _TEX_DOLLAR.sub(replace, parts[i])
    return "".join(parts)


def _merge_unanchored(docs: list[dict]) -> list[dict]:
    """同一地址的几条索引并成一条。

    notebook 里的中文标题生成的锚点是空的，每一节都记在页面本身的地址下；Material 按地址查结果，
    同一地址只留最后一节，页面的标题（与导航标题）就丢了。把这些节的标题与文字并进第一条。
    """
    first: dict[str, dict] = {}
    out = []
    for doc in docs:
        head = first.get(doc["location"])
        if head is None:
            first[doc["location"]] = doc
            out.append(doc)
        else:
            head["text"] = f"{head.get('text', '')} <h2>{doc.get('title', '')}</h2> {doc.get('text', '')}".strip()
    return out


#: 索引里的 * 换成外形相同的 ∗（U+2217）。lunr 建索引时把词里的 * 当成通配符：代码里单独的一个 *
#: （``(const pack16 *)``）成了匹配任何词的词，于是查一个不在索引里的词（「1」「版本1」）时，它在词集里
#: 「找到」了这个词，倒排表里却没有，lunr 抛出 TypeError，Material 的 worker 返回空结果。
_ASTERISK = "\u2217"


def _tokens(text: str, separator: re.Pattern, segment) -> set[str]:
    return {t for t in separator.split(segment(_TAG.sub(" ", text)).lower()) if t}


@event_priority(-100)  # 在搜索插件写出 search_index.json 之后
def on_post_build(config):
    path = Path(config["site_dir"]) / "search" / "search_index.json"
    if not path.is_file():
        return
    search = config["plugins"].get("material/search") or config["plugins"].get("search")
    # 与建索引时同一个切分函数（Material 搜索插件的 SearchIndex._segment_chinese，用 jieba）
    segment = getattr(getattr(search, "search_index", None), "_segment_chinese", None)
    if segment is None or getattr(sys.modules.get(type(search).__module__), "jieba", None) is None:
        segment = lambda s: s  # noqa: E731 — 没有 jieba 时搜索插件也不切分
    index = json.loads(path.read_text(encoding="utf-8"))
    separator = re.compile(index["config"]["separator"])
    index["docs"] = _merge_unanchored(index["docs"])
    if _glossary_rows and not any(d["location"] == _glossary_rows[0]["location"] for d in index["docs"]):
        index["docs"] += [{k: (segment(v) if k != "location" else v) for k, v in row.items()}
                          for row in _glossary_rows]
    for doc in index["docs"]:
        page = doc["location"].split("#")[0]
        for field in ("title", "text"):
            value = doc.get(field)
            if value:
                doc[field] = strip_tex(value, segment, dollars=page in _notebooks).replace("*", _ASTERISK)
        doc["title"] = re.sub(f"[{_ZWSP}\\s]*¶", "", doc["title"])
        nav_title = _nav_titles.get(page)
        if nav_title and "#" not in doc["location"] and not (
                _tokens(nav_title, separator, segment) <= _tokens(doc["title"], separator, segment)):
            doc["title"] = f"{doc['title']}{_ZWSP}（{segment(html.escape(nav_title, quote=False))}）"
    path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
