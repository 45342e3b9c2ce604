"""A run: the bench's own daemon and kernels, each figure asked for (one
that fails is reported and the others still measured), then the table,
bench.json and bench.png in OUT."""

import json
import os
import shutil
import tempfile
import time

from .common import FIGS, log
from .compare import side_by_side
from .cpu import Cpu
from .daemon import Daemon
from .draw import draw
from .kernel import Kernel, have_ipykernel
from .memory import Memory
from .procfs import machine_info
from .ready import Ready
from .rtt import Rtt
from .scale import Scale
from .stream import Stream
from .table import make_table


class Bench(Rtt, Ready, Stream, Memory, Scale, Cpu):
    """One run: the figures are the methods of its parts (rtt, ready, ...),
    each filling self.fig(name) with samples."""

    def __init__(self, args):
        self.a = args
        self.q = args.quick
        self.ksmd = None  # started by the scale figure
        self.build = os.path.abspath(args.build_dir)
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="ctxd-bench-")
        self.res = {"quick": self.q, "machine": machine_info(), "figures": {}}
        self.ipy = have_ipykernel() and not args.no_ipykernel
        self.kernels = []
        self.d = None
        Kernel.log = open(os.path.join(self.out, "kernels.log"), "wb")
        # debugpy (a dependency of ipykernel) warns about frozen modules at
        # every kernel start; the warning only costs noise
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

    def n(self, full, quick):
        return quick if self.q else full

    def fig(self, name):
        return self.res["figures"].setdefault(name, {})

    def kernel(self, name="python3"):
        k = Kernel(name)
        self.kernels.append(k)
        return k

    def drop_kernel(self, k):
        k.stop()
        self.kernels.remove(k)

    def clean_contexts(self):
        for c in self.d.c.contexts():
            if c["name"] != "default":
                self.d.c.req("ctx.delete", ctx=c["name"])

    # ---------------------------------------------------------------------------
    def run(self):
        figs = self.a.only.split(",") if self.a.only else FIGS
        for need in ("daemon/ctxd", "daemon/ctxd-worker", "tools/bench/ctxd-bench"):
            if not os.access(os.path.join(self.build, need), os.X_OK):
                raise SystemExit(f"{self.build}/{need} is missing: build first "
                                 "(sh tools/setup.sh build)")
        if not self.ipy:
            log("ipykernel/jupyter_client not installed (sh tools/setup.sh bench installs "
                "them): its columns stay empty")
        self.res["ipykernel"] = self.ipy
        t_start = time.perf_counter()
        self.d = Daemon(self.build, self.tmp)
        self.res["ctxd_hello"] = {k: self.d.hello.get(k) for k in ("version", "preloads",
                                                                    "limits")}
        try:
            for name in figs:
                # A figure that fails (e.g. workers killed from outside on a
                # shared machine) is reported, the others still measured.
                try:
                    getattr(self, name)()
                except (RuntimeError, TimeoutError, OSError, KeyError, StopIteration) as e:
                    self.res["figures"].pop(name, None)
                    self.res.setdefault("failed", {})[name] = repr(e)
                    log(f"{name}: FAILED: {e!r}")
                    if self.d.proc.poll() is not None:
                        self.d = Daemon(self.build, self.tmp)
        finally:
            self.d.stop()
            for k in list(self.kernels):
                self.drop_kernel(k)
        self.res["seconds"] = time.perf_counter() - t_start
        shutil.copy(self.d.log_path, os.path.join(self.out, "ctxd.log"))
        shutil.rmtree(self.tmp, ignore_errors=True)
        table, goals = make_table(self.res)
        self.res["table"] = table
        self.res["goals"] = goals
        sbs = []
        if self.a.compare:
            self.res["side_by_side"], sbs = side_by_side(self.res, self.build,
                                                         os.path.abspath(self.a.compare))
        with open(os.path.join(self.out, "bench.json"), "w") as fh:
            json.dump(self.res, fh, indent=1)
        print("\n".join(table))
        if sbs:
            print("\n".join(sbs))
        for name, why in self.res.get("failed", {}).items():
            print(f"figure {name} FAILED: {why}")
        png = draw(self.res, os.path.join(self.out, "bench.png"))
        print(f"\nJSON: {os.path.join(self.out, 'bench.json')}"
              + (f"\nPNG:  {png}" if png else "\nPNG:  not drawn (python3-matplotlib missing)"))
        print(f"ran {self.res['seconds']:.0f} s{' (--quick)' if self.q else ''}")
