"""Who a worker is and where it works (issue #12): uids of their own for
confined workers under a root daemon (--worker-uids), a cgroup per worker in
every tier, private directories removed without blocking the daemon, and
paths a client names opened without following links."""

import os
import random
import signal
import stat
import subprocess

import pytest

from conftest import CTXD_BIN, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uids of their own need a root daemon")


def free_range():
    """A FIRST for an explicit --worker-uids of at most 1000 uids that no
    other test run takes: high above the blocks daemons claim by default
    (524288 + 65536 k, lowest first), drawn at random (a range a retained
    earlier run's state directory still owns would be refused)."""
    return 1_000_000_000 + random.randrange(1_000_000) * 1000


def status_ids(pid):
    ids = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("Uid", "Gid", "Groups"):
            ids[k] = [int(x) for x in v.split()]
    return ids


def v2_cgroup(pid):
    for line in open(f"/proc/{pid}/cgroup"):
        if line.startswith("0::"):
            return line[3:].strip()
    return None


def test_hello_says_who_workers_are(daemon):
    ident = daemon.hello["identity"]
    assert ident["daemon_root"] is True
    first, count = ident["worker_uids"]  # a block of its own, claimed from the registry
    assert count == 65536 and first >= 524288 and (first - 524288) % 65536 == 0, ident
    assert ident["worker_uids_from"] == "claimed"
    assert ident["uid_registry"] == "/var/lib/ctxd/uid-ranges"
    assert ident["worker_uids_in_use"] == 0


def test_confined_workers_have_uids_of_their_own(make_daemon):
    first = free_range()
    d = make_daemon("--worker-uids", f"{first}:100")
    assert d.hello["identity"]["worker_uids"] == [first, 100]
    assert d.hello["identity"]["worker_uids_from"] == "option"
    c = d.client()
    seen = set()
    for name, tier in (("l1", "local"), ("l2", "local"), ("s1", "sandbox")):
        c.ok("ctx.create", name=name, tier=tier)
        ids = status_ids(c.info(name)["pid"])
        uid = ids["Uid"][0]
        assert first < uid < first + 100 and set(ids["Uid"]) == {uid}, ids
        assert set(ids["Gid"]) == {uid}, ids
        assert ids["Groups"] == ([first] if tier == "local" else []), ids
        assert uid not in seen
        seen.add(uid)
        cwd = c.info(name)["cwd"]
        st = os.stat(cwd)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (uid, uid, 0o700)
    c.ok("ctx.create", name="u", tier="unsafe")
    assert status_ids(c.info("u")["pid"])["Uid"][0] == 0  # unsafe: the daemon's, by definition
    assert c.request("hello")["identity"]["worker_uids_in_use"] == 3
    # A fork copy is the same interpreter: same uid, same directory.
    c.ok("ctx.fork", ctx="l1", name="l1copy")
    assert status_ids(c.info("l1copy")["pid"])["Uid"] == status_ids(c.info("l1")["pid"])["Uid"]
    for name in ("l1", "l2", "s1", "l1copy"):
        c.ok("ctx.delete", ctx=name)
    assert c.request("hello")["identity"]["worker_uids_in_use"] == 0


def test_worker_uid_range_runs_out(make_daemon):
    d = make_daemon("--worker-uids", f"{free_range()}:3")
    c = d.client()
    c.ok("ctx.create", name="a", tier="local")
    c.ok("ctx.create", name="b", tier="sandbox")
    e = c.err("ctx.create", "limit", name="x", tier="local")
    assert "--worker-uids" in e["message"]
    c.ok("ctx.create", name="plain")  # unsafe needs no uid
    c.ok("ctx.delete", ctx="a")
    c.ok("ctx.create", name="x", tier="local")


@pytest.mark.parametrize("value", ["12", "0:10", "700000:1", "700000:x", "4294967000:1000"])
def test_bad_worker_uids_refused(value, tmp_path):
    r = subprocess.run([CTXD_BIN, "--worker-uids", value, "--listen", f"ipc://{tmp_path}/s"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--worker-uids" in r.stderr, r


def test_every_worker_in_a_cgroup_of_its_own(daemon):
    c = daemon.client()
    groups = set()
    for name, tier in (("u1", "unsafe"), ("u2", "unsafe"), ("l", "local"), ("s", "sandbox")):
        c.ok("ctx.create", name=name, tier=tier)
        g = v2_cgroup(c.info(name)["pid"])
        assert g and g.startswith(f"/ctxd/{daemon.proc.pid}x") and "/w" in g, g
        groups.add(g)
    assert len(groups) == 4
    c.ok("ctx.fork", ctx="u1", name="u1copy")
    assert v2_cgroup(c.info("u1copy")["pid"]) not in groups
    pid = c.info("u1")["pid"]
    g = "/sys/fs/cgroup/unified" + v2_cgroup(pid)
    c.ok("ctx.delete", ctx="u1")
    wait_until(lambda: not os.path.exists(g))  # killed, then removed once empty


def _reaper_of(p, pid):
    """Whether /proc/p is the reaper (ctxd-reaper) of the daemon pid."""
    try:
        with open(f"/proc/{p}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return "(ctxd-reaper)" in stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid


def test_daemon_in_another_pid_namespace_spares_live_workers(make_daemon, tmp_path):
    """A daemon that starts as PID 1 of a new pid namespace (a container
    sharing the host's cgroup tree) sees none of the host's pids: it must
    still know the running daemon's tree is alive (its lock), and leave its
    workers be, while a SIGKILLed daemon's tree is removed."""
    live = make_daemon()
    c = live.client()
    c.ok("ctx.create", name="a")
    c.execute("x = 41", ctx="a")
    pid = c.info("a")["pid"]
    gone = make_daemon()
    gc = gone.client()
    gc.ok("ctx.create", name="g")
    gone_tree = "/sys/fs/cgroup/unified" + v2_cgroup(gc.info("g")["pid"]).rsplit("/", 1)[0]
    gone.stopped_by_test = True
    # Its reaper, which would remove the tree at once (sup_reaper.c), killed
    # while the supervisor is stopped (and so cannot start another): the
    # tree is left as by a daemon whose reaper could not act.
    reapers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _reaper_of(p, gone.proc.pid)]
    assert reapers, "the daemon has no reaper"
    os.kill(gone.proc.pid, signal.SIGSTOP)
    for p in reapers:
        os.kill(p, signal.SIGKILL)
    os.kill(gone.proc.pid, signal.SIGKILL)
    gone.proc.wait(10)
    assert os.path.isdir(gone_tree)
    sub = tmp_path / "pidns"
    sub.mkdir()
    ep = f"ipc://{sub}/s.sock"
    log = open(sub / "log", "wb")
    other = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", CTXD_BIN,
                              "--listen", ep, "--state-dir", str(sub / "state")],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        assert wait_until(lambda: os.path.exists(f"{sub}/s.sock")), (sub / "log").read_text()
        assert wait_until(lambda: not os.path.isdir(gone_tree)), "the killed daemon's tree stays"
        assert c.execute("x + 1", ctx="a").text == "42"
        assert c.info("a")["pid"] == pid
    finally:
        os.killpg(other.pid, 15)
        other.wait(10)
        log.close()


def test_private_directory_removed_without_blocking(daemon, tmp_path):
    """A context leaves 60,000 files; its deletion answers at once (the
    directory is moved aside) and the daemon serves other contexts while
    the files are removed, a bounded number per loop turn."""
    c = daemon.client()
    c.ok("ctx.create", name="big")
    c.ok("ctx.create", name="other")
    cwd = c.info("big")["cwd"]
    r = c.execute("import os\nfor i in range(300):\n    os.mkdir('d%d' % i)\n"
                  "    for k in range(200):\n        open('d%d/f%d' % (i, k), 'w').close()\n"
                  "os.symlink('/etc', 'etc-link')", ctx="big", timeout_s=120)
    assert r.status == "ok", r
    trash = os.path.join(os.path.dirname(os.path.dirname(cwd)), ".trash")
    c.ok("ctx.delete", ctx="big")
    assert not os.path.exists(cwd)
    assert c.execute("1 + 1", ctx="other").text == "2"
    # the other context was served while the removal was still under way
    assert os.listdir(trash), "the trash was already empty: nothing shows the removal is spread"
    wait_until(lambda: not os.listdir(trash), timeout=120)
    assert os.path.exists("/etc/passwd")  # the link was removed, never followed


def test_symlinked_cwd_and_roots_refused(daemon, tmp_path):
    c = daemon.client()
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    os.symlink("/", tmp_path / "root")
    e = c.err("ctx.create", "bad_cwd", name="x", cwd=str(tmp_path / "link"))
    assert "symbolic link" in e["message"] and str(tmp_path / "link") in e["message"]
    e = c.err("ctx.create", "bad_cwd", name="x", tier="local", cwd=str(tmp_path / "link" / "."))
    for field in ("filesystem_read_roots", "filesystem_write_roots"):
        e = c.err("ctx.create", "bad_field", name="x", tier="local",
                  policy={field: [str(tmp_path / "root" / "etc")]})
        assert field in e["message"] and str(tmp_path / "root") in e["message"], e
    c.ok("ctx.create", name="x", cwd=str(real))
    assert c.info("x")["cwd"] == str(real)


def test_state_directory_modes(make_daemon, tmp_path):
    d = make_daemon("--state-dir", str(tmp_path / "state"))
    c = d.client()
    c.ok("ctx.create", name="a", tier="local")
    state = tmp_path / "state"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o711
    assert stat.S_IMODE(os.stat(state / "contexts").st_mode) == 0o711
    assert stat.S_IMODE(os.stat(state / "contexts" / d.hello["instance"]).st_mode) == 0o711
    sock = d.endpoint[len("ipc://"):]
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600


# ---- a uid is an identity, not a counter -----------------------------------
# The allocator is saved in the state directory and the range is claimed
# host-wide (sup_uidreg.c): two daemons of a host, or one daemon restarted
# over and over, never give two contexts the same uid while anything the
# first left as it remains.

import reachable  # noqa: E402
from conftest import Daemon, _finish  # noqa: E402


def uid_of(c, name):
    return status_ids(c.info(name)["pid"])["Uid"][0]


def test_two_daemons_with_default_flags_get_disjoint_uids(make_daemon):
    a, b = make_daemon(), make_daemon()
    fa, na = a.hello["identity"]["worker_uids"]
    fb, nb = b.hello["identity"]["worker_uids"]
    assert fa + na <= fb or fb + nb <= fa, (fa, na, fb, nb)
    uids = []
    for d, (first, count) in ((a, (fa, na)), (b, (fb, nb))):
        c = d.client()
        for name, tier in (("l", "local"), ("s", "sandbox")):
            c.ok("ctx.create", name=name, tier=tier)
            uid = uid_of(c, name)
            assert first < uid < first + count, (uid, first, count)
            uids.append(uid)
    assert len(set(uids)) == 4, uids


def start_refused(tmp_path, *args):
    """Runs a ctxd that must refuse to start; its stderr."""
    p = subprocess.Popen([CTXD_BIN, "--listen", f"ipc://{tmp_path}/refused.sock",
                          "--state-dir", str(tmp_path / "refused-state"), *args],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)
        raise AssertionError(f"ctxd {' '.join(args)} started on a range that is taken")
    assert p.returncode == 1, (p.returncode, err)
    return err


def test_a_taken_range_given_explicitly_is_refused(make_daemon, tmp_path):
    a = make_daemon()
    first, count = a.hello["identity"]["worker_uids"]
    # the running daemon's range, or any overlap of it
    for value in (f"{first}:{count}", f"{first + count - 10}:100"):
        err = start_refused(tmp_path, "--worker-uids", value)
        assert "--worker-uids" in err and "running daemon" in err, err
        assert str(a.tmp.parent / (a.tmp.name + "-state")) in err, err
    # a stopped daemon's range stays its own while its state directory exists
    mine = free_range()
    (tmp_path / "b").mkdir()
    b = Daemon(tmp_path / "b", a.zctx).start(("--worker-uids", f"{mine}:10"))
    assert b.hello["identity"]["worker_uids"] == [mine, 10]
    _finish(b)
    err = start_refused(tmp_path, "--worker-uids", f"{mine + 5}:10")
    assert "stopped daemon" in err and "exists" in err, err


def host_file(path, uid, secret):
    """A 0600 file of uid, as anything that ran as it might leave."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secret.encode())
    os.close(fd)
    os.chown(path, uid, uid)


READ_ALL = """
got = []
for p in {paths!r}:
    try:
        got.append((p, open(p).read()))
    except OSError:
        pass
got
"""

LEAVE = """
import os
for p in {paths!r}:
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, {secret!r}.encode())
    os.close(fd)
"""


def leave_things(c, name, tag, shared, secret):
    """What a context leaves as its uid: 0600 files it writes itself (a
    shared write root; /dev/shm, where it is the host's) and, made on the
    host as its uid, files in /tmp and /var/tmp and a process of it."""
    uid = uid_of(c, name)
    own = [str(shared / f"{tag}.secret"), f"/dev/shm/{tag}.secret"]
    r = c.execute(LEAVE.format(paths=own, secret=secret), ctx=name)
    assert r.status == "ok", r.terminal
    left = [p for p in own if os.path.exists(p)]  # /dev/shm may be the context's own
    assert str(shared / f"{tag}.secret") in left
    for place in ("/tmp", "/var/tmp"):
        host_file(f"{place}/{tag}.secret", uid, secret)
        left.append(f"{place}/{tag}.secret")
    proc = subprocess.Popen(["sleep", "600"], user=uid, group=uid, start_new_session=True)
    return uid, left, proc


def test_a_restarted_daemon_never_reuses_a_uid_whose_things_remain(tmp_path, zctx):
    """Created, left files, deleted, daemon restarted (SIGTERM or SIGKILL),
    again: every new context's uid is one no earlier context had while what
    that one left remains, and it reads none of it."""
    run_dir, state = tmp_path / "run", tmp_path / "state"
    run_dir.mkdir()
    shared = reachable.writable(tmp_path / "shared")
    pol = {"local": {"filesystem_write_roots": [str(shared), "/dev/shm"]},
           "sandbox": {"filesystem_write_roots": [str(shared)]}}
    tag = f"ctxd-uidtest-{os.getpid()}-{random.randrange(1 << 30)}"
    left, procs, d = {}, [], None
    try:
        for i in range(6):
            d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
            c = d.client()
            tier = ("local", "sandbox")[i % 2]
            c.ok("ctx.create", name=f"c{i}", tier=tier, policy=pol[tier])
            uid = uid_of(c, f"c{i}")
            for other, paths in left.items():
                assert not (other == uid and any(os.path.exists(p) for p in paths)), \
                    f"uid {uid} handed out again while {paths} remain"
            everything = [p for paths in left.values() for p in paths]
            r = c.execute(READ_ALL.format(paths=everything), ctx=f"c{i}")
            assert r.status == "ok" and r.text == "[]", r.text
            u, paths, proc = leave_things(c, f"c{i}", f"{tag}-{i}", shared, f"secret {i}")
            left.setdefault(u, []).extend(paths)
            procs.append(proc)
            c.ok("ctx.delete", ctx=f"c{i}")
            if i % 3 == 2:
                d.stopped_by_test = True
                os.killpg(d.proc.pid, signal.SIGKILL)
                d.proc.wait(10)
            _finish(d)
            d = None
        # nothing was swept: no uid came round again
        assert len(left) == 6 and all(p.poll() is None for p in procs)
    finally:
        if d is not None:
            _finish(d)
        for p in procs:
            p.poll() is None and p.kill()
            p.wait(10)
        for paths in left.values():
            for p in paths:
                if os.path.exists(p) and not p.startswith(str(tmp_path)):
                    os.unlink(p)


def test_a_uid_comes_round_again_only_after_its_things_are_swept(tmp_path, zctx):
    """A range of 3 context uids, the daemon restarted after each context:
    the allocator wraps round every few contexts, and before a uid is handed
    out again every file it owns in /tmp, /var/tmp and /dev/shm and every
    process of it is gone (files in a write root an operator shares are the
    operator's: not swept)."""
    run_dir, state = tmp_path / "run", tmp_path / "state"
    run_dir.mkdir()
    shared = reachable.writable(tmp_path / "shared")
    first = free_range()
    tag = f"ctxd-uidtest-{os.getpid()}-{random.randrange(1 << 30)}"
    held, procs, d = {}, [], None
    try:
        for i in range(7):
            d = Daemon(run_dir, zctx).start(("--state-dir", str(state),
                                             "--worker-uids", f"{first}:4"))
            c = d.client()
            c.ok("ctx.create", name=f"c{i}", tier="local",
                 policy={"filesystem_write_roots": [str(shared), "/dev/shm"]})
            uid = uid_of(c, f"c{i}")
            assert first < uid < first + 4
            if uid in held:
                paths, proc = held.pop(uid)
                assert proc.poll() is not None, f"a process of uid {uid} outlived its reuse"
                remain = [p for p in paths if os.path.exists(p)]
                assert not remain, f"uid {uid} handed out again while {remain} remain"
            r = c.execute(READ_ALL.format(paths=[p for ps, _ in held.values() for p in ps]),
                          ctx=f"c{i}")
            assert r.status == "ok" and r.text == "[]", r.text
            u, paths, proc = leave_things(c, f"c{i}", f"{tag}-{i}", shared, f"s{i}")
            procs.append(proc)
            held[u] = ([p for p in paths if not p.startswith(str(shared))], proc)
            c.ok("ctx.delete", ctx=f"c{i}")
            _finish(d)
            d = None
        assert len(held) <= 3
    finally:
        if d is not None:
            _finish(d)
        for p in procs:
            p.poll() is None and p.kill()
            p.wait(10)
        for paths, _ in held.values():
            for p in paths:
                if os.path.exists(p):
                    os.unlink(p)


def test_a_range_whose_state_directory_is_gone_is_swept_and_reused(tmp_path, zctx):
    first = free_range()
    args = ("--worker-uids", f"{first}:10")
    a_run, b_run = tmp_path / "a", tmp_path / "b"
    a_run.mkdir()
    b_run.mkdir()
    a = Daemon(a_run, zctx).start(("--state-dir", str(tmp_path / "a-state"), *args))
    c = a.client()
    c.ok("ctx.create", name="x", tier="local")
    uid = uid_of(c, "x")
    secret = f"/var/tmp/ctxd-uidtest-{os.getpid()}-{random.randrange(1 << 30)}"
    host_file(secret, uid, "left")
    proc = subprocess.Popen(["sleep", "600"], user=uid, group=uid, start_new_session=True)
    b = None
    try:
        _finish(a)
        subprocess.run(["rm", "-rf", str(tmp_path / "a-state")], check=True)
        b = Daemon(b_run, zctx).start(("--state-dir", str(tmp_path / "b-state"), *args))
        assert b.hello["identity"]["worker_uids"] == [first, 10]
        assert not os.path.exists(secret), "the range changed hands with a file of its uid left"
        assert proc.wait(10) is not None
    finally:
        if b is not None:
            _finish(b)
        proc.poll() is None and proc.kill()
        if os.path.exists(secret):
            os.unlink(secret)


def test_a_context_that_comes_back_keeps_its_uid(tmp_path, zctx):
    """What a restored context left as its uid is its own: it gets the same
    uid back (b, not the first uid of the range), after SIGTERM and SIGKILL."""
    run_dir, state = tmp_path / "run", tmp_path / "state"
    run_dir.mkdir()
    d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
    try:
        c = d.client()
        c.ok("ctx.create", name="a", tier="local")
        c.ok("ctx.create", name="b", tier="local")
        c.ok("ctx.create", name="s", tier="sandbox")
        want = {n: uid_of(c, n) for n in ("b", "s")}
        c.ok("ctx.delete", ctx="a")
        for how in (signal.SIGTERM, signal.SIGKILL):
            if how == signal.SIGKILL:
                d.stopped_by_test = True
                os.killpg(d.proc.pid, how)
                d.proc.wait(10)
            _finish(d)
            d = Daemon(run_dir, zctx).start(("--state-dir", str(state)))
            c = d.client()
            for n in ("b", "s"):  # its worker has started (and so has become its uid)
                assert c.execute("1 + 1", ctx=n).text == "2"
            assert {n: uid_of(c, n) for n in ("b", "s")} == want
            c.ok("ctx.create", name="n", tier="local")  # a new one: a new uid
            assert uid_of(c, "n") not in want.values()
            c.ok("ctx.delete", ctx="n")
    finally:
        _finish(d)
