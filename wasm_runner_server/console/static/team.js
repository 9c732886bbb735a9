// The team: the workspace's members and their roles (set here, each change audited by the API), and its
// roles with the permissions each holds (custom roles made from the permission tree, and deleted, here).
// A role without members.read / roles.read sees why the page is empty, not an error.

import { ApiError, api, el, visible } from "./api.js";

function refused(error, what) {
  if (error instanceof ApiError && error.status === 403) {
    return el("div", { class: "card empty", id: "team-refused" }, el("strong", {}, `Your role does not let you ${what}`),
              el("span", {}, error.message));
  }
  throw error;
}

function head() {
  return el("div", { class: "page-head" }, el("h2", {}, "Team"),
            el("span", { class: "sub" }, "members, their roles, and what each role may do"));
}

export async function renderTeam(view) {
  let members, roles;
  try {
    [members, roles] = await Promise.all([api("/v1/admin/members"), api("/v1/admin/roles")]);
  } catch (error) {
    view.replaceChildren(head(), refused(error, "see the team (members.read, roles.read)"));
    return;
  }
  const status = el("p", { class: "error", role: "alert", id: "team-error" });
  const fail = (error) => { status.textContent = String(error.message || error); };
  const names = roles.roles.map((r) => r.name);
  const memberRows = members.members.map((m) => {
    const select = el("select", { class: "role-select", "aria-label": `role of ${m.member}` },
                      ...names.map((n) => el("option", { value: n, selected: n === m.role ? "" : null }, n)));
    select.addEventListener("change", async () => {
      try {
        await api(`/v1/admin/members/${encodeURIComponent(m.member)}`, { method: "PUT", json: { role: select.value } });
      } catch (error) { select.value = m.role; fail(error); return; }
      await renderTeam(view);
    });
    return el("tr", { "data-member": m.member }, el("td", { class: "mono" }, visible(m.member)), el("td", {}, select),
              el("td", { class: "hint" }, m.assigned ? "given" : "the default"));
  });
  const roleRows = roles.roles.map((r) => {
    let action = el("span", { class: "hint" }, r.builtin ? "built in" : `held by ${r.holders.length}`);
    if (!r.builtin && r.holders.length === 0) {
      action = el("button", { type: "button", class: "btn small danger delete-role" }, "Delete");
      action.addEventListener("click", async () => {
        try { await api(`/v1/admin/roles/${encodeURIComponent(r.name)}`, { method: "DELETE" }); } catch (error) { fail(error); return; }
        await renderTeam(view);
      });
    }
    return el("tr", { "data-role": r.name }, el("td", { class: "mono" }, visible(r.name)), el("td", {}, r.description),
              el("td", { class: "permissions" }, r.permissions.join(", ")), el("td", {}, r.holders.map(visible).join(", ")),
              el("td", {}, action));
  });
  const name = el("input", { id: "role-name", placeholder: "e.g. auditor", spellcheck: "false", required: "" });
  const description = el("input", { id: "role-description", placeholder: "what it is for" });
  const boxes = roles.permissions.map((p) => el("label", { class: "permission", title: p.description },
                                                el("input", { type: "checkbox", value: p.name }), ` ${p.name}`));
  const form = el("form", { id: "role-create", class: "card" }, el("h3", {}, "New role"),
                  el("label", { class: "field" }, "Name ", name), el("label", { class: "field" }, "Description ", description),
                  el("div", { class: "permissions-grid" }, ...boxes),
                  el("button", { type: "submit", class: "btn primary" }, "Create role"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const permissions = boxes.map((b) => b.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
    try {
      await api("/v1/admin/roles", { method: "POST", json: { name: name.value.trim(), permissions, description: description.value } });
    } catch (error) { fail(error); return; }
    await renderTeam(view);
  });
  view.replaceChildren(head(), status,
    el("h3", {}, "Members"),
    memberRows.length
      ? el("div", { class: "table-wrap" }, el("table", { class: "members" },
          el("thead", {}, el("tr", {}, ...["Member", "Role", "Role source"].map((h) => el("th", {}, h)))), el("tbody", {}, ...memberRows)))
      : el("p", { class: "hint" }, "No members yet: a member appears once a key names them."),
    el("h3", {}, "Roles"),
    el("div", { class: "table-wrap" }, el("table", { class: "roles" },
      el("thead", {}, el("tr", {}, ...["Role", "Description", "Permissions", "Held by", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...roleRows))),
    form);
}
