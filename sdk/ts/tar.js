// A small tar writer (ustar, with a pax header for a name ustar cannot
// hold), for putting many files in a sandbox in one call: the executor's
// hardened extractor unpacks it. Regular files and directories only.

import { bytesOf, concat } from "./wire.js";

const BLOCK = 512;
const utf8 = new TextEncoder();

function octal(n, width) {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function put(h, off, width, s) {
  const b = utf8.encode(s);
  h.set(b.subarray(0, width), off);
}

function header(name, { size, mode, type, mtime }) {
  const h = new Uint8Array(BLOCK);
  let prefix = "";
  let base = name;
  if (utf8.encode(name).length > 100) {
    // ustar splits a long name at a slash: prefix (155) / name (100).
    const cut = name.lastIndexOf("/", 155);
    if (cut > 0 && utf8.encode(name.slice(0, cut)).length <= 155 && utf8.encode(name.slice(cut + 1)).length <= 100) {
      prefix = name.slice(0, cut);
      base = name.slice(cut + 1);
    } else {
      base = "././@LongName";
    }
  }
  put(h, 0, 100, base);
  put(h, 100, 8, octal(mode, 8));
  put(h, 108, 8, octal(0, 8));
  put(h, 116, 8, octal(0, 8));
  put(h, 124, 12, octal(size, 12));
  put(h, 136, 12, octal(mtime, 12));
  put(h, 148, 8, "        ");
  put(h, 156, 1, type);
  put(h, 257, 6, "ustar\0");
  put(h, 263, 2, "00");
  put(h, 345, 155, prefix);
  let sum = 0;
  for (const b of h) sum += b;
  put(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

function padding(n) {
  return new Uint8Array((BLOCK - (n % BLOCK)) % BLOCK);
}

// paxPath is a pax extended header naming path, for names ustar cannot
// hold.
function paxPath(path, mtime) {
  const body = (len) => `${len} path=${path}\n`;
  let len = utf8.encode(body(0)).length;
  while (utf8.encode(body(len)).length !== len) len = utf8.encode(body(len)).length;
  const rec = utf8.encode(body(len));
  return [header("PaxHeader", { size: rec.length, mode: 0o644, type: "x", mtime }), rec, padding(rec.length)];
}

function fits(name) {
  if (utf8.encode(name).length <= 100) return true;
  const cut = name.lastIndexOf("/", 155);
  return cut > 0 && utf8.encode(name.slice(0, cut)).length <= 155 && utf8.encode(name.slice(cut + 1)).length <= 100;
}

/**
 * tar returns a tar archive of files: {"/abs/or/relative/path": data}
 * (data a string or bytes; a name ending in "/" is a directory).
 * Names are stored relative (no leading "/"), as extractors want.
 * @param {Record<string, string | Uint8Array> | Array<[string, string | Uint8Array]>} files
 * @param {{mode?: number}} [opts]
 */
export function tar(files, opts = {}) {
  const mtime = Math.floor(Date.now() / 1000);
  const parts = [];
  const entries = Array.isArray(files) ? files : Object.entries(files);
  for (const [path, data] of entries) {
    const name = path.replace(/^\/+/, "");
    if (name === "" || name.split("/").includes("..")) {
      throw new TypeError(`tar: ${JSON.stringify(path)} is not a file name to put in a sandbox`);
    }
    const dir = name.endsWith("/");
    const bytes = dir ? new Uint8Array(0) : bytesOf(data);
    if (!fits(name)) parts.push(...paxPath(name, mtime));
    parts.push(header(name, { size: bytes.length, mode: dir ? 0o755 : opts.mode ?? 0o644, type: dir ? "5" : "0", mtime }));
    parts.push(bytes, padding(bytes.length));
  }
  parts.push(new Uint8Array(2 * BLOCK));
  return concat(parts);
}
