"""Timeouts, interrupts, worker death, queues and stop_on_error."""

import os
import signal
import time

from conftest import wait_until

IGNORE_KI = ("import time\n"
             "while True:\n"
             " try:\n"
             "  time.sleep(10)\n"
             " except KeyboardInterrupt:\n"
             "  pass\n")


def worker_pid(client, ctx):
    info = client.info(ctx)
    assert info["state"] in ("idle", "busy"), info
    assert info["pid"] > 0, info
    return info["pid"]


# --- timeouts -------------------------------------------------------------

def test_timeout_interrupts_and_keeps_globals(client):
    assert client.execute("kept = 'yes'").status == "ok"
    t0 = time.monotonic()
    r = client.execute("while True:\n    pass", timeout=1)
    elapsed = time.monotonic() - t0
    assert r.status == "timeout", r
    assert r.done["state_lost"] is False
    assert "cause" not in r.done
    assert 0.9 <= r.done["duration"] < 10, r.done
    assert elapsed < 10
    r = client.execute("kept")
    assert r.status == "ok" and r.text == "'yes'", r
    assert r.accepted["incarnation"] == 1
    assert "previous_death" not in r.accepted


def test_timeout_float_and_zero(client):
    r = client.execute("import time\ntime.sleep(5)", timeout=0.5)
    assert r.status == "timeout", r
    assert r.done["duration"] < 4, r.done
    r = client.execute("time.sleep(1.2)", timeout=0)  # 0 = no timeout
    assert r.status == "ok", r
    r = client.execute("time.sleep(0.1)", timeout=3)  # int
    assert r.status == "ok", r


def test_timeout_ignored_interrupt_kills_after_grace(client):
    assert client.execute("kept = 1").status == "ok"
    t0 = time.monotonic()
    r = client.execute(IGNORE_KI, timeout=1)
    elapsed = time.monotonic() - t0
    assert r.status == "timeout", r
    assert r.done["state_lost"] is True, r.done
    cause = r.done["cause"]
    assert "timeout" in cause.lower() or "grace" in cause.lower(), cause
    assert r.done["incarnation"] == 1
    # killed only after the 2 s grace period, and not much later
    assert elapsed >= 2.7, f"killed after {elapsed:.2f} s, before timeout + grace"
    assert elapsed < 15
    info = client.info("default")
    assert info.get("last_death"), info
    r = client.execute("1 + 1")
    assert r.status == "ok", r
    assert r.accepted["incarnation"] == 2
    assert r.accepted.get("previous_death"), r.accepted
    # the state is really gone
    r = client.execute("kept")
    assert r.status == "error" and r.error["ename"] == "NameError", r


# --- interrupt ------------------------------------------------------------

def test_interrupt_running_sleep(client):
    assert client.execute("kept = [1, 2]").status == "ok"
    rid = client.submit("import time\ntime.sleep(30)")
    client.wait_event(rid, "accepted")
    t0 = time.monotonic()
    reply = client.request("interrupt")
    assert reply["t"] == "ok" and reply["interrupted"] is True, reply
    run = client.wait(rid)
    assert run.status == "interrupted", run
    assert run.done["state_lost"] is False
    assert time.monotonic() - t0 < 10
    r = client.execute("kept")
    assert r.text == "[1, 2]" and r.accepted["incarnation"] == 1, r


def test_interrupt_after_output(sclient):
    c = sclient
    c.ok("ctx.create", name="intr")
    rid = c.submit("import time\nprint('started', flush=True)\ntime.sleep(30)", ctx="intr")
    c.wait_event(rid, "stream")
    reply = c.request("interrupt", ctx="intr")
    assert reply["t"] == "ok" and reply["interrupted"] is True, reply
    run = c.wait(rid)
    assert run.status == "interrupted", run
    assert run.stdout == b"started\n"
    c.expect_quiet(rid)


def test_interrupt_busy_loop(client):
    rid = client.submit("n = 0\nwhile True:\n    n += 1")
    client.wait_event(rid, "accepted")
    time.sleep(0.2)
    assert client.request("interrupt")["interrupted"] is True
    assert client.wait(rid).status == "interrupted"
    r = client.execute("n > 0")
    assert r.text == "True", r


def test_interrupt_by_run_id(daemon, client):
    a = client.submit("import time\ntime.sleep(30)")
    b = client.submit("b_ran = True")
    client.wait_event(a, "accepted")
    # the queued run is not the running one: nothing happens
    r = client.request("interrupt", run=b)
    assert r["t"] == "ok" and r["interrupted"] is False, r
    # an id this client never sent
    r = client.request("interrupt", run=999)
    assert r["interrupted"] is False, r
    # another client's ids are its own: its "run 1" is not our run 1
    other = daemon.client()
    assert a == 1
    r = other.request("interrupt", run=1)
    assert r["t"] == "ok" and r["interrupted"] is False, r
    assert client.info("default")["state"] == "busy"
    r = client.request("interrupt", run=a)
    assert r["interrupted"] is True, r
    assert client.wait(a).status == "interrupted"
    assert client.wait(b).status == "ok"
    # after its end, interrupting that run cannot hit the next one
    c = client.submit("import time\ntime.sleep(1)\nc_ran = True")
    client.wait_event(c, "accepted")
    r = client.request("interrupt", run=a)
    assert r["interrupted"] is False, r
    rc = client.wait(c)
    assert rc.status == "ok", rc


def test_interrupt_by_str_run_id(sclient):
    c = sclient
    c.ok("ctx.create", name="sr")
    a = c.submit("import time\ntime.sleep(30)", ctx="sr")
    c.wait_event(a, "accepted")
    assert isinstance(a, str)
    r = c.request("interrupt", ctx="sr", run="req-nope")
    assert r["interrupted"] is False, r
    r = c.request("interrupt", ctx="sr", run=a)
    assert r["interrupted"] is True, r
    assert c.wait(a).status == "interrupted"


def test_interrupt_before_start_takes_effect(client):
    # sent before the run started: it is interrupted as soon as it starts
    client.ok("ctx.create", name="early")
    a = client.submit("import time\ntime.sleep(30)", ctx="early")
    r = client.request("interrupt", ctx="early", run=a)
    assert r["t"] == "ok", r
    t0 = time.monotonic()
    run = client.wait(a, 20)
    if r["interrupted"]:
        assert run.status == "interrupted", run
        assert time.monotonic() - t0 < 10


def test_interrupt_nothing_running(client):
    client.ok("ctx.create", name="idle")
    r = client.request("interrupt", ctx="idle")
    assert r["t"] == "ok" and r["interrupted"] is False, r
    # and the context is unharmed: a SIGINT to an idle worker is discarded
    r = client.execute("1", ctx="idle")
    assert r.status == "ok" and r.accepted["incarnation"] == 1, r
    assert client.execute("2").status == "ok"
    r = client.request("interrupt")
    assert r["t"] == "ok" and r["interrupted"] is False, r


def test_interrupt_unknown_context(client):
    client.err("interrupt", "unknown_context", ctx="nosuch")


def test_interrupt_leaves_queued_runs(client):
    rid1 = client.submit("import time\ntime.sleep(30)")
    rid2 = client.submit("after = 'ran'")
    client.wait_event(rid1, "accepted")
    assert client.request("interrupt")["interrupted"] is True
    assert client.wait(rid1).status == "interrupted"
    r2 = client.wait(rid2)
    assert r2.status == "ok", r2
    assert client.execute("after").text == "'ran'"


# --- worker death ---------------------------------------------------------

def test_segfault_reports_died(client):
    client.ok("ctx.create", name="bystander")
    assert client.execute("alive = 'still'", ctx="bystander").status == "ok"
    assert client.execute("kept = 1").status == "ok"
    r = client.execute("import ctypes\nctypes.string_at(0)")
    assert r.status == "died", r
    assert r.done["state_lost"] is True
    cause = r.done["cause"]
    assert "11" in cause or "SIGSEGV" in cause, cause
    assert r.done["incarnation"] == 1
    # next run: new incarnation, told about the death
    r = client.execute("'kept' in globals()")
    assert r.status == "ok", r
    assert r.text == "False"
    assert r.accepted["incarnation"] == 2
    pd = r.accepted.get("previous_death")
    assert pd and ("11" in pd or "SIGSEGV" in pd), r.accepted
    # only the first run of the new incarnation carries previous_death
    r = client.execute("1")
    assert "previous_death" not in r.accepted and r.accepted["incarnation"] == 2
    # another context did not notice
    r = client.execute("alive", ctx="bystander")
    assert r.text == "'still'" and r.accepted["incarnation"] == 1, r


def test_os_exit_reports_code(client):
    r = client.execute("import os\nos._exit(3)")
    assert r.status == "died", r
    assert r.done["state_lost"] is True
    assert "3" in r.done["cause"], r.done
    assert "code" in r.done["cause"] or "exit" in r.done["cause"], r.done
    r = client.execute("1")
    assert r.accepted["incarnation"] == 2 and "3" in r.accepted["previous_death"], r


def test_sigkill_from_outside_during_run(client):
    client.ok("ctx.create", name="k")
    pid = worker_pid(client, "k")
    r = client.execute("import os\nos.getpid()", ctx="k")
    assert int(r.text) == pid, "ctx.list pid is not the worker's pid"
    rid = client.submit("import time\ntime.sleep(30)", ctx="k")
    q1 = client.submit("q1 = 1", ctx="k")
    q2 = client.submit("q2 = 2", ctx="k", silent=True)
    client.wait_event(rid, "accepted")
    os.kill(pid, signal.SIGKILL)
    run = client.wait(rid)
    assert run.status == "died", run
    assert run.done["state_lost"] is True
    assert "9" in run.done["cause"] or "SIGKILL" in run.done["cause"], run.done
    for q in (q1, q2):
        rq = client.wait(q)
        assert rq.status == "aborted", rq
        assert "worker died" in rq.done["cause"], rq.done
        assert rq.of("accepted") == [], rq
    for i in (rid, q1, q2):
        client.expect_quiet(i, 0.1)
    info = client.info("k")
    assert info["state"] == "dead", info
    assert info["pid"] == 0 and info["rss"] == 0 and info["pss"] == 0, info
    assert info.get("last_death"), info
    r = client.execute("'q1' in globals()", ctx="k")
    assert r.status == "ok" and r.text == "False", r
    assert r.accepted["incarnation"] == 2
    assert r.accepted.get("previous_death"), r.accepted
    info = client.info("k")
    assert info["state"] == "idle" and info["pid"] not in (0, pid), info
    assert info["incarnation"] == 2


def test_worker_dies_while_idle(client):
    client.ok("ctx.create", name="idlekill")
    assert client.execute("v = 1", ctx="idlekill").status == "ok"
    pid = worker_pid(client, "idlekill")
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: client.info("idlekill")["state"] == "dead", 10), \
        client.info("idlekill")
    info = client.info("idlekill")
    assert info["last_death"] and ("9" in info["last_death"] or "KILL" in info["last_death"])
    r = client.execute("'v' in globals()", ctx="idlekill")
    assert r.status == "ok" and r.text == "False", r
    assert r.accepted["incarnation"] == 2
    assert r.accepted.get("previous_death"), r.accepted


def test_queued_runs_behind_crash_aborted(sclient):
    c = sclient
    rid = c.submit("import time, ctypes\ntime.sleep(0.3)\nctypes.string_at(0)")
    queued = [c.submit(f"x{i} = {i}") for i in range(3)]
    r = c.wait(rid)
    assert r.status == "died", r
    for q in queued:
        rq = c.wait(q)
        assert rq.status == "aborted", rq
        assert rq.done["cause"].startswith("worker died"), rq.done
    r = c.execute("1")
    assert r.status == "ok" and r.accepted["incarnation"] == 2, r


def test_no_crash_spreads(daemon, client):
    # a flood of deaths on one context; the daemon and another context live on
    client.ok("ctx.create", name="calm")
    assert client.execute("n = 0", ctx="calm").status == "ok"
    for i in range(3):
        r = client.execute("import os\nos._exit(1)")
        assert r.status == "died", r
        assert client.execute("n += 1", ctx="calm").status == "ok"
    assert client.execute("n", ctx="calm").text == "3"
    assert daemon.alive()


# --- stop_on_error and queue limits ----------------------------------------

def test_stop_on_error_aborts_queued(client):
    client.ok("ctx.create", name="soe")
    a = client.submit("import time\ntime.sleep(0.5)\n1/0", ctx="soe", stop_on_error=True)
    b = client.submit("b_ran = True", ctx="soe")
    c = client.submit("c_ran = True", ctx="soe")
    ra = client.wait(a)
    assert ra.status == "error", ra
    for q in (b, c):
        rq = client.wait(q)
        assert rq.status == "aborted", rq
        assert "stop_on_error" in rq.done["cause"], rq.done
        assert rq.done["state_lost"] is False
    r = client.execute("'b_ran' in globals() or 'c_ran' in globals()", ctx="soe")
    assert r.text == "False", r
    # runs sent after the abort run normally
    assert client.execute("1", ctx="soe").status == "ok"


def test_without_stop_on_error_queued_run(client):
    client.ok("ctx.create", name="nosoe")
    a = client.submit("import time\ntime.sleep(0.5)\n1/0", ctx="nosoe")
    b = client.submit("b_ran = True", ctx="nosoe")
    c = client.submit("c_ran = True", ctx="nosoe", stop_on_error=True)
    assert client.wait(a).status == "error"
    assert client.wait(b).status == "ok"
    assert client.wait(c).status == "ok"
    assert client.execute("b_ran and c_ran", ctx="nosoe").text == "True"


def test_stop_on_error_after_success_keeps_queue(client):
    a = client.submit("import time\ntime.sleep(0.3)", stop_on_error=True)
    b = client.submit("2")
    assert client.wait(a).status == "ok"
    assert client.wait(b).text == "2"


def test_stop_on_error_on_timeout(client):
    a = client.submit("import time\ntime.sleep(5)", timeout=0.5, stop_on_error=True)
    b = client.submit("b_ran = 1")
    assert client.wait(a).status == "timeout"
    rb = client.wait(b)
    assert rb.status == "aborted", rb


def test_queue_full_busy(client):
    client.ok("ctx.create", name="q")
    lim = client.ok("hello")["limits"]["max_queue"]
    assert lim == 64
    rid = client.submit("import time\ntime.sleep(30)", ctx="q")
    client.wait_event(rid, "accepted")
    ids = [client.submit(f"r{i} = {i}", ctx="q") for i in range(lim)]
    over = client.submit("overflow = 1", ctx="q")
    reply = client.collect(over)
    assert reply[-1]["t"] == "err" and reply[-1]["code"] == "busy", reply
    assert len(reply) == 1
    info = client.info("q")
    assert info["state"] == "busy" and info["queued"] == lim, info
    assert client.request("interrupt", ctx="q")["interrupted"] is True
    assert client.wait(rid).status == "interrupted"
    for i in ids:
        assert client.wait(i).status == "ok"
    r = client.execute("r63, 'overflow' in globals()", ctx="q")
    assert r.text == "(63, False)", r
    client.expect_quiet(over, 0.05)
