"""The Jupyter kernel's tests: one ctxd daemon on a private socket for the
session, the `ctxd-test` kernelspec installed (by the kernel's own
installer) into a private JUPYTER_PATH, history in a temporary file.

$CTXD_BIN is the daemon (ctest passes the build's); the kernel runs on
/usr/bin/python3 with the package from client/python."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import sys as _sys
_sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reachable  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(ROOT, "client", "python")
CTXD_BIN = os.environ.get("CTXD_BIN", os.path.join(ROOT, "build", "daemon", "ctxd"))
sys.path.insert(0, PKG)

from ctxd import Client  # noqa: E402


def install_spec(tmp, name, *extra):
    """Installs a kernelspec with `python3 -m ctxd.kernel install`."""
    env = dict(os.environ, PYTHONPATH=PKG)
    subprocess.run(["/usr/bin/python3", "-m", "ctxd.kernel", "install", "--prefix", tmp,
                    "--name", name, "--ctxd", CTXD_BIN, *extra],
                   check=True, env=env, stdout=subprocess.PIPE)


class Env:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="ctxd-kernel-test-")
        self.endpoint = f"ipc://{self.tmp}/ctxd.sock"
        self.log = open(os.path.join(self.tmp, "ctxd.log"), "wb")
        # Its own state directory: the catalogue, keys and snapshots of one
        # test never meet another's (nor a run's on the same machine before).
        # Beside the socket's directory, not in it: what a sandbox may see of
        # that directory stays as it was.
        self.proc = subprocess.Popen([CTXD_BIN, "--listen", self.endpoint, "--state-dir",
                                      self.tmp + "-state"],
                                     stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tmp)
        for _ in range(500):
            if os.path.exists(f"{self.tmp}/ctxd.sock"):
                break
            time.sleep(0.01)
        install_spec(self.tmp, "ctxd-test")
        install_spec(self.tmp, "ctxd-shared", "--context", "shared-ctx")
        os.environ["JUPYTER_PATH"] = os.path.join(self.tmp, "share", "jupyter")
        os.environ["CTXD_ENDPOINT"] = self.endpoint
        os.environ["CTXD_KERNEL_HISTORY"] = os.path.join(self.tmp, "history.sqlite")
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        self.client = Client(self.endpoint)

    def close(self):
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def ctxd_env():
    if not os.access(CTXD_BIN, os.X_OK):
        pytest.exit(f"daemon binary {CTXD_BIN} not built (set CTXD_BIN)", returncode=2)
    env = Env()
    yield env
    assert env.proc.poll() is None, "the daemon died during the kernel tests"
    env.close()


@pytest.fixture(autouse=True)
def _workers_reach_tmp(tmp_path):
    """Confined workers have uids of their own: tmp_path's parents must let
    them through (tests/reachable.py)."""
    reachable.open_ancestors(tmp_path)
    yield
