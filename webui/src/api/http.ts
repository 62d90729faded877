// Requests to the master's REST API: JSON in and out, the session token as a bearer header (the
// gateway's `auth` cookie covers the same session), errors as ApiError, and any 401 sending the
// user to the login page.

const TOKEN_KEY = "cairn.token";

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly reason = "",
  ) {
    super(message);
    this.name = "ApiError";
  }
}

type UnauthorizedHandler = () => void;
let onUnauthorized: UnauthorizedHandler = () => {};

/** Called once by the app: what to do when the master says the session is gone. */
export function setUnauthorizedHandler(handler: UnauthorizedHandler): void {
  onUnauthorized = handler;
}

export function getToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function setToken(token: string | null): void {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage can be disabled; the gateway's cookie still carries the session.
  }
}

export type QueryValue = string | number | boolean | undefined | null | (string | number)[];
export type Query = Record<string, QueryValue>;

/** Repeated fields repeat the key (`states=A&states=B`), as grpc-gateway reads them. */
export function buildUrl(path: string, query?: Query): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query ?? {})) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) value.forEach((v) => params.append(key, String(v)));
    else params.append(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

function headers(json: boolean): Headers {
  const result = new Headers({ Accept: "application/json" });
  if (json) result.set("Content-Type", "application/json");
  const token = getToken();
  if (token) result.set("Authorization", `Bearer ${token}`);
  return result;
}

async function errorFrom(response: Response): Promise<ApiError> {
  let message = `${response.status} ${response.statusText}`;
  let reason = "";
  try {
    const body = (await response.json()) as {
      message?: string;
      error?: { error?: string; reason?: string } | string;
    };
    if (typeof body.error === "object" && body.error) {
      message = body.error.error || body.message || message;
      reason = body.error.reason ?? "";
    } else {
      message = body.message || (typeof body.error === "string" ? body.error : "") || message;
    }
  } catch {
    // Not JSON (a proxy's page): keep the status line.
  }
  return new ApiError(message, response.status, reason);
}

async function send(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  const response = await fetch(path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    signal,
  });
  if (response.status === 401) {
    const error = await errorFrom(response);
    onUnauthorized();
    throw error;
  }
  if (!response.ok) throw await errorFrom(response);
  return response;
}

export async function get<T>(path: string, query?: Query, signal?: AbortSignal): Promise<T> {
  const response = await send("GET", buildUrl(path, query), undefined, signal);
  return (await response.json()) as T;
}

export async function post<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const response = await send("POST", path, body ?? {}, signal);
  const text = await response.text();
  return (text ? JSON.parse(text) : {}) as T;
}

export async function patch<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
  const response = await send("PATCH", path, body, signal);
  const text = await response.text();
  return (text ? JSON.parse(text) : {}) as T;
}

export async function put<T>(path: string, body: unknown, signal?: AbortSignal): Promise<T> {
  const response = await send("PUT", path, body, signal);
  const text = await response.text();
  return (text ? JSON.parse(text) : {}) as T;
}

/** DELETE; `body` for the routes whose rule takes one (the gateway reads it as the request). */
export async function del<T>(path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const response = await send("DELETE", path, body, signal);
  const text = await response.text();
  return (text ? JSON.parse(text) : {}) as T;
}

/**
 * Reads a server stream: grpc-gateway writes one JSON object per line, `{"result": message}`,
 * or `{"error": ...}` when the call fails part way. Resolves when the server ends the stream.
 */
export async function stream<T>(
  path: string,
  query: Query,
  onMessage: (message: T) => void,
  signal: AbortSignal,
): Promise<void> {
  const response = await send("GET", buildUrl(path, query), undefined, signal);
  if (!response.body) throw new ApiError("the browser cannot read streamed responses", 0);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const handleLine = (line: string) => {
    if (!line.trim()) return;
    const parsed = JSON.parse(line) as { result?: T; error?: { message?: string; error?: string; code?: number } };
    if (parsed.error) {
      const detail = parsed.error.message || parsed.error.error || "stream failed";
      if (parsed.error.code === 16) onUnauthorized();
      throw new ApiError(detail, parsed.error.code === 16 ? 401 : 500);
    }
    if (parsed.result !== undefined) onMessage(parsed.result);
  };
  // One message can be tens of megabytes (a large sample): keep its pieces in a list and look
  // for line ends only in new text, so reading stays linear in the size of the stream.
  let parts: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let start = 0;
    let newline = value.indexOf("\n");
    while (newline >= 0) {
      parts.push(value.slice(start, newline));
      handleLine(parts.join(""));
      parts = [];
      start = newline + 1;
      newline = value.indexOf("\n", start);
    }
    if (start < value.length) parts.push(value.slice(start));
  }
  handleLine(parts.join(""));
}

export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === "AbortError";
}
