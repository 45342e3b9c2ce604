/**
 * The events of one run folded into its ExecResult (PROTOCOL.md section 5,
 * execute), as they arrive: each event yields the callbacks to fire now.
 * Stream bytes are decoded incrementally (a character split across chunks is
 * reassembled, invalid bytes become U+FFFD); the bytes of an incomplete
 * character are flushed before a display, result, error or done, so the order
 * of callbacks matches the order of the events.
 */
import { ProtocolError, RefusedError } from "./errors.js";
import { Artifact, ErrorInfo, ExecResult, Msg, Result, STATUSES, Status, num, obj, str } from "./types.js";

export type RunEvent =
  | ["accepted", Msg]
  | ["stdout", string]
  | ["stderr", string]
  | ["display", Result]
  | ["clear_output", boolean]
  | ["input", { prompt: string; password: boolean }]
  | ["result", Result]
  | ["error", ErrorInfo];

type StreamName = "stdout" | "stderr";

function need<T>(m: Msg, k: string, check: (v: unknown) => boolean, what: string): T {
  const v = m[k];
  if (!check(v)) throw new ProtocolError(`daemon sent a ${what} without a valid ${k}`);
  return v as T;
}
const isStr = (v: unknown) => typeof v === "string";
const isBin = (v: unknown) => v instanceof Uint8Array;
const isMap = (v: unknown) => !!v && typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array);

export class RunState {
  chunks: Record<StreamName, Buffer[]> = { stdout: [], stderr: [] };
  texts: Record<StreamName, string[]> = { stdout: [], stderr: [] };
  decoders: Record<StreamName, TextDecoder> = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  result: Result | null = null;
  displays: Result[] = [];
  error: ErrorInfo | null = null;
  accepted: Msg | null = null;
  final: ExecResult | null = null;

  constructor(
    readonly ctx: string,
    readonly runId: number,
  ) {}

  private flush(): RunEvent[] {
    const out: RunEvent[] = [];
    for (const name of ["stdout", "stderr"] as const) {
      const tail = this.decoders[name].decode();
      if (tail) {
        this.texts[name].push(tail);
        out.push([name, tail]);
      }
    }
    return out;
  }

  /** The callbacks msg calls for; sets final at done, throws RefusedError for err. */
  feed(m: Msg): RunEvent[] {
    switch (m.t) {
      case "accepted":
        this.accepted = m;
        return [["accepted", m]];
      case "stream": {
        const name = need<string>(m, "name", isStr, "stream event");
        const data = need<Uint8Array>(m, "data", isBin, "stream event");
        if (name !== "stdout" && name !== "stderr") return [];
        this.chunks[name].push(data as Buffer);
        const text = this.decoders[name].decode(data, { stream: true });
        if (!text) return [];
        this.texts[name].push(text);
        return [[name, text]];
      }
      case "display": {
        const data = need<Record<string, string>>(m, "data", isMap, "display event");
        const d = new Result(String(data["text/plain"] ?? ""), data, 0, obj(m.metadata), str(m.display_id), m.update === true, false);
        this.displays.push(d);
        return [...this.flush(), ["display", d]];
      }
      case "clear_output":
        return [...this.flush(), ["clear_output", m.wait === true]];
      case "input.request": {
        const prompt = need<string>(m, "prompt", isStr, "input.request event");
        return [...this.flush(), ["input", { prompt, password: m.password === true }]];
      }
      case "result": {
        const data = need<Record<string, string>>(m, "data", isMap, "result event");
        if (typeof data["text/plain"] !== "string") throw new ProtocolError("daemon sent a result without text/plain");
        this.result = new Result(data["text/plain"], data, num(m.execution_count));
        return [...this.flush(), ["result", this.result]];
      }
      case "error": {
        const tb = need<unknown[]>(m, "traceback", Array.isArray, "error event");
        this.error = {
          ename: need<string>(m, "ename", isStr, "error event"),
          evalue: need<string>(m, "evalue", isStr, "error event"),
          traceback: tb.map(String),
        };
        return [...this.flush(), ["error", this.error]];
      }
      case "done": {
        const status = need<string>(m, "status", isStr, "done reply");
        if (!(STATUSES as readonly string[]).includes(status)) throw new ProtocolError(`daemon sent an unknown done status ${JSON.stringify(status)}`);
        const out = this.flush();
        const acc = this.accepted ?? {};
        const artifacts: Artifact[] = Array.isArray(m.artifacts)
          ? m.artifacts.filter(isMap).map((a: any) => ({ path: String(a.path ?? ""), size: num(a.size), type: str(a.type) ?? "application/octet-stream" }))
          : [];
        const results = this.result ? [...this.displays, this.result] : [...this.displays];
        this.final = {
          status: status as Status,
          ok: status === "ok",
          stdout: this.texts.stdout.join(""),
          stderr: this.texts.stderr.join(""),
          stdoutBytes: Buffer.concat(this.chunks.stdout),
          stderrBytes: Buffer.concat(this.chunks.stderr),
          result: this.result ? this.result.text : null,
          data: this.result ? this.result.data : null,
          error: this.error,
          executionCount: num(m.execution_count),
          incarnation: num(m.incarnation),
          duration: num(m.duration),
          cpuTime: num(m.cpu_time),
          stateLost: m.state_lost === true,
          cause: str(m.cause),
          exitCode: typeof m.exit_code === "number" ? m.exit_code : null,
          truncated: m.truncated === true,
          dropped: isMap(m.dropped) ? (m.dropped as Record<string, number>) : null,
          previousDeath: str(acc.previous_death),
          ctx: this.ctx,
          runId: this.runId,
          displays: this.displays,
          mainResult: this.result,
          results,
          artifacts,
        };
        return out;
      }
      case "err":
        throw RefusedError.make(String(m.code), String(m.message));
      case "ok":
        throw new ProtocolError("daemon answered execute with 'ok'");
    }
    return []; // an event type from a newer daemon
  }
}
