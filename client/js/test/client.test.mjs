// The client against the real daemon: runs and their streamed callbacks,
// interrupts, AbortSignal, contexts, files, queries, 100 MB of output, bad
// input, and a daemon that dies with requests in flight.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import * as zmq from "zeromq";
import { Client, RefusedError, NotFoundError, TooLargeError, UnreachableError, CtxdError, ClosedError, encode } from "../dist/index.js";
import { Daemon } from "./daemon.mjs";

let d, c;
before(async () => {
  d = await new Daemon().start();
  c = await d.client();
});
after(async () => {
  await d.stop();
});

test("hello and stats", async () => {
  const h = await c.hello();
  assert.equal(h.server, "ctxd");
  assert.equal(h.protocol, 1);
  assert.match(h.instance, /^[0-9a-f]{32}$/);
  assert.ok(h.limits.max_request_bytes > 0);
  const s = await c.stats();
  assert.ok(s.uptime >= 0);
  assert.ok(s.counters.requests >= 1);
});

test("execute: stdout, stderr, result, error, execution count", async () => {
  const r = await c.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\nx = 20\nx * 2 + 2");
  assert.equal(r.status, "ok");
  assert.ok(r.ok);
  assert.equal(r.stdout, "out\n");
  assert.equal(r.stderr, "err\n");
  assert.equal(r.result, "42");
  assert.equal(r.data["text/plain"], "42");
  assert.ok(r.executionCount >= 1);
  const e = await c.execute("x / 0");
  assert.equal(e.status, "error");
  assert.equal(e.error.ename, "ZeroDivisionError");
  assert.match(e.error.traceback.at(-1), /ZeroDivisionError: division by zero/);
  assert.equal((await c.execute("x")).result, "20"); // globals kept
});

test("execute: syntax ipython runs magics and !cmd; python (the context's default) does not", async () => {
  const r = await c.execute("x = !echo hi\nx[0]", { syntax: "ipython" });
  assert.equal(r.status, "ok", JSON.stringify(r.error));
  assert.equal(r.result, "'hi'");
  const p = await c.execute("%pwd");
  assert.equal(p.status, "error");
  assert.equal(p.error.ename, "SyntaxError");
});

test("sys.exit ends a run with exitCode, no traceback, globals kept", async () => {
  const e = await c.execute("import sys\ny = 5\nsys.exit(3)");
  assert.equal(e.status, "error");
  assert.equal(e.exitCode, 3);
  assert.equal(e.error, null);
  const z = await c.execute("sys.exit()");
  assert.equal(z.status, "ok");
  assert.equal(z.exitCode, 0);
  const r = await c.execute("y");
  assert.equal(r.result, "5");
  assert.equal(r.exitCode, null);
});

test("callbacks arrive while the code still runs, in order", async () => {
  // The code waits for a file the onStdout callback makes: it can end only if
  // the callback fired before the run was done.
  const flag = join(d.dir, "go-" + Date.now());
  const seen = [];
  const code = `import os, time, sys
print('first', flush=True)
while not os.path.exists(${JSON.stringify(flag)}): time.sleep(0.01)
print('second', file=sys.stderr, flush=True)
'end'`;
  const r = await c.execute(code, {
    timeout: 60,
    onAccepted: () => seen.push("accepted"),
    onStdout: (s) => {
      seen.push("stdout:" + s);
      writeFileSync(flag, "");
    },
    onStderr: (s) => seen.push("stderr:" + s),
    onResult: (v) => seen.push("result:" + v.text),
  });
  assert.equal(r.status, "ok");
  assert.deepStrictEqual(seen, ["accepted", "stdout:first\n", "stderr:second\n", "result:'end'"]);
});

test("a character split across chunks is reassembled; invalid bytes become U+FFFD", async () => {
  const got = [];
  const r = await c.execute("import os\nos.write(1, b'\\xc3'); os.write(1, b'\\xa9\\n\\xff')", { onStdout: (s) => got.push(s) });
  assert.equal(r.stdout, "é\n\ufffd");
  assert.equal(got.join(""), "é\n\ufffd");
  assert.deepStrictEqual([...r.stdoutBytes], [0xc3, 0xa9, 0x0a, 0xff]);
});

test("interrupt: the running run ends interrupted, globals kept", async () => {
  await c.execute("kept = 7");
  let run;
  const started = new Promise((res) => {
    run = c.submit("import time\nprint('running', flush=True)\nwhile True: time.sleep(0.01)", { onStdout: res });
  });
  await started;
  assert.equal(await c.interrupt("default", run), true);
  const r = await run;
  assert.equal(r.status, "interrupted");
  assert.equal(r.error.ename, "KeyboardInterrupt");
  assert.equal((await c.execute("kept")).result, "7");
  assert.equal(await c.interrupt("default"), false); // nothing runs now
});

test("Run.interrupt before the run starts lands when it starts", async () => {
  const ctx = (await c.createContext()).name;
  const first = c.submit("import time\ntime.sleep(0.5)", { ctx });
  const second = c.submit("import time\nwhile True: time.sleep(0.01)", { ctx });
  second.interrupt(); // queued behind the first: not started yet
  assert.equal((await first).status, "ok");
  assert.equal((await second).status, "interrupted");
  await c.deleteContext(ctx);
});

test("AbortSignal: aborting a run rejects it and interrupts it in the daemon", async () => {
  const ac = new AbortController();
  const p = c.execute("import time\nprint('go', flush=True)\nwhile True: time.sleep(0.01)", { signal: ac.signal, onStdout: () => ac.abort() });
  await assert.rejects(p, { name: "AbortError" });
  // The run was interrupted: the next run on the context is not stuck behind it.
  const r = await c.execute("1 + 1", { timeout: 30 });
  assert.equal(r.result, "2");
  const pre = new AbortController();
  pre.abort();
  await assert.rejects(c.execute("1", { signal: pre.signal }), { name: "AbortError" });
  await assert.rejects(c.listContexts({ signal: pre.signal }), { name: "AbortError" });
});

test("a callback that throws stops the run and rejects with its error", async () => {
  const p = c.execute("import time\nprint('x', flush=True)\nwhile True: time.sleep(0.01)", {
    onStdout: () => {
      throw new Error("from the callback");
    },
  });
  await assert.rejects(p, /from the callback/);
  assert.equal((await c.execute("3", { timeout: 30 })).result, "3");
});

test("timeout: status timeout, KeyboardInterrupt, globals kept", async () => {
  await c.execute("t_kept = 1");
  const r = await c.execute("while True: pass", { timeout: 0.3 });
  assert.equal(r.status, "timeout");
  assert.equal(r.stateLost, false);
  assert.equal((await c.execute("t_kept")).result, "1");
});

test("envs, silent, onInput, displays and figures", async () => {
  const e = await c.execute("import os\nos.environ['ONLY_HERE']", { envs: { ONLY_HERE: "yes" } });
  assert.equal(e.result, "'yes'");
  assert.equal((await c.execute("import os\nos.environ.get('ONLY_HERE')")).result, null);
  const s = await c.execute("5", { silent: true });
  assert.equal(s.result, null);
  const prompts = [];
  const i = await c.execute("name = input('who? ')\nname.upper()", {
    onInput: async (prompt, password) => {
      prompts.push([prompt, password]);
      return "ada";
    },
  });
  assert.deepStrictEqual(prompts, [["who? ", false]]);
  assert.equal(i.result, "'ADA'");
  const declined = await c.execute("input()", { onInput: () => null });
  assert.equal(declined.error.ename, "EOFError");
  const shown = [];
  const f = await c.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nNone", { onDisplay: (x) => shown.push(x) });
  assert.equal(f.status, "ok");
  assert.equal(shown.length, 1);
  const png = shown[0].image("image/png");
  assert.deepStrictEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);
  assert.equal(f.displays.length, 1);
});

test("contexts: create, list, fork, restart, delete", async () => {
  const a = await c.createContext({ name: "js-a", env: { MARK: "a" } });
  assert.equal(a.name, "js-a");
  assert.equal(a.state, "idle");
  await c.execute("v = [1, 2]", { ctx: a });
  const names = (await c.listContexts()).map((x) => x.name);
  assert.ok(names.includes("js-a") && names.includes("default"));
  const f = await c.forkContext("js-a", "js-a-fork");
  assert.equal(f.name, "js-a-fork");
  assert.equal((await c.execute("v.append(3); v", { ctx: "js-a-fork" })).result, "[1, 2, 3]");
  assert.equal((await c.execute("v", { ctx: "js-a" })).result, "[1, 2]");
  assert.equal((await c.execute("import os; os.environ['MARK']", { ctx: "js-a" })).result, "'a'");
  const r = await c.restartContext("js-a");
  assert.equal(r.executionCount, 0);
  assert.equal((await c.execute("v", { ctx: "js-a" })).error.ename, "NameError");
  await assert.rejects(c.createContext({ name: "js-a" }), (e) => e instanceof RefusedError && e.code === "exists");
  await c.deleteContext("js-a");
  await c.deleteContext(f);
  await assert.rejects(c.execute("1", { ctx: "js-a" }), NotFoundError);
  await assert.rejects(c.deleteContext("default"), (e) => e.code === "forbidden");
});

test("two contexts run in parallel", async () => {
  const a = await c.createContext();
  const b = await c.createContext();
  const flag = join(d.dir, "par-" + Date.now());
  // a waits for a file that only b's run makes: both must run at once.
  const pa = c.execute(`import os, time\nwhile not os.path.exists(${JSON.stringify(flag)}): time.sleep(0.01)\n'a'`, { ctx: a, timeout: 60 });
  const pb = c.execute(`open(${JSON.stringify(flag)}, 'w').close()\n'b'`, { ctx: b });
  const [ra, rb] = await Promise.all([pa, pb]);
  assert.equal(ra.result, "'a'");
  assert.equal(rb.result, "'b'");
  await c.deleteContext(a);
  await c.deleteContext(b);
});

test("files: 9 MB in 4 MiB chunks both ways, from bytes and from a stream", async () => {
  const data = Buffer.alloc(9 * 1024 * 1024 + 17);
  for (let i = 0; i < data.length; i++) data[i] = (i * 31 + (i >> 12)) & 0xff;
  assert.equal(await c.putFile("default", "big.bin", data), data.length);
  const chunks = [];
  for await (const ch of c.readFile("default", "big.bin")) chunks.push(ch.length);
  assert.deepStrictEqual(chunks, [4194304, 4194304, 1048593]);
  assert.ok((await c.getFile("default", "big.bin")).equals(data));
  // A stream of odd-sized pieces is re-chunked.
  const pieces = [];
  for (let i = 0; i < data.length; i += 1000003) pieces.push(data.subarray(i, i + 1000003));
  assert.equal(await c.putFile("default", "streamed.bin", Readable.from(pieces)), data.length);
  const r = await c.execute("import hashlib\nhashlib.sha256(open('streamed.bin','rb').read()).hexdigest()");
  assert.equal(r.result, `'${createHash("sha256").update(data).digest("hex")}'`);
  assert.equal(await c.putFile("default", "empty.txt", Buffer.alloc(0)), 0);
  assert.equal((await c.getFile("default", "empty.txt")).length, 0);
  const local = join(d.dir, "local.txt");
  writeFileSync(local, "from a local file");
  await c.putFile("default", "copied.txt", { path: local });
  assert.equal((await c.getFile("default", "copied.txt")).toString(), "from a local file");
  await assert.rejects(c.getFile("default", "../etc/passwd"), (e) => e.code === "bad_path");
  await assert.rejects(c.getFile("default", "/etc/passwd"), (e) => e.code === "bad_path");
  await assert.rejects(c.getFile("default", "nope.txt"), (e) => e.code === "not_found");
});

test("complete, inspect, isComplete", async () => {
  await c.execute("import os\ndef greet(name):\n    'Say hello.'\n    return name");
  const comp = await c.complete("os.pa");
  assert.ok(comp.matches.includes("os.path"));
  assert.equal(comp.cursorEnd, 5);
  const ins = await c.inspect("greet", 5);
  assert.equal(ins.found, true);
  assert.match(ins.data["text/plain"], /Say hello/);
  assert.equal((await c.isComplete("for i in range(3):")).status, "incomplete");
  assert.equal((await c.isComplete("x = 1")).status, "complete");
  await assert.rejects(c.complete("abc", 99), (e) => e.code === "bad_field");
});

test("100 MB of output arrives whole: checksum", async () => {
  const code = "import sys\nfor i in range(100):\n    sys.stdout.write((str(i) * 1048576)[:1048576])";
  const want = createHash("sha256");
  for (let i = 0; i < 100; i++) want.update(String(i).repeat(1048576).slice(0, 1048576));
  let streamed = 0;
  const r = await c.execute(code, { timeout: 300, onStdout: (s) => (streamed += s.length) });
  assert.equal(r.status, "ok");
  assert.equal(r.stdoutBytes.length, 100 * 1048576);
  assert.equal(streamed, 100 * 1048576);
  assert.equal(createHash("sha256").update(r.stdoutBytes).digest("hex"), want.digest("hex"));
});

test("bad input: a clear error, nothing lost", async () => {
  assert.throws(() => c.submit(42), TypeError);
  await assert.rejects(c.execute(42), TypeError);
  await assert.rejects(c.execute("1", { timeout: -1 }), RangeError);
  await assert.rejects(c.execute("1", { ctx: "../x" }), (e) => e instanceof RefusedError && e.code === "bad_name");
  await assert.rejects(c.execute("1", { ctx: "no-such" }), NotFoundError);
  await assert.rejects(c.execute("1", { envs: { A: 1 } }), TypeError);
  // Larger than max_request_bytes: refused here, nothing sent.
  const big = "#".repeat(c.helloInfo.limits.max_request_bytes + 1);
  await assert.rejects(c.execute(big), TooLargeError);
  // Over max_code_bytes but under max_request_bytes: the daemon's too_large.
  await assert.rejects(c.execute("#".repeat(c.helloInfo.limits.max_code_bytes + 1)), (e) => e.code === "too_large");
  await assert.rejects(c.pipInstall(["six"]), (e) => e.code === "install"); // no package source
  await assert.rejects(c.pipInstall(["--index-url=x"]), (e) => e.code === "bad_field");
  await assert.rejects(c.createContext({ tier: "nonsense" }), (e) => e.code === "bad_field");
  await assert.rejects(c.call("no.such.request"), (e) => e.code === "unknown_type");
  // Garbage from another connection does not disturb this client.
  const raw = new zmq.Dealer({ linger: 0 });
  raw.connect(d.endpoint);
  await raw.send(Buffer.from([0xc1, 0x00]));
  const [reply] = await raw.receive();
  const { decode } = await import("../dist/index.js");
  const m = decode(reply);
  assert.equal(m.t, "err");
  assert.equal(m.code, "bad_frame");
  await raw.send(encode({ v: 1, t: "execute", id: 1, code: 5 }));
  assert.equal(decode((await raw.receive())[0]).code, "bad_field");
  raw.close();
  assert.equal((await c.execute("'still fine'")).result, "'still fine'");
});

test("a dead daemon rejects every pending promise; a closed client rejects new calls", async () => {
  const d2 = await new Daemon().start();
  const c2 = await d2.client({ requestTimeout: 2, liveness: 1 });
  const started = new Promise((res) => {
    c2.__run = c2.execute("import time\nprint('up', flush=True)\ntime.sleep(600)", { onStdout: res });
  });
  const run = c2.__run;
  run.catch(() => {});
  await started;
  const q = c2.complete("x", undefined, { ctx: "default" }); // queued behind the run
  q.catch(() => {});
  await d2.kill();
  await assert.rejects(run, (e) => e instanceof CtxdError && ["disconnected", "unreachable"].includes(e.code));
  await assert.rejects(q, (e) => e instanceof CtxdError && ["disconnected", "unreachable"].includes(e.code));
  await assert.rejects(c2.listContexts(), UnreachableError); // no reply within requestTimeout
  c2.close();
  await assert.rejects(c2.listContexts(), ClosedError);
  await d2.stop();
  await assert.rejects(Client.connect(d2.endpoint, { requestTimeout: 1 }), UnreachableError);
});

test("liveness: a daemon that stops answering (SIGSTOP) ends the runs in flight", async () => {
  const d3 = await new Daemon().start();
  const c3 = await d3.client({ requestTimeout: 1, liveness: 0.5 });
  try {
    let run;
    const started = new Promise((res) => {
      run = c3.execute("import time\nprint('up', flush=True)\ntime.sleep(600)", { onStdout: res });
    });
    run.catch(() => {});
    await started;
    process.kill(d3.proc.pid, "SIGSTOP"); // the supervisor only: its socket stays open
    try {
      await assert.rejects(run, (e) => e instanceof UnreachableError && /stopped answering/.test(e.message));
    } finally {
      process.kill(d3.proc.pid, "SIGCONT");
    }
    assert.equal((await c3.execute("'back'", { ctx: "other-" + Date.now() }).catch((e) => e)).code, "unknown_context");
  } finally {
    await d3.stop();
  }
});
