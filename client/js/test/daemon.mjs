// One ctxd per test file on a private ipc socket in a temp dir, as
// tests/python/conftest.py does. Binaries: $CTXD_BIN (default
// build/daemon/ctxd of the source tree), $CTXD_WORKER_BIN (optional).
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { mkdtempSync, readFileSync, rmSync, accessSync, constants } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, UnreachableError } from "../dist/index.js";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const CTXD_BIN = process.env.CTXD_BIN || join(ROOT, "build/daemon/ctxd");
export const CTXD_WORKER_BIN = process.env.CTXD_WORKER_BIN;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Daemon {
  constructor(args = [], { tcp = null } = {}) {
    accessSync(CTXD_BIN, constants.X_OK);
    this.dir = mkdtempSync(join(tmpdir(), "ctxd-js-"));
    this.endpoint = tcp ?? `ipc://${this.dir}/s.sock`;
    this.stateDir = join(this.dir, "state");
    this.args = args;
    this.stoppedByTest = false;
  }

  /** Starts the daemon and waits (at most 15 s) until it answers hello. */
  async start() {
    const cmd = ["--listen", this.endpoint, "--state-dir", this.stateDir, ...this.args];
    if (CTXD_WORKER_BIN) cmd.push("--worker", CTXD_WORKER_BIN);
    this.log = [];
    this.proc = spawn(CTXD_BIN, cmd, { cwd: this.dir, stdio: ["ignore", "pipe", "pipe"], detached: true });
    this.proc.stdout.on("data", (d) => this.log.push(d));
    this.proc.stderr.on("data", (d) => this.log.push(d));
    this.exited = new Promise((r) => this.proc.once("exit", (code, sig) => r({ code, sig })));
    const deadline = Date.now() + 15000;
    for (;;) {
      if (this.proc.exitCode !== null) throw new Error(`ctxd exited at start:\n${this.logText()}`);
      try {
        const c = await Client.connect(this.endpoint, { requestTimeout: 1, ...this.clientOpts });
        c.close();
        return this;
      } catch (e) {
        // tcp:// with CurveZMQ: server.pub appears once the daemon made it.
        if (!(e instanceof UnreachableError || /server key/.test(e.message)) || Date.now() > deadline) throw e;
        await sleep(20);
      }
    }
  }

  logText() {
    return Buffer.concat(this.log).toString().slice(-6000);
  }

  /** A client of this daemon (closed by stop()). */
  async client(opts = {}) {
    const c = await Client.connect(this.endpoint, { ...this.clientOpts, ...opts });
    (this.clients ??= []).push(c);
    return c;
  }

  /** Ends the daemon abruptly (the client's liveness and disconnect handling). */
  async kill() {
    this.stoppedByTest = true;
    process.kill(-this.proc.pid, "SIGKILL");
    await this.exited;
  }

  /** Stops the daemon; throws when it died during the test. */
  async stop() {
    for (const c of this.clients ?? []) c.close();
    let crashed = null;
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      if (!this.stoppedByTest) crashed = `ctxd died during the test:\n${this.logText()}`;
    } else {
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc.kill("SIGKILL"), 5000);
      await this.exited;
      clearTimeout(t);
    }
    rmSync(this.dir, { recursive: true, force: true });
    if (crashed) throw new Error(crashed);
  }
}

/** The daemon's state file (e.g. server.pub). */
export function stateFile(d, name) {
  return readFileSync(join(d.stateDir, name), "utf8");
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}
