"""A context is a faithful Python (issue 22): what `python3 script.py` does,
a context does. Every test runs the same code as a script under
/usr/bin/python3 and in a context (an execute with `file` and `argv`, or a
cell), and compares what they print and how they exit. The sandbox tier's
root is compared at the end."""

import os
import re
import signal
import subprocess
import textwrap

import pytest

from conftest import wait_until

PY = "/usr/bin/python3"


def as_script(tmp_path, code, args=(), name="script.py"):
    """Runs code as `python3 FILE ARGS...` (stdin /dev/null); (rc, out, err)."""
    path = tmp_path / name
    path.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    p = subprocess.run([PY, str(path), *args], cwd=tmp_path, capture_output=True,
                       stdin=subprocess.DEVNULL, timeout=60, env=env)
    return p.returncode, p.stdout, p.stderr


def in_context(c, tmp_path, code, args=(), ctx=None, name="script.py"):
    """The same file run by a context: execute with file and argv. Returns
    (exit status as a script's, stdout, stderr, the run)."""
    path = tmp_path / name
    path.write_text(code)
    r = c.execute(code, ctx=ctx, file=str(path), argv=[str(path), *args])
    if "exit_code" in r.done:
        rc = r.done["exit_code"]
    else:
        rc = 0 if r.status == "ok" else 1
    err = r.stderr
    if r.error:
        err += ("\n".join(r.error["traceback"]) + "\n").encode()
    return rc, r.stdout, err, r


def same(c, tmp_path, code, args=(), ctx=None):
    a = as_script(tmp_path, code, args)
    b = in_context(c, tmp_path, code, args, ctx)
    assert b[:3] == a, f"python3: {a!r}\ncontext: {b[:3]!r}\n{b[3]!r}"
    return b[3]


# ---- 1. input() and getpass with a replaced sys.stdin ----------------------

def test_input_reads_a_replaced_stdin_and_keeps_signatures(client, tmp_path):
    code = textwrap.dedent("""\
        import getpass, inspect, io, sys, warnings
        print(inspect.signature(input), inspect.signature(getpass.getpass))
        sys.stdin = io.StringIO("first\\nsecond\\nsecret\\n")
        print(repr(input()), repr(input("prompt> ")))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            print(repr(getpass.getpass("pw: ", stream=sys.stdout)))
        sys.stdin = io.StringIO("p 6 * 7\\nc\\n")
        def f():
            x = 1
            breakpoint()
            return x
        print(f())
        sys.stdin = sys.__stdin__
        try:
            input()
        except EOFError:
            print("EOFError")
        """)
    same(client, tmp_path, code)


def test_input_in_a_forked_child_reads_its_terminal(client, tmp_path):
    code = textwrap.dedent("""\
        import os, pty, sys
        sys.stdout.flush()
        pid, fd = pty.fork()
        if pid == 0:
            s = input("name? ")
            print("got", s, flush=True)
            os._exit(0)
        # the answer goes once the prompt is out: written earlier, the
        # terminal's echo of it could come before the prompt (a race of
        # the two processes, in python3 too)
        data = b""
        while b"name? " not in data:
            data += os.read(fd, 100)
        os.write(fd, b"hello\\n")
        while True:
            try:
                chunk = os.read(fd, 100)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        os.waitpid(pid, 0)
        print(sorted(set(data.replace(b"\\r", b"").split(b"\\n")) - {b""}))
        """)
    same(client, tmp_path, code)


# ---- 2. sys.exit ------------------------------------------------------------

@pytest.mark.parametrize("end", [
    "sys.exit()", "sys.exit(0)", "sys.exit(3)", "sys.exit('bye')", "raise SystemExit(256 + 4)",
    "sys.exit(None)", "raise SystemExit(-1)"])
def test_sys_exit_ends_the_run_as_a_script(client, tmp_path, end):
    code = f"import sys\nkept = 1\nprint('before')\n{end}\nprint('after')\n"
    r = same(client, tmp_path, code)
    assert r.error is None and "exit_code" in r.done, r
    assert r.status == ("ok" if r.done["exit_code"] == 0 else "error")
    # the context lives on, its globals kept
    assert client.execute("kept").text == "1"


def test_exit_code_absent_without_sys_exit(client):
    assert "exit_code" not in client.execute("1").done
    assert "exit_code" not in client.execute("1/0").done


# ---- 3. scripts: __file__, argv, sys.path[0]; multiprocessing ---------------

SCRIPT_FACTS = textwrap.dedent("""\
    import os, sys
    print(__name__, __file__)
    print(sys.argv, sys.orig_argv[1:])
    print(sys.path[0] == os.path.dirname(os.path.realpath(__file__)), '' in sys.path[:1])
    """)


def test_script_has_file_argv_and_path(client, tmp_path):
    same(client, tmp_path, SCRIPT_FACTS, args=("a", "b c", "--flag"))
    # afterwards the context is a notebook again
    r = client.execute("import sys; (sys.argv, sys.path[0], '__file__' in globals())")
    assert r.text == "([''], '', False)", r


def test_argv_and_file_are_checked(client):
    client.err("execute", "bad_field", code="1", argv=["a", 1])
    client.err("execute", "bad_field", code="1", argv=["a\0b"])
    client.err("execute", "bad_field", code="1", file="")
    client.err("execute", "bad_field", code="1", file=3)
    assert client.execute("1").status == "ok"


MP = textwrap.dedent("""\
    import multiprocessing as mp
    def work(x):
        return x * x
    if __name__ == "__main__":
        for method in ("spawn", "forkserver", "fork"):
            with mp.get_context(method).Pool(2) as pool:
                print(method, pool.map(work, range(5)))
    """)


def test_multiprocessing_spawn_uses_the_scripts_functions(client, tmp_path):
    same(client, tmp_path, MP)


def test_multiprocessing_spawn_from_a_cell_fails_fast(client):
    code = textwrap.dedent("""\
        import math, multiprocessing as mp
        def work(x):
            return x * x
        out = []
        for method in ("spawn", "forkserver"):
            with mp.get_context(method).Pool(2) as pool:
                out.append(pool.map(math.sqrt, [4]))  # importable: fine
                try:
                    pool.map(work, [1])
                except Exception as e:
                    out.append((type(e).__name__, "defined in a cell" in str(e)))
        try:
            mp.get_context("spawn").Process(target=work, args=(1,)).start()
        except Exception as e:
            out.append(type(e).__name__)
        with mp.get_context("fork").Pool(1) as pool:
            out.append(pool.map(work, [3]))
        out
        """)
    r = client.execute(code, timeout=60)
    assert r.status == "ok", r
    assert r.text == ("[[2.0], ('PicklingError', True), [2.0], ('PicklingError', True), "
                      "'PicklingError', [9]]"), r


# ---- 4. atexit --------------------------------------------------------------

ATEXIT = textwrap.dedent("""\
    import atexit, sys
    def bye(path, word):
        with open(path, "a") as f:
            f.write(word)
        print("handler says", word)
    atexit.register(bye, sys.argv[1], "first;")
    atexit.register(bye, sys.argv[1], "second;")  # runs first (LIFO)
    """)


def test_atexit_runs_on_delete_and_restart(daemon, client, tmp_path):
    rc, out, _ = as_script(tmp_path, ATEXIT, args=(str(tmp_path / "py.txt"),))
    assert rc == 0
    expect = (tmp_path / "py.txt").read_text()
    assert expect == "second;first;"
    for how, name in (("delete", "d1"), ("restart", "d2")):
        target = tmp_path / f"{name}.txt"
        client.ok("ctx.create", name=name)
        r = client.execute(ATEXIT, ctx=name, argv=["x", str(target)])
        assert r.status == "ok", r
        client.ok(f"ctx.{how}", ctx=name)
        wait_until(lambda: target.exists() and target.read_text() == expect)
    if True:  # what they printed is logged, no client waits for it
        wait_until(lambda: "event=atexit ctx=d1" in daemon.log_text())
        assert 'output="handler says second;\\nhandler says first;\\n"' in daemon.log_text()
    # a restarted context works, without the old handlers
    assert client.execute("1", ctx="d2").text == "1"


def test_atexit_runs_on_shutdown_within_the_grace(make_daemon, tmp_path):
    d = make_daemon("--kill-grace", "1")
    c = d.client()
    target = tmp_path / "shutdown.txt"
    assert c.execute(ATEXIT, argv=["x", str(target)]).status == "ok"
    c.ok("ctx.create", name="stuck")
    assert c.execute("import atexit, time; atexit.register(time.sleep, 3600)",
                     ctx="stuck").status == "ok"
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(15) == 0
    d.stopped_by_test = True
    assert target.read_text() == "second;first;"


# ---- 5. sys.stdout like a pipe, tracebacks from C hooks, faulthandler --------

STDOUT = textwrap.dedent("""\
    import sys
    print(sys.stdout.encoding, sys.stdout.line_buffering, sys.stdout.isatty(),
          sys.stdout.fileno(), sys.stdout.buffer.fileno(), sys.stdout.writable(),
          sys.stdout.write_through, sys.stdout.closed)
    for bad in ({"encoding": "no-such-codec"}, {"newline": "x"}):
        try:
            sys.stdout.reconfigure(**bad)
        except (LookupError, ValueError) as e:
            print(type(e).__name__, e)
    sys.stdout.reconfigure(encoding="latin-1")
    print(sys.stdout.encoding, sys.stdout.errors)
    print("caf\\u00e9")
    try:
        print("\\u20ac")
    except UnicodeEncodeError as e:
        print("UnicodeEncodeError", e.reason)
    sys.stdout.reconfigure(encoding="utf-8", newline="\\r\\n", line_buffering=True)
    print("a\\nb", sys.stdout.line_buffering)
    sys.stdout.close()
    print(sys.stdout.closed, sys.stdout.buffer.closed, file=sys.stderr)
    for f in (print, lambda: sys.stdout.buffer.write(b"x"), sys.stdout.fileno,
              sys.stdout.flush, sys.stdout.isatty):
        try:
            f()
        except ValueError as e:
            print("ValueError", e, file=sys.stderr)
    sys.stdout.close()
    """)


def test_stdout_reconfigure_and_close_as_a_pipe(client, tmp_path):
    same(client, tmp_path, STDOUT)
    # the next run has it open (what reconfigure() set stays, as any state)
    r = client.execute("import sys; print(sys.stdout.closed, sys.stdout.buffer.closed)")
    assert r.stdout == b"False False\r\n", r


# print() writes a line to the worker's own streams in one piece
# (wrk_print.c); everything a script can see of it is the interpreter's.
PRINT = textwrap.dedent("""\
    import io, pickle, sys
    print(1, 2.5, None, True, "x", sep="-", end="!\\n"); print()
    print("to stderr", 3, file=sys.stderr, flush=True)
    print(print.__name__, print.__qualname__, print.__module__, print.__self__,
          print.__text_signature__, print.__doc__.splitlines()[0], repr(print))
    print(pickle.loads(pickle.dumps(print)) is print, type(print).__name__)
    print(*range(40), sep=",")
    class Noisy:
        def __str__(self):
            print("(from __str__)", end=" ")
            return "noisy"
    print("before", Noisy(), "after")
    class Bad:
        def __str__(self):
            raise ValueError("no str")
    try:
        print("one", "two", Bad(), "never")
    except ValueError as e:
        print("| caught", e)
    print("\u00e9t\u00e9", "\u4e2d", sep="\u2014")
    for bad in (dict(sep=b""), dict(end=1), dict(foo=1), dict(flush="yes")):
        try:
            print("x", **bad)
        except TypeError as e:
            print("TypeError:", e)
    class S(str):
        def __str__(self):
            return "S!"
    print(S("s"), "t", sep=S("|"))
    print("k", **{"se" + "p": "+"}, end=".\\n")
    buf = io.StringIO()
    print("into", "a", "buffer", file=buf)
    print(repr(buf.getvalue()))
    sys.stdout.reconfigure(newline="\\r\\n")
    print("crlf", "line")
    sys.stdout.reconfigure(newline="\\n")
    print("x" * 70000, "y")
    saved, sys.stdout = sys.stdout, None
    print("to nowhere")
    sys.stdout = saved
    sys.stdout.close()
    try:
        print("closed")
    except ValueError as e:
        print(e, file=sys.stderr)
    """)


def test_print_writes_what_the_interpreters_print_writes(client, tmp_path):
    same(client, tmp_path, PRINT)


HOOKS = textwrap.dedent("""\
    import threading, sys
    def boom():
        raise ValueError("in a thread")
    t = threading.Thread(target=boom)
    t.start(); t.join()
    class D:
        def __del__(self):
            raise KeyError("in __del__")
    d = D()
    del d
    print(threading.excepthook is threading.__excepthook__,
          sys.unraisablehook is sys.__unraisablehook__)
    """)


def normalised(err, path, cell):
    return re.sub(rb"0x[0-9a-f]+", b"0x?", err.replace(str(path).encode(), cell.encode()))


def test_hook_tracebacks_show_the_cells_lines(client, tmp_path):
    rc, out, err = as_script(tmp_path, HOOKS)
    r = client.execute(HOOKS)
    cell = f"<cell-{r.done['execution_count']}>"
    assert r.status == "ok" and r.stdout == out
    assert normalised(r.stderr, "", "") == normalised(err, tmp_path / "script.py", cell)
    assert b'raise ValueError("in a thread")' in r.stderr
    assert b'raise KeyError("in __del__")' in r.stderr


def test_stack_dumps_show_no_worker_frames(client, tmp_path):
    code = textwrap.dedent("""\
        import faulthandler, sys, traceback
        def f():
            faulthandler.dump_traceback(file=sys.stdout, all_threads=False)
            traceback.print_stack(file=sys.stdout)
        f()
        """)
    same(client, tmp_path, code)
    r = client.execute("import asyncio\nawait asyncio.sleep(0)\nimport faulthandler, sys\n"
                       "faulthandler.dump_traceback(file=sys.stdout, all_threads=False)")
    assert r.status == "ok" and b"ctxd-worker" not in r.stdout, r


# ---- 6. the sandbox tier's root ------------------------------------------------

SANDBOX = textwrap.dedent("""\
    import errno, os, pty, site, socket, sys
    print(site.USER_BASE == os.path.join(os.path.expanduser("~"), ".local"))
    print(socket.getservbyname("http"), socket.getprotobyname("tcp"),
          socket.getaddrinfo("localhost", "http", socket.AF_INET)[0][4])
    m, s = os.openpty()
    os.write(m, b"through a pty\\n")
    print(os.read(s, 100))
    sys.stdout.flush()
    pid, fd = pty.fork()
    if pid == 0:
        print("child on a tty:", os.isatty(0), flush=True)
        os._exit(7)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 100)
        except OSError:  # EIO: the child's side closed
            break
        if not chunk:
            break
        data += chunk
    print(data.strip(), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    a, b = socket.socketpair()
    srv = socket.socket(socket.AF_UNIX)
    srv.bind("u.sock")
    srv.listen()
    cl = socket.socket(socket.AF_UNIX)
    cl.connect("u.sock")
    conn, _ = srv.accept()
    cl.send(b"over AF_UNIX")
    print(conn.recv(100))
    os.unlink("u.sock")
    os.setreuid(-1, -1)
    os.setregid(-1, -1)
    open("x.txt", "w").close()
    try:
        os.setxattr("x.txt", "user.k", b"v")
        print("xattr", os.getxattr("x.txt", "user.k"))
    except OSError as e:
        print("xattr", b"v" if e.errno == errno.EOPNOTSUPP else e)
    os.unlink("x.txt")
    from multiprocessing import Manager
    with Manager() as mg:
        d = mg.dict(a=1)
        print(dict(d))
    """)


@pytest.fixture
def sd(make_daemon, tmp_path):
    d = make_daemon("--state-dir", str(tmp_path / "state"))
    if "sandbox" not in d.hello["tiers"]:
        pytest.skip("the sandbox tier is not offered here")
    return d


def test_sandbox_root_runs_ordinary_code(sd, tmp_path):
    c = sd.client()
    c.ok("ctx.create", name="box", tier="sandbox")
    rc, out, err = as_script(tmp_path, SANDBOX)
    assert rc == 0, err
    code = SANDBOX  # the context's own directory is its cwd, as tmp_path is the script's
    r = c.execute(code, ctx="box")
    assert (r.status, r.stdout, r.stderr) == ("ok", out, b""), r
    # without network_access: no AF_INET socket, as before
    r = c.execute("import socket; socket.socket()", ctx="box")
    assert r.error and r.error["ename"] == "PermissionError", r


def test_sandbox_with_network_has_the_resolver_files(sd, tmp_path):
    c = sd.client()
    c.ok("ctx.create", name="net", tier="sandbox", policy={"network_access": True})
    code = ("import os\nprint([os.path.exists(p) for p in "
            "('/etc/resolv.conf', '/etc/services', '/etc/protocols', '/etc/nsswitch.conf')])\n")
    rc, out, _ = as_script(tmp_path, code)
    r = c.execute(code, ctx="net")
    assert r.status == "ok" and r.stdout == out, r
