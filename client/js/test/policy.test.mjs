// ctxd-mcp's bounds: what a client may ask for against the operator's tier
// and policy, and which existing contexts are within them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Bounds, PolicyError } from "../dist/policy.js";

const op = new Bounds("local", {
  network_access: false,
  timeout: 30,
  allowed_imports: ["math", "json"],
  filesystem_write_roots: ["/srv/work"],
}, ["/srv/work"]);

test("a client narrows: stricter tier, smaller caps, subsets, paths under the roots", () => {
  assert.deepStrictEqual(op.request(undefined, undefined, undefined), { tier: "local", policy: op.policy });
  const r = op.request("sandbox", { timeout: 10, allowed_imports: ["math"], filesystem_write_roots: ["/srv/work/a"], memory_bytes: 1 << 26 }, "/srv/work/a");
  assert.equal(r.tier, "sandbox");
  assert.deepStrictEqual(r.policy, { network_access: false, timeout: 10, allowed_imports: ["math"], filesystem_write_roots: ["/srv/work/a"], memory_bytes: 1 << 26 });
  assert.equal(op.request("docker", {}, undefined).tier, "sandbox"); // mellea's name
  assert.equal(op.request("static", {}, undefined).tier, "static");
});

test("a client never widens", () => {
  const refused = (tier, policy, cwd, re) => assert.throws(() => op.request(tier, policy, cwd), (e) => e instanceof PolicyError && re.test(e.message));
  refused("unsafe", {}, undefined, /tier unsafe is wider than the server's local/);
  refused("local_unsafe", {}, undefined, /wider/);
  refused(undefined, { network_access: true }, undefined, /network_access must stay false/);
  refused(undefined, { timeout: 31 }, undefined, /timeout at most 30/);
  refused(undefined, { timeout: "1" }, undefined, /timeout at most 30/);
  refused(undefined, { allowed_imports: ["os"] }, undefined, /allowed_imports may only hold/);
  refused(undefined, { filesystem_write_roots: ["/srv/workshop"] }, undefined, /must lie under/);
  refused(undefined, { filesystem_write_roots: ["/"] }, undefined, /must lie under/);
  refused(undefined, { packages: ["x"] }, undefined, /install_packages/);
  refused(undefined, {}, "/etc", /cwd must lie under/);
  refused("nonsense", {}, undefined, /unknown tier/);
  assert.throws(() => new Bounds("local", { no_such_field: 1 }), /unknown policy field/);
});

test("existing contexts are checked against the bounds", () => {
  assert.equal(op.violation("local", { network_access: false, timeout: 30, allowed_imports: ["math"], filesystem_write_roots: ["/srv/work"] }), null);
  assert.match(op.violation("unsafe", {}), /tier unsafe is wider/);
  assert.match(op.violation("local", { network_access: false, timeout: 30, allowed_imports: ["math"] }), /leaves filesystem_write_roots unset/);
  assert.match(op.violation("sandbox", { network_access: false, timeout: 60, allowed_imports: [], filesystem_write_roots: ["/srv/work"] }), /timeout at most 30/);
  const open = new Bounds("unsafe");
  assert.ok(open.open);
  assert.equal(open.violation("unsafe", {}), null);
  assert.deepStrictEqual(open.request(undefined, { timeout: 5 }, undefined), { tier: "unsafe", policy: { timeout: 5 } });
});

test("the defaults: sandbox at widest, no cwd a client may choose", () => {
  const dflt = new Bounds();
  assert.equal(dflt.tier, "sandbox");
  assert.deepStrictEqual(dflt.tiers, ["static", "sandbox"]);
  assert.throws(() => dflt.request("unsafe", {}, undefined), /tier unsafe is wider than the server's sandbox/);
  assert.throws(() => dflt.request("local", {}, undefined), /wider/);
  assert.match(dflt.violation("unsafe", {}), /wider/);
  // Even the unsafe tier gives a client no cwd without a root.
  assert.throws(() => new Bounds("unsafe").request(undefined, {}, "/anywhere"), /does not let clients choose a cwd/);
});

test("cwd roots: component by component, never through . or ..", () => {
  const b = new Bounds("sandbox", {}, ["/srv/mcp"]);
  assert.equal(b.request(undefined, {}, "/srv/mcp").cwd, "/srv/mcp");
  assert.equal(b.request(undefined, {}, "/srv/mcp/a/b").cwd, "/srv/mcp/a/b");
  assert.equal(b.request(undefined, {}, "a/b").cwd, "/srv/mcp/a/b");
  for (const p of ["/srv/mcp/..", "/srv/mcp/../etc", "/srv/mcp/a/../../x", "/srv/mcp/./a", "/srv/mcp//a", "/srv/mcpx", "/srv", "..", "../x", "a/../../x", "/etc", ""])
    assert.throws(() => b.request(undefined, {}, p), /cwd must lie under/, p);
  assert.throws(() => op.request(undefined, { filesystem_write_roots: ["/srv/work/../../etc"] }, undefined), /must lie under/);
  assert.throws(() => new Bounds("sandbox", {}, ["/srv/../x"]), /cwd root/);
});
