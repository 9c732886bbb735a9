// Usage: what the workspace used (or, without usage.read, what the caller's own calls used) per unit and
// per day, this month's budgets where the role may read them, and the rows as CSV.

import { ApiError, api, credentials, el } from "./api.js";

const UNITS = { executions: "executions", cpu_seconds: "CPU s", wall_seconds: "wall s", process_seconds: "process s",
                byte_hours: "byte-hours", egress_bytes: "egress bytes" };

function amount(value) {
  return Number.isInteger(value) ? value.toLocaleString() : value.toLocaleString(undefined, { maximumFractionDigits: 2 });
}

async function budgets() {
  try {
    const state = await api(`/v1/admin/workspaces/${encodeURIComponent(credentials.workspace)}/budgets`);
    if (state.budgets.length === 0) return el("p", { class: "hint" }, "No budget is set for this workspace.");
    return el("table", { class: "budgets" },
      el("thead", {}, el("tr", {}, ...["Unit", "Used this month", "Budget"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...state.budgets.map((b) => el("tr", { "data-budget": b.unit }, el("td", {}, UNITS[b.unit] || b.unit),
        el("td", { class: "num" }, amount(b.used)), el("td", { class: "num" }, amount(b.budget))))));
  } catch (error) {
    if (error instanceof ApiError && error.status === 403) return el("p", { class: "hint" }, "Budgets need usage.read.");
    throw error;
  }
}

async function downloadCsv() {
  const response = await api("/v1/usage?group_by=day&format=csv", { raw: true });
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: "usage.csv" });
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export async function renderUsage(view) {
  const [units, days] = await Promise.all([api("/v1/usage?group_by=unit"), api("/v1/usage?group_by=day")]);
  const csv = el("button", { type: "button", class: "btn", id: "usage-csv" }, "Download CSV");
  csv.addEventListener("click", downloadCsv);
  const totals = units.entries.length
    ? el("table", { class: "usage-units" },
        el("thead", {}, el("tr", {}, el("th", {}, "Unit"), el("th", { class: "num" }, "Total"))),
        el("tbody", {}, ...units.entries.map((e) => el("tr", { "data-unit": e.unit }, el("td", {}, UNITS[e.unit] || e.unit),
                                                        el("td", { class: "num" }, amount(e.amount))))))
    : el("p", { class: "hint" }, "Nothing used yet.");
  const daily = el("table", { class: "usage-days" },
    el("thead", {}, el("tr", {}, ...["Day (UTC)", "Unit", "Amount"].map((h) => el("th", { class: h === "Amount" ? "num" : null }, h)))),
    el("tbody", {}, ...days.entries.map((e) => el("tr", {}, el("td", {}, e.day), el("td", {}, UNITS[e.unit] || e.unit),
                                                   el("td", { class: "num" }, amount(e.amount))))));
  view.replaceChildren(
    el("div", { class: "page-head" }, el("h2", {}, "Usage"), el("span", { class: "sub" }, "executions, time, storage and egress"),
       el("span", { class: "spacer" }), csv),
    el("h3", {}, "Totals"), totals, el("h3", {}, "This month's budgets"), await budgets(),
    el("h3", {}, "Per day"), days.entries.length ? el("div", { class: "table-wrap" }, daily) : el("p", { class: "hint" }, "No days yet."));
}
