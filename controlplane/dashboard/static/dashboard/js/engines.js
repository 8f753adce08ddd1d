// The engine table, redrawn from each poll: health with the age of its numbers, the policy
// version the engine serves, KV usage, running and waiting requests, the engine's
// max_num_seqs, flagged when the run's cap exceeds the engines' batch limit, and whether it
// is in the run, draining out of it or has left. For operators, the panel below the table
// adds an engine to the run and each row's Remove button takes one out.
import { errorWords, getJSON, post } from "./api.js";

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

// Each engine's newest join, drain or leave decision, by name: the page's own at load, then
// every decision the page sees, newest (by time, then id) kept.
const MEMBERSHIP_KINDS = new Set(["engine-join", "engine-drain", "engine-leave"]);

export class Membership {
  constructor(initial) {
    this.byEngine = new Map();
    Object.values(initial).forEach((d) => this.decision(d));
  }

  // Whether the decision changed an engine's standing.
  decision(d) {
    if (!MEMBERSHIP_KINDS.has(d.kind) || !d.engine) return false;
    const atMs = Date.parse(d.at);
    const known = this.byEngine.get(d.engine);
    if (known && (known.atMs > atMs || (known.atMs === atMs && known.id >= d.id))) return false;
    this.byEngine.set(d.engine, { id: d.id, kind: d.kind, atMs, reason: d.reason, drainS: d.figures?.drain_s });
    return true;
  }

  // What the line under the engine's name says: null when it is in the run as any other.
  standing(name, nowMs = Date.now()) {
    const known = this.byEngine.get(name);
    if (known?.kind === "engine-leave") return { text: "left", className: "left", title: known.reason };
    if (known?.kind !== "engine-drain") return null;
    const left = typeof known.drainS === "number" ? Math.max(0, known.atMs + known.drainS * 1000 - nowMs) / 1000 : null;
    return { text: "draining", className: "draining", title: known.reason, note: left === null ? "" : ` ${left.toFixed(0)} s left` };
  }
}

// Under the engine's name (the table has no room for a column more): whether it is draining
// or has left, else, for an operator, its Remove button.
function standingLine(td, name, membership, panel) {
  const standing = membership.standing(name);
  if (standing) {
    const line = Object.assign(document.createElement("span"), {
      className: `standing ${standing.className}`, textContent: `${standing.text}${standing.note || ""}`, title: standing.title,
    });
    td.append(line);
    return standing;
  }
  if (!panel) return null;
  const button = Object.assign(document.createElement("button"), { type: "button", className: "standing remove-engine" });
  button.dataset.remove = name;
  button.disabled = panel.removing.has(name) || panel.disabled;
  button.textContent = panel.removing.has(name) ? "removing…" : "Remove";
  button.title = `take ${name} out of the run: it drains first`;
  td.append(button);
  return null;
}

export function renderEngines({
  body, warningsBox, configured, engines, warnings, served = new Map(), relays = false,
  membership = new Membership({}), panel = null,
}) {
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
        [e.inflight_train === undefined ? "–" : e.inflight_train + e.inflight_eval, "num this-run"],
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
      const standing = standingLine(tr.cells[0], baseName(e.engine_id), membership, panel);
      if (standing) tr.classList.add(standing.className);
      return tr;
    }),
  );
  warningsBox.hidden = warnings.length === 0;
  warningsBox.textContent = warnings.join(" · ");
}

// Adding an engine (a registered name or a URL) and taking one out (after a drain, confirmed
// first): each a command shown as pending until its override comes back applied (the run
// acted on it) or with an error, or no answer within ANSWER_TIMEOUT_MS. A refusal (the
// engine does not answer, no such registered name, the run's last engine) is the API's
// own words, next to the control.
const ANSWER_TIMEOUT_MS = 60000;
const POLL_MS = 1000;

export class EnginePanel {
  constructor({ api, root, table, onChange }) {
    this.api = api;
    this.controls = root.querySelector("#engine-controls");
    this.input = root.querySelector("#engine-add");
    this.addButton = root.querySelector("#engine-add-button");
    this.drain = root.querySelector("#engine-drain");
    this.error = root.querySelector("#engine-error");
    this.log = root.querySelector("#engine-log");
    this.onChange = onChange;
    this.removing = new Set(); // engine names with a removal pending
    this.disabled = false;
    this.addButton.addEventListener("click", () => this.add());
    this.input.addEventListener("keydown", (event) => { if (event.key === "Enter") this.add(); });
    // The rows are redrawn with each poll: one listener on the table for all their buttons.
    table.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-remove]");
      if (button) this.remove(button.dataset.remove);
    });
  }

  disable() {
    this.disabled = true;
    this.controls.disabled = true;
    this.onChange();
  }

  fail(text) {
    this.error.hidden = false;
    this.error.textContent = text;
  }

  async add() {
    const engine = this.input.value.trim();
    this.error.hidden = true;
    if (!engine) return this.fail("Name a registered engine or give an engine's URL.");
    this.addButton.disabled = true;
    this.addButton.classList.add("pending");
    this.addButton.textContent = "adding…";
    try {
      await sendCommand(this.log, this.api.engines, { engine, reason: "" }, `add ${engine}`);
      this.input.value = "";
    } catch (error) {
      this.fail(`${engine} not added: ${errorWords(error)}`);
    } finally {
      this.addButton.disabled = false;
      this.addButton.classList.remove("pending");
      this.addButton.textContent = "Add";
    }
    return undefined;
  }

  async remove(name) {
    this.error.hidden = true;
    const drainS = Number.parseFloat(this.drain.value);
    if (!Number.isFinite(drainS) || drainS < 0) return this.fail("Give the drain on removal in seconds (0 or more).");
    const asked = `Remove ${name} from the run? It takes no new groups from now; the episodes on it have ${drainS} s to finish, then those still on it are cancelled.`;
    if (!window.confirm(asked)) return undefined;
    this.removing.add(name);
    this.onChange();
    try {
      await sendCommand(this.log, `${this.api.engines}${encodeURIComponent(name)}/remove/`, { drain_s: drainS, reason: "" }, `remove ${name} (drain ${drainS} s)`);
    } catch (error) {
      this.fail(`${name} not removed: ${errorWords(error)}`);
    } finally {
      this.removing.delete(name);
      this.onChange();
    }
    return undefined;
  }
}

// Sends a command (an override) and logs it in ``log`` as pending until the run answers
// (applied, with its decision's reason when there is one), refuses it, or ANSWER_TIMEOUT_MS
// passes; throws the API's refusal of the command itself.
export async function sendCommand(log, url, body, what) {
  let override = await post(url, body);
  const entry = Object.assign(document.createElement("li"), { className: "pending", textContent: `${what} — pending…` });
  entry.dataset.override = override.id;
  log.prepend(entry);
  const deadline = Date.now() + ANSWER_TIMEOUT_MS;
  while (override.status === "pending" && Date.now() < deadline) {
    await new Promise((resolve) => { setTimeout(resolve, POLL_MS); });
    try {
      override = await getJSON(override.url);
    } catch (error) {
      entry.title = `could not read the command: ${errorWords(error)}`;
    }
  }
  const outcome = {
    applied: ["applied", override.decision ? override.decision.reason : "applied"],
    error: ["error", `refused: ${override.error}`],
    pending: ["error", `no answer from the run after ${ANSWER_TIMEOUT_MS / 1000} s`],
  }[override.status];
  entry.className = outcome[0];
  entry.textContent = `${what} — ${outcome[1]}`;
}
