// What the client throws: the service's error (HTTP status, code, message, hint) or a transport failure.

/** An error answer of the service (`{"error": {"code", "message", "hint"}}`), or an `error` stream event. */
export class WasmRunnerError extends Error {
  /** HTTP status; null when the error arrived as an `error` event of a stream already under way. */
  readonly status: number | null;
  /** Stable and machine-readable, e.g. `session_not_found`, `path_escape`, `overloaded`. */
  readonly code: string;
  /** What to do about it, when the service knows. */
  readonly hint: string | null;
  /** The answer's headers, lower-cased. */
  readonly headers: Record<string, string>;

  constructor(status: number | null, code: string, message: string, hint: string | null = null,
              headers: Record<string, string> = {}, options?: ErrorOptions) {
    super(message, options);
    this.name = "WasmRunnerError";
    this.status = status;
    this.code = code;
    this.hint = hint;
    this.headers = headers;
  }

  get requestId(): string | undefined {
    return this.headers["x-request-id"];
  }

  override toString(): string {
    return `${this.name}: ${this.code}: ${this.message}${this.hint ? ` (hint: ${this.hint})` : ""}`;
  }
}

/** The service could not be reached, or the connection failed mid-request (`cause` is the underlying error). */
export class TransportError extends WasmRunnerError {
  constructor(message: string, cause?: unknown) {
    super(null, "transport_error", message, "check the service URL and that it is running; retry", {}, { cause });
    this.name = "TransportError";
  }
}

/** The error an answer's status and body describe. */
export function errorFrom(status: number | null, body: string, headers: Headers | null = null): WasmRunnerError {
  let code = `http_${status}`;
  let message = body.trim().slice(0, 500) || `HTTP ${status}`;
  let hint: string | null = null;
  try {
    const detail: unknown = (JSON.parse(body) as { error?: unknown }).error;
    if (isRecord(detail) && typeof detail.code === "string") {
      code = detail.code;
      message = typeof detail.message === "string" && detail.message ? detail.message : code;
      hint = typeof detail.hint === "string" ? detail.hint : null;
    }
  } catch {
    // not JSON: the text itself is the message
  }
  const lowered: Record<string, string> = {};
  headers?.forEach((value, name) => {
    lowered[name.toLowerCase()] = value;
  });
  return new WasmRunnerError(status, code, message, hint, lowered);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
