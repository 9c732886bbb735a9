// Streamed answers: an execution's output then its result, and a background process's output then its exit.
import { errorFrom, TransportError, WasmRunnerError } from "./errors.ts";
import { readEvents, type ServerEvent } from "./sse.ts";
import type { ApprovalEvent, OutputChunk, ProcessExit, ProcessOutput, ToolCallEvent } from "./types.ts";

/** Sends the request (with an abort signal of the stream's own) and answers the response to read. */
type Opener = (signal: AbortSignal) => Promise<Response>;

export interface ToolHandlers {
  onToolCall: (event: ToolCallEvent) => Promise<void>;
  onApproval: (event: ApprovalEvent) => Promise<void>;
}

/** Reads one event stream once: opened on first use, closed (aborted) when done or left early. */
abstract class EventStream<Item> implements AsyncIterable<Item> {
  private readonly controller = new AbortController();
  private response: Promise<Response> | null = null;
  private used = false;
  private readonly opener: Opener;

  protected constructor(opener: Opener, signal?: AbortSignal) {
    this.opener = opener;
    if (signal?.aborted) this.controller.abort(signal.reason);
    signal?.addEventListener("abort", () => this.controller.abort(signal.reason), { once: true });
  }

  /** Sends the request now (it is sent on first iteration otherwise); throws the service's error. */
  async open(): Promise<this> {
    await this.start();
    return this;
  }

  private start(): Promise<Response> {
    this.response ??= this.opener(this.controller.signal);
    return this.response;
  }

  /** Drops the connection: an execution still running is cancelled. */
  close(): void {
    this.controller.abort();
  }

  /** Handles one event: an item to yield, or null (and may record the end). */
  protected abstract handle(event: ServerEvent): Promise<Item | null>;
  protected abstract get finished(): boolean;
  protected abstract endedEarly(): WasmRunnerError;
  protected abstract describeCut(): string;

  async *[Symbol.asyncIterator](): AsyncGenerator<Item> {
    if (this.used) throw new Error("the stream has been read already");
    this.used = true;
    try {
      const response = await this.start();
      if (response.body === null) throw this.endedEarly();
      let events: AsyncGenerator<ServerEvent>;
      try {
        events = readEvents(response.body);
        for await (const event of events) {
          const item = await this.handle(event);
          if (item !== null) yield item;
          if (this.finished) break;
        }
      } catch (error) {
        if (error instanceof WasmRunnerError || this.controller.signal.aborted) throw error;
        throw new TransportError(this.describeCut(), error);
      }
      if (!this.finished) throw this.endedEarly();
    } finally {
      this.close();
    }
  }
}

/** An execution answered as server-sent events: iterate for `OutputChunk`s; `result` once read to the end.
 * An `error` event throws the matching `WasmRunnerError`. */
export class ExecStream<R> extends EventStream<OutputChunk> {
  /** The final result; null until the stream has been read to its end. */
  result: R | null = null;
  private readonly tools: ToolHandlers | undefined;

  constructor(opener: Opener, signal?: AbortSignal, tools?: ToolHandlers) {
    super(opener, signal);
    this.tools = tools;
  }

  protected async handle({ event, data }: ServerEvent): Promise<OutputChunk | null> {
    switch (event) {
      case "stdout":
      case "stderr":
        return { stream: event, text: (JSON.parse(data) as { text?: string }).text ?? "" };
      case "tool_call":
        await this.tools?.onToolCall(JSON.parse(data) as ToolCallEvent);
        return null;
      case "approval_required":
        await this.tools?.onApproval(JSON.parse(data) as ApprovalEvent);
        return null;
      case "result":
        this.result = JSON.parse(data) as R;
        return null;
      case "error":
        throw errorFrom(null, data);
      default:
        return null;
    }
  }

  protected get finished(): boolean {
    return this.result !== null;
  }

  protected endedEarly(): WasmRunnerError {
    return new WasmRunnerError(null, "stream_ended", "the event stream ended without a result",
      "the connection was cut or the server stopped; run the code again");
  }

  protected describeCut(): string {
    return "the event stream was cut";
  }

  /** Reads to the end (dropping chunks not yet read) and answers the result. */
  async collect(): Promise<R> {
    if (this.result === null) {
      for await (const _chunk of this) {
        // output is in the result too
      }
    }
    return this.result as R;
  }
}

/** One stream of a background process, followed as server-sent events: iterate for `ProcessOutput` chunks;
 * `exit` says how the process ended once it has. `nextOffset` is where a new stream resumes without loss. */
export class ProcessOutputStream extends EventStream<ProcessOutput> {
  exit: ProcessExit | null = null;
  nextOffset: number;

  constructor(opener: Opener, offset: number, signal?: AbortSignal) {
    super(opener, signal);
    this.nextOffset = offset;
  }

  protected async handle({ event, data }: ServerEvent): Promise<ProcessOutput | null> {
    if (event === "output") {
      const chunk = JSON.parse(data) as ProcessOutput;
      this.nextOffset = chunk.next_offset;
      return chunk;
    }
    if (event === "exit") this.exit = JSON.parse(data) as ProcessExit;
    else if (event === "error") throw errorFrom(null, data);
    return null;
  }

  protected get finished(): boolean {
    return this.exit !== null;
  }

  protected endedEarly(): WasmRunnerError {
    return new WasmRunnerError(null, "stream_ended", "the output stream ended before the process did",
      `the connection was cut or the server stopped; follow again from offset ${this.nextOffset}`);
  }

  protected describeCut(): string {
    return `the output stream was cut (resume from offset ${this.nextOffset})`;
  }
}
