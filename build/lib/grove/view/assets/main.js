// Builds the page from data/run.js: the navigation and the sections the run has.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});

  function guarded(name, build) {
    try {
      return build();
    } catch (error) {
      console.error(error);
      return G.el("section", { class: "section" }, G.el("h2", {}, name), G.note(`This section could not be drawn: ${error}`, "warn"));
    }
  }

  function start() {
    const data = G.runData();
    const app = document.getElementById("app");
    if (!data) {
      app.replaceChildren(G.note("data/run.js did not load: the report folder is incomplete; write it again with grove view.", "warn"));
      return;
    }
    const agent = data.run.kind === "agent";
    const sections = [["overview", "Overview", () => G.renderOverview(data)]];
    if (agent) {
      sections.push(["trajectories", "Trajectories", () => G.renderSampleBrowser(data, { id: "trajectories", title: "Agent trajectories", agent: true, intro: "Each line is one episode of a group (the G copies of one task at one step); click it to expand it turn by turn. Anchor keys shared by several steps of the group are coloured alike; hover one to highlight them all." })]);
    } else {
      sections.push(["samples", "Samples", () => G.renderSampleBrowser(data, { id: "samples", title: "Sample browser", agent: false, intro: data.token_details.present ? "Prompts and completions per step; colour the tokens by their recorded values (token_details.jsonl) and hover one for all of them." : "Prompts and completions per step. Token colouring appears when the run has token_details.jsonl." })]);
    }
    if (data.objectives.length) sections.push(["objectives", "Objectives", () => G.renderObjectives(data)]);
    if (data.compare) sections.push(["compare", "Compare", () => G.renderCompare(data)]);
    const nav = document.getElementById("nav");
    nav.replaceChildren(...sections.map(([id, label]) => G.el("a", { href: "#" + id }, label)));
    app.replaceChildren(...sections.map(([, label, build]) => guarded(label, build)));
    document.title = `grove view · ${data.run.name}`;
    window.GROVE_READY = Promise.all([...app.querySelectorAll(".section")].map((s) => s.ready).filter(Boolean)).then(() => true);
  }

  window.addEventListener("DOMContentLoaded", start);
})();
