// The Pools page: the runs that share engines now, one card per pool, read from the API
// every few seconds (the claims it reads are renewed at every poll of each run).
import { errorWords, getJSON } from "./api.js";

const REFRESH_MS = 3000;
const page = JSON.parse(document.getElementById("page-data").textContent);
const $ = (id) => document.getElementById(id);

function element(tag, { className, text, title } = {}, children = []) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  if (title) node.title = title;
  node.append(...children);
  return node;
}

const cell = (text, className) => element("td", { className, text: String(text) });
const host = (url) => url.replace(/^https?:\/\//, "");

// The run's part of the pool's level: a bar, and what it holds in flight as a darker part
// of it.
function shareCell(run, level) {
  if (!level || run.ceiling === null) return cell("–", "share");
  const part = (n) => `${Math.min(100, (100 * n) / level).toFixed(1)}%`;
  const bar = element("span", { className: "share-bar" }, [
    element("span", { className: "share-ceiling" }),
    element("span", { className: "share-inflight" }),
  ]);
  bar.children[0].style.width = part(run.ceiling);
  bar.children[1].style.width = part(Math.min(run.inflight, run.ceiling));
  const title = `part ${run.ceiling} of ${level}; ${run.inflight} in flight (${part(run.inflight)})`;
  return element("td", { className: "share", title }, [bar, element("span", { className: "num", text: part(run.ceiling) })]);
}

function runRow(run, pool) {
  const link = element("a", { text: `${run.name} #${run.id}` });
  link.href = page.run_url.replace("/0/", `/${run.id}/`);
  const leads = run.id === pool.leader;
  const name = element("td", {}, [link]);
  if (leads) name.append(" ", element("span", { className: "badge leader", text: "sizes the pool", title: "hosted on the pool longest: its controller sizes the pool's level, the others hold their parts of it" }));
  if (run.overdue) name.append(" ", element("span", { className: "badge overdue", text: "overdue", title: `its host has not renewed its claim since ${new Date(run.updated_at).toLocaleTimeString([], { hour12: false })}: it may be dead, its episodes aborted. The pool's leader does not grow the level or judge its throughput until the claim is renewed or left out.` }));
  const row = element("tr", {}, [
    name,
    cell(run.weight, "num"),
    cell(run.priority, "num"),
    cell(run.demand, "num"),
    cell(run.inflight, "num"),
    cell(run.footprint === null ? "–" : Math.round(run.footprint).toLocaleString(), "num footprint"),
    cell(run.ceiling ?? "–", "num ceiling"),
    shareCell(run, pool.level),
  ]);
  row.dataset.run = run.id;
  if (leads) row.dataset.leader = "";
  return row;
}

function poolCard(pool) {
  const heads = ["Run", "Share", "Priority", "Demand", "In flight", "KV / episode", "Part", "Part of the pool"];
  const table = element("table", { className: "runs pool-runs" }, [
    element("thead", {}, [element("tr", {}, heads.map((h, i) => element("th", { className: i && i < 7 ? "num" : "", text: h })))]),
    element("tbody", {}, pool.runs.map((run) => runRow(run, pool))),
  ]);
  const inflight = pool.runs.reduce((total, run) => total + run.inflight, 0);
  const card = element("section", { className: "card pool" }, [
    element("h2", { text: pool.engines.map(host).join(", ") }),
    element("p", { className: "figures" }, [
      element("span", {}, ["level ", element("b", { className: "level", text: pool.level })]),
      element("span", {}, ["in flight ", element("b", { text: inflight })]),
      element("span", {}, ["runs ", element("b", { text: pool.runs.length })]),
    ]),
    element("div", { className: "table-scroll" }, [table]),
  ]);
  card.dataset.engines = pool.engines.join(" ");
  return card;
}

function setStatus(status, text) {
  const box = $("pools-status");
  box.dataset.status = status;
  box.textContent = text;
}

async function refresh() {
  let pools;
  try {
    pools = await getJSON(page.api.pools);
  } catch (error) {
    $("pools-error").hidden = false;
    $("pools-error").textContent = `The pools could not be read: ${errorWords(error)}.`;
    setStatus("reconnecting", "not updated");
    return;
  }
  $("pools-error").hidden = true;
  $("no-pools").hidden = pools.length > 0;
  $("pools").replaceChildren(...pools.map(poolCard));
  setStatus("live", `updated ${new Date().toLocaleTimeString([], { hour12: false })}`);
}

refresh();
setInterval(refresh, REFRESH_MS);
