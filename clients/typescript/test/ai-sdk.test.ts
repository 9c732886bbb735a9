// The Vercel AI SDK adapter, driven by the AI SDK itself: `generateText` with its own mock model (no real model
// calls) makes tool calls that run in the service the tests started; and the sandbox session used as the
// `experimental_sandbox` the SDK hands to tools. Imported as a dependent would, through `./ai-sdk`.
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs, tool, jsonSchema, type Experimental_SandboxSession } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { WasmRunnerSandbox, wasmRunnerTools, workspacePath } from "@wasm-runner/client/ai-sdk";
import { WasmRunner } from "@wasm-runner/client";
import { service } from "./service.ts";

const runner = () => new WasmRunner(service());

type Generated = Awaited<ReturnType<MockLanguageModelV4["doGenerate"]>>;

/** One model turn: the tool calls it makes (or, with none, a final text). */
function turn(calls: [string, Record<string, unknown>][], text = "done"): Generated {
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 1, text: 1, reasoning: 0 },
  };
  if (calls.length === 0) {
    return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
  }
  return {
    content: calls.map(([toolName, input], index) => ({
      type: "tool-call" as const, toolCallId: `call-${toolName}-${index}-${JSON.stringify(input).length}`, toolName,
      input: JSON.stringify(input),
    })),
    finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [],
  };
}

test("generateText's tool calls run in one wasm-runner session: state, errors as results, shared files", async () => {
  const turns = [
    turn([["runCode", { code: "import math\nx = 6 * 7\nx" }]]),
    turn([["runCode", { code: "print(x + 1, math.floor(2.5))" }]]),
    turn([["runCode", { code: "def f():\n    return 1 / 0\nf()" }]]),
    turn([["runCode", { code: "console.log([1, 2, 3].map((n) => n * 2).join(','))", language: "javascript" }]]),
    turn([["writeFile", { path: "notes/plan.txt", content: "step one\nstep two\n" }]]),
    turn([["runCommand", { command: "wc -l < notes/plan.txt; echo oops >&2; exit 3" }]]),
    turn([["runCode", { code: "open('report.csv', 'w').write('a,b\\n1,2\\n')" }]]),
    turn([["readFile", { path: "./report.csv" }], ["listFiles", {}]]),
    turn([["readFile", { path: "missing.txt" }], ["readFile", { path: "../../etc/passwd" }]]),
    turn([], "all done"),
  ];
  const model = new MockLanguageModelV4({ doGenerate: turns });
  const tools = wasmRunnerTools(runner());
  const result = await generateText({
    model, tools, stopWhen: stepCountIs(turns.length), prompt: "Compute things in the sandbox.",
  });

  assert.equal(result.text, "all done");
  const outputs = result.steps.map((step) => step.toolResults.map((done) => done.output));
  assert.deepEqual(result.steps.flatMap((step) => step.content.filter((part) => part.type === "tool-error")), []);
  assert.deepEqual(outputs[0], [{ stdout: "", stderr: "", value: "42", error: null }]);
  assert.deepEqual(outputs[1], [{ stdout: "43 2\n", stderr: "", value: null, error: null }]);  // state persisted
  const failed = outputs[2]![0] as { error: string; stderr: string };
  assert.match(failed.error, /ZeroDivisionError/);                                            // a result, not a throw
  assert.deepEqual(outputs[3], [{ stdout: "2,4,6\n", stderr: "", value: null, error: null }]);
  assert.deepEqual(outputs[4], [{ written: "notes/plan.txt" }]);
  assert.deepEqual(outputs[5], [{ exitCode: 3, stdout: "2\n", stderr: "oops\n" }]);           // a file of writeFile
  assert.deepEqual(outputs[7]![0], { content: "a,b\n1,2\n" });                                 // a file of runCode
  const listed = (outputs[7]![1] as { entries: { name: string; type: string }[] }).entries;
  assert.deepEqual(listed.filter((entry) => ["notes", "report.csv"].includes(entry.name))
    .sort((a, b) => a.name.localeCompare(b.name)), [{ name: "notes", type: "directory" }, { name: "report.csv", type: "file" }]);
  assert.deepEqual(outputs[8]![0], { error: "missing.txt does not exist" });
  assert.match((outputs[8]![1] as { error: string }).error, /^outside_workspace: .*outside the session's workspace/);

  // The model saw each result: the second call's prompt holds the first call's output.
  const secondPrompt = JSON.stringify(model.doGenerateCalls[1]!.prompt);
  assert.match(secondPrompt, /"value":"42"/);
});

test("the sandbox session is what the AI SDK hands a tool as experimental_sandbox", async () => {
  const sandbox = new WasmRunnerSandbox(runner());
  const asAiSdk: Experimental_SandboxSession = sandbox;
  const seen: string[] = [];
  const shell = tool({
    description: "Run a shell command in the sandbox.",
    inputSchema: jsonSchema<{ command: string }>({ type: "object", properties: { command: { type: "string" } },
                                                   required: ["command"] }),
    execute: async ({ command }, { experimental_sandbox }) => {
      if (experimental_sandbox === undefined) throw new Error("no sandbox was given");
      seen.push(experimental_sandbox.description);
      return experimental_sandbox.run({ command, env: { GREETING: "hi" } });
    },
  });
  const result = await generateText({
    model: new MockLanguageModelV4({ doGenerate: [turn([["shell", { command: "echo $GREETING; pwd" }]]), turn([])] }),
    tools: { shell }, experimental_sandbox: asAiSdk, stopWhen: stepCountIs(2), prompt: "Say hi.",
  });
  assert.deepEqual(result.steps[0]!.toolResults[0]!.output, { exitCode: 0, stdout: "hi\n/workspace\n", stderr: "" });
  assert.deepEqual(seen, [sandbox.description]);
});

test("the sandbox's files: text, bytes, streams, line ranges, stat, listings, deletes, and the workspace bound",
  async () => {
    const sandbox = new WasmRunnerSandbox(runner());
    await sandbox.writeTextFile({ path: "dir/a.txt", content: "one\ntwo\nthree\n" });
    await sandbox.writeBinaryFile({ path: "/workspace/dir/b.bin", content: new Uint8Array([0, 255, 7]) });
    await sandbox.writeFile({ path: "dir/sub/c.txt", content: new Blob(["streamed"]).stream() });
    assert.equal(await sandbox.readTextFile({ path: "dir/a.txt", startLine: 2, endLine: 9 }), "two\nthree\n");
    assert.equal(await sandbox.readTextFile({ path: "./dir/./a.txt", endLine: 1 }), "one\n");
    assert.deepEqual(await sandbox.readBinaryFile({ path: "dir/b.bin" }), new Uint8Array([0, 255, 7]));
    const stream = await sandbox.readFile({ path: "dir/sub/c.txt" });
    assert.equal(await new Response(stream).text(), "streamed");
    assert.equal(await sandbox.readFile({ path: "dir/none.txt" }), null);
    assert.equal(await sandbox.readTextFile({ path: "nowhere/none.txt" }), null);

    assert.deepEqual(await sandbox.stat({ path: "dir/a.txt" }), { type: "file", size: 14 });
    assert.deepEqual(await sandbox.stat({ path: "/workspace/dir/sub" }), { type: "directory",
      size: (await sandbox.stat({ path: "dir/sub" }))!.size });
    assert.equal(await sandbox.stat({ path: "dir/none" }), null);
    const entries = await sandbox.listDirectory({ path: "dir" });
    assert.deepEqual(entries?.sort((a, b) => a.name.localeCompare(b.name)),
      [{ name: "a.txt", type: "file" }, { name: "b.bin", type: "file" }, { name: "sub", type: "directory" }]);
    assert.equal(await sandbox.listDirectory({ path: "nope" }), null);
    await assert.rejects(() => sandbox.listDirectory({ path: "dir/a.txt" }), { code: "not_a_directory" });

    assert.equal(await sandbox.deleteFile({ path: "dir/b.bin" }), true);
    assert.equal(await sandbox.deleteFile({ path: "dir/b.bin" }), false);
    await assert.rejects(() => sandbox.deleteFile({ path: "dir/sub" }), { code: "is_a_directory" });
    assert.deepEqual(await sandbox.stat({ path: "dir/sub/c.txt" }), { type: "file", size: 8 });

    // Links: stat follows them, a listing shows them, deleteFile deletes the link itself.
    await sandbox.run({ command: "ln -s sub dir/to-sub && ln -s a.txt dir/to-a && ln -s gone dir/dangling" });
    assert.deepEqual(await sandbox.stat({ path: "dir/to-a" }), { type: "file", size: 14 });
    assert.equal((await sandbox.stat({ path: "dir/to-sub" }))?.type, "directory");
    assert.equal(await sandbox.stat({ path: "dir/dangling" }), null);
    assert.deepEqual((await sandbox.listDirectory({ path: "dir" }))?.find((entry) => entry.name === "to-sub"),
      { name: "to-sub", type: "symlink" });
    assert.equal(await sandbox.deleteFile({ path: "dir/to-sub" }), true);
    assert.deepEqual(await sandbox.stat({ path: "dir/sub/c.txt" }), { type: "file", size: 8 });  // target kept

    // Paths resolve in the workspace; nothing outside it reaches the files API.
    assert.equal(workspacePath("a/../b/./c"), "b/c");
    for (const outside of ["/etc/passwd", "../x", "/workspace/../etc", "/workspacex/a"]) {
      await assert.rejects(() => sandbox.readTextFile({ path: outside }), { code: "outside_workspace" }, outside);
      await assert.rejects(() => sandbox.writeTextFile({ path: outside, content: "x" }), { code: "outside_workspace" });
    }
    // Commands see the same files, relative to the same base, and can reach the rest of the sandbox.
    const ran = await sandbox.run({ command: "cat a.txt | head -1; echo tmp > /tmp/t; cat /tmp/t", workingDirectory: "dir" });
    assert.deepEqual(ran, { exitCode: 0, stdout: "one\ntmp\n", stderr: "" });
    await sandbox.run({ command: "mkdir -p \"/tmp/it's here\"" });
    const quoted = await sandbox.run({ command: "pwd", workingDirectory: "/tmp/it's here" });
    assert.deepEqual([quoted.exitCode, quoted.stdout], [0, "/tmp/it's here\n"]);
    const injected = await sandbox.run({ command: "pwd", workingDirectory: "x'; echo injected; '" });
    assert.equal(injected.exitCode, 1);                               // no such directory: cd failed, nothing ran
    assert.equal(injected.stdout, "");
  });

test("spawn: output streams as written, stdin, wait, kill", async () => {
  const sandbox = new WasmRunnerSandbox(runner());
  const echo = await sandbox.spawn({ command: "read line; echo \"got $line\"; echo bye >&2; exit 4", stdin: true });
  const writer = echo.stdin.getWriter();
  await writer.write(new TextEncoder().encode("hello\n"));
  await writer.close();
  assert.deepEqual(await echo.wait(), { exitCode: 4 });
  assert.equal(await new Response(echo.stdout).text(), "got hello\n");
  assert.equal(await new Response(echo.stderr).text(), "bye\n");

  const quick = await sandbox.spawn({ command: "exit 0", stdin: true });
  assert.deepEqual(await quick.wait(), { exitCode: 0 });
  await quick.stdin.getWriter().close();                            // ended first: nothing to close, no error

  const sleeper = await sandbox.spawn({ command: "echo started; sleep 60", workingDirectory: "/tmp" });
  const reader = sleeper.stdout.getReader();
  const first = await reader.read();
  assert.equal(new TextDecoder().decode(first.value), "started\n");  // before the process ends
  await sleeper.kill();
  await sleeper.kill();                                              // idempotent
  const ended = await sleeper.wait();
  assert.notEqual(ended.exitCode, 0);
  reader.releaseLock();

  const aborter = new AbortController();
  const aborted = await sandbox.spawn({ command: "sleep 60", abortSignal: aborter.signal });
  aborter.abort(new Error("the user stopped it"));
  await assert.rejects(async () => aborted.wait(), /the user stopped it/);
});

test("limits and long output come back as results the model can read", async () => {
  const tools = wasmRunnerTools(runner(), { timeoutS: 1, maxOutputChars: 100 });
  const result = await generateText({
    model: new MockLanguageModelV4({ doGenerate: [
      turn([["runCode", { code: "while True:\n    pass" }], ["runCommand", { command: "echo before; sleep 30" }]]),
      turn([["runCode", { code: "print('x' * 5000)" }]]),
      turn([]),
    ] }),
    tools, stopWhen: stepCountIs(3), prompt: "Loop forever, then print a lot.",
  });
  const [spin, sleep] = result.steps[0]!.toolResults.map((done) => done.output) as
    [{ error: string }, { exitCode: number; stdout: string; stderr: string }];
  assert.match(spin.error, /^LimitExceeded: .*wall-clock deadline/);
  assert.notEqual(sleep.exitCode, 0);
  assert.equal(sleep.stdout, "before\n");
  assert.match(sleep.stderr, /limit reached: timeout/);
  const long = result.steps[1]!.toolResults[0]!.output as { stdout: string };
  assert.match(long.stdout, /^x{50}\n\[\.\.\. 4901 characters cut \.\.\.\]\nx{49}\n$/);
});
