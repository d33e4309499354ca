"""站点测试：严格构建、离线资源、中文搜索与公式排版。

* ``mkdocs build --strict`` 必须成功（失效链接、错误的嵌入源码路径或片段名都会让它失败）；
* 站点不引用任何外部脚本、样式或字体（MathJax 随仓库提供）；
* 浏览器测试：无头 Chromium 打开构建好的站点，在搜索框里搜「归约」应找到多个讲义页面，
  首页的公式应由 MathJax 排版。Chromium 由 scripts/test.sh 安装（Debian 包 chromium）。

整个会话只构建一次站点（每个 xdist 进程一次）。
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

_DOCS_DEPS = "站点测试需要文档依赖：pip install -e '.[docs]'（scripts/test.sh 会安装）"
yaml = pytest.importorskip("yaml", reason=_DOCS_DEPS)
pytest.importorskip("mkdocs", reason=_DOCS_DEPS)
pytest.importorskip("material", reason=_DOCS_DEPS)
pytest.importorskip("pymdownx", reason=_DOCS_DEPS)

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# 附录与首页之外的页面都算讲义页面
NON_LECTURE = {"index.md", "glossary.md", "style.md"}
TIMEOUT_MS = 30_000


def _nav_pages(nav) -> list[str]:
    """按导航顺序列出 mkdocs.yml 中的全部 .md 页面。"""
    pages = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            pages.extend(_nav_pages(value))
        else:
            pages.append(value)
    return pages


@pytest.fixture(scope="session")
def mkdocs_config() -> dict:
    from mkdocs.utils.yaml import yaml_load  # 认得 mkdocs.yml 里可能出现的 !ENV、!!python/name 等标签

    with open(REPO / "mkdocs.yml", encoding="utf-8") as f:
        return yaml_load(f)


@pytest.fixture(scope="session")
def nav_pages(mkdocs_config) -> list[str]:
    return _nav_pages(mkdocs_config["nav"])


@pytest.fixture(scope="session")
def site_build(tmp_path_factory):
    """在临时目录里严格构建站点，返回 (returncode, output, site_dir)。"""
    out = tmp_path_factory.mktemp("site") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr, out


@pytest.fixture(scope="session")
def site_dir(site_build) -> Path:
    rc, output, out = site_build
    if rc != 0:
        pytest.fail(f"mkdocs build --strict 失败（退出码 {rc}）：\n{output[-4000:]}")
    return out


def _page_url_path(page: str) -> str:
    """docs 中的页面路径 -> 站点里的 URL 路径（use_directory_urls）。"""
    if page == "index.md":
        return ""
    if page.endswith("/index.md"):
        return page[: -len("index.md")]
    return page[: -len(".md")] + "/"


def test_nav_matches_docs(nav_pages):
    """导航列出的每个页面都存在；docs/ 下没有导航之外的页面。

    docs/assets/ 是静态资源，docs/data/ 里的 .md 是生成的表格（mkdocs.yml 的 exclude_docs），都不算页面。
    """
    docs = REPO / "docs"
    missing = [p for p in nav_pages if not (docs / p).is_file()]
    assert not missing, f"mkdocs.yml 的导航列出了不存在的页面：{missing}"
    on_disk = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md")
                     if p.relative_to(docs).parts[0] not in ("assets", "data"))
    extra = sorted(set(on_disk) - set(nav_pages))
    assert not extra, f"这些页面不在 mkdocs.yml 的导航里：{extra}"
    assert len(nav_pages) == len(set(nav_pages)), "导航里有重复的页面"


def test_strict_build(site_build, nav_pages):
    rc, output, out = site_build
    assert rc == 0, f"mkdocs build --strict 失败（退出码 {rc}）：\n{output[-4000:]}"
    for page in nav_pages:
        html = out / _page_url_path(page) / "index.html"
        assert html.is_file(), f"{page} 没有生成 {html.relative_to(out)}"


def _find_section() -> tuple[str, str]:
    """src/ 中第一个用 --8<-- [start:名字] 标出的片段：(相对路径, 名字)。"""
    marker = re.compile(r"--8<-- \[start:([a-z][-_0-9a-z]*)\]")
    for path in sorted((REPO / "src").rglob("*")):
        if path.suffix in (".py", ".cu") and path.is_file():
            m = marker.search(path.read_text(encoding="utf-8"))
            if m:
                return str(path.relative_to(REPO)), m.group(1)
    pytest.fail("src/ 里没有任何 --8<-- [start:...] 片段标记")


@pytest.mark.parametrize("broken", ["section", "path", None])
def test_snippet_embedding_is_checked(tmp_path, broken):
    """用本站的 Markdown 扩展配置构建一个单页站点：嵌入的源码片段或路径写错时构建必须失败。"""
    path, section = _find_section()
    target = {"section": f"{path}:no_such_section", "path": f"src/no_such_file.py:{section}",
              None: f"{path}:{section}"}[broken]
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f'# 嵌入\n\n```py title="{path}"\n--8<-- "{target}"\n```\n',
                                   encoding="utf-8")
    # 继承本站的 mkdocs.yml（同一套 Markdown 扩展），只换掉页面与插件
    config = {
        "INHERIT": str(REPO / "mkdocs.yml"),
        "site_name": "snippet-check",
        "docs_dir": str(docs),
        "nav": ["index.md"],
        "plugins": [],
        "hooks": [],
        "extra_css": [],
        "extra_javascript": [],
    }
    cfg = tmp_path / "mkdocs.yml"
    cfg.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(cfg), "-d", str(tmp_path / "site")],
        cwd=REPO, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True, text=True, timeout=300,
    )
    if broken is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
        assert "8&lt;" not in html, "片段没有被展开"
    else:
        assert proc.returncode != 0, f"嵌入写错的{broken}却构建成功了"
        assert "Snippet" in proc.stdout + proc.stderr


def test_no_external_resources(site_dir):
    """所有脚本、样式、字体都来自站点本身：机器可能上不了网。"""
    pattern = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](https?:)?//""",
                         re.IGNORECASE)
    offenders = []
    for html in site_dir.rglob("*.html"):
        for m in pattern.finditer(html.read_text(encoding="utf-8")):
            tag = m.group(0)
            if 'rel="canonical"' in tag:  # 指向 site_url 本身，不是要加载的资源
                continue
            offenders.append(f"{html.relative_to(site_dir)}: {tag}")
    assert not offenders, "页面引用了外部资源：\n" + "\n".join(offenders[:20])
    mathjax = site_dir / "assets" / "mathjax"
    assert (mathjax / "tex-mml-chtml.js").is_file()
    fonts = list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) >= 20, f"MathJax 字体不全：只找到 {len(fonts)} 个"


def test_search_index_segments_chinese(site_dir, nav_pages):
    """搜索索引按中文配置，且汉字经 jieba 切分（词之间插入零宽空格）。"""
    pytest.importorskip("jieba", reason="没有 jieba 时搜索插件不切分汉字")
    index = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert "zh" in index["config"]["lang"]
    assert "u200b" in index["config"]["separator"]  # 按 jieba 插入的零宽空格分词
    texts = [doc["text"] for doc in index["docs"]]
    segmented = [t for t in texts if re.search("\u200b归约|归约\u200b", t)]
    assert segmented, "索引里的「归约」没有被切分成单独的词"
    locations = {doc["location"].split("#")[0] for doc in index["docs"]
                 if "归约" in doc["text"] or "归约" in doc["title"]}
    lectures = {_page_url_path(p) for p in nav_pages if p not in NON_LECTURE}
    assert len(locations & lectures) >= 2, f"只有这些讲义页面提到「归约」：{sorted(locations & lectures)}"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """静态文件服务；记下 404 的路径，不往终端打日志。"""

    not_found: list[str] = []

    def log_message(self, format, *args):  # noqa: A002
        pass

    def send_error(self, code, message=None, explain=None):
        if code == 404:
            self.not_found.append(self.path)
        super().send_error(code, message, explain)


@pytest.fixture(scope="module")
def served_site(site_dir):
    """在 127.0.0.1 的一个空闲端口上提供构建好的站点。"""
    handler = type("Handler", (_QuietHandler,), {"not_found": []})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(site_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler.not_found
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"没有找到 Chromium（{CHROMIUM}）：bash scripts/test.sh 会用 apt-get 安装 Debian 包 chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="浏览器测试需要 playwright")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _open(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    return page, errors


def test_browser_search_finds_lectures(browser, served_site, nav_pages):
    base, not_found = served_site
    page, errors = _open(browser, base)
    try:
        box = page.locator("input.md-search__input")
        box.click(timeout=TIMEOUT_MS)
        box.fill("归约")
        box.press("End")  # Material 在 keyup 时读取搜索框；fill 输入汉字不产生按键事件
        items = page.locator(".md-search-result__item")
        items.first.wait_for(state="attached", timeout=TIMEOUT_MS)
        # 结果是逐步渲染的：等它稳定到至少 3 条
        page.wait_for_function(
            "document.querySelectorAll('.md-search-result__item').length >= 3", timeout=TIMEOUT_MS)
        hrefs = page.eval_on_selector_all(
            ".md-search-result__item > a.md-search-result__link", "els => els.map(e => e.href)")
    finally:
        page.close()
    # 结果链接形如 .../cuda/tree-reduction/?h=...#节（search.highlight 加上 ?h=）
    found = {urlsplit(h).path.lstrip("/") for h in hrefs if h.startswith(base)}
    lectures = {_page_url_path(p) for p in nav_pages if p not in NON_LECTURE}
    hit = found & lectures
    assert len(hrefs) >= 3, f"搜索「归约」只得到 {len(hrefs)} 条结果：{hrefs}"
    assert len(hit) >= 2, f"搜索「归约」找到的讲义页面不足两个：{sorted(found)}"
    assert not errors, f"页面脚本出错：{errors}"
    assert not not_found, f"浏览器请求了不存在的文件：{not_found}"


@pytest.mark.parametrize("page_path", ["index.md", "glossary.md"])
def test_browser_math_typeset(browser, served_site, page_path):
    base, not_found = served_site
    page, errors = _open(browser, base + _page_url_path(page_path))
    try:
        page.wait_for_selector("mjx-container", state="attached", timeout=TIMEOUT_MS)
        # 等 MathJax 排版完本页的所有公式
        page.wait_for_function(
            "window.MathJax && MathJax.startup && MathJax.startup.promise"
            " && MathJax.startup.promise.then(() => true)", timeout=TIMEOUT_MS)
        n_formulas = page.locator(".arithmatex").count()
        n_typeset = page.locator(".arithmatex mjx-container").count()
        n_errors = page.locator("mjx-merror").count()
        leftover = page.eval_on_selector_all(
            ".arithmatex", "els => els.filter(e => !e.querySelector('mjx-container'))"
                           ".map(e => e.textContent.slice(0, 60))")
    finally:
        page.close()
    assert n_formulas > 0, f"{page_path} 上没有公式"
    assert n_typeset == n_formulas, f"{page_path}：{n_formulas} 个公式中只有 {n_typeset} 个被排版：{leftover}"
    assert n_errors == 0, f"{page_path}：MathJax 报告了 {n_errors} 个 TeX 错误"
    assert not errors, f"页面脚本出错：{errors}"
    assert not not_found, f"浏览器请求了不存在的文件：{not_found}"
