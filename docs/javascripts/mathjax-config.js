// MathJax 3 for pymdownx.arithmatex (generic mode): \( … \) inline, \[ … \] display.
window.MathJax = {
  tex: {inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex"},
};
// Material's instant navigation is off, so each page load typesets once; nothing else to hook.
