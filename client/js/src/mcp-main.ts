#!/usr/bin/env node
/**
 * ctxd-mcp: the MCP server's command. Over stdio by default (what an MCP
 * host starts), or streamable HTTP with --http PORT.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, IncomingMessage, ServerResponse } from "node:http";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { Client } from "./client.js";
import { createMcpServer, hostEndpoint, McpOptions } from "./mcp.js";
import { Bounds } from "./policy.js";

const HELP = `usage: ctxd-mcp [options]

An MCP server that runs Python in ctxd contexts (tools: run_python,
create_context, list_contexts, delete_context, restart_context, interrupt,
fork_context, install_packages, upload_file, download_file).

  --endpoint ENDPOINT   the daemon (default $CTXD_ENDPOINT, else
                        ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock; without
                        XDG_RUNTIME_DIR, as MCP hosts often start servers,
                        /run/user/UID/ctxd/ctxd.sock when it exists, else
                        /run/ctxd/ctxd.sock); tcp:// uses CurveZMQ with
                        $CTXD_SERVER_KEY[_FILE] / $CTXD_CLIENT_KEY[_FILE]
  --http PORT           serve streamable HTTP on PORT (path /mcp) instead of stdio
  --host HOST           the HTTP address (default 127.0.0.1)
  --tier TIER           the widest tier of the contexts a client makes or uses:
                        sandbox (default; local when the daemon cannot make
                        sandboxes: a non-root daemon, hello.identity), local,
                        static, or unsafe (the daemon's own user: root for a
                        root daemon). A client (the model) may ask for a
                        stricter tier, never a wider one: the tools' schema
                        offers only these. The tier in use is said on stderr
  --policy JSON|@FILE   the policy of those contexts (PROTOCOL.md, "Tiers and
                        policies"); a client may only narrow its fields
  --cwd-root DIR        a client may choose a context cwd under DIR (absolute,
                        or relative to the first DIR; no "..", "." or empty
                        components, and the daemon refuses symbolic links);
                        repeatable. Without it a client cannot choose a cwd:
                        each context gets a private directory of the daemon's
  --allow-cwd DIR       the same as --cwd-root
  --context NAME        run_python's context when none is named (default mcp)
  --timeout SECONDS     a run's timeout when the call gives none (default 60)
  --max-timeout SECONDS the largest timeout a call may ask for (default 600)
  --max-output CHARS    stdout/stderr characters returned per run (default 100000)
  -h, --help            this text
`;

function fail(msg: string): never {
  process.stderr.write(`ctxd-mcp: ${msg}\n`);
  process.exit(2);
}

function parse(argv: string[]) {
  const o = { endpoint: undefined as string | undefined, http: undefined as number | undefined, host: "127.0.0.1", tier: undefined as string | undefined, policy: {} as Record<string, unknown>, cwd: [] as string[], mcp: {} as McpOptions };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : fail(`${a} needs a value`));
    const num = () => {
      const v = Number(val());
      if (!Number.isFinite(v) || v <= 0) fail(`${a} needs a positive number`);
      return v;
    };
    switch (a) {
      case "-h":
      case "--help":
        process.stdout.write(HELP);
        process.exit(0);
      case "--endpoint":
        o.endpoint = val();
        break;
      case "--http":
        o.http = num();
        break;
      case "--host":
        o.host = val();
        break;
      case "--tier":
        o.tier = val();
        break;
      case "--policy": {
        const v = val();
        try {
          o.policy = JSON.parse(v.startsWith("@") ? readFileSync(v.slice(1), "utf8") : v);
        } catch (e) {
          fail(`--policy: ${(e as Error).message}`);
        }
        if (!o.policy || typeof o.policy !== "object" || Array.isArray(o.policy)) fail("--policy is a JSON object");
        break;
      }
      case "--cwd-root":
      case "--allow-cwd":
        o.cwd.push(val());
        break;
      case "--context":
        o.mcp.defaultContext = val();
        break;
      case "--timeout":
        o.mcp.timeout = num();
        break;
      case "--max-timeout":
        o.mcp.maxTimeout = num();
        break;
      case "--max-output":
        o.mcp.maxOutput = num();
        break;
      default:
        fail(`unknown option ${a} (see --help)`);
    }
  }
  return o;
}

/** Streamable HTTP: one MCP session (server and transport) per client session, all over one ctxd client. */
function serveHttp(client: Client, opts: McpOptions, host: string, port: number): void {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const http = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    try {
      if (!req.url || new URL(req.url, "http://x").pathname !== "/mcp") {
        res.writeHead(404).end("not found: the MCP endpoint is /mcp\n");
        return;
      }
      const sid = req.headers["mcp-session-id"];
      let t = typeof sid === "string" ? sessions.get(sid) : undefined;
      if (!t) {
        if (sid !== undefined || req.method !== "POST") {
          res.writeHead(sid === undefined ? 400 : 404, { "content-type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "no such session" }, id: null }));
          return;
        }
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => void sessions.set(id, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) sessions.delete(transport.sessionId);
        };
        await createMcpServer(client, opts).connect(transport);
        t = transport;
      }
      await t.handleRequest(req, res);
    } catch (e) {
      process.stderr.write(`ctxd-mcp: ${(e as Error).stack}\n`);
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  http.listen(port, host, () => process.stderr.write(`ctxd-mcp: streamable HTTP on http://${host}:${port}/mcp\n`));
  const stop = () => {
    http.close();
    for (const t of sessions.values()) void t.close();
    client.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

/** The tier when the operator named none: sandbox, or local when the daemon cannot make sandboxes (a non-root daemon: hello.identity.daemon_root false). */
function defaultTier(client: Client): { tier: string; why: string } {
  const id = client.helloInfo?.identity ?? {};
  if (id.daemon_root === false) return { tier: "local", why: "the default; the daemon is not root, so it cannot make sandbox contexts" };
  return { tier: "sandbox", why: "the default" };
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  try {
    new Bounds(o.tier, o.policy, o.cwd); // the options' errors before connecting
  } catch (e) {
    fail((e as Error).message);
  }
  let client: Client;
  try {
    client = await Client.connect(o.endpoint ?? hostEndpoint());
  } catch (e) {
    fail((e as Error).message);
  }
  const chosen = o.tier !== undefined ? { tier: o.tier, why: "--tier" } : defaultTier(client);
  const bounds = new Bounds(chosen.tier, o.policy, o.cwd);
  process.stderr.write(
    `ctxd-mcp: contexts are ${bounds.tier} at widest (${chosen.why}); ` +
      (bounds.cwdRoots.length ? `a client's cwd only under ${bounds.cwdRoots.join(", ")}\n` : "each in a private directory (no --cwd-root)\n"),
  );
  const mcp = { ...o.mcp, bounds };
  if (o.http !== undefined) return serveHttp(client, mcp, o.host, o.http);
  const server = createMcpServer(client, mcp);
  const transport = new StdioServerTransport();
  transport.onclose = () => {
    client.close();
    process.exit(0);
  };
  process.stdin.on("end", () => {
    client.close();
    process.exit(0);
  });
  await server.connect(transport);
}

void main();
