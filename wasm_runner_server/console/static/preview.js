// Views of one workspace file. Guest-written bytes are data here: code, tables and diffs are built
// as text (highlight.js and diff2html escape what they render), images go through <img> from a data:
// URL (an SVG there runs no script; no blob: URL of this origin is made of guest bytes, which opened as
// a page would run the guest's script as this origin), Markdown (sanitised by DOMPurify) and HTML are shown in an iframe
// sandboxed without scripts, and XLSX is parsed inside a frame with no origin of its own.

import { api, bytes, el, fileBytes, sessionPath, visible } from "./api.js";

const TABLE_ROWS = 200;
const KINDS = {
  csv: "table", tsv: "table", xlsx: "sheet", png: "image", jpg: "image", jpeg: "image", gif: "image",
  webp: "image", svg: "image", md: "markdown", markdown: "markdown", pdf: "pdf", html: "html", htm: "html",
};
const IMAGE_TYPES = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif",
                      webp: "image/webp", svg: "image/svg+xml" };
const FRAME_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'";

function extension(path) {
  const name = path.split("/").pop();
  const dot = name.lastIndexOf(".");
  return dot === -1 ? "" : name.slice(dot + 1).toLowerCase();
}

export function kindOf(path) {
  return KINDS[extension(path)] || "text";
}

export async function renderPreview(container, sessionId, path) {
  container.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  const data = await fileBytes(sessionId, path);
  const kind = kindOf(path);
  const view = el("div", { class: "preview-body", "data-kind": kind });
  container.replaceChildren(view);
  const render = { table: showTable, sheet: showSheet, image: showImage, markdown: showMarkdown, pdf: showPdf,
                   html: showHtml, text: showText }[kind];
  await render(view, data, path, sessionId);
}

// -- text and code -------------------------------------------------------------------------------

function decode(data) {
  if (data.includes(0)) return null;
  try { return new TextDecoder("utf-8", { fatal: true }).decode(data); } catch { return null; }
}

async function showText(view, data, path, sessionId) {
  const text = decode(data);
  if (text === null) {
    view.append(el("p", { class: "hint" }, `${bytes(data.length)} of binary data`));
    return;
  }
  const code = el("code", { class: "hljs" });
  const language = globalThis.hljs.getLanguage(extension(path)) ? extension(path) : null;
  const result = language ? globalThis.hljs.highlight(text, { language, ignoreIllegals: true })
                          : globalThis.hljs.highlightAuto(text);
  code.innerHTML = result.value; // highlight.js escapes the source text
  view.append(el("pre", { class: "code" }, code));
  await showHistory(view, sessionId, path);
}

async function showHistory(view, sessionId, path) {
  const history = await api(sessionPath(sessionId, "history") + `?path=${encodeURIComponent(path)}`);
  if (history.versions.length === 0) return;
  const panel = el("div", { class: "history" });
  const format = el("select", { "aria-label": "diff layout", onchange: () => draw() },
                    el("option", { value: "line-by-line" }, "unified"),
                    el("option", { value: "side-by-side" }, "side by side"));
  const from = el("select", { "aria-label": "compare from", onchange: () => draw() },
                  el("option", { value: "" }, "the version before"),
                  ...history.versions.map((v) => el("option", { value: String(v.version) },
                                                     `v${v.version} (${v.source}${v.method ? " " + v.method : ""})`)));
  const out = el("div", { class: "diff" });
  panel.append(el("h3", {}, "Changes"),
               el("div", { class: "toolbar" }, el("span", {}, "diff of the file now against"), from, format,
                  history.changed_outside ? el("span", { class: "hint" }, "changed by the guest since the last API write")
                                          : null),
               out);
  view.append(panel);
  async function draw() {
    const query = new URLSearchParams({ path });
    if (from.value) query.set("from_version", from.value);
    const diff = await api(sessionPath(sessionId, "history", "diff") + `?${query}`);
    if (diff.binary) { out.replaceChildren(el("p", { class: "hint" }, "binary: no line diff")); return; }
    if (!diff.diff) { out.replaceChildren(el("p", { class: "hint" }, "no changes")); return; }
    out.innerHTML = globalThis.Diff2Html.html(diff.diff, { drawFileList: false, matching: "lines",
                                                           outputFormat: format.value }); // escapes the lines
  }
  await draw();
}

// -- tables ----------------------------------------------------------------------------------------

function table(rows) {
  const [header = [], ...body] = rows;
  const shown = body.slice(0, TABLE_ROWS);
  const tbody = el("tbody");
  const fill = () => tbody.replaceChildren(...shown.map((row) => el("tr", {}, ...row.map((cell) => el("td", {}, String(cell ?? ""))))));
  let sorted = { column: -1, ascending: true };
  const heads = header.map((name, column) => el("th", { scope: "col", onclick: () => {
    sorted = { column, ascending: sorted.column === column ? !sorted.ascending : true };
    const number = (v) => (v === "" || v === null || v === undefined || isNaN(Number(v)) ? null : Number(v));
    shown.sort((a, b) => {
      const x = a[column] ?? "", y = b[column] ?? "";
      const nx = number(x), ny = number(y);
      const order = nx !== null && ny !== null ? nx - ny : String(x).localeCompare(String(y));
      return sorted.ascending ? order : -order;
    });
    fill();
  } }, String(name ?? "")));
  fill();
  const note = body.length > TABLE_ROWS ? el("p", { class: "hint" }, `the first ${TABLE_ROWS} of ${body.length} rows`)
                                        : el("p", { class: "hint" }, `${body.length} rows`);
  return [el("table", { class: "data" }, el("thead", {}, el("tr", {}, ...heads)), tbody), note];
}

function showTable(view, data, path) {
  const text = decode(data) ?? "";
  const parsed = globalThis.Papa.parse(text, { delimiter: extension(path) === "tsv" ? "\t" : "", skipEmptyLines: true });
  view.append(...table(parsed.data));
}

function showSheet(view, data) {
  // SheetJS parses inside a frame sandboxed to an opaque origin: it never sees the key or this page.
  const frame = el("iframe", { sandbox: "allow-scripts", src: "/console/static/sheet-frame.html", hidden: "",
                               title: "spreadsheet parser" });
  return new Promise((resolve) => {
    const onMessage = (event) => {
      if (event.source !== frame.contentWindow) return;
      if (event.data && event.data.ready) { frame.contentWindow.postMessage(data.buffer, "*", [data.buffer]); return; }
      window.removeEventListener("message", onMessage);
      frame.remove();
      const rows = Array.isArray(event.data && event.data.rows) ? event.data.rows : null;
      if (rows) view.append(...table(rows.map((row) => (Array.isArray(row) ? row.map((c) => String(c ?? "")) : []))));
      else view.append(el("p", { class: "error" }, "this spreadsheet could not be read"));
      resolve();
    };
    window.addEventListener("message", onMessage);
    view.append(frame);
  });
}

// -- images, documents -----------------------------------------------------------------------------

function base64(data) {
  let binary = "";
  for (let i = 0; i < data.length; i += 0x8000) binary += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return btoa(binary);
}

// An SVG is a document: it is drawn once onto a canvas and shown as the PNG of its pixels, so what
// the page holds of it is no longer SVG at all (if the canvas will not give its pixels, the data: SVG
// is shown in <img>, where it runs no script either).
async function rasterised(url) {
  const image = new Image();
  image.src = url;
  try { await image.decode(); } catch { return url; }
  const canvas = document.createElement("canvas");
  canvas.width = Math.min(image.naturalWidth || 300, 4096);
  canvas.height = Math.min(image.naturalHeight || 150, 4096);
  canvas.getContext("2d").drawImage(image, 0, 0, canvas.width, canvas.height);
  try { return canvas.toDataURL("image/png"); } catch { return url; }
}

async function showImage(view, data, path) {
  const type = IMAGE_TYPES[extension(path)];
  const url = `data:${type};base64,${base64(data)}`;
  const src = type === "image/svg+xml" ? await rasterised(url) : url;
  view.append(el("img", { class: "preview", src, alt: visible(path) }));
}

function sandboxedFrame(html, title) {
  // sandbox="" : no scripts, no forms, no same-origin access; the CSP repeats it for old engines.
  const doc = `<!doctype html><html><head><meta charset="utf-8">` +
              `<meta http-equiv="Content-Security-Policy" content="${FRAME_CSP}"></head><body>${html}</body></html>`;
  return el("iframe", { class: "preview", sandbox: "", srcdoc: doc, title, referrerpolicy: "no-referrer" });
}

function showMarkdown(view, data, path) {
  const html = globalThis.DOMPurify.sanitize(globalThis.marked.parse(decode(data) ?? ""));
  view.append(sandboxedFrame(html, `rendered ${visible(path)}`));
}

function showHtml(view, data, path) {
  view.append(el("p", { class: "hint" }, "shown without scripts"), sandboxedFrame(decode(data) ?? "", `rendered ${visible(path)}`));
}

async function showPdf(view, data) {
  const pdfjs = await import("/console/vendor/pdf.min.mjs");
  pdfjs.GlobalWorkerOptions.workerSrc = "/console/vendor/pdf.worker.min.mjs";
  const doc = await pdfjs.getDocument({ data, isEvalSupported: false, enableXfa: false }).promise;
  view.append(el("p", { class: "hint" }, `${doc.numPages} page${doc.numPages === 1 ? "" : "s"}`));
  for (let number = 1; number <= Math.min(doc.numPages, 5); number++) {
    const page = await doc.getPage(number);
    const viewport = page.getViewport({ scale: 1.25 });
    const canvas = el("canvas", { class: "pdf-page", width: Math.ceil(viewport.width), height: Math.ceil(viewport.height),
                                  "data-page": String(number) });
    view.append(canvas);
    await page.render({ canvas, canvasContext: canvas.getContext("2d"), viewport }).promise;
    canvas.dataset.rendered = "true";
  }
}
