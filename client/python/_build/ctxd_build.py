"""A minimal PEP 517 (and PEP 660) build backend for the ctxd package,
using only the standard library, so that building needs no download.

It packs the `ctxd` directory next to pyproject.toml into a pure-Python
py3-none-any wheel, an sdist, or an editable wheel (a .pth file pointing at
this source tree). Metadata comes from pyproject.toml's [project] table."""

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "ctxd"


def _project():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    try:
        import tomllib

        return tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the few simple keys we use
        section = text.split("[project]", 1)[1]
        section = section.split("\n[", 1)[0]
        proj = {}
        for key in ("name", "version", "description", "requires-python"):
            m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), section, re.M)
            if m:
                proj[key] = m.group(1)
        m = re.search(r"^dependencies\s*=\s*\[([^\]]*)\]", section, re.M)
        proj["dependencies"] = re.findall(r'"([^"]+)"', m.group(1)) if m else []
        return proj


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % p["version"]]
    if p.get("description"):
        lines.append("Summary: %s" % p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: %s" % p["requires-python"])
    for dep in p.get("dependencies", []):
        lines.append("Requires-Dist: %s" % dep)
    return p, "\n".join(lines) + "\n"


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"].replace("-", "_"), p["version"])


def _files():
    """(archive name, path) of every file of the package."""
    out = []
    base = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".pyc", ".pyo")) or f == "README.md":  # folder notes, not the package
                continue
            full = os.path.join(dirpath, f)
            out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _write_wheel(wheel_directory, entries):
    p, meta = _metadata()
    tag = "py3-none-any"
    name = "%s-%s-%s.whl" % (p["name"].replace("-", "_"), p["version"], tag)
    di = _dist_info(p)
    wheel = "Wheel-Version: 1.0\nGenerator: ctxd_build\nRoot-Is-Purelib: true\nTag: %s\n" % tag
    entries = list(entries) + [
        (di + "/METADATA", meta.encode()),
        (di + "/WHEEL", wheel.encode()),
        (di + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    records = [_record_line(n, d) for n, d in entries] + [di + "/RECORD,,"]
    entries.append((di + "/RECORD", ("\n".join(records) + "\n").encode()))
    path = os.path.join(wheel_directory, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


# ---- PEP 517 hooks -------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p, meta = _metadata()
    di = _dist_info(p)
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    with open(os.path.join(metadata_directory, di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(meta)
    return di


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for name, full in _files():
        with open(full, "rb") as f:
            entries.append((name, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    pth = (ROOT + "\n").encode()
    return _write_wheel(wheel_directory, [("_ctxd_editable.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    p, meta = _metadata()
    base = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
    name = base + ".tar.gz"
    files = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
             ("_build/ctxd_build.py", os.path.abspath(__file__))] + _files()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, full in files:
            t.add(full, arcname=base + "/" + arc, recursive=False)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = meta.encode()
        info.size = len(data)
        info.mtime = int(time.time())
        info.mode = 0o644
        t.addfile(info, io.BytesIO(data))
    return name
