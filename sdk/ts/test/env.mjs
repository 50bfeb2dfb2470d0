// What every test against a real reins serve shares: the client from
// REINS_URL and REINS_TOKEN (the Go test, test/e2e/sdk_ts_test.go, starts
// the service and sets them), and sandboxes deleted even when a test fails.
import { after } from "node:test";
import { Reins } from "../index.js";

export function reins() {
  if (!process.env.REINS_URL || !process.env.REINS_TOKEN) {
    throw new Error("REINS_URL and REINS_TOKEN are not set: run these tests through `go test -run TestTS ./test/e2e/`, which starts reins serve");
  }
  return new Reins();
}

const made = [];
after(() => Promise.all(made.map((sb) => sb.delete().catch(() => {}))));

/** sandbox creates a sandbox that is deleted after the file's tests. */
export async function sandbox(r, spec = {}, opts = {}) {
  const sb = await r.sandboxes.create({ image: "busybox", ...spec, labels: { test: "sdk-ts", ...spec.labels } }, opts);
  made.push(sb);
  return sb;
}

export const text = (b) => new TextDecoder().decode(b);
