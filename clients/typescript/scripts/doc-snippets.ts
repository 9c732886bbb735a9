// Writes each ```ts block of the guide (docs/guides/typescript-client.md) as a module under snippets/, with
// declarations of the names the guide takes as given, so `tsc -p snippets` checks them as a reader's code.
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";

const GUIDE = new URL("../../../docs/guides/typescript-client.md", import.meta.url);
const OUT = new URL("../snippets/", import.meta.url);

/** Names a snippet uses without making them, and their declarations. */
const GIVEN: Record<string, string> = {
  runner: "declare const runner: import(\"@wasm-runner/client\").WasmRunner;",
  session: "declare const session: import(\"@wasm-runner/client\").SessionInfo;",
  someReadableStream: "declare const someReadableStream: ReadableStream<Uint8Array>;",
  pngBytes: "declare const pngBytes: Uint8Array;",
  model: "declare const model: import(\"ai\").LanguageModel;",
  myTools: "declare const myTools: Parameters<typeof import(\"@cloudflare/codemode/ai\").createCodeTool>[0][\"tools\"];",
};

const text = await readFile(GUIDE, "utf8");
const blocks = [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
if (blocks.length === 0) throw new Error("the guide has no ts snippets");
await rm(OUT, { recursive: true, force: true });
await mkdir(OUT, { recursive: true });
for (const [index, code] of blocks.entries()) {
  const given = Object.entries(GIVEN)
    .filter(([name]) => new RegExp(`\\b${name}\\b`).test(code)
      && !new RegExp(`(const|let)\\s+${name}\\b|import\\s*\\{[^}]*\\b${name}\\b[^}]*\\}`).test(code))
    .map(([, declaration]) => declaration);
  await writeFile(new URL(`snippet-${String(index).padStart(2, "0")}.ts`, OUT),
    `${given.join("\n")}\n${code}\nexport {};\n`);
}
await writeFile(new URL("tsconfig.json", OUT), `${JSON.stringify({
  extends: "../test/tsconfig.json",
  compilerOptions: { noUnusedLocals: false }, // a snippet shows a value without using it
  include: ["."],
}, null, 2)}\n`);
console.log(`${blocks.length} snippets written to snippets/`);
