"""Routing ids are bound to the CurveZMQ connection (and so the key) that
sent the request (daemon/supervisor/sup_route.c): a client with another authorised key
that connects with the routing id of one that dropped gets nothing of the
first client's run (dropped, counted in stats `route_dropped`); the same
client reconnecting gets a `gap` message instead of a silent tail. Waits
are bounded: the run's end is seen through a third client.

A connection that brings a routing id still held by a live connection is
ignored by libzmq (no ZMQ_ROUTER_HANDOVER: a live client is never pushed off
its id), so a test that reuses an id first waits until the daemon has seen the
old connection drop (`stats` `disconnects`), as PROTOCOL.md section 7 tells
such clients to."""

import signal
import subprocess

import pytest
import zmq

from conftest import CTXD_BIN, RECV_TIMEOUT, pack, unpack, wait_until, free_port

RUN = "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.05)"


@pytest.fixture
def curve(tmp_path):
    state = tmp_path / "state"
    port = free_port()
    proc = subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}", "--state-dir",
                             str(state)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    assert wait_until(lambda: (state / "server.pub").exists(), RECV_TIMEOUT)
    server_pub = (state / "server.pub").read_text().strip().encode()
    zctx = zmq.Context()
    socks = []

    def connect(keys, routing_id=None):
        pub, sec = keys
        s = zctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            s.setsockopt(zmq.ROUTING_ID, routing_id)
        s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_pub, pub, sec
        s.connect(f"tcp://127.0.0.1:{port}")
        socks.append(s)
        return s

    def keypair():
        pub, sec = zmq.curve_keypair()
        with open(state / "authorized_keys", "a") as f:
            f.write(pub.decode() + "\n")
        return pub, sec

    yield connect, keypair
    for s in socks:
        s.close(0)
    zctx.term()
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def recv(s, timeout=RECV_TIMEOUT):
    assert s.poll(int(timeout * 1000)), "no message in time"
    return unpack(s.recv())


def request(s, t, rid, _others=None, **fields):
    """Sends a request and returns its terminal reply; other messages
    received meanwhile go to _others (when given)."""
    s.send(pack({"v": 1, "t": t, "id": rid, **fields}))
    while True:
        m = recv(s)
        if m.get("re") == rid and m["t"] in ("ok", "err", "done"):
            return m
        if _others is not None:
            _others.append(m)


def idle(watcher, n=[1000]):
    n[0] += 1
    infos = request(watcher, "ctx.list", n[0])["contexts"]
    return all(i["state"] == "idle" for i in infos)


def disconnects(watcher, n=[5000]):
    n[0] += 1
    return request(watcher, "stats", n[0])["counters"]["disconnects"]


def drop(watcher, s):
    """Closes s and waits until the daemon has seen its connection drop."""
    before = disconnects(watcher)
    s.close(0)
    assert wait_until(lambda: disconnects(watcher) > before, RECV_TIMEOUT)


def start_run(s):
    s.send(pack({"v": 1, "t": "execute", "id": 1, "code": RUN}))
    assert recv(s)["t"] == "accepted"
    assert recv(s)["t"] == "stream"  # the run is under way


def test_other_key_reusing_a_routing_id_gets_nothing(curve):
    connect, keypair = curve
    a_keys, b_keys = keypair(), keypair()
    watcher = connect(keypair())
    a = connect(a_keys, b"client-x")
    start_run(a)
    drop(watcher, a)
    b = connect(b_keys, b"client-x")
    # b is served, but receives nothing of a's run
    got = []
    assert request(b, "hello", 7, got)["t"] == "ok"
    assert wait_until(lambda: idle(watcher), RECV_TIMEOUT)
    assert request(b, "hello", 8, got)["t"] == "ok"  # everything before it was read
    while b.poll(0):
        got.append(unpack(b.recv()))
    assert got == [], got
    assert request(watcher, "stats", 9)["counters"]["route_dropped"] > 0


def test_same_client_reconnecting_is_told_of_the_gap(curve):
    connect, keypair = curve
    keys = keypair()
    watcher = connect(keypair())
    a = connect(keys, b"client-y")
    start_run(a)
    drop(watcher, a)
    assert wait_until(lambda: idle(watcher), RECV_TIMEOUT)
    a2 = connect(keys, b"client-y")
    a2.send(pack({"v": 1, "t": "hello", "id": 5}))
    first = recv(a2)
    assert first["t"] == "gap" and first["re"] is None and first["dropped"] > 0, first
    assert recv(a2)["re"] == 5
    # no silent tail: nothing of the old run follows
    got = []
    assert request(a2, "hello", 6, got)["t"] == "ok"
    assert got == [] and not a2.poll(0), got


def test_reconnected_client_is_served_normally(curve):
    connect, keypair = curve
    keys = keypair()
    watcher = connect(keypair())
    a = connect(keys, b"client-z")
    assert request(a, "hello", 1)["t"] == "ok"
    drop(watcher, a)
    a2 = connect(keys, b"client-z")
    r = request(a2, "execute", 2, code="6 * 7")
    assert r["t"] == "done" and r["status"] == "ok", r  # nothing was lost: no gap


def test_live_client_keeps_its_id_against_a_newcomer(curve):
    """Another key that connects with the routing id of a live client takes
    nothing from it: the live client gets its whole run, the newcomer none
    of it (libzmq ignores the newcomer while the id is held)."""
    connect, keypair = curve
    a = connect(keypair(), b"client-w")
    start_run(a)
    b = connect(keypair(), b"client-w")
    b.send(pack({"v": 1, "t": "hello", "id": 3}))
    lines = []
    while True:
        m = recv(a)
        if m["t"] == "stream":
            lines.append(m["data"])
        if m["t"] == "done":
            break
    assert m["status"] == "ok" and b"".join(lines).split() == [b"%d" % i for i in range(1, 40)], lines
    assert not b.poll(500)
