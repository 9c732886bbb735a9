// The session's terminal (xterm.js over the processes API's PTY WebSocket) joins here once that API is
// served; until then this view says so. `renderTerminal(container, sessionId)` is the one entry point.

import { el } from "./api.js";

export function renderTerminal(container) {
  container.replaceChildren(el("p", { class: "hint terminal-pending" },
    "The terminal needs the processes API's PTY WebSocket, which this server does not serve yet."));
}
