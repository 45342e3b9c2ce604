"""What the systemd unit relies on (dist/ctxd.service): readiness through
$NOTIFY_SOCKET (Type=notify, sup_notify.c) and --socket-group (members of a
group may connect to the ipc socket, sup_sockperm.c)."""

import grp
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile

import pytest

from conftest import CTXD_BIN, Daemon, _finish, wait_until

CTX_BIN = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(CTXD_BIN), "..", "tools",
                                                      "ctx"))


def test_ready_notification(tmp_path, zctx, monkeypatch):
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    d = Daemon(tmp_path, zctx).start()
    try:
        msg = sock.recv(4096).decode()
        assert msg.split("\n") == ["READY=1", f"MAINPID={d.proc.pid}"]
    finally:
        sock.close()
        _finish(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="another user and group need root")
def test_socket_group_members_connect(zctx):
    group = grp.getgrnam("nogroup")
    other = grp.getgrnam("daemon") if "daemon" in [g.gr_name for g in grp.getgrall()] else None
    nobody = pwd.getpwnam("nobody")
    top = tempfile.mkdtemp(prefix="ctxd-sockgroup-")
    try:
        os.chmod(top, 0o755)  # the test's own tree; the daemon sets the run directory
        run = os.path.join(top, "run")
        os.mkdir(run, 0o700)
        d = Daemon(__import__("pathlib").Path(top), zctx)
        d.endpoint = f"ipc://{run}/ctxd.sock"
        d.start(("--socket-group", "nogroup", "--state-dir", os.path.join(top, "state")))
        try:
            st = os.stat(os.path.join(run, "ctxd.sock"))
            assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == group.gr_gid
            st = os.stat(run)
            assert stat.S_IMODE(st.st_mode) == 0o750 and st.st_gid == group.gr_gid

            def hello(gid):
                return subprocess.run([os.path.abspath(CTX_BIN), "--endpoint", d.endpoint,
                                       "hello"], user=nobody.pw_uid, group=gid, extra_groups=[],
                                      capture_output=True, text=True, timeout=30, cwd="/")
            r = hello(group.gr_gid)  # a member of the group
            assert r.returncode == 0 and "ctxd" in r.stdout, r.stderr
            if other:
                r = hello(other.gr_gid)  # not a member: not even the directory
                assert r.returncode == 8 and "Permission denied" in r.stderr, r.stderr
        finally:
            _finish(d)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _v2_mount():
    for line in open("/proc/self/mounts"):
        dev, path, fstype = line.split()[:3]
        if fstype == "cgroup2":
            return path
    return None


class _InCgroupDaemon(Daemon):
    """ctxd started inside a given v2 cgroup (as systemd starts a service)."""

    cgroup = None

    def start(self, extra_args=(), cwd=None):
        import conftest
        wrapper = self.tmp / "ctxd-in-cgroup"
        wrapper.write_text(f"#!/bin/sh\necho $$ > {self.cgroup}/cgroup.procs || exit 1\n"
                           f"exec {conftest.CTXD_BIN} \"$@\"\n")
        wrapper.chmod(0o755)
        saved = conftest.CTXD_BIN
        conftest.CTXD_BIN = str(wrapper)
        try:
            return super().start(extra_args, cwd)
        finally:
            conftest.CTXD_BIN = saved


def _worker_cgroup(c, ctx):
    r = c.execute("print([l for l in open('/proc/self/cgroup').read().split() "
                  "if l.startswith('0::')][0][3:])", ctx=ctx)
    assert r.status == "ok", r.events
    return r.stdout.decode().strip()


@pytest.mark.skipif(os.geteuid() != 0 or not _v2_mount(), reason="needs root and a cgroup v2 tree")
@pytest.mark.parametrize("delegated", [True, False])
def test_workers_cgroups_in_the_delegated_subtree(tmp_path, zctx, delegated):
    mount = _v2_mount()
    name = f"ctxd-test-service-{os.getpid()}-{int(delegated)}"
    base = os.path.join(mount, name)
    os.mkdir(base)
    try:
        if delegated:  # what systemd does for Delegate=yes
            os.setxattr(base, "trusted.delegate", b"1")
        d = _InCgroupDaemon(tmp_path, zctx)
        d.cgroup = base
        d.start(("--state-dir", str(tmp_path / "state")))
        try:
            c = d.client()
            pid = d.hello["pid"]
            own = [ln for ln in open(f"/proc/{pid}/cgroup").read().split()
                   if ln.startswith("0::")][0][3:]
            c.ok("ctx.create", name="loc", tier="local")
            cgs = [_worker_cgroup(c, "default"), _worker_cgroup(c, "loc")]
            if delegated:
                assert own == f"/{name}/supervisor"
                for cg in cgs:
                    assert cg.startswith(f"/{name}/ctxd/{pid}x"), cgs
            else:  # not delegated: today's layout at the tree's root
                assert own == f"/{name}"
                for cg in cgs:
                    assert cg.startswith(f"/ctxd/{pid}x"), cgs
        finally:
            _finish(d)
    finally:
        # the daemon's children (zygote) may still be on their way out
        for sub in ("supervisor", "ctxd", ""):
            path = os.path.join(base, sub) if sub else base
            if os.path.isdir(path):
                assert wait_until(lambda: not open(f"{path}/cgroup.procs").read(), 10), path
                if sub == "ctxd":
                    for left in os.listdir(path):
                        if os.path.isdir(os.path.join(path, left)):
                            os.rmdir(os.path.join(path, left))
                os.rmdir(path)


def test_config_keys_are_hellos_names(tmp_path, zctx):
    conf = tmp_path / "ctxd.conf"
    conf.write_text("max_queue = 3\ndefault_timeout = 7\nmax_request_bytes = 2M\n"
                    "kill-grace = 1.5\n"  # the option's own spelling still works
                    "on_disconnect = interrupt\nmax_client_held = 4M\n")
    d = Daemon(tmp_path, zctx).start(("--config", str(conf)))
    try:
        lim = d.hello["limits"]
        assert lim["max_queue"] == 3 and lim["default_timeout"] == 7.0
        assert lim["max_request_bytes"] == 2 << 20 and lim["kill_grace"] == 1.5
        assert lim["on_disconnect"] == "interrupt" and lim["max_client_held"] == 4 << 20
    finally:
        _finish(d)
    conf.write_text("max_queues = 3\n")
    r = subprocess.run([CTXD_BIN, "--config", str(conf), "--help"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode != 0 and "unknown option 'max_queues'" in r.stderr
