"""stdout/stderr capture: Python-level and raw fd writes, streaming, volume."""

import time


def test_print_stdout(client):
    r = client.execute("print('hello')\nprint('world')")
    assert r.status == "ok", r
    assert r.stdout == b"hello\nworld\n"
    assert r.stderr == b""


def test_stderr_stream(client):
    r = client.execute("import sys\nprint('err line', file=sys.stderr)\n"
                       "sys.stderr.write('more')\nprint('out')")
    assert r.status == "ok", r
    assert r.stderr == b"err line\nmore"
    assert r.stdout == b"out\n"


def test_os_write_fd1_and_fd2(client):
    r = client.execute("import os\nos.write(1, b'raw out\\n')\nos.write(2, b'raw err\\n')\n"
                       "os.write(1, b'\\x00\\xff\\xfe bytes\\n')")
    assert r.status == "ok", r
    assert r.stdout == b"raw out\n\x00\xff\xfe bytes\n"
    assert r.stderr == b"raw err\n"


def test_os_system_output_captured(client):
    r = client.execute("import os\nrc = os.system('echo hi')\nrc")
    assert r.status == "ok", r
    assert r.stdout == b"hi\n"
    assert r.text == "0"
    r = client.execute("os.system('echo oops >&2')")
    assert r.stderr == b"oops\n", r


def test_print_then_subprocess_ordered(client):
    r = client.execute("import os, subprocess\nprint('a')\nos.system('echo b')\n")
    assert r.status == "ok", r
    assert r.stdout == b"a\nb\n"
    r = client.execute("print('c')\nsubprocess.run(['echo', 'd'])\n")
    assert r.stdout == b"c\nd\n", r


def test_unencodable_text_backslashreplace(client):
    r = client.execute("print('caf\\u00e9 \\udcff')")
    assert r.status == "ok", r
    assert r.stdout == "café ".encode() + b"\\udcff\n"


def _wait_for_file_code(path):
    return (f"import os, time\nfor _ in range(2000):\n    if os.path.exists({str(path)!r}): break\n"
            "    time.sleep(0.01)\nelse:\n    print('never released')\n")


def test_output_streams_while_running(client, tmp_path):
    # The run prints 1, then waits until the test has *received* that 1
    # (the test then creates a file), then prints 2: it finishes normally
    # only if output is streamed while the code still runs.
    release = tmp_path / "release"
    rid = client.submit("print(1)\n" + _wait_for_file_code(release) + "print(2)")
    first = client.wait_event(rid, "stream")[-1]
    assert first["data"] == b"1\n", first
    release.touch()
    r = client.wait(rid)
    assert r.status == "ok", r
    assert r.stdout == b"1\n2\n", r.stdout


def test_output_streams_without_newline(client, tmp_path):
    # no newline, no flush: still forwarded while the run goes on
    release = tmp_path / "release"
    rid = client.submit("import sys\nsys.stdout.write('partial')\n" + _wait_for_file_code(release))
    msg = client.wait_event(rid, "stream")[-1]
    assert msg["data"] == b"partial"
    release.touch()
    r = client.wait(rid)
    assert r.status == "ok" and r.stdout == b"partial", r


def _numbered_lines(n, width):
    return b"".join(b"%08d " % i + b"x" * (width - 10) + b"\n" for i in range(n))


def test_10mb_print_complete_in_order(client):
    n, width = 100_000, 100  # 10 MB
    code = (f"for i in range({n}):\n"
            f"    print('%08d ' % i + 'x' * {width - 10})")
    r = client.execute(code)
    assert r.status == "ok", r.done
    out = r.stdout
    expected = _numbered_lines(n, width)
    assert len(out) == len(expected), f"got {len(out)} bytes, expected {len(expected)}"
    if out != expected:
        lines = out.split(b"\n")
        for i, line in enumerate(lines):
            if line != b"%08d " % i + b"x" * (width - 10):
                raise AssertionError(f"line {i} wrong: {line[:40]!r}")
    assert out == expected


def test_10mb_raw_and_stderr_complete(client):
    # raw fd writes in large chunks plus interleaved stderr
    code = ("import os, sys\n"
            "blk = bytes(range(256)) * 4096\n"  # 1 MiB
            "for i in range(10):\n"
            "    os.write(1, bytes([i]) * 16 + blk)\n"
            "    sys.stderr.write('e%d\\n' % i)\n")
    r = client.execute(code)
    assert r.status == "ok", r.done
    blk = bytes(range(256)) * 4096
    expected = b"".join(bytes([i]) * 16 + blk for i in range(10))
    out = r.stdout
    assert len(out) == len(expected)
    assert out == expected
    assert r.stderr == b"".join(b"e%d\n" % i for i in range(10))


def test_slow_reader_loses_nothing(daemon):
    # A client with a tiny receive queue does not read while 8 MB are
    # produced in many flushed writes, then reads everything.
    slow = daemon.client(rcvhwm=2)
    n, width = 80_000, 100
    code = ("import sys\n"
            f"for i in range({n}):\n"
            f"    sys.stdout.write('%08d ' % i + 'x' * {width - 10} + '\\n')\n"
            "    if i % 16 == 0:\n"
            "        sys.stdout.flush()\n")
    other = daemon.client()
    other.ok("ctx.create", name="bystander")
    rid = slow.submit(code)
    time.sleep(1)
    # while the slow client is not reading, the daemon serves others
    t0 = time.monotonic()
    assert other.execute("1", ctx="bystander").text == "1"
    assert other.ok("hello")
    assert time.monotonic() - t0 < 10
    time.sleep(2)
    r = slow.wait(rid, 20)
    assert r.status == "ok", r.done
    assert r.stdout == _numbered_lines(n, width)


def test_output_of_other_context_not_mixed(client):
    client.ok("ctx.create", name="o1")
    client.ok("ctx.create", name="o2")
    a = client.submit("for i in range(2000):\n    print('A' * 50)", ctx="o1")
    b = client.submit("for i in range(2000):\n    print('B' * 50)", ctx="o2")
    ra, rb = client.wait(a), client.wait(b)
    assert ra.stdout == (b"A" * 50 + b"\n") * 2000
    assert rb.stdout == (b"B" * 50 + b"\n") * 2000


def test_output_before_error_arrives(client):
    r = client.execute("print('before')\nimport os\nos.write(1, b'raw\\n')\nraise RuntimeError('x')")
    assert r.status == "error", r
    assert r.stdout == b"before\nraw\n"


def test_output_written_before_crash_arrives(client):
    # Python-level output flushed before os._exit, and raw output before a
    # segfault, are output of the run: they arrive before `done died`.
    r = client.execute("import sys, os\nsys.stdout.write('p' * 300_000 + '\\n')\n"
                       "sys.stdout.flush()\nos._exit(3)")
    assert r.status == "died", r.done
    assert r.stdout == b"p" * 300_000 + b"\n"
    # repeated: losing the tail of the raw output is a race
    lost = []
    for i in range(8):
        r = client.execute("import os, ctypes\nos.write(1, b'before crash\\n')\n"
                           "os.write(2, b'on stderr\\n')\nctypes.string_at(0)")
        assert r.status == "died", r.done
        if r.stdout != b"before crash\n" or not r.stderr.startswith(b"on stderr\n"):
            lost.append((i, r.stdout, r.stderr))
    assert not lost, f"raw output written before a segfault lost in {len(lost)}/8 runs: {lost}"


def test_output_of_a_run_that_dies_at_once_arrives(client):
    # A short run's `start` is held back by the worker to go out with its
    # first frame; a run that dies before it sent any frame still started:
    # its `accepted` comes, then what it wrote (recovered from the output
    # memory and the pipe), then `done died`. The dying run is made short:
    # the same cell ran just before (compiled once), in a warm worker.
    # Repeated: whether it ends before the hold does is a race.
    for body, want in [("print('unflushed')\nif die: os._exit(3)", b"unflushed\n")] * 10 + \
            [("os.write(1, b'raw')\nif die: os.kill(os.getpid(), 9)", b"raw")] * 2:
        assert client.execute("import os\ndie = False").status == "ok"
        assert client.execute(body).status == "ok"
        client.execute("die = True")
        r = client.execute(body)
        assert r.status == "died", r
        assert [e["t"] for e in r.events] == ["accepted", "stream", "done"], r
        assert r.stdout == want, r
        c = client.execute("1")  # the next incarnation says why
        assert c.accepted.get("previous_death"), c


def test_an_interrupt_reaches_a_run_that_writes_nothing(client):
    # The run's `start` (held back by the worker until its first frame) goes
    # out on the worker's timer: an interrupt sent while the run is silent
    # lands.
    for _ in range(3):
        rid = client.submit("while True:\n    pass")
        client.wait_event(rid, "accepted")
        client.ok("interrupt", ctx="default")
        r = client.wait(rid)
        assert r.status == "interrupted", r
        rid = client.submit("import time\ntime.sleep(60)")
        client.ok("interrupt", ctx="default")  # asked before the start came
        r = client.wait(rid)
        assert r.status == "interrupted", r
    # User code that puts something else in the timer's place (here
    # /dev/null, always readable) leaves starts going out at once.
    r = client.execute("import os\n"
                       "t = [int(f) for f in os.listdir('/proc/self/fd')\n"
                       "     if os.path.exists(f'/proc/self/fd/{f}')\n"
                       "     and os.readlink(f'/proc/self/fd/{f}') == 'anon_inode:[timerfd]']\n"
                       "for f in t:\n"
                       "    os.dup2(os.open('/dev/null', os.O_RDONLY), f)\n"
                       "len(t)")
    assert r.status == "ok" and int(r.text) >= 1, r
    for _ in range(2):
        rid = client.submit("while True:\n    pass")
        client.wait_event(rid, "accepted")
        client.ok("interrupt", ctx="default")
        assert client.wait(rid).status == "interrupted"


def test_delete_with_slow_client_keeps_terminal_replies(daemon):
    # The slow client's messages are held back by the daemon; deleting the
    # context must not drop them: both runs still get their `done`.
    slow = daemon.client(rcvhwm=2)
    admin = daemon.client()
    admin.ok("ctx.create", name="flood")
    rid = slow.submit("import sys, time\nfor i in range(20000):\n"
                      "    sys.stdout.write('z' * 100 + '\\n')\n    sys.stdout.flush()\n"
                      "time.sleep(30)", ctx="flood")
    q = slow.submit("1", ctx="flood")
    time.sleep(1.5)  # not reading: the daemon's send queue to us fills
    admin.ok("ctx.delete", ctx="flood")
    time.sleep(0.5)
    r = slow.wait(rid, 20)
    assert r.status == "aborted" and r.done["cause"] == "context deleted", r.done
    rq = slow.wait(q, 20)
    assert rq.status == "aborted", rq
