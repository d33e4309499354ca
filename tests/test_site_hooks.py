"""hooks/zh_site.py 的单元测试：索引里的 TeX、页面配置里的搜索 worker、术语表与 notebook 的锚点。"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mkdocs", reason="需要文档依赖：pip install -e '.[docs]'")
pytest.importorskip("pylatexenc", reason="需要文档依赖：pip install -e '.[docs]'")

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("zh_site_under_test", REPO / "hooks" / "zh_site.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def _page(src_uri: str, url: str):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri), url=url)


def test_tex_to_text():
    assert hooks.tex_to_text(r"M \times N") == "M ×N"
    assert "∑" in hooks.tex_to_text(r"\sum_{j} x_{ij}")
    assert hooks.tex_to_text(r"e^{m_\text{旧}}") == "e^m_旧"


def test_strip_tex_leaves_code_alone():
    text = r'读 \(5MN+2M\) 次 <code>re.sub(r"\(", s)</code> <pre><code>print("$5 $6")</code></pre> 与 $k$'
    out = hooks.strip_tex(text, lambda s: s)
    assert "\\(5MN" not in out and "5MN+2M" in out
    assert r'<code>re.sub(r"\(", s)</code>' in out and '<pre><code>print("$5 $6")</code></pre>' in out
    assert out.endswith("与 $k$"), "Markdown 页面里的 $ 不是公式定界符（arithmatex 已经换成 \\( \\)）"
    assert hooks.strip_tex("第 $k$ 个与 $$a^2$$", lambda s: s, dollars=True) == "第 k 个与 a^2"


def test_worker_url_in_page_config():
    html = ('<body><script id="__config" type="application/json">'
            '{"base":"../..","search":"../../assets/javascripts/workers/search.1234abcd.min.js","x":"<b>"}'
            "</script></body>")
    out = hooks.on_post_page(html, None, None)
    data = json.loads(out.split('type="application/json">')[1].split("</script>")[0])
    assert data["search"] == "../../assets/javascripts/workers/search_zh.js?material=search.1234abcd.min.js"
    assert data["x"] == "<b>" and "\\u003cb\\u003e" in out, "JSON 里的 < 必须转义"
    assert hooks.on_post_page(out, None, None) == out, "再处理一次不应改变"


def test_merge_unanchored():
    docs = [{"location": "labs/a/", "title": "实验", "text": "甲"},
            {"location": "labs/a/", "title": "学习目标", "text": "乙"},
            {"location": "labs/a/#x", "title": "X", "text": "丙"}]
    out = hooks._merge_unanchored(docs)
    assert [d["location"] for d in out] == ["labs/a/", "labs/a/#x"]
    assert out[0]["title"] == "实验" and "学习目标" in out[0]["text"] and "乙" in out[0]["text"]


def test_notebook_headings_and_glossary_rows_get_anchors():
    nb = ('<h2 id="">概念：树形归约<a class="anchor-link" href="#">¶</a></h2>'
          '<h2 id="">概念：树形归约<a class="anchor-link" href="#">¶</a></h2>'
          '<div class="jp-InputPrompt jp-InputArea-prompt">In [1]:</div>')
    out = hooks.on_page_content(nb, _page("labs/a.ipynb", "labs/a/"), None, None)
    assert 'id="概念树形归约"' in out and 'href="#概念树形归约_1"' in out
    assert '<div data-search-exclude class="jp-InputPrompt' in out
    table = "<tbody>\n<tr>\n<td>归约</td>\n<td>reduction</td>\n<td>把许多元素合成一个数</td>\n</tr>\n</tbody>"
    out = hooks.on_page_content(table, _page(hooks.GLOSSARY, "glossary/"), None, None)
    assert '<tr id="term-归约">' in out
    assert hooks._glossary_rows == [{"location": "glossary/#term-归约", "title": "归约（reduction）",
                                     "text": "<p>把许多元素合成一个数</p>"}]
