// Compiled (never run) by types.test.mjs: the declarations describe the
// calls as the tests and the README make them, and ReinsSandbox is what
// deepagents takes as a backend.
import { Reins, ReinsError, type RunResult, type SandboxInfo } from "../index.js";
import { ReinsSandbox } from "../deepagents.js";
import { createDeepAgent, type SandboxBackendProtocolV2 } from "deepagents";

export async function usage(): Promise<void> {
  const reins = new Reins({ url: "127.0.0.1:7070", token: "t" });
  const sb = await reins.sandboxes.create({ image: "busybox", memoryBytes: 1 << 30, labels: { a: "b" } }, {
    onProgress: (p) => console.log(p.phase, p.done, p.total),
  });
  const info: SandboxInfo | null = sb.info;
  console.log(info?.state === "running", info?.createdTime);
  const ex = await sb.exec(["ls", "-l"], { onStdout: (b: Uint8Array) => b.length, signal: AbortSignal.timeout(1000) });
  const code: number = ex.exitCode;
  const r: RunResult = await sb.run("echo hi", { timeoutMs: 1000 });
  console.log(code, r.stdout, r.truncated);
  const bytes: Uint8Array = await sb.files.read("/etc/passwd");
  await sb.files.write("/tmp/x", bytes);
  await sb.files.write("/tmp/y", "text");
  const entries = await sb.files.list("/tmp", { depth: 2 });
  console.log(entries[0].type === "dir", (await sb.files.glob("**/*.go", { info: true })).entries[0].size);
  const url: string = await sb.ports.url(8080);
  console.log(url, (await sb.portURL(8080, { public: true })).expiresTime);
  const run = await reins.runs.start({ task: "t", script: { turns: [{ text: "done" }] } });
  for await (const ev of reins.runs.events(run.id)) console.log(ev.seq, ev.type);
  await reins.runs.approve(run.id, { edit: { command: "ls" } });
  const art: Uint8Array = await reins.runs.artifact(run.id, (await reins.runs.artifacts(run.id))[0].name);
  console.log(art.length);
  try {
    await reins.sandboxes.get("x");
  } catch (e) {
    if (e instanceof ReinsError && e.code === "not_found") console.log(e.message, e.status, e.kind);
  }
  const backend = await ReinsSandbox.create(reins, { image: "busybox" }, { timeoutMs: 60_000 });
  const asProtocol: SandboxBackendProtocolV2 = backend;
  const out = await asProtocol.execute("ls");
  console.log(out.output, out.exitCode, new ReinsSandbox(sb).id);
  createDeepAgent({ model: "anthropic:claude-sonnet-4-5", backend });
  await backend.close();
  await sb.delete();
}
