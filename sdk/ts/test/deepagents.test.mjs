// The deepagents backend: the real deepagents agent, driven by a scripted
// chat model, writes, edits and runs in a reins sandbox.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createDeepAgent } from "deepagents";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { ReinsSandbox } from "../deepagents.js";
import { reins, sandbox } from "./env.mjs";

const r = reins();

/** ScriptedChatModel answers each call with the next of its messages,
 * whatever it is asked, and keeps what it was asked. */
class ScriptedChatModel extends BaseChatModel {
  constructor(turns) {
    super({});
    this.turns = turns;
    this.asked = [];
  }
  _llmType() {
    return "scripted";
  }
  bindTools(tools) {
    this.boundToolNames = tools.map((t) => t.name);
    return this;
  }
  async _generate(messages) {
    this.asked.push(messages);
    const message = this.turns[this.asked.length - 1] ?? new AIMessage("the script has ended");
    return { generations: [{ message, text: typeof message.content === "string" ? message.content : "" }] };
  }
}

const unnumber = (s) => s.replace(/^ *\d+\t/gm, "");
const call = (id, name, args) => new AIMessage({ content: "", tool_calls: [{ id, name, args, type: "tool_call" }] });

test("a deep agent writes, edits and runs in a reins sandbox", async () => {
  const backend = await ReinsSandbox.create(r, { image: "busybox", labels: { test: "sdk-ts", suite: "deepagents" } });
  after(() => backend.close());
  const model = new ScriptedChatModel([
    call("c1", "write_file", { file_path: "/work/greeting.txt", content: "hello world\nsecond line\n" }),
    call("c2", "edit_file", { file_path: "/work/greeting.txt", old_string: "world", new_string: "reins" }),
    call("c3", "execute", { command: "wc -l < /work/greeting.txt > /work/lines.txt; cat /work/greeting.txt; echo to-stderr >&2; exit 4" }),
    new AIMessage("All done."),
  ]);
  const agent = createDeepAgent({ model, backend });
  const out = await agent.invoke({ messages: [new HumanMessage("greet, then count")] });

  assert.ok(model.boundToolNames.includes("execute") && model.boundToolNames.includes("write_file"), String(model.boundToolNames));
  assert.equal(out.messages.at(-1).content, "All done.");
  const results = out.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => String(m.content));
  assert.equal(results.length, 3, results.join("\n---\n"));
  assert.match(results[0], /Successfully wrote/);
  assert.match(results[1], /Successfully replaced 1 occurrence/);
  assert.match(results[2], /hello reins\nsecond line\n/);
  assert.match(results[2], /to-stderr/);
  assert.match(results[2], /exit code 4/);

  // In the sandbox itself, through the client.
  const sb = r.sandbox(backend.id);
  assert.equal(await sb.files.readText("/work/greeting.txt"), "hello reins\nsecond line\n");
  assert.equal((await sb.files.readText("/work/lines.txt")).trim(), "2");
});

test("the backend's file calls, native and through deepagents' shell versions", async () => {
  const sb = await sandbox(r, { labels: { suite: "deepagents-files" } });
  await sb.files.write("/data/notes/a.md", "one\ntwo two\nthree\n");
  await sb.files.write("/data/notes/deep/b.py", "print('two')\n");
  await sb.files.write("/data/empty.txt", "");
  for (const native of [true, false]) {
    const b = new ReinsSandbox(sb, { native });
    const what = native ? "native" : "shell";
    const ls = await b.ls("/data/notes");
    assert.deepEqual(ls.files.map((f) => [f.path, f.is_dir]).sort(), [["/data/notes/a.md", false], ["/data/notes/deep/", true]], what);
    assert.equal(ls.files.find((f) => !f.is_dir).size, 18, what);

    const rd = await b.read("/data/notes/a.md", 1, 1);
    // deepagents' shell version numbers the lines; the native one answers
    // them as they are, as deepagents' own file backends do.
    assert.equal(native ? rd.content : unnumber(rd.content), "two two\n", what);
    assert.deepEqual([rd.totalLines, rd.startLine, rd.endLine, rd.nextOffset], [3, 2, 2, 2], what);
    assert.equal((await b.read("/data/empty.txt")).content.trim(), "System reminder: File exists but has empty contents", what);
    assert.ok((await b.read("/data/none.txt")).error, what);

    const g = await b.grep("two", "/data/notes");
    assert.deepEqual(g.matches.map((m) => `${m.path}:${m.line}:${m.text}`).sort(),
      ["/data/notes/a.md:2:two two", "/data/notes/deep/b.py:1:print('two')"], what);
    const gp = await b.grep("two", "/data/notes", "*.py");
    assert.deepEqual(gp.matches.map((m) => m.path), ["/data/notes/deep/b.py"], what);
    assert.deepEqual((await b.grep("t.o", "/data/notes")).matches, [], `${what}: grep is literal`);

    const gl = await b.glob("**/*.py", "/data/notes");
    assert.equal(gl.files.length, 1, what);
    assert.match(gl.files[0].path, /(^|\/)deep\/b\.py$/, what);
  }
  const b = new ReinsSandbox(sb);
  assert.deepEqual(await b.edit("/data/notes/a.md", "two", "2", true), { path: "/data/notes/a.md", filesUpdate: null, occurrences: 2 });
  assert.ok((await b.edit("/data/notes/a.md", "absent", "x")).error);
  assert.deepEqual(await b.delete("/data/notes/deep"), { path: "/data/notes/deep", filesUpdate: null });
  await assert.rejects(sb.files.stat("/data/notes/deep"), (e) => e.code === "not_found");

  const up = await b.uploadFiles([["/data/up/x.bin", new Uint8Array([0, 1, 2, 255])]]);
  assert.deepEqual(up, [{ path: "/data/up/x.bin", error: null }]);
  const down = await b.downloadFiles(["/data/up/x.bin", "/data/missing"]);
  assert.deepEqual(Array.from(down[0].content), [0, 1, 2, 255]);
  assert.deepEqual({ ...down[1] }, { path: "/data/missing", content: null, error: "file_not_found" });

  const big = new ReinsSandbox(sb, { maxOutputBytes: 100 });
  const ex = await big.execute("head -c 5000 /dev/zero | tr '\\0' y");
  assert.equal(ex.truncated, true);
  assert.equal(ex.output.length, 100);
  assert.equal(ex.exitCode, 0);
});

test("create owns its sandbox: close deletes it", async () => {
  const backend = await ReinsSandbox.create(r, { labels: { test: "sdk-ts", suite: "deepagents-owned" } });
  const id = backend.id;
  assert.equal((await backend.execute("echo $((6*7))")).output, "42\n");
  await backend.close();
  await assert.rejects(r.sandboxes.get(id), (e) => e.code === "not_found");
  await backend.close(); // twice is fine
  const borrowed = new ReinsSandbox(await sandbox(r));
  await borrowed.close();
  assert.equal((await r.sandboxes.get(borrowed.id)).info.state, "running", "a backend that did not make the sandbox must not delete it");
});
