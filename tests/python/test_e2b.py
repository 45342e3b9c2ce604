"""The E2B-compatible surface (ctxd.e2b) against a real daemon: code written
for e2b_code_interpreter's Sandbox runs unchanged. Charts are checked
field by field against the figure the code drew, so a surface that only
passed PNGs through would fail."""

import asyncio
import base64
import json

import pytest

import ctxd
from ctxd.e2b import (
    AsyncSandbox,
    BarChart,
    BoxAndWhiskerChart,
    ChartType,
    Context,
    Execution,
    ExecutionError,
    InvalidArgumentException,
    LineChart,
    NotFoundException,
    OutputMessage,
    PieChart,
    Result,
    Sandbox,
    ScaleType,
    ScatterChart,
    SuperChart,
    TimeoutException,
)


@pytest.fixture
def sandbox(endpoint):
    sb = Sandbox(endpoint=endpoint)
    yield sb
    sb.kill()


def only_chart(execution):
    charts = [r for r in execution.results if r.chart is not None]
    assert len(charts) == 1, execution
    r = charts[0]
    assert not r.is_main_result and r.png
    assert base64.b64decode(r.png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "chart" in r.formats() and "png" in r.formats()
    return r.chart


# ---- run_code, Execution, streaming ----------------------------------------------


def test_text_and_execution_count(sandbox):
    e = sandbox.run_code("x = 41")
    assert isinstance(e, Execution) and e.results == [] and e.text is None
    first = e.execution_count
    e = sandbox.run_code("x + 1")
    assert e.text == "42" and e.execution_count == first + 1
    assert [r.is_main_result for r in e.results] == [True]
    assert sandbox.run_code("'a str'").text == "a str"  # E2B strips the quotes


def test_streaming_callbacks_in_order(sandbox):
    seen = []
    code = ("import sys, time\nprint('one', flush=True)\n"
            "print('err', file=sys.stderr, flush=True)\n"
            "time.sleep(0.05)\nprint('two', flush=True)\ndisplay({'a': 1})\n7 * 6")
    e = sandbox.run_code(code, on_stdout=lambda m: seen.append(("out", m)),
                         on_stderr=lambda m: seen.append(("err", m)),
                         on_result=lambda r: seen.append(("res", r)))
    kinds = [k for k, _ in seen]
    assert kinds == ["out", "err", "out", "res", "res"], seen
    msgs = [m for k, m in seen if k in ("out", "err")]
    assert all(isinstance(m, OutputMessage) for m in msgs)
    assert [m.line for m in msgs] == ["one\n", "err\n", "two\n"]
    assert [m.error for m in msgs] == [False, True, False]
    assert msgs[0].timestamp <= msgs[1].timestamp <= msgs[2].timestamp
    assert str(msgs[0]) == "one\n"
    assert e.logs.stdout == ["one\n", "two\n"] and e.logs.stderr == ["err\n"]
    assert json.loads(e.logs.to_json()) == {"stdout": ["one\n", "two\n"], "stderr": ["err\n"]}
    display, main = seen[3][1], seen[4][1]
    assert not display.is_main_result and display.text == "{'a': 1}"
    assert main.is_main_result and e.text == "42"


def test_error_sets_execution_error_and_calls_on_error(sandbox):
    errors = []
    e = sandbox.run_code("print('before')\nraise ValueError('bad input')",
                         on_error=errors.append)
    assert isinstance(e.error, ExecutionError)
    assert e.error.name == "ValueError" and e.error.value == "bad input"
    assert "Traceback" in e.error.traceback and "ValueError: bad input" in e.error.traceback
    assert errors == [e.error] and e.logs.stdout == ["before\n"]
    assert json.loads(e.to_json())["error"] == e.error.to_json()
    # the context lives on
    assert sandbox.run_code("1 + 1").text == "2"


def test_sys_exit_nonzero_is_the_cells_error(sandbox):
    # ctxd ends a sys.exit run with exit_code and no traceback; E2B's cell
    # reports SystemExit (n not 0) as its error, sys.exit(0) as none.
    errors = []
    e = sandbox.run_code("import sys\nsys.exit(3)", on_error=errors.append)
    assert e.error is not None and e.error.name == "SystemExit" and e.error.value == "3"
    assert errors == [e.error]
    assert sandbox.run_code("sys.exit(0)").error is None


def test_envs_are_per_run(sandbox):
    e = sandbox.run_code("import os\nstr(os.environ.get('E2B_T'))", envs={"E2B_T": "set"})
    assert e.text == "set"
    assert sandbox.run_code("import os\nstr(os.environ.get('E2B_T'))").text == "None"


def test_timeout_raises_and_keeps_the_context(sandbox):
    sandbox.run_code("kept = 'yes'")
    out = []
    with pytest.raises(TimeoutException) as exc:
        sandbox.run_code("print('started', flush=True)\nwhile True: pass",
                         on_stdout=lambda m: out.append(m.line), timeout=1)
    assert isinstance(exc.value, TimeoutError) and isinstance(exc.value, ctxd.CtxdError)
    assert out == ["started\n"]
    assert sandbox.run_code("kept").text == "yes"
    with pytest.raises(InvalidArgumentException):
        sandbox.run_code("1", timeout=-1)


def test_only_python(sandbox):
    for lang in ("js", "r", "bash"):
        with pytest.raises(InvalidArgumentException, match="python") as exc:
            sandbox.run_code("1", language=lang)
        assert lang in str(exc.value)
    assert sandbox.run_code("1", language="python").text == "1"
    ctx = sandbox.create_code_context()
    with pytest.raises(InvalidArgumentException, match="not both"):
        sandbox.run_code("1", language="python", context=ctx)
    with pytest.raises(InvalidArgumentException, match="python"):
        sandbox.create_code_context(language="javascript")


# ---- rich results -------------------------------------------------------------------------


def test_rich_results(sandbox):
    code = ("class R:\n"
            "    def _repr_html_(self): return '<b>h</b>'\n"
            "    def _repr_markdown_(self): return '*m*'\n"
            "    def _repr_latex_(self): return r'$x$'\n"
            "    def _repr_json_(self): return {'k': [1, 2]}\n"
            "    def _repr_svg_(self): return '<svg/>'\n"
            "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
            "        return {'application/x-custom': 'c', 'application/javascript': 'f()'}\n"
            "    def __repr__(self): return 'R()'\n"
            "R()")
    e = sandbox.run_code(code)
    (r,) = e.results
    assert isinstance(r, Result) and r.is_main_result
    assert (r.text, r.html, r.markdown, r.latex, r.svg, r.javascript) == \
        ("R()", "<b>h</b>", "*m*", "$x$", "<svg/>", "f()")
    assert r.json == {"k": [1, 2]}
    assert r.extra == {"application/x-custom": "c"}
    assert list(r.formats()) == ["text", "html", "markdown", "svg", "latex", "json",
                                 "javascript", "application/x-custom"]
    assert r["html"] == "<b>h</b>" and r._repr_html_() == "<b>h</b>"
    assert repr(r) == "Result(R())"


def test_dataframe_as_data(sandbox):
    e = sandbox.run_code("import pandas as pd\n"
                         "pd.DataFrame({'n': [1, 2], 's': ['x', 'y'], "
                         "'t': pd.to_datetime(['2024-01-02', '2024-03-04'])})")
    (r,) = e.results
    assert r.is_main_result and r.html and "<table" in r.html
    assert r.data["n"] == [1, 2] and r.data["s"] == ["x", "y"]
    assert [t[:10] for t in r.data["t"]] == ["2024-01-02", "2024-03-04"]
    assert "data" in r.formats()


# ---- charts ---------------------------------------------------------------------------------


def test_line_chart(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [2, 4, 8], label='growth')\n"
        "plt.plot([1, 2, 3], [1, 1, 1])\n"
        "plt.title('Growth'); plt.xlabel('time (s)'); plt.ylabel('size')\n"
        "plt.yscale('log')\n"
        "plt.show()\n"
        "print('after show')")
    c = only_chart(e)
    assert isinstance(c, LineChart) and c.type == ChartType.LINE
    assert (c.title, c.x_label, c.y_label, c.x_unit) == ("Growth", "time (s)", "size", "s")
    assert c.x_scale == ScaleType.LINEAR and c.y_scale == ScaleType.LOG
    assert [el.label for el in c.elements] == ["growth", "Line 1"]
    assert c.elements[0].points == [(1.0, 2.0), (2.0, 4.0), (3.0, 8.0)]
    assert c.x_ticks and len(c.x_ticks) == len(c.x_tick_labels)
    assert 2.0 in c.x_ticks and "2.00" in c.x_tick_labels
    assert c.to_dict()["type"] == "line"
    # plt.show() showed the figure when called: before the later print's end
    assert e.logs.stdout == ["after show\n"]


def test_scatter_chart_categorical_ticks(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.scatter([0, 1, 2], [5, 6, 7], label='pts')\n"
        "ax.set_xticks([0, 1, 2]); ax.set_xticklabels(['a', 'b', 'c'])")
    c = only_chart(e)  # left open: shown after the cell
    assert isinstance(c, ScatterChart) and c.type == "scatter"
    assert c.elements[0].label == "pts"
    assert c.elements[0].points == [(0.0, 5.0), (1.0, 6.0), (2.0, 7.0)]
    assert c.x_tick_labels == ["a", "b", "c"] and c.x_scale == ScaleType.CATEGORICAL


def test_bar_chart(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.bar(['apples', 'pears'], [3, 5], label='2023')\n"
        "ax.set_title('Fruit'); ax.set_ylabel('count')\n"
        "plt.show()")
    c = only_chart(e)
    assert isinstance(c, BarChart) and (c.title, c.y_label) == ("Fruit", "count")
    assert [(b.label, b.group, b.value) for b in c.elements] == \
        [("apples", "2023", 3.0), ("pears", "2023", 5.0)]


def test_pie_chart(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.pie([1, 3], labels=['small', 'big'])\n"
        "plt.title('Share')\nplt.show()")
    c = only_chart(e)
    assert isinstance(c, PieChart) and c.title == "Share"
    assert [(p.label, round(p.angle, 6)) for p in c.elements] == [("small", 90.0),
                                                                 ("big", 270.0)]
    assert all(p.radius == 1.0 for p in c.elements)


def test_box_and_superchart(sandbox):
    e = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "fig, (a, b) = plt.subplots(1, 2)\n"
        "fig.suptitle('Two')\n"
        "a.boxplot([[1, 2, 3, 4, 5], [2, 4, 6, 8, 10]], patch_artist=True)\n"
        "a.set_xticks([1, 2]); a.set_xticklabels(['p', 'q'])\n"
        "b.plot([0, 1], [1, 0])\n"
        "plt.show()")
    c = only_chart(e)
    assert isinstance(c, SuperChart) and c.title == "Two"
    box, line = c.elements
    assert isinstance(box, BoxAndWhiskerChart) and isinstance(line, LineChart)
    p, q = box.elements
    assert (p.label, p.min, p.first_quartile, p.median, p.third_quartile, p.max) == \
        ("p", 1.0, 2.0, 3.0, 4.0, 5.0)
    assert (q.label, q.median, q.max) == ("q", 6.0, 10.0)


def test_figures_do_not_leak_into_the_next_cell(sandbox):
    e = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2])")
    assert len([r for r in e.results if r.chart]) == 1
    assert sandbox.run_code("1").results[0].chart is None
    assert [r for r in sandbox.run_code("print(1)").results] == []


# ---- contexts ---------------------------------------------------------------------------


def test_contexts_with_cwd(sandbox, tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    ctx = sandbox.create_code_context(cwd=str(d))
    assert isinstance(ctx, Context) and ctx.cwd == str(d) and ctx.language == "python"
    assert sandbox.run_code("import os\nos.getcwd()", context=ctx).text == str(d)
    sandbox.run_code("v = 'in ctx'", context=ctx)
    e = sandbox.run_code("v", context=ctx)
    assert e.text == "in ctx"
    assert sandbox.run_code("v").error.name == "NameError"  # the default context is another
    ids = [c.id for c in sandbox.list_code_contexts()]
    assert ids == [sandbox.sandbox_id, ctx.id]
    sandbox.restart_code_context(ctx)
    assert sandbox.run_code("v", context=ctx).error.name == "NameError"
    # a restarted context still charts
    assert only_chart(sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1])",
                                       context=ctx)).type == "line"
    sandbox.remove_code_context(ctx)
    assert [c.id for c in sandbox.list_code_contexts()] == [sandbox.sandbox_id]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=ctx)


def test_sandboxes_are_separate_and_kill_removes_their_contexts(endpoint):
    a, b = Sandbox(endpoint=endpoint), Sandbox.create(endpoint=endpoint)
    try:
        a.run_code("only_a = 1")
        assert b.run_code("only_a").error.name == "NameError"
    finally:
        b.kill()
    with ctxd.Client(endpoint) as c:
        names = {i.name for i in c.list_contexts()}
    assert a.sandbox_id in names and b.sandbox_id not in names
    a.kill()


# ---- files -------------------------------------------------------------------------------


def test_files(sandbox, tmp_path):
    info = sandbox.files.write("data/in.csv", "a,b\n1,2\n")
    assert info.name == "in.csv" and info.path.endswith("/data/in.csv")
    e = sandbox.run_code("open('data/in.csv').read()")
    assert e.text == "a,b\\n1,2\\n"
    sandbox.run_code("open('out.bin', 'wb').write(bytes(range(5)))")
    assert sandbox.files.read("out.bin", format="bytes") == bytearray(range(5))
    assert sandbox.files.read("data/in.csv") == "a,b\n1,2\n"
    names = {(x.name, x.type) for x in sandbox.files.list(".")}
    assert {("data", "dir"), ("out.bin", "file")} <= names
    assert [x.size for x in sandbox.files.list("data")] == [8]
    assert sandbox.files.exists("out.bin") and not sandbox.files.exists("nope")
    # outside the context's directory: through a run, in the context's view
    outside = tmp_path / "outside.txt"
    sandbox.files.write(str(outside), b"abs")
    assert outside.read_bytes() == b"abs"
    assert sandbox.files.read(str(outside)) == "abs"
    sandbox.files.remove("out.bin")
    assert not sandbox.files.exists("out.bin")
    with pytest.raises(NotFoundException):
        sandbox.files.read("missing.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.read(str(tmp_path / "missing.txt"))


# ---- async -----------------------------------------------------------------------------


def test_async_sandbox(endpoint, tmp_path):
    async def main():
        sb = await AsyncSandbox.create(endpoint=endpoint)
        try:
            lines = []

            async def on_stdout(m):
                await asyncio.sleep(0)
                lines.append(m.line)

            charts = []
            e = await sb.run_code(
                "print('x')\nimport matplotlib.pyplot as plt\nplt.bar(['a'], [1])\n3",
                on_stdout=on_stdout, on_result=charts.append)
            assert lines == ["x\n"] and e.text == "3"
            assert [type(r.chart) for r in charts] == [type(None), BarChart]
            ctx = await sb.create_code_context(cwd=str(tmp_path))
            assert (await sb.run_code("import os\nos.getcwd()", context=ctx)).text == \
                str(tmp_path)
            await sb.files.write("f.txt", "async")
            assert await sb.files.read("f.txt") == "async"
            with pytest.raises(TimeoutException):
                await sb.run_code("while True: pass", timeout=1)
            with pytest.raises(InvalidArgumentException):
                await sb.run_code("1", language="ts")
            assert len(await sb.list_code_contexts()) == 2
        finally:
            await sb.kill()

    asyncio.run(main())


def test_cells_use_ipython_syntax_when_the_daemon_offers_it(sandbox):
    """E2B users write `!cmd` and `%magic`: sent as IPython cells when the
    daemon's hello offers that syntax (and this client can ask for it);
    before that, a cell is plain Python and such a line is a SyntaxError."""
    from ctxd.e2b import _syntax
    e = sandbox.run_code("!echo from-the-shell")
    if _syntax(sandbox.client) == {"syntax": "ipython"}:
        assert e.error is None and "from-the-shell" in "".join(e.logs.stdout)
    else:
        h = sandbox.client.hello_info
        assert "ipython" not in (getattr(h, "syntaxes", None) or getattr(h, "syntax", None)
                                 or [])
        assert e.error is not None and e.error.name == "SyntaxError"


def test_a_respawned_interpreter_charts_again(sandbox):
    sandbox.run_code("import matplotlib.pyplot as plt")
    e = sandbox.run_code("import os\nos._exit(3)")
    assert e.error is not None and e.error.name == "WorkerProcessError"
    assert "3" in e.error.value
    e = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([0, 1], [1, 0])")
    assert only_chart(e).elements[0].points == [(0.0, 1.0), (1.0, 0.0)]


def test_e2b_style_construction(endpoint, monkeypatch):
    """E2B code makes its sandbox with no daemon address, maybe a template
    name: the daemon comes from $CTXD_ENDPOINT, the template is ignored."""
    monkeypatch.setenv("CTXD_ENDPOINT", endpoint)
    with Sandbox("code-interpreter-v1", timeout=300, api_key="unused") as sb:
        assert sb.run_code("6 * 7").text == "42"
    sb = Sandbox.create()
    try:
        assert sb.run_code("1").text == "1"
    finally:
        sb.kill()
