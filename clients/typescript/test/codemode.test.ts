// The Code Mode executor with a fake fns object, as @cloudflare/codemode calls it: execute(code, fns) and
// execute(code, providers). The code runs in the service's JavaScript kernel; the tools run in this process.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Executor } from "@cloudflare/codemode";
import { normalizeCode, WasmRunnerExecutor } from "../src/index.ts";
import { runner } from "./service.ts";

test("generated code calls codemode.* tools that run here, logs are captured, the result comes back", async () => {
  const calls: unknown[] = [];
  const fns = {
    getWeather: async (args: unknown) => {
      calls.push(args);
      return { city: (args as { city: string }).city, celsius: 21 };
    },
    failing: async () => {
      throw new Error("the weather service is down");
    },
  };
  const executor = new WasmRunnerExecutor({ runner: runner() });
  const done = await executor.execute(`async () => {
    const weather = await codemode.getWeather({ city: "Lyon" });
    console.log("fetched", weather.city, { n: 1 });
    console.error("careful");
    return { summary: weather.city + " " + weather.celsius };
  }`, fns);
  assert.equal(done.error, undefined);
  assert.deepEqual(done.result, { summary: "Lyon 21" });
  assert.deepEqual(done.logs, ['fetched Lyon {"n":1}', "[error] careful"]);
  assert.deepEqual(calls, [{ city: "Lyon" }]);

  const failed = await executor.execute("async () => { await codemode.failing({}); return 1; }", fns);
  assert.equal(failed.result, undefined);
  assert.match(failed.error ?? "", /the weather service is down/);

  const missing = await executor.execute("async () => codemode.nope({})", fns);
  assert.match(missing.error ?? "", /Tool "nope" not found/);

  const thrown = await executor.execute("```js\nthrow new Error('model bug')\n```", fns);
  assert.deepEqual([thrown.result, thrown.error], [undefined, "model bug"]);
});

test("providers get their own namespaces, positional ones get their arguments in order", async () => {
  const executor = new WasmRunnerExecutor({ runner: runner() });
  const asCodeMode: Executor = executor; // what Code Mode's createCodeTool takes
  const files: Record<string, string> = { "/a.txt": "alpha" };
  const done = await executor.execute(
    "async () => { const text = await state.readFile('/a.txt'); return await codemode.shout({ text }); }", [
      { name: "codemode", fns: { shout: async (args) => String((args as { text: string }).text).toUpperCase() } },
      { name: "state", positionalArgs: true, fns: { readFile: async (path) => files[String(path)] } },
    ]);
  assert.deepEqual([done.error, done.result], [undefined, "ALPHA"]);
  const helper = await asCodeMode.execute("async () => codemode.twice(await codemode.shout({ text: 'a' }))", [{
    name: "codemode", fns: { shout: async (args) => String((args as { text: string }).text).toUpperCase() },
    prelude: "codemode.twice = (text) => text + text;",
  }]);
  assert.deepEqual([helper.error, helper.result], [undefined, "AA"]);
  const reserved = await executor.execute("async () => 1", [{ name: "tools", fns: {} }]);
  assert.match(reserved.error ?? "", /reserved/);
});

test("each execution starts from a fresh kernel, and the code has no way to the host but the tools", async () => {
  const executor = new WasmRunnerExecutor({ runner: runner() });
  await executor.execute("async () => { globalThis.leftover = 42; }", {});
  const next = await executor.execute("async () => typeof globalThis.leftover", {});
  assert.equal(next.result, "undefined");
  const fetched = await executor.execute("async () => { await fetch('http://127.0.0.1:9/'); return 'reached'; }", {});
  assert.notEqual(fetched.result, "reached");
  assert.ok(fetched.error);
});

test("normalizeCode keeps function expressions and wraps a bare body", () => {
  assert.equal(normalizeCode("async () => 1"), "async () => 1");
  assert.equal(normalizeCode("```ts\nasync () => 2\n```"), "async () => 2");
  assert.equal(normalizeCode("return 3;"), "async () => {\nreturn 3;\n}");
  assert.equal(normalizeCode("  "), "async () => {}");
});
