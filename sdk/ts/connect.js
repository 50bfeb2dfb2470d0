// Connect's protocol in JSON over Node's fetch: unary calls, server
// streams (5-byte envelopes), and the errors both carry. Nothing here
// trusts the server for a size: every message is bounded before a byte of
// it is kept.

/** The largest message a stream may carry (the service sends at most
 * 16 MiB of data in one, base64 and JSON around it). */
export const MAX_MESSAGE_BYTES = 64 << 20;

/** The largest unary answer or error body read. */
export const MAX_BODY_BYTES = 64 << 20;

/** Connect's code names, in the order of gRPC's numbers. */
export const CODES = [
  "ok", "canceled", "unknown", "invalid_argument", "deadline_exceeded",
  "not_found", "already_exists", "permission_denied", "resource_exhausted",
  "failed_precondition", "aborted", "out_of_range", "unimplemented",
  "internal", "unavailable", "data_loss", "unauthenticated",
];

/** ReinsError is every failure of a call: the server's own code and
 * message when it answered, a transport's otherwise. */
export class ReinsError extends Error {
  /**
   * @param {string} code Connect's code name (not_found, unauthenticated, ...)
   * @param {string} message
   * @param {{status?: number, details?: unknown[], cause?: unknown, procedure?: string, kind?: string}} [opts]
   */
  constructor(code, message, opts = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "ReinsError";
    this.code = CODES.includes(code) ? code : "unknown";
    this.status = opts.status ?? 0;
    this.details = opts.details ?? [];
    this.procedure = opts.procedure ?? "";
    /** reins' own kind of the error when the service names one
     * (is_directory, too_large, no_space, ...): finer than code. */
    this.kind = opts.kind ?? "";
  }
}

// The header (or a stream's trailer) naming reins' kind of an error.
const KIND_HEADER = "reins-error-kind";

function trailer(metadata, name) {
  if (!metadata || typeof metadata !== "object") return "";
  for (const [k, v] of Object.entries(metadata)) {
    if (k.toLowerCase() === name) return String(Array.isArray(v) ? v[0] ?? "" : v);
  }
  return "";
}

// Connect's mapping of HTTP statuses without a Connect error body.
function codeOfStatus(status) {
  switch (status) {
    case 400: return "invalid_argument";
    case 401: return "unauthenticated";
    case 403: return "permission_denied";
    case 404: return "not_found";
    case 408: return "deadline_exceeded";
    case 409: return "aborted";
    case 412: return "failed_precondition";
    case 413: return "resource_exhausted";
    case 429: case 502: case 503: case 504: return "unavailable";
    case 501: return "unimplemented";
    default: return "unknown";
  }
}

/**
 * errorFromResponse reads a failed HTTP answer (bounded) and returns its
 * ReinsError: Connect's {code, message} when the body is one, the status
 * and the body's first line otherwise.
 * @param {Response} resp
 * @param {string} what the call, for messages
 */
export async function errorFromResponse(resp, what) {
  let text = "";
  try {
    text = new TextDecoder().decode(await readBounded(resp.body, 1 << 20, what));
  } catch (err) {
    if (err instanceof ReinsError) text = "";
    else throw err;
  }
  try {
    const e = JSON.parse(text);
    if (e && typeof e.code === "string") {
      return new ReinsError(e.code, String(e.message ?? e.code), {
        status: resp.status, details: e.details, procedure: what, kind: resp.headers.get(KIND_HEADER) ?? "",
      });
    }
  } catch { /* not JSON: said below */ }
  const line = text.split("\n")[0].slice(0, 500).trim();
  return new ReinsError(codeOfStatus(resp.status),
    `${what}: reins serve answered HTTP ${resp.status}${line ? ": " + line : ""}`, { status: resp.status, procedure: what });
}

/**
 * readBounded reads a whole body, refusing one longer than max.
 * @param {ReadableStream<Uint8Array> | null} body
 * @param {number} max
 * @param {string} what
 */
export async function readBounded(body, max, what) {
  if (!body) return new Uint8Array(0);
  const q = new ByteQueue();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      q.push(value);
      if (q.length > max) {
        throw new ReinsError("resource_exhausted", `${what}: the answer is larger than the client's limit of ${max} bytes`);
      }
    }
  } finally {
    reader.releaseLock();
    if (q.length > max) body.cancel().catch(() => {});
  }
  return q.take(q.length);
}

/** ByteQueue holds received chunks, copying only to assemble a piece
 * that spans several. */
export class ByteQueue {
  constructor() {
    /** @type {Uint8Array[]} */
    this.chunks = [];
    this.length = 0;
  }
  /** @param {Uint8Array} b */
  push(b) {
    if (b.length === 0) return;
    this.chunks.push(b);
    this.length += b.length;
  }
  /** take removes and returns the first n bytes (n <= length). */
  take(n) {
    if (n > this.length) throw new RangeError(`take ${n} of ${this.length}`);
    this.length -= n;
    const first = this.chunks[0];
    if (first && first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = new Uint8Array(n);
    let off = 0;
    while (off < n) {
      const c = this.chunks[0];
      const k = Math.min(c.length, n - off);
      out.set(c.subarray(0, k), off);
      off += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }
}

/**
 * readEnvelopes yields the messages of a Connect stream body: each a
 * 5-byte header (flags, big-endian length) and its bytes. A length above
 * max is refused before anything is allocated for it; a body that ends
 * inside a message is an error, not a short message.
 * @param {ReadableStream<Uint8Array>} body
 * @param {{max?: number, what?: string}} [opts]
 * @returns {AsyncGenerator<{flags: number, data: Uint8Array}>}
 */
export async function* readEnvelopes(body, opts = {}) {
  const max = opts.max ?? MAX_MESSAGE_BYTES;
  const what = opts.what ?? "stream";
  const reader = body.getReader();
  const q = new ByteQueue();
  let header = null;
  let finished = false;
  try {
    for (;;) {
      if (header === null && q.length >= 5) {
        const h = q.take(5);
        const len = h[1] * 2 ** 24 + (h[2] << 16) + (h[3] << 8) + h[4];
        if (len > max) {
          throw new ReinsError("resource_exhausted",
            `${what}: reins serve sent a message of ${len} bytes, more than the client's limit of ${max}: refused`);
        }
        header = { flags: h[0], len };
      }
      if (header !== null && q.length >= header.len) {
        const m = { flags: header.flags, data: q.take(header.len) };
        header = null;
        yield m;
        continue;
      }
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        if (header !== null || q.length > 0) {
          const got = q.length, want = header ? header.len : 5;
          throw new ReinsError("unavailable",
            `${what}: the stream ended in the middle of a message (${got} of ${want} bytes): the connection to reins serve was cut; try the call again`);
        }
        return;
      }
      q.push(value);
    }
  } finally {
    if (!finished) await reader.cancel().catch(() => {});
    reader.releaseLock();
  }
}

/** envelope frames one message for a Connect stream. */
export function envelope(bytes, flags = 0) {
  const out = new Uint8Array(5 + bytes.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, bytes.length, false);
  out.set(bytes, 5);
  return out;
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

function json(value) {
  return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? v.toString() : v));
}

function parse(bytes, what) {
  try {
    return JSON.parse(fromUtf8.decode(bytes));
  } catch (err) {
    throw new ReinsError("internal", `${what}: reins serve sent a message that is not JSON (${err.message})`, { cause: err });
  }
}

/** Transport speaks Connect in JSON to one reins serve. */
export class Transport {
  /**
   * @param {{url: string, token: string, fetch?: typeof fetch, unaryTimeoutMs?: number}} opts
   */
  constructor(opts) {
    this.url = opts.url.replace(/\/+$/, "");
    this.token = opts.token;
    this.fetch = opts.fetch ?? globalThis.fetch;
    this.unaryTimeoutMs = opts.unaryTimeoutMs ?? 60_000;
  }

  headers(extra, sandbox) {
    const h = { authorization: `Bearer ${this.token}`, "connect-protocol-version": "1", ...extra };
    if (sandbox) h["reins-sandbox"] = sandbox;
    return h;
  }

  // send makes one HTTP request, turning a transport failure into a
  // ReinsError that says where it went.
  async send(path, init, what) {
    try {
      return await this.fetch(this.url + path, init);
    } catch (err) {
      throw this.transportError(err, what);
    }
  }

  transportError(err, what) {
    if (err instanceof ReinsError) return err;
    if (err?.name === "AbortError") return new ReinsError("canceled", `${what}: the call was cancelled`, { cause: err });
    if (err?.name === "TimeoutError") return new ReinsError("deadline_exceeded", `${what}: no answer in time`, { cause: err });
    const code = err?.cause?.code;
    if (code === "ECONNREFUSED") {
      return new ReinsError("unavailable",
        `cannot reach reins serve at ${this.url}: is it running? (start it with \`reins serve --data-dir DIR\`, or set REINS_URL)`, { cause: err });
    }
    return new ReinsError("unavailable", `${what}: the connection to reins serve at ${this.url} failed: ${err?.cause?.message ?? err?.message ?? err}`, { cause: err });
  }

  /**
   * unary calls procedure ("reins.v1.SandboxService/Get") with req and
   * returns the answer as parsed JSON.
   * @param {string} procedure
   * @param {object} req
   * @param {{sandbox?: string, signal?: AbortSignal, timeoutMs?: number}} [opts]
   */
  async unary(procedure, req, opts = {}) {
    const timeoutMs = opts.timeoutMs ?? this.unaryTimeoutMs;
    const signals = [AbortSignal.timeout(timeoutMs)];
    if (opts.signal) signals.push(opts.signal);
    const resp = await this.send("/" + procedure, {
      method: "POST",
      headers: this.headers({ "content-type": "application/json", "connect-timeout-ms": String(timeoutMs) }, opts.sandbox),
      body: json(req ?? {}),
      signal: AbortSignal.any(signals),
    }, procedure);
    if (!resp.ok) throw await errorFromResponse(resp, procedure);
    let bytes;
    try {
      bytes = await readBounded(resp.body, MAX_BODY_BYTES, procedure);
    } catch (err) {
      throw this.transportError(err, procedure);
    }
    return parse(bytes, procedure);
  }

  /**
   * stream calls a streaming procedure and yields each message as parsed
   * JSON; the stream's end message's error is thrown. req is the one
   * request of a server stream, or an array: the messages of a client
   * stream, sent whole.
   * @param {string} procedure
   * @param {object | object[]} req
   * @param {{sandbox?: string, signal?: AbortSignal, maxMessageBytes?: number}} [opts]
   */
  async *stream(procedure, req, opts = {}) {
    const msgs = Array.isArray(req) ? req : [req ?? {}];
    const resp = await this.send("/" + procedure, {
      method: "POST",
      headers: this.headers({ "content-type": "application/connect+json" }, opts.sandbox),
      body: Buffer.concat(msgs.map((m) => envelope(utf8.encode(json(m))))),
      signal: opts.signal,
    }, procedure);
    if (!resp.ok) throw await errorFromResponse(resp, procedure);
    const ct = resp.headers.get("content-type") ?? "";
    if (!ct.startsWith("application/connect+json")) {
      resp.body?.cancel().catch(() => {});
      throw new ReinsError("internal", `${procedure}: reins serve answered ${ct || "no content type"}, not a Connect JSON stream: is REINS_URL the service's address?`, { status: resp.status });
    }
    try {
      for await (const env of readEnvelopes(resp.body, { max: opts.maxMessageBytes, what: procedure })) {
        if (env.flags & 1) {
          throw new ReinsError("internal", `${procedure}: reins serve sent a compressed message, which the client did not ask for`);
        }
        const msg = parse(env.data, procedure);
        if (env.flags & 2) {
          const e = msg?.error;
          if (e) {
            throw new ReinsError(e.code ?? "unknown", String(e.message ?? e.code ?? "the call failed"), {
              status: resp.status, details: e.details, procedure, kind: trailer(msg.metadata, KIND_HEADER),
            });
          }
          return;
        }
        yield msg;
      }
    } catch (err) {
      throw this.transportError(err, procedure);
    }
    throw new ReinsError("unavailable", `${procedure}: the stream ended without its end message: the connection to reins serve was cut; try the call again`);
  }

  /**
   * raw makes a plain HTTP request beside the API (the raw file routes);
   * a failed answer is thrown as a ReinsError.
   * @param {string} method
   * @param {string} path with its query, already encoded
   * @param {RequestInit & {what?: string}} [init]
   */
  async raw(method, path, init = {}) {
    const what = init.what ?? `${method} ${path.split("?")[0]}`;
    const headers = { authorization: `Bearer ${this.token}`, ...init.headers };
    const req = { method, headers, body: init.body, signal: init.signal };
    if (init.body && typeof init.body.getReader === "function") req.duplex = "half";
    const resp = await this.send(path, req, what);
    if (!resp.ok) throw await errorFromResponse(resp, what);
    return resp;
  }
}
