// Compare: two runs on the same held-out items at each run's last evaluation with samples, side by side,
// matched by task_id (agents) or prompt (single-turn), with each run's accuracy or success and 95 % interval.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});
  const VERDICTS = [["all", "all items"], ["only_a", "only A right"], ["only_b", "only B right"], ["both", "both right"], ["neither", "neither right"], ["unknown", "outcome unknown"]];

  function runCard(run, label, agent) {
    const what = agent ? "success" : "accuracy";
    return G.el("div", { class: "card" },
      G.el("div", { class: "card-label" }, `${label}: ${run.name}`),
      G.el("div", { class: "card-value" }, G.pct(run.accuracy)),
      G.el("div", { class: "card-sub" }, `held-out ${what} (greedy) at step ${run.step}` + (G.isNum(run.ci_low) ? `, 95 % CI ${G.pct(run.ci_low)}–${G.pct(run.ci_high)}` : "") + (G.isNum(run.correct) ? `, ${run.correct}/${run.total}` : "")),
      G.isNum(run["sampled/accuracy"]) ? G.el("div", { class: "card-sub" }, `sampled: ${G.pct(run["sampled/accuracy"])} (${G.pct(run["sampled/ci_low"])}–${G.pct(run["sampled/ci_high"])})`) : null,
      G.el("div", { class: "card-sub mono" }, run.path));
  }

  function answerCell(answer) {
    const mark = answer.outcome === true ? G.badge("✓", "good") : answer.outcome === false ? G.badge("✗", "bad") : G.badge("?", "muted-badge");
    const extra = [];
    if (G.isNum(answer.return)) extra.push(`return ${G.fmt(answer.return)}`);
    if (answer.sampled) extra.push(`sampled ${answer.sampled[0]}/${answer.sampled[1]}`);
    return G.el("td", {}, G.el("div", { class: "cmp-head" }, mark, extra.length ? G.el("span", { class: "muted small" }, extra.join(" · ")) : null), G.textBlock(answer.text, "text small cmp-text"));
  }

  G.renderCompare = function (data) {
    const c = data.compare;
    const section = G.section("compare", "Compare", "The two runs' answers on the same held-out items, at each run's last evaluation that wrote its samples (eval_samples_step*.jsonl); disagreements first.");
    if (c.error) {
      section.appendChild(G.note(c.error, "warn"));
      return section;
    }
    const agent = c.kind === "agent";
    section.appendChild(G.el("div", { class: "cards" }, runCard(c.runs[0], "A", agent), runCard(c.runs[1], "B", agent)));
    const k = c.counts;
    const total = Math.max(1, c.matched);
    const bar = G.el("div", { class: "split-bar", title: "items by which run got them right" },
      [["both", "#059669"], ["only_a", "#2563eb"], ["only_b", "#d97706"], ["neither", "#9ca3af"], ["unknown", "#e5e7eb"]]
        .filter(([v]) => k[v]).map(([v, colour]) => G.el("span", { style: `width:${(100 * k[v]) / total}%;background:${colour}` }, `${VERDICTS.find((x) => x[0] === v)[1]}: ${k[v]}`)));
    section.appendChild(G.el("p", {}, `${c.matched} items matched by ${c.matched_by}` + (c.only_in_a || c.only_in_b ? ` (${c.only_in_a} only in A, ${c.only_in_b} only in B)` : "") + `. On them A got ${c.runs[0].matched_correct} right, B ${c.runs[1].matched_correct}.`));
    section.appendChild(bar);
    const slot = G.el("div", { class: "table-wrap" });
    let verdict = "all";
    const draw = () => {
      const items = c.items.filter((it) => verdict === "all" || it.verdict === verdict);
      const table = G.el("table", { class: "data cmp" }, G.el("thead", {}, G.el("tr", {}, G.el("th", {}, agent ? "task" : "prompt"), G.el("th", {}, "A: " + c.runs[0].name), G.el("th", {}, "B: " + c.runs[1].name))));
      table.appendChild(G.el("tbody", {}, items.slice(0, 300).map((it) => G.el("tr", { class: "v-" + it.verdict },
        G.el("td", { class: "cmp-item" }, agent ? `task ${it.key}` : G.el("pre", { class: "text small cmp-text" }, it.prompt || it.key), it.answer !== undefined && it.answer !== null ? G.el("div", { class: "muted small" }, "reference: ", G.el("code", {}, String(it.answer))) : null),
        answerCell(it.a), answerCell(it.b)))));
      slot.replaceChildren(table, items.length > 300 ? G.note(`${items.length - 300} more items not shown; choose a narrower filter.`) : "", c.items_cut ? G.note(`${c.items_cut} further items were left out of the report (--max-compare-items).`) : "");
    };
    section.appendChild(G.el("div", { class: "controls" }, G.el("label", {}, "show ", G.select(VERDICTS, verdict, (v) => { verdict = v; draw(); }, { "aria-label": "compare filter" }))));
    section.appendChild(slot);
    draw();
    return section;
  };
})();
