// The API's JSON, turned into JavaScript values: camelCase keys, 64-bit
// integers as numbers (from numbers or strings: reins answers either),
// enums as their short lowercase names, bytes from base64.

// The 64-bit integer fields of the reins protos (their lowerCamel names);
// any other string stays a string, so a command's output "42" is never a
// number.
const INT64 = new Set([
  "afterSeq", "atSeq", "atUnixNano", "bytes", "bytesIn", "bytesOut", "cacheReadTokens",
  "cacheWriteTokens", "createdUnixNano", "diskBytes", "diskTotalBytes", "diskUsedBytes",
  "done", "durationMs", "durationNano", "executorRssBytes", "expiresUnixNano",
  "expiryWarningMs", "files", "firstByteMs", "firstLine", "fullBytes", "idleTimeoutMs",
  "imageBytes", "inputTokens", "lastActivityUnixNano", "lastOomUnixNano", "lastSeq", "limit",
  "maxOutputBytes", "maxTokens", "memoryBytes", "memoryLimitBytes", "mtimeUnixNano", "offset",
  "outputTokens", "peakMemoryBytes", "pids", "readyTimeoutMs", "seq", "sinceUnixNano", "size",
  "sizeBytes", "startedUnixNano", "stderrBytes", "stdoutBytes", "stoppedUnixNano",
  "storedBytes", "timeUnixNano", "timeoutMs", "tokenIssuedUnixNano", "total", "totalLines",
  "ttlMs", "updatedUnixNano",
]);

// Maps whose keys are the user's (labels, names): kept as they are.
const OPAQUE = new Set(["labels", "sandboxes", "snapshots", "screens", "metadata"]);

// Enum fields and their values' prefixes on the wire.
const ENUMS = {
  state: "SANDBOX_STATE_",
  reason: "SANDBOX_REASON_",
  suspendedReason: "SANDBOX_REASON_",
  status: "RUN_STATUS_",
  statuses: "RUN_STATUS_",
  type: ["EVENT_TYPE_", "FILE_TYPE_"],
  phase: "PROGRESS_PHASE_",
  mode: "NETWORK_MODE_",
  onExpire: "EXPIRE_ACTION_",
  action: "POLICY_ACTION_",
};

/** camel turns a proto name (snake_case) into its JSON name. */
export function camel(key) {
  return key.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
}

/** int64 reads a 64-bit integer sent as a number or a string as a
 * number. Past 2^53 a number is not exact: in reins only the *UnixNano
 * times get there, off by less than a microsecond, and each has its
 * *Time (RFC 3339) beside it. (docs/decisions/0052-typescript-client.md) */
export function int64(v) {
  if (typeof v === "number") return v;
  if (typeof v !== "string" || !/^-?\d+$/.test(v)) return v;
  return Number(v);
}

// rfc3339 is a unix time in nanoseconds as RFC 3339 with nanoseconds.
function rfc3339(nanos) {
  const s = BigInt(nanos);
  const ms = s / 1000000n;
  const iso = new Date(Number(ms)).toISOString(); // ...T12:34:56.789Z
  const frac = (s % 1000000000n).toString().padStart(9, "0");
  return iso.slice(0, 19) + "." + frac + "Z";
}

function shortEnum(key, v) {
  const p = ENUMS[key];
  if (typeof v !== "string" || p === undefined) return v;
  for (const prefix of Array.isArray(p) ? p : [p]) {
    if (v === prefix + "UNSPECIFIED") return "";
    if (v.startsWith(prefix)) return v.slice(prefix.length).toLowerCase();
  }
  return v;
}

/** decode turns a message of the API's JSON into the client's form. */
export function decode(v, key = "") {
  if (Array.isArray(v)) return v.map((x) => decode(x, key));
  if (v === null || typeof v !== "object") {
    if (INT64.has(key)) return int64(v);
    return shortEnum(key, v);
  }
  const out = {};
  for (const [k, x] of Object.entries(v)) {
    const ck = camel(k);
    out[ck] = OPAQUE.has(ck) && x && typeof x === "object" && !Array.isArray(x) ? { ...x } : decode(x, ck);
    // The time beside each *UnixNano, as the service's JSON has it
    // (an older service sends only the nanoseconds); "" when unset.
    if (ck.endsWith("UnixNano")) {
      const tk = ck.slice(0, -"UnixNano".length) + "Time";
      if (!(tk in v) && !(k.slice(0, -"_unix_nano".length) + "_time" in v)) {
        out[tk] = /^-?\d+$/.test(String(x)) && String(x) !== "0" ? rfc3339(String(x)) : "";
      }
    }
  }
  return out;
}

/** wireEnum is the wire name of a short enum value ("none" ->
 * NETWORK_MODE_NONE); a full name or a number is sent as given. */
export function wireEnum(prefix, v) {
  if (v === undefined || v === null || typeof v !== "string") return v;
  if (v.startsWith(prefix)) return v;
  return prefix + v.toUpperCase();
}

/** encodeSpec is a sandbox spec for the wire: the caller's fields as
 * given (the service reads camelCase and snake_case), its enums named. */
export function encodeSpec(spec = {}) {
  const out = { ...spec };
  if (out.onExpire !== undefined) out.onExpire = wireEnum("EXPIRE_ACTION_", out.onExpire);
  if (out.on_expire !== undefined) out.on_expire = wireEnum("EXPIRE_ACTION_", out.on_expire);
  if (out.network && typeof out.network === "object") {
    out.network = { ...out.network, mode: wireEnum("NETWORK_MODE_", out.network.mode) };
  }
  return out;
}

/** base64 of bytes (Node's Buffer, no copy of the input). */
export function toBase64(bytes) {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

/** fromBase64 is the bytes of a base64 string as a Uint8Array. */
export function fromBase64(s) {
  if (!s) return new Uint8Array(0);
  const b = Buffer.from(s, "base64");
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** bytesOf accepts a string (UTF-8), a Uint8Array or an ArrayBuffer. */
export function bytesOf(data) {
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError("data must be a string, a Uint8Array or an ArrayBuffer");
}

/** concat joins byte arrays (the one array itself when there is one). */
export function concat(parts) {
  if (parts.length === 1) return parts[0];
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
