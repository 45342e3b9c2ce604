#!/usr/bin/python3
"""ctxd-router figures: round trip through the router against direct, and
contexts created per second across 3 hosts.

The cluster is tests/router/cluster.py's: 3 ctxd hosts in network
namespaces (tcp://, CurveZMQ), a real etcd, one router; needs root.

    /usr/bin/python3 tools/bench/router.py [--rtt N] [--contexts N] [--window N]

Round trip: `execute "1"` on one context, one at a time, N times, by a
client over tcp:// with CurveZMQ straight to the context's host, then by the
same kind of client through the router (two CurveZMQ hops). Goal: through
the router <= 1.5x direct (median). Creation: N contexts made through the
router, WINDOW in flight at a time, placed over 3 hosts; contexts/s and the
spread over the hosts."""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "router"))
from cluster import Cluster, why_not  # noqa: E402


def rtt(conn, ctx, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        m = conn.req("execute", ctx=ctx, code="1")
        out.append(time.perf_counter() - t0)
        assert m[-1]["t"] == "done" and m[-1]["status"] == "ok", m[-1]
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--rtt", type=int, default=500, help="round trips per path (500)")
    ap.add_argument("--contexts", type=int, default=1000, help="contexts to create (1000)")
    ap.add_argument("--window", type=int, default=30, help="creates in flight (30)")
    a = ap.parse_args()
    reason = why_not()
    if reason:
        print(f"router bench skipped: {reason}")
        return 0
    cl = Cluster(nhosts=3, liveness=1.0, liveness_max=10.0)
    try:
        cl.net_up()
        cl.start_etcd()
        for i in range(3):
            cl.start_host(i)
        cl.start_router("r1")
        cl.wait_router("r1")
        via = cl.tcp_client("r1")
        assert via.req("ctx.create", name="rtt")[-1]["t"] == "ok"
        m = via.req("execute", ctx="rtt", code="import os; print(os.environ['CTXD_TEST_HOST'])")
        host = int(b"".join(x["data"] for x in m if x["t"] == "stream").decode().strip()[1:])
        direct = cl.direct(host)
        rtt(direct, "rtt", 50)  # warm both paths
        rtt(via, "rtt", 50)
        local = cl.client("r1")  # ipc:// to the router, as a client on its machine
        rtt(local, "rtt", 50)
        d, r, li = [], [], []
        for _ in range(5):  # interleaved, so all see the same machine load
            d += rtt(direct, "rtt", a.rtt // 5)
            r += rtt(via, "rtt", a.rtt // 5)
            li += rtt(local, "rtt", a.rtt // 5)
        md, mr, ml = statistics.median(d), statistics.median(r), statistics.median(li)
        print(f"round trip, execute '1' ({len(d)} each, interleaved):")
        print(f"  direct to host (tcp, CurveZMQ)       median {md * 1e6:7.0f} us   p99 {pct(d, 0.99) * 1e6:7.0f} us")
        print(f"  router over tcp + CurveZMQ, 2 hops   median {mr * 1e6:7.0f} us   p99 {pct(r, 0.99) * 1e6:7.0f} us"
              f"   {mr / md:.2f}x direct (goal <= 1.5x: {'met' if mr / md <= 1.5 else 'NOT met'})")
        print(f"  router over ipc, then tcp + CurveZMQ median {ml * 1e6:7.0f} us   p99 {pct(li, 0.99) * 1e6:7.0f} us"
              f"   {ml / md:.2f}x direct (goal <= 1.5x: {'met' if ml / md <= 1.5 else 'NOT met'})")
        print(f"  the router's hop adds {(mr - md) * 1e6:.0f} us (tcp) / {(ml - md) * 1e6:.0f} us (ipc) per request")
        local.close()
        t0 = time.perf_counter()
        n = a.contexts
        for base in range(0, n, a.window):
            ids = [via.send("ctx.create", name=f"b{k}") for k in range(base, min(n, base + a.window))]
            got = via.collect(ids, timeout=300)
            bad = [got[i][-1] for i in ids if got[i][-1]["t"] != "ok"]
            assert not bad, bad[:3]
        dt = time.perf_counter() - t0
        st = via.req("stats")[-1]
        spread = [h["contexts"] for h in st["hosts"]]
        print(f"creation: {n} contexts through the router in {dt:.1f} s = {n / dt:.0f} contexts/s "
              f"({a.window} in flight), over 3 hosts (live per host at the last stats: {spread})")
        via.close()
        direct.close()
    finally:
        cl.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
