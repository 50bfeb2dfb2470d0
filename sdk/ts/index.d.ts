// Hand-written declarations of @reins/sdk (index.js).
//
// Values come back as the API's JSON with camelCase keys, 64-bit integers
// as numbers, enums by their short names ("running", "succeeded",
// "tool_call"), and an RFC 3339 `*Time` beside each `*UnixNano`.

/** Where reins serve listens unless told otherwise. */
export declare const DEFAULT_URL: string;
/** The largest message a stream may carry (64 MiB); a longer one is refused. */
export declare const MAX_MESSAGE_BYTES: number;

/** Connect's code names. */
export type Code =
  | "canceled" | "unknown" | "invalid_argument" | "deadline_exceeded" | "not_found"
  | "already_exists" | "permission_denied" | "resource_exhausted" | "failed_precondition"
  | "aborted" | "out_of_range" | "unimplemented" | "internal" | "unavailable"
  | "data_loss" | "unauthenticated";

/** Every failure of a call: the server's code and message when it answered. */
export declare class ReinsError extends Error {
  constructor(code: Code | string, message: string, opts?: { status?: number; details?: unknown[]; cause?: unknown; procedure?: string; kind?: string });
  readonly name: "ReinsError";
  readonly code: Code;
  /** The HTTP status of the answer; 0 when there was none. */
  readonly status: number;
  readonly details: unknown[];
  /** The call, e.g. "reins.v1.SandboxService/Get". */
  readonly procedure: string;
  /** reins' own kind when the service names one: "is_directory", "too_large", "no_space", ... */
  readonly kind: string;
}

export interface ReinsOptions {
  /** Default $REINS_URL, then http://127.0.0.1:7070; without a scheme, http. */
  url?: string;
  /** Default $REINS_TOKEN. */
  token?: string;
  fetch?: typeof fetch;
  /** Bound of each unary call (default 60 s). */
  timeoutMs?: number;
}

export type SandboxState = "creating" | "running" | "paused" | "suspended" | "stopped" | "";
export type SandboxReason = "exited" | "oom_killed" | "ttl_expired" | "idle_timeout" | "killed" | "lost" | "error" | "";

export interface NetworkRules {
  mode?: "none" | "egress" | "open" | string;
  allowHosts?: string[];
  denyHosts?: string[];
  allowCidrs?: string[];
  secrets?: { name: string; hosts?: string[] }[];
}

/** A sandbox's spec (reins.v1.SandboxSpec); snake_case keys are accepted too. */
export interface SandboxSpec {
  image?: string;
  backend?: string;
  cpus?: number;
  memoryBytes?: number;
  pids?: number;
  diskBytes?: number;
  ttlMs?: number;
  idleTimeoutMs?: number;
  env?: string[];
  labels?: Record<string, string>;
  workdir?: string;
  network?: NetworkRules;
  gateway?: { on?: boolean; model?: string; script?: string };
  onExpire?: "suspend" | "delete";
  expiryWarningMs?: number;
  screen?: string;
  [field: string]: unknown;
}

/** A sandbox as the service describes it (reins.v1.Sandbox). */
export interface SandboxInfo {
  id: string;
  spec: SandboxSpec;
  state: SandboxState;
  reason: SandboxReason;
  message: string;
  imageDigest: string;
  createdUnixNano: number;
  createdTime: string;
  stoppedUnixNano: number;
  stoppedTime: string;
  expiresUnixNano: number;
  expiresTime: string;
  oomKills: number;
  runtime: string;
  memoryBytes: number;
  peakMemoryBytes: number;
  origin: string;
  workspace: string;
  [field: string]: unknown;
}

export interface Progress {
  phase: "pull" | "unpack" | "build" | "boot" | "";
  item: string;
  done: number;
  total: number;
  message: string;
}

export interface PortURL {
  url: string;
  expiresUnixNano: number;
  expiresTime: string;
}

export declare class Reins {
  constructor(opts?: ReinsOptions);
  readonly url: string;
  readonly sandboxes: Sandboxes;
  readonly runs: Runs;
  /** A handle on sandbox id, without asking the service. */
  sandbox(id: string): Sandbox;
  version(): Promise<{ version: string; backends: { name: string; runtime: string }[] }>;
}

export declare class Sandboxes {
  create(spec?: SandboxSpec, opts?: { onProgress?: (p: Progress) => void; signal?: AbortSignal }): Promise<Sandbox>;
  get(id: string): Promise<Sandbox>;
  list(opts?: { labels?: Record<string, string> }): Promise<Sandbox[]>;
  delete(id: string): Promise<void>;
  extend(id: string, ttlMs: number): Promise<SandboxInfo>;
  pause(id: string, opts?: { orSuspend?: boolean }): Promise<{ sandbox: SandboxInfo; suspendedInstead: boolean; memoryBytes: number }>;
  resume(id: string): Promise<SandboxInfo>;
  portURL(id: string, port: number, opts?: { public?: boolean; ttlMs?: number }): Promise<PortURL>;
}

export interface ExecOptions {
  onStdout?: (chunk: Uint8Array) => void;
  onStderr?: (chunk: Uint8Array) => void;
  /** Written to the process's stdin, which is then closed. */
  stdin?: string | Uint8Array;
  cwd?: string;
  env?: Record<string, string> | string[];
  /** 0: none; on expiry the process group is killed (reason "timeout"). */
  timeoutMs?: number;
  /** Cancels the call; the process is killed. */
  signal?: AbortSignal;
  /** An account of the sandbox's /etc/passwd to run as. */
  user?: string;
  tag?: string;
}

export interface ExecResult {
  pid: number;
  /** 128+signal when a signal killed it. */
  exitCode: number;
  signal: number;
  /** "exited", "signaled", "timeout", "killed". */
  reason: string;
  durationMs: number;
  /** Sandbox processes the memory limit killed while it ran. */
  oomKills: number;
  dropped: { stdoutBytes: number; stderrBytes: number } | null;
}

export interface RunOptions {
  cwd?: string;
  env?: Record<string, string> | string[];
  /** 0: 60 s; on expiry reason "timeout". */
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  /** Per stream; 0: 1 MiB; at most 16 MiB. */
  maxOutputBytes?: number;
  signal?: AbortSignal;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  /** "exited", "signaled", "timeout", "oom_killed", "killed". */
  reason: string;
  truncated: boolean;
  durationMs: number;
  oomKills: number;
}

export declare class Sandbox {
  readonly id: string;
  /** As the service last described it; null for a bare handle (reins.sandbox(id)). */
  info: SandboxInfo | null;
  readonly files: Files;
  readonly ports: { url(port: number, opts?: { public?: boolean; ttlMs?: number }): Promise<string> };
  refresh(): Promise<SandboxInfo>;
  delete(): Promise<void>;
  /** The same as delete. */
  kill(): Promise<void>;
  extend(ttlMs: number): Promise<SandboxInfo>;
  pause(opts?: { orSuspend?: boolean }): Promise<{ sandbox: SandboxInfo; suspendedInstead: boolean; memoryBytes: number }>;
  resume(): Promise<SandboxInfo>;
  portURL(port: number, opts?: { public?: boolean; ttlMs?: number }): Promise<PortURL>;
  /** Runs argv, or a command string with /bin/sh -c, streaming its output. */
  exec(cmd: string | string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Runs one command to completion and answers its whole (bounded) output. */
  run(cmd: string | string[], opts?: RunOptions): Promise<RunResult>;
}

export type FileType = "file" | "dir" | "symlink" | "other" | "";

export interface FileInfo {
  path: string;
  name: string;
  type: FileType;
  size: number;
  mode: number;
  mtimeUnixNano: number;
  mtimeTime: string;
  symlinkTarget: string;
}

export interface GrepMatch {
  path: string;
  line: number;
  text: string;
}

export declare class Files {
  /** The whole file (GET /v1/sandboxes/{id}/files?path=); larger than maxBytes (1 GiB) is refused. */
  read(path: string, opts?: { maxBytes?: number; signal?: AbortSignal }): Promise<Uint8Array>;
  readText(path: string, opts?: { maxBytes?: number; signal?: AbortSignal }): Promise<string>;
  /** The file's bytes as they come, no size cap. */
  readStream(path: string, opts?: { signal?: AbortSignal }): Promise<ReadableStream<Uint8Array>>;
  /** Replaces the file (parents made): PUT /v1/sandboxes/{id}/files?path=. */
  write(path: string, data: string | Uint8Array | ArrayBuffer | ReadableStream<Uint8Array>, opts?: { mode?: number; signal?: AbortSignal }): Promise<void>;
  /** Many files in one call ({path: data}; a name ending in "/" is a directory), as a tar the executor unpacks under dir ("/"). */
  upload(files: Record<string, string | Uint8Array> | Array<[string, string | Uint8Array]>, opts?: { dir?: string; signal?: AbortSignal }): Promise<{ files: number; bytes: number }>;
  stat(path: string): Promise<FileInfo>;
  list(path: string, opts?: { depth?: number; limit?: number }): Promise<FileInfo[]>;
  mkdir(path: string, opts?: { parents?: boolean; mode?: number }): Promise<void>;
  remove(path: string, opts?: { recursive?: boolean }): Promise<void>;
  move(src: string, dst: string, opts?: { overwrite?: boolean }): Promise<void>;
  /** Replaces old with new; old must occur once unless replaceAll. */
  edit(path: string, oldText: string, newText: string, opts?: { replaceAll?: boolean }): Promise<{ replacements: number }>;
  readLines(path: string, opts?: { firstLine?: number; maxLines?: number; maxLineBytes?: number }): Promise<{
    lines: { text: string; cut: boolean }[];
    totalLines: number;
    size: number;
    binary: boolean;
  }>;
  /** An RE2 pattern, or a fixed string with literal. */
  grep(pattern: string, path: string, opts?: { literal?: boolean; include?: string; ignoreCase?: boolean; limit?: number }): Promise<{ matches: GrepMatch[]; truncated: boolean }>;
  /** "**" spans directories; with info, entries has each path's FileInfo. */
  glob(pattern: string, opts?: { dir?: string; limit?: number; info?: boolean }): Promise<{ paths: string[]; truncated: boolean; entries: FileInfo[] }>;
}

export type RunStatus = "queued" | "running" | "waiting_approval" | "paused" | "succeeded" | "failed" | "cancelled" | "";

/** A run's spec (reins.v1.RunSpec). */
export interface RunSpec {
  task: string;
  /** provider:model; with a script and no model, "script:inline". */
  model?: string;
  system?: string;
  sandboxes?: Record<string, string>;
  maxSteps?: number;
  maxCostUsd?: number;
  maxTokens?: number;
  timeoutMs?: number;
  tools?: string[];
  policy?: string;
  /** A script: model's JSON, or the object itself. */
  script?: string | { turns: unknown[] };
  network?: NetworkRules;
  agent?: string;
  [field: string]: unknown;
}

export interface Run {
  id: string;
  status: RunStatus;
  spec: RunSpec;
  steps: number;
  costUsd: number;
  text: string;
  reason: string;
  createdUnixNano: number;
  createdTime: string;
  updatedUnixNano: number;
  updatedTime: string;
  lastSeq: number;
  sandboxes: Record<string, string>;
  pending: { callId: string; tool: string; input: string; rule: string; reason: string }[];
  [field: string]: unknown;
}

/** One entry of a run's log; its payload is the field named after its type. */
export interface RunEvent {
  runId: string;
  seq: number;
  /** "run_created", "model_response", "tool_call", "tool_result", "waiting", "finished", ... */
  type: string;
  timeUnixNano: number;
  timeTime: string;
  [payload: string]: unknown;
}

export declare class Runs {
  /** uploads: files put into the run's sandbox before its first tool
   * call ({"/workspace/data.csv": data}; a name ending in "/" is a
   * directory), at most 12 MiB in all. */
  start(spec: RunSpec, opts?: { uploads?: Record<string, string | Uint8Array> }): Promise<Run>;
  get(id: string): Promise<Run>;
  list(opts?: { statuses?: RunStatus[]; limit?: number }): Promise<Run[]>;
  /** The run's log from afterSeq; with follow (the default) until it finishes. */
  events(id: string, opts?: { afterSeq?: number; follow?: boolean; signal?: AbortSignal }): AsyncGenerator<RunEvent>;
  /** Follows the events until the run finishes, then returns it. */
  wait(id: string, opts?: { afterSeq?: number; signal?: AbortSignal }): Promise<Run>;
  /** The files a run saved (and large outputs). */
  artifacts(id: string): Promise<{ name: string; digest: string; size: number; source: string; error?: string }[]>;
  /** An artifact's bytes, by name or digest; larger than maxBytes (1 GiB) is refused. */
  artifact(id: string, nameOrDigest: string, opts?: { maxBytes?: number; signal?: AbortSignal }): Promise<Uint8Array>;
  cancel(id: string): Promise<void>;
  pause(id: string): Promise<void>;
  resume(id: string): Promise<void>;
  answer(id: string, text: string): Promise<void>;
  approve(id: string, opts?: { callId?: string; edit?: string | object; always?: boolean }): Promise<void>;
  deny(id: string, opts?: { callId?: string; reason?: string }): Promise<void>;
}
