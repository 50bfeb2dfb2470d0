// client.mjs drives reins' MCP server with the real MCP client of
// @modelcontextprotocol/sdk, over one transport, and checks every answer.
//
//   node client.mjs stdio   spawns $REINS_BIN mcp (REINS_URL, REINS_TOKEN)
//   node client.mjs http    connects to $REINS_URL/mcp with the bearer token
//
// WORK is a local scratch directory (stdio: the upload's source and the
// download's destination). It prints one JSON line of what it saw and
// exits non-zero at the first failed check.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const mode = process.argv[2];
const { REINS_URL, REINS_TOKEN, REINS_BIN, WORK } = process.env;

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({
    command: REINS_BIN,
    args: ["mcp"],
    env: { REINS_URL, REINS_TOKEN, PATH: process.env.PATH },
    stderr: "inherit",
  });
} else if (mode === "http") {
  transport = new StreamableHTTPClientTransport(new URL(REINS_URL + "/mcp"), {
    requestInit: { headers: { Authorization: `Bearer ${REINS_TOKEN}` } },
  });
} else {
  throw new Error(`usage: node client.mjs stdio|http (not ${mode})`);
}

const client = new Client({ name: "reins-e2e", version: "1.0.0" });
await client.connect(transport);
const seen = { mode };

// call answers a tool's result, failing on an error result.
async function call(name, args) {
  const r = await client.callTool({ name, arguments: args });
  if (r.isError) {
    throw new Error(`${name} ${JSON.stringify(args)} failed: ${text(r)}`);
  }
  return r;
}

// callError answers the message of a call that must fail: an error result
// or a JSON-RPC error.
async function callError(name, args) {
  let r;
  try {
    r = await client.callTool({ name, arguments: args });
  } catch (e) {
    return String(e.message);
  }
  assert.ok(r.isError, `${name} ${JSON.stringify(args)} should have failed, answered ${text(r)}`);
  return text(r);
}

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

// The tools and their schemas.
const { tools } = await client.listTools();
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
seen.tools = tools.map((t) => t.name).sort();
for (const name of ["sandbox_create", "sandbox_list", "sandbox_delete", "exec", "read_file", "write_file",
  "edit_file", "list_files", "grep", "upload", "download", "port_url", "run_start", "run_get"]) {
  assert.ok(byName[name], `tool ${name} is missing: have ${seen.tools}`);
  assert.equal(byName[name].inputSchema.type, "object", `${name}'s schema`);
}
assert.deepEqual(byName.exec.inputSchema.required.sort(), ["command", "sandbox_id"]);
assert.equal(byName.exec.inputSchema.properties.timeout_seconds.type, "integer");
assert.equal(byName.read_file.annotations.readOnlyHint, true);
assert.equal(byName.sandbox_delete.annotations.destructiveHint, true);
if (mode === "stdio") {
  assert.deepEqual(byName.upload.inputSchema.required.sort(), ["dest", "local_path", "sandbox_id"]);
} else {
  assert.deepEqual(byName.upload.inputSchema.required.sort(), ["content_base64", "path", "sandbox_id"]);
}

// Bad arguments are errors that name the argument.
let msg = await callError("exec", { sandbox_id: "abc" });
assert.match(msg, /command/, "a missing argument is named");
msg = await callError("exec", { sandbox_id: "abc", command: "true", timeout_seconds: "soon" });
assert.match(msg, /timeout_seconds/, "a mistyped argument is named");
msg = await callError("sandbox_create", { memory: "lots" });
assert.match(msg, /memory/);
msg = await callError("sandbox_create", { ttl: "30" });
assert.match(msg, /ttl.*did you mean 30s/);
msg = await callError("port_url", { sandbox_id: "abc", port: 70000 });
assert.match(msg, /port/);
// An unknown sandbox is said to be one, with no host path.
msg = await callError("exec", { sandbox_id: "0123456789ab", command: "true" });
assert.match(msg, /0123456789ab.*not found|not found.*0123456789ab/i);
assert.doesNotMatch(msg, /\/var\/|\/tmp\/|\.sock/);
seen.unknown_sandbox = msg;

// Create, then work in the sandbox.
const created = await call("sandbox_create", { labels: { via: "mcp-" + mode }, env: { GREETING: "hello" }, ttl: "10m" });
const id = created.structuredContent.id;
assert.match(id, /^[0-9a-f]{12}$/, `create answered ${JSON.stringify(created.structuredContent)}`);
seen.sandbox = id;
try {
  const listed = await call("sandbox_list", { labels: { via: "mcp-" + mode } });
  assert.deepEqual(listed.structuredContent.sandboxes.map((s) => s.id), [id]);

  let r = await call("exec", { sandbox_id: id, command: 'echo "$GREETING $EXTRA"; echo oops >&2; exit 3', env: { EXTRA: "world" } });
  assert.equal(r.structuredContent.stdout, "hello world\n");
  assert.equal(r.structuredContent.stderr, "oops\n");
  assert.equal(r.structuredContent.exit_code, 3);
  assert.match(text(r), /exit code 3/);
  r = await call("exec", { sandbox_id: id, command: "cat | tr a-z A-Z", stdin: "piped" });
  assert.equal(r.structuredContent.stdout, "PIPED");
  r = await call("exec", { sandbox_id: id, command: "sleep 30", timeout_seconds: 1 });
  assert.equal(r.structuredContent.reason, "timeout");

  await call("write_file", { sandbox_id: id, path: "/work/notes/a.txt", content: "one\ntwo\nthree\n" });
  r = await call("read_file", { sandbox_id: id, path: "/work/notes/a.txt" });
  assert.equal(r.structuredContent.content, "one\ntwo\nthree\n");
  r = await call("read_file", { sandbox_id: id, path: "/work/notes/a.txt", start_line: 2, end_line: 2 });
  assert.equal(r.structuredContent.content, "two\n");
  assert.equal(r.structuredContent.total_lines, 3);
  r = await call("edit_file", { sandbox_id: id, path: "/work/notes/a.txt", old_string: "two", new_string: "TWO" });
  assert.equal(r.structuredContent.replacements, 1);
  msg = await callError("edit_file", { sandbox_id: id, path: "/work/notes/a.txt", old_string: "absent", new_string: "x" });
  assert.match(msg, /absent|not found|no match/i);
  r = await call("exec", { sandbox_id: id, command: "cat /work/notes/a.txt" });
  assert.equal(r.structuredContent.stdout, "one\nTWO\nthree\n");
  await call("write_file", { sandbox_id: id, path: "/work/bin.dat", content: Buffer.from([0, 1, 2, 255]).toString("base64"), encoding: "base64" });
  r = await call("exec", { sandbox_id: id, command: "od -An -tx1 /work/bin.dat | tr -d ' \\n'" });
  assert.equal(r.structuredContent.stdout, "000102ff");

  r = await call("list_files", { sandbox_id: id, path: "/work" });
  const names = r.structuredContent.entries.map((e) => e.path).sort();
  assert.deepEqual(names, ["/work/bin.dat", "/work/notes"]);
  r = await call("list_files", { sandbox_id: id, path: "/work", glob: "**/*.txt" });
  assert.deepEqual(r.structuredContent.entries.map((e) => [e.path, e.type, e.size]), [["/work/notes/a.txt", "file", 14]]);
  r = await call("grep", { sandbox_id: id, pattern: "TW.", path: "/work" });
  assert.equal(r.structuredContent.matches.length, 1);
  assert.match(text(r), /a\.txt:2: TWO/);
  r = await call("grep", { sandbox_id: id, pattern: "TW.", path: "/work", literal: true });
  assert.equal(r.structuredContent.matches.length, 0, "a literal pattern is not a regular expression");

  if (mode === "stdio") {
    // A local directory in, a result file out.
    const src = path.join(WORK, "project");
    fs.mkdirSync(path.join(src, "sub"), { recursive: true });
    fs.writeFileSync(path.join(src, "input.txt"), "data from the client\n");
    fs.writeFileSync(path.join(src, "sub", "deep.txt"), "deep\n");
    r = await call("upload", { sandbox_id: id, local_path: src, dest: "/work" });
    assert.equal(r.structuredContent.files, 2, text(r));
    msg = await callError("upload", { sandbox_id: id, local_path: src, dest: "/work" });
    assert.match(msg, /already exists.*overwrite/);
    await call("upload", { sandbox_id: id, local_path: src, dest: "/work", overwrite: true });
    await call("exec", { sandbox_id: id, command: "cd /work/project && cat input.txt sub/deep.txt | wc -l > /work/result.txt" });
    const out = path.join(WORK, "out");
    fs.mkdirSync(out);
    r = await call("download", { sandbox_id: id, path: "/work/result.txt", local_dir: out });
    assert.equal(fs.readFileSync(path.join(out, "result.txt"), "utf8").trim(), "2");
    msg = await callError("download", { sandbox_id: id, path: "/work/result.txt", local_dir: out });
    assert.match(msg, /already exists.*overwrite/);
    r = await call("download", { sandbox_id: id, path: "/work/project", local_dir: out });
    assert.equal(fs.readFileSync(path.join(out, "project", "sub", "deep.txt"), "utf8"), "deep\n");
    msg = await callError("download", { sandbox_id: id, path: "/work/result.txt", local_dir: path.join(WORK, "nowhere") });
    assert.match(msg, /local_dir/);
    // Files cross the boundary around an agent run: uploaded into the
    // sandbox, worked on by the run in it, the report brought back.
    const script = { turns: [{ tool_calls: [{ name: "bash", input: { command: "tr a-z A-Z < /work/project/input.txt > /work/report.txt" } }] }, { text: "report written" }] };
    r = await call("run_start", { task: "write the report", script, sandbox_id: id, wait_seconds: 120 });
    assert.equal(r.structuredContent.status, "RUN_STATUS_SUCCEEDED", text(r));
    r = await call("download", { sandbox_id: id, path: "/work/report.txt", local_dir: out });
    assert.equal(fs.readFileSync(path.join(out, "report.txt"), "utf8"), "DATA FROM THE CLIENT\n");
  } else {
    const blob = Buffer.from("bytes from the client\n\u0000\u0001");
    r = await call("upload", { sandbox_id: id, path: "/work/up/blob.bin", content_base64: blob.toString("base64") });
    assert.equal(r.structuredContent.bytes, blob.length);
    msg = await callError("upload", { sandbox_id: id, path: "/work/up/blob.bin", content_base64: "AAAA" });
    assert.match(msg, /already exists.*overwrite/);
    msg = await callError("upload", { sandbox_id: id, path: "/work/up/x", content_base64: "not base64!" });
    assert.match(msg, /content_base64/);
    r = await call("download", { sandbox_id: id, path: "/work/up/blob.bin" });
    const res = r.content.find((c) => c.type === "resource");
    assert.ok(res, `download answered no resource: ${JSON.stringify(r.content)}`);
    assert.deepEqual(Buffer.from(res.resource.blob, "base64"), blob);
    assert.equal(res.resource.uri, `reins://${id}/work/up/blob.bin`);
    // Past the inline bound: refused, pointing to the raw file API.
    await call("exec", { sandbox_id: id, command: "head -c 11000000 /dev/zero > /work/up/big" });
    msg = await callError("download", { sandbox_id: id, path: "/work/up/big" });
    assert.match(msg, /11000000 bytes.*\/v1\/sandboxes\/ID\/files/);
  }

  r = await call("port_url", { sandbox_id: id, port: 8080 });
  assert.match(r.structuredContent.url, /^http/);
  seen.port_url = r.structuredContent.url;
} finally {
  const r = await client.callTool({ name: "sandbox_delete", arguments: { sandbox_id: id } });
  assert.ok(!r.isError, text(r));
}
if (mode === "http") {
  // An agent run with the script: model, waited for.
  const script = { turns: [{ tool_calls: [{ name: "bash", input: { command: "echo ran by the agent" } }] }, { text: "done by script" }] };
  let r = await call("run_start", { task: "say it", script, wait_seconds: 120 });
  assert.equal(r.structuredContent.status, "RUN_STATUS_SUCCEEDED", text(r));
  assert.equal(r.structuredContent.text, "done by script");
  r = await call("run_get", { run_id: r.structuredContent.id });
  assert.match(text(r), /succeeded/);
  msg = await callError("run_get", { run_id: "run_00000000deadbeef" });
  assert.match(msg, /not found/i);
  msg = await callError("run_start", { task: "x", wait_seconds: 9999 });
  assert.match(msg, /wait_seconds/);
}
msg = await callError("read_file", { sandbox_id: id, path: "/etc/hostname" });
assert.match(msg, /not found/i);
await client.close();
console.log(JSON.stringify(seen));
