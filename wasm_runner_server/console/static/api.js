// The API as the console calls it. The key is exchanged once (POST /v1/console/session) for an
// HttpOnly cookie no script can read and a CSRF token that this page keeps in memory only and sends
// as X-CSRF-Token on every call: another page of this origin (a guest's preview) gets the cookie
// attached to its requests too, but not the token, so the cookie alone does nothing. The server gives
// the token out once, so a reload signs in again. Nothing is put in any storage.

const SESSION = "/v1/console/session";
let state = null; // {workspace, kind, csrf_token, expires_at} while signed in

export const credentials = {
  get signedIn() { return state !== null; },
  get workspace() { return state ? state.workspace : null; },
  // `{key}`, or `{link}`: a sign-in link's token (`wasm-runner console`), which signs in once.
  async signIn(proof) {
    const response = await fetch(SESSION, { method: "POST", credentials: "same-origin", cache: "no-store",
                                            headers: { "Content-Type": "application/json" },
                                            body: JSON.stringify(proof) });
    if (!response.ok) throw await apiError(response);
    state = await response.json();
  },
  async signOut() {
    const csrf = state ? state.csrf_token : "";
    state = null;
    await fetch(SESSION, { method: "DELETE", credentials: "same-origin", headers: { "X-CSRF-Token": csrf } });
  },
  forget() { state = null; },
};

async function apiError(response) {
  let detail = { message: response.statusText };
  try { detail = (await response.json()).error || detail; } catch { /* not the JSON error shape */ }
  return new ApiError(response.status, detail);
}

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

// fetch with the console's cookie and its CSRF token; JSON in and out unless `raw` (then the Response).
export async function api(path, { method = "GET", json, body, headers = {}, raw = false, signal } = {}) {
  const sent = new Headers(headers);
  if (state) sent.set("X-CSRF-Token", state.csrf_token);
  if (json !== undefined) {
    sent.set("Content-Type", "application/json");
    body = JSON.stringify(json);
  }
  const response = await fetch(path, { method, headers: sent, body, signal, credentials: "same-origin",
                                       cache: "no-store", referrerPolicy: "no-referrer" });
  if (!response.ok) throw await apiError(response);
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

// A name as text that shows what it is: control and bidi characters (which can hide or reorder what
// follows, `rtl-\u202egnp.exe` reading as `rtl-exe.png`) become visible escapes.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]/gu;
const NAMED = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

export function visible(name) {
  return String(name).replace(/\\/g, "\\\\").replace(HIDDEN, (c) => NAMED[c]
    || `\\u${c.codePointAt(0).toString(16).padStart(4, "0")}`);
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
