// The run page's charts, all drawn by uPlot: this module only says which series each chart
// has, how they look, and keeps each chart as wide as its card.
/* global uPlot */

// Decision kinds fall into a few colour groups; the timeline's badges use the same ones.
export const KIND_GROUPS = {
  bootstrap: "start", restore: "start",
  grow: "grow",
  trim: "trim",
  cut: "cut",
  "drain-release": "other", reconcile: "other", "eval-wave": "other",
  pin: "operator", set: "operator", release: "operator", "pin-expired": "operator",
  "stale-freeze": "stale", "stale-thaw": "stale",
  weights: "weights",
  "engine-join": "engine", "engine-drain": "engine", "engine-leave": "engine", "engine-out": "engine", "engine-back": "engine",
  rescale: "rescale",
  share: "share",
};
export const GROUP_COLOURS = {
  start: "#2f6fd1", grow: "#2e9e44", trim: "#d98c00", cut: "#d1342f",
  operator: "#8a3ffc", stale: "#7a7a7a", weights: "#c11574", engine: "#344054", rescale: "#0086c9", share: "#b54708", other: "#138a8a",
};
export const MARKER_GROUPS = Object.keys(GROUP_COLOURS);
const ENGINE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"];
const HEIGHT = 220;
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

// Seconds since a run's start, for charts that put runs side by side: "1:05", "1:02:05".
const ELAPSED_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400];
function elapsed(s) {
  if (s === null || s === undefined) return "–";
  const whole = Math.round(s);
  const sign = whole < 0 ? "-" : "";
  const abs = Math.abs(whole);
  const [h, m, sec] = [Math.floor(abs / 3600), Math.floor((abs % 3600) / 60), abs % 60];
  const pad = (n) => String(n).padStart(2, "0");
  return h ? `${sign}${h}:${pad(m)}:${pad(sec)}` : `${sign}${m}:${pad(sec)}`;
}

const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });
export const stepped = () => uPlot.paths.stepped({ align: 1 });
export const number = (digits) => (u, v) => (v === null || v === undefined ? "–" : v.toFixed(digits));
export const percent = (u, v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);
export const percentAxis = { values: (u, splits) => splits.map((v) => `${Math.round(v * 100)}%`) };

// What each kind of x axis is: wall time (the run page), a step number, or seconds since a
// run's start (runs compared).
const X_AXES = {
  time: { series: { label: "time", value: "{HH}:{mm}:{ss}" }, axis: { space: 70, values: (u, splits) => splits.map(clock) } },
  step: { series: { label: "step" }, axis: { incrs: STEP_INCRS } },
  elapsed: {
    series: { label: "since start", value: (u, v) => elapsed(v) },
    axis: { space: 60, incrs: ELAPSED_INCRS, values: (u, splits) => splits.map(elapsed) },
  },
};

export function line(label, stroke, extra = {}) {
  return { label, stroke, width: 1.5, spanGaps: true, points: { show: false }, value: number(0), ...extra };
}

function markers(group) {
  const colour = GROUP_COLOURS[group];
  return {
    label: group,
    stroke: colour,
    fill: colour,
    paths: () => null,
    points: { show: true, size: 8, space: 0, fill: colour, stroke: "#fff", width: 1 },
    value: number(0),
  };
}

// Weight updates, drawn on every time chart as a shaded span per engine from its pause to its
// resume (a weights decision is made as the engine resumes; its figures say how long it was
// paused), a line at the resume; hovering a span shows its decisions' reasons. Keyed by the
// decision's id, so a decision seen live and again in a backfill is one span.
export const weightSpans = new Map();
const SPAN_FILL = "rgba(193, 21, 116, 0.10)";
const SPAN_ALERT_FILL = "rgba(209, 52, 47, 0.18)";
const SPAN_HOVER_PX = 4;

export function addWeightSpan(d) {
  const end = Date.parse(d.at) / 1000;
  const paused = Number(d.figures?.seconds);
  weightSpans.set(d.id, {
    start: end - (Number.isFinite(paused) && paused > 0 ? paused : 0),
    end,
    engine: d.engine || "",
    reason: d.reason,
    alert: Boolean(d.alert),
  });
  while (weightSpans.size > 500) weightSpans.delete(weightSpans.keys().next().value);
}

function weightSpansPlugin() {
  let tip = null;
  return {
    hooks: {
      init: (u) => {
        tip = document.createElement("div");
        tip.className = "span-tip";
        tip.hidden = true;
        u.over.append(tip);
      },
      drawClear: (u) => {
        const { left, top, width, height } = u.bbox;
        const ctx = u.ctx;
        ctx.save();
        ctx.beginPath();
        ctx.rect(left, top, width, height);
        ctx.clip();
        for (const span of weightSpans.values()) {
          const x0 = u.valToPos(span.start, "x", true);
          const x1 = u.valToPos(span.end, "x", true);
          if (x1 < left || x0 > left + width) continue;
          ctx.fillStyle = span.alert ? SPAN_ALERT_FILL : SPAN_FILL;
          ctx.fillRect(x0, top, Math.max(x1 - x0, 1), height);
          ctx.strokeStyle = span.alert ? GROUP_COLOURS.cut : GROUP_COLOURS.weights;
          ctx.lineWidth = devicePixelRatio;
          ctx.setLineDash([3 * devicePixelRatio, 3 * devicePixelRatio]);
          ctx.beginPath();
          ctx.moveTo(Math.round(x1) + 0.5, top);
          ctx.lineTo(Math.round(x1) + 0.5, top + height);
          ctx.stroke();
        }
        ctx.restore();
      },
      setCursor: (u) => {
        const x = u.cursor.left;
        const hits = [];
        if (x !== undefined && x !== null && x >= 0) {
          for (const span of weightSpans.values()) {
            const x0 = u.valToPos(span.start, "x");
            const x1 = u.valToPos(span.end, "x");
            if (x >= x0 - SPAN_HOVER_PX && x <= x1 + SPAN_HOVER_PX) hits.push(span);
          }
        }
        tip.hidden = hits.length === 0;
        if (!hits.length) return;
        tip.replaceChildren(...hits.map((span) => Object.assign(document.createElement("div"), {
          textContent: span.reason, className: span.alert ? "alert" : "",
        })));
        const flip = x > u.over.clientWidth / 2;
        tip.style.left = flip ? "" : `${x + 10}px`;
        tip.style.right = flip ? `${u.over.clientWidth - x + 10}px` : "";
      },
    },
  };
}

// A chart that follows its container's width, with the given series after the x axis (see
// X_AXES); wall-time charts also show the weight updates.
export function chart(element, series, { x = "time", yRange, bands, axis = {}, scales = {}, axes = [] } = {}) {
  const options = {
    width: Math.max(300, element.clientWidth),
    height: HEIGHT,
    scales: {
      x: { time: x === "time" },
      y: yRange ? { range: yRange } : { range: (u, low, high) => [0, Math.max(1, high * 1.1)] },
      ...scales,
    },
    series: [X_AXES[x].series, ...series],
    axes: [X_AXES[x].axis, { size: 56, ...axis }, ...axes],
    bands,
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
    plugins: x === "time" ? [weightSpansPlugin()] : [],
  };
  const plot = new uPlot(options, [[], ...series.map(() => [])], element);
  new ResizeObserver(() => plot.setSize({ width: Math.max(300, element.clientWidth), height: HEIGHT })).observe(element);
  return plot;
}

// Cap (stepped), the policy's shadow cap while a pin holds, in-flight train and eval, the
// pool's ceiling while the run shares its engines (stepped), and a marker per decision at the
// cap it set. Columns: see CAP_FIELDS.
export const CAP_FIELDS = ["cap", "shadow", "inflight_train", "inflight_eval", "ceiling", ...MARKER_GROUPS.map((g) => `m_${g}`)];
export function capChart(element) {
  return chart(element, [
    line("cap", "#1b3a6b", { width: 2.5, paths: stepped() }),
    line("policy's cap (shadow)", "#8a3ffc", { width: 2, dash: [6, 4], paths: stepped(), spanGaps: false }),
    line("in flight: train", "#2e9e44"),
    line("in flight: eval", "#d98c00"),
    line("pool ceiling", GROUP_COLOURS.share, { width: 2, dash: [2, 3], paths: stepped(), spanGaps: false }),
    ...MARKER_GROUPS.map(markers),
  ]);
}

// Max KV usage over the engines, each engine's, and the policy's trim and shed lines with
// bands above them. Columns: kv_max, kv:<engine>..., then the three constant lines.
export function kvFields(engines) {
  return ["kv_max", ...engines.map((e) => `kv:${e}`), "line_trim", "line_shed", "line_top"];
}
export function kvChart(element, engines) {
  const series = [
    line("max KV", "#b42318", { width: 2.5, value: percent }),
    ...engines.map((e, i) => line(e, ENGINE_COLOURS[i % ENGINE_COLOURS.length], { width: 1, value: percent })),
    line("trim", "#d98c00", { dash: [4, 4], width: 1, value: percent }),
    line("shed", "#d1342f", { dash: [4, 4], width: 1, value: percent }),
    line("", "transparent", { class: "band-edge", value: percent }),
  ];
  const trim = series.length - 2;
  return chart(element, series, {
    yRange: [0, 1.02],
    axis: percentAxis,
    bands: [
      { series: [trim + 1, trim], fill: "rgba(217, 140, 0, 0.12)" },
      { series: [trim + 2, trim + 1], fill: "rgba(209, 52, 47, 0.14)" },
    ],
  });
}

export const QUEUE_FIELDS = ["running", "waiting", "waiting_capacity"];
export function queueChart(element) {
  return chart(element, [
    line("running", "#1f77b4"),
    line("waiting", "#d98c00"),
    line("waiting for capacity", "#d1342f"),
  ]);
}

export function singleChart(element, label, colour, { digits = 1, ratio = false } = {}) {
  const value = ratio ? percent : number(digits);
  const options = ratio ? { yRange: [0, 1], axis: percentAxis } : {};
  return chart(element, [line(label, colour, { value })], options);
}

// Per written step: the batch's mean reward with a band of one standard deviation either
// side, and the policy version the step was written under, stepped, on its own axis at the
// right. Columns: see REWARD_FIELDS.
export const REWARD_FIELDS = ["reward_mean", "reward_high", "reward_low", "policy_version"];
export function rewardChart(element) {
  const meanValue = (u, v, si, idx) => {
    if (v === null || v === undefined) return "–";
    const high = idx === null || idx === undefined ? null : u.data[2][idx];
    return typeof high === "number" ? `${v.toFixed(3)} ± ${(high - v).toFixed(3)}` : v.toFixed(3);
  };
  const rewardRange = (u, low, high) => {
    if (low === null || high === null) return [0, 1];
    const pad = Math.max(high - low, 0.1) * 0.08;
    return [Math.min(0, low - pad), high + pad];
  };
  const versionRange = (u, low, high) => {
    if (low === null || high === null) return [0, 1];
    return [Math.max(-0.25, low - 0.25), Math.max(high + 0.25, low + 1)];
  };
  const reward = "#2e9e44";
  return chart(element, [
    line("mean reward ± std", reward, { width: 2, value: meanValue, points: { show: true, size: 5, fill: reward } }),
    line("", "rgba(46, 158, 68, 0.35)", { width: 1, class: "band-edge" }),
    line("", "rgba(46, 158, 68, 0.35)", { width: 1, class: "band-edge" }),
    line("policy version", "#8a3ffc", { width: 2, paths: stepped(), scale: "v", points: { show: true, size: 5, fill: "#8a3ffc" }, value: (u, v) => (v === null || v === undefined ? "–" : `v${v}`) }),
  ], {
    x: "step",
    yRange: rewardRange,
    axis: { values: (u, splits) => splits.map((v) => v.toFixed(2)) },
    bands: [{ series: [2, 3], fill: "rgba(46, 158, 68, 0.14)" }],
    scales: { v: { range: versionRange } },
    axes: [{
      scale: "v", side: 1, size: 44, stroke: "#8a3ffc", grid: { show: false },
      incrs: STEP_INCRS,
      values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? `v${v}` : "")),
    }],
  });
}

export function stepsChart(element) {
  return chart(element, [line("seconds", "#1b3a6b", { value: number(2), points: { show: true, size: 4 } })], { x: "step" });
}

// Redraws at most once a frame however many events arrive in it.
export function scheduler(draw) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      draw();
    });
  };
}
