// The REST API as the dashboard's pages call it: the session cookie signs requests in, and
// every write carries Django's CSRF token. Errors keep the API's body ({detail, errors}); an
// answer that is not the API's JSON (a proxy's error page, a debug page) is never shown,
// only what answered and how, and a server that cannot be reached is said so.

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.detail || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

// An error in words: the API's messages for the fields it refused (a 400), else what it
// said (a 409's detail, "the server could not be reached").
export function errorWords(error) {
  if (!(error instanceof ApiError)) return String(error);
  const messages = Object.values(error.body.errors || {}).flat();
  return messages.length ? messages.join(" ") : error.message;
}

export function csrfToken() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return found ? decodeURIComponent(found.slice("csrftoken=".length)) : "";
}

async function answer(response) {
  const text = await response.text();
  let body;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    const status = [response.status, response.statusText].filter(Boolean).join(" ");
    throw new ApiError(response.status, { detail: `the server answered ${status}, not with the API's answer` });
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

async function send(url, options) {
  try {
    return await fetch(url, options);
  } catch {
    throw new ApiError(0, { detail: "the server could not be reached" });
  }
}

export async function getJSON(url) {
  const response = await send(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  return answer(response);
}

export async function post(url, body, contentType = "application/json") {
  const response = await send(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": contentType, Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return answer(response);
}

export async function remove(url) {
  const response = await send(url, {
    method: "DELETE",
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
  });
  return answer(response);
}

// Every page of a cursor-paginated list, oldest first; stops after maxPages so a tab can
// never page through a week of decisions at once.
export async function getAllPages(url, maxPages = 20) {
  const rows = [];
  let next = url;
  for (let page = 0; next && page < maxPages; page++) {
    const body = await getJSON(next);
    rows.push(...body.results);
    next = body.next;
  }
  return rows;
}

export function withQuery(url, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return text ? `${url}${url.includes("?") ? "&" : "?"}${text}` : url;
}
