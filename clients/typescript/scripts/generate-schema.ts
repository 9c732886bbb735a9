// npm run generate -- http://127.0.0.1:8080   (re)writes src/schema.d.ts from that service.
import { writeFile } from "node:fs/promises";
import { renderSchema, SCHEMA_FILE } from "./schema.ts";

const url = process.argv[2] ?? process.env.WASM_RUNNER_URL;
if (!url) {
  console.error("usage: npm run generate -- <service url> (or set WASM_RUNNER_URL)");
  process.exit(2);
}
await writeFile(SCHEMA_FILE, await renderSchema(url));
console.log(`wrote ${SCHEMA_FILE.pathname}`);
