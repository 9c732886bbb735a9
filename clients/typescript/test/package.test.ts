// The package as a dependent imports it: by its name, through package.json's exports, from the built dist/.
import assert from "node:assert/strict";
import { test } from "node:test";
import { service } from "./service.ts";

test("@wasm-runner/client resolves to the built ESM entry and works", async () => {
  const published = await import("@wasm-runner/client");
  assert.match(import.meta.resolve("@wasm-runner/client"), /\/dist\/index\.js$/);
  const client = new published.WasmRunner(service());
  assert.equal((await client.health()).status, "ok");
  const error = await client.getSession("missing-session").catch((e: unknown) => e);
  assert.ok(error instanceof published.WasmRunnerError && error.code === "session_not_found");
});
