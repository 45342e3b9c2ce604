"""The Daytona-compatible surface: code written for Daytona's
CodeInterpreter (its documented example included) runs unchanged."""

import asyncio
import base64
import datetime
import json

import pytest

import ctxd
from ctxd.daytona import (
    AsyncCodeInterpreter,
    CodeInterpreter,
    DaytonaError,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    ExecutionError,
    ExecutionResult,
    InterpreterContext,
    OutputMessage,
)
from conftest import WAIT


@pytest.fixture
def ci(endpoint):
    c = CodeInterpreter(endpoint=endpoint)
    yield c
    c.close()


def test_daytona_docs_example(ci):
    """Daytona's run_code example, verbatim apart from the sleep and the
    print to a list."""
    out, err, errs = [], [], []

    def handle_stdout(msg: OutputMessage):
        out.append(msg.output)

    def handle_stderr(msg: OutputMessage):
        err.append(msg.output)

    def handle_error(e: ExecutionError):
        errs.append(f"ERROR: {e.name}: {e.value}")

    code = '''
import sys
import time
for i in range(5):
    print(i)
    time.sleep(0.01)
sys.stderr.write("Counting done!")
'''
    result = ci.run_code(code=code, on_stdout=handle_stdout, on_stderr=handle_stderr,
                         on_error=handle_error, timeout=10)
    assert isinstance(result, ExecutionResult)
    assert result.stdout == "0\n1\n2\n3\n4\n" == "".join(out)
    assert result.stderr == "Counting done!" == "".join(err)
    assert result.error is None and errs == []


def test_default_context_is_shared(endpoint, ci):
    ci.run_code("shared = 'from the first client'")
    with CodeInterpreter(endpoint=endpoint) as other:
        assert other.run_code("print(shared)").stdout == "from the first client\n"


def test_callbacks_fire_while_the_code_runs(ci, tmp_path):
    flag = tmp_path / "flag"

    def on_stdout(msg):
        assert isinstance(msg, OutputMessage)
        if "ready" in msg.output:
            flag.touch()

    r = ci.run_code("import os, time\nprint('ready', flush=True)\n"
                    f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\nprint('ok')",
                    on_stdout=on_stdout, timeout=WAIT)
    assert r.stdout == "ready\nok\n"


def test_error(ci):
    seen = []
    r = ci.run_code("x = 1\ny = x / 0", on_error=seen.append)
    assert isinstance(r.error, ExecutionError)
    assert r.error.name == "ZeroDivisionError" and r.error.value == "division by zero"
    assert isinstance(r.error.traceback, str)
    assert r.error.traceback.startswith("Traceback") and "line 2" in r.error.traceback
    assert seen == [r.error]
    assert ci.run_code("print(x)").stdout == "1\n"


def test_timeout_raises_and_keeps_the_context(ci):
    out = []
    with pytest.raises(DaytonaTimeoutError) as e:
        ci.run_code("kept = 7\nprint('partial', flush=True)\nwhile True:\n    pass",
                    on_stdout=lambda m: out.append(m.output), timeout=1)
    assert isinstance(e.value, DaytonaError) and isinstance(e.value, TimeoutError)
    assert "timed out" in str(e.value)
    assert out == ["partial\n"]
    assert ci.run_code("print(kept)").stdout == "7\n"
    with pytest.raises(DaytonaError):
        ci.run_code("1", timeout=-1)
    assert ci.run_code("print('no timeout')", timeout=0).stdout == "no timeout\n"


def test_contexts(ci, tmp_path):
    ctx = ci.create_context(cwd=str(tmp_path))
    assert isinstance(ctx, InterpreterContext)
    assert ctx.id and ctx.cwd == str(tmp_path) and ctx.language == "python" and ctx.active
    assert isinstance(ctx.created_at, str)  # a str, as in Daytona
    assert datetime.datetime.fromisoformat(ctx.created_at.replace("Z", "+00:00")).tzinfo
    ci.run_code("x = 100", context=ctx)
    assert ci.run_code("print(x)", context=ctx).stdout == "100\n"
    r = ci.run_code("print(x)")  # not in the default context
    assert r.error is not None and r.error.name == "NameError"
    assert ci.run_code("import os\nprint(os.getcwd())", context=ctx).stdout == f"{tmp_path}\n"
    ids = [c.id for c in ci.list_contexts()]
    assert ctx.id in ids and "default" not in ids
    ci.delete_context(ctx)
    assert ctx.id not in [c.id for c in ci.list_contexts()]
    with pytest.raises(DaytonaError) as e:
        ci.delete_context(ctx)
    assert "Failed to delete interpreter context" in str(e.value)
    with pytest.raises(DaytonaError):
        ci.run_code("1", context=ctx)


def test_envs(ci):
    r = ci.run_code("import os\nprint(os.environ['GREETING'])", envs={"GREETING": "hi"})
    assert r.stdout == "hi\n"


def test_worker_death_is_an_execution_error(ci):
    seen = []
    r = ci.run_code("import os\nos._exit(5)", on_error=seen.append)
    assert r.error.name == "WorkerProcessError" and "5" in r.error.value and seen == [r.error]
    assert ci.run_code("print('fresh')").stdout == "fresh\n"


def test_unreachable(tmp_path):
    with pytest.raises(DaytonaError):
        CodeInterpreter(endpoint=f"ipc://{tmp_path}/none.sock")


def test_async_code_interpreter(endpoint):
    async def main():
        async with AsyncCodeInterpreter(endpoint=endpoint) as ci:
            out = []

            async def on_stdout(m):
                out.append(m.output)

            r = await ci.run_code("print('a')", on_stdout=on_stdout)
            assert r.stdout == "a\n" and out == ["a\n"]
            ctx = await ci.create_context()
            await ci.run_code("z = 3", context=ctx)
            assert (await ci.run_code("print(z)", context=ctx)).stdout == "3\n"
            assert [c.id for c in await ci.list_contexts()] == [ctx.id]
            with pytest.raises(DaytonaTimeoutError):
                await ci.run_code("while True:\n    pass", context=ctx, timeout=1)
            await ci.delete_context(ctx)

    asyncio.run(asyncio.wait_for(main(), WAIT))


# ---- what Daytona users' code touches beyond run_code ------------------------------------


def test_models_dump_like_pydantic(ci):
    r = ci.run_code("print('hi')\nraise KeyError('k')")
    d = r.model_dump()
    assert d["stdout"] == "hi\n" and d["stderr"] == ""
    assert d["error"]["name"] == "KeyError" and d["error"]["value"] == "'k'"
    assert "Traceback" in d["error"]["traceback"]
    j = json.loads(r.model_dump_json())
    assert j["error"] == d["error"] and j["stdout"] == "hi\n"
    # Daytona's fields only: ctxd's extras when asked for
    assert d.keys() == {"stdout", "stderr", "error"}
    assert r.model_dump(include={"stdout", "result"}) == {"stdout": "hi\n", "result": None}
    assert r.model_dump(exclude={"stderr", "error"}) == {"stdout": "hi\n"}
    assert r.error.model_dump() == d["error"]
    assert OutputMessage("x").model_dump() == {"output": "x"}
    ctx = ci.create_context()
    try:
        cd = json.loads(ctx.model_dump_json(indent=2))
        assert cd["id"] == ctx.id and cd["language"] == "python"
        assert cd["created_at"] == ctx.created_at and isinstance(cd["created_at"], str)
    finally:
        ci.delete_context(ctx)


def test_errors_carry_status_and_error_code(ci):
    with pytest.raises(DaytonaNotFoundError) as e:
        ci.run_code("1", context=InterpreterContext(id="no-such-context"))
    err = e.value
    assert isinstance(err, DaytonaError) and isinstance(err, ctxd.NotFoundError)
    assert err.status_code == 404 and err.error_code == "unknown_context"
    assert err.headers == {} and str(err).startswith("Failed to run code: ")
    with pytest.raises(DaytonaError) as e:
        ci.run_code("1", timeout=-1)
    assert e.value.status_code is None and e.value.headers == {}


@pytest.mark.parametrize("code", ["import sys\nprint('a')\nsys.exit(0)\nprint('b')",
                                  "import sys\nprint('a')\nsys.exit()",
                                  "print('a')\nraise SystemExit(None)"])
def test_sys_exit_zero_ends_the_run_normally(ci, code):
    errors = []
    r = ci.run_code(code, on_error=errors.append)
    assert r.error is None and errors == [] and r.stdout == "a\n"


def test_sys_exit_nonzero_is_an_error(ci):
    r = ci.run_code("import sys\nsys.exit(3)")
    assert r.error is not None and r.error.name == "SystemExit" and r.error.value == "3"


def test_user_keyboard_interrupt_maps_as_daytona(ci):
    ci.run_code("kept = 1")
    with pytest.raises(DaytonaTimeoutError) as e:
        ci.run_code("raise KeyboardInterrupt")
    assert e.value.status_code == 408
    assert ci.run_code("print(kept)").stdout == "1\n"


def test_each_interpreter_can_own_its_default_context(endpoint):
    a = CodeInterpreter(endpoint=endpoint, own_default_context=True)
    b = CodeInterpreter(endpoint=endpoint, own_default_context=True)
    shared = CodeInterpreter(endpoint=endpoint)
    try:
        a.run_code("who = 'a'")
        assert a.list_contexts() == []  # its own default is not listed
        b.run_code("who = 'b'")
        shared.run_code("who = 'shared'")
        assert a.run_code("print(who)").stdout == "a\n"
        assert b.run_code("print(who)").stdout == "b\n"
        assert shared.run_code("print(who)").stdout == "shared\n"
        mine = a._default
    finally:
        a.close()
        b.close()
        shared.close()
    with ctxd.Client(endpoint) as c:
        assert mine not in {i.name for i in c.list_contexts()}


def test_async_own_default_context(endpoint):
    async def main():
        async with AsyncCodeInterpreter(endpoint=endpoint, own_default_context=True) as a:
            await a.run_code("z = 5")
            r = await a.run_code("print(z)")
            assert r.stdout == "5\n"
            r = await a.run_code("import sys\nsys.exit(0)")
            assert r.error is None
        async with AsyncCodeInterpreter(endpoint=endpoint) as shared:
            r = await shared.run_code("print(z)")
            assert r.error is not None and r.error.name == "NameError"

    asyncio.run(main())


def test_displays_and_figures_reachable(ci):
    r = ci.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                    "display({'k': 1})\nprint('x')")
    assert r.stdout == "x\n" and r.error is None
    assert [d.text for d in r.displays][0] == "{'k': 1}"
    (fig,) = r.charts
    assert base64.b64decode(fig.png)[:4] == b"\x89PNG"
    assert fig.model_dump()["data"]["image/png"] == fig.png
    dumped = r.model_dump(include={"displays"})["displays"]
    assert [x["data"]["image/png"] for x in dumped if "image/png" in x["data"]] == [fig.png]
