"""ctx cp (file.put / file.get in chunks) and ctx pip / ctx create -p
(pip.install, ctx.create packages)."""

import base64
import hashlib
import os
import subprocess
import zipfile

import pytest

from conftest import CTX_BIN, Daemon


def sha(data):
    return hashlib.sha256(data).hexdigest()


def test_help_lists_cp_and_pip():
    out = subprocess.run([CTX_BIN, "--help"], capture_output=True, text=True).stdout
    assert "\n  cp " in out and "\n  pip " in out
    cp = subprocess.run([CTX_BIN, "cp", "--help"], capture_output=True, text=True).stdout
    assert cp.startswith("usage: ctx cp SRC DST") and "CTX:PATH" in cp


def test_cp_round_trip_with_checksum(daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    daemon.ctx("create", "w", "--cwd", str(work))
    data = os.urandom(9 * 1024 * 1024 + 123)  # three chunks, the last short
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    r = daemon.ctx("--json", "cp", str(src), "w:sub.bin")
    assert r.stdout.strip() == '{"t":"ok","bytes":%d}' % len(data)
    assert sha((work / "sub.bin").read_bytes()) == sha(data)
    # the code sees the same bytes
    r = daemon.ctx("run", "-c", "w", "import hashlib; hashlib.sha256(open('sub.bin','rb')"
                   ".read()).hexdigest()")
    assert r.stdout.strip() == repr(sha(data))
    # out again, to a file and into a directory (the name is kept)
    daemon.ctx("cp", "w:sub.bin", str(tmp_path / "out.bin"))
    assert sha((tmp_path / "out.bin").read_bytes()) == sha(data)
    outdir = tmp_path / "outdir"
    outdir.mkdir()
    daemon.ctx("cp", "w:sub.bin", str(outdir))
    assert sha((outdir / "sub.bin").read_bytes()) == sha(data)
    # CTX:dir/ takes the local file's name
    (work / "d").mkdir()
    daemon.ctx("cp", str(src), "w:d/")
    assert sha((work / "d" / "in.bin").read_bytes()) == sha(data)


def test_cp_stdin_stdout_and_empty(daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    daemon.ctx("create", "w", "--cwd", str(work))
    payload = bytes(range(256)) * 1000
    r = subprocess.run([CTX_BIN, "--endpoint", daemon.endpoint, "cp", "-", "w:piped.bin"],
                       input=payload, capture_output=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CTX_BIN, "--endpoint", daemon.endpoint, "cp", "w:piped.bin", "-"],
                       capture_output=True)
    assert r.returncode == 0 and r.stdout == payload
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    daemon.ctx("cp", str(empty), "w:empty")
    assert (work / "empty").exists() and (work / "empty").stat().st_size == 0
    daemon.ctx("cp", "w:empty", str(tmp_path / "empty2"))
    assert (tmp_path / "empty2").read_bytes() == b""


def test_cp_refusals(daemon, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    daemon.ctx("create", "w", "--cwd", str(work))
    (tmp_path / "secret").write_text("s")
    f = tmp_path / "f"
    f.write_text("x")
    r = daemon.ctx("cp", "w:../secret", str(tmp_path / "got"), check=False)
    assert r.returncode == 7 and "bad_path" in r.stderr
    assert not (tmp_path / "got").exists()
    r = daemon.ctx("cp", str(f), "w:../escaped", check=False)
    assert r.returncode == 7 and not (tmp_path / "escaped").exists()
    r = daemon.ctx("cp", "w:missing", str(tmp_path / "got"), check=False)
    assert r.returncode == 7 and "not_found" in r.stderr and not (tmp_path / "got").exists()
    assert daemon.ctx("cp", str(f), str(tmp_path / "g"), check=False).returncode == 2
    assert daemon.ctx("cp", "w:a", "w:b", check=False).returncode == 2
    assert daemon.ctx("cp", str(tmp_path / "nonexistent"), "w:x", check=False).returncode == 2
    assert daemon.ctx("cp", "-", "w:", check=False).returncode == 2  # no name to take


def make_wheel(wheelhouse, name, version, body):
    dist = f"{name}-{version}"
    files = {f"{name}/__init__.py": body,
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                           f"Version: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(wheelhouse / f"{dist}-py3-none-any.whl", "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
            h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
            record.append(f"{p},sha256={h.decode()},{len(text.encode())}")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record + [f"{dist}.dist-info/RECORD,,"]))


@pytest.fixture
def pkgd(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    make_wheel(wh, "ctxdclipkg", "1.5", "VALUE = 15\n")
    d = Daemon(tmp_path).start(["--wheelhouse", str(wh), "--package-cache",
                                str(tmp_path / "cache")])
    yield d
    crashed = d.stop()
    assert crashed is None, crashed


def test_ctx_pip_and_create_with_packages(pkgd):
    r = pkgd.ctx("pip", "-c", "a", "ctxdclipkg")
    assert r.stdout == "ctxdclipkg installed\n"
    assert pkgd.ctx("run", "-c", "a", "import ctxdclipkg; ctxdclipkg.VALUE").stdout == "15\n"
    r = pkgd.ctx("run", "-c", "b", "import ctxdclipkg", check=False)
    assert r.returncode == 1 and "ModuleNotFoundError" in r.stderr
    code, out = pkgd.json("pip", "-c", "b", "ctxdclipkg==1.5")
    assert code == 0 and out == [{"t": "ok", "packages": [{"name": "ctxdclipkg==1.5",
                                                           "cached": False}]}]
    assert pkgd.ctx("pip", "-c", "b", "ctxdclipkg").stdout == "ctxdclipkg cached\n"
    assert pkgd.ctx("create", "c", "-p", "ctxdclipkg").stdout == "c\n"
    assert pkgd.ctx("run", "-c", "c", "import ctxdclipkg; ctxdclipkg.VALUE").stdout == "15\n"
    r = pkgd.ctx("pip", "-c", "a", "ctxdclipkg-nosuch", check=False)
    assert r.returncode == 7
    assert "No matching distribution found for ctxdclipkg-nosuch" in r.stderr, r.stderr
    r = pkgd.ctx("pip", "-c", "a", "--", "--index-url=http://x", check=False)
    assert r.returncode == 7 and "bad_field" in r.stderr
    assert pkgd.ctx("pip", check=False).returncode == 2
