"""State left after failures: key files written whole or not at all (a full
disk never leaves an empty server.key that blocks later starts), an empty
or corrupt key handled clearly, the sandbox directories of a killed daemon
removed by the next one (never following symbolic links, never those of a
live daemon), request-log lines lost on a full disk counted and said, and a
file.put that hits a full disk rolled back with a reply saying so.

A full disk is a small tmpfs mounted by the test (the suite runs as root)."""

import os
import signal
import subprocess
import time

import pytest

from conftest import CTXD_BIN, RECV_TIMEOUT, wait_until, free_port


@pytest.fixture
def small_fs(tmp_path):
    """A 256 KiB tmpfs; fill(), then free() what fill() took."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount a tmpfs: run them as root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mnt)],
                   check=True)

    class FS:
        path = mnt
        filler = mnt / "filler"

        def fill(self, leave=0):
            """Fills the file system, then frees `leave` bytes."""
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                while os.write(fd, b"\0" * 4096) > 0:
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
            if leave:
                os.truncate(self.filler, max(0, os.path.getsize(self.filler) - leave))

        def free(self):
            self.filler.unlink()

    yield FS()
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _start_tcp(state, port):
    return subprocess.Popen([CTXD_BIN, "--listen", f"tcp://127.0.0.1:{port}", "--state-dir",
                             str(state)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    return err.decode(errors="replace")


def test_full_disk_at_first_start_leaves_no_empty_key(small_fs):
    state = small_fs.path / "state"
    state.mkdir(mode=0o700)
    small_fs.fill()
    proc = _start_tcp(state, free_port())
    rc = proc.wait(RECV_TIMEOUT)
    err = _stop(proc)
    assert rc != 0 and "server.key" in err, err
    assert not (state / "server.key").exists(), os.listdir(state)
    assert not [n for n in os.listdir(state) if ".tmp." in n], os.listdir(state)
    # room again: the next start makes the key pair and serves
    small_fs.free()
    proc = _start_tcp(state, free_port())
    try:
        assert wait_until(lambda: (state / "server.pub").exists(), RECV_TIMEOUT)
        assert proc.poll() is None
    finally:
        _stop(proc)
    assert len((state / "server.pub").read_text().strip()) == 40


def test_empty_key_is_regenerated_without_pub_refused_with_pub(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "server.key").write_text("")  # as an older daemon left it
    proc = _start_tcp(state, free_port())
    try:
        assert wait_until(lambda: (state / "server.pub").exists(), RECV_TIMEOUT)
        assert proc.poll() is None
    finally:
        err = _stop(proc)
    assert "making a new key pair" in err, err
    assert len((state / "server.key").read_text().split("\n")[1]) == 40
    # a corrupt key while server.pub exists: clients trust that pub, so the
    # daemon refuses to start, saying what to do
    (state / "server.key").write_text("# ctxd server secret key\nnot a key\n")
    proc = _start_tcp(state, free_port())
    rc = proc.wait(RECV_TIMEOUT)
    err = _stop(proc)
    assert rc != 0 and "no valid key" in err and "remove both" in err, err


def test_sandbox_dirs_of_a_killed_daemon_are_removed(make_daemon, tmp_path):
    state = tmp_path / "state"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    a = make_daemon("--state-dir", str(state))
    ca = a.client()
    ca.ok("ctx.create", name="s", tier="sandbox")
    cwd = ca.info("s")["cwd"]
    assert os.path.isdir(cwd)
    os.symlink(outside, os.path.join(cwd, "link-dir"))
    os.symlink(outside / "keep.txt", os.path.join(cwd, "link-file"))
    # a second daemon on the same state directory leaves a live one's be
    b = make_daemon("--state-dir", str(state))
    cb = b.client()
    cb.ok("ctx.create", name="t", tier="sandbox")
    assert os.path.isdir(cwd)
    # killed: nothing of a's is removed by a itself
    a.stopped_by_test = True
    os.killpg(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    assert os.path.isdir(cwd)
    c = make_daemon("--state-dir", str(state))
    assert not os.path.exists(cwd)
    assert not os.path.exists(os.path.dirname(cwd))
    assert (outside / "keep.txt").read_text() == "keep"  # links were not followed
    assert os.path.isdir(cb.info("t")["cwd"])  # b is alive: its directory stays
    assert c.client().execute("1").status == "ok"


def test_request_log_on_a_full_disk_counts_lost_lines(make_daemon, small_fs):
    log = small_fs.path / "requests.log"
    d = make_daemon("--log", str(log))
    c = d.client()
    assert c.execute("1").status == "ok"
    assert wait_until(lambda: log.exists() and log.stat().st_size > 0, RECV_TIMEOUT)
    assert c.ok("stats")["counters"]["log_lines_lost"] == 0
    small_fs.fill()
    # more lines than the log file's last page still holds
    for _ in range(200):
        c.ok("ctx.list")
    assert c.execute("2").status == "ok"
    lost = c.ok("stats")["counters"]["log_lines_lost"]
    assert lost > 100, lost
    said = d.log_text()
    assert said.count("the request log") == 1 and "log_lines_lost" in said, said
    small_fs.free()
    for _ in range(3):
        c.ok("ctx.list")
    c.ok("stats")
    def logged_again():
        lines = log.read_text().splitlines()
        return len(lines) > 2 and "type=stats" in lines[-1] and "type=ctx.list" in lines[-2]

    assert wait_until(logged_again, RECV_TIMEOUT), log.read_text()[-500:]


def test_file_put_on_a_full_disk_is_rolled_back(make_daemon, small_fs):
    d = make_daemon()
    c = d.client()
    work = small_fs.path / "work"
    work.mkdir()
    c.ok("ctx.create", name="f", cwd=str(work))
    c.ok("file.put", ctx="f", path="data.bin", data=b"a" * 1000)
    small_fs.fill(leave=8192)
    e = c.err("file.put", "io", ctx="f", path="data.bin", data=b"b" * (64 * 1024), offset=1000)
    assert "rolled back" in e["message"] and "of the chunk's 65536 bytes" in e["message"], e
    assert (work / "data.bin").stat().st_size == 1000
    assert (work / "data.bin").read_bytes() == b"a" * 1000
    small_fs.free()
    assert c.ok("file.put", ctx="f", path="data.bin", data=b"b" * 10, offset=1000)["size"] == 1010


def test_contexts_come_back_after_a_restart(tmp_path, zctx):
    """ctx.create'd contexts (and default) survive a daemon restart (SIGKILL
    or SIGTERM) as new incarnations whose first accepted says the state was
    lost; a deleted one does not come back."""
    from conftest import Daemon, _finish
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
    c = d.client()
    c.ok("ctx.create", name="exp-a", cwd=str(work), env={"A": "1"})
    c.ok("ctx.create", name="gone")
    c.ok("ctx.create", name="box", tier="local", policy={"network_access": False})
    assert c.execute("x = 1", ctx="exp-a").status == "ok"
    c.ok("ctx.restart", ctx="exp-a")
    assert c.info("exp-a")["incarnation"] == 2
    assert c.execute("y = 2").status == "ok"  # default
    c.ok("ctx.delete", ctx="gone")
    for how in (signal.SIGKILL, signal.SIGTERM):
        names = sorted(i["name"] for i in c.ok("ctx.list")["contexts"])
        incs = {i["name"]: i["incarnation"] for i in c.ok("ctx.list")["contexts"]}
        if how == signal.SIGKILL:
            d.stopped_by_test = True
            os.killpg(d.proc.pid, how)
            d.proc.wait(10)
        else:
            _finish(d)
        d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
        c = d.client()
        infos = {i["name"]: i for i in c.ok("ctx.list")["contexts"]}
        assert sorted(infos) == names == ["box", "default", "exp-a"], infos
        a = infos["exp-a"]
        assert a["cwd"] == str(work) and a["incarnation"] == incs["exp-a"] + 1, a
        assert a["last_death"] == "daemon restarted", a
        assert infos["box"]["tier"] == "local" and infos["box"]["policy"] == {
            "network_access": False, "max_processes": 512}, infos["box"]  # 512: local's default
        r = c.execute("import os; os.environ['A'], 'x' in globals()", ctx="exp-a")
        assert r.status == "ok" and r.text == "('1', False)", r.terminal
        acc = r.of("accepted")[0]
        assert acc["previous_death"] == "daemon restarted", acc
        assert acc["incarnation"] == incs["exp-a"] + 1, acc
        r = c.execute("'y' in globals()")
        assert r.text == "False" and r.of("accepted")[0]["previous_death"] == "daemon restarted"
        # the cause is said once: the next run is an ordinary one
        assert "previous_death" not in c.execute("1", ctx="exp-a").of("accepted")[0]
    _finish(d)


def test_a_reply_means_the_change_is_saved(tmp_path, zctx):
    """A ctx.delete's or ctx.create's reply means the change is in the state
    directory: a daemon killed the moment the reply arrived, while it still
    has hundreds of requests to serve in the same turn, comes back with
    exactly what the replies said (the table used to be saved only at the
    end of the supervisor's turn, after those requests). The daemon is
    stopped while the requests are queued (the change, then stats requests
    of other clients), so that one turn reads them all; the create takes a
    ready spare worker, so that it replies at once."""
    from conftest import Daemon, _finish, children_of
    state = tmp_path / "state"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = ("--state-dir", str(state), "--spare-workers", "1")
    daemons = []  # their sockets closed whatever happens: zctx.term() waits for them

    def start():
        daemons.append(Daemon(run_dir, zctx).start(args))
        return daemons[-1]

    try:
        d = start()
        c = d.client()
        c.ok("ctx.create", name="a")
        want = {"a"}
        # each step a chance to lose the race (most lose it without the fix)
        for step, name in (("delete", "a"), ("create", "b"), ("delete", "b"), ("create", "c"),
                           ("delete", "c"), ("create", "d")):
            assert wait_until(lambda: children_of(d, b"(spare)"), timeout=60)
            c.ok("stats")
            others = [d.client() for _ in range(12)]
            for o in others:
                o.ok("stats")  # connected
            os.kill(d.proc.pid, signal.SIGSTOP)
            rid = (c.send("ctx.delete", ctx=name) if step == "delete" else
                   c.send("ctx.create", name=name))
            for o in others:  # each within its own queue's bound (64 replies)
                for _ in range(60):
                    o.send("stats")
            time.sleep(0.3)  # all of it in the daemon's sockets
            os.kill(d.proc.pid, signal.SIGCONT)
            assert c.next_for(rid)["t"] == "ok"
            d.stopped_by_test = True
            os.killpg(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            d = start()
            c = d.client()
            names = sorted(i["name"] for i in c.ok("ctx.list")["contexts"])
            if step == "delete":
                want.discard(name)
            else:
                want.add(name)
            assert names == sorted(want), (step, name, names)
        _finish(d)
    finally:
        for dd in daemons:
            for cl in dd.clients:
                cl.sock.close(0)
            if dd.alive():
                dd.proc.kill()
                dd.proc.wait()


def test_table_journal_replayed_and_a_torn_record_ignored(tmp_path, zctx):
    """After the first save, each change is appended to a journal beside the
    table (issue 19: a create costs the same at any count); a restart after
    SIGKILL replays it in order, and a torn last record (a crash mid-write)
    loses only itself."""
    from conftest import Daemon, _finish
    state = tmp_path / "state"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
    c = d.client()
    c.ok("ctx.create", name="first")
    assert c.execute("1", ctx="first").status == "ok"  # the table is saved by now
    for i in range(20):
        c.ok("ctx.create", name=f"j{i}")
    for i in range(0, 20, 2):
        c.ok("ctx.delete", ctx=f"j{i}")
    c.ok("ctx.create", name="j0")  # deleted, then made again: comes back
    c.ok("ctx.restart", ctx="j1")
    incs = {i["name"]: i["incarnation"] for i in c.ok("ctx.list")["contexts"]}
    logs = list(state.glob("contexts-*.msgpack.log"))
    assert len(logs) == 1 and logs[0].stat().st_size > 0, list(state.iterdir())
    d.stopped_by_test = True
    os.killpg(d.proc.pid, signal.SIGKILL)
    d.proc.wait(10)
    with open(logs[0], "ab") as f:  # a record cut short by the crash
        f.write(b"\x00\x00\x01\x00\x81\xa3put")
    d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
    c = d.client()
    got = {i["name"]: i["incarnation"] for i in c.ok("ctx.list")["contexts"]}
    assert sorted(got) == sorted(incs), (sorted(got), sorted(incs))
    assert all(got[n] == incs[n] + 1 for n in incs), (got, incs)
    assert c.execute("2", ctx="j19").text == "2"
    _finish(d)
