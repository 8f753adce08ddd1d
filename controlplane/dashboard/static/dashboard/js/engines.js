// The engine table, redrawn from each poll: health with the age of its numbers, KV usage,
// running and waiting requests, and the engine's max_num_seqs, flagged when the run's cap
// exceeds the engines' batch limit.
const pct = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);

export function renderEngines({ body, warningsBox, configured, engines, warnings }) {
  const limits = new Map(configured.map((e) => [e.engine_id, e.max_num_seqs]));
  const overBatchLimit = warnings.some((w) => w.includes("max_num_seqs"));
  body.replaceChildren(
    ...engines.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.engine = e.engine_id;
      const age = typeof e.staleness_s === "number" ? e.staleness_s : null;
      const limit = limits.get(e.engine_id.replace(/\/\d+$/, "")); // "<engine>/<rank>"
      const cells = [
        [e.engine_id, "name"],
        [e.role, ""],
        [`${e.health}${e.restarted ? " (restarted)" : ""}`, `health health-${e.health}`],
        [pct(e.kv_usage), "num"],
        [e.running ?? "–", "num"],
        [e.waiting_capacity ? `${e.waiting} (${e.waiting_capacity} for KV)` : (e.waiting ?? "–"), "num"],
        [limit ? `${limit}${overBatchLimit ? " ⚠" : ""}` : "–", `num${overBatchLimit && limit ? " warn" : ""}`],
      ];
      for (const [text, className] of cells) {
        const td = tr.insertCell();
        td.textContent = String(text);
        td.className = className;
      }
      if (age !== null) {
        tr.cells[2].title = `${age.toFixed(1)} s since the last good scrape`;
        tr.cells[2].append(Object.assign(document.createElement("small"), { textContent: ` ${age.toFixed(1)} s` }));
      }
      return tr;
    }),
  );
  warningsBox.hidden = warnings.length === 0;
  warningsBox.textContent = warnings.join(" · ");
}
