// The Daytona-compatible CodeInterpreter: runCode's {stdout, stderr, error},
// its callbacks, timeout, contexts.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { CodeInterpreter, CtxdTimeoutError, CtxdError } from "../dist/index.js";
import { Daemon } from "./daemon.mjs";

let d, ci;
before(async () => {
  d = await new Daemon().start();
  ci = new CodeInterpreter({ endpoint: d.endpoint });
});
after(async () => {
  await ci.close();
  await d.stop();
});

test("runCode: stdout, stderr, streamed callbacks, state kept", async () => {
  const out = [];
  const err = [];
  const r = await ci.runCode("import sys\nx = 41\nprint(x + 1)\nprint('warn', file=sys.stderr)", {
    onStdout: (m) => out.push(m.output),
    onStderr: (m) => err.push(m.output),
  });
  assert.deepStrictEqual(r, { stdout: "42\n", stderr: "warn\n" });
  assert.deepStrictEqual(out, ["42\n"]);
  assert.deepStrictEqual(err, ["warn\n"]);
  assert.equal((await ci.runCode("print(x)")).stdout, "41\n");
  assert.equal((await ci.runCode("x")).result, "41");
});

test("runCode: an error is reported in the result and to onError", async () => {
  const seen = [];
  const r = await ci.runCode("raise ValueError('bad value')", { onError: (e) => seen.push(e) });
  assert.equal(r.error.name, "ValueError");
  assert.equal(r.error.value, "bad value");
  assert.match(r.error.traceback, /ValueError: bad value/);
  assert.deepStrictEqual(seen, [r.error]);
});

test("runCode: envs for one run; a timeout rejects with DaytonaTimeoutError", async () => {
  assert.equal((await ci.runCode("import os\nprint(os.environ['K'])", { envs: { K: "v" } })).stdout, "v\n");
  await assert.rejects(ci.runCode("while True: pass", { timeout: 0.3 }), (e) => e instanceof CtxdTimeoutError && /timed out/.test(e.message));
  await assert.rejects(ci.runCode("1", { timeout: -1 }), CtxdError);
});

test("contexts: createContext(cwd), listContexts without default, deleteContext", async () => {
  const ctx = await ci.createContext(d.dir);
  assert.equal(ctx.cwd, d.dir);
  assert.equal(ctx.language, "python");
  assert.equal((await ci.runCode("import os\nprint(os.getcwd())", { context: ctx })).stdout, d.dir + "\n");
  assert.equal((await ci.runCode("print('x' in globals())", { context: ctx })).stdout, "False\n");
  const list = await ci.listContexts();
  assert.deepStrictEqual(list.map((c) => c.id), [ctx.id]);
  await ci.deleteContext(ctx);
  assert.deepStrictEqual(await ci.listContexts(), []);
  await assert.rejects(ci.runCode("1", { context: ctx }), (e) => e.code === "unknown_context" && /^Failed to run code: /.test(e.message));
});
