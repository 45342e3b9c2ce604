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
  const open = new Bounds();
  assert.ok(open.open);
  assert.equal(open.violation("unsafe", {}), null);
  assert.deepStrictEqual(open.request(undefined, { timeout: 5 }, "/anywhere"), { tier: "unsafe", policy: { timeout: 5 } });
});
