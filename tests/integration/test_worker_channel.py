"""The worker channel (PROTOCOL.md section 9), tested against ctxd-worker alone.

Each test spawns the worker binary the way the supervisor does: a socketpair
end on fd 3, /dev/null on fd 0, its own process group. The binary comes from
$CTXD_WORKER_BIN (default /tmp/wbuild/daemon/ctxd-worker).

Run with the system interpreter:
    /usr/bin/python3 -m pytest tests/integration/test_worker_channel.py
"""

import os
import random
import signal
import socket
import struct
import time

import msgpack
import pytest

WORKER_BIN = os.environ.get("CTXD_WORKER_BIN", "/tmp/wbuild/daemon/ctxd-worker")
MAX_FRAME = 20 * 1024 * 1024
STREAM_CHUNK = 64 * 1024
# A hang must fail the test, never hang the suite.
RECV_TIMEOUT = 60.0


class Worker:
    """One worker process and our end of its channel."""

    def __init__(self, env=None, cwd=None):
        ours, theirs = socket.socketpair()
        fd = theirs.fileno()
        # POSIX_SPAWN_DUP2 onto the same number would keep close-on-exec.
        moved = os.dup(fd) if fd == 3 else fd
        devnull = os.open(os.devnull, os.O_RDONLY)
        old_cwd = os.getcwd()
        try:
            if cwd:
                os.chdir(cwd)
            self.pid = os.posix_spawn(
                WORKER_BIN,
                ["ctxd-worker"],
                dict(os.environ, **(env or {})),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, moved, 3),
                    (os.POSIX_SPAWN_DUP2, devnull, 0),
                ],
                setpgroup=0,
            )
        finally:
            os.chdir(old_cwd)
            os.close(devnull)
            if moved != fd:
                os.close(moved)
            theirs.close()
        self.sock = ours
        self.sock.settimeout(RECV_TIMEOUT)
        self.ready = self.recv()

    def _recv_exact(self, n):
        parts = []
        while n:
            data = self.sock.recv(min(n, 1 << 20))
            if not data:
                raise EOFError("worker closed the channel")
            parts.append(data)
            n -= len(data)
        return b"".join(parts)

    def recv(self):
        (n,) = struct.unpack(">I", self._recv_exact(4))
        assert n <= MAX_FRAME
        msg = msgpack.unpackb(self._recv_exact(n), raw=False, strict_map_key=True)
        assert isinstance(msg, dict) and isinstance(msg.get("t"), str), msg
        if msg["t"] == "stream":
            assert msg["name"] in ("stdout", "stderr")
            assert isinstance(msg["data"], bytes)
            assert 0 < len(msg["data"]) <= STREAM_CHUNK
        return msg

    def send(self, msg):
        data = msgpack.packb(msg, use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(data)) + data)

    def submit(self, code, count=1, silent=False, env=None):
        # The supervisor's run id (PROTOCOL.md section 9): echoed in start and done.
        self.run_id = random.getrandbits(64) or 1
        self.send(
            {"t": "run", "run_id": self.run_id, "code": code, "execution_count": count,
             "silent": silent, "env": env or {}}
        )

    def collect(self, on_event=None, events=None):
        """Events of the current run up to and including done (after the
        ones already received, if given)."""
        events = list(events or [])
        while True:
            msg = self.recv()
            events.append(msg)
            if on_event:
                on_event(msg)
            if msg["t"] in ("start", "done"):
                assert msg["run_id"] == self.run_id, msg
            if msg["t"] == "done":
                return Run(events)

    def run(self, code, **kw):
        self.submit(code, **kw)
        return self.collect()

    def close(self):
        self.sock.close()
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = None

    def wait_exit(self):
        """Exit status of a worker expected to end by itself."""
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        return os.waitstatus_to_exitcode(status)


class Run:
    """The frames of one run, checked for the order section 9 requires."""

    def __init__(self, events):
        # `between {bytes}` may come first: output written since the last
        # run, counted and dropped (section 9).
        self.between = 0
        while events and events[0]["t"] == "between":
            assert isinstance(events[0]["bytes"], int) and events[0]["bytes"] > 0, events[0]
            self.between += events[0]["bytes"]
            events = events[1:]
        self.events = events
        kinds = [e["t"] for e in events]
        assert kinds[0] == "start", kinds
        assert kinds[-1] == "done", kinds
        rank = {"start": 0, "stream": 1, "result": 2, "error": 2, "done": 3}
        assert all(k in rank for k in kinds), kinds
        ranks = [rank[k] for k in kinds]
        assert ranks == sorted(ranks), kinds
        assert kinds.count("start") == 1 and kinds.count("done") == 1
        assert kinds.count("result") + kinds.count("error") <= 1
        self.done = events[-1]
        assert self.done["status"] in ("ok", "error", "interrupted")
        assert isinstance(self.done["cpu_time"], float) and self.done["cpu_time"] >= 0

    @property
    def status(self):
        return self.done["status"]

    def out(self, name="stdout"):
        return b"".join(e["data"] for e in self.events if e["t"] == "stream" and e["name"] == name)

    @property
    def result(self):
        rs = [e for e in self.events if e["t"] == "result"]
        return rs[0]["data"]["text/plain"] if rs else None

    @property
    def error(self):
        es = [e for e in self.events if e["t"] == "error"]
        return es[0] if es else None


@pytest.fixture
def worker():
    if not os.access(WORKER_BIN, os.X_OK):
        pytest.fail(f"worker binary {WORKER_BIN} not built (set CTXD_WORKER_BIN)")
    w = Worker()
    yield w
    w.close()


# ---- start-up and state ---------------------------------------------------


def test_ready_frame(worker):
    assert worker.ready == {"t": "ready", "pid": worker.pid}


def test_globals_persist_across_runs(worker):
    assert worker.run("x = 41").status == "ok"
    r = worker.run("x += 1\nx", count=2)
    assert r.status == "ok"
    assert r.result == "42"


def test_trailing_expression_result(worker):
    r = worker.run("a = [1, 2]\na + [3]")
    assert r.result == "[1, 2, 3]"
    assert worker.run("_").result == "[1, 2, 3]"  # _ holds the last result
    assert worker.run("None").result is None
    assert worker.run("x = 1").result is None
    assert worker.run("'\\udcff'").result == "'\\udcff'"


def test_silent_run_has_no_result(worker):
    r = worker.run("5 * 5", silent=True)
    assert r.status == "ok" and r.result is None
    assert worker.run("_ if '_' in dir() else 'unset'").result == "'unset'"


def test_cpu_time_present(worker):
    r = worker.run("s = 0\nfor i in range(2_000_000): s += i")
    assert r.status == "ok"
    assert r.done["cpu_time"] > 0


def test_dist_packages_importable(worker):
    # python3-msgpack lives in Debian's dist-packages, found through site.
    r = worker.run("import msgpack, sys\nsys.executable")
    assert r.status == "ok", r.error
    assert r.result.startswith("'/usr/bin/python3")


def test_stray_pythonhome_ignored():
    w = Worker(env={"PYTHONHOME": "/nonexistent/python"})
    try:
        assert w.run("import os\n1 + 1").result == "2"
    finally:
        w.close()


def test_cwd_module_import(tmp_path):
    (tmp_path / "localmod.py").write_text("VALUE = 'here'\n")
    w = Worker(cwd=str(tmp_path))
    try:
        assert w.run("import localmod\nlocalmod.VALUE").result == "'here'"
    finally:
        w.close()


# ---- output capture -------------------------------------------------------


def test_stream_is_live(worker, tmp_path):
    """The first output arrives while the run still runs: the code waits
    for a file the test creates only once it has received that output."""
    release = tmp_path / "release"
    worker.submit("import os, time\nprint(1)\n"
                  f"for _ in range(2000):\n    if os.path.exists({str(release)!r}): break\n"
                  "    time.sleep(0.01)\nelse:\n    print('never released')\nprint(2)")

    def note(msg):
        if msg["t"] == "stream":
            release.touch()

    r = worker.collect(note)
    assert r.out() == b"1\n2\n"


def test_subprocess_output_captured(worker):
    r = worker.run("import os\nos.system('echo hi')")
    assert r.out() == b"hi\n"
    r = worker.run("import subprocess\nsubprocess.run(['sh', '-c', 'echo err >&2'])\nNone")
    assert r.out("stderr") == b"err\n"


def test_raw_fd_write_captured(worker):
    r = worker.run("import os\nos.write(1, b'raw')\nos.write(2, b'RAW')\nNone")
    assert r.out() == b"raw"
    assert r.out("stderr") == b"RAW"


def test_print_then_subprocess_order(worker):
    code = "import os\nfor i in range(50):\n    print('py', i)\n    os.system('echo sh %d' % i)\n"
    r = worker.run(code)
    expected = "".join("py %d\nsh %d\n" % (i, i) for i in range(50)).encode()
    assert r.out() == expected


def test_stderr_and_text_semantics(worker):
    r = worker.run(
        "import sys\n"
        "n = sys.stdout.write('h\\u00e9\\udcff')\n"
        "sys.stderr.write('e')\n"
        "sys.stdout.buffer.write(b'\\xff')\n"
        "sys.stdout.flush()\n"
        "(n, sys.stdout.fileno(), sys.stderr.fileno(), sys.stdout.isatty(),"
        " sys.stdout.encoding, sys.stdout.writable())"
    )
    assert r.out() == "hé".encode() + b"\\udcff" + b"\xff"
    assert r.out("stderr") == b"e"
    assert r.result == "(3, 1, 2, False, 'utf-8', True)"


def test_ten_megabytes_in_order(worker):
    code = (
        "import sys\n"
        "for i in range(100_000):\n"
        "    sys.stdout.write('%08d' % i + 'y' * 91 + '\\n')\n"
    )
    r = worker.run(code)
    expected = "".join("%08d" % i + "y" * 91 + "\n" for i in range(100_000)).encode()
    assert len(expected) == 10_000_000
    assert r.out() == expected


def test_raw_ten_megabytes_in_order(worker):
    code = (
        "import os\n"
        "data = b''.join(b'%07d\\n' % i for i in range(1_250_000))\n"
        "n = 0\n"
        "while n < len(data):\n"
        "    n += os.write(1, data[n:n + 100_000])\n"
    )
    r = worker.run(code)
    assert r.out() == b"".join(b"%07d\n" % i for i in range(1_250_000))


def test_large_single_write(worker):
    r = worker.run("print('z' * 3_000_001, end='')")
    assert r.out() == b"z" * 3_000_001


def test_many_prints_share_frames(worker):
    """1,000,000 prints arrive complete, in far fewer frames than prints."""
    r = worker.run("for i in range(1_000_000): print('x' * 99)")
    assert r.status == "ok"
    frames = [e for e in r.events if e["t"] == "stream"]
    assert sum(len(e["data"]) for e in frames) == 100_000_000
    assert r.out() == (b"x" * 99 + b"\n") * 1_000_000
    assert len(frames) < 100_000


def test_flush_before_os_exit(worker):
    """flush() means the data has left the worker, even if it dies next."""
    worker.submit("import os, sys\nprint('last words', end='')\nsys.stdout.flush()\nos._exit(0)")
    events = []
    with pytest.raises(EOFError):
        while True:
            events.append(worker.recv())
    data = b"".join(e["data"] for e in events if e["t"] == "stream")
    assert data == b"last words"
    assert worker.wait_exit() == 0


def test_background_thread_output(worker):
    """A thread that keeps printing between runs never breaks the framing."""
    worker.run(
        "import threading, time\n"
        "stop = False\n"
        "def chatter():\n"
        "    while not stop:\n"
        "        print('bg')\n"
        "        time.sleep(0.0005)\n"
        "t = threading.Thread(target=chatter)\n"
        "t.start()\n"
    )
    for i in range(20):
        r = worker.run("print('fg%d')\n%d" % (i, i), count=i + 2)
        assert r.result == str(i)
        lines = r.out().decode().split("\n")
        assert "fg%d" % i in lines
        assert set(lines) <= {"bg", "fg%d" % i, ""}
    assert worker.run("stop = True\nt.join()\n'stopped'").result == "'stopped'"


def test_output_of_idle_time_discarded(worker):
    r = worker.run("import subprocess\nsubprocess.Popen(['sh', '-c', 'sleep 0.3; echo late'])\nNone")
    assert r.out() == b""
    time.sleep(0.8)
    r = worker.run("print('next')")
    assert r.out() == b"next\n"
    assert r.between == len(b"late\n")  # counted as between-run output


def test_forked_child_output_and_exit(worker):
    code = (
        "import os\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('child')\n"
        "else:\n"
        "    _, st = os.waitpid(pid, 0)\n"
        "    print('parent', os.waitstatus_to_exitcode(st))\n"
    )
    r = worker.run(code)
    assert r.status == "ok"
    assert r.out() == b"child\nparent 0\n"
    assert worker.run("'still here'").result == "'still here'"


# ---- errors -----------------------------------------------------------------


def test_error_traceback_user_frames_only(worker):
    code = "x = 1\n\ndef f(n):\n    return 10 // n\n\nf(0)\n"
    r = worker.run(code, count=7)
    assert r.status == "error"
    e = r.error
    assert e["ename"] == "ZeroDivisionError"
    assert e["evalue"] == "integer division or modulo by zero"
    tb = e["traceback"]
    assert all(isinstance(line, str) and "\n" not in line for line in tb)
    assert tb[0] == "Traceback (most recent call last):"
    assert '  File "<cell-7>", line 6, in <module>' in tb
    assert '  File "<cell-7>", line 4, in f' in tb
    assert "    return 10 // n" in tb
    assert tb[-1] == "ZeroDivisionError: integer division or modulo by zero"
    assert not any("ctxd-worker" in line for line in tb), tb


def test_traceback_into_earlier_cell(worker):
    worker.run("def g():\n    raise KeyError('k')\n", count=1)
    r = worker.run("\n\ng()", count=2)
    tb = r.error["traceback"]
    assert '  File "<cell-2>", line 3, in <module>' in tb
    assert '  File "<cell-1>", line 2, in g' in tb
    assert "    raise KeyError('k')" in tb


def test_chained_exception(worker):
    code = "try:\n    {}['missing']\nexcept KeyError as e:\n    raise ValueError('wrapped') from e\n"
    r = worker.run(code)
    e = r.error
    assert e["ename"] == "ValueError" and e["evalue"] == "wrapped"
    text = "\n".join(e["traceback"])
    assert "KeyError: 'missing'" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert '  File "<cell-1>", line 2, in <module>' in e["traceback"]
    assert '  File "<cell-1>", line 4, in <module>' in e["traceback"]
    assert "ctxd-worker" not in text


def test_syntax_error(worker):
    r = worker.run("x = 1\ny = (\n", count=3)
    assert r.status == "error"
    e = r.error
    assert e["ename"] == "SyntaxError"
    assert any('File "<cell-3>", line 2' in line for line in e["traceback"])
    assert e["traceback"][-1].startswith("SyntaxError:")
    assert "ctxd-worker" not in "\n".join(e["traceback"])
    assert worker.run("'alive'").result == "'alive'"


def test_system_exit_ends_the_run_with_its_code(worker):
    r = worker.run("import sys\nsys.exit(3)")
    assert r.status == "error" and r.error is None and r.done["exit_code"] == 3
    r = worker.run("sys.exit()")
    assert r.status == "ok" and r.done["exit_code"] == 0
    assert "exit_code" not in worker.run("1 + 1").done
    assert worker.run("1 + 1").result == "2"


def test_output_before_error_arrives(worker):
    r = worker.run("print('before')\nraise RuntimeError('x')")
    assert r.out() == b"before\n"
    assert r.status == "error" and r.error["ename"] == "RuntimeError"


# ---- interrupts ---------------------------------------------------------------


def test_sigint_interrupts_and_keeps_globals(worker):
    worker.run("kept = 'yes'")
    worker.submit("while True:\n    pass\n")
    start = worker.recv()
    assert start == {"t": "start", "run_id": worker.run_id}
    time.sleep(0.2)
    os.kill(worker.pid, signal.SIGINT)
    r = worker.collect(events=[start])
    assert r.status == "interrupted"
    assert r.error["ename"] == "KeyboardInterrupt"
    assert worker.run("kept").result == "'yes'"


def test_sigint_interrupts_sleep(worker):
    worker.submit("import time\ntime.sleep(60)")
    start = worker.recv()
    time.sleep(0.2)
    os.kill(worker.pid, signal.SIGINT)
    r = worker.collect(events=[start])
    assert r.status == "interrupted"
    assert '  File "<cell-1>", line 2, in <module>' in r.error["traceback"]
    assert r.error["traceback"][-1] == "KeyboardInterrupt"


def test_sigint_while_idle_is_discarded(worker):
    worker.run("x = 1")
    os.kill(worker.pid, signal.SIGINT)
    time.sleep(0.1)
    r = worker.run("import time\ntime.sleep(0.2)\nx")
    assert r.status == "ok"
    assert r.result == "1"


# ---- environment ----------------------------------------------------------------


def test_env_applied_and_restored(worker):
    worker.run("import os\nos.environ['CTXD_KEEP'] = 'old'\nos.environ.pop('CTXD_NEW', None)")
    r = worker.run(
        "import os, subprocess\n"
        "print(subprocess.run(['sh', '-c', 'echo $CTXD_NEW'], capture_output=True).stdout)\n"
        "(os.environ['CTXD_KEEP'], os.environ['CTXD_NEW'])",
        env={"CTXD_KEEP": "run", "CTXD_NEW": "fresh"},
    )
    assert r.result == "('run', 'fresh')"
    assert r.out() == b"b'fresh\\n'\n"
    r = worker.run("(os.environ.get('CTXD_KEEP'), os.environ.get('CTXD_NEW'))")
    assert r.result == "('old', None)"


def test_env_restored_after_error(worker):
    r = worker.run("raise ValueError", env={"CTXD_E": "1"})
    assert r.status == "error"
    assert worker.run("import os\nos.environ.get('CTXD_E')").result is None


def test_bad_env_name_is_an_error(worker):
    r = worker.run("1", env={"A=B": "x", "CTXD_OK": "y"})
    assert r.status == "error"
    assert worker.run("import os\nos.environ.get('CTXD_OK')").result is None


# ---- channel misuse -------------------------------------------------------------


def test_unexpected_frame_exits_2(worker):
    worker.send({"t": "bogus"})
    assert worker.wait_exit() == 2


def test_undecodable_frame_exits_2(worker):
    worker.sock.sendall(struct.pack(">I", 3) + b"\xc1\xc1\xc1")
    assert worker.wait_exit() == 2


def test_oversized_frame_exits_2(worker):
    worker.sock.sendall(struct.pack(">I", MAX_FRAME + 1))
    assert worker.wait_exit() == 2


def test_channel_close_ends_worker():
    # The supervisor is gone: the worker ends and takes the processes its
    # user code started (its process group, itself included) with it.
    w = Worker()
    child = w.run("import subprocess\np = subprocess.Popen(['sleep', '100'])\np.pid")
    pid = int(child.result)
    w.sock.close()
    assert w.wait_exit() in (0, -signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "a child of the worker outlived its supervisor channel"


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:  # gone before the open, or reaped mid-read (ESRCH)
        return False
