// Small DOM and number helpers shared by the report's sections (namespace window.Grove).
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});

  // el("div", {class: "x", onclick: fn}, child, "text", ...): an element; children may be nodes, strings or arrays
  G.el = function (tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    G.append(node, children);
    return node;
  };

  G.append = function (node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  };

  G.isNum = (x) => typeof x === "number" && isFinite(x);

  // a number for reading: 3 significant digits, integers as they are
  G.fmt = function (x, digits) {
    if (!G.isNum(x)) return "–";
    if (Number.isInteger(x) && Math.abs(x) < 1e6) return String(x);
    const a = Math.abs(x);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(2);
    return Number(x.toPrecision(digits || 3)).toString();
  };

  G.pct = (x) => (G.isNum(x) ? (100 * x).toFixed(1) + " %" : "–");

  G.median = function (values) {
    const v = values.filter(G.isNum).sort((a, b) => a - b);
    if (!v.length) return null;
    const m = Math.floor(v.length / 2);
    return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  };

  // the least and the greatest finite value, or [null, null] (a loop: spreading a long array overflows the stack)
  G.extent = function (values) {
    let lo = null, hi = null;
    for (const v of values) {
      if (!G.isNum(v)) continue;
      if (lo === null || v < lo) lo = v;
      if (hi === null || v > hi) hi = v;
    }
    return [lo, hi];
  };

  G.mean = function (values) {
    const v = values.filter(G.isNum);
    return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
  };

  // a model's text in a <pre>; an empty or blank text said in words (it would show as nothing)
  G.textBlock = function (text, cls) {
    if (!text) return G.el("span", { class: "muted small" }, "(empty)");
    if (!text.trim()) return G.el("span", { class: "muted small" }, `(only whitespace: ${JSON.stringify(text)})`);
    return G.el("pre", { class: cls }, text);
  };

  // a note in place of what a section cannot show
  G.note = (text, kind) => G.el("p", { class: "note " + (kind || "") }, text);

  G.section = function (id, title, intro) {
    return G.el("section", { id: id, class: "section" }, G.el("h2", {}, title), intro ? G.el("p", { class: "intro" }, intro) : null);
  };

  G.badge = (text, kind, title) => G.el("span", { class: "badge " + (kind || ""), title: title || null }, text);

  // the shared tooltip: rows of [label, value]; never HTML from the data
  const tip = () => document.getElementById("tooltip");
  G.showTip = function (event, title, rows) {
    const box = tip();
    box.replaceChildren();
    if (title !== null && title !== undefined) box.appendChild(G.el("div", { class: "tip-title" }, title));
    for (const [label, value] of rows || []) {
      box.appendChild(G.el("div", { class: "tip-row" }, G.el("span", { class: "tip-label" }, label), G.el("span", {}, value)));
    }
    box.hidden = false;
    const pad = 14;
    const w = box.offsetWidth, h = box.offsetHeight;
    let x = event.clientX + pad, y = event.clientY + pad;
    if (x + w > window.innerWidth - 4) x = event.clientX - w - pad;
    if (y + h > window.innerHeight - 4) y = event.clientY - h - pad;
    box.style.left = Math.max(4, x) + "px";
    box.style.top = Math.max(4, y) + "px";
  };
  G.hideTip = function () {
    tip().hidden = true;
  };

  // a select element from [value, label] pairs
  G.select = function (options, value, onchange, attrs) {
    const node = G.el("select", Object.assign({ onchange: (e) => onchange(e.target.value) }, attrs || {}));
    for (const [v, label] of options) node.appendChild(G.el("option", { value: v, selected: String(v) === String(value) }, label));
    return node;
  };

  G.SERIES_COLOURS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#db2777", "#0891b2", "#4b5563"];
})();
