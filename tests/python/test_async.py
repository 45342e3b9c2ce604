"""The asyncio twin (ctxd.AsyncClient) against a real daemon. Each test runs
its own event loop with asyncio.run (no pytest plugin needed)."""

import asyncio

import pytest

import ctxd
from conftest import WAIT


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT * 2))


def test_execute_with_coroutine_callbacks(endpoint):
    async def main():
        seen = []

        async def on_stdout(text):
            await asyncio.sleep(0)
            seen.append(text)

        async with ctxd.AsyncClient(endpoint) as c:
            assert c.hello_info.server == "ctxd"
            r = await c.execute("x = 2\nprint('a')\nx * 21", on_stdout=on_stdout)
            assert r.status == "ok" and r.result == "42" and seen == ["a\n"]
            r = await c.execute("x")
            assert r.result == "2"

    run(main())


def test_callbacks_fire_while_the_code_runs(endpoint, tmp_path):
    flag = tmp_path / "flag"

    async def main():
        async def on_stdout(text):
            if "ready" in text:
                flag.touch()

        c = ctxd.AsyncClient(endpoint)  # connects on first use
        try:
            r = await c.execute(
                "import os, time\nprint('ready', flush=True)\n"
                f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\nprint('released')",
                on_stdout=on_stdout, timeout=WAIT)
            assert r.status == "ok" and r.stdout == "ready\nreleased\n"
        finally:
            await c.close()

    run(main())


def test_two_contexts_concurrently(endpoint, tmp_path):
    from test_native import handshake_code

    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            await c.create_context("p1")
            await c.create_context("p2")
            m1, m2 = tmp_path / "m1", tmp_path / "m2"
            a, b = await asyncio.gather(
                c.execute(handshake_code(m1, m2, "A"), ctx="p1", timeout=WAIT),
                c.execute(handshake_code(m2, m1, "B"), ctx="p2", timeout=WAIT))
            assert (a.status, a.stdout) == ("ok", "A:start\nA:end\n")
            assert (b.status, b.stdout) == ("ok", "B:start\nB:end\n")

    run(main())


def test_error_timeout_and_refusal(endpoint):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            errors = []
            r = await c.execute("raise KeyError('k')", on_error=errors.append)
            assert r.status == "error" and r.error.ename == "KeyError" and errors == [r.error]
            r = await c.execute("kept = 1\nwhile True:\n    pass", timeout=0.5)
            assert r.status == "timeout" and not r.state_lost
            assert (await c.execute("kept")).result == "1"
            with pytest.raises(ctxd.NotFoundError):
                await c.execute("1", ctx="missing")

    run(main())


def test_interrupt_from_an_async_callback(endpoint):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            got = []

            async def on_stdout(text):
                got.append(await c.interrupt())

            r = await c.execute("print('go', flush=True)\nwhile True:\n    pass",
                                on_stdout=on_stdout, timeout=WAIT)
            assert r.status == "interrupted" and got == [True]
            run_ = await c.submit("import time\nwhile True:\n    time.sleep(0.01)", timeout=WAIT)
            with pytest.raises(ctxd.CtxdTimeoutError):
                await run_.wait(timeout=0.2)
            await run_.interrupt()
            assert (await run_.wait()).status == "interrupted"

    run(main())


def test_cancelling_the_waiting_task_interrupts_the_run(endpoint):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            started = asyncio.Event()
            task = asyncio.ensure_future(c.execute(
                "spun = 0\nprint('go', flush=True)\nwhile True:\n    spun += 1",
                on_stdout=lambda s: started.set(), timeout=WAIT))
            await asyncio.wait_for(started.wait(), WAIT)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The run was interrupted: the context answers the next run.
            r = await c.execute("spun >= 0", timeout=WAIT)
            assert r.status == "ok" and r.result == "True"

    run(main())


def test_contexts(endpoint, tmp_path):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            info = await c.create_context("w", cwd=str(tmp_path))
            assert info.cwd == str(tmp_path)
            await c.execute("v = 5", ctx=info)
            assert "w" in [i.name for i in await c.list_contexts()]
            assert (await c.context_info("w")).execution_count == 1
            fresh = await c.restart_context("w")
            assert fresh.incarnation == 2
            assert (await c.execute("v", ctx="w")).error.ename == "NameError"
            await c.delete_context("w")
            assert "w" not in [i.name for i in await c.list_contexts()]

    run(main())


def test_unreachable(tmp_path):
    async def main():
        with pytest.raises(ctxd.UnreachableError):
            await ctxd.AsyncClient(f"ipc://{tmp_path}/none.sock").connect()

    run(main())
