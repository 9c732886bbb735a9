// One real service for every test file: started here (unless WASM_RUNNER_TEST_URL names one already), on a free
// loopback port with a data directory and an API key of its own, and stopped at the end.
//   PYTHON               the interpreter that has wasm-runner installed (default: python3)
//   WASM_RUNNER_TEST_CONFIG  a config file for it (the pytest wrapper gives one with a loopback package index)
import { spawn, type ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";

const START_TIMEOUT_MS = 120_000;
let service: ChildProcess | null = null;
let dataDir: string | null = null;

export async function globalSetup(): Promise<void> {
  if (process.env.WASM_RUNNER_TEST_URL) return;
  const python = process.env.PYTHON ?? "python3";
  dataDir = await mkdtemp(join(tmpdir(), "wasm-runner-ts-"));
  const created = await promisify(execFile)(python, ["-m", "wasm_runner_server.cli.console", "keys", "create",
    "--workspace", "ts-client", "--name", "tests", "--data-dir", dataDir]);
  const apiKey = created.stdout.trim();
  const config = process.env.WASM_RUNNER_TEST_CONFIG;
  service = spawn(python, ["-m", "wasm_runner_server", "serve", "--host", "127.0.0.1", "--port", "0",
    "--data-dir", dataDir, "--no-access-log", "--log-level", "INFO", ...(config ? ["--config", config] : [])],
    { stdio: ["ignore", "ignore", "pipe"] });
  const url = await listeningUrl(service);
  await waitUntilReady(url);
  process.env.WASM_RUNNER_TEST_URL = url;
  process.env.WASM_RUNNER_TEST_API_KEY = apiKey;
}

export async function globalTeardown(): Promise<void> {
  if (service !== null && service.exitCode === null) {
    const exited = new Promise((resolve) => service?.once("exit", resolve));
    service.kill("SIGTERM");
    const timer = setTimeout(() => service?.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
  }
  if (dataDir !== null) await rm(dataDir, { recursive: true, force: true });
}

/** The URL from the service's `listening` log line (JSON on stderr); its other lines are kept for errors. */
function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    const seen: string[] = [];
    const timer = setTimeout(() => fail(`did not listen within ${START_TIMEOUT_MS} ms`), START_TIMEOUT_MS);
    const fail = (why: string) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      reject(new Error(`the service ${why}:\n${seen.slice(-30).join("\n")}`));
    };
    child.once("exit", (code) => fail(`exited (${code}) before listening`));
    const lines = createInterface({ input: child.stderr! });
    lines.on("line", (line) => {
      seen.push(line);
      try {
        const entry = JSON.parse(line) as { event?: string; url?: string };
        if (entry.event === "listening" && entry.url) {
          clearTimeout(timer);
          child.removeAllListeners("exit");
          lines.removeAllListeners("line");
          lines.on("line", () => undefined); // keep draining: a full pipe would block the service
          resolve(entry.url);
        }
      } catch {
        // not a JSON log line
      }
    });
  });
}

async function waitUntilReady(url: string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const response = await fetch(new URL("/readyz", url));
      last = await response.text();
      if (response.ok) return;
    } catch (error) {
      last = String(error);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`the service at ${url} was not ready within ${START_TIMEOUT_MS} ms: ${last}`);
}
