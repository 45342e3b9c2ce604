// The codec against proto/vectors/, byte for byte (as tests/python/test_vectors.py
// does): each good vector decodes to what vectors.json says and re-encodes to
// the same bytes; @msgpack/msgpack, an independent decoder, reads the same
// values; the bad vectors are refused where a client must refuse them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { decode as refDecode } from "@msgpack/msgpack";
import { encode, decode, Float64, buildRequest, decodeMessage, ProtocolError, CodecError } from "../dist/index.js";
import { ROOT } from "./daemon.mjs";

const VECTORS = join(ROOT, "proto/vectors");
// Integers past 2^53 keep their digits: quote them before JSON.parse.
const text = readFileSync(join(VECTORS, "vectors.json"), "utf8").replace(/(?<=[[,:]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '"$1"');
const DESC = JSON.parse(text);
const GOOD = Object.keys(DESC.good).sort();
const BAD = Object.keys(DESC.bad).sort();

const raw = (name) => readFileSync(join(VECTORS, `${name}.msgpack`));

/** vectors.json's notation ({"$bin": hex}) in the decoder's terms, for comparison. */
function fromJson(o) {
  if (Array.isArray(o)) return o.map(fromJson);
  if (o && typeof o === "object") {
    if (Object.keys(o).length === 1 && "$bin" in o) return Buffer.from(o.$bin, "hex");
    return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, fromJson(v)]));
  }
  return o;
}

/** A decoded value in the same terms: floats as numbers, big integers as their digits. */
function plain(v) {
  if (v instanceof Float64) return v.value;
  if (typeof v === "bigint") return String(v);
  if (v instanceof Uint8Array) return Buffer.from(v);
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

test("the vectors are there", () => {
  for (const n of ["hello", "execute", "accepted", "stream", "done", "err"]) assert.ok(GOOD.includes(n), n);
  assert.ok(BAD.length > 0);
});

for (const name of GOOD) {
  test(`vector ${name}: decoded, then re-encoded byte for byte`, () => {
    const bytes = raw(name);
    const v = decode(bytes, { keepFloats: true });
    assert.deepStrictEqual(plain(v), fromJson(DESC.good[name]));
    assert.deepStrictEqual(Object.keys(v), Object.keys(DESC.good[name])); // key order kept
    const again = encode(v);
    assert.equal(Buffer.compare(again, bytes), 0, `re-encoded ${again.toString("hex")}\nwant       ${bytes.toString("hex")}`);
  });

  test(`vector ${name}: @msgpack/msgpack reads the same values`, () => {
    const ref = refDecode(raw(name), { useBigInt64: true });
    const norm = (x) =>
      typeof x === "bigint" ? String(x) : x instanceof Uint8Array ? Buffer.from(x) : Array.isArray(x) ? x.map(norm) : x && typeof x === "object" ? Object.fromEntries(Object.entries(x).map(([k, y]) => [k, norm(y)])) : x;
    const ours = (x) => (typeof x === "number" && Number.isInteger(x) ? x : plain(x));
    const mine = plain(decode(raw(name)));
    const theirs = norm(ref);
    // @msgpack/msgpack gives every int64/uint64 as a bigint; ours a number when it is safe.
    const unify = (x) => (typeof x === "string" && /^-?\d+$/.test(x) && Number.isSafeInteger(Number(x)) ? Number(x) : Array.isArray(x) ? x.map(unify) : x && typeof x === "object" && !(x instanceof Buffer) ? Object.fromEntries(Object.entries(x).map(([k, y]) => [k, unify(y)])) : x);
    assert.deepStrictEqual(unify(ours(mine)), unify(theirs));
  });
}

test("requests are built in PROTOCOL.md's field order, whatever the call's order", () => {
  assert.equal(Buffer.compare(encode(buildRequest("hello", 1)), raw("hello")), 0);
  const want = raw("execute");
  const a = buildRequest("execute", "req-42", { stop_on_error: true, silent: false, env: { A: "1" }, timeout: 2.5, code: "x = 1\nprint(x)", ctx: "default" });
  const b = buildRequest("execute", "req-42", { ctx: "default", code: "x = 1\nprint(x)", timeout: 2.5, env: { A: "1" }, silent: false, stop_on_error: true });
  assert.equal(Buffer.compare(encode(a), want), 0);
  assert.equal(Buffer.compare(encode(b), want), 0);
  assert.equal(Buffer.compare(encode(buildRequest("complete", 9, { cursor: 15, code: "import os\nos.pa", ctx: "default" })), raw("complete")), 0);
});

test("the request builder leaves out undefined and checks ids", () => {
  assert.deepStrictEqual(buildRequest("interrupt", 3, { ctx: "a", run: undefined }), { v: 1, t: "interrupt", id: 3, ctx: "a" });
  assert.deepStrictEqual(Object.keys(buildRequest("interrupt", 3, { run: 9, ctx: "a" })), ["v", "t", "id", "ctx", "run"]);
  for (const bad of ["", "x".repeat(65), -1, true, 1.5, null]) assert.throws(() => buildRequest("hello", bad), RangeError);
});

for (const name of BAD) {
  test(`bad vector ${name} (${DESC.bad[name]})`, () => {
    const code = DESC.bad[name];
    const bytes = readFileSync(join(VECTORS, "bad", `${name}.msgpack`));
    if (code === "bad_frame" || name === "code_not_utf8") {
      assert.throws(() => decode(bytes), CodecError);
      assert.throws(() => decodeMessage(bytes), ProtocolError);
    } else if (["array_root", "no_version", "wrong_version", "type_not_str"].includes(name)) {
      assert.throws(() => decodeMessage(bytes), ProtocolError);
    } else {
      const v = decode(bytes);
      assert.ok(v && typeof v === "object" && !Array.isArray(v));
    }
  });
}

test("decoder limits: 16 levels deep, not 17; no empty message; no trailing bytes", () => {
  let nested = 1;
  for (let i = 0; i < 16; i++) nested = [nested];
  assert.deepStrictEqual(decode(encode(nested)), nested);
  const deeper = Buffer.concat([Buffer.from([0x91]), encode(nested)]);
  assert.throws(() => decode(deeper), /nesting/);
  assert.throws(() => decode(Buffer.alloc(0)), /empty/);
  assert.throws(() => decode(Buffer.from([0x01, 0x02])), /trailing/);
  assert.throws(() => decode(Buffer.from([0x82, 0xa1, 0x61, 0x01, 0xa1, 0x61, 0x02])), /repeated/);
  assert.throws(() => decode(Buffer.from([0x81, 0x01, 0x01])), /key/);
  assert.throws(() => decode(Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff])), /claims/);
  assert.throws(() => decode(Buffer.from([0xd4, 0x01, 0x00])), /not used/);
});

test("encoder: smallest ints, float64 floats, str/bin, Float64 for integral floats", () => {
  const hex = (v) => encode(v).toString("hex");
  assert.equal(hex(127), "7f");
  assert.equal(hex(128), "cc80");
  assert.equal(hex(-33), "d0df");
  assert.equal(hex(2 ** 32), "cf0000000100000000");
  assert.equal(hex(18446744073709551615n), "cfffffffffffffffff");
  assert.equal(hex(-9223372036854775808n), "d38000000000000000");
  assert.equal(hex(0.5), "cb3fe0000000000000");
  assert.equal(hex(new Float64(0)), "cb0000000000000000");
  assert.equal(hex("é"), "a2c3a9");
  assert.equal(hex(Buffer.from([1, 2])), "c4020102");
  assert.equal(hex({ __proto__: null, a: undefined, b: null }), "81a162c0");
  const proto = decode(Buffer.from("81a95f5f70726f746f5f5f01", "hex"));
  assert.deepStrictEqual(Object.keys(proto), ["__proto__"]);
  assert.equal(Object.getPrototypeOf(proto), Object.prototype);
});
