"""Keys and failed handshakes (issue 43): a key and a key file are separate
options, every failed CurveZMQ handshake is said (peer, reason) and counted
on the side that sees it, and a host that refused the router is tried
again, with backoff, until its authorized_keys lists the router. One host
in a network namespace of its own (tests/router/cluster.py), no etcd.

    CTXD_BIN=build/daemon/ctxd /usr/bin/python3 -m pytest -q tests/router/test_handshake.py
"""

import os
import subprocess
import sys
import time

import msgpack
import pytest
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ROUTER, Cluster, Conn, why_not  # noqa: E402

REASON = why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def cl():
    c = Cluster(nhosts=1, liveness=0.3, liveness_max=3.0)
    try:
        c.net_up()
        # the host lists the test's client key only: the router is refused
        c.start_host(0, authorized=[c.client_pub])
        yield c
    finally:
        c.down()


def wait_for(pred, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def router_stats(cl, name):
    c = cl.client(name)
    try:
        return c.req("stats")[-1]
    finally:
        c.close()


def router_hello(cl, name):
    c = cl.client(name)
    try:
        return c.req("hello")[-1]
    finally:
        c.close()


def send_with(endpoint, server_pub=None, secret=None, plain=False):
    """One hello from a client whose handshake fails; closed after a while."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    if not plain:
        s.curve_serverkey = server_pub.encode()
        s.curve_secretkey = secret.encode()
        s.curve_publickey = zmq.curve_public(secret.encode())
    s.connect(endpoint)
    s.send(msgpack.packb({"v": 1, "t": "hello", "id": 1}))
    time.sleep(0.5)
    s.close(0)
    ctx.term()


def key_path_of_40(cl):
    """A copy of the hosts' server.pub at a path exactly 40 characters long."""
    stem = os.path.join(cl.tmp, "")
    pad = 40 - len(stem) - len("/server.pub")
    assert pad >= 1, stem
    d = stem + "k" * pad
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "server.pub")
    with open(os.path.join(cl.keydir, "server.pub")) as src, open(path, "w") as dst:
        dst.write(src.read())
    assert len(path) == 40
    return path


def test_host_key_is_a_key_and_host_key_file_a_file(cl):
    path = key_path_of_40(cl)
    # --host-key takes a key: a path (even one of 40 characters) is refused
    # at start, the option named and its -file twin said
    for bad in (path, "not-a-key"):
        p = subprocess.run([ROUTER, "--state-dir", cl.router_dir, "--listen",
                            cl.router_endpoint("bad"), "--host", cl.host_endpoint(0),
                            "--host-key", bad], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, p
        assert "--host-key" in p.stderr and "--host-key-file" in p.stderr, p.stderr
    p = subprocess.run([ROUTER, "--state-dir", cl.router_dir, "--listen",
                        cl.router_endpoint("bad"), "--host", cl.host_endpoint(0),
                        "--host-key-file", os.path.join(cl.tmp, "none.pub")],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "--host-key-file" in p.stderr, p


def test_refused_router_retried_until_its_key_is_listed(cl):
    path = key_path_of_40(cl)
    cl.start_router("r1", etcd=False, host_key=["--host-key-file", path])
    st = wait_for(lambda: (lambda s: s if s["hosts"][0]["reach"] == "refused" else None)(
        router_stats(cl, "r1")), "the host refuses the router")
    h = st["hosts"][0]
    assert "ZAP refused" in h["why"], h
    assert h["handshakes_failed"]["refused"] >= 1, h
    assert st["handshakes_failed"]["hosts"]["refused"] >= 1, st
    log = wait_for(lambda: "handshake with host" in cl.log("r1.log") and cl.log("r1.log"),
                   "the router says the refusal")
    assert f"handshake with host {cl.host_endpoint(0)} failed: ZAP refused" in log, log
    # hello through a router with no live host says so, not zeros
    hello = router_hello(cl, "r1")
    assert hello["t"] == "ok" and "limits" not in hello, hello
    assert "no host is live" in hello["unavailable"], hello
    assert f"{cl.host_endpoint(0)} refused" in hello["unavailable"], hello
    assert hello["router"]["states"][0]["reach"] == "refused", hello
    # the router's key is added; no restart: found within the backoff
    time.sleep(2)
    with open(os.path.join(cl.host_dir(0), "authorized_keys"), "w") as f:
        f.write(f"{cl.client_pub}\n{cl.router_pub}\n")
    added = time.monotonic()
    st = wait_for(lambda: (lambda s: s if s["hosts"][0]["state"] == "live" else None)(
        router_stats(cl, "r1")), "the host takes the router once listed", timeout=40)
    assert st["hosts"][0]["reach"] == "up" and st["hosts"][0]["why"] == "", st
    print(f"live {time.monotonic() - added:.1f} s after the key was added")
    hello = router_hello(cl, "r1")
    assert "unavailable" not in hello and "limits" in hello, hello
    assert hello["router"]["summary"].startswith("1 of 1 hosts up"), hello


def daemon_stats(cl):
    c = cl.direct(0)
    try:
        return c.req("stats")[-1]
    finally:
        c.close()


@pytest.mark.parametrize("side", ["host", "router"])
def test_each_failed_handshake_said_and_counted(cl, side):
    if side == "host":
        endpoint, server_pub, log = cl.host_endpoint(0), cl.host_pub, "host0.log"

        def failed():
            return daemon_stats(cl)["handshakes_failed"]
    else:
        if "r1" not in cl.routers:
            cl.start_router("r1", etcd=False)
        endpoint, server_pub, log = cl.routers["r1"][1], cl.router_pub, "r1.log"

        def failed():
            return router_stats(cl, "r1")["handshakes_failed"]["clients"]
    before = failed()
    other_pub, other_sec = (k.decode() for k in zmq.curve_keypair())
    _, unknown_sec = (k.decode() for k in zmq.curve_keypair())
    ip = "10." if side == "host" else "127.0.0.1"
    # a plain client that reads the server's CURVE greeting before it sent
    # its own closes at once: the server then sees a close without a reason
    # (libzmq's NO_DETAIL), counted and said as such
    cases = [
        (("plain", "no_detail"), dict(plain=True), ("plain text against CURVE",
                                                    "closed during the handshake")),
        (("wrong_key",), dict(server_pub=other_pub, secret=cl.client_sec), ("wrong server key",)),
        (("refused",), dict(server_pub=server_pub, secret=unknown_sec), ("refused a client from",)),
    ]
    for kinds, how, says in cases:
        n0 = {s: cl.log(log).count(s) for s in says}
        send_with(endpoint, **how)
        now = wait_for(lambda: (lambda f: f if any(f[k] > before[k] for k in kinds) else None)(
            failed()), f"{kinds[0]} counted on the {side}")
        kind = next(k for k in kinds if now[k] > before[k])
        said = says[kinds.index(kind)]
        # the line is said once the connection's end names the peer
        text = wait_for(lambda: cl.log(log).count(said) > n0[said] and cl.log(log),
                        f"{kind} said")
        line = [x for x in text.splitlines() if said in x][-1]
        assert ip in line, line  # the peer's address
        if kind != "refused":
            assert f"({kind})" in line and endpoint.split(":")[1].lstrip("/") in line, line
        before = now
    # one failing client retrying forever is said at a bounded rate
    n0 = cl.log(log).count("wrong server key")
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.linger = 0
    s.curve_serverkey, s.curve_secretkey = other_pub.encode(), cl.client_sec.encode()
    s.curve_publickey = zmq.curve_public(cl.client_sec.encode())
    s.reconnect_ivl = 1
    s.connect(endpoint)
    f0 = failed()["wrong_key"]
    time.sleep(2.0)
    s.close(0)
    # two seconds span at most three one-second windows of ten lines; the
    # client failed many more times than that, each counted
    lines = cl.log(log).count("wrong server key") - n0
    assert lines <= 30, lines
    assert failed()["wrong_key"] - f0 > lines, (failed(), lines)
