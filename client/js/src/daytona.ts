/**
 * A Daytona-compatible surface: code written for the Daytona TypeScript
 * SDK's `sandbox.codeInterpreter` (runCode, createContext, listContexts,
 * deleteContext and the OutputMessage / ExecutionError / ExecutionResult /
 * InterpreterContext shapes) runs against ctxd:
 *
 *   const ci = new CodeInterpreter();              // or new CodeInterpreter({ endpoint })
 *   const r = await ci.runCode("x = 41\nprint(x + 1)");
 *   r.stdout                                       // "42\n"
 *
 * Semantics, as Daytona documents them (and as client/python/ctxd/daytona.py
 * has them): runCode runs in the default context unless `context` names one
 * made with createContext(); timeout is in seconds, undefined means 10
 * minutes, 0 none, and a run past it rejects with DaytonaTimeoutError;
 * onStdout / onStderr receive {output} while the code runs, onError an
 * ExecutionError {name, value, traceback} when it raised; listContexts()
 * returns the contexts made by users (not "default"). ctxd specifics: a worker
 * that died during the run gives error {name: "WorkerProcessError"}, a run
 * ended by a restart, delete or shutdown {name: "ExecutionAborted"}; the
 * result carries `result`, the trailing expression's repr.
 */
import { Client, ClientOptions } from "./client.js";
import { CtxdError, CtxdTimeoutError } from "./errors.js";
import { ContextInfo, ExecResult } from "./types.js";

export const DaytonaError = CtxdError;
export const DaytonaTimeoutError = CtxdTimeoutError;

export const DEFAULT_TIMEOUT = 600;

export interface OutputMessage {
  output: string;
}

export interface ExecutionError {
  /** exception class name, e.g. "ValueError" */
  name: string;
  value: string;
  traceback?: string;
}

export interface ExecutionResult {
  stdout: string;
  stderr: string;
  error?: ExecutionError;
  /** ctxd extension: the trailing expression's repr */
  result?: string;
}

export interface InterpreterContext {
  id: string;
  cwd: string;
  language: string;
  active: boolean;
  createdAt?: Date;
}

export interface RunCodeOptions {
  context?: InterpreterContext;
  envs?: Record<string, string>;
  /** seconds; undefined: 10 minutes; 0: none */
  timeout?: number;
  onStdout?: (m: OutputMessage) => unknown;
  onStderr?: (m: OutputMessage) => unknown;
  onError?: (e: ExecutionError) => unknown;
}

function toContext(info: ContextInfo): InterpreterContext {
  return {
    id: info.name,
    cwd: info.cwd,
    language: "python",
    active: info.state !== "dead",
    createdAt: info.created ? new Date(info.created * 1000) : undefined,
  };
}

function prefixed(e: unknown, prefix: string): unknown {
  if (!(e instanceof CtxdError)) return e;
  const err = new (e.constructor as new (m: string, c?: string) => CtxdError)(`${prefix}${e.message}`, e.code);
  err.code = e.code;
  (err as Error & { cause?: unknown }).cause = e;
  return err;
}

function executionError(r: ExecResult): ExecutionError | undefined {
  if (r.error) return { name: r.error.ename, value: r.error.evalue, traceback: r.error.traceback.join("\n") };
  if (r.status === "died") return { name: "WorkerProcessError", value: r.cause ?? "the worker process died", traceback: "" };
  if (r.status === "aborted" || r.status === "shutdown") return { name: "ExecutionAborted", value: r.cause ?? `the run ended: ${r.status}`, traceback: "" };
  return undefined;
}

/** Handles Python code execution in ctxd contexts, with Daytona's names. */
export class CodeInterpreter {
  private clientP: Promise<Client>;
  private readonly own: boolean;

  /** Over an existing Client, or one it connects to (endpoint: else $CTXD_ENDPOINT) and closes with close(). */
  constructor(opts: { client?: Client; endpoint?: string } & ClientOptions = {}) {
    this.own = !opts.client;
    this.clientP = opts.client ? Promise.resolve(opts.client) : Client.connect(opts.endpoint, opts);
    this.clientP.catch(() => {}); // reported by the first call
  }

  private async client(): Promise<Client> {
    try {
      return await this.clientP;
    } catch (e) {
      throw prefixed(e, "Failed to connect to ctxd: ");
    }
  }

  async close(): Promise<void> {
    if (this.own) (await this.clientP.catch(() => null))?.close();
  }

  /** Executes Python code; resolves to {stdout, stderr, error?}; rejects with DaytonaTimeoutError past the timeout. */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<ExecutionResult> {
    const t = options.timeout ?? DEFAULT_TIMEOUT;
    if (typeof t !== "number" || !(t >= 0)) throw new DaytonaError("Failed to run code: timeout must be greater than or equal to 0");
    const c = await this.client();
    let r: ExecResult;
    try {
      r = await c.execute(code, {
        ctx: options.context?.id,
        timeout: t,
        envs: options.envs,
        onStdout: options.onStdout ? (s) => options.onStdout!({ output: s }) : undefined,
        onStderr: options.onStderr ? (s) => options.onStderr!({ output: s }) : undefined,
      });
    } catch (e) {
      throw prefixed(e, "Failed to run code: ");
    }
    if (r.status === "timeout")
      throw new DaytonaTimeoutError(`Failed to run code: Execution timed out: operation exceeded the configured \`timeout\` of ${t} s. Increase \`timeout\` (0 disables it) or shorten the code.`);
    const error = executionError(r);
    if (error && options.onError) await options.onError(error);
    const out: ExecutionResult = { stdout: r.stdout, stderr: r.stderr };
    if (error) out.error = error;
    if (r.result !== null) out.result = r.result;
    return out;
  }

  /** Creates an isolated interpreter context (its own process), in cwd when given. */
  async createContext(cwd?: string): Promise<InterpreterContext> {
    const c = await this.client();
    try {
      return toContext(await c.createContext({ cwd: cwd ? (await import("node:path")).resolve(cwd) : undefined }));
    } catch (e) {
      throw prefixed(e, "Failed to create interpreter context: ");
    }
  }

  /** The contexts users made ("default" is not listed). */
  async listContexts(): Promise<InterpreterContext[]> {
    const c = await this.client();
    try {
      return (await c.listContexts()).filter((i) => i.name !== "default").map(toContext);
    } catch (e) {
      throw prefixed(e, "Failed to list interpreter contexts: ");
    }
  }

  /** Deletes a context and ends all its processes ("default" cannot be deleted). */
  async deleteContext(context: InterpreterContext): Promise<void> {
    if (!context?.id) throw new DaytonaError("Failed to delete interpreter context: no context given");
    const c = await this.client();
    try {
      await c.deleteContext(context.id);
    } catch (e) {
      throw prefixed(e, "Failed to delete interpreter context: ");
    }
  }
}
