"""Figures 2 and 3: a new context ready (create -> first x = 1 done, in
each tier, with spare workers, against ipykernel's start) and a fork of a
context holding 200 MB ready."""

import os
import time

from .common import GAP_MS, SPARES, log, pct
from .daemon import Daemon, cbench
from .procfs import daemon_pids, minor_faults, on_cpu0, pss_of


def first_run_faults(d, n):
    """Page faults of a new context's first x = 1 (its worker a spare, made
    and warmed up ahead): each a copy-on-write copy of a page the zygote
    shares, or a first touch; n creations GAP_MS apart, then deleted."""
    out = []
    for i in range(n):
        time.sleep(GAP_MS / 1e3)
        pid = d.c.req("ctx.create", name=f"pf{i}")["ctx"]["pid"]
        f0 = minor_faults(pid)
        d.c.run("x = 1", f"pf{i}")
        out.append(minor_faults(pid) - f0)
    for i in range(n):
        d.c.req("ctx.delete", ctx=f"pf{i}")
    return out


def delete_contexts(d):
    """Deletes every context of daemon d but its default one."""
    for x in d.c.contexts():
        if x["name"] != "default":
            d.c.req("ctx.delete", ctx=x["name"])


class Ready:
    """The creation figures, a part of Bench."""

    # 2 ------------------------------------------------------------------------
    def ready(self):
        """ctx.create -> first x = 1 done: a fork each, a spare taken, the
        local and sandbox tiers, and ipykernel's start. With --compare, that
        build's daemons too, each through its own client, in blocks
        alternating with this build's (which goes first changes each
        block), so both see the same VM."""
        f = self.fig("ready")
        n = self.n(200, 20)
        f["preloads"] = self.d.hello.get("preloads")
        alt = ", the --compare build alternating" if self.a.compare else ""
        log(f"ready: {n} x (ctx.create -> first x = 1 done), preloads {f['preloads']}{alt}")
        old = None
        try:
            if self.a.compare:
                old = Daemon(os.path.abspath(self.a.compare), self.tmp, name="ready-old")
                self.alternate(f, "ctxd", self.d, old, "rd", n, clean_each=False)
                # the same with every process of both daemons (a new worker
                # inherits it) and the client on CPU 0: no placement, so
                # what shows is the CPU a creation costs
                if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
                    log(f"ready: {n} x again, everything on CPU 0{alt}")
                    with on_cpu0(daemon_pids(self.d) + daemon_pids(old)):
                        self.alternate(f, "ctxd_one_cpu", self.d, old, "r1", n,
                                       clean_each=False)
            else:
                f["ctxd"] = cbench(self.build, "create", self.d.endpoint, "rd", n)["ready"]
                self.clean_contexts()
            self.ready_spares(f, n)
            # confined: policy set-up; namespaces + root
            for tier in ("local", "sandbox"):
                log(f"ready: {n} x {tier} tier{alt}")
                if old:
                    self.alternate(f, tier, self.d, old, tier[:3], n, tier)
                    continue
                f[tier] = cbench(self.build, "create", self.d.endpoint, tier[:3], n,
                                 tier)["ready"]
                self.clean_contexts()
        finally:
            if old:
                old.stop()
        if self.ipy:
            kn = self.n(10, 2)
            log(f"ready: {kn} x ipykernel start -> first x = 1 done")
            v = []
            for _ in range(kn):
                t0 = time.perf_counter()
                k = self.kernel()
                k.execute("x = 1")
                v.append(time.perf_counter() - t0)
                self.drop_kernel(k)
            f["ipykernel"] = v

    def ready_spares(self, f, n):
        """The same with spare workers, one creation every GAP_MS (each
        finds a spare ready), on a daemon of its own (and one of the
        --compare build, alternating); then the page faults of a new
        context's first x = 1 on each."""
        alt = ", the --compare build alternating" if self.a.compare else ""
        log(f"ready: {n} x with --spare-workers {SPARES}, {GAP_MS} ms apart{alt}")
        extra = ("--spare-workers", str(SPARES))
        d = Daemon(self.build, self.tmp, name="spares", extra=extra)
        old = None
        try:
            if self.a.compare:
                old = Daemon(os.path.abspath(self.a.compare), self.tmp, name="spares-old",
                             extra=extra)
            time.sleep(0.5)  # their spares are made
            if old:
                self.alternate(f, "ctxd_spares", d, old, "sp", n, "-", GAP_MS, clean_each=False)
            else:
                f["ctxd_spares"] = cbench(self.build, "create", d.endpoint, "sp", n, "-",
                                          GAP_MS)["ready"]
            f["first_run_faults"] = first_run_faults(d, self.n(20, 3))
            if old:
                f["first_run_faults_old"] = first_run_faults(old, self.n(20, 3))
        finally:
            d.stop()
            if old:
                old.stop()
        log(f"ready: page faults of a new context's first x = 1 (a spare taken): median "
            f"{pct(f['first_run_faults'], .5):.0f}"
            + (f", old {pct(f['first_run_faults_old'], .5):.0f}" if old else ""))

    def alternate(self, f, key, new, old, prefix, n, *args, clean_each=True):
        """n creations (ctxd-bench create PREFIX COUNT ARGS) on daemon new
        by this build's client into f[key], and n on old by the --compare
        build's into f[key + "_old"], in blocks whose first build changes
        each block. The contexts made are deleted after each block
        (clean_each) or at the end."""
        compare = os.path.abspath(self.a.compare)
        f[key], f[key + "_old"] = [], []
        blocks = 8 if n >= 40 else 2
        f.setdefault("compare_blocks", {})[key] = blocks  # equal blocks
        pair = ((self.build, new, key), (compare, old, key + "_old"))
        for b in range(blocks):
            for build, d, k in (pair if b % 2 == 0 else pair[::-1]):
                f[k] += cbench(build, "create", d.endpoint, f"{prefix}{b}", max(1, n // blocks),
                               *args)["ready"]
                if clean_each:
                    delete_contexts(d)
        if not clean_each:
            delete_contexts(new)
            delete_contexts(old)

    # 3 ------------------------------------------------------------------------
    def fork(self):
        f = self.fig("fork")
        n = self.n(20, 3)
        c = self.d.c
        c.req("ctx.create", name="big")
        try:
            c.run("import numpy as np\n"
                  "arrs = [np.ones(25_000_000 // 4) for _ in range(4)]\n"
                  "assert sum(a.nbytes for a in arrs) == 200_000_000", "big")
            f["holding"] = "200 MB of numpy arrays (4 x 50 MB, float64)"
        except RuntimeError:
            c.run("arrs = [bytearray(b'x' * 50_000_000) for _ in range(4)]", "big")
            f["holding"] = "200 MB of bytearrays (numpy is not installed)"
        src = next(x for x in c.contexts() if x["name"] == "big")["pid"]
        time.sleep(0.5)
        f["pss_source_alone"] = pss_of(src)
        log(f"fork: {n} forks of a context holding {f['holding']}")
        v = []
        for i in range(n):
            t0 = time.perf_counter()
            info = c.req("ctx.fork", ctx="big", name=f"fk{i}")["ctx"]
            v.append(time.perf_counter() - t0)
            if i == 0:
                time.sleep(0.2)
                f["pss_source_plus_fork"] = pss_of(src) + pss_of(info["pid"])
                r = c.run("float(arrs[0][:10].sum()) if hasattr(arrs[0], 'sum') "
                          "else len(arrs[0])", f"fk{i}")
                f["fork_sees_arrays"] = r["status"] == "ok"
            c.req("ctx.delete", ctx=f"fk{i}")
        f["ctxd"] = v
        c.req("ctx.delete", ctx="big")
