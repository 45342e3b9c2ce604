"""Figure 8: creation, round trip, listing and memory with 10 to 5,000 idle
contexts alive, ksmd merging pages meanwhile (root: started here, its
settings put back)."""

import os
import time

import msgpack  # Debian: python3-msgpack

from .common import GAP_MS, SPARES, has_option, log, pct
from .daemon import Daemon, cbench
from .procfs import (_comm, children_with, cpu_seconds, kthreads, nofile_limit, on_cpu0,
                     processes, pss_of, zygote_pid)


# ksmd for the scale figure: up to 200,000 pages a second (a full pass over
# 5,000 idle workers' mergeable pages then takes minutes, and a pass over
# what is already merged or skipped much less)
KSM_PAGES_TO_SCAN, KSM_SLEEP_MS = 4000, 20
# while the scale figure measures: the kernel's default rate, a host's
# steady state (at 4,000 pages ksmd takes ~30% of a CPU, and creation's
# p98 was 5.5 ms against 2.4 ms with ksmd stopped; at 100, 2.4-2.6 ms)
KSM_STEADY_PAGES = 100


class Scale:
    """The scale figure, a part of Bench."""

    # 8 ------------------------------------------------------------------------
    def scale(self):
        """The same measures at growing counts of idle contexts, on a daemon
        of its own (room for 5,000, --idle-ttl on so its sweep is part of
        what is measured); the --compare build right after, the same way."""
        f = self.fig("scale")
        counts = [10, 100, 1000, 5000] if not self.q else [5, 20]
        if self.a.counts:
            counts = [int(x) for x in self.a.counts.split(",")]
        builds = [("new", self.build)]
        if self.a.compare:
            builds.append(("old", os.path.abspath(self.a.compare)))
        f["counts"] = counts
        f["load_at_start"] = os.getloadavg()
        self.kdamond = kthreads("kdamond")
        # ksmd runs through the whole figure, both builds, as it would where
        # it is deployed: it merges only what a build marks mergeable
        self.ksmd = Ksmd() if Ksmd.usable() else None
        if self.ksmd:
            self.ksmd.start()
            f["ksmd"] = dict(Ksmd.SETTINGS, pages_to_scan_measuring=KSM_STEADY_PAGES)
        else:
            log("scale: ksmd cannot be started here (root and /sys/kernel/mm/ksm needed): "
                "pages are not merged")
        # What this machine gives any request after GAP_MS of idle: two raw
        # ZeroMQ round trips (the shape of create -> first run), so the
        # creation figures can be read against it (on a VM, waking idle
        # vCPUs costs ~1 ms of it)
        f["paced_floor"] = cbench(self.build, "floor", os.path.join(self.tmp, "pfloor.sock"),
                                  self.n(200, 5), 2, GAP_MS)["rtt"]
        log(f"scale: paced floor (2 raw round trips after {GAP_MS} ms idle) "
            f"{pct(f['paced_floor'], .5) * 1e3:.2f}/{pct(f['paced_floor'], .99) * 1e3:.2f} ms")
        try:
            for tag, build in builds:
                f[tag] = self.scale_one(build, tag, counts)
        finally:
            if self.ksmd:
                self.ksmd.stop()
        f["load_at_end"] = os.getloadavg()

    def scale_one(self, build, tag, counts):
        out = {"build": build, "at": {}}
        # Spare workers where the build has them (--spare-workers): paced
        # creations each find one ready; back-to-back ones outrun them and
        # show a fork's cost.
        spares = has_option(build, "--spare-workers")
        out["spares"] = SPARES if spares else 0
        # the build marks unsafe-tier workers mergeable (KSM)
        merging = bool(self.ksmd) and has_option(build, "--no-page-merging")
        out["page_merging"] = merging
        ksmd_cpu0, wall0 = self.ksmd.cpu() if self.ksmd else 0.0, time.monotonic()
        extra = ("--idle-ttl", "86400") + (("--spare-workers", str(SPARES)) if spares else ())
        # 200 paced creations per count: with the nearest rank, the p99 of
        # 50 would be their slowest one (a single stall of this VM)
        npaced, nburst, nrtt = self.n(200, 5), self.n(50, 5), self.n(500, 50)
        nsample = npaced + nburst  # alive at once while measured
        d = Daemon(build, self.tmp, max_contexts=counts[-1] + nsample + 50, name=f"scale-{tag}",
                   extra=extra)
        c = d.c
        alive, t_fill = 0, 0.0
        try:
            fds0 = len(os.listdir(f"/proc/{d.pid}/fd"))
            out["nofile_limit"] = nofile_limit(d.pid)
            c.req("ctx.create", name="probe")
            per = None
            for n in counts:
                # The supervisor's open-file limit binds before memory does:
                # fill to what fits with room for the creation samples.
                lim = out["nofile_limit"]
                if per and lim:
                    fds_now = len(os.listdir(f"/proc/{d.pid}/fd"))
                    fit = alive + 1 + int((lim - fds_now - 64) / per) - nsample
                    if fit < n:
                        out["capped"] = {"requested": n, "filled_to": fit,
                                         "why": f"open-file limit {lim} at {per:.2f} "
                                                f"descriptors per context"}
                        log(f"scale[{tag}]: {n} would pass the open-file limit {lim} "
                            f"({per:.2f} per context): filling to {fit}")
                        n = fit
                if self.ksmd:  # fast while new contexts are merged
                    self.ksmd.pace(True)
                # fill: create + first x = 1 of each new context (samples too)
                if n - 1 > alive:
                    t0 = time.perf_counter()
                    # a loaded 2-core VM fills at ~6 contexts/s: 1 s each
                    v = cbench(self.build, "create", d.endpoint, f"f{n}", n - 1 - alive,
                               timeout=900 + (n - 1 - alive))["ready"]
                    t_fill += time.perf_counter() - t0
                    alive = n - 1
                    log(f"scale[{tag}]: {alive + 1} contexts alive, fill median "
                        f"{pct(v, .5) * 1e3:.1f} ms")
                at = {}
                if merging:  # the contexts as ksmd leaves them, before anything is measured
                    at["ksm_settle_seconds"] = self.ksmd.settle(timeout=self.n(600, 60))
                    log(f"scale[{tag}] {n}: ksmd made two passes in "
                        f"{at['ksm_settle_seconds']:.0f} s")
                if self.ksmd:  # then at a host's steady pace while measuring
                    self.ksmd.pace(False)
                time.sleep(0.5)  # the fill took the spares: they are made again
                # one at a time, GAP_MS apart (an agent opening a session),
                # then back to back (a burst: past the spares, a fork each)
                kd0, kw0 = sum(map(cpu_seconds, self.kdamond)), time.monotonic()
                v = cbench(self.build, "create", d.endpoint, f"s{n}", npaced, "-", GAP_MS)
                at["kdamond_cpu_share"] = ((sum(map(cpu_seconds, self.kdamond)) - kd0)
                                           / (time.monotonic() - kw0))
                if tag == "new":  # the machine's own p99 with this many contexts alive
                    at["paced_floor"] = cbench(self.build, "floor",
                                               os.path.join(self.tmp, "pfloor.sock"), npaced, 2,
                                               GAP_MS)["rtt"]
                at["create"] = v["ready"]
                if "created" in v:  # the ctx.create reply alone (which half was slow)
                    at["created"] = v["created"]
                at["create_burst"] = cbench(self.build, "create", d.endpoint, f"b{n}",
                                            nburst)["ready"]
                for i in range(npaced):
                    c.req("ctx.delete", ctx=f"s{n}-{i}")
                for i in range(nburst):
                    c.req("ctx.delete", ctx=f"b{n}-{i}")
                # five clients one after the other: on this VM a round trip's
                # speed depends on which vCPUs the processes land on, which
                # one client keeps for its whole run
                at["rtt"] = []
                for _ in range(5):
                    at["rtt"] += cbench(self.build, "rtt", d.endpoint, "probe", nrtt // 5, 20)["rtt"]
                # and with the supervisor, the probe's worker and the client
                # on one CPU: no placement, so what grows with the count shows
                if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
                    probe = c.req("ctx.info", ctx="probe")["ctx"]["pid"]
                    with on_cpu0([d.pid, probe]):
                        at["rtt_one_cpu"] = cbench(self.build, "rtt", d.endpoint, "probe", nrtt,
                                                   20)["rtt"]
                at["fds"] = len(os.listdir(f"/proc/{d.pid}/fd"))
                per = (at["fds"] - fds0) / max(alive + 1, 1)
                for what in ("stats", "ctx.list"):
                    v = []
                    for _ in range(self.n(5, 2)):
                        t0 = time.perf_counter()
                        r = c.req(what)
                        v.append(time.perf_counter() - t0)
                    at[what] = v
                    if what == "ctx.list":
                        cs = list(r["contexts"])
                        at["list_bytes"] = len(msgpack.packb(r))
                        while r.get("next"):  # pages (PROTOCOL.md: ctx.list)
                            r = c.req("ctx.list", after=r["next"])
                            cs += r["contexts"]
                at["alive"] = sum(1 for x in cs if x["pid"] > 0)
                zyg = zygote_pid(d.pid)
                # PSS read here from each worker's smaps_rollup (ctx.list
                # shows cached figures, re-read at a bounded rate)
                t0 = time.perf_counter()
                pss_ctx = sum(pss_of(x["pid"]) for x in cs if x["pid"] > 0)
                at["pss_read_seconds"] = time.perf_counter() - t0
                at["zygote_pss"] = pss_of(zyg) if zyg else 0
                at["supervisor_pss"] = pss_of(d.pid)
                # the spare workers' memory is the daemon's overhead too
                at["spares_pss"] = sum(pss_of(p) for p in children_with(d.pid, b"(spare)"))
                at["pss_per_context"] = (pss_ctx + at["zygote_pss"] + at["supervisor_pss"]
                                         + at["spares_pss"]) / len(cs)
                at["supervisor_rss"] = 0
                out["at"][str(counts[len(out["at"])])] = at
                log(f"scale[{tag}] {n}: create {pct(at['create'], .5) * 1e3:.2f}/"
                    f"{pct(at['create'], .99) * 1e3:.2f} ms (kdamond "
                    f"{at['kdamond_cpu_share']:.0%} of a CPU meanwhile"
                    + (f"; floor p99 {pct(at['paced_floor'], .99) * 1e3:.2f} ms"
                       if "paced_floor" in at else "") + "), back to back "
                    f"{pct(at['create_burst'], .5) * 1e3:.2f}/"
                    f"{pct(at['create_burst'], .99) * 1e3:.2f} ms, rtt {pct(at['rtt'], .5) * 1e6:.0f} us, "
                    f"list {pct(at['ctx.list'], .5) * 1e3:.1f} ms, stats "
                    f"{pct(at['stats'], .5) * 1e3:.2f} ms, fds {at['fds']}, "
                    f"PSS/ctx {at['pss_per_context'] / 2**20:.2f} MiB")
            top = out["at"][str(counts[-1])]
            out["fds_per_context"] = (top["fds"] - fds0) / max(top["alive"], 1)
            out["fill_seconds"] = t_fill
        finally:
            d.stop()
        if self.ksmd:
            out["ksmd_cpu_seconds"] = self.ksmd.cpu() - ksmd_cpu0
            out["seconds"] = time.monotonic() - wall0
            log(f"scale[{tag}]: ksmd used {out['ksmd_cpu_seconds']:.1f} s of CPU in "
                f"{out['seconds']:.0f} s")
        return out


class Ksmd:
    """The kernel's same-page merging thread, started for the scale figure
    (root; its settings are put back after): the daemon marks unsafe-tier
    workers mergeable (--no-page-merging turns it off), and a deployment
    that wants their shared pages stored once runs ksmd (README "Operating
    it"). Its CPU time is reported: memory bought with CPU."""
    KSM = "/sys/kernel/mm/ksm"
    SETTINGS = {"pages_to_scan": KSM_PAGES_TO_SCAN, "sleep_millisecs": KSM_SLEEP_MS}

    def __init__(self):
        self.saved = None
        self.pid = next((p for p, _, _ in processes() if _comm(p) == "ksmd"), None)

    @classmethod
    def usable(cls):
        return os.geteuid() == 0 and os.access(os.path.join(cls.KSM, "run"), os.W_OK)

    def _rw(self, name, value=None):
        with open(os.path.join(self.KSM, name), "r" if value is None else "w") as f:
            return f.read().strip() if value is None else f.write(str(value))

    def start(self):
        self.saved = {k: self._rw(k) for k in ("run", *self.SETTINGS)}
        for k, v in self.SETTINGS.items():
            self._rw(k, v)
        self._rw("run", 1)

    def stop(self):
        if self.saved:  # run first: 0 stops ksmd and keeps what it merged
            self._rw("run", self.saved["run"] if self.saved["run"] in ("0", "1") else 0)
            for k in self.SETTINGS:
                self._rw(k, self.saved[k])
            self.saved = None

    def pace(self, fast):
        """Fast (KSM_PAGES_TO_SCAN) to merge new contexts in minutes, not
        hours; the kernel's default rate while anything is measured."""
        self._rw("pages_to_scan", KSM_PAGES_TO_SCAN if fast else KSM_STEADY_PAGES)

    def cpu(self):
        return cpu_seconds(self.pid) if self.pid else 0.0

    def full_scans(self):
        return int(self._rw("full_scans"))

    def settle(self, passes=2, timeout=600):
        """Waits for `passes` whole passes over every mergeable page (what
        idle contexts look like once ksmd has seen them); seconds taken."""
        t0, n0 = time.monotonic(), self.full_scans()
        while self.full_scans() < n0 + passes and time.monotonic() - t0 < timeout:
            time.sleep(0.5)
        return time.monotonic() - t0
