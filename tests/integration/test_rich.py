"""Rich output (issue 6): MIME bundles, display(), figures, top-level await."""

import base64
import importlib.util
import struct
import subprocess

import pytest
from conftest import Run, check_run


def _worker_has(module):
    """Whether Debian's python3 (the worker's interpreter) can import it."""
    r = subprocess.run(["/usr/bin/python3", "-c", f"import {module}"],
                       capture_output=True)
    return r.returncode == 0


HAVE_MPL = _worker_has("matplotlib")
HAVE_PANDAS = _worker_has("pandas")
HAVE_IPYTHON = _worker_has("IPython")
assert importlib.util  # (kept for readers: no client-side imports needed)


def png_size(b64):
    """Decodes base64 PNG data, checks the signature and IHDR, returns (w, h)."""
    png = base64.b64decode(b64, validate=True)
    assert png[:8] == b"\x89PNG\r\n\x1a\n", png[:16]
    length, kind = struct.unpack(">I4s", png[8:16])
    assert kind == b"IHDR" and length == 13
    w, h = struct.unpack(">II", png[16:24])
    return w, h


def ok_run(client, code, **kw):
    r = client.execute(code, **kw)
    assert r.status == "ok", r
    return r


def test_plain_result_unchanged(client):
    r = ok_run(client, "1 + 1")
    assert r.result["data"] == {"text/plain": "2"}


def test_custom_repr_methods(client):
    r = ok_run(client, """
class R:
    def __repr__(self): return 'R()'
    def _repr_html_(self): return '<b>r</b>'
    def _repr_markdown_(self): return '*r*'
    def _repr_svg_(self): return '<svg/>'
    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(256))
    def _repr_jpeg_(self): return None
    def _repr_latex_(self): return ('$r$', {'k': 1})
    def _repr_json_(self): return {'a': [1, 2]}
R()
""")
    d = r.result["data"]
    assert list(d)[0] == "text/plain" and d["text/plain"] == "R()"
    assert d["text/html"] == "<b>r</b>"
    assert d["text/markdown"] == "*r*"
    assert d["image/svg+xml"] == "<svg/>"
    assert base64.b64decode(d["image/png"]) == b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    assert "image/jpeg" not in d  # None means "not offered"
    assert d["text/latex"] == "$r$"
    assert d["application/json"] == '{"a": [1, 2]}'


def test_mimebundle_and_broken_repr(client):
    r = ok_run(client, """
class M:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/plain': 'mine', 'application/x-thing': 'T'}
    def _repr_html_(self): raise RuntimeError('broken html')
M()
""")
    d = r.result["data"]
    assert d["text/plain"].startswith("<__main__.M object")  # repr() wins
    assert d["application/x-thing"] == "T"
    assert "text/html" not in d
    assert b"_repr_html_ failed: RuntimeError: broken html" in r.stderr
    # classes are not asked for their reprs
    r = ok_run(client, "M")
    assert r.result["data"] == {"text/plain": "<class '__main__.M'>"}


def test_repr_error_still_an_error(client):
    r = client.execute("class B:\n    def __repr__(self): raise ValueError('no')\nB()")
    assert r.status == "error" and r.error["ename"] == "ValueError"


def test_silent_run_has_no_result(client):
    r = ok_run(client, "class H:\n    def _repr_html_(self): return 'h'\nH()", silent=True)
    assert r.result is None


def kinds_of(r):
    """The run's message types, consecutive stream messages as one: a
    print's text and its newline may come as two (the worker's flusher can
    run between the writes)."""
    kinds = [e["t"] for e in r.events]
    return [k for i, k in enumerate(kinds) if not (i and k == "stream" and kinds[i - 1] == "stream")]


def test_display_update_clear(client):
    r = ok_run(client, """
print('before')
h = display({'x': 1}, display_id='d1')
print('between')
update_display('new', display_id='d1')
clear_output(wait=True)
display('plain', metadata={'text/plain': {'n': 1, 'f': 1.5, 'l': [None, True]}})
h2 = display(1, display_id=True)
print(type(h).__name__, h.display_id, h2.display_id != 'True')
""")
    kinds = kinds_of(r)
    assert kinds[1:-1] == ["stream", "display", "stream", "display", "clear_output", "display",
                           "display", "stream"], kinds
    d = r.of("display")
    assert d[0]["data"] == {"text/plain": "{'x': 1}"}
    assert d[0]["display_id"] == "d1" and d[0]["update"] is False
    assert d[0]["metadata"] == {}
    assert d[1]["data"] == {"text/plain": "'new'"} and d[1]["update"] is True
    assert d[1]["display_id"] == "d1"
    assert r.of("clear_output")[0]["wait"] is True
    assert "display_id" not in d[2]
    assert d[2]["metadata"] == {"text/plain": {"n": 1, "f": 1.5, "l": [None, True]}}
    assert len(d[3]["display_id"]) == 32
    assert r.stdout.endswith(b"DisplayHandle d1 True\n")


def test_display_raw_bundle(client):
    r = ok_run(client, "display({'text/html': '<p>x</p>', 'image/png': b'\\x00\\x01'}, raw=True)")
    d = r.of("display")[0]["data"]
    assert d == {"text/plain": "", "text/html": "<p>x</p>", "image/png": "AAE="}


def test_display_outside_run_budget(client):
    """A huge entry is left out (with a note), not sent past the frame limit."""
    r = ok_run(client, "display({'text/html': 'x' * (9 << 20)}, raw=True)")
    assert r.of("display")[0]["data"] == {"text/plain": ""}
    assert b"over the size limit" in r.stderr


def test_bundle_sizes_counted_in_bytes(client):
    """Non-ASCII text is measured encoded: 3 Mi CJK characters are 9 MiB."""
    r = ok_run(client, "display({'text/html': '\u5b57' * (3 << 20), 'text/x': 'ok'}, raw=True)")
    assert r.of("display")[0]["data"] == {"text/plain": "", "text/x": "ok"}
    r = ok_run(client, "'\u5b57' * (3 << 20)")
    t = r.text
    assert t.endswith("... [truncated]") and len(t.encode()) <= 8 << 20


@pytest.mark.skipif(not HAVE_PANDAS, reason="pandas is not installed for /usr/bin/python3")
def test_dataframe_html(client):
    r = ok_run(client, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    d = r.result["data"]
    assert "<table" in d["text/html"] and "<td>x</td>" in d["text/html"]
    assert "a  b" in d["text/plain"]


@pytest.mark.skipif(not HAVE_IPYTHON, reason="IPython is not installed for /usr/bin/python3")
def test_ipython_display_routes_to_events(client):
    r = ok_run(client, """
from IPython.display import display, HTML, Markdown, clear_output, update_display
display(HTML('<i>x</i>'))
h = display(Markdown('# t'), display_id='m')
update_display(Markdown('# u'), display_id='m')
clear_output()
HTML('<p>last</p>')
""")
    d = r.of("display")
    assert d[0]["data"]["text/html"] == "<i>x</i>"
    assert d[1]["data"]["text/markdown"] == "# t" and d[1]["display_id"] == "m"
    assert d[2]["data"]["text/markdown"] == "# u" and d[2]["update"] is True
    assert len(r.of("clear_output")) == 1
    assert r.result["data"]["text/html"] == "<p>last</p>"


@pytest.mark.skipif(not HAVE_IPYTHON, reason="IPython is not installed for /usr/bin/python3")
def test_ipython_image(client):
    r = ok_run(client, """
import base64, zlib, struct
def chunk(k, d): return struct.pack('>I', len(d)) + k + d + struct.pack('>I', zlib.crc32(k + d))
png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 3, 2, 8, 0, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\\x00\\x00\\x00\\x00' * 2)) + chunk(b'IEND', b''))
from IPython.display import Image
Image(data=png)
""")
    assert png_size(r.result["data"]["image/png"]) == (3, 2)


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed for /usr/bin/python3")
def test_matplotlib_agg_and_figure_png(client):
    r = ok_run(client, """
import matplotlib, matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=50)
plt.plot([1, 3, 2])
print(matplotlib.get_backend())
""")
    assert r.stdout == b"agg\n"
    d = r.of("display")
    assert len(d) == 1
    w, h = png_size(d[0]["data"]["image/png"])
    assert 100 <= w <= 200 and 75 <= h <= 150, (w, h)
    assert d[0]["metadata"]["image/png"] == {"width": w, "height": h}
    assert d[0]["data"]["text/plain"].startswith("<Figure size 200x150")
    # figures are closed once sent: the next run sends nothing
    r = ok_run(client, "len(plt.get_fignums())")
    assert r.of("display") == [] and r.text == "0"


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed for /usr/bin/python3")
def test_figure_survives_error(client):
    r = client.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('drawn')\n1/0")
    assert r.status == "error" and r.error["ename"] == "ZeroDivisionError"
    kinds = kinds_of(r)
    # the figure after the error, as ipykernel sends it
    assert kinds == ["accepted", "stream", "error", "display", "done"], kinds
    png_size(r.of("display")[0]["data"]["image/png"])
    assert r.error["traceback"][-1] == "ZeroDivisionError: division by zero"


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed for /usr/bin/python3")
def test_plt_show_sends_at_once(client):
    r = ok_run(client, """
import matplotlib.pyplot as plt
plt.plot([1]); plt.show()
print('after show')
plt.figure(); plt.plot([2]); plt.figure(); _ = plt.plot([3])
""")
    kinds = kinds_of(r)
    assert kinds == ["accepted", "display", "stream", "display", "display", "done"], kinds


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed for /usr/bin/python3")
def test_figures_option_off(client):
    client.ok("ctx.create", name="nofig", figures=False)
    r = ok_run(client, "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.show()\n"
                       "len(plt.get_fignums())", ctx="nofig")
    assert r.of("display") == [] and r.text == "1"
    client.err("ctx.create", "bad_field", name="badfig", figures="no")


def test_top_level_await(client):
    r = ok_run(client, "import asyncio\nawait asyncio.sleep(0.01)\nx = await asyncio.sleep(0, 41)\nx + 1")
    assert r.text == "42"
    # one loop across runs: a task created in one run can be awaited later
    ok_run(client, "async def f(): return 'later'\nt = asyncio.ensure_future(f())")
    assert ok_run(client, "await t").text == "'later'"
    r = client.execute("async def g():\n    raise KeyError('k')\nawait g()")
    assert r.status == "error" and r.error["ename"] == "KeyError"
    tb = "\n".join(r.error["traceback"])
    assert "asyncio" not in tb and 'File "<cell-' in tb
    assert r.error["traceback"][1].startswith('  File "<cell-')
    # asyncio.run still works in code without top-level await
    assert ok_run(client, "async def h(): return 5\nasyncio.run(h())").text == "5"


def test_top_level_await_interrupt(client):
    ok_run(client, "import asyncio")  # not interrupted mid-import on a loaded machine
    rid = client.submit("await asyncio.sleep(30)")
    client.wait_event(rid, "accepted")
    import time
    time.sleep(0.3)
    assert client.ok("interrupt")["interrupted"] is True
    r = client.wait(rid)
    assert r.status == "interrupted", r
    assert ok_run(client, "await asyncio.sleep(0, 'alive')").text == "'alive'"


# ---- input() -------------------------------------------------------------------


def test_input_refused_without_allow_stdin(client):
    r = client.execute("input('name? ')")
    assert r.status == "error" and r.error["ename"] == "EOFError", r
    assert r.of("input.request") == []
    assert "<ctxd-worker>" not in "\n".join(r.error["traceback"])
    r = client.execute("import getpass\ngetpass.getpass()")
    assert r.error["ename"] == "EOFError"
    client.err("input.reply", "no_input", value="x")


def test_input_answered(client):
    rid = client.submit("print('before')\na = input('name? ')\nimport getpass\n"
                        "b = getpass.getpass()\nc = input()\na, b, c", allow_stdin=True)
    answers = iter(("bob", "s3cret", "é"))
    events = []
    while not events or events[-1]["t"] not in ("done", "err"):
        events.append(client.next_for(rid))
        if events[-1]["t"] == "input.request":
            assert set(client.ok("input.reply", value=next(answers))) == {"v", "t", "re"}
    r = Run(rid, events)
    check_run(r)
    prompts = r.of("input.request")
    assert r.status == "ok", r
    assert [(p["prompt"], p["password"]) for p in prompts] == [
        ("name? ", False), ("Password: ", True), ("", False)]
    kinds = [e["t"] for e in r.events]
    assert kinds.index("stream") < kinds.index("input.request")
    assert r.text == "('bob', 's3cret', 'é')"
    client.err("input.reply", "no_input", value="late")
    client.err("input.reply", "unknown_context", ctx="nope", value="x")


def test_input_interrupted_and_timeout(client):
    rid = client.submit("input('wait')", allow_stdin=True)
    client.wait_event(rid, "input.request")
    assert client.ok("interrupt")["interrupted"] is True
    r = client.wait(rid)
    assert r.status == "interrupted" and r.error["ename"] == "KeyboardInterrupt", r
    r = client.execute("input('again')", allow_stdin=True, timeout=0.5)
    assert r.status == "timeout", r
    # the context is fine, and a reply now finds no one waiting
    client.err("input.reply", "no_input", value="x")
    assert client.execute("1 + 2").text == "3"


# ---- artifacts -----------------------------------------------------------------


def test_artifacts_listed_once(client, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "old.txt").write_text("old")
    client.ok("ctx.create", name="art", cwd=str(work))
    r = ok_run(client, "open('new.csv', 'w').write('a,b\\n')\nimport os\n"
                       "os.makedirs('sub/__pycache__', exist_ok=True)\n"
                       "open('sub/plot.png', 'wb').write(b'x' * 10)\n"
                       "open('sub/__pycache__/skip.pyc', 'wb').write(b'')", ctx="art", artifacts=True)
    arts = sorted(r.done["artifacts"], key=lambda a: a["path"])
    assert arts == [{"path": "new.csv", "size": 4, "type": "text/csv"},
                    {"path": "sub/plot.png", "size": 10, "type": "image/png"}], arts
    # nothing changed: no artifacts field at all
    r = ok_run(client, "x = 1", ctx="art", artifacts=True)
    assert "artifacts" not in r.done
    # changed again: listed again, and only that file
    r = ok_run(client, "open('new.csv', 'a').write('1,2\\n')", ctx="art", artifacts=True)
    assert r.done["artifacts"] == [{"path": "new.csv", "size": 8, "type": "text/csv"}]
    # a failing run still reports what it wrote; silent runs report nothing
    r = client.execute("open('e.bin', 'wb').write(b'1')\n1/0", ctx="art", artifacts=True)
    assert r.status == "error" and r.done["artifacts"][0]["path"] == "e.bin"
    r = ok_run(client, "open('s.txt', 'w').write('s')", ctx="art", silent=True, artifacts=True)
    assert "artifacts" not in r.done
    # without `artifacts: true` nothing is scanned or listed
    r = ok_run(client, "open('n.txt', 'w').write('n')", ctx="art")
    assert "artifacts" not in r.done


def test_input_declined_raises_eoferror(client):
    # input.reply {eof: true}: the client cannot answer; the code sees
    # EOFError (and can go on asking).
    rid = client.submit("try:\n    input('first? ')\nexcept EOFError as e:\n    x = str(e)\n"
                        "x, input('second? ')", allow_stdin=True)
    events = []
    while not events or events[-1]["t"] not in ("done", "err"):
        events.append(client.next_for(rid))
        if events[-1]["t"] == "input.request" and events[-1]["prompt"] == "first? ":
            client.err("input.reply", "bad_field")  # neither value nor eof
            client.ok("input.reply", eof=True)
        elif events[-1]["t"] == "input.request":
            client.ok("input.reply", value="two")
    r = Run(rid, events)
    check_run(r)
    assert r.status == "ok", r
    assert [p["prompt"] for p in r.of("input.request")] == ["first? ", "second? "]
    assert r.text == "('the client declined to answer input()', 'two')", r
    rid = client.submit("input()", allow_stdin=True)
    client.wait_event(rid, "input.request")
    client.ok("input.reply", eof=True, value="ignored")
    r = client.wait(rid)
    assert r.status == "error" and r.error["ename"] == "EOFError", r
