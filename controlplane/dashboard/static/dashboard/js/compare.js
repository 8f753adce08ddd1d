// The compare page: each run's series read through the endpoints that bound them (its
// decisions and steps a page of 1,000 at a time, at most MAX_PAGES; its engine samples
// binned by the database to at most 1,000 points an engine), drawn on shared charts at
// seconds since each run's start, one colour per run. While any run is active the page reads
// them again every REFRESH_MS.
import { getAllPages, getJSON, withQuery } from "./api.js";
import { capChart, runsChart } from "./compare_charts.js";
import { aligned, seconds } from "./series.js";

const page = JSON.parse(document.getElementById("page-data").textContent);
const ENDED = new Set(["completed", "failed", "cancelled"]);
const REFRESH_MS = 15000;
const MAX_PAGES = 5;
const $ = (id) => document.getElementById(id);

// A run's colour is its swatch's in the stylesheet, so the table and the charts agree.
function colourOf(index) {
  const swatch = document.querySelector(`.run-swatch.run-${index}`);
  return getComputedStyle(swatch).getPropertyValue("--run-colour").trim();
}

const runs = page.runs.map((r) => ({ ...r, colour: colourOf(r.colour) }));
const series = new Map(); // run id -> what its charts draw
const metrics = (window.pacerCompare = { loads: 0, errors: [] });

const rewardRange = (u, low, high) => {
  if (low === null || high === null) return [0, 1];
  const pad = Math.max(high - low, 0.1) * 0.08;
  return [Math.min(0, low - pad), high + pad];
};
const plots = {
  cap: capChart($("chart-cap"), runs),
  inflight: runsChart($("chart-inflight"), runs, { digits: 0 }),
  tokens: runsChart($("chart-tokens"), runs, { digits: 0 }),
  kv: runsChart($("chart-kv"), runs, { ratio: true }),
};
window.pacerPlots = plots; // for the browser tests, which read what the charts hold

// The step charts, by step or by the time since the run's start each step was written.
function stepCharts(x) {
  plots.steps?.destroy();
  plots.reward?.destroy();
  plots.steps = runsChart($("chart-steps"), runs, { x, digits: 2, points: true });
  plots.reward = runsChart($("chart-reward"), runs, { x, digits: 3, points: true, yRange: rewardRange });
}
stepCharts($("step-axis").value);

// -- one run's records into the points its charts draw ---------------------------------------

const sum = (values) => (values.some((v) => typeof v === "number") ? values.reduce((a, v) => a + (v || 0), 0) : null);

function capPoints(decisions, startS, fresh, nowS) {
  const points = decisions.map((d) => [seconds(d.at) - startS, d.cap_after]);
  const endS = fresh.finished_at ? seconds(fresh.finished_at) : nowS;
  const lastS = points.length ? points[points.length - 1][0] : -Infinity;
  if (typeof fresh.cap === "number" && endS - startS > lastS) points.push([endS - startS, fresh.cap]);
  return points;
}

function binPoints(samples, startS) {
  const bins = new Map();
  for (const p of samples) {
    // A bin starts on a multiple of its width: the first may start before the run did.
    const x = Math.max(0, seconds(p.at) - startS);
    if (!bins.has(x)) bins.set(x, []);
    bins.get(x).push(p);
  }
  const inflight = [];
  const tokens = [];
  const kv = [];
  for (const [x, group] of [...bins].sort((a, b) => a[0] - b[0])) {
    inflight.push([x, sum(group.map((p) => p.inflight_train + p.inflight_eval))]);
    tokens.push([x, sum(group.map((p) => p.tokens_per_s))]);
    kv.push([x, Math.max(...group.map((p) => p.kv_usage_max))]);
  }
  return { inflight, tokens, kv };
}

async function load(run) {
  const fresh = await getJSON(run.api.run);
  const start = fresh.started_at || fresh.created_at;
  const startS = seconds(start);
  const decisions = await getAllPages(withQuery(run.api.decisions, { page_size: 1000 }), MAX_PAGES);
  const steps = await getAllPages(withQuery(run.api.steps, { page_size: 1000 }), MAX_PAGES);
  // An ended run's samples binned over its life alone (a run cancelled before it started has
  // none after its start).
  const until = fresh.finished_at && seconds(fresh.finished_at) > startS ? fresh.finished_at : null;
  const samples = await getJSON(withQuery(run.api.samples, { since: start, until }));
  series.set(run.id, {
    state: fresh.state,
    cap: capPoints(decisions, startS, fresh, Date.now() / 1000),
    markers: decisions.map((d) => [seconds(d.at) - startS, d.cap_after]),
    ...binPoints(samples.points, startS),
    steps: steps.map((s) => ({ step: s.step, atS: seconds(s.written_at) - startS, seconds: s.seconds, reward: s.reward_mean })),
  });
}

// -- drawing -----------------------------------------------------------------------------------

const EMPTY = { cap: [], markers: [], inflight: [], tokens: [], kv: [], steps: [] };
const of = (run) => series.get(run.id) || EMPTY;

function stepColumn(run, field) {
  const x = $("step-axis").value === "step" ? "step" : "atS";
  return of(run).steps.map((s) => [s[x], s[field]]);
}

function draw() {
  plots.cap.setData(aligned(runs.flatMap((run) => [of(run).cap, of(run).markers])));
  for (const name of ["inflight", "tokens", "kv"]) plots[name].setData(aligned(runs.map((run) => of(run)[name])));
  plots.steps.setData(aligned(runs.map((run) => stepColumn(run, "seconds"))));
  plots.reward.setData(aligned(runs.map((run) => stepColumn(run, "reward"))));
}

function setStatus(text, status) {
  const box = $("compare-status");
  box.textContent = text;
  box.dataset.status = status;
}

async function refresh() {
  const failed = [];
  await Promise.all(runs.map((run) => load(run).catch((error) => failed.push(`#${run.id}: ${error.message}`))));
  draw();
  metrics.loads += 1;
  metrics.errors = failed;
  const active = runs.some((run) => !ENDED.has(of(run).state));
  const when = new Date().toLocaleTimeString([], { hour12: false });
  if (failed.length) setStatus(`could not read ${failed.join("; ")}`, "not-found");
  else setStatus(active ? `updated ${when}, again every ${REFRESH_MS / 1000} s` : `read at ${when}: every run has ended`, "loaded");
  if (active || failed.length) setTimeout(refresh, REFRESH_MS);
}

$("step-axis").addEventListener("change", () => {
  stepCharts($("step-axis").value);
  draw();
});
refresh();
