// The engine table, redrawn from each poll: health with the age of its numbers, the policy
// version the engine serves, KV usage, running and waiting requests, and the engine's
// max_num_seqs, flagged when the run's cap exceeds the engines' batch limit.
const pct = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);
const baseName = (engineId) => engineId.replace(/\/\d+$/, ""); // "<engine>/<rank>"

// What the Version column says: "updating" while the engine is paused for new weights, else
// the version the run's relay has on record for it (live, with each poll), else the one its
// newest weights decision left it on; "base" for the weights it was started with, and "–"
// when nothing is known (a run whose trainer sends no weights).
export function versionText(e, served, relays) {
  if (e.updating) return { text: "updating", className: "version updating" };
  const record = served.get(baseName(e.engine_id));
  const version = typeof e.weight_version === "number" ? e.weight_version : record?.version;
  const title = record?.reason || "";
  if (typeof version === "number") return { text: version === 0 ? "base" : `v${version}`, className: "version", title };
  return { text: relays ? "base" : "–", className: "version", title };
}

export function renderEngines({ body, warningsBox, configured, engines, warnings, served = new Map(), relays = false }) {
  const limits = new Map(configured.map((e) => [e.engine_id, e.max_num_seqs]));
  const overBatchLimit = warnings.some((w) => w.includes("max_num_seqs"));
  body.replaceChildren(
    ...engines.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.engine = e.engine_id;
      const age = typeof e.staleness_s === "number" ? e.staleness_s : null;
      const limit = limits.get(baseName(e.engine_id));
      const version = versionText(e, served, relays);
      const health = e.health ?? "–";
      const cells = [
        [e.engine_id, "name"],
        [e.role, ""],
        [`${health}${e.restarted ? " (restarted)" : ""}`, e.health ? `health health-${e.health}` : "health"],
        [version.text, version.className],
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
      if (version.title) tr.cells[3].title = version.title;
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
