import assert from "node:assert/strict";
import { test } from "node:test";
import { WasmRunner, WasmRunnerError, type OutputChunk } from "../src/index.ts";
import { eventually, runner, service } from "./service.ts";

test("exec runs code in the session's kernel, which keeps its variables", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const first = await client.exec(id, "x = 6 * 7\nprint('hi')\nx");
  assert.equal(first.value, "42");
  assert.equal(first.stdout, "hi\n");
  assert.equal(first.exit_code, 0);
  assert.equal((await client.exec(id, "x + 1")).value, "43");
  const js = await client.exec(id, "console.log([1, 2, 3].map((n) => n * 2).join(','))", { language: "javascript" });
  assert.equal(js.stdout, "2,4,6\n");
  const failed = await client.exec(id, "1 / 0");
  assert.equal(failed.error?.type, "ZeroDivisionError");
  await client.deleteSession(id);
});

test("execStream yields output as it happens, then the result", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const stream = client.execStream(id, "import sys\nfor i in range(3):\n    print(i, flush=True)\n"
    + "print('oops', file=sys.stderr)\n'done'");
  const chunks: OutputChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  const stdout = chunks.filter((c) => c.stream === "stdout").map((c) => c.text).join("");
  assert.equal(stdout, "0\n1\n2\n");
  assert.ok(chunks.some((c) => c.stream === "stderr" && c.text.includes("oops")));
  assert.equal(stream.result?.value, "'done'");
  assert.equal(stream.result?.stdout, "0\n1\n2\n");
  await client.deleteSession(id);
});

test("the code calls the caller's tools, which run in this process, and approvals are asked here", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const notes: string[] = [];
  const asked: string[] = [];
  const result = await client.exec(id,
    "from sandbox import tools, ToolError\n"
    + "found = tools.search_issues(query='crash')\n"
    + "tools.remember(note=str(found))\n"
    + "try:\n    tools.delete_issue(number=1)\nexcept ToolError as e:\n    print('refused:', e.kind)\n"
    + "try:\n    tools.broken()\nexcept ToolError as e:\n    print('failed:', e)\n"
    + "found", {
      tools: {
        search_issues: {
          description: "Issue numbers whose title holds the query.",
          parameters: { type: "object", properties: { query: { type: "string" } }, required: ["query"] },
          run: async ({ query }) => [1, 3].filter(() => String(query) === "crash"),
        },
        remember: ({ note }) => { notes.push(String(note)); return notes.length; },
        delete_issue: { approval: true, run: () => "deleted" },
        broken: () => { throw new Error("the tracker is down"); },
      },
      onApproval: (event) => { asked.push(`${event.tool} ${JSON.stringify(event.arguments)}`); return false; },
    });
  assert.equal(result.error ?? null, null, result.stderr);
  assert.equal(result.value, "[1, 3]");
  assert.deepEqual(notes, ["[1, 3]"]);
  assert.deepEqual(asked, ['delete_issue {"number":1}']);
  assert.match(result.stdout ?? "", /refused: refused\n/);
  assert.match(result.stdout ?? "", /failed: .*the tracker is down/);
  assert.deepEqual(result.tool_calls?.map((c) => [c.tool, c.outcome]), [
    ["search_issues", "ok"], ["remember", "ok"], ["delete_issue", "refused"], ["broken", "tool_error"]]);
  await client.deleteSession(id);
});

test("a one-shot run takes files in and gives the asked output files back", async () => {
  const client = runner();
  const result = await client.run({
    code: "open('out.txt', 'w').write(open('in.txt').read().upper())", files: { "in.txt": "shout" },
    output_files: ["out.txt"],
  });
  assert.equal(result.error ?? null, null, result.stderr);
  assert.deepEqual(Object.keys(result.output_files ?? {}), ["out.txt"]);
  const stream = client.runStream({ code: "print('streamed')" });
  const text: string[] = [];
  for await (const chunk of stream) text.push(chunk.text);
  assert.equal(text.join(""), "streamed\n");
  assert.equal(stream.result?.exit_code, 0);
});

test("service errors are WasmRunnerErrors carrying status, code, message and hint", async () => {
  const client = runner();
  const missing = await client.exec("no-such-session-ts", "1").catch((error: unknown) => error);
  assert.ok(missing instanceof WasmRunnerError);
  assert.equal(missing.status, 404);
  assert.equal(missing.code, "session_not_found");

  const { id } = await client.createSession();
  const invalid = await client.exec(id, "1", { limits: { timeout_s: -1 } }).catch((error: unknown) => error);
  assert.ok(invalid instanceof WasmRunnerError);
  assert.equal(invalid.status, 422);
  assert.equal(invalid.code, "validation_error");
  assert.ok(invalid.hint);

  const stranger = new WasmRunner({ url: service().url, apiKey: "wr_000000000000_not-a-key" });
  const refused = await stranger.listSessions().catch((error: unknown) => error);
  assert.ok(refused instanceof WasmRunnerError);
  assert.equal(refused.status, 401);
  assert.ok(refused.code.length > 0 && refused.message.length > 0);
  await client.deleteSession(id);
});

test("429 answers are retried as Retry-After says; other errors are thrown at once", async () => {
  const answers = [
    new Response(JSON.stringify({ error: { code: "overloaded", message: "no slot", hint: "retry" } }),
      { status: 429, headers: { "Retry-After": "0" } }),
    new Response(JSON.stringify({ status: "ok" }), { status: 200 }),
  ];
  let calls = 0;
  const client = new WasmRunner({ url: "http://127.0.0.1:9", fetch: async () => answers[calls++]! });
  assert.deepEqual(await client.health(), { status: "ok" });
  assert.equal(calls, 2);

  let tries = 0;
  const busy = new WasmRunner({
    url: "http://127.0.0.1:9", retry: { attempts: 2, backoffMs: 1 },
    fetch: async () => {
      tries++;
      return new Response(JSON.stringify({ error: { code: "overloaded", message: "no slot" } }), { status: 429 });
    },
  });
  const error = await busy.health().catch((e: unknown) => e);
  assert.ok(error instanceof WasmRunnerError && error.code === "overloaded" && error.status === 429);
  assert.equal(tries, 3);
});

test("closing a stream early cancels the execution", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const stream = client.execStream(id, "import time\nprint('started', flush=True)\nfor _ in range(600):\n"
    + "    time.sleep(0.05)\nprint('finished')");
  for await (const chunk of stream) {
    assert.equal(chunk.text, "started\n");
    break; // leaving the loop drops the connection
  }
  assert.equal(stream.result, null);
  // Uncancelled, the run would keep the session active for 30 s.
  await eventually(async () => (await client.getSession(id)).state !== "active", "the run to be cancelled", 15_000);
  await client.deleteSession(id);
});
