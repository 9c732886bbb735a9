// A cell that runs Python, JavaScript or bash in the session, its output streamed as it is written.

import { api, el, events, sessionPath } from "./api.js";

export function execCell(sessionId, onDone) {
  const language = el("select", { "aria-label": "language", class: "cell-language" },
                      el("option", { value: "python" }, "Python"), el("option", { value: "javascript" }, "JavaScript"),
                      el("option", { value: "bash" }, "bash (native)"));
  const code = el("textarea", { class: "cell", "aria-label": "code", spellcheck: "false" });
  const output = el("pre", { class: "output", "aria-live": "polite" });
  const status = el("span", { class: "hint cell-status" });
  const run = el("button", { type: "button", class: "run" }, "Run");
  run.addEventListener("click", async () => {
    run.disabled = true;
    output.replaceChildren();
    status.textContent = "running…";
    try {
      const response = await api(sessionPath(sessionId, "exec"), {
        method: "POST", json: { code: code.value, language: language.value },
        headers: { Accept: "text/event-stream" }, raw: true,
      });
      for await (const { event, data } of events(response)) {
        if (event === "stdout" || event === "stderr") {
          output.append(el("span", { class: event }, data.text));
        } else if (event === "result") {
          status.textContent = describe(data);
          if (data.error) output.append(el("span", { class: "stderr" }, `${data.error.type}: ${data.error.message}\n`));
          if (data.value !== null && data.value !== undefined) output.append(el("span", { class: "value" }, `${data.value}\n`));
        } else if (event === "error") {
          status.textContent = `error: ${data.error ? data.error.message : "failed"}`;
        }
      }
    } catch (error) {
      status.textContent = String(error.message || error);
    } finally {
      run.disabled = false;
      if (onDone) onDone();
    }
  });
  return el("div", { class: "cell-box" }, el("div", { class: "toolbar" }, language, run, status), code, output);
}

function describe(result) {
  const parts = [`exit ${result.exit_code}`, `${Math.round(result.duration_ms)} ms`];
  if (result.limit) parts.push(`limit: ${result.limit}`);
  if (result.kernel_restarted) parts.push("kernel restarted");
  return parts.join(" · ");
}
