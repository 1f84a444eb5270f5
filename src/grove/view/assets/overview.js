// Overview: headline numbers, what the run lacks, the resolved config, training curves, held-out evaluations
// with their 95 % intervals, and where each step's time went.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});

  const PANELS = [
    ["reward (mean per step)", ["reward_mean"]],
    ["training accuracy / episode success", ["accuracy", "success_rate"]],
    ["KL to the reference", ["kl", "kl_in_reward"]],
    ["entropy", ["entropy"]],
    ["completion length (tokens)", ["completion_length_mean", "completion_length_max"]],
    ["clip fraction", ["clip_frac", "clip_low_frac", "clip_high_frac"]],
    ["grad norm", ["grad_norm"]],
    ["loss", ["loss"]],
    ["turns per episode", ["turns_per_episode"]],
    ["invalid actions", ["invalid_action_rate"]],
    ["groups without signal (zero std)", ["zero_std_group_fraction"]],
    ["D^3S selection (kept fraction)", ["selection/kept_tokens_frac", "selection/kept_samples_frac"]],
    ["GiGPO step credit (what the step term had to work with)", ["anchor_steps_in_shared_groups", "advantage/step_nonzero_frac", "advantage/anchor_distinct_actions_frac", "advantage/step_episode_corr"]],
    ["anchor-group sizes (groups per size: 1 = a state met once)", ["anchor_group_size_hist/*"]],
    ["advantage RMS by turn", ["advantage/advantage_rms_turn/*"]],
    ["reward resolution (per group: distinct reward combinations vs distinct advantages)", ["resolution/reward_combinations", "resolution/advantage_values"]],
    ["groups whose distinct reward combinations collapsed", ["resolution/collapsed_group_fraction"]],
    ["learning rate", ["lr"]],
  ];

  // a key ending in "/*" stands for every logged metric under that prefix, in the order the run logged them (the
  // bins of a histogram, the turns of a per-turn metric), so the panel follows whatever bins the library logs
  function panelKeys(data, keys) {
    const logged = Object.keys(data.metrics.series);
    return keys.flatMap((k) => (k.endsWith("/*") ? logged.filter((l) => l.startsWith(k.slice(0, -1))) : [k]));
  }

  G.series = function (data, key) {
    const m = data.metrics;
    return m.series[key] ? { name: key, xs: m.steps, ys: m.series[key] } : null;
  };

  function kindLabel(kind) {
    return { agent: "agent (environment episodes)", single_turn: "single-turn completions", sft: "supervised fine-tuning" }[kind] || kind;
  }

  function headline(data) {
    const cards = G.el("div", { class: "cards" });
    const card = (label, value, sub) => cards.appendChild(G.el("div", { class: "card" }, G.el("div", { class: "card-label" }, label), G.el("div", { class: "card-value" }, value), sub ? G.el("div", { class: "card-sub" }, sub) : null));
    card("run", data.run.name, kindLabel(data.run.kind));
    const steps = data.metrics.steps;
    card("steps logged", String(data.metrics.steps_total), steps.length ? `steps ${steps[0]}–${steps[steps.length - 1]}` : "no metrics.jsonl");
    const evals = data.evals.filter((e) => G.isNum(e.accuracy));
    if (evals.length) {
      const first = evals[0], last = evals[evals.length - 1];
      const what = data.run.kind === "agent" ? "held-out success (greedy)" : "held-out accuracy (greedy)";
      card(what, G.pct(last.accuracy), `step ${last.step}, 95 % CI ${G.pct(last.ci_low)}–${G.pct(last.ci_high)}` + (evals.length > 1 ? `; step ${first.step}: ${G.pct(first.accuracy)}` : ""));
    }
    const loss = data.evals.filter((e) => G.isNum(e.held_out_loss));
    if (loss.length) card("held-out loss", G.fmt(loss[loss.length - 1].held_out_loss), `step ${loss[loss.length - 1].step}` + (loss.length > 1 ? `; step ${loss[0].step}: ${G.fmt(loss[0].held_out_loss)}` : ""));
    const secs = data.metrics.series.step_seconds;
    if (secs) card("median step", G.fmt(G.median(secs)) + " s", "training step, wall clock");
    return cards;
  }

  // what the page says about the absolute paths of the config: cut (--hide-paths), or shown as they are
  function pathsNote(data) {
    if (data.paths_hidden) return G.note("Absolute paths in this config are cut to their last part (…/name): the report was written with grove view --hide-paths.");
    if (!data.config_paths) return null;
    return G.note(`This config holds ${data.config_paths} absolute path(s) of the machine the run was on (the model, output_dir, data files): before sharing this report, write it with grove view --hide-paths to cut them to their last part.`, "warn paths-note");
  }

  function configBlock(data) {
    if (!data.config_text) return G.note("No config.yaml: the resolved config is not in this run directory.", "warn");
    return G.el("div", {}, pathsNote(data), G.el("details", { class: "config" }, G.el("summary", {}, "resolved config (config.yaml)"), G.el("pre", { class: "code" }, data.config_text)));
  }

  function curves(data) {
    const box = G.el("div", {});
    if (!data.metrics.steps.length) {
      box.appendChild(G.note("No training curves: metrics.jsonl is missing or has no records.", "warn"));
      return box;
    }
    const grid = G.el("div", { class: "chart-grid" });
    const used = new Set();
    for (const [title, panel] of PANELS) {
      const keys = panelKeys(data, panel);
      const series = keys.map((k) => G.series(data, k)).filter(Boolean);
      if (!series.length) continue;
      keys.forEach((k) => used.add(k));
      grid.appendChild(G.lineChart({ title, series }));
    }
    const columns = Object.keys(data.metrics.series).filter((k) => /^reward\/.+_mean$/.test(k));
    if (columns.length > 1 || (columns.length === 1 && !data.metrics.series.reward_mean)) {
      grid.appendChild(G.lineChart({ title: "each reward column's mean", series: columns.map((k) => ({ name: k.slice(7, -5), xs: data.metrics.steps, ys: data.metrics.series[k] })) }));
    }
    box.appendChild(grid);
    if (data.metrics.steps.length < data.metrics.steps_total) {
      box.appendChild(G.note(`Curves show ${data.metrics.steps.length} of ${data.metrics.steps_total} steps, spread evenly.`));
    }
    // any other metric, on demand
    const others = Object.keys(data.metrics.series).sort();
    if (others.length) {
      const slot = G.el("div", { class: "chart-grid" });
      const draw = (key) => slot.replaceChildren(G.lineChart({ title: key, series: [G.series(data, key)] }));
      const start = others.find((k) => !used.has(k)) || others[0];
      box.appendChild(G.el("div", { class: "controls" }, G.el("label", {}, "any metric ", G.select(others.map((k) => [k, k]), start, draw, { "aria-label": "metric" }))));
      box.appendChild(slot);
      draw(start);
    }
    return box;
  }

  const CORE_EVAL = ["step", "accuracy", "correct", "total", "ci_low", "ci_high", "final", "seconds"];

  function evalTable(data) {
    const evals = data.evals;
    const agent = data.run.kind === "agent";
    const sampled = evals.some((e) => G.isNum(e["sampled/accuracy"]));
    const passAt = [...new Set(evals.flatMap((e) => Object.keys(e).filter((k) => /^sampled\/pass@\d+$/.test(k))))];
    const extra = ["held_out_loss", "mean_turns", "mean_return", "invalid_action_rate", "mean_completion_tokens"].filter((k) => evals.some((e) => G.isNum(e[k])));
    const objectives = (data.objectives || []).filter((o) => evals.some((e) => G.isNum(e["objective/" + o])));
    const head = ["step", agent ? "success (greedy)" : "accuracy (greedy)", "correct / n", "95 % CI"];
    if (sampled) head.push("sampled", "sampled 95 % CI", ...passAt.map((k) => k.slice(8)));
    head.push(...extra, ...objectives.map((o) => "objective: " + o));
    const table = G.el("table", { class: "data" }, G.el("thead", {}, G.el("tr", {}, head.map((h) => G.el("th", {}, h)))));
    const body = G.el("tbody", {});
    for (const e of evals) {
      const cells = [e.step + (e.final ? " (final)" : ""), G.pct(e.accuracy), G.isNum(e.correct) ? `${e.correct} / ${e.total}` : "–", G.isNum(e.ci_low) ? `${G.pct(e.ci_low)} – ${G.pct(e.ci_high)}` : "–"];
      if (sampled) cells.push(G.pct(e["sampled/accuracy"]), G.isNum(e["sampled/ci_low"]) ? `${G.pct(e["sampled/ci_low"])} – ${G.pct(e["sampled/ci_high"])}` : "–", ...passAt.map((k) => G.pct(e[k])));
      cells.push(...extra.map((k) => G.fmt(e[k])), ...objectives.map((o) => G.fmt(e["objective/" + o])));
      body.appendChild(G.el("tr", {}, cells.map((c) => G.el("td", {}, c))));
    }
    table.appendChild(body);
    return G.el("div", { class: "table-wrap" }, table);
  }

  function allEvalMetrics(data) {
    const keys = [...new Set(data.evals.flatMap((e) => Object.keys(e)))].filter((k) => !CORE_EVAL.includes(k) && data.evals.some((e) => G.isNum(e[k])));
    if (!keys.length) return null;
    const table = G.el("table", { class: "data compact" }, G.el("thead", {}, G.el("tr", {}, G.el("th", {}, "metric"), data.evals.map((e) => G.el("th", {}, "step " + e.step)))));
    const body = G.el("tbody", {});
    for (const k of keys) body.appendChild(G.el("tr", {}, G.el("td", { class: "mono" }, k), data.evals.map((e) => G.el("td", {}, G.fmt(e[k])))));
    table.appendChild(body);
    return G.el("details", {}, G.el("summary", {}, `every evaluation metric (${keys.length})`), G.el("div", { class: "table-wrap" }, table));
  }

  function evaluations(data) {
    const box = G.el("div", {});
    if (!data.evals.length) {
      box.appendChild(G.note("No held-out evaluations: eval.jsonl is missing or empty.", "warn"));
      return box;
    }
    const agent = data.run.kind === "agent";
    const withAcc = data.evals.filter((e) => G.isNum(e.accuracy));
    const intervals = [];
    if (withAcc.length) intervals.push({ name: agent ? "greedy success" : "greedy accuracy", items: withAcc.map((e) => ({ x: e.step, y: e.accuracy, lo: e.ci_low, hi: e.ci_high })) });
    const sampled = data.evals.filter((e) => G.isNum(e["sampled/accuracy"]));
    if (sampled.length) {
      const k = sampled[sampled.length - 1]["sampled/samples_per_item"];
      intervals.push({ name: `sampled (${G.fmt(k)} per item)`, items: sampled.map((e) => ({ x: e.step, y: e["sampled/accuracy"], lo: e["sampled/ci_low"], hi: e["sampled/ci_high"] })) });
    }
    const grid = G.el("div", { class: "chart-grid" });
    if (intervals.length) {
      const n = withAcc.length ? withAcc[withAcc.length - 1].total : null;
      grid.appendChild(G.lineChart({ title: `held-out ${agent ? "success" : "accuracy"} with 95 % intervals` + (n ? ` (n = ${n})` : ""), intervals, yFormat: G.pct, yMin: 0 }));
    }
    const loss = data.evals.filter((e) => G.isNum(e.held_out_loss));
    if (loss.length) grid.appendChild(G.lineChart({ title: "held-out loss", series: [{ name: "held_out_loss", xs: loss.map((e) => e.step), ys: loss.map((e) => e.held_out_loss) }] }));
    box.appendChild(grid);
    box.appendChild(evalTable(data));
    const more = allEvalMetrics(data);
    if (more) box.appendChild(more);
    return box;
  }

  function timing(data) {
    const s = data.metrics.series;
    const keys = ["rollout_seconds", "train_seconds", "step_seconds"].filter((k) => s[k]);
    if (!keys.length) return G.note("No timing: metrics.jsonl has no rollout_seconds, train_seconds or step_seconds.");
    const box = G.el("div", { class: "timing" });
    box.appendChild(G.el("div", { class: "chart-grid" }, G.lineChart({ title: "seconds per step, by phase", series: keys.map((k) => ({ name: k.replace("_seconds", ""), xs: data.metrics.steps, ys: s[k] })), yMin: 0 })));
    const rows = keys.map((k) => [k.replace("_seconds", ""), G.median(s[k]), G.mean(s[k])]);
    const total = G.median(s.step_seconds || []);
    const table = G.el("table", { class: "data narrow" }, G.el("thead", {}, G.el("tr", {}, ["phase", "median s", "mean s", "share of the median step"].map((h) => G.el("th", {}, h)))));
    table.appendChild(G.el("tbody", {}, rows.map(([name, med, mean]) => G.el("tr", {}, G.el("td", {}, name), G.el("td", {}, G.fmt(med)), G.el("td", {}, G.fmt(mean)), G.el("td", {}, total && name !== "step" ? G.pct(med / total) : "–")))));
    box.appendChild(G.el("div", { class: "table-wrap" }, table));
    return box;
  }

  G.renderOverview = function (data) {
    const section = G.section("overview", "Overview");
    section.appendChild(headline(data));
    if (data.missing.length) {
      section.appendChild(G.el("div", { class: "note warn" }, "This run directory lacks: ", G.el("ul", {}, data.missing.map((m) => G.el("li", {}, m)))));
    }
    section.appendChild(configBlock(data));
    section.appendChild(G.el("h3", {}, "Training curves"));
    section.appendChild(curves(data));
    section.appendChild(G.el("h3", { id: "evaluations" }, "Held-out evaluations"));
    section.appendChild(evaluations(data));
    section.appendChild(G.el("h3", {}, "Time per step"));
    section.appendChild(timing(data));
    return section;
  };
})();
