"""The daemon as PID 1 of a container (a new pid namespace): workers compare
their parent with the supervisor's real pid, not with 1, so they live; runs,
a restart, a local and a sandbox context work (daemon/worker/wrk_main.c
watch_parent; daemon/supervisor/sup_child.c)."""

import os
import shutil
import signal
import subprocess

import pytest

import conftest
from conftest import Daemon, _finish

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="a new pid namespace needs root and unshare(1)")


class Pid1Daemon(Daemon):
    """ctxd started by `unshare --pid --fork --mount-proc`: PID 1 inside."""

    def start(self, extra_args=(), cwd=None):
        real = conftest.CTXD_BIN
        wrapper = self.tmp / "ctxd-as-pid1"
        wrapper.write_text("#!/bin/sh\nexec unshare --pid --fork --mount-proc --kill-child "
                           f"{real} \"$@\"\n")
        wrapper.chmod(0o755)
        saved = conftest.CTXD_BIN
        conftest.CTXD_BIN = str(wrapper)
        try:
            return super().start(extra_args, cwd)
        finally:
            conftest.CTXD_BIN = saved

    def stop(self):
        """unshare does not pass SIGTERM on: the daemon inside gets it (as
        PID 1 it must handle it itself) and ends with status 0."""
        if self.proc is None or self.stopped_by_test or self.proc.poll() is not None:
            return super().stop()
        pid = self.proc.pid
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            inner = [int(p) for p in f.read().split()]
        assert len(inner) == 1, inner
        os.kill(inner[0], signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            rc = "none within 10 s"
        self.log.close()
        if rc != 0:
            return f"ctxd as PID 1: exit status {rc} on SIGTERM:\n" + self.log_text()
        return None


@pytest.fixture
def pid1(tmp_path, zctx):
    d = Pid1Daemon(tmp_path, zctx).start(("--state-dir", str(tmp_path / "state")))
    yield d
    _finish(d)


def test_daemon_as_pid1_runs_code(pid1):
    assert pid1.hello["pid"] == 1  # the daemon sees itself as PID 1
    c = pid1.client()
    r = c.execute("import os; (os.getppid(), 6 * 7)")
    assert r.status == "ok", r.events
    assert r.result["data"]["text/plain"] == "(1, 42)"  # its parent: the supervisor, PID 1
    r = c.execute("x = 5")
    assert r.status == "ok"
    assert c.execute("x * 2").result["data"]["text/plain"] == "10"  # the worker lived on
    c.ok("ctx.restart", ctx="default")
    assert c.execute("1 + 1").result["data"]["text/plain"] == "2"
    for tier in ("local", "sandbox"):
        if tier not in pid1.hello["tiers"]:
            continue
        c.ok("ctx.create", name=tier, tier=tier)
        r = c.execute("y = 3", ctx=tier)
        assert r.status == "ok", (tier, r.events)
        assert c.execute("y + 1", ctx=tier).result["data"]["text/plain"] == "4", tier
    assert c.info("default")["state"] == "idle"
