"""The escape suite reuses the integration tests' daemon fixtures (loaded
under another module name: both files are called conftest.py)."""

import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "ctxd_integration_conftest",
    pathlib.Path(__file__).resolve().parent.parent / "integration" / "conftest.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

pytest_sessionstart = _mod.pytest_sessionstart
zctx = _mod.zctx
daemon = _mod.daemon
make_daemon = _mod.make_daemon
_workers_reach_tmp = _mod._workers_reach_tmp
reachable = _mod.reachable
