// The session's terminal: xterm.js over the PTY WebSocket (GET /v1/sessions/{id}/pty, framing in the
// README: binary frames carry terminal bytes, text frames JSON control messages). A browser cannot send
// the key on a WebSocket, so the console first asks, with the key, for a terminal link that lives a
// minute (POST /v1/sessions/{id}/pty:presign) and opens the socket on it: the key never enters a URL.
// Links the guest prints (OSC 8 hyperlinks) open only through `linkHandler` below.

import { Terminal } from "/console/vendor/xterm.mjs";
import { api, el, sessionPath, visible } from "./api.js";

const COLS = 100;
const ROWS = 12; // with FONT_SIZE, fits the bottom panel of the session page whole
const FONT_SIZE = 13;

export function renderTerminal(container, sessionId) {
  const open = el("button", { type: "button", class: "btn primary small terminal-open" }, "Open a terminal");
  const close = el("button", { type: "button", class: "btn small terminal-close", hidden: true }, "Close");
  const status = el("span", { class: "hint terminal-status" });
  const screen = el("div", { class: "terminal-screen" });
  const prompt = el("div", { class: "link-prompt", role: "alert", hidden: true });
  container.replaceChildren(el("div", { class: "toolbar" }, open, close, status), prompt, screen);
  let socket = null;

  open.addEventListener("click", async () => {
    open.disabled = true;
    status.textContent = "opening…";
    try {
      const link = await api(sessionPath(sessionId, "pty:presign"), { method: "POST", json: {} });
      socket = connect(link.url, screen, status, linkHandler(prompt), () => {
        open.disabled = false;
        close.hidden = true;
        container.dataset.state = "closed";
      });
      close.hidden = false;
      container.dataset.state = "open";
    } catch (error) {
      status.textContent = String(error.message || error);
      open.disabled = false;
    }
  });
  close.addEventListener("click", () => { if (socket) socket.close(); });
}

// A guest's link is its text, not ours: the console shows its full target and opens it only when the
// user says so, in a new browsing context with no opener (no access to this page, no copy of its
// session storage) and no referrer. Links to the console's own origin are refused: there, a page
// would be this origin's document (a guest preview, an SVG) acting as the console.
export function linkHandler(prompt) {
  const show = (...children) => { prompt.replaceChildren(...children); prompt.hidden = false; };
  const cancel = el("button", { type: "button", class: "btn small link-cancel", onclick: () => { prompt.hidden = true; } }, "Cancel");
  return {
    allowNonHttpProtocols: false,
    activate(event, text) {
      let target;
      try { target = new URL(text); } catch { target = null; }
      if (!target || !["http:", "https:"].includes(target.protocol)) {
        show(el("span", { class: "link-refused" }, `not opened: ${visible(text)} is not an http(s) link`), cancel);
      } else if (target.origin === location.origin) {
        show(el("span", { class: "link-refused" }, `not opened: ${visible(target.href)} is on the console's own ` +
             "origin; open it yourself if you trust it"), cancel);
      } else {
        const go = el("button", { type: "button", class: "btn small primary link-open", onclick: () => {
          prompt.hidden = true;
          window.open(target.href, "_blank", "noopener,noreferrer");
        } }, "Open");
        show(el("span", {}, "The terminal links to "), el("code", { class: "link-target" }, visible(target.href)),
             el("span", {}, " "), go, cancel);
      }
    },
  };
}

function connect(link, screen, status, links, onClosed) {
  // The link is an absolute ws(s):// URL; a path (a server before links were absolute) is this origin's.
  const url = new URL(link, location.href);
  if (url.protocol === "http:" || url.protocol === "https:") url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.search = `cols=${COLS}&rows=${ROWS}`;
  const socket = new WebSocket(url.toString());
  socket.binaryType = "arraybuffer";
  const terminal = new Terminal({ cols: COLS, rows: ROWS, fontSize: FONT_SIZE, convertEol: false, scrollback: 2000, linkHandler: links });
  const encoder = new TextEncoder();
  screen.replaceChildren();
  terminal.open(screen);
  terminal.onData((data) => { if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
  terminal.onResize(({ cols, rows }) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "resize", cols, rows }));
  });
  socket.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      terminal.write(new Uint8Array(event.data));
      return;
    }
    const message = JSON.parse(event.data);
    if (message.type === "process") {
      status.textContent = `process ${message.id}`;
      screen.dataset.process = message.id;
      terminal.focus();
    } else if (message.type === "exit") {
      status.textContent = `exited (${message.state}, exit code ${message.exit_code})`;
    } else if (message.type === "error") {
      status.textContent = message.message;
    }
  });
  socket.addEventListener("close", () => {
    if (!status.textContent.startsWith("exited")) status.textContent = "closed";
    terminal.options.disableStdin = true;
    onClosed();
  });
  return socket;
}
