"""`pip install ./client/python` works offline: the in-tree build backend
needs nothing from a package index. Installed into a venv that sees the
Debian packages (python3-zmq, python3-msgpack), as the system Python is
externally managed."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "client" / "python"


def _have_ensurepip():
    try:
        import ensurepip  # noqa: F401  (Debian: the python3-venv package)
        return True
    except ImportError:
        return False


@pytest.mark.skipif(not _have_ensurepip(), reason="needs Debian's python3-venv (ensurepip)")
def test_pip_install_offline(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(py), "-m", "pip", "install", str(PKG)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [str(py), "-c", "import ctxd, ctxd.daytona; print(ctxd.__version__, ctxd.__file__)"],
        env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    version, where = r.stdout.split()
    assert version == "0.1.0"
    assert str(env_dir) in where  # the installed copy, not the source tree
    # Building left nothing behind in the source tree.
    assert not list(PKG.glob("*.egg-info")) and not (PKG / "build").exists()


def test_backend_builds_sdist_and_wheel(tmp_path):
    code = ("import sys; sys.path.insert(0, %r); import ctxd_build as b; "
            "print(b.build_sdist(%r)); print(b.build_wheel(%r))"
            % (str(PKG / "_build"), str(tmp_path), str(tmp_path)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert r.returncode == 0, r.stderr
    sdist, wheel = r.stdout.split()
    assert sdist == "ctxd-0.1.0.tar.gz" and wheel == "ctxd-0.1.0-py3-none-any.whl"
    import zipfile
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert "ctxd/__init__.py" in names and "ctxd-0.1.0.dist-info/RECORD" in names
    assert not any("__pycache__" in n for n in names)
