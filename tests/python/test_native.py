"""The native blocking API (ctxd.Client) against a real daemon."""

import _thread
import threading
import time

import pytest

import ctxd
from conftest import WAIT, wait_until


def handshake_code(mine, theirs, label):
    """Code that announces itself, writes its marker file and waits for the
    other's: it can only finish when something outside it reacts while it
    runs."""
    return (f"import os, time\n"
            f"print('{label}:start', flush=True)\n"
            f"open({str(mine)!r}, 'w').close()\n"
            f"while not os.path.exists({str(theirs)!r}):\n"
            f"    time.sleep(0.01)\n"
            f"print('{label}:end')\n")


def test_execute_result_streams_and_state(client):
    r = client.execute("x = 21\nprint('hi')\nx * 2")
    assert r.status == "ok" and r.ok
    assert r.stdout == "hi\n" and r.stdout_bytes == b"hi\n"
    assert r.result == "42" and r.data == {"text/plain": "42"}
    assert r.error is None and r.state_lost is False and r.cause is None
    assert r.incarnation == 1 and r.ctx == "default"
    r2 = client.execute("x + 1")
    assert r2.result == "22"
    assert r2.execution_count == r.execution_count + 1
    assert r2.duration >= 0 and r2.cpu_time >= 0


def test_callbacks_fire_while_the_code_runs(client, tmp_path):
    """The code waits for a file that only the on_stdout callback creates."""
    flag = tmp_path / "flag"
    seen = []

    def on_stdout(text):
        seen.append(text)
        if "ready" in text:
            flag.touch()

    code = ("import os, time\nprint('ready', flush=True)\n"
            f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\nprint('released')")
    r = client.execute(code, on_stdout=on_stdout, timeout=WAIT)
    assert r.status == "ok", r
    assert "".join(seen) == "ready\nreleased\n" == r.stdout


def test_all_callbacks_in_order(client):
    events = []
    r = client.execute(
        "import sys\nprint('o')\nsys.stderr.write('e\\n')\n7",
        on_stdout=lambda s: events.append(("out", s)),
        on_stderr=lambda s: events.append(("err", s)),
        on_result=lambda res: events.append(("result", str(res), res.execution_count)),
        on_accepted=lambda a: events.append(("accepted", a["execution_count"])))
    assert events[0] == ("accepted", r.execution_count)
    assert ("out", "o\n") in events and ("err", "e\n") in events
    assert events[-1] == ("result", "7", r.execution_count)
    assert r.stderr == "e\n"


def test_error(client):
    errors = []
    r = client.execute("def f():\n    return 1 / 0\nf()", on_error=errors.append)
    assert r.status == "error"
    assert len(errors) == 1 and errors[0] is r.error
    e = r.error
    assert e.ename == "ZeroDivisionError" and e.evalue == "division by zero"
    assert e.traceback[0].startswith("Traceback") and e.traceback[-1].startswith("ZeroDivisionError")
    assert "ZeroDivisionError: division by zero" in str(e)
    assert client.execute("1").status == "ok"  # the context goes on


def test_script_file_argv_and_exit_code(client, tmp_path):
    # as `python3 FILE ARGS...` would: __file__, sys.argv; sys.exit's code
    path = str(tmp_path / "prog.py")
    code = "import sys\nprint(__file__, sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n"
    r = client.execute(code, file=path, argv=[path, "4", "x"])
    assert r.stdout == f"{path} ['4', 'x']\n" and r.exit_code == 4
    assert r.status == "error" and r.error is None
    r = client.execute("sys.exit()")
    assert r.status == "ok" and r.exit_code == 0
    assert client.execute("1").exit_code is None
    with pytest.raises(TypeError):
        client.execute("1", argv="not a list")


def test_timeout_keeps_globals(client):
    out = []
    r = client.execute("kept = 'yes'\nprint('start', flush=True)\nwhile True:\n    pass",
                       on_stdout=out.append, timeout=0.5)
    assert r.status == "timeout" and r.state_lost is False
    assert r.error.ename == "KeyboardInterrupt"
    assert "".join(out) == "start\n"
    assert client.execute("kept").result == "'yes'"


def test_interrupt_from_a_callback(client):
    """on_stdout calls client.interrupt (a control request) while the run
    waits: callbacks may use the client."""
    answers = []

    def on_stdout(text):
        if "spin" in text:
            answers.append(client.interrupt())

    r = client.execute("n = 1\nprint('spin', flush=True)\nwhile True:\n    n += 1",
                       on_stdout=on_stdout, timeout=WAIT)
    assert r.status == "interrupted" and answers == [True]
    assert r.error.ename == "KeyboardInterrupt" and r.state_lost is False
    assert int(client.execute("n").result) >= 1  # the globals are kept
    assert client.interrupt() is False  # nothing runs now


def test_run_handle_interrupt_and_bounded_wait(client):
    run = client.submit("import time\nwhile True:\n    time.sleep(0.01)", timeout=WAIT)
    with pytest.raises(ctxd.CtxdTimeoutError):
        run.wait(timeout=0.2)  # the run goes on
    assert not run.done
    run.interrupt()
    r = run.wait(timeout=WAIT)
    assert r.status == "interrupted" and run.done and r.run_id == run.id


def test_interrupt_run_only_hits_that_run(client):
    run = client.submit("import time\nprint('go', flush=True)\ntime.sleep(60)", timeout=WAIT)
    assert client.interrupt(run=run.id + 1000) is False
    assert wait_until(lambda: client.list_contexts()[0].state == "busy")
    assert client.interrupt(run=run) is True
    assert run.wait(WAIT).status == "interrupted"


def test_keyboardinterrupt_while_waiting_interrupts_the_run(client):
    started = threading.Event()
    timer = threading.Thread(target=lambda: started.wait(WAIT) and _thread.interrupt_main())
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        client.execute("spun = 0\nprint('go', flush=True)\nwhile True:\n    spun += 1",
                       on_stdout=lambda s: started.set(), timeout=WAIT)
    timer.join()
    # The daemon got an interrupt for that run: the context is free again.
    r = client.execute("spun >= 0", timeout=WAIT)
    assert r.status == "ok" and r.result == "True"


def test_refusals(client):
    with pytest.raises(ctxd.NotFoundError) as e:
        client.execute("1", ctx="nope")
    assert e.value.code == "unknown_context"
    with pytest.raises(ctxd.RefusedError) as e:
        client.delete_context("default")
    assert e.value.code == "forbidden"
    client.create_context("dup")
    with pytest.raises(ctxd.RefusedError) as e:
        client.create_context("dup")
    assert e.value.code == "exists"
    with pytest.raises(ctxd.RefusedError) as e:
        client.create_context("a/b")
    assert e.value.code == "bad_name"
    with pytest.raises(ValueError):
        client.execute("1", timeout=-1)


def test_contexts(client, tmp_path):
    info = client.create_context("work", cwd=str(tmp_path), env={"CTXD_T": "v1"})
    assert info.name == "work" and info.cwd == str(tmp_path) and info.state == "idle"
    assert info.incarnation == 1 and info.pid > 0
    r = client.execute("import os\n(os.getcwd(), os.environ['CTXD_T'])", ctx=info)
    assert r.result == repr((str(tmp_path), "v1"))
    client.execute("here = 1", ctx="work")
    names = [c.name for c in client.list_contexts()]
    assert names == sorted(names) and "work" in names
    listed = {c.name: c for c in client.list_contexts()}["work"]
    assert listed.execution_count == 2 and listed.rss > 0 and listed.pss > 0
    one = client.context_info("work")  # ctx.info: the same, without the list
    assert (one.name, one.execution_count, one.incarnation) == ("work", 2, 1)
    with pytest.raises(ctxd.NotFoundError):
        client.context_info("none-such")
    fresh = client.restart_context("work")
    assert fresh.incarnation == 2 and fresh.execution_count == 0
    assert client.execute("here", ctx="work").error.ename == "NameError"
    gen = client.create_context()
    assert gen.name.startswith("ctx-")
    client.delete_context("work")
    client.delete_context(gen)
    assert {c.name for c in client.list_contexts()} <= {"default"}


def test_envs_for_one_run(client):
    r = client.execute("import os\nos.environ.get('ONLY_NOW')", envs={"ONLY_NOW": "x"})
    assert r.result == "'x'"
    assert client.execute("import os\nos.environ.get('ONLY_NOW')").result is None


def test_silent_and_stop_on_error(client, tmp_path):
    a = client.execute("1")
    s = client.execute("2", silent=True)
    assert s.result is None and s.execution_count == a.execution_count
    go = tmp_path / "go"
    bad = client.submit(f"import os, time\nwhile not os.path.exists({str(go)!r}):\n"
                        "    time.sleep(0.01)\nraise ValueError('x')", stop_on_error=True)
    behind = client.submit("print('never')")
    assert wait_until(lambda: client.list_contexts()[0].queued == 1)
    go.touch()  # only now may the first run fail: the second is queued behind it
    assert bad.wait(WAIT).status == "error"
    r = behind.wait(WAIT)
    assert r.status == "aborted" and r.cause and r.stdout == ""


def test_two_threads_two_contexts_in_parallel(client, tmp_path):
    """Each run waits for the other's marker: both finish only if they run
    at the same time, through one Client used from two threads."""
    client.create_context("p1")
    client.create_context("p2")
    m1, m2 = tmp_path / "m1", tmp_path / "m2"
    results = {}

    def run(ctx, mine, theirs, label):
        results[label] = client.execute(handshake_code(mine, theirs, label), ctx=ctx,
                                        timeout=WAIT)

    t1 = threading.Thread(target=run, args=("p1", m1, m2, "A"))
    t2 = threading.Thread(target=run, args=("p2", m2, m1, "B"))
    t1.start(), t2.start()
    t1.join(WAIT + 10), t2.join(WAIT + 10)
    assert results["A"].status == "ok" and results["A"].stdout == "A:start\nA:end\n"
    assert results["B"].status == "ok" and results["B"].stdout == "B:start\nB:end\n"


def test_utf8_split_across_chunks(client):
    texts = []
    r = client.execute("import os, time\nos.write(1, b'\\xc3')\ntime.sleep(0.1)\n"
                       "os.write(1, b'\\xa9 ok\\n')\nos.write(1, b'bad \\xff\\n')",
                       on_stdout=texts.append)
    assert "".join(texts) == r.stdout == "é ok\nbad \ufffd\n"
    assert r.stdout_bytes == b"\xc3\xa9 ok\nbad \xff\n"


def test_worker_death(client):
    r = client.execute("import os\nos._exit(3)")
    assert r.status == "died" and r.state_lost and "3" in r.cause
    r2 = client.execute("1")
    assert r2.status == "ok" and r2.previous_death and r2.incarnation == 2


def test_unreachable(tmp_path):
    t = time.monotonic()
    with pytest.raises(ctxd.UnreachableError):
        ctxd.Client(f"ipc://{tmp_path}/none.sock")
    assert time.monotonic() - t < WAIT


def test_liveness_detects_a_dead_daemon(daemon):
    c = ctxd.Client(daemon.endpoint, request_timeout=1, liveness=0.3)
    try:
        run = c.submit("import time\nprint('x', flush=True)\ntime.sleep(300)", timeout=0)
        assert wait_until(lambda: c.list_contexts()[0].state == "busy")
        daemon.kill()
        with pytest.raises(ctxd.UnreachableError):
            run.wait(timeout=WAIT)
    finally:
        c.close()


def test_closed_client(daemon):
    c = ctxd.Client(daemon.endpoint)
    c.close()
    c.close()
    with pytest.raises(ctxd.ClosedError):
        c.execute("1")


def test_stats_and_fork(client):
    """The daemon's `stats` and `ctx.fork` (skipped with a daemon that
    predates them)."""
    try:
        s = client.stats()
    except ctxd.RefusedError as e:
        assert e.code == "unknown_type"
        pytest.skip("this daemon has no stats request")
    assert s.uptime >= 0 and "runs" in s.counters and s.limits["max_queue"] > 0
    client.execute("base = [1, 2]")
    runs_before = client.stats().counters["runs"]
    assert runs_before >= 1
    try:
        info = client.fork_context("default", "copy")
    except ctxd.RefusedError as e:
        assert e.code == "unknown_type"
        pytest.skip("this daemon has no ctx.fork")
    assert info.name == "copy" and info.incarnation == 1
    assert client.execute("base.append(3); base", ctx="copy").result == "[1, 2, 3]"
    assert client.execute("base", ctx="default").result == "[1, 2]"
    with pytest.raises(ctxd.NotFoundError):
        client.fork_context("missing")


def test_daemon_shutdown_ends_runs(daemon):
    """SIGTERM to the daemon ends a run in flight with status shutdown (or,
    with a daemon that predates it, the client notices it is gone)."""
    import signal as _signal
    c = ctxd.Client(daemon.endpoint, request_timeout=2, liveness=0.5)
    try:
        run = c.submit("import time\nprint('up', flush=True)\ntime.sleep(300)", timeout=0)
        assert wait_until(lambda: c.list_contexts()[0].state == "busy")
        daemon.stopped_by_test = True
        daemon.proc.send_signal(_signal.SIGTERM)
        try:
            r = run.wait(timeout=WAIT)
        except ctxd.UnreachableError:
            return
        assert r.status == "shutdown" and r.state_lost
    finally:
        c.close()
