// A cell that runs Python, JavaScript or bash in the session, its output streamed as it is written
// into `output` (the Output tab of the session page). `run()` is what the Run button and Ctrl/Cmd+Enter call.

import { api, el, events, sessionPath } from "./api.js";

export function execCell(sessionId, { output, onStart, onDone } = {}) {
  const language = el("select", { "aria-label": "language", class: "cell-language" },
                      el("option", { value: "python" }, "Python"), el("option", { value: "javascript" }, "JavaScript"),
                      el("option", { value: "bash" }, "bash (native)"));
  const code = el("textarea", { class: "cell", "aria-label": "code", spellcheck: "false",
                                placeholder: "print('hello')   — Ctrl+Enter runs" });
  const out = output || el("pre", { class: "output", "aria-live": "polite" });
  const status = el("span", { class: "hint cell-status" });
  const runButton = el("button", { type: "button", class: "btn primary run", title: "Run (Ctrl+Enter)" }, "▶ Run");
  let running = false;

  async function run() {
    if (running) return;
    running = true;
    runButton.disabled = true;
    out.replaceChildren();
    status.textContent = "running…";
    status.className = "hint cell-status";
    if (onStart) onStart();
    let stderr = "";
    try {
      const response = await api(sessionPath(sessionId, "exec"), {
        method: "POST", json: { code: code.value, language: language.value },
        headers: { Accept: "text/event-stream" }, raw: true,
      });
      for await (const { event, data } of events(response)) {
        if (event === "stdout" || event === "stderr") {
          if (event === "stderr") stderr += data.text;
          out.append(el("span", { class: event }, data.text));
        } else if (event === "result") {
          status.textContent = describe(data);
          status.className = `cell-status ${data.exit_code === 0 && !data.error ? "status-ok" : "status-bad"}`;
          // A traceback already streamed ends with the error's line: print it only when it was not.
          const line = data.error ? `${data.error.type}: ${data.error.message}` : null;
          if (line && !stderr.trimEnd().endsWith(line)) out.append(el("span", { class: "stderr" }, `${line}\n`));
          if (data.value !== null && data.value !== undefined) out.append(el("span", { class: "value" }, `${data.value}\n`));
        } else if (event === "error") {
          status.textContent = `error: ${data.error ? data.error.message : "failed"}`;
          status.className = "cell-status status-bad";
        }
      }
    } catch (error) {
      status.textContent = String(error.message || error);
      status.className = "cell-status status-bad";
    } finally {
      running = false;
      runButton.disabled = false;
      if (onDone) onDone();
    }
  }

  runButton.addEventListener("click", run);
  const box = el("div", { class: "cell-box" },
                 el("div", { class: "toolbar" }, language, runButton,
                    el("span", { class: "hint" }, el("kbd", {}, "Ctrl"), " + ", el("kbd", {}, "Enter")),
                    el("span", { class: "spacer" }), status),
                 code);
  return { box, output: out, status, run };
}

function describe(result) {
  const parts = [`exit ${result.exit_code}`, `${Math.round(result.duration_ms)} ms`];
  if (result.limit) parts.push(`limit: ${result.limit}`);
  if (result.kernel_restarted) parts.push("kernel restarted");
  return parts.join(" · ");
}
