import assert from "node:assert/strict";
import { test } from "node:test";
import { WasmRunner, WasmRunnerError } from "../src/index.ts";
import { runner, service } from "./service.ts";

async function bytesOf(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

test("files are written, read, listed, edited and deleted, as text and as bytes", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const written = await client.writeFile(id, "dir/a.txt", "alpha\n");
  assert.equal(written.size, 6);
  assert.equal(await client.readText(id, "dir/a.txt"), "alpha\n");
  const every = Uint8Array.from({ length: 256 }, (_, i) => i);
  await client.writeFile(id, "bin/all.bytes", every);
  assert.deepEqual(await client.readFile(id, "bin/all.bytes"), every);
  assert.equal((await client.exec(id, "len(open('bin/all.bytes','rb').read())")).value, "256");

  const listing = await client.listFiles(id, { recursive: true });
  const paths = listing.entries.map((e) => e.path).sort();
  assert.ok(paths.includes("dir/a.txt") && paths.includes("bin/all.bytes"), paths.join(", "));
  assert.deepEqual((await client.glob(id, "**/*.txt")).matches.map((m) => m.path), ["dir/a.txt"]);
  const found = await client.grep(id, "alp", { path: "dir" });
  assert.equal(found.matches[0]?.path, "dir/a.txt");

  const edited = await client.editFile(id, "dir/a.txt", { old_text: "alpha", new_text: "beta" });
  assert.equal(edited.replacements, 1);
  assert.equal(await client.readText(id, "dir/a.txt"), "beta\n");

  const directory = await client.readFile(id, "dir").catch((error: unknown) => error);
  assert.ok(directory instanceof WasmRunnerError && directory.code === "is_a_directory");

  await client.deleteFile(id, "dir", { recursive: true });
  const gone = await client.readFile(id, "dir/a.txt").catch((error: unknown) => error);
  assert.ok(gone instanceof WasmRunnerError && gone.status === 404, String(gone));
  await client.deleteSession(id);
});

test("bytes stream up and down, and several files go up in one multipart request", async () => {
  const client = runner();
  const { id } = await client.createSession();
  const big = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 7) % 251);
  let pulls = 0;
  const upload = new ReadableStream<Uint8Array>({
    pull(controller) {
      const start = pulls++ * 256 * 1024;
      if (start >= big.length) controller.close();
      else controller.enqueue(big.slice(start, start + 256 * 1024));
    },
  });
  assert.equal((await client.writeFile(id, "big.bin", upload)).size, big.length);
  assert.deepEqual(await bytesOf(await client.download(id, "big.bin")), big);
  assert.ok(pulls > 10, "the body was read in chunks, not at once");

  const result = await client.upload(id, { "my notes.txt": "spaced", "deep/x.bin": new Uint8Array([0, 255]) },
    { dir: "in" });
  assert.deepEqual(result.files.map((f) => f.path).sort(), ["in/deep/x.bin", "in/my notes.txt"]);
  assert.equal(await client.readText(id, "in/my notes.txt"), "spaced");
  assert.deepEqual(await client.readFile(id, "in/deep/x.bin"), new Uint8Array([0, 255]));

  const archive = await bytesOf(await client.downloadArchive(id, { path: "in", format: "zip" }));
  assert.deepEqual([...archive.subarray(0, 2)], [0x50, 0x4b]); // "PK": a zip

  const link = await client.presign(id, "in/my notes.txt", { expires_in: 60 });
  const anonymous = await fetch(link.url); // no key: the link is the grant
  assert.equal(anonymous.status, 200);
  assert.equal(await anonymous.text(), "spaced");
  await client.deleteSession(id);
});

test("a path with '.' or '..' segments is refused before anything is sent", async () => {
  const sent: string[] = [];
  const { url, apiKey } = service();
  const client = new WasmRunner({ url, apiKey, fetch: async (input, init) => {
    sent.push(String(input));
    return fetch(input, init);
  } });
  const { id } = await client.createSession();
  sent.length = 0;
  for (const path of ["../other/files/x", "a/../../x", "./x", ".."]) {
    const error = await client.readFile(id, path).catch((e: unknown) => e);
    assert.ok(error instanceof WasmRunnerError, `${path}: ${String(error)}`);
    assert.equal(error.code, "invalid_path");
  }
  const wrongSession = await client.exec("..", "1").catch((e: unknown) => e);
  assert.ok(wrongSession instanceof WasmRunnerError && wrongSession.code === "invalid_path");
  assert.deepEqual(sent, []);
  // Names that merely contain dots or need escaping reach the service as they are.
  await client.writeFile(id, "..hidden/a b%2F?.txt", "ok");
  assert.deepEqual((await client.listFiles(id, { path: "..hidden" })).entries.map((e) => e.path),
    ["..hidden/a b%2F?.txt"]);
  assert.equal(await client.readText(id, "..hidden/a b%2F?.txt"), "ok");
  await client.deleteSession(id);
});
