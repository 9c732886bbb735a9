// The event-stream reader on bodies cut anywhere (as a network cuts them), and what a stream makes of the
// service's error events and of a body that ends early. Fake answers: these are the reader's own rules.
import assert from "node:assert/strict";
import { test } from "node:test";
import { readEvents } from "../src/sse.ts";
import { TransportError, WasmRunner, WasmRunnerError } from "../src/index.ts";

function body(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

async function all(stream: ReadableStream<Uint8Array>) {
  const events = [];
  for await (const event of readEvents(stream)) events.push(event);
  return events;
}

test("events are read whole whatever the chunks, with CRLF, comments and multi-line data", async () => {
  const wire = ": keep-alive\r\nevent: stdout\r\ndata: {\"text\": \"a\"}\r\n\r\nid: 7\nevent: output\ndata: one\ndata: two\n\n"
    + "data: é\n\n";
  const expected = [{ event: "stdout", data: '{"text": "a"}' }, { event: "output", data: "one\ntwo" },
                    { event: "message", data: "é" }];
  assert.deepEqual(await all(body(wire)), expected);
  const bytes = new TextEncoder().encode(wire);
  for (let cut = 1; cut < bytes.length; cut++) { // every place a chunk boundary can fall, even inside "é"
    const split = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(bytes.slice(0, cut));
        controller.enqueue(bytes.slice(cut));
        controller.close();
      },
    });
    assert.deepEqual(await all(split), expected, `cut at ${cut}`);
  }
});

function answering(stream: ReadableStream<Uint8Array>): WasmRunner {
  return new WasmRunner({ url: "http://127.0.0.1:9", fetch: async () => new Response(stream, {
    headers: { "Content-Type": "text/event-stream" } }) });
}

test("an error event mid-stream throws the service's error, with no HTTP status", async () => {
  const stream = answering(body("event: stdout\ndata: {\"text\": \"partial\"}\n\n",
    "event: error\ndata: {\"error\": {\"code\": \"session_deleted\", \"message\": \"gone\", \"hint\": \"start another\"}}\n\n"))
    .execStream("s1", "print(1)");
  const seen: string[] = [];
  const error = await (async () => {
    for await (const chunk of stream) seen.push(chunk.text);
  })().catch((e: unknown) => e);
  assert.deepEqual(seen, ["partial"]);
  assert.ok(error instanceof WasmRunnerError);
  assert.deepEqual([error.status, error.code, error.message, error.hint], [null, "session_deleted", "gone", "start another"]);
});

test("a stream that ends without its result or exit says so", async () => {
  const exec = answering(body("event: stdout\ndata: {\"text\": \"x\"}\n\n")).execStream("s1", "1");
  const error = await exec.collect().catch((e: unknown) => e);
  assert.ok(error instanceof WasmRunnerError && error.code === "stream_ended", String(error));
  const output = answering(body("id: 3\nevent: output\ndata: {\"stream\": \"stdout\", \"offset\": 0, \"next_offset\": 3, "
    + "\"data\": \"abc\"}\n\n")).processOutputStream("s1", "p1");
  const cut = await (async () => {
    for await (const _chunk of output) { /* read */ }
  })().catch((e: unknown) => e);
  assert.ok(cut instanceof WasmRunnerError && cut.code === "stream_ended");
  assert.equal(output.nextOffset, 3);
  assert.match(cut.hint ?? "", /offset 3/);
});

test("a service that cannot be reached is a TransportError", async () => {
  const error = await new WasmRunner({ url: "http://127.0.0.1:9" }).health().catch((e: unknown) => e);
  assert.ok(error instanceof TransportError && error instanceof WasmRunnerError, String(error));
  assert.equal(error.code, "transport_error");
  assert.equal(error.status, null);
  assert.ok(error.cause);
});
