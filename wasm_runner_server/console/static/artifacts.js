// Artifacts: files published out of a session on purpose; listed, downloaded by a presigned link, deleted.

import { api, bytes, el, sessionPath, visible } from "./api.js";

export async function publish(sessionId, path, note) {
  return api(sessionPath(sessionId, "artifacts"), { method: "POST", json: { path, note } });
}

export async function renderArtifacts(container, sessionId = null) {
  const query = sessionId ? `?session=${encodeURIComponent(sessionId)}` : "";
  const { artifacts } = await api(`/v1/artifacts${query}`);
  if (artifacts.length === 0) {
    container.replaceChildren(el("p", { class: "hint" }, "No artifacts yet: open a file and publish it to keep it past the session."));
    return;
  }
  const rows = artifacts.map((a) => {
    const link = el("span", { class: "link-slot" });
    const download = el("button", { type: "button", class: "btn small download" }, "Get link");
    download.addEventListener("click", async () => {
      const signed = await api(`/v1/artifacts/${encodeURIComponent(a.id)}:presign`, { method: "POST", json: {} });
      link.replaceChildren(el("a", { href: signed.url, class: "artifact-link", download: a.name, rel: "noreferrer" },
                              `download (link valid ${Math.round(signed.expires_in / 60)} min)`));
    });
    const remove = el("button", { type: "button", class: "btn small danger delete" }, "Delete");
    remove.addEventListener("click", async () => {
      await api(`/v1/artifacts/${encodeURIComponent(a.id)}`, { method: "DELETE" });
      await renderArtifacts(container, sessionId);
    });
    return el("tr", { "data-artifact": a.id },
              el("td", { class: "artifact-name" }, visible(a.name)), el("td", { class: "num" }, bytes(a.size)), el("td", {}, a.media_type),
              el("td", {}, visible(a.source_path || "")), el("td", {}, a.note),
              el("td", {}, new Date(a.created_at * 1000).toLocaleString()),
              el("td", {}, a.expires_at ? new Date(a.expires_at * 1000).toLocaleDateString() : "kept"),
              el("td", {}, el("span", { class: "toolbar", style: "padding:0" }, download, link, remove)));
  });
  container.replaceChildren(el("table", { class: "artifacts" },
    el("thead", {}, el("tr", {}, ...["Name", "Size", "Type", "From", "Note", "Published", "Expires", ""].map((h) => el("th", { class: h === "Size" ? "num" : null }, h)))),
    el("tbody", {}, ...rows)));
}
