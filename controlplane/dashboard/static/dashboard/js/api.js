// The REST API as the dashboard's pages call it: the session cookie signs requests in, and
// every write carries Django's CSRF token. Errors keep the API's body ({detail, errors}).

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.detail || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

export function csrfToken() {
  const found = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
  return found ? decodeURIComponent(found.slice("csrftoken=".length)) : "";
}

async function answer(response) {
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { detail: text.slice(0, 300) };
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  return answer(response);
}

export async function post(url, body, contentType = "application/json") {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": contentType, Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: typeof body === "string" ? body : JSON.stringify(body),
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
