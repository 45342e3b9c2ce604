"""The package's surface for rich output: Result MIME attributes, display
and clear_output callbacks, input callbacks, artifacts, figures option."""

import asyncio
import base64
import subprocess

import pytest

import ctxd

HAVE_MPL = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode == 0


def test_result_mime_attributes(client):
    r = client.execute("""
class R:
    def _repr_html_(self): return '<b>r</b>'
    def _repr_png_(self): return b'\\x89PNG'
    def _repr_json_(self): return {'k': [1]}
R()
""")
    assert r.ok, r
    m = r.main_result
    assert m.is_main_result and m.html == "<b>r</b>" and m.json == {"k": [1]}
    assert m.png == base64.b64encode(b"\x89PNG").decode() and m.image() == b"\x89PNG"
    assert m.markdown is None and m.jpeg is None
    assert set(m.formats()) == {"text/html", "image/png", "application/json"}
    assert r.results == [m] and r.data == m.data


def test_display_callbacks(client):
    seen = []
    r = client.execute("print('a')\ndisplay(1, display_id='x')\nupdate_display(2, display_id='x')\n"
                       "clear_output(wait=True)",
                       on_display=lambda d: seen.append(("display", d.text, d.display_id, d.update)),
                       on_clear_output=lambda w: seen.append(("clear", w)),
                       on_stdout=lambda t: seen.append(("out", t)))
    assert r.ok, r
    assert seen == [("out", "a\n"), ("display", "1", "x", False), ("display", "2", "x", True),
                    ("clear", True)]
    assert [d.text for d in r.displays] == ["1", "2"]
    assert not r.displays[0].is_main_result


def test_input_callback(client):
    prompts = []

    def answer(prompt, password):
        prompts.append((prompt, password))
        return "pw" if password else "ann"

    r = client.execute("import getpass\ninput('who? '), getpass.getpass()", on_input=answer)
    assert r.ok, r
    assert r.result == "('ann', 'pw')"
    assert prompts == [("who? ", False), ("Password: ", True)]
    r = client.execute("input()")
    assert r.status == "error" and r.error.ename == "EOFError"


def test_async_input_and_display(endpoint):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            shown = []

            async def answer(prompt, password):
                return prompt.upper()

            r = await c.execute("display('d')\ninput('abc')", on_input=answer,
                                on_display=lambda d: shown.append(d.text))
            return r, shown

    r, shown = asyncio.run(main())
    assert r.ok and r.result == "'ABC'" and shown == ["'d'"]


def test_artifacts(client, tmp_path):
    ctx = client.create_context(cwd=str(tmp_path))
    r = client.execute("open('out.json', 'w').write('{}')", ctx, artifacts=True)
    assert r.artifacts == [ctxd.Artifact("out.json", 2, "application/json")]
    assert client.execute("1", ctx, artifacts=True).artifacts == []
    # not asked for: not scanned
    assert client.execute("open('b.txt', 'w').write('b')", ctx).artifacts == []


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib is not installed for /usr/bin/python3")
def test_figures_and_option(client):
    r = client.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1/0")
    assert r.status == "error"
    (fig,) = r.displays
    assert fig.image()[:8] == b"\x89PNG\r\n\x1a\n"
    ctx = client.create_context(figures=False)
    r = client.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", ctx)
    assert r.ok and r.displays == []


def test_put_and_get_file(client, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    ctx = client.create_context(cwd=str(work))
    data = bytes(range(256)) * 40000  # ~10 MB: three chunks
    assert client.put_file(ctx, "data.bin", data) == len(data)
    assert client.get_file(ctx, "data.bin") == data
    src = tmp_path / "src.txt"
    src.write_text("from a file")
    client.put_file(ctx, "sub.txt", str(src))
    out = tmp_path / "out.txt"
    assert client.get_file(ctx, "sub.txt", str(out)) == len("from a file")
    assert out.read_text() == "from a file"
    assert client.put_file(ctx, "empty", b"") == 0 and client.get_file(ctx, "empty") == b""
    with pytest.raises(ctxd.RefusedError) as e:
        client.get_file(ctx, "../src.txt")
    assert e.value.code == "bad_path"
