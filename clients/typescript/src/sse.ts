// Server-sent events (text/event-stream) read from a fetch body: the service streams executions and
// process output this way, as the Python client reads them.

export interface ServerEvent {
  event: string;
  data: string;
}

/** The events of a text/event-stream body, as they arrive; comments and ids are skipped. */
export async function* readEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<ServerEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data: string[] = [];
  const feed = (line: string): ServerEvent | null => {
    if (line === "") {
      if (data.length === 0 && event === "") return null;
      const done = { event: event || "message", data: data.join("\n") };
      event = "";
      data = [];
      return done;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") event = value;
    else if (name === "data") data.push(value);
    return null;
  };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
        // A lone "\r" at the buffer's end may be the first half of "\r\n": wait for the next chunk.
        if (!done && end === buffer.length - 1 && buffer[end] === "\r") break;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        const ready = feed(line);
        if (ready) yield ready;
      }
      if (done) {
        const last = feed(buffer) ?? feed("");
        if (last) yield last;
        return;
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}
