/**
 * ctxd as an MCP server: the tools an agent needs to run Python in
 * persistent contexts (run_python, create_context, list_contexts,
 * delete_context, restart_context, interrupt, fork_context,
 * install_packages, upload_file, download_file), on the official SDK, over
 * the TypeScript client. run_python streams stdout and stderr while the code
 * runs (progress notifications when the caller gave a progress token, and
 * logging notifications), and returns each part of the output labelled
 * (stdout, stderr, result, display, error, status): text for the output and
 * the result and image content for figures and other images.
 *
 * The operator sets the tier and policy of the contexts (Bounds); a client
 * can narrow them, never widen them, and a context outside them is refused.
 */
import { existsSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { Client } from "./client.js";
import { CtxdError } from "./errors.js";
import { Bounds, PolicyError } from "./policy.js";
import { ContextInfo, ExecResult } from "./types.js";

export const SERVER_VERSION = "0.1.0";

/**
 * The daemon ctxd-mcp talks to when it is given no --endpoint: $CTXD_ENDPOINT,
 * else the default socket (PROTOCOL.md section 1). An MCP host often starts
 * its servers with only a few variables, without XDG_RUNTIME_DIR: then the
 * user's runtime directory /run/user/UID is tried before /run/ctxd, when a
 * socket is there.
 */
export function hostEndpoint(env: NodeJS.ProcessEnv = process.env, uid: number | undefined = process.getuid?.(), exists: (path: string) => boolean = existsSync): string {
  if (env.CTXD_ENDPOINT) return env.CTXD_ENDPOINT;
  if (env.XDG_RUNTIME_DIR) return `ipc://${env.XDG_RUNTIME_DIR}/ctxd/ctxd.sock`;
  const user = `/run/user/${uid}/ctxd/ctxd.sock`;
  if (uid !== undefined && exists(user)) return `ipc://${user}`;
  return "ipc:///run/ctxd/ctxd.sock";
}

export interface McpOptions {
  /** the tier, policy and cwd bounds (default: sandbox, no policy, no cwd a client may choose) */
  bounds?: Bounds;
  /** the context run_python uses when none is named (default "mcp") */
  defaultContext?: string;
  /** seconds a run may take when the call gives no timeout (default 60) */
  timeout?: number;
  /** the largest timeout a call may ask for (default 600) */
  maxTimeout?: number;
  /** characters of stdout/stderr returned per stream; the rest is cut with a note (default 100000) */
  maxOutput?: number;
  /** bytes download_file returns at most (default 8 MiB) */
  maxFile?: number;
}

type Meta = Record<string, unknown>;
type Content = { type: "text"; text: string; _meta?: Meta } | { type: "image"; data: string; mimeType: string; _meta?: Meta };
type ToolResult = { content: Content[]; isError?: boolean };

const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

function text(t: string, isError = false): ToolResult {
  return isError ? { content: [{ type: "text", text: t }], isError } : { content: [{ type: "text", text: t }] };
}

/** The _meta key that names which part of a run's output a content item is. */
export const PART_KEY = "ctxd/part";

/**
 * One labelled part of run_python's result: the text starts with the label
 * on a line of its own ("[stdout]", "[stderr]", "[result]", "[display]",
 * "[error]", "[status]"), which is what a model reads, and _meta carries the
 * same label for a host that sorts the parts.
 */
function part(label: "stdout" | "stderr" | "result" | "display" | "error" | "status", body: string): Content {
  return { type: "text", text: `[${label}]\n${body}`, _meta: { [PART_KEY]: label } };
}

function cut(s: string, max: number, what: string): string {
  return s.length <= max ? s : s.slice(0, max) + `\n[${what}: ${s.length - max} more characters not shown]`;
}

function contextJson(i: ContextInfo): Record<string, unknown> {
  return { name: i.name, state: i.state, cwd: i.cwd, tier: i.tier, policy: i.policy, execution_count: i.executionCount, queued: i.queued, incarnation: i.incarnation, last_death: i.lastDeath ?? undefined };
}

/** A tool's failure as the tool's result (MCP: isError), with the daemon's code. */
function failure(e: unknown): ToolResult {
  if (e instanceof PolicyError) return text(`refused by the server's bounds: ${e.message}`, true);
  if (e instanceof CtxdError) return text(`ctxd ${e.code}: ${e.message}`, true);
  throw e;
}

/** The ctxd MCP server over one client (several sessions may share the client). */
export function createMcpServer(client: Client, opts: McpOptions = {}): McpServer {
  const bounds = opts.bounds ?? new Bounds();
  const defaultCtx = opts.defaultContext ?? "mcp";
  const defTimeout = opts.timeout ?? 60;
  const maxTimeout = opts.maxTimeout ?? 600;
  const maxOutput = opts.maxOutput ?? 100000;
  const maxFile = opts.maxFile ?? 8 * 1024 * 1024;
  const server = new McpServer({ name: "ctxd", version: SERVER_VERSION }, { capabilities: { logging: {} } });

  /**
   * The context name to use (the server's default when none is named),
   * refused when outside the server's bounds. A missing context is made with
   * the server's bounds when make is "yes", or "default" and none was named;
   * otherwise it is an unknown_context error, which for "default" says how to
   * make it (create_context, and hint: the calling tool's own way).
   */
  async function usable(name: string | undefined, make: "no" | "default" | "yes" = "no", hint = ""): Promise<string> {
    const ctx = name ?? defaultCtx;
    const info = (await client.listContexts()).find((i) => i.name === ctx);
    if (!info) {
      if (make === "no") throw new CtxdError(`no context ${JSON.stringify(ctx)}`, "unknown_context");
      if (make === "default" && name !== undefined)
        throw new CtxdError(`no context ${JSON.stringify(ctx)}: make it first with create_context {"name": ${JSON.stringify(ctx)}}${hint}`, "unknown_context");
      const want = bounds.request(undefined, undefined, undefined);
      try {
        await client.createContext({ name: ctx, tier: want.tier, policy: Object.keys(want.policy).length ? (want.policy as any) : undefined });
      } catch (e) {
        if (!(e instanceof CtxdError && e.code === "exists")) throw e; // made meanwhile: checked below
        return usable(ctx);
      }
      return ctx;
    }
    const why = bounds.violation(info.tier, info.policy);
    if (why) throw new PolicyError(`context ${JSON.stringify(ctx)} is outside the server's bounds: ${why}`);
    return ctx;
  }

  const ctxArg = z.string().min(1).max(64).optional().describe(`context name (default "${defaultCtx}", made on first use; any other must exist: create_context makes it)`);

  server.registerTool(
    "run_python",
    {
      title: "Run Python",
      description:
        "Runs Python code (IPython syntax by default, as in a Jupyter cell: %timeit, %pip install, !ls) in a persistent context (globals, imports and files are kept between calls) and returns its stdout, stderr, " +
        "the value of a trailing expression, figures as images, and the traceback if it raised, each part labelled on its first line " +
        "([stdout], [stderr], [result], [display], [error], [status]). stdout is streamed while the code runs.",
      inputSchema: {
        code: z.string().describe("Python source"),
        context: ctxArg,
        create: z.boolean().optional().describe(`make the named context when it does not exist (default false: an unknown context is an error; "${defaultCtx}" is always made on first use)`),
        syntax: z
          .enum(["ipython", "python"])
          .optional()
          .describe('"ipython" (the default: a Jupyter cell, with %magics such as %timeit and %pip install, and !shell commands) or "python" (plain Python)'),
        timeout: z.number().positive().max(maxTimeout).optional().describe(`seconds (default ${defTimeout}, at most ${maxTimeout}); past it the code gets KeyboardInterrupt`),
      },
    },
    async ({ code, context, create, timeout, syntax }, extra) => {
      let ctx: string;
      try {
        ctx = await usable(context, create ? "yes" : "default", `, or call run_python with "create": true`);
      } catch (e) {
        return failure(e);
      }
      const token = extra._meta?.progressToken;
      let n = 0;
      // Sent in order, and all before the tool's result.
      let sent: Promise<unknown> = Promise.resolve();
      const notify = (m: Parameters<typeof extra.sendNotification>[0]) => {
        sent = sent.then(() => extra.sendNotification(m)).catch(() => {});
      };
      const stream = (name: string) => (s: string) => {
        if (token !== undefined) notify({ method: "notifications/progress", params: { progressToken: token, progress: ++n, message: s } });
        notify({ method: "notifications/message", params: { level: name === "stderr" ? "warning" : "info", logger: name, data: s } });
      };
      let r: ExecResult;
      try {
        r = await client.execute(code, { ctx, timeout: timeout ?? defTimeout, syntax: syntax ?? "ipython", onStdout: stream("stdout"), onStderr: stream("stderr"), signal: extra.signal });
      } catch (e) {
        await sent;
        return failure(e);
      }
      await sent;
      const content: Content[] = [];
      if (r.stdout) content.push(part("stdout", cut(r.stdout, maxOutput, "stdout cut")));
      if (r.stderr) content.push(part("stderr", cut(r.stderr, maxOutput, "stderr cut")));
      for (const res of r.results) {
        const kind = res.isMainResult ? "result" : "display";
        const mime = IMAGE_TYPES.find((m) => typeof res.data[m] === "string");
        if (mime) content.push({ type: "image", data: res.data[mime], mimeType: mime, _meta: { [PART_KEY]: kind } });
        else content.push(part(kind, cut(res.text, maxOutput, `${kind} cut`)));
      }
      if (r.error) content.push(part("error", r.error.traceback.join("\n") || `${r.error.ename}: ${r.error.evalue}`));
      if (r.status === "timeout") content.push(part("status", `timed out after ${timeout ?? defTimeout} s${r.stateLost ? "; the context's state was lost" : "; the context's state is kept"}`));
      else if (r.status !== "ok" && r.status !== "error") content.push(part("status", `run ${r.status}${r.cause ? `: ${r.cause}` : ""}`));
      if (r.truncated) content.push(part("status", `output truncated by the daemon: ${JSON.stringify(r.dropped)}`));
      if (!content.length) content.push({ type: "text", text: "[no output]" });
      return r.status === "ok" ? { content } : { content, isError: true };
    },
  );

  server.registerTool(
    "create_context",
    {
      title: "Create a context",
      description: "Starts a new Python context (its own process and globals). tier and policy may only narrow the server's.",
      inputSchema: {
        name: z.string().min(1).max(64).optional().describe("name (generated when absent)"),
        cwd: z
          .string()
          .min(1)
          .max(4096)
          .optional()
          .describe(
            bounds.cwdRoots.length
              ? `working directory under ${bounds.cwdRoots.join(", ")} (absolute, or relative to ${bounds.cwdRoots[0]}; no "..", no symbolic links); default a private directory`
              : "not allowed by this server: each context gets a private directory",
          ),
        // Only the server's tier and narrower ones: the model cannot name a wider one.
        tier: z.enum(bounds.tiers as [string, ...string[]]).optional().describe(`execution tier: ${bounds.tiers.join(", ")} (default the server's: ${bounds.tier})`),
        policy: z.record(z.string(), z.unknown()).optional().describe("policy fields (PROTOCOL.md, Tiers and policies), within the server's"),
      },
    },
    async ({ name, cwd, tier, policy }) => {
      try {
        const want = bounds.request(tier, policy, cwd);
        const info = await client.createContext({ name, cwd: want.cwd, tier: want.tier, policy: Object.keys(want.policy).length ? (want.policy as any) : undefined });
        return text(JSON.stringify(contextJson(info)));
      } catch (e) {
        return failure(e);
      }
    },
  );

  server.registerTool("list_contexts", { title: "List contexts", description: "The daemon's contexts, with state, tier and policy.", inputSchema: {} }, async () => {
    try {
      return text(JSON.stringify((await client.listContexts()).map(contextJson)));
    } catch (e) {
      return failure(e);
    }
  });

  const named = { context: z.string().min(1).max(64).describe("context name") };

  server.registerTool("delete_context", { title: "Delete a context", description: "Ends a context's process; its globals are gone.", inputSchema: named }, async ({ context }) => {
    try {
      await client.deleteContext(await usable(context));
      return text(`deleted ${context}`);
    } catch (e) {
      return failure(e);
    }
  });

  server.registerTool("restart_context", { title: "Restart a context", description: "A fresh interpreter for the context: empty globals.", inputSchema: named }, async ({ context }) => {
    try {
      return text(JSON.stringify(contextJson(await client.restartContext(await usable(context)))));
    } catch (e) {
      return failure(e);
    }
  });

  server.registerTool(
    "interrupt",
    { title: "Interrupt", description: "Raises KeyboardInterrupt in the code running in the context (globals kept).", inputSchema: { context: ctxArg } },
    async ({ context }) => {
      try {
        const hit = await client.interrupt(await usable(context));
        return text(hit ? "interrupted" : "nothing was running");
      } catch (e) {
        return failure(e);
      }
    },
  );

  server.registerTool(
    "fork_context",
    {
      title: "Fork a context",
      description: "Copies a live context (globals, imports, cwd) into a new one, which keeps its tier and policy.",
      inputSchema: { context: z.string().min(1).max(64).describe("the context to copy"), name: z.string().min(1).max(64).optional().describe("the new context's name") },
    },
    async ({ context, name }, extra) => {
      try {
        return text(JSON.stringify(contextJson(await client.forkContext(await usable(context), name, { signal: extra.signal }))));
      } catch (e) {
        return failure(e);
      }
    },
  );

  server.registerTool(
    "install_packages",
    {
      title: "Install packages",
      description: "Installs wheels (e.g. 'name', 'name==1.0') from the daemon's package source into one context.",
      inputSchema: { packages: z.array(z.string().min(1).max(200)).min(1).max(64), context: ctxArg },
    },
    async ({ packages, context }, extra) => {
      try {
        const got = await client.pipInstall(packages, await usable(context, "default"), { signal: extra.signal });
        return text(JSON.stringify(got));
      } catch (e) {
        return failure(e);
      }
    },
  );

  server.registerTool(
    "upload_file",
    {
      title: "Upload a file",
      description: "Writes a file under the context's directory.",
      inputSchema: {
        path: z.string().min(1).describe("relative path in the context's directory"),
        content: z.string().describe("the file's content"),
        encoding: z.enum(["utf8", "base64"]).optional().describe("how content is given (default utf8)"),
        context: ctxArg,
      },
    },
    async ({ path, content, encoding, context }) => {
      try {
        const data = Buffer.from(content, encoding === "base64" ? "base64" : "utf8");
        const size = await client.putFile(await usable(context, "default"), path, data);
        return text(`wrote ${size} bytes to ${path}`);
      } catch (e) {
        return failure(e);
      }
    },
  );

  server.registerTool(
    "download_file",
    {
      title: "Download a file",
      description: `Reads a file under the context's directory (at most ${maxFile} bytes): text as text, images as images, else base64.`,
      inputSchema: { path: z.string().min(1).describe("relative path in the context's directory"), context: ctxArg },
    },
    async ({ path, context }) => {
      try {
        const parts: Buffer[] = [];
        let size = 0;
        for await (const chunk of client.readFile(await usable(context), path)) {
          size += chunk.length;
          if (size > maxFile) return text(`${path} is larger than ${maxFile} bytes: not returned`, true);
          parts.push(chunk);
        }
        const data = Buffer.concat(parts);
        const ext = path.toLowerCase().split(".").pop() ?? "";
        const image = { png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp" }[ext];
        if (image) return { content: [{ type: "image", data: data.toString("base64"), mimeType: image }] };
        const asText = new TextDecoder("utf-8", { fatal: true });
        try {
          return text(asText.decode(data));
        } catch {
          return text(`[base64]\n${data.toString("base64")}`);
        }
      } catch (e) {
        return failure(e);
      }
    },
  );

  return server;
}
