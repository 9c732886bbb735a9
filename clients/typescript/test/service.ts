// The service the tests run against (started by global-setup.ts) and a client for it.
import { WasmRunner } from "../src/index.ts";

export function service(): { url: string; apiKey: string } {
  const url = process.env.WASM_RUNNER_TEST_URL;
  const apiKey = process.env.WASM_RUNNER_TEST_API_KEY;
  if (!url || !apiKey) throw new Error("run the tests with `npm test` (its global setup starts the service)");
  return { url, apiKey };
}

export function runner(): WasmRunner {
  return new WasmRunner(service());
}

/** Polls `check` until it answers a value, with a bound. */
export async function eventually<T>(check: () => Promise<T | null | undefined | false>, what: string,
                                    timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
