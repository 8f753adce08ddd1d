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
};
export const GROUP_COLOURS = {
  start: "#2f6fd1", grow: "#2e9e44", trim: "#d98c00", cut: "#d1342f",
  operator: "#8a3ffc", stale: "#7a7a7a", other: "#138a8a",
};
export const MARKER_GROUPS = Object.keys(GROUP_COLOURS);
const ENGINE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"];
const HEIGHT = 220;

const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });
const stepped = () => uPlot.paths.stepped({ align: 1 });
const number = (digits) => (u, v) => (v === null || v === undefined ? "–" : v.toFixed(digits));
const percent = (u, v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);

function line(label, stroke, extra = {}) {
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

// A chart that follows its container's width, with the given series after the x axis.
function chart(element, series, { time = true, yRange, bands, axis = {} } = {}) {
  const options = {
    width: Math.max(300, element.clientWidth),
    height: HEIGHT,
    scales: { x: { time }, y: yRange ? { range: yRange } : { range: (u, low, high) => [0, Math.max(1, high * 1.1)] } },
    series: [{ label: time ? "time" : "step", value: time ? "{HH}:{mm}:{ss}" : undefined }, ...series],
    axes: [time ? { space: 70, values: (u, splits) => splits.map(clock) } : {}, { size: 56, ...axis }],
    bands,
    legend: { live: true },
    cursor: { drag: { x: true, y: false } },
  };
  const plot = new uPlot(options, [[], ...series.map(() => [])], element);
  new ResizeObserver(() => plot.setSize({ width: Math.max(300, element.clientWidth), height: HEIGHT })).observe(element);
  return plot;
}

// Cap (stepped), the policy's shadow cap while a pin holds, in-flight train and eval, and a
// marker per decision at the cap it set. Columns: see CAP_FIELDS.
export const CAP_FIELDS = ["cap", "shadow", "inflight_train", "inflight_eval", ...MARKER_GROUPS.map((g) => `m_${g}`)];
export function capChart(element) {
  return chart(element, [
    line("cap", "#1b3a6b", { width: 2.5, paths: stepped() }),
    line("policy's cap (shadow)", "#8a3ffc", { width: 2, dash: [6, 4], paths: stepped(), spanGaps: false }),
    line("in flight: train", "#2e9e44"),
    line("in flight: eval", "#d98c00"),
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
  const axis = { values: (u, splits) => splits.map((v) => `${Math.round(v * 100)}%`) };
  return chart(element, series, {
    yRange: [0, 1.02],
    axis,
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
  const options = ratio
    ? { yRange: [0, 1], axis: { values: (u, splits) => splits.map((v) => `${Math.round(v * 100)}%`) } }
    : {};
  return chart(element, [line(label, colour, { value })], options);
}

export function stepsChart(element) {
  return chart(element, [line("seconds", "#1b3a6b", { value: number(2), points: { show: true, size: 4 } })], { time: false });
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
