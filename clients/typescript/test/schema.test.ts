// The committed wire types are exactly what openapi-typescript makes of the running service's /openapi.json:
// a change of the service's schema fails here until `npm run generate` is run and its output committed.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { renderSchema, SCHEMA_FILE } from "../scripts/schema.ts";
import { service } from "./service.ts";

test("src/schema.d.ts is what the service's /openapi.json generates", async () => {
  const committed = await readFile(SCHEMA_FILE, "utf8");
  const regenerated = await renderSchema(service().url);
  if (regenerated !== committed) {
    const a = committed.split("\n");
    const b = regenerated.split("\n");
    const line = a.findIndex((text, i) => text !== b[i]);
    assert.fail(`src/schema.d.ts is stale from line ${line + 1}: committed ${JSON.stringify(a[line])}, the service `
      + `gives ${JSON.stringify(b[line])}; run \`npm run generate -- <service url>\` and commit the result`);
  }
});
