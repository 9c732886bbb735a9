// Renders src/schema.d.ts from a running service's GET /openapi.json with openapi-typescript.
// One function for `npm run generate` and for the test that checks the committed file is current.
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

export const SCHEMA_FILE = new URL("../src/schema.d.ts", import.meta.url);

const HEADER = `${COMMENT_HEADER}// Generated from wasm-runner's GET /openapi.json by \`npm run generate -- <service url>\`; do not edit.\n\n`;

/** The TypeScript declarations of the wire schema the service at `baseUrl` serves. */
export async function renderSchema(baseUrl: string): Promise<string> {
  const response = await fetch(new URL("/openapi.json", baseUrl));
  if (!response.ok) {
    throw new Error(`GET /openapi.json answered ${response.status}: ${await response.text()}`);
  }
  const document = await response.json();
  // Nothing depends on the host or the time: the same document gives the same bytes.
  // defaultNonNullable off: a field with a default stays optional, as the schema's `required` says (request
  // bodies need it); emptyObjectsUnknown: a free-form object (`dict[str, Any]`) is `Record<string, unknown>`.
  const ast = await openapiTS(document, { defaultNonNullable: false, emptyObjectsUnknown: true });
  return HEADER + astToString(ast);
}
