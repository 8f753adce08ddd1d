// The run's pool of shared engines, in one line under its engine table: the runs it shares
// them with, what each holds of its part, and which run's controller sizes the pool. Read
// from the pools API (the claims are renewed at every look of each run); hidden while the
// run shares no engine.
import { getJSON } from "./api.js";

const REFRESH_MS = 5000;

function runWords(run, runId) {
  const name = run.id === runId ? "this run" : `run ${run.id} (${run.name})`;
  const part = run.ceiling === null ? "" : ` of its part ${run.ceiling}`;
  return `${name} holds ${run.inflight}${part}`;
}

export function poolLine(pool, runId) {
  const leader = pool.leader === runId ? "this run" : `run ${pool.leader}`;
  const runs = [...pool.runs].sort((a, b) => (a.id === runId ? -1 : b.id === runId ? 1 : a.id - b.id));
  return `Engines shared: ${runs.map((run) => runWords(run, runId)).join("; ")}. The pool's level is ${pool.level}, sized by ${leader}.`;
}

export class PoolLine {
  constructor({ url, runId, box, link }) {
    Object.assign(this, { url, runId, box, link });
    this.timer = null;
  }

  start() {
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.box.hidden = true;
  }

  async refresh() {
    let pools;
    try {
      pools = await getJSON(this.url);
    } catch {
      return; // the line keeps what it said; the page's status shows the connection
    }
    const pool = pools.find((p) => p.runs.some((run) => run.id === this.runId));
    this.box.hidden = !pool;
    if (!pool) return;
    const more = Object.assign(document.createElement("a"), { href: this.link, textContent: "See the pools." });
    this.box.replaceChildren(`${poolLine(pool, this.runId)} `, more);
  }
}
