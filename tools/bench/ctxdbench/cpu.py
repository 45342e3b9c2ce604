"""Figure 9: CPU per x = 1 in the supervisor and a worker, the supervisor's
instructions per x = 1 (ptrace single-stepping, callgrind) and its system
calls per x = 1 per thread (perf stat)."""

import os
import shutil
import subprocess

from .common import log, pct
from .daemon import Daemon, cbench
from .procfs import cpu_seconds


class Cpu:
    """The CPU figure, a part of Bench."""

    # 9 ------------------------------------------------------------------------
    def cpu(self):
        """Instructions the supervisor executes per x = 1, counted by
        callgrind: two daemons run N1 and N2 round trips, the difference over
        N2 - N1 (start-up and shut-down cancel). Workers are not counted
        (valgrind does not follow exec)."""
        f = self.fig("cpu")
        n = self.n(5000, 200)
        self.d.c.req("ctx.create", name="cpu")
        wpid = next(x["pid"] for x in self.d.c.contexts() if x["name"] == "cpu")
        s0, w0 = cpu_seconds(self.d.pid), cpu_seconds(wpid)
        cbench(self.build, "rtt", self.d.endpoint, "cpu", n, 0)
        f["supervisor_cpu_per_x1"] = (cpu_seconds(self.d.pid) - s0) / n
        f["worker_cpu_per_x1"] = (cpu_seconds(wpid) - w0) / n
        self.d.c.req("ctx.delete", ctx="cpu")
        log(f"cpu: {n} x = 1: supervisor {f['supervisor_cpu_per_x1'] * 1e6:.0f} us, worker "
            f"{f['worker_cpu_per_x1'] * 1e6:.0f} us CPU each (/proc, clock ticks)")
        builds = [("new", self.build)]
        if self.a.compare:
            builds.append(("old", os.path.abspath(self.a.compare)))
        self.icount(f, builds)
        self.syscalls(f, builds)
        if not shutil.which("valgrind"):
            log("cpu: valgrind not installed (sh tools/setup.sh bench installs it)")
            return
        n1, n2 = self.n(100, 20), self.n(1100, 120)
        for tag, build in builds:
            irs = []
            for n in (n1, n2):
                cg = os.path.join(self.tmp, f"cg-{tag}-{n}.out")
                d = Daemon(build, self.tmp, preload=None, name=f"cg-{tag}",
                           wrap=("valgrind", "--tool=callgrind", "--callgrind-out-file=" + cg))
                try:
                    d.c.req("ctx.create", name="cg")
                    cbench(build, "rtt", d.endpoint, "cg", n, 0)
                except (RuntimeError, SystemExit) as e:
                    # valgrind 3.19 lacks pidfd_open, which the supervisor
                    # holds every worker by: no count then, and why
                    f["callgrind_unavailable"] = str(e)
                    log(f"cpu: callgrind cannot run the supervisor: {e}")
                    break
                finally:
                    d.stop()
                with open(cg) as fh:
                    tot = next((int(line.split()[1]) for line in fh
                                if line.startswith("totals:") or line.startswith("summary:")), 0)
                irs.append(tot)
            if "callgrind_unavailable" in f:
                break
            f[f"{tag}_instructions_per_x1"] = (irs[1] - irs[0]) / (n2 - n1)
            log(f"cpu[{tag}]: {f[f'{tag}_instructions_per_x1']:.0f} supervisor instructions "
                "per x = 1")

    def icount(self, f, builds):
        """The supervisor's instructions per x = 1, exact, by ptrace
        single-stepping (tools/bench/icount.c): on a daemon of each build,
        ctxd-icount counts every thread of the supervisor while a client
        (connected before) makes N1, then N2 round trips; the difference
        over N2 - N1 cancels attaching and detaching. Repeated, the median
        is kept: what varies is work that follows the wall clock (the
        loop's 1 s bound, timers), which stepping stretches a thousandfold."""
        exe = os.path.join(self.build, "tools", "bench", "ctxd-icount")
        if not os.access(exe, os.X_OK) or os.geteuid() != 0:
            log("cpu: ctxd-icount needs root and a build of tools/bench: not counted")
            return
        n1, n2, reps = self.n(4, 1), self.n(16, 3), self.n(3, 1)
        for tag, build in builds:
            d = Daemon(build, self.tmp, preload=None, name=f"ic-{tag}")
            per = []
            try:
                d.c.req("ctx.create", name="ic")
                cbench(build, "rtt", d.endpoint, "ic", 50, 0)  # warm: first runs, allocations
                for _ in range(reps):
                    counts = []
                    for n in (n1, n2):
                        ic = subprocess.Popen([exe, str(d.pid)], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, text=True)
                        try:
                            if not ic.stdout.readline().startswith("attached"):
                                raise RuntimeError("ctxd-icount did not attach")
                            # on the connection already made (a new client's
                            # handshake, stepped, can outlast its timeout)
                            for _ in range(n):
                                d.c.run("x = 1", "ic")
                        finally:
                            ic.stdin.close()
                            out = ic.stdout.read()
                            ic.wait()
                        counts.append(int(out.split("instructions ")[1].split()[0]))
                    per.append((counts[1] - counts[0]) / (n2 - n1))
            finally:
                d.stop()
            f[f"{tag}_icount_per_x1"] = per
            log(f"cpu[{tag}]: {pct(per, .5):.0f} supervisor instructions per x = 1 "
                f"(ptrace count, all threads; runs {[round(x) for x in per]})")

    def syscalls(self, f, builds):
        """The supervisor's system calls per x = 1, per thread (its loop and
        libzmq's I/O thread), counted by the kernel's syscall tracepoints
        (perf stat) over N round trips of the C client: a count, not a time,
        so it compares builds exactly where a system call costs ~1 us (as on
        this VM) and timings drown in noise."""
        perf = shutil.which("perf")
        if not perf or os.geteuid() != 0:
            log("cpu: perf (linux-perf) and root are needed to count system calls: not counted")
            return
        n = self.n(2000, 100)
        for tag, build in builds:
            d = Daemon(build, self.tmp, preload=None, name=f"sc-{tag}")
            out = os.path.join(self.tmp, f"sc-{tag}.txt")
            try:
                d.c.req("ctx.create", name="sc")
                cbench(build, "rtt", d.endpoint, "sc", 50, 0)  # warm
                rtt = os.path.join(build, "tools", "bench", "ctxd-bench")
                p = subprocess.run([perf, "stat", "-e", "syscalls:sys_enter_*", "-p", str(d.pid),
                                    "--per-thread", "-x,", "-o", out, "--", rtt, "rtt",
                                    d.endpoint, "sc", str(n), "0"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0:
                    log(f"cpu: perf stat failed: {p.stderr.strip()[:200]}")
                    return
            finally:
                d.stop()
            per = {}
            with open(out) as fh:
                for line in fh:
                    parts = line.strip().split(",")
                    # thread-tid,count,unit,event,...
                    if len(parts) < 4 or not parts[3].startswith("syscalls:sys_enter_"):
                        continue
                    try:
                        c = int(parts[1])
                    except ValueError:
                        continue
                    thread = "io" if "ZMQbg" in parts[0] else "loop"
                    if "Reaper" in parts[0]:
                        thread = "reaper"
                    name = parts[3][len("syscalls:sys_enter_"):]
                    d2 = per.setdefault(thread, {})
                    d2[name] = d2.get(name, 0) + c / n
            f[f"{tag}_syscalls_per_x1"] = per
            for thread in ("loop", "io"):
                calls = per.get(thread, {})
                top = sorted(calls.items(), key=lambda kv: -kv[1])[:6]
                log(f"cpu[{tag}]: supervisor {thread} thread: {sum(calls.values()):.1f} system "
                    f"calls per x = 1 ({', '.join(f'{k} {v:.1f}' for k, v in top)})")
