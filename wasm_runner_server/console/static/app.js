// The console: sign in with a key, then sessions, a session's page (session.js), artifacts, the team
// (team.js) and usage (usage.js). Routes live in the URL fragment (#/sessions, #/session/<id>[/file/<path>],
// #/artifacts, #/team, #/usage); the key never does: it is exchanged at sign-in for an HttpOnly cookie (see
// api.js). Keyboard: Ctrl/Cmd+Enter runs the cell, `?` shows the shortcuts, `g s` / `g a` / `g t` / `g u`
// go to the sessions / artifacts / team / usage.

import { ApiError, api, credentials, el } from "./api.js";
import { renderArtifacts } from "./artifacts.js";
import { networkBadge, profileBadge, sessionView, stateBadge } from "./session.js";
import { renderTeam } from "./team.js";
import { renderUsage } from "./usage.js";

const view = document.getElementById("view");
const main = document.getElementById("main");
const signIn = document.getElementById("sign-in");
const nav = document.getElementById("nav");
const help = document.getElementById("help");

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
    await credentials.signIn({ key });
  } catch (error) {
    document.getElementById("sign-in-error").textContent = String(error.message || error);
    return;
  }
  document.getElementById("sign-in-error").textContent = "";
  location.hash = "#/sessions";
  route();
});

function when(iso) {
  return el("time", { datetime: iso, title: new Date(iso).toLocaleString() }, new Date(iso).toLocaleString());
}

async function sessionsView() {
  const [{ sessions }, { starters }] = await Promise.all([api("/v1/sessions?limit=500"), api("/v1/starters")]);
  // a new session starts empty, or from a web starter installed on this server (its node_modules ready)
  const startFrom = el("select", { id: "start-from", title: "what the new session starts with" },
    el("option", { value: "" }, "Empty workspace"),
    ...starters.filter((s) => s.ready).map((s) => el("option", { value: s.name, title: s.description },
                                                     `${s.name} (dev server on ${s.port})`)));
  const create = el("button", { type: "button", id: "new-session", class: "btn primary" }, "+ New session");
  create.addEventListener("click", async () => {
    const info = await api("/v1/sessions", { method: "POST", json: startFrom.value ? { starter: startFrom.value } : {} });
    location.hash = `#/session/${encodeURIComponent(info.id)}`;
  });
  const rows = sessions.map((s) => el("tr", { "data-session": s.id },
    el("td", {}, el("a", { href: `#/session/${encodeURIComponent(s.id)}`, class: "session-link mono" }, s.id)),
    el("td", {}, profileBadge(s.profile)), el("td", {}, stateBadge(s.state)), el("td", {}, networkBadge(s.egress)),
    el("td", { class: "num" }, String(s.executions)), el("td", {}, when(s.created_at)), el("td", {}, when(s.expires_at))));
  view.replaceChildren(
    el("div", { class: "page-head" }, el("h2", {}, "Sessions"),
       el("span", { class: "sub" }, `${sessions.length} in this workspace`), el("span", { class: "spacer" }), startFrom, create),
    sessions.length
      ? el("div", { class: "table-wrap" }, el("table", { class: "sessions" },
          el("thead", {}, el("tr", {}, ...["Session", "Profile", "State", "Network", "Runs", "Created", "Expires"]
            .map((h) => el("th", { class: h === "Runs" ? "num" : null }, h)))),
          el("tbody", {}, ...rows)))
      : el("div", { class: "card empty" }, el("strong", {}, "No sessions yet"),
           el("span", {}, "A session is a workspace with files, kernels and a terminal. Create one to start.")));
}

async function artifactsView() {
  const box = el("div");
  view.replaceChildren(el("div", { class: "page-head" }, el("h2", {}, "Artifacts"),
                          el("span", { class: "sub" }, "files published out of sessions, kept past them")), box);
  await renderArtifacts(box);
}

async function route() {
  const signedIn = credentials.signedIn;
  signIn.hidden = signedIn;
  nav.hidden = !signedIn;
  document.getElementById("workspace").textContent = signedIn && credentials.workspace ? credentials.workspace : "";
  view.runCell = null;
  if (!signedIn) { main.classList.remove("wide"); view.replaceChildren(); return; }
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const page = parts[0] === "session" && parts[1] ? "session"
    : ["artifacts", "team", "usage"].includes(parts[0]) ? parts[0] : "sessions";
  main.classList.toggle("wide", page === "session");
  for (const [id, name] of [["nav-sessions", "sessions"], ["nav-artifacts", "artifacts"], ["nav-team", "team"],
                            ["nav-usage", "usage"]]) {
    const link = document.getElementById(id);
    if (page === name || (page === "session" && name === "sessions")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  try {
    view.replaceChildren(el("p", { class: "hint" }, "Loading…"));
    if (page === "session") {
      const path = parts[2] === "file" ? decodeURIComponent(parts.slice(3).join("/")) : null;
      await sessionView(view, decodeURIComponent(parts[1]), path);
    } else if (page === "artifacts") {
      await artifactsView();
    } else if (page === "team") {
      await renderTeam(view);
    } else if (page === "usage") {
      await renderUsage(view);
    } else {
      await sessionsView();
    }
    view.dataset.ready = location.hash;
  } catch (error) {
    showError(error);
  }
}

// -- keyboard ----------------------------------------------------------------------------------------

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName)
    || target.closest(".terminal-screen") !== null);
}

let pendingG = false;
document.getElementById("help-open").addEventListener("click", () => help.showModal());
document.getElementById("help-close").addEventListener("click", () => help.close());
document.addEventListener("keydown", (event) => {
  if ((event.ctrlKey || event.metaKey) && event.key === "Enter") {
    if (view.runCell && credentials.signedIn) { event.preventDefault(); view.runCell(); }
    return;
  }
  if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target) || document.querySelector("dialog[open]")) return;
  if (event.key === "?" && credentials.signedIn) { event.preventDefault(); help.showModal(); return; }
  const pages = { s: "#/sessions", a: "#/artifacts", t: "#/team", u: "#/usage" };
  if (pendingG && credentials.signedIn && pages[event.key]) location.hash = pages[event.key];
  pendingG = event.key === "g";
});

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
  window.addEventListener("hashchange", async () => { await signInByLink(); await route(); });
  await signInByLink();
  await route();
}

// A sign-in link (`wasm-runner console`): its token is used once, and taken out of the address bar and
// the history at once.
async function signInByLink() {
  const link = /^#sign-in=([A-Za-z0-9_-]{16,128})$/.exec(location.hash);
  if (!link) return;
  history.replaceState(null, "", location.pathname + "#/sessions");
  try {
    await credentials.signIn({ link: link[1] });
    document.getElementById("sign-in-error").textContent = "";
  } catch (error) {  // (one already signed in stays so)
    document.getElementById("sign-in-error").textContent = String(error.message || error);
  }
}

start();
