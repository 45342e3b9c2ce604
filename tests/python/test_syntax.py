"""The Python package's side of issue 16: execute(..., syntax=...),
create_context(syntax=..., lease=...), renew_context, in both clients."""

import asyncio

import pytest

import ctxd
from conftest import WAIT, wait_until


def test_syntax_kwarg(client):
    assert client.hello().syntaxes == ["python", "ipython"]
    r = client.execute("v = !echo via the shell\nv", syntax="ipython")
    assert r.status == "ok" and "via the shell" in r.result, r
    r = client.execute("!echo x")  # plain Python by default
    assert r.status == "error" and r.error.ename == "SyntaxError", r
    with pytest.raises(ValueError):
        client.execute("1", syntax="bash")
    info = client.create_context("nb", syntax="ipython")
    assert client.execute("%env SYN_VAR=1\n1;", info).result is None
    assert client.execute("import os; os.environ['SYN_VAR']", "nb").result == "'1'"


def test_lease_and_renew(client):
    client.create_context("held", lease=2)
    client.create_context("free")
    assert client.renew_context("held") == 2.0
    assert client.renew_context("free") == 0.0
    assert wait_until(lambda: "held" not in {c.name for c in client.list_contexts()},
                      timeout=max(WAIT, 30))
    assert "free" in {c.name for c in client.list_contexts()}
    with pytest.raises(ctxd.RefusedError) as e:
        client.renew_context("held")
    assert e.value.code == "unknown_context"


def test_async_syntax_and_lease(endpoint):
    async def main():
        async with ctxd.AsyncClient(endpoint) as c:
            r = await c.execute("%time 6 * 7", syntax="ipython")
            assert r.status == "ok" and r.result == "42", r
            await c.create_context("aheld", lease=5, syntax="ipython")
            assert await c.renew_context("aheld") == 5.0
            r = await c.execute("x = !echo hi\nx", "aheld")
            assert "hi" in r.result, r
    asyncio.run(asyncio.wait_for(main(), WAIT * 2))
