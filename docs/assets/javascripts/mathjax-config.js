// MathJax 3 配置：配合 pymdownx.arithmatex 的 generic 模式。
// arithmatex 把公式写成 \( .. \) 与 \[ .. \]，并包在 class="arithmatex" 的元素里；
// 只处理这些元素，页面其他地方（代码块等）里的反斜杠与美元符号一律不动。
window.MathJax = {
  tex: {
    // $...$ 与 $$...$$ 只出现在实验页（notebook 的 Markdown 单元，类名 jp-MarkdownOutput）里
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-MarkdownOutput|notebook-math",
  },
  startup: {
    // 整页排版只进入带 processHtmlClass 的元素：notebook 单元里的 <p>、<li> 没有类名，会被
    // ignoreHtmlClass 跳过，排版前先给它们加上 notebook-math
    pageReady: () => {
      markNotebookBlocks();
      return MathJax.startup.defaultPageReady();
    },
  },
};

// notebook 的 Markdown 单元（jp-MarkdownOutput）里直接含文字的块加上 notebook-math；返回还没排版的单元
function markNotebookBlocks() {
  for (const el of document.querySelectorAll(
    ".jp-MarkdownOutput :is(p, li, td, th, h1, h2, h3, h4, h5, h6, blockquote, dt, dd)")) {
    el.classList.add("notebook-math");
  }
  // 只返回含公式分隔符的单元：对没有公式的单元重排一次会清掉 CHTML 的字形缓存与样式表，
  // 已经排好的公式就成了空白
  return Array.from(document.querySelectorAll(".jp-MarkdownOutput"))
    .filter((el) => !el.querySelector("mjx-container") && /\$|\\\(|\\\[/.test(el.textContent));
}

// Material 的 document$ 在首次加载和每次即时导航后都会发出。只排版还没有排版过的公式：
// 首次加载时 MathJax 启动后会自行排版整页；对已排版的公式再排一次，MathML 输入会把
// 辅助 MathML 又排一遍，得到嵌套的公式。
function typesetPage() {
  const mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) {
    return;  // MathJax 尚未加载：它启动时会排版整页
  }
  mj.startup.promise = mj.startup.promise.then(() => {
    const pending = Array.from(document.querySelectorAll(".arithmatex"))
      .filter((el) => !el.querySelector("mjx-container"))
      .concat(markNotebookBlocks());
    if (pending.length === 0) {
      return;
    }
    mj.startup.output.clearCache();
    mj.typesetClear();
    mj.texReset();
    return mj.typesetPromise(pending);
  });
}

if (typeof document$ !== "undefined") {
  document$.subscribe(typesetPage);
}
