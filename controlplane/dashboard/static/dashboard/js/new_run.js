// The New run page: a TOML or JSON editor prefilled from an example config, engines ticked
// from the registered ones, and the API's field errors drawn at the lines that set them.
import { ApiError, post } from "./api.js";
import { lineOf } from "./config_lines.js";

const page = JSON.parse(document.getElementById("page-data").textContent);
const $ = (id) => document.getElementById(id);
const editor = $("config");
const backdrop = $("editor-backdrop");
const exampleSelect = $("example");
const formatSelect = $("format");
const boxes = [...document.querySelectorAll('input[name="engine"]')];
let errors = []; // [[path, messages]] from the last refusal

const escape = (text) => text.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);

// The backdrop repeats the text under the transparent textarea, with each line that an error
// names marked and its messages written after it, on that line.
function paint() {
  const text = editor.value;
  const format = formatSelect.value;
  const marks = new Map();
  const unplaced = [];
  for (const [path, messages] of errors) {
    const line = lineOf(text, format, path, messages);
    const note = `${path || "config"}: ${messages.join(" ")}`;
    if (line === null) unplaced.push(note);
    else marks.set(line, [...(marks.get(line) || []), note]);
  }
  backdrop.innerHTML = text.split("\n").map((raw, line) => {
    const notes = marks.get(line);
    if (!notes) return escape(raw);
    return `<mark class="err-line" data-line="${line + 1}">${escape(raw)}</mark><span class="err-msg">  ◀ ${escape(notes.join(" · "))}</span>`;
  }).join("\n") + "\n";
  backdrop.scrollTop = editor.scrollTop;
  backdrop.scrollLeft = editor.scrollLeft;
  const list = $("field-errors");
  list.replaceChildren(...errors.map(([path, messages]) => {
    const item = document.createElement("li");
    const line = lineOf(text, format, path, messages);
    item.textContent = `${path || "config"}${line === null ? "" : ` (line ${line + 1})`}: ${messages.join(" ")}`;
    if (line !== null) item.addEventListener("click", () => selectLine(line));
    return item;
  }));
  const box = $("form-error");
  box.hidden = unplaced.length === 0;
  box.textContent = unplaced.join(" · ");
}

function selectLine(line) {
  const lines = editor.value.split("\n");
  const start = lines.slice(0, line).reduce((n, l) => n + l.length + 1, 0);
  editor.focus();
  editor.setSelectionRange(start, start + lines[line].length);
}

// -- engines: the ticked registered engines become the config's engine list ----------------

function tomlWithEngines(text, names) {
  const kept = [];
  let inEngine = false;
  for (const line of text.split("\n")) {
    const header = line.trim().match(/^\[\[?([^\]]+)\]\]?/);
    if (header) inEngine = header[1].trim() === "engine" || header[1].trim().startsWith("engine.");
    if (!inEngine) kept.push(line);
  }
  while (kept.length && kept[kept.length - 1].trim() === "") kept.pop();
  const blocks = names.map((name) => `[[engine]]\nname = ${JSON.stringify(name)}`);
  return `${kept.join("\n")}\n\n${blocks.join("\n")}\n`;
}

function enginesNamed(text, format) {
  if (format === "json") {
    try {
      return (JSON.parse(text).engine || []).map((e) => e.name).filter(Boolean);
    } catch {
      return [];
    }
  }
  const names = [];
  let inEngine = false;
  for (const line of text.split("\n")) {
    const header = line.trim().match(/^\[\[?([^\]]+)\]\]?/);
    if (header) inEngine = header[1].trim() === "engine";
    const name = inEngine && line.match(/^\s*name\s*=\s*"([^"]*)"/);
    if (name) names.push(name[1]);
  }
  return names;
}

function pickEngines() {
  const names = boxes.filter((b) => b.checked).map((b) => b.value);
  if (formatSelect.value === "json") {
    try {
      const document_ = JSON.parse(editor.value);
      document_.engine = names.map((name) => ({ name }));
      editor.value = `${JSON.stringify(document_, null, 2)}\n`;
    } catch {
      errors = [["", ["the JSON does not parse: fix it before picking engines"]]];
    }
  } else {
    editor.value = tomlWithEngines(editor.value, names);
  }
  paint();
}

function load() {
  const example = page.examples[exampleSelect.value];
  editor.value = formatSelect.value === "json" ? `${example.json}\n` : example.toml;
  const named = new Set(enginesNamed(editor.value, formatSelect.value));
  for (const box of boxes) box.checked = named.has(box.value);
  errors = [];
  $("create-status").textContent = "";
  paint();
}

async function create(event) {
  event.preventDefault();
  const status = $("create-status");
  const button = $("create");
  button.disabled = true;
  status.textContent = "checking the config and the engines…";
  const contentType = formatSelect.value === "json" ? "application/json" : "application/toml";
  try {
    const run = await post(page.api.runs, editor.value, contentType);
    status.textContent = `run ${run.id} created`;
    location.assign(page.run_url.replace("/0/", `/${run.id}/`));
  } catch (error) {
    const fields = error instanceof ApiError ? Object.entries(error.body.errors || {}) : [];
    errors = fields.length ? fields : [["", [error.message]]];
    status.textContent = `refused: ${error.message}`;
    button.disabled = false;
    paint();
  }
}

exampleSelect.value = page.examples[page.default_example] ? page.default_example : exampleSelect.value;
exampleSelect.addEventListener("change", load);
formatSelect.addEventListener("change", load);
for (const box of boxes) box.addEventListener("change", pickEngines);
editor.addEventListener("input", paint);
editor.addEventListener("scroll", () => {
  backdrop.scrollTop = editor.scrollTop;
  backdrop.scrollLeft = editor.scrollLeft;
});
$("new-run").addEventListener("submit", create);
load();
