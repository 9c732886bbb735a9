// Runs in a frame with an opaque origin (sandboxed): parses the workbook it is sent and answers its
// first sheet's rows as strings. It holds no key and cannot reach the console's page or storage.
"use strict";
window.addEventListener("message", (event) => {
  if (event.source !== window.parent) return;
  try {
    const book = XLSX.read(new Uint8Array(event.data), { type: "array", cellHTML: false, cellFormula: false });
    const sheet = book.Sheets[book.SheetNames[0]];
    const rows = XLSX.utils.sheet_to_json(sheet, { header: 1, raw: false, defval: "" }).slice(0, 1001);
    window.parent.postMessage({ rows: rows.map((row) => row.map((cell) => String(cell))) }, "*");
  } catch (error) {
    window.parent.postMessage({ error: String(error) }, "*");
  }
});
window.parent.postMessage({ ready: true }, "*");
