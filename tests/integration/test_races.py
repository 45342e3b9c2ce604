"""Pipelined and racing requests, slow or vanished clients, daemon shutdown."""

import os
import signal
import time

import zmq

from conftest import pack, pid_gone, proc_start, wait_until

FLOOD = ("import sys\nfor i in range(20000):\n"
         "    sys.stdout.write('z' * 100 + '\\n')\n    sys.stdout.flush()\n")


def test_two_clients_first_use_of_default(daemon):
    a, b = daemon.client(), daemon.client("str")
    ra = a.submit("import os\nos.getpid()")
    rb = b.submit("import os\nos.getpid()")
    x, y = a.wait(ra), b.wait(rb)
    assert x.status == "ok" and y.status == "ok", (x, y)
    assert x.text == y.text, "two workers for one context"
    assert x.accepted["incarnation"] == y.accepted["incarnation"] == 1
    assert sorted([x.accepted["execution_count"], y.accepted["execution_count"]]) == [1, 2]


def test_racing_creates_of_one_name(daemon):
    a, b = daemon.client(), daemon.client()
    ia = a.send("ctx.create", name="same")
    ib = b.send("ctx.create", name="same")
    ra, rb = a.collect(ia)[-1], b.collect(ib)[-1]
    kinds = sorted([ra["t"], rb["t"]])
    assert kinds == ["err", "ok"], (ra, rb)
    err = ra if ra["t"] == "err" else rb
    assert err["code"] == "exists", err


def test_create_then_delete_pipelined(client):
    c = client.send("ctx.create", name="brief")
    d = client.send("ctx.delete", ctx="brief")
    rc = client.collect(c)
    rd = client.collect(d)
    assert len(rc) == 1 and len(rd) == 1
    assert rd[-1]["t"] == "ok", rd
    assert rc[-1]["t"] in ("ok", "err"), rc
    if rc[-1]["t"] == "err":
        assert rc[-1]["code"] in ("unknown_context", "spawn"), rc
    client.expect_quiet(c, 0.2)
    assert "brief" not in client.contexts()
    assert client.execute("1").status == "ok"


def test_restart_pipelined_with_runs(client):
    a = client.submit("x = 1")
    r = client.send("ctx.restart", ctx="default")
    b = client.submit("'x' in globals()")
    ra = client.wait(a)
    # a runs before the restart arrives, or is aborted by it
    assert ra.status in ("ok", "aborted"), ra
    assert client.collect(r)[-1]["t"] == "ok"
    rb = client.wait(b)
    assert rb.status == "ok" and rb.text == "False", rb
    assert rb.accepted["incarnation"] == 2


def test_double_restart_pipelined(client):
    client.ok("ctx.create", name="rr")
    r1 = client.send("ctx.restart", ctx="rr")
    r2 = client.send("ctx.restart", ctx="rr")
    run = client.submit("1", ctx="rr")
    t1 = client.collect(r1)
    t2 = client.collect(r2)
    assert len(t1) == 1 and len(t2) == 1, (t1, t2)
    assert t2[-1]["t"] == "ok", t2
    assert t1[-1]["t"] in ("ok", "err"), t1
    rr = client.wait(run)
    assert rr.status == "ok" and rr.accepted["incarnation"] == 3, rr
    for i in (r1, r2, run):
        client.expect_quiet(i, 0.1)
    info = client.info("rr")
    assert info["state"] == "idle" and info["incarnation"] == 3, info


def test_delete_then_execute_pipelined(client):
    client.ok("ctx.create", name="gone")
    d = client.send("ctx.delete", ctx="gone")
    e = client.submit("1", ctx="gone")
    assert client.collect(d)[-1]["t"] == "ok"
    r = client.collect(e)
    assert r[-1]["t"] == "err" and r[-1]["code"] == "unknown_context", r


def test_interrupt_waited_for_subprocess(client):
    rid = client.submit("import subprocess\nsubprocess.run(['sleep', '30'])")
    client.wait_event(rid, "accepted")
    time.sleep(0.3)
    t0 = time.monotonic()
    assert client.request("interrupt")["interrupted"] is True
    r = client.wait(rid, 20)
    assert r.status == "interrupted", r
    assert time.monotonic() - t0 < 5
    assert client.execute("1").accepted["incarnation"] == 1


def test_timeout_of_waited_for_subprocess(client):
    t0 = time.monotonic()
    r = client.execute("import subprocess\nsubprocess.run(['sleep', '30'])", timeout=1)
    assert r.status == "timeout", r
    assert time.monotonic() - t0 < 10
    assert client.execute("2").text == "2"


def test_timeout_while_client_reads_slowly(daemon):
    slow = daemon.client(rcvhwm=2)
    rid = slow.submit(FLOOD + "import time\ntime.sleep(30)", timeout=1)
    time.sleep(4)
    r = slow.wait(rid, 30)
    assert r.status == "timeout", r.done
    # what was written before the end arrived, in order
    out = r.stdout
    line = b"z" * 100 + b"\n"
    assert len(out) % len(line) == 0 and out == line * (len(out) // len(line))
    assert slow.execute("1").status == "ok"


def test_slow_client_disconnects_run_finishes(daemon):
    slow = daemon.client(rcvhwm=2)
    other = daemon.client()
    other.ok("ctx.create", name="abandoned")
    slow.submit(FLOOD + "finished = True", ctx="abandoned")
    time.sleep(1)
    slow.sock.close(0)
    daemon.clients.remove(slow)
    assert wait_until(lambda: other.info("abandoned")["state"] == "idle", 20), \
        other.info("abandoned")
    r = other.execute("finished", ctx="abandoned")
    assert r.text == "True", r


def test_restart_with_slow_client_keeps_terminal_replies(daemon):
    slow = daemon.client(rcvhwm=2)
    admin = daemon.client()
    admin.ok("ctx.create", name="rflood")
    rid = slow.submit(FLOOD + "import time\ntime.sleep(30)", ctx="rflood")
    q = slow.submit("1", ctx="rflood")
    time.sleep(1.5)
    r = admin.request("ctx.restart", _timeout=20, ctx="rflood")
    assert r["t"] == "ok", r
    r = slow.wait(rid, 20)
    assert r.status == "aborted" and r.done["cause"] == "context restarted", r.done
    assert slow.wait(q, 20).status == "aborted"
    assert slow.execute("1", ctx="rflood").accepted["incarnation"] == 2


def _workers_with_children(client, names):
    procs = []
    for n in names:
        r = client.execute("import subprocess, os\n"
                           "p = subprocess.Popen(['sleep', '100'])\n(os.getpid(), p.pid)", ctx=n)
        w, ch = eval(r.text)
        procs += [(w, proc_start(w)), (ch, proc_start(ch))]
    return procs


def test_sigterm_stops_daemon_and_workers(make_daemon):
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="t1")
    procs = _workers_with_children(c, ["default", "t1"])
    rid = c.submit("import time\ntime.sleep(30)", ctx="t1")
    q = c.submit("1", ctx="t1")
    c.wait_event(rid, "accepted")
    d.stopped_by_test = True
    d.proc.send_signal(signal.SIGTERM)
    # every run gets its terminal reply before the daemon goes: the running
    # one `shutdown`, the queued one (it never ran) `shutdown` or `aborted`,
    # or, when the daemon had not read it yet, `err shutting_down`
    r = c.wait(rid, 10)
    assert r.status == "shutdown" and r.done["cause"], r
    r = c.wait(q, 10)
    if r.terminal["t"] == "err":
        assert r.err["code"] == "shutting_down", r
    else:
        assert r.status in ("shutdown", "aborted") and r.done["cause"], r
    try:
        rc = d.proc.wait(5)
    except Exception:
        raise AssertionError("ctxd did not exit within 5 s of SIGTERM")
    assert rc == 0, f"ctxd exited with {rc} on SIGTERM:\n{d.log_text()}"
    assert not os.path.exists(d.endpoint[len("ipc://"):]), "socket file left behind"
    left = [p for p, s in procs if not wait_until(lambda: pid_gone(p, s), 5)]
    assert not left, f"processes left after ctxd stopped: {left}"


def test_sigkill_of_daemon_leaves_no_workers(make_daemon):
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="k1")
    procs = _workers_with_children(c, ["default", "k1"])
    rid = c.submit("import time\ntime.sleep(30)", ctx="k1")  # one busy, one idle
    c.wait_event(rid, "accepted")
    d.stopped_by_test = True
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(5)
    left = [p for p, s in procs if not wait_until(lambda: pid_gone(p, s), 5)]
    # clean up what is left, by pid (we started the daemon)
    for p, s in procs:
        if not pid_gone(p, s):
            os.kill(p, signal.SIGKILL)
    assert not left, f"workers or their children outlived a killed ctxd: {left} of {procs} (worker, child pairs)"


def _stuck_client_sends(daemon, n):
    """A client that sends n hello requests and does not read the replies."""
    stuck = daemon.client(rcvhwm=1)
    stuck.sock.setsockopt(zmq.SNDHWM, 0)
    for i in range(n):
        stuck.send_raw(pack({"v": 1, "t": "hello", "id": i}))
    return stuck


def _read_all(client, n, timeout=30):
    got = set()
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = client._recv_one(3)
        if m is None:
            break
        assert m["t"] == "ok", m
        got.add(m["re"])
    return got


def test_client_not_reading_replies_does_not_stall_others(daemon):
    # A client floods requests and reads none of the replies; others are
    # served meanwhile (replies to one client never wait behind another's).
    stuck = _stuck_client_sends(daemon, 5000)
    time.sleep(1)
    other = daemon.client()
    rid = other.send("hello")
    t0 = time.monotonic()
    msgs = other.collect(rid, 10)
    assert msgs[-1]["t"] == "ok"
    assert time.monotonic() - t0 < 5
    other.ok("ctx.create", name="ok-meanwhile")
    assert other.execute("1", ctx="ok-meanwhile").text == "1"
    # and the stuck client gets every reply once it reads
    got = _read_all(stuck, 5000)
    assert got == set(range(5000)), f"{5000 - len(got)} replies missing"


def test_no_reply_dropped_for_a_client_that_reads_late(make_daemon):
    # Guarantee 1 (and PROTOCOL.md section 7, "Nothing is dropped on the
    # daemon side"): a client that reads late still gets every reply that
    # fits in what the daemon holds for it (--max-client-held; past it,
    # test_chaos_output.py::test_unread_replies_are_bounded).
    daemon = make_daemon("--max-client-held", "512M", "--max-held", "512M")
    n = 110_000
    stuck = _stuck_client_sends(daemon, n)
    time.sleep(3)
    got = _read_all(stuck, n, 60)
    missing = sorted(set(range(n)) - got)
    assert not missing, (f"{len(missing)} of {n} replies dropped "
                         f"(ids {missing[0]}..{missing[-1]})")
