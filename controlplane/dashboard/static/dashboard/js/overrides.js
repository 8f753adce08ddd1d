// The override panel: pin, set, release, pause, resume, stop. Each command needs a reason,
// shows as pending until the run answers, and then shows what came of it: the decision the
// worker reports back over the websocket (matched by its override id), the override coming
// back applied or with an error, or no answer within ANSWER_TIMEOUT_MS.
import { ApiError, getJSON, post } from "./api.js";

const ANSWER_TIMEOUT_MS = 30000;
const POLL_MS = 2000;
const CAP_COMMANDS = new Set(["pin", "set", "release"]);

function describeError(error) {
  if (!(error instanceof ApiError)) return String(error);
  const fields = Object.entries(error.body.errors || {}).map(([path, messages]) => `${path}: ${messages.join(" ")}`);
  return [error.message, ...fields].join(" · ");
}

export class OverridePanel {
  constructor({ api, root, metrics }) {
    this.api = api;
    this.root = root;
    this.metrics = metrics;
    this.controls = root.querySelector("#override-controls");
    this.disabledNote = root.querySelector("#override-disabled");
    this.error = root.querySelector("#ov-error");
    this.log = root.querySelector("#ov-log");
    this.pending = new Map(); // override id -> {button, entry, clickedAt, timer, deadline}
    for (const button of root.querySelectorAll("button[data-command]")) {
      button.addEventListener("click", () => this.send(button));
    }
  }

  disable(reason) {
    this.controls.disabled = true;
    this.disabledNote.hidden = false;
    this.disabledNote.textContent = reason;
  }

  input(id) {
    return this.root.querySelector(id).value.trim();
  }

  async send(button) {
    const clickedAt = performance.now();
    const mode = button.dataset.command;
    this.error.hidden = true;
    const reason = this.input("#ov-reason");
    if (!reason) return this.fail("Give a reason: it is stored with the command.");
    let url = this.api[mode];
    let body = { reason };
    if (CAP_COMMANDS.has(mode)) {
      url = this.api.override;
      body = { mode, reason };
      if (mode !== "release") {
        const cap = Number.parseInt(this.input("#ov-cap"), 10);
        if (!Number.isFinite(cap)) return this.fail(`A ${mode} needs a cap.`);
        body.cap = cap;
      }
      if (mode === "pin") body.ttl_s = Number.parseFloat(this.input("#ov-ttl"));
    }
    button.disabled = true;
    button.classList.add("pending");
    let override;
    try {
      override = await post(url, body);
    } catch (error) {
      button.disabled = false;
      button.classList.remove("pending");
      return this.fail(`${button.textContent.trim()} not applied: ${describeError(error)}.`);
    }
    const entry = document.createElement("li");
    entry.dataset.override = override.id;
    entry.className = "pending";
    entry.textContent = `${mode}${body.cap ? ` ${body.cap}` : ""}${body.ttl_s ? ` for ${body.ttl_s} s` : ""}: ${reason} — pending…`;
    this.log.prepend(entry);
    const waiting = { mode, button, entry, clickedAt, deadline: Date.now() + ANSWER_TIMEOUT_MS };
    this.pending.set(override.id, waiting);
    if (override.status !== "pending") return this.settle(override.id, override);
    waiting.timer = setInterval(() => this.check(override.id, override.url), POLL_MS);
    return undefined;
  }

  fail(text) {
    this.error.hidden = false;
    this.error.textContent = text;
  }

  // A decision arrived (live or in a backfill): it ends the wait of the command it answers.
  decision(d) {
    if (d.override === null || d.override === undefined || !this.pending.has(d.override)) return;
    const waiting = this.pending.get(d.override);
    this.finish(d.override, "applied", `decision #${d.id}: ${d.kind} ${d.cap_before} → ${d.cap_after}`);
    // Measured once the frame that draws the decision (timeline row, chart) has run.
    requestAnimationFrame(() => this.metrics.clickToDecisionMs.push(performance.now() - waiting.clickedAt));
  }

  // The run ended or was handed back: pause and stop are answered by that.
  state(state) {
    for (const [id, waiting] of this.pending) {
      if (!CAP_COMMANDS.has(waiting.mode)) this.finish(id, "applied", `run ${state}`);
    }
  }

  async check(id, url) {
    const waiting = this.pending.get(id);
    if (!waiting) return;
    try {
      const override = await getJSON(url);
      if (override.status !== "pending") this.settle(id, override);
    } catch (error) {
      waiting.entry.title = `could not read the override: ${describeError(error)}`;
    }
    if (this.pending.has(id) && Date.now() > waiting.deadline) {
      this.finish(id, "error", `no answer from the run after ${ANSWER_TIMEOUT_MS / 1000} s`);
    }
  }

  settle(id, override) {
    if (override.status === "error") return this.finish(id, "error", `refused: ${override.error}`);
    if (override.decision) return this.decision({ ...override.decision, override: id });
    if (!CAP_COMMANDS.has(this.pending.get(id).mode)) return this.finish(id, "applied", "applied");
    return undefined; // applied, its decision on its way
  }

  finish(id, outcome, text) {
    const waiting = this.pending.get(id);
    if (!waiting) return;
    this.pending.delete(id);
    clearInterval(waiting.timer);
    waiting.button.disabled = false;
    waiting.button.classList.remove("pending");
    waiting.entry.className = outcome;
    waiting.entry.textContent = waiting.entry.textContent.replace(/pending…$/, text);
  }
}
