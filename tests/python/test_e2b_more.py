"""ctxd.e2b, the parts of E2B's API past run_code: Sandbox.connect from
another process, sandbox.commands.run, kill() during a run, files.write of
a str, images that PIL saves, E2B's pie angles and no chart for an empty
figure. Against a real daemon."""

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ctxd.e2b import (
    AsyncSandbox,
    CommandExitException,
    CommandResult,
    FileType,
    NotFoundException,
    PieChart,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    TimeoutException,
    WriteEntry,
)

ROOT = Path(__file__).resolve().parents[2]
KILLED = "sandbox was killed while the request was in progress"


@pytest.fixture
def sandbox(endpoint):
    sb = Sandbox(endpoint=endpoint)
    yield sb
    sb.kill()


def other_process(code, endpoint):
    env = dict(os.environ, CTXD_ENDPOINT=endpoint,
               PYTHONPATH=os.pathsep.join([str(ROOT / "client" / "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


# ---- connect ----------------------------------------------------------------------------


def test_connect_from_another_process(sandbox, endpoint, tmp_path):
    sandbox.run_code("shared = 'from the creator'")
    ctx = sandbox.create_code_context(cwd=str(tmp_path))
    sandbox.run_code("in_ctx = 7", context=ctx)
    p = other_process(f'''
        from ctxd.e2b import Sandbox
        sbx = Sandbox.connect({sandbox.sandbox_id!r})
        assert sbx.sandbox_id == {sandbox.sandbox_id!r}
        print(sbx.run_code("shared").text)
        print([c.id for c in sbx.list_code_contexts()] == [{sandbox.sandbox_id!r}, {ctx.id!r}])
        print(sbx.run_code("in_ctx", context=sbx.list_code_contexts()[1]).text)
        sbx.run_code("back = 'from the second process'")
        sbx.files.write("note.txt", "written by the second")
    ''', endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["from the creator", "True", "7"]
    # the second process left the sandbox alive, its state seen here
    assert sandbox.run_code("back").text == "from the second process"
    assert sandbox.files.read("note.txt") == "written by the second"


def test_connect_kill_ends_the_sandbox(endpoint):
    sb = Sandbox(endpoint=endpoint)
    p = other_process(f'''
        from ctxd.e2b import Sandbox
        Sandbox.connect({sb.sandbox_id!r}).kill()
    ''', endpoint)
    assert p.returncode == 0, p.stderr
    with pytest.raises(NotFoundException):
        sb.run_code("1")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sb.sandbox_id, endpoint=endpoint)
    sb.kill()


def test_connect_async(endpoint):
    async def main():
        sb = await AsyncSandbox.create(endpoint=endpoint)
        try:
            # E2B's test_async_reconnect, then state across the two
            sandbox2 = await AsyncSandbox.connect(sb.sandbox_id, endpoint=endpoint)
            result = await sandbox2.run_code("x =1; x")
            assert result.text == "1"
            assert (await sb.run_code("x + 1")).text == "2"
            with pytest.raises(SandboxNotFoundException):
                await AsyncSandbox.connect("e2b-no-such-sandbox", endpoint=endpoint)
        finally:
            await sb.kill()

    asyncio.run(main())


# ---- commands ---------------------------------------------------------------------------


def test_commands_run(sandbox, tmp_path):
    r = sandbox.commands.run('echo "Hello from E2B!"; echo oops >&2')
    assert isinstance(r, CommandResult)
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("Hello from E2B!\n", "oops\n", 0, None)
    # a login bash, in the sandbox's directory, with envs and cwd
    r = sandbox.commands.run('echo "$0 $X" && pwd && shopt -q login_shell && echo login',
                             envs={"X": "set"})
    assert r.stdout.splitlines() == ["/bin/bash set", sandbox.run_code(
        "import os\nos.getcwd()").text, "login"]
    assert sandbox.commands.run("pwd", cwd=str(tmp_path)).stdout == f"{tmp_path}\n"
    # what the sandbox's files hold, commands see
    sandbox.files.write("f.txt", "content")
    assert sandbox.commands.run("cat f.txt").stdout == "content"
    # commands do not touch the interpreter's globals or count
    n = sandbox.run_code("1").execution_count
    sandbox.commands.run("true")
    assert sandbox.run_code("1").execution_count == n + 1
    assert sandbox.run_code("A").error.name == "NameError"


def test_commands_nonzero_exit_raises_command_exit_exception(sandbox):
    with pytest.raises(CommandExitException) as exc:
        sandbox.commands.run("echo partial; echo bad >&2; exit 3")
    e = exc.value
    assert isinstance(e, SandboxException) and isinstance(e, CommandResult)
    assert (e.exit_code, e.stdout, e.stderr) == (3, "partial\n", "bad\n")
    assert str(e) == "Command exited with code 3 and error:\nbad\n"


def test_commands_stream_and_time_out(sandbox):
    seen = []
    r = sandbox.commands.run("echo a; sleep 0.3; echo b >&2; sleep 0.3; echo c",
                             on_stdout=lambda s: seen.append(("out", s, time.monotonic())),
                             on_stderr=lambda s: seen.append(("err", s, time.monotonic())))
    assert [(k, s) for k, s, _ in seen] == [("out", "a\n"), ("err", "b\n"), ("out", "c\n")]
    assert seen[2][2] - seen[0][2] > 0.4  # each chunk as it came, not at the end
    assert r.stdout == "a\nc\n"
    t0 = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 31.5 & sleep 31.5; wait", timeout=1)
    assert time.monotonic() - t0 < 15
    # the command's process group was killed; the sandbox goes on
    assert sandbox.commands.run("pgrep -f '^sleep 31.5' || echo none").stdout == "none\n"
    assert sandbox.run_code("6 * 7").text == "42"


def test_commands_background_handle(sandbox):
    h = sandbox.commands.run("sleep 0.2; echo done", background=True)
    assert h.wait().stdout == "done\n"
    h = sandbox.commands.run("sleep 30", background=True)
    time.sleep(0.3)
    assert h.kill()
    with pytest.raises(CommandExitException) as exc:
        h.wait()
    assert exc.value.error == "signal: killed"


def test_async_commands(endpoint):
    async def main():
        sb = await AsyncSandbox.create(endpoint=endpoint)
        try:
            out = []

            async def on_stdout(s):
                await asyncio.sleep(0)
                out.append(s)
            r = await sb.commands.run("echo one; echo two", on_stdout=on_stdout)
            assert r.stdout == "one\ntwo\n" and "".join(out) == "one\ntwo\n"
            with pytest.raises(CommandExitException) as exc:
                await sb.commands.run("exit 5")
            assert exc.value.exit_code == 5
        finally:
            await sb.kill()

    asyncio.run(main())


# ---- kill during a run ------------------------------------------------------------------


def test_kill_during_run_code_raises_what_e2b_raises(endpoint):
    sb = Sandbox(endpoint=endpoint)
    out = {}

    def run():
        try:
            sb.run_code("import time; time.sleep(300)", timeout=300)
        except BaseException as e:  # noqa: BLE001 (the test looks at it)
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    sb.kill()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(out.get("error"), TimeoutException), out
    assert KILLED in str(out["error"])


def test_kill_during_a_command_raises_what_e2b_raises(endpoint):
    sb = Sandbox(endpoint=endpoint)
    out = {}

    def run():
        try:
            sb.commands.run("sleep 300", timeout=300)
        except BaseException as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    sb.kill()
    t.join(30)
    assert isinstance(out.get("error"), TimeoutException) and KILLED in str(out["error"]), out


def test_async_kill_during_run_code(endpoint):
    # E2B's test_async_killed, against ctxd
    async def main():
        async_sandbox = await AsyncSandbox.create(endpoint=endpoint)
        execution = asyncio.create_task(
            async_sandbox.run_code("import time; time.sleep(300)", timeout=300))
        await asyncio.sleep(1)
        await async_sandbox.kill()
        with pytest.raises(TimeoutException, match=KILLED):
            await execution

    asyncio.run(main())


# ---- files ------------------------------------------------------------------------------


def test_files_write_str(sandbox, tmp_path):
    # E2B's test_write_text_file, with ctxd's paths
    filename = "test_write.txt"
    content = "This is a test file."
    info = sandbox.files.write(filename, content)
    assert info.path == os.path.join(sandbox.run_code("import os\nos.getcwd()").text, filename)
    assert info.type == FileType.FILE and info.type == "file"
    assert sandbox.files.exists(filename)
    assert sandbox.files.read(filename) == content
    assert sandbox.run_code(f"open({filename!r}).read()").text == content
    entries = {e.name: e.type for e in sandbox.files.list(".")}
    assert entries[filename] is FileType.FILE
    sandbox.files.make_dir("d")
    assert {e.name: e.type for e in sandbox.files.list(".")}["d"] == FileType.DIR
    infos = sandbox.files.write_files([WriteEntry(path="w1.txt", data="one"),
                                       WriteEntry(path=str(tmp_path / "w2.txt"), data="two")])
    assert [i.name for i in infos] == ["w1.txt", "w2.txt"]
    assert sandbox.files.read("w1.txt") == "one" and (tmp_path / "w2.txt").read_text() == "two"


# ---- images and charts ------------------------------------------------------------------


def _has_pil():
    return subprocess.run([sys.executable, "-c", "import PIL"]).returncode == 0


@pytest.mark.skipif(not _has_pil(), reason="PIL is not installed for this Python")
def test_pil_image_save_displays_the_image(sandbox):
    # E2B's test_get_image_on_save (without numpy)
    code = textwrap.dedent("""
        from PIL import Image
        image = Image.new('RGBA', (16, 16), (255, 0, 0, 255))
        image.save("test.png")
        print("Image saved.")
    """)
    e = sandbox.run_code(code)
    assert e.error is None and e.logs.stdout == ["Image saved.\n"]
    import base64
    png = base64.b64decode(e.results[0].png)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and not e.results[0].is_main_result
    assert sandbox.files.read("test.png", format="bytes")[:8] == b"\x89PNG\r\n\x1a\n"
    # a file object is not a display (E2B's rule: a path str only); show() is
    e = sandbox.run_code("import io\nimage.save(io.BytesIO(), 'PNG')")
    assert e.results == []
    assert sandbox.run_code("image.show()").results[0].png


def test_pie_angles_rounded_as_e2b(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.pie([1, 2, 3.3], labels=['a', 'b', 'c'])\nplt.show()")
    c = [r.chart for r in e.results if r.chart][0]
    assert isinstance(c, PieChart)
    # 360 * share, to 8 - exponent significant digits, as E2B's dynamic_round
    assert [p.angle for p in c.elements] == [57.14285, 114.286, 188.571]


def test_an_empty_figure_gives_no_chart(sandbox):
    for code in ("fig, ax = plt.subplots()\nplt.show()",
                 "plt.figure()\nplt.title('nothing drawn')\nplt.show()",
                 "fig, (a, b) = plt.subplots(1, 2)\nplt.show()"):
        e = sandbox.run_code("import matplotlib.pyplot as plt\n" + code)
        assert e.error is None
        assert [r.png is not None for r in e.results] == [True], code
        assert [r.chart for r in e.results] == [None], code
        assert "chart" not in e.results[0].formats()
    # a figure with data still charts
    e = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    assert e.results[0].chart is not None


def test_kill_from_another_process_during_run_code(endpoint):
    sb = Sandbox(endpoint=endpoint)
    out = {}

    def run():
        try:
            sb.run_code("import time; time.sleep(300)", timeout=300)
        except BaseException as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    p = other_process(f'''
        from ctxd.e2b import Sandbox
        Sandbox.connect({sb.sandbox_id!r}).kill()
    ''', endpoint)
    assert p.returncode == 0, p.stderr
    t.join(30)
    assert isinstance(out.get("error"), TimeoutException) and KILLED in str(out["error"]), out
    sb.kill()


def test_kill_by_sandbox_id(endpoint):
    # E2B's static form: Sandbox.kill(sandbox_id)
    sb = Sandbox(endpoint=endpoint)
    sb.run_code("x = 1")
    assert Sandbox.kill(sb.sandbox_id, endpoint=endpoint) is True
    assert Sandbox.kill(sb.sandbox_id, endpoint=endpoint) is False
    with pytest.raises(NotFoundException):
        sb.run_code("x")
    sb.kill()

    async def main():
        a = await AsyncSandbox.create(endpoint=endpoint)
        assert await AsyncSandbox.kill(a.sandbox_id, endpoint=endpoint) is True
        assert await AsyncSandbox.kill(a.sandbox_id, endpoint=endpoint) is False
        await a.kill()

    asyncio.run(main())
