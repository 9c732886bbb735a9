// Cloudflare Code Mode's `Executor` on wasm-runner: the model's JavaScript runs in a session's WebAssembly
// JavaScript kernel, and each `codemode.tool(args)` (or `<provider>.tool(args)`) it makes is a caller-side tool
// call answered here, by the function Code Mode gave for it.
import { WasmRunner, type Tool } from "./client.ts";
import { WasmRunnerError } from "./errors.ts";

/** What `execute` answers (Code Mode's `ExecuteResult`): never thrown, errors are in `error`. */
export interface ExecuteResult {
  result: unknown;
  error?: string;
  logs?: string[];
}

type ToolFunction = (...args: unknown[]) => Promise<unknown>;

/** Code Mode's resolved provider: the tools of one namespace (`codemode` by default). */
export interface ResolvedProvider {
  name: string;
  fns: Record<string, ToolFunction>;
  positionalArgs?: boolean;
  /** JavaScript run in the sandbox after the namespace is made: what it assigns on the namespace wins over
   * the tools (Code Mode defines in-sandbox helpers this way). */
  prelude?: string;
}

/** Code Mode's per-call options: connectors are Workers RPC bindings, which exist in a Worker only. */
export interface ExecuteOptions {
  connectors?: unknown[];
}

export interface WasmRunnerExecutorOptions {
  runner: WasmRunner;
  /** Run in this session (its files are the code's); default: one session made on first use, kept. */
  sessionId?: string;
  /** Seconds one execution may run (the service caps it). Default 30. */
  timeoutS?: number;
}

const VALID_NAMESPACE = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const RESERVED = new Set(["tools", "ToolError", "console"]);
const MAX_TOOL_NAME = 64;

/** An `Executor` for `@cloudflare/codemode` (`createCodeTool({tools, executor})`) that runs the generated code
 * in wasm-runner: a fresh JavaScript kernel per execution, no network unless the session's policy grants it,
 * and the tools called back here over the exec stream. */
export class WasmRunnerExecutor {
  private readonly runner: WasmRunner;
  private readonly timeoutS: number;
  private session: Promise<string> | null;

  constructor(options: WasmRunnerExecutorOptions) {
    this.runner = options.runner;
    this.timeoutS = options.timeoutS ?? 30;
    this.session = options.sessionId === undefined ? null : Promise.resolve(options.sessionId);
  }

  async execute(code: string, providers: ResolvedProvider[] | Record<string, ToolFunction>,
                options: ExecuteOptions = {}): Promise<ExecuteResult> {
    try {
      if (options.connectors?.length) {
        return { result: undefined, error: "connectors are Workers RPC bindings: give their tools as providers" };
      }
      const resolved = Array.isArray(providers) ? providers : [{ name: "codemode", fns: providers }];
      const problem = checkProviders(resolved);
      if (problem !== null) return { result: undefined, error: problem };
      const { tools, namespaces } = toolsOf(resolved);
      const marker = `__wasm_runner_codemode_${crypto.randomUUID().replaceAll("-", "")}`;
      const sessionId = await (this.session ??= this.runner.createSession().then((info) => info.id));
      const outcome = await this.runner.exec(sessionId, program(normalizeCode(code), namespaces, marker), {
        language: "javascript", fresh: true, limits: { timeout_s: this.timeoutS }, tools,
      });
      const line = (outcome.stdout ?? "").split("\n").find((text) => text.startsWith(`${marker} `));
      if (line === undefined) {
        const why = outcome.error?.message ?? outcome.limit ?? (outcome.stderr || "the code ended without a result");
        return { result: undefined, error: outcome.limit ? `limit reached: ${why}` : String(why) };
      }
      const answer = JSON.parse(line.slice(marker.length + 1)) as { result?: unknown; error?: string; logs?: string[] };
      return answer.error === undefined ? { result: answer.result, logs: answer.logs ?? [] }
        : { result: undefined, error: answer.error, logs: answer.logs ?? [] };
    } catch (error) {
      const message = error instanceof WasmRunnerError ? `${error.code}: ${error.message}`
        : error instanceof Error ? error.message : String(error);
      return { result: undefined, error: message };
    }
  }
}

function checkProviders(providers: ResolvedProvider[]): string | null {
  const seen = new Set<string>();
  for (const { name } of providers) {
    if (!VALID_NAMESPACE.test(name)) return `Provider name "${name}" is not a valid JavaScript identifier`;
    if (RESERVED.has(name) || name.startsWith("__")) return `Provider name "${name}" is reserved`;
    if (seen.has(name)) return `Duplicate provider name "${name}"`;
    seen.add(name);
  }
  return null;
}

/** Each provider's functions as caller-side tools with snake_case names (the service's rule), and the map from
 * each namespace's names to them that the guest's proxies use. */
type Namespaces = Record<string, { names: Record<string, string>; positional: boolean; prelude?: string }>;

function toolsOf(providers: ResolvedProvider[]): { tools: Record<string, Tool>; namespaces: Namespaces } {
  const tools: Record<string, Tool> = {};
  const namespaces: Namespaces = {};
  for (const provider of providers) {
    const names: Record<string, string> = {};
    for (const [name, fn] of Object.entries(provider.fns)) {
      let wire = snake(`${provider.name}_${name}`);
      if (wire.length > MAX_TOOL_NAME || wire in tools || !/^[a-z]/.test(wire)) wire = `tool_${Object.keys(tools).length}`;
      const positional = provider.positionalArgs === true;
      tools[wire] = {
        description: `${provider.name}.${name}`,
        parameters: { type: "object", properties: positional ? { args: { type: "array" } } : {},
                      additionalProperties: !positional },
        run: (args) => (positional ? fn(...(Array.isArray(args.args) ? args.args : [])) : fn(args)),
      };
      names[name] = wire;
    }
    namespaces[provider.name] = { names, positional: provider.positionalArgs === true, prelude: provider.prelude };
  }
  return { tools, namespaces };
}

function snake(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase().replace(/[^a-z0-9]+/g, "_")
    .replace(/^_+|_+$/g, "");
}

/** Code Mode hands over an async arrow function (sometimes in a Markdown fence, sometimes a bare body): the
 * function expression to call. */
export function normalizeCode(code: string): string {
  const fenced = /^```(?:js|javascript|typescript|ts|tsx|jsx)?\s*\n([\s\S]*?)```\s*$/.exec(code.trim());
  const source = (fenced ? fenced[1]! : code).trim();
  if (source === "") return "async () => {}";
  if (/^(async\s+)?(\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>/.test(source) || /^(async\s+)?function\b/.test(source)) {
    return source;
  }
  return `async () => {\n${source}\n}`;
}

/** The guest program: console captured as Code Mode does, one proxy per namespace over the host's `tools`,
 * the function called, and its result written as one JSON line after `marker`. */
function program(fn: string, namespaces: Namespaces, marker: string): string {
  const proxies = Object.entries(namespaces).map(([namespace, { names, positional, prelude }]) => [
    `const ${namespace} = (() => {`,
    `  const names = ${JSON.stringify(names)};`,
    "  return new Proxy({}, { get: (own, name) => Object.prototype.hasOwnProperty.call(own, name) ? own[name]",
    "    : async (...args) => {",
    "    const wire = Object.prototype.hasOwnProperty.call(names, name) ? names[name] : undefined;",
    "    if (wire === undefined) throw new Error(`Tool \"${String(name)}\" not found`);",
    "    try {",
    `      return await tools[wire](${positional ? "{ args }" : "args[0] ?? {}"});`,
    "    } catch (e) { throw new Error(e && e.message ? e.message : String(e)); }",
    "  } });",
    "})();",
    prelude ?? "",
  ].join("\n")).join("\n");
  return [
    "const __logs = [];",
    "const __write = console.log.bind(console);",
    "const __text = (a) => a.map((v) => typeof v === 'string' ? v : (() => { try { return JSON.stringify(v); }"
      + " catch { return String(v); } })()).join(' ');",
    "console.log = (...a) => { __logs.push(__text(a)); };",
    "console.info = console.log;",
    "console.warn = (...a) => { __logs.push('[warn] ' + __text(a)); };",
    "console.error = (...a) => { __logs.push('[error] ' + __text(a)); };",
    proxies,
    "let __answer;",
    "try {",
    `  const __value = await (${fn})();`,
    "  __answer = { result: __value, logs: __logs };",
    "} catch (e) {",
    "  __answer = { error: e && e.message ? e.message : String(e), logs: __logs };",
    "}",
    "let __line;",
    "try { __line = JSON.stringify(__answer); }",
    "catch (e) { __line = JSON.stringify({ error: 'the result is not JSON: ' + e.message, logs: __logs }); }",
    `__write(${JSON.stringify(marker)} + ' ' + __line);`,
  ].join("\n");
}
