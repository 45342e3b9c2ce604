/**
 * The ctxd wire format (proto/PROTOCOL.md, section 2): one msgpack map per
 * ZeroMQ message, with the str/bin distinction.
 *
 * Why a codec of its own: the protocol pins exact bytes (proto/vectors/) and
 * a strict decoder, and a JavaScript number cannot tell 0 from 0.0. This
 * encoder writes integers in their smallest form, floats as float64, str by
 * UTF-8 length, map keys in insertion order (so requests carry v, t, id, then
 * the fields in PROTOCOL.md's order); a Float64 box keeps an integral float a
 * float. The decoder is as strict as the daemon's: nesting at most 16 deep,
 * no trailing bytes, str map keys only and no repeated key, str valid UTF-8,
 * no ext types, and no length header that claims more than the bytes left.
 */

/** A number that is encoded as a float64 even when it is integral (0.0, 2.0). */
export class Float64 {
  constructor(public readonly value: number) {}
  valueOf(): number {
    return this.value;
  }
}

export type Value =
  | null
  | undefined
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Float64
  | Value[]
  | { [key: string]: Value };

/** A malformed message: what the strict decoder refuses. */
export class CodecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CodecError";
  }
}

export const MAX_DEPTH = 16;

// ---- encoding ---------------------------------------------------------------

/** Grows one buffer for one message, writing big-endian as msgpack wants. */
class Writer {
  buf: Buffer;
  pos = 0;
  constructor(size = 256) {
    this.buf = Buffer.allocUnsafe(size);
  }
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const b = Buffer.allocUnsafe(size);
    this.buf.copy(b, 0, 0, this.pos);
    this.buf = b;
  }
  u8(v: number): void {
    this.ensure(1);
    this.buf[this.pos++] = v;
  }
  head(tag: number, v: number, width: 1 | 2 | 4): void {
    this.ensure(1 + width);
    this.buf[this.pos++] = tag;
    if (width === 1) this.buf.writeUInt8(v, this.pos);
    else if (width === 2) this.buf.writeUInt16BE(v, this.pos);
    else this.buf.writeUInt32BE(v, this.pos);
    this.pos += width;
  }
}

/** The header of a str, bin, array or map of n items in the smallest form. */
function writeLen(w: Writer, n: number, fix: number, fixMax: number, t8: number, t16: number, t32: number): void {
  if (n > 0xffffffff) throw new RangeError("a msgpack item holds at most 2^32-1 elements");
  if (fix >= 0 && n <= fixMax) w.u8(fix | n);
  else if (t8 >= 0 && n <= 0xff) w.head(t8, n, 1);
  else if (n <= 0xffff) w.head(t16, n, 2);
  else w.head(t32, n, 4);
}

/** An integer (number or bigint) in its smallest msgpack form. */
function writeInt(w: Writer, v: number | bigint): void {
  if (typeof v === "bigint") {
    if (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) {
      writeInt(w, Number(v));
      return;
    }
    w.ensure(9);
    if (v > 0n) {
      if (v > 0xffffffffffffffffn) throw new RangeError("integer past uint64");
      w.buf[w.pos++] = 0xcf;
      w.buf.writeBigUInt64BE(v, w.pos);
    } else {
      if (v < -0x8000000000000000n) throw new RangeError("integer past int64");
      w.buf[w.pos++] = 0xd3;
      w.buf.writeBigInt64BE(v, w.pos);
    }
    w.pos += 8;
    return;
  }
  if (v >= 0) {
    if (v < 0x80) w.u8(v);
    else if (v <= 0xff) w.head(0xcc, v, 1);
    else if (v <= 0xffff) w.head(0xcd, v, 2);
    else if (v <= 0xffffffff) w.head(0xce, v, 4);
    else {
      w.ensure(9);
      w.buf[w.pos++] = 0xcf;
      w.buf.writeBigUInt64BE(BigInt(v), w.pos);
      w.pos += 8;
    }
    return;
  }
  w.ensure(9);
  if (v >= -32) w.buf[w.pos++] = v & 0xff;
  else if (v >= -0x80) {
    w.buf[w.pos++] = 0xd0;
    w.buf.writeInt8(v, w.pos);
    w.pos += 1;
  } else if (v >= -0x8000) {
    w.buf[w.pos++] = 0xd1;
    w.buf.writeInt16BE(v, w.pos);
    w.pos += 2;
  } else if (v >= -0x80000000) {
    w.buf[w.pos++] = 0xd2;
    w.buf.writeInt32BE(v, w.pos);
    w.pos += 4;
  } else {
    w.buf[w.pos++] = 0xd3;
    w.buf.writeBigInt64BE(BigInt(v), w.pos);
    w.pos += 8;
  }
}

function writeFloat(w: Writer, v: number): void {
  w.ensure(9);
  w.buf[w.pos++] = 0xcb;
  w.buf.writeDoubleBE(v, w.pos);
  w.pos += 8;
}

function writeValue(w: Writer, v: Value, depth: number): void {
  if (v === null || v === undefined) return w.u8(0xc0);
  switch (typeof v) {
    case "boolean":
      return w.u8(v ? 0xc3 : 0xc2);
    case "number":
      if (Number.isSafeInteger(v) && !Object.is(v, -0)) return writeInt(w, v);
      return writeFloat(w, v);
    case "bigint":
      return writeInt(w, v);
    case "string": {
      const n = Buffer.byteLength(v, "utf8");
      writeLen(w, n, 0xa0, 31, 0xd9, 0xda, 0xdb);
      w.ensure(n);
      w.pos += w.buf.write(v, w.pos, "utf8");
      return;
    }
  }
  if (v instanceof Float64) return writeFloat(w, v.value);
  if (v instanceof Uint8Array) {
    writeLen(w, v.length, -1, 0, 0xc4, 0xc5, 0xc6);
    w.ensure(v.length);
    w.buf.set(v, w.pos);
    w.pos += v.length;
    return;
  }
  if (typeof v === "object" && depth > MAX_DEPTH) throw new RangeError(`nesting deeper than ${MAX_DEPTH}`);
  if (Array.isArray(v)) {
    writeLen(w, v.length, 0x90, 15, -1, 0xdc, 0xdd);
    for (const item of v) writeValue(w, item, depth + 1);
    return;
  }
  if (typeof v === "object") {
    const keys = Object.keys(v).filter((k) => (v as Record<string, Value>)[k] !== undefined);
    writeLen(w, keys.length, 0x80, 15, -1, 0xde, 0xdf);
    for (const k of keys) {
      writeValue(w, k, depth + 1);
      writeValue(w, (v as Record<string, Value>)[k], depth + 1);
    }
    return;
  }
  throw new TypeError(`cannot encode a ${typeof v}`);
}

/** The msgpack bytes of v (undefined map values are left out). */
export function encode(v: Value): Buffer {
  const w = new Writer();
  writeValue(w, v, 1);
  return w.buf.subarray(0, w.pos);
}

// ---- decoding ---------------------------------------------------------------

export interface DecodeOptions {
  /** Decode floats as Float64 boxes (so a re-encode is byte-identical). */
  keepFloats?: boolean;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Reads one msgpack object from a buffer, refusing what PROTOCOL.md refuses. */
class Reader {
  pos = 0;
  readonly view: DataView;
  constructor(
    readonly buf: Uint8Array,
    readonly keepFloats: boolean,
  ) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  need(n: number): void {
    if (this.pos + n > this.buf.length) throw new CodecError("truncated message");
  }
  uint(width: 1 | 2 | 4): number {
    this.need(width);
    const p = this.pos;
    this.pos += width;
    return width === 1 ? this.buf[p] : width === 2 ? this.view.getUint16(p) : this.view.getUint32(p);
  }
  str(n: number): string {
    this.need(n);
    const s = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    try {
      return utf8.decode(s);
    } catch {
      throw new CodecError("a str is not valid UTF-8");
    }
  }
  bin(n: number): Uint8Array {
    this.need(n);
    const b = Buffer.from(this.buf.buffer, this.buf.byteOffset + this.pos, n);
    this.pos += n;
    return b;
  }
  /** A 64-bit integer: a number when it is safe, else a bigint. */
  int64(signed: boolean): number | bigint {
    this.need(8);
    const v = signed ? this.view.getBigInt64(this.pos) : this.view.getBigUint64(this.pos);
    this.pos += 8;
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  }
  float(v: number): number | Float64 {
    return this.keepFloats ? new Float64(v) : v;
  }
  array(n: number, depth: number): Value[] {
    if (depth > MAX_DEPTH) throw new CodecError(`nesting deeper than ${MAX_DEPTH}`);
    if (n > this.buf.length - this.pos) throw new CodecError("an array claims more items than the message holds");
    const out: Value[] = new Array(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }
  map(n: number, depth: number): Record<string, Value> {
    if (depth > MAX_DEPTH) throw new CodecError(`nesting deeper than ${MAX_DEPTH}`);
    if (n * 2 > this.buf.length - this.pos) throw new CodecError("a map claims more pairs than the message holds");
    const out: Record<string, Value> = {};
    for (let i = 0; i < n; i++) {
      const k = this.value(depth + 1);
      if (typeof k !== "string") throw new CodecError("a map key is not a str");
      if (Object.prototype.hasOwnProperty.call(out, k)) throw new CodecError(`map key ${JSON.stringify(k)} repeated`);
      const v = this.value(depth + 1);
      if (k === "__proto__") Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
      else out[k] = v;
    }
    return out;
  }
  value(depth: number): Value {
    this.need(1);
    const b = this.buf[this.pos++];
    if (b < 0x80) return b;
    if (b >= 0xe0) return b - 0x100;
    if (b <= 0x8f) return this.map(b & 0x0f, depth);
    if (b <= 0x9f) return this.array(b & 0x0f, depth);
    if (b <= 0xbf) return this.str(b & 0x1f);
    const v = this.view;
    let p: number;
    switch (b) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return this.bin(this.uint(1));
      case 0xc5:
        return this.bin(this.uint(2));
      case 0xc6:
        return this.bin(this.uint(4));
      case 0xca:
        this.need(4);
        p = this.pos;
        this.pos += 4;
        return this.float(v.getFloat32(p));
      case 0xcb:
        this.need(8);
        p = this.pos;
        this.pos += 8;
        return this.float(v.getFloat64(p));
      case 0xcc:
        return this.uint(1);
      case 0xcd:
        return this.uint(2);
      case 0xce:
        return this.uint(4);
      case 0xcf:
        return this.int64(false);
      case 0xd0:
        this.need(1);
        return v.getInt8(this.pos++);
      case 0xd1:
        this.need(2);
        p = this.pos;
        this.pos += 2;
        return v.getInt16(p);
      case 0xd2:
        this.need(4);
        p = this.pos;
        this.pos += 4;
        return v.getInt32(p);
      case 0xd3:
        return this.int64(true);
      case 0xd9:
        return this.str(this.uint(1));
      case 0xda:
        return this.str(this.uint(2));
      case 0xdb:
        return this.str(this.uint(4));
      case 0xdc:
        return this.array(this.uint(2), depth);
      case 0xdd:
        return this.array(this.uint(4), depth);
      case 0xde:
        return this.map(this.uint(2), depth);
      case 0xdf:
        return this.map(this.uint(4), depth);
    }
    throw new CodecError(`msgpack type 0x${b.toString(16)} is not used by the protocol`);
  }
}

/** Decodes exactly one msgpack object (CodecError for malformed input). */
export function decode(data: Uint8Array, opts: DecodeOptions = {}): Value {
  if (data.length === 0) throw new CodecError("empty message");
  const r = new Reader(data, !!opts.keepFloats);
  const v = r.value(1);
  if (r.pos !== data.length) throw new CodecError(`${data.length - r.pos} trailing bytes after the message`);
  return v;
}
