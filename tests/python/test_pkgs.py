"""The package's surface for packages (pip_install, create_context(packages=))
and for a declined input() (on_input returning None)."""

import asyncio
import base64
import hashlib
import zipfile

import pytest

import ctxd
from conftest import Daemon


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
def pkg_endpoint(tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    make_wheel(wh, "ctxdpypkg", "3.1", "VALUE = 31\n")
    d = Daemon(tmp_path).start("--wheelhouse", str(wh), "--package-cache",
                               str(tmp_path / "cache"))
    yield d.endpoint
    crashed = d.stop()
    assert crashed is None, crashed


def test_pip_install_and_create_with_packages(pkg_endpoint):
    with ctxd.Client(pkg_endpoint) as c:
        a = c.create_context("a")
        b = c.create_context("b")
        assert c.pip_install(["ctxdpypkg"], a) == [{"name": "ctxdpypkg", "cached": False}]
        assert c.execute("import ctxdpypkg; ctxdpypkg.VALUE", a).result == "31"
        r = c.execute("import ctxdpypkg", b)
        assert r.status == "error" and r.error.ename == "ModuleNotFoundError"
        assert c.pip_install(["ctxdpypkg"], b) == [{"name": "ctxdpypkg", "cached": True}]
        p = c.create_context("p", packages=["ctxdpypkg==3.1"])
        assert c.execute("import ctxdpypkg; ctxdpypkg.VALUE", p).result == "31"
        with pytest.raises(ctxd.RefusedError) as e:
            c.pip_install(["ctxdpypkg-nosuch"], a)
        assert e.value.code == "install"
        assert "No matching distribution found for ctxdpypkg-nosuch" in str(e.value)
        with pytest.raises(ctxd.RefusedError) as e:
            c.pip_install(["--index-url=http://x"], a)
        assert e.value.code == "bad_field"
        with pytest.raises(TypeError):
            c.pip_install("ctxdpypkg", a)


def test_async_pip_install(pkg_endpoint):
    async def main():
        async with ctxd.AsyncClient(pkg_endpoint) as c:
            await c.create_context("x", packages=["ctxdpypkg"])
            r1 = (await c.execute("import ctxdpypkg; ctxdpypkg.VALUE", "x")).result
            got = await c.pip_install(["ctxdpypkg"])
            r2 = (await c.execute("import ctxdpypkg; ctxdpypkg.VALUE")).result
            return r1, got, r2

    r1, got, r2 = asyncio.run(main())
    assert r1 == "31" and r2 == "31" and got == [{"name": "ctxdpypkg", "cached": True}]


def test_declined_input_is_eoferror(client):
    r = client.execute("try:\n    input('q? ')\nexcept EOFError:\n    v = 'eof'\nv, input()",
                       on_input=lambda prompt, pw: None if prompt == "q? " else "second")
    assert r.ok, r
    assert r.result == "('eof', 'second')"
