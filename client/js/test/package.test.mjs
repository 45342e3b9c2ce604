// The npm package as a user gets it: `npm pack` of the sources (prepack
// builds dist/), `npm install -g --prefix DIR` of that tarball (dependencies
// from npm's cache when it has them, else the registry), then DIR/bin/ctxd-mcp
// as an MCP host starts it, with README's own mcpServers block.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client as McpClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Daemon, ROOT } from "./daemon.mjs";

const JS = join(ROOT, "client/js");
let tmp, prefix, d;

function npm(args, cwd) {
  return execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), "ctxd-js-pack-"));
  // The sources without dist/: the tarball's dist/ is what prepack built.
  const src = join(tmp, "src");
  mkdirSync(src);
  for (const f of ["package.json", "package-lock.json", "README.md", "tsconfig.json", "src"]) cpSync(join(JS, f), join(src, f), { recursive: true });
  symlinkSync(join(JS, "node_modules"), join(src, "node_modules"));
  npm(["pack", "--silent", "--pack-destination", tmp], src);
  const tarball = join(tmp, readdirSync(tmp).find((f) => /^ctxd-.*\.tgz$/.test(f)));
  prefix = join(tmp, "prefix");
  const install = ["install", "-g", "--prefix", prefix, "--no-audit", "--no-fund", tarball];
  try {
    npm([...install, "--offline"], tmp);
  } catch {
    npm([...install, "--prefer-offline"], tmp); // npm's cache lacked a dependency's metadata: the registry
  }
  // Where ctxd-mcp finds the daemon without CTXD_ENDPOINT: $XDG_RUNTIME_DIR/ctxd/ctxd.sock.
  d = new Daemon();
  mkdirSync(join(d.dir, "ctxd"), { mode: 0o700 });
  d.endpoint = `ipc://${d.dir}/ctxd/ctxd.sock`;
  await d.start();
});

after(async () => {
  await d?.stop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test("npm install -g of the npm pack tarball gives a working bin/ctxd-mcp, no dev dependencies", () => {
  const bin = join(prefix, "bin/ctxd-mcp");
  assert.ok(existsSync(bin), "no bin/ctxd-mcp");
  assert.match(execFileSync(bin, ["--help"], { encoding: "utf8" }), /^usage: ctxd-mcp[^]*run_python/);
  const pkg = join(prefix, "lib/node_modules/ctxd");
  assert.ok(existsSync(join(pkg, "dist/index.d.ts")));
  assert.ok(!existsSync(join(pkg, "src")) && !existsSync(join(pkg, "node_modules/typescript")));
  assert.match(readFileSync(join(pkg, "dist/mcp-main.js"), "utf8"), /^#!\/usr\/bin\/env node\n/);
});

/** README.md's mcpServers block (the first JSON block that has one). */
function readmeBlock() {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  for (const m of readme.matchAll(/```json\n([^]*?)```/g)) {
    const j = JSON.parse(m[1]);
    if (j.mcpServers) return j.mcpServers;
  }
  throw new Error("README.md has no mcpServers block");
}

test("README's mcpServers block, started as a host starts it, runs code", async () => {
  const { ctxd } = readmeBlock();
  assert.equal(ctxd.command, "ctxd-mcp"); // the installed command, found on the host's PATH
  // The host's environment: the installed bin on PATH, the user's runtime directory (a host passes only some variables).
  const env = { ...(ctxd.env ?? {}), PATH: `${prefix}/bin:${process.env.PATH}`, XDG_RUNTIME_DIR: d.dir };
  const c = new McpClient({ name: "readme-host", version: "1" });
  await c.connect(new StdioClientTransport({ command: ctxd.command, args: ctxd.args ?? [], env, stderr: "pipe" }));
  try {
    const r = await c.callTool({ name: "run_python", arguments: { code: "print('hi')\n6 * 7" } });
    assert.ok(!r.isError, JSON.stringify(r));
    assert.deepStrictEqual(r.content.map((x) => x.text), ["[stdout]\nhi\n", "[result]\n42"]);
  } finally {
    await c.close();
  }
});
