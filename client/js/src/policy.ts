/**
 * The operator's bounds on the contexts an MCP client may use: a tier and a
 * policy (PROTOCOL.md section 5, "Tiers and policies") set on ctxd-mcp's
 * command line. A client may ask for a stricter tier and narrower policy
 * values, never wider ones; a context made by someone else is used only when
 * its tier and policy are within the bounds.
 */

/** How narrow each tier is (higher: narrower); mellea's names map onto ctxd's. */
const TIER_RANK: Record<string, number> = { unsafe: 0, local_unsafe: 0, local: 1, sandbox: 2, docker: 2, docker_unsafe: 2, static: 3 };
const CANONICAL: Record<string, string> = { local_unsafe: "unsafe", docker: "sandbox", docker_unsafe: "sandbox" };

/** Policy fields by how a narrower value looks. */
const BOOLS = ["env_var_access", "network_access", "subprocess_execution"];
const CAPS = ["timeout", "memory_bytes", "max_processes", "cpu_seconds", "file_size_bytes", "disk_bytes", "stdout_max_bytes", "stderr_max_bytes"];
const SUBSETS = ["env", "allowed_imports"];
const ROOTS = ["filesystem_write_roots", "filesystem_read_roots"];
export const POLICY_FIELDS = [...BOOLS, ...CAPS, ...SUBSETS, ...ROOTS];

export type Policy = Record<string, unknown>;

export class PolicyError extends Error {}

export function canonicalTier(t: string): string {
  if (!(t in TIER_RANK)) throw new PolicyError(`unknown tier ${JSON.stringify(t)} (static, unsafe, local, sandbox)`);
  return CANONICAL[t] ?? t;
}

/** The components of an absolute path without ".", ".." or empty ones (a trailing "/" aside), or null: such a path names one place by its text alone. */
function components(p: string): string[] | null {
  if (typeof p !== "string" || !p.startsWith("/") || p.includes("\0")) return null;
  const parts = p.slice(1).replace(/\/$/, "").split("/");
  if (parts.length === 1 && parts[0] === "") return [];
  return parts.some((c) => c === "" || c === "." || c === "..") ? null : parts;
}

/** p lies under root (or is root), component by component; a path with "..", "." or empty components never does. */
export function under(p: string, root: string): boolean {
  const pc = components(p), rc = components(root);
  return pc !== null && rc !== null && pc.length >= rc.length && rc.every((c, i) => pc[i] === c);
}

/** Why value (for field) is wider than the operator's bound, or null when it is not. */
function wider(field: string, value: unknown, bound: unknown): string | null {
  if (bound === undefined) return null;
  if (BOOLS.includes(field)) return bound === false && value !== false ? `${field} must stay false` : null;
  if (CAPS.includes(field)) return typeof value !== "number" || value > (bound as number) ? `${field} at most ${bound}` : null;
  if (SUBSETS.includes(field)) {
    if (!Array.isArray(value)) return `${field} must be a list within ${JSON.stringify(bound)}`;
    const out = value.filter((v) => !(bound as unknown[]).includes(v));
    return out.length ? `${field} may only hold ${JSON.stringify(bound)} (not ${JSON.stringify(out)})` : null;
  }
  if (ROOTS.includes(field)) {
    if (!Array.isArray(value)) return `${field} must be a list of paths under ${JSON.stringify(bound)}`;
    const out = value.filter((v) => typeof v !== "string" || !(bound as string[]).some((r) => under(v, r)));
    return out.length ? `${field} must lie under ${JSON.stringify(bound)} (not ${JSON.stringify(out)})` : null;
  }
  return `${field} is not a policy field a client may set`;
}

/** The tiers from narrowest to widest. */
export const TIERS = ["static", "sandbox", "local", "unsafe"];

export class Bounds {
  readonly tier: string;
  constructor(
    tier = "sandbox",
    readonly policy: Policy = {},
    /** directories a client's cwd must lie under; none: a client may not choose a cwd (its context gets a private directory of the daemon's) */
    readonly cwdRoots: string[] = [],
  ) {
    this.tier = canonicalTier(tier);
    for (const k of Object.keys(policy)) if (!POLICY_FIELDS.includes(k) && k !== "packages") throw new PolicyError(`unknown policy field ${JSON.stringify(k)}`);
    for (const r of cwdRoots) if (components(r) === null) throw new PolicyError(`cwd root ${JSON.stringify(r)} must be an absolute path without ".", ".." or empty components`);
  }

  /** The tiers a client may ask for: the server's and the narrower ones (what the tool schema offers). */
  get tiers(): string[] {
    return TIERS.filter((t) => TIER_RANK[t] >= TIER_RANK[this.tier]);
  }

  /** The cwd a client's path names: an absolute one as it is, a relative one under the first root; PolicyError unless it lies under a root. */
  cwd(cwd: string): string {
    if (!this.cwdRoots.length) throw new PolicyError("this server does not let clients choose a cwd (its contexts get private directories; the operator's --cwd-root DIR allows one under DIR)");
    const abs = cwd.startsWith("/") || cwd === "" ? cwd : this.cwdRoots[0].replace(/\/$/, "") + "/" + cwd;
    if (!this.cwdRoots.some((r) => under(abs, r))) throw new PolicyError(`cwd must lie under ${JSON.stringify(this.cwdRoots)} (an absolute path without ".", ".." or empty components, or one relative to the first)`);
    return abs;
  }

  /** Nothing is bounded: the unsafe tier and no policy. */
  get open(): boolean {
    return this.tier === "unsafe" && Object.keys(this.policy).length === 0;
  }

  /** The tier and policy a new context gets from what a client asked (PolicyError when it would widen the bounds). */
  request(tier: string | undefined, policy: Policy | undefined, cwd: string | undefined): { tier: string; policy: Policy; cwd?: string } {
    const t = tier === undefined ? this.tier : canonicalTier(tier);
    if (TIER_RANK[t] < TIER_RANK[this.tier]) throw new PolicyError(`tier ${t} is wider than the server's ${this.tier}`);
    const merged: Policy = { ...this.policy };
    for (const [k, v] of Object.entries(policy ?? {})) {
      if (k === "packages") throw new PolicyError("policy.packages: use install_packages");
      const why = wider(k, v, this.policy[k]);
      if (why) throw new PolicyError(`policy.${why}`);
      merged[k] = v;
    }
    if (cwd === undefined) return { tier: t, policy: merged };
    return { tier: t, policy: merged, cwd: this.cwd(cwd) };
  }

  /** Why a context (its INFO tier and policy) is outside the bounds, or null. */
  violation(tier: string, policy: Policy): string | null {
    let t: string;
    try {
      t = canonicalTier(tier);
    } catch {
      return `unknown tier ${tier}`;
    }
    if (TIER_RANK[t] < TIER_RANK[this.tier]) return `its tier ${t} is wider than the server's ${this.tier}`;
    for (const [k, bound] of Object.entries(this.policy)) {
      if (k === "packages") continue;
      if (!(k in policy)) return `its policy leaves ${k} unset (the server's bound is ${JSON.stringify(bound)})`;
      const why = wider(k, policy[k], bound);
      if (why) return `its policy.${why}`;
    }
    return null;
  }
}
