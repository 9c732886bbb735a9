import assert from "node:assert/strict";
import { test } from "node:test";
import { runner } from "./service.ts";

// The pytest wrapper serves demo wheels on a loopback index and names it in the service's config.
const index = process.env.WASM_RUNNER_TEST_PYTHON_INDEX;

test("packages install into the session, and its lock replays them in a new session", {
  skip: index ? false : "no loopback package index (WASM_RUNNER_TEST_PYTHON_INDEX; the pytest wrapper gives one)",
}, async () => {
  const client = runner();
  const { id } = await client.createSession();
  const installed = await client.install(id, { python: ["tinyapp==1.0", "tinydep==2.0"] });
  assert.ok(installed.ok, JSON.stringify(installed.error));
  assert.deepEqual(installed.installed?.map((p) => [p.name, p.version]).sort(), [["tinyapp", "1.0"], ["tinydep", "2.0"]]);
  assert.equal((await client.exec(id, "import tinyapp\ntinyapp.hello()")).value, "'hello from tinyapp, tinydep 2.0'");
  const lock = await client.packages(id);
  assert.deepEqual(lock.python?.map((p) => p.name), ["tinyapp", "tinydep"]);
  const replayed = await client.createSession({ packages: { lock } });
  assert.equal((await client.exec(replayed.id, "import tinydep\ntinydep.VERSION")).value, "'2.0'");
  await client.deleteSession(replayed.id);
  await client.deleteSession(id);
});

test("an install the service refuses is a result with the reason, not a throw", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const refused = await client.install(id, { npm: ["left-pad"] });
  assert.equal(refused.ok, false);
  assert.equal(refused.error?.kind, "unsupported_ecosystem");
  assert.match(refused.error?.hint ?? "", /npm install/);
  assert.deepEqual((await client.packages(id)).python ?? [], []);
  await client.deleteSession(id);
});
