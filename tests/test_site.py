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
from html import unescape as html_unescape
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

_DOCS_DEPS = "站点测试需要文档依赖：pip install -e '.[docs]'（scripts/test.sh 会安装）"
yaml = pytest.importorskip("yaml", reason=_DOCS_DEPS)
pytest.importorskip("mkdocs", reason=_DOCS_DEPS)
pytest.importorskip("material", reason=_DOCS_DEPS)
pytest.importorskip("pymdownx", reason=_DOCS_DEPS)

# 整个模块在同一个 pytest-xdist 进程里运行（scripts/test.sh 用 --dist loadgroup）：站点只构建一次，Chromium 只启动一次
pytestmark = pytest.mark.xdist_group("site")

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
    """docs 中的页面路径（.md 或 .ipynb）-> 站点里的 URL 路径（use_directory_urls）。"""
    stem = os.path.splitext(page)[0]
    if stem == "index":
        return ""
    if stem.endswith("/index"):
        return stem[: -len("index")]
    return stem + "/"


def test_site_tests_are_one_xdist_group(request):
    """scripts/test.sh 用 ``--dist loadgroup``：本文件的测试是一组，站点只构建一次、浏览器只启动一次。pytest 9.2.0
    与 pytest-xdist 3.8.0 一起时分组静默失效（pytest-xdist issue #1386），CI 因此多花半分钟以上；constraints.txt 固定
    了分组正常的版本。"""
    if not getattr(request.config.option, "loadgroup", False):      # pytest-xdist 在工作进程里设的选项
        pytest.skip("不是 pytest-xdist 的 --dist loadgroup 运行：没有分组可查")
    assert request.node.nodeid.endswith("@site"), (
        f"{request.node.nodeid} 没有带上 xdist_group 的后缀 @site：pytest {pytest.__version__} 下分组失效")


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


def _nav_titles(nav) -> list[tuple[str, str]]:
    """导航里每个页面的 (标题, 页面路径)：读者在导航里看到、会原样输入搜索框的写法。"""
    out = []
    for item in nav:
        if isinstance(item, dict):
            title, value = next(iter(item.items()))
            if isinstance(value, list):
                out.extend(_nav_titles(value))
            else:
                out.append((str(title), value))
    return out


def _load_nav_titles() -> list[tuple[str, str]]:
    try:
        from mkdocs.utils.yaml import yaml_load
    except ImportError:  # 没有文档依赖：上面的 importorskip 已让整个模块跳过
        return []
    with open(REPO / "mkdocs.yml", encoding="utf-8") as f:
        return _nav_titles(yaml_load(f)["nav"])


NAV_TITLES = _load_nav_titles()
_HAN = r"\u3400-\u9fff\uf900-\ufaff"
_BOUNDARY = re.compile(rf"(?<=[{_HAN}])(?=[^\s{_HAN}])|(?<=[^\s{_HAN}])(?=[{_HAN}])")


def _query_variants(title: str) -> dict[str, str]:
    """一个导航标题的几种输入：原样、汉字与其他字符之间加空格、汉字两侧的空格全去掉。"""
    spaced = re.sub(r"\s+", " ", _BOUNDARY.sub(" ", title)).strip()
    unspaced = re.sub(rf"\s+(?=[{_HAN}])|(?<=[{_HAN}])\s+", "", title)
    return {"原样": title, "加空格": spaced, "无空格": unspaced}


SEARCH_CASES = sorted({(title, query, page)
                       for title, page in NAV_TITLES
                       for query in _query_variants(title).values()})


def test_query_variants():
    assert _query_variants("warp洗牌") == {"原样": "warp洗牌", "加空格": "warp 洗牌", "无空格": "warp洗牌"}
    assert _query_variants("-inf掩码")["加空格"] == "-inf 掩码"
    assert _query_variants("CUDA C 模拟器")["无空格"] == "CUDA C模拟器"
    assert len(NAV_TITLES) >= 10 and ("warp洗牌", "cuda/warp-shuffle.md") in NAV_TITLES


_TEX_LEFT = re.compile(r"\\[()\[\]]|\\(?:frac|sum|times|text|mathrm|log|qquad|max|cdot|le|ge|infty)\b|\$[^\s$][^$]*\$")


def test_search_index_has_no_raw_tex(site_dir):
    """搜索结果的预览取自索引文本：里面不应再有 TeX，公式换成了 Unicode 文本（× ∑ …）。"""
    index = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))
    raw = []
    for d in index["docs"]:
        prose = re.sub(r"<pre\b.*?</pre>|<code\b.*?</code>", "", d["title"] + " " + d["text"], flags=re.S)
        m = _TEX_LEFT.search(prose)
        if m:
            raw.append((d["location"], m.group(0), prose[max(0, m.start() - 30): m.end() + 30]))
    assert not raw, f"索引里还有 {len(raw)} 段 TeX，例如：{raw[:5]}"
    text = "".join(d["text"] for d in index["docs"])
    assert "×" in text and "∑" in text, "公式没有换成 Unicode 文本"


def test_search_index_entries(site_dir, nav_pages):
    """索引的每条地址唯一（Material 按地址查结果）；notebook 的提示符与复制按钮不进索引；术语表每行一条。"""
    index = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))
    locations = [d["location"] for d in index["docs"]]
    dup = sorted({x for x in locations if locations.count(x) > 1})
    assert not dup, f"索引里这些地址出现了不止一次：{dup}"
    text = " ".join(d["title"] + " " + d["text"] for d in index["docs"])
    assert "Copied!" not in text and not re.search(r"In \[\d+\]:", text), "notebook 的提示符或复制按钮进了索引"
    assert "¶" not in " ".join(d["title"] for d in index["docs"])
    terms = [d for d in index["docs"] if "#term-" in d["location"]]
    assert len(terms) >= 20 and all(d["location"].startswith("glossary/#term-") for d in terms)
    html = (site_dir / "glossary" / "index.html").read_text(encoding="utf-8")
    missing = [d["location"] for d in terms if f'id="{d["location"].split("#")[1]}"' not in html]
    assert not missing, f"术语表里没有这些锚点：{missing[:5]}"


def test_vendored_web_assets(site_dir):
    """网页字体按 unicode-range 分片、只用 woff2；jieba-wasm 与本站的搜索 worker 都在站点里。"""
    css = (site_dir / "assets" / "vendor" / "noto-sans-sc" / "noto-sans-sc.css").read_text(encoding="utf-8")
    faces = re.findall(r"@font-face\s*{(.*?)}", css, re.S)
    assert len(faces) >= 100, f"只有 {len(faces)} 个 @font-face"
    assert all("unicode-range" in f for f in faces), "有的分片没有 unicode-range：浏览器会全部下载"
    files = re.findall(r"url\(\./(files/[^)]+)\)", css)
    assert files and all(f.endswith(".woff2") for f in files)
    missing = [f for f in files if not (site_dir / "assets" / "vendor" / "noto-sans-sc" / f).is_file()]
    assert not missing, f"CSS 引用的字体文件不在站点里：{missing[:5]}"
    wasm = site_dir / "assets" / "vendor" / "jieba-wasm" / "jieba_rs_wasm_bg.wasm"
    assert wasm.is_file() and wasm.read_bytes()[:4] == b"\0asm"
    html = (site_dir / "index.html").read_text(encoding="utf-8")
    config = json.loads(re.search(r'<script id="__config" type="application/json">(.*?)</script>', html, re.S)[1])
    assert "workers/search_zh.js?material=search." in config["search"], config["search"]
    worker = config["search"].split("?")[0]
    assert (site_dir / worker).is_file()
    material = urlsplit(config["search"]).query.split("material=", 1)[1]
    assert (site_dir / "assets" / "javascripts" / "workers" / material).is_file(), material


def test_python_and_browser_jieba_agree(browser, served_site, site_dir):
    """查询按建索引时的方式切分：浏览器里的 jieba-wasm 与建索引用的 Python jieba 对本站每个标题切得一样。"""
    jieba = pytest.importorskip("jieba", reason="没有 jieba 时搜索插件不切分汉字")
    index = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))
    runs = sorted({run for d in index["docs"] for run in re.findall(rf"[{_HAN}]+", d["title"].replace("\u200b", ""))})
    runs += [t for t, _ in NAV_TITLES]
    runs = sorted({r for t in runs for r in re.findall(rf"[{_HAN}]+", t)})
    expected = {r: list(jieba.cut(r)) for r in runs}
    base, _ = served_site
    page, errors, _ = _open(browser, base)
    try:
        got = page.evaluate("""async (runs) => {
            const m = await import('./assets/vendor/jieba-wasm/jieba_rs_wasm.js');
            await m.default({module_or_path: new URL('./assets/vendor/jieba-wasm/jieba_rs_wasm_bg.wasm', location.href)});
            return Object.fromEntries(runs.map(r => [r, m.cut(r, true)]));
        }""", runs)
    finally:
        page.close()
    diff = {r: (expected[r], got[r]) for r in runs if expected[r] != got[r]}
    assert len(runs) >= 20
    assert not diff, f"Python jieba 与 jieba-wasm 切分不同：{diff}"


# ---------------------------------------------------------------- 浏览器

def _open(browser, url, width=1280):
    """打开一页；返回 (page, 脚本错误与控制台错误, 404 之外的失败请求)。"""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}")
            if msg.type == "error" else None)
    failed: list[str] = []
    page.on("requestfailed", lambda req: failed.append(f"{req.url}: {req.failure}"))
    page.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    return page, errors, failed


@pytest.fixture(scope="module")
def search_page(browser, served_site):
    """首页上打开的搜索框，整个模块共用（索引只建一次）。"""
    base, _ = served_site
    page, errors, failed = _open(browser, base)
    page.locator("input.md-search__input").click(timeout=TIMEOUT_MS)
    yield page, errors, failed
    page.close()


def _search(page, query: str) -> list[str]:
    """在搜索框里输入 query，返回结果（每页一条）链接的 href，按 Material 的排序。"""
    box = page.locator("input.md-search__input")
    items = ".md-search-result__item"
    box.fill("")
    box.press("End")  # Material 在 keyup 时读取搜索框；fill 输入汉字不产生按键事件
    page.wait_for_function(f"document.querySelectorAll('{items}').length === 0", timeout=TIMEOUT_MS)
    box.fill(query)
    box.press("End")
    try:
        page.wait_for_function(f"document.querySelectorAll('{items}').length > 0", timeout=10_000)
    except Exception:  # noqa: BLE001 — 没有任何结果：交给调用方断言
        return []
    return page.eval_on_selector_all(f"{items} > a.md-search-result__link", "els => els.map(e => e.href)")


def _path_of(href: str, base: str) -> str:
    return urlsplit(href).path[len(urlsplit(base).path):]


@pytest.mark.parametrize(("title", "query", "page_path"), SEARCH_CASES,
                         ids=[f"{t}|{q}" for t, q, _ in SEARCH_CASES])
def test_browser_search_nav_title(search_page, served_site, title, query, page_path):
    """每个导航标题（原样、加空格、无空格）搜出的第一个页面就是它自己。"""
    base, _ = served_site
    page, errors, _ = search_page
    hrefs = _search(page, query)
    pages = [_path_of(h, base) for h in hrefs]
    assert pages, f"搜索「{query}」没有结果"
    assert pages[0] == _page_url_path(page_path), (
        f"搜索「{query}」的第一个结果是 {pages[0]}，应是 {_page_url_path(page_path)}；前几个：{pages[:5]}")
    assert not errors, errors


def test_browser_search_finds_lectures(search_page, served_site, nav_pages):
    base, not_found = served_site
    page, errors, _ = search_page
    found = {_path_of(h, base) for h in _search(page, "归约")}
    lectures = {_page_url_path(p) for p in nav_pages if p not in NON_LECTURE}
    assert len(found & lectures) >= 2, f"搜索「归约」找到的讲义页面不足两个：{sorted(found)}"
    assert not errors, errors


@pytest.mark.parametrize(("query", "h"), [
    ("共享内存", "共享内存"), ("warp洗牌", "warp洗牌"), ("存储体冲突", "存储体冲突"),
    ("分块与在线softmax", "分块与在线softmax"), ("归约", "归约"),
    # -inf掩码那一页上 -inf 写在代码里：页面上没有连续的「inf掩码」，分别高亮两个词
    ("-inf掩码", "inf 掩码"),
])
def test_browser_search_highlights_whole_term(browser, search_page, served_site, query, h):
    """结果链接的 ?h= 是整个词（页面上有连续的整个词时）；点开后页面上高亮的正是这些词，而不是其中的单字。"""
    base, not_found = served_site
    page, errors, _ = search_page
    hrefs = _search(page, query)
    assert hrefs, f"搜索「{query}」没有结果"
    got = parse_qs(urlsplit(hrefs[0]).query).get("h", [""])[0]
    assert got == h, f"搜索「{query}」的结果链接高亮「{got}」，应是「{h}」：{hrefs[0]}"
    target, target_errors, _ = _open(browser, hrefs[0])
    try:
        target.wait_for_selector("mark[data-md-highlight]", state="attached", timeout=TIMEOUT_MS)
        marks = target.eval_on_selector_all("mark[data-md-highlight]", "els => els.map(e => e.textContent)")
    finally:
        target.close()
    wrong = sorted({m for m in marks if m.lower() not in h.lower().split()})
    assert not wrong, f"「{query}」的结果页上高亮了别的字：{wrong}"
    assert not errors and not target_errors, errors + target_errors


# 页面检查：字形、版面宽度、公式。在浏览器里运行，返回测量结果，由 Python 断言。
_GLYPHS_JS = r"""async () => {
  await document.fonts.ready;
  // 页面上每个汉字：正文（正文字体）与代码里（代码字体）分开收集
  const prose = new Set(), code = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !el.offsetParent && getComputedStyle(el).position !== 'fixed') continue;  // 不显示的不算
    if (el.closest('script, style, mjx-assistive-mml')) continue;
    const target = el.closest('pre, code, kbd') ? code : prose;
    for (const ch of n.textContent.match(/\p{sc=Han}/gu) || []) target.add(ch);
  }
  // 1. 页面自己加载了覆盖这些字的 Noto Sans SC 分片（不靠机器上的字体），且只加载了用到的分片
  const faces = [...document.fonts].filter(f => f.family.replace(/["']/g, '') === 'Noto Sans SC');
  const ranges = f => f.unicodeRange.split(',').map(r => {
    const [a, b] = r.trim().replace(/^U\+/i, '').split('-');
    return [parseInt(a, 16), parseInt(b || a, 16)];
  });
  const covered = (ch, fs) => fs.some(f => ranges(f).some(([a, b]) => ch.codePointAt(0) >= a && ch.codePointAt(0) <= b));
  const loaded = faces.filter(f => f.status === 'loaded');
  const all = [...new Set([...prose, ...code])];
  const noFace = all.filter(ch => !covered(ch, loaded));
  // 2. 测量：在 canvas 上用页面的字体画每个字，与一个没有任何字体收录的码位（画出来是 .notdef 方框）比较像素
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 40;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const raster = (ch, family) => {
    ctx.clearRect(0, 0, 40, 40);
    ctx.font = `28px ${family}`;
    ctx.fillText(ch, 4, 32);
    return ctx.getImageData(0, 0, 40, 40).data.join(',');
  };
  const fontOf = sel => { const el = document.querySelector(sel); return el ? getComputedStyle(el).fontFamily : null; };
  const stacks = {prose: getComputedStyle(document.body).fontFamily, code: fontOf('.md-typeset pre code') || fontOf('.md-typeset code')};
  const result = {chars: all.length, faces: faces.length, loaded: loaded.length, noFace, tofu: {}, control: {}};
  await document.fonts.load(`28px ${stacks.prose}`, all.join(''));
  for (const [name, chars] of [['prose', prose], ['code', code]]) {
    const family = stacks[name] || stacks.prose;
    const notdef = raster('\u{10FFFD}', family);
    result.control[name] = {pua: raster('\u{10FFFC}', family) === notdef, latin: raster('A', family) === notdef};
    result.tofu[name] = [...chars].filter(ch => raster(ch, family) === notdef);
  }
  return result;
}"""

_LAYOUT_JS = r"""() => {
  const de = document.documentElement;
  const W = de.clientWidth;
  // 伸出页面右边、又不在可滚动容器里的元素（代码块与宽表格在自己的框里滚动，不算）
  const clipped = e => { for (let a = e.parentElement; a && a !== de; a = a.parentElement) if (getComputedStyle(a).overflowX !== 'visible') return true; return false; };
  const out = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > W + 1 && !clipped(e))
    .slice(0, 5).map(e => `${e.tagName.toLowerCase()}.${e.className} 右边 ${Math.round(e.getBoundingClientRect().right)} px：${(e.textContent || '').trim().slice(0, 40)}`);
  return {scrollWidth: de.scrollWidth, clientWidth: W, offenders: out};
}"""

_MATH_JS = r"""async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const formulas = [...document.querySelectorAll('.arithmatex')];
  // 正文里（代码之外）还留着的 TeX 定界符：说明有公式没被排版
  const text = [...document.querySelectorAll('.md-content p, .md-content li, .md-content td, .md-content div.arithmatex')]
    .filter(e => !e.querySelector('mjx-container') || e.matches('div.arithmatex'))
    .map(e => { const c = e.cloneNode(true); c.querySelectorAll('code, pre, mjx-container').forEach(x => x.remove()); return c.textContent; })
    .join('\n');
  const raw = (text.match(/\\\(|\\\[|\$\$|(^|[^\\\w])\$[^\s$][^$\n]*\$/g) || []).slice(0, 5);
  return {mathjax: !!(window.MathJax && MathJax.startup && MathJax.startup.document), formulas: formulas.length,
          typeset: formulas.filter(e => e.querySelector('mjx-container')).length,
          leftover: formulas.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60)),
          merror: document.querySelectorAll('mjx-merror').length, raw,
          // 排版了却画不出来的公式（CHTML 的字形样式丢失时宽度为 0）
          blank: [...document.querySelectorAll('mjx-container')].filter(e => e.getBoundingClientRect().width === 0
                   && !e.closest('mjx-assistive-mml') && e.offsetParent !== null).length};
}"""


@pytest.mark.parametrize("page_path", [p for _, p in NAV_TITLES])
def test_browser_page(browser, served_site, page_path):
    """每个页面：汉字不显示成方框（测量）、1280 与 390 px 宽都没有整页横向溢出、公式都已排版、没有脚本错误。"""
    base, not_found = served_site
    seen_404 = len(not_found)
    page, errors, failed = _open(browser, base + _page_url_path(page_path), width=1280)
    try:
        math = page.evaluate(_MATH_JS)
        glyphs = page.evaluate(_GLYPHS_JS)
        layout = {}
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_timeout(100)
            layout[width] = page.evaluate(_LAYOUT_JS)
    finally:
        page.close()
    # 字形
    assert glyphs["control"]["prose"]["pua"] and not glyphs["control"]["prose"]["latin"], (
        f"方框检测失灵：{glyphs['control']}")
    assert glyphs["chars"] > 0, f"{page_path} 上没有找到汉字"
    assert not glyphs["tofu"]["prose"], f"{page_path}：正文里这些字画成了方框：{''.join(glyphs['tofu']['prose'][:40])}"
    assert not glyphs["tofu"]["code"], f"{page_path}：代码里这些字画成了方框：{''.join(glyphs['tofu']['code'][:40])}"
    assert not glyphs["noFace"], (
        f"{page_path}：这些字没有由随站点提供的 Noto Sans SC 显示：{''.join(glyphs['noFace'][:40])}")
    assert glyphs["loaded"] < glyphs["faces"] / 2, (
        f"{page_path} 加载了 {glyphs['loaded']}/{glyphs['faces']} 个字体分片：应只加载用到的")
    # 版面
    for width, lay in layout.items():
        assert lay["scrollWidth"] <= lay["clientWidth"] and not lay["offenders"], (
            f"{page_path} 在 {width} px 宽时整页横向溢出（{lay['scrollWidth']} > {lay['clientWidth']}）：{lay['offenders']}")
    # 公式
    assert math["mathjax"], f"{page_path}：MathJax 没有启动"
    assert math["typeset"] == math["formulas"], f"{page_path}：{math['formulas']} 个公式中只有 {math['typeset']} 个被排版：{math['leftover']}"
    assert math["merror"] == 0, f"{page_path}：MathJax 报告了 {math['merror']} 个 TeX 错误"
    assert math["blank"] == 0, f"{page_path}：{math['blank']} 个公式排版了却宽度为 0（字形样式丢失）"
    assert not math["raw"], f"{page_path}：正文里留着没有排版的 TeX：{math['raw']}"
    assert not errors, f"{page_path}：{errors}"
    assert not failed, f"{page_path}：请求失败：{failed}"
    assert not not_found[seen_404:], f"{page_path}：浏览器请求了不存在的文件：{not_found[seen_404:]}"


_WORKER_SEARCH_JS = r"""async (queries) => {
  // 与页面用同一个搜索 worker（配置里的地址）与同一份索引，直接发查询：比逐个在搜索框里输入快得多
  const cfg = JSON.parse(document.getElementById('__config').textContent);
  const base = new URL(cfg.base + '/', location.href);
  const index = await (await fetch(new URL('search/search_index.json', base))).json();
  const worker = new Worker(new URL(cfg.search, base));
  const next = () => new Promise(resolve => worker.addEventListener('message', ev => resolve(ev.data), {once: true}));
  worker.postMessage({type: 0, data: {config: index.config, docs: index.docs, options: {suggest: false}}});
  await next();
  const out = {};
  for (const q of queries) {
    worker.postMessage({type: 2, data: q});
    const {data} = await next();
    out[q] = data.items.map(s => (s.find(i => !i.location.includes('#')) || s[0]).location.split('#')[0]);
  }
  worker.terminate();
  return out;
}"""


def _headings(site_dir: Path, nav_pages: list[str]) -> dict[str, set[str]]:
    """站点里每个 h1–h3 标题的文字 -> 出现它的页面 URL。"""
    found: dict[str, set[str]] = {}
    for p in nav_pages:
        text = (site_dir / _page_url_path(p) / "index.html").read_text(encoding="utf-8")
        article = text[text.find('<article'):text.find('</article>')]
        for m in re.finditer(r"<h([123])\b[^>]*>(.*?)</h\1>", article, re.S):
            title = re.sub(r"<[^>]+>", "", re.sub(r'<a class="(?:headerlink|anchor-link)".*?</a>', "", m.group(2)))
            title = html_unescape(title).replace("¶", "").strip()
            if title:
                found.setdefault(title, set()).add(_page_url_path(p))
    return found


@functools.lru_cache(maxsize=None)
def _page_h1(site_dir: Path, url: str) -> str:
    text = (site_dir / url / "index.html").read_text(encoding="utf-8")
    m = re.search(r"<h1\b[^>]*>(.*?)</h1>", text[text.find("<article"):], re.S)
    title = re.sub(r"<[^>]+>", "", re.sub(r'<a class="(?:headerlink|anchor-link)".*?</a>', "", m.group(1))) if m else ""
    return html_unescape(title).replace("¶", "").strip()


def test_search_index_has_no_wildcard_character(site_dir):
    """lunr 建索引时把词里的 * 当成通配符：单独一个 *（代码里的指针）会匹配任何词，查一个不在索引里的词时 lunr
    抛出 TypeError、搜索没有结果。钩子把索引里的 * 换成 ∗（U+2217）。"""
    index = json.loads((site_dir / "search" / "search_index.json").read_text(encoding="utf-8"))
    bad = [d["location"] for d in index["docs"] if "*" in d.get("title", "") + d.get("text", "")]
    assert not bad, bad[:5]
    assert any("\u2217" in d.get("text", "") for d in index["docs"])       # 代码里的指针还在，只是换了字符


def test_search_digits_and_words_not_in_the_index(search_page):
    """单独的数字、索引里没有的词：查询不出错（Material 的 worker 出错时只在控制台警告「Invalid query」、返回空结果）。"""
    page, _, _ = search_page
    warnings = []
    page.on("console", lambda m: warnings.append(m.text))
    digits = [str(d) for d in range(10)]
    ranked = page.evaluate(_WORKER_SEARCH_JS, digits + ["版本1：交错寻址", "zzzzqqqq", "C++"])
    assert not [w for w in warnings if "Invalid query" in w or "TypeError" in w], warnings
    assert ranked["1"] and ranked["3"] and ranked["版本1：交错寻址"][:1] == ["cuda/seven-versions/"], ranked
    assert ranked["zzzzqqqq"] == []
    # 带加号的词（C++）：加号是分隔符，索引里是 c，搜 C++ 照样找得到讲模拟器支持的 C++ 的那一页
    assert "cuda/simulator/" in ranked["C++"], ranked["C++"]


def test_search_headings_and_glossary_terms(search_page, served_site, site_dir, nav_pages):
    """每个只出现在一页上的标题、术语表里的每个中文术语，原样搜索：它的页面在前三个结果里。

    术语的页面是术语表，或标题里就有这个术语的讲义（搜「存储体」，讲存储体冲突的那一讲也对）。
    """
    page, errors, _ = search_page
    all_headings = _headings(site_dir, nav_pages)
    headings = {t: next(iter(pages)) for t, pages in all_headings.items() if len(pages) == 1}
    glossary = (REPO / "docs" / "glossary.md").read_text(encoding="utf-8")
    terms = re.findall(r"^\| ([^|]*[\u4e00-\u9fff][^|]*?) \| [A-Za-z]", glossary, re.M)
    terms = [t for t in terms if t != "中文"]  # 表头
    queries = sorted(set(headings) | set(terms))
    ranked = page.evaluate(_WORKER_SEARCH_JS, queries)
    misses = []
    for q in queries:
        want = {headings[q]} if q in headings else {"glossary/"} | {
            p for t, pages in all_headings.items() if q in t for p in pages if t == _page_h1(site_dir, p)}
        if not want & set(ranked[q][:3]):
            misses.append(f"「{q}」应找到 {sorted(want)}，前三个是 {ranked[q][:3]}")
    assert len(headings) >= 50 and len(terms) >= 20, (len(headings), len(terms))
    assert not misses, f"{len(misses)}/{len(queries)} 个查询没把它的页面排进前三：\n" + "\n".join(misses)
    assert not errors, errors
