// Hand-written declarations of @reins/sdk/deepagents (deepagents.js).
import {
  BaseSandbox,
  type DeleteResult,
  type EditResult,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileUploadResponse,
  type GlobResult,
  type GrepResult,
  type LsResult,
  type ReadResult,
} from "deepagents";
import type { Progress, Reins, ReinsOptions, Sandbox, SandboxSpec } from "./index.js";

export interface ReinsSandboxOptions {
  /** Bound of each execute (default 30 minutes); the process group is killed after it. */
  timeoutMs?: number;
  /** Output execute keeps (default 1 MiB); the rest is dropped and truncated set. */
  maxOutputBytes?: number;
  /** false: deepagents' shell versions of the file calls instead of the executor's (default true). */
  native?: boolean;
  /** close() deletes the sandbox (set by create). */
  owned?: boolean;
  /** Where execute runs commands ("" : the sandbox's workdir). */
  cwd?: string;
}

/** A deepagents sandbox backend whose commands and files live in one reins sandbox. */
export declare class ReinsSandbox extends BaseSandbox {
  constructor(sandbox: Sandbox, opts?: ReinsSandboxOptions);
  /** Makes a sandbox the backend owns: close() deletes it. */
  static create(
    reins: Reins | ReinsOptions,
    spec?: SandboxSpec,
    opts?: ReinsSandboxOptions & { onProgress?: (p: Progress) => void; signal?: AbortSignal },
  ): Promise<ReinsSandbox>;
  readonly sandbox: Sandbox;
  readonly id: string;
  /** Deletes the sandbox when the backend made it; otherwise does nothing. */
  close(): Promise<void>;
  kill(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
  execute(command: string): Promise<ExecuteResponse>;
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>;
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>;
  ls(path: string): Promise<LsResult>;
  read(filePath: string, offset?: number, limit?: number): Promise<ReadResult>;
  edit(filePath: string, oldString: string, newString: string, replaceAll?: boolean): Promise<EditResult>;
  grep(pattern: string, path?: string, glob?: string | null, maxCount?: number | null): Promise<GrepResult>;
  glob(pattern: string, path?: string): Promise<GlobResult>;
  delete(filePath: string): Promise<DeleteResult>;
}
