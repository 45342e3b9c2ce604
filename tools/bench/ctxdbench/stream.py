"""Figure 4: stdout streaming (a million prints, one 100 MB write), every
byte checked, against a pipe read by cat (the floor) and ipykernel."""

import fcntl
import os
import subprocess
import sys
import time

from .common import MB, log
from .daemon import Daemon, cbench
from .procfs import daemon_pids, on_cpu0


class Stream:
    """The streaming figure, a part of Bench."""

    # 4 ------------------------------------------------------------------------
    def stream(self):
        f = self.fig("stream")
        trials = self.n(9, 1)
        self.d.c.req("ctx.create", name="st")
        # --compare: the other build's daemon too, runs alternating with
        # this one's (this VM's speed drifts over minutes), each build
        # through its own client, which of the two goes first changing
        # each trial
        daemons = [("ctxd", self.build, self.d)]
        if self.a.compare:
            old = Daemon(os.path.abspath(self.a.compare), self.tmp, name="stream-old")
            old.c.req("ctx.create", name="st")
            daemons.append(("old", os.path.abspath(self.a.compare), old))
        try:
            for mode in ("print", "write"):
                self.stream_runs(f, daemons, mode, trials)
            # --compare: the same with every process of both daemons, and
            # the clients, on CPU 0: no placement, so what shows is the CPU
            # each byte costs
            if len(daemons) > 1 and (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
                with on_cpu0(daemon_pids(self.d) + daemon_pids(daemons[1][2])):
                    for mode in ("print", "write"):
                        self.stream_runs(f, daemons, mode, trials, floor=False,
                                         suffix="_one_cpu")
        finally:
            if len(daemons) > 1:
                daemons[1][2].stop()
        self.d.c.req("ctx.delete", ctx="st")
        if self.ipy:
            k = self.kernel()
            for mode in ("print", "write"):
                rs = []
                for _ in range(self.n(1, 1)):
                    rs.append(self.stream_ipykernel(k, mode))
                f[f"ipykernel_{mode}"] = rs
                log(f"stream: ipykernel {mode}: {[round(x) for x in rs]} MB/s")
            self.drop_kernel(k)

    def stream_runs(self, f, daemons, mode, trials, floor=True, suffix=""):
        """`trials` runs of mode on each of daemons, each through its build's
        client (which goes first changing each trial), the floor first in
        each trial when floor, so that a trial's ratios compare runs made
        seconds apart (the goals are their medians); MB/s into
        f[TAG_MODE + suffix]."""
        rs = {tag: [] for tag in (["floor"] if floor else []) + [t for t, _, _ in daemons]}
        for i in range(trials):
            if floor:
                rs["floor"].append(self.stream_floor(mode))
            for tag, build, d in (daemons if i % 2 == 0 else daemons[::-1]):
                r = cbench(build, "stream", d.endpoint, "st", mode)
                if not r["ok"]:
                    raise RuntimeError(f"{tag} stream {mode}: bytes lost or wrong: {r}")
                rs[tag].append(r["bytes"] / r["seconds"] / MB)
        if len(daemons) > 1:  # a trial each
            f.setdefault("compare_blocks", {})[f"ctxd_{mode}{suffix}"] = trials
        for tag, v in rs.items():
            f[f"{tag}_{mode}{suffix}"] = v
            log(f"stream: {tag} {mode}{', all on CPU 0' if suffix else ''}: "
                f"{[round(x) for x in v]} MB/s")

    def stream_floor(self, mode):
        r, w = os.pipe()
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
        cat = subprocess.Popen(["cat"], stdin=r, stdout=subprocess.DEVNULL)
        os.close(r)
        env = dict(os.environ)
        env.pop("PYTHONUNBUFFERED", None)  # a pipe is block-buffered, as in ctxd's capture
        code = ("for i in range(1_000_000):\n    print('x' * 99)" if mode == "print" else
                "import sys, time\ns = 'x' * 100_000_000\nsys.stdout.write(s)")
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-c", code], stdout=w, env=env)
        os.close(w)
        p.wait()
        cat.wait()
        return 100_000_000 / (time.perf_counter() - t0) / MB

    def stream_ipykernel(self, k, mode):
        state = {"pos": 0, "bad": 0, "err": 0}
        line = "x" * 99 + "\n"
        pattern = line * 700  # longer than any window we compare at once

        def on_stream(name, text):
            if name != "stdout":
                state["err"] += len(text)
                return
            if mode == "write":
                state["bad"] += len(text) - text.count("x")
            else:
                i = 0
                while i < len(text):
                    off = (state["pos"] + i) % 100
                    piece = text[i:i + 60000]
                    if piece != pattern[off:off + len(piece)]:
                        state["bad"] += 1
                    i += len(piece)
            state["pos"] += len(text)

        if mode == "write":
            k.execute("import sys\ns = 'x' * 100_000_000")
            code = "sys.stdout.write(s)\nNone"
        else:
            code = "for i in range(1_000_000):\n    print('x' * 99)"
        t0 = time.perf_counter()
        k.execute(code, on_stream=on_stream)
        t = time.perf_counter() - t0
        if mode == "write":
            k.execute("del s")
        if state["pos"] != 100_000_000 or state["bad"] or state["err"]:
            raise RuntimeError(f"ipykernel stream {mode}: {state}")
        return 100_000_000 / t / MB
