// The sample browser: training samples per step or held-out samples per evaluation, loaded page by page;
// filters (outcome, a reward's range, length), a list or a group view (the G completions of one prompt side by
// side), and token colouring when token details exist. Agent runs show trajectories (trajectories.js).
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});
  const PER_SCREEN = { list: 20, groups: 6 };

  const outcomeOf = (item) => (item.trajectory !== undefined ? item.won : item.correct);
  const detailsOf = (item) => (Array.isArray(item.details) ? item.details : item.details ? [item.details] : []);
  G.detailsOf = detailsOf;

  function rewardColumns(items, agent) {
    const names = new Set(agent ? ["return"] : []);
    for (const it of items) for (const k of Object.keys(it.rewards || {})) names.add(k);
    if (items.some((it) => detailsOf(it).some((d) => G.isNum(d.sequence_advantage)))) names.add("sequence advantage");
    return [...names];
  }

  G.rewardValue = function (item, column) {
    if (column === "return") return item.return;
    if (column === "sequence advantage") {
      const values = detailsOf(item).map((d) => d.sequence_advantage).filter(G.isNum);
      return values.length ? values[0] : null;
    }
    return item.rewards ? item.rewards[column] : null;
  };

  function lengthOf(item, agent) {
    if (agent) return G.isNum(item.turns) ? item.turns : (item.trajectory || []).length;
    const d = detailsOf(item)[0];
    return d ? d.tokens.length : (item.completion || "").length;
  }

  function rewardChips(item) {
    const chips = G.el("span", { class: "chips" });
    for (const [name, value] of Object.entries(item.rewards || {})) chips.appendChild(G.el("span", { class: "chip" }, G.el("span", { class: "chip-name" }, name), " ", G.fmt(value)));
    const adv = G.rewardValue(item, "sequence advantage");
    if (G.isNum(adv)) chips.appendChild(G.el("span", { class: "chip adv " + (adv > 0 ? "pos" : adv < 0 ? "neg" : "") }, G.el("span", { class: "chip-name" }, "advantage"), " ", (adv > 0 ? "+" : "") + G.fmt(adv)));
    return chips;
  }

  function outcomeBadge(item) {
    const o = outcomeOf(item);
    if (o === true) return G.badge(item.trajectory !== undefined ? "won" : "correct", "good");
    if (o === false) return G.badge(item.trajectory !== undefined ? "lost" : "wrong", "bad");
    return null;
  }
  G.outcomeBadge = outcomeBadge;

  function completionBody(item, ctx) {
    const d = detailsOf(item)[0];
    if (d) return G.tokenStrip(d, ctx.mode, ctx.scale);
    return G.textBlock(item.completion, "text");
  }

  function promptBlock(prompt, open) {
    const first = (prompt || "").split("\n")[0];
    return G.el("details", { class: "prompt", open: open || null }, G.el("summary", {}, G.el("span", { class: "label" }, "prompt "), first.length > 110 ? first.slice(0, 110) + "…" : first), G.el("pre", { class: "text" }, prompt || ""));
  }

  function sampleCard(item, ctx) {
    const d = detailsOf(item)[0];
    const meta = [
      G.el("span", { class: "sample-id" }, item.row !== undefined ? `row ${item.row}` : `#${item.index}`),
      item.group !== undefined && item.group !== null ? G.el("span", { class: "muted" }, `group ${item.group}`) : null,
      outcomeBadge(item),
      item.finish_reason ? G.el("span", { class: "muted" }, `finish: ${item.finish_reason}`) : null,
      G.el("span", { class: "muted" }, d ? `${d.tokens.length} tokens` : `${(item.completion || "").length} chars`),
      rewardChips(item),
    ];
    return G.el(
      "article", { class: "sample" },
      G.el("header", {}, meta),
      promptBlock(item.prompt),
      G.el("div", { class: "completion" }, completionBody(item, ctx)),
      item.answer !== undefined ? G.el("div", { class: "answer" }, G.el("span", { class: "label" }, "reference answer "), G.el("code", {}, String(item.answer))) : null,
    );
  }

  function groupKey(item) {
    return item.group !== undefined && item.group !== null ? "g" + item.group : "p" + item.prompt;
  }

  function groupCard(items, ctx) {
    const rewards = items.map((it) => Object.values(it.rewards || {}).reduce((a, b) => a + (G.isNum(b) ? b : 0), 0));
    const [low, high] = G.extent(rewards);
    const spread = high - low;
    const cols = items.map((item) => G.el(
      "div", { class: "group-member" },
      G.el("header", {}, G.el("span", { class: "sample-id" }, item.row !== undefined ? `row ${item.row}` : `#${item.index}`), outcomeBadge(item), rewardChips(item)),
      G.el("div", { class: "completion" }, completionBody(item, ctx)),
    ));
    const g = items[0].group;
    return G.el(
      "article", { class: "sample group" },
      G.el("header", {}, G.el("span", { class: "sample-id" }, g !== undefined && g !== null ? `group ${g}` : "prompt"), G.el("span", { class: "muted" }, `${items.length} completions`), spread === 0 && items.length > 1 ? G.badge("no signal: equal rewards", "muted-badge", "every completion of this group has the same total reward, so its group-relative advantage is zero") : null),
      promptBlock(items[0].prompt, false),
      G.el("div", { class: "group-grid" }, cols),
    );
  }

  function rangeInput(placeholder, value, onchange) {
    return G.el("input", { type: "number", step: "any", placeholder, value: value === null ? null : value, class: "num", "aria-label": placeholder, oninput: (e) => onchange(e.target.value === "" ? null : Number(e.target.value)) });
  }

  G.renderSampleBrowser = function (data, options) {
    const agent = options.agent;
    const section = G.section(options.id, options.title, options.intro);
    const manifests = data.samples;
    const sources = [["train", "training samples"], ["eval", "held-out samples"]].filter(([k]) => manifests[k] && manifests[k].keys.length);
    if (!sources.length) {
      section.appendChild(G.note(data.run.kind === "sft" ? "A supervised fine-tuning run writes no training samples (samples.jsonl) and this one has no held-out samples (eval_samples_step*.jsonl)." : data.run.kind === "reward_model" ? "A reward-model run writes no samples: its held-out agreement is in eval.jsonl." : "No samples: samples.jsonl and eval_samples_step*.jsonl are missing or empty.", "warn"));
      return section;
    }
    const state = { source: sources[0][0], keyIndex: 0, items: [], outcome: "all", column: null, rmin: null, rmax: null, lmin: null, lmax: null, view: agent ? "groups" : "list", mode: "plain", page: 0 };
    const controls = G.el("div", { class: "controls" });
    const filters = G.el("div", { class: "controls filters" });
    const legendSlot = G.el("div", { class: "legend-slot" });
    const status = G.el("div", { class: "status muted" });
    const list = G.el("div", { class: "sample-list" });
    const pager = G.el("div", { class: "pager" });
    section.append(controls, filters, legendSlot, status, list, pager);
    const manifest = () => manifests[state.source];

    function drawControls() {
      controls.replaceChildren();
      const keys = manifest().keys;
      const stepSelect = G.select(keys.map((k, i) => [i, `${k.title} (${k.count})`]), state.keyIndex, (v) => load(+v), { "aria-label": "step", class: "step-select" });
      G.append(controls, [
        sources.length > 1 ? G.el("label", {}, "samples ", G.select(sources, state.source, (v) => { state.source = v; state.keyIndex = 0; drawControls(); load(0); }, { "aria-label": "sample source" })) : G.el("span", { class: "muted" }, sources[0][1]),
        G.el("span", { class: "step-nav" },
          G.el("button", { type: "button", title: "previous", onclick: () => state.keyIndex > 0 && load(state.keyIndex - 1) }, "‹"),
          stepSelect,
          G.el("button", { type: "button", title: "next", onclick: () => state.keyIndex < keys.length - 1 && load(state.keyIndex + 1) }, "›")),
        manifest().keys_total > keys.length ? G.el("span", { class: "muted" }, `${keys.length} of ${manifest().keys_total} ${state.source === "train" ? "steps" : "evaluations"} kept (spread evenly)`) : null,
      ]);
    }

    function drawFilters() {
      const items = state.items;
      const columns = rewardColumns(items, agent);
      if (!columns.includes(state.column)) state.column = columns[0] || null;
      const hasOutcome = items.some((it) => outcomeOf(it) !== undefined && outcomeOf(it) !== null);
      const labels = agent ? [["all", "all"], ["correct", "won"], ["wrong", "lost"]] : [["all", "all"], ["correct", "correct"], ["wrong", "wrong"]];
      const lengthUnit = agent ? "turns" : items.some((it) => detailsOf(it).length) ? "tokens" : "characters";
      const parts = [];
      if (hasOutcome) parts.push(G.el("label", {}, "outcome ", G.select(labels, state.outcome, (v) => { state.outcome = v; state.page = 0; drawList(); }, { "aria-label": "outcome" })));
      if (columns.length) {
        parts.push(G.el("label", {}, columns.length > 1 ? G.select(columns.map((c) => [c, c]), state.column, (v) => { state.column = v; state.page = 0; drawList(); }, { "aria-label": "reward column" }) : columns[0] + " ",
          " from ", rangeInput("min", state.rmin, (v) => { state.rmin = v; state.page = 0; drawList(); }), " to ", rangeInput("max", state.rmax, (v) => { state.rmax = v; state.page = 0; drawList(); })));
      }
      parts.push(G.el("label", {}, `length (${lengthUnit}) from `, rangeInput("min", state.lmin, (v) => { state.lmin = v; state.page = 0; drawList(); }), " to ", rangeInput("max", state.lmax, (v) => { state.lmax = v; state.page = 0; drawList(); })));
      if (!agent && new Set(items.map(groupKey)).size < items.length) {
        parts.push(G.el("label", {}, "view ", G.select([["list", "one by one"], ["groups", "groups side by side"]], state.view, (v) => { state.view = v; state.page = 0; drawList(); }, { "aria-label": "view" })));
      } else if (!agent) {
        state.view = "list";
      }
      const modes = G.tokenModes(items.flatMap(detailsOf));
      if (!modes.some(([mode]) => mode === state.mode)) state.mode = "plain";  // this step lacks that series
      if (modes.length > 1) {
        parts.push(G.el("label", {}, "colour tokens by ", G.select(modes, state.mode, (v) => { state.mode = v; drawList(); }, { "aria-label": "colour tokens by", class: "colour-select" })));
      } else {
        state.mode = "plain";
      }
      filters.replaceChildren(...parts);
    }

    function passes(item) {
      const o = outcomeOf(item);
      if (state.outcome === "correct" && o !== true) return false;
      if (state.outcome === "wrong" && o !== false) return false;
      if (state.column && (state.rmin !== null || state.rmax !== null)) {
        const v = G.rewardValue(item, state.column);
        if (!G.isNum(v) || (state.rmin !== null && v < state.rmin) || (state.rmax !== null && v > state.rmax)) return false;
      }
      const n = lengthOf(item, agent);
      if ((state.lmin !== null && n < state.lmin) || (state.lmax !== null && n > state.lmax)) return false;
      return true;
    }

    function drawList() {
      const shown = state.items.filter(passes);
      const grouped = state.view === "groups";
      let units = shown.map((it) => [it]);
      if (grouped) {
        const byGroup = new Map();
        for (const it of shown) {
          const k = groupKey(it);
          if (!byGroup.has(k)) byGroup.set(k, []);
          byGroup.get(k).push(it);
        }
        units = [...byGroup.values()];
      }
      const per = PER_SCREEN[grouped ? "groups" : "list"];
      const pages = Math.max(1, Math.ceil(units.length / per));
      state.page = Math.min(state.page, pages - 1);
      const visible = units.slice(state.page * per, (state.page + 1) * per);
      const ctx = { mode: state.mode };
      ctx.scale = G.tokenScale(state.mode, visible.flat().flatMap(detailsOf));
      legendSlot.replaceChildren(state.mode !== "plain" || G.tokenModes(state.items.flatMap(detailsOf)).length > 1 ? ctx.scale.legend : "");
      const what = agent ? (grouped ? "groups" : "trajectories") : grouped ? "groups" : "samples";
      status.textContent = units.length
        ? `${what} ${state.page * per + 1}–${state.page * per + visible.length} of ${units.length}` + (shown.length < state.items.length ? ` (${shown.length} of ${state.items.length} samples pass the filters)` : "")
        : `no sample passes the filters (${state.items.length} at this step)`;
      if (agent) list.replaceChildren(...visible.map((unit) => G.trajectoryGroup(unit, ctx)));
      else list.replaceChildren(...visible.map((unit) => (grouped ? groupCard(unit, ctx) : sampleCard(unit[0], ctx))));
      pager.replaceChildren();
      if (pages > 1) {
        pager.append(
          G.el("button", { type: "button", disabled: state.page === 0 || null, onclick: () => { state.page--; drawList(); } }, "‹ previous"),
          G.el("span", { class: "muted" }, ` page ${state.page + 1} of ${pages} `),
          G.el("button", { type: "button", disabled: state.page >= pages - 1 || null, onclick: () => { state.page++; drawList(); } }, "next ›"),
        );
      }
    }

    async function load(index) {
      state.keyIndex = index;
      state.page = 0;
      drawControls();
      const entry = manifest().keys[index];
      status.textContent = `loading ${entry.title}…`;
      list.replaceChildren();
      try {
        state.items = await G.loadEntry(entry);
      } catch (error) {
        status.textContent = String(error);
        console.error(error);
        return;
      }
      drawFilters();
      drawList();
    }

    drawControls();
    section.ready = load(0);
    return section;
  };
})();
