"""Snapshots of a context's Python state (PROTOCOL.md section 5,
ctx.snapshot; issue 21): survive a daemon restart, list what could not be
saved, refuse a corrupt or foreign file without harming the context,
autosnapshot across a SIGKILL of the daemon, a move between two daemons,
a local-tier context, and export/import between daemons under the
operator's key (the writer's tier survives; a tampered export is refused)."""

import os
import shutil
import signal

import pytest

from conftest import Daemon, _finish

pytest.importorskip("numpy")

STATE_CODE = """
import numpy as np, math
x = 42
def f(a):
    return a * x
class C:
    def __init__(self):
        self.v = 3
    def m(self):
        return self.v + x
c = C()
arr = np.arange(1_000_000, dtype=np.float64)
"""
CHECK_CODE = "(f(2), c.m(), float(arr.sum()), math.pi > 3, type(c).__name__)"
CHECK_TEXT = "(84, 45, 499999500000.0, True, 'C')"


@pytest.fixture
def start(tmp_path, zctx):
    """start(SUB, *args): a daemon whose state directory is tmp_path/SUB-state
    (a later start with the same SUB is a restart); every one is stopped
    and checked at the end, also when the test failed."""
    started = []

    def make(sub, *args):
        run = tmp_path / sub
        run.mkdir(exist_ok=True)
        d = Daemon(run, zctx)
        started.append(d)
        return d.start(("--state-dir", str(tmp_path / (sub + "-state")), *args))

    yield make
    for d in started:
        if d.proc is not None and not d.log.closed:
            _finish(d)


def test_snapshot_daemon_restart_restore(tmp_path, start):
    """Globals, functions, classes, numpy arrays and DataFrames survive
    snapshot -> daemon restart -> restore; unpicklable objects are listed."""
    pd = pytest.importorskip("pandas")
    del pd
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="exp")
    code = STATE_CODE + """
import pandas as pd, socket, threading
df = pd.DataFrame({'a': range(1000), 'b': ['x'] * 1000})
sock = socket.socket()
th = threading.Thread(target=print)
gen = (i for i in range(3))
"""
    assert c.execute(code, ctx="exp").status == "ok"
    snap = c.ok("ctx.snapshot", ctx="exp", name="s1")
    assert snap["snapshot"]["id"] == "exp/s1" and snap["snapshot"]["size"] > 8_000_000, snap
    reasons = {u["name"]: u["reason"] for u in snap["unsaved"]}
    assert reasons == {"sock": "an open socket", "th": "a thread", "gen": "a generator"}, snap
    listed = c.ok("ctx.snapshots", ctx="exp")["snapshots"]
    assert [s["id"] for s in listed] == ["exp/s1"], listed
    count = c.info("exp")["execution_count"]
    _finish(d)

    d = start("a")
    c = d.client()
    assert c.execute("'x' in globals()", ctx="exp").text == "False"  # state lost...
    r = c.ok("ctx.restore", ctx="exp", snapshot="s1")  # ... and restored
    assert r["snapshot"] == "exp/s1" and r["ctx"]["execution_count"] == count, r
    r = c.execute(CHECK_CODE[:-1] + ", df.shape, df['b'][999], 'sock' in globals())", ctx="exp")
    assert r.status == "ok" and r.text == CHECK_TEXT[:-1] + ", (1000, 2), 'x', False)", r.events
    assert r.of("accepted")[0]["execution_count"] == count + 1
    # functions are bound to the context's globals again, not to a copy
    assert c.execute("x = 100\nf(2), c.m()", ctx="exp").text == "(200, 103)"
    # a new context from the snapshot, in the same daemon
    r = c.ok("ctx.create", name="copy", from_snapshot="exp/s1")
    assert r["ctx"]["name"] == "copy" and r["restored"] >= 8, r
    assert c.execute(CHECK_CODE, ctx="copy").text == CHECK_TEXT
    c.ok("ctx.snapshot_delete", snapshot="exp/s1")
    assert c.ok("ctx.snapshots")["snapshots"] == []
    assert c.err("ctx.restore", "not_found", ctx="exp", snapshot="s1")
    _finish(d)


def test_corrupt_and_foreign_snapshots_refused(tmp_path, start):
    """A corrupt, truncated or foreign file is refused with a clear error and
    the context keeps its state; a snapshot past the cap is refused with the
    size it would need."""
    d = start("a", "--max-snapshot-bytes", "4M")
    c = d.client()
    c.ok("ctx.create", name="exp")
    assert c.execute("keep = [1, 2, 3]\nbig = bytes(8 << 20)", ctx="exp").status == "ok"
    e = c.err("ctx.snapshot", "too_large", ctx="exp", name="big")
    needed = int(e["message"].split("would need ")[1].split()[0])
    assert needed > 8 << 20 and "4194304" in e["message"], e
    assert c.execute("del big", ctx="exp").status == "ok"
    c.ok("ctx.snapshot", ctx="exp", name="good")
    snapdir = tmp_path / "a-state" / "snapshots" / "exp"
    assert sorted(os.listdir(snapdir)) == ["good"]  # no temporary file left behind
    data = (snapdir / "good").read_bytes()
    bad = {
        "flipped": data[:40] + bytes([data[40] ^ 1]) + data[41:],
        "truncated": data[: len(data) // 2],
        "foreign": b"PK\x03\x04" + os.urandom(4000),
        "newer-python": data.replace(b'"python": "3.11"', b'"python": "3.99"'),
    }
    # A file changed by hand has no mark the daemon made: of the sandbox
    # tier, so an unsafe context refuses it before reading it; a sandbox
    # context reads it and refuses what is wrong with it.
    c.ok("ctx.create", name="sbx", tier="sandbox")
    assert c.execute("keep = [1, 2, 3]", ctx="sbx").status == "ok"
    for name, blob in bad.items():
        (snapdir / name).write_bytes(blob)
        e = c.err("ctx.restore", "forbidden", ctx="exp", snapshot=name)
        assert "no writer's mark" in e["message"], e
        e = c.err("ctx.restore", "bad_snapshot", ctx="sbx", snapshot="exp/" + name)
        assert "snapshot" in e["message"], e
        e = c.err("ctx.create", "bad_snapshot", name="n-" + name, tier="sandbox",
                  from_snapshot="exp/" + name)
        assert "n-" + name not in [i["name"] for i in c.ok("ctx.list")["contexts"]]
        # the contexts keep their state
        assert c.execute("keep", ctx="exp").text == "[1, 2, 3]"
        assert c.execute("keep", ctx="sbx").text == "[1, 2, 3]"
    assert "3.99" in c.err("ctx.restore", "bad_snapshot", ctx="sbx",
                           snapshot="exp/newer-python")["message"]
    os.symlink(snapdir / "good", snapdir / "link")
    c.err("ctx.restore", "io", ctx="exp", snapshot="link")  # never followed
    c.err("ctx.restore", "bad_name", ctx="exp", snapshot="../a-state/x")
    _finish(d)


def test_autosnapshot_after_sigkill(tmp_path, start):
    """An autosnapshotted context comes back after a SIGKILL of the daemon
    with its state restored, and its first accepted says from which
    snapshot."""
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="auto", autosnapshot="run")
    c.ok("ctx.create", name="plain")
    assert c.execute(STATE_CODE, ctx="auto").status == "ok"
    assert c.execute("y = x + 1", ctx="auto").status == "ok"
    assert c.execute("z = 1", ctx="plain").status == "ok"
    # the autosnapshot after the last run is written before the next run
    assert c.execute("1", ctx="auto").status == "ok"
    d.stopped_by_test = True
    os.killpg(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    d = start("a")
    c = d.client()
    r = c.execute(CHECK_CODE[:-1] + ", y)", ctx="auto")
    assert r.status == "ok" and r.text == CHECK_TEXT[:-1] + ", 43)", r.events
    acc = r.of("accepted")[0]
    assert acc["previous_death"] == "daemon restarted" and acc["restored_from"] == "auto/auto"
    r = c.execute("'z' in globals()", ctx="plain")
    assert r.text == "False" and "restored_from" not in r.of("accepted")[0]
    _finish(d)


def _export_key(*states, key=b"k" * 32):
    for st in states:
        st.mkdir(exist_ok=True)
        (st / "export.key").write_bytes(key)
        os.chmod(st / "export.key", 0o600)


def test_move_between_two_daemons(tmp_path, start):
    """Snapshot on A, ctx.snapshot_export, copy the file into B's imports,
    ctx.snapshot_import, ctx.create from_snapshot on B; B's side through
    the Python client (ctxd.Client), and the same for a local context's
    snapshot through the CLI (ctx snapshot-export / snapshot-import). The
    writer's tier survives the move."""
    import json
    import subprocess
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
    import ctxd
    from conftest import CTXD_BIN
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(CTXD_BIN), "..",
                                                          "tools", "ctx"))

    def cli(d, *args):
        r = subprocess.run([ctx_bin, "--json", *args], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, CTXD_ENDPOINT=d.endpoint))
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    _export_key(tmp_path / "a-state", tmp_path / "b-state")
    a = start("a")
    b = start("b")
    ca, cb = a.client(), b.client()
    ca.ok("ctx.create", name="exp")
    assert ca.execute(STATE_CODE, ctx="exp").status == "ok"
    ca.ok("ctx.snapshot", ctx="exp", name="m")
    ca.ok("ctx.create", name="box", tier="local")
    assert ca.execute("y = 5", ctx="box").status == "ok"
    ca.ok("ctx.snapshot", ctx="box", name="s")
    ex = ca.ok("ctx.snapshot_export", snapshot="exp/m")
    assert ex["tier"] == "unsafe" and ex["path"] == str(tmp_path / "a-state/exports/exp/m"), ex
    dst = tmp_path / "b-state" / "imports" / "exp"
    dst.mkdir(parents=True)
    shutil.copy(ex["path"], dst / "m")  # plain cp: the mark is inside the file
    with ctxd.Client(b.endpoint) as pc:
        assert pc.import_snapshot("exp/m")["snapshot"]["tier"] == "unsafe"
        assert [s["id"] for s in pc.list_snapshots()] == ["exp/m"]
        info = pc.create_context("moved", from_snapshot="exp/m")
        assert info.name == "moved"
        assert pc.execute(CHECK_CODE, ctx="moved").result == CHECK_TEXT
        assert pc.snapshot_context("moved", "again")["snapshot"]["id"] == "moved/again"
        pc.execute("x = 0", ctx="moved")
        assert pc.restore_context("moved", "again")["restored"] >= 5
        assert pc.execute(CHECK_CODE, ctx="moved").result == CHECK_TEXT
        pc.delete_snapshot("moved/again")
        with pytest.raises(ctxd.RefusedError):
            pc.restore_context("moved", "again")
        # a local context's snapshot stays local on B
        ex = cli(a, "snapshot-export", "box/s")
        assert ex["tier"] == "local", ex
        (tmp_path / "b-state" / "imports" / "box").mkdir()
        shutil.copy(ex["path"], tmp_path / "b-state" / "imports" / "box" / "s")
        im = cli(b, "snapshot-import", "box/s")
        assert im["tier"] == "local" and im["snapshot"]["id"] == "box/s", im
    cb.ok("ctx.create", name="plain")
    assert "local" in cb.err("ctx.restore", "forbidden", ctx="plain", snapshot="box/s")["message"]
    cb.ok("ctx.create", name="box2", tier="local", from_snapshot="box/s")
    assert cb.execute("y", ctx="box2").text == "5"
    _finish(a)
    _finish(b)


def test_import_refuses_tampered_or_foreign_export(tmp_path, start):
    """An export changed after it was made, one under another key, a
    snapshot file copied without an export, and a forged tag are refused
    by ctx.snapshot_import; without export.key, export is refused."""
    _export_key(tmp_path / "a-state")
    _export_key(tmp_path / "b-state")
    _export_key(tmp_path / "c-state", key=b"another key, 32 bytes long......")
    a = start("a")
    b = start("b")
    cz = start("c")
    ca, cb = a.client(), b.client()
    ca.ok("ctx.create", name="box", tier="sandbox")
    assert ca.execute("y = 5", ctx="box").status == "ok"
    ca.ok("ctx.snapshot", ctx="box", name="s")
    path = ca.ok("ctx.snapshot_export", snapshot="box/s")["path"]
    blob = open(path, "rb").read()
    imports = tmp_path / "b-state" / "imports" / "box"
    imports.mkdir(parents=True)
    # the tier byte of the tag (sandbox = 3) made unsafe (1)
    tag = len(blob) - 128
    forged = blob[:tag + 16] + bytes([1]) + blob[tag + 17:]
    flipped = blob[:60] + bytes([blob[60] ^ 1]) + blob[61:]
    raw = open(tmp_path / "a-state/snapshots/box/s", "rb").read()
    cz.client().ok("ctx.create", name="box", tier="sandbox")
    cz.client().ok("ctx.snapshot", ctx="box", name="s")
    other = cz.client().ok("ctx.snapshot_export", snapshot="box/s")["path"]
    for name, content in {"forged": forged, "flipped": flipped, "raw": raw,
                          "other": open(other, "rb").read()}.items():
        (imports / name).write_bytes(content)
        e = cb.err("ctx.snapshot_import", "bad_snapshot", snapshot="box/" + name)
        assert "export.key" in e["message"], e
    assert cb.ok("ctx.snapshots")["snapshots"] == []
    (imports / "good").write_bytes(blob)
    assert cb.ok("ctx.snapshot_import", snapshot="box/good")["snapshot"]["tier"] == "sandbox"
    cb.ok("ctx.create", name="plain")
    cb.err("ctx.restore", "forbidden", ctx="plain", snapshot="box/good")
    os.unlink(tmp_path / "b-state" / "export.key")
    cb.err("ctx.snapshot_export", "no_key", snapshot="box/good")
    _finish(a)
    _finish(b)
    _finish(cz)


def test_local_tier_snapshot_restore(tmp_path, start):
    """A local context snapshots and restores inside its confinement (the
    file comes as a descriptor; the worker cannot reach the state
    directory)."""
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="box", tier="local", policy={"network_access": False})
    assert c.execute(STATE_CODE, ctx="box").status == "ok"
    c.ok("ctx.snapshot", ctx="box", name="s")
    assert c.execute("x = 0", ctx="box").status == "ok"
    c.ok("ctx.restore", ctx="box", snapshot="s")
    assert c.execute(CHECK_CODE, ctx="box").text == CHECK_TEXT
    c.ok("ctx.create", name="box2", tier="local", from_snapshot="box/s")
    assert c.execute(CHECK_CODE, ctx="box2").text == CHECK_TEXT
    _finish(d)


def test_confined_snapshot_never_restored_unconfined(tmp_path, start):
    """Restoring runs the file's code (unpickling), and a confined worker
    wrote it: a local context's snapshot goes into local contexts only,
    never into an unsafe one (by a restore or a create), whatever the file
    says; the supervisor's mark survives the writer holding the file open."""
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="box", tier="local", policy={"network_access": False})
    # A thread of the cell takes a copy of the snapshot's descriptor while
    # it is written, then tries to drop or rewrite the mark.
    assert c.execute("""
import os, threading, time
kept, stop = [], []
def grab():
    while not stop and not kept:
        for fd in os.listdir("/proc/self/fd"):
            try:
                if "/snapshots/" in os.readlink(f"/proc/self/fd/{fd}"):
                    kept.append(os.dup(int(fd)))
                    break
            except OSError:
                pass
x = 7
pad = bytes(64 << 20)
t = threading.Thread(target=grab, daemon=True)
t.start()
""", ctx="box").status == "ok"
    c.ok("ctx.snapshot", ctx="box", name="s")
    r = c.execute("""
stop.append(1)
t.join()
del t, pad
tries = []
for fd in kept:
    for attempt in (lambda: os.removexattr(fd, "trusted.ctxd.writer_tier"),
                    lambda: os.setxattr(fd, "trusted.ctxd.writer_tier", b"unsafe")):
        try:
            attempt()
            tries.append("done")
        except OSError as e:
            tries.append(e.errno)
(len(kept), "done" in tries)
""", ctx="box")
    # The worker writes through a pipe the supervisor copies: there is no
    # descriptor of the file to find.
    assert r.status == "ok" and r.text == "(0, False)", r
    c.ok("ctx.create", name="plain")
    assert c.execute("x = 1", ctx="plain").status == "ok"
    e = c.err("ctx.restore", "forbidden", ctx="plain", snapshot="box/s")
    assert "local" in e["message"], e
    assert c.execute("x", ctx="plain").text == "1"  # unharmed
    c.err("ctx.create", "forbidden", name="plain2", from_snapshot="box/s")
    names = [x["name"] for x in c.ok("ctx.list")["contexts"]]
    assert "plain2" not in names, names
    c.ok("ctx.create", name="box3", tier="local", from_snapshot="box/s")
    assert c.execute("x", ctx="box3").text == "7"
    _finish(d)


def test_interval_autosnapshot_and_cli(tmp_path, start):
    """autosnapshot every N seconds: a run's state is saved once the
    interval has passed (not at once), and comes back after a restart; the
    ctx command's snapshot, snapshots, restore and snapshot-rm."""
    import subprocess
    from conftest import wait_until
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="iv", autosnapshot=1)
    assert c.execute("x = 1", ctx="iv").status == "ok"  # the first one: at once
    wait_until(lambda: [s["id"] for s in c.ok("ctx.snapshots", ctx="iv")["snapshots"]]
               == ["iv/auto"])
    first = c.ok("ctx.snapshots", ctx="iv")["snapshots"][0]["created"]
    assert c.execute("y = 2", ctx="iv").status == "ok"  # due a second after the first
    wait_until(lambda: c.ok("ctx.snapshots", ctx="iv")["snapshots"][0]["created"] > first)
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(
        os.environ.get("CTXD_BIN", "")), "..", "tools", "ctx"))

    def ctx(*args):
        p = subprocess.run([ctx_bin, "--endpoint", d.endpoint, *args], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        return p.stdout

    # the CLI, on a context of its own (iv's autosnapshot may fire meanwhile)
    c.ok("ctx.create", name="cli")
    assert c.execute("x = 1\ny = 2", ctx="cli").status == "ok"
    assert ctx("snapshot", "cli", "mine").startswith("cli/mine (")
    assert sorted(line.split()[0] for line in ctx("snapshots").splitlines()) == [
        "cli/mine", "iv/auto"]
    assert c.execute("del x", ctx="cli").status == "ok"
    assert ctx("restore", "cli", "mine") == "cli: 2 globals restored from mine\n"
    assert c.execute("x, y", ctx="cli").text == "(1, 2)"
    ctx("snapshot-rm", "cli/mine")
    assert ctx("snapshots", "cli") == ""
    d.stopped_by_test = True
    os.killpg(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    d = start("a")
    c = d.client()
    r = c.execute("x, y", ctx="iv")
    assert r.text == "(1, 2)" and r.of("accepted")[0]["restored_from"] == "iv/auto", r.events


def test_unpicklable_global_left_out(tmp_path, start):
    """A global whose pickling fails is left out and listed, the stream is
    written again without it (the worker takes the file back through the
    pipe), and the rest restores; a file changed in place after it was
    written is no longer this daemon's (its tag fails)."""
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="exp")
    assert c.execute("""
class Bad:
    def __reduce__(self):
        raise TypeError("not this one")
import numpy as np
x = 5
bad = Bad()
arr = np.arange(100000)
""", ctx="exp").status == "ok"
    r = c.ok("ctx.snapshot", ctx="exp", name="s")
    assert [u["name"] for u in r["unsaved"]] == ["bad"], r
    path = tmp_path / "a-state" / "snapshots" / "exp" / "s"
    assert r["snapshot"]["size"] == os.stat(path).st_size
    assert c.execute("x = 0; del arr", ctx="exp").status == "ok"
    c.ok("ctx.restore", ctx="exp", snapshot="s")
    assert c.execute("(x, int(arr.sum()), 'bad' in globals())", ctx="exp").text == \
        "(5, 4999950000, False)"
    with open(path, "r+b") as f:  # in place: the same inode
        f.seek(30)
        b = f.read(1)
        f.seek(30)
        f.write(bytes([b[0] ^ 1]))
    assert "no writer's mark" in c.err("ctx.restore", "forbidden", ctx="exp",
                                       snapshot="s")["message"]
    _finish(d)


def test_large_snapshot_checked_after_restart(tmp_path, start):
    """A snapshot past 16 MB, restored after a daemon restart: its tag is
    checked by a thread while the daemon answers other requests. The mark
    is in the file, so a plain copy keeps it; a copy with one byte changed
    has none and goes only into a sandbox context."""
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="exp")
    assert c.execute("import hashlib, os\nbig = os.urandom(24 << 20)\n"
                     "h = hashlib.sha256(big).hexdigest()", ctx="exp").status == "ok"
    c.ok("ctx.snapshot", ctx="exp", name="s")
    d.stopped_by_test = True
    _finish(d)
    snapdir = tmp_path / "a-state" / "snapshots" / "exp"
    shutil.copy(snapdir / "s", snapdir / "copy")
    blob = bytearray((snapdir / "s").read_bytes())
    blob[len(blob) // 2] ^= 1  # inside `big`
    (snapdir / "changed").write_bytes(blob)
    d = start("a")
    c = d.client()
    c.ok("ctx.create", name="u")
    c.ok("ctx.restore", ctx="u", snapshot="exp/s")
    assert c.execute("hashlib.sha256(big).hexdigest() == h and len(big)",
                     ctx="u").text == str(24 << 20)
    assert c.ok("hello")["t"] == "ok"
    c.ok("ctx.restore", ctx="u", snapshot="exp/copy")
    e = c.err("ctx.restore", "forbidden", ctx="u", snapshot="exp/changed")
    assert "no writer's mark" in e["message"], e
    c.ok("ctx.create", name="sb", tier="sandbox")  # it reads it, and finds the change
    assert "checksum" in c.err("ctx.restore", "bad_snapshot", ctx="sb",
                               snapshot="exp/changed")["message"]
    _finish(d)
