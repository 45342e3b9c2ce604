"""complete, inspect and is_complete (PROTOCOL.md section 5, "Queries"):
answers from the live globals, cursors in characters, the queue, interrupts,
timeouts, deaths, and bad input refused with the daemon still serving."""

import pytest

HANG_DIR = ("class Hang:\n"
            "    def __dir__(self):\n"
            "        while True:\n"
            "            pass\n"
            "hang = Hang()\n")


def test_complete_from_live_globals(client):
    client.execute("import os\nalpha_value = 1\nalpha_other = 2\n")
    r = client.ok("complete", code="alpha_", cursor=6)
    assert r["matches"] == ["alpha_other", "alpha_value"]
    assert (r["cursor_start"], r["cursor_end"]) == (0, 6)
    assert r["metadata"] == {}
    # attributes, with the whole dotted text replacing from cursor_start
    r = client.ok("complete", code="x = os.pa")
    assert "os.path" in r["matches"] and "os.pathsep" in r["matches"]
    assert r["cursor_start"] == 4 and r["cursor_end"] == 9
    # builtins and keywords, without rlcompleter's "(" / ":" suffixes
    assert "print" in client.ok("complete", code="pri")["matches"]
    assert "finally" in client.ok("complete", code="fina")["matches"]
    # the cursor in the middle: only the text before it counts
    r = client.ok("complete", code="alpha_v + 1", cursor=7)
    assert r["matches"] == ["alpha_value"] and r["cursor_end"] == 7


def test_complete_modules_without_importing(client):
    r = client.ok("complete", code="import collec")
    assert "collections" in r["matches"]
    assert r["cursor_start"] == 7
    r = client.ok("complete", code="from os import pat")
    assert "path" in r["matches"]
    # completion never imports: a module in the cwd is listed, and not run
    client.execute("open('ctxd_probe_mod.py', 'w').write('print(\"imported!\")')")
    assert "ctxd_probe_mod" in client.ok("complete", code="import ctxd_probe_")["matches"]
    run = client.execute("import sys\n'ctxd_probe_mod' in sys.modules")
    assert run.result["data"]["text/plain"] == "False"


def test_cursor_counts_characters_not_bytes(client):
    client.execute("héllo_wörld = 'x'")
    code = "s = héllo_w"
    assert len(code.encode()) > len(code)
    r = client.ok("complete", code=code, cursor=len(code))
    assert r["matches"] == ["héllo_wörld"]
    assert (r["cursor_start"], r["cursor_end"]) == (4, len(code))
    client.ok("complete", code="é", cursor=1)
    r = client.err("complete", "bad_field", code="é", cursor=2)  # 2 bytes, 1 character
    assert "past the end" in r["message"]


def test_inspect_signature_doc_and_source(client):
    client.execute("def area(r, pi=3.14):\n    'Area of a circle.'\n    return pi * r * r\n")
    r = client.ok("inspect", code="area", cursor=2)
    assert r["found"] is True
    text = r["data"]["text/plain"]
    assert "area(r, pi=3.14)" in text and "Area of a circle." in text
    assert "return pi" not in text
    r = client.ok("inspect", code="area", detail_level=1)
    assert "return pi * r * r" in r["data"]["text/plain"]
    # inside a call's arguments: the function being called
    r = client.ok("inspect", code="area(2, ", cursor=8)
    assert r["found"] and "Area of a circle." in r["data"]["text/plain"]
    r = client.ok("inspect", code="no_such_name")
    assert r["found"] is False and r["data"] == {}
    r = client.ok("inspect", code="len")
    assert r["found"] and "builtin" in r["data"]["text/plain"]


def test_is_complete(client):
    cases = {
        "1": "complete",
        "x = 1\ny = 2": "complete",
        "def f(x):\n    return x\n\n": "complete",
        "await something": "complete",  # top-level await is allowed
        "for i in range(3):": "incomplete",
        "def f(x):\n    return x": "incomplete",  # a block ends with an empty line
        "a = [1,": "incomplete",
        "s = '''abc": "incomplete",
        "import = 7q": "invalid",
        "x = 1\n)": "invalid",
    }
    for code, status in cases.items():
        r = client.ok("is_complete", code=code)
        assert r["status"] == status, (code, r)
    assert client.ok("is_complete", code="for i in x:")["indent"] == "    "
    assert client.ok("is_complete", code="if a:\n  b = 1")["indent"] == "  "


def test_queries_touch_no_state(client):
    first = client.execute("v = 41\nv + 1")
    count = first.of("done")[0]["execution_count"]
    client.ok("complete", code="v")
    client.ok("inspect", code="v")
    client.ok("is_complete", code="v +")
    run = client.execute("_")
    assert run.result["data"]["text/plain"] == "42"
    assert run.of("done")[0]["execution_count"] == count + 1


def test_query_output_is_dropped(client):
    client.execute("class Loud:\n"
                   "    def __dir__(self):\n"
                   "        print('noise'); display('more')\n"
                   "        return ['quiet_attr']\n"
                   "loud = Loud()\n")
    rid = client.send("complete", code="loud.q")
    evs = client.collect(rid)
    assert len(evs) == 1 and evs[0]["t"] == "ok", evs
    assert evs[0]["matches"] == ["loud.quiet_attr"]
    assert client.execute("print('after')").stdout == b"after\n"


def test_query_waits_behind_the_running_cell(client):
    """The query is queued like an execute: sent while the run waits in
    input(), it sees the name the run defines after input() returned."""
    run = client.submit("answer = input('go? ')\nlate_defined_name = 1\n", allow_stdin=True)
    client.wait_event(run, "input.request")
    q = client.send("complete", code="late_defined_n")
    client.ok("input.reply", value="yes")
    assert client.wait(run).status == "ok"
    r = client.collect(q)[-1]
    assert r["t"] == "ok" and r["matches"] == ["late_defined_name"]


def test_interrupt_a_hanging_query(client):
    client.execute("keep = 'kept'\n" + HANG_DIR)
    q = client.send("complete", code="hang.")
    assert client.ok("interrupt")["interrupted"] is True
    r = client.collect(q)[-1]
    assert r["t"] == "ok" and r["matches"] == [], r
    assert client.execute("keep").result["data"]["text/plain"] == "'kept'"


def test_query_timeout(client):
    client.execute("keep = 'kept'\n" + HANG_DIR)
    r = client.err("complete", "timeout", code="hang.", timeout=0.2)
    assert "timeout" in r["message"]
    assert client.execute("keep").result["data"]["text/plain"] == "'kept'"


def test_worker_death_during_a_query(client):
    client.ok("ctx.create", name="q-dies")
    client.execute("import os\nclass Bomb:\n    def __dir__(self):\n        os._exit(3)\n"
                   "bomb = Bomb()\n", ctx="q-dies")
    r = client.err("complete", "aborted", ctx="q-dies", code="bomb.")
    assert "exited with code 3" in r["message"]
    # a dead context is not restarted by a query...
    client.err("inspect", "dead", ctx="q-dies", code="bomb")
    # ... but by the next execute, as always
    assert client.execute("1 + 1", ctx="q-dies").result["data"]["text/plain"] == "2"
    assert client.ok("complete", ctx="q-dies", code="pri")["matches"] == ["print"]


def test_queued_query_aborted_by_delete(client):
    client.ok("ctx.create", name="q-del")
    run = client.submit("answer = input()", ctx="q-del", allow_stdin=True)
    client.wait_event(run, "input.request")
    q = client.send("complete", ctx="q-del", code="ans")
    client.ok("ctx.delete", ctx="q-del")
    assert client.wait(run).status == "aborted"
    r = client.collect(q)[-1]
    assert r["t"] == "err" and r["code"] == "aborted", r


@pytest.mark.parametrize("t, fields, code", [
    ("complete", {}, "bad_field"),                                   # code missing
    ("complete", {"code": 5}, "bad_field"),
    ("complete", {"code": "abc", "cursor": 4}, "bad_field"),         # beyond the code
    ("complete", {"code": "abc", "cursor": -1}, "bad_field"),
    ("complete", {"code": "abc", "cursor": "1"}, "bad_field"),
    ("complete", {"code": "abc", "cursor": 1.5}, "bad_field"),
    ("complete", {"code": "a\x00b"}, "bad_field"),
    ("complete", {"code": "abc", "timeout": -1}, "bad_field"),
    ("complete", {"code": "abc", "ctx": "../x"}, "bad_name"),
    ("complete", {"code": "abc", "ctx": "nope"}, "unknown_context"),
    ("inspect", {"code": "abc", "detail_level": 2}, "bad_field"),
    ("inspect", {"code": "abc", "detail_level": True}, "bad_field"),
    ("inspect", {"code": "abc", "cursor": 2 ** 40}, "bad_field"),
    ("is_complete", {}, "bad_field"),
    ("is_complete", {"code": b"bytes"}, "bad_field"),
])
def test_bad_queries_refused(client, t, fields, code):
    client.execute("1")  # "default" exists
    r = client.err(t, code, **fields)
    assert r["message"]
    assert client.ok("hello")["server"] == "ctxd"
    assert client.ok(t, code="pri")


def test_queries_in_confined_tiers(client):
    """A local context with an import allowlist still answers (the helper's
    own imports are trusted; user code's are not), and so does a static one
    (which runs nothing)."""
    client.ok("ctx.create", name="q-local", tier="local", policy={"allowed_imports": ["math"]})
    client.execute("import math\nlimit_value = 1", ctx="q-local")
    r = client.ok("complete", ctx="q-local", code="math.fl")
    assert r["matches"] == ["math.floor"]
    assert client.ok("complete", ctx="q-local", code="limit_v")["matches"] == ["limit_value"]
    assert client.ok("inspect", ctx="q-local", code="math.floor")["found"] is True
    assert client.ok("is_complete", ctx="q-local", code="if x:")["status"] == "incomplete"
    # the allowlist still holds for the code
    assert client.execute("import json", ctx="q-local").error["ename"] == "ImportError"
    client.ok("ctx.create", name="q-static", tier="static")
    assert client.ok("complete", ctx="q-static", code="pri")["matches"] == ["print"]
    assert client.ok("is_complete", ctx="q-static", code="x = (")["status"] == "incomplete"
