#!/usr/bin/python3
"""ctxd snapshot benchmark: ctx.snapshot and ctx.restore time (issue 21).

Starts its own daemon (state directory in a temporary directory, so the
files go to the page cache of that file system), makes a context holding
one numpy array of each size (1 MB, 100 MB, 1 GB by default) or 10,000
small objects, and times, as the client sees them:

  snapshot   ctx.snapshot (the worker writes the file, the supervisor
             renames it into place; not fsynced: to the page cache)
  restore    ctx.restore into the same context after its globals were
             deleted (the worker reads the file into new memory)
  touch      the floor: the same context filling that many bytes of new
             memory (np.ones), what any restore pays in page faults

Goal: >= 500 MB/s both ways for the arrays. Prints figures, ratios to the
goal and to the touch floor; asserts nothing (timings are not tests).

  /usr/bin/python3 tools/bench/snapshot_bench.py [--sizes 1,100,1000] [--repeat 3]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import ctxd  # noqa: E402

GOAL = 500.0  # MB/s


def start_daemon(build, tmp):
    endpoint = f"ipc://{tmp}/s.sock"
    log = open(os.path.join(tmp, "ctxd.log"), "wb")
    proc = subprocess.Popen([os.path.join(build, "daemon", "ctxd"), "--listen", endpoint,
                             "--state-dir", os.path.join(tmp, "state"),
                             "--max-snapshot-bytes", "8G"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp,
                            start_new_session=True)
    deadline = time.monotonic() + 15
    while True:
        try:
            client = ctxd.Client(endpoint)
            client.hello()
            return proc, client
        except ctxd.CtxdError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                proc.wait(10)
                raise
            time.sleep(0.1)


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def run_case(c, label, make_code, nbytes, repeat):
    rows = []
    for i in range(repeat):
        name = f"b{i}"
        c.execute("import gc; gc.collect()", ctx="bench")
        assert c.execute(make_code, ctx="bench").status == "ok"
        check = "repr(data[::4096].sum()) if hasattr(data, 'sum') else repr(data[-1])"
        before = c.execute(check, ctx="bench").result
        t_snap, snap = timed(lambda: c.snapshot_context("bench", name))
        size = snap["snapshot"]["size"]
        assert c.execute("for _k in [k for k in globals() if not k.startswith('_')]: "
                         "del globals()[_k]\nimport gc; gc.collect()", ctx="bench").status == "ok"
        t_rest, _ = timed(lambda: c.restore_context("bench", name))
        assert c.execute(check, ctx="bench").result == before, "restored data differ"
        c.execute("del data\nimport gc; gc.collect()", ctx="bench")
        t_touch = 0.0
        if nbytes:
            r = c.execute(f"import numpy as np, time\n_t = time.perf_counter()\n"
                          f"data = np.ones({nbytes // 8}, dtype=np.float64)\n"
                          f"time.perf_counter() - _t", ctx="bench")
            t_touch = float(r.result)
            c.execute("del data", ctx="bench")
        c.delete_snapshot("bench/" + name)
        rows.append((t_snap, t_rest, t_touch, size))
    best = min(rows, key=lambda r: r[0] + r[1])
    t_snap, t_rest, t_touch, size = best
    mb = size / 1e6
    line = f"{label:<22} {mb:10.1f} MB  snapshot {t_snap * 1e3:9.1f} ms ({mb / t_snap:7.0f} MB/s)"
    line += f"  restore {t_rest * 1e3:9.1f} ms ({mb / t_rest:7.0f} MB/s)"
    if t_touch:
        line += f"  touch {t_touch * 1e3:8.1f} ms"
    print(line, flush=True)
    if nbytes:
        print(f"{'':<22} ratio to the {GOAL:.0f} MB/s goal: snapshot {mb / t_snap / GOAL:.2f}, "
              f"restore {mb / t_rest / GOAL:.2f}; restore / touch floor "
              f"{t_rest / t_touch if t_touch else float('nan'):.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--sizes", default="1,100,1000", help="array sizes in MB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ctxd-snapbench-")
    proc, c = start_daemon(args.build_dir, tmp)
    try:
        c.create_context("bench")
        print(f"ctxd snapshot bench (state directory {tmp}; best of {args.repeat})")
        for mb in [int(s) for s in args.sizes.split(",") if s]:
            n = mb * 1_000_000
            run_case(c, f"numpy {mb} MB", f"import numpy as np\ndata = np.random.rand({n // 8})",
                     n, args.repeat)
        run_case(c, "10,000 small objects",
                 "data = [{'i': i, 's': str(i), 'f': i / 3, 't': (i, 'x')} for i in range(10000)]",
                 0, args.repeat)
    finally:
        c.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
