"""Operating the daemon: configuration, stats and the request log, output
caps, idle reaping, vanished clients, shutdown, a second daemon on the same
endpoint, CurveZMQ on tcp://, the 0700 socket directory, and a worker that
breaks its channel protocol."""
import contextlib
import shutil
import tempfile
import json
import os
import signal
import socket
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import CTXD_BIN, Daemon, _finish, pack, unpack, pid_gone, wait_until, free_port


def test_stats_counts_runs_and_output(daemon):
    c = daemon.client()
    c.execute("print('x' * 99)")
    c.execute("1/0")
    c.execute("import sys; sys.stderr.write('e' * 10)")
    st = c.ok("stats")
    counters = st["counters"]
    assert counters["runs"] == 3
    assert counters["runs_ok"] == 2 and counters["runs_error"] == 1
    assert counters["stdout_bytes"] == 100 and counters["stderr_bytes"] == 10
    assert st["contexts"]["live"] == 1 and st["contexts"]["busy"] == 0
    assert counters["workers_spawned"] == 1
    assert st["limits"]["max_queue"] == 64
    assert st["uptime"] > 0
    c.err("no.such.request", "unknown_type")
    assert c.ok("stats")["counters"]["refused"] == 1


def test_request_log_has_one_line_per_request(make_daemon, tmp_path):
    log = tmp_path / "requests.log"
    d = make_daemon("--log", str(log))
    c = d.client()
    c.execute("x = 1")
    c.ok("ctx.create", name="logged")
    c.err("ctx.delete", "forbidden", ctx="default")
    d.stop()
    d.stopped_by_test = True
    lines = log.read_text().splitlines()
    runs = [l for l in lines if "type=execute" in l]
    assert len(runs) == 1 and "ctx=default" in runs[0] and "status=ok" in runs[0]
    assert "duration=" in runs[0]
    assert any("type=ctx.create" in l and "ctx=logged" in l and "status=ok" in l for l in lines)
    assert any("type=ctx.delete" in l and "status=err:forbidden" in l for l in lines)


def test_config_file_and_hello_limits(make_daemon, tmp_path):
    conf = tmp_path / "ctxd.conf"
    conf.write_text("# test\nmax-queue = 3\nmax-output = 1K\ntimeout = 7.5\nidle-ttl = 100\n")
    d = make_daemon("--config", str(conf))
    lim = d.hello["limits"]
    assert lim["max_queue"] == 3 and lim["max_output"] == 1024
    assert lim["default_timeout"] == 7.5 and lim["idle_ttl"] == 100


def test_bad_config_is_refused_clearly(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("max-queue = lots\n")
    r = subprocess.run([CTXD_BIN, "--config", str(conf), "--listen", f"ipc://{tmp_path}/x.sock"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "max-queue" in r.stderr and "lots" in r.stderr


def test_output_cap_truncates_visibly(make_daemon):
    d = make_daemon("--max-output", "1000")
    c = d.client()
    r = c.execute("import sys\nsys.stdout.write('a' * 900)\nsys.stdout.flush()\n"
                  "sys.stdout.write('b' * 500)\nprint('c' * 100)")
    assert r.status == "ok"
    assert r.stdout == b"a" * 900 + b"b" * 100
    assert b"output truncated" in r.stderr
    assert r.done["truncated"] is True
    assert r.done["dropped"]["stdout"] == 400 + 101
    # the next run has its own budget
    r = c.execute("print('fine')")
    assert r.stdout == b"fine\n" and r.done["truncated"] is False and "dropped" not in r.done


def test_idle_contexts_are_reaped(make_daemon):
    d = make_daemon("--idle-ttl", "1")
    c = d.client()
    c.ok("ctx.create", name="short-lived")
    c.execute("x = 1")  # default is never reaped
    pid = c.info("short-lived")["pid"]
    assert wait_until(lambda: "short-lived" not in c.contexts(), 10)
    assert wait_until(lambda: pid_gone(pid), 5)
    assert "default" in c.contexts()


def test_vanished_client_run_finishes_by_default(daemon):
    gone = daemon.client()
    gone.submit("import time\ntime.sleep(0.5)\nfor i in range(3000): print(i)\nx_done = True",
                ctx=None)
    time.sleep(0.2)
    gone.sock.close(0)
    daemon.clients.remove(gone)
    c = daemon.client()
    assert wait_until(lambda: c.info("default")["state"] == "idle", 10)
    assert c.execute("x_done").text == "True"


def test_vanished_client_run_interrupted_when_configured(make_daemon):
    d = make_daemon("--on-disconnect", "interrupt")
    gone = d.client()
    gone.submit("import time\nfor i in range(600):\n    print(i, flush=True)\n    time.sleep(0.05)\n"
                "x_done = True")
    time.sleep(0.5)
    gone.sock.close(0)
    d.clients.remove(gone)
    c = d.client()
    assert wait_until(lambda: c.info("default")["state"] == "idle", 10)
    assert c.execute("'x_done' in globals()").text == "False"
    assert c.ok("stats")["counters"]["runs_interrupted"] == 1


def test_sigterm_reports_shutdown_and_removes_socket(daemon):
    c = daemon.client()
    rid = c.submit("import time\ntime.sleep(30)")
    q = c.submit("1")
    c.wait_event(rid, "accepted")
    pid = c.info("default")["pid"]
    daemon.stopped_by_test = True
    daemon.proc.send_signal(signal.SIGTERM)
    r = c.wait(rid, 10)
    assert r.status == "shutdown" and r.done["state_lost"] is True
    assert c.wait(q, 10).status == "aborted"
    assert daemon.proc.wait(10) == 0
    assert wait_until(lambda: pid_gone(pid), 5)
    assert not os.path.exists(daemon.endpoint[len("ipc://"):])


def test_second_daemon_on_same_endpoint_refuses(daemon):
    r = subprocess.run([CTXD_BIN, "--listen", daemon.endpoint], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode != 0
    assert "already listening" in r.stderr
    assert daemon.client().execute("1").text == "1"


def test_stale_socket_file_is_replaced(tmp_path, zctx):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "s.sock"))  # a socket file nobody listens on: a crashed daemon's
    s.close()
    d = Daemon(tmp_path, zctx).start()
    try:
        assert d.client().execute("2").text == "2"
    finally:
        _finish(d)


def test_tcp_requires_curve_unless_insecure(tmp_path):
    port = free_port()
    r = subprocess.run([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}", "--insecure-tcp",
                        "--max-queue", "0"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2  # (bad option value) — no daemon left running
    # with keys: a client whose key is not authorized gets nothing, one whose
    # key is authorized is served
    state = tmp_path / "state"
    proc = subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}",
                             "--state-dir", str(state)], stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert wait_until(lambda: (state / "server.pub").exists(), 10)
        assert oct((state / "server.key").stat().st_mode & 0o777) == "0o600"
        server_pub = (state / "server.pub").read_text().strip().encode()
        zctx = zmq.Context.instance()

        def hello(authorize):
            pub, sec = zmq.curve_keypair()
            if authorize:
                with open(state / "authorized_keys", "a") as f:
                    f.write(pub.decode() + "\n")
            s = zctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_pub, pub, sec
            s.connect(f"tcp://127.0.0.1:{port}")
            s.send(pack({"v": 1, "t": "hello", "id": 1}))
            got = s.poll(3000)
            reply = unpack(s.recv()) if got else None
            s.close()
            return reply

        assert hello(False) is None
        reply = hello(True)
        assert reply and reply["t"] == "ok"
        # a plain (non-CURVE) client gets nothing either
        s = zctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        s.send(pack({"v": 1, "t": "hello", "id": 1}))
        assert not s.poll(1500)
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert b"not authorized" in err


def test_insecure_tcp_warns(tmp_path):
    port = free_port()
    proc = subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}", "--insecure-tcp"],
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        s = zmq.Context.instance().socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(f"tcp://127.0.0.1:{port}")
        s.send(pack({"v": 1, "t": "hello", "id": 1}))
        assert s.poll(5000) and unpack(s.recv())["t"] == "ok"
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert b"WARNING" in err and b"no authentication" in err


def test_default_socket_dir_is_private_to_its_user(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(run, 0o755)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(run))
    proc = subprocess.Popen([CTXD_BIN], env=env, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        sock = run / "ctxd" / "ctxd.sock"
        assert wait_until(sock.exists, 10)
        assert oct((run / "ctxd").stat().st_mode & 0o777) == "0o700"
        # another uid (nobody) cannot even reach the socket
        probe = ("import socket\ns = socket.socket(socket.AF_UNIX)\n"
                 f"try:\n    s.connect({str(sock)!r}); print('connected')\n"
                 "except PermissionError: print('denied')\n")
        r = subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True, text=True,
                           timeout=10, user=65534, group=65534)
        assert r.stdout.strip() == "denied", r
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_worker_sending_garbage_is_killed_and_reported(daemon):
    c = daemon.client()
    c.execute("x = 1")
    # user code writes a frame announcing 4 GB onto the worker's channel (fd 3)
    r = c.execute("import os\nos.write(3, b'\\xff\\xff\\xff\\xff garbage')\nimport time\n"
                  "time.sleep(5)")
    assert r.status == "died", r.done
    assert "channel protocol" in r.done["cause"]
    r = c.execute("x")
    assert r.status == "error" and r.error["ename"] == "NameError"
    assert "channel protocol" in r.accepted["previous_death"]
    # a well-framed but meaningless frame is refused the same way (a `done`
    # without the run's id: test_forged_frames.py has the rest)
    body = msgpack.packb({"t": "done", "status": "perfect"})
    code = f"import os\nos.write(3, {len(body).to_bytes(4, 'big') + body!r})\nimport time\ntime.sleep(5)"
    r = c.execute(code)
    assert r.status == "died" and "run_id" in r.done["cause"]
    assert daemon.alive()


def test_interrupt_with_another_clients_run_id_is_refused(daemon):
    owner, other = daemon.client(), daemon.client()
    rid = owner.submit("import time\ntime.sleep(1)\nfinished = True")
    owner.wait_event(rid, "accepted")
    # the other client names the owner's request id: it is not its run
    assert other.ok("interrupt", run=rid)["interrupted"] is False
    assert owner.wait(rid).status == "ok"
    # the owner itself can
    rid = owner.submit("import time\ntime.sleep(30)")
    owner.wait_event(rid, "accepted")
    assert owner.ok("interrupt", run=rid)["interrupted"] is True
    assert owner.wait(rid).status == "interrupted"


@pytest.mark.parametrize("cwd", ["../etc", "relative/dir", "", "/no/such/dir", "/etc/passwd"])
def test_bad_cwd_refused(client, cwd):
    assert client.err("ctx.create", "bad_cwd", name="c1", cwd=cwd)


def test_curve_clients_ctx_and_python(tmp_path):
    """ctx keygen makes a client key; ctx and the Python package connect over
    tcp:// with CTXD_SERVER_KEY/CTXD_CLIENT_KEY; an unlisted key is refused."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import ctxd as ctxd_pkg
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(CTXD_BIN), "..",
                                                          "tools", "ctx"))
    port = free_port()
    state = tmp_path / "state"
    proc = subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}",
                             "--state-dir", str(state)], stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert wait_until(lambda: (state / "server.pub").exists(), 10)
        key = tmp_path / "client.key"
        r = subprocess.run([ctx_bin, "keygen", str(key)], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, r.stderr
        public = r.stdout.strip()
        assert len(public) == 40 and oct(key.stat().st_mode & 0o777) == "0o600"
        env = dict(os.environ, CTXD_SERVER_KEY_FILE=str(state / "server.pub"),
                   CTXD_CLIENT_KEY_FILE=str(key), CTXD_ENDPOINT=f"tcp://127.0.0.1:{port}")
        # not yet authorized: an authentication failure (exit 9), not "unreachable"
        r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                           timeout=30, env=env)
        assert r.returncode == 9, (r.stdout, r.stderr)
        assert "authentication failed" in r.stderr and "refused this client's key" in r.stderr
        r = subprocess.run([ctx_bin, "--json", "hello"], capture_output=True, text=True,
                           timeout=30, env=env)
        assert r.returncode == 9 and json.loads(r.stdout)["code"] == "auth", r.stdout
        with pytest.raises(ctxd_pkg.AuthenticationError, match="refused this client's key"):
            ctxd_pkg.Client(f"tcp://127.0.0.1:{port}",
                            server_key_file=str(state / "server.pub"), client_key_file=str(key))
        # a wrong server key (here the client's own public key): the handshake fails
        wrong = dict(env, CTXD_SERVER_KEY=public)
        del wrong["CTXD_SERVER_KEY_FILE"]
        r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                           timeout=30, env=wrong)
        assert r.returncode == 9, (r.stdout, r.stderr)
        assert "authentication failed" in r.stderr and "CTXD_SERVER_KEY" in r.stderr
        with pytest.raises(ctxd_pkg.AuthenticationError, match="handshake failed"):
            ctxd_pkg.Client(f"tcp://127.0.0.1:{port}", server_key=public,
                            client_key_file=str(key))
        (state / "authorized_keys").write_text(f"# test client\n{public}\n")
        r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                           timeout=30, env=env)
        assert r.returncode == 0 and r.stdout.strip() == "2", (r.stdout, r.stderr)
        with ctxd_pkg.Client(f"tcp://127.0.0.1:{port}",
                             server_key_file=str(state / "server.pub"),
                             client_key_file=str(key)) as c:
            assert c.execute("40 + 2").result == "42"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)



def test_key_and_key_file_are_separate_never_guessed(tmp_path):
    """CTXD_SERVER_KEY holds a key, CTXD_SERVER_KEY_FILE a file (the same for
    the client key and the Python arguments): a key file at a path of 40
    characters is read as a file, and a path given as a key is refused with
    the variable named, never taken for a key."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import ctxd as ctxd_pkg
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(CTXD_BIN), "..",
                                                          "tools", "ctx"))
    with _curve_daemon(tmp_path) as (port, state, key, public):
        (state / "authorized_keys").write_text(f"{public}\n")
        short = tempfile.mkdtemp(prefix="k")  # /tmp/kXXXXXXXX
        pub40 = os.path.join(short, "p" * (40 - len(short) - 1 - len("/server.pub")), "server.pub")
        os.makedirs(os.path.dirname(pub40))
        shutil.copy(state / "server.pub", pub40)
        assert len(pub40) == 40
        base = {k: v for k, v in os.environ.items() if not k.startswith("CTXD_")}
        env = dict(base, CTXD_ENDPOINT=f"tcp://127.0.0.1:{port}", CTXD_SERVER_KEY_FILE=pub40,
                   CTXD_CLIENT_KEY_FILE=str(key))
        r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                           timeout=30, env=env)
        assert r.returncode == 0 and r.stdout.strip() == "2", (r.stdout, r.stderr)
        with ctxd_pkg.Client(f"tcp://127.0.0.1:{port}", server_key_file=pub40,
                             client_key_file=str(key)) as c:
            assert c.execute("6 * 7").result == "42"
        # a path where a key belongs: refused, the _FILE spelling said
        for var, val in (("CTXD_SERVER_KEY", pub40), ("CTXD_CLIENT_KEY", str(key))):
            bad = dict(env)
            bad.pop(var + "_FILE")
            bad[var] = val
            r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                               timeout=30, env=bad)
            assert r.returncode != 0 and f"{var}_FILE" in r.stderr, (var, r.stderr)
        with pytest.raises(ValueError, match="server_key_file"):
            ctxd_pkg.Client(f"tcp://127.0.0.1:{port}", server_key=pub40,
                            client_key_file=str(key))
        both = dict(env, CTXD_SERVER_KEY=open(pub40).read().strip())
        r = subprocess.run([ctx_bin, "run", "1 + 1"], capture_output=True, text=True,
                           timeout=30, env=both)
        assert r.returncode != 0 and "both" in r.stderr, r.stderr
        shutil.rmtree(short)


@contextlib.contextmanager
def _curve_daemon(tmp_path):
    """A daemon on tcp:// with CurveZMQ and a client key made by `ctx keygen`
    (not yet authorized): yields (port, state dir, key file, public key)."""
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(CTXD_BIN), "..",
                                                          "tools", "ctx"))
    port = free_port()
    state = tmp_path / "state"
    proc = subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}",
                             "--state-dir", str(state)], stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert wait_until(lambda: (state / "server.pub").exists(), 10)
        key = tmp_path / "client.key"
        r = subprocess.run([ctx_bin, "keygen", str(key)], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, r.stderr
        yield port, state, key, r.stdout.strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def test_refused_handshakes_in_a_row_each_end_with_authentication_error(tmp_path):
    """Many clients refused in a row, sync and asyncio, each get
    AuthenticationError (never a timeout: a lost monitor event, a send left
    blocking on a connection with no peer) and leave no I/O thread behind.
    Under load this failed within a few hundred tries before the clients
    monitored before connecting, never blocked in a send, and gave each
    asyncio client its own ZeroMQ context."""
    import asyncio
    import sys
    import threading
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import ctxd as ctxd_pkg
    import ctxd.aio as ctxd_aio
    with _curve_daemon(tmp_path) as (port, state, key, public):
        ep = f"tcp://127.0.0.1:{port}"
        # unlisted (the daemon refuses the key), then a wrong server key
        keys = [dict(server_key_file=str(state / "server.pub")), dict(server_key=public)]
        for i in range(300):
            with pytest.raises(ctxd_pkg.AuthenticationError):
                ctxd_pkg.Client(ep, **keys[i % 2], client_key_file=str(key),
                                request_timeout=60)

        async def refused():
            for i in range(300):
                c = ctxd_aio.AsyncClient(ep, **keys[i % 2], client_key_file=str(key),
                                         request_timeout=60)
                with pytest.raises(ctxd_pkg.AuthenticationError):
                    await c.connect()
                await c.close()

        asyncio.run(refused())
        left = [t for t in threading.enumerate() if t.name == "ctxd-client-io" and t.is_alive()]
        assert not left, "an I/O thread is stuck"
