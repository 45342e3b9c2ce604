"""Figures 1 and 6: the x = 1 round trip of every client against the raw
ZeroMQ floor and ipykernel (also with everything on one CPU), and the
throughput of eight client threads."""

import os
import threading
import time

from .common import log, pct
from .daemon import Daemon, Mini, cbench, python_client, ts_bench
from .kernel import Kernel, ctxd_kernelspec
from .procfs import cpu_seconds, descendants, on_cpu0


class Rtt:
    """The round-trip figures, a part of Bench."""

    # 1 ------------------------------------------------------------------------
    def rtt(self):
        """The four ctxd/floor series run interleaved, in blocks, so that they
        see the same scheduling conditions (on a VM, where the scheduler puts
        the processes changes round trips a lot). With --compare, that
        build's daemon and C client run in the same blocks, unpinned and on
        one CPU."""
        f = self.fig("rtt")
        n, blocks = self.n(2000, 200), self.n(10, 2)
        self.d.c.req("ctx.create", name="rtt")
        old = None
        if self.a.compare:
            old = Daemon(os.path.abspath(self.a.compare), self.tmp, name="rtt-old")
            old.c.req("ctx.create", name="rtt")
        try:
            self.rtt_blocks(f, n, blocks, old)
            # The same two series with every process and thread involved on
            # CPU 0: no cross-CPU wake-ups, so the difference is the CPU
            # cost. In alternating blocks too: what else runs on this VM
            # (kdamond, the host) comes and goes within a run, and the ratio
            # is of two series that saw the same of it.
            if (os.cpu_count() or 1) > 1 and hasattr(os, "sched_setaffinity"):
                self.one_cpu(f, n, old)
        finally:
            if old:
                old.stop()
        if self.ipy:
            self.rtt_ipykernel(f)
        self.d.c.req("ctx.delete", ctx="rtt")

    def rtt_blocks(self, f, n, blocks, old):
        """n round trips of each client in `blocks` blocks: the floor, the C
        client (and the --compare build's, old, which of the two goes first
        changing each block), the Python client, the minimal loop and the
        TypeScript client."""
        per, warm = n // blocks, self.n(50, 10)
        compare = os.path.abspath(self.a.compare) if old else None
        pkg = python_client()
        pc = pkg.Client(self.d.endpoint) if pkg else None
        m = Mini(self.d.endpoint)
        series = {"zmq_floor": [], "ctxd_c": [], "ctxd_c_old": [], "ctxd_python": [],
                  "ctxd_python_minimal": [], "ctxd_ts": []}
        log(f"rtt: {n} round trips each: raw ZeroMQ floor, ctxd C client, "
            f"{'the --compare build C client, ' if old else ''}"
            f"{'ctxd Python client, ' if pc else ''}minimal Python loop, TypeScript client "
            f"({blocks} blocks)")

        def loop(fn, out):
            for _ in range(warm):
                fn()
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)

        def pkg_run():
            r = pc.execute("x = 1", "rtt")
            assert r.status == "ok", r

        for b in range(blocks):
            series["zmq_floor"] += cbench(self.build, "floor", os.path.join(self.tmp, "floor.sock"),
                                          per, warm)["rtt"]
            pair = [("ctxd_c", self.build, self.d)] + ([("ctxd_c_old", compare, old)] if old else [])
            for key, build, d in (pair if b % 2 == 0 else pair[::-1]):
                series[key] += cbench(build, "rtt", d.endpoint, "rtt", per, warm)["rtt"]
            if pc:
                loop(pkg_run, series["ctxd_python"])
            loop(lambda: m.run("x = 1", "rtt"), series["ctxd_python_minimal"])
            ts = ts_bench(self.d.endpoint, "rtt", per, warm)
            if ts:
                series["ctxd_ts"] += ts["rtt"]
        m.close()
        if pc:
            pc.close()
        f.update({k: v for k, v in series.items() if v})
        if old:  # equal blocks, for compare.py's paired ratios
            f.setdefault("compare_blocks", {})["ctxd_c"] = blocks

    def rtt_ipykernel(self, f):
        """x = 1 through jupyter_client: to ipykernel, then to the ctxd
        kernel attached to the bench's daemon (the notebook path)."""
        kn, kw = self.n(500, 30), self.n(20, 5)
        log(f"rtt: ipykernel via jupyter_client, {kn} runs")
        k = self.kernel()
        f["ipykernel_argv"] = k.argv
        for _ in range(kw):
            k.execute("x = 1")
        v = []
        for _ in range(kn):
            t0 = time.perf_counter()
            k.execute("x = 1")
            v.append(time.perf_counter() - t0)
        f["ipykernel"] = v
        self.drop_kernel(k)
        log(f"rtt: the notebook path, jupyter_client -> ctxd kernel, {kn} runs")
        k = self.kernel(ctxd_kernelspec(self.tmp, self.d.endpoint))
        for _ in range(kw):
            k.execute("x = 1")
        v = []
        for _ in range(kn):
            t0 = time.perf_counter()
            k.execute("x = 1")
            v.append(time.perf_counter() - t0)
        f["ctxd_kernel"] = v
        self.drop_kernel(k)

    def one_cpu(self, f, n, old):
        """(1) again with every process and thread involved on CPU 0, the
        floor and ctxd (and old, the --compare build's daemon, when given)
        in alternating blocks."""
        # Twenty blocks of 500 after 200 unmeasured: a block's first
        # round trips after the other series ran find cold caches, and
        # ctxd (five threads in three processes) more of them than the
        # floor; a block this VM slows as a whole (seen: ctxd at 1.8x
        # its usual time, the floor not) is one of twenty.
        per1, warm1, blocks1 = max(n // 4, 1), self.n(200, 10), self.n(20, 2)
        log(f"rtt: floor and ctxd C client again, everything on CPU 0 ({blocks1} blocks"
            f"{', the --compare build alternating' if old else ''})")
        f["zmq_floor_one_cpu"], f["ctxd_c_one_cpu"], f["one_cpu_block_ratios"] = [], [], []
        if old:
            f["ctxd_c_one_cpu_old"], f["one_cpu_block_ratios_old"] = [], []
            f.setdefault("compare_blocks", {})["ctxd_c_one_cpu"] = blocks1
        pids = [self.d.proc.pid] + [p for p, _ in descendants(self.d.proc.pid)]
        if old:
            pids += [old.proc.pid] + [p for p, _ in descendants(old.proc.pid)]
        with on_cpu0(pids):
            for _ in range(blocks1):
                fl = cbench(self.build, "floor", os.path.join(self.tmp, "floor.sock"),
                            per1, warm1)["rtt"]
                c1 = cbench(self.build, "rtt", self.d.endpoint, "rtt", per1, warm1)["rtt"]
                f["zmq_floor_one_cpu"] += fl
                f["ctxd_c_one_cpu"] += c1
                f["one_cpu_block_ratios"].append(pct(c1, .5) / pct(fl, .5))
                if old:
                    o1 = cbench(os.path.abspath(self.a.compare), "rtt", old.endpoint,
                                "rtt", per1, warm1)["rtt"]
                    f["ctxd_c_one_cpu_old"] += o1
                    f["one_cpu_block_ratios_old"].append(pct(o1, .5) / pct(fl, .5))

    # 6 ------------------------------------------------------------------------
    def tput(self):
        f = self.fig("tput")
        threads, secs = 8, self.n(5.0, 1.0)
        c = self.d.c
        for i in range(threads):
            c.req("ctx.create", name=f"tp-{i}")
        log(f"tput: {threads} threads x {threads} contexts, {secs} s")
        wpids = [x["pid"] for x in c.contexts() if x["name"].startswith("tp-")]
        s0, w0 = cpu_seconds(self.d.pid), [cpu_seconds(p) for p in wpids]
        r = cbench(self.build, "tput", self.d.endpoint, "tp", threads, secs)
        s1, w1 = cpu_seconds(self.d.pid), [cpu_seconds(p) for p in wpids]
        f["ctxd_runs_per_s"] = r["runs"] / r["seconds"]
        f["runs"] = r["runs"]
        f["supervisor_cpu_per_run"] = (s1 - s0) / max(r["runs"], 1)
        # each worker ran about runs/threads of them
        f["worker_cpu_per_run"] = (sum(w1) - sum(w0)) / max(r["runs"], 1)
        self.clean_contexts()
        if self.ipy and not self.q:
            log(f"tput: ipykernel, {threads} kernels x {threads} threads, {secs} s")
            ks = [self.kernel() for _ in range(threads)]
            counts = [0] * threads
            barrier = threading.Barrier(threads + 1)
            stop = [0.0]

            def worker(i):
                from jupyter_client.blocking import BlockingKernelClient
                kc = BlockingKernelClient()
                kc.load_connection_info(ks[i].km.get_connection_info())
                kc.start_channels()
                kc.wait_for_ready(timeout=60)
                k = object.__new__(Kernel)
                k.kc = kc
                k.execute("x = 1")
                barrier.wait()
                while time.perf_counter() < stop[0]:
                    k.execute("x = 1")
                    counts[i] += 1
                kc.stop_channels()

            ths = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
            for t in ths:
                t.start()
            stop[0] = time.perf_counter() + 1e9
            barrier.wait()
            t0 = time.perf_counter()
            stop[0] = t0 + secs
            for t in ths:
                t.join()
            f["ipykernel_runs_per_s"] = sum(counts) / (time.perf_counter() - t0)
            for k in ks:
                self.drop_kernel(k)
