"""Who a worker is and where it works (issue #12): uids of their own for
confined workers under a root daemon (--worker-uids), a cgroup per worker in
every tier, private directories removed without blocking the daemon, and
paths a client names opened without following links."""

import os
import signal
import stat
import subprocess

import pytest

from conftest import CTXD_BIN, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uids of their own need a root daemon")


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
    assert ident["worker_uids"] == [524288, 65536]
    assert ident["worker_uids_in_use"] == 0


def test_confined_workers_have_uids_of_their_own(make_daemon):
    d = make_daemon("--worker-uids", "700000:100")
    c = d.client()
    seen = set()
    for name, tier in (("l1", "local"), ("l2", "local"), ("s1", "sandbox")):
        c.ok("ctx.create", name=name, tier=tier)
        ids = status_ids(c.info(name)["pid"])
        uid = ids["Uid"][0]
        assert 700000 < uid < 700100 and set(ids["Uid"]) == {uid}, ids
        assert set(ids["Gid"]) == {uid}, ids
        assert ids["Groups"] == ([700000] if tier == "local" else []), ids
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
    d = make_daemon("--worker-uids", "700000:3")
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
