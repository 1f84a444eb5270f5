// Several objectives: each objective's training and held-out mean, its share of the advantage per step (from
// metrics.jsonl: objective/<name>/advantage_share), and each training sample's value of every objective.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});

  function summaryTable(data) {
    const s = data.metrics.series;
    const evals = data.evals;
    const head = ["objective", "training mean (last step)", "held-out mean (first → last)", "median advantage share", "groups with signal (median)"];
    const rows = data.objectives.map((name) => {
      const train = s[`reward/${name}_mean`] || [];
      const lastTrain = [...train].reverse().find(G.isNum);
      const held = evals.filter((e) => G.isNum(e["objective/" + name]));
      const heldText = held.length ? (held.length > 1 ? `${G.fmt(held[0]["objective/" + name])} → ${G.fmt(held[held.length - 1]["objective/" + name])}` : G.fmt(held[0]["objective/" + name])) : "–";
      const share = G.median(s[`objective/${name}/advantage_share`] || []);
      const signal = G.median(s[`objective/${name}/signal_group_fraction`] || []);
      return [name, G.fmt(lastTrain), heldText, G.isNum(share) ? G.pct(share) : "–", G.isNum(signal) ? G.pct(signal) : "–"];
    });
    const table = G.el("table", { class: "data narrow" }, G.el("thead", {}, G.el("tr", {}, head.map((h) => G.el("th", {}, h)))));
    table.appendChild(G.el("tbody", {}, rows.map((r) => G.el("tr", {}, r.map((c, i) => G.el("td", { class: i === 0 ? "mono" : null }, c))))));
    return G.el("div", { class: "table-wrap" }, table);
  }

  function charts(data) {
    const grid = G.el("div", { class: "chart-grid" });
    const s = data.metrics.series;
    const shares = data.objectives.filter((n) => s[`objective/${n}/advantage_share`]);
    if (shares.length) {
      grid.appendChild(G.lineChart({ title: "share of the advantage per objective", series: shares.map((n) => ({ name: n, xs: data.metrics.steps, ys: s[`objective/${n}/advantage_share`] })), yFormat: G.pct }));
    }
    for (const name of data.objectives) {
      const series = [];
      if (s[`reward/${name}_mean`]) series.push({ name: "training mean", xs: data.metrics.steps, ys: s[`reward/${name}_mean`] });
      const held = data.evals.filter((e) => G.isNum(e["objective/" + name]));
      const intervals = held.length ? [{ name: "held-out mean", colour: "#111827", items: held.map((e) => ({ x: e.step, y: e["objective/" + name] })) }] : [];
      if (series.length || intervals.length) grid.appendChild(G.lineChart({ title: `objective: ${name}`, series, intervals }));
    }
    return grid;
  }

  function heat(value, lo, hi) {
    if (!G.isNum(value) || !(hi > lo)) return null;
    const t = (value - lo) / (hi - lo);
    return `rgba(5,150,105,${(0.08 + 0.5 * t).toFixed(3)})`;
  }

  function perSample(data) {
    const box = G.el("div", {});
    const manifest = data.samples.train;
    if (!manifest || !manifest.keys.length) {
      box.appendChild(G.note("No training samples (samples.jsonl) to show the objectives of each sample."));
      return box;
    }
    const slot = G.el("div", { class: "table-wrap" });
    async function show(index) {
      const items = await G.loadEntry(manifest.keys[index]);
      const names = data.objectives.filter((n) => items.some((it) => it.rewards && n in it.rewards));
      const extra = [...new Set(items.flatMap((it) => Object.keys(it.rewards || {})))].filter((n) => !names.includes(n));
      const columns = [...names, ...extra];
      const hasAdv = items.some((it) => G.isNum(G.rewardValue(it, "sequence advantage")));
      const ranges = columns.map((c) => {
        const v = items.map((it) => (it.rewards || {})[c]).filter(G.isNum);
        return G.extent(v);
      });
      const table = G.el("table", { class: "data compact" }, G.el("thead", {}, G.el("tr", {}, G.el("th", {}, "sample"), G.el("th", {}, "group"), columns.map((c) => G.el("th", {}, c)), hasAdv ? G.el("th", {}, "advantage") : null, G.el("th", {}, "completion"))));
      const body = G.el("tbody", {});
      for (const it of items) {
        const text = it.completion !== undefined ? it.completion : (it.trajectory || []).map((t) => t.action).join(" → ");
        const adv = G.rewardValue(it, "sequence advantage");
        body.appendChild(G.el("tr", {},
          G.el("td", {}, it.row !== undefined ? `row ${it.row}` : `#${it.index}`),
          G.el("td", {}, it.group === undefined || it.group === null ? "–" : String(it.group)),
          columns.map((c, i) => G.el("td", { class: "num-cell", style: heat((it.rewards || {})[c], ranges[i][0], ranges[i][1]) ? `background:${heat((it.rewards || {})[c], ranges[i][0], ranges[i][1])}` : null }, G.fmt((it.rewards || {})[c]))),
          hasAdv ? G.el("td", { class: "num-cell " + (adv > 0 ? "pos" : adv < 0 ? "neg" : "") }, G.fmt(adv)) : null,
          G.el("td", { class: "clip", title: text }, text.length > 90 ? text.slice(0, 90) + "…" : text)));
      }
      table.appendChild(body);
      slot.replaceChildren(table);
    }
    box.appendChild(G.el("div", { class: "controls" }, G.el("label", {}, "training step ", G.select(manifest.keys.map((k, i) => [i, `${k.title} (${k.count})`]), 0, (v) => show(+v), { "aria-label": "objective step" }))));
    box.appendChild(slot);
    box.ready = show(0);
    return box;
  }

  G.renderObjectives = function (data) {
    const section = G.section("objectives", "Several objectives", "Each objective's mean in training and on held-out items, how much of the advantage it drives (objective/<name>/advantage_share in metrics.jsonl: the shares sum to 1; near 1, that objective drives the update; near 0, it is ignored), and its value on each training sample (greener: higher within the step).");
    section.appendChild(summaryTable(data));
    section.appendChild(charts(data));
    section.appendChild(G.el("h3", {}, "Per sample"));
    const table = perSample(data);
    section.appendChild(table);
    section.ready = table.ready;
    return section;
  };
})();
