// The client against a real reins serve with gVisor sandboxes.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { createHash, randomBytes } from "node:crypto";
import { Reins, ReinsError } from "../index.js";
import { reins, sandbox, text } from "./env.mjs";

const r = reins();
let sb;
const progress = [];

before(async () => {
  sb = await sandbox(r, { labels: { suite: "client" } }, { onProgress: (p) => progress.push(p) });
});

test("create streams progress and returns a running sandbox", async () => {
  assert.ok(progress.some((p) => p.phase === "boot"), `no boot step in ${JSON.stringify(progress)}`);
  assert.match(sb.id, /^[0-9a-f]{12}$/);
  assert.equal(sb.info.state, "running");
  assert.equal(sb.info.spec.image, "busybox");
  assert.equal(typeof sb.info.createdUnixNano, "number");
  assert.match(sb.info.createdTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/);
  const got = await r.sandboxes.get(sb.id);
  assert.equal(got.info.id, sb.id);
  const listed = await r.sandboxes.list({ labels: { suite: "client" } });
  assert.deepEqual(listed.map((s) => s.id), [sb.id]);
  assert.deepEqual(await r.sandboxes.list({ labels: { suite: "none-such" } }), []);
});

test("exec streams output as it comes, each stream apart", async () => {
  const chunks = [];
  const errs = [];
  const t0 = Date.now();
  const res = await sb.exec("echo one; sleep 1; echo two; echo oops >&2; exit 7", {
    onStdout: (b) => chunks.push({ at: Date.now() - t0, s: text(b) }),
    onStderr: (b) => errs.push(text(b)),
  });
  assert.equal(res.exitCode, 7);
  assert.equal(res.reason, "exited");
  assert.ok(res.pid > 0);
  assert.equal(chunks.map((c) => c.s).join(""), "one\ntwo\n");
  assert.ok(chunks.length >= 2, `one chunk only: ${JSON.stringify(chunks)}`);
  // "one" came before the sleep ended: streamed, not buffered to the end.
  assert.ok(chunks.at(-1).at - chunks[0].at >= 700, `chunks not spread over the sleep: ${JSON.stringify(chunks)}`);
  assert.equal(errs.join(""), "oops\n");
});

test("exec with argv, env, cwd, stdin and a timeout", async () => {
  let out = "";
  const res = await sb.exec(["sh", "-c", 'echo "$GREETING from $(pwd)"; cat'], {
    env: { GREETING: "hello" }, cwd: "/tmp", stdin: "piped in\n",
    onStdout: (b) => { out += text(b); },
  });
  assert.equal(res.exitCode, 0);
  assert.equal(out, "hello from /tmp\npiped in\n");
  const slow = await sb.exec("sleep 30", { timeoutMs: 300 });
  assert.equal(slow.reason, "timeout");
  const deaf = await sb.exec("exit 5", { stdin: new Uint8Array(1 << 20) });
  assert.equal(deaf.exitCode, 5);
});

test("exec is cancelled by its AbortSignal", async () => {
  const ac = new AbortController();
  const t0 = Date.now();
  setTimeout(() => ac.abort(), 300);
  await assert.rejects(sb.exec("sleep 30", { signal: ac.signal }), (err) => {
    assert.ok(err instanceof ReinsError, String(err));
    assert.equal(err.code, "canceled");
    return true;
  });
  assert.ok(Date.now() - t0 < 10_000);
});

test("run answers the whole output and the exit", async () => {
  const res = await sb.run("printf 'a\\nb\\n'; echo e >&2; exit 3");
  assert.deepEqual({ ...res, durationMs: 0 }, {
    stdout: "a\nb\n", stderr: "e\n", exitCode: 3, reason: "exited", truncated: false, durationMs: 0, oomKills: 0,
  });
  const big = await sb.run("head -c 5000 /dev/zero | tr '\\0' x", { maxOutputBytes: 1000 });
  assert.equal(big.truncated, true);
  assert.equal(big.stdout.length, 1000);
  const late = await sb.run("sleep 30", { timeoutMs: 300 });
  assert.equal(late.reason, "timeout");
  const argv = await sb.run(["cat"], { stdin: "in\n" });
  assert.equal(argv.stdout, "in\n");
});

test("files: 20 MiB of binary written and read back raw", async () => {
  const data = new Uint8Array(randomBytes(20 << 20));
  await sb.files.write("/tmp/big/blob.bin", data);
  const info = await sb.files.stat("/tmp/big/blob.bin");
  assert.equal(info.size, data.length);
  assert.equal(info.type, "file");
  const back = await sb.files.read("/tmp/big/blob.bin");
  assert.equal(back.length, data.length);
  const sum = (b) => createHash("sha256").update(b).digest("hex");
  assert.equal(sum(back), sum(data));
  const res = await sb.run("sha256sum /tmp/big/blob.bin");
  assert.equal(res.stdout.split(" ")[0], sum(data));
});

test("files: text, streams and the executor's calls", async () => {
  await sb.files.write("/tmp/t/a.txt", "alpha\nbeta\ngamma\n");
  assert.equal(await sb.files.readText("/tmp/t/a.txt"), "alpha\nbeta\ngamma\n");
  const parts = ["streamed ", "in ", "pieces\n"];
  const stream = new ReadableStream({
    pull(c) {
      const p = parts.shift();
      if (p === undefined) c.close();
      else c.enqueue(new TextEncoder().encode(p));
    },
  });
  await sb.files.write("/tmp/t/s.txt", stream);
  assert.equal(await sb.files.readText("/tmp/t/s.txt"), "streamed in pieces\n");
  let got = "";
  for await (const chunk of await sb.files.readStream("/tmp/t/s.txt")) got += text(chunk);
  assert.equal(got, "streamed in pieces\n");
  await sb.files.write("/tmp/t/run.sh", "echo ran\n", { mode: 0o755 });
  assert.equal((await sb.files.stat("/tmp/t/run.sh")).mode, 0o755);
  assert.equal((await sb.run("/tmp/t/run.sh")).stdout, "ran\n");

  await sb.files.mkdir("/tmp/t/sub/deep");
  await sb.files.write("/tmp/t/sub/deep/c.go", "package c\n// beta here\n");
  const names = (await sb.files.list("/tmp/t")).map((e) => `${e.name}:${e.type}`).sort();
  assert.deepEqual(names, ["a.txt:file", "run.sh:file", "s.txt:file", "sub:dir"]);
  const deep = await sb.files.list("/tmp/t", { depth: 3 });
  assert.ok(deep.some((e) => e.path === "/tmp/t/sub/deep/c.go"), JSON.stringify(deep));

  const lines = await sb.files.readLines("/tmp/t/a.txt", { firstLine: 2, maxLines: 1 });
  assert.deepEqual(lines.lines, [{ text: "beta", cut: false }]);
  assert.equal(lines.totalLines, 3);

  const g = await sb.files.grep("beta", "/tmp/t");
  assert.deepEqual(g.matches.map((m) => `${m.path}:${m.line}`).sort(), ["/tmp/t/a.txt:2", "/tmp/t/sub/deep/c.go:2"]);
  const lit = await sb.files.grep("a.t", "/tmp/t", { literal: true });
  assert.deepEqual(lit.matches, []);
  const gl = await sb.files.glob("**/*.go", { dir: "/tmp/t" });
  assert.deepEqual(gl.paths, ["/tmp/t/sub/deep/c.go"]);

  assert.deepEqual(await sb.files.edit("/tmp/t/a.txt", "beta", "BETA"), { replacements: 1 });
  await sb.files.move("/tmp/t/a.txt", "/tmp/t/b.txt");
  assert.equal(await sb.files.readText("/tmp/t/b.txt"), "alpha\nBETA\ngamma\n");
  await assert.rejects(sb.files.read("/tmp/t"), (e) => e.kind === "is_directory" && e.status === 400);
  await sb.files.remove("/tmp/t", { recursive: true });
  await assert.rejects(sb.files.stat("/tmp/t"), (e) => e.code === "not_found");
});

test("files: many files in one upload, through the executor's extractor", async () => {
  const long = "/tmp/up/" + "d/".repeat(70) + "deep.txt";
  const res = await sb.files.upload({
    "/tmp/up/a.txt": "A\n", "tmp/up/empty/": "", [long]: "deep\n", "/tmp/up/z.bin": new Uint8Array(3 << 20).fill(7),
  });
  assert.deepEqual(res, { files: 3, bytes: 2 + 5 + (3 << 20) });
  assert.equal(await sb.files.readText(long), "deep\n");
  assert.equal((await sb.files.stat("/tmp/up/empty")).type, "dir");
  assert.equal((await sb.files.read("/tmp/up/z.bin")).filter((b) => b === 7).length, 3 << 20);
  await assert.rejects(sb.files.upload({ "/tmp/../../etc/passwd": "x" }), TypeError);
  await sb.files.remove("/tmp/up", { recursive: true });
});

test("ports: a server inside the sandbox reached through the service", async () => {
  await sb.files.write("/www/index.html", "served from the sandbox\n");
  await sb.exec("httpd -p 8080 -h /www", { timeoutMs: 5000 });
  const url = await sb.ports.url(8080);
  assert.match(url, new RegExp(`^http://8080-${sb.id}\\.`));
  // The port host is a name under localhost, which Node's resolver does
  // not know: dial the service, name the host.
  const svc = new URL(r.url);
  const body = await new Promise((resolve, reject) => {
    const req = http.get({
      host: svc.hostname, port: svc.port, path: "/index.html",
      headers: { host: new URL(url).host, authorization: `Bearer ${process.env.REINS_TOKEN}` },
    }, (resp) => {
      let s = "";
      resp.on("data", (d) => { s += d; });
      resp.on("end", () => resolve({ status: resp.statusCode, s }));
    });
    req.on("error", reject);
  });
  assert.deepEqual(body, { status: 200, s: "served from the sandbox\n" });
  const pub = await sb.portURL(8080, { public: true, ttlMs: 60_000 });
  assert.ok(pub.expiresUnixNano > Date.now() * 1e6, JSON.stringify(pub));
});

test("runs: start with a script model, follow its events", async () => {
  const run = await r.runs.start({
    task: "write a file",
    script: { turns: [{ tool_calls: [{ name: "bash", input: { command: "echo from-the-run > /tmp/r.txt; cat /tmp/r.txt" } }] }, { text: "done" }] },
  });
  assert.match(run.id, /.+/);
  const types = [];
  let result = "";
  for await (const ev of r.runs.events(run.id)) {
    types.push(ev.type);
    if (ev.type === "tool_result") result = ev.toolResult.text;
  }
  assert.equal(types[0], "run_created");
  assert.equal(types.at(-1), "finished");
  assert.ok(types.includes("tool_call"), types.join(","));
  assert.match(result, /from-the-run/);
  const done = await r.runs.get(run.id);
  assert.equal(done.status, "succeeded");
  assert.equal(done.text, "done");
  assert.ok((await r.runs.list({ statuses: ["succeeded"] })).some((x) => x.id === run.id));
});

test("runs: uploads go in before the first step, downloads come back as artifacts", async () => {
  const run = await r.runs.start(
    {
      task: "summarize the upload",
      downloads: ["/workspace/out/*.md"],
      script: { turns: [{ tool_calls: [{ name: "bash", input: { command: "mkdir -p /workspace/out && wc -l < /workspace/in/data.csv > /workspace/out/report.md" } }] }, { text: "done" }] },
    },
    { uploads: { "/workspace/in/": "", "/workspace/in/data.csv": "a,b\n1,2\n3,4\n" } },
  );
  const done = await r.runs.wait(run.id);
  assert.equal(done.status, "succeeded");
  assert.ok(done.spec.uploads.some((u) => u.path === "/workspace/in/data.csv" && Number(u.size) === 12), JSON.stringify(done.spec.uploads));
  const arts = await r.runs.artifacts(run.id);
  const report = arts.find((a) => a.name === "/workspace/out/report.md");
  assert.ok(report && !report.error, JSON.stringify(arts));
  assert.equal(new TextDecoder().decode(await r.runs.artifact(run.id, report.name)).trim(), "3");
  await assert.rejects(r.runs.start({ task: "x", script: { turns: [{ text: "no" }] } }, { uploads: { "../escape": "x" } }), TypeError);
});

test("runs: a cut output's whole text is fetched by its digest", async () => {
  const run = await r.runs.start({
    task: "count",
    script: { turns: [{ tool_calls: [{ name: "bash", input: { command: "seq 1 100000" } }] }, { text: "counted" }] },
  });
  let result;
  for await (const ev of r.runs.events(run.id)) {
    if (ev.type === "tool_result") result = ev.toolResult;
  }
  assert.ok(result.artifact, `the output was not cut: ${JSON.stringify({ ...result, text: result.text.length })}`);
  const whole = await r.runs.artifact(run.id, result.artifact);
  assert.equal(whole.length, result.fullBytes);
  // The tool's whole result: the output, then the exit the model was told.
  const lines = new TextDecoder().decode(whole).trim().split("\n");
  assert.equal(lines.length, 100001);
  assert.deepEqual(lines.slice(-2), ["100000", "[exit code 0]"]);
  await assert.rejects(r.runs.artifact(run.id, result.artifact, { maxBytes: 1000 }), (e) => e.code === "resource_exhausted");
  assert.ok(Array.isArray(await r.runs.artifacts(run.id)));
});

test("runs: a policy holds calls; approve with an edit, deny with a reason, cancel", async () => {
  const bash = (command) => ({ tool_calls: [{ name: "bash", input: { command } }] });
  const run = await r.runs.start({
    task: "do things",
    policy: "tools:\n  bash: ask\n",
    script: { turns: [bash("echo first"), bash("echo second"), { text: "understood" }] },
  });
  const decided = [];
  let ran = "";
  for await (const ev of r.runs.events(run.id)) {
    if (ev.type === "approval_requested") {
      const held = await r.runs.get(run.id);
      assert.equal(held.status, "waiting_approval");
      assert.equal(held.pending[0].tool, "bash");
      if (decided.length === 0) await r.runs.approve(run.id, { edit: { command: "echo edited" } });
      else await r.runs.deny(run.id, { reason: "not today" });
      decided.push(ev.approvalRequested.inputJson);
    }
    if (ev.type === "tool_result") ran += ev.toolResult.text;
  }
  assert.equal(decided.length, 2);
  assert.match(decided[0], /echo first/);
  assert.match(ran, /edited/);
  assert.doesNotMatch(ran, /second\n/);
  assert.equal((await r.runs.get(run.id)).status, "succeeded");

  const slow = await r.runs.start({ task: "wait", script: { turns: [bash("sleep 60"), { text: "late" }] } });
  for await (const ev of r.runs.events(slow.id)) {
    if (ev.type === "tool_call") await r.runs.cancel(slow.id);
  }
  assert.equal((await r.runs.get(slow.id)).status, "cancelled");
});

test("extend moves a sandbox's expiry", async () => {
  const before = await sb.refresh();
  const info = await sb.extend(3_600_000);
  assert.equal(before.expiresUnixNano, 0);
  const left = info.expiresUnixNano / 1e6 - Date.now();
  assert.ok(left > 3_500_000 && left <= 3_600_000, `expires in ${left} ms`);
  assert.match(info.expiresTime, /^\d{4}-/);
});

test("pause keeps memory; resume brings the sandbox back", async () => {
  const p = await sandbox(r, { labels: { suite: "pause" } });
  await p.run("echo kept > /tmp/state");
  const paused = await p.pause({ orSuspend: true });
  assert.ok(["paused", "suspended"].includes(paused.sandbox.state), JSON.stringify(paused));
  const back = await p.resume();
  assert.equal(back.state, "running");
  assert.equal((await p.run("cat /tmp/state")).stdout, "kept\n");
});

test("errors carry the server's code and message", async () => {
  const bad = new Reins({ url: r.url, token: "not-a-token" });
  await assert.rejects(bad.sandboxes.list(), (e) => {
    assert.ok(e instanceof ReinsError);
    assert.equal(e.code, "unauthenticated");
    assert.equal(e.status, 401);
    return true;
  });
  await assert.rejects(bad.sandboxes.create({}), (e) => e.code === "unauthenticated");
  await assert.rejects(r.sandboxes.get("0123456789ab"), (e) => {
    assert.equal(e.code, "not_found");
    assert.match(e.message, /0123456789ab/);
    return true;
  });
  const ghost = r.sandbox("0123456789ab");
  await assert.rejects(ghost.exec("true"), (e) => e.code === "not_found");
  await assert.rejects(ghost.run("true"), (e) => e.code === "not_found");
  await assert.rejects(ghost.files.read("/etc/passwd"), (e) => e.code === "not_found");
  await assert.rejects(sb.files.read("/no/such/file"), (e) => e.code === "not_found");
  await assert.rejects(r.sandboxes.portURL(sb.id, 70000), (e) => e.code === "invalid_argument");
  const free = await new Promise((resolve) => {
    const srv = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
  const nowhere = new Reins({ url: `127.0.0.1:${free}`, token: "x" });
  await assert.rejects(nowhere.sandboxes.list(), (e) => e.code === "unavailable" && /cannot reach reins serve/.test(e.message));
});
