// A LangChain deepagents sandbox backend on reins: the agent's execute
// tool runs in a reins sandbox, and its file tools (ls, read_file,
// write_file, edit_file, grep, glob) are the executor's own calls instead
// of shell pipelines: no quoting, no output parsing, bounded answers.
// deepagents' shell versions (BaseSandbox) remain the fallback for a
// service that does not answer a call (unimplemented), or all the time
// with {native: false}.

import { BaseSandbox } from "deepagents";
import { Reins, ReinsError } from "./index.js";

const EMPTY_FILE = "System reminder: File exists but has empty contents";

// The extensions deepagents reads whole, as bytes (images, audio,
// video, documents); every other file is text to it, read by lines.
const BINARY_EXT = /\.(png|jpe?g|gif|webp|heic|heif|mp3|wav|aiff|aac|ogg|flac|mp4|webm|mpe?g|mov|avi|flv|wmv|3gpp|pdf|pptx?)$/i;

/** ReinsSandbox is a deepagents backend whose commands and files live
 * in one reins sandbox. */
export class ReinsSandbox extends BaseSandbox {
  /**
   * @param {import("./index.js").Sandbox} sandbox
   * @param {{timeoutMs?: number, maxOutputBytes?: number, native?: boolean, owned?: boolean, cwd?: string}} [opts]
   */
  constructor(sandbox, opts = {}) {
    super();
    if (!sandbox || typeof sandbox.exec !== "function") {
      throw new TypeError("ReinsSandbox needs a reins Sandbox: new ReinsSandbox(await reins.sandboxes.create(spec)) or ReinsSandbox.create(reins, spec)");
    }
    this.sandbox = sandbox;
    this.timeoutMs = opts.timeoutMs ?? 30 * 60_000;
    this.maxOutputBytes = opts.maxOutputBytes ?? 1 << 20;
    this.native = opts.native ?? true;
    this.owned = !!opts.owned;
    this.cwd = opts.cwd ?? "";
  }

  /**
   * create makes a sandbox (spec as for reins.sandboxes.create) that the
   * backend owns: close() deletes it.
   * @param {Reins | {url?: string, token?: string}} reins
   */
  static async create(reins, spec = {}, opts = {}) {
    const r = reins instanceof Reins ? reins : new Reins(reins);
    const sb = await r.sandboxes.create(spec, { onProgress: opts.onProgress, signal: opts.signal });
    return new ReinsSandbox(sb, { ...opts, owned: true });
  }

  get id() {
    return this.sandbox.id;
  }

  /** close deletes the sandbox when the backend made it (create). */
  async close() {
    if (!this.owned) return;
    this.owned = false;
    await this.sandbox.delete();
  }

  kill() {
    return this.close();
  }

  async [Symbol.asyncDispose]() {
    await this.close();
  }

  /**
   * execute runs command with /bin/sh -c and returns its stdout and
   * stderr interleaved as they came, cut at maxOutputBytes (the rest is
   * read and dropped, and truncated says so).
   */
  async execute(command) {
    const chunks = [];
    let kept = 0;
    let truncated = false;
    const keep = (b) => {
      const room = this.maxOutputBytes - kept;
      if (b.length > room) truncated = true;
      const part = b.length > room ? b.subarray(0, Math.max(room, 0)) : b;
      if (part.length > 0) {
        chunks.push(part.slice());
        kept += part.length;
      }
    };
    const res = await this.sandbox.exec(command, {
      timeoutMs: this.timeoutMs, cwd: this.cwd, onStdout: keep, onStderr: keep,
    });
    // deepagents' execute tool adds the exit code and the truncation.
    let output = Buffer.concat(chunks).toString("utf8");
    if (res.reason === "timeout") output += `\n[the command was killed after ${this.timeoutMs / 1000} s, its time limit]`;
    if (res.oomKills > 0) output += `\n[the sandbox's memory limit killed ${res.oomKills} process(es) while it ran]`;
    return { output, exitCode: res.exitCode, truncated };
  }

  async uploadFiles(files) {
    const out = [];
    for (const [path, content] of files) {
      try {
        await this.sandbox.files.write(path, content);
        out.push({ path, error: null });
      } catch (err) {
        out.push({ path, error: fileError(err) });
      }
    }
    return out;
  }

  async downloadFiles(paths) {
    const out = [];
    for (const path of paths) {
      try {
        out.push({ path, content: await this.sandbox.files.read(path), error: null });
      } catch (err) {
        out.push({ path, content: null, error: fileError(err) });
      }
    }
    return out;
  }

  // nativeOr runs the executor's call, or deepagents' shell version when
  // the backend is told to or the service lacks the call.
  async nativeOr(fallback, call) {
    if (!this.native) return fallback();
    try {
      return await call();
    } catch (err) {
      if (err instanceof ReinsError && err.code === "unimplemented") return fallback();
      if (err instanceof ReinsError && isFileError(err)) return { error: err.message };
      throw err;
    }
  }

  ls(path) {
    return this.nativeOr(() => super.ls(path), async () => {
      const entries = await this.sandbox.files.list(path);
      return { files: entries.map(fileInfo) };
    });
  }

  read(filePath, offset = 0, limit = 500) {
    if (!isText(filePath)) return super.read(filePath, offset, limit);
    return this.nativeOr(() => super.read(filePath, offset, limit), async () => {
      const first = Math.max(0, Math.floor(offset || 0));
      const max = Math.max(0, Math.floor(limit || 0));
      if (max === 0) return { content: "", mimeType: "text/plain" };
      const r = await this.sandbox.files.readLines(filePath, { firstLine: first + 1, maxLines: max, maxLineBytes: 1 << 20 });
      if (r.binary) return super.read(filePath, offset, limit);
      if (r.size === 0) return { content: EMPTY_FILE, mimeType: "text/plain" };
      const content = r.lines.map((l) => l.text).join("\n") + (r.lines.length ? "\n" : "");
      if (first >= r.totalLines) return { content, mimeType: "text/plain" };
      const end = Math.min(first + max, r.totalLines);
      return {
        content, mimeType: "text/plain", totalLines: r.totalLines, startLine: first + 1, endLine: end,
        nextOffset: end < r.totalLines ? end : undefined,
      };
    });
  }

  edit(filePath, oldString, newString, replaceAll = false) {
    // An empty old string means "fill an empty file", which only
    // deepagents' own edit knows.
    if (oldString.length === 0) return super.edit(filePath, oldString, newString, replaceAll);
    return this.nativeOr(() => super.edit(filePath, oldString, newString, replaceAll), async () => {
      const { replacements } = await this.sandbox.files.edit(filePath, oldString, newString, { replaceAll });
      return { path: filePath, filesUpdate: null, occurrences: replacements };
    });
  }

  grep(pattern, path = "/", glob = null, maxCount = null) {
    return this.nativeOr(() => super.grep(pattern, path, glob, maxCount), async () => {
      const r = await this.sandbox.files.grep(pattern, path || "/", {
        literal: true, include: glob ?? "", limit: maxCount ?? 0,
      });
      return { matches: r.matches.map((m) => ({ path: m.path, line: m.line, text: m.text })), truncated: r.truncated };
    });
  }

  glob(pattern, path = "/") {
    return this.nativeOr(() => super.glob(pattern, path), async () => {
      const r = await this.sandbox.files.glob(pattern, { dir: path || "/", info: true });
      return { files: r.entries.map(fileInfo), truncated: r.truncated };
    });
  }

  delete(filePath) {
    return this.nativeOr(() => super.delete(filePath), async () => {
      await this.sandbox.files.remove(filePath, { recursive: true });
      return { path: filePath, filesUpdate: null };
    });
  }
}

function isText(path) {
  return !BINARY_EXT.test(path);
}

function fileInfo(e) {
  const dir = e.type === "dir";
  return {
    path: dir && !e.path.endsWith("/") ? e.path + "/" : e.path,
    is_dir: dir,
    size: e.size ?? 0,
    modified_at: e.mtimeTime || (e.mtimeUnixNano ? new Date(e.mtimeUnixNano / 1e6).toISOString() : undefined),
  };
}

// The errors that are about the file asked for (the model can act on
// them) rather than about the sandbox or the service.
function isFileError(err) {
  return ["not_found", "permission_denied", "invalid_argument", "failed_precondition", "already_exists", "out_of_range", "resource_exhausted"].includes(err.code);
}

// fileError is deepagents' name for a file call's failure; a failure of
// the sandbox or the service is thrown, not reported as the file's.
function fileError(err) {
  if (!(err instanceof ReinsError)) throw err;
  if (isDirectory(err)) return "is_directory";
  switch (err.code) {
    case "not_found": return "file_not_found";
    case "permission_denied": return "permission_denied";
    case "invalid_argument": return "invalid_path";
    default: throw err;
  }
}

function isDirectory(err) {
  return err.kind === "is_directory";
}
