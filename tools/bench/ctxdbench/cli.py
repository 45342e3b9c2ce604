"""ctxd against ipykernel, side by side, on this machine.

    tools/bench/bench.py [--quick] [--only FIGS] [--build-dir DIR] [--out DIR]

Uses the binaries in build/ (it builds nothing: `sh tools/setup.sh build`
first, or `sh tools/setup.sh bench`, which also installs ipykernel,
jupyter_client, numpy and matplotlib from Debian and then runs this). Starts
its own ctxd on a private ipc socket (numpy preloaded) and its own kernels,
and stops them at the end. Prints a table of medians, p99 and ratios, writes
OUT/bench.json (every sample) and OUT/bench.png (latency distributions).

Figures (FIGS, comma-separated: rtt, ready, fork, stream, memory, tput,
thousand):
  rtt       execute `x = 1`, send -> done: C client (libctxd), Python client,
            TypeScript client (client/js, via tools/bench/rtt.mjs: needs node
            and `npm run build` in client/js; goal within 1.5x the Python client),
            and the raw ZeroMQ DEALER/ROUTER round trip of 100 bytes (the floor);
            ipykernel via jupyter_client (execute_reply + idle); the notebook
            path: the same jupyter_client loop against the ctxd kernel
            (ctxd.kernel, attached to this bench's daemon); --compare BUILD:
            that build's daemon and C client too, in the same blocks
            (unpinned and on one CPU)
  ready     ctx.create -> first `x = 1` done (numpy preloaded), a fork each
            and a spare taken; ipykernel: start -> first execute done; the
            page faults of a new context's first `x = 1` (a spare taken);
            the same in the `local` and `sandbox` tiers (goal with --compare:
            within 1.1x); --compare BUILD: each of these on that build's
            daemons and client too, in alternating blocks (a fork each also
            with everything on one CPU)
  fork      ctx.fork of a context holding 200 MB of numpy arrays: time to
            ready; PSS of source + fork
  stream    1,000,000 x print('x'*99) and one 100 MB sys.stdout.write, every
            byte checked; the floor: the same into a 1 MiB pipe read by cat;
            --compare BUILD: that build's daemon and client too, runs
            alternating (also with everything on one CPU)
  memory    PSS per idle context (100 contexts); per idle kernel
  tput      8 client threads x 8 contexts running `x = 1`
  thousand  1,000 idle contexts alive at once
  scale     with 10, 100, 1,000 and 5,000 idle contexts alive (numpy
            preloaded): create -> first x = 1 done and the x = 1 round trip at
            each count (goal: medians at 5,000 within 1.2x those at 10, p99 of
            creation <= 5 ms); ctx.list and stats at the top count; the
            supervisor's descriptors per context and which limit binds; PSS
            per idle context including the zygote's and supervisor's shares
            (goal <= 1.5 MiB); at each count, after the fill, two passes of
            ksmd first, which runs through the figure (root: started here,
            settings put back; its CPU is reported). --compare BUILD runs it for that build too.
  cpu       CPU per x = 1 in the supervisor and a worker (/proc); the
            supervisor's instructions per x = 1, exact, by ptrace
            single-stepping (ctxd-icount) and, where valgrind can run it,
            callgrind: the difference of two runs, so start-up cancels;
            the supervisor's system calls per x = 1 per thread (perf stat on
            the syscall tracepoints)
--quick runs every figure with few samples (a smoke test, used by ctest).
--compare BUILD also prints the round-trip, creation and streaming figures
side by side: each build's median, new/old, and whether within 3%
(tools/bench/README.md: `--only rtt,ready,stream --compare BUILD`).
"""

import argparse
import os

from .common import FIGS, ROOT
from .runner import Bench


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="few samples: a smoke run")
    ap.add_argument("--only", help="comma-separated figures: " + ",".join(FIGS))
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench"))
    ap.add_argument("--no-ipykernel", action="store_true", help="ctxd only")
    ap.add_argument("--counts", help="contexts alive for the scale figure (default "
                    "10,100,1000,5000)")
    ap.add_argument("--compare", metavar="BUILD",
                    help="another build directory (an earlier tree) for rtt, ready, stream, "
                    "scale and cpu, measured in the same run")
    args = ap.parse_args()
    if args.only and any(f not in FIGS for f in args.only.split(",")):
        ap.error(f"--only takes some of {','.join(FIGS)}")
    Bench(args).run()
