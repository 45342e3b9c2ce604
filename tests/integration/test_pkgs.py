"""Packages (PROTOCOL.md section 5, pip.install and ctx.create `packages`):
wheels built here into a temporary wheelhouse, installed by the daemon's pip
(no network), visible only in the context they were installed into, cached
per source, failures reported with pip's own message."""

import base64
import hashlib
import zipfile

import pytest


def make_wheel(wheelhouse, name, version, body, requires=()):
    """A minimal pure-Python wheel: the module plus dist-info METADATA, WHEEL
    and RECORD (with hashes, as pip checks them)."""
    dist = f"{name}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": body,
        f"{dist}.dist-info/METADATA": meta,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: ctxd-test\n"
                                   "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    path = wheelhouse / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            data = text.encode()
            z.writestr(p, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{p},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist}.dist-info/RECORD,,")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def wheelhouse(tmp_path):
    wh = tmp_path / "wheelhouse"
    wh.mkdir()
    make_wheel(wh, "ctxdpkg_alpha", "1.0", "VALUE = 'alpha 1.0'\n")
    make_wheel(wh, "ctxdpkg_alpha", "2.0", "VALUE = 'alpha 2.0'\n")
    make_wheel(wh, "ctxdpkg_beta", "0.3",
               "import ctxdpkg_alpha\nVALUE = 'beta on ' + ctxdpkg_alpha.VALUE\n",
               requires=["ctxdpkg_alpha==1.0"])
    return wh


@pytest.fixture
def pkgd(make_daemon, wheelhouse, tmp_path):
    """A daemon offering the test wheelhouse, with its cache under tmp_path."""
    return make_daemon("--wheelhouse", str(wheelhouse),
                       "--package-cache", str(tmp_path / "cache"))


def value_of(c, ctx, module="ctxdpkg_alpha"):
    r = c.execute(f"import {module}; {module}.VALUE", ctx=ctx)
    return r.text if r.status == "ok" else r.error["ename"]


def counters(c):
    return c.ok("stats")["counters"]


def test_installed_into_one_context_not_another(pkgd):
    c = pkgd.client()
    c.ok("ctx.create", name="a")
    c.ok("ctx.create", name="b")
    assert value_of(c, "a") == "ModuleNotFoundError"  # nothing before the install
    r = c.ok("pip.install", ctx="a", packages=["ctxdpkg_alpha"])
    assert r["packages"] == [{"name": "ctxdpkg-alpha", "cached": False}]
    assert value_of(c, "a") == "'alpha 2.0'"  # the newest, also after a failed import
    assert value_of(c, "b") == "ModuleNotFoundError"
    assert value_of(c, "default") == "ModuleNotFoundError"
    # the install survives a restart of the context
    c.ok("ctx.restart", ctx="a")
    assert value_of(c, "a") == "'alpha 2.0'"


def test_versions_and_dependencies_per_context(pkgd):
    c = pkgd.client()
    c.ok("ctx.create", name="old")
    c.ok("ctx.create", name="new")
    c.ok("pip.install", ctx="old", packages=["ctxdpkg-alpha==1.0"])
    c.ok("pip.install", ctx="new", packages=["CtxdPkg.Alpha>=2"])
    assert value_of(c, "old") == "'alpha 1.0'"
    assert value_of(c, "new") == "'alpha 2.0'"
    # a dependency comes with its package
    c.ok("ctx.create", name="dep")
    r = c.ok("pip.install", ctx="dep", packages=["ctxdpkg_beta"])
    assert r["packages"] == [{"name": "ctxdpkg-beta", "cached": False}]
    assert value_of(c, "dep", "ctxdpkg_beta") == "'beta on alpha 1.0'"


def test_create_with_packages(pkgd):
    c = pkgd.client()
    r = c.ok("ctx.create", name="p", packages=["ctxdpkg_alpha==1.0"])
    assert r["ctx"]["name"] == "p"
    # the first run of the new context already sees it
    assert value_of(c, "p") == "'alpha 1.0'"
    c.ok("ctx.create", name="q", policy={"packages": ["ctxdpkg_beta"]})
    assert value_of(c, "q", "ctxdpkg_beta") == "'beta on alpha 1.0'"
    assert value_of(c, "default") == "ModuleNotFoundError"


def test_create_with_packages_in_a_confined_context(pkgd, tmp_path):
    # local tier: no subprocesses and reads only below `work` (the cache is
    # elsewhere): the install still works and the package imports.
    work = tmp_path / "work"
    work.mkdir()
    policy = {"subprocess_execution": False, "filesystem_read_roots": [str(work)],
              "filesystem_write_roots": [str(work)]}
    c = pkgd.client()
    c.ok("ctx.create", name="loc", tier="local", cwd=str(work), policy=policy,
         packages=["ctxdpkg_alpha==1.0"])
    assert value_of(c, "loc") == "'alpha 1.0'"
    r = c.execute("import subprocess; subprocess.run(['true'])", ctx="loc")
    assert r.status == "error" and r.error["ename"] == "PermissionError", r
    # pip.install into an existing confined context works too
    c.ok("ctx.create", name="loc2", tier="local", cwd=str(work), policy=policy)
    assert value_of(c, "loc2", "ctxdpkg_beta") == "ModuleNotFoundError"
    c.ok("pip.install", ctx="loc2", packages=["ctxdpkg_beta"])
    assert value_of(c, "loc2", "ctxdpkg_beta") == "'beta on alpha 1.0'"


def test_packages_in_a_sandbox(pkgd):
    # the sandbox binds the package directory and the cache read-only into
    # its root: installs at creation and later are both importable there,
    # and not in another sandbox.
    c = pkgd.client()
    c.ok("ctx.create", name="s", tier="sandbox", packages=["ctxdpkg_alpha==1.0"])
    c.ok("ctx.create", name="t", tier="sandbox")
    assert value_of(c, "s") == "'alpha 1.0'"
    assert value_of(c, "t") == "ModuleNotFoundError"
    c.ok("pip.install", ctx="t", packages=["ctxdpkg_beta"])
    assert value_of(c, "t", "ctxdpkg_beta") == "'beta on alpha 1.0'"
    assert value_of(c, "s", "ctxdpkg_beta") == "ModuleNotFoundError"
    r = c.execute("import ctxdpkg_alpha, os; open(os.path.join("
                  "os.path.dirname(ctxdpkg_alpha.__file__), 'x'), 'w')", ctx="s")
    assert r.error and "Read-only file system" in r.error["evalue"], r


def test_second_install_is_cached(pkgd, make_daemon, wheelhouse, tmp_path):
    c = pkgd.client()
    c.ok("ctx.create", name="a")
    c.ok("ctx.create", name="b")
    assert counters(c)["pip_runs"] == 0
    r = c.ok("pip.install", ctx="a", packages=["ctxdpkg_alpha==1.0"])
    assert r["packages"][0]["cached"] is False
    assert counters(c)["pip_runs"] == 1
    r = c.ok("pip.install", ctx="b", packages=["ctxdpkg_alpha==1.0"])
    assert r["packages"] == [{"name": "ctxdpkg-alpha==1.0", "cached": True}]
    c.ok("ctx.create", name="d", packages=["ctxdpkg-alpha==1.0"])
    st = counters(c)
    assert st["pip_runs"] == 1 and st["pip_cached"] == 2, st
    assert value_of(c, "b") == "'alpha 1.0'" and value_of(c, "d") == "'alpha 1.0'"
    # the cache outlives the daemon: another one on the same cache runs no pip
    d2 = make_daemon("--wheelhouse", str(wheelhouse), "--package-cache", str(tmp_path / "cache"))
    c2 = d2.client()
    r = c2.ok("pip.install", packages=["ctxdpkg_alpha==1.0"])
    assert r["packages"][0]["cached"] is True
    assert counters(c2)["pip_runs"] == 0
    assert value_of(c2, "default") == "'alpha 1.0'"


def test_missing_package_reports_pip_message(pkgd):
    c = pkgd.client()
    c.ok("ctx.create", name="a")
    e = c.err("pip.install", "install", ctx="a", packages=["ctxdpkg_nosuch"])
    assert "No matching distribution found for ctxdpkg-nosuch" in e["message"], e
    assert "ctxdpkg-nosuch" in e["message"]
    st = counters(c)
    assert st["pip_runs"] == 1 and st["pip_failures"] == 1, st  # not retried
    # a version that does not exist, at create: the context is not made
    e = c.err("ctx.create", "install", name="x", packages=["ctxdpkg_alpha==9.9"])
    assert "ctxdpkg-alpha==9.9" in e["message"] and "(from versions: 1.0, 2.0)" in e["message"], e
    assert "x" not in c.contexts()
    # one failing requirement fails the request; the daemon goes on
    e = c.err("pip.install", "install", ctx="a", packages=["ctxdpkg_alpha", "ctxdpkg_nosuch"])
    assert "ctxdpkg-nosuch" in e["message"]
    assert c.execute("1 + 1", ctx="a").text == "2"
    assert pkgd.alive()


@pytest.mark.parametrize("packages", [
    "ctxdpkg_alpha",                      # not a list
    {"ctxdpkg_alpha": "1"},
    [1],
    [""],
    ["x" * 201],                          # too long
    [f"p{i}" for i in range(65)],         # too many
    ["--index-url=http://example.com/simple"],
    ["-r", "/etc/passwd"],
    ["../ctxdpkg_alpha"],
    ["/tmp/ctxdpkg_alpha-1.0-py3-none-any.whl"],
    ["ctxdpkg_alpha @ file:///tmp/x.whl"],
    ["http://example.com/x.whl"],
    ["ctxdpkg_alpha; python_version>'3'"],
    ["ctxdpkg alpha"],
    ["ctxdpkg_alpha\n--index-url=x"],
])
def test_bad_packages_refused(pkgd, packages):
    c = pkgd.client()
    e = c.err("pip.install", "bad_field", packages=packages)
    assert "'packages'" in e["message"], e
    e = c.err("ctx.create", "bad_field", name="z", packages=packages)
    assert "'packages'" in e["message"], e
    assert "z" not in c.contexts()
    assert counters(c)["pip_runs"] == 0


def test_other_refusals(pkgd):
    c = pkgd.client()
    c.err("pip.install", "bad_field")  # packages is required
    c.err("pip.install", "unknown_context", ctx="nope", packages=["ctxdpkg_alpha"])
    c.err("pip.install", "bad_name", ctx="../x", packages=["ctxdpkg_alpha"])
    c.ok("ctx.create", name="a")
    c.err("ctx.create", "exists", name="a", packages=["ctxdpkg_alpha"])
    r = c.ok("pip.install", ctx="a", packages=[])
    assert r["packages"] == []
    # duplicates are installed once
    r = c.ok("pip.install", ctx="a", packages=["ctxdpkg_alpha", "CTXDPKG-ALPHA"])
    assert r["packages"] == [{"name": "ctxdpkg-alpha", "cached": False}]


def test_deleted_context_does_not_keep_packages(pkgd):
    c = pkgd.client()
    c.ok("ctx.create", name="a", packages=["ctxdpkg_alpha"])
    assert value_of(c, "a") == "'alpha 2.0'"
    c.ok("ctx.delete", ctx="a")
    c.ok("ctx.create", name="a")
    assert value_of(c, "a") == "ModuleNotFoundError"


def test_fork_shares_packages(pkgd):
    c = pkgd.client()
    c.ok("ctx.create", name="src", packages=["ctxdpkg_alpha==1.0"])
    c.ok("ctx.fork", ctx="src", name="copy")
    assert value_of(c, "copy") == "'alpha 1.0'"


def test_without_a_source_packages_are_refused(daemon):
    c = daemon.client()
    e = c.err("pip.install", "install", packages=["ctxdpkg_alpha"])
    assert "--wheelhouse" in e["message"], e
    e = c.err("ctx.create", "bad_field", name="a", packages=["ctxdpkg_alpha"])
    assert "'packages'" in e["message"] and "--wheelhouse" in e["message"], e
    # an empty list asks for nothing
    c.ok("ctx.create", name="b", packages=[])
