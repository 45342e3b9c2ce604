#!/usr/bin/python3
"""Load and soak test: many clients × many contexts against a real ctxd.

    /usr/bin/python3 tests/load/load.py --seconds 90          # CI
    /usr/bin/python3 tests/load/load.py --seconds 3600        # a soak

Each client thread sends a mix of requests (print floods, sleeps, errors,
interrupts, timeouts, segfaults, context create/delete churn) to its share of
the contexts, and checks: every request got exactly one terminal reply; every
output byte of a run arrived (a checksum the code computes itself is compared
with the bytes received); the supervisor's RSS stays bounded; at the end no
zombie processes and no leaked file descriptors. Prints the figures, exits 1
on any failure. The request loops are bounded in count and time."""
import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CTXD_BIN = os.environ.get("CTXD_BIN", os.path.join(ROOT, "build/daemon/ctxd"))
TERMINAL = {"done", "ok", "err"}


def pack(o):
    return msgpack.packb(o, use_bin_type=True)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def zombies_of(pid):
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == pid:
            found.append(int(p))
    return found


# Each job: (weight, name, code maker). The code prints its own checksum of
# what it wrote on the last line of stderr, so lost bytes are detected.
def flood(rng):
    n = rng.randint(1000, 20000)
    return ("import hashlib, sys\nh = hashlib.sha256()\n"
            f"for i in range({n}):\n    s = '%07d flood line\\n' % i\n    sys.stdout.write(s)\n"
            "    h.update(s.encode())\nsys.stdout.flush()\n"
            "sys.stderr.write('sha=' + h.hexdigest())\n", {}, "ok")


def sleeper(rng):
    return (f"import time\ntime.sleep({rng.uniform(0.01, 0.3):.3f})\n", {}, "ok")


def error(rng):
    return ("def f():\n    raise ValueError('load')\nf()\n", {}, "error")


def interrupted(rng):
    return ("import time\ntime.sleep(30)\n", {"interrupt_after": rng.uniform(0.05, 0.3)},
            "interrupted")


def timeout(rng):
    return ("while True:\n    pass\n", {"timeout": 0.3}, "timeout")


def segfault(rng):
    return ("import ctypes\nctypes.string_at(0)\n", {}, "died")


JOBS = [(30, flood), (30, sleeper), (10, error), (8, interrupted), (6, timeout), (4, segfault)]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.bytes = 0
        self.requests = 0

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, msg):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(msg)


def client_thread(idx, endpoint, contexts, deadline, stats, max_requests):
    rng = random.Random(idx)
    zctx = zmq.Context.instance()
    sock = zctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    next_id = 0

    def send(t, **kw):
        nonlocal next_id
        next_id += 1
        sock.send(pack({"v": 1, "t": t, "id": next_id, **kw}))
        return next_id

    buffered = {}  # re -> messages that arrived while waiting for another id

    def collect(rid, on_accept=None, limit=60):
        events = []
        end = time.monotonic() + limit
        pending = buffered.pop(rid, [])
        while time.monotonic() < end:
            if pending:
                m = pending.pop(0)
            else:
                if not sock.poll(int(max(1, (end - time.monotonic()) * 1000))):
                    break
                m = msgpack.unpackb(sock.recv(), raw=False)
            if m.get("re") != rid:
                if not isinstance(m.get("re"), int) or m["re"] > next_id:
                    stats.fail(f"client {idx}: message for unknown request {m.get('re')}")
                buffered.setdefault(m["re"], []).append(m)
                continue
            events.append(m)
            if m["t"] == "accepted" and on_accept:
                on_accept()
            if m["t"] in TERMINAL:
                if [x for x in pending if x.get("re") == rid]:
                    stats.fail(f"client {idx}: second terminal reply for {rid}")
                return events
        stats.fail(f"client {idx}: no terminal reply for request {rid} within {limit} s")
        return events

    done = 0
    while time.monotonic() < deadline and done < max_requests:
        done += 1
        stats.add("requests")
        roll = rng.random()
        if roll < 0.04:  # context churn
            name = f"churn-{idx}-{done}"
            r = collect(send("ctx.create", name=name))
            if not r or r[-1]["t"] != "ok":
                stats.fail(f"create {name}: {r[-1:]}")
                continue
            stats.add("created")
            r = collect(send("ctx.delete", ctx=name))
            if not r or r[-1]["t"] != "ok":
                stats.fail(f"delete {name}: {r[-1:]}")
            continue
        ctx = rng.choice(contexts)
        weights = [w for w, _ in JOBS]
        job = rng.choices(JOBS, weights)[0][1]
        code, opts, want = job(rng)
        fields = {"ctx": ctx, "code": code}
        if "timeout" in opts:
            fields["timeout"] = opts["timeout"]
        rid = send("execute", **fields)

        interrupt_ids = []

        def interrupt_soon():
            if "interrupt_after" in opts and not interrupt_ids:
                time.sleep(opts["interrupt_after"])
                interrupt_ids.append(send("interrupt", ctx=ctx, run=rid))

        events = collect(rid, interrupt_soon)
        # the interrupt's own reply has its own id
        for iid in interrupt_ids:
            r = collect(iid, limit=10)
            if not r or r[-1]["t"] != "ok":
                stats.fail(f"interrupt reply: {r[-1:]}")
        if not events or events[-1]["t"] not in TERMINAL:
            continue
        term = events[-1]
        if term["t"] == "err":
            if term["code"] == "busy":
                stats.add("busy")
            else:
                stats.fail(f"execute refused: {term}")
            continue
        status = term["status"]
        stats.add(f"status_{status}")
        out = b"".join(e["data"] for e in events if e["t"] == "stream" and e["name"] == "stdout")
        err = b"".join(e["data"] for e in events if e["t"] == "stream" and e["name"] == "stderr")
        with stats.lock:
            stats.bytes += len(out) + len(err)
        if status == "aborted":
            continue  # queued behind a segfault on a shared context: allowed
        if job is interrupted and status == "ok":
            continue  # the interrupt raced with the end of a short run
        if status != want:
            stats.fail(f"{job.__name__} on {ctx}: status {status}, wanted {want}: {term}")
            continue
        if job is flood:
            sha = hashlib.sha256(out).hexdigest()
            if err.decode(errors="replace") != "sha=" + sha:
                stats.fail(f"flood on {ctx}: {len(out)} bytes arrived, checksum mismatch")
            else:
                stats.add("flood_checked")
    sock.close()


def stalled_reader(i, endpoint, deadline, stats):
    """A client that floods output and never reads it: what the daemon holds
    for it must stay within its bounds (--max-client-held, --max-held)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 1)
    sock.connect(endpoint)
    name = f"stall-{i}"
    sock.send(pack({"v": 1, "t": "ctx.create", "id": 1, "name": name}))
    if not sock.poll(30000):
        stats.fail(f"stalled reader {i}: no reply to ctx.create")
        sock.close()
        return
    sock.recv()
    sock.send(pack({"v": 1, "t": "execute", "id": 2, "ctx": name, "timeout": 3600,
                    "code": "while True:\n    print('s' * 4000)"}))
    while time.monotonic() < deadline:
        time.sleep(0.2)  # never reads
    sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--contexts", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--max-requests", type=int, default=100000,
                    help="per client; bounds the run")
    ap.add_argument("--rss-limit-mb", type=float, default=256,
                    help="the supervisor's RSS must stay below this")
    ap.add_argument("--stalled", type=int, default=8,
                    help="clients that flood output and never read it")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="ctxd-load.")
    endpoint = f"ipc://{tmp}/s.sock"
    log = open(os.path.join(tmp, "ctxd.log"), "wb")
    daemon = subprocess.Popen([CTXD_BIN, "--listen", endpoint, "--max-queue", "256",
                               "--log", os.path.join(tmp, "requests.log")],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    zctx = zmq.Context.instance()
    admin = zctx.socket(zmq.DEALER)
    admin.setsockopt(zmq.LINGER, 0)
    admin.connect(endpoint)

    def request(t, **kw):
        admin.send(pack({"v": 1, "t": t, "id": t, **kw}))
        while True:  # skips a late reply to an earlier hello (a slow start)
            if not admin.poll(30000):
                raise SystemExit(f"no reply to {t}")
            r = msgpack.unpackb(admin.recv(), raw=False)
            if r.get("re") == t:
                return r

    for _ in range(100):
        try:
            admin.send(pack({"v": 1, "t": "hello", "id": 0}))
            if admin.poll(200):
                admin.recv()
                break
        except zmq.ZMQError:
            pass
    contexts = [f"load-{i}" for i in range(args.contexts)]
    for name in contexts:
        r = request("ctx.create", name=name)
        assert r["t"] == "ok", r
    fds_before = fd_count(daemon.pid)
    rss_start = rss_kb(daemon.pid)

    stats = Stats()
    deadline = time.monotonic() + args.seconds
    t0 = time.monotonic()
    threads = [threading.Thread(target=client_thread,
                                args=(i, endpoint, contexts, deadline, stats, args.max_requests))
               for i in range(args.clients)]
    threads += [threading.Thread(target=stalled_reader, args=(i, endpoint, deadline, stats))
                for i in range(args.stalled)]
    for t in threads:
        t.start()
    rss_max = rss_start
    while any(t.is_alive() for t in threads):
        rss_max = max(rss_max, rss_kb(daemon.pid))
        time.sleep(0.2)
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0

    for i in range(args.stalled):  # their runs would flood for an hour
        request("ctx.delete", ctx=f"stall-{i}")
    # Let the daemon settle (workers restarted after deaths are idle).
    time.sleep(1)
    st = request("stats")
    limits = request("hello")["limits"]
    fds_after = fd_count(daemon.pid)
    zombies = zombies_of(daemon.pid)
    rss_end = rss_kb(daemon.pid)
    daemon.send_signal(signal.SIGTERM)
    rc = daemon.wait(15)
    log.close()

    failures = list(stats.failures)
    if rc != 0:
        failures.append(f"daemon exited with {rc} on SIGTERM")
    if fds_after > fds_before:
        failures.append(f"file descriptors leaked: {fds_before} before, {fds_after} after")
    if zombies:
        failures.append(f"zombie children of the daemon: {zombies}")
    if rss_max / 1024 > args.rss_limit_mb:
        failures.append(f"supervisor RSS reached {rss_max / 1024:.1f} MB")
    held_peak = st.get("held_bytes", {}).get("peak", 0)
    if held_peak > limits.get("max_held", 0):
        failures.append(f"held {held_peak} bytes, past max_held {limits.get('max_held')}")
    c = stats.counts
    print(f"load: {args.clients} clients x {args.contexts} contexts for {elapsed:.1f} s")
    print(f"  requests {c.get('requests', 0)}  ({c.get('requests', 0) / elapsed:.0f}/s)  "
          f"contexts created+deleted {c.get('created', 0)}  busy refusals {c.get('busy', 0)}")
    print("  run statuses: " + "  ".join(f"{k[7:]} {v}" for k, v in sorted(c.items())
                                         if k.startswith("status_")))
    print(f"  output bytes checked {stats.bytes}  floods with matching checksum "
          f"{c.get('flood_checked', 0)}")
    print(f"  supervisor RSS start {rss_start / 1024:.1f} MB, max {rss_max / 1024:.1f} MB, "
          f"end {rss_end / 1024:.1f} MB")
    print(f"  with {args.stalled} stalled readers: supervisor peak RSS {rss_max / 1024:.1f} MB; "
          f"held bytes peak {held_peak / 2**20:.1f} MiB of max_held "
          f"{limits.get('max_held', 0) / 2**20:.0f} MiB (max_client_held "
          f"{limits.get('max_client_held', 0) / 2**20:.0f} MiB)")
    print(f"  supervisor fds before {fds_before}, after {fds_after}; zombies {len(zombies)}")
    print(f"  daemon counters: runs {st['counters']['runs']}, deaths "
          f"{st['counters']['worker_deaths']}, refused {st['counters']['refused']}")
    if failures:
        print(f"load: {len(failures)} failure(s):")
        for f in failures[:20]:
            print("  " + f)
        print("0 passed, 1 failed")
        return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
