// Hostile answers: a server (or whatever sits at REINS_URL) that lies
// about sizes, cuts streams or sends what was not asked must get a clear
// error, never an allocation it chose or a hang; and names a model
// chooses must not become shell.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Reins, ReinsError, MAX_MESSAGE_BYTES } from "../index.js";
import { ReinsSandbox } from "../deepagents.js";
import { reins, sandbox } from "./env.mjs";

// fake serves handler on a loopback port and returns a client of it; the
// server closes after the test. closed resolves when the client's
// connection of the last request closes.
async function fake(t, handler) {
  const seen = { closed: null };
  const srv = http.createServer((req, res) => {
    seen.closed = new Promise((resolve) => res.on("close", resolve));
    req.resume();
    req.on("end", () => handler(req, res));
  });
  await new Promise((resolve) => srv.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => { srv.closeAllConnections(); srv.close(resolve); }));
  return { r: new Reins({ url: `127.0.0.1:${srv.address().port}`, token: "t" }), seen };
}

const stream = (res) => res.writeHead(200, { "content-type": "application/connect+json" });
const header = (flags, len) => {
  const h = Buffer.alloc(5);
  h[0] = flags;
  h.writeUInt32BE(len, 1);
  return h;
};
const frame = (flags, obj) => {
  const b = Buffer.from(JSON.stringify(obj));
  return Buffer.concat([header(flags, b.length), b]);
};

test("a huge envelope length is refused before it is allocated", { timeout: 20_000 }, async (t) => {
  for (const len of [0xffffffff, MAX_MESSAGE_BYTES + 1]) {
    const { r, seen } = await fake(t, (req, res) => {
      stream(res);
      res.write(header(0, len)); // and never the bytes: the client must not wait for them
    });
    const before = process.memoryUsage().rss;
    await assert.rejects(r.sandboxes.create({}), (e) => {
      assert.ok(e instanceof ReinsError, String(e));
      assert.equal(e.code, "resource_exhausted");
      assert.match(e.message, new RegExp(`${len} bytes, more than the client's limit of ${MAX_MESSAGE_BYTES}`));
      return true;
    });
    assert.ok(process.memoryUsage().rss - before < 64 << 20, "the client allocated for the lie");
    await seen.closed; // the client hung up instead of reading on
  }
});

test("a stream cut inside a message is an error, not a short message", { timeout: 20_000 }, async (t) => {
  const { r } = await fake(t, (req, res) => {
    stream(res);
    res.end(Buffer.concat([header(0, 100), Buffer.from('{"progress":')]));
  });
  await assert.rejects(r.sandboxes.create({}), (e) => {
    assert.equal(e.code, "unavailable");
    assert.match(e.message, /ended in the middle of a message \(12 of 100 bytes\)/);
    return true;
  });
  const cutHeader = await fake(t, (req, res) => {
    stream(res);
    res.end(Buffer.from([0, 0, 0]));
  });
  await assert.rejects(cutHeader.r.sandboxes.create({}), /ended in the middle of a message \(3 of 5 bytes\)/);
});

test("a stream that ends without its end message is an error", { timeout: 20_000 }, async (t) => {
  const { r } = await fake(t, (req, res) => {
    stream(res);
    res.end(frame(0, { progress: { message: "pulling" } }));
  });
  const progress = [];
  await assert.rejects(r.sandboxes.create({}, { onProgress: (p) => progress.push(p.message) }), (e) => {
    assert.equal(e.code, "unavailable");
    assert.match(e.message, /without its end message/);
    return true;
  });
  assert.deepEqual(progress, ["pulling"]);
});

test("the server's error is kept, code and message", { timeout: 20_000 }, async (t) => {
  const { r } = await fake(t, (req, res) => {
    stream(res);
    res.end(frame(2, { error: { code: "resource_exhausted", message: "tenant quota: 10 sandboxes" }, metadata: { "Reins-Error-Kind": ["resource_exhausted"] } }));
  });
  await assert.rejects(r.sandboxes.create({}), (e) => {
    assert.equal(e.code, "resource_exhausted");
    assert.equal(e.message, "tenant quota: 10 sandboxes");
    assert.equal(e.kind, "resource_exhausted");
    return true;
  });
  const proxy = await fake(t, (req, res) => {
    res.writeHead(502, { "content-type": "text/html" });
    res.end("Bad Gateway from the proxy\n<html>...");
  });
  await assert.rejects(proxy.r.sandboxes.get("x"), (e) => {
    assert.equal(e.code, "unavailable");
    assert.equal(e.status, 502);
    assert.match(e.message, /HTTP 502: Bad Gateway from the proxy$/);
    return true;
  });
});

test("a compressed message or an answer that is not a stream is refused", { timeout: 20_000 }, async (t) => {
  const zipped = await fake(t, (req, res) => {
    stream(res);
    res.end(frame(1, {}));
  });
  await assert.rejects(zipped.r.sandboxes.create({}), /compressed message/);
  const page = await fake(t, (req, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<html>a login page</html>");
  });
  await assert.rejects(page.r.sandboxes.create({}), (e) => e.code === "internal" && /not a Connect JSON stream/.test(e.message));
});

test("a unary answer larger than the limit is refused", { timeout: 20_000 }, async (t) => {
  const chunk = Buffer.alloc(1 << 20, 0x20);
  const { r, seen } = await fake(t, (req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    let n = 0;
    const more = () => {
      while (n < 200) {
        n++;
        if (!res.write(chunk)) return res.once("drain", more);
      }
      res.end();
    };
    res.on("close", () => { n = 1e9; });
    more();
  });
  await assert.rejects(r.sandboxes.get("x"), (e) => e.code === "resource_exhausted" && /larger than the client's limit/.test(e.message));
  await seen.closed;
});

test("paths with quotes and newlines stay paths in the backend's shell fallbacks", async () => {
  const r = reins();
  const sb = await sandbox(r, { labels: { suite: "hostile" } });
  const marker = "/tmp/pwned";
  const evil = [
    `/tmp/h/a'; touch ${marker}1; echo '`,
    `/tmp/h/b\n touch ${marker}2\n`,
    `/tmp/h/c$(touch ${marker}3)\`touch ${marker}4\``,
    `/tmp/h/d" ; touch ${marker}5 ; "`,
    // and one that would be another query, a fragment or an escape if
    // the raw file routes' ?path= were not encoded
    `/tmp/h/e&path=${marker}8#frag?q=%2e%2e%2F`,
  ];
  const shell = new ReinsSandbox(sb, { native: false });
  for (const p of evil) {
    // Through the executor's own write, so the file exists under its
    // exact name, and deepagents' shell versions must find it there.
    await sb.files.write(p, "needle in\nthe file\n");
    assert.equal((await sb.files.stat(p)).path, p);
    const rd = await shell.read(p);
    assert.equal(rd.content, "     1\tneedle in\n     2\tthe file\n", JSON.stringify(p));
    const g = await shell.grep("needle", p);
    assert.equal(g.matches.length, 1, JSON.stringify(p));
    await shell.ls(p);
    await shell.glob("*", p);
    await shell.grep(`x'; touch ${marker}6; '`, "/tmp/h", `*'; touch ${marker}7; '`);
    assert.deepEqual(await shell.delete(p), { path: p, filesUpdate: null });
    await assert.rejects(sb.files.stat(p), (e) => e.code === "not_found", `${JSON.stringify(p)} was not the path deleted`);
  }
  const left = await sb.run(`ls ${marker}* 2>/dev/null`);
  assert.equal(left.stdout, "", "a shell fallback ran part of a path as a command");
});
