// 实验页（mkdocs-jupyter 渲染的 notebook）的模板要加载一个 MathJax 脚本：MathJax 3 已经由 extra_javascript
// 加载（docs/assets/mathjax），这里不再加载第二份，也不从 CDN 加载任何东西。
