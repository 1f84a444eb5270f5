// Agent trajectories: a group's episodes, each a line that expands on click into its turns — observation, the
// model's raw text, the parsed action (invalid ones marked), reward — with anchor keys (the same key on several
// steps of the group is one anchor state; hovering a key highlights them all) and, with token details, each
// turn's tokens and advantages; environment tokens inside a conversation are shown as not trained on.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});
  const ANCHOR_COLOURS = ["#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc", "#e9d5ff"];

  const anchorKey = (a) => (a === null || a === undefined ? null : typeof a === "string" ? a : JSON.stringify(a));

  function anchorTable(items) {
    const counts = new Map();
    for (const item of items) for (const turn of item.trajectory || []) {
      const k = anchorKey(turn.anchor);
      if (k !== null) counts.set(k, (counts.get(k) || 0) + 1);
    }
    const colours = new Map();
    for (const [k, n] of counts) if (n > 1) colours.set(k, ANCHOR_COLOURS[colours.size % ANCHOR_COLOURS.length]);
    return { counts, colours };
  }

  function anchorChip(key, anchors) {
    if (key === null) return null;
    const n = anchors.counts.get(key) || 1;
    const colour = anchors.colours.get(key);
    const label = key.length > 28 ? key.slice(0, 27) + "…" : key;
    return G.el("span", { class: "anchor" + (n > 1 ? " shared" : ""), "data-anchor": key, style: colour ? `background:${colour}` : null, title: `anchor state ${key}: ${n} step${n > 1 ? "s" : ""} of this group ${n > 1 ? "share it (their step advantages are computed together)" : "have it"}` }, "anchor ", G.el("code", {}, label), n > 1 ? ` ×${n}` : "");
  }

  function detailBlock(d, ctx, title) {
    const mean = G.trainedMean(d, "advantage");
    const trained = d.loss_mask ? d.loss_mask.filter((v) => v === 1).length : d.tokens.length;
    return G.el(
      "div", { class: "turn-tokens" },
      G.el("div", { class: "muted small" }, title, ` · ${d.tokens.length} tokens, ${trained} trained on`,
        G.isNum(mean) ? ` · mean advantage of trained tokens ${mean > 0 ? "+" : ""}${G.fmt(mean)}` : "",
        G.isNum(d.sequence_advantage) ? ` · sequence advantage ${d.sequence_advantage > 0 ? "+" : ""}${G.fmt(d.sequence_advantage)}` : ""),
      G.tokenStrip(d, ctx.mode, ctx.scale),
    );
  }

  // the parts of this turn's advantage a step-level estimator recorded (GiGPO: episode A^E and step ω·A^S), from
  // the trajectory's token details: one record per turn (per-step prompts) or one for the whole conversation
  function advantageParts(details, index) {
    for (const d of details) {
      const entry = (d.step_advantages || []).find((e) => e.turn === index);
      if (entry) {
        const parts = Object.entries(entry).filter(([k, v]) => k !== "turn" && G.isNum(v));
        const total = parts.reduce((sum, [, v]) => sum + v, 0);
        const text = parts.map(([k, v]) => `${k} ${G.fmt(v)}`).join(" + ");
        return G.el("span", { class: "adv-parts", title: "the parts of this turn's advantage: episode (A^E) and step (ω·A^S)" }, `advantage ${G.fmt(total)} = ${text}`);
      }
    }
    return null;
  }

  function turnView(turn, index, details, ctx, anchors) {
    const key = anchorKey(turn.anchor);
    const invalid = turn.valid === false;
    const own = details.filter((d) => d.turn === index);
    const info = turn.info && Object.keys(turn.info).length ? G.el("details", { class: "info" }, G.el("summary", {}, "environment info"), G.el("pre", { class: "text small" }, JSON.stringify(turn.info, null, 1))) : null;
    return G.el(
      "li", { class: "turn" + (invalid ? " invalid" : ""), "data-anchor": key },
      G.el("div", { class: "turn-head" }, G.el("b", {}, `turn ${index + 1}`), anchorChip(key, anchors),
        invalid ? G.badge("invalid action", "bad") : null,
        G.el("span", { class: "reward" + (turn.reward > 0 ? " pos" : turn.reward < 0 ? " neg" : "") }, `reward ${G.fmt(turn.reward)}`),
        G.isNum(turn.penalty) && turn.penalty !== 0 ? G.el("span", { class: "reward neg" }, `penalty ${G.fmt(turn.penalty)}`) : null,
        advantageParts(details, index)),
      G.el("div", { class: "turn-grid" },
        G.el("div", {}, G.el("div", { class: "label" }, "observation"), G.el("pre", { class: "text obs" }, turn.observation || "")),
        G.el("div", {},
          G.el("div", { class: "label" }, "model text (raw)"), G.el("pre", { class: "text model" + (invalid ? " bad-text" : "") }, turn.model_text || ""),
          G.el("div", { class: "label" }, "action (parsed)"), G.el("div", {}, invalid ? G.el("span", { class: "muted" }, "no valid action") : G.el("code", { class: "action" }, turn.action === null || turn.action === undefined ? "–" : String(turn.action))))),
      own.map((d) => detailBlock(d, ctx, "tokens of this turn")),
      info,
    );
  }

  // a turn in a trajectory's one-line summary: its action, or the kind of step the environment reports
  // (info.step_type, e.g. a knowledge-base query) when the action is long text
  function stepLabel(turn) {
    if (turn.valid === false) return "✗";
    const action = turn.action === null || turn.action === undefined ? "–" : String(turn.action);
    const info = turn.info || {};
    if (action.length > 14 && info.step_type) return [info.step_type, info.kb].filter(Boolean).join(" ");
    return action.length > 14 ? action.slice(0, 13) + "…" : action;
  }

  G.trajectoryCard = function (item, ctx, anchors) {
    const turns = item.trajectory || [];
    const details = G.detailsOf(item);
    const invalid = turns.filter((t) => t.valid === false).length;
    const conversation = details.filter((d) => d.turn === null || d.turn === undefined || d.turn < 0);
    const seqAdv = details.map((d) => d.sequence_advantage).find(G.isNum);
    const strip = G.el("span", { class: "action-strip" }, turns.map((t, i) => G.el("span", { class: "step-dot" + (t.valid === false ? " invalid" : ""), "data-anchor": anchorKey(t.anchor), style: anchors.colours.get(anchorKey(t.anchor)) ? `background:${anchors.colours.get(anchorKey(t.anchor))}` : null, title: `turn ${i + 1}: ${t.action}` }, stepLabel(t))));
    const body = G.el("div", { class: "traj-body" });
    let built = false;
    const card = G.el("div", { class: "trajectory" });
    const summary = G.el(
      "button", { type: "button", class: "traj-summary", "aria-expanded": "false", onclick: () => {
        const open = !card.classList.contains("open");
        if (open && !built) {
          G.append(body, [
            turns.length ? G.el("ol", { class: "turns" }, turns.map((t, i) => turnView(t, i, details, ctx, anchors))) : G.note("This trajectory is known from its token details only (samples.jsonl does not have it)."),
            conversation.map((d) => detailBlock(d, ctx, "the whole conversation's tokens (environment tokens: not trained on)")),
          ]);
          built = true;
        }
        card.classList.toggle("open", open);
        summary.setAttribute("aria-expanded", String(open));
      } },
      G.el("span", { class: "chev" }, "▸"),
      G.el("span", { class: "sample-id" }, `#${item.index}`),
      G.outcomeBadge(item),
      G.isNum(item.return) ? G.el("span", {}, `return ${G.fmt(item.return)}`) : null,
      G.el("span", { class: "muted" }, `${G.isNum(item.turns) ? item.turns : turns.length} turns`),
      item.ended ? G.el("span", { class: "muted" }, `ended: ${item.ended}`) : null,
      invalid ? G.badge(`${invalid} invalid`, "bad") : null,
      item.error ? G.badge("environment error", "bad", item.error) : null,
      G.isNum(seqAdv) ? G.el("span", { class: "chip adv " + (seqAdv > 0 ? "pos" : seqAdv < 0 ? "neg" : "") }, `advantage ${seqAdv > 0 ? "+" : ""}${G.fmt(seqAdv)}`) : null,
      strip,
    );
    card.append(summary, body);
    return card;
  };

  // one group's trajectories (a step's G episodes of one task), with shared anchors highlighted on hover
  G.trajectoryGroup = function (items, ctx) {
    const anchors = anchorTable(items);
    const won = items.filter((it) => it.won === true).length;
    const first = items[0];
    const shared = [...anchors.counts.values()].filter((n) => n > 1).length;
    const group = G.el(
      "article", { class: "traj-group" },
      G.el("header", {},
        G.el("span", { class: "sample-id" }, first.group !== undefined && first.group !== null ? `group ${first.group}` : "episodes"),
        first.task_id !== undefined ? G.el("span", {}, `task ${first.task_id}`) : null,
        G.el("span", { class: "muted" }, `${items.length} episode${items.length > 1 ? "s" : ""}, ${won} won`),
        shared ? G.el("span", { class: "muted" }, `${shared} anchor state${shared > 1 ? "s" : ""} shared by several steps (coloured)`) : null),
      items.map((it) => G.trajectoryCard(it, ctx, anchors)),
    );
    group.addEventListener("mouseover", (event) => {
      const chip = event.target.closest && event.target.closest("[data-anchor]");
      const key = chip ? chip.getAttribute("data-anchor") : null;
      if (key === group.dataset.lit) return;
      group.querySelectorAll(".lit").forEach((n) => n.classList.remove("lit"));
      group.dataset.lit = key || "";
      if (key && anchors.colours.has(key)) {
        group.querySelectorAll(`[data-anchor="${CSS.escape(key)}"]`).forEach((n) => n.classList.add("lit"));
      }
    });
    group.addEventListener("mouseleave", () => {
      group.querySelectorAll(".lit").forEach((n) => n.classList.remove("lit"));
      group.dataset.lit = "";
    });
    return group;
  };
})();
