// @wasm-runner/client: a typed client for the wasm-runner HTTP API (fetch only, no runtime dependencies).
export { DEFAULT_URL, filePath, segment, WasmRunner } from "./client.ts";
export type { ExecOptions, FileData, RetryOptions, Tool, WasmRunnerOptions } from "./client.ts";
export { errorFrom, TransportError, WasmRunnerError } from "./errors.ts";
export { ExecStream, ProcessOutputStream } from "./streams.ts";
export type * from "./types.ts";
export type { components, operations, paths } from "./schema.d.ts";
export { normalizeCode, WasmRunnerExecutor } from "./codemode.ts";
export type { ExecuteResult, ResolvedProvider, WasmRunnerExecutorOptions } from "./codemode.ts";
