// Line charts as inline SVG: raw values faint with a moving average over them when a series is long, optional
// points with 95 % interval bars (held-out evaluations), a legend, and a hover read-out of the nearest step.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});
  const NS = "http://www.w3.org/2000/svg";
  const W = 440, H = 200, M = { left: 56, right: 12, top: 10, bottom: 28 };

  function svg(tag, attrs) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }

  // about n round tick values covering [lo, hi]
  G.niceTicks = function (lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, n);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const ticks = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    return ticks;
  };

  function movingAverage(ys, window) {
    const out = [];
    let sum = 0, count = 0;
    const buf = [];
    for (const y of ys) {
      buf.push(y);
      if (G.isNum(y)) { sum += y; count++; }
      if (buf.length > window) {
        const old = buf.shift();
        if (G.isNum(old)) { sum -= old; count--; }
      }
      out.push(G.isNum(y) && count ? sum / count : null);  // over the window's finite values
    }
    return out;
  }

  // a polyline through the finite points (a step without a value is passed over, not a gap)
  function pathOf(xs, ys, sx, sy) {
    let d = "", pen = false;
    for (let i = 0; i < xs.length; i++) {
      if (!G.isNum(ys[i]) || !G.isNum(xs[i])) continue;
      d += (pen ? "L" : "M") + sx(xs[i]).toFixed(1) + "," + sy(ys[i]).toFixed(1);
      pen = true;
    }
    return d;
  }

  // a tick label: short (1e-18 rather than 1.00e-18)
  G.fmtTick = function (x) {
    const a = Math.abs(x);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(1).replace(".0e", "e");
    return G.fmt(x);
  };

  // opts: {title, series: [{name, xs, ys, colour, dashed}], intervals: [{name, colour, items: [{x, y, lo, hi}]}],
  //        yFormat, yMin, yMax, xLabel, note}
  G.lineChart = function (opts) {
    const series = (opts.series || []).filter((s) => s.ys.some(G.isNum));
    const intervals = (opts.intervals || []).filter((s) => s.items.length);
    const fmtY = opts.yFormat || G.fmt;
    const figure = G.el("figure", { class: "chart" }, G.el("figcaption", {}, opts.title));
    if (!series.length && !intervals.length) {
      figure.appendChild(G.note("not logged"));
      return figure;
    }
    const xsAll = [], ysAll = [];
    for (const s of series) s.xs.forEach((x, i) => { if (G.isNum(s.ys[i])) { xsAll.push(x); ysAll.push(s.ys[i]); } });
    for (const s of intervals) for (const p of s.items) { xsAll.push(p.x); ysAll.push(p.y, p.lo, p.hi); }
    let [x0, x1] = G.extent(xsAll);
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (intervals.length) { const pad = (x1 - x0) * 0.04; x0 -= pad; x1 += pad; }  // interval bars off the axes
    let [y0, y1] = G.extent(ysAll);
    if (G.isNum(opts.yMin)) y0 = Math.min(opts.yMin, y0);
    if (G.isNum(opts.yMax)) y1 = Math.max(opts.yMax, y1);
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const padY = (y1 - y0) * 0.06;
    if (!G.isNum(opts.yMin)) y0 -= padY;
    if (!G.isNum(opts.yMax)) y1 += padY;
    const sx = (x) => M.left + ((x - x0) / (x1 - x0)) * (W - M.left - M.right);
    const sy = (y) => H - M.bottom - ((y - y0) / (y1 - y0)) * (H - M.top - M.bottom);

    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img", "aria-label": opts.title });
    for (const t of G.niceTicks(y0, y1, 4)) {
      root.appendChild(svg("line", { x1: M.left, x2: W - M.right, y1: sy(t), y2: sy(t), class: "grid" }));
      const label = svg("text", { x: M.left - 6, y: sy(t) + 4, class: "tick", "text-anchor": "end" });
      label.textContent = (opts.yFormat || G.fmtTick)(t);
      root.appendChild(label);
    }
    let xTicks = G.niceTicks(x0, x1, 6).filter(Number.isInteger);  // steps are whole numbers
    if (xTicks.length < 2) xTicks = [...new Set(xsAll)].sort((a, b) => a - b);
    for (const t of xTicks) {
      const label = svg("text", { x: sx(t), y: H - M.bottom + 16, class: "tick", "text-anchor": "middle" });
      label.textContent = G.fmt(t);
      root.appendChild(label);
    }
    root.appendChild(svg("line", { x1: M.left, x2: W - M.right, y1: H - M.bottom, y2: H - M.bottom, class: "axis" }));
    const xLabel = svg("text", { x: W - M.right, y: H - 3, class: "axis-label", "text-anchor": "end" });
    xLabel.textContent = opts.xLabel || "step";
    root.appendChild(xLabel);

    series.forEach((s, i) => {
      const colour = s.colour || G.SERIES_COLOURS[i % G.SERIES_COLOURS.length];
      s.colour = colour;
      const n = s.ys.filter(G.isNum).length;
      const dash = s.dashed ? "5 4" : null;
      if (n > 25) {
        root.appendChild(svg("path", { d: pathOf(s.xs, s.ys, sx, sy), class: "line raw", stroke: colour }));
        const window = Math.max(3, Math.round(n / 25));
        const smooth = svg("path", { d: pathOf(s.xs, movingAverage(s.ys, window), sx, sy), class: "line", stroke: colour });
        if (dash) smooth.setAttribute("stroke-dasharray", dash);
        root.appendChild(smooth);
      } else {
        const line = svg("path", { d: pathOf(s.xs, s.ys, sx, sy), class: "line", stroke: colour });
        if (dash) line.setAttribute("stroke-dasharray", dash);
        root.appendChild(line);
        s.xs.forEach((x, k) => { if (G.isNum(s.ys[k])) root.appendChild(svg("circle", { cx: sx(x), cy: sy(s.ys[k]), r: 2.6, fill: colour })); });
      }
    });
    intervals.forEach((s, i) => {
      const colour = s.colour || G.SERIES_COLOURS[(series.length + i) % G.SERIES_COLOURS.length];
      s.colour = colour;
      const shift = intervals.length > 1 ? (i - (intervals.length - 1) / 2) * 5 : 0;
      root.appendChild(svg("path", { d: pathOf(s.items.map((p) => p.x), s.items.map((p) => p.y), (x) => sx(x) + shift, sy), class: "line thin", stroke: colour }));
      for (const p of s.items) {
        const x = sx(p.x) + shift;
        if (G.isNum(p.lo) && G.isNum(p.hi)) {
          root.appendChild(svg("line", { x1: x, x2: x, y1: sy(p.lo), y2: sy(p.hi), stroke: colour, class: "errbar" }));
          for (const v of [p.lo, p.hi]) root.appendChild(svg("line", { x1: x - 4, x2: x + 4, y1: sy(v), y2: sy(v), stroke: colour, class: "errbar" }));
        }
        root.appendChild(svg("circle", { cx: x, cy: sy(p.y), r: 3.8, fill: colour }));
      }
    });

    // hover: the nearest step's values
    const guide = svg("line", { y1: M.top, y2: H - M.bottom, class: "guide", visibility: "hidden" });
    root.appendChild(guide);
    const overlay = svg("rect", { x: M.left, y: M.top, width: W - M.left - M.right, height: H - M.top - M.bottom, class: "overlay" });
    root.appendChild(overlay);
    const stepsSeen = [...new Set(xsAll)].sort((a, b) => a - b);
    overlay.addEventListener("mousemove", (event) => {
      const box = root.getBoundingClientRect();
      const x = x0 + ((event.clientX - box.left) * (W / box.width) - M.left) / (W - M.left - M.right) * (x1 - x0);
      let best = stepsSeen[0];
      for (const s of stepsSeen) if (Math.abs(s - x) < Math.abs(best - x)) best = s;
      guide.setAttribute("x1", sx(best));
      guide.setAttribute("x2", sx(best));
      guide.setAttribute("visibility", "visible");
      const rows = [];
      for (const s of series) {
        const k = s.xs.indexOf(best);
        if (k >= 0 && G.isNum(s.ys[k])) rows.push([s.name, fmtY(s.ys[k])]);
      }
      for (const s of intervals) {
        const p = s.items.find((q) => q.x === best);
        if (p) rows.push([s.name, fmtY(p.y) + (G.isNum(p.lo) ? ` (${fmtY(p.lo)}–${fmtY(p.hi)})` : "")]);
      }
      G.showTip(event, (opts.xLabel || "step") + " " + best, rows);
    });
    overlay.addEventListener("mouseleave", () => { guide.setAttribute("visibility", "hidden"); G.hideTip(); });
    figure.appendChild(root);

    const legend = G.el("div", { class: "legend" });
    for (const s of [...series, ...intervals]) {
      legend.appendChild(G.el("span", { class: "key" }, G.el("i", { style: `background:${s.colour}` }), s.name));
    }
    if (series.some((s) => s.ys.filter(G.isNum).length > 25)) legend.appendChild(G.el("span", { class: "key muted" }, "faint: per step; bold: moving average"));
    if (series.length + intervals.length > 1 || series.some((s) => s.ys.length > 25)) figure.appendChild(legend);
    if (opts.note) figure.appendChild(G.el("p", { class: "chart-note" }, opts.note));
    return figure;
  };
})();
