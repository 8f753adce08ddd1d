// The runs list: a uPlot sparkline of each run's recent caps, and the table refreshed every
// few seconds from the same page, so figures stay current without a websocket per run. Runs
// ticked for comparison are kept in the tab's session storage, so ticks survive the refresh
// and paging to older runs; Compare opens them (2 to 4) on one page.
/* global uPlot */

const REFRESH_MS = 5000;
const PICKS_KEY = "pacer-compare-runs";
const MIN_PICKS = 2;
const MAX_PICKS = 4;

function picked() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(PICKS_KEY) || "[]");
    return new Set(Array.isArray(stored) ? stored.map(String) : []);
  } catch {
    return new Set();
  }
}

// The checkboxes as the stored picks say, and the button enabled for 2 to 4 of them.
function showPicks() {
  const picks = picked();
  for (const box of document.querySelectorAll(".compare-pick")) box.checked = picks.has(box.value);
  const button = document.getElementById("compare");
  if (!button) return;
  button.disabled = picks.size < MIN_PICKS || picks.size > MAX_PICKS;
  const hint = document.getElementById("compare-hint");
  hint.textContent = picks.size > MAX_PICKS
    ? `${picks.size} runs ticked: compare at most ${MAX_PICKS}`
    : picks.size ? `${picks.size} ticked (${MIN_PICKS} to ${MAX_PICKS})` : `tick ${MIN_PICKS} to ${MAX_PICKS} runs to compare them`;
}

document.addEventListener("change", (event) => {
  if (!event.target.matches(".compare-pick")) return;
  const picks = picked();
  if (event.target.checked) picks.add(event.target.value);
  else picks.delete(event.target.value);
  sessionStorage.setItem(PICKS_KEY, JSON.stringify([...picks]));
  showPicks();
});

document.getElementById("compare")?.addEventListener("click", (event) => {
  const ids = [...picked()].map(Number).sort((a, b) => a - b);
  location.assign(`${event.target.dataset.url}?runs=${ids.join(",")}`);
});

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
  showPicks();
}

drawAll(document);
showPicks();
setInterval(() => refresh().catch(() => {}), REFRESH_MS);
