// The decision timeline: a row per decision, newest on top, at most maxRows of them; filter
// by kind or to alerts only. Rows are keyed by the decision's database id, so a decision seen
// live and again in a backfill is one row.
import { KIND_GROUPS } from "./charts.js";

const time = (iso) => new Date(iso).toLocaleTimeString([], { hour12: false });

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function capText(d) {
  const cap = d.cap_before === d.cap_after ? `${d.cap_after}` : `${d.cap_before} → ${d.cap_after}`;
  if (d.shadow_after === null || d.shadow_after === undefined) return cap;
  return `${cap} (policy ${d.shadow_before ?? "–"} → ${d.shadow_after})`;
}

export class Timeline {
  constructor({ body, kindSelect, alertsOnly, count, kinds, maxRows = 500 }) {
    this.body = body;
    this.kindSelect = kindSelect;
    this.alertsOnly = alertsOnly;
    this.count = count;
    this.maxRows = maxRows;
    this.rows = []; // [{key: [at ms, id], tr}], newest first
    this.ids = new Set();
    for (const kind of kinds) kindSelect.add(new Option(kind, kind));
    kindSelect.addEventListener("change", () => this.filter());
    alertsOnly.addEventListener("change", () => this.filter());
  }

  has(id) {
    return this.ids.has(id);
  }

  add(d) {
    if (this.ids.has(d.id)) return false;
    const key = [Date.parse(d.at), d.id];
    const tr = document.createElement("tr");
    tr.dataset.id = d.id;
    tr.dataset.kind = d.kind;
    if (d.override !== null && d.override !== undefined) tr.dataset.override = d.override;
    tr.className = `kind-${KIND_GROUPS[d.kind] || "other"}${d.alert ? " alert" : ""}${d.applied === false ? " shadow-only" : ""}`;
    const when = cell(tr, time(d.at), "when");
    when.title = d.at;
    const kind = tr.insertCell();
    kind.innerHTML = `<span class="badge"></span>${d.alert ? ' <span class="alert-flag">alert</span>' : ""}`;
    kind.firstChild.textContent = d.kind;
    cell(tr, capText(d), "cap");
    cell(tr, d.shed ? String(d.shed) : "", "num");
    const reason = cell(tr, d.reason, "reason");
    reason.title = `${d.cause} · signal ${d.signal} · step ${d.step}\n${JSON.stringify(d.figures)}`;
    // Newest first: find the first row older than this one.
    let index = this.rows.findIndex((r) => r.key[0] < key[0] || (r.key[0] === key[0] && r.key[1] < key[1]));
    if (index === -1) index = this.rows.length;
    this.rows.splice(index, 0, { key, tr });
    this.body.insertBefore(tr, this.body.children[index] || null);
    this.ids.add(d.id);
    while (this.rows.length > this.maxRows) {
      const dropped = this.rows.pop();
      dropped.tr.remove();
      this.ids.delete(Number(dropped.tr.dataset.id));
    }
    this.show(tr);
    this.updateCount();
    return true;
  }

  show(tr) {
    const kind = this.kindSelect.value;
    const visible = (!kind || tr.dataset.kind === kind) && (!this.alertsOnly.checked || tr.classList.contains("alert"));
    tr.hidden = !visible;
  }

  filter() {
    for (const { tr } of this.rows) this.show(tr);
    this.updateCount();
  }

  updateCount() {
    const shown = this.rows.filter((r) => !r.tr.hidden).length;
    this.count.textContent = `${shown} shown of the last ${this.rows.length}`;
  }
}
