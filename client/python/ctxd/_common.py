"""What the blocking and the asyncio client share: endpoint resolution, the
result types, the per-run event accumulator (_RunState) and the sans-I/O
router (_Core) that matches daemon messages to requests and runs the
liveness check. Neither does any I/O."""

from __future__ import annotations

import base64
import codecs
import errno
import itertools
import json as _json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from . import _proto
from ._errors import (
    AuthenticationError,
    CtxdError,
    DisconnectedError,
    LostError,
    ProtocolError,
    RefusedError,
    TooLargeError,
    UnreachableError,
)

DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_LIVENESS = 10.0
STATUSES = ("ok", "error", "interrupted", "timeout", "died", "aborted", "shutdown")


# ---- endpoints -------------------------------------------------------------


def default_endpoint() -> str:
    """PROTOCOL.md section 1's default (ignoring CTXD_ENDPOINT)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return f"ipc://{xdg}/ctxd/ctxd.sock"
    return "ipc:///run/ctxd/ctxd.sock"


def resolve_endpoint(endpoint: Optional[str]) -> str:
    """endpoint, else $CTXD_ENDPOINT, else the default."""
    return endpoint or os.environ.get("CTXD_ENDPOINT") or default_endpoint()


def _read_key_file(path: str) -> Optional[bytes]:
    """The first line of the file that is no # comment and is 40 characters."""
    try:
        with open(os.path.expanduser(path)) as f:
            for line in f:
                line = line.strip()
                if len(line) == 40 and not line.startswith("#"):
                    return line.encode()
    except OSError:
        pass
    return None


def _is_z85_key(text: str) -> bool:
    from zmq.utils import z85
    if len(text) != 40:
        return False
    try:
        z85.decode(text.encode())
    except Exception:
        return False
    return True


def _one_key(name: str, key: Optional[str], key_file: Optional[str],
             env: str, default_file: Optional[str] = None) -> Optional[bytes]:
    """A key from the pair (key: the Z85 key itself, key_file: a file holding
    it), else from $ENV / $ENV_FILE, else default_file; None when none is
    given. Never guessed from the spelling: a key that is no Z85 key, a
    file with none, or both given is a ValueError naming the option."""
    if key is None and key_file is None:
        key, key_file = os.environ.get(env) or None, os.environ.get(env + "_FILE") or None
        kname, fname = env, env + "_FILE"
    else:
        kname, fname = name, name + "_file"
    if key is not None and key_file is not None:
        raise ValueError(f"{kname} and {fname} are both given: give one")
    if key is not None:
        if not _is_z85_key(key) or os.path.exists(key):
            raise ValueError(f"{kname}: {key!r} is not a Z85 key (40 characters); "
                             f"for a key file use {fname}")
        return key.encode()
    path = key_file or default_file
    if path is None:
        return None
    got = _read_key_file(path)
    if got is None or not _is_z85_key(got.decode()):
        raise ValueError(f"{fname if key_file else 'client key file'}: {path!r} holds no Z85 key"
                         + ("" if key_file else " (make one with `ctx keygen`)"))
    return got


def apply_curve(sock, endpoint: str, server_key: Optional[str] = None,
                client_key: Optional[str] = None, server_key_file: Optional[str] = None,
                client_key_file: Optional[str] = None) -> None:
    """CurveZMQ for tcp:// (PROTOCOL.md section 1): the daemon's public key
    (server_key, the Z85 key, or server_key_file, its server.pub; else
    $CTXD_SERVER_KEY or $CTXD_SERVER_KEY_FILE) and this client's secret key
    (client_key or client_key_file; else $CTXD_CLIENT_KEY or
    $CTXD_CLIENT_KEY_FILE, else ~/.config/ctxd/client.key; make one with
    `ctx keygen`). Without a server key the connection is plain (a daemon
    started with --insecure-tcp)."""
    if not endpoint.startswith("tcp://"):
        return
    import zmq
    server = _one_key("server_key", server_key, server_key_file, "CTXD_SERVER_KEY")
    if server is None:
        return
    secret = _one_key("client_key", client_key, client_key_file, "CTXD_CLIENT_KEY",
                      "~/.config/ctxd/client.key")
    sock.curve_serverkey = server
    sock.curve_secretkey = secret
    sock.curve_publickey = zmq.curve_public(secret)


def probe(endpoint: str) -> None:
    """Fails at once when an ipc:// endpoint has no listener (ZeroMQ would
    retry silently until a timeout)."""
    if not endpoint.startswith("ipc://"):
        return
    path = endpoint[len("ipc://"):]
    if not path or path.startswith("@") or len(path.encode()) >= 108:
        return
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except FileNotFoundError:
        raise UnreachableError(f"ctxd is not running at {endpoint} (no socket file {path})") from None
    except ConnectionRefusedError:
        raise UnreachableError(f"ctxd is not running at {endpoint} (stale socket file {path})") from None
    except OSError as e:
        if e.errno in (errno.EACCES, errno.ENOTDIR, errno.ENOTSOCK):
            raise UnreachableError(f"cannot connect to {endpoint}: {e.strerror}") from None
    finally:
        s.close()


# ---- results -----------------------------------------------------------------


@dataclass
class ErrorInfo:
    """The exception a run raised."""

    ename: str
    evalue: str
    traceback: List[str] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.traceback) if self.traceback else f"{self.ename}: {self.evalue}"


@dataclass
class Result:
    """The value of a run's trailing expression (is_main_result), or one
    display() output (a matplotlib figure, an IPython.display object...):
    its repr (text) and the whole MIME bundle (data, always with
    "text/plain"). One attribute per common MIME type, like E2B's: html,
    markdown, svg, png, jpeg, pdf (base64 str, as sent), latex, json
    (decoded), javascript; None when absent. image(mime) decodes a binary
    type to bytes. display_id / update: set for update_display() targets."""

    text: str
    data: Dict[str, str]
    execution_count: int = 0
    metadata: Dict[str, Any] = field(default_factory=dict)
    display_id: Optional[str] = None
    update: bool = False
    is_main_result: bool = True

    def __str__(self) -> str:
        return self.text

    def formats(self) -> List[str]:
        """The MIME types present besides text/plain."""
        return [k for k in self.data if k != "text/plain"]

    def image(self, mime: str = "image/png") -> Optional[bytes]:
        """A binary type (base64 on the wire) decoded, or None."""
        v = self.data.get(mime)
        return None if v is None else base64.b64decode(v)

    html = property(lambda self: self.data.get("text/html"))
    markdown = property(lambda self: self.data.get("text/markdown"))
    svg = property(lambda self: self.data.get("image/svg+xml"))
    png = property(lambda self: self.data.get("image/png"))
    jpeg = property(lambda self: self.data.get("image/jpeg"))
    pdf = property(lambda self: self.data.get("application/pdf"))
    latex = property(lambda self: self.data.get("text/latex"))
    javascript = property(lambda self: self.data.get("application/javascript"))

    @property
    def json(self) -> Any:
        v = self.data.get("application/json")
        return None if v is None else _json.loads(v)


@dataclass
class Artifact:
    """A file the run created or changed in the context's directory."""

    path: str
    size: int = 0
    type: str = "application/octet-stream"


@dataclass
class ExecResult:
    """How a run ended, with everything it produced.

    status is one of "ok", "error", "interrupted", "timeout", "died",
    "aborted", "shutdown" (the daemon stopped during the run) (PROTOCOL.md,
    `done`). truncated: output passed the daemon's max_output; dropped then
    counts the bytes cut ({"stdout": n, "stderr": n}). stdout/stderr are the streams decoded as
    UTF-8 (invalid bytes replaced); stdout_bytes/stderr_bytes the exact
    bytes. result is the trailing expression's repr (None when there was
    none); data its MIME bundle. displays: the display() outputs and figures
    (Result objects, is_main_result False); results: those plus the main
    result last, like E2B's Execution.results. artifacts: files the run
    created or changed. exit_code: set when the code ended with SystemExit
    (sys.exit): the exit status a script would have (0-255; non-zero makes
    the status "error", with no error), else None."""

    status: str
    stdout: str = ""
    stderr: str = ""
    result: Optional[str] = None
    data: Optional[Dict[str, str]] = None
    error: Optional[ErrorInfo] = None
    execution_count: int = 0
    incarnation: int = 0
    duration: float = 0.0
    cpu_time: float = 0.0
    state_lost: bool = False
    cause: Optional[str] = None
    truncated: bool = False
    dropped: Optional[Dict[str, int]] = None
    previous_death: Optional[str] = None
    ctx: str = "default"
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    run_id: int = 0
    displays: List[Result] = field(default_factory=list)
    main_result: Optional[Result] = None
    artifacts: List[Artifact] = field(default_factory=list)
    exit_code: Optional[int] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def results(self) -> List[Result]:
        return self.displays + ([self.main_result] if self.main_result else [])


@dataclass
class ContextInfo:
    """A context as `ctx.list` reports it (INFO in PROTOCOL.md)."""

    name: str
    cwd: str = ""
    state: str = "idle"
    pid: int = 0
    incarnation: int = 0
    created: float = 0.0
    execution_count: int = 0
    queued: int = 0
    rss: int = 0
    pss: int = 0
    last_death: Optional[str] = None
    tier: str = "unsafe"
    policy: Dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

    @classmethod
    def from_msg(cls, m: Any) -> "ContextInfo":
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise ProtocolError(f"malformed context info {m!r}")
        kw = {}
        for f in cls.__dataclass_fields__:
            if f in m and m[f] is not None:
                kw[f] = m[f]
        return cls(**kw)


@dataclass
class HelloInfo:
    """The daemon's `hello` reply."""

    server: str
    version: str
    protocol: int
    versions: List[int]
    pid: int
    instance: str
    limits: Dict[str, Any]
    preloads: Dict[str, Any] = field(default_factory=dict)
    # per execution tier offered, the policy fields it enforces
    tiers: Dict[str, List[str]] = field(default_factory=dict)
    # the execute / ctx.create `syntax` values it accepts ("ipython" in it:
    # IPython syntax); ["python"] from a daemon that predates the field
    syntaxes: List[str] = field(default_factory=lambda: ["python"])


@dataclass
class StatsInfo:
    """The daemon's `stats` reply: uptime (seconds), contexts (live, busy,
    queued, created), counters since start (requests, refused, runs,
    runs_ok, ..., stdout_bytes, worker_deaths), limits as in hello."""

    uptime: float
    contexts: Dict[str, int]
    counters: Dict[str, int]
    limits: Dict[str, Any]


@dataclass
class Completion:
    """A `complete` reply: the names that may replace code[cursor_start:
    cursor_end] (cursors count characters, as Python's str indexes)."""

    matches: List[str]
    cursor_start: int
    cursor_end: int
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Inspection:
    """An `inspect` reply: found, and data (a MIME bundle with text/plain:
    signature, type, docstring; with detail_level 1 the source)."""

    found: bool
    data: Dict[str, str] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.data.get("text/plain", "")


@dataclass
class Completeness:
    """An `is_complete` reply: status "complete", "incomplete" (indent: the
    whitespace the next line should start with), "invalid" or "unknown"."""

    status: str
    indent: str = ""


def query_fields(code: str, ctx, cursor, timeout) -> dict:
    """The fields shared by complete, inspect and is_complete."""
    if not isinstance(code, str):
        raise TypeError("code must be a str")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, int)):
        raise TypeError("cursor is an int (characters into code)")
    return dict(ctx=ctx_name(ctx), code=code, cursor=cursor, timeout=timeout)


def parse_completion(msg: dict) -> Completion:
    m = msg.get("matches")
    if not isinstance(m, list):
        raise ProtocolError("complete reply without matches")
    return Completion([str(x) for x in m], int(msg.get("cursor_start") or 0),
                      int(msg.get("cursor_end") or 0), dict(msg.get("metadata") or {}))


def parse_inspection(msg: dict) -> Inspection:
    return Inspection(bool(msg.get("found")), dict(msg.get("data") or {}),
                      dict(msg.get("metadata") or {}))


def parse_completeness(msg: dict) -> Completeness:
    return Completeness(str(msg.get("status") or "unknown"), str(msg.get("indent") or ""))


def parse_stats(msg: dict) -> StatsInfo:
    return StatsInfo(float(msg.get("uptime") or 0.0), dict(msg.get("contexts") or {}),
                     dict(msg.get("counters") or {}), dict(msg.get("limits") or {}))


def ctx_name(ctx: Any) -> Optional[str]:
    """A context argument as a name: None, a str, or an object with .name
    (ContextInfo) or .id (the Daytona InterpreterContext)."""
    if ctx is None or isinstance(ctx, str):
        return ctx
    for attr in ("name", "id"):
        v = getattr(ctx, attr, None)
        if isinstance(v, str):
            return v
    raise TypeError(f"not a context: {ctx!r}")


# ---- one run's events -------------------------------------------------------------


def _need(msg: dict, key: str, types, what: str):
    v = msg.get(key)
    if not isinstance(v, types) or (types is int and isinstance(v, bool)):
        raise ProtocolError(f"daemon sent a malformed {what}: {key!r} is {v!r}")
    return v


class _RunState:
    """Accumulates one run's messages. feed() returns the callbacks to fire,
    as (kind, argument) pairs: kind is "accepted", "stdout", "stderr",
    "result" or "error"; it sets .final to the ExecResult at `done` and
    raises RefusedError for an `err`."""

    def __init__(self, ctx: Optional[str], run_id: int):
        self.ctx = ctx or "default"
        self.run_id = run_id
        self.chunks = {"stdout": [], "stderr": []}
        self.texts = {"stdout": [], "stderr": []}
        self.decoders = {n: codecs.getincrementaldecoder("utf-8")("replace") for n in self.texts}
        self.result: Optional[Result] = None
        self.displays: List[Result] = []
        self.error: Optional[ErrorInfo] = None
        self.accepted: Optional[dict] = None
        self.final: Optional[ExecResult] = None

    def _flush(self):
        """Bytes of an incomplete character still held by a decoder: once
        the streams are over (result, error, done come after all output)
        they go out as U+FFFD, before the event, so the order holds."""
        out = []
        for name, dec in self.decoders.items():
            tail = dec.decode(b"", final=True)
            if tail:
                self.texts[name].append(tail)
                out.append((name, tail))
        return out

    def feed(self, msg: dict):
        t = msg["t"]
        if t == "accepted":
            _need(msg, "execution_count", int, "accepted event")
            _need(msg, "incarnation", int, "accepted event")
            self.accepted = msg
            return [("accepted", msg)]
        if t == "stream":
            name = _need(msg, "name", str, "stream event")
            data = _need(msg, "data", bytes, "stream event")
            if name not in self.chunks:
                return []
            self.chunks[name].append(data)
            text = self.decoders[name].decode(data)
            if text:
                self.texts[name].append(text)
                return [(name, text)]
            return []
        if t == "display":
            data = _need(msg, "data", dict, "display event")
            md = msg.get("metadata")
            d = Result(str(data.get("text/plain", "")), data, 0,
                       md if isinstance(md, dict) else {}, msg.get("display_id"),
                       bool(msg.get("update")), False)
            self.displays.append(d)
            return self._flush() + [("display", d)]
        if t == "clear_output":
            return self._flush() + [("clear_output", bool(msg.get("wait")))]
        if t == "input.request":
            prompt = _need(msg, "prompt", str, "input.request event")
            return self._flush() + [("input", (prompt, bool(msg.get("password"))))]
        if t == "result":
            data = _need(msg, "data", dict, "result event")
            text = data.get("text/plain")
            if not isinstance(text, str):
                raise ProtocolError("daemon sent a result without text/plain")
            self.result = Result(text, data, msg.get("execution_count") or 0)
            return self._flush() + [("result", self.result)]
        if t == "error":
            tb = _need(msg, "traceback", list, "error event")
            self.error = ErrorInfo(
                _need(msg, "ename", str, "error event"),
                _need(msg, "evalue", str, "error event"),
                [str(x) for x in tb],
            )
            return self._flush() + [("error", self.error)]
        if t == "done":
            status = _need(msg, "status", str, "done reply")
            if status not in STATUSES:
                raise ProtocolError(f"daemon sent an unknown done status {status!r}")
            out = self._flush()
            acc = self.accepted or {}
            self.final = ExecResult(
                status=status,
                stdout="".join(self.texts["stdout"]),
                stderr="".join(self.texts["stderr"]),
                result=self.result.text if self.result else None,
                data=self.result.data if self.result else None,
                error=self.error,
                execution_count=msg.get("execution_count") or 0,
                incarnation=msg.get("incarnation") or 0,
                duration=float(msg.get("duration") or 0.0),
                cpu_time=float(msg.get("cpu_time") or 0.0),
                state_lost=bool(msg.get("state_lost")),
                cause=msg.get("cause"),
                truncated=bool(msg.get("truncated")),
                dropped=msg.get("dropped") if isinstance(msg.get("dropped"), dict) else None,
                previous_death=acc.get("previous_death"),
                ctx=self.ctx,
                stdout_bytes=b"".join(self.chunks["stdout"]),
                stderr_bytes=b"".join(self.chunks["stderr"]),
                run_id=self.run_id,
                displays=self.displays,
                main_result=self.result,
                artifacts=[Artifact(str(a.get("path", "")), int(a.get("size") or 0),
                                    str(a.get("type") or "application/octet-stream"))
                           for a in (msg.get("artifacts") or []) if isinstance(a, dict)],
                exit_code=msg.get("exit_code") if isinstance(msg.get("exit_code"), int) else None,
            )
            return out
        if t == "err":
            raise RefusedError.make(str(msg.get("code")), str(msg.get("message")))
        if t == "ok":
            raise ProtocolError("daemon answered execute with 'ok'")
        return []  # an event type from a newer daemon


def parse_hello(msg: dict) -> HelloInfo:
    if msg.get("server") != "ctxd" or not isinstance(msg.get("pid"), int):
        raise ProtocolError(f"not a ctxd hello reply: {msg!r}")
    return HelloInfo(
        server=msg["server"],
        version=str(msg.get("version", "")),
        protocol=int(msg.get("protocol") or 1),
        versions=list(msg.get("versions") or [1]),
        pid=msg["pid"],
        instance=str(msg.get("instance", "")),
        limits=dict(msg.get("limits") or {}),
        preloads=dict(msg.get("preloads") or {}),
        tiers={str(k): [str(f) for f in (v or [])]
               for k, v in dict(msg.get("tiers") or {}).items()},
        syntaxes=[str(x) for x in (msg.get("syntaxes") or ["python"])],
    )


def check_reply(msg: dict) -> dict:
    """An `ok` is returned; `err` raises RefusedError; anything else is a
    protocol violation."""
    if msg["t"] == "ok":
        return msg
    if msg["t"] == "err":
        raise RefusedError.make(str(msg.get("code")), str(msg.get("message")))
    raise ProtocolError(f"daemon answered a control request with {msg['t']!r}")


# ---- routing ----------------------------------------------------------------------


class _Entry:
    __slots__ = ("kind", "sink", "ctx", "accepted", "cancel", "detached")

    def __init__(self, kind, sink, ctx):
        self.kind = kind  # "exec", "live" (ctx.fork), "ctl" or "ping"
        self.sink = sink  # has put_nowait(); None for pings
        self.ctx = ctx
        self.accepted = False
        self.cancel = False  # interrupt as soon as accepted
        self.detached = False  # drop its events (kept to send the interrupt)


class _Core:
    """Request ids, routing of daemon messages to per-request sinks, deferred
    interrupts and the liveness check. Not thread-safe: the blocking client
    calls it under its lock, the asyncio client from its loop.

    Every method that wants something sent returns a list of encoded
    requests for the caller to send."""

    def __init__(self, liveness: float, request_timeout: float):
        self.ids = itertools.count(1)
        self.pending: Dict[int, _Entry] = {}
        self.liveness = liveness
        self.request_timeout = request_timeout
        self.instance: Optional[str] = None
        self.pid: Optional[int] = None
        self.last_heard = time.monotonic()
        self.ping: Optional[int] = None
        self.ping_deadline = 0.0
        self.max_request = 0  # hello's max_request_bytes; 0 = not known yet
        self.handshake_failed = False  # the last CurveZMQ handshake failed
        # what that failure said: requests made after it fail at once (the
        # failure may come before the first request is registered)
        self.auth_error: Optional[str] = None

    def request(self, kind: str, sink, t: str, route_ctx: Optional[str] = None, **fields):
        """Registers a request; returns (id, encoded bytes). route_ctx is the
        context an execute runs on (for interrupts)."""
        if self.auth_error is not None:
            raise AuthenticationError(self.auth_error)
        rid = next(self.ids)
        data = _proto.encode_request(t, rid, **fields)
        if self.max_request and len(data) > self.max_request:
            raise TooLargeError(
                f"{t} request of {len(data)} bytes exceeds the daemon's max_request_bytes "
                f"({self.max_request}); nothing was sent", "too_large")
        if kind in ("exec", "live") and not self._runs():
            self.last_heard = time.monotonic()  # the silence that matters starts now
        self.pending[rid] = _Entry(kind, sink, route_ctx)
        return rid, data

    def forget(self, rid: int) -> None:
        self.pending.pop(rid, None)

    def _runs(self) -> bool:
        """Requests that wait without a deadline, guarded by the liveness
        check: runs, and forks (they wait in a context's queue)."""
        return any(e.kind in ("exec", "live") for e in self.pending.values())

    def _interrupt(self, rid: int, e: _Entry) -> bytes:
        _, data = self.request("ctl", None, "interrupt", ctx=e.ctx or "default", run=rid)
        return data

    def cancel(self, rid: int, detach: bool) -> List[bytes]:
        """Interrupts run rid (now if it started, else when it does);
        detach: drop its further events."""
        e = self.pending.get(rid)
        if e is None or e.kind != "exec":
            return []
        if detach:
            e.detached = True
        if e.accepted:
            return [self._interrupt(rid, e)]
        e.cancel = True
        return []

    def route(self, msg: dict) -> List[bytes]:
        """Delivers a message to its request's sink."""
        re = msg.get("re")
        if re is None and msg.get("t") == "err" and self.pending:
            # The daemon could not read the id of a request of ours: which
            # one is unknown, so every request in flight ends (none hangs).
            self.fail_all(ProtocolError(
                f"the daemon could not read a request of this client ({msg.get('code')}: "
                f"{msg.get('message')}); the requests in flight were ended"))
            return []
        if type(re) is not int:
            return []  # not one of our ids
        e = self.pending.get(re)
        if e is None:
            return []
        self.last_heard = time.monotonic()
        t = msg["t"]
        if e.kind == "ping":
            del self.pending[re]
            self.ping = None
            self._check_instance(msg)
            return []
        out = []
        if t == "accepted" and e.kind == "exec":
            e.accepted = True
            if e.cancel:
                e.cancel = False
                out.append(self._interrupt(re, e))
        if t in _proto.TERMINAL:
            del self.pending[re]
        if e.sink is not None and not e.detached:
            e.sink.put_nowait(msg)
        return out

    def note_hello(self, info: HelloInfo) -> None:
        self.instance, self.pid = info.instance, info.pid
        limit = info.limits.get("max_request_bytes")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self.max_request = limit

    def disconnected(self, endpoint: str) -> None:
        """The connection to the daemon dropped (a socket monitor's
        DISCONNECTED): what was in flight on it will never be answered, so it
        ends with DisconnectedError. ZeroMQ reconnects for the next requests."""
        if self.pending:
            self.fail_all(DisconnectedError(
                f"the connection to ctxd at {endpoint} dropped with {len(self.pending)} "
                "request(s) in flight; their outcome is unknown"))

    def monitor(self, frames, endpoint: str) -> None:
        """One socket-monitor message: a failed handshake ends what waits
        with AuthenticationError (the connection carried nothing, so its
        DISCONNECTED is not a drop); a drop after a good handshake ends what
        was in flight with DisconnectedError."""
        num, value = monitor_event(frames)
        if num in _HANDSHAKE_FAILED:
            self.handshake_failed = True
            self.auth_error = auth_message(endpoint, num, value)
            if self.pending:
                self.fail_all(AuthenticationError(self.auth_error))
        elif num == _EVENT_HANDSHAKE_SUCCEEDED:
            self.handshake_failed = False
            self.auth_error = None
        elif num == _EVENT_DISCONNECTED and not self.handshake_failed:
            self.disconnected(endpoint)

    def _check_instance(self, msg: dict) -> None:
        if msg.get("t") != "ok":
            return
        inst, pid = msg.get("instance"), msg.get("pid")
        other = (inst != self.instance) if (inst and self.instance) else (
            pid is not None and self.pid is not None and pid != self.pid)
        if other:
            self.fail_all(LostError(
                f"ctxd restarted (instance {inst}, was {self.instance}) while runs were in "
                "flight; their outcome is unknown"))

    def fail_all(self, exc: CtxdError) -> None:
        """Ends every request waiting with exc."""
        for rid, e in list(self.pending.items()):
            del self.pending[rid]
            if e.sink is not None and not e.detached:
                e.sink.put_nowait(exc)
        self.ping = None

    def tick(self, now: float):
        """The liveness check. Returns (requests to send, seconds until the
        next tick is due or None)."""
        if self.liveness <= 0 or not self._runs():
            if self.ping is not None:
                self.pending.pop(self.ping, None)
                self.ping = None
            return [], None
        if self.ping is not None:
            if now >= self.ping_deadline:
                self.pending.pop(self.ping, None)
                self.ping = None
                self.fail_all(UnreachableError(
                    "ctxd stopped answering (no reply to a liveness check within "
                    f"{self.request_timeout:g} s)"))
                self.last_heard = now
                return [], None
            return [], self.ping_deadline - now
        if now - self.last_heard >= self.liveness:
            rid, data = self.request("ping", None, "hello")
            self.ping = rid
            self.ping_deadline = now + self.request_timeout
            return [data], self.request_timeout
        return [], self.last_heard + self.liveness - now


Callback = Optional[Callable[..., Any]]

# ZeroMQ's socket-monitor events (zmq.h), without importing zmq here.
_EVENT_DISCONNECTED = 0x0200
_EVENT_HANDSHAKE_FAILED_NO_DETAIL = 0x0800
_EVENT_HANDSHAKE_SUCCEEDED = 0x1000
_EVENT_HANDSHAKE_FAILED_PROTOCOL = 0x2000
_EVENT_HANDSHAKE_FAILED_AUTH = 0x4000
_HANDSHAKE_FAILED = (_EVENT_HANDSHAKE_FAILED_NO_DETAIL, _EVENT_HANDSHAKE_FAILED_PROTOCOL,
                     _EVENT_HANDSHAKE_FAILED_AUTH)
# What the clients' monitors watch.
MONITOR_EVENTS = (_EVENT_DISCONNECTED | _EVENT_HANDSHAKE_SUCCEEDED
                  | _EVENT_HANDSHAKE_FAILED_NO_DETAIL | _EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | _EVENT_HANDSHAKE_FAILED_AUTH)
_monitors = itertools.count(1)


def monitor_addr() -> str:
    """A fresh inproc endpoint for a socket monitor. pyzmq's default names
    it after the socket's descriptor, which a later socket reuses; a name
    never used before rules out a new monitor meeting an old one's
    endpoint (its events, such as a failed handshake, would be lost)."""
    return f"inproc://ctxd-monitor-{os.getpid()}-{next(_monitors)}"


def monitor_event(frames):
    """(event number, value) of a ZeroMQ socket-monitor message (first
    frame: 16-bit event number, 32-bit value, native order)."""
    if not frames or len(frames[0]) < 2:
        return 0, 0
    f = frames[0]
    return int.from_bytes(f[:2], sys.byteorder), \
        int.from_bytes(f[2:6], sys.byteorder) if len(f) >= 6 else 0


def is_disconnect(frames) -> bool:
    """True for a ZeroMQ socket-monitor message reporting a dropped
    connection."""
    return monitor_event(frames)[0] == _EVENT_DISCONNECTED


def auth_message(endpoint: str, num: int, value: int) -> str:
    """What a failed CurveZMQ handshake means, for AuthenticationError."""
    if num == _EVENT_HANDSHAKE_FAILED_AUTH:
        return (f"authentication failed at {endpoint}: the daemon refused this client's key "
                f"(ZAP status {value}); add its public key (`ctx keygen` prints it) to the "
                "daemon's authorized_keys")
    what = "protocol error" if num == _EVENT_HANDSHAKE_FAILED_PROTOCOL else "no detail"
    return (f"authentication failed at {endpoint}: the CurveZMQ handshake failed ({what}, "
            f"error {value:#x}); is the server key the daemon's public key "
            "(STATE_DIR/server.pub)?")


SYNTAXES = ("python", "ipython")


def exec_fields(code: str, ctx, timeout, envs, silent, stop_on_error,
                allow_stdin: bool = False, artifacts: bool = False,
                argv=None, file=None, syntax: Optional[str] = None) -> dict:
    """The execute request's fields from the API's arguments."""
    if not isinstance(code, str):
        raise TypeError("code must be a str")
    if syntax is not None and syntax not in SYNTAXES:
        raise ValueError("syntax is 'python' or 'ipython'")
    if argv is not None:
        if isinstance(argv, str) or not all(isinstance(a, str) for a in argv):
            raise TypeError("argv is a list of str")
        argv = list(argv)
    if file is not None:
        file = os.fspath(file)
        if not isinstance(file, str) or not file:
            raise TypeError("file is a non-empty str path")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError("timeout is a number of seconds >= 0 (0: none)")
    env = None
    if envs:
        env = {}
        for k, v in envs.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("envs maps str to str")
            env[k] = v
    return dict(ctx=ctx_name(ctx), code=code, timeout=timeout, env=env,
                silent=True if silent else None, stop_on_error=True if stop_on_error else None,
                allow_stdin=True if allow_stdin else None,
                artifacts=True if artifacts else None, argv=argv, file=file,
                syntax=syntax)
