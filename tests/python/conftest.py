"""Fixtures for the tests of the ctxd Python package (client/python).

Each test gets its own daemon on a private ipc socket under tmp_path, as
tests/integration does. Binaries: $CTXD_BIN (default: build/daemon/ctxd;
the daemon finds its worker next to itself, or at $CTXD_WORKER_BIN).
The package is imported from the source tree (client/python), so no
install is needed.

Run with the system interpreter:  /usr/bin/python3 -m pytest tests/python
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sys as _sys
_sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reachable  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))

import ctxd  # noqa: E402

CTXD_BIN = os.environ.get("CTXD_BIN", str(ROOT / "build" / "daemon" / "ctxd"))
CTXD_WORKER_BIN = os.environ.get("CTXD_WORKER_BIN")

# A hang must fail a test, never hang the suite (a liveness bound only).
WAIT = 60.0


class Daemon:
    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.endpoint = f"ipc://{tmp_path}/s.sock"
        self.log_path = tmp_path / "ctxd.log"
        self.proc = None
        self.stopped_by_test = False

    def start(self, *args):
        # Its own state directory: the catalogue, keys and snapshots of one
        # test never meet another's (nor a run's on the same machine before).
        # Beside the socket's directory, not in it: what a sandbox may see of
        # that directory stays as it was.
        cmd = [CTXD_BIN, "--listen", self.endpoint]
        if "--state-dir" not in args:
            cmd += ["--state-dir", str(self.dir.parent / (self.dir.name + "-state"))]
        if CTXD_WORKER_BIN:
            cmd += ["--worker", CTXD_WORKER_BIN]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd + list(args), stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=str(self.dir),
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"ctxd exited at start:\n{self.log_text()}")
            try:
                ctxd.Client(self.endpoint, request_timeout=1).close()
                return self
            except ctxd.UnreachableError:
                assert time.monotonic() < deadline, "ctxd did not answer within 15 s"
                time.sleep(0.02)

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def kill(self):
        """Ends the daemon abruptly (a test of the client's liveness check)."""
        self.stopped_by_test = True
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self):
        crashed = None
        if self.proc.poll() is not None and not self.stopped_by_test:
            crashed = f"ctxd died during the test (rc {self.proc.returncode}):\n{self.log_text()}"
        elif self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        return crashed


def pytest_sessionstart(session):
    if not os.access(CTXD_BIN, os.X_OK):
        pytest.exit(f"daemon binary {CTXD_BIN} not built (set CTXD_BIN)", returncode=2)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path).start()
    yield d
    crashed = d.stop()
    assert crashed is None, crashed


@pytest.fixture
def endpoint(daemon):
    return daemon.endpoint


@pytest.fixture
def client(daemon):
    c = ctxd.Client(daemon.endpoint)
    yield c
    c.close()


def wait_until(pred, timeout=WAIT, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


@pytest.fixture(autouse=True)
def _workers_reach_tmp(tmp_path):
    """Confined workers have uids of their own: tmp_path's parents must let
    them through (tests/reachable.py)."""
    reachable.open_ancestors(tmp_path)
    yield
