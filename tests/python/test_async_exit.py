"""An AsyncClient or AsyncCodeInterpreter that is never closed, used under
two asyncio.run() loops (one per loop, or the same one in both), never makes
the process hang: not at garbage collection, not at exit. Each script runs
in a subprocess under a bounded wait."""

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, WAIT

SCRIPTS = {
    "client_per_loop": """
        async def main():
            c = AsyncClient(EP)
            keep.append(c)
            assert (await c.execute("6 * 7")).result == "42"
        asyncio.run(main())
        asyncio.run(main())
    """,
    "one_client_two_loops": """
        c = AsyncClient(EP)
        async def main():
            assert (await c.execute("6 * 7")).result == "42"
        asyncio.run(main())
        asyncio.run(main())
        keep.append(c)
    """,
    "interpreter_two_loops": """
        from ctxd.daytona import AsyncCodeInterpreter
        async def main():
            ci = AsyncCodeInterpreter(endpoint=EP)
            keep.append(ci)
            r = await ci.run_code("print('hi')")
            assert r.stdout == "hi\\n", r
        asyncio.run(main())
        asyncio.run(main())
    """,
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_unclosed_async_clients_exit_cleanly(daemon, name):
    script = "\n".join([
        "import asyncio, gc, sys",
        f"sys.path.insert(0, {str(ROOT / 'client' / 'python')!r})",
        "from ctxd.aio import AsyncClient",
        f"EP = {daemon.endpoint!r}",
        "keep = []",
        textwrap.dedent(SCRIPTS[name]),
        "keep.clear()",
        "gc.collect()",
        "print('collected', flush=True)",
    ])
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=WAIT)
    assert p.returncode == 0 and p.stdout.strip() == "collected", (p.stdout, p.stderr)
