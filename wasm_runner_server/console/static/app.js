// The console: sign in with a key, then sessions, a session's files and their views, a code cell,
// artifacts. Routes live in the URL fragment (#/sessions, #/session/<id>[/file/<path>], #/artifacts);
// the key never does: it is exchanged at sign-in for an HttpOnly cookie (see api.js).

import { ApiError, api, bytes, credentials, el, sessionPath, visible } from "./api.js";
import { publish, renderArtifacts } from "./artifacts.js";
import { execCell } from "./exec.js";
import { renderPreview } from "./preview.js";
import { renderTerminal } from "./terminal.js";

const view = document.getElementById("view");
const signIn = document.getElementById("sign-in");
const nav = document.getElementById("nav");

function showError(error) {
  view.append(el("p", { class: "error", role: "alert" }, String(error.message || error)));
  if (error instanceof ApiError && (error.status === 401 || error.code === "csrf_refused")) signOut();
}

function signOut() {
  credentials.forget();
  location.hash = "";
  route();
}

document.getElementById("sign-out").addEventListener("click", async () => {
  await credentials.signOut();
  signOut();
});
document.getElementById("sign-in-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = document.getElementById("key");
  const key = input.value.trim();
  input.value = "";
  try {
    await credentials.signIn(key);
  } catch (error) {
    document.getElementById("sign-in-error").textContent = String(error.message || error);
    return;
  }
  document.getElementById("sign-in-error").textContent = "";
  location.hash = "#/sessions";
  route();
});

async function sessionsView() {
  const { sessions } = await api("/v1/sessions?limit=500");
  const create = el("button", { type: "button", id: "new-session" }, "New session");
  create.addEventListener("click", async () => {
    const info = await api("/v1/sessions", { method: "POST", json: {} });
    location.hash = `#/session/${encodeURIComponent(info.id)}`;
  });
  const rows = sessions.map((s) => el("tr", { "data-session": s.id },
    el("td", {}, el("a", { href: `#/session/${encodeURIComponent(s.id)}`, class: "session-link" }, s.id)),
    el("td", {}, s.profile), el("td", {}, s.state), el("td", {}, String(s.executions)),
    el("td", {}, new Date(s.created_at).toLocaleString()), el("td", {}, new Date(s.expires_at).toLocaleString())));
  view.replaceChildren(el("h2", {}, "Sessions"), el("div", { class: "toolbar" }, create),
    sessions.length ? el("table", { class: "sessions" },
      el("thead", {}, el("tr", {}, ...["id", "profile", "state", "runs", "created", "expires"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows)) : el("p", { class: "hint" }, "No sessions yet."));
}

async function sessionView(sessionId, path) {
  const tree = el("ul", { class: "tree", "aria-label": "files" });
  const preview = el("div", { class: "preview-pane" });
  const side = el("div", { class: "side" });
  const artifactsBox = el("div", { class: "session-artifacts" });
  const terminalBox = el("div", { class: "terminal" });
  const refresh = async () => {
    const listing = await api(sessionPath(sessionId, "files") + "?recursive=true&limit=2000");
    tree.replaceChildren(...listing.entries.map((entry) => {
      const depth = entry.path.split("/").length - 1;
      const label = visible(entry.path.split("/").pop()) + (entry.type === "directory" ? "/" : "");
      const item = entry.type === "file"
        ? el("button", { type: "button", class: "file", "data-path": entry.path,
                         title: visible(entry.path),
                         onclick: () => { location.hash = `#/session/${encodeURIComponent(sessionId)}/file/${encodeURIComponent(entry.path)}`; } }, label)
        : el("span", { class: entry.type }, label);
      return el("li", { style: `padding-left:${depth}rem` }, item,
                el("span", { class: "meta" }, entry.type === "file" ? bytes(entry.size) : "", " ",
                   new Date(entry.mtime).toLocaleString()));
    }));
    await renderArtifacts(artifactsBox, sessionId);
  };
  view.replaceChildren(
    el("h2", {}, "Session ", el("code", {}, sessionId)),
    el("div", { class: "layout" },
       el("div", {}, el("h3", {}, "Files"), tree),
       el("div", {}, side, preview)),
    el("h3", {}, "Run"), execCell(sessionId, refresh),
    el("h3", {}, "Artifacts of this session"), artifactsBox,
    el("h3", {}, "Terminal"), terminalBox);
  renderTerminal(terminalBox, sessionId);
  await refresh();
  if (path) {
    const note = el("input", { type: "text", class: "note", placeholder: "note", "aria-label": "artifact note" });
    const button = el("button", { type: "button", class: "publish" }, "Publish as artifact");
    const published = el("span", { class: "hint published" });
    button.addEventListener("click", async () => {
      try {
        const artifact = await publish(sessionId, path, note.value);
        published.textContent = `published ${visible(artifact.name)} (${artifact.id})`;
        await renderArtifacts(artifactsBox, sessionId);
      } catch (error) { published.textContent = String(error.message || error); }
    });
    side.replaceChildren(el("div", { class: "toolbar" }, el("strong", { class: "file-name" }, visible(path)), note, button,
                            published));
    await renderPreview(preview, sessionId, path);
  } else {
    preview.replaceChildren(el("p", { class: "hint" }, "Choose a file."));
  }
}

async function artifactsView() {
  const box = el("div");
  view.replaceChildren(el("h2", {}, "Artifacts"), box);
  await renderArtifacts(box);
}

async function route() {
  const signedIn = credentials.signedIn;
  signIn.hidden = signedIn;
  nav.hidden = !signedIn;
  if (!signedIn) { view.replaceChildren(); return; }
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  try {
    view.replaceChildren(el("p", { class: "hint" }, "Loading…"));
    if (parts[0] === "session" && parts[1]) {
      const path = parts[2] === "file" ? decodeURIComponent(parts.slice(3).join("/")) : null;
      await sessionView(decodeURIComponent(parts[1]), path);
    } else if (parts[0] === "artifacts") {
      await artifactsView();
    } else {
      await sessionsView();
    }
    view.dataset.ready = location.hash;
  } catch (error) {
    showError(error);
  }
}

// A service worker of this origin (registered by guest content served here) could read or rewrite
// every request of this page: the console unregisters it and sends nothing.
async function start() {
  const workers = navigator.serviceWorker;
  if (workers && workers.controller) {
    for (const registration of await workers.getRegistrations()) await registration.unregister();
    signIn.hidden = true;
    view.replaceChildren(el("p", { class: "error", role: "alert", id: "service-worker-refused" },
      "A service worker controls this page, so the console will not run: it has been unregistered. " +
      "Close every tab of this site and open the console again."));
    return;
  }
  window.addEventListener("hashchange", route);
  await route();
}

start();
