// @reins/sdk: the JavaScript client of reins serve. Sandboxes, the
// processes and files inside them, their ports, and agent runs, spoken as
// Connect in JSON over Node's fetch (no dependencies). It mirrors the Go
// client (package client): the same calls, the same names.

import { ReinsError, Transport, readBounded } from "./connect.js";
import { bytesOf, concat, decode, encodeSpec, fromBase64, toBase64, wireEnum } from "./wire.js";
import { tar } from "./tar.js";

export { ReinsError, MAX_MESSAGE_BYTES } from "./connect.js";

/** Where reins serve listens unless told otherwise. */
export const DEFAULT_URL = "http://127.0.0.1:7070";

const SANDBOX = "reins.v1.SandboxService/";
const RUN = "reins.v1.RunService/";
const EXECUTOR = "reins.executor.v1.Executor/";

/** Reins is a client of one reins serve. */
export class Reins {
  /**
   * @param {{url?: string, token?: string, fetch?: typeof fetch, timeoutMs?: number}} [opts]
   */
  constructor(opts = {}) {
    let url = opts.url ?? process.env.REINS_URL ?? DEFAULT_URL;
    if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) url = "http://" + url;
    const token = opts.token ?? process.env.REINS_TOKEN;
    if (!token) {
      throw new ReinsError("unauthenticated",
        "no token: pass {token} or export REINS_TOKEN=$(cat DATA_DIR/admin.token), where DATA_DIR is reins serve's --data-dir");
    }
    this.url = url.replace(/\/+$/, "");
    /** @internal */
    this.t = new Transport({ url: this.url, token, fetch: opts.fetch, unaryTimeoutMs: opts.timeoutMs });
    this.sandboxes = new Sandboxes(this);
    this.runs = new Runs(this);
  }

  /** sandbox is a handle on sandbox id, without asking the service. */
  sandbox(id) {
    return new Sandbox(this, id, null);
  }

  /** version names the service's build and its backends' runtimes. */
  async version() {
    return decode(await this.t.unary(SANDBOX + "Version", {}));
  }
}

/** Sandboxes are the calls of the sandbox service. */
export class Sandboxes {
  constructor(reins) {
    this.r = reins;
  }

  /**
   * create makes a sandbox, calling onProgress with each step (image
   * pull, unpack, boot), and returns it once it runs.
   */
  async create(spec = {}, opts = {}) {
    const stream = this.r.t.stream(SANDBOX + "Create", { spec: encodeSpec(spec) }, { signal: opts.signal });
    for await (const raw of stream) {
      const m = decode(raw);
      if (m.progress && opts.onProgress) opts.onProgress(m.progress);
      if (m.sandbox) return new Sandbox(this.r, m.sandbox.id, m.sandbox);
    }
    throw new ReinsError("internal", "the service ended the create stream without a sandbox");
  }

  async get(id) {
    const m = decode(await this.r.t.unary(SANDBOX + "Get", { id }));
    return new Sandbox(this.r, m.sandbox.id, m.sandbox);
  }

  /** list returns the sandboxes that carry every label given. */
  async list(opts = {}) {
    const m = decode(await this.r.t.unary(SANDBOX + "List", { labels: opts.labels ?? {} }));
    return (m.sandboxes ?? []).map((s) => new Sandbox(this.r, s.id, s));
  }

  /** delete stops a sandbox and removes everything it had. */
  async delete(id) {
    await this.r.t.unary(SANDBOX + "Delete", { id }, { timeoutMs: 120_000 });
  }

  /** extend sets the sandbox's expiry to ttlMs from now. */
  async extend(id, ttlMs) {
    const m = decode(await this.r.t.unary(SANDBOX + "Extend", { id, ttl_ms: ttlMs }));
    return m.sandbox;
  }

  /** pause keeps memory and processes (a gVisor checkpoint); with
   * orSuspend a backend that cannot suspends instead. */
  async pause(id, opts = {}) {
    return decode(await this.r.t.unary(SANDBOX + "Pause", { id, or_suspend: !!opts.orSuspend }, { timeoutMs: 300_000 }));
  }

  async resume(id) {
    const m = decode(await this.r.t.unary(SANDBOX + "Resume", { id }, { timeoutMs: 300_000 }));
    return m.sandbox;
  }

  /** portURL is a URL on the service that reaches port inside the
   * sandbox; public makes it a signed link that expires (ttlMs). */
  async portURL(id, port, opts = {}) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new ReinsError("invalid_argument", `port ${port} is outside 1-65535`);
    }
    return decode(await this.r.t.unary(SANDBOX + "PortURL", { id, port, public: !!opts.public, ttl_ms: opts.ttlMs ?? 0 }));
  }
}

/** Sandbox is one sandbox: its record (info, when fetched) and the
 * processes, files and ports inside it, reached through the service. */
export class Sandbox {
  constructor(reins, id, info) {
    this.r = reins;
    this.id = id;
    /** The sandbox as the service last described it (null for a bare handle). */
    this.info = info;
    this.files = new Files(this);
    this.ports = { url: (port, opts) => this.portURL(port, opts).then((p) => p.url) };
  }

  /** @internal an executor call through the service. */
  call(method, req, opts = {}) {
    return this.r.t.unary(EXECUTOR + method, req, { ...opts, sandbox: this.id });
  }

  async refresh() {
    const s = await this.r.sandboxes.get(this.id);
    this.info = s.info;
    return this.info;
  }

  delete() { return this.r.sandboxes.delete(this.id); }
  kill() { return this.delete(); }
  extend(ttlMs) { return this.r.sandboxes.extend(this.id, ttlMs); }
  pause(opts) { return this.r.sandboxes.pause(this.id, opts); }
  resume() { return this.r.sandboxes.resume(this.id); }
  portURL(port, opts) { return this.r.sandboxes.portURL(this.id, port, opts); }

  /**
   * exec runs a process (argv, or a command string for /bin/sh -c) and
   * streams its output to onStdout and onStderr as it comes; it returns
   * how the process ended. The signal cancels the call (the process is
   * killed).
   */
  async exec(cmd, opts = {}) {
    const argv = typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : [...cmd];
    if (argv.length === 0) throw new ReinsError("invalid_argument", "exec needs a command");
    const stdin = opts.stdin === undefined ? null : bytesOf(opts.stdin);
    const req = {
      argv,
      env: envList(opts.env),
      cwd: opts.cwd ?? "",
      timeout_ms: opts.timeoutMs ?? 0,
      stdin: stdin !== null,
      tag: opts.tag ?? "",
    };
    if (opts.user) req.user = opts.user;
    const result = { pid: 0, exitCode: -1, signal: 0, reason: "", durationMs: 0, oomKills: 0, dropped: null };
    let stdinSent = null;
    for await (const raw of this.r.t.stream(EXECUTOR + "Exec", req, { sandbox: this.id, signal: opts.signal })) {
      if (raw.started != null) {
        result.pid = raw.started.pid ?? 0;
        if (stdin !== null) {
          // Written while the output streams, so a command that reads
          // all its input before writing does not stall the stream.
          stdinSent = this.call("WriteStdin", { pid: result.pid, data: toBase64(stdin), close: true }, { signal: opts.signal });
          stdinSent.catch(() => {});
        }
      } else if (raw.exited != null) {
        const x = decode(raw.exited);
        Object.assign(result, {
          exitCode: x.exitCode ?? 0, signal: x.signal ?? 0, reason: x.reason ?? "",
          durationMs: x.durationMs ?? 0, oomKills: x.oomKills ?? 0,
        });
      } else if (raw.dropped != null) {
        result.dropped = decode(raw.dropped);
      } else if (raw.stdout != null) {
        opts.onStdout?.(fromBase64(raw.stdout));
      } else if (raw.stderr != null) {
        opts.onStderr?.(fromBase64(raw.stderr));
      }
    }
    // A process that exited without reading all its input is no error of
    // the call: its exit says what happened.
    if (stdinSent) await stdinSent.catch((err) => { if (!result.reason) throw err; });
    return result;
  }

  /**
   * run runs one command to completion (RunCommand) and returns its
   * whole output, bounded by maxOutputBytes per stream (1 MiB by
   * default): {stdout, stderr, exitCode, reason, truncated, durationMs,
   * oomKills}.
   */
  async run(cmd, opts = {}) {
    const req = {
      sandbox_id: this.id,
      env: envList(opts.env),
      cwd: opts.cwd ?? "",
      timeout_ms: opts.timeoutMs ?? 0,
      max_output_bytes: opts.maxOutputBytes ?? 0,
    };
    if (typeof cmd === "string") req.command = cmd;
    else req.argv = [...cmd];
    if (opts.stdin !== undefined) req.stdin = toBase64(bytesOf(opts.stdin));
    const timeoutMs = (opts.timeoutMs || 60_000) + 30_000;
    const m = decode(await this.r.t.unary(SANDBOX + "RunCommand", req, { signal: opts.signal, timeoutMs }));
    return {
      stdout: m.stdout ?? "", stderr: m.stderr ?? "", exitCode: m.exitCode ?? 0, reason: m.reason ?? "",
      truncated: !!m.truncated, durationMs: m.durationMs ?? 0, oomKills: m.oomKills ?? 0,
    };
  }
}

function envList(env) {
  if (!env) return [];
  if (Array.isArray(env)) return env;
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

/** Files are a sandbox's files: whole files as raw bytes over plain
 * HTTP, everything else through the executor's calls. */
export class Files {
  constructor(sandbox) {
    this.s = sandbox;
  }

  rawPath(path) {
    return `/v1/sandboxes/${encodeURIComponent(this.s.id)}/files?path=${encodeURIComponent(path)}`;
  }

  /** readStream is the file's bytes as a stream (GET, no size cap). */
  async readStream(path, opts = {}) {
    const resp = await this.s.r.t.raw("GET", this.rawPath(path), { signal: opts.signal, what: `read ${path}` });
    return resp.body;
  }

  /** read returns the whole file; one larger than maxBytes (1 GiB by
   * default) is refused rather than held in memory. */
  async read(path, opts = {}) {
    const body = await this.readStream(path, opts);
    return readBounded(body, opts.maxBytes ?? 1 << 30, `read ${path}`);
  }

  async readText(path, opts) {
    return new TextDecoder().decode(await this.read(path, opts));
  }

  /** write replaces the file at path with data (a string, bytes, or a
   * ReadableStream of bytes), making its parents; mode is its
   * permission bits (default: the replaced file's, 0644 for a new one). */
  async write(path, data, opts = {}) {
    const body = data && typeof data.getReader === "function" ? data : bytesOf(data);
    const mode = opts.mode ? `&mode=0${opts.mode.toString(8)}` : "";
    await this.s.r.t.raw("PUT", this.rawPath(path) + mode, {
      body, signal: opts.signal, what: `write ${path}`,
      headers: { "content-type": "application/octet-stream" },
    });
  }

  /** upload puts many files in one call: {path: data} (a name ending
   * in "/" is a directory), unpacked under dir (default "/") by the
   * executor's hardened extractor. It holds the archive in memory: for
   * one large file use write. */
  async upload(files, opts = {}) {
    const archive = tar(files);
    const msgs = [{ header: { dir: opts.dir ?? "/" } }];
    for (let off = 0; off < archive.length; off += UPLOAD_CHUNK) {
      msgs.push({ data: toBase64(archive.subarray(off, off + UPLOAD_CHUNK)) });
    }
    let res = null;
    for await (const m of this.s.r.t.stream(EXECUTOR + "Upload", msgs, { sandbox: this.s.id, signal: opts.signal })) res = decode(m);
    return { files: res?.files ?? 0, bytes: res?.bytes ?? 0 };
  }

  async stat(path) {
    return decode(await this.s.call("Stat", { path })).info;
  }

  /** list returns a directory's entries (depth levels deep). */
  async list(path, opts = {}) {
    const m = decode(await this.s.call("ListDir", { path, depth: opts.depth ?? 0, limit: opts.limit ?? 0 }));
    return m.entries ?? [];
  }

  async mkdir(path, opts = {}) {
    await this.s.call("MakeDir", { path, parents: opts.parents ?? true, mode: opts.mode ?? 0 });
  }

  async remove(path, opts = {}) {
    await this.s.call("Remove", { path, recursive: !!opts.recursive });
  }

  async move(src, dst, opts = {}) {
    await this.s.call("Move", { src, dst, overwrite: !!opts.overwrite });
  }

  /** edit replaces old with new; old must occur once unless replaceAll. */
  async edit(path, oldText, newText, opts = {}) {
    const m = decode(await this.s.call("EditFile", { path, old: oldText, new: newText, replace_all: !!opts.replaceAll }));
    return { replacements: m.replacements ?? 0 };
  }

  /** readLines returns a range of a text file's lines (firstLine is
   * 1-based) and how many it has in all. */
  async readLines(path, opts = {}) {
    const m = decode(await this.s.call("ReadLines", {
      path, first_line: opts.firstLine ?? 1, max_lines: opts.maxLines ?? 0, max_line_bytes: opts.maxLineBytes ?? 0,
    }));
    const text = new TextDecoder();
    return {
      lines: (m.lines ?? []).map((l) => ({ text: text.decode(fromBase64(l.text)), cut: !!l.cut })),
      totalLines: m.totalLines ?? 0, size: m.size ?? 0, binary: !!m.binary,
    };
  }

  /** grep searches a file or a directory (recursively) for an RE2
   * regular expression, or with literal for the pattern as it is. */
  async grep(pattern, path, opts = {}) {
    const m = decode(await this.s.call("Grep", {
      pattern, path, include: opts.include ?? "", ignore_case: !!opts.ignoreCase, limit: opts.limit ?? 0,
      literal: !!opts.literal,
    }));
    return { matches: m.matches ?? [], truncated: !!m.truncated };
  }

  /** glob returns the paths matching pattern ("**" spans directories);
   * with info, entries holds each one's FileInfo. */
  async glob(pattern, opts = {}) {
    const m = decode(await this.s.call("Glob", { pattern, dir: opts.dir ?? "", limit: opts.limit ?? 0, info: !!opts.info }));
    return { paths: m.paths ?? [], truncated: !!m.truncated, entries: m.entries ?? [] };
  }
}

// The tar bytes in one Upload message.
const UPLOAD_CHUNK = 1 << 20;

/** Runs are the calls of the run service. */
export class Runs {
  constructor(reins) {
    this.r = reins;
  }

  /** start checks a spec and starts a run; a script given as an object
   * is sent as its JSON. opts.uploads ({"/workspace/data.csv": bytes or
   * text; a name ending in "/" a directory}) are put into the run's
   * sandbox before its first tool call (at most 12 MiB as a tar); the
   * spec's downloads (paths or globs) come back as the run's artifacts
   * when it ends (docs/api.md, "Run files"). */
  async start(spec, opts = {}) {
    const s = { ...spec };
    if (s.script && typeof s.script === "object") s.script = JSON.stringify(s.script);
    if (s.script && !s.model) s.model = "script:inline";
    if (s.network) s.network = encodeSpec({ network: s.network }).network;
    const req = { spec: s };
    if (opts.uploads) req.uploads = toBase64(tar(opts.uploads));
    return decode(await this.r.t.unary(RUN + "Start", req)).run;
  }

  async get(id) {
    return decode(await this.r.t.unary(RUN + "Get", { id })).run;
  }

  async list(opts = {}) {
    const statuses = (opts.statuses ?? []).map((s) => wireEnum("RUN_STATUS_", s));
    return decode(await this.r.t.unary(RUN + "List", { statuses, limit: opts.limit ?? 0 })).runs ?? [];
  }

  /** events yields a run's log from afterSeq; with follow (the default)
   * until the run finishes. */
  async *events(id, opts = {}) {
    const req = { id, after_seq: opts.afterSeq ?? 0, follow: opts.follow ?? true };
    for await (const raw of this.r.t.stream(RUN + "Events", req, { signal: opts.signal })) {
      yield decode(raw);
    }
  }

  /** wait follows a run's events until it finishes and returns the run. */
  async wait(id, opts = {}) {
    for await (const ev of this.events(id, opts)) {
      if (ev.type === "finished") break;
    }
    return this.get(id);
  }

  /** artifacts lists the files a run saved (and large outputs). */
  async artifacts(id) {
    return decode(await this.r.t.unary(RUN + "ListArtifacts", { id })).artifacts ?? [];
  }

  /** artifact returns an artifact's bytes, by name or by digest (any
   * blob the run references: a cut output's whole text, a screenshot);
   * one larger than maxBytes (1 GiB by default) is refused. */
  async artifact(id, nameOrDigest, opts = {}) {
    const max = opts.maxBytes ?? 1 << 30;
    const parts = [];
    let n = 0;
    for await (const m of this.r.t.stream(RUN + "GetArtifact", { id, name_or_digest: nameOrDigest }, { signal: opts.signal })) {
      const b = fromBase64(m.data);
      n += b.length;
      if (n > max) throw new ReinsError("resource_exhausted", `artifact ${nameOrDigest} of run ${id} is larger than maxBytes (${max})`);
      parts.push(b);
    }
    return concat(parts);
  }

  async cancel(id) { await this.r.t.unary(RUN + "Cancel", { id }); }
  async pause(id) { await this.r.t.unary(RUN + "Pause", { id }); }
  async resume(id) { await this.r.t.unary(RUN + "Resume", { id }); }
  async answer(id, text) { await this.r.t.unary(RUN + "Answer", { id, text }); }

  /** approve lets a held call run (callId "" : the first pending one),
   * with edited arguments (edit, JSON) and for the rest of the run
   * (always). */
  async approve(id, opts = {}) {
    const edit = opts.edit && typeof opts.edit === "object" ? JSON.stringify(opts.edit) : opts.edit ?? "";
    await this.r.t.unary(RUN + "Approve", { id, call_id: opts.callId ?? "", edit, always: !!opts.always });
  }

  async deny(id, opts = {}) {
    await this.r.t.unary(RUN + "Deny", { id, call_id: opts.callId ?? "", reason: opts.reason ?? "" });
  }
}
