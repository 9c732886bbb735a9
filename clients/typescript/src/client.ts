// `WasmRunner`: the wasm-runner HTTP API over `fetch`, typed from the service's own schema.
import type { operations } from "./schema.d.ts";
import { errorFrom, TransportError, WasmRunnerError } from "./errors.ts";
import { ExecStream, ProcessOutputStream, type ToolHandlers } from "./streams.ts";
import type {
  ApprovalEvent, CancelResult, DeleteResult, EditResult, EgressPolicy, ExecBody, ExecResult, FileEdit, FileListing,
  GlobResult, GrepResult, Health, InstallResult, OneShotBody, OneShotResult, PackageLock, PackageRequest,
  PresignBody, PresignResult, PreviewLink, ProcessBody, ProcessInfo, ProcessList, ProcessOutput, ProcessStart,
  ProcessStdinResult, ProfileList, Readiness, SessionCreate, SessionForkResult, SessionInfo, SessionList,
  SessionPatch, SignalName, StreamName, TemplateInfo, TemplateList, ToolAnswer, ToolList, ToolSpec, UploadResult,
  WriteResult,
} from "./types.ts";

export const DEFAULT_URL = "http://127.0.0.1:8080";
const USER_AGENT = "wasm-runner-client-ts/0.1";

type Query<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;
type QueryValue = string | number | boolean | null | undefined;

/** Retries of calls answered 429 (no execution slot) or 503 (not ready, shutting down): both come before any
 * work is done, so retrying is safe. Retry-After is honoured; otherwise exponential backoff with jitter. */
export interface RetryOptions {
  /** Retries after the first try (0: none). Default 3. */
  attempts?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  /** A longer Retry-After is not waited for: the error is thrown at once. Default 60 000. */
  maxRetryAfterMs?: number;
}

export interface WasmRunnerOptions {
  /** The service, e.g. http://127.0.0.1:8080 (default: $WASM_RUNNER_URL where there is an environment). */
  url?: string;
  /** Sent as `Authorization: Bearer …` (default: $WASM_RUNNER_API_KEY where there is an environment). */
  apiKey?: string;
  headers?: Record<string, string>;
  retry?: RetryOptions;
  /** Another fetch (a proxy's, a test's); default: the global one. */
  fetch?: typeof fetch;
}

/** What a tool given to `exec({tools})` is: a function of its keyword arguments, or one with its schema. */
export type Tool = ((args: Record<string, unknown>) => unknown) | {
  run: (args: Record<string, unknown>) => unknown;
  description?: string;
  /** A JSON schema of type object: the keyword arguments (the service checks calls against it). */
  parameters?: Record<string, unknown>;
  returns?: Record<string, unknown> | null;
  /** Each call waits for `onApproval` before it runs. */
  approval?: boolean;
};

export interface ExecOptions extends Omit<ExecBody, "code" | "tools"> {
  /** Functions the code may call (`await tools.name({...})`, `sandbox.tools.name(...)`): each call runs here. */
  tools?: Record<string, Tool>;
  /** Decides each call of a tool that needs approval: true runs it; no callback, false or a throw refuses it. */
  onApproval?: (event: ApprovalEvent) => boolean | Promise<boolean>;
  /** Aborts the request (a stream's connection: the execution is cancelled). */
  signal?: AbortSignal;
}

/** A file's contents as `writeFile` and `upload` take them. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

interface Request {
  query?: Record<string, QueryValue> | undefined;
  json?: unknown;
  body?: BodyInit | undefined;
  headers?: Record<string, string>;
  /** Error statuses answered with a normal body (GET /readyz answers 503 with a Readiness). */
  accept?: number[];
  retry?: boolean;
  signal?: AbortSignal | undefined;
}

/** The wasm-runner service over HTTP.
 *
 *     const runner = new WasmRunner({ url: "http://127.0.0.1:8080", apiKey: "wr_…" });
 *     const session = await runner.createSession();
 *     const result = await runner.exec(session.id, "x = 6 * 7\nx");
 *     console.log(result.value); // '42'
 *
 * Errors throw `WasmRunnerError` with the service's `status`, `code`, `message` and `hint`. */
export class WasmRunner {
  readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly retry: Required<RetryOptions>;
  private readonly fetchImpl: typeof fetch;

  constructor(options: WasmRunnerOptions = {}) {
    const url = options.url ?? environment("WASM_RUNNER_URL") ?? DEFAULT_URL;
    this.url = url.endsWith("/") ? url : `${url}/`;
    const apiKey = options.apiKey ?? environment("WASM_RUNNER_API_KEY");
    this.headers = { "User-Agent": USER_AGENT, ...options.headers };
    if (apiKey) this.headers.Authorization = `Bearer ${apiKey}`;
    this.retry = { attempts: 3, backoffMs: 500, maxBackoffMs: 8000, maxRetryAfterMs: 60_000, ...options.retry };
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // -- sending ------------------------------------------------------------------------------------------

  /** Sends one request (retrying 429/503 when its body can be sent again); throws the service's error. */
  async send(method: string, path: string, request: Request = {}): Promise<Response> {
    const url = this.resolve(path, request.query);
    const headers: Record<string, string> = { ...this.headers, ...request.headers };
    let body = request.body;
    if (request.json !== undefined) {
      body = JSON.stringify(request.json);
      headers["Content-Type"] = "application/json";
    }
    const streamed = typeof ReadableStream !== "undefined" && body instanceof ReadableStream;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        // A streamed body needs half duplex (fetch's rule); it cannot be sent twice, so it is not retried.
        const init: RequestInit & { duplex?: "half" } = { method, headers, body: body ?? null,
                                                          signal: request.signal ?? null };
        if (streamed) init.duplex = "half";
        response = await this.fetchImpl(url, init);
      } catch (error) {
        if (request.signal?.aborted) throw error;
        throw new TransportError(`${method} ${path}: ${describe(error)}`, error);
      }
      if (response.ok || request.accept?.includes(response.status)) return response;
      const delay = request.retry !== false && !streamed ? this.delay(attempt, response) : null;
      const text = await response.text().catch(() => "");
      if (delay === null) throw errorFrom(response.status, text, response.headers);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  private async json<T>(method: string, path: string, request: Request = {}): Promise<T> {
    const response = await this.send(method, path, request);
    return (await response.json()) as T;
  }

  private delay(attempt: number, response: Response): number | null {
    if ((response.status !== 429 && response.status !== 503) || attempt >= this.retry.attempts) return null;
    const after = retryAfterMs(response.headers.get("retry-after"));
    if (after !== null) {
      return after > this.retry.maxRetryAfterMs ? null : after + Math.random() * Math.min(0.1 * after, 250);
    }
    return Math.min(this.retry.maxBackoffMs, this.retry.backoffMs * 2 ** attempt) * (0.5 + Math.random() / 2);
  }

  /** The absolute URL of an API path (already percent-encoded, from "/") with its query. */
  resolve(path: string, query?: Record<string, QueryValue>): string {
    const url = new URL(path.replace(/^\/+/, ""), this.url);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  /** Any endpoint, for what the typed methods do not cover: `body` is sent as JSON, the answer parsed as JSON. */
  async call<T>(method: string, path: string, options: { body?: unknown; query?: Record<string, QueryValue> } = {})
    : Promise<T> {
    return this.json<T>(method, path, { json: options.body, query: options.query });
  }

  // -- service ------------------------------------------------------------------------------------------

  health(): Promise<Health> {
    return this.json("GET", "/healthz");
  }

  /** Whether the service is ready (answered, not thrown, when it is not). */
  readiness(): Promise<Readiness> {
    return this.json("GET", "/readyz", { accept: [503], retry: false });
  }

  profiles(): Promise<ProfileList> {
    return this.json("GET", "/v1/profiles");
  }

  // -- sessions -----------------------------------------------------------------------------------------

  /** A new session (cheap: no interpreter or directory until its first use). */
  createSession(options: SessionCreate = {}): Promise<SessionInfo> {
    return this.json("POST", "/v1/sessions", { json: options });
  }

  getSession(sessionId: string): Promise<SessionInfo> {
    return this.json("GET", sessionPath(sessionId));
  }

  listSessions(query: Query<"get_v1_sessions"> = {}): Promise<SessionList> {
    return this.json("GET", "/v1/sessions", { query });
  }

  /** Every session, oldest first, page after page. */
  async *iterSessions(pageSize = 100): AsyncGenerator<SessionInfo> {
    let cursor: string | null | undefined;
    do {
      const page = await this.listSessions({ cursor, limit: pageSize });
      yield* page.sessions;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** Change a live session from its next call on: `egress` narrows its profile's network policy (403 if wider;
   * null goes back to the profile's), `expires_in_s` ends it that long from now. */
  updateSession(sessionId: string, patch: SessionPatch): Promise<SessionInfo> {
    return this.json("PATCH", sessionPath(sessionId), { json: patch });
  }

  /** Narrow (or with null, reset) the session's network policy; `updateSession` with `egress` only. */
  setEgress(sessionId: string, egress: EgressPolicy | "deny" | "open" | null): Promise<SessionInfo> {
    return this.updateSession(sessionId, { egress });
  }

  async deleteSession(sessionId: string): Promise<void> {
    await this.send("DELETE", sessionPath(sessionId));
  }

  /** Hibernate the session now: its kernels saved with its files and dropped, its processes ended; the next call restores them. */
  hibernate(sessionId: string): Promise<SessionInfo> {
    return this.json("POST", `${sessionPath(sessionId)}:hibernate`);
  }

  /** `count` new sessions, each a copy of this one's files, packages, network policy and kernel state. */
  fork(sessionId: string, count = 1): Promise<SessionForkResult> {
    return this.json("POST", `${sessionPath(sessionId)}:fork`, { json: { count } });
  }

  /** Stop the session's running execution (its caller gets a `cancelled` result). */
  cancel(sessionId: string): Promise<CancelResult> {
    return this.json("POST", sessionPath(sessionId, "cancel"));
  }

  // -- templates ----------------------------------------------------------------------------------------

  /** Publish the session's state (files, packages, kernels) as the workspace's template `name`. */
  publishTemplate(name: string, sessionId: string): Promise<TemplateInfo> {
    return this.json("POST", "/v1/templates", { json: { name, session: sessionId } });
  }

  async listTemplates(): Promise<TemplateInfo[]> {
    return (await this.json<TemplateList>("GET", "/v1/templates")).templates;
  }

  getTemplate(name: string): Promise<TemplateInfo> {
    return this.json("GET", `/v1/templates/${segment(name)}`);
  }

  async deleteTemplate(name: string): Promise<void> {
    await this.send("DELETE", `/v1/templates/${segment(name)}`);
  }

  // -- packages -----------------------------------------------------------------------------------------

  /** Install packages into the session (a refusal is a result with `ok` false and an `error`). */
  install(sessionId: string, request: PackageRequest): Promise<InstallResult> {
    return this.json("POST", sessionPath(sessionId, "packages"), { json: request });
  }

  /** The session's lock: give it as `packages: {lock}` to `createSession` to replay it. */
  packages(sessionId: string): Promise<PackageLock> {
    return this.json("GET", sessionPath(sessionId, "packages"));
  }

  /** The tools the session's code gets from its profile, with their generated API to show a model. */
  tools(sessionId: string): Promise<ToolList> {
    return this.json("GET", sessionPath(sessionId, "tools"));
  }

  // -- execution ----------------------------------------------------------------------------------------

  /** Run `code` (or the workspace file `options.path`) in the session's kernel.
   *
   * With `tools`, each call the code makes runs here and its result (or its error's message) goes back to
   * the code; the result lists the calls in `tool_calls`. */
  async exec(sessionId: string, code: string | null = null, options: ExecOptions = {}): Promise<ExecResult> {
    if (options.tools !== undefined || options.onApproval !== undefined) {
      return this.execStream(sessionId, code, options).collect();
    }
    const { signal, tools: _tools, onApproval: _onApproval, ...body } = options;
    return this.json("POST", sessionPath(sessionId, "exec"), { json: { ...body, code }, signal });
  }

  /** Like `exec`, yielding output as it happens; `stream.result` once read to the end.
   *
   *     const stream = runner.execStream(id, "for i in range(3): print(i)");
   *     for await (const chunk of stream) process.stdout.write(chunk.text);
   *     console.log(stream.result?.exit_code);
   *
   * Leaving the loop early (or `close()`) drops the connection, which cancels the execution. */
  execStream(sessionId: string, code: string | null = null, options: ExecOptions = {}): ExecStream<ExecResult> {
    const { signal, tools, onApproval, ...body } = options;
    const table = tools === undefined ? undefined : toolTable(tools);
    const handlers: ToolHandlers | undefined = table === undefined && onApproval === undefined ? undefined : {
      onToolCall: async (event) => {
        const answer = await runTool(table?.functions.get(event.tool), event.tool, event.arguments);
        await this.answer(sessionPath(sessionId, "tool-calls", segment(event.call_id)), answer);
      },
      onApproval: async (event) => {
        let approve = false;
        try {
          approve = onApproval !== undefined && (await onApproval(event)) === true;
        } catch {
          approve = false; // a failing callback refuses the call
        }
        await this.answer(sessionPath(sessionId, "approvals", segment(event.approval_id)), { approve });
      },
    };
    const json = { ...body, code, tools: table?.specs };
    return new ExecStream<ExecResult>(
      (abort) => this.send("POST", sessionPath(sessionId, "exec"), { json, headers: SSE, signal: abort }),
      signal, handlers);
  }

  /** Posts a tool's answer or an approval decision; one whose call ended meanwhile is let go. */
  private async answer(path: string, body: ToolAnswer | { approve: boolean }): Promise<void> {
    try {
      await this.send("POST", path, { json: body });
    } catch (error) {
      if (!(error instanceof WasmRunnerError && error.status === 404)) throw error;
    }
  }

  /** Run a program natively (bubblewrap) in the session's workspace. */
  process(sessionId: string, command: string[], options: Omit<ProcessBody, "command"> & { signal?: AbortSignal } = {})
    : Promise<ExecResult> {
    const { signal, ...body } = options;
    return this.json("POST", sessionPath(sessionId, "process"), { json: { ...body, command }, signal });
  }

  processStream(sessionId: string, command: string[],
                options: Omit<ProcessBody, "command"> & { signal?: AbortSignal } = {}): ExecStream<ExecResult> {
    const { signal, ...body } = options;
    return new ExecStream<ExecResult>((abort) => this.send("POST", sessionPath(sessionId, "process"),
      { json: { ...body, command }, headers: SSE, signal: abort }), signal);
  }

  /** Run once in a throwaway workspace seeded with `files`, returning the `output_files` asked for. */
  run(body: OneShotBody, options: { signal?: AbortSignal } = {}): Promise<OneShotResult> {
    return this.json("POST", "/v1/exec", { json: body, signal: options.signal });
  }

  runStream(body: OneShotBody, options: { signal?: AbortSignal } = {}): ExecStream<OneShotResult> {
    return new ExecStream<OneShotResult>(
      (abort) => this.send("POST", "/v1/exec", { json: body, headers: SSE, signal: abort }), options.signal);
  }

  // -- background processes and previews ---------------------------------------------------------------

  /** Start a process that keeps running after the call (natively, in the session's sandbox): a `command`
   * (argv) or `code` in `language`. Its output is kept by the service and read with `processOutput`. */
  startProcess(sessionId: string, start: ProcessStart): Promise<ProcessInfo> {
    return this.json("POST", sessionPath(sessionId, "processes"), { json: start });
  }

  listProcesses(sessionId: string): Promise<ProcessList> {
    return this.json("GET", sessionPath(sessionId, "processes"));
  }

  getProcess(sessionId: string, processId: string): Promise<ProcessInfo> {
    return this.json("GET", processPath(sessionId, processId));
  }

  /** Output of one stream from byte `offset`; ask from `next_offset` next time (nothing lost or repeated).
   * `wait_s` waits that long for bytes past `offset` when there are none yet. */
  processOutput(sessionId: string, processId: string, query: Query<"get_v1_sessions_id_processes_pid_output"> = {})
    : Promise<ProcessOutput> {
    return this.json("GET", processPath(sessionId, processId, "output"), { query });
  }

  /** Follow one stream from `offset` as it is written, until the process ends; `exit` then says how.
   * After a cut connection, follow again from `stream.nextOffset`. */
  processOutputStream(sessionId: string, processId: string,
                      options: { stream?: StreamName; offset?: number; signal?: AbortSignal } = {})
    : ProcessOutputStream {
    const offset = options.offset ?? 0;
    return new ProcessOutputStream((abort) => this.send("GET", processPath(sessionId, processId, "output"),
      { query: { stream: options.stream ?? "stdout", offset }, headers: SSE, signal: abort }), offset, options.signal);
  }

  /** Write to the process's stdin (its terminal for a pty process): text as UTF-8, bytes as base64. */
  sendInput(sessionId: string, processId: string, data: string | Uint8Array, options: { eof?: boolean } = {})
    : Promise<ProcessStdinResult> {
    const body = typeof data === "string" ? { data, eof: options.eof ?? false }
      : { data: toBase64(data), encoding: "base64", eof: options.eof ?? false };
    return this.json("POST", processPath(sessionId, processId, "stdin"), { json: body, retry: false });
  }

  /** Send `signal` to the process (`tree`: to every process of its sandbox). */
  signalProcess(sessionId: string, processId: string, signal: SignalName = "TERM", options: { tree?: boolean } = {})
    : Promise<ProcessInfo> {
    return this.json("POST", processPath(sessionId, processId, "signal"),
      { json: { signal, tree: options.tree ?? false } });
  }

  /** Stop the process and its whole tree (TERM, then KILL after the service's grace period). */
  stopProcess(sessionId: string, processId: string): Promise<ProcessInfo> {
    return this.json("DELETE", processPath(sessionId, processId));
  }

  /** A link to the server listening on `port` in the session's sandbox, for a browser (no key) until it
   * expires; `url` is absolute, on an origin of its own. */
  async previewUrl(sessionId: string, port: number, options: { expires_in?: number | null } = {})
    : Promise<PreviewLink> {
    const link = await this.json<PreviewLink>("POST", sessionPath(sessionId, "ports", `${portNumber(port)}:presign`),
      { json: options });
    return { ...link, url: new URL(link.url, this.url).toString() };
  }

  /** The API's URL of `path` on the server on `port`: with this client's key it answers 307 to the preview's
   * own origin. */
  portUrl(sessionId: string, port: number, path = ""): string {
    return this.resolve(sessionPath(sessionId, "ports", String(portNumber(port)), filePath(path.replace(/^\/+/, ""))));
  }

  // -- files --------------------------------------------------------------------------------------------

  /** A file's bytes (a directory is refused with code `is_a_directory`). */
  async readFile(sessionId: string, path: string): Promise<Uint8Array> {
    const response = await this.fileResponse(sessionId, path);
    return new Uint8Array(await response.arrayBuffer());
  }

  async readText(sessionId: string, path: string): Promise<string> {
    return new TextDecoder().decode(await this.readFile(sessionId, path));
  }

  /** A file's bytes as a stream, as they arrive (for large files). */
  async download(sessionId: string, path: string, options: { signal?: AbortSignal } = {})
    : Promise<ReadableStream<Uint8Array>> {
    const response = await this.fileResponse(sessionId, path, options.signal);
    if (response.body === null) return new Blob([]).stream();
    return response.body;
  }

  private async fileResponse(sessionId: string, path: string, signal?: AbortSignal): Promise<Response> {
    const response = await this.send("GET", sessionPath(sessionId, "files", filePath(path)), { signal });
    // GET on a directory answers its listing as JSON; a file's answer always has Accept-Ranges.
    if (!response.headers.has("accept-ranges")
        && (response.headers.get("content-type") ?? "").startsWith("application/json")) {
      await response.body?.cancel();
      throw new WasmRunnerError(409, "is_a_directory", `${JSON.stringify(path)} is a directory`,
        "use listFiles for its entries");
    }
    return response;
  }

  /** Write (atomically replace) a file: text (UTF-8), bytes, a Blob, or a stream (sent as it is read). */
  writeFile(sessionId: string, path: string, data: FileData, options: { mkdirs?: boolean } = {})
    : Promise<WriteResult> {
    return this.json("PUT", sessionPath(sessionId, "files", filePath(path)), {
      query: { mkdirs: options.mkdirs ?? true }, body: data instanceof Uint8Array ? copy(data) : data,
      headers: { "Content-Type": "application/octet-stream" },
    });
  }

  /** Several files in one multipart request: workspace path (under `dir`) → contents. */
  upload(sessionId: string, files: Record<string, string | Uint8Array | ArrayBuffer | Blob>,
         options: { dir?: string } = {}): Promise<UploadResult> {
    const form = new FormData();
    for (const [name, data] of Object.entries(files)) {
      const blob = data instanceof Blob ? data : new Blob([data instanceof Uint8Array ? copy(data) : data]);
      // The part's file name is the workspace path, percent-encoded so any name survives the header.
      form.append("file", blob, name.split("/").map((part) => encodeURIComponent(part)).join("/"));
    }
    return this.json("POST", sessionPath(sessionId, "files"), { query: { dir: options.dir || undefined }, body: form });
  }

  deleteFile(sessionId: string, path: string, options: { recursive?: boolean } = {}): Promise<DeleteResult> {
    return this.json("DELETE", sessionPath(sessionId, "files", filePath(path)),
      { query: { recursive: options.recursive || undefined } });
  }

  /** Exact search-and-replace (`old_text` → `new_text`), several at once (`edits`), or a unified diff (`patch`). */
  editFile(sessionId: string, path: string, edit: FileEdit): Promise<EditResult> {
    return this.json("PATCH", sessionPath(sessionId, "files", filePath(path)), { json: edit });
  }

  listFiles(sessionId: string, query: Query<"get_v1_sessions_id_files"> = {}): Promise<FileListing> {
    return this.json("GET", sessionPath(sessionId, "files"), { query });
  }

  glob(sessionId: string, pattern: string, options: { limit?: number } = {}): Promise<GlobResult> {
    return this.json("GET", sessionPath(sessionId, "glob"), { query: { pattern, limit: options.limit } });
  }

  grep(sessionId: string, pattern: string, options: Omit<Query<"get_v1_sessions_id_grep">, "pattern"> = {})
    : Promise<GrepResult> {
    return this.json("GET", sessionPath(sessionId, "grep"), { query: { ...options, pattern } });
  }

  /** A folder of the workspace as a zip or tar.gz archive, streamed. */
  async downloadArchive(sessionId: string, query: Query<"get_v1_sessions_id_archive"> = {})
    : Promise<ReadableStream<Uint8Array>> {
    const response = await this.send("GET", sessionPath(sessionId, "archive"), { query });
    return response.body ?? new Blob([]).stream();
  }

  /** A link that reads (GET) or writes (PUT) one file without a key until it expires; `url` is absolute. */
  async presign(sessionId: string, path: string, options: PresignBody = {}): Promise<PresignResult> {
    const result = await this.json<PresignResult>("POST",
      `${sessionPath(sessionId, "files", filePath(path))}:presign`, { json: options });
    return { ...result, url: new URL(result.url, this.url).toString() };
  }

  /** The URL of a workspace file (GET it with this client's Authorization header). */
  fileUrl(sessionId: string, path: string): string {
    return this.resolve(sessionPath(sessionId, "files", filePath(path)));
  }
}

// -- paths ------------------------------------------------------------------------------------------------

const SSE = { Accept: "text/event-stream" };

/** One path segment, percent-encoded. "." and ".." are refused: a URL parser resolves them (even encoded as
 * %2E) into another endpoint, so they could never reach the service as a name. */
export function segment(value: string): string {
  if (value === "" || value === "." || value === "..") {
    throw new WasmRunnerError(null, "invalid_path", `${JSON.stringify(value)} is not a valid name or path segment`,
      "give a relative workspace path without '.' or '..' segments (and a non-empty id)");
  }
  return encodeURIComponent(value);
}

/** A workspace path in a URL: each segment percent-encoded, `/` kept; "." and ".." segments refused. */
export function filePath(path: string): string {
  return path.split("/").map((part) => (part === "" ? "" : segment(part))).join("/");
}

function sessionPath(sessionId: string, ...rest: string[]): string {
  return ["/v1/sessions", segment(sessionId), ...rest].join("/");
}

function processPath(sessionId: string, processId: string, ...rest: string[]): string {
  return sessionPath(sessionId, "processes", segment(processId), ...rest);
}

function portNumber(port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new WasmRunnerError(null, "invalid_port", `${port} is not a TCP port`, "give an integer from 1 to 65535");
  }
  return port;
}

// -- tools --------------------------------------------------------------------------------------------------

interface ToolTable {
  specs: ToolSpec[];
  functions: Map<string, (args: Record<string, unknown>) => unknown>;
}

function toolTable(tools: Record<string, Tool>): ToolTable {
  const specs: ToolSpec[] = [];
  const functions = new Map<string, (args: Record<string, unknown>) => unknown>();
  for (const [name, tool] of Object.entries(tools)) {
    if (typeof tool === "function") {
      specs.push({ name, parameters: { type: "object", properties: {}, additionalProperties: true } });
      functions.set(name, tool);
    } else {
      specs.push({
        name, description: tool.description ?? "", approval: tool.approval ?? false, returns: tool.returns ?? null,
        parameters: tool.parameters ?? { type: "object", properties: {}, additionalProperties: true },
      });
      functions.set(name, tool.run);
    }
  }
  return { specs, functions };
}

/** A tool's result as the answer posted back: its JSON value, or its error's message. */
export async function runTool(fn: ((args: Record<string, unknown>) => unknown) | undefined, name: string,
                              args: Record<string, unknown>): Promise<ToolAnswer> {
  if (fn === undefined) return { ok: false, error: `this client has no tool ${JSON.stringify(name)}` };
  let value: unknown;
  try {
    value = await fn(args);
  } catch (error) {
    return { ok: false, error: (error instanceof Error ? error.message || error.name : String(error)).slice(0, 16384) };
  }
  try {
    // JSON carries it, or the code gets a clear error rather than a silently changed value.
    return { ok: true, value: value === undefined ? null : JSON.parse(JSON.stringify(value)) };
  } catch (error) {
    return { ok: false, error: `the tool returned a value JSON cannot carry: ${describe(error)}` };
  }
}

// -- helpers ------------------------------------------------------------------------------------------------

function environment(name: string): string | undefined {
  // Node, Deno and Bun have an environment; a browser or a worker does not (then: the options only).
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.[name] || undefined;
}

function retryAfterMs(value: string | null): number | null {
  if (!value) return null;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds)) return Math.max(seconds, 0) * 1000;
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(when - Date.now(), 0);
}

function toBase64(data: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < data.length; i += 0x8000) binary += String.fromCharCode(...data.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** A copy backed by a plain ArrayBuffer (what BodyInit and Blob take in every runtime's types). */
function copy(data: Uint8Array): Uint8Array<ArrayBuffer> {
  return new Uint8Array(data);
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
    return `${error.message}${cause}`;
  }
  return String(error);
}
