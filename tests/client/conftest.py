"""Fixtures for the tests of the ctx command line and its REPL.

Each test gets its own daemon on a private ipc socket under tmp_path.
Binaries: $CTXD_BIN (default build/daemon/ctxd) and $CTXD_CTX_BIN (default
build/tools/ctx); the daemon finds its worker next to itself, or at
$CTXD_WORKER_BIN.

Run with the system interpreter:  /usr/bin/python3 -m pytest tests/client
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import sys as _sys
_sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reachable  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CTXD_BIN = os.environ.get("CTXD_BIN", str(ROOT / "build" / "daemon" / "ctxd"))
CTX_BIN = os.environ.get("CTXD_CTX_BIN", str(ROOT / "build" / "tools" / "ctx"))
CTXD_WORKER_BIN = os.environ.get("CTXD_WORKER_BIN")

# A hang must fail a test, never hang the suite (a liveness bound only).
WAIT = 60.0


class Daemon:
    def __init__(self, tmp_path: Path):
        self.dir = tmp_path
        self.endpoint = f"ipc://{tmp_path}/s.sock"
        self.log_path = tmp_path / "ctxd.log"

    def start(self, extra_args=()):
        # Its own state directory: the catalogue, keys and snapshots of one
        # test never meet another's (nor a run's on the same machine before).
        # Beside the socket's directory, not in it: what a sandbox may see of
        # that directory stays as it was.
        if "--state-dir" not in extra_args:
            extra_args = ("--state-dir", str(self.dir.parent / (self.dir.name + "-state")), *extra_args)
        cmd = [CTXD_BIN, "--listen", self.endpoint, *extra_args]
        if CTXD_WORKER_BIN:
            cmd += ["--worker", CTXD_WORKER_BIN]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=str(self.dir),
                                     start_new_session=True)
        deadline = time.monotonic() + 15
        while self.ctx("hello", check=False).returncode != 0:
            assert self.proc.poll() is None, "ctxd exited at start:\n" + self.log_text()
            assert time.monotonic() < deadline, "ctxd did not answer within 15 s"
            time.sleep(0.02)
        return self

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def ctx(self, *args, check=True, input=None, env=None, timeout=WAIT):
        """Runs `ctx --endpoint EP ARGS...`; returns the CompletedProcess."""
        r = subprocess.run([CTX_BIN, "--endpoint", self.endpoint, *args], input=input,
                           capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
        if check:
            assert r.returncode == 0, f"ctx {args}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args):
        """ctx --json ARGS...: the JSON objects it printed, one per line."""
        r = self.ctx("--json", *args, check=False)
        return r.returncode, [json.loads(line) for line in r.stdout.splitlines() if line]

    def stop(self):
        crashed = None
        if self.proc.poll() is not None:
            crashed = f"ctxd died during the test (rc {self.proc.returncode}):\n{self.log_text()}"
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        return crashed


def pytest_sessionstart(session):
    for b in (CTXD_BIN, CTX_BIN):
        if not os.access(b, os.X_OK):
            pytest.exit(f"{b} not built (set CTXD_BIN / CTXD_CTX_BIN)", returncode=2)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path).start()
    yield d
    crashed = d.stop()
    assert crashed is None, crashed


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
