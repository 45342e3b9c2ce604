"""Figures 5 and 7: PSS per idle context against an idle kernel, and a
thousand idle contexts alive at once."""

import time

from .common import log
from .procfs import mem_available, pss_of, zygote_pid


class Memory:
    """The memory figures, a part of Bench."""

    # 5 ------------------------------------------------------------------------
    def memory(self):
        f = self.fig("memory")
        n = self.n(100, 10)
        c = self.d.c
        log(f"memory: {n} idle contexts")
        for i in range(n):
            c.req("ctx.create", name=f"idle{i}")
            c.run("x = 1", f"idle{i}")
        time.sleep(self.n(3, 1))
        cs = [x for x in c.contexts() if x["name"].startswith("idle")]
        f["ctxd_pss_per_context"] = [pss_of(x["pid"]) for x in cs]  # INFO's is cached
        f["ctxd_rss_per_context"] = [x["rss"] for x in cs]
        zyg = zygote_pid(self.d.proc.pid)
        f["zygote_pss"] = pss_of(zyg) if zyg else None
        f["supervisor_pss"] = pss_of(self.d.proc.pid)
        total = sum(f["ctxd_pss_per_context"]) + (f["zygote_pss"] or 0) + f["supervisor_pss"]
        f["ctxd_total_pss_per_context"] = total / len(cs)
        self.clean_contexts()
        if self.ipy:
            kn = self.n(5, 1)
            log(f"memory: {kn} idle kernels")
            ks = [self.kernel() for _ in range(kn)]
            for k in ks:
                k.execute("x = 1")
            time.sleep(self.n(3, 1))
            f["ipykernel_pss_per_kernel"] = [pss_of(k.pid) for k in ks]
            for k in ks:
                self.drop_kernel(k)

    # 7 ------------------------------------------------------------------------
    def thousand(self):
        f = self.fig("thousand")
        n = self.n(1000, 50)
        c = self.d.c
        avail0 = mem_available()
        log(f"thousand: {n} idle contexts alive at once")
        t0 = time.perf_counter()
        for i in range(n):
            c.req("ctx.create", name=f"k{i:04d}")
            c.run("x = 1", f"k{i:04d}")
        f["seconds_to_create"] = time.perf_counter() - t0
        time.sleep(self.n(3, 1))
        cs = [x for x in c.contexts() if x["name"].startswith("k")]
        f["alive"] = sum(1 for x in cs if x["state"] == "idle" and x["pid"] > 0)
        f["requested"] = n
        f["total_pss"] = sum(x["pss"] for x in cs)
        f["mem_available_drop"] = avail0 - mem_available()
        r = c.run("sum(1 for _ in range(10))", f"k{n - 1:04d}")
        f["last_one_runs"] = r["status"] == "ok"
        self.clean_contexts()
