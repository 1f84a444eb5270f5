// The report's data: data/run.js (the overview, loaded by index.html) and the sample pages (data/pages/<id>.js),
// loaded on demand with <script src> — a page opened from disk may run scripts beside it but not fetch() them.
(function () {
  "use strict";
  const G = (window.Grove = window.Grove || {});
  const queue = (window.GROVE_DATA = window.GROVE_DATA || []);
  const loaded = {};
  const waiting = {};

  function arrived(item) {
    if (item && item.page) {
      loaded[item.page] = item.items;
      for (const w of waiting[item.page] || []) w.resolve(item.items);
      delete waiting[item.page];
    }
  }
  queue.forEach(arrived);
  queue.push = function (item) {
    Array.prototype.push.call(this, item);
    arrived(item);
    return this.length;
  };

  G.runData = () => queue.find((item) => item && item.run);

  G.loadPage = function (id) {
    if (loaded[id]) return Promise.resolve(loaded[id]);
    return new Promise((resolve, reject) => {
      const first = !waiting[id];
      (waiting[id] = waiting[id] || []).push({ resolve, reject });
      if (!first) return;
      const script = document.createElement("script");
      script.src = "data/pages/" + id + ".js";
      script.onerror = () => {
        for (const w of waiting[id] || []) w.reject(new Error("could not load data/pages/" + id + ".js"));
        delete waiting[id];
      };
      document.head.appendChild(script);
    });
  };

  // the samples of one key (a step, or an evaluation's step and mode) of a collection's index
  G.loadEntry = async function (entry) {
    const pages = await Promise.all(entry.pages.map(G.loadPage));
    return pages.flat().filter((item) => item._key === entry.key);
  };
})();
