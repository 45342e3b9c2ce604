"""The supervisor trusts no worker (README guarantee 7, PROTOCOL.md section 9).

User code shares the worker's process, so it can write the worker's channel
(fd 3) with frames of its own. Here it does: forged `forked` frames naming
pid 1, the supervisor, another context's worker or an unrelated process;
forged `start` / `stream` / `done` / `answer` frames with wrong run ids and
with the right one (found in the worker's own memory, as an attacker would);
oversized frames and garbage. Each time the worker is killed and reported,
no other client's run sees a forged frame, nothing outside the context is
signalled, and the daemon goes on serving.

Never run these against a daemon without the checks while it runs as root:
an adopted `forked {pid: 1}` there turns `ctx.delete` into kill(-1, SIGKILL).
The `forked` tests kill such a daemon with SIGKILL (which signals nothing
else) as soon as they see a foreign pid adopted, and fail.

Run with the system interpreter:
    /usr/bin/python3 -m pytest tests/integration/test_forged_frames.py
"""

import os
import signal
import subprocess
import time
import uuid

import pytest

from conftest import pid_gone, proc_start, wait_until

BROKE = "broke the channel protocol"

# Runs inside the worker: a msgpack encoder (the worker need not have the
# msgpack package), frames, and a search of the worker's own memory for the
# run id the supervisor sent (the bytes of the last request frame are still
# in the worker's input buffer). Everything that runs while a fork waits for
# the GIL goes through ctypes.PyDLL, which keeps the GIL held.
HELPERS = r'''
import ctypes, os, re, struct, sys, threading, time
_libc = ctypes.PyDLL(None)
_libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
_libc.pread.restype = ctypes.c_ssize_t
_libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
_libc.read.restype = ctypes.c_ssize_t
_libc.write.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
_libc.write.restype = ctypes.c_ssize_t
_libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.usleep.argtypes = [ctypes.c_uint]

def _mp(o):
    if isinstance(o, bool):
        return b"\xc3" if o else b"\xc2"
    if isinstance(o, int):
        return b"\xcf" + struct.pack(">Q", o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        b = o.encode()
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(o, bytes):
        return b"\xc6" + struct.pack(">I", len(o)) + o
    if isinstance(o, list):
        return b"\xdd" + struct.pack(">I", len(o)) + b"".join(_mp(x) for x in o)
    if isinstance(o, dict):
        return b"\xdf" + struct.pack(">I", len(o)) + b"".join(_mp(k) + _mp(v) for k, v in o.items())
    raise TypeError(o)

def _frame(o):
    b = _mp(o)
    return struct.pack(">I", len(b)) + b

def _send(data):
    n = 0
    while n < len(data):
        w = _libc.write(3, data[n:], len(data) - n)
        if w <= 0:
            raise OSError("write to the channel failed")
        n += w

def _forge(*msgs):
    _send(b"".join(_frame(m) for m in msgs))

def _maps():
    fd = _libc.open(b"/proc/self/maps", 0)
    out = b""
    buf = ctypes.create_string_buffer(1 << 16)
    while True:
        n = _libc.read(fd, buf, len(buf))
        if n <= 0:
            break
        out += buf.raw[:n]
    _libc.close(fd)
    return out.decode()

_mem = os.open("/proc/self/mem", os.O_RDONLY)

def _find_id(prefix, suffix):
    """The 8 bytes of a uint64 between prefix and suffix in this process's
    writable memory; 0 when no such bytes exist."""
    pat = re.compile(re.escape(prefix) + b"(.{8})" + suffix, re.S)
    for line in _maps().splitlines():
        f = line.split()
        if len(f) < 2 or not f[1].startswith("rw"):
            continue
        if len(f) >= 6 and f[5] in ("[vvar]", "[vsyscall]", "[vdso]"):
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if hi - lo > (1 << 28):
            continue
        buf = ctypes.create_string_buffer(hi - lo)
        n = _libc.pread(_mem, buf, hi - lo, lo)
        if n <= 0:
            continue
        m = pat.search(buf.raw[:n])
        if m:
            return struct.unpack(">Q", m.group(1))[0]
    return 0

def _my_run_id(marker):
    """The id of the running run: its `run` frame holds the marker."""
    return _find_id(b"\xa1t\xa3run\xa6run_id\xcf",
                    re.escape(b"\xa4code") + b"(?:[\xa0-\xbf]|\xd9.|\xda..|\xdb....)"
                    + re.escape(marker.encode()))
'''


def marker():
    return "# forged-" + uuid.uuid4().hex


def forging_code(mark, body):
    """User code: the marker first (it finds its own run frame by it)."""
    return f"{mark}\n{HELPERS}\n{body}\n"


def assert_daemon_serves(daemon, client):
    """hello answers and a brand new context runs normally."""
    assert client.ok("hello")["t"] == "ok"
    name = "fresh-" + uuid.uuid4().hex[:8]
    client.ok("ctx.create", name=name)
    r = client.execute("print('still fine'); 6 * 7", ctx=name)
    assert r.status == "ok", r
    assert r.stdout == b"still fine\n" and r.text == "42", r
    client.ok("ctx.delete", ctx=name)
    assert daemon.alive()


def died_of_forgery(done):
    assert done["t"] == "done", done
    assert done["status"] in ("died", "aborted"), done
    assert BROKE in done.get("cause", ""), done


# ---- forged `forked` -----------------------------------------------------


def forked_forger(pid, right_id, fork_name):
    """User code that leaves a thread behind. Once the run is over (the main
    thread runs no Python), it takes the GIL and keeps it (ctypes.PyDLL
    calls only) while it looks in memory for the `fork` frame the test asks
    for next: the worker has then read the frame and waits for the GIL to
    fork. It writes `forked {pid}` with that fork's run id (or a wrong one):
    a forged answer while the fork is pending."""
    name = fork_name.encode()
    suffix = repr(b"\xa4name" + bytes([0xA0 + len(name)]) + name)
    rid = "rid" if right_id else "0x5eed5eed5eed5eed"
    body = f"""
sys.setswitchinterval(600)
_main = threading.main_thread().ident
def _forger():
    while _main in sys._current_frames():
        time.sleep(0.01)
    time.sleep(0.1)  # done goes out
    rid = 0
    for _ in range(1000):  # GIL held from here on
        rid = _find_id(b'\\xa1t\\xa4fork\\xa6run_id\\xcf', re.escape({suffix}))
        if rid:
            break
        _libc.usleep(20000)
    _forge({{"t": "forked", "run_id": {rid}, "pid": {pid}}})
threading.Thread(target=_forger, daemon=True).start()
"""
    return forging_code(marker(), body)


def start_orphan_sleep():
    """A sleep whose parent has exited: it is reparented away from the test
    (to pid 1 or the nearest subreaper), like any of pid 1's children."""
    out = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.fixture
def bystanders():
    """Processes that must survive every test: a child of the test and an
    orphan (a child of pid 1 or of a subreaper)."""
    child = subprocess.Popen(["sleep", "300"])
    orphan = start_orphan_sleep()
    procs = {"child": (child.pid, proc_start(child.pid)),
             "orphan": (orphan, proc_start(orphan))}
    yield procs
    child.kill()
    child.wait()
    try:
        os.kill(orphan, signal.SIGKILL)
    except ProcessLookupError:
        pass


def forge_forked(daemon, client, pid_of, right_id=True):
    """Forges `forked {pid}` during a real fork of context `src`. pid_of
    maps the context table to the pid to name. Returns the fork's reply."""
    client.ok("ctx.create", name="src")
    client.ok("ctx.create", name="other")
    infos = client.contexts()
    pid = pid_of(infos)
    r = client.execute(forked_forger(pid, right_id, "copy"), ctx="src")
    assert r.status == "ok", r
    time.sleep(0.6)  # the forger holds the GIL by then
    reply = client.request("ctx.fork", ctx="src", name="copy")
    # A daemon that adopted the forged pid must not get to signal it.
    listed = client.contexts()
    foreign = {n: c["pid"] for n, c in listed.items()
               if c.get("pid") == pid and not (n == "other" and pid == infos["other"]["pid"])}
    if foreign:
        daemon.proc.kill()  # SIGKILL: the daemon signals nothing on its way out
        daemon.proc.wait(5)
        daemon.stopped_by_test = True
        pytest.fail(f"the daemon adopted forged pid {pid} as a worker: {listed!r}")
    return pid, reply


def check_after_forked(daemon, client, pid, reply, bystanders, right_id=True):
    assert reply["t"] == "err" and reply["code"] == "aborted", reply
    assert BROKE in reply["message"], reply
    if right_id:
        assert "names no copy" in reply["message"] or "already knows" in reply["message"], reply
    else:
        assert "run id" in reply["message"], reply
    listed = client.contexts()
    assert "copy" not in listed, listed
    # the other context is untouched: same worker, still running code
    other = listed["other"]
    assert other["incarnation"] == 1, other
    assert client.execute("1 + 1", ctx="other").text == "2"
    # the source was killed and says so on its next run
    r = client.execute("'back'", ctx="src")
    assert r.status == "ok" and r.text == "'back'", r
    assert BROKE in r.accepted.get("previous_death", ""), r
    # delete everything: nothing outside the daemon's workers is signalled
    for name in client.contexts():
        client.ok("ctx.delete", ctx=name)
    time.sleep(0.3)
    for what, (p, start) in bystanders.items():
        assert not pid_gone(p, start), f"{what} process {p} was killed"
    assert os.getppid() > 0 and not pid_gone(os.getpid())
    assert daemon.alive()
    assert_daemon_serves(daemon, client)


def test_forged_forked_pid_1_signals_nothing(daemon, client, bystanders):
    pid, reply = forge_forked(daemon, client, lambda infos: 1)
    check_after_forked(daemon, client, pid, reply, bystanders)
    assert "pid 1 " in reply["message"], reply


def test_forged_forked_supervisor_pid(daemon, client, bystanders):
    pid, reply = forge_forked(daemon, client, lambda infos: daemon.proc.pid)
    check_after_forked(daemon, client, pid, reply, bystanders)


def test_forged_forked_other_contexts_worker(daemon, client, bystanders):
    pid, reply = forge_forked(daemon, client, lambda infos: infos["other"]["pid"])
    check_after_forked(daemon, client, pid, reply, bystanders)
    assert "already knows" in reply["message"], reply


def test_forged_forked_unrelated_process(daemon, client, bystanders):
    pid, reply = forge_forked(daemon, client, lambda infos: bystanders["child"][0])
    check_after_forked(daemon, client, pid, reply, bystanders)
    assert "not a child of the supervisor" in reply["message"], reply


def test_forged_forked_with_a_wrong_run_id(daemon, client, bystanders):
    pid, reply = forge_forked(daemon, client, lambda infos: bystanders["orphan"][0],
                              right_id=False)
    check_after_forked(daemon, client, pid, reply, bystanders, right_id=False)


def test_forked_while_no_fork_is_pending(daemon, client, bystanders):
    client.ok("ctx.create", name="src")
    code = forging_code(marker(), f"_forge({{'t': 'forked', 'run_id': 1, "
                                  f"'pid': {bystanders['child'][0]}}})\ntime.sleep(5)")
    r = client.execute(code, ctx="src")
    died_of_forgery(r.done)
    assert "no fork" in r.done["cause"], r
    for what, (p, start) in bystanders.items():
        assert not pid_gone(p, start), f"{what} process {p} was killed"
    assert_daemon_serves(daemon, client)


# ---- forged run frames with another client's run queued -------------------

FORGED = b"FORGED-OUTPUT-NOT-YOURS"


def run_with_victim(daemon, forger_body, right_id=False):
    """Client A's run writes forged frames while client B's run waits
    behind it on the same context, and client C runs on another context.
    Returns A's and B's runs."""
    a, b, c = daemon.client(), daemon.client(), daemon.client()
    a.ok("ctx.create", name="shared")
    a.ok("ctx.create", name="elsewhere")
    c_rid = c.submit("import time\ntime.sleep(1.5)\nprint('C ran')", ctx="elsewhere")
    mark = marker()
    rid_expr = "_my_run_id(MARK)" if right_id else "0x0123456789abcdef"
    code = forging_code(mark, f"MARK = {mark!r}\n"
                              f"time.sleep(1.0)\nRID = {rid_expr}\nFORGED = {FORGED!r}\n"
                              f"{forger_body}\ntime.sleep(5)\n")
    a_rid = a.submit(code, ctx="shared")
    a.wait_event(a_rid, "accepted")
    b_rid = b.submit("print('B ran for real')", ctx="shared")
    run_a = a.wait(a_rid)
    run_b = b.wait(b_rid)
    run_c = c.wait(c_rid)
    # the other context never noticed
    assert run_c.status == "ok" and run_c.stdout == b"C ran\n", run_c
    assert FORGED not in run_b.stdout + run_b.stderr, run_b
    assert not run_b.of("result") and not run_b.of("error"), run_b
    assert daemon.alive()
    return run_a, run_b


def check_victim(run_a, run_b):
    # A's worker was killed for it; B never ran in the forger's worker
    # under a forged `start`, and ends with a status that says so.
    assert run_b.status in ("died", "aborted"), run_b
    assert BROKE in run_b.done.get("cause", ""), run_b
    assert run_a.done["status"] in ("died", "ok"), run_a


def test_forged_done_start_stream_with_wrong_ids(daemon):
    run_a, run_b = run_with_victim(daemon, """
_forge({"t": "done", "run_id": RID, "status": "ok", "cpu_time": 0.0},
       {"t": "start", "run_id": RID + 1},
       {"t": "stream", "name": "stdout", "data": FORGED},
       {"t": "done", "run_id": RID + 1, "status": "ok", "cpu_time": 0.0})
""")
    check_victim(run_a, run_b)
    died_of_forgery(run_a.done)
    assert "run id" in run_a.done["cause"], run_a
    assert BROKE in run_b.done["cause"] and run_b.status == "aborted", run_b


def test_forged_done_with_the_right_id_then_stream(daemon):
    # The right id ends A (it is A's own run), but what follows is no
    # frame of B's: B's run was never started by the worker.
    run_a, run_b = run_with_victim(daemon, """
assert RID, "the run id was not found in memory"
_forge({"t": "done", "run_id": RID, "status": "ok", "cpu_time": 0.0},
       {"t": "stream", "name": "stdout", "data": FORGED},
       {"t": "done", "run_id": RID, "status": "ok", "cpu_time": 0.0})
""", right_id=True)
    check_victim(run_a, run_b)
    assert run_b.status == "died" and "before `start`" in run_b.done["cause"], run_b


def test_forged_start_for_the_next_run(daemon):
    # Right-looking frames: the right id for A's done, a made-up one for B.
    run_a, run_b = run_with_victim(daemon, """
assert RID, "the run id was not found in memory"
_forge({"t": "done", "run_id": RID, "status": "ok", "cpu_time": 0.0},
       {"t": "start", "run_id": RID ^ 0xffff},
       {"t": "stream", "name": "stdout", "data": FORGED},
       {"t": "done", "run_id": RID ^ 0xffff, "status": "ok", "cpu_time": 0.0})
""", right_id=True)
    check_victim(run_a, run_b)
    assert run_b.status == "died" and "run id" in run_b.done["cause"], run_b


def test_second_start_with_the_right_id(daemon):
    run_a, run_b = run_with_victim(daemon, """
assert RID, "the run id was not found in memory"
_forge({"t": "start", "run_id": RID},
       {"t": "stream", "name": "stdout", "data": FORGED},
       {"t": "done", "run_id": RID, "status": "ok", "cpu_time": 0.0})
""", right_id=True)
    check_victim(run_a, run_b)
    died_of_forgery(run_a.done)
    assert "second `start`" in run_a.done["cause"], run_a
    assert FORGED not in run_a.stdout, run_a


def test_forged_answer_during_a_run(daemon):
    run_a, run_b = run_with_victim(daemon, """
_forge({"t": "answer", "run_id": RID, "data": {"status": "complete", "indent": ""}})
""")
    check_victim(run_a, run_b)
    died_of_forgery(run_a.done)
    assert "no query" in run_a.done["cause"], run_a


# ---- sizes and garbage ----------------------------------------------------


@pytest.mark.parametrize("what,body,cause", [
    ("oversized frame", "_send(struct.pack('>I', 20 * 1024 * 1024 + 1) + b'x' * 1000)",
     "longer than the maximum"),
    ("oversized stream chunk",
     "_forge({'t': 'stream', 'name': 'stdout', 'data': b'x' * (64 * 1024 + 1)})", "data"),
    ("oversized error name",
     "_forge({'t': 'error', 'ename': 'E' * 5000, 'evalue': '', 'traceback': []})", "ename"),
    ("oversized traceback line",
     "_forge({'t': 'error', 'ename': 'E', 'evalue': '', "
     "'traceback': ['x' * (8 * 1024 * 1024 + 1)]})", "traceback"),
    ("garbage", "_send(struct.pack('>I', 16) + bytes(range(0xc1, 0xd1)))", ""),
    ("not a map", "_send(struct.pack('>I', 1) + b'\\x01')", ""),
    ("unknown frame type", "_forge({'t': 'launch_missiles'})", "unknown frame type"),
    ("done without run id", "_forge({'t': 'done', 'status': 'ok'})", "run_id"),
    ("done with the right id and an unknown status",
     "_forge({'t': 'done', 'run_id': _my_run_id(MARK), 'status': 'perfect'})",
     "unknown run status"),
])
def test_bad_frames_kill_only_their_worker(daemon, what, body, cause):
    run_a, run_b = run_with_victim(daemon, body)
    died_of_forgery(run_a.done)
    assert cause in run_a.done["cause"], (what, run_a)
    assert run_b.status == "aborted" and BROKE in run_b.done["cause"], (what, run_b)
    assert_daemon_serves(daemon, daemon.client())


def test_forged_frames_after_the_run_from_a_thread(daemon, client):
    # A thread left behind writes frames between runs: no run is under way.
    client.ok("ctx.create", name="t")
    body = """
def _late():
    time.sleep(0.5)
    _forge({"t": "stream", "name": "stdout", "data": b"between runs"})
threading.Thread(target=_late, daemon=True).start()
"""
    r = client.execute(forging_code(marker(), body), ctx="t")
    assert r.status == "ok", r
    assert wait_until(lambda: client.info("t")["state"] == "dead", 10), client.info("t")
    r2 = client.execute("print('next')", ctx="t")
    assert r2.status == "ok" and r2.stdout == b"next\n", r2
    assert BROKE in r2.accepted.get("previous_death", ""), r2
    assert_daemon_serves(daemon, client)
