/**
 * CurveZMQ keys for tcp:// endpoints (PROTOCOL.md section 1), read as the
 * Python client reads them: the daemon's public key from serverKey (the Z85
 * key) or serverKeyFile (a file whose first 40-character line, not a #
 * comment, is the key), else $CTXD_SERVER_KEY or $CTXD_SERVER_KEY_FILE; this
 * client's secret key likewise from clientKey, clientKeyFile,
 * $CTXD_CLIENT_KEY, $CTXD_CLIENT_KEY_FILE or ~/.config/ctxd/client.key.
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

/** The first key line (40 characters, not a # comment) of the file at path; null when none. */
export function readKeyFile(spec: string): string | null {
  const path = spec.startsWith("~/") ? homedir() + spec.slice(1) : spec;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return null;
  }
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.length === 40 && !line.startsWith("#") && isZ85Key(line)) return line;
  }
  return null;
}

/** Whether text is a Z85 key: 40 characters that decode to 32 bytes. */
export function isZ85Key(text: string): boolean {
  if (text.length !== 40) return false;
  try {
    z85Decode(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * One key of a pair: key (the Z85 key itself, naming no file) or keyFile
 * (a file holding it), else $ENV or $ENV_FILE, else defaultFile; null when
 * none is given. Never guessed from the spelling: both given, a key that
 * is no key or a file with none throws, naming the option.
 */
export function oneKey(name: string, key: string | undefined, keyFile: string | undefined, env: string,
  defaultFile?: string): string | null {
  let kname = name, fname = name + "File";
  if (!key && !keyFile) {
    key = process.env[env] || undefined;
    keyFile = process.env[env + "_FILE"] || undefined;
    kname = env;
    fname = env + "_FILE";
  }
  if (key && keyFile) throw new Error(`${kname} and ${fname} are both given: give one`);
  if (key) {
    if (!isZ85Key(key) || existsSync(key))
      throw new Error(`${kname}: ${JSON.stringify(key)} is not a Z85 key (40 characters); for a key file use ${fname}`);
    return key;
  }
  const path = keyFile || defaultFile;
  if (!path) return null;
  const got = readKeyFile(path);
  if (got === null)
    throw new Error(`${keyFile ? fname : "client key file"}: ${JSON.stringify(path)} holds no Z85 key (no ${name === "serverKey" ? "server" : "client"} key)` +
      (keyFile ? "" : " (make one with `ctx keygen`)"));
  return got;
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
export function curveKeys(endpoint: string, serverKey?: string, clientKey?: string, serverKeyFile?: string,
  clientKeyFile?: string): CurveKeys | null {
  if (!endpoint.startsWith("tcp://")) return null;
  const s = oneKey("serverKey", serverKey, serverKeyFile, "CTXD_SERVER_KEY");
  if (s === null) return null;
  const secret = oneKey("clientKey", clientKey, clientKeyFile, "CTXD_CLIENT_KEY", "~/.config/ctxd/client.key") as string;
  return { serverKey: s, publicKey: curvePublic(secret), secretKey: secret };
}
