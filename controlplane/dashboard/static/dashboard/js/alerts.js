// The Alerts page: add and remove rules through the API (the page then reloads from the
// server, which renders the tables), and the open conditions and deliveries refreshed every
// few seconds (the rules only change from here, or another operator's reload shows them).
import { ApiError, post, remove } from "./api.js";

const REFRESH_MS = 5000;
const page = JSON.parse(document.getElementById("page-data").textContent);
const form = document.getElementById("new-rule");

function say(text) {
  const box = document.getElementById("rule-error");
  box.hidden = !text;
  box.textContent = text;
}

function describe(error) {
  if (!(error instanceof ApiError)) return String(error);
  const fields = Object.entries(error.body.errors || {}).map(([path, messages]) => `${path}: ${messages.join(" ")}`);
  return [error.message, ...fields].join(" · ");
}

form?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = new FormData(form);
  const body = { name: data.get("name"), url: data.get("url"), body_format: data.get("body_format") };
  const kinds = data.getAll("kinds");
  if (kinds.length) body.kinds = kinds;
  const run = String(data.get("run") || "").trim();
  if (run) body.run = /^\d+$/.test(run) ? Number(run) : run;
  try {
    await post(page.api.rules, body);
    location.reload();
  } catch (error) {
    say(`Rule not added: ${describe(error)}`);
  }
});

for (const button of document.querySelectorAll(".remove-rule")) {
  button.addEventListener("click", async () => {
    try {
      await remove(button.dataset.url);
      location.reload();
    } catch (error) {
      say(`Rule not removed: ${describe(error)}`);
    }
  });
}

async function refresh() {
  const response = await fetch(location.href, { credentials: "same-origin" });
  if (!response.ok || response.redirected) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const section of document.querySelectorAll("section.refreshed")) {
    const replacement = fresh.getElementById(section.id);
    if (replacement) section.replaceWith(replacement);
  }
}

setInterval(() => refresh().catch(() => {}), REFRESH_MS);
