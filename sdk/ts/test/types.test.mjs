// The hand-written declarations compile, strictly, against the calls
// made as the README makes them and against deepagents' own types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

test("index.d.ts and deepagents.d.ts type-check", { timeout: 600_000 }, async () => {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const dir = fileURLToPath(new URL("..", import.meta.url));
  const args = [tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext",
    "--moduleResolution", "nodenext", "--types", "node", "test/types-check.ts"];
  const out = await new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: dir }, (err, stdout, stderr) => resolve({ code: err ? err.code : 0, text: stdout + stderr }));
  });
  // Declaration files are checked too (no --skipLibCheck), ours being
  // the point; deepagents' own do not check against the pinned zod,
  // which is theirs to fix.
  const ours = out.text.split("\n").filter((l) => /error TS\d+/.test(l) && !l.includes("node_modules/"));
  assert.deepEqual(ours, [], out.text);
  assert.ok(out.code === 0 || out.text.includes("node_modules/"), out.text);
});
