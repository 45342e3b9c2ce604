"""The `error` event: ename, evalue, user-only tracebacks with the right lines."""

import re

FRAME = re.compile(r'File "([^"]*)", line (\d+)')


def tb_text(run):
    return "\n".join(run.error["traceback"])


def check_format(run):
    """PROTOCOL.md: the lines of traceback.format_exception, one per item,
    without newlines, ending with the `ename: evalue` line; cells are named
    <cell-N> with N the execution count."""
    tb = run.error["traceback"]
    e = run.error
    assert tb[-1] == (f"{e['ename']}: {e['evalue']}" if e["evalue"] else e["ename"]), tb
    assert tb[0] == "Traceback (most recent call last):", tb
    n = run.done["execution_count"]
    assert f'File "<cell-{n}>"' in "\n".join(tb), tb


def frames(run):
    return FRAME.findall(tb_text(run))


def assert_user_frames_only(run, daemon):
    text = tb_text(run)
    fs = frames(run)
    # every frame is from the submitted cell (one shared pseudo-filename)
    files = {f for f, _ in fs}
    assert len(files) == 1, f"frames from several files (worker internals?): {text}"
    (name,) = files
    assert not name.endswith(".py") or "ctxd" not in name, text
    for bad in ("ctxd-worker", "wrk_", "runpy", "<frozen", "exec(", "site-packages"):
        assert bad not in text, f"worker-internal text {bad!r} in traceback:\n{text}"


def test_error_fields_and_line_number(client, daemon):
    code = "x = 1\ny = 2\nraise ValueError('boom')"
    r = client.execute(code)
    assert r.status == "error", r
    e = r.error
    assert e["ename"] == "ValueError"
    assert e["evalue"] == "boom"
    text = tb_text(r)
    assert "line 3" in text, text
    assert [ln for _, ln in frames(r)] == ["3"], text
    assert "ValueError: boom" in text
    assert_user_frames_only(r, daemon)
    check_format(r)
    assert r.error["traceback"] == [
        "Traceback (most recent call last):",
        f'  File "<cell-{r.done["execution_count"]}>", line 3, in <module>',
        "    raise ValueError('boom')",
        "ValueError: boom"], r.error["traceback"]
    # the globals set before the failing line are kept
    assert client.execute("x + y").text == "3"


def test_error_in_function_frames(client, daemon):
    code = ("def inner():\n"
            "    return 1 / 0\n"
            "\n"
            "def outer():\n"
            "    return inner()\n"
            "\n"
            "outer()\n")
    r = client.execute(code)
    assert r.status == "error", r
    assert r.error["ename"] == "ZeroDivisionError"
    assert r.error["evalue"] == "division by zero"
    assert [ln for _, ln in frames(r)] == ["7", "5", "2"], tb_text(r)
    assert "inner" in tb_text(r) and "outer" in tb_text(r)
    assert_user_frames_only(r, daemon)
    check_format(r)


def test_error_in_function_defined_in_earlier_run(client):
    assert client.execute("\n\ndef f():\n    raise KeyError('k')").status == "ok"
    r = client.execute("f()")
    assert r.status == "error"
    assert r.error["ename"] == "KeyError"
    assert r.error["evalue"] == "'k'"
    assert frames(r) == [("<cell-2>", "1"), ("<cell-1>", "4")], tb_text(r)
    check_format(r)


def test_a_cell_run_again_is_named_for_its_own_run(client):
    """The worker reuses the code objects of a source it ran before (no
    parse and compile per run): every code object, nested ones too, must
    still carry the new cell's name, so tracebacks and inspect see the run
    that defined them, and a trailing `;` still hides the value."""
    cell = ("import inspect\n"
            "def f():\n"
            "    return 1 / 0\n"
            "class K:\n"
            "    def m(self):\n"
            "        return f()\n"
            "(f.__code__.co_filename, K.m.__code__.co_filename, inspect.getsource(f))")
    for _ in range(3):
        r = client.execute(cell)
        assert r.status == "ok", r
        n = r.done["execution_count"]
        assert eval(r.text) == (f"<cell-{n}>", f"<cell-{n}>",
                                "def f():\n    return 1 / 0\n"), r.text
        r = client.execute("K().m()")
        assert r.status == "error", r
        assert frames(r) == [(f"<cell-{n + 1}>", "1"), (f"<cell-{n}>", "6"),
                             (f"<cell-{n}>", "3")], tb_text(r)
        assert client.execute("1 + 1").text == "2"
        r = client.execute("1 + 1;")
        assert r.status == "ok" and r.result is None, r


def test_cell_lines_do_not_pile_up_but_functions_keep_theirs(client):
    """Every run puts its cell's lines into linecache (tracebacks show
    them). A flat cell's code cannot run again after its run, so only the
    last 128 flat cells keep theirs: a polling loop of a million runs must
    not hold a million entries. A cell that defined a function keeps its
    lines however many runs come after, and so does the traceback through
    it; a flat cell's own traceback has its line."""
    assert client.execute("def g():\n    return 1 / 0").status == "ok"
    for _ in range(300):
        assert client.execute("x = 1").status == "ok"
    r = client.execute("import linecache\n"
                       "sum(1 for k in linecache.cache if k.startswith('<cell-'))")
    assert r.status == "ok" and int(r.text) <= 130, r.text
    r = client.execute("g()")
    assert r.status == "error", r
    assert "return 1 / 0" in tb_text(r), tb_text(r)
    r = client.execute("y = 1 / 0")
    assert r.status == "error" and "y = 1 / 0" in tb_text(r), tb_text(r)


def test_chained_exception_explicit(client, daemon):
    code = ("try:\n"
            "    1 / 0\n"
            "except ZeroDivisionError as e:\n"
            "    raise ValueError('wrapped') from e\n")
    r = client.execute(code)
    assert r.status == "error", r
    assert r.error["ename"] == "ValueError"
    assert r.error["evalue"] == "wrapped"
    text = tb_text(r)
    assert "ZeroDivisionError" in text and "ValueError: wrapped" in text, text
    assert "direct cause" in text, text
    assert text.index("ZeroDivisionError") < text.index("ValueError: wrapped")
    assert sorted(ln for _, ln in frames(r)) == ["2", "4"], text
    assert_user_frames_only(r, daemon)
    check_format(r)


def test_chained_exception_implicit(client):
    code = ("try:\n"
            "    {}['missing']\n"
            "except KeyError:\n"
            "    undefined_name\n")
    r = client.execute(code)
    assert r.status == "error", r
    assert r.error["ename"] == "NameError"
    text = tb_text(r)
    assert "KeyError" in text and "NameError" in text
    assert "During handling" in text, text


def test_syntax_error(client):
    r = client.execute("a = 1\nb = (1,\nc = 3 +\n")
    assert r.status == "error", r
    assert r.error["ename"] == "SyntaxError"
    tb = r.error["traceback"]
    n = r.done["execution_count"]
    assert f'  File "<cell-{n}>", line 2' in tb, tb
    assert tb[-1] == "SyntaxError: '(' was never closed", tb
    # only the cell's frame, none of the worker's compile call
    assert len(frames(r)) == 1, tb
    assert client.execute("a = 1\nif True print(a)").error["ename"] == "SyntaxError"
    # nothing of the cell ran
    r = client.execute("'a' in globals()")
    assert r.text == "False", r


def test_custom_exception_and_empty_message(client):
    r = client.execute("class MyErr(Exception):\n    pass\nraise MyErr")
    assert r.status == "error"
    assert r.error["ename"] == "MyErr"
    assert r.error["evalue"] == ""
    assert r.error["traceback"][-1].endswith("MyErr"), r.error


def test_system_exit_does_not_kill_the_context(client):
    assert client.execute("keep = 1").status == "ok"
    r = client.execute("import sys\nsys.exit(5)")
    # As a script ends (PROTOCOL.md, done.exit_code): no traceback, the exit
    # status in done, and the context keeps its globals.
    assert r.status == "error" and r.error is None and r.done["exit_code"] == 5, r
    r = client.execute("keep")
    assert r.text == "1" and r.accepted["incarnation"] == 1, r


def test_error_status_does_not_lose_state(client):
    r = client.execute("z = 9\nraise RuntimeError('r')")
    assert r.status == "error" and r.done["state_lost"] is False
    assert client.execute("z").text == "9"
