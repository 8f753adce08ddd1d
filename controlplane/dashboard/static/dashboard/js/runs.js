// The runs list: a uPlot sparkline of each run's recent caps, and the table refreshed every
// few seconds from the same page, so figures stay current without a websocket per run.
/* global uPlot */

const REFRESH_MS = 5000;

function sparkline(element, points) {
  element.replaceChildren();
  if (points.length < 2) {
    element.textContent = points.length ? `cap ${points[0][1]}` : "no decisions yet";
    element.classList.add("muted");
    return;
  }
  const options = {
    width: 140,
    height: 30,
    legend: { show: false },
    cursor: { show: false },
    axes: [{ show: false }, { show: false }],
    scales: { x: { time: true }, y: { range: (u, low, high) => [0, Math.max(1, high * 1.1)] } },
    series: [{}, { stroke: "#1b3a6b", width: 1.5, paths: uPlot.paths.stepped({ align: 1 }), points: { show: false } }],
  };
  new uPlot(options, [points.map((p) => p[0]), points.map((p) => p[1])], element);
}

function drawAll(root) {
  const data = JSON.parse(root.querySelector("#sparklines").textContent);
  for (const element of root.querySelectorAll(".sparkline")) sparkline(element, data[element.dataset.run] || []);
}

async function refresh() {
  const response = await fetch(location.href, { credentials: "same-origin" });
  if (!response.ok || response.redirected) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  const table = fresh.querySelector("#runs");
  const current = document.querySelector("#runs");
  if (!table || !current) return;
  current.tBodies[0].replaceWith(table.tBodies[0]);
  document.querySelector("#sparklines").textContent = fresh.querySelector("#sparklines").textContent;
  drawAll(document);
}

drawAll(document);
setInterval(() => refresh().catch(() => {}), REFRESH_MS);
