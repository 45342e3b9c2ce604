"""The zygote fork-server, preloads, ctx.fork, and workers never outliving the
daemon (PROTOCOL.md 5 ctx.fork, 9.1-9.3). No timing thresholds."""

import os
import signal
import time

from conftest import pid_gone, proc_start, wait_until

# A stdlib module that a plain worker does not import at start-up.
PRELOAD = "decimal"


def children(pid):
    """(pid, cmdline) of the processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append((int(d), cmd))
    return out


def zygote_pid(daemon):
    z = [p for p, cmd in children(daemon.proc.pid) if "--zygote" in cmd and not pid_gone(p)]
    assert len(z) <= 1, z
    return z[0] if z else None


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def run_ok(client, code, ctx):
    r = client.execute(code, ctx=ctx)
    assert r.status == "ok", r
    return r


# --- zygote and preloads ------------------------------------------------------

def test_hello_reports_preloads(make_daemon):
    d = make_daemon("--preload", f"{PRELOAD}, no_such_module_ctxd_test", "--preload", "json")
    pre = d.client().ok("hello")["preloads"]
    assert pre == {"loaded": [PRELOAD, "json"], "skipped": ["no_such_module_ctxd_test"]}, pre


def test_hello_without_preloads(client):
    assert client.ok("hello")["preloads"] == {"loaded": [], "skipped": []}


def test_preload_is_in_sys_modules_at_the_first_run(make_daemon):
    d = make_daemon("--preload", PRELOAD)
    c = d.client()
    c.ok("ctx.create", name="p")
    r = c.execute(f"import sys\n'{PRELOAD}' in sys.modules", ctx="p")
    assert r.text == "True", r
    assert r.accepted["execution_count"] == 1
    # the module works in the new context
    r = c.execute(f"import {PRELOAD}\nstr({PRELOAD}.Decimal('1.5') * 2)", ctx="p")
    assert r.text == "'3.0'", r
    # a daemon without the preload does not have it: the check above means something
    plain = make_daemon().client()
    r = plain.execute(f"import sys\n'{PRELOAD}' in sys.modules")
    assert r.text == "False", r


def test_preload_from_environment(make_daemon, monkeypatch):
    monkeypatch.setenv("CTXD_PRELOAD", PRELOAD)
    d = make_daemon()
    c = d.client()
    assert c.ok("hello")["preloads"]["loaded"] == [PRELOAD]
    assert c.execute(f"import sys\n'{PRELOAD}' in sys.modules").text == "True"


def test_each_context_draws_its_own_random_numbers(make_daemon):
    # The zygote's generators are copied into every worker by fork: each
    # worker must reseed numpy's global generator (and CPython's random
    # reseeds itself), or contexts would draw the same "random" numbers.
    d = make_daemon("--preload", "numpy")
    c = d.client()
    ints, normals, stdlib = set(), set(), set()
    for i in range(4):
        c.ok("ctx.create", name=f"r{i}")
        r = run_ok(c, "import numpy as np, random\n"
                   "(tuple(np.random.randint(0, 2**31, 4).tolist()), np.random.normal(),\n"
                   " random.getrandbits(64))", f"r{i}")
        a, b, g = eval(r.text)
        ints.add(a)
        normals.add(b)
        stdlib.add(g)
    assert len(ints) == len(normals) == len(stdlib) == 4, (ints, normals, stdlib)
    # the state set in place is a working MT19937 state: seeding still
    # gives numpy's known sequence
    r = run_ok(c, "import numpy as np\nnp.random.seed(0)\nnp.random.randint(0, 1000, 3).tolist()",
               "r0")
    assert r.text == "[684, 559, 629]", r


def test_zygote_worker_is_set_up_like_a_fresh_one(daemon, client, tmp_path):
    sub = tmp_path / "wd"
    sub.mkdir()
    info = client.ok("ctx.create", name="w", cwd=str(sub), env={"CTXD_T_VAR": "v1"})["ctx"]
    pid = info["pid"]
    r = run_ok(client, "import os, sys, threading\n"
               "st = open('/proc/self/status').read()\n"
               "threads = int(st.split('Threads:')[1].split()[0])\n"
               "(os.getcwd(), os.environ.get('CTXD_T_VAR'), os.getenv('OMP_NUM_THREADS'),\n"
               " os.getpid(), os.getpgid(0), os.getppid(), threads,\n"
               " sorted(k for k in globals() if not k.startswith('__')))", "w")
    cwd, var, omp, wpid, pgid, ppid, threads, names = eval(r.text)
    assert cwd == str(sub)
    assert var == "v1"
    # the zygote's OMP_NUM_THREADS=1 is not the worker's environment
    assert omp == os.environ.get("OMP_NUM_THREADS")
    assert wpid == pid and pgid == pid, "a worker leads its own process group"
    assert ppid == daemon.proc.pid, "the worker's parent is the supervisor"
    assert threads == 2, "the main thread and the output flusher"
    assert names == ["os", "st", "sys", "threading", "threads"], names
    # output and errors work as in any worker
    r = client.execute("import os\nprint('hi')\nos.system('echo raw')\n1/0", ctx="w")
    assert r.status == "error" and r.stdout == b"hi\nraw\n", r
    assert r.error["ename"] == "ZeroDivisionError"


def test_bad_cwd_of_a_deleted_directory_reports_spawn(client, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    client.ok("ctx.create", name="bd", cwd=str(gone))
    os.rmdir(gone)
    r = client.execute("import os\nos._exit(4)", ctx="bd")
    assert r.status == "died"
    r = client.execute("1", ctx="bd")
    # a new incarnation (forked by the zygote) cannot enter the directory
    assert r.status in ("died", "aborted"), r
    assert "directory" in r.done.get("cause", ""), r


def test_killed_zygote_is_restarted_and_creation_keeps_working(make_daemon):
    d = make_daemon("--preload", PRELOAD)
    c = d.client()
    z1 = zygote_pid(d)
    assert z1, "no zygote process under the daemon"
    c.ok("ctx.create", name="before")
    s1 = proc_start(z1)
    os.kill(z1, signal.SIGKILL)
    # creation works right away (the zygote is restarting, or already back)
    c.ok("ctx.create", name="during")
    assert c.execute("1 + 1", ctx="during").text == "2"
    assert wait_until(lambda: pid_gone(z1, s1), 10)
    assert wait_until(lambda: zygote_pid(d) not in (None, z1), 10), "the zygote was not restarted"
    z2 = zygote_pid(d)
    # the new zygote serves: its children have the preload
    assert wait_until(lambda: c.ok("hello")["preloads"]["loaded"] == [PRELOAD], 10)
    c.ok("ctx.create", name="after")
    r = c.execute(f"import sys, os\n('{PRELOAD}' in sys.modules, os.getppid())", ctx="after")
    assert r.text == f"(True, {d.proc.pid})", r
    # contexts made before the kill are untouched
    assert c.execute("2 + 2", ctx="before").text == "4"
    assert zygote_pid(d) == z2


def test_creates_sent_as_the_zygote_dies_are_all_answered(make_daemon):
    """Creates that reach the supervisor after the zygote died but before
    it noticed: sending to the zygote fails, and each such create is
    started by exec and answered. The failure reaches the context from the
    event loop, never from inside the spawn call that queued it: there it
    once restarted the context's worker while its caller was still setting
    it up, and the create was never answered. Another client keeps the
    supervisor busy with pipelined requests, so the creates are read in the
    same turns as the zygote's death, before its hang-up is handled."""
    d = make_daemon("--preload", PRELOAD)
    c, busy = d.client(), d.client()
    for round_ in range(6):  # a zygote that keeps dying young restarts later each time
        assert wait_until(lambda: zygote_pid(d) is not None and
                          c.ok("hello")["preloads"]["loaded"] == [PRELOAD], 20)
        c.ok("ctx.create", name=f"warm{round_}")  # the zygote serves
        z = zygote_pid(d)
        hellos = [busy.send("hello") for _ in range(3000)]
        os.kill(z, signal.SIGKILL)
        rids = [c.send("ctx.create", name=f"z{round_}-{k}") for k in range(4)]
        for rid in rids:
            term = c.collect(rid, 30)[-1]
            assert term["t"] == "ok", term
        for rid in hellos:
            busy.collect(rid, 30)
        c.ok("ctx.delete", ctx=f"warm{round_}")
        for k in range(4):
            assert c.execute("1 + 1", ctx=f"z{round_}-{k}").text == "2"
            c.ok("ctx.delete", ctx=f"z{round_}-{k}")


def test_zygote_dies_with_the_daemon(make_daemon):
    d = make_daemon()
    z = zygote_pid(d)
    s = proc_start(z)
    d.stopped_by_test = True
    d.proc.send_signal(signal.SIGTERM)
    d.proc.wait(10)
    assert wait_until(lambda: pid_gone(z, s), 5)


def test_no_worker_survives_sigkill_of_the_supervisor(make_daemon):
    d = make_daemon("--preload", PRELOAD)
    c = d.client()
    procs = []
    for name in ("k1", "k2"):
        c.ok("ctx.create", name=name)
    c.ok("ctx.fork", ctx="k1", name="k1f")
    for name in ("k1", "k2", "k1f", "default"):
        r = c.execute("import subprocess, os\n"
                      "p = subprocess.Popen(['sleep', '100'])\n(os.getpid(), p.pid)", ctx=name)
        w, ch = eval(r.text)
        procs += [(w, proc_start(w)), (ch, proc_start(ch))]
    z = zygote_pid(d)
    procs.append((z, proc_start(z)))
    rid = c.submit("import time\ntime.sleep(60)", ctx="k2")  # one busy
    c.wait_event(rid, "accepted")
    d.stopped_by_test = True
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait(5)
    left = [p for p, s in procs if not wait_until(lambda: pid_gone(p, s), 10)]
    for p, s in procs:  # clean up by pid what is left (we started them)
        if not pid_gone(p, s):
            os.kill(p, signal.SIGKILL)
    assert not left, f"processes outlived a SIGKILLed ctxd: {left} of {procs}"


# --- ctx.fork -----------------------------------------------------------------

def test_fork_sees_globals_and_they_diverge(client):
    client.ok("ctx.create", name="src")
    run_ok(client, "import json\nx = 41\ndata = {'k': [1, 2]}\ndef f(): return x + 1", "src")
    info = client.ok("ctx.fork", ctx="src", name="dst")["ctx"]
    assert info["name"] == "dst" and info["state"] == "idle" and info["incarnation"] == 1
    assert info["pid"] > 0 and info["pid"] != client.info("src")["pid"]
    assert client.execute("(x, data, f(), 'json' in dir())", ctx="dst").text == \
        "(41, {'k': [1, 2]}, 42, True)"
    run_ok(client, "x = 100\ndata['k'].append(3)", "dst")
    run_ok(client, "x = -1\ny = 'only in src'", "src")
    assert client.execute("(x, data, f())", ctx="dst").text == "(100, {'k': [1, 2, 3]}, 101)"
    assert client.execute("(x, data, f())", ctx="src").text == "(-1, {'k': [1, 2]}, 0)"
    assert client.execute("'y' in globals()", ctx="dst").text == "False"


def test_fork_keeps_cwd_modules_and_execution_count(client, tmp_path):
    sub = tmp_path / "moved"
    sub.mkdir()
    client.ok("ctx.create", name="s2")
    run_ok(client, f"import os, decimal\nos.chdir({str(sub)!r})\nos.environ['FORKVAR'] = 'yes'",
           "s2")
    run_ok(client, "z = 1", "s2")
    info = client.ok("ctx.fork", ctx="s2", name="d2")["ctx"]
    assert info["execution_count"] == 2
    r = client.execute("import sys\n(os.getcwd(), 'decimal' in sys.modules, "
                       "os.environ.get('FORKVAR'), os.getpgid(0) == os.getpid())", ctx="d2")
    assert r.text == f"({str(sub)!r}, True, 'yes', True)", r
    assert r.accepted["execution_count"] == 3
    # output of the copy goes to the copy's client, raw and Python-level
    r = client.execute("print('from the copy')\nos.system('echo raw')", ctx="d2")
    assert r.stdout == b"from the copy\nraw\n", r
    # a fork of a fork
    client.ok("ctx.fork", ctx="d2", name="d3")
    assert client.execute("z", ctx="d3").text == "1"


def test_fork_generated_name(client):
    client.ok("ctx.create", name="g")
    run_ok(client, "v = 7", "g")
    info = client.ok("ctx.fork", ctx="g")["ctx"]
    assert info["name"].startswith("ctx-") and len(info["name"]) == 16
    assert client.execute("v", ctx=info["name"]).text == "7"


def test_fork_errors(client):
    client.err("ctx.fork", "unknown_context", ctx="nope")
    client.ok("ctx.create", name="e1")
    client.ok("ctx.create", name="e2")
    client.err("ctx.fork", "exists", ctx="e1", name="e2")
    client.err("ctx.fork", "bad_name", ctx="e1", name="../x")
    client.err("ctx.fork", "bad_field", name="x")  # ctx is required
    # a dead context
    r = client.execute("import os\nos._exit(3)", ctx="e1")
    assert r.status == "died"
    e = client.err("ctx.fork", "dead", ctx="e1", name="e3")
    assert "e1" in e["message"] and "exited with code 3" in e["message"], e
    assert "e3" not in client.contexts()
    # the dead context itself is unharmed: it starts again on the next run
    assert client.execute("1", ctx="e1").status == "ok"


def test_fork_waits_behind_the_running_run(client):
    client.ok("ctx.create", name="busy")
    rid = client.submit("import time\ntime.sleep(1)\ny = 5", ctx="busy")
    client.wait_event(rid, "accepted")
    fid = client.send("ctx.fork", ctx="busy", name="late")
    after = client.submit("y = 7", ctx="busy")  # queued behind the fork
    # the fork's reply comes after the run it waited for has ended (the run
    # queued behind it may end before or after the copy is ready)
    order = []
    pending = {rid, fid, after}
    while pending:
        msg = client._recv_one(60)
        assert msg is not None, "no reply"
        if msg["t"] in ("done", "ok", "err"):
            order.append(msg["re"])
            pending.discard(msg["re"])
            if msg["re"] == fid:
                assert msg["t"] == "ok", msg
            else:
                assert msg["t"] == "done" and msg["status"] == "ok", msg
    assert order.index(rid) < order.index(fid), order
    # the copy was made after the run and before the one queued behind it
    assert client.execute("y", ctx="late").text == "5"
    assert client.execute("y", ctx="busy").text == "7"


def test_fork_queue_order_and_state_at_fork_time(client):
    client.ok("ctx.create", name="q")
    a = client.submit("n = 1", ctx="q")
    f = client.send("ctx.fork", ctx="q", name="q2")
    b = client.submit("n = 2", ctx="q")
    assert client.wait(a).status == "ok"
    assert client.collect(f)[-1]["t"] == "ok"
    assert client.wait(b).status == "ok"
    assert client.execute("n", ctx="q2").text == "1"
    assert client.execute("n", ctx="q").text == "2"


def test_fork_is_independent_of_its_source(client):
    client.ok("ctx.create", name="ind")
    run_ok(client, "k = 'kept'", "ind")
    client.ok("ctx.fork", ctx="ind", name="ind2")
    src_pid = client.info("ind")["pid"]
    s = proc_start(src_pid)
    client.ok("ctx.delete", ctx="ind")
    assert wait_until(lambda: pid_gone(src_pid, s), 10)
    assert client.execute("k", ctx="ind2").text == "'kept'"
    # and the copy's death does not touch anything else
    r = client.execute("import os\nos.kill(os.getpid(), 9)", ctx="ind2")
    assert r.status == "died" and "SIGKILL" in r.done["cause"], r
    assert client.execute("k", ctx="ind2").text is None  # new incarnation: fresh
    assert client.info("ind2")["incarnation"] == 2


def test_fork_aborted_when_source_dies_first(client):
    client.ok("ctx.create", name="ab")
    rid = client.submit("import time, os\ntime.sleep(0.5)\nos._exit(1)", ctx="ab")
    client.wait_event(rid, "accepted")
    e = client.err("ctx.fork", "aborted", ctx="ab", name="ab2")
    assert "died" in e["message"], e
    assert client.wait(rid).status == "died"
    assert "ab2" not in client.contexts()


def test_interrupt_does_not_hit_a_fork(client):
    client.ok("ctx.create", name="int")
    client.ok("ctx.fork", ctx="int", name="int2")
    assert client.ok("interrupt", ctx="int")["interrupted"] is False
    assert client.execute("1", ctx="int2").text == "1"


def test_many_forks_and_creates(client):
    client.ok("ctx.create", name="m")
    run_ok(client, "base = list(range(1000))", "m")
    pids = set()
    for i in range(10):
        info = client.ok("ctx.fork", ctx="m", name=f"m{i}")["ctx"]
        pids.add(info["pid"])
        info = client.ok("ctx.create", name=f"c{i}")["ctx"]
        pids.add(info["pid"])
    assert len(pids) == 20
    for i in range(10):
        assert client.execute("sum(base)", ctx=f"m{i}").text == "499500"
        assert client.execute("'base' in globals()", ctx=f"c{i}").text == "False"
    assert len({ppid_of(p) for p in pids}) == 1, "every worker's parent is the supervisor"
