// CurveZMQ on tcp://: the keys from options and from CTXD_SERVER_KEY /
// CTXD_CLIENT_KEY, as the Python client reads them; an unknown key is not let in.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as zmq from "zeromq";
import { AuthenticationError, Client, UnreachableError } from "../dist/index.js";
import { curvePublic, z85Encode, z85Decode } from "../dist/curve.js";
import { Daemon, freePort } from "./daemon.mjs";

test("Z85 and the public key of a secret key agree with libzmq", () => {
  const kp = zmq.curveKeyPair();
  assert.equal(curvePublic(kp.secretKey), kp.publicKey);
  assert.equal(z85Encode(z85Decode(kp.publicKey)), kp.publicKey);
  assert.equal(z85Encode(Buffer.from([0x86, 0x4f, 0xd2, 0x6f, 0xb5, 0x59, 0xf7, 0x5b])), "HelloWorld"); // RFC 32's example
});

test("tcp:// with CurveZMQ: an authorized key runs code, another is refused", async () => {
  const port = await freePort();
  const d = new Daemon([], { tcp: `tcp://127.0.0.1:${port}` });
  const kp = zmq.curveKeyPair();
  mkdirSync(d.stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(d.stateDir, "authorized_keys"), kp.publicKey + "\n");
  const keyFile = join(d.dir, "client.key");
  writeFileSync(keyFile, "# a client key\n" + kp.secretKey + "\n");
  d.clientOpts = { serverKeyFile: join(d.stateDir, "server.pub"), clientKeyFile: keyFile };
  await d.start();
  try {
    const c = await d.client();
    assert.equal((await c.execute("6 * 7")).result, "42");
    // The same from the environment, as the Python client reads it.
    process.env.CTXD_SERVER_KEY_FILE = join(d.stateDir, "server.pub");
    process.env.CTXD_CLIENT_KEY = kp.secretKey;
    try {
      const e = await Client.connect(d.endpoint);
      assert.equal((await e.execute("'env'")).result, "'env'");
      e.close();
      const other = zmq.curveKeyPair();
      // an unknown client key, and a wrong server key: authentication failures
      await assert.rejects(Client.connect(d.endpoint, { clientKey: other.secretKey, requestTimeout: 5 }),
        (e) => e instanceof AuthenticationError && e instanceof UnreachableError && e.code === "auth" &&
          /refused this client's key/.test(e.message));
      await assert.rejects(Client.connect(d.endpoint, { serverKey: other.publicKey, requestTimeout: 5 }),
        (e) => e instanceof AuthenticationError && /handshake failed/.test(e.message));
      // many in a row: each refusal is reported (never a wait for the timeout)
      for (let i = 0; i < 200; i++)
        await assert.rejects(Client.connect(d.endpoint, i % 2 ? { clientKey: other.secretKey, requestTimeout: 60 } :
          { serverKey: other.publicKey, requestTimeout: 60 }), (e) => e instanceof AuthenticationError);
    } finally {
      delete process.env.CTXD_SERVER_KEY_FILE;
      delete process.env.CTXD_CLIENT_KEY;
    }
  } finally {
    await d.stop();
  }
});

test("a key and a key file are separate options, never guessed", async () => {
  const { oneKey } = await import("../dist/curve.js");
  const { mkdtempSync, rmSync } = await import("node:fs");
  const kp = zmq.curveKeyPair();
  const dir = mkdtempSync("/tmp/k");
  const sub = join(dir, "p".repeat(40 - dir.length - 1 - "/server.pub".length));
  mkdirSync(sub);
  const path = join(sub, "server.pub");
  assert.equal(path.length, 40);
  writeFileSync(path, kp.publicKey + "\n");
  try {
    assert.equal(oneKey("serverKey", undefined, path, "CTXD_TEST_KEY"), kp.publicKey);
    assert.equal(oneKey("serverKey", kp.publicKey, undefined, "CTXD_TEST_KEY"), kp.publicKey);
    assert.throws(() => oneKey("serverKey", path, undefined, "CTXD_TEST_KEY"), /serverKeyFile/);
    assert.throws(() => oneKey("serverKey", "short", undefined, "CTXD_TEST_KEY"), /not a Z85 key/);
    assert.throws(() => oneKey("serverKey", kp.publicKey, path, "CTXD_TEST_KEY"), /both/);
    process.env.CTXD_TEST_KEY = path;
    try {
      assert.throws(() => oneKey("serverKey", undefined, undefined, "CTXD_TEST_KEY"), /CTXD_TEST_KEY_FILE/);
    } finally {
      delete process.env.CTXD_TEST_KEY;
    }
    process.env.CTXD_TEST_KEY_FILE = path;
    try {
      assert.equal(oneKey("serverKey", undefined, undefined, "CTXD_TEST_KEY"), kp.publicKey);
    } finally {
      delete process.env.CTXD_TEST_KEY_FILE;
    }
  } finally {
    rmSync(dir, { recursive: true });
  }
});
