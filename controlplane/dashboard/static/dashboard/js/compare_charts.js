// The compare page's charts: one series per run in the run's own colour, on an x axis of
// seconds since each run's start (or of steps). Built on the run page's chart machinery.
import { chart, line, number, percent, percentAxis, stepped } from "./charts.js";

const label = (run) => `${run.name} #${run.id}`;
// Earlier runs are drawn wider, under the later ones: two runs with the same figures (the
// same reward, say) show as a line inside a line rather than one hiding the other.
const width = (runs, run) => 1.5 + (runs.length - 1 - runs.indexOf(run));

// Each run's cap (stepped) and a marker per decision at the cap it set. Columns: for each
// run, its cap then its markers.
export function capChart(element, runs) {
  const series = runs.flatMap((run) => [
    line(label(run), run.colour, { width: width(runs, run), paths: stepped() }),
    {
      label: `${label(run)}: decisions`,
      stroke: run.colour,
      fill: run.colour,
      paths: () => null,
      points: { show: true, size: 7, space: 0, fill: run.colour, stroke: "#fff", width: 1 },
      value: number(0),
    },
  ]);
  return chart(element, series, { x: "elapsed" });
}

// One line per run. ``x`` is "elapsed" or "step"; ``ratio`` draws 0..100 %; ``points`` marks
// each value (steps, which are few).
export function runsChart(element, runs, { x = "elapsed", digits = 1, ratio = false, points = false, yRange } = {}) {
  const value = ratio ? percent : number(digits);
  const series = runs.map((run) => line(label(run), run.colour, {
    value,
    width: width(runs, run),
    ...(points ? { points: { show: true, size: 3 + 2 * width(runs, run), fill: run.colour } } : {}),
  }));
  if (ratio) return chart(element, series, { x, yRange: [0, 1.02], axis: percentAxis });
  return chart(element, series, { x, yRange });
}
