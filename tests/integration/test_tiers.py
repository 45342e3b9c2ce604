"""Tiers and policies (PROTOCOL.md section 5, ctx.create `tier` and `policy`):
validation in the supervisor, what ctx.list and hello report, the static
tier's analysis, and the local tier's enforcement inside the worker."""

import json
import os
import socket

import pytest

import reachable  # tests/reachable.py, on sys.path via conftest
from conftest import zygote_of


def create(c, name, tier=None, policy=None, **kw):
    fields = {"name": name}
    if tier is not None:
        fields["tier"] = tier
    if policy is not None:
        fields["policy"] = policy
    fields.update(kw)
    return c.request("ctx.create", **fields)


# ---- protocol -------------------------------------------------------------

def test_hello_lists_enforced_fields(daemon):
    tiers = daemon.hello["tiers"]
    assert set(tiers) == {"static", "unsafe", "local", "sandbox"}
    assert set(tiers["sandbox"]) >= set(tiers["local"])
    assert "network_access" in tiers["local"]
    assert tiers["unsafe"] == ["timeout", "stdout_max_bytes", "stderr_max_bytes"]


def test_default_tier_is_unsafe(daemon):
    c = daemon.client()
    c.ok("ctx.create", name="a")
    info = c.info("a")
    assert info["tier"] == "unsafe" and info["policy"] == {}


@pytest.mark.parametrize("alias,tier", [("local_unsafe", "unsafe"), ("unsafe", "unsafe"),
                                        ("local", "local"), ("static", "static"),
                                        ("docker", "sandbox"), ("docker_unsafe", "sandbox"),
                                        ("sandbox", "sandbox")])
def test_tier_names_and_aliases(daemon, alias, tier):
    c = daemon.client()
    c.ok("ctx.create", name="a", tier=alias)
    assert c.info("a")["tier"] == tier


@pytest.mark.parametrize("fields,names", [
    ({"tier": "docker2"}, "'tier'"),
    ({"tier": "local", "policy": {"memory_bytes": -1}}, "'policy.memory_bytes'"),
    ({"tier": "local", "policy": {"memory_bytes": 10}}, "'policy.memory_bytes'"),
    ({"tier": "local", "policy": {"network_access": "no"}}, "'policy.network_access'"),
    ({"tier": "local", "policy": {"allowed_imports": ["os;x"]}}, "'policy.allowed_imports'"),
    ({"tier": "local", "policy": {"filesystem_write_roots": ["rel"]}},
     "'policy.filesystem_write_roots'"),
    ({"tier": "local", "policy": {"bogus": 1}}, "'policy.bogus'"),
    ({"tier": "local", "policy": {"timeout": 0}}, "'policy.timeout'"),
    ({"tier": "local", "policy": {"stdout_max_bytes": 0}}, "'policy.stdout_max_bytes'"),
    ({"tier": "local", "policy": {"stderr_max_bytes": -5}}, "'policy.stderr_max_bytes'"),
    ({"tier": "unsafe", "policy": {"network_access": False}}, "'policy.network_access'"),
    ({"tier": "unsafe", "policy": {"filesystem_read_roots": ["/"]}},
     "'policy.filesystem_read_roots'"),
    ({"tier": "local", "policy": {"packages": ["numpy"]}}, "'policy.packages'"),
    ({"tier": "sandbox", "policy": {"stdout_max_bytes": "10"}}, "'policy.stdout_max_bytes'"),
])
def test_bad_policy_names_the_field(daemon, fields, names):
    c = daemon.client()
    e = c.err("ctx.create", "bad_field", name="a", **fields)
    assert names in e["message"], e
    assert "a" not in c.contexts()


def test_policy_shown_in_list(daemon):
    c = daemon.client()
    pol = {"network_access": False, "memory_bytes": 1 << 46, "allowed_imports": ["math"],
           "timeout": 5, "cpu_seconds": 2.5}
    c.ok("ctx.create", name="a", tier="local", policy=pol)
    info = c.info("a")
    assert info["tier"] == "local"
    # max_processes: a root daemon's default for local (the host's pids are bounded)
    assert info["policy"] == {"network_access": False, "memory_bytes": 1 << 46,
                              "allowed_imports": ["math"], "timeout": 5.0, "cpu_seconds": 2.5,
                              "max_processes": 512}


def test_permissive_values_accepted_in_unsafe(daemon):
    c = daemon.client()
    c.ok("ctx.create", name="a", tier="unsafe",
         policy={"network_access": True, "subprocess_execution": True, "timeout": 3})
    assert c.execute("1+1", ctx="a").text == "2"
    # unsafe confines nothing: sockets, subprocesses, ptrace-able children
    r = c.execute("import socket, subprocess; socket.socket().close(); "
                  "subprocess.run(['true']).returncode", ctx="a")
    assert r.text == "0", r


def test_policy_timeout_caps_runs(daemon):
    c = daemon.client()
    c.ok("ctx.create", name="a", policy={"timeout": 0.5})
    r = c.execute("import time; time.sleep(5)", ctx="a", timeout=100)
    assert r.status == "timeout", r


# ---- static ---------------------------------------------------------------

def analysis(r):
    return json.loads(r.result["data"]["application/vnd.ctxd.analysis+json"])


def test_static_runs_nothing(daemon, tmp_path):
    c = daemon.client()
    c.ok("ctx.create", name="s", tier="static", policy={"allowed_imports": ["math"]})
    marker = tmp_path / "ran"
    r = c.execute(f"import math\nopen({str(marker)!r}, 'w').write('x')\nprint('hi')", ctx="s")
    assert r.status == "ok", r
    assert not marker.exists()
    assert r.stdout == b""
    a = analysis(r)
    assert a["imports"] == ["math"] and a["disallowed"] == [] and a["executed"] is False


def test_static_syntax_error_line_col(daemon):
    c = daemon.client()
    c.ok("ctx.create", name="s", tier="static")
    r = c.execute("x = 1\ny = (2 +\n", ctx="s")
    assert r.status == "error"
    a = analysis(r)
    assert a["syntax_error"]["line"] == 2 and a["syntax_error"]["col"] >= 1
    assert r.error["ename"] == "SyntaxError"


def test_static_disallowed_imports(daemon):
    c = daemon.client()
    c.ok("ctx.create", name="s", tier="static", policy={"allowed_imports": ["math", "os"]})
    r = c.execute("import os.path, socket\nfrom subprocess import run\n"
                  "__import__('ctypes')\nimport importlib\nimportlib.import_module(x)", ctx="s")
    a = analysis(r)
    assert a["imports"] == ["os.path", "socket", "subprocess", "ctypes", "importlib"] or \
        set(a["imports"]) == {"os.path", "socket", "subprocess", "ctypes", "importlib"}
    assert set(a["disallowed"]) == {"socket", "subprocess", "ctypes", "importlib",
                                    "<dynamic import>"}
    assert r.status == "error" and r.error["ename"] == "ImportError"


# ---- local ----------------------------------------------------------------

def local(c, name="l", **pol):
    c.ok("ctx.create", name=name, tier="local", policy=pol)


def test_local_clean_env(make_daemon, monkeypatch):
    monkeypatch.setenv("CTXD_TEST_SECRET", "hunter2")
    d = make_daemon()
    c = d.client()
    local(c)
    c.ok("ctx.create", name="l2", tier="local", policy={"env": ["CTXD_TEST_SECRET"]},
         env={"MINE": "1"})
    r = c.execute("import os; sorted(os.environ)", ctx="l")
    names = eval(r.text)
    assert "CTXD_TEST_SECRET" not in names and "CTXD_SANDBOX" not in names
    # TMPDIR: the context's own directory, the only one it may write
    assert set(names) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "TMPDIR"}, names
    r = c.execute("import os; (os.environ.get('CTXD_TEST_SECRET'), os.environ['MINE'])",
                  ctx="l2")
    assert r.text == "('hunter2', '1')"
    c.ok("ctx.create", name="l3", tier="local", policy={"env_var_access": False})
    r = c.execute("import os; sorted(os.environ)", ctx="l3")
    assert eval(r.text) == ["PATH", "TMPDIR"]  # TMPDIR: its own directory


def test_local_import_allowlist(daemon):
    c = daemon.client()
    local(c, allowed_imports=["math", "json"])
    ok = c.execute("import math, json; json.dumps([math.pi]) and 1", ctx="l")
    assert ok.text == "1", ok
    for code in ("import os", "import socket", "__import__('subprocess')",
                 "import importlib", "exec('import ctypes')", "from os import path",
                 "exec('import sys', {})"):
        r = c.execute(code, ctx="l")
        assert r.status == "error" and r.error["ename"] == "ImportError", (code, r)
        assert "allowed_imports" in r.error["evalue"]
    # json's own lazy imports still work; the context lives on
    assert c.execute("json.loads('[1]')[0] + 1", ctx="l").text == "2"


def test_local_empty_allowlist_means_none(daemon):
    c = daemon.client()
    local(c, allowed_imports=[])
    r = c.execute("import math", ctx="l")
    assert r.error["ename"] == "ImportError"
    assert c.execute("1+1", ctx="l").text == "2"


def test_local_no_network(daemon):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        c = daemon.client()
        local(c, network_access=False)
        r = c.execute(f"import socket; socket.create_connection(('127.0.0.1', {port}))", ctx="l")
        assert r.status == "error" and r.error["ename"] == "PermissionError", r
        assert c.execute("1+1", ctx="l").text == "2"
    finally:
        srv.close()


def test_local_no_subprocess(daemon):
    c = daemon.client()
    local(c, subprocess_execution=False)
    for code in ("import subprocess; subprocess.run(['true'])", "import os; os.fork()",
                 "import os; os.execv('/bin/true', ['true'])"):
        r = c.execute(code, ctx="l")
        assert r.status == "error" and r.error["ename"] == "PermissionError", (code, r)
    # threads still work
    r = c.execute("import threading; t = threading.Thread(target=lambda: None); t.start(); "
                  "t.join(); 'ok'", ctx="l")
    assert r.text == "'ok'", r


@pytest.mark.skipif(os.environ.get("CTXD_SANITIZED") == "1",
                    reason="ASan's shadow memory is address space: RLIMIT_AS cannot apply")
def test_local_memory_limit(daemon):
    c = daemon.client()
    local(c, memory_bytes=1 << 30)
    r = c.execute("x = bytearray(4 << 30)", ctx="l")
    assert r.status == "error" and r.error["ename"] == "MemoryError", r
    assert c.execute("1+1", ctx="l").text == "2"


def test_local_file_size(daemon, tmp_path):
    c = daemon.client()
    local(c, file_size_bytes=1 << 20)
    r = c.execute("open('big', 'wb').write(b'x' * (2 << 20))", ctx="l")
    assert r.status == "error" and r.error["ename"] == "OSError", r
    assert "File too large" in r.error["evalue"]
    assert c.execute("1+1", ctx="l").text == "2"


def test_local_max_processes(daemon):
    c = daemon.client()
    local(c, max_processes=3)
    r = c.execute("import os, time\npids = []\ntry:\n    for i in range(20):\n"
                  "        p = os.fork()\n        if p == 0:\n            time.sleep(5)\n"
                  "            os._exit(0)\n        pids.append(p)\nfinally:\n"
                  "    for p in pids:\n        os.kill(p, 9); os.waitpid(p, 0)\n", ctx="l")
    assert r.status == "error" and r.error["ename"] == "BlockingIOError", r
    assert c.execute("1+1", ctx="l").text == "2"


def test_local_cpu_seconds_per_run(daemon):
    c = daemon.client()
    local(c, cpu_seconds=1)
    for _ in range(2):  # per run: the second run has a whole budget again
        r = c.execute("while True: pass", ctx="l")
        assert r.status == "error" and r.error["ename"] == "TimeoutError", r
        assert c.execute("sum(range(10**6)) > 0", ctx="l").text == "True"


def test_local_write_roots(daemon, tmp_path):
    root = tmp_path / "w"
    reachable.writable(root)
    other = tmp_path / "other"
    other.mkdir()
    c = daemon.client()
    local(c, filesystem_write_roots=[str(root)])
    assert c.execute(f"open({str(root / 'f')!r}, 'w').write('x')", ctx="l").text == "1"
    r = c.execute(f"open({str(other / 'f')!r}, 'w')", ctx="l")
    assert r.status == "error" and r.error["ename"] == "PermissionError", r
    assert not (other / "f").exists()
    assert c.execute("1+1", ctx="l").text == "2"


def test_local_cannot_signal_supervisor(daemon):
    c = daemon.client()
    local(c)
    r = c.execute(f"import os; os.kill({daemon.proc.pid}, 9)", ctx="l")
    assert r.status == "error" and r.error["ename"] == "PermissionError", r
    assert daemon.alive()


def test_local_fork_copy_keeps_policy(daemon):
    c = daemon.client()
    local(c, allowed_imports=["math"])
    c.ok("ctx.fork", ctx="l", name="copy")
    info = c.info("copy")
    assert info["tier"] == "local" and info["policy"]["allowed_imports"] == ["math"]
    r = c.execute("import os", ctx="copy")
    assert r.error["ename"] == "ImportError"


def test_local_read_roots(daemon, tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    (root / "f").write_text("mine")
    (tmp_path / "secret").write_text("no")
    c = daemon.client()
    local(c, filesystem_read_roots=[str(root)])
    assert c.execute(f"open({str(root / 'f')!r}).read()", ctx="l").text == "'mine'"
    for path in ("/etc/shadow", str(tmp_path / "secret")):
        r = c.execute(f"open({path!r}).read()", ctx="l")
        assert r.status == "error" and r.error["ename"] == "PermissionError", r
    # the interpreter's own files stay readable: new stdlib imports work
    assert c.execute("import decimal, json; json.dumps(str(decimal.Decimal(1)))",
                     ctx="l").text == repr(json.dumps("1"))


def test_local_unenforceable_root_fails_create(daemon, tmp_path):
    c = daemon.client()
    r = c.request("ctx.create", name="l", tier="local",
                  policy={"filesystem_write_roots": [str(tmp_path / "missing")]})
    assert r["t"] == "err" and r["code"] == "spawn", r


def test_local_policy_on_exec_path_and_restart(make_daemon, monkeypatch):
    """A worker started by fork+exec (no zygote) and a restarted one are
    confined the same way."""
    monkeypatch.setenv("CTXD_TEST_SECRET", "hunter2")
    d = make_daemon()
    c = d.client()
    z = zygote_of(d)
    assert z
    os.kill(z, 9)  # our daemon's zygote; the next create falls back to exec
    local(c, network_access=False, allowed_imports=["os", "socket"])
    pid = c.info("l")["pid"]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        exec_path = b"--out-fds" in f.read()
    for _ in range(2):
        r = c.execute("import os; ('CTXD_TEST_SECRET' in os.environ, "
                      "b'hunter2' in open('/proc/self/environ', 'rb').read())", ctx="l")
        assert r.text == "(False, False)", r
        r = c.execute("import socket; socket.socket()", ctx="l")
        assert r.error["ename"] == "PermissionError", r
        assert c.execute("import json", ctx="l").error["ename"] == "ImportError"
        c.ok("ctx.restart", ctx="l")
    print("exec path:", exec_path)


def test_local_no_subprocess_refuses_fork(daemon):
    c = daemon.client()
    local(c, subprocess_execution=False)
    e = c.err("ctx.fork", "forbidden", ctx="l", name="copy")
    assert "subprocess_execution" in e["message"]
    assert c.execute("1+1", ctx="l").text == "2"


@pytest.mark.parametrize("tier", ["unsafe", "local", "sandbox"])
def test_per_stream_output_caps(daemon, tier):
    c = daemon.client()
    c.ok("ctx.create", name="a", tier=tier,
         policy={"stdout_max_bytes": 100, "stderr_max_bytes": 10})
    assert c.info("a")["policy"]["stdout_max_bytes"] == 100
    r = c.execute("import sys\nfor i in range(50): print('x' * 9)\n"
                  "sys.stderr.write('e' * 25); sys.stderr.flush()", ctx="a")
    assert r.status == "ok", r
    assert r.stdout == b"x" * 9 + b"\n" + (b"x" * 9 + b"\n") * 9
    assert r.done["truncated"] is True
    assert r.done["dropped"] == {"stdout": 400, "stderr": 15}
    err = r.stderr.decode()
    assert err.startswith("e" * 10)
    assert "stdout_max_bytes (100 bytes)" in err and "stderr_max_bytes (10 bytes)" in err
    # Per run: the next run starts from zero.
    r = c.execute("print('y' * 50)", ctx="a")
    assert r.stdout == b"y" * 50 + b"\n" and r.done["truncated"] is False
