// Token colouring from token_details.jsonl: each response token coloured on demand by its log-prob, entropy,
// advantage, loss mask or D^3S kept flag, with a legend; hovering a token shows all its values.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});

  G.TOKEN_MODES = [
    ["plain", "plain text"],
    ["logprob", "log-prob"],
    ["entropy", "entropy"],
    ["advantage", "advantage"],
    ["loss_mask", "loss mask"],
    ["kept", "D^3S kept"],
  ];

  // the colour modes the given token-details records support (plain always)
  G.tokenModes = function (detailsList) {
    return G.TOKEN_MODES.filter(([mode]) => mode === "plain" || detailsList.some((d) => Array.isArray(d[mode])));
  };

  const RED = [220, 38, 38], BLUE = [37, 99, 235], PURPLE = [124, 58, 237];
  const tint = (rgb, a) => `rgba(${rgb[0]},${rgb[1]},${rgb[2]},${(Math.max(0, Math.min(1, a)) * 0.62).toFixed(3)})`;

  function gradient(stops, labels) {
    return G.el("div", { class: "legend-scale" }, G.el("span", { class: "legend-label" }, labels[0]), G.el("span", { class: "legend-bar", style: `background:linear-gradient(90deg,${stops.join(",")})` }), G.el("span", { class: "legend-label" }, labels[1]));
  }
  function swatches(pairs) {
    return G.el("div", { class: "legend-scale" }, pairs.map(([colour, label, cls]) => G.el("span", { class: "key" }, G.el("i", { class: cls || "", style: `background:${colour}` }), label)));
  }

  // a colour per value and a legend for one mode over the records shown together (a shared scale)
  G.tokenScale = function (mode, detailsList) {
    const values = [];
    for (const d of detailsList) if (Array.isArray(d[mode])) for (const v of d[mode]) values.push(v);
    if (mode === "logprob") {
      return {
        colour: (v) => (G.isNum(v) ? tint(RED, 1 - Math.exp(v)) : null),
        legend: G.el("div", { class: "legend" }, G.el("b", {}, "probability of the sampled token (e^log-prob)"), gradient([tint(RED, 0), tint(RED, 1)], ["1", "0"])),
      };
    }
    if (mode === "entropy") {
      const max = Math.max(1e-6, G.extent(values)[1] || 0);
      return {
        colour: (v) => (G.isNum(v) ? tint(PURPLE, v / max) : null),
        legend: G.el("div", { class: "legend" }, G.el("b", {}, "entropy of the next-token distribution (nats)"), gradient([tint(PURPLE, 0), tint(PURPLE, 1)], ["0", G.fmt(max)])),
      };
    }
    if (mode === "advantage") {
      const [lo, hi] = G.extent(values);
      const max = Math.max(1e-6, Math.abs(lo || 0), Math.abs(hi || 0));
      return {
        colour: (v) => (G.isNum(v) ? (v < 0 ? tint(RED, -v / max) : tint(BLUE, v / max)) : null),
        legend: G.el("div", { class: "legend" }, G.el("b", {}, "advantage per token"), gradient([tint(RED, 1), tint(RED, 0), tint(BLUE, 1)], ["−" + G.fmt(max), "+" + G.fmt(max)])),
      };
    }
    if (mode === "loss_mask") {
      return {
        colour: (v) => (v === 1 ? "rgba(37,99,235,0.16)" : v === 0 ? "rgba(107,114,128,0.22)" : null),
        legend: G.el("div", { class: "legend" }, G.el("b", {}, "loss mask"), swatches([["rgba(37,99,235,0.16)", "trained on (1)"], ["rgba(107,114,128,0.22)", "not trained on (0): environment or prompt tokens", "untrained"]])),
      };
    }
    if (mode === "kept") {
      return {
        colour: (v) => (v === 1 ? "rgba(5,150,105,0.22)" : v === 0 ? "rgba(107,114,128,0.22)" : null),
        legend: G.el("div", { class: "legend" }, G.el("b", {}, "D^3S token selection"), swatches([["rgba(5,150,105,0.22)", "kept (in the loss)"], ["rgba(107,114,128,0.22)", "dropped"]])),
      };
    }
    return { colour: () => null, legend: G.el("div", { class: "legend" }, G.el("span", { class: "muted" }, "Choose a colouring to see each token's values; hover a token for all of them.")) };
  };

  function shown(token) {
    if (token === "") return "∅";
    return token.replace(/\n/g, "↵\n");
  }

  function tokenRows(d, i) {
    const rows = [["position", String(i)]];
    if (d.logprob && G.isNum(d.logprob[i])) rows.push(["log-prob", G.fmt(d.logprob[i], 4)], ["probability", G.fmt(Math.exp(d.logprob[i]), 3)]);
    if (d.entropy && G.isNum(d.entropy[i])) rows.push(["entropy", G.fmt(d.entropy[i], 4)]);
    if (d.advantage && G.isNum(d.advantage[i])) rows.push(["advantage", G.fmt(d.advantage[i], 4)]);
    if (d.loss_mask) rows.push(["loss mask", d.loss_mask[i] ? "1 (trained on)" : "0 (not trained on)"]);
    if (d.kept) rows.push(["D^3S kept", d.kept[i] ? "kept" : "dropped"]);
    return rows;
  }

  // the tokens of one record as coloured spans
  G.tokenStrip = function (d, mode, scale) {
    const strip = G.el("div", { class: "tokens" });
    const series = mode === "plain" ? null : d[mode];
    d.tokens.forEach((token, i) => {
      const span = G.el("span", { class: "tok", "data-i": i }, shown(token));
      const untrained = d.loss_mask && d.loss_mask[i] === 0;
      if (untrained) span.classList.add("untrained");
      if (series) {
        const colour = scale.colour(series[i]);
        if (colour) span.style.background = colour;
      }
      strip.appendChild(span);
    });
    if (d.cut) strip.appendChild(G.el("span", { class: "muted" }, ` … ${d.cut} more tokens not kept in the report`));
    strip.addEventListener("mousemove", (event) => {
      const i = event.target && event.target.dataset ? event.target.dataset.i : undefined;
      if (i === undefined) return G.hideTip();
      G.showTip(event, JSON.stringify(d.tokens[+i]), tokenRows(d, +i));
    });
    strip.addEventListener("mouseleave", G.hideTip);
    return strip;
  };

  // the mean advantage over a record's trained tokens (those with loss mask 1, or all)
  G.trainedMean = function (d, series) {
    const values = d[series];
    if (!Array.isArray(values)) return null;
    return G.mean(values.filter((v, i) => !d.loss_mask || d.loss_mask[i] === 1));
  };
})();
