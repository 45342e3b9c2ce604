"""ctxd-router against real hosts: 3 ctxd daemons in network namespaces of
their own (tcp://, CurveZMQ), a real etcd, one or two routers
(tests/router/cluster.py). Skipped, with the reason printed, where the
machine lacks root, network namespaces or etcd.

    CTXD_BIN=build/daemon/ctxd /usr/bin/python3 -m pytest -q tests/router
"""

import hashlib
import os
import signal
import sys
import time

import msgpack
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, why_not  # noqa: E402

REASON = why_not()
if REASON:
    print(f"tests/router skipped: {REASON}", file=sys.stderr)
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

WHERE = "import os; print(os.environ['CTXD_TEST_HOST'])"


@pytest.fixture(scope="module")
def cl():
    c = Cluster(nhosts=3, liveness=0.5, liveness_max=4.0)
    try:
        c.net_up()
        c.start_etcd()
        for i in range(3):
            c.start_host(i)
        c.start_router("r1")
        c.wait_router("r1")
        yield c
    finally:
        c.down()


@pytest.fixture(autouse=True)
def router_alive(cl):
    """Every router the test left running is still running (a crash would
    otherwise show only as a later test's hang)."""
    yield
    for name, (p, _) in cl.routers.items():
        assert p.poll() is None, f"router {name} exited {p.returncode}: {cl.log(name + '.log')[-2000:]}"


def last(msgs):
    return msgs[-1]


def host_of(conn, ctx):
    m = conn.req("execute", ctx=ctx, code=WHERE)
    assert last(m)["status"] == "ok", m
    return int(b"".join(x["data"] for x in m if x["t"] == "stream").decode().strip()[1:])


def direct_names(cl, i):
    c = cl.direct(i)
    try:
        return {x["name"] for x in last(c.req("ctx.list"))["contexts"]}
    finally:
        c.close()


def until_stream(c, run, timeout=30.0):
    """Reads c's messages until run has sent output (it is under way)."""
    deadline = time.monotonic() + timeout
    while not any(x["t"] == "stream" for x in c.msgs[run]):
        assert c.s.poll(int((deadline - time.monotonic()) * 1000)), c.msgs[run]
        m = msgpack.unpackb(c.s.recv(), raw=False)
        c.msgs[m["re"]].append(m)


def wait_for(pred, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def test_many_contexts_placed_and_reached_on_their_host(cl):
    c = cl.client()
    n = 300
    # 20 at a time: 300 workers starting at once on 2 cores starve the
    # daemons' loops past the liveness bound
    for base in range(0, n, 20):
        ids = [c.send("ctx.create", name=f"m{k}") for k in range(base, base + 20)]
        got = c.collect(ids, timeout=120)
        assert all(last(got[i])["t"] == "ok" for i in ids), [last(got[i]) for i in ids][:3]
    # every context answers from the host whose own list has it
    runs = {c.send("execute", ctx=f"m{k}", code=WHERE + f"; v = {k}"): k for k in range(n)}
    got = c.collect(list(runs), timeout=120)
    placed = {}
    for rid, k in runs.items():
        assert last(got[rid])["status"] == "ok", got[rid]
        placed[f"m{k}"] = int(b"".join(x["data"] for x in got[rid]
                                       if x["t"] == "stream").decode().strip()[1:])
    lists = [direct_names(cl, i) for i in range(3)]
    for name, h in placed.items():
        assert name in lists[h] and all(name not in lists[j] for j in range(3) if j != h)
    counts = [sum(1 for h in placed.values() if h == i) for i in range(3)]
    assert min(counts) > 0, counts  # every host got some
    # ctx.list through the router merges the hosts, sorted
    names = [x["name"] for x in last(c.req("ctx.list"))["contexts"]]
    assert [x for x in names if x.startswith("m")] == sorted(f"m{k}" for k in range(n))
    # state lives on: each context still has its own v
    runs = {c.send("execute", ctx=f"m{k}", code="print(v)"): k for k in range(0, n, 7)}
    got = c.collect(list(runs))
    for rid, k in runs.items():
        assert b"".join(x["data"] for x in got[rid] if x["t"] == "stream") == f"{k}\n".encode()
    ids = [c.send("ctx.delete", ctx=f"m{k}") for k in range(n)]
    assert all(last(m)["t"] == "ok" for m in c.collect(ids).values())
    c.close()


def test_never_creates_a_context_a_request_names(cl):
    c = cl.client()
    m = last(c.req("execute", ctx="never-made", code="1"))
    assert m["t"] == "err" and m["code"] == "unknown_context"
    assert all("never-made" not in direct_names(cl, i) for i in range(3))
    # default is made on first use, as PROTOCOL.md says, on one host
    assert last(c.req("execute", code="d = 5"))["status"] == "ok"
    assert sum("default" in direct_names(cl, i) for i in range(3)) == 1
    c.close()


def test_the_routers_own_ids_are_refused_to_clients(cl):
    """Ids beginning 'ctxd-router:' mark the router's own requests on a
    client's link (a settle after a dropped connection, a tenant's
    default): a client that sends one is refused, so no reply of its can be
    taken for the router's and change the catalog."""
    c = cl.client()
    for rid in ("ctxd-router:settle:1", "ctxd-router:default"):
        c.s.send(msgpack.packb({"v": 1, "t": "ctx.create", "id": rid, "name": "forged"}))
        assert c.s.poll(30000)
        m = msgpack.unpackb(c.s.recv(), raw=False)
        assert m["t"] == "err" and m["code"] == "bad_request" and m["re"] == rid, m
    assert last(c.req("ctx.list"))["t"] == "ok"
    assert all("forged" not in direct_names(cl, i) for i in range(3))
    c.close()


def test_fork_stays_on_its_host(cl):
    c = cl.client()
    assert last(c.req("ctx.create", name="src"))["t"] == "ok"
    assert last(c.req("execute", ctx="src", code="g = 41"))["status"] == "ok"
    for k in range(4):
        r = last(c.req("ctx.fork", ctx="src", name=f"fk{k}"))
        assert r["t"] == "ok" and r["ctx"]["name"] == f"fk{k}"
        assert host_of(c, f"fk{k}") == host_of(c, "src")
    m = c.req("execute", ctx="fk0", code="print(g + 1)")
    assert b"".join(x["data"] for x in m if x["t"] == "stream") == b"42\n"
    c.close()


def test_100mb_output_through_the_router(cl):
    c = cl.client()
    assert last(c.req("ctx.create", name="big"))["t"] == "ok"
    code = ("import sys, hashlib\nh = hashlib.sha256()\nb = bytes(range(256)) * 4096\n"
            "for i in range(100):\n    blk = bytes([i]) + b[1:]\n"
            "    sys.stdout.buffer.write(blk); h.update(blk)\n"
            "sys.stdout.flush()\nsys.stderr.write(h.hexdigest())\n")
    msgs = c.req("execute", ctx="big", code=code, timeout=300)
    assert last(msgs)["status"] == "ok", last(msgs)
    out = hashlib.sha256()
    n = 0
    err = b""
    for x in msgs:
        if x["t"] == "stream" and x["name"] == "stdout":
            out.update(x["data"])
            n += len(x["data"])
        elif x["t"] == "stream":
            err += x["data"]
    assert n == 100 * 1024 * 1024
    assert out.hexdigest() == err.decode()
    c.close()


def test_tenant_prefix(cl):
    t = cl.client(tenant=True)
    c = cl.client()
    r = last(t.req("ctx.create", name="mine"))
    assert r["t"] == "ok" and r["ctx"]["name"] == "mine", r
    acc = [x for x in t.req("execute", ctx="mine", code="1") if x["t"] == "accepted"]
    assert acc[0]["ctx"] == "mine"
    assert any("acme.mine" in direct_names(cl, i) for i in range(3))
    assert [x["name"] for x in last(t.req("ctx.list"))["contexts"]] == ["mine"]
    # another client neither sees nor reaches it under either name
    assert "mine" not in [x["name"] for x in last(c.req("ctx.list"))["contexts"]]
    assert last(c.req("execute", ctx="mine", code="1"))["code"] == "unknown_context"
    # the tenant's own `default`, made on first use (acme.default on a host)
    m = t.req("execute", code="print('tenant default')")
    assert last(m)["status"] == "ok" and m[0]["t"] == "accepted" and m[0]["ctx"] == "default", m
    assert any("acme.default" in direct_names(cl, i) for i in range(3))
    t.close()
    c.close()


def test_wrong_keys_on_each_hop(cl):
    import zmq
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), "client", "python"))
    import ctxd
    # client -> router: a key the router does not list
    _, bad = zmq.curve_keypair()
    with pytest.raises(ctxd.AuthenticationError):
        with ctxd.Client(cl.routers["r1"][1], server_key=cl.router_pub,
                         client_key=bad.decode(), request_timeout=20) as cli:
            cli.hello()
    assert "refused a client" in cl.log("r1.log")
    # router -> hosts: a router whose key no host lists
    other = os.path.join(cl.tmp, "router-other")
    cl.start_router("rbad", etcd=False, state_dir=other)
    c = cl.client("rbad")
    deadline = time.monotonic() + 30
    while True:
        r = last(c.req("ctx.create", name="x"))
        assert r["t"] == "err" and r["code"] == "unavailable", r
        if "authentication" in r["message"]:
            break
        assert time.monotonic() < deadline, r
        time.sleep(0.2)
    c.close()
    cl.stop_router("rbad")


def test_kill9_of_a_host_mid_run(cl):
    c = cl.client()
    for k in range(9):
        assert last(c.req("ctx.create", name=f"k{k}"))["t"] == "ok"
    hosts = {f"k{k}": host_of(c, f"k{k}") for k in range(9)}
    victim = hosts["k0"]
    run = c.send("execute", ctx="k0", code="print('started', flush=True)\nimport time\ntime.sleep(60)")
    queued = c.send("execute", ctx="k0", code="1")
    until_stream(c, run)
    cl.kill_host(victim)
    got = c.collect([run, queued], timeout=30)
    d = last(got[run])
    assert d["t"] == "done" and d["status"] == "died" and d["state_lost"] is True, d
    assert cl.host_endpoint(victim) in d["cause"], d
    q = last(got[queued])
    assert q["status"] == "aborted" and cl.host_endpoint(victim) in q["cause"], q
    c.quiet()
    # its contexts are lost (never unknown), the others live on
    for name, h in hosts.items():
        r = last(c.req("execute", ctx=name, code="1"))
        if h == victim:
            assert r["t"] == "err" and r["code"] == "lost", r
            assert cl.host_endpoint(victim) in r["message"]
        else:
            assert r["status"] == "ok"
    # new contexts go to the live hosts
    for k in range(6):
        assert last(c.req("ctx.create", name=f"after{k}"))["t"] == "ok"
        assert host_of(c, f"after{k}") != victim
    # back with the same address and keys: the lost contexts stay lost and
    # are deleted there (its table had made them again, empty)
    cl.start_host(victim)
    cl.wait_router("r1")
    wait_for(lambda: not any(n in direct_names(cl, victim) for n, h in hosts.items()
                             if h == victim), "the lost contexts deleted on the host")
    r = last(c.req("execute", ctx="k0", code="print(1)"))
    assert r["t"] == "err" and r["code"] == "lost"
    c.close()


def test_host_restarted_same_address_never_a_fresh_context(cl):
    c = cl.client()
    names = [f"rs{k}" for k in range(12)]
    for n in names:
        assert last(c.req("ctx.create", name=n))["t"] == "ok"
        assert last(c.req("execute", ctx=n, code="x = 1"))["status"] == "ok"
    where = {n: host_of(c, n) for n in names}
    victim = where[names[0]]
    # killed and started again at once: faster than the liveness bound, so
    # requests may reach the new instance before the router has noticed
    cl.kill_host(victim)
    cl.start_host(victim)
    for n in names:
        m = c.req("execute", ctx=n, code="print(x)")
        r = last(m)
        if where[n] == victim:
            assert not any(x["t"] in ("error", "stream") for x in m), m  # never a NameError
            # `err lost`, or, when the router learnt of the restart while
            # this request was in flight, `done aborted` naming the host
            assert (r["t"] == "err" and r["code"] == "lost") or (
                r["t"] == "done" and r["status"] in ("aborted", "died") and
                cl.host_endpoint(victim) in r["cause"]), r
        else:
            assert r["status"] == "ok"
    lst = {x["name"]: x for x in last(c.req("ctx.list"))["contexts"]}
    for n in names:
        assert (lst[n]["state"] == "lost") == (where[n] == victim)
    c.close()


def test_partition_then_heal_fences_the_old_instance(cl):
    c = cl.client()
    assert last(c.req("ctx.create", name="part"))["t"] == "ok"
    assert last(c.req("execute", ctx="part", code="y = 2"))["status"] == "ok"
    h = host_of(c, "part")
    instance = cl.host_state("r1", h)["instance"]
    run = c.send("execute", ctx="part", code="import time\ntime.sleep(30)")
    cl.partition(h, cut=True)
    try:
        d = last(c.collect([run], timeout=30)[run])
        assert d["status"] in ("died", "aborted") and cl.host_endpoint(h) in d["cause"], d
        r = last(c.req("execute", ctx="part", code="print(y)"))
        assert r["t"] == "err" and r["code"] == "lost"
    finally:
        cl.partition(h, cut=False)
    cl.wait_router("r1")
    # the same instance is back: its context is deleted there, never reached
    assert cl.host_state("r1", h)["instance"] == instance
    wait_for(lambda: "part" not in direct_names(cl, h), "the fenced context deleted")
    r = last(c.req("execute", ctx="part", code="print(y)"))
    assert r["t"] == "err" and r["code"] == "lost"
    # a lost context's name can be deleted, then made again
    assert last(c.req("ctx.delete", ctx="part"))["t"] == "ok"
    assert last(c.req("ctx.create", name="part"))["t"] == "ok"
    c.close()


def test_router_restart_keeps_the_catalog_in_etcd(cl):
    c = cl.client()
    assert last(c.req("ctx.create", name="durable"))["t"] == "ok"
    assert last(c.req("execute", ctx="durable", code="z = 'kept'"))["status"] == "ok"
    c.close()
    # a second router sees it through etcd
    cl.start_router("r2")
    cl.wait_router("r2")
    c2 = cl.client("r2")
    m = c2.req("execute", ctx="durable", code="print(z)")
    assert b"".join(x["data"] for x in m if x["t"] == "stream") == b"kept\n", m
    c2.close()
    # a context on another host, whose host restarts while no router runs
    c = cl.client()
    k = 0
    while True:
        assert last(c.req("ctx.create", name=f"gone{k}"))["t"] == "ok"
        if host_of(c, f"gone{k}") != host_of(c, "durable"):
            break
        k += 1
    gone_host = host_of(c, f"gone{k}")
    c.close()
    cl.stop_router("r2")
    cl.stop_router("r1")
    cl.kill_host(gone_host)
    cl.start_host(gone_host)
    cl.start_router("r1")
    cl.wait_router("r1")
    c = cl.client()
    m = c.req("execute", ctx="durable", code="print(z)")
    assert b"".join(x["data"] for x in m if x["t"] == "stream") == b"kept\n", m
    r = last(c.req("execute", ctx=f"gone{k}", code="1"))
    assert r["t"] == "err" and r["code"] == "lost" and cl.host_endpoint(gone_host) in r["message"]
    wait_for(lambda: f"gone{k}" not in direct_names(cl, gone_host), "the stale context deleted")
    # lost contexts stay lost across the restart
    r = last(c.req("execute", ctx="k0", code="1"))
    assert r["t"] == "err" and r["code"] == "lost", r
    c.close()


def test_catalog_read_after_the_hosts_answered_still_fences(cl):
    """A router whose etcd answers after the hosts do (etcd is stopped while
    the router starts) still finds a restarted host's old contexts lost, and
    deletes them there, with no client asking. CI once saw a router that
    checked the catalog only at a host's first hello, while it was empty."""
    c = cl.client()
    assert last(c.req("ctx.create", name="late0"))["t"] == "ok"
    h = host_of(c, "late0")
    c.close()
    cl.stop_router("r1")
    cl.kill_host(h)
    cl.start_host(h)
    assert "late0" in direct_names(cl, h)  # its table made it again, empty
    start = len(cl.log("r1.log"))
    os.kill(cl.etcd.pid, signal.SIGSTOP)
    try:
        cl.start_router("r1")
        wait_for(lambda: cl.log("r1.log")[start:].count(" live: instance ") >= cl.nhosts,
                 "every host live while etcd is stopped")
        assert "read from etcd" not in cl.log("r1.log")[start:]
    finally:
        os.kill(cl.etcd.pid, signal.SIGCONT)
    wait_for(lambda: "late0" not in direct_names(cl, h), "the stale context deleted")
    cl.wait_router("r1")
    c = cl.client()
    r = last(c.req("execute", ctx="late0", code="1"))
    assert r["t"] == "err" and r["code"] == "lost", r
    c.close()


def rss_peak(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_slow_client_backpressure_bounded_and_no_head_of_line(cl):
    """A client that does not read while its run writes 100 MB: the router
    holds a bounded amount (it stops reading that client's connection, the
    host then stops reading the worker), another client of the same host is
    served meanwhile, and the slow one finally gets every byte in order."""
    import msgpack
    from cluster import Conn
    slow, other = Conn(cl.router_endpoint("r1"), rcvhwm=8), cl.client()
    assert last(slow.req("ctx.create", name="flood"))["t"] == "ok"
    h = host_of(slow, "flood")
    # a context of the other client on the same host
    k = 0
    while True:
        assert last(other.req("ctx.create", name=f"near{k}"))["t"] == "ok"
        if host_of(other, f"near{k}") == h:
            break
        k += 1
    code = ("import sys\nb = bytes(range(256)) * 4096\n"
            "for i in range(100):\n    sys.stdout.buffer.write(bytes([i]) + b[1:])\n"
            "sys.stdout.flush()\n")
    rid = slow.send("execute", ctx="flood", code=code, timeout=600)
    # while the slow client reads nothing, the other is served on that host
    for _ in range(5):
        m = other.req("execute", ctx=f"near{k}", code="print('here')")
        assert last(m)["status"] == "ok"
    router_pid = cl.routers["r1"][0].pid
    # now read it all: in order, complete
    h256 = hashlib.sha256()
    want = hashlib.sha256()
    b = bytes(range(256)) * 4096
    for i in range(100):
        want.update(bytes([i]) + b[1:])
    n = 0
    deadline = time.monotonic() + 300
    while True:
        assert slow.s.poll(int((deadline - time.monotonic()) * 1000))
        m = msgpack.unpackb(slow.s.recv(), raw=False)
        assert m["re"] == rid
        if m["t"] == "stream":
            h256.update(m["data"])
            n += len(m["data"])
        if m["t"] == "done":
            assert m["status"] == "ok", m
            break
    assert n == 100 * 1024 * 1024 and h256.hexdigest() == want.hexdigest()
    # what the router ever held is far below the 100 MB that went through (at most 16 MiB
    # queued for the client plus libzmq's queues of 64 messages)
    print(f"router peak RSS {rss_peak(router_pid) / 2**20:.1f} MiB")
    assert rss_peak(router_pid) < 48 * 1024 * 1024, rss_peak(router_pid)
    slow.close()
    other.close()


def test_load_many_clients_many_contexts_through_the_router(cl):
    """The load test through the router: 12 clients at once (threads, a
    connection each), 3 contexts each spread over the hosts, 20 rounds of
    pipelined runs with output: every run gets exactly one terminal reply
    (Conn.collect checks), its own output whole, and each context's state
    counts every run of its own."""
    import threading
    clients, per, rounds = 12, 3, 20
    errors = []

    def one(ci):
        try:
            c = cl.client()
            names = [f"ld{ci}x{j}" for j in range(per)]
            ids = [c.send("ctx.create", name=n) for n in names]
            got = c.collect(ids, timeout=120)
            assert all(last(got[i])["t"] == "ok" for i in ids), [last(got[i]) for i in ids]
            ids = [c.send("execute", ctx=n, code="n = 0") for n in names]
            assert all(last(m)["status"] == "ok" for m in c.collect(ids, timeout=120).values())
            for r in range(rounds):
                runs = {c.send("execute", ctx=n, code=f"n += 1\nprint('{n}:' + 'x' * {r * 97})"): n
                        for n in names}
                got = c.collect(list(runs), timeout=120)
                for rid, n in runs.items():
                    assert last(got[rid])["status"] == "ok", got[rid][-1]
                    out = b"".join(x["data"] for x in got[rid] if x["t"] == "stream")
                    assert out == f"{n}:{'x' * (r * 97)}\n".encode(), (n, r, out[:80])
            ids = {c.send("execute", ctx=n, code="print(n)"): n for n in names}
            for rid, m in c.collect(list(ids), timeout=120).items():
                assert b"".join(x["data"] for x in m if x["t"] == "stream") == f"{rounds}\n".encode()
            ids = [c.send("ctx.delete", ctx=n) for n in names]
            assert all(last(m)["t"] == "ok" for m in c.collect(ids, timeout=120).values())
            c.quiet()
            c.close()
        except BaseException as e:  # reported by the main thread
            errors.append(f"client {ci}: {e!r}"[:2000])

    threads = [threading.Thread(target=one, args=(ci,)) for ci in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "a client never finished"
    assert not errors, "\n".join(errors)


def test_links_reset_while_the_host_lives(cl):
    """The router's connections to a live host are reset (every link and
    the control connection): each request in flight on them still gets
    exactly one terminal reply, `err unavailable` when its outcome is
    unknown, at once rather than never; the host is not taken for lost;
    its contexts keep their state; a create in flight ends known either
    way (reachable, or its name free); the ctx.list of the moment ends."""
    c = cl.client()
    assert last(c.req("ctx.create", name="blink"))["t"] == "ok"
    assert last(c.req("execute", ctx="blink", code="z = 5"))["status"] == "ok"
    h = host_of(c, "blink")
    instance = cl.host_state("r1", h)["instance"]
    run = c.send("execute", ctx="blink", code="print('a', flush=True)\nimport time\ntime.sleep(3)")
    until_stream(c, run)
    # a create placed on that host, in flight when the cable breaks
    creates = []
    for k in range(12):
        creates.append((f"bl{k}", c.send("ctx.create", name=f"bl{k}")))
    listing = c.send("ctx.list")
    cl.reset_links(h)
    got = c.collect([run, listing] + [r for _, r in creates], timeout=30)
    d = last(got[run])
    assert (d["t"] == "err" and d["code"] == "unavailable") or d["t"] == "done", d
    if d["t"] == "err":
        assert cl.host_endpoint(h) in d["message"], d
    assert last(got[listing])["t"] in ("ok", "err"), got[listing]
    c.quiet()
    # not lost: the same instance, the state is there
    r = c.req("execute", ctx="blink", code="print(z)")
    assert last(r)["status"] == "ok", r
    assert b"".join(x["data"] for x in r if x["t"] == "stream") == b"5\n"
    assert cl.host_state("r1", h)["instance"] == instance
    assert cl.host_state("r1", h)["state"] == "live"
    # each create ends known: made and reachable, or its name free to make
    # (while the router asks the host, a create of the name is `exists`)
    for name, rid in creates:
        if last(got[rid])["t"] != "ok":
            assert last(got[rid])["code"] == "unavailable", got[rid]

            def settled():
                listed = {x["name"] for x in last(c.req("ctx.list"))["contexts"]}
                return name in listed or last(c.req("ctx.create", name=name))["t"] == "ok"
            wait_for(settled, f"{name}: the create's outcome known")
        r = last(c.req("execute", ctx=name, code="1"))
        assert r["t"] == "done" and r["status"] == "ok", r
        assert last(c.req("ctx.delete", ctx=name))["t"] == "ok"
    wait_for(lambda: last(c.req("stats"))["contexts"]["pending"] == 0,
             f"nothing left pending: {last(c.req('stats'))}")
    c.close()


# ---- the router owns what a client's ctx.create names on a host ----------
def test_client_bounds_tier_cwd_policy(cl):
    """Each client key's bounds (the tenants file): acme may use sandbox (the
    default), a cwd under its root, memory_bytes up to 256 MiB, timeout up
    to 30 s, no network; beta has only the defaults (sandbox, no cwd)."""
    t = cl.client(tenant=True)
    b = cl.client(tenant="beta")
    # a wider tier: refused, naming the tier, and nothing made anywhere
    for tier in ("unsafe", "local_unsafe", "local"):
        r = last(t.req("ctx.create", name="wide", tier=tier))
        assert r["t"] == "err" and r["code"] == "forbidden" and "tier" in r["message"], r
    assert not any("acme.wide" in direct_names(cl, i) for i in range(3))
    # no tier: the client's default, with its caps set for the host
    r = last(t.req("ctx.create", name="bounded"))
    assert r["t"] == "ok", r
    assert r["ctx"]["tier"] == "sandbox", r
    pol = r["ctx"]["policy"]
    assert pol["memory_bytes"] == 268435456 and pol["timeout"] == 30 and pol["network_access"] is False, pol
    # a cwd outside its root, also by '..' or '.', and its root's siblings
    root = cl.acme_root
    for cwd in ("/etc", "/", f"{root}/..", f"{root}/work/../..", f"{root}/./work", f"{root}x", "work"):
        r = last(t.req("ctx.create", name="elsewhere", cwd=cwd))
        assert r["t"] == "err" and r["code"] == "forbidden" and "cwd" in r["message"], (cwd, r)
    r = last(t.req("ctx.create", name="inside", cwd=f"{root}/work"))
    assert r["t"] == "ok" and r["ctx"]["cwd"] == f"{root}/work", r
    # a policy over its bound: refused, naming the field
    for field, value in (("memory_bytes", 1 << 30), ("timeout", 31), ("network_access", True),
                         ("filesystem_read_roots", ["/"]), ("filesystem_write_roots", ["/etc"])):
        r = last(t.req("ctx.create", name="over", policy={field: value}))
        assert r["t"] == "err" and r["code"] == "forbidden" and f"policy.{field}" in r["message"], (field, r)
    r = last(t.req("ctx.create", name="narrow", policy={"memory_bytes": 1 << 27, "timeout": 5}))
    assert r["t"] == "ok" and r["ctx"]["policy"]["memory_bytes"] == 1 << 27, r
    # beta: the defaults; its `default`, made by the router on first use, is sandbox too
    m = b.req("execute", code="1")
    assert last(m).get("status") == "ok", m
    info = last(b.req("ctx.info", ctx="default"))
    assert info["t"] == "ok" and info["ctx"]["tier"] == "sandbox", info
    for tier in ("unsafe", "local"):
        r = last(b.req("ctx.create", name="wide", tier=tier))
        assert r["t"] == "err" and r["code"] == "forbidden", r
    r = last(b.req("ctx.create", name="any-cwd", cwd=f"{root}/work"))
    assert r["t"] == "err" and r["code"] == "forbidden" and "cwd" in r["message"], r
    r = last(b.req("ctx.create", name="plain"))
    assert r["t"] == "ok" and r["ctx"]["tier"] == "sandbox", r
    for c, names in ((t, ("bounded", "inside", "narrow")), (b, ("plain", "default"))):
        for n in names:
            assert last(c.req("ctx.delete", ctx=n))["t"] == "ok"
    t.close()
    b.close()


def test_snapshots_and_names_scoped_to_their_client(cl):
    """from_snapshot names one of the client's own contexts: another tenant's
    snapshot, or another tenant's context by its host-side name, is never
    reached."""
    t = cl.client(tenant=True)
    b = cl.client(tenant="beta")
    c = cl.client()
    assert last(t.req("ctx.create", name="snapsrc"))["t"] == "ok"
    assert last(t.req("execute", ctx="snapsrc", code="x = 41"))["status"] == "ok"
    h = next(i for i in range(3) if "acme.snapsrc" in direct_names(cl, i))
    d = cl.direct(h)
    try:
        r = last(d.req("ctx.snapshot", ctx="acme.snapsrc", name="s1"))
        assert r["t"] == "ok", r
    finally:
        d.close()
    # its own client restores it, on the snapshot's host
    r = last(t.req("ctx.create", name="restored", from_snapshot="snapsrc/s1"))
    assert r["t"] == "ok", r
    m = t.req("execute", ctx="restored", code="x + 1")
    assert last(m)["status"] == "ok" and any(x["t"] == "result" and "42" in str(x) for x in m), m
    # another tenant: neither by its own name nor by the host-side one
    for snap in ("snapsrc/s1", "acme.snapsrc/s1"):
        r = last(b.req("ctx.create", name="stolen", from_snapshot=snap))
        assert r["t"] == "err" and r["code"] in ("unknown_context", "bad_name"), (snap, r)
    # a client without a tenant: names with '.' are the tenants'
    r = last(c.req("ctx.create", name="stolen", from_snapshot="acme.snapsrc/s1"))
    assert r["t"] == "err" and r["code"] == "bad_name", r
    r = last(c.req("execute", ctx="acme.snapsrc", code="x"))
    assert r["t"] == "err" and r["code"] == "bad_name", r
    assert not any(n.endswith("stolen") for i in range(3) for n in direct_names(cl, i))
    for n in ("snapsrc", "restored"):
        assert last(t.req("ctx.delete", ctx=n))["t"] == "ok"
    for x in (t, b, c):
        x.close()


def test_keys_no_line_names_get_a_namespace_of_their_own(cl):
    """`* +`: every key the tenants file does not name has its own
    namespace and the default bounds (sandbox only)."""
    a, b = cl.client(tenant="anon0"), cl.client(tenant="anon1")
    r = last(a.req("ctx.create", name="same", tier="unsafe"))
    assert r["t"] == "err" and r["code"] == "forbidden", r
    assert last(a.req("ctx.create", name="same"))["ctx"]["tier"] == "sandbox"
    assert last(a.req("execute", ctx="same", code="v = 'a'"))["status"] == "ok"
    r = last(b.req("execute", ctx="same", code="v"))
    assert r.get("code") == "unknown_context", r
    r = last(b.req("ctx.create", name="same"))
    assert r["t"] == "ok" and r["ctx"]["name"] == "same", r
    assert [x["name"] for x in last(b.req("ctx.list"))["contexts"]] == ["same"]
    for x in (a, b):
        assert last(x.req("ctx.delete", ctx="same"))["t"] == "ok"
        x.close()
