// A session's page: a header bar (id, profile, state, network policy and its switch, fork and delete),
// then a workbench: the file tree (left), the open file and the code cell (centre), processes, packages
// and copies (right), and a bottom panel with the cell's output, a terminal and the session's artifacts.

import { api, bytes, el, sessionPath, visible } from "./api.js";
import { publish, renderArtifacts } from "./artifacts.js";
import { execCell } from "./exec.js";
import { copiesPanel, packagesPanel, processesPanel } from "./panels.js";
import { renderPreview } from "./preview.js";
import { renderTerminal } from "./terminal.js";

export const NETWORK_LABELS = { deny: "off", open: "public internet", allowlist: "allowlist" };

export function stateBadge(state, extra = "") {
  return el("span", { class: `badge state state-${state} ${extra}`.trim(), title: "session state" }, state);
}

export function networkBadge(egress, extra = "") {
  const mode = (egress && egress.mode) || "deny";
  const detail = mode === "allowlist" ? ` (${egress.allow.length})` : "";
  return el("span", { class: `badge policy-${mode} ${extra}`.trim(), title: `network policy: ${mode}` },
            el("span", { class: "badge-key" }, "network"), `${NETWORK_LABELS[mode] || mode}${detail}`);
}

export function profileBadge(profile, extra = "") {
  return el("span", { class: `badge profile ${extra}`.trim(), title: "profile" }, visible(profile));
}

function confirmDialog(title, message, action) {
  const dialog = el("dialog", { class: "confirm", "aria-label": title });
  const cancel = el("button", { type: "button", class: "btn confirm-cancel" }, "Cancel");
  const ok = el("button", { type: "button", class: "btn danger solid confirm-ok" }, action);
  dialog.append(el("div", { class: "dialog-body" }, el("h2", {}, title), el("p", {}, message)),
                el("div", { class: "dialog-actions" }, cancel, ok));
  document.body.append(dialog);
  return new Promise((resolve) => {
    const done = (answer) => { dialog.close(); dialog.remove(); resolve(answer); };
    cancel.addEventListener("click", () => done(false));
    ok.addEventListener("click", () => done(true));
    dialog.addEventListener("cancel", () => done(false));
    dialog.showModal();
    cancel.focus();
  });
}

function header(sessionId, info) {
  let latest = info; // what the service said last: a refused switch goes back to it
  const bar = el("div", { class: "session-bar", "data-session": sessionId });
  const badges = el("span", { class: "toolbar", style: "padding:0" });
  const select = el("select", { class: "network-switch", "aria-label": "network policy" },
                    el("option", { value: "deny" }, "Network off (deny)"),
                    el("option", { value: "open" }, "Public internet (open)"),
                    el("option", { value: "profile" }, "The profile's policy"));
  const message = el("span", { class: "error network-error", role: "alert" });
  const remove = el("button", { type: "button", class: "btn danger delete-session" }, "Delete");

  function show(current) {
    const mode = current.egress ? current.egress.mode : "deny";
    badges.replaceChildren(profileBadge(current.profile, "session-profile"), stateBadge(current.state, "session-state"),
                           networkBadge(current.egress, "session-network"));
    if (mode === "allowlist" && !select.querySelector("option[value='allowlist']")) {
      select.prepend(el("option", { value: "allowlist", disabled: true }, "Allowlist (set through the API)"));
    }
    select.value = mode;
    bar.dataset.state = current.state;
    bar.dataset.egress = mode;
  }

  select.addEventListener("change", async () => {
    message.textContent = "";
    select.disabled = true;
    try {
      const egress = select.value === "profile" ? null : { mode: select.value };
      const updated = await api(sessionPath(sessionId), { method: "PATCH", json: { egress } });
      latest = updated;
      show(updated);
    } catch (error) {
      message.textContent = String(error.message || error);
      show(latest);
    } finally { select.disabled = false; }
  });
  remove.addEventListener("click", async () => {
    const yes = await confirmDialog("Delete this session?", `Session ${sessionId}: its running code and processes ` +
                                    "stop, its kernels and files are removed. Published artifacts are kept. This " +
                                    "cannot be undone.", "Delete session");
    if (!yes) return;
    remove.disabled = true;
    try {
      await api(sessionPath(sessionId), { method: "DELETE", raw: true });
      location.hash = "#/sessions";
    } catch (error) { message.textContent = String(error.message || error); remove.disabled = false; }
  });
  show(latest);
  bar.append(el("h2", {}, "Session ", el("code", { class: "session-id" }, sessionId)), badges,
             el("span", { class: "network" }, select), message, el("span", { class: "spacer" }), remove);
  return { bar, show: (current) => { latest = current; show(current); } };
}

function tabs(names) {
  const list = el("div", { class: "tabs", role: "tablist" });
  const panels = {};
  const buttons = {};
  const select = (name) => {
    for (const [other, button] of Object.entries(buttons)) {
      button.setAttribute("aria-selected", String(other === name));
      panels[other].hidden = other !== name;
    }
  };
  for (const [name, label] of names) {
    buttons[name] = el("button", { type: "button", role: "tab", id: `tab-${name}`, "aria-controls": `panel-${name}`,
                                   onclick: () => select(name) }, label);
    panels[name] = el("div", { class: "tab-panel", role: "tabpanel", id: `panel-${name}` });
    list.append(buttons[name]);
  }
  select(names[0][0]);
  return { list, panels, select };
}

export async function sessionView(view, sessionId, path) {
  const info = await api(sessionPath(sessionId));
  const tree = el("ul", { class: "tree", "aria-label": "files" });
  const fileCount = el("span", { class: "hint" });
  const fileBar = el("div", { class: "toolbar file-bar" });
  const preview = el("div", { class: "preview-pane" });
  const artifactsBox = el("div", { class: "session-artifacts" });
  const terminalBox = el("div", { class: "terminal" });
  const output = el("pre", { class: "output", "aria-live": "polite" });
  const bottom = tabs([["output", "Output"], ["terminal", "Terminal"], ["artifacts", "Artifacts"]]);
  const processes = processesPanel(sessionId);
  const packages = packagesPanel(sessionId);
  const copies = copiesPanel(sessionId);
  const head = header(sessionId, info);

  const refreshInfo = async () => {
    try { head.show(await api(sessionPath(sessionId))); } catch { /* deleted meanwhile: the next call says so */ }
  };
  const refresh = async () => {
    const listing = await api(sessionPath(sessionId, "files") + "?recursive=true&limit=2000");
    const files = listing.entries.filter((e) => e.type === "file").length;
    fileCount.textContent = `${files} file${files === 1 ? "" : "s"}`;
    tree.replaceChildren(...listing.entries.map((entry) => {
      const depth = entry.path.split("/").length - 1;
      const label = visible(entry.path.split("/").pop()) + (entry.type === "directory" ? "/" : "");
      const item = entry.type === "file"
        ? el("button", { type: "button", class: "file", "data-path": entry.path, title: visible(entry.path),
                         onclick: () => { location.hash = `#/session/${encodeURIComponent(sessionId)}/file/${encodeURIComponent(entry.path)}`; } }, label)
        : el("span", { class: entry.type }, label);
      return el("li", { style: `padding-left:${12 + depth * 14}px`, class: entry.path === path ? "selected" : null },
                item, el("span", { class: "meta", title: new Date(entry.mtime).toLocaleString() },
                         entry.type === "file" ? bytes(entry.size) : ""));
    }));
    if (listing.entries.length === 0) {
      tree.replaceChildren(el("li", { class: "hint" }, "No files yet."));
    }
    await renderArtifacts(artifactsBox, sessionId);
  };
  const cell = execCell(sessionId, {
    output,
    onStart: () => bottom.select("output"),
    onDone: () => { refresh(); processes.load(); refreshInfo(); },
  });
  bottom.panels.output.append(output);
  bottom.panels.terminal.append(terminalBox);
  bottom.panels.artifacts.append(artifactsBox);

  view.replaceChildren(head.bar, el("div", { class: "workbench" },
    el("div", { class: "pane files" },
       el("div", { class: "pane-head" }, el("span", { class: "pane-title" }, "Files"), el("span", { class: "spacer" }), fileCount),
       el("div", { class: "pane-body flush" }, tree)),
    el("div", { class: "pane editor" }, fileBar, preview, cell.box),
    el("div", { class: "pane side" }, el("div", { class: "pane-body flush" }, processes.node, packages.node, copies.node)),
    el("div", { class: "pane panel" }, bottom.list, ...Object.values(bottom.panels))));
  view.runCell = cell.run; // Ctrl/Cmd+Enter (app.js)
  renderTerminal(terminalBox, sessionId);
  await Promise.all([refresh(), processes.load(), packages.load(), copies.load()]);
  if (path) {
    const note = el("input", { type: "text", class: "note", placeholder: "note", "aria-label": "artifact note" });
    const button = el("button", { type: "button", class: "btn publish" }, "Publish as artifact");
    const published = el("span", { class: "hint published" });
    button.addEventListener("click", async () => {
      try {
        const artifact = await publish(sessionId, path, note.value);
        published.textContent = `published ${visible(artifact.name)} (${artifact.id})`;
        await renderArtifacts(artifactsBox, sessionId);
        bottom.select("artifacts");
      } catch (error) { published.textContent = String(error.message || error); }
    });
    fileBar.replaceChildren(el("strong", { class: "file-name" }, visible(path)), el("span", { class: "spacer" }),
                            published, note, button);
    await renderPreview(preview, sessionId, path);
  } else {
    fileBar.replaceChildren(el("span", { class: "hint" }, "No file open"));
    preview.replaceChildren(el("div", { class: "empty" }, el("strong", {}, "Choose a file"),
      el("span", {}, "Pick a file on the left to view it (code with its changes, tables, images, Markdown, PDF), " +
                     "or run code below.")));
  }
}
