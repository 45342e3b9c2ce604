"""Fixtures for the ctxd integration tests.

Each test gets its own daemon bound to a private ipc socket under tmp_path,
so tests share no state and can run in parallel. The daemon binary comes from
$CTXD_BIN (default: the lead's build dir); the daemon finds its worker next
to itself.

Run with the system interpreter:  /usr/bin/python3 -m pytest tests/integration
"""

import os
import socket
import signal
import subprocess
import time

import msgpack
import pytest
import sys as _sys
_sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reachable  # noqa: E402
import zmq

CTXD_BIN = os.environ.get("CTXD_BIN", "/work/main/build/daemon/ctxd")

# A hang must fail the test, never hang the suite.
RECV_TIMEOUT = 60.0
# How long we listen for a (forbidden) second terminal reply / late event.
QUIET_WINDOW = 0.3

TERMINAL = ("done", "ok", "err")
RUN_EVENTS = ("accepted", "stream", "display", "clear_output", "input.request", "result",
              "error", "done")
# Order of the events of a run (PROTOCOL.md section 5, "Events, in this order").
EVENT_RANK = {"accepted": 0, "stream": 1, "display": 1, "clear_output": 1, "input.request": 1,
              "result": 2, "error": 3, "done": 4}
DONE_STATUSES = ("ok", "error", "interrupted", "timeout", "died", "aborted", "shutdown")


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data):
    # raw=False: daemon str values must be valid UTF-8 (decoding fails otherwise).
    return msgpack.unpackb(data, raw=False, strict_map_key=True)


def _key(re):
    """Request ids are compared with their msgpack type: 5 and "5" differ."""
    return (type(re).__name__, re)


class ProtocolViolation(AssertionError):
    pass


class Run:
    """All messages of one execute request, terminal reply last."""

    def __init__(self, rid, events):
        self.id = rid
        self.events = events
        self.terminal = events[-1]

    # --- convenient views ------------------------------------------------
    @property
    def done(self):
        assert self.terminal["t"] == "done", f"expected done, got {self.terminal!r}"
        return self.terminal

    @property
    def status(self):
        return self.done["status"]

    @property
    def err(self):
        assert self.terminal["t"] == "err", f"expected err, got {self.terminal!r}"
        return self.terminal

    def of(self, t):
        return [e for e in self.events if e["t"] == t]

    @property
    def accepted(self):
        a = self.of("accepted")
        assert len(a) == 1, f"expected one accepted event, got {self.events!r}"
        return a[0]

    @property
    def result(self):
        r = self.of("result")
        assert len(r) <= 1
        return r[0] if r else None

    @property
    def error(self):
        r = self.of("error")
        assert len(r) <= 1
        return r[0] if r else None

    def stream(self, name):
        return b"".join(e["data"] for e in self.of("stream") if e["name"] == name)

    @property
    def stdout(self):
        return self.stream("stdout")

    @property
    def stderr(self):
        return self.stream("stderr")

    @property
    def text(self):
        """text/plain of the result, or None."""
        r = self.result
        return None if r is None else r["data"]["text/plain"]

    def __repr__(self):
        evs = []
        for e in self.events:
            if e["t"] == "stream" and len(e["data"]) > 200:
                e = dict(e, data=e["data"][:200] + b"...")
            evs.append(e)
        return f"Run(id={self.id!r}, events={evs!r})"


def check_run(run):
    """Structural checks every execute answer must pass."""
    evs = run.events
    term = run.terminal
    assert term["t"] in ("done", "err"), f"execute ended with {term!r}"
    for e in evs[:-1]:
        assert e["t"] in RUN_EVENTS and e["t"] != "done", f"unexpected event {e!r} in {run!r}"
    if term["t"] == "err":
        assert len(evs) == 1, f"err after events: {run!r}"
        return
    # Order: accepted first, then streams, at most one result, at most one
    # error; the figures a run left open (display) follow its result or
    # error, as in ipykernel.
    late = ("display",)
    ranks = [EVENT_RANK[e["t"]] for e in evs if e["t"] not in late]
    assert ranks == sorted(ranks), f"events out of order: {[e['t'] for e in evs]}"
    if any(e["t"] in late for e in evs):
        assert evs[0]["t"] == "accepted", f"output before accepted: {[e['t'] for e in evs]}"
    n_acc = len(run.of("accepted"))
    assert n_acc <= 1, run
    assert len(run.of("result")) <= 1, run
    assert len(run.of("error")) <= 1, run
    d = term
    assert d["status"] in DONE_STATUSES, d
    for f, ty in (("execution_count", int), ("incarnation", int), ("truncated", bool),
                  ("state_lost", bool)):
        assert isinstance(d.get(f), ty) and not (ty is int and isinstance(d[f], bool)), \
            f"done.{f} missing or of wrong type: {d!r}"
    for f in ("duration", "cpu_time"):
        assert isinstance(d.get(f), float), f"done.{f} must be a float: {d!r}"
        assert d[f] >= 0, d
    # truncation (--max-output) is visible: a flag and the dropped counts
    assert d["truncated"] == ("dropped" in d), d
    needs_cause = d["status"] in ("died", "aborted", "shutdown") or (
        d["status"] == "timeout" and d["state_lost"])
    cpu_budget = d["status"] == "timeout" and d.get("cause", "").startswith("cpu_seconds")
    if needs_cause or cpu_budget:
        assert isinstance(d.get("cause"), str) and d["cause"], f"done without cause: {d!r}"
    else:
        assert "cause" not in d, f"done with unexpected cause: {d!r}"
    if d["status"] in ("died", "shutdown"):
        assert d["state_lost"] is True, d
    if d["status"] in ("ok", "error", "interrupted"):
        assert d["state_lost"] is False, d
    if d["status"] != "aborted":
        # A run that started says so first (an aborted one may never have run).
        assert n_acc == 1, f"run without accepted: {run!r}"
    if n_acc:
        a = run.accepted
        assert isinstance(a.get("ctx"), str), a
        assert isinstance(a.get("execution_count"), int), a
        assert isinstance(a.get("incarnation"), int) and a["incarnation"] >= 1, a
        if "previous_death" in a:
            assert isinstance(a["previous_death"], str) and a["previous_death"], a
        assert a["execution_count"] == d["execution_count"], run
        assert a["incarnation"] == d["incarnation"], run
    for e in run.of("stream"):
        assert e["name"] in ("stdout", "stderr"), e
        assert isinstance(e["data"], bytes), f"stream data must be bin: {e!r}"
    if run.result is not None:
        r = run.result
        assert isinstance(r["data"], dict) and isinstance(r["data"].get("text/plain"), str), r
        assert r["execution_count"] == d["execution_count"], run
    if d["status"] == "error":
        # sys.exit(non-zero) ends a run as a script does: no traceback, exit_code
        assert run.error is not None or d.get("exit_code", 0) != 0, \
            f"status error without error event: {run!r}"
    if d["status"] in ("interrupted", "timeout") and not d["state_lost"]:
        assert run.error is not None and run.error["ename"] == "KeyboardInterrupt", \
            f"{d['status']} run without a KeyboardInterrupt error event: {run!r}"
    if run.error is not None:
        e = run.error
        assert isinstance(e.get("ename"), str), e
        assert isinstance(e.get("evalue"), str), e
        assert isinstance(e.get("traceback"), list), e
        assert all(isinstance(x, str) for x in e["traceback"]), e
        assert e["traceback"], e
        assert not any("\n" in x for x in e["traceback"]), \
            f"traceback items must be single lines: {e['traceback']!r}"


class Client:
    """A DEALER connection to the daemon.

    Messages for requests other than the one being waited for are buffered
    per `re`. Every terminal reply is recorded; a message that arrives for a
    request that already had its terminal reply is a protocol violation
    (checked on every receive and in close()).
    """

    def __init__(self, zctx, endpoint, id_style="uint", rcvhwm=0):
        self.endpoint = endpoint
        self.sock = zctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # rcvhwm > 0 makes a slow reader push back on the daemon.
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.RCVBUF, 4096 if rcvhwm else -1)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.connect(endpoint)
        self.id_style = id_style
        self._n = 0
        self.buffered = {}   # key(re) -> [msg]
        self.finished = set()  # key(re) of requests that had their terminal reply
        self.violations = []

    # --- ids ---------------------------------------------------------------
    def new_id(self):
        self._n += 1
        return self._n if self.id_style == "uint" else f"req-{self._n}"

    # --- raw I/O -------------------------------------------------------------
    def send_raw(self, data):
        if isinstance(data, (list, tuple)):
            self.sock.send_multipart(list(data))
        else:
            self.sock.send(data)

    def send(self, t, _id=None, **fields):
        rid = self.new_id() if _id is None else _id
        msg = {"v": 1, "t": t, "id": rid}
        msg.update(fields)
        self.sock.send(pack(msg))
        return rid

    def _recv_one(self, timeout):
        if not self.sock.poll(int(timeout * 1000)):
            return None
        frames = self.sock.recv_multipart()
        assert len(frames) == 1, f"daemon sent a {len(frames)}-frame message: {frames!r}"
        msg = unpack(frames[0])
        assert isinstance(msg, dict), msg
        assert msg.get("v") == 1, f"daemon message without v=1: {msg!r}"
        assert isinstance(msg.get("t"), str), msg
        assert "re" in msg, f"daemon message without re: {msg!r}"
        k = _key(msg["re"])
        if k in self.finished and msg["re"] is not None:
            v = f"message after terminal reply for re={msg['re']!r}: {msg!r}"
            self.violations.append(v)
            raise ProtocolViolation(v)
        if msg["t"] in TERMINAL and msg["re"] is not None:
            self.finished.add(k)
        return msg

    def next_for(self, rid, timeout=RECV_TIMEOUT):
        """Next message whose re is rid (same msgpack type)."""
        k = _key(rid)
        q = self.buffered.get(k)
        if q:
            return q.pop(0)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no message for request {rid!r} within {timeout} s")
            msg = self._recv_one(left)
            if msg is None:
                continue
            mk = _key(msg["re"])
            if mk == k:
                return msg
            self.buffered.setdefault(mk, []).append(msg)

    def collect(self, rid, timeout=RECV_TIMEOUT):
        """All messages of request rid up to and including its terminal reply."""
        deadline = time.monotonic() + timeout
        events = []
        while True:
            msg = self.next_for(rid, max(0.001, deadline - time.monotonic()))
            events.append(msg)
            if msg["t"] in TERMINAL:
                return events

    def expect_quiet(self, rid, window=QUIET_WINDOW):
        """Nothing more arrives for rid (e.g. after its terminal reply)."""
        k = _key(rid)
        assert not self.buffered.get(k), f"extra messages for {rid!r}: {self.buffered[k]!r}"
        deadline = time.monotonic() + window
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                msg = self._recv_one(left)
            except ProtocolViolation:
                raise
            if msg is None:
                return
            mk = _key(msg["re"])
            assert mk != k, f"extra message for {rid!r}: {msg!r}"
            self.buffered.setdefault(mk, []).append(msg)

    # --- requests ----------------------------------------------------------
    def request(self, t, _id=None, _timeout=RECV_TIMEOUT, **fields):
        """Sends a request and returns its terminal reply (ok / err / done)."""
        rid = self.send(t, _id, **fields)
        evs = self.collect(rid, _timeout)
        term = evs[-1]
        assert term["re"] == rid and type(term["re"]) is type(rid), term
        if t != "execute":
            assert len(evs) == 1, f"{t} produced events before its reply: {evs!r}"
        if term["t"] == "err":
            assert isinstance(term.get("code"), str) and isinstance(term.get("message"), str), term
            assert term["message"], term
        return term

    def ok(self, t, **fields):
        r = self.request(t, **fields)
        assert r["t"] == "ok", f"{t} {fields!r} -> {r!r}"
        return r

    def err(self, t, _code, **fields):
        r = self.request(t, **fields)
        assert r["t"] == "err" and r.get("code") == _code, \
            f"{t} {fields!r}: expected err {_code}, got {r!r}"
        return r

    def submit(self, code, ctx=None, _id=None, **kw):
        """Sends an execute without waiting; returns the id."""
        fields = {"code": code}
        if ctx is not None:
            fields["ctx"] = ctx
        fields.update(kw)
        return self.send("execute", _id, **fields)

    def wait(self, rid, timeout=RECV_TIMEOUT):
        run = Run(rid, self.collect(rid, timeout))
        check_run(run)
        return run

    def execute(self, code, ctx=None, timeout_s=RECV_TIMEOUT, **kw):
        """Runs code; returns a Run with every event up to the terminal reply."""
        rid = self.submit(code, ctx, **kw)
        return self.wait(rid, timeout_s)

    def wait_event(self, rid, t, timeout=RECV_TIMEOUT):
        """Waits for the first event of type t of a run; earlier events are
        returned (including it) and also kept for a later wait()."""
        got = []
        k = _key(rid)
        while True:
            msg = self.next_for(rid, timeout)
            got.append(msg)
            if msg["t"] == t or msg["t"] in TERMINAL:
                # put everything back, in order, for wait()
                self.buffered[k] = got + self.buffered.get(k, [])
                assert msg["t"] == t, f"wanted {t}, run ended: {got!r}"
                return got

    def contexts(self):
        r = self.ok("ctx.list")
        return {c["name"]: c for c in r["contexts"]}

    def info(self, name):
        c = self.contexts()
        assert name in c, f"context {name!r} not listed: {c!r}"
        return c[name]

    def close(self):
        try:
            # Late messages for finished requests are violations.
            while True:
                msg = self._recv_one(0.05)
                if msg is None:
                    break
                self.buffered.setdefault(_key(msg["re"]), []).append(msg)
        except ProtocolViolation:
            pass
        finally:
            self.sock.close(0)
        assert not self.violations, self.violations


class Daemon:
    def __init__(self, tmp_path, zctx):
        self.tmp = tmp_path
        self.zctx = zctx
        self.endpoint = f"ipc://{tmp_path}/s.sock"
        self.log_path = tmp_path / "ctxd.log"
        self.proc = None
        self.clients = []
        # set by a test that ends the daemon on purpose
        self.stopped_by_test = False

    def start(self, extra_args=(), cwd=None):
        self.log = open(self.log_path, "wb")
        self.cwd = str(cwd or self.tmp)
        # Its own state directory: the catalogue, keys and snapshots of one
        # test never meet another's (nor a run's on the same machine before).
        # Beside the socket's directory, not in it: what a sandbox may see of
        # that directory stays as it was.
        if "--state-dir" not in extra_args:
            extra_args = ("--state-dir", str(self.tmp.parent / (self.tmp.name + "-state")), *extra_args)
        self.proc = subprocess.Popen([CTXD_BIN, "--listen", self.endpoint, *extra_args],
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=self.cwd,
                                     start_new_session=True)
        c = self.client()
        rid = c.send("hello")
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"ctxd exited with {self.proc.returncode} at start:\n"
                                     + self.log_text())
            msg = c._recv_one(0.1)
            if msg is not None and msg["re"] == rid:
                assert msg["t"] == "ok", msg
                self.hello = msg
                break
            assert time.monotonic() < deadline, "ctxd did not answer hello within 15 s"
        return self

    def client(self, id_style="uint", rcvhwm=0):
        c = Client(self.zctx, self.endpoint, id_style, rcvhwm)
        self.clients.append(c)
        return c

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None:
            return None
        crashed = None
        if self.stopped_by_test:
            self.proc.poll() is None and self.proc.kill()
            self.proc.wait(5)
        elif self.proc.poll() is not None:
            rc = self.proc.returncode
            crashed = (f"ctxd died during the test (returncode {rc}"
                       f"{', signal ' + signal.Signals(-rc).name if rc < 0 else ''}):\n"
                       + self.log_text())
        else:
            # A clean stop: SIGTERM ends the daemon promptly with status 0
            # (a sanitizer report during shutdown shows up here).
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(5)
                if rc != 0:
                    crashed = f"ctxd exited with status {rc} on SIGTERM:\n" + self.log_text()
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                crashed = "ctxd did not exit within 5 s of SIGTERM:\n" + self.log_text()
        self.log.close()
        return crashed


def pytest_sessionstart(session):
    if not os.access(CTXD_BIN, os.X_OK):
        pytest.exit(f"daemon binary {CTXD_BIN} not built (set CTXD_BIN)", returncode=2)


@pytest.fixture(scope="session")
def zctx():
    c = zmq.Context()
    yield c
    c.term()


def _finish(d):
    errors = []
    for c in d.clients:
        try:
            c.close()
        except AssertionError as e:
            errors.append(str(e))
    crashed = d.stop()
    if crashed:
        errors.append(crashed)
    assert not errors, "\n".join(errors)


@pytest.fixture
def daemon(tmp_path, zctx):
    """A running ctxd on a private socket; asserts at teardown that it never died."""
    d = Daemon(tmp_path, zctx).start()
    yield d
    _finish(d)


@pytest.fixture
def make_daemon(tmp_path, zctx):
    """Starts a ctxd with extra command-line arguments (same teardown checks)."""
    started = []

    def make(*args):
        sub = tmp_path / f"d{len(started)}"
        sub.mkdir()
        d = Daemon(sub, zctx)
        started.append(d)
        return d.start(args)

    yield make
    for d in started:
        _finish(d)


@pytest.fixture
def client(daemon):
    """A client with uint request ids."""
    return daemon.client("uint")


@pytest.fixture
def sclient(daemon):
    """A client with str request ids."""
    return daemon.client("str")


def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:  # FileNotFoundError, or ProcessLookupError mid-read
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], fields[19]  # state, starttime


def pid_gone(pid, start=None):
    """True when pid no longer runs (absent or a zombie). With start (the
    process's start time from proc_start), a reused pid counts as gone."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return True
    return start is not None and st[1] != start


def proc_start(pid):
    """Start time of a live pid (to tell it from a later process reusing the pid)."""
    st = _stat(pid)
    assert st is not None, f"process {pid} does not exist"
    return st[1]


def wait_until(pred, timeout=10.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


@pytest.fixture(autouse=True)
def _workers_reach_tmp(tmp_path):
    """Confined workers have uids of their own: tmp_path's parents must let
    them through (tests/reachable.py)."""
    reachable.open_ancestors(tmp_path)
    yield


def children_of(d, marker):
    """Pids of daemon d's children whose command line holds marker (bytes)."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == d.proc.pid and marker in cmd:
            pids.append(int(p))
    return pids


def zygote_of(d):
    """The pid of daemon d's zygote (its child running --zygote), or None."""
    pids = children_of(d, b"--zygote")
    return pids[0] if pids else None


def free_port():
    """A loopback TCP port nobody listens on (for a tcp:// daemon)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
