// The session page's side panels: background processes with their preview links, packages, and
// copies (forks of the session, templates of the workspace). Each renders into its own section and
// can be refreshed on its own.

import { api, bytes, el, sessionPath, visible } from "./api.js";

function section(title, ...tools) {
  const body = el("div", { class: "section-body" });
  const node = el("div", { class: "section" },
                  el("div", { class: "section-head" }, el("h3", {}, title), el("span", { class: "spacer" }), ...tools), body);
  return { node, body };
}

function failure(body, error) {
  body.replaceChildren(el("p", { class: "error" }, String(error.message || error)));
}

// -- processes and their previews ----------------------------------------------------------------

export function processesPanel(sessionId) {
  const refresh = el("button", { type: "button", class: "btn ghost small processes-refresh", title: "Refresh" }, "↻");
  const { node, body } = section("Processes", refresh);
  node.classList.add("processes");
  async function load() {
    try {
      const { processes } = await api(sessionPath(sessionId, "processes"));
      if (processes.length === 0) {
        body.replaceChildren(el("p", { class: "hint" }, "No background processes. Start a dev server from the " +
                                "terminal or the API; its ports get preview links here."));
        return;
      }
      body.replaceChildren(el("ul", { class: "list" }, ...processes.map((p) => processRow(sessionId, p))));
    } catch (error) { failure(body, error); }
  }
  refresh.addEventListener("click", load);
  return { node, load };
}

function processRow(sessionId, process) {
  const label = visible(process.name || process.argv.join(" "));
  const links = el("span", { class: "preview-links" });
  for (const port of process.ports || []) {
    const button = el("button", { type: "button", class: "btn small preview-open", "data-port": String(port) },
                      `Preview :${port}`);
    button.addEventListener("click", async () => {
      try {
        const link = await api(sessionPath(sessionId, "ports", `${port}:presign`), { method: "POST", json: {} });
        // the preview lives on an origin of its own; opened with no opener and no referrer
        const anchor = el("a", { href: link.url, target: "_blank", rel: "noopener noreferrer", class: "preview-link" },
                          `open :${port} ↗`);
        button.replaceWith(anchor);
      } catch (error) { button.textContent = String(error.message || error); }
    });
    links.append(button);
  }
  return el("li", { "data-process": process.id },
            el("span", { class: `badge process-${process.state}` }, process.state),
            el("code", { class: "grow", title: label }, `${process.id} ${label}`), links);
}

// -- packages ----------------------------------------------------------------------------------------

export function packagesPanel(sessionId) {
  const { node, body } = section("Packages");
  node.classList.add("packages");
  const input = el("input", { type: "text", class: "package-name", placeholder: "requests==2.32.3",
                              "aria-label": "Python requirement", spellcheck: "false" });
  const install = el("button", { type: "button", class: "btn small package-install" }, "Install");
  const note = el("p", { class: "hint package-status" });
  const list = el("div");
  body.append(el("div", { class: "toolbar", style: "padding:0" }, input, install), note, list);
  async function load() {
    try {
      const lock = await api(sessionPath(sessionId, "packages"));
      const packages = lock.python || [];
      list.replaceChildren(packages.length === 0 ? el("p", { class: "hint" }, "No packages installed.")
        : el("ul", { class: "list" }, ...packages.map((p) => el("li", {}, el("code", { class: "grow" }, visible(p.name)),
                                                                el("span", { class: "hint" }, visible(p.version))))));
    } catch (error) { failure(list, error); }
  }
  async function submit() {
    const requirement = input.value.trim();
    if (!requirement) return;
    install.disabled = true;
    note.textContent = `installing ${requirement}…`;
    try {
      const result = await api(sessionPath(sessionId, "packages"), { method: "POST", json: { python: [requirement] } });
      note.textContent = result.ok ? "installed" : (result.error ? result.error.message : "not installed");
      if (result.ok) input.value = "";
      await load();
    } catch (error) { note.textContent = String(error.message || error); }
    install.disabled = false;
  }
  install.addEventListener("click", submit);
  input.addEventListener("keydown", (event) => { if (event.key === "Enter") submit(); });
  return { node, load };
}

// -- forks and templates -------------------------------------------------------------------------

export function copiesPanel(sessionId) {
  const fork = el("button", { type: "button", class: "btn small fork-session" }, "Fork");
  const { node, body } = section("Snapshots & forks", fork);
  node.classList.add("copies");
  const forks = el("ul", { class: "list forks" });
  const name = el("input", { type: "text", class: "template-name", placeholder: "template name",
                             "aria-label": "template name", spellcheck: "false" });
  const save = el("button", { type: "button", class: "btn small template-save" }, "Save as template");
  const note = el("p", { class: "hint copies-status" });
  const templates = el("div");
  body.append(el("p", { class: "hint" }, "A fork is a new session with this one's files, packages, network " +
                    "policy and kernel state. A template keeps them for new sessions."),
              forks, el("div", { class: "toolbar", style: "padding:0" }, name, save), note, templates);
  fork.addEventListener("click", async () => {
    fork.disabled = true;
    try {
      const result = await api(`${sessionPath(sessionId)}:fork`, { method: "POST", json: { count: 1 } });
      for (const child of result.sessions) {
        forks.append(el("li", {}, el("span", { class: "hint" }, "forked →"),
                        el("a", { href: `#/session/${encodeURIComponent(child.id)}`, class: "fork-link" }, child.id)));
      }
      note.textContent = result.failed.length ? `${result.failed.length} copy failed: ${result.failed[0].error}` : "";
    } catch (error) { note.textContent = String(error.message || error); }
    fork.disabled = false;
  });
  save.addEventListener("click", async () => {
    if (!name.value.trim()) { note.textContent = "name the template first"; return; }
    save.disabled = true;
    try {
      const record = await api("/v1/templates", { method: "POST", json: { session: sessionId, name: name.value.trim() } });
      note.textContent = `saved template ${visible(record.name)}`;
      await load();
    } catch (error) { note.textContent = String(error.message || error); }
    save.disabled = false;
  });
  async function load() {
    try {
      const list = (await api("/v1/templates")).templates;
      templates.replaceChildren(list.length === 0 ? el("p", { class: "hint" }, "No templates in this workspace.")
        : el("ul", { class: "list templates" }, ...list.map((t) => el("li", {}, el("code", { class: "grow" }, visible(t.name)),
                                                                       el("span", { class: "hint" }, bytes(t.bytes))))));
    } catch (error) { failure(templates, error); }
  }
  return { node, load };
}
