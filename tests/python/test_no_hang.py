"""Every request ends, in the blocking and the asyncio client: a request
over the daemon's max_request_bytes is refused locally (TooLargeError) or,
when sent anyway, answered `err too_large` with its id; a message so large
that ZeroMQ drops the connection ends every request in flight on it with
LostError, and the client goes on over the new connection. Waits are
bounded (WAIT): a hang fails the test."""

import asyncio

import pytest

import ctxd
from ctxd.aio import AsyncClient
from conftest import Daemon, WAIT

MiB = 1024 * 1024
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(3600)"


@pytest.fixture
def small(tmp_path):
    """A daemon taking messages of at most 1 MiB (ZeroMQ drops a
    connection carrying one over 4 MiB)."""
    d = Daemon(tmp_path).start("--max-request", "1M")
    yield d
    crashed = d.stop()
    assert crashed is None, crashed


def test_too_large_refused_locally(small):
    with ctxd.Client(small.endpoint) as c:
        assert c.hello_info.limits["max_request_bytes"] == MiB
        with pytest.raises(ctxd.TooLargeError) as ei:
            c.execute("#" + "x" * MiB)
        assert ei.value.code == "too_large" and "max_request_bytes" in ei.value.message
        assert c.execute("6 * 7").result == "42"


def test_too_large_answered_with_its_id(small):
    with ctxd.Client(small.endpoint) as c:
        c._core.max_request = 0  # as a client that does not check first
        run = c.submit("#" + "x" * (2 * MiB))
        with pytest.raises(ctxd.TooLargeError):
            run.wait(timeout=WAIT)
        with pytest.raises(ctxd.TooLargeError):
            c.put_file(None, "f.bin", b"x" * (2 * MiB))
        assert c.execute("6 * 7").result == "42"


def test_dropped_connection_ends_requests_in_flight(small):
    with ctxd.Client(small.endpoint) as c:
        c.create_context("other")
        run = c.submit(SLEEPER)
        assert c.execute("1", ctx="other").status == "ok"  # the run is under way
        c._core.max_request = 0
        big = c.submit("#" + "x" * (5 * MiB), ctx="other")  # over ZMQ_MAXMSGSIZE
        for r in (run, big):
            with pytest.raises(ctxd.DisconnectedError) as ei:
                r.wait(timeout=WAIT)
            assert "dropped" in ei.value.message
        # ZeroMQ reconnected: the client goes on (the sleeper lives on in
        # the daemon until interrupted)
        assert c.interrupt() is True
        assert c.execute("6 * 7").result == "42"


def test_async_too_large_and_dropped_connection(small):
    async def main():
        async with AsyncClient(small.endpoint) as c:
            with pytest.raises(ctxd.TooLargeError):
                await c.execute("#" + "x" * MiB)
            c._core.max_request = 0
            with pytest.raises(ctxd.TooLargeError):
                await asyncio.wait_for(c.execute("#" + "x" * (2 * MiB)), WAIT)
            await c.create_context("other")
            run = await c.submit(SLEEPER)
            assert (await c.execute("1", ctx="other")).status == "ok"
            big = await c.submit("#" + "x" * (5 * MiB), ctx="other")
            for r in (run, big):
                with pytest.raises(ctxd.DisconnectedError):
                    await r.wait(timeout=WAIT)
            assert await c.interrupt() is True
            assert (await c.execute("6 * 7")).result == "42"

    asyncio.run(main())
