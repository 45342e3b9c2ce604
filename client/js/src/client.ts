/**
 * The ctxd client for Node: one ZeroMQ DEALER socket to the daemon, many
 * requests in flight on it (PROTOCOL.md). Every daemon message is routed by
 * its `re` to the request it answers; a run's events fire its callbacks as
 * they arrive, and its promise resolves at `done`.
 *
 * No promise is left pending: a control request has a deadline
 * (requestTimeout); runs, forks, installs and queries, which may wait long in
 * a context's queue, are guarded by the liveness check (after `liveness`
 * seconds of silence the client sends `hello`, and a daemon that does not
 * answer within requestTimeout, or answers as another instance, ends them);
 * a dropped connection (the socket monitor's disconnect), an `err` whose id
 * the daemon could not read, and close() end every request in flight.
 */
import { connect as netConnect } from "node:net";
import { open as fsOpen } from "node:fs/promises";
import * as zmq from "zeromq";
import { CodecError, Value, decode, encode } from "./codec.js";
import { curveKeys } from "./curve.js";
import {
  AuthenticationError,
  ClosedError,
  CtxdError,
  DisconnectedError,
  LostError,
  ProtocolError,
  RefusedError,
  TooLargeError,
  UnreachableError,
} from "./errors.js";
import { RunEvent, RunState } from "./run.js";
import {
  Completeness,
  Completion,
  ContextInfo,
  ErrorInfo,
  ExecResult,
  HelloInfo,
  Inspection,
  Msg,
  Result,
  StatsInfo,
  parseCompleteness,
  parseCompletion,
  parseContext,
  parseHello,
  parseInspection,
  parseStats,
} from "./types.js";

export const VERSION = 1;
export const DEFAULT_REQUEST_TIMEOUT = 30;
export const DEFAULT_LIVENESS = 10;
export const FILE_CHUNK = 4 * 1024 * 1024;

/** Fields of each request in PROTOCOL.md's order (section 5). */
const REQUEST_FIELDS: Record<string, string[]> = {
  execute: ["ctx", "code", "timeout", "env", "silent", "stop_on_error", "allow_stdin", "artifacts", "syntax"],
  interrupt: ["ctx", "run"],
  "input.reply": ["ctx", "value", "eof"],
  "file.put": ["ctx", "path", "data", "offset"],
  "file.get": ["ctx", "path", "offset", "length"],
  "pip.install": ["ctx", "packages"],
  "ctx.create": ["name", "cwd", "env", "figures", "packages", "tier", "policy"],
  "ctx.delete": ["ctx"],
  "ctx.restart": ["ctx"],
  "ctx.fork": ["ctx", "name"],
  complete: ["ctx", "code", "cursor", "timeout"],
  inspect: ["ctx", "code", "cursor", "detail_level", "timeout"],
  is_complete: ["ctx", "code", "timeout"],
};

/**
 * The request map: v, t, id, then the fields in PROTOCOL.md's order
 * (undefined and null values left out; fields it does not list come last).
 */
export function buildRequest(t: string, id: number | string, fields: Record<string, Value> = {}): Record<string, Value> {
  if (typeof id === "number" ? !Number.isSafeInteger(id) || id < 0 : typeof id !== "string" || Buffer.byteLength(id) < 1 || Buffer.byteLength(id) > 64)
    throw new RangeError("a request id is a str of 1 to 64 bytes or a non-negative integer");
  const msg: Record<string, Value> = { v: VERSION, t, id };
  const order = REQUEST_FIELDS[t] ?? [];
  for (const k of order) if (fields[k] !== undefined && fields[k] !== null) msg[k] = fields[k];
  for (const [k, v] of Object.entries(fields)) if (!order.includes(k) && v !== undefined && v !== null) msg[k] = v;
  return msg;
}

/** A daemon message: a map with v 1 and a str t (ProtocolError otherwise). */
export function decodeMessage(data: Uint8Array): Msg {
  let m: Value;
  try {
    m = decode(data);
  } catch (e) {
    throw new ProtocolError(e instanceof CodecError ? e.message : String(e));
  }
  if (!m || typeof m !== "object" || Array.isArray(m) || m instanceof Uint8Array) throw new ProtocolError("a message is not a map");
  const o = m as Msg;
  if (o.v !== VERSION) throw new ProtocolError(`message of protocol version ${String(o.v)}`);
  if (typeof o.t !== "string") throw new ProtocolError("message without a str 't'");
  return o;
}

/** PROTOCOL.md section 1's default endpoint (ignoring CTXD_ENDPOINT). */
export function defaultEndpoint(): string {
  const xdg = process.env.XDG_RUNTIME_DIR;
  return xdg ? `ipc://${xdg}/ctxd/ctxd.sock` : "ipc:///run/ctxd/ctxd.sock";
}

/** endpoint, else $CTXD_ENDPOINT, else the default. */
export function resolveEndpoint(endpoint?: string): string {
  return endpoint || process.env.CTXD_ENDPOINT || defaultEndpoint();
}

/** Fails at once when an ipc:// endpoint has no listener (ZeroMQ would retry silently). */
function probe(endpoint: string): Promise<void> {
  if (!endpoint.startsWith("ipc://")) return Promise.resolve();
  const path = endpoint.slice(6);
  if (!path || path.startsWith("@") || Buffer.byteLength(path) >= 108) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const s = netConnect({ path });
    const timer = setTimeout(() => (s.destroy(), resolve()), 2000);
    s.once("connect", () => (clearTimeout(timer), s.destroy(), resolve()));
    s.once("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      s.destroy();
      if (e.code === "ENOENT") reject(new UnreachableError(`ctxd is not running at ${endpoint} (no socket file ${path})`));
      else if (e.code === "ECONNREFUSED") reject(new UnreachableError(`ctxd is not running at ${endpoint} (stale socket file ${path})`));
      else if (e.code === "EACCES" || e.code === "ENOTDIR" || e.code === "ENOTSOCK") reject(new UnreachableError(`cannot connect to ${endpoint}: ${e.message}`));
      else resolve();
    });
  });
}

/** A context given by name or as the ContextInfo a call returned. */
export type CtxRef = string | { name: string } | { id: string } | null | undefined;

export function ctxName(ctx: CtxRef): string | undefined {
  if (ctx === null || ctx === undefined) return undefined;
  if (typeof ctx === "string") return ctx;
  if ("name" in ctx && typeof ctx.name === "string") return ctx.name;
  if ("id" in ctx && typeof ctx.id === "string") return ctx.id;
  throw new TypeError("a context is a name or a context object");
}

export interface ClientOptions {
  /** seconds a control request waits for its reply, and a liveness check for its answer */
  requestTimeout?: number;
  /** seconds of silence while runs are in flight before the client checks the daemon is there (0: never) */
  liveness?: number;
  /** CurveZMQ for tcp://: the daemon's public key (Z85), else serverKeyFile, $CTXD_SERVER_KEY, $CTXD_SERVER_KEY_FILE */
  serverKey?: string;
  /** the file holding the daemon's public key (its server.pub) */
  serverKeyFile?: string;
  /** this client's secret key (Z85), else clientKeyFile, $CTXD_CLIENT_KEY, $CTXD_CLIENT_KEY_FILE, ~/.config/ctxd/client.key */
  clientKey?: string;
  /** the file holding this client's secret key */
  clientKeyFile?: string;
}

export interface ExecuteOptions {
  /** context to run in (default "default") */
  ctx?: CtxRef;
  /** seconds the code may run in the daemon (default the daemon's, 600; 0: none) */
  timeout?: number;
  /** environment variables for this run only */
  envs?: Record<string, string>;
  silent?: boolean;
  stopOnError?: boolean;
  /** report files the run created or changed (ExecResult.artifacts) */
  artifacts?: boolean;
  /** "ipython" (magics, !cmd, as in a Jupyter cell) or "python"; default the context's own (PROTOCOL.md, execute) */
  syntax?: "python" | "ipython";
  onAccepted?: (info: Msg) => unknown;
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  onResult?: (r: Result) => unknown;
  onDisplay?: (d: Result) => unknown;
  onClearOutput?: (wait: boolean) => unknown;
  onError?: (e: ErrorInfo) => unknown;
  /** answers input()/getpass() in the code: a string, or null to decline (EOFError); without it they raise EOFError */
  onInput?: (prompt: string, password: boolean) => string | null | Promise<string | null>;
  /** aborting interrupts the run (at once if it started, else when it starts) and rejects with the signal's reason */
  signal?: AbortSignal;
}

export interface CallOptions {
  /** seconds to wait for the reply (default requestTimeout; 0: no deadline) */
  requestTimeout?: number;
  signal?: AbortSignal;
}

export interface CreateContextOptions extends CallOptions {
  name?: string;
  cwd?: string;
  env?: Record<string, string>;
  /** false: matplotlib figures are not sent as displays */
  figures?: boolean;
  packages?: string[];
  tier?: string;
  policy?: Record<string, Value>;
  /** "CTX/NAME": the new context starts with that snapshot's state (no deadline then) */
  fromSnapshot?: string;
  /** "run" (after each run that ends ok) or seconds: the state is kept as snapshot NAME/auto */
  autosnapshot?: "run" | number;
}

/** A snapshot of a context's state (ctx.snapshot). */
export interface SnapshotInfo {
  id: string;
  ctx: string;
  name: string;
  size: number;
  created: number;
}

/** A global a snapshot could not keep (or a restore could not bring back), and why. */
export interface Unsaved {
  name: string;
  reason: string;
}

function parseSnapshot(v: any): SnapshotInfo {
  if (!v || typeof v !== "object") throw new ProtocolError("reply without a snapshot");
  return { id: String(v.id), ctx: String(v.ctx), name: String(v.name), size: Number(v.size), created: Number(v.created ?? 0) };
}

function parseUnsaved(v: any): Unsaved[] {
  return Array.isArray(v) ? v.map((u: any) => ({ name: String(u?.name), reason: String(u?.reason) })) : [];
}

export interface QueryOptions {
  ctx?: CtxRef;
  /** seconds the daemon lets the query run (default 10) */
  timeout?: number;
  /** seconds this call waits (default none: the liveness check guards it) */
  wait?: number;
  signal?: AbortSignal;
}

type Kind = "exec" | "live" | "ctl" | "ping";

interface Entry {
  kind: Kind;
  ctx: string;
  deliver: (m: Msg) => void;
  fail: (e: Error) => void;
  accepted: boolean;
  cancel: boolean;
  detached: boolean;
}

const TERMINAL = new Set(["done", "ok", "err"]);

/** A run sent with submit(): its id, its result, and interrupt(). */
export class Run implements PromiseLike<ExecResult> {
  constructor(
    readonly id: number,
    readonly ctx: string,
    readonly done: Promise<ExecResult>,
    private readonly client: Client,
  ) {}
  /** Interrupts this run only (now if it started, else as soon as it does); it ends "interrupted". */
  interrupt(): void {
    this.client._cancel(this.id, false);
  }
  then<A = ExecResult, B = never>(ok?: ((v: ExecResult) => A | PromiseLike<A>) | null, bad?: ((e: any) => B | PromiseLike<B>) | null): Promise<A | B> {
    return this.done.then(ok, bad);
  }
}

export class Client {
  readonly endpoint: string;
  helloInfo: HelloInfo | null = null;
  private readonly sock: zmq.Dealer;
  private readonly pending = new Map<number, Entry>();
  private nextId = 1;
  private closed = false;
  /** What the last failed CurveZMQ handshake said (null: none failed since
   * the last good one). libzmq never retries that connection, so requests
   * made after it fail at once instead of waiting out their timeout. */
  private authError: string | null = null;
  private outq: Buffer[] = [];
  private sending = false;
  private readonly requestTimeout: number;
  private readonly liveness: number;
  private lastHeard = Date.now();
  private ping: number | null = null;
  private pingDeadline = 0;
  private livenessTimer: NodeJS.Timeout | null = null;
  private maxRequest = 0;
  private instance: string | null = null;
  private pid: number | null = null;

  /** Use Client.connect(): it checks the daemon answers `hello`. */
  constructor(endpoint?: string, opts: ClientOptions = {}) {
    this.endpoint = resolveEndpoint(endpoint);
    this.requestTimeout = opts.requestTimeout ?? DEFAULT_REQUEST_TIMEOUT;
    this.liveness = opts.liveness ?? DEFAULT_LIVENESS;
    const keys = curveKeys(this.endpoint, opts.serverKey, opts.clientKey, opts.serverKeyFile, opts.clientKeyFile);
    this.sock = new zmq.Dealer({ linger: 0, receiveHighWaterMark: 0, sendHighWaterMark: 0 });
    if (keys) {
      this.sock.curveServerKey = keys.serverKey;
      this.sock.curvePublicKey = keys.publicKey;
      this.sock.curveSecretKey = keys.secretKey;
    }
    // A failed CurveZMQ handshake ends what waits with AuthenticationError;
    // that connection carried nothing, so its disconnect is not a drop.
    const authFailed = (message: string) => {
      this.authError = message;
      this.outq = []; // their requests end here; nothing will carry them
      if (this.pending.size) this.failAll(new AuthenticationError(message));
    };
    const wrongKey = (what: string) =>
      `authentication failed at ${this.endpoint}: the CurveZMQ handshake failed (${what}); is the server key the daemon's public key (STATE_DIR/server.pub)?`;
    this.sock.events.on("handshake:error:auth", (ev) =>
      authFailed(`authentication failed at ${this.endpoint}: the daemon refused this client's key (ZAP status ${ev.error.status}); add its public key (\`ctx keygen\` prints it) to the daemon's authorized_keys`));
    this.sock.events.on("handshake:error:protocol", (ev) => authFailed(wrongKey(`protocol error ${ev.error.code}`)));
    this.sock.events.on("handshake:error:other", (ev) => authFailed(wrongKey(`no detail: ${ev.error.message}`)));
    this.sock.events.on("handshake", () => {
      this.authError = null;
    });
    // A dropped connection loses what was in flight on it (PROTOCOL.md section 2).
    this.sock.events.on("disconnect", () => {
      if (this.authError === null && this.pending.size)
        this.failAll(new DisconnectedError(`the connection to ctxd at ${this.endpoint} dropped with ${this.pending.size} request(s) in flight; their outcome is unknown`));
    });
    try {
      this.sock.connect(this.endpoint);
    } catch (e) {
      this.sock.close();
      throw new UnreachableError(`cannot connect to ${JSON.stringify(this.endpoint)}: ${(e as Error).message}`);
    }
    void this.receiveLoop();
  }

  /** Connects and checks the daemon answers `hello` (UnreachableError otherwise). */
  static async connect(endpoint?: string, opts: ClientOptions = {}): Promise<Client> {
    const ep = resolveEndpoint(endpoint);
    await probe(ep);
    const c = new Client(ep, opts);
    try {
      await c.hello();
    } catch (e) {
      c.close();
      throw e;
    }
    return c;
  }

  /** Closes the socket; every call still waiting rejects with ClosedError. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.failAll(new ClosedError("the client was closed"));
    if (this.livenessTimer) clearTimeout(this.livenessTimer);
    this.livenessTimer = null;
    this.sock.close(); // ends its event observer too
  }

  get isClosed(): boolean {
    return this.closed;
  }

  // ---- I/O ------------------------------------------------------------------

  private async receiveLoop(): Promise<void> {
    try {
      for (;;) {
        const frames = await this.sock.receive();
        if (frames.length !== 1) continue; // PROTOCOL.md: one frame per message
        let m: Msg;
        try {
          m = decodeMessage(frames[0]);
        } catch {
          continue; // cannot be matched to a request
        }
        this.route(m);
      }
    } catch (e) {
      if (!this.closed) this.failAll(new UnreachableError(`ZeroMQ failure on ${this.endpoint}: ${(e as Error).message}`));
    }
  }

  /** Queues bytes for the socket: ZeroMQ.js allows one send in progress at a time. */
  private send(data: Buffer): void {
    this.outq.push(data);
    if (!this.sending) void this.pump();
  }

  private async pump(): Promise<void> {
    this.sending = true;
    try {
      while (this.outq.length && !this.closed) {
        const batch = this.outq;
        this.outq = [];
        for (const data of batch) await this.sock.send(data);
      }
    } catch (e) {
      if (!this.closed) this.failAll(new UnreachableError(`cannot send to ${this.endpoint}: ${(e as Error).message}`));
    } finally {
      this.sending = false;
    }
  }

  // ---- routing --------------------------------------------------------------

  private hasRuns(): boolean {
    for (const e of this.pending.values()) if (e.kind === "exec" || e.kind === "live") return true;
    return false;
  }

  /** Registers a request and sends it; returns its id. */
  private request(kind: Kind, t: string, fields: Record<string, Value>, deliver: (m: Msg) => void, fail: (e: Error) => void, ctx = "default"): number {
    if (this.closed) throw new ClosedError("the client is closed");
    if (this.authError !== null) throw new AuthenticationError(this.authError);
    const id = this.nextId++;
    const data = encode(buildRequest(t, id, fields));
    if (this.maxRequest && data.length > this.maxRequest)
      throw new TooLargeError(`${t} request of ${data.length} bytes exceeds the daemon's max_request_bytes (${this.maxRequest}); nothing was sent`);
    if ((kind === "exec" || kind === "live") && !this.hasRuns()) this.lastHeard = Date.now();
    this.pending.set(id, { kind, ctx, deliver, fail, accepted: false, cancel: false, detached: false });
    this.send(data);
    if (kind === "exec" || kind === "live") this.armLiveness();
    return id;
  }

  private route(m: Msg): void {
    const re = m.re;
    if ((re === null || re === undefined) && m.t === "err" && this.pending.size) {
      // The daemon could not read the id of a request of ours: which one is
      // unknown, so every request in flight ends (none waits forever).
      this.failAll(new ProtocolError(`the daemon could not read a request of this client (${String(m.code)}: ${String(m.message)}); the requests in flight were ended`));
      return;
    }
    if (m.t === "gap" && this.pending.size) {
      // Messages to this client were dropped while its connection was down
      // (PROTOCOL.md section 7): a request in flight may never see its end.
      this.failAll(new LostError(`the daemon dropped ${String(m.dropped)} message(s) to this client while its connection was down; the requests in flight were ended`));
      return;
    }
    if (typeof re !== "number") return; // not one of our ids
    const e = this.pending.get(re);
    if (!e) return;
    this.lastHeard = Date.now();
    if (e.kind === "ping") {
      this.pending.delete(re);
      this.ping = null;
      this.checkInstance(m);
      return;
    }
    if (m.t === "accepted" && e.kind === "exec") {
      e.accepted = true;
      if (e.cancel) {
        e.cancel = false;
        this.sendInterrupt(re, e);
      }
    }
    if (TERMINAL.has(m.t as string)) this.pending.delete(re);
    if (!e.detached) e.deliver(m);
  }

  private sendInterrupt(rid: number, e: Entry): void {
    this.request("ctl", "interrupt", { ctx: e.ctx, run: rid }, () => {}, () => {});
  }

  /** Interrupts run rid (now if it started, else when it does); detach: drop its further events. */
  _cancel(rid: number, detach: boolean): void {
    const e = this.pending.get(rid);
    if (!e || e.kind !== "exec" || this.closed) return;
    if (detach) e.detached = true;
    if (e.accepted) this.sendInterrupt(rid, e);
    else e.cancel = true;
  }

  private failAll(err: CtxdError): void {
    const entries = [...this.pending.values()];
    this.pending.clear();
    this.ping = null;
    for (const e of entries) if (!e.detached) e.fail(err);
  }

  private checkInstance(m: Msg): void {
    if (m.t !== "ok") return;
    const inst = typeof m.instance === "string" ? m.instance : null;
    const pid = typeof m.pid === "number" ? m.pid : null;
    const other = inst && this.instance ? inst !== this.instance : pid !== null && this.pid !== null && pid !== this.pid;
    if (other) this.failAll(new LostError(`ctxd restarted (instance ${inst}, was ${this.instance}) while runs were in flight; their outcome is unknown`));
  }

  /** The liveness check: a timer that runs while runs (or forks, installs, queries) are in flight. */
  private armLiveness(): void {
    if (this.livenessTimer || this.liveness <= 0 || this.closed) return;
    this.livenessTimer = setTimeout(() => this.tick(), this.liveness * 1000);
  }

  private tick(): void {
    this.livenessTimer = null;
    if (this.closed) return;
    const now = Date.now();
    if (!this.hasRuns()) {
      if (this.ping !== null) this.pending.delete(this.ping);
      this.ping = null;
      return;
    }
    let due: number;
    if (this.ping !== null) {
      if (now >= this.pingDeadline) {
        this.pending.delete(this.ping);
        this.ping = null;
        this.failAll(new UnreachableError(`ctxd stopped answering (no reply to a liveness check within ${this.requestTimeout} s)`));
        this.lastHeard = now;
        return;
      }
      due = this.pingDeadline - now;
    } else if (now - this.lastHeard >= this.liveness * 1000) {
      this.ping = this.request("ping", "hello", {}, () => {}, () => {});
      this.pingDeadline = now + this.requestTimeout * 1000;
      due = this.requestTimeout * 1000;
    } else {
      due = this.lastHeard + this.liveness * 1000 - now;
    }
    this.livenessTimer = setTimeout(() => this.tick(), Math.max(1, due));
  }

  // ---- requests -------------------------------------------------------------

  /**
   * Sends a request and resolves with its `ok` (RefusedError for `err`,
   * UnreachableError past the deadline; timeout 0: no deadline, for requests
   * the liveness check guards: kind "live").
   */
  call(t: string, fields: Record<string, Value> = {}, opts: CallOptions & { kind?: Kind } = {}): Promise<Msg> {
    return new Promise<Msg>((resolve, reject) => {
      const kind = opts.kind ?? "ctl";
      const wait = opts.requestTimeout ?? (kind === "live" ? 0 : this.requestTimeout);
      const signal = opts.signal;
      if (signal?.aborted) return reject(signal.reason);
      let timer: NodeJS.Timeout | null = null;
      let id = 0;
      const onAbort = () => {
        this.pending.delete(id);
        finish();
        reject(signal!.reason);
      };
      const finish = () => {
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      try {
        id = this.request(
          kind,
          t,
          fields,
          (m) => {
            finish();
            if (m.t === "ok") resolve(m);
            else if (m.t === "err") reject(RefusedError.make(String(m.code), String(m.message)));
            else reject(new ProtocolError(`daemon answered a ${t} request with ${JSON.stringify(m.t)}`));
          },
          (e) => {
            finish();
            reject(e);
          },
          typeof fields.ctx === "string" ? fields.ctx : "default",
        );
      } catch (e) {
        return reject(e);
      }
      if (wait > 0)
        timer = setTimeout(() => {
          this.pending.delete(id);
          finish();
          reject(new UnreachableError(`no reply from ctxd at ${this.endpoint} within ${wait} s (is the daemon running?)`));
        }, wait * 1000);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  // ---- runs -----------------------------------------------------------------

  /** Sends an execute without waiting: a Run (await it, or its .done, for the ExecResult). */
  submit(code: string, opts: ExecuteOptions = {}): Run {
    if (typeof code !== "string") throw new TypeError("code must be a string");
    const t = opts.timeout;
    if (t !== undefined && (typeof t !== "number" || !(t >= 0))) throw new RangeError("timeout is a number of seconds >= 0 (0: none)");
    let env: Record<string, string> | undefined;
    if (opts.envs) {
      env = {};
      for (const [k, v] of Object.entries(opts.envs)) {
        if (typeof v !== "string") throw new TypeError("envs maps str to str");
        env[k] = v;
      }
      if (!Object.keys(env).length) env = undefined;
    }
    const ctx = ctxName(opts.ctx) ?? "default";
    const fields: Record<string, Value> = {
      ctx,
      code,
      timeout: t,
      env,
      silent: opts.silent ? true : undefined,
      stop_on_error: opts.stopOnError ? true : undefined,
      allow_stdin: opts.onInput ? true : undefined,
      artifacts: opts.artifacts ? true : undefined,
      syntax: opts.syntax,
    };
    let id = 0;
    const signal = opts.signal;
    const done = new Promise<ExecResult>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      let state: RunState;
      let settled = false;
      const settle = (f: () => void) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener("abort", onAbort);
        f();
      };
      const onAbort = () => {
        this._cancel(id, true);
        settle(() => reject(signal!.reason));
      };
      const fire = (ev: RunEvent) => {
        switch (ev[0]) {
          case "accepted":
            return opts.onAccepted?.(ev[1]);
          case "stdout":
            return opts.onStdout?.(ev[1]);
          case "stderr":
            return opts.onStderr?.(ev[1]);
          case "display":
            return opts.onDisplay?.(ev[1]);
          case "clear_output":
            return opts.onClearOutput?.(ev[1]);
          case "result":
            return opts.onResult?.(ev[1]);
          case "error":
            return opts.onError?.(ev[1]);
          case "input":
            return this.answerInput(ctx, opts, ev[1].prompt, ev[1].password).catch((e) => {
              this._cancel(id, true);
              settle(() => reject(e));
            });
        }
      };
      try {
        id = this.request(
          "exec",
          "execute",
          fields,
          (m) => {
            if (settled) return;
            let events: RunEvent[];
            try {
              events = state.feed(m);
            } catch (e) {
              if (this.pending.has(id)) this._cancel(id, true);
              return settle(() => reject(e));
            }
            for (const ev of events) {
              try {
                fire(ev);
              } catch (e) {
                // A failing callback stops the run, as the Python client does.
                this._cancel(id, true);
                return settle(() => reject(e));
              }
            }
            if (state.final) settle(() => resolve(state.final!));
          },
          (e) => settle(() => reject(e)),
          ctx,
        );
      } catch (e) {
        return reject(e);
      }
      state = new RunState(ctx, id);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    return new Run(id, ctx, done, this);
  }

  private async answerInput(ctx: string, opts: ExecuteOptions, prompt: string, password: boolean): Promise<void> {
    const value = await opts.onInput!(prompt, password);
    try {
      if (value === null || value === undefined) await this.call("input.reply", { ctx, eof: true });
      else await this.call("input.reply", { ctx, value: String(value) });
    } catch (e) {
      if (!(e instanceof RefusedError && e.code === "no_input")) throw e; // no_input: interrupted meanwhile
    }
  }

  /**
   * Runs code in a context and resolves with its ExecResult once it ended,
   * whatever its status ("ok", "error", "interrupted", "timeout", "died",
   * "aborted", "shutdown"). Callbacks fire while the code runs, as output
   * arrives. Rejects with RefusedError (busy, unknown_context...),
   * UnreachableError, LostError, DisconnectedError, or the signal's reason.
   */
  execute(code: string, opts: ExecuteOptions = {}): Promise<ExecResult> {
    try {
      return this.submit(code, opts).done;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Interrupts the run executing on ctx (with run: only that run of this client). */
  async interrupt(ctx?: CtxRef, run?: Run | number, opts: CallOptions = {}): Promise<boolean> {
    const r = await this.call("interrupt", { ctx: ctxName(ctx) ?? "default", run: run instanceof Run ? run.id : run }, opts);
    return r.interrupted === true;
  }

  // ---- daemon ---------------------------------------------------------------

  /** The daemon's version, pid, instance, limits, tiers. */
  async hello(opts: CallOptions = {}): Promise<HelloInfo> {
    const info = parseHello(await this.call("hello", {}, opts));
    this.helloInfo = info;
    this.instance = info.instance;
    this.pid = info.pid;
    const limit = info.limits.max_request_bytes;
    if (typeof limit === "number" && limit > 0) this.maxRequest = limit;
    return info;
  }

  /** The daemon's counters since it started. */
  async stats(opts: CallOptions = {}): Promise<StatsInfo> {
    return parseStats(await this.call("stats", {}, opts));
  }

  // ---- contexts -------------------------------------------------------------

  /** Starts a context with its own worker (a generated name when none). With packages, no deadline: pip may take long. */
  async createContext(opts: CreateContextOptions = {}): Promise<ContextInfo> {
    const fields: Record<string, Value> = {
      name: opts.name,
      cwd: opts.cwd,
      env: opts.env && Object.keys(opts.env).length ? opts.env : undefined,
      figures: opts.figures === false ? false : undefined,
      packages: opts.packages && opts.packages.length ? opts.packages : undefined,
      tier: opts.tier,
      policy: opts.policy,
      from_snapshot: opts.fromSnapshot,
      autosnapshot: opts.autosnapshot,
    };
    const live = !!(opts.packages && opts.packages.length) || !!opts.fromSnapshot;
    const r = await this.call("ctx.create", fields, { ...opts, kind: live ? "live" : "ctl" });
    return parseContext(r.ctx);
  }

  /** Every context, "default" included, sorted by name. */
  async listContexts(opts: CallOptions = {}): Promise<ContextInfo[]> {
    const out: ContextInfo[] = [];
    let fields: Record<string, Value> = {};
    for (;;) {
      // page by page: a page ends before the daemon's 4 MiB (PROTOCOL.md)
      const r = await this.call("ctx.list", fields, opts);
      if (!Array.isArray(r.contexts)) throw new ProtocolError("ctx.list reply without contexts");
      out.push(...r.contexts.map(parseContext));
      if (typeof r.next !== "string" || r.contexts.length === 0) return out;
      fields = { after: r.next };
    }
  }

  /** Kills the context's worker; its running and queued runs end "aborted". */
  async deleteContext(ctx: CtxRef, opts: CallOptions = {}): Promise<void> {
    const name = ctxName(ctx);
    if (!name) throw new TypeError("deleteContext needs a context");
    await this.call("ctx.delete", { ctx: name }, opts);
  }

  /** A fresh interpreter for the context: empty globals, execution count 0. */
  async restartContext(ctx?: CtxRef, opts: CallOptions = {}): Promise<ContextInfo> {
    const r = await this.call("ctx.restart", { ctx: ctxName(ctx) ?? "default" }, opts);
    return parseContext(r.ctx);
  }

  /** Clones a live context (globals, modules, cwd, environment) into a new one. Waits in its queue: no deadline, the liveness check guards it. */
  async forkContext(ctx: CtxRef, name?: string, opts: CallOptions = {}): Promise<ContextInfo> {
    const src = ctxName(ctx);
    if (!src) throw new TypeError("forkContext needs a context");
    const r = await this.call("ctx.fork", { ctx: src, name }, { ...opts, kind: "live", requestTimeout: opts.requestTimeout ?? 0 });
    return parseContext(r.ctx);
  }

  /** Writes the context's Python state to snapshot `name` (generated when absent); waits behind its runs, no deadline. `unsaved`: every global not saved, and why. */
  async snapshotContext(ctx: CtxRef, name?: string, opts: CallOptions = {}): Promise<{ snapshot: SnapshotInfo; unsaved: Unsaved[] }> {
    const src = ctxName(ctx);
    if (!src) throw new TypeError("snapshotContext needs a context");
    const r = await this.call("ctx.snapshot", { ctx: src, name }, { ...opts, kind: "live", requestTimeout: opts.requestTimeout ?? 0 });
    return { snapshot: parseSnapshot(r.snapshot), unsaved: parseUnsaved(r.unsaved) };
  }

  /** Replaces the context's state with a snapshot's ("NAME" of its own, or "CTX/NAME"); a corrupt or foreign one is refused (bad_snapshot) and the state kept. */
  async restoreContext(ctx: CtxRef, snapshot: string, opts: CallOptions = {}): Promise<{ ctx: ContextInfo; restored: number; unsaved: Unsaved[] }> {
    const name = ctxName(ctx);
    if (!name) throw new TypeError("restoreContext needs a context");
    const r = await this.call("ctx.restore", { ctx: name, snapshot }, { ...opts, kind: "live", requestTimeout: opts.requestTimeout ?? 0 });
    return { ctx: parseContext(r.ctx), restored: Number(r.restored ?? 0), unsaved: parseUnsaved(r.unsaved) };
  }

  /** The snapshots of a context (of every context without one). */
  async listSnapshots(ctx?: CtxRef, opts: CallOptions = {}): Promise<SnapshotInfo[]> {
    const r = await this.call("ctx.snapshots", { ctx: ctxName(ctx) }, opts);
    if (!Array.isArray(r.snapshots)) throw new ProtocolError("ctx.snapshots reply without snapshots");
    return r.snapshots.map(parseSnapshot);
  }

  /** Deletes snapshot "CTX/NAME". */
  async deleteSnapshot(snapshot: string, opts: CallOptions = {}): Promise<void> {
    await this.call("ctx.snapshot_delete", { snapshot }, opts);
  }

  /** Copies snapshot "CTX/NAME" to the daemon's STATE_DIR/exports/CTX/NAME, its writer's tier marked under the operator's STATE_DIR/export.key; the file's path on the daemon's host and the tier. */
  async exportSnapshot(snapshot: string, opts: CallOptions = {}): Promise<{ snapshot: string; path: string; tier: string; size: number }> {
    const r = await this.call("ctx.snapshot_export", { snapshot }, { ...opts, requestTimeout: opts.requestTimeout ?? 0 });
    if (typeof r.path !== "string" || typeof r.tier !== "string") throw new ProtocolError("ctx.snapshot_export reply without path or tier");
    return { snapshot: String(r.snapshot), path: r.path, tier: r.tier, size: Number(r.size ?? 0) };
  }

  /** Makes the export put at the daemon's STATE_DIR/imports/CTX/NAME snapshot "CTX/NAME", checked with STATE_DIR/export.key (a changed file or another key: bad_snapshot); the writer's tier is kept. */
  async importSnapshot(snapshot: string, opts: CallOptions = {}): Promise<{ snapshot: SnapshotInfo; tier: string }> {
    const r = await this.call("ctx.snapshot_import", { snapshot }, { ...opts, requestTimeout: opts.requestTimeout ?? 0 });
    const tier = (r.snapshot as Record<string, unknown> | undefined)?.tier;
    return { snapshot: parseSnapshot(r.snapshot), tier: typeof tier === "string" ? tier : "" };
  }

  /** Installs requirements into one context from the daemon's package source; [{name, cached}]. */
  async pipInstall(packages: string[], ctx?: CtxRef, opts: CallOptions = {}): Promise<{ name: string; cached: boolean }[]> {
    if (!Array.isArray(packages)) throw new TypeError("pipInstall takes an array of requirements");
    const r = await this.call("pip.install", { ctx: ctxName(ctx) ?? "default", packages }, { ...opts, kind: "live", requestTimeout: opts.requestTimeout ?? 0 });
    if (!Array.isArray(r.packages)) throw new ProtocolError("pip.install reply without packages");
    return r.packages.map((p: any) => ({ name: String(p?.name), cached: p?.cached === true }));
  }

  // ---- files ----------------------------------------------------------------

  /**
   * Writes a file under the context's directory from bytes, a local path
   * ({path}), or any async iterable of byte chunks (a Node Readable), in
   * chunks of at most 4 MiB (the daemon holds one at a time). Resolves with
   * the size written.
   */
  async putFile(ctx: CtxRef, path: string, source: Uint8Array | { path: string } | AsyncIterable<Uint8Array> | Iterable<Uint8Array>, opts: CallOptions = {}): Promise<number> {
    const name = ctxName(ctx) ?? "default";
    let offset = 0;
    const put = async (chunk: Uint8Array) => {
      const r = await this.call("file.put", { ctx: name, path, data: chunk, offset }, opts);
      offset = typeof r.size === "number" ? r.size : offset + chunk.length;
    };
    if (source instanceof Uint8Array) {
      for (let i = 0; i === 0 || i < source.length; i += FILE_CHUNK) await put(source.subarray(i, i + FILE_CHUNK));
      return offset;
    }
    if (!(Symbol.asyncIterator in source) && !(Symbol.iterator in source) && typeof (source as { path: string }).path === "string") {
      const fh = await fsOpen((source as { path: string }).path, "r");
      try {
        return await this.putFile(ctx, path, fh.createReadStream({ highWaterMark: FILE_CHUNK }), opts);
      } finally {
        await fh.close();
      }
    }
    // Re-chunk the stream's pieces into chunks of at most FILE_CHUNK bytes.
    let parts: Uint8Array[] = [];
    let held = 0;
    let sent = false;
    for await (const piece of source as AsyncIterable<Uint8Array>) {
      let p = typeof piece === "string" ? Buffer.from(piece) : piece;
      while (held + p.length >= FILE_CHUNK) {
        const take = FILE_CHUNK - held;
        parts.push(p.subarray(0, take));
        await put(Buffer.concat(parts));
        sent = true;
        p = p.subarray(take);
        parts = [];
        held = 0;
      }
      if (p.length) {
        parts.push(p);
        held += p.length;
      }
    }
    if (held || !sent) await put(Buffer.concat(parts));
    return offset;
  }

  /** The file's chunks (of at most 4 MiB) as an async iterable: a stream of the file. */
  async *readFile(ctx: CtxRef, path: string, opts: CallOptions = {}): AsyncGenerator<Buffer> {
    const name = ctxName(ctx) ?? "default";
    let offset = 0;
    for (;;) {
      const r = await this.call("file.get", { ctx: name, path, offset }, opts);
      const data = r.data instanceof Uint8Array ? (r.data as Buffer) : Buffer.alloc(0);
      offset += data.length;
      if (data.length) yield data;
      if (r.eof === true || !data.length) return;
    }
  }

  /** The whole file's bytes. */
  async getFile(ctx: CtxRef, path: string, opts: CallOptions = {}): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const chunk of this.readFile(ctx, path, opts)) parts.push(chunk);
    return Buffer.concat(parts);
  }

  // ---- queries: complete, inspect, is_complete ------------------------------

  private query(t: string, code: string, cursor: number | undefined, opts: QueryOptions, extra: Record<string, Value> = {}): Promise<Msg> {
    if (typeof code !== "string") throw new TypeError("code must be a string");
    return this.call(t, { ctx: ctxName(opts.ctx) ?? "default", code, cursor, ...extra, timeout: opts.timeout }, { kind: "live", requestTimeout: opts.wait ?? 0, signal: opts.signal });
  }

  /** Completions for the name before cursor (characters into code; default its end) from the context's live globals. */
  async complete(code: string, cursor?: number, opts: QueryOptions = {}): Promise<Completion> {
    return parseCompletion(await this.query("complete", code, cursor, opts));
  }

  /** What the name at cursor is: signature, type, docstring (detailLevel 1: its source). */
  async inspect(code: string, cursor?: number, opts: QueryOptions & { detailLevel?: 0 | 1 } = {}): Promise<Inspection> {
    return parseInspection(await this.query("inspect", code, cursor, opts, { detail_level: opts.detailLevel || undefined }));
  }

  /** Whether code would run as typed, needs more lines, or cannot compile. */
  async isComplete(code: string, opts: QueryOptions = {}): Promise<Completeness> {
    return parseCompleteness(await this.query("is_complete", code, undefined, opts));
  }
}
