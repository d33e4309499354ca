// 本站的搜索 worker（hooks/zh_site.py 让页面配置指向它）。它包住 Material 自带的 worker
// （同一目录，文件名由 ?material= 传入），只多做两件事：
//
// 1. 查询先按建索引时的方式切分，再交给 Material：建索引时搜索插件用 Python 的 jieba 切分每一段
//    汉字，并在汉字与其他字符之间断开；这里用同一套词典与算法的 jieba-wasm（jieba-rs）切分查询里的
//    每一段汉字，并同样在汉字与拉丁字母、数字之间断开。连字符与索引一样只是分隔符（「-inf掩码」
//    是 inf 与 掩码 两个词，而不是「排除 inf掩码」）。切好的汉字词逐字加反斜杠转义交给 Material：
//    它对查询里的汉字另做一次按索引词表的切分，转义后每段只有一个字，那一步原样放过；lunr 的
//    查询解析再去掉转义。
// 2. 结果里用来高亮的词合回读者输入的整个词：一个输入词切出的几个词都命中、页面上也有整个词时，
//    链接的 ?h= 是整个词（「共享内存」），而不是其中一两个字。
// 3. 标题与查询逐字相同的页面排在最前。
"use strict";

const SETUP = 0;
const QUERY = 2;
const RESULT = 3;

const here = new URL(self.location.href);
const JIEBA = new URL("../../vendor/jieba-wasm/jieba_rs_wasm.js", here).href;
const HAN = /(\p{sc=Han}+)/u;
const IS_HAN = /^\p{sc=Han}+$/u;
// lunr 查询语法里的特殊字符（* 保留为通配符）
const LUNR_SPECIAL = /[\\:~^+\-]/g;

let separator = /[\s\u200b\u3000\-、。，．？！；]+/g;  // SETUP 时换成 mkdocs.yml 里搜索插件的 separator
let jieba;                                          // 第一次遇到含汉字的查询时加载
const pageText = new Map();                         // 页面地址 -> 索引里这一页的全部文字（小写）

function loadJieba() {
  jieba ||= import(JIEBA)
    .then(async module => {
      await module.default({ module_or_path: new URL("jieba_rs_wasm_bg.wasm", JIEBA) });
      return run => module.cut(run, true);            // 与 Python 的 jieba.cut（HMM 开）相同
    })
    .catch(err => {
      console.warn("jieba-wasm 加载失败，汉字按整段查询", err);
      return run => [run];
    });
  return jieba;
}

// 把读者输入的一个词切成索引里的词：先按分隔符，再在汉字与非汉字之间断开，汉字段交给 jieba
function tokens(word, cut) {
  const out = [];
  for (const part of word.split(separator))
    for (const run of part.split(HAN))
      if (run)
        out.push(...(IS_HAN.test(run) ? cut(run) : [run]));
  return out.filter(t => t.length > 0);
}

function escapeToken(token) {
  return IS_HAN.test(token)
    ? [...token].map(ch => `\\${ch}`).join("")
    : token.replace(LUNR_SPECIAL, "\\$&");
}

// 查询 -> [交给 Material 的查询, 每个输入词及其切出的词]
async function segmentQuery(query) {
  const cut = HAN.test(query) ? await loadJieba() : run => [run];
  const groups = [];
  for (const word of query.trim().split(/\s+/)) {
    const parts = tokens(word, cut);
    if (parts.length)
      groups.push({ word: word.replace(new RegExp(`^(?:${separator.source})|(?:${separator.source})$`, "g"), ""),
                    parts: parts.map(p => p.toLowerCase()) });
  }
  const rewritten = groups.flatMap(g => g.parts.map(escapeToken)).join(" ");
  return [rewritten || query, groups];
}

// 一个输入词切出的词全部命中、且页面上有整个词时，高亮用整个词（页面上的高亮只在一段连续文字里
// 找词：「<code>-inf</code>掩码」里找不到「inf掩码」，那就分别高亮 inf 与 掩码）
function mergeTerms(terms, groups, location) {
  const merged = { ...terms };
  const text = pageText.get(location.split("#")[0]) || "";
  for (const { word, parts } of groups) {
    if (parts.length === 1 && parts[0] === word.toLowerCase())
      continue;
    if (parts.every(p => terms[p] === true) && text.includes(word.toLowerCase())) {
      for (const p of parts)
        delete merged[p];
      merged[word] = true;
    }
  }
  return merged;
}

// ---- 接上 Material 的 worker ----
// 它在加载时用 addEventListener("message", ...) 注册处理函数，处理完用 postMessage 发回结果。
const nativeAddEventListener = self.addEventListener.bind(self);
const nativePostMessage = self.postMessage.bind(self);
const materialListeners = [];
self.addEventListener = (type, listener, options) => {
  if (type === "message")
    materialListeners.push(listener);
  else
    nativeAddEventListener(type, listener, options);
};
importScripts(here.searchParams.get("material"));
delete self.addEventListener;

// 标题与查询逐字相同（不计空格、分隔符与大小写）的页面排在最前：搜「存储体冲突」，标题就是
// 「存储体冲突」的讲义排在标题里也有这几个字的实验页前面
function normalize(text) {
  return text.replace(/<[^>]*>/g, "").replace(separator, "").replace(/\s+/g, "").toLowerCase();
}

function exactFirst(results, query) {
  const q = normalize(query);
  // 标题本身，或括号前后的部分（术语表的「归约（reduction）」、附了导航标题的「…（首页）」）
  const matches = title => {
    const plain = title.replace(/<[^>]*>/g, "").replace(/\u200b/g, "");
    const m = plain.match(/^(.*)（([^（）]*)）$/);
    return [plain, ...(m ? [m[1], m[2]] : [])].some(t => normalize(t) === q);
  };
  const rank = section => {
    const article = section.find(item => !item.location.includes("#")) || section[0];
    if (matches(article.title))
      return 2;
    // 术语表的行（锚点 #term-…，hooks/zh_site.py 加的）排在标题相同的讲义小节之后：术语在讲义里的那一页
    // 更该在前；没有这样的小节时，术语的定义排在只是正文里多次用到这个词的页面前面
    if (section.some(item => !item.location.includes("#term-") && matches(item.title)))
      return 1;
    return section.some(item => item.location.includes("#term-") && matches(item.title)) ? 0.5 : 0;
  };
  return results
    .map((section, i) => [rank(section), i, section])
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .map(([, , section]) => section);
}

const pending = [];   // 已交给 Material、结果尚未发回的查询（Material 按顺序回答）
self.postMessage = message => {
  if (message && message.type === RESULT && pending.length) {
    const { query, groups } = pending.shift();
    const items = message.data.items || [];
    for (const section of items) {
      for (const item of section)
        if (item.terms)
          item.terms = mergeTerms(item.terms, groups, item.location);
      // 只有某几节命中时，Material 补上的页面条目没有命中词（链接里 ?h= 是空的）：用这一页各节命中的词
      const union = Object.assign({}, ...section.map(item => item.terms || {}));
      for (const item of section)
        if (item.terms && Object.keys(item.terms).length === 0)
          item.terms = Object.fromEntries(Object.entries(union).filter(([, hit]) => hit));
    }
    message.data.items = exactFirst(items, query);
  }
  nativePostMessage(message);
};

// 查询要等 jieba 加载、切分之后才能交出，而 Material 必须按到达顺序处理消息：排成一队
let queue = Promise.resolve();
nativeAddEventListener("message", ev => {
  const message = ev.data;
  queue = queue.then(async () => {
    let forward = message;
    if (message && message.type === SETUP) {
      if (message.data.config.separator)
        separator = new RegExp(message.data.config.separator, "g");
      for (const doc of message.data.docs) {
        const page = doc.location.split("#")[0];
        const text = `${doc.title} ${doc.text}`.replace(/\u200b/g, "").toLowerCase();
        pageText.set(page, `${pageText.get(page) || ""} ${text}`);
      }
    } else if (message && message.type === QUERY && typeof message.data === "string") {
      const [rewritten, groups] = await segmentQuery(message.data);
      pending.push({ query: message.data, groups });
      forward = { ...message, data: rewritten };
    }
    for (const listener of materialListeners)
      await listener({ data: forward });
  }).catch(err => console.warn("搜索 worker 出错", err));
});
