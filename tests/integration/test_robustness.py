"""Edge cases around the guarantees: races, vanished clients, limits, odd user
code, key order of daemon maps."""

import os
import time

import msgpack
import pytest
import zmq

from conftest import pack, pid_gone, proc_start, wait_until


def test_interrupt_right_after_submit_is_consistent(client):
    # No waiting for `accepted`: the interrupt may reach the context before
    # the run started on the worker. Whatever the reply says must hold.
    client.ok("ctx.create", name="race")
    for i in range(3):
        rid = client.submit("import time\ntime.sleep(3)", ctx="race")
        reply = client.request("interrupt", ctx="race")
        assert reply["t"] == "ok", reply
        t0 = time.monotonic()
        run = client.wait(rid, 20)
        if reply["interrupted"]:
            assert run.status == "interrupted", (reply, run)
            assert time.monotonic() - t0 < 2.5, "interrupt acknowledged but the run went on"
        else:
            assert run.status == "ok", (reply, run)
    assert client.execute("1", ctx="race").accepted["incarnation"] == 1


def test_run_ends_although_child_keeps_stdout_open(client):
    # A background child inherits fd 1/2; the run must still end promptly.
    t0 = time.monotonic()
    r = client.execute("import subprocess\n"
                       "p = subprocess.Popen(['sh', '-c', 'sleep 5; echo late'])\n"
                       "print('now')")
    assert r.status == "ok", r
    assert r.stdout.startswith(b"now\n"), r
    assert time.monotonic() - t0 < 4, "done waited for a background child's stdout"
    # the context is usable meanwhile
    r = client.execute("p.poll() is None")
    assert r.status == "ok" and r.text == "True"
    client.execute("p.kill(); p.wait()")


def test_fork_in_user_code(client):
    r = client.execute("import os\npid = os.fork()\n"
                       "if pid == 0:\n    os._exit(0)\n"
                       "os.waitpid(pid, 0)[1]")
    assert r.status == "ok" and r.text == "0", r
    r = client.execute("1 + 1")
    assert r.text == "2" and r.accepted["incarnation"] == 1, r


def test_surrogates_in_result_and_error_are_valid_utf8(client):
    # the Client decodes with raw=False: invalid UTF-8 in a str fails
    r = client.execute("class X:\n    def __repr__(self):\n        return 'a\\udcffb'\nX()")
    assert r.status in ("ok", "error"), r
    if r.status == "ok":
        assert r.text.startswith("a") and r.text.endswith("b"), r
    r = client.execute("raise ValueError('bad \\udcff value')")
    assert r.status == "error", r
    assert r.error["ename"] == "ValueError"
    assert r.error["evalue"].startswith("bad "), r
    r = client.execute("'caf\\u00e9 \\u2603'")
    assert r.text == "'café ☃'", r


def test_repr_that_raises(client):
    r = client.execute("class X:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nX()")
    assert r.status in ("ok", "error"), r
    assert client.execute("1").accepted["incarnation"] == 1


def test_big_single_python_write_and_big_result(client):
    r = client.execute("import sys\nsys.stdout.write('y' * 3_000_000)\n'z' * 2_000_000")
    assert r.status == "ok", r.done
    assert r.stdout == b"y" * 3_000_000
    assert r.text == "'" + "z" * 2_000_000 + "'"


def test_env_with_nul_is_bad_field(client):
    client.err("execute", "bad_field", code="1", env={"A": "x\x00y"})
    client.err("ctx.create", "bad_field", name="n", env={"A\x00": "x"})
    assert client.execute("1").status == "ok"


def test_client_vanishes_mid_run(daemon, zctx):
    gone = daemon.client()
    gone.ok("ctx.create", name="orphan")
    rid = gone.submit("import time\nfor i in range(200):\n    print('x' * 1000)\n"
                      "    time.sleep(0.005)\nfinished = True", ctx="orphan")
    gone.wait_event(rid, "stream")
    gone.sock.close(0)
    daemon.clients.remove(gone)
    other = daemon.client("str")
    # the run goes on to its end; the context stays usable
    assert wait_until(lambda: other.info("orphan")["state"] == "idle", 15)
    r = other.execute("finished", ctx="orphan")
    assert r.text == "True", r
    assert other.ok("hello")


def test_many_clients_many_contexts(daemon):
    clients = [daemon.client("str" if i % 2 else "uint") for i in range(4)]
    for i, c in enumerate(clients):
        c.ok("ctx.create", name=f"mc{i}")
    ids = []
    for k in range(5):
        for i, c in enumerate(clients):
            ids.append((c, i, k, c.submit(f"v = {i} * 100 + {k}\nprint(v)\nv", ctx=f"mc{i}")))
    for c, i, k, rid in ids:
        r = c.wait(rid)
        assert r.status == "ok" and r.text == str(i * 100 + k), r
        assert r.stdout == b"%d\n" % (i * 100 + k)
    for i, c in enumerate(clients):
        c.ok("ctx.delete", ctx=f"mc{i}")
    assert not any(n.startswith("mc") for n in clients[0].contexts())


def test_create_and_delete_many_contexts(client):
    pids = []
    for i in range(15):
        info = client.ok("ctx.create", name=f"c{i}")["ctx"]
        pids.append((info["pid"], proc_start(info["pid"])))
        assert client.execute(f"{i}", ctx=f"c{i}").text == str(i)
    for i in range(15):
        client.ok("ctx.delete", ctx=f"c{i}")
    assert wait_until(lambda: all(pid_gone(p, s) for p, s in pids), 10)
    assert not any(n.startswith("c") and n[1:].isdigit() for n in client.contexts())


def test_max_contexts_limit(make_daemon):
    d = make_daemon("--max-contexts", "2")
    c = d.client()
    assert c.ok("hello")["limits"]["max_contexts"] == 2
    c.ok("ctx.create", name="l1")
    c.ok("ctx.create", name="l2")
    c.err("ctx.create", "limit", name="l3")
    # default is a context too: it cannot be made now
    r = c.request("execute", code="1")
    assert r["t"] == "err" and r["code"] == "limit", r
    c.ok("ctx.delete", ctx="l2")
    c.ok("ctx.create", name="l3")
    assert c.execute("1", ctx="l3").status == "ok"


def test_worker_cannot_start(make_daemon, tmp_path):
    bad = tmp_path / "not-a-worker"
    bad.write_text("#!/bin/sh\nexit 7\n")
    os.chmod(bad, 0o755)
    d = make_daemon("--worker", str(bad))
    c = d.client()
    r = c.request("ctx.create", name="w")
    assert r["t"] == "err" and r["code"] == "spawn", r
    # an execute on default cannot start either: one terminal reply, no hang
    r = c.request("execute", code="1")
    assert (r["t"] == "err" and r["code"] == "spawn") or \
        (r["t"] == "done" and r["status"] in ("died", "aborted")), r
    assert c.ok("hello")


def test_instance_differs_between_daemons(make_daemon):
    a = make_daemon().client().ok("hello")["instance"]
    b = make_daemon().client().ok("hello")["instance"]
    assert a != b


def test_cli_kill_grace_and_default_timeout(make_daemon):
    d = make_daemon("--timeout", "1", "--kill-grace", "0.5")
    c = d.client()
    lim = c.ok("hello")["limits"]
    assert lim["default_timeout"] == 1.0 and lim["kill_grace"] == 0.5
    t0 = time.monotonic()
    r = c.execute("import time\nwhile True:\n try:\n  time.sleep(10)\n except KeyboardInterrupt:\n  pass")
    assert r.status == "timeout" and r.done["state_lost"] is True, r
    assert 1.3 <= time.monotonic() - t0 < 10
    assert "0.5" in r.done["cause"], r.done


def test_daemon_maps_key_order(daemon):
    """Maps written by the daemon list their keys in PROTOCOL.md's order."""
    s = daemon.zctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(daemon.endpoint)
    try:
        def recv():
            assert s.poll(30000), "no reply"
            return msgpack.unpackb(s.recv(), object_pairs_hook=list)

        def keys(pairs):
            return [k for k, _ in pairs]

        def sub(pairs, key):
            return dict(pairs)[key]

        env = ["v", "t", "re"]
        s.send(pack({"v": 1, "t": "hello", "id": 1}))
        m = recv()
        assert keys(m) == env + ["server", "version", "protocol", "versions", "pid", "instance",
                                 "limits", "tiers", "preloads", "identity", "syntaxes",
                                 "packages"]
        assert keys(sub(m, "limits")) == ["max_request_bytes", "max_code_bytes", "max_queue",
                                          "max_contexts", "max_output", "default_timeout",
                                          "kill_grace", "idle_ttl", "on_disconnect", "max_held",
                                          "max_client_held", "max_chan_held", "max_snapshot_bytes",
                                          "max_snapshots", "max_snapshot_total"]
        assert keys(sub(m, "preloads")) == ["loaded", "skipped"]
        s.send(pack({"v": 1, "t": "execute", "id": 2, "code": "print(1)\n2"}))
        seen = {}
        while True:
            m = recv()
            seen[dict(m)["t"]] = keys(m)
            if dict(m)["t"] == "done":
                break
        assert seen["accepted"] == env + ["ctx", "execution_count", "incarnation"]
        assert seen["stream"] == env + ["name", "data"]
        assert seen["result"] == env + ["execution_count", "data"]
        assert seen["done"] == env + ["status", "execution_count", "incarnation", "duration",
                                      "cpu_time", "truncated", "state_lost"]
        s.send(pack({"v": 1, "t": "execute", "id": 3, "code": "import os\nos._exit(3)"}))
        while True:
            m = recv()
            if dict(m)["t"] == "done":
                break
        assert keys(m) == env + ["status", "execution_count", "incarnation", "duration",
                                 "cpu_time", "truncated", "state_lost", "cause"]
        s.send(pack({"v": 1, "t": "execute", "id": 4, "code": "1/0"}))
        seen = {}
        while True:
            m = recv()
            seen[dict(m)["t"]] = keys(m)
            if dict(m)["t"] == "done":
                break
        assert seen["accepted"] == env + ["ctx", "execution_count", "incarnation",
                                          "previous_death"]
        assert seen["error"] == env + ["ename", "evalue", "traceback"]
        s.send(pack({"v": 1, "t": "ctx.list", "id": 5}))
        m = recv()
        assert keys(m) == env + ["contexts"]
        info = sub(m, "contexts")[0]
        assert keys(info) == ["name", "cwd", "state", "pid", "incarnation", "created",
                              "execution_count", "queued", "rss", "pss", "tier", "policy",
                              "last_death"]
        s.send(pack({"v": 1, "t": "interrupt", "id": 6}))
        assert keys(recv()) == env + ["interrupted"]
        s.send(pack({"v": 1, "t": "nope", "id": 7}))
        assert keys(recv()) == env + ["code", "message"]
    finally:
        s.close(0)


@pytest.mark.parametrize("code", [
    "import os\nos.close(1)\nos.close(2)",
    "import sys\nsys.stdout = None\nprint('x')",
    "import sys\nsys.stdout.close()",
])
def test_user_breaks_its_streams(client, code):
    # whatever happens to this run, it ends with one terminal reply, and the
    # daemon keeps serving (the context may or may not survive)
    r = client.execute(code)
    assert r.status in ("ok", "error", "died"), r
    r = client.execute("2 + 2")
    assert r.status == "ok" and r.text == "4", r


def test_env_names_that_cannot_be_set(client):
    for env in ({"": "x"}, {"A=B": "x"}):
        client.err("execute", "bad_field", code="1", env=env)
        client.err("ctx.create", "bad_field", name="envname", env=env)
    assert client.execute("1").status == "ok"


def test_cwd_removed_after_create(client, tmp_path):
    d = tmp_path / "vanishing"
    d.mkdir()
    client.ok("ctx.create", name="cwdgone", cwd=str(d))
    d.rmdir()
    # the worker cannot start again: each request still gets one terminal reply
    r = client.request("ctx.restart", ctx="cwdgone")
    assert r["t"] == "err" and r["code"] == "spawn", r
    info = client.info("cwdgone")
    assert info["state"] == "dead" and info["last_death"], info
    for _ in range(2):
        r = client.execute("1", ctx="cwdgone")
        assert r.terminal["t"] == "err" or r.status in ("aborted", "died"), r
    d.mkdir()
    r = client.execute("import os\nos.getcwd()", ctx="cwdgone")
    assert r.status == "ok" and r.accepted.get("previous_death"), r
    client.ok("ctx.delete", ctx="cwdgone")
