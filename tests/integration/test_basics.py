"""hello, globals, results, execution counts, per-run env, parallel contexts."""

import time


def test_hello_fields(daemon, client):
    r = client.ok("hello")
    assert r["server"] == "ctxd"
    assert isinstance(r["version"], str) and r["version"]
    assert r["protocol"] == 1
    assert isinstance(r["versions"], list) and 1 in r["versions"]
    assert all(isinstance(v, int) for v in r["versions"])
    assert r["pid"] == daemon.proc.pid
    assert isinstance(r["instance"], str) and len(r["instance"]) == 32
    int(r["instance"], 16)
    assert client.ok("hello")["instance"] == r["instance"]
    lim = r["limits"]
    assert lim["max_request_bytes"] == 16 * 1024 * 1024
    assert lim["max_code_bytes"] == 8 * 1024 * 1024
    assert lim["max_queue"] == 64
    assert isinstance(lim["max_contexts"], int) and lim["max_contexts"] >= 2
    assert isinstance(lim["default_timeout"], float) and lim["default_timeout"] == 600.0
    assert isinstance(lim["kill_grace"], float) and lim["kill_grace"] == 2.0
    assert lim["max_output"] == 0  # no cap by default
    assert isinstance(lim["idle_ttl"], float) and lim["idle_ttl"] == 0.0
    assert lim["on_disconnect"] == "finish"
    pre = r["preloads"]
    assert isinstance(pre["loaded"], list) and isinstance(pre["skipped"], list), pre


def test_hello_str_id_echoed_with_type(sclient):
    rid = sclient.send("hello")
    assert isinstance(rid, str)
    r = sclient.collect(rid)[-1]
    assert r["t"] == "ok" and r["re"] == rid and isinstance(r["re"], str)
    sclient.expect_quiet(rid)
    # a str id that looks like a number stays a str; a uint stays a uint
    r = sclient.request("hello", _id="7")
    assert r["re"] == "7"
    r = sclient.request("hello", _id=7)
    assert r["re"] == 7 and isinstance(r["re"], int)
    # the longest allowed id (64 bytes), and a large uint
    r = sclient.request("hello", _id="i" * 64)
    assert r["t"] == "ok" and r["re"] == "i" * 64
    r = sclient.request("hello", _id=2**64 - 1)
    assert r["t"] == "ok" and r["re"] == 2**64 - 1


def test_globals_persist(client):
    r = client.execute("x = 41\ndef f(a):\n    return a + x\nimport math")
    assert r.status == "ok", r
    r = client.execute("f(1), math.floor(2.5)")
    assert r.status == "ok", r
    assert r.text == "(42, 2)"


def test_default_context_auto_created(client):
    # execute without ctx runs in "default", created on first use
    r = client.execute("y = 1")
    assert r.status == "ok", r
    assert r.accepted["ctx"] == "default"
    assert r.accepted["incarnation"] == 1
    info = client.info("default")
    assert info["state"] == "idle"
    # explicit ctx="default" is the same context
    r = client.execute("y", ctx="default")
    assert r.text == "1"


def test_execute_unknown_context(client):
    client.err("execute", "unknown_context", ctx="nosuch", code="1")
    # and it was not created by the attempt
    assert "nosuch" not in client.contexts()


def test_result_text_plain(sclient):
    c = sclient
    r = c.execute("a = 3\na * 2")
    assert r.status == "ok" and r.text == "6", r
    assert r.result["execution_count"] == r.done["execution_count"]
    r = c.execute("'hi'")
    assert r.text == "'hi'", r
    r = c.execute("class C:\n    def __repr__(self):\n        return 'C!'\nC()")
    assert r.text == "C!", r
    # no result for a statement, for None, for silent runs
    assert c.execute("z = 5").result is None
    assert c.execute("None").result is None
    assert c.execute("print('p')").result is None  # print returns None
    r = c.execute("1 + 1", silent=True)
    assert r.status == "ok" and r.result is None, r
    # an expression followed by a statement has no result
    assert c.execute("1 + 1\nq = 2").result is None


def test_execution_count(client):
    counts = []
    for _ in range(3):
        r = client.execute("1")
        counts.append(r.accepted["execution_count"])
        assert r.done["execution_count"] == counts[-1]
    assert counts == [1, 2, 3]
    # silent: unchanged count, no increment
    r = client.execute("1", silent=True)
    assert r.accepted["execution_count"] == 3 and r.done["execution_count"] == 3, r
    r = client.execute("1")
    assert r.accepted["execution_count"] == 4
    # a failing run counts too
    r = client.execute("1/0")
    assert r.status == "error" and r.done["execution_count"] == 5
    assert client.info("default")["execution_count"] == 5
    # counts are per context
    client.ok("ctx.create", name="other")
    r = client.execute("1", ctx="other")
    assert r.accepted["execution_count"] == 1


def test_execute_env_for_one_run(client, tmp_path):
    client.ok("ctx.create", name="e", env={"CTXD_KEEP": "orig"})
    code = ("import os, subprocess\n"
            "print(os.environ.get('CTXD_T1'), os.environ.get('CTXD_KEEP'))\n"
            "print(subprocess.run(['sh', '-c', 'echo $CTXD_T1'], capture_output=True,"
            " text=True).stdout.strip())")
    r = client.execute(code, ctx="e", env={"CTXD_T1": "one", "CTXD_KEEP": "tmp"})
    assert r.status == "ok", r
    assert r.stdout == b"one tmp\none\n"
    # restored after the run: the new one removed, the overwritten one back
    r = client.execute("import os\nos.environ.get('CTXD_T1'), os.environ.get('CTXD_KEEP')",
                       ctx="e")
    assert r.text == "(None, 'orig')", r
    # an empty env map is fine
    r = client.execute("1", ctx="e", env={})
    assert r.status == "ok", r


def test_two_contexts_isolated(client):
    client.ok("ctx.create", name="a")
    client.ok("ctx.create", name="b")
    assert client.execute("secret = 'a'", ctx="a").status == "ok"
    r = client.execute("'secret' in globals()", ctx="b")
    assert r.text == "False", r
    r = client.execute("import os\nos.getpid()", ctx="a")
    pa = int(r.text)
    r = client.execute("import os\nos.getpid()", ctx="b")
    pb = int(r.text)
    assert pa != pb
    assert client.execute("secret", ctx="a").text == "'a'"


def test_two_contexts_run_in_parallel(client):
    # Each run records when it held the CPU-free sleep; the two intervals
    # overlap only if the contexts ran at the same time (no timing bound).
    client.ok("ctx.create", name="p1")
    client.ok("ctx.create", name="p2")
    code = "import time\nt0 = time.time()\ntime.sleep(1)\n(t0, time.time())"
    a = client.submit(code, ctx="p1")
    b = client.submit(code, ctx="p2")
    ra, rb = client.wait(a), client.wait(b)
    assert ra.status == "ok" and rb.status == "ok", (ra, rb)
    (a0, a1), (b0, b1) = eval(ra.text), eval(rb.text)
    assert max(a0, b0) < min(a1, b1), f"runs did not overlap: p1 {a0}..{a1}, p2 {b0}..{b1}"


def test_runs_on_one_context_are_sequential_in_order(sclient):
    c = sclient
    assert c.execute("import time\nlog = []").status == "ok"
    ids = [c.submit(f"time.sleep(0.05)\nlog.append({i})") for i in range(5)]
    runs = [c.wait(i) for i in ids]
    assert [r.status for r in runs] == ["ok"] * 5
    counts = [r.accepted["execution_count"] for r in runs]
    assert counts == sorted(counts) and len(set(counts)) == 5
    assert c.execute("log").text == "[0, 1, 2, 3, 4]"
    for i in ids:
        c.expect_quiet(i, 0.05)


def test_exactly_one_terminal_reply(client, sclient):
    for c in (client, sclient):
        rid = c.submit("print('x')\n42")
        run = c.wait(rid)
        assert run.status == "ok"
        c.expect_quiet(rid)
        rid = c.submit("1/0")
        assert c.wait(rid).status == "error"
        c.expect_quiet(rid)
        rid = c.send("ctx.list")
        assert c.collect(rid)[-1]["t"] == "ok"
        c.expect_quiet(rid)


def test_many_requests_in_flight_on_one_connection(client):
    client.ok("ctx.create", name="m1")
    ids = []
    for i in range(10):
        ids.append(client.submit(f"{i} * 2", ctx="m1" if i % 2 else None))
        ids.append(client.send("hello"))
    for i, rid in enumerate(ids):
        msg = client.collect(rid)[-1]
        assert msg["t"] in ("done", "ok"), msg


def test_duration_and_cpu_time(client):
    r = client.execute("import time\nt = time.process_time()\n"
                       "while time.process_time() - t < 0.5:\n    pass")
    assert r.status == "ok", r
    assert r.done["cpu_time"] >= 0.45, r.done
    assert r.done["duration"] >= 0.45, r.done
    r = client.execute("time.sleep(0.5)")
    assert r.done["duration"] >= 0.49, r.done
    assert r.done["cpu_time"] < 0.3, r.done
    # waited-for children count
    r = client.execute(
        "import subprocess\nsubprocess.run(['/usr/bin/python3', '-c', 'import time\\n"
        "t = time.process_time()\\nwhile time.process_time() - t < 0.5: pass'])")
    assert r.status == "ok", r
    assert r.done["cpu_time"] >= 0.45, r.done


def test_second_client_sees_same_contexts(daemon, client):
    client.ok("ctx.create", name="shared")
    assert client.execute("v = 'from one'", ctx="shared").status == "ok"
    other = daemon.client("str")
    r = other.execute("v", ctx="shared")
    assert r.text == "'from one'", r
