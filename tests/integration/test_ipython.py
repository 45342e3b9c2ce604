"""IPython syntax (issue 16): execute and ctx.create `syntax`, hello's
`syntaxes`, the magics with IPython and with the built-in subset
(CTXD_IPYTHON=0), values as Jupyter shows them (trailing `;`, a Figure as
its image, figures after the error, the pretty printer), and ctx.create
`lease` with ctx.renew."""

import base64
import os
import time

import pytest
from conftest import wait_until
from test_rich import HAVE_IPYTHON, HAVE_MPL

needs_ipython = pytest.mark.skipif(not HAVE_IPYTHON, reason="IPython not installed")
needs_mpl = pytest.mark.skipif(not HAVE_MPL, reason="matplotlib not installed")


def ok(client, code, **kw):
    r = client.execute(code, **kw)
    assert r.status == "ok", r
    return r


def plain(r):
    return r.result["data"]["text/plain"] if r.result else None


def test_hello_lists_syntaxes(client):
    assert client.ok("hello")["syntaxes"] == ["python", "ipython"]


def test_syntax_field_checked(client):
    client.err("execute", "bad_field", code="1", syntax="bash")
    client.err("ctx.create", "bad_field", name="badsyn", syntax="ruby")
    assert "badsyn" not in client.contexts()


def test_python_stays_the_default(client):
    r = client.execute("%time 1")
    assert r.status == "error" and r.error["ename"] == "SyntaxError", r


@pytest.mark.parametrize("ipython", [True, False], ids=["IPython", "builtin"])
def test_magics_and_shell(client, tmp_path, ipython):
    if ipython and not HAVE_IPYTHON:
        pytest.skip("IPython not installed")
    env = {} if ipython else {"CTXD_IPYTHON": "0"}
    client.ok("ctx.create", name="nb", cwd=str(tmp_path), syntax="ipython", env=env)
    # common indentation, !cmd streamed, x = !cmd
    r = ok(client, "    word = 'hi'\n    !echo {word} from the shell\n"
                   "    lines = !printf 'a\\nb\\n'\n    lines", ctx="nb")
    assert "hi from the shell" in r.stdout.decode(), r
    assert "'a'" in plain(r) and "'b'" in plain(r), r
    # %time / %%time give the value, %timeit prints its line
    r = ok(client, "%time v = 6 * 7\nv", ctx="nb")
    assert "Wall time" in r.stdout.decode() and plain(r) == "42", r
    r = ok(client, "%%time\nw = v + 1\nw", ctx="nb")
    assert "Wall time" in r.stdout.decode() and plain(r) == "43", r
    r = ok(client, "%timeit -n 2 -r 2 sum(range(10))" if ipython else
           "%timeit sum(range(10))", ctx="nb")
    assert "per loop" in r.stdout.decode(), r
    # %%writefile, %%bash, %env, %cd, %who, %matplotlib inline, autoreload
    r = ok(client, "%%writefile made.txt\nwritten by a magic\n", ctx="nb")
    assert (tmp_path / "made.txt").read_text() == "written by a magic\n"
    r = ok(client, "%%bash\necho bash says $((1 + 2))", ctx="nb")
    assert "bash says 3" in r.stdout.decode(), r
    r = ok(client, "%env NB_VAR=seven\nimport os\nos.environ['NB_VAR']", ctx="nb")
    assert plain(r) == "'seven'", r
    (tmp_path / "sub").mkdir()
    r = ok(client, "%cd sub\nos.getcwd()", ctx="nb")
    assert plain(r) == repr(str(tmp_path / "sub")), r
    r = ok(client, "%who", ctx="nb")
    assert "word" in r.stdout.decode() and "lines" in r.stdout.decode(), r
    ok(client, "%matplotlib inline\n%load_ext autoreload\n%autoreload 2\nafter = 1", ctx="nb")
    assert plain(ok(client, "after", ctx="nb")) == "1"
    if ipython:  # IPython's autoreload reloads a changed module before a run
        (tmp_path / "sub" / "nbmod.py").write_text("VALUE = 1\n")
        ok(client, "import sys; sys.path.insert(0, os.getcwd())\nimport nbmod", ctx="nb")
        (tmp_path / "sub" / "nbmod.py").write_text("VALUE = 2  # edited\n")
        os.utime(tmp_path / "sub" / "nbmod.py", (time.time() + 5, time.time() + 5))
        assert plain(ok(client, "nbmod.VALUE", ctx="nb")) == "2"
    # obj? prints the inspection
    r = ok(client, "len?", ctx="nb")
    assert "Return the number of items" in r.stdout.decode(), r
    # an unknown magic: UsageError naming it
    r = client.execute("%nosuchmagic 1", ctx="nb")
    assert r.status == "error" and r.error["ename"] == "UsageError", r
    assert "nosuchmagic" in r.error["evalue"], r
    # a plain-Python run in the same context
    r = client.execute("%who", ctx="nb", syntax="python")
    assert r.status == "error" and r.error["ename"] == "SyntaxError", r
    client.ok("ctx.delete", ctx="nb")


def test_execute_syntax_overrides_context(client):
    r = ok(client, "x = !echo one\nx", syntax="ipython")
    assert "one" in plain(r), r


def test_trailing_semicolon_quiet(client):
    r = ok(client, "1 + 1;")
    assert r.result is None, r
    r = ok(client, "1 + 1;  # a comment", syntax="ipython")
    assert r.result is None, r
    assert plain(ok(client, "s = 'a;'\ns")) == "'a;'"


@needs_ipython
def test_pretty_printer_for_ipython_syntax(client):
    code = "{i: 'value %d' % i for i in range(12)}"
    assert "\n" in plain(ok(client, code, syntax="ipython"))
    assert "\n" not in plain(ok(client, code))  # repr() for plain Python


@needs_mpl
def test_figure_value_and_figures_after_error(client):
    ok(client, "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2]);",
       syntax="ipython")
    r = ok(client, "ax.set_title('edited')\nfig", syntax="ipython")
    assert r.result["data"]["text/plain"].startswith("<Figure size"), r
    png = base64.b64decode(r.result["data"]["image/png"])
    assert png.startswith(b"\x89PNG")
    assert not r.of("display")  # the figure was closed by the cell that made it
    r = client.execute("plt.plot([3, 1])\n1 / 0")
    kinds = [e["t"] for e in r.events]
    assert kinds.index("error") < kinds.index("display"), kinds


def test_lease_expires_and_renews(client):
    assert client.ok("ctx.create", name="leased", lease=2)["ctx"]["lease"] == 2
    assert "lease" not in client.ok("ctx.create", name="plain")["ctx"]
    # renewed (ctx.renew, and any request naming it) for longer than the lease
    t_end = time.monotonic() + 5
    while time.monotonic() < t_end:
        assert client.ok("ctx.renew", ctx="leased")["lease"] == 2
        time.sleep(0.5)
    assert "leased" in client.contexts()
    # busy in a loop, not renewed: deleted, its run aborted
    rid = client.submit("while True: pass", ctx="leased")
    r = client.wait(rid, timeout=60)
    assert r.status == "aborted", r
    assert "leased" not in client.contexts()
    assert "plain" in client.contexts()
    assert client.ok("ctx.renew", ctx="plain")["lease"] == 0
    client.err("ctx.create", "bad_field", name="short", lease=0.1)
    client.err("ctx.create", "bad_field", name="default", lease=10)


@pytest.mark.parametrize("ipython", [True, False], ids=["IPython", "builtin"])
def test_pip_magic_installs_into_the_context(make_daemon, tmp_path, ipython):
    """%pip install: the daemon's pip.install for the run's own context."""
    if ipython and not HAVE_IPYTHON:
        pytest.skip("IPython not installed")
    from test_pkgs import make_wheel
    wh = tmp_path / "wh"
    wh.mkdir()
    make_wheel(wh, "ctxdpkg_magic", "1.0", "VALUE = 'from %pip'\n")
    d = make_daemon("--wheelhouse", str(wh), "--package-cache", str(tmp_path / "cache"))
    c = d.client()
    env = {} if ipython else {"CTXD_IPYTHON": "0"}
    c.ok("ctx.create", name="p", syntax="ipython", env=env)
    c.ok("ctx.create", name="other")
    r = ok(c, "%pip install ctxdpkg_magic==1.0\nimport ctxdpkg_magic\nctxdpkg_magic.VALUE",
           ctx="p")
    assert plain(r) == "'from %pip'", r
    assert "ctxdpkg_magic" in r.stdout.decode()
    r = c.execute("import ctxdpkg_magic", ctx="other")  # only that context
    assert r.status == "error" and r.error["ename"] == "ModuleNotFoundError", r
    r = c.execute("%pip install ctxdpkg_missing", ctx="p")
    assert r.status == "error" and r.error["ename"] == "PipInstallError", r
    assert "ctxdpkg_missing" in r.error["evalue"].lower().replace("-", "_"), r
    r = c.execute("%pip install --index-url=http://x y", ctx="p")
    assert r.status == "error" and r.error["ename"] == "UsageError", r


def test_pip_magic_without_package_source(client):
    r = client.execute("%pip install anything", syntax="ipython")
    assert r.status == "error" and r.error["ename"] == "PipInstallError", r
    assert "offers no packages" in r.error["evalue"], r


@pytest.mark.parametrize("ipython", [True, False], ids=["IPython", "builtin"])
def test_script_run_with_ipython_syntax(client, tmp_path, ipython):
    # A script run (file, argv) in IPython syntax: the transformed code runs
    # with the script's __file__ and sys.argv, put back afterwards; sys.exit
    # ends such a run with exit_code and no traceback, as in plain Python.
    env = {} if ipython else {"CTXD_IPYTHON": "0"}
    client.ok("ctx.create", name="ipyscript", syntax="ipython", env=env)
    f = tmp_path / "s.py"
    r = ok(client, "import sys\nprint(__file__, sys.argv)\n!echo hi\nx = 41\nx + 1\n",
           ctx="ipyscript", file=str(f), argv=[str(f), "a"])
    assert r.stdout.replace(b"\r", b"") == f"{f} ['{f}', 'a']\nhi\n".encode(), r
    assert plain(r) == "42", r
    r = client.execute("print(sys.argv)\n__file__", ctx="ipyscript")
    assert r.status == "error" and r.error["ename"] == "NameError", r
    assert r.stdout == b"['']\n", r
    r = client.execute("x;\nsys.exit(4)", ctx="ipyscript")
    assert r.status == "error" and r.done["exit_code"] == 4 and r.error is None, r
    r = ok(client, "x;", ctx="ipyscript")
    assert r.result is None, r
    r = client.execute("def f():\n    raise ValueError(3)\nf()", ctx="ipyscript")
    assert r.error["ename"] == "ValueError", r
    assert any("raise ValueError(3)" in line for line in r.error["traceback"]), r
