import assert from "node:assert/strict";
import { test } from "node:test";
import { WasmRunnerError } from "../src/index.ts";
import { runner } from "./service.ts";

test("a session is created, read, listed, changed and deleted", async () => {
  const client = runner();
  const session = await client.createSession({ metadata: { owner: "ts-tests" }, idle_timeout_s: 120 });
  assert.match(session.id, /^[A-Za-z0-9_-]+$/);
  assert.equal(session.state, "idle");
  assert.deepEqual(session.metadata, { owner: "ts-tests" });

  assert.equal((await client.getSession(session.id)).id, session.id);
  const ids: string[] = [];
  for await (const listed of client.iterSessions(1)) ids.push(listed.id); // one per page: the cursor is followed
  assert.ok(ids.includes(session.id), `${session.id} not among ${ids.join(", ")}`);
  const page = await client.listSessions({ limit: 1 });
  assert.equal(page.sessions.length, 1);

  await client.deleteSession(session.id);
  await assert.rejects(client.getSession(session.id), (error: unknown) => {
    assert.ok(error instanceof WasmRunnerError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "session_not_found");
    assert.ok(error.message.length > 0);
    return true;
  });
});

test("egress is changed by a PATCH within the profile's ceiling; a wider one is refused with code and hint",
  async () => {
    const client = runner();
    const session = await client.createSession({ egress: "deny" });
    assert.equal(session.egress?.mode, "deny");
    const allow = { mode: "allowlist" as const, allow: ["example.com:443"] };
    assert.deepEqual((await client.setEgress(session.id, allow)).egress, allow);
    assert.deepEqual((await client.getSession(session.id)).egress, allow);
    // Loopback is outside every built-in profile's ceiling (public destinations only).
    const refused = await client.setEgress(session.id, { mode: "allowlist", allow: ["127.0.0.1"] })
      .catch((error: unknown) => error);
    assert.ok(refused instanceof WasmRunnerError, String(refused));
    assert.equal(refused.status, 403);
    assert.equal(refused.code, "network_not_allowed");
    assert.match(refused.message, /127\.0\.0\.1/);
    assert.ok(refused.hint, "the refusal says what to do");
    // One call may narrow the session's policy, never widen it.
    const wider = await client.exec(session.id, "1", { egress: "open" }).catch((error: unknown) => error);
    assert.ok(wider instanceof WasmRunnerError && wider.code === "network_not_allowed");
    assert.equal((await client.setEgress(session.id, null)).egress?.mode, "deny"); // back to the profile's
    await client.deleteSession(session.id);
  });

test("a fork copies the files and the kernel's variables", async () => {
  const client = runner();
  const session = await client.createSession();
  await client.writeFile(session.id, "note.txt", "kept");
  const first = await client.exec(session.id, "answer = 6 * 7");
  assert.equal(first.error ?? null, null, first.stderr);
  const forked = await client.fork(session.id, 1);
  assert.equal(forked.sessions.length, 1, JSON.stringify(forked.failed));
  const copy = forked.sessions[0]!;
  assert.notEqual(copy.id, session.id);
  assert.equal(await client.readText(copy.id, "note.txt"), "kept");
  assert.equal((await client.exec(copy.id, "answer")).value, "42");
  assert.equal((await client.hibernate(copy.id)).state, "hibernated");
  const back = await client.exec(copy.id, "answer");  // the kernel restored from its saved state
  assert.equal(back.value, "42");
  assert.equal(back.kernel_restored, true);
  await client.deleteSession(copy.id);
  await client.deleteSession(session.id);
});

test("a template is published, listed, started from and deleted", async () => {
  const client = runner();
  const session = await client.createSession();
  await client.writeFile(session.id, "seed/data.csv", "a,b\n1,2\n");
  const name = `ts-template-${Date.now()}`;
  const published = await client.publishTemplate(name, session.id);
  assert.equal(published.name, name);
  assert.ok((await client.listTemplates()).some((t) => t.name === name));
  assert.equal((await client.getTemplate(name)).name, name);
  const started = await client.createSession({ template: name });
  assert.equal(await client.readText(started.id, "seed/data.csv"), "a,b\n1,2\n");
  await client.deleteTemplate(name);
  await assert.rejects(client.getTemplate(name), (error: unknown) =>
    error instanceof WasmRunnerError && error.status === 404);
  await client.deleteSession(started.id);
  await client.deleteSession(session.id);
});
