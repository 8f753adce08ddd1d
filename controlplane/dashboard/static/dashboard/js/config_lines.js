// Where in the editor's text a field error belongs: the API names fields by path
// ("concurrency.pacer.trim_kv_usage", "env[0].args.turns"); this finds the line that sets
// that field, or the nearest enclosing table or key that is written down. Presentation
// only: the server's checks decide what is wrong, this only decides where to say it.

function parsePath(path) {
  const parts = [];
  for (const match of path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)) {
    parts.push(match[2] !== undefined ? Number(match[2]) : match[1]);
  }
  return parts;
}
const key = (parts) => JSON.stringify(parts);

// -- TOML: table headers, arrays of tables, dotted keys and inline tables on one line ------

function splitKey(text) {
  return text.split(".").map((part) => part.trim().replace(/^"(.*)"$/, "$1"));
}

function tomlLines(text) {
  const found = new Map();
  const arrays = new Map(); // header path -> count of [[tables]] so far
  let table = [];
  const resolve = (names) => {
    const parts = [];
    for (const name of names) {
      parts.push(name);
      const count = arrays.get(key(parts));
      if (count !== undefined) parts.push(count - 1);
    }
    return parts;
  };
  text.split("\n").forEach((raw, line) => {
    const code = raw.replace(/#.*$/, "").trim(); // a '#' inside a string is rare in configs
    let header = code.match(/^\[\[([^\]]+)\]\]$/);
    if (header) {
      const names = splitKey(header[1]);
      const parent = resolve(names.slice(0, -1));
      const base = key([...parent, names[names.length - 1]]);
      arrays.set(base, (arrays.get(base) || 0) + 1);
      table = [...parent, names[names.length - 1], arrays.get(base) - 1];
      found.set(key(table), line);
      return;
    }
    header = code.match(/^\[([^\]]+)\]$/);
    if (header) {
      table = resolve(splitKey(header[1]));
      found.set(key(table), line);
      return;
    }
    const pair = code.match(/^([A-Za-z0-9_."-]+)\s*=\s*(.*)$/);
    if (!pair) return;
    const at = [...table, ...splitKey(pair[1])];
    found.set(key(at), line);
    inlineKeys(pair[2], at, line, found);
  });
  return found;
}

// Keys inside an inline table ({ a = 1, b = { c = 2 } }) all sit on the key's own line.
function inlineKeys(value, at, line, found) {
  const stack = [at];
  let current = null;
  for (const token of value.matchAll(/([A-Za-z0-9_]+)\s*=|(\{)|(\})/g)) {
    if (token[1]) {
      current = [...stack[stack.length - 1], token[1]];
      found.set(key(current), line);
    } else if (token[2] && current) {
      stack.push(current);
    } else if (token[3] && stack.length > 1) {
      stack.pop();
    }
  }
}

// -- JSON: a small scanner that notes the line of each member and array element -----------

function jsonLines(text) {
  const found = new Map();
  let i = 0;
  let line = 0;
  const space = () => {
    while (i < text.length && /\s/.test(text[i])) {
      if (text[i] === "\n") line += 1;
      i += 1;
    }
  };
  const string = () => {
    let out = "";
    i += 1;
    while (i < text.length && text[i] !== '"') {
      if (text[i] === "\\") i += 1;
      out += text[i];
      i += 1;
    }
    i += 1;
    return out;
  };
  const value = (at) => {
    space();
    found.set(key(at), line);
    if (text[i] === "{") {
      i += 1;
      for (space(); i < text.length && text[i] !== "}"; space()) {
        if (text[i] === ",") { i += 1; continue; }
        if (text[i] !== '"') return;
        const name = string();
        space();
        if (text[i] !== ":") return;
        i += 1;
        value([...at, name]);
      }
      i += 1;
    } else if (text[i] === "[") {
      i += 1;
      for (let index = 0; ; index += 1) {
        space();
        if (i >= text.length || text[i] === "]") break;
        if (text[i] === ",") { i += 1; index -= 1; continue; }
        value([...at, index]);
      }
      i += 1;
    } else if (text[i] === '"') {
      string();
    } else {
      while (i < text.length && !/[\s,\]}]/.test(text[i])) i += 1;
    }
  };
  value([]);
  return found;
}

// The 0-based line for ``path``, or null when nothing on the way there is written down.
export function lineOf(text, format, path, messages = []) {
  const parse = messages.join(" ").match(/line (\d+)/);
  if ((path === "" || path === "body") && parse) return Number(parse[1]) - 1;
  const found = format === "json" ? jsonLines(text) : tomlLines(text);
  const parts = parsePath(path);
  for (let length = parts.length; length > 0; length -= 1) {
    const line = found.get(key(parts.slice(0, length)));
    if (line !== undefined) return line;
  }
  return null;
}
