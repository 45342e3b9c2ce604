"""Client.complete / inspect / is_complete and their AsyncClient twins."""

import asyncio

import pytest

from ctxd import AsyncClient, Completeness, Completion, Inspection, RefusedError


def test_queries_blocking(client):
    client.execute("import math\nradius_of_earth = 6371\n"
                   "def area(r):\n    'Area of a disc.'\n    return math.pi * r * r\n")
    c = client.complete("radius_of_e")
    assert isinstance(c, Completion)
    assert c.matches == ["radius_of_earth"] and (c.cursor_start, c.cursor_end) == (0, 11)
    c = client.complete("x = math.fl + 1", cursor=11)
    assert c.matches == ["math.floor"] and c.cursor_start == 4
    i = client.inspect("area")
    assert isinstance(i, Inspection) and i.found and "Area of a disc." in i.text
    assert "return math.pi" in client.inspect("area", detail_level=1).text
    assert not client.inspect("nothing_here").found
    k = client.is_complete("def f():")
    assert isinstance(k, Completeness) and k.status == "incomplete" and k.indent == "    "
    assert client.is_complete("f(").status == "incomplete"
    assert client.is_complete("1 +* 2").status == "invalid"
    with pytest.raises(RefusedError) as e:
        client.complete("abc", cursor=9)
    assert e.value.code == "bad_field"
    with pytest.raises(TypeError):
        client.complete("abc", cursor="1")


def test_queries_async(endpoint):
    async def main():
        async with AsyncClient(endpoint) as c:
            await c.execute("async_only_name = 1")
            comp, insp, done = await asyncio.gather(
                c.complete("async_only_n"), c.inspect("async_only_name"),
                c.is_complete("x = 1"))
            return comp, insp, done

    comp, insp, done = asyncio.run(main())
    assert comp.matches == ["async_only_name"]
    assert insp.found and "int" in insp.text
    assert done.status == "complete"
