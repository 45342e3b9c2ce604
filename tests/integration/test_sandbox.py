"""The sandbox tier (PROTOCOL.md section 5; daemon/sandbox/sbx_ns.c, sbx_allow.c):
namespaces, the assembled root, the private directory, cgroup limits with
OOM reported as such, the allowlist filter not getting in the way of
ordinary work, and what the tier refuses. The escape attempts themselves are
tests/sandbox/test_escape.py."""

import base64
import os

import pytest

import reachable  # tests/reachable.py, on sys.path via conftest


@pytest.fixture
def sd(make_daemon, tmp_path):
    state = tmp_path / "state"
    return make_daemon("--state-dir", str(state))


def sandbox(c, name, policy=None, **kw):
    fields = {"name": name, "tier": "sandbox"}
    if policy is not None:
        fields["policy"] = policy
    fields.update(kw)
    r = c.ok("ctx.create", **fields)
    assert c.execute("import os", ctx=name).status == "ok"
    return r


def value(c, ctx, expr):
    r = c.execute(expr, ctx=ctx)
    assert r.status == "ok", r
    return r.text


def test_offered_with_defaults(sd):
    assert "sandbox" in sd.hello["tiers"]
    assert "memory_bytes" in sd.hello["tiers"]["sandbox"]
    c = sd.client()
    sandbox(c, "s")
    info = c.info("s")
    assert info["tier"] == "sandbox"
    # A sandbox is never unbounded: the defaults are shown.
    assert info["policy"] == {"network_access": False, "memory_bytes": 1 << 30,
                              "max_processes": 64, "disk_bytes": 1 << 30}
    # mellea's names for it.
    c.ok("ctx.create", name="d", tier="docker")
    assert c.info("d")["tier"] == "sandbox"


def test_own_namespaces_and_root(sd):
    c = sd.client()
    sandbox(c, "s")
    assert value(c, "s", "import os; os.getpid()") == "1"
    assert value(c, "s", "import socket; socket.gethostname()") == "'ctxd'"
    top = eval(value(c, "s", "sorted(os.listdir('/'))"))
    assert set(top) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin",
                        "tmp", "usr"} | {top_dir(info_cwd(c, "s"))}
    for absent in ("/root", "/home", "/var", "/etc/shadow", "/run"):
        assert value(c, "s", f"os.path.exists({absent!r})") == "False", absent
    # Its own /proc: only its own processes.
    pids = eval(value(c, "s", "[p for p in os.listdir('/proc') if p.isdigit()]"))
    assert "1" in pids and len(pids) < 5, pids
    # Root inside, no capability at all.
    assert value(c, "s", "os.getuid()") == "0"
    status = eval(value(c, "s", "open('/proc/self/status').read()"))
    for line in ("CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1",
                 "Seccomp:\t2"):
        assert line in status, line


def info_cwd(c, name):
    return c.info(name)["cwd"]


def top_dir(path):
    return path.strip("/").split("/")[0]


def test_private_directory_without_cwd(sd, tmp_path):
    c = sd.client()
    sandbox(c, "s")
    cwd = info_cwd(c, "s")
    assert cwd.startswith(str(tmp_path / "state" / "contexts" / sd.hello["instance"] / "s."))
    assert value(c, "s", "os.getcwd()") == repr(cwd)
    # The daemon's own working directory is not in the sandbox.
    assert value(c, "s", f"os.path.exists({sd.cwd!r})") == "False"
    r = c.execute("open('made.txt', 'w').write('from inside')", ctx="s")
    assert r.status == "ok", r
    assert (open(os.path.join(cwd, "made.txt")).read()) == "from inside"
    # file.put/get reach the same directory.
    c.ok("file.put", ctx="s", path="in.bin", data=b"\x00\x01 put")
    assert value(c, "s", "open('in.bin', 'rb').read()") == repr(b"\x00\x01 put")
    got = c.ok("file.get", ctx="s", path="made.txt")
    assert got["data"] == b"from inside"
    c.ok("ctx.delete", ctx="s")
    assert not os.path.exists(cwd), "the private directory outlived its context"


def test_given_cwd_write_and_read_roots(sd, tmp_path):
    work, wr, rd = tmp_path / "work", tmp_path / "wr", tmp_path / "rd"
    for d in (work, wr):  # the sandbox's root is a uid of its own: it writes shared dirs
        reachable.writable(d)
    rd.mkdir()
    (rd / "data.txt").write_text("read me")
    (tmp_path / "beside.txt").write_text("not for the sandbox")
    c = sd.client()
    sandbox(c, "s", cwd=str(work),
            policy={"filesystem_write_roots": [str(wr)], "filesystem_read_roots": [str(rd)]})
    assert value(c, "s", "os.getcwd()") == repr(str(work))
    r = c.execute(f"open({str(wr / 'out.txt')!r}, 'w').write('x'); open('here.txt', 'w')",
                  ctx="s")
    assert r.status == "ok", r
    assert (wr / "out.txt").read_text() == "x" and (work / "here.txt").exists()
    assert value(c, "s", f"open({str(rd / 'data.txt')!r}).read()") == "'read me'"
    r = c.execute(f"open({str(rd / 'new.txt')!r}, 'w')", ctx="s")
    assert r.error and "Read-only file system" in r.error["evalue"], r
    r = c.execute(f"open({str(tmp_path / 'beside.txt')!r}).read()", ctx="s")
    assert r.error and r.error["ename"] == "FileNotFoundError", r
    # /tmp is the sandbox's own tmpfs, not the host's.
    assert value(c, "s", f"os.path.exists({str(tmp_path)!r} + '/beside.txt')") == "False"
    assert value(c, "s", "open('/tmp/t', 'w').write('t')") == "1"
    assert not os.path.exists("/tmp/t") or open("/tmp/t").read() != "t"


def test_subprocess_and_its_policy(sd):
    c = sd.client()
    sandbox(c, "s")
    r = c.execute("import subprocess; print(subprocess.run(['echo', 'hi'], "
                  "capture_output=True, text=True).stdout, end='')", ctx="s")
    assert r.status == "ok" and r.stdout == b"hi\n", r
    sandbox(c, "n", policy={"subprocess_execution": False})
    r = c.execute("import subprocess; subprocess.run(['echo', 'hi'])", ctx="n")
    assert r.error and r.error["ename"] == "PermissionError", r
    # Threads are not processes: still fine.
    r = c.execute("import threading; t = threading.Thread(target=print, args=('t',)); "
                  "t.start(); t.join()", ctx="n")
    assert r.status == "ok" and r.stdout == b"t\n", r


def test_network_policy(sd):
    c = sd.client()
    sandbox(c, "off")
    r = c.execute("import socket; socket.socket()", ctx="off")
    assert r.error and r.error["ename"] == "PermissionError", r
    sandbox(c, "on", policy={"network_access": True})
    assert value(c, "on", "import socket; s = socket.socket(); s.close(); 'made'") == "'made'"


# The workload the allowlist in daemon/sandbox/sbx_allow.c was measured with (strace
# of a sandbox worker running it): everything here must work in the tier.
WORKLOAD = r"""
import asyncio, json, multiprocessing, os, selectors, shutil, signal, socket, subprocess
import tempfile, threading, time
done = []
d = tempfile.mkdtemp()
with open(os.path.join(d, 'a'), 'w') as f:
    f.write('x' * 10000)
shutil.copy(os.path.join(d, 'a'), os.path.join(d, 'b'))
os.rename(os.path.join(d, 'b'), os.path.join(d, 'c'))
os.symlink('c', os.path.join(d, 'l'))
os.chmod(os.path.join(d, 'c'), 0o600)
os.utime(os.path.join(d, 'c'))
shutil.rmtree(d)
done.append('files')
t = threading.Thread(target=time.sleep, args=(0.01,)); t.start(); t.join()
done.append('threads')
assert subprocess.run(['true']).returncode == 0
p = subprocess.Popen(['cat'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert p.communicate(b'pipe')[0] == b'pipe'
done.append('subprocess')
with multiprocessing.Pool(2) as pool:
    assert pool.map(abs, [-1, -2]) == [1, 2]
done.append('multiprocessing')
a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'
done.append('socketpair')
async def main():
    await asyncio.sleep(0.01)
    proc = await asyncio.create_subprocess_exec('true')
    await proc.wait()
asyncio.run(main())
done.append('asyncio')
signal.signal(signal.SIGALRM, lambda *a: done.append('alarm'))
signal.setitimer(signal.ITIMER_REAL, 0.01)
time.sleep(0.2)
sel = selectors.DefaultSelector(); sel.close()
os.cpu_count(); os.getloadavg(); os.uname(); os.urandom(16); time.process_time()
done.append('misc')
try:
    import numpy
    assert float(numpy.linalg.inv(numpy.eye(3)).sum()) == 3.0
    done.append('numpy')
except ImportError:
    pass
try:
    import matplotlib
    matplotlib.use('Agg')
    import io, matplotlib.pyplot as plt
    plt.plot([1, 2]); buf = io.BytesIO(); plt.savefig(buf, format='png'); plt.close('all')
    assert buf.getvalue()[:4] == b'\x89PNG'
    done.append('matplotlib')
except ImportError:
    pass
print(' '.join(done))
"""


def test_workload_meets_no_eperm(sd):
    c = sd.client()
    sandbox(c, "s")
    r = c.execute(WORKLOAD, ctx="s", timeout=60)
    assert r.status == "ok", r
    out = r.stdout.decode().split()
    for step in ("files", "threads", "subprocess", "multiprocessing", "socketpair", "asyncio",
                 "alarm", "misc"):
        assert step in out, (step, r)


def test_figure_and_input_in_sandbox(sd):
    pytest.importorskip("matplotlib")
    c = sd.client()
    sandbox(c, "s")
    r = c.execute("import matplotlib.pyplot as plt; plt.plot([1, 2, 3])", ctx="s")
    assert r.status == "ok", r
    pngs = [e for e in r.of("display") if "image/png" in e["data"]]
    assert pngs, r
    data = pngs[0]["data"]["image/png"]
    raw = base64.b64decode(data) if isinstance(data, str) else data
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"


def test_oom_is_reported_as_oom(sd):
    c = sd.client()
    limit = 64 << 20
    sandbox(c, "s", policy={"memory_bytes": limit})
    # RLIMIT_AS stops one big allocation with MemoryError (an ASan build has
    # no RLIMIT_AS, daemon/sandbox/sbx_apply.c: its memory cgroup ends it)...
    r = c.execute(f"b = bytearray({4 * limit}); b[::4096] = b'x' * len(b[::4096])", ctx="s")
    if os.environ.get("CTXD_SANITIZED") == "1":
        assert r.status == "died" and r.done["cause"].startswith("oom"), r
    else:
        assert r.error and r.error["ename"] == "MemoryError", r
    # ...while memory outside the address space (the tmpfs /tmp) is the
    # cgroup's: filling it past the limit is an OOM kill.
    r = c.execute("f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))",
                  ctx="s", timeout=60)
    assert r.status == "died", r
    assert r.done["cause"].startswith("oom"), r.done
    # The context comes back (a new worker, state lost, /tmp empty again).
    r2 = c.execute("__import__('os').path.exists('/tmp/fill')", ctx="s")
    assert r2.text == "False" and r2.accepted["incarnation"] == r.done["incarnation"] + 1, r2


def test_refusals(sd):
    c = sd.client()
    sandbox(c, "s")
    e = c.err("ctx.fork", "forbidden", ctx="s", name="copy")
    assert "sandbox" in e["message"]
    e = c.err("ctx.create", "bad_field", name="x", tier="sandbox",
              policy={"memory_bytes": 1024})
    assert "'policy.memory_bytes'" in e["message"]
    e = c.err("ctx.create", "bad_field", name="x", tier="sandbox",
              policy={"filesystem_write_roots": ["relative"]})
    assert "'policy.filesystem_write_roots'" in e["message"]
    c.err("ctx.create", "bad_cwd", name="x", tier="sandbox", cwd="/no/such/dir")
    # Paths that would undo the sandbox's own root, /proc, /sys or /dev.
    for cwd in ("/", "/proc", "/dev/shm", "/tmp/../etc"):
        c.err("ctx.create", "bad_cwd", name="x", tier="sandbox", cwd=cwd)
    for field, path in (("filesystem_write_roots", "/"), ("filesystem_read_roots", "/proc/1"),
                        ("filesystem_write_roots", "/sys"), ("filesystem_read_roots", "/tmp/./x"),
                        ("filesystem_read_roots", "/etc/../root")):
        e = c.err("ctx.create", "bad_field", name="x", tier="sandbox", policy={field: [path]})
        assert f"'policy.{field}'" in e["message"], e
    # A read root that does not exist: the worker cannot start, creation fails
    # with the reason, and nothing is left behind.
    e = c.err("ctx.create", "spawn", name="x", tier="sandbox",
              policy={"filesystem_read_roots": ["/no/such/root"]})
    assert "x" not in c.contexts()
    assert value(c, "s", "1 + 1") == "2"


def test_restart_and_many(sd):
    c = sd.client()
    for i in range(8):
        sandbox(c, f"s{i}")
    for i in range(8):
        assert value(c, f"s{i}", "os.getpid()") == "1"
    c.execute("x = 41", ctx="s0")
    c.ok("ctx.restart", ctx="s0")
    r = c.execute("x", ctx="s0")
    assert r.error and r.error["ename"] == "NameError", r
    assert value(c, "s0", "__import__('os').getpid()") == "1"
