/**
 * CurveZMQ keys for tcp:// endpoints (PROTOCOL.md section 1), read as the
 * Python client reads them: the daemon's public key from serverKey or
 * $CTXD_SERVER_KEY, this client's secret key from clientKey, $CTXD_CLIENT_KEY
 * or ~/.config/ctxd/client.key; each a Z85 key (40 characters) or a file
 * whose first 40-character line (not a # comment) is the key.
 */
import { createPrivateKey, createPublicKey } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";

const Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/** Z85 (ZeroMQ RFC 32) text of bytes whose length is a multiple of 4. */
export function z85Encode(data: Uint8Array): string {
  if (data.length % 4) throw new RangeError("Z85 encodes multiples of 4 bytes");
  let out = "";
  for (let i = 0; i < data.length; i += 4) {
    let v = ((data[i] << 24) | (data[i + 1] << 16) | (data[i + 2] << 8) | data[i + 3]) >>> 0;
    const chunk: string[] = [];
    for (let j = 0; j < 5; j++) {
      chunk.unshift(Z85[v % 85]);
      v = Math.floor(v / 85);
    }
    out += chunk.join("");
  }
  return out;
}

/** The bytes of Z85 text (a multiple of 5 characters). */
export function z85Decode(text: string): Buffer {
  if (text.length % 5) throw new RangeError("Z85 text is a multiple of 5 characters");
  const out = Buffer.alloc((text.length / 5) * 4);
  for (let i = 0, o = 0; i < text.length; i += 5, o += 4) {
    let v = 0;
    for (let j = 0; j < 5; j++) {
      const d = Z85.indexOf(text[i + j]);
      if (d < 0) throw new RangeError(`not a Z85 character: ${JSON.stringify(text[i + j])}`);
      v = v * 85 + d;
    }
    if (v > 0xffffffff) throw new RangeError("Z85 group out of range");
    out.writeUInt32BE(v, o);
  }
  return out;
}

/** A Z85 key given inline, or the first key line of a file; null when neither. */
export function readZ85(spec: string): string | null {
  const path = spec.startsWith("~/") ? homedir() + spec.slice(1) : spec;
  // 40 characters are a key unless they name a file: Z85 keys may start
  // with "." or hold "/", so the spelling alone cannot tell.
  if (spec.length === 40 && !existsSync(path)) return spec;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return null;
  }
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.length === 40 && !line.startsWith("#")) return line;
  }
  return null;
}

/** The Curve25519 public key (Z85) of a secret key (Z85). */
export function curvePublic(secretZ85: string): string {
  const secret = z85Decode(secretZ85);
  if (secret.length !== 32) throw new RangeError("a Curve secret key has 32 bytes");
  const der = Buffer.concat([Buffer.from("302e020100300506032b656e04220420", "hex"), secret]);
  const pub = createPublicKey(createPrivateKey({ key: der, format: "der", type: "pkcs8" }));
  const spki = pub.export({ format: "der", type: "spki" });
  return z85Encode(spki.subarray(spki.length - 32));
}

export interface CurveKeys {
  serverKey: string;
  publicKey: string;
  secretKey: string;
}

/** The keys for endpoint, or null for a plain connection (ipc://, or tcp:// without a server key). */
export function curveKeys(endpoint: string, serverKey?: string, clientKey?: string): CurveKeys | null {
  const server = serverKey || process.env.CTXD_SERVER_KEY;
  if (!endpoint.startsWith("tcp://") || !server) return null;
  const s = readZ85(server);
  if (s === null) throw new Error(`server key ${JSON.stringify(server)} is neither a Z85 key nor a key file`);
  const client = clientKey || process.env.CTXD_CLIENT_KEY || "~/.config/ctxd/client.key";
  const secret = readZ85(client);
  if (secret === null) throw new Error(`client key ${JSON.stringify(client)} cannot be read (make one with \`ctx keygen\`)`);
  return { serverKey: s, publicKey: curvePublic(secret), secretKey: secret };
}
