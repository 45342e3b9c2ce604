/**
 * What the client returns: results of runs, contexts, hello and stats, built
 * from the daemon's messages (PROTOCOL.md section 5) with camelCase names.
 */
import { ProtocolError } from "./errors.js";

export type Msg = Record<string, unknown>;

export const STATUSES = ["ok", "error", "interrupted", "timeout", "died", "aborted", "shutdown"] as const;
export type Status = (typeof STATUSES)[number];

/** The exception a run raised. */
export interface ErrorInfo {
  ename: string;
  evalue: string;
  traceback: string[];
}

/** A trailing expression's value (isMainResult) or one display() output / figure. */
export class Result {
  constructor(
    /** text/plain: the value's repr */
    readonly text: string,
    /** the MIME bundle: text types as text, binary ones base64 */
    readonly data: Record<string, string>,
    readonly executionCount = 0,
    readonly metadata: Record<string, unknown> = {},
    readonly displayId: string | null = null,
    readonly update = false,
    readonly isMainResult = true,
  ) {}
  toString(): string {
    return this.text;
  }
  /** The MIME types present besides text/plain. */
  formats(): string[] {
    return Object.keys(this.data).filter((k) => k !== "text/plain");
  }
  /** A binary type (base64 on the wire) decoded, or null. */
  image(mime = "image/png"): Buffer | null {
    const v = this.data[mime];
    return v === undefined ? null : Buffer.from(v, "base64");
  }
  get png(): string | undefined {
    return this.data["image/png"];
  }
  get jpeg(): string | undefined {
    return this.data["image/jpeg"];
  }
  get svg(): string | undefined {
    return this.data["image/svg+xml"];
  }
  get html(): string | undefined {
    return this.data["text/html"];
  }
  get markdown(): string | undefined {
    return this.data["text/markdown"];
  }
  get json(): unknown {
    const v = this.data["application/json"];
    return v === undefined ? undefined : JSON.parse(v);
  }
}

/** A file a run created or changed in the context's directory. */
export interface Artifact {
  path: string;
  size: number;
  type: string;
}

/** How a run ended, with everything it produced. */
export interface ExecResult {
  status: Status;
  ok: boolean;
  /** the streams decoded as UTF-8 (invalid bytes replaced) */
  stdout: string;
  stderr: string;
  /** the exact bytes */
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  /** the trailing expression's repr, null when none */
  result: string | null;
  data: Record<string, string> | null;
  error: ErrorInfo | null;
  executionCount: number;
  incarnation: number;
  duration: number;
  cpuTime: number;
  stateLost: boolean;
  cause: string | null;
  /** the run ended with SystemExit (sys.exit): the exit status a script
   * would have (0-255); null otherwise */
  exitCode: number | null;
  truncated: boolean;
  dropped: Record<string, number> | null;
  previousDeath: string | null;
  ctx: string;
  runId: number;
  displays: Result[];
  mainResult: Result | null;
  /** displays, then the main result (E2B's Execution.results) */
  results: Result[];
  artifacts: Artifact[];
}

/** A context as ctx.list reports it (INFO). */
export interface ContextInfo {
  name: string;
  cwd: string;
  state: "idle" | "busy" | "dead" | string;
  pid: number;
  incarnation: number;
  created: number;
  executionCount: number;
  queued: number;
  rss: number;
  pss: number;
  tier: string;
  policy: Record<string, unknown>;
  lastDeath: string | null;
}

export interface HelloInfo {
  server: string;
  version: string;
  protocol: number;
  versions: number[];
  pid: number;
  instance: string;
  limits: Record<string, unknown>;
  tiers: Record<string, string[]>;
  identity: Record<string, unknown>;
  preloads: Record<string, unknown>;
}

export interface StatsInfo {
  uptime: number;
  heldBytes: Record<string, number>;
  contexts: Record<string, number>;
  counters: Record<string, number>;
  limits: Record<string, unknown>;
  preloads: Record<string, unknown>;
}

export interface Completion {
  matches: string[];
  cursorStart: number;
  cursorEnd: number;
  metadata: Record<string, unknown>;
}

export interface Inspection {
  found: boolean;
  data: Record<string, string>;
  metadata: Record<string, unknown>;
}

export interface Completeness {
  status: "complete" | "incomplete" | "invalid" | "unknown" | string;
  indent: string;
}

const num = (v: unknown): number => (typeof v === "number" ? v : typeof v === "bigint" ? Number(v) : 0);
const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
const obj = (v: unknown): Record<string, any> => (v && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array) ? (v as Record<string, any>) : {});

/** ContextInfo from an INFO map. */
export function parseContext(m: unknown): ContextInfo {
  const o = obj(m);
  if (typeof o.name !== "string") throw new ProtocolError(`malformed context info ${JSON.stringify(m)}`);
  return {
    name: o.name,
    cwd: str(o.cwd) ?? "",
    state: str(o.state) ?? "idle",
    pid: num(o.pid),
    incarnation: num(o.incarnation),
    created: num(o.created),
    executionCount: num(o.execution_count),
    queued: num(o.queued),
    rss: num(o.rss),
    pss: num(o.pss),
    tier: str(o.tier) ?? "unsafe",
    policy: obj(o.policy),
    lastDeath: str(o.last_death),
  };
}

export function parseHello(m: Msg): HelloInfo {
  if (m.server !== "ctxd" || typeof m.pid !== "number") throw new ProtocolError("not a ctxd hello reply");
  const tiers: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(obj(m.tiers))) tiers[k] = Array.isArray(v) ? v.map(String) : [];
  return {
    server: "ctxd",
    version: str(m.version) ?? "",
    protocol: num(m.protocol) || 1,
    versions: Array.isArray(m.versions) ? m.versions.map(num) : [1],
    pid: m.pid,
    instance: str(m.instance) ?? "",
    limits: obj(m.limits),
    tiers,
    identity: obj(m.identity),
    preloads: obj(m.preloads),
  };
}

export function parseStats(m: Msg): StatsInfo {
  return {
    uptime: num(m.uptime),
    heldBytes: obj(m.held_bytes),
    contexts: obj(m.contexts),
    counters: obj(m.counters),
    limits: obj(m.limits),
    preloads: obj(m.preloads),
  };
}

export function parseCompletion(m: Msg): Completion {
  if (!Array.isArray(m.matches)) throw new ProtocolError("complete reply without matches");
  return { matches: m.matches.map(String), cursorStart: num(m.cursor_start), cursorEnd: num(m.cursor_end), metadata: obj(m.metadata) };
}

export function parseInspection(m: Msg): Inspection {
  return { found: m.found === true, data: obj(m.data), metadata: obj(m.metadata) };
}

export function parseCompleteness(m: Msg): Completeness {
  return { status: str(m.status) ?? "unknown", indent: str(m.indent) ?? "" };
}

export { num, str, obj };
