// The API as the console calls it: the key from this tab's session storage, sent as a header only.

const KEY = "wasm-runner-key";

export const credentials = {
  get key() { return sessionStorage.getItem(KEY); },
  get signedIn() { return sessionStorage.getItem(KEY) !== null; },
  set(key) { sessionStorage.setItem(KEY, key); },
  clear() { sessionStorage.removeItem(KEY); },
};

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status} ${detail.code || ""}: ${detail.message || ""}${detail.hint ? "\n" + detail.hint : ""}`);
    this.status = status;
    this.code = detail.code;
  }
}

export function segment(path) {
  return path.split("/").map(encodeURIComponent).join("/");
}

export function sessionPath(id, ...rest) {
  return ["/v1/sessions", encodeURIComponent(id), ...rest].join("/");
}

// fetch with the key; JSON in and out unless `raw` (then the Response itself).
export async function api(path, { method = "GET", json, body, headers = {}, raw = false, signal } = {}) {
  const sent = new Headers(headers);
  if (credentials.key) sent.set("Authorization", `Bearer ${credentials.key}`);
  if (json !== undefined) {
    sent.set("Content-Type", "application/json");
    body = JSON.stringify(json);
  }
  const response = await fetch(path, { method, headers: sent, body, signal, credentials: "omit", cache: "no-store",
                                       referrerPolicy: "no-referrer" });
  if (!response.ok) {
    let detail = { message: response.statusText };
    try { detail = (await response.json()).error || detail; } catch { /* not the JSON error shape */ }
    throw new ApiError(response.status, detail);
  }
  return raw ? response : response.json();
}

export async function fileBytes(sessionId, path) {
  const response = await api(sessionPath(sessionId, "files", segment(path)), { raw: true });
  return new Uint8Array(await response.arrayBuffer());
}

// Server-sent events of a streaming response, as {event, data} objects.
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
      }
      yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
