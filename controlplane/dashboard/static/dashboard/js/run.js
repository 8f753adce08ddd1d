// The run page: history from the REST API, then live events from the run's websocket. Each
// time the socket opens (first load or a reconnect) events are held back while the page
// backfills what it missed, then applied: decisions merge by id, engine samples by time, and
// the samples' backfill ends where the first live poll begins, so there is no gap and no
// point twice.
import { ApiError, getAllPages, getJSON, withQuery } from "./api.js";
import * as charts from "./charts.js";
import { EnginePanel, Membership, renderEngines } from "./engines.js";
import { LiveSocket } from "./live.js";
import { OverridePanel } from "./overrides.js";
import { PoolLine } from "./pool_line.js";
import { TimeRows, seconds } from "./series.js";
import { SharePanel } from "./share.js";
import { Timeline } from "./timeline.js";

const page = JSON.parse(document.getElementById("page-data").textContent);
const WINDOW_S = 30 * 60; // what the charts show, and all they keep
const MAX_ROWS = 5000;
const MAX_STEPS = 500;
const ENDED = new Set(["completed", "failed", "cancelled"]);
const $ = (id) => document.getElementById(id);

const metrics = (window.pacerMetrics = { clickToDecisionMs: [], deliveryMs: [], opens: 0, backfills: 0 });
const capRows = new TimeRows({ windowS: WINDOW_S, maxRows: MAX_ROWS });
const engineRows = new TimeRows({ windowS: WINDOW_S, maxRows: MAX_ROWS });
const steps = new Map(); // step number -> its record: seconds, reward mean and std, version
// Each engine's newest weights decision (by engine name): what the Version column falls
// back on when the live figures carry no version for it yet.
const served = new Map(Object.entries(page.served).map(([engine, d]) => [engine, { ...d, atMs: Date.parse(d.at) }]));
let lastEngines = null; // the newest poll's engines and warnings, redrawn as versions change
// Engines draining out of the run or gone: from its join, drain and leave decisions, those
// the page was served with (however old), then each one the page sees.
const membership = new Membership(page.engine_changes);
const engineIds = []; // as the samples name them: "<engine>/<rank>", learnt from the data
// The run's part of the pool of shared engines, as its decisions carry it (every decision
// while it shares them; a share decision without one: alone again): [unix seconds, ceiling or
// null (the run shares no engine)], by time. Every row of the cap chart carries the one in
// force.
const ceilings = [];
let lastDecision = null; // the newest decision seen: where a reconnect's backfill resumes
let lastPollAt = null; // unix seconds of the newest engine sample seen
let ended = false;

const timeline = new Timeline({
  body: $("timeline").tBodies[0], kindSelect: $("timeline-kind"), alertsOnly: $("timeline-alerts"),
  count: $("timeline-count"), kinds: page.kinds,
});
const panel = new OverridePanel({ api: page.api, root: $("override-panel"), metrics });
if (!page.operator) panel.disable(page.viewer_reason);
const enginePanel = page.operator
  ? new EnginePanel({ api: page.api, root: $("engine-panel"), table: $("engine-table"), onChange: () => showEngines() })
  : null;
const sharePanel = page.operator ? new SharePanel({ api: page.api, root: $("share-panel") }) : null;

const plots = {
  cap: charts.capChart($("chart-cap")),
  kv: charts.kvChart($("chart-kv"), engineIds),
  queue: charts.queueChart($("chart-queue")),
  preemptions: charts.singleChart($("chart-preemptions"), "preemptions/s", "#d1342f", { digits: 2 }),
  prefix: charts.singleChart($("chart-prefix"), "hit rate", "#138a8a", { ratio: true }),
  tokens: charts.singleChart($("chart-tokens"), "tokens/s", "#1b3a6b", { digits: 0 }),
  reward: charts.rewardChart($("chart-reward")),
  steps: charts.stepsChart($("chart-steps")),
};
window.pacerPlots = plots; // for the browser tests, which read what the charts hold
window.pacerWeightSpans = charts.weightSpans;
const draw = charts.scheduler(() => {
  plots.cap.setData(capRows.table(charts.CAP_FIELDS));
  plots.kv.setData(engineRows.table(charts.kvFields(engineIds)));
  plots.queue.setData(engineRows.table(charts.QUEUE_FIELDS));
  plots.preemptions.setData(engineRows.table(["preemptions"]));
  plots.prefix.setData(engineRows.table(["prefix"]));
  plots.tokens.setData(engineRows.table(["tokens"]));
  const numbers = [...steps.keys()].sort((a, b) => a - b);
  const records = numbers.map((n) => steps.get(n));
  const known = (v) => (typeof v === "number" ? v : null);
  const spread = (r, sign) => (typeof r.reward_mean === "number" && typeof r.reward_std === "number" ? r.reward_mean + sign * r.reward_std : null);
  plots.reward.setData([
    numbers,
    records.map((r) => known(r.reward_mean)),
    records.map((r) => spread(r, 1)),
    records.map((r) => spread(r, -1)),
    records.map((r) => known(r.policy_version)),
  ]);
  plots.steps.setData([numbers, records.map((r) => known(r.seconds))]);
});

function knowEngines(ids) {
  const added = ids.filter((id) => !engineIds.includes(id));
  if (!added.length) return;
  engineIds.push(...added);
  plots.kv.destroy();
  plots.kv = charts.kvChart($("chart-kv"), engineIds);
}

const sum = (values) => (values.some((v) => typeof v === "number") ? values.reduce((a, v) => a + (v || 0), 0) : null);
const mean = (values) => {
  const known = values.filter((v) => typeof v === "number");
  return known.length ? known.reduce((a, v) => a + v, 0) / known.length : null;
};
const lines = { line_trim: page.kv_lines.trim, line_shed: page.kv_lines.shed, line_top: 1 };

// -- what each kind of record does to the page --------------------------------------------

function addDecision(d) {
  if (!timeline.add(d)) return;
  const key = [Date.parse(d.at), d.id];
  if (!lastDecision || key[0] > lastDecision[0] || (key[0] === lastDecision[0] && key[1] > lastDecision[1])) lastDecision = key;
  const group = charts.KIND_GROUPS[d.kind] || "other";
  const t = seconds(d.at);
  if (d.figures && "ceiling" in d.figures) newCeiling(t, d.figures.ceiling);
  else if (d.kind === "share" && d.cause === "share") newCeiling(t, null);
  capRows.upsert(t, { cap: d.cap_after, shadow: d.shadow_after ?? null, ceiling: ceilingAt(t), [`m_${group}`]: d.cap_after });
  if (d.kind === "weights") weightsDecision(d);
  if (membership.decision(d)) showEngines();
  panel.decision(d);
  draw();
}

function ceilingAt(t) {
  let found = null;
  for (const [at, ceiling] of ceilings) {
    if (at > t) break;
    found = ceiling;
  }
  return found;
}

// A share decision's ceiling holds from its time on: the rows already drawn after it say so.
function newCeiling(t, ceiling) {
  let i = ceilings.length;
  while (i > 0 && ceilings[i - 1][0] > t) i -= 1;
  ceilings.splice(i, 0, [t, ceiling]);
  const oldest = capRows.times[0] ?? -Infinity;
  while (ceilings.length > 1 && ceilings[1][0] <= oldest) ceilings.shift(); // out of the window
  for (const at of capRows.times) {
    if (at >= t) capRows.rows.get(at).ceiling = ceilingAt(at);
  }
}

// A weight update: a span on the time charts, and the engine's version on record for the
// engine table, when it is newer than the one there.
function weightsDecision(d) {
  charts.addWeightSpan(d);
  const version = d.figures?.version;
  const atMs = Date.parse(d.at);
  const known = served.get(d.engine);
  if (!d.engine || typeof version !== "number" || (known && (known.atMs > atMs || (known.atMs === atMs && known.id > d.id)))) return;
  served.set(d.engine, { id: d.id, at: d.at, atMs, version, reason: d.reason, alert: d.alert });
  showEngines();
}

function showEngines() {
  const { engines, warnings } = lastEngines ?? {
    // Before the first poll: the engines the run names, with what their decisions say.
    engines: page.engines.map((e) => ({ engine_id: e.engine_id, role: e.role })),
    warnings: [],
  };
  renderEngines({
    body: $("engine-table").tBodies[0], warningsBox: $("engine-warnings"), configured: page.engines,
    engines, warnings, served, relays: page.relays_weights, membership, panel: enginePanel,
  });
}

function addPoll(h) {
  const t = seconds(h.at);
  const shadow = h.policy_cap !== null && h.policy_cap !== h.cap ? h.policy_cap : null;
  capRows.upsert(t, { cap: h.cap, shadow, ceiling: ceilingAt(t), inflight_train: h.inflight_train, inflight_eval: h.inflight_eval });
  knowEngines(h.engines.map((e) => e.engine_id));
  const row = { ...lines, kv_max: Math.max(...h.engines.map((e) => e.kv_usage)) };
  for (const e of h.engines) row[`kv:${e.engine_id}`] = e.kv_usage;
  Object.assign(row, {
    running: sum(h.engines.map((e) => e.running)),
    waiting: sum(h.engines.map((e) => e.waiting)),
    waiting_capacity: sum(h.engines.map((e) => e.waiting_capacity)),
    preemptions: sum(h.engines.map((e) => e.preemptions_per_s)),
    prefix: mean(h.engines.map((e) => e.prefix_hit_rate)),
    tokens: h.generation_tokens_per_s ?? sum(h.engines.map((e) => e.generation_tokens_per_s)),
  });
  engineRows.upsert(t, row);
  lastPollAt = Math.max(lastPollAt ?? t, t);
  lastEngines = { engines: h.engines, warnings: h.warnings };
  showEngines();
  figures({ cap: h.cap, policy_cap: h.policy_cap, inflight_train: h.inflight_train, inflight_eval: h.inflight_eval, policy_version: h.policy_version, generation_tokens_per_s: h.generation_tokens_per_s });
  draw();
}

// Downsampled samples from the API: one row per bin, each engine's figures merged.
function addBins(points, sinceS) {
  const bins = new Map();
  for (const p of points) {
    const t = Math.max(seconds(p.at), sinceS);
    if (!bins.has(t)) bins.set(t, []);
    bins.get(t).push(p);
  }
  knowEngines([...new Set(points.map((p) => p.engine))]);
  for (const [t, group] of bins) {
    capRows.upsert(t, {
      ceiling: ceilingAt(t),
      inflight_train: sum(group.map((p) => p.inflight_train)),
      inflight_eval: sum(group.map((p) => p.inflight_eval)),
    });
    const row = { ...lines, kv_max: Math.max(...group.map((p) => p.kv_usage_max)) };
    for (const p of group) row[`kv:${p.engine}`] = p.kv_usage;
    Object.assign(row, {
      running: sum(group.map((p) => p.num_running)),
      waiting: sum(group.map((p) => p.num_waiting)),
      waiting_capacity: sum(group.map((p) => p.num_waiting_capacity)),
      preemptions: sum(group.map((p) => p.preemptions_per_s)),
      prefix: mean(group.map((p) => p.prefix_hit_rate)),
      tokens: sum(group.map((p) => p.tokens_per_s)),
    });
    engineRows.upsert(t, row);
    lastPollAt = Math.max(lastPollAt ?? t, t);
  }
  draw();
}

// A step from the API or the socket: fields one of them lacks (a step event from an older
// worker has no std) keep what the other brought.
function addStep(s) {
  const record = { ...steps.get(s.step) };
  for (const field of ["seconds", "reward_mean", "reward_std", "policy_version"]) {
    if (typeof s[field] === "number") record[field] = s[field];
  }
  steps.set(s.step, record);
  while (steps.size > MAX_STEPS) steps.delete(Math.min(...steps.keys()));
  $("fig-step").textContent = String(Math.max(s.step, Number($("fig-step").textContent) || 0));
  draw();
}

// Where a backfill's steps start: the charts keep the last MAX_STEPS, and steps do not change
// once written, so a reconnect reads only those after the ones it has without a gap (a step
// event lost while the socket was open is read again).
function stepsAfter(newest) {
  let after = Math.max(0, newest - MAX_STEPS);
  const known = [...steps.keys()].filter((n) => n > after).sort((a, b) => a - b);
  for (const n of known) {
    if (n !== after + 1) break;
    after = n;
  }
  return after || null;
}

function figures(f) {
  const set = (id, value) => { if (value !== undefined && value !== null) $(id).textContent = String(value); };
  set("fig-cap", f.cap);
  set("fig-policy-cap", f.policy_cap);
  set("fig-version", f.policy_version);
  if (f.inflight_train !== undefined) set("fig-inflight", `${f.inflight_train} + ${f.inflight_eval}`);
  if (typeof f.generation_tokens_per_s === "number") set("fig-tokens", Math.round(f.generation_tokens_per_s));
  if (typeof f.step === "number") set("fig-step", f.step);
}

function showState(state, error) {
  const badge = $("run-state");
  badge.textContent = state;
  badge.className = `state state-${state}`;
  if (state === "paused" || ENDED.has(state)) panel.state(state);
  if (!ENDED.has(state) || ended) return;
  ended = true;
  $("ended-banner").hidden = false;
  $("ended-state").textContent = state;
  $("ended-error").textContent = error || "";
  panel.disable(`This run has ended (${state}): it takes no more commands.`);
  enginePanel?.disable();
  sharePanel?.disable();
  poolLine.stop();
  setStatus("ended");
  socket.stop();
}

// -- the socket and the backfill ------------------------------------------------------------

let held = null; // events received while a backfill runs, applied after it
let firstPoll = null; // resolves with the first live poll after the socket opened

function handle(event, receivedAt) {
  if (event.type === "engine_health" && !Array.isArray(event.data?.engines)) return;
  if (event.type === "decision") metrics.deliveryMs.push(receivedAt - Date.parse(event.data.at));
  if (event.type === "engine_health" && firstPoll) firstPoll.resolve(event.data);
  if (held) return void held.push(event);
  apply(event);
}

function apply(event) {
  if (!event.data) return;
  if (event.type === "decision") addDecision(event.data);
  else if (event.type === "engine_health") addPoll(event.data);
  else if (event.type === "step") addStep(event.data);
  else if (event.type === "state") showState(event.data.state, event.data.error);
}

function waitForPoll(ms) {
  let resolve;
  const promise = new Promise((r) => { resolve = r; });
  firstPoll = { resolve };
  setTimeout(() => resolve(null), ms);
  return promise;
}

async function samplesBetween(sinceS, until) {
  const params = { since: new Date(sinceS * 1000 + 1).toISOString(), until };
  try {
    return await getJSON(withQuery(page.api.samples, { ...params, step_s: page.poll_interval_s }));
  } catch (error) {
    if (error instanceof ApiError && error.status === 400) return getJSON(withQuery(page.api.samples, params));
    throw error;
  }
}

async function backfill() {
  held = [];
  const polled = waitForPoll(Math.min(12000, page.poll_interval_s * 2000 + 1000));
  try {
    const run = await getJSON(page.api.run);
    figures(run);
    const windowStart = Date.now() / 1000 - WINDOW_S;
    const since = lastDecision ? String(lastDecision[1]) : new Date(windowStart * 1000).toISOString();
    for (const d of await getAllPages(withQuery(page.api.decisions, { since, page_size: 1000 }), 50)) addDecision(d);
    for (const s of await getAllPages(withQuery(page.api.steps, { after: stepsAfter(run.step), page_size: 1000 }), 50)) addStep(s);
    // Polls happen only while a worker hosts the run; otherwise nothing live will follow.
    const first = ["running", "stopping"].includes(run.state) ? await polled : null;
    const series = await samplesBetween(lastPollAt ?? windowStart, first ? first.at : null);
    addBins(series.points, lastPollAt ?? windowStart);
    metrics.backfills += 1;
    showState(run.state, run.error);
  } finally {
    firstPoll = null;
    const events = held;
    held = null;
    events.forEach(apply);
  }
}

function setStatus(status, delay) {
  const box = $("live-status");
  box.dataset.status = status;
  box.textContent = {
    live: "live", connecting: "connecting…", ended: "run ended", "signed-out": "signed out: sign in again",
    "not-found": "no such run", reconnecting: `reconnecting in ${Math.ceil((delay || 0) / 1000)} s…`,
  }[status] || status;
}

showEngines();
const poolLine = new PoolLine({ url: page.api.pools, runId: page.run, box: $("pool-line"), link: page.pools_page });
poolLine.start();
const socket = new LiveSocket(page.websocket, {
  onOpen: () => {
    metrics.opens += 1;
    backfill().catch((error) => setStatus(`backfill failed: ${error.message}`));
  },
  onEvent: handle,
  onStatus: (status, delay) => { if (!ended) setStatus(status, delay); },
  onRefused: (why) => {
    setStatus(why);
    if (why === "signed-out") location.assign(`${page.signin}?next=${encodeURIComponent(location.pathname)}`);
  },
});
socket.start();

// Live events are at most once (Channels drops them for a full channel): decisions are read
// again from the last one seen every RESYNC_MS, merged by id like any other.
const RESYNC_MS = 15000;
setInterval(() => {
  if (held || ended || !lastDecision) return;
  getAllPages(withQuery(page.api.decisions, { since: String(lastDecision[1]), page_size: 1000 }), 5)
    .then((rows) => rows.forEach(addDecision))
    .catch(() => {});
}, RESYNC_MS);
