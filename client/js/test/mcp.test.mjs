// ctxd-mcp through the SDK's own Client: over stdio (list tools, run code,
// an image, a timeout, an error, two contexts, streamed output, the
// operator's bounds) and a streamable HTTP smoke test on 127.0.0.1.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { Daemon, ROOT, freePort } from "./daemon.mjs";
import { hostEndpoint } from "../dist/mcp.js";

const MAIN = join(ROOT, "client/js/dist/mcp-main.js");
let d;
const opened = [];

async function stdioClient(...args) {
  const transport = new StdioClientTransport({ command: process.execPath, args: [MAIN, "--endpoint", d.endpoint, ...args], stderr: "pipe" });
  const c = new McpClient({ name: "ctxd-test", version: "1" });
  await c.connect(transport);
  opened.push(c);
  return c;
}

const texts = (r) => r.content.filter((x) => x.type === "text").map((x) => x.text);

before(async () => {
  d = await new Daemon().start();
});
after(async () => {
  for (const c of opened) await c.close();
  await d.stop();
});

test("tools are listed with JSON schemas", async () => {
  const c = await stdioClient();
  const { tools } = await c.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepStrictEqual(names, ["create_context", "delete_context", "download_file", "fork_context", "install_packages", "interrupt", "list_contexts", "restart_context", "run_python", "upload_file"]);
  const run = tools.find((t) => t.name === "run_python");
  assert.equal(run.inputSchema.type, "object");
  assert.deepStrictEqual(run.inputSchema.required, ["code"]);
  assert.equal(run.inputSchema.properties.timeout.type, "number");
});

test("the daemon without --endpoint: CTXD_ENDPOINT, XDG_RUNTIME_DIR, /run/user/UID when a host passed neither, /run/ctxd", () => {
  const none = () => false;
  assert.equal(hostEndpoint({ CTXD_ENDPOINT: "tcp://h:5555", XDG_RUNTIME_DIR: "/x" }, 1000, none), "tcp://h:5555");
  assert.equal(hostEndpoint({ XDG_RUNTIME_DIR: "/x" }, 1000, none), "ipc:///x/ctxd/ctxd.sock");
  const seen = [];
  const user = (p) => (seen.push(p), p === "/run/user/1000/ctxd/ctxd.sock");
  assert.equal(hostEndpoint({ PATH: "/usr/bin" }, 1000, user), "ipc:///run/user/1000/ctxd/ctxd.sock");
  assert.deepStrictEqual(seen, ["/run/user/1000/ctxd/ctxd.sock"]);
  assert.equal(hostEndpoint({ PATH: "/usr/bin" }, 1000, none), "ipc:///run/ctxd/ctxd.sock");
});

test("run_python: stdout and the result as text, state kept between calls", async () => {
  const c = await stdioClient();
  const r = await c.callTool({ name: "run_python", arguments: { code: "x = 6 * 7\nprint('hello')\nx" } });
  assert.ok(!r.isError);
  assert.deepStrictEqual(texts(r), ["[stdout]\nhello\n", "[result]\n42"]);
  const again = await c.callTool({ name: "run_python", arguments: { code: "x + 1" } });
  assert.deepStrictEqual(texts(again), ["[result]\n43"]);
});

test("run_python: each part is labelled on its first line and in _meta", async () => {
  const c = await stdioClient();
  const r = await c.callTool({ name: "run_python", arguments: { code: "import sys\nprint('out')\nprint('err', file=sys.stderr)\ndisplay('shown')\n'value'" } });
  assert.ok(!r.isError, JSON.stringify(r));
  assert.deepStrictEqual(texts(r), ["[stdout]\nout\n", "[stderr]\nerr\n", "[display]\n'shown'", "[result]\n'value'"]);
  assert.deepStrictEqual(r.content.map((x) => x._meta?.["ctxd/part"]), ["stdout", "stderr", "display", "result"]);
  const e = await c.callTool({ name: "run_python", arguments: { code: "print('before')\nraise ValueError('bad')" } });
  assert.equal(e.isError, true);
  assert.deepStrictEqual(e.content.map((x) => x._meta?.["ctxd/part"]), ["stdout", "error"]);
  assert.match(texts(e)[1], /^\[error\]\nTraceback[^]*ValueError: bad$/);
  const t = await c.callTool({ name: "run_python", arguments: { code: "while True: pass", timeout: 0.3 } });
  assert.deepStrictEqual(t.content.map((x) => x._meta?.["ctxd/part"]), ["error", "status"]);
  assert.match(texts(t)[1], /^\[status\]\ntimed out after 0.3 s/);
  const img = await c.callTool({ name: "run_python", arguments: { code: "import matplotlib.pyplot as plt\nplt.plot([1, 2])" } });
  assert.equal(img.content.find((x) => x.type === "image")._meta["ctxd/part"], "display");
});

test("run_python: IPython syntax by default (magics, !cmd), plain Python on request", async () => {
  const c = await stdioClient("--context", "ipy");
  const sh = await c.callTool({ name: "run_python", arguments: { code: "!echo from-the-shell" } });
  assert.ok(!sh.isError, JSON.stringify(sh));
  assert.match(texts(sh).join(), /from-the-shell/);
  const ti = await c.callTool({ name: "run_python", arguments: { code: "%timeit -n 3 -r 1 sum(range(10))" } });
  assert.ok(!ti.isError, JSON.stringify(ti));
  assert.match(texts(ti).join(), /per loop/);
  const lines = await c.callTool({ name: "run_python", arguments: { code: "got = !printf 'a\\nb\\n'\nlist(got)" } });
  assert.deepStrictEqual(texts(lines), ["[result]\n['a', 'b']"]);
  const plain = await c.callTool({ name: "run_python", arguments: { code: "%time 1", syntax: "python" } });
  assert.equal(plain.isError, true);
  assert.match(texts(plain).join(), /SyntaxError/);
  const schema = (await c.listTools()).tools.find((t) => t.name === "run_python").inputSchema;
  assert.deepStrictEqual(schema.properties.syntax.enum, ["ipython", "python"]);
  await c.callTool({ name: "delete_context", arguments: { context: "ipy" } });
});

test("run_python on an unknown context is an error naming the fix, unless create: true", async () => {
  const c = await stdioClient("--context", "the-default");
  const r = await c.callTool({ name: "run_python", arguments: { code: "1", context: "typo-ctx" } });
  assert.equal(r.isError, true);
  assert.equal(texts(r)[0], 'ctxd unknown_context: no context "typo-ctx": make it first with create_context {"name": "typo-ctx"}, or call run_python with "create": true');
  const up = await c.callTool({ name: "upload_file", arguments: { path: "a.txt", content: "x", context: "typo-ctx" } });
  assert.equal(up.isError, true);
  assert.match(texts(up)[0], /no context "typo-ctx": make it first with create_context/);
  const names = async () => JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).map((x) => x.name);
  assert.ok(!(await names()).includes("typo-ctx"));
  const made = await c.callTool({ name: "run_python", arguments: { code: "6 * 7", context: "typo-ctx", create: true } });
  assert.deepStrictEqual(texts(made), ["[result]\n42"]);
  assert.equal(JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).find((x) => x.name === "typo-ctx").tier, "sandbox");
  // The server's own default context is made on first use.
  assert.deepStrictEqual(texts(await c.callTool({ name: "run_python", arguments: { code: "1 + 1" } })), ["[result]\n2"]);
  assert.ok((await names()).includes("the-default"));
  for (const n of ["typo-ctx", "the-default"]) await c.callTool({ name: "delete_context", arguments: { context: n } });
});

test("run_python: a matplotlib figure comes back as image content", async () => {
  const c = await stdioClient();
  const r = await c.callTool({ name: "run_python", arguments: { code: "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nprint('plotted')" } });
  assert.ok(!r.isError);
  const img = r.content.find((x) => x.type === "image");
  assert.ok(img, JSON.stringify(r.content).slice(0, 300));
  assert.equal(img.mimeType, "image/png");
  assert.deepStrictEqual([...Buffer.from(img.data, "base64").subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  assert.equal(texts(r)[0], "[stdout]\nplotted\n");
});

test("run_python: a timeout and an error are tool errors with what happened", async () => {
  const c = await stdioClient();
  const t = await c.callTool({ name: "run_python", arguments: { code: "kept = 1\nwhile True: pass", timeout: 0.5 } });
  assert.equal(t.isError, true);
  assert.match(texts(t).join("\n"), /KeyboardInterrupt/);
  assert.match(texts(t).join("\n"), /timed out after 0.5 s; the context's state is kept/);
  const e = await c.callTool({ name: "run_python", arguments: { code: "1 / 0" } });
  assert.equal(e.isError, true);
  assert.match(texts(e).join("\n"), /ZeroDivisionError: division by zero/);
  const bad = await c.callTool({ name: "run_python", arguments: { code: 5 } });
  assert.equal(bad.isError, true); // schema validation
});

test("stdout is streamed as progress and logging notifications while the code runs", async () => {
  // The flag file is in the test's directory, which only the daemon's own user sees: the operator's --tier unsafe.
  const c = await stdioClient("--tier", "unsafe", "--context", "stream-unsafe");
  const flag = join(d.dir, "mcp-go-" + Date.now());
  const logs = [];
  c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
  const progress = [];
  // The code waits for a file made when the first progress arrives: it can end only if the progress came while it ran.
  const code = `import os, time\nprint('step 1', flush=True)\nwhile not os.path.exists(${JSON.stringify(flag)}): time.sleep(0.01)\nprint('step 2')`;
  const r = await c.callTool({ name: "run_python", arguments: { code, timeout: 60 } }, undefined, {
    onprogress: (p) => {
      progress.push(p.message);
      writeFileSync(flag, "");
    },
  });
  assert.ok(!r.isError, JSON.stringify(r));
  // Both are sent before the result. The SDK's client runs a notification's
  // handler a microtask after it reads it, but a response at once, and the
  // response removes the call's progress handler: a progress notification
  // read in the same chunk as the result (step 2, printed as the run ends)
  // is dropped there. Logging notifications have no such handler to lose.
  assert.deepStrictEqual(progress, ["step 1\n", "step 2\n"].slice(0, Math.max(1, progress.length)));
  assert.deepStrictEqual(logs.filter((l) => l.logger === "stdout").map((l) => l.data), ["step 1\n", "step 2\n"]);
});

test("two contexts, forked, restarted, deleted; files up and down; interrupt", async () => {
  // local: the sandbox tier refuses ctx.fork (the operator's --tier local allows it).
  const c = await stdioClient("--tier", "local");
  for (const name of ["mcp-a", "mcp-b"]) {
    const r = await c.callTool({ name: "create_context", arguments: { name } });
    assert.equal(JSON.parse(texts(r)[0]).name, name);
  }
  await c.callTool({ name: "run_python", arguments: { code: "v = 'in a'", context: "mcp-a" } });
  const b = await c.callTool({ name: "run_python", arguments: { code: "v", context: "mcp-b" } });
  assert.equal(b.isError, true);
  assert.match(texts(b).join(), /NameError/);
  const list = JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).map((x) => x.name);
  assert.ok(list.includes("mcp-a") && list.includes("mcp-b"));
  await c.callTool({ name: "fork_context", arguments: { context: "mcp-a", name: "mcp-a2" } });
  assert.deepStrictEqual(texts(await c.callTool({ name: "run_python", arguments: { code: "v", context: "mcp-a2" } })), ["[result]\n'in a'"]);
  await c.callTool({ name: "restart_context", arguments: { context: "mcp-a" } });
  assert.equal((await c.callTool({ name: "run_python", arguments: { code: "v", context: "mcp-a" } })).isError, true);
  const up = await c.callTool({ name: "upload_file", arguments: { context: "mcp-b", path: "note.txt", content: "héllo" } });
  assert.match(texts(up)[0], /wrote 6 bytes/);
  assert.deepStrictEqual(texts(await c.callTool({ name: "run_python", arguments: { code: "open('note.txt').read()", context: "mcp-b" } })), ["[result]\n'héllo'"]);
  assert.deepStrictEqual(texts(await c.callTool({ name: "download_file", arguments: { context: "mcp-b", path: "note.txt" } })), ["héllo"]);
  const bin = await c.callTool({ name: "upload_file", arguments: { context: "mcp-b", path: "x.png", content: Buffer.from([0x89, 0x50, 0x4e, 0x47]).toString("base64"), encoding: "base64" } });
  assert.ok(!bin.isError);
  const img = (await c.callTool({ name: "download_file", arguments: { context: "mcp-b", path: "x.png" } })).content[0];
  assert.equal(img.type, "image");
  const esc = await c.callTool({ name: "download_file", arguments: { context: "mcp-b", path: "../../etc/passwd" } });
  assert.equal(esc.isError, true);
  assert.match(texts(esc)[0], /bad_path/);
  assert.equal(texts(await c.callTool({ name: "interrupt", arguments: { context: "mcp-b" } }))[0], "nothing was running");
  const pk = await c.callTool({ name: "install_packages", arguments: { packages: ["six"], context: "mcp-b" } });
  assert.equal(pk.isError, true); // the test daemon has no package source
  assert.match(texts(pk)[0], /install/);
  for (const name of ["mcp-a", "mcp-a2", "mcp-b"]) assert.ok(!(await c.callTool({ name: "delete_context", arguments: { context: name } })).isError);
  assert.equal((await c.callTool({ name: "delete_context", arguments: { context: "mcp-b" } })).isError, true);
});

test("the operator's tier and policy: a client narrows them, never widens them", async () => {
  const c = await stdioClient("--policy", '{"timeout": 5}', "--context", "bounded");
  const r = await c.callTool({ name: "run_python", arguments: { code: "1 + 1" } });
  assert.deepStrictEqual(texts(r), ["[result]\n2"]);
  const info = JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).find((x) => x.name === "bounded");
  assert.equal(info.tier, "sandbox");
  assert.equal(info.policy.timeout, 5);
  const wide = await c.callTool({ name: "create_context", arguments: { name: "wide", policy: { timeout: 50 } } });
  assert.equal(wide.isError, true);
  assert.match(texts(wide)[0], /refused by the server's bounds: policy.timeout at most 5/);
  const cwd = await c.callTool({ name: "create_context", arguments: { name: "elsewhere", cwd: d.dir } });
  assert.equal(cwd.isError, true);
  const narrow = await c.callTool({ name: "create_context", arguments: { name: "narrow", policy: { timeout: 1 } } });
  assert.ok(!narrow.isError, texts(narrow)[0]);
  // "default", made by another client with no policy, is outside these bounds.
  await (await d.client()).execute("1");
  const dflt = await c.callTool({ name: "run_python", arguments: { code: "1", context: "default" } });
  assert.equal(dflt.isError, true);
  assert.match(texts(dflt)[0], /outside the server's bounds/);
  const s = await stdioClient("--tier", "static", "--context", "static-ctx");
  const up = await s.callTool({ name: "create_context", arguments: { name: "unsafe-one", tier: "unsafe" } });
  assert.equal(up.isError, true);
  assert.match(texts(up)[0], /Invalid arguments for tool create_context: .*tier/); // the schema offers only static
  const st = await s.callTool({ name: "run_python", arguments: { code: "import os\nos.system('true')" } });
  assert.ok(!st.isError);
  assert.match(texts(st).join(), /executed|imports/); // static: analysed, not run
  const other = await s.callTool({ name: "run_python", arguments: { code: "1", context: "narrow" } });
  assert.equal(other.isError, true);
  for (const n of ["bounded", "narrow", "static-ctx"]) await c.callTool({ name: "delete_context", arguments: { context: n } });
});

test("streamable HTTP on 127.0.0.1: list tools and run code", async () => {
  const port = await freePort();
  const p = spawn(process.execPath, [MAIN, "--endpoint", d.endpoint, "--http", String(port)], { stdio: ["ignore", "ignore", "pipe"] });
  try {
    await new Promise((res, rej) => {
      p.stderr.on("data", (b) => /streamable HTTP on/.test(b.toString()) && res());
      p.once("exit", (code) => rej(new Error(`ctxd-mcp exited ${code}`)));
    });
    const c = new McpClient({ name: "ctxd-http-test", version: "1" });
    await c.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
    const { tools } = await c.listTools();
    assert.ok(tools.some((t) => t.name === "run_python"));
    const progress = [];
    const r = await c.callTool({ name: "run_python", arguments: { code: "print('over http')\n2 ** 10" } }, undefined, { onprogress: (x) => progress.push(x.message) });
    assert.deepStrictEqual(texts(r), ["[stdout]\nover http\n", "[result]\n1024"]);
    assert.deepStrictEqual(progress, ["over http\n"]);
    await c.close();
    const res = await fetch(`http://127.0.0.1:${port}/mcp`, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream" }, body: "{}" });
    assert.ok(res.status >= 400); // not an initialize request: refused
  } finally {
    p.kill("SIGTERM");
  }
});

test("interrupt tool and a cancelled call both stop a running run, globals kept", async () => {
  const c = await stdioClient("--context", "stoppable");
  await c.callTool({ name: "run_python", arguments: { code: "kept = 'yes'" } });
  let started;
  const up = new Promise((res) => (started = res));
  const running = c.callTool({ name: "run_python", arguments: { code: "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)", timeout: 120 } }, undefined, { onprogress: () => started(), timeout: 120000 });
  await up;
  assert.equal(texts(await c.callTool({ name: "interrupt", arguments: { context: "stoppable" } }))[0], "interrupted");
  const r = await running;
  assert.equal(r.isError, true);
  assert.match(texts(r).join("\n"), /KeyboardInterrupt/);
  // A call the MCP client cancels (notifications/cancelled) interrupts its run.
  const ac = new AbortController();
  const cancelled = c.callTool({ name: "run_python", arguments: { code: "import time\nprint('again', flush=True)\nwhile True: time.sleep(0.01)", timeout: 120 } }, undefined, { signal: ac.signal, onprogress: () => ac.abort(), timeout: 120000 });
  await assert.rejects(cancelled);
  // The context is free again (the run was interrupted, not left looping) and kept its globals.
  assert.deepStrictEqual(texts(await c.callTool({ name: "run_python", arguments: { code: "kept", timeout: 60 } })), ["[result]\n'yes'"]);
  await c.callTool({ name: "delete_context", arguments: { context: "stoppable" } });
});

test("safe defaults: sandbox contexts; the model cannot ask for unsafe nor a cwd outside the server's root", async () => {
  const c = await stdioClient("--context", "safe-default");
  // The tool schema offers no tier wider than the server's.
  const create = (await c.listTools()).tools.find((t) => t.name === "create_context");
  assert.deepStrictEqual([...create.inputSchema.properties.tier.enum].sort(), ["sandbox", "static"]);
  // Root of its own user namespace, mapped to a uid of its own: never the host's root.
  const r = await c.callTool({ name: "run_python", arguments: { code: "open('/proc/self/uid_map').read().split()[:2]" } });
  assert.ok(!r.isError, texts(r).join());
  assert.match(texts(r)[0], /^\[result\]\n\['0', '[1-9][0-9]*'\]$/);
  const info = JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).find((x) => x.name === "safe-default");
  assert.equal(info.tier, "sandbox");
  // A model asking for unsafe (or mellea's name for it) is refused: by the schema, before any context is made.
  for (const tier of ["unsafe", "local_unsafe", "local"]) {
    const u = await c.callTool({ name: "create_context", arguments: { name: "wants-root", tier } });
    assert.equal(u.isError, true, tier);
    assert.match(texts(u)[0], /Invalid arguments for tool create_context: .*tier/);
  }
  // No --cwd-root: no cwd at all, neither the daemon's directory nor /.
  for (const cwd of [d.dir, "/", "/tmp"]) {
    const w = await c.callTool({ name: "create_context", arguments: { name: "elsewhere", cwd } });
    assert.equal(w.isError, true);
    assert.match(texts(w)[0], /does not let clients choose a cwd/);
  }
  const names = JSON.parse(texts(await c.callTool({ name: "list_contexts", arguments: {} }))[0]).map((x) => x.name);
  assert.ok(!names.includes("wants-root") && !names.includes("elsewhere"), JSON.stringify(names));
  await c.callTool({ name: "delete_context", arguments: { context: "safe-default" } });
});

test("--cwd-root: a cwd only under the root, .. and . tricks refused; --tier unsafe is the operator's flag", async () => {
  const root = join(d.dir, "mcp-root");
  mkdirSync(join(root, "work"), { recursive: true });
  chmodSync(root, 0o777);
  chmodSync(join(root, "work"), 0o777);
  const c = await stdioClient("--cwd-root", root);
  for (const cwd of [`${root}/../`, `${root}/work/../..`, `${root}/./work`, `${root}//work`, `${root}-other`, "../etc", "/etc", d.dir]) {
    const w = await c.callTool({ name: "create_context", arguments: { name: "outside", cwd } });
    assert.equal(w.isError, true, cwd);
    assert.match(texts(w)[0], /refused by the server's bounds: cwd must lie under/, cwd);
  }
  const ok = await c.callTool({ name: "create_context", arguments: { name: "inside", cwd: "work" } });
  assert.ok(!ok.isError, texts(ok)[0]);
  assert.equal(JSON.parse(texts(ok)[0]).cwd, join(root, "work"));
  assert.equal(JSON.parse(texts(ok)[0]).tier, "sandbox");
  await c.callTool({ name: "delete_context", arguments: { context: "inside" } });
  // Only the operator widens the tier.
  const u = await stdioClient("--tier", "unsafe", "--context", "operator-unsafe");
  const tiers = (await u.listTools()).tools.find((t) => t.name === "create_context").inputSchema.properties.tier.enum;
  assert.ok(tiers.includes("unsafe"));
  const r = await u.callTool({ name: "create_context", arguments: { name: "operator-unsafe", tier: "unsafe" } });
  assert.equal(JSON.parse(texts(r)[0]).tier, "unsafe");
  await u.callTool({ name: "delete_context", arguments: { context: "operator-unsafe" } });
});
