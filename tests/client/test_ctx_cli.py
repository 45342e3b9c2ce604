"""The ctx command line: every subcommand, --help, --json, exit codes."""

import base64
import json
import re
import signal
import subprocess
import time

import pytest

import reachable  # tests/reachable.py, on sys.path via conftest

from conftest import CTX_BIN, WAIT, Daemon, wait_until

COMMANDS = ["run", "ls", "create", "rm", "restart", "fork", "interrupt", "stats", "repl", "hello",
            "help"]


def test_help_for_every_command():
    r = subprocess.run([CTX_BIN, "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for cmd in COMMANDS:
        assert re.search(rf"^  {cmd}\s", r.stdout, re.M), cmd
    assert "exit status" in r.stdout and "--json" in r.stdout
    for code in range(9):
        assert re.search(rf"\b{code}  ", r.stdout), code
    for cmd in COMMANDS:
        r = subprocess.run([CTX_BIN, cmd, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.startswith(f"usage: ctx {cmd}"), cmd
        h = subprocess.run([CTX_BIN, "help", cmd], capture_output=True, text=True)
        assert h.stdout == r.stdout
    stats = subprocess.run([CTX_BIN, "stats", "--help"], capture_output=True, text=True).stdout
    assert "'hello' and 'ctx.list'" in stats and "'stats' request" in stats


def test_usage_and_unreachable_exit_codes(tmp_path):
    assert subprocess.run([CTX_BIN], capture_output=True).returncode == 2
    assert subprocess.run([CTX_BIN, "nope"], capture_output=True).returncode == 2
    assert subprocess.run([CTX_BIN, "run", "--bogus", "1"], capture_output=True).returncode == 2
    r = subprocess.run([CTX_BIN, "--endpoint", f"ipc://{tmp_path}/none.sock", "ls"],
                       capture_output=True, text=True)
    assert r.returncode == 8 and "not running" in r.stderr
    r = subprocess.run([CTX_BIN, "--json", "--endpoint", f"ipc://{tmp_path}/none.sock", "ls"],
                       capture_output=True, text=True)
    assert r.returncode == 8
    err = json.loads(r.stdout)
    assert err["t"] == "err" and err["code"] == "unreachable" and err["local"] is True


def test_run_exit_codes(daemon):
    assert daemon.ctx("run", "x = 1").returncode == 0
    assert daemon.ctx("run", "x").stdout == "1\n"
    r = daemon.ctx("run", "1/0", check=False)
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr
    r = daemon.ctx("run", "-t", "0.5", "while True: pass", check=False)
    assert r.returncode == 3
    assert daemon.ctx("run", "import os; os._exit(1)", check=False).returncode == 5
    assert daemon.ctx("rm", "default", check=False).returncode == 7
    assert daemon.ctx("run", "-f", "/nonexistent/file.py", check=False).returncode == 2
    assert daemon.ctx("run", "-", input="print('from stdin')").stdout == "from stdin\n"


def merged_kinds(evs):
    """Message types, consecutive stream messages as one (a print's newline
    may come as a message of its own)."""
    kinds = [e["t"] for e in evs]
    return [k for i, k in enumerate(kinds) if not (i and k == "stream" and kinds[i - 1] == "stream")]


def test_run_json_events(daemon):
    rc, evs = daemon.json("run", "print('hi')\n6 * 7")
    assert rc == 0
    assert merged_kinds(evs) == ["accepted", "stream", "result", "done"]
    assert evs[0]["ctx"] == "default" and evs[0]["incarnation"] == 1
    assert evs[1] == {"t": "stream", "name": "stdout", "data": "hi\n"}
    assert evs[2]["data"] == {"text/plain": "42"}
    d = evs[3]
    assert d["status"] == "ok" and d["state_lost"] is False and d["truncated"] is False
    assert isinstance(d["duration"], float) and "cause" not in d
    rc, evs = daemon.json("run", "raise ValueError('bad')")
    assert rc == 1 and [e["t"] for e in evs] == ["accepted", "error", "done"]
    assert evs[1]["ename"] == "ValueError" and evs[1]["traceback"][-1] == "ValueError: bad"
    rc, evs = daemon.json("run", "-c", "made", "1")
    assert rc == 0 and evs[0]["ctx"] == "made"
    rc, evs = daemon.json("rm", "default")
    assert rc == 7 and evs == [evs[0]] and evs[0]["code"] == "forbidden" and "local" not in evs[0]


def test_run_json_stream_bytes(daemon):
    """A character split across two chunks is put back together; invalid
    bytes become U+FFFD; --base64 gives the exact bytes."""
    code = ("import os, time\nos.write(1, b'\\xc3')\ntime.sleep(0.1)\nos.write(1, b'\\xa9!')\n"
            "time.sleep(0.1)\nos.write(1, b'\\xff\\n')\nos.write(2, b'\\xe2\\x82')")
    rc, evs = daemon.json("run", code)
    assert rc == 0
    out = "".join(e["data"] for e in evs if e["t"] == "stream" and e["name"] == "stdout")
    err = "".join(e["data"] for e in evs if e["t"] == "stream" and e["name"] == "stderr")
    assert out == "é!\ufffd\n"
    assert err == "\ufffd"  # an incomplete character at the end of the run
    rc, evs = daemon.json("run", "--base64", code)
    raw = b"".join(base64.b64decode(e["data_b64"]) for e in evs
                   if e["t"] == "stream" and e["name"] == "stdout")
    assert raw == b"\xc3\xa9!\xff\n"
    assert all("data" not in e for e in evs if e["t"] == "stream")


def test_ls_table_and_json(daemon):
    daemon.ctx("run", "x = 1")
    daemon.ctx("create", "second-context")
    r = daemon.ctx("ls")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "TIER", "PID", "INC", "RUNS", "QUEUED", "MEMORY",
                                "AGE"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"default", "second-context"}
    assert re.search(r"\bidle\s+unsafe\s+\d+\s+1\s+1\s+0\s+\d+(\.\d+)? (B|KiB|MiB|GiB)\s+\d+[smhd]$",
                     rows["default"]), rows["default"]
    rc, [reply] = daemon.json("ls")
    assert rc == 0 and reply["t"] == "ok"
    by = {c["name"]: c for c in reply["contexts"]}
    assert by["default"]["execution_count"] == 1 and by["default"]["pss"] > 0
    assert by["default"]["rss"] >= by["default"]["pss"]
    assert set(by["second-context"]) >= {"name", "cwd", "state", "pid", "incarnation", "created",
                                         "execution_count", "queued", "rss", "pss", "tier"}


def test_create_rm_restart_interrupt(daemon, tmp_path):
    assert daemon.ctx("create", "c1").stdout == "c1\n"
    rc, [reply] = daemon.json("create", "c2", "--cwd", str(tmp_path), "-e", "K=V")
    assert rc == 0 and reply["ctx"]["name"] == "c2" and reply["ctx"]["cwd"] == str(tmp_path)
    assert daemon.ctx("run", "-c", "c2", "import os; os.environ['K']").stdout == "'V'\n"
    gen = daemon.ctx("create").stdout.strip()
    assert gen.startswith("ctx-")
    assert daemon.ctx("create", "c1", check=False).returncode == 7
    daemon.ctx("run", "-c", "c1", "v = 1")
    r = daemon.ctx("restart", "c1")
    assert "incarnation 2" in r.stdout
    rc, [reply] = daemon.json("restart", "c1")
    assert reply["ctx"]["incarnation"] == 3
    assert daemon.ctx("run", "-c", "c1", "v", check=False).returncode == 1
    rc, [reply] = daemon.json("interrupt", "c1")
    assert rc == 0 and reply == {"t": "ok", "interrupted": False}
    assert "nothing was running" in daemon.ctx("interrupt", "c1").stdout
    assert daemon.json("rm", "c1") == (0, [{"t": "ok"}])
    assert daemon.ctx("rm", "c1", check=False).returncode == 7


def test_create_with_tier_and_policy(daemon, tmp_path):
    out = reachable.writable(tmp_path / "out")  # the sandbox's root is a uid of its own
    rc, [reply] = daemon.json("create", "box", "-t", "sandbox", "-P", "memory_bytes=268435456",
                              "-P", f"filesystem_write_roots=[{out}]", "-P",
                              "subprocess_execution=false", "-P", "cpu_seconds=2.5")
    assert rc == 0, reply
    assert reply["ctx"]["tier"] == "sandbox"
    r = daemon.ctx("run", "-c", "box", f"import os; open({str(out / 'f')!r}, 'w').write('x'); "
                   "import resource; print(os.getpid(), resource.getrlimit(resource.RLIMIT_AS))")
    assert r.stdout == "1 (268435456, 268435456)\n" and (out / "f").read_text() == "x"
    r = daemon.ctx("run", "-c", "box", "import subprocess; subprocess.run(['true'])",
                   check=False)
    assert r.returncode == 1 and "PermissionError" in r.stderr
    rc, [reply] = daemon.json("create", "lst", "-t", "local", "-P", "allowed_imports=[]")
    assert rc == 0 and reply["ctx"]["tier"] == "local"
    r = daemon.ctx("run", "-c", "lst", "import json", check=False)
    assert r.returncode == 1 and "allowed_imports" in r.stderr
    # Bad values: refused by ctx (not a value) or by the daemon (naming the field).
    r = daemon.ctx("create", "x", "-P", "memory_bytes=lots", check=False)
    assert r.returncode != 0 and "memory_bytes" in r.stderr
    r = daemon.ctx("create", "x", "-t", "local", "-P", "memory_bytes=10", check=False)
    assert r.returncode == 7 and "'policy.memory_bytes'" in r.stderr
    r = daemon.ctx("create", "x", "-t", "nope", check=False)
    assert r.returncode == 7 and "'tier'" in r.stderr
    r = daemon.ctx("create", "x", "-P", "novalue", check=False)
    assert r.returncode == 2


def test_interrupt_from_another_process_and_sigint(daemon):
    """ctx interrupt stops another ctx's run (exit 4 there); SIGINT to a
    running `ctx run` interrupts its run too; the globals survive both."""
    daemon.ctx("run", "kept = 'k'")
    code = "import time\nprint('go', flush=True)\nwhile True:\n    time.sleep(0.01)"
    p = subprocess.Popen([CTX_BIN, "--endpoint", daemon.endpoint, "run", code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "go\n"
    rc, [reply] = daemon.json("interrupt")
    assert reply["interrupted"] is True
    assert p.wait(WAIT) == 4
    p = subprocess.Popen([CTX_BIN, "--endpoint", daemon.endpoint, "run", code],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "go\n"
    p.send_signal(signal.SIGINT)
    assert p.wait(WAIT) == 4
    assert "KeyboardInterrupt" in p.stderr.read()
    assert daemon.ctx("run", "kept").stdout == "'k'\n"


def test_stats(daemon):
    daemon.ctx("run", "1")
    daemon.ctx("create", "s1")
    p = subprocess.Popen([CTX_BIN, "--endpoint", daemon.endpoint, "run", "-c", "s1",
                          "import time\nprint('go', flush=True)\ntime.sleep(60)"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert p.stdout.readline() == "go\n"
        rc, [s] = daemon.json("stats")
        assert rc == 0 and s["t"] == "stats"
        assert s["contexts"] == 2 and s["busy"] == 1 and s["idle"] == 1 and s["dead"] == 0
        assert s["executions"] == 2 and s["pss"] > 0 and s["rss"] >= s["pss"]
        assert s["limits"]["max_queue"] > 0 and len(s["instance"]) == 32
        if s["daemon"] is not None:  # the daemon has the `stats` request
            assert s["daemon"]["contexts"]["busy"] == 1
            assert s["daemon"]["counters"]["runs_ok"] >= 1 and s["daemon"]["uptime"] > 0
        text = daemon.ctx("stats").stdout
        assert "2 of at most" in text and "1 busy" in text and "PSS" in text
        assert ("since start" in text) == (s["daemon"] is not None)
    finally:
        daemon.ctx("interrupt", "s1")
        p.wait(WAIT)


def test_hello(daemon):
    assert "ctxd" in daemon.ctx("hello").stdout
    rc, [h] = daemon.json("hello")
    assert h["server"] == "ctxd" and h["versions"] == [1] and h["endpoint"] == daemon.endpoint
    assert set(h["tiers"]) >= {"static", "unsafe", "local"}
    assert "timeout" in h["tiers"]["unsafe"]
    assert h["preloads"] == {"loaded": [], "skipped": []}
    assert h["packages"] == {"offered": False, "sources": []}
    text = daemon.ctx("hello").stdout
    assert "tiers     static, unsafe, local" in text
    assert "preloads  none" in text
    assert "packages  not offered" in text


def test_hello_packages_and_preloads(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    d = Daemon(tmp_path).start(("--wheelhouse", str(wheels), "--preload", "json,no_such_mod_x"))
    try:
        assert wait_until(lambda: "json" in d.json("hello")[1][0]["preloads"]["loaded"])
        rc, [h] = d.json("hello")
        assert h["packages"] == {"offered": True, "sources": ["wheelhouse"]}
        assert h["preloads"]["skipped"] == ["no_such_mod_x"]
        text = d.ctx("hello").stdout
        assert "packages  offered (from wheelhouse)" in text
        assert "preloads  json (not loaded: no_such_mod_x)" in text
    finally:
        assert d.stop() is None


def test_ls_sorts_names_naturally(daemon):
    for name in ("exp-10", "exp-2", "exp-1", "b", "a"):
        daemon.ctx("create", name)
    made = {"exp-10", "exp-2", "exp-1", "b", "a"}
    rows = [r.split()[0] for r in daemon.ctx("ls").stdout.splitlines()[1:]]
    assert [n for n in rows if n in made] == ["a", "b", "exp-1", "exp-2", "exp-10"]
    rc, [reply] = daemon.json("ls")
    names = [c["name"] for c in reply["contexts"] if c["name"] in made]
    assert names == ["a", "b", "exp-1", "exp-2", "exp-10"]


def test_fork(daemon):
    daemon.ctx("run", "-c", "src", "x = 41")
    r = daemon.ctx("fork", "src", "copy", check=False)
    if r.returncode == 7 and "unknown_type" in r.stderr:
        pytest.skip("this daemon has no ctx.fork")
    assert r.returncode == 0 and r.stdout == "copy\n"
    assert daemon.ctx("run", "-c", "copy", "x + 1").stdout == "42\n"
    daemon.ctx("run", "-c", "copy", "x = 0")
    assert daemon.ctx("run", "-c", "src", "x").stdout == "41\n"  # they diverge
    rc, [reply] = daemon.json("fork", "src")
    assert rc == 0 and reply["ctx"]["name"].startswith("ctx-")
    assert daemon.ctx("fork", "nope", check=False).returncode == 7


def test_run_file_as_a_script(daemon, tmp_path):
    # `ctx run -f FILE ARGS...` is `python3 FILE ARGS...`: same output, same exit status
    script = tmp_path / "prog.py"
    script.write_text("import os, sys\n"
                      "print(__file__, sys.argv, sys.orig_argv[1:])\n"
                      "print(sys.path[0] == os.path.dirname(os.path.realpath(__file__)))\n"
                      "sys.exit(int(sys.argv[1]))\n")
    for args in (["0"], ["3", "-c", "x y"]):
        want = subprocess.run(["/usr/bin/python3", "prog.py", *args], cwd=tmp_path,
                              capture_output=True, text=True)
        got = subprocess.run([CTX_BIN, "--endpoint", daemon.endpoint, "run", "-f", "prog.py",
                              *args], cwd=tmp_path, capture_output=True, text=True)
        assert (got.returncode, got.stdout, got.stderr) == \
            (want.returncode, want.stdout, want.stderr), got
    rc, evs = daemon.json("run", "import sys; sys.exit('stop')")
    assert rc == 1 and merged_kinds(evs) == ["accepted", "stream", "done"], evs
    assert evs[-1]["exit_code"] == 1 and evs[-1]["status"] == "error"
    assert daemon.ctx("run", "sys.exit()").returncode == 0


def test_one_hello_per_command_and_no_failed_create(daemon):
    daemon.ctx("create", "there")

    def log_lines():
        return [ln for ln in daemon.log_text().splitlines() if "type=" in ln]

    for args in (("run", "-c", "there", "1"), ("hello",), ("ls",), ("pip", "-c", "there", "x"),
                 ("stats",)):
        before = len(log_lines())
        daemon.ctx(*args, check=False)
        new = log_lines()[before:]
        assert sum("type=hello" in ln for ln in new) <= 1, (args, new)
        # an existing context is not created again: no ctx.create err, nothing refused
        assert not any("ctx.create" in ln and "status=err" in ln for ln in new), (args, new)
