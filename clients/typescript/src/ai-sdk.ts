// The Vercel AI SDK on wasm-runner (`@wasm-runner/client/ai-sdk`; `ai` is an optional peer dependency):
//  - `WasmRunnerSandbox`: the AI SDK's `Experimental_SandboxSession` (the `experimental_sandbox` of
//    `generateText`/`streamText`/agents) on one wasm-runner session: files through the files API, commands
//    in the native tier's bash, with the session's workspace (`/workspace`) as the base directory;
//  - `wasmRunnerTools`: AI SDK tools on such a session (runCode in a kernel, files, runCommand).
import {
  jsonSchema, tool,
  type Experimental_SandboxDirectoryEntry as SandboxDirectoryEntry,
  type Experimental_SandboxFileStat as SandboxFileStat,
  type Experimental_SandboxProcess as SandboxProcess,
  type Experimental_SandboxSession as SandboxSession,
  type Tool,
} from "ai";
import type { WasmRunner } from "./client.ts";
import { WasmRunnerError } from "./errors.ts";
import type { ExecResult, ProcessInfo, SessionCreate } from "./types.ts";

type SandboxRunOptions = Parameters<SandboxSession["run"]>[0];
type SandboxSpawnOptions = SandboxRunOptions & { stdin?: boolean };
type PathOptions = { path: string; abortSignal?: AbortSignal };
/** A spawned process with its stdin open (the AI SDK's `WritableSandboxProcess`, not exported by `ai`). */
type WritableSandboxProcess = SandboxProcess & { readonly stdin: WritableStream<Uint8Array> };

/** Where the session's files are, as its commands see them. */
export const WORKSPACE = "/workspace";
const LISTING_LIMIT = 10_000;
const WAIT_POLL_MS = { first: 50, max: 500 };

export interface WasmRunnerSandboxOptions {
  /** Use this session; default: one created (with `session`) on first use and kept. */
  sessionId?: string;
  /** How to create the session when no `sessionId` is given (profile, limits, egress, template...). */
  session?: SessionCreate;
  /** Seconds one `run` may take (the service caps it); default: the session's limit. */
  timeoutS?: number;
  /** Replaces the default description given to the model. */
  description?: string;
}

/** The AI SDK's sandbox session on a wasm-runner session.
 *
 * Relative paths resolve against `/workspace`, the session's workspace and the commands' working directory.
 * Files outside it are not reachable through the files methods (they reject with code `outside_workspace`);
 * commands see the whole sandbox (`/tmp` included). */
export class WasmRunnerSandbox implements SandboxSession {
  readonly runner: WasmRunner;
  readonly description: string;
  private readonly timeoutS: number | undefined;
  private readonly create: SessionCreate;
  private session: Promise<string> | null;

  constructor(runner: WasmRunner, options: WasmRunnerSandboxOptions = {}) {
    this.runner = runner;
    this.timeoutS = options.timeoutS;
    this.create = options.session ?? {};
    this.session = options.sessionId === undefined ? null : Promise.resolve(options.sessionId);
    this.description = options.description ?? [
      `A Linux sandbox whose working directory is ${WORKSPACE} (relative paths resolve there; files persist`,
      "between commands). Commands run in bash with the usual command-line tools, Python and Node.js;",
      "there is no network access unless the session's egress policy grants it.",
    ].join(" ");
  }

  /** The session's id (created on first use unless one was given). */
  sessionId(): Promise<string> {
    return this.session ??= this.runner.createSession(this.create).then((info) => info.id);
  }

  async readFile({ path, abortSignal }: PathOptions): Promise<ReadableStream<Uint8Array> | null> {
    const id = await this.sessionId();
    return missingAsNull(this.runner.download(id, workspacePath(path), { signal: abortSignal }));
  }

  async readBinaryFile({ path }: PathOptions): Promise<Uint8Array | null> {
    const id = await this.sessionId();
    return missingAsNull(this.runner.readFile(id, workspacePath(path)));
  }

  async readTextFile(options: PathOptions & { encoding?: string; startLine?: number; endLine?: number })
    : Promise<string | null> {
    const bytes = await this.readBinaryFile(options);
    if (bytes === null) return null;
    const text = new TextDecoder(options.encoding ?? "utf-8").decode(bytes);
    if (options.startLine === undefined && options.endLine === undefined) return text;
    const lines = text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
    return lines.slice(Math.max(0, (options.startLine ?? 1) - 1), options.endLine ?? lines.length).join("");
  }

  async writeFile({ path, content }: { path: string; content: ReadableStream<Uint8Array> }): Promise<void> {
    await this.runner.writeFile(await this.sessionId(), workspacePath(path), content);
  }

  async writeBinaryFile({ path, content }: { path: string; content: Uint8Array }): Promise<void> {
    await this.runner.writeFile(await this.sessionId(), workspacePath(path), content);
  }

  async writeTextFile({ path, content, encoding }: { path: string; content: string; encoding?: string })
    : Promise<void> {
    if (encoding !== undefined && !/^utf-?8$/i.test(encoding)) {
      throw new WasmRunnerError(null, "unsupported_encoding", `cannot encode text as ${JSON.stringify(encoding)}`,
        "write UTF-8 text, or encode it yourself and use writeBinaryFile");
    }
    await this.runner.writeFile(await this.sessionId(), workspacePath(path), content);
  }

  async stat({ path }: PathOptions): Promise<SandboxFileStat | null> {
    const relative = workspacePath(path);
    if (relative === "") return { type: "directory", size: 0 };
    const entry = await this.entry(relative);
    if (entry === null) return null;
    if (entry.type !== "symlink") {
      return { type: entry.type === "file" || entry.type === "directory" ? entry.type : "other", size: entry.size };
    }
    // The listing does not follow links; the sandbox does (a dangling link is not there).
    const followed = await this.run({ command: `stat -L -c '%F/%s' -- ${shellQuote(`${WORKSPACE}/${relative}`)}` });
    const match = /^(.*)\/(\d+)\n?$/.exec(followed.stdout);
    if (followed.exitCode !== 0 || match === null) return null;
    const kind = match[1]!;
    return { type: kind.includes("regular") ? "file" : kind === "directory" ? "directory" : "other",
             size: Number(match[2]) };
  }

  async listDirectory({ path }: PathOptions): Promise<SandboxDirectoryEntry[] | null> {
    const relative = workspacePath(path);
    const entries = await this.entries(relative);
    // The service lists a file as itself.
    if (relative !== "" && entries?.length === 1 && entries[0]!.path === relative && entries[0]!.type !== "directory") {
      throw new WasmRunnerError(null, "not_a_directory", `${JSON.stringify(path)} is not a directory`,
        "list its directory, or read the file");
    }
    return entries?.map((entry) => ({ name: entry.path.slice(entry.path.lastIndexOf("/") + 1), type: entry.type }))
      ?? null;
  }

  async deleteFile({ path }: PathOptions): Promise<boolean> {
    const relative = workspacePath(path);
    const found = relative === "" ? { type: "directory" } : await this.entry(relative);
    if (found === null) return false;
    if (found.type === "directory") { // a link to a directory is a link: deleted itself
      throw new WasmRunnerError(null, "is_a_directory", `${JSON.stringify(path)} is a directory`,
        "deleteFile deletes files only; remove a directory with a command (rm -r)");
    }
    const id = await this.sessionId();
    return (await missingAsNull(this.runner.deleteFile(id, relative))) !== null;
  }

  /** Runs `command` with bash in the session's native sandbox and waits for it. A failing command is a
   * non-zero `exitCode`; a limit reached (time, memory, output) says so on stderr. */
  async run({ command, workingDirectory, env, abortSignal }: SandboxRunOptions)
    : Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const id = await this.sessionId();
    const result = await this.runner.exec(id, inDirectory(command, workingDirectory), {
      language: "bash", env, signal: abortSignal,
      ...(this.timeoutS === undefined ? {} : { limits: { timeout_s: this.timeoutS } }),
    });
    return { exitCode: exitCodeOf(result), stdout: result.stdout ?? "", stderr: stderrOf(result) };
  }

  /** Starts `command` with bash as a background process of the session; its output streams as it is
   * written, `wait()` resolves when it ends, `kill()` stops its whole process tree. */
  spawn(options: SandboxRunOptions & { stdin: true }): Promise<WritableSandboxProcess>;
  spawn(options: SandboxRunOptions & { stdin?: false }): Promise<SandboxProcess>;
  spawn(options: SandboxSpawnOptions): Promise<SandboxProcess | WritableSandboxProcess>;
  async spawn({ command, workingDirectory, env, abortSignal, stdin }: SandboxSpawnOptions)
    : Promise<SandboxProcess | WritableSandboxProcess> {
    abortSignal?.throwIfAborted();
    const id = await this.sessionId();
    const info = await this.runner.startProcess(id, {
      command: ["bash", "-c", inDirectory(command, workingDirectory)], env, stdin: stdin === true,
    });
    const process = new BackgroundProcess(this.runner, id, info);
    abortSignal?.addEventListener("abort", () => process.abort(abortSignal.reason), { once: true });
    if (stdin !== true) return process.handle();
    return { ...process.handle(), stdin: process.stdin() };
  }

  /** One path's entry in its directory's listing (links not followed); null when it is not there. */
  private async entry(relative: string): Promise<{ path: string; type: SandboxDirectoryEntry["type"]; size: number }
    | null> {
    const slash = relative.lastIndexOf("/");
    const entries = await this.entries(slash < 0 ? "" : relative.slice(0, slash));
    return entries?.find((candidate) => candidate.path === relative) ?? null;
  }

  /** Lists a directory (workspace-relative entries); null when it does not exist. */
  private async entries(relative: string): Promise<{ path: string; type: SandboxDirectoryEntry["type"]; size: number }[]
    | null> {
    const id = await this.sessionId();
    const listing = await missingAsNull(this.runner.listFiles(id, { path: relative, limit: LISTING_LIMIT }));
    return listing?.entries ?? null;
  }
}

/** A process started by `spawn`, followed through the service's process API. */
class BackgroundProcess {
  private readonly runner: WasmRunner;
  private readonly sessionId: string;
  private readonly info: ProcessInfo;
  private aborted: { reason: unknown } | null = null;
  private ended: Promise<{ exitCode: number }> | null = null;

  constructor(runner: WasmRunner, sessionId: string, info: ProcessInfo) {
    this.runner = runner;
    this.sessionId = sessionId;
    this.info = info;
  }

  handle(): SandboxProcess {
    return {
      ...(typeof this.info.pid === "number" ? { pid: this.info.pid } : {}),
      stdout: this.output("stdout"),
      stderr: this.output("stderr"),
      wait: () => this.wait(),
      kill: () => this.kill(),
    };
  }

  stdin(): WritableStream<Uint8Array> {
    return new WritableStream<Uint8Array>({
      write: async (chunk) => {
        await this.runner.sendInput(this.sessionId, this.info.id, chunk);
      },
      close: async () => {
        try {
          await this.runner.sendInput(this.sessionId, this.info.id, "", { eof: true });
        } catch (error) {
          // A process that already ended (it read what it needed and exited) has nothing to close.
          if (!(error instanceof WasmRunnerError && error.code === "process_not_running")) throw error;
        }
      },
    });
  }

  abort(reason: unknown): void {
    this.aborted = { reason };
    void this.kill();
  }

  async kill(): Promise<void> {
    try {
      await this.runner.stopProcess(this.sessionId, this.info.id);
    } catch (error) {
      if (!(error instanceof WasmRunnerError && (error.status === 404 || error.status === 409))) throw error;
    }
  }

  wait(): Promise<{ exitCode: number }> {
    return this.ended ??= (async () => {
      let pause = WAIT_POLL_MS.first;
      for (;;) {
        const info = await this.runner.getProcess(this.sessionId, this.info.id);
        if (info.state !== "running" && info.state !== "starting") {
          if (this.aborted !== null) throw this.aborted.reason;
          return { exitCode: info.exit_code ?? (info.signal ? 128 + signalNumber(info.signal) : 1) };
        }
        await new Promise((resolve) => setTimeout(resolve, pause));
        pause = Math.min(pause * 2, WAIT_POLL_MS.max);
      }
    })();
  }

  /** One output stream as bytes, read from the service as it is written, until the process ends. */
  private output(stream: "stdout" | "stderr"): ReadableStream<Uint8Array> {
    const follow = this.runner.processOutputStream(this.sessionId, this.info.id, { stream });
    const chunks = follow[Symbol.asyncIterator]();
    const encoder = new TextEncoder();
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        for (;;) { // a pull must enqueue or close: a reader waiting on one that did neither is never woken
          const next = await chunks.next();
          if (next.done) {
            controller.close();
            return;
          }
          const { data, encoding } = next.value;
          if (data !== "") {
            controller.enqueue(encoding === "base64" ? fromBase64(data) : encoder.encode(data));
            return;
          }
        }
      },
      cancel: () => follow.close(),
    }, { highWaterMark: 0 }); // opened on the first read: a stream nobody reads costs no connection
  }
}

// -- tools ----------------------------------------------------------------------------------------------

export interface WasmRunnerToolsOptions extends WasmRunnerSandboxOptions {
  /** Run the tools in this sandbox (and its session); default: a new one made with these options. */
  sandbox?: WasmRunnerSandbox;
  /** Most characters of output handed to the model per stream (head and tail kept, the cut counted).
   * Default 20 000. */
  maxOutputChars?: number;
}

type CodeLanguage = "python" | "javascript" | "typescript";

export interface RunCodeOutput {
  stdout: string;
  stderr: string;
  /** The last expression's value (Python), as text. */
  value: string | null;
  /** The program's error ("ZeroDivisionError: division by zero"), or the limit it reached. */
  error: string | null;
}

export interface CommandOutput {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** A refusal of the service (a bad path, a missing file) as the tool's result, so the model can correct
 * itself instead of the step failing. */
export interface ToolRefusal {
  error: string;
}

export interface WasmRunnerTools {
  runCode: Tool<{ code: string; language?: CodeLanguage }, RunCodeOutput | ToolRefusal>;
  runCommand: Tool<{ command: string; workingDirectory?: string }, CommandOutput | ToolRefusal>;
  readFile: Tool<{ path: string; startLine?: number; endLine?: number }, { content: string } | ToolRefusal>;
  writeFile: Tool<{ path: string; content: string }, { written: string } | ToolRefusal>;
  listFiles: Tool<{ path?: string }, { entries: SandboxDirectoryEntry[] } | ToolRefusal>;
  [name: string]: Tool;
}

/** AI SDK tools on one wasm-runner session: `runCode` (a persistent Python/JavaScript/TypeScript kernel in
 * WebAssembly: variables survive between calls), `runCommand` (bash in the native sandbox), `readFile`,
 * `writeFile`, `listFiles` (the workspace, shared by both). A failing program or command is a result with
 * its error, never a thrown exception.
 *
 *     const tools = wasmRunnerTools(new WasmRunner());
 *     await generateText({ model, tools, stopWhen: stepCountIs(5), prompt });
 */
export function wasmRunnerTools(runner: WasmRunner, options: WasmRunnerToolsOptions = {}): WasmRunnerTools {
  const sandbox = options.sandbox ?? new WasmRunnerSandbox(runner, options);
  const clip = (text: string) => clipText(text, options.maxOutputChars ?? 20_000);
  return {
    runCode: tool({
      description: "Run code in a persistent kernel of the sandbox (Python 3 by default, or JavaScript or "
        + "TypeScript). Variables, functions and imports survive between calls of the same language; files are "
        + `those of ${WORKSPACE}. Pure Python standard library only (no pip, threads, subprocesses or network): `
        + "use runCommand for command-line tools. Print what you want to see; a Python cell's last expression "
        + "is returned as value.",
      inputSchema: jsonSchema<{ code: string; language?: CodeLanguage }>({
        type: "object",
        properties: {
          code: { type: "string", description: "The program." },
          language: { type: "string", enum: ["python", "javascript", "typescript"], default: "python" },
        },
        required: ["code"],
        additionalProperties: false,
      }),
      execute: ({ code, language }, { abortSignal }) => refusalAsResult(async () => {
        const result = await runner.exec(await sandbox.sessionId(), code, {
          language: language ?? "python", signal: abortSignal,
          ...(options.timeoutS === undefined ? {} : { limits: { timeout_s: options.timeoutS } }),
        });
        return { stdout: clip(result.stdout ?? ""), stderr: clip(result.stderr ?? ""), value: result.value ?? null,
                 error: errorOf(result) };
      }),
    }),
    runCommand: tool({
      description: `Run a bash command in the sandbox (working directory ${WORKSPACE}, files persist). `
        + "Command-line tools, python3 and node are installed; each command is a new shell (cd does not carry "
        + "over). Returns the exit code, stdout and stderr.",
      inputSchema: jsonSchema<{ command: string; workingDirectory?: string }>({
        type: "object",
        properties: {
          command: { type: "string" },
          workingDirectory: { type: "string", description: `Default ${WORKSPACE}.` },
        },
        required: ["command"],
        additionalProperties: false,
      }),
      execute: ({ command, workingDirectory }, { abortSignal }) => refusalAsResult(async () => {
        const done = await sandbox.run({ command, workingDirectory, abortSignal });
        return { exitCode: done.exitCode, stdout: clip(done.stdout), stderr: clip(done.stderr) };
      }),
    }),
    readFile: tool({
      description: `Read a text file of the sandbox (a path relative to ${WORKSPACE}, or under it), optionally `
        + "lines startLine to endLine (1-based, inclusive).",
      inputSchema: jsonSchema<{ path: string; startLine?: number; endLine?: number }>({
        type: "object",
        properties: {
          path: { type: "string" },
          startLine: { type: "integer", minimum: 1 },
          endLine: { type: "integer", minimum: 1 },
        },
        required: ["path"],
        additionalProperties: false,
      }),
      execute: ({ path, startLine, endLine }) => refusalAsResult(async () => {
        const content = await sandbox.readTextFile({ path, startLine, endLine });
        return content === null ? { error: `${path} does not exist` } : { content: clip(content) };
      }),
    }),
    writeFile: tool({
      description: `Write a text file in the sandbox (a path relative to ${WORKSPACE}, or under it), creating `
        + "its directories and replacing what was there.",
      inputSchema: jsonSchema<{ path: string; content: string }>({
        type: "object",
        properties: { path: { type: "string" }, content: { type: "string" } },
        required: ["path", "content"],
        additionalProperties: false,
      }),
      execute: ({ path, content }) => refusalAsResult(async () => {
        await sandbox.writeTextFile({ path, content });
        return { written: path };
      }),
    }),
    listFiles: tool({
      description: `List one directory of the sandbox (default ${WORKSPACE}): each entry's name and type.`,
      inputSchema: jsonSchema<{ path?: string }>({
        type: "object",
        properties: { path: { type: "string", description: `Default ${WORKSPACE}.` } },
        additionalProperties: false,
      }),
      execute: ({ path }) => refusalAsResult(async () => {
        const entries = await sandbox.listDirectory({ path: path ?? WORKSPACE });
        return entries === null ? { error: `${path} does not exist` } : { entries };
      }),
    }),
  };
}

// -- helpers --------------------------------------------------------------------------------------------

/** A sandbox path as a workspace-relative one ("" for the workspace itself). `.` and `..` are resolved here,
 * so the service only ever sees a plain relative path; anything that resolves outside the workspace is
 * refused. */
export function workspacePath(path: string): string {
  const parts: string[] = [];
  const absolute = path.startsWith("/") ? path : `${WORKSPACE}/${path}`;
  for (const part of absolute.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  if (parts[0] !== WORKSPACE.slice(1)) {
    throw new WasmRunnerError(null, "outside_workspace",
      `${JSON.stringify(path)} is outside the session's workspace (${WORKSPACE})`,
      `give a path relative to ${WORKSPACE} or under it; run a command to reach other places (/tmp)`);
  }
  return parts.slice(1).join("/");
}

/** `value`, or null when the service answers that the file or directory is not there (not when the session
 * is missing: that stays an error). */
async function missingAsNull<T>(value: Promise<T>): Promise<T | null> {
  try {
    return await value;
  } catch (error) {
    if (error instanceof WasmRunnerError && error.status === 404 && error.code !== "session_not_found") return null;
    throw error;
  }
}

async function refusalAsResult<T>(work: () => Promise<T>): Promise<T | ToolRefusal> {
  try {
    return await work();
  } catch (error) {
    if (!(error instanceof WasmRunnerError)) throw error;
    return { error: [`${error.code}: ${error.message}`, error.hint].filter(Boolean).join(" — ") };
  }
}

/** The command run from `directory` (any directory of the sandbox, relative ones from the workspace): a `cd`
 * first, the directory single-quoted so it is never parsed as shell code; the command does not run if the
 * directory is not there. */
function inDirectory(command: string, directory: string | undefined): string {
  return directory === undefined ? command : `cd -- ${shellQuote(directory)} || exit 1\n${command}`;
}

/** `text` as one single-quoted shell word. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

function errorOf(result: ExecResult): string | null {
  if (result.error) return [result.error.type, result.error.message].filter(Boolean).join(": ");
  if (result.limit) return `limit reached: ${result.limit}`;
  return null;
}

function exitCodeOf(result: ExecResult): number {
  if (typeof result.exit_code === "number") return result.exit_code;
  return result.error || result.limit ? 1 : 0;
}

function stderrOf(result: ExecResult): string {
  const stderr = result.stderr ?? "";
  return result.limit ? `${stderr}${stderr && !stderr.endsWith("\n") ? "\n" : ""}limit reached: ${result.limit}\n`
    : stderr;
}

function clipText(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n[... ${text.length - 2 * half} characters cut ...]\n${text.slice(-half)}`;
}

const SIGNALS: Record<string, number> = { HUP: 1, INT: 2, QUIT: 3, KILL: 9, TERM: 15 };

function signalNumber(signal: string): number {
  return SIGNALS[signal.replace(/^SIG/, "")] ?? 0;
}

function fromBase64(data: string): Uint8Array {
  return Uint8Array.from(atob(data), (char) => char.charCodeAt(0));
}
