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

from conftest import CTXD_BIN, Daemon, _finish

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
