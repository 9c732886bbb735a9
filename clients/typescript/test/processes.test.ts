import assert from "node:assert/strict";
import { test } from "node:test";
import { type ProcessOutput, WasmRunnerError } from "../src/index.ts";
import { eventually, runner } from "./service.ts";

test("a background process is started, fed, followed to its exit and listed", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const started = await client.startProcess(id, {
    command: ["sh", "-c", "echo ready; read line; echo \"got $line\"; exit 3"], name: "echoer",
  });
  assert.equal(started.name, "echoer");
  const first = await client.processOutput(id, started.id, { wait_s: 20 });
  assert.equal(first.data, "ready\n");
  assert.equal((await client.sendInput(id, started.id, "hello\n", { eof: true })).written, 6);

  const followed = client.processOutputStream(id, started.id, { offset: first.next_offset });
  const chunks: ProcessOutput[] = [];
  for await (const chunk of followed) chunks.push(chunk);
  assert.equal(chunks.map((c) => c.data).join(""), "got hello\n");
  assert.equal(followed.exit?.exit_code, 3);
  assert.equal(followed.nextOffset, first.next_offset + "got hello\n".length);

  const listed = await client.listProcesses(id);
  assert.ok(listed.processes.some((p) => p.id === started.id && p.exit_code === 3));
  assert.equal((await client.getProcess(id, started.id)).state, "exited");
  await client.deleteSession(id);
});

test("a signal ends a process, and stopping one ends its tree", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const sleeper = await client.startProcess(id, { command: ["sleep", "300"] });
  await eventually(async () => (await client.getProcess(id, sleeper.id)).state === "running", "the process to run");
  await client.signalProcess(id, sleeper.id, "KILL");
  const ended = await eventually(async () => {
    const info = await client.getProcess(id, sleeper.id);
    return info.state !== "running" && info.state !== "starting" ? info : null;
  }, "the process to end");
  assert.equal(ended.state, "killed");
  assert.equal(ended.signal, "KILL");

  const code = await client.startProcess(id, { code: "sleep 300", language: "bash" });
  const stopped = await client.stopProcess(id, code.id);
  assert.notEqual(stopped.state, "running");
  const missing = await client.getProcess(id, "no-such-process").catch((error: unknown) => error);
  assert.ok(missing instanceof WasmRunnerError && missing.status === 404);
  await client.deleteSession(id);
});

test("a native program runs in the session's workspace, in one call and streamed", async () => {
  const client = runner();
  const { id } = await client.createSession();
  await client.writeFile(id, "in.txt", "one\ntwo\n");
  const counted = await client.process(id, ["wc", "-l", "in.txt"]);
  assert.equal(counted.exit_code, 0, counted.stderr);
  assert.match(counted.stdout ?? "", /^2 in\.txt/);
  const stream = client.processStream(id, ["sh", "-c", "echo a; echo b >&2"]);
  const seen: string[] = [];
  for await (const chunk of stream) seen.push(`${chunk.stream}:${chunk.text}`);
  assert.deepEqual(seen.sort(), ["stderr:b\n", "stdout:a\n"]);
  assert.equal(stream.result?.exit_code, 0);
  await client.deleteSession(id);
});

test("a preview link reaches a server in the sandbox on an origin of its own, without the key", async () => {
  const client = runner();
  const { id } = await client.createSession();
  await client.writeFile(id, "site/index.html", "<h1>preview</h1>");
  await client.startProcess(id, { command: ["python3", "-m", "http.server", "8123", "-d", "site"] });
  const link = await client.previewUrl(id, 8123, { expires_in: 60 });
  assert.equal(link.port, 8123);
  const url = new URL(link.url);
  assert.match(url.hostname, /^8123-[^.]+\.localhost$/);
  // The preview origin is a name under localhost: reach it on loopback, naming it in the Host header (polled:
  // the server in the sandbox takes a moment to listen).
  const body = await eventually(async () => {
    const answer = await fetchOnLoopback(url);
    return answer.status === 200 ? answer.body : null;
  }, "the preview to answer", 30_000);
  assert.equal(body, "<h1>preview</h1>");
  assert.match(client.portUrl(id, 8123, "/index.html"), /\/v1\/sessions\/[^/]+\/ports\/8123\/index\.html$/);
  await client.deleteSession(id);
});

/** GET on 127.0.0.1 with the URL's own Host header (fetch cannot set Host; node:http can). */
async function fetchOnLoopback(url: URL): Promise<{ status: number; body: string }> {
  const http = await import("node:http");
  return new Promise((resolve, reject) => {
    const request = http.get({ host: "127.0.0.1", port: url.port, path: url.pathname + url.search,
                               headers: { Host: url.host } }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => { body += chunk; });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on("error", reject);
  });
}
