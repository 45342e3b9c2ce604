"""The blocking client: Client and its run handle, Run.

THREADS. A Client is thread-safe: any number of threads may call its
methods at once (runs, control requests, interrupts), and runs on different
contexts then execute in parallel in the daemon. One background I/O thread
per Client owns the ZeroMQ socket; it routes every daemon message to the
request it answers. Callbacks run in the thread that waits for the run
(the one that called execute() or Run.wait()), in the order the events
arrived, never concurrently for one run; they may call any method of the
client (an interrupt from on_stdout, another run, ...). Do not share a Client
across fork().
"""

from __future__ import annotations

import collections
import errno
import os
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import zmq

from ._common import (
    apply_curve,
    DEFAULT_LIVENESS,
    DEFAULT_REQUEST_TIMEOUT,
    Callback,
    Completeness,
    Completion,
    Inspection,
    ContextInfo,
    ExecResult,
    HelloInfo,
    StatsInfo,
    _Core,
    _RunState,
    check_reply,
    ctx_name,
    exec_fields,
    MONITOR_EVENTS,
    monitor_addr,
    parse_hello,
    parse_completeness,
    parse_completion,
    parse_inspection,
    parse_stats,
    query_fields,
    probe,
    resolve_endpoint,
)
from ._errors import (ClosedError, CtxdError, CtxdTimeoutError, ProtocolError,  # noqa: F401
                      RefusedError, UnreachableError)
from ._proto import decode_message


def _file_chunks(f, size):
    first = True
    while True:
        chunk = f.read(size)
        if not chunk and not first:
            return
        first = False
        yield chunk
        if not chunk:
            return



# What an on_input callback returns when the input() it was asked for was
# interrupted: no input.reply is sent (one would answer the code's next
# input() if it caught the KeyboardInterrupt and asked again).
NO_REPLY = object()

class Run:
    """A run submitted with Client.submit(). wait() fires its callbacks and
    returns its ExecResult; interrupt() stops it (KeyboardInterrupt in the
    code, globals kept)."""

    def __init__(self, client: "Client", rid: int, ctx: Optional[str], q, callbacks: Dict[str, Any]):
        self.id = rid
        self.ctx = ctx or "default"
        self._client = client
        self._q = q
        self._cb = callbacks
        self._state = _RunState(ctx, rid)
        self._lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._state.final is not None

    def interrupt(self) -> None:
        """Interrupts this run (only this one: an interrupt racing with its
        end never hits the next run), at once if it started, else as soon as
        it starts. Returns without waiting; the run ends "interrupted"."""
        self._client._cancel(self.id, detach=False)

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """Waits for the run's end, calling its callbacks as events arrive.
        timeout bounds this wait only (CtxdTimeoutError; the run goes on and
        wait() may be called again). Raises RefusedError when the daemon
        refused the run (e.g. busy, unknown_context), UnreachableError or
        LostError when the daemon went away. If the wait is interrupted (a
        KeyboardInterrupt, or an exception raised by a callback), the run is
        interrupted in the daemon and its further events are dropped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        in_callback = False
        with self._lock:
            try:
                while self._state.final is None:
                    wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                    if wait <= 0:
                        raise CtxdTimeoutError(f"run {self.id} still running after {timeout:g} s")
                    # No `continue` in this loop: on CPython 3.11 a
                    # KeyboardInterrupt raised at a `continue` escapes the
                    # `except BaseException` below.
                    try:
                        msg = self._q.get(timeout=wait)
                    except queue.Empty:
                        msg = None
                    if isinstance(msg, BaseException):
                        raise msg
                    for kind, arg in self._state.feed(msg) if msg is not None else ():
                        cb = self._cb.get(kind)
                        if cb is not None:
                            in_callback = True
                            if kind == "input":
                                # input() in the code: on_input(prompt, password) -> str,
                                # or None to decline (the code gets EOFError)
                                value = cb(*arg)
                                try:
                                    if value is NO_REPLY:
                                        pass  # the input() was interrupted: nothing to answer
                                    elif value is None:  # declined: the code gets EOFError
                                        self._client._call("input.reply", ctx=self.ctx, eof=True)
                                    else:
                                        self._client._call("input.reply", ctx=self.ctx, value=str(value))
                                except RefusedError as e:
                                    if e.code != "no_input":  # no_input: interrupted meanwhile
                                        raise
                            else:
                                cb(arg)
                            in_callback = False
            except BaseException as e:
                # A KeyboardInterrupt (wherever it lands) or a failing
                # callback: stop the run. A CtxdError of the run itself
                # (refused, daemon gone, bounded wait over) leaves it be.
                if in_callback or not isinstance(e, CtxdError):
                    self._client._cancel(self.id, detach=True)
                raise
            return self._state.final


class Client:
    """A connection to ctxd. Client(endpoint=None): endpoint, else
    $CTXD_ENDPOINT, else ipc://$XDG_RUNTIME_DIR/ctxd/ctxd.sock. Connecting
    checks the daemon answers `hello` (UnreachableError otherwise).

    request_timeout: how long a control request waits for its reply, and a
    liveness check for its answer (seconds). liveness: after this many
    seconds without a message while runs are in flight, the client asks the
    daemon whether it is still there (0: never). server_key, client_key (the Z85
    keys) or server_key_file, client_key_file (files holding them): for
    tcp:// endpoints with CurveZMQ (else $CTXD_SERVER_KEY or
    $CTXD_SERVER_KEY_FILE, $CTXD_CLIENT_KEY or $CTXD_CLIENT_KEY_FILE; see
    `ctx keygen`)."""

    def __init__(self, endpoint: Optional[str] = None, *,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 liveness: float = DEFAULT_LIVENESS,
                 server_key: Optional[str] = None, client_key: Optional[str] = None,
                 server_key_file: Optional[str] = None,
                 client_key_file: Optional[str] = None):
        self.endpoint = resolve_endpoint(endpoint)
        self._server_key, self._client_key = server_key, client_key
        self._key_files = (server_key_file, client_key_file)
        probe(self.endpoint)
        self._lock = threading.Lock()
        self._core = _Core(liveness, request_timeout)
        self._out: collections.deque = collections.deque()
        self._closed = False
        self._zctx = zmq.Context()
        try:
            sock = self._zctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            apply_curve(sock, self.endpoint, self._server_key, self._client_key,
                        *self._key_files)
            # A dropped connection loses what was in flight on it: the
            # monitor tells the I/O thread, which ends those requests.
            # Monitored before connecting: libzmq does not retry a
            # connection whose handshake failed, so an event missed then
            # would never come again.
            self._mon = sock.get_monitor_socket(MONITOR_EVENTS, monitor_addr())
            sock.connect(self.endpoint)
        except zmq.ZMQError as e:
            self._zctx.destroy(0)
            raise UnreachableError(f"cannot connect to {self.endpoint!r}: {e}") from None
        self._sock = sock
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._io, name="ctxd-client-io", daemon=True)
        self._thread.start()
        try:
            self.hello_info: HelloInfo = self.hello()
        except BaseException:
            self.close()
            raise

    # ---- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Stops the I/O thread and closes the socket. Calls still waiting
        raise ClosedError. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(5)
            if self._thread.is_alive():
                # A ZeroMQ socket is not thread-safe: closing it under the
                # I/O thread would crash the process. Left to the exit.
                return
        self._mon.close(0)
        self._sock.close(0)
        self._zctx.term()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- I/O thread -------------------------------------------------------------

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _enqueue(self, data: bytes) -> None:
        """Queues bytes for the I/O thread (caller holds the lock)."""
        self._out.append(data)

    def _io(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        poller.register(self._mon, zmq.POLLIN)
        # Bytes ZeroMQ would not take yet. Sends never block this thread: a
        # DEALER whose connection failed its handshake has no peer, and a
        # blocking send would then wait forever, deaf to the monitor.
        backlog: collections.deque = collections.deque()
        writing = False  # the socket is polled for POLLOUT
        due: Optional[float] = None
        failure: Optional[CtxdError] = None
        try:
            while True:
                if bool(backlog) != writing:
                    writing = bool(backlog)
                    poller.modify(self._sock, zmq.POLLIN | (zmq.POLLOUT if writing else 0))
                ms = None if due is None else max(0, int(due * 1000) + 1)
                try:
                    events = dict(poller.poll(ms))
                except zmq.ZMQError as e:
                    if e.errno == errno.EINTR:
                        continue
                    raise
                if self._wake_r in events:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                if self._mon in events:
                    self._drain_monitor()
                with self._lock:
                    if self._closed:
                        break
                    backlog.extend(self._out)
                    self._out.clear()
                    if self._core.auth_error is not None:
                        # Their requests ended with AuthenticationError and
                        # libzmq never retries this connection.
                        backlog.clear()
                self._flush(backlog)
                while True:
                    try:
                        frames = self._sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) != 1:
                        continue  # PROTOCOL.md: one frame per message
                    try:
                        msg = decode_message(frames[0])
                    except ProtocolError:
                        continue  # cannot be matched to a request
                    with self._lock:
                        backlog.extend(self._core.route(msg))
                with self._lock:
                    out, due = self._core.tick(time.monotonic())
                backlog.extend(out)
                self._flush(backlog)
        except zmq.ZMQError as e:
            failure = UnreachableError(f"ZeroMQ failure on {self.endpoint}: {e}")
        finally:
            with self._lock:
                self._core.fail_all(failure or ClosedError("the client was closed"))

    def _flush(self, backlog: collections.deque) -> None:
        """Sends what ZeroMQ takes now, in order (I/O thread); the rest
        waits for POLLOUT. A request whose bytes wait is still bounded by
        its timeout or the liveness check."""
        while backlog:
            try:
                self._sock.send(backlog[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            backlog.popleft()

    def _drain_monitor(self) -> None:
        """Reads the monitor's events (I/O thread): a disconnect ends the
        requests in flight, a failed handshake ends them with
        AuthenticationError."""
        while True:
            try:
                frames = self._mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            with self._lock:
                self._core.monitor(frames, self.endpoint)

    # ---- requests ------------------------------------------------------------------

    def _call(self, t: str, timeout: Optional[float] = None, _kind: str = "ctl",
              _fields: Optional[dict] = None, **fields) -> dict:
        """Sends a control request and returns its `ok` (RefusedError for
        `err`, UnreachableError when no reply comes in time; timeout 0: no
        deadline). _fields: more fields (one may be named `timeout`)."""
        if _fields:
            fields.update(_fields)
        q: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            rid, data = self._core.request(_kind, q, t, **fields)
            self._enqueue(data)
        self._wake()
        wait = self._core.request_timeout if timeout is None else timeout
        try:
            msg = q.get(timeout=wait) if wait and wait > 0 else q.get()
        except queue.Empty:
            with self._lock:
                self._core.forget(rid)
            raise UnreachableError(
                f"no reply from ctxd at {self.endpoint} within {wait:g} s "
                "(is the daemon running?)") from None
        except BaseException:
            with self._lock:
                self._core.forget(rid)
            raise
        if isinstance(msg, BaseException):
            raise msg
        return check_reply(msg)

    def _cancel(self, rid: int, detach: bool) -> None:
        with self._lock:
            if self._closed:
                return
            for data in self._core.cancel(rid, detach):
                self._enqueue(data)
        self._wake()

    # ---- runs ------------------------------------------------------------------------

    def submit(self, code: str, ctx: Any = None, *, on_stdout: Callback = None,
               on_stderr: Callback = None, on_result: Callback = None,
               on_error: Callback = None, on_accepted: Callback = None,
               timeout: Optional[float] = None, envs: Optional[Dict[str, str]] = None,
               silent: bool = False, stop_on_error: bool = False,
               on_display: Callback = None, on_clear_output: Callback = None,
               on_input: Optional[Callable[[str, bool], str]] = None,
               artifacts: bool = False, argv: Optional[List[str]] = None,
               file: Optional[str] = None, syntax: Optional[str] = None) -> Run:
        """Sends an execute without waiting; see execute() for the
        arguments. Returns a Run: wait() for its result (the callbacks fire
        in the thread that waits)."""
        fields = exec_fields(code, ctx, timeout, envs, silent, stop_on_error,
                             allow_stdin=on_input is not None, artifacts=artifacts,
                             argv=argv, file=file, syntax=syntax)
        q: queue.SimpleQueue = queue.SimpleQueue()
        with self._lock:
            if self._closed:
                raise ClosedError("the client is closed")
            rid, data = self._core.request("exec", q, "execute", route_ctx=fields["ctx"], **fields)
            self._enqueue(data)
        self._wake()
        cbs = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result,
               "error": on_error, "accepted": on_accepted, "display": on_display,
               "clear_output": on_clear_output, "input": on_input}
        return Run(self, rid, fields["ctx"], q, cbs)

    def execute(self, code: str, ctx: Any = None, on_stdout: Callback = None,
                on_stderr: Callback = None, on_result: Callback = None,
                on_error: Callback = None, timeout: Optional[float] = None,
                envs: Optional[Dict[str, str]] = None, *, silent: bool = False,
                stop_on_error: bool = False, on_accepted: Callback = None,
                on_display: Callback = None, on_clear_output: Callback = None,
                on_input: Optional[Callable[[str, bool], str]] = None,
               artifacts: bool = False, argv: Optional[List[str]] = None,
               file: Optional[str] = None, syntax: Optional[str] = None) -> ExecResult:
        """Runs code in context ctx (None: "default", which the daemon
        creates on first use; a name, or a ContextInfo) and returns its
        ExecResult once it ended, whatever its status ("ok", "error",
        "interrupted", "timeout", "died", "aborted").

        Callbacks fire while the code still runs, as output arrives:
        on_stdout(text) / on_stderr(text) with decoded text (UTF-8; a
        character split across chunks is reassembled, invalid bytes become
        U+FFFD), on_result(Result) for a trailing expression's value,
        on_error(ErrorInfo) when it raised, on_accepted(dict) when it started
        (ctx, execution_count, incarnation, previous_death if the previous
        worker died), on_display(Result) for display() output and matplotlib
        figures (is_main_result False; .png is base64), on_clear_output(wait).
        on_input(prompt, password) -> str answers input()/getpass() in the
        code (None declines: EOFError; ctxd.client.NO_REPLY: the input() was
        interrupted, send nothing); without it they raise EOFError (allow_stdin false).

        timeout: seconds the code may run in the daemon (None: the daemon's
        default, 600; 0: none); past it the code gets KeyboardInterrupt and the
        status is "timeout". envs: environment variables for this run only.
        silent: no result, no execution count increment. stop_on_error: if
        this run fails, the runs queued behind it are aborted. file and
        argv make the run a script's, as `python3 FILE ARGS...`: code is
        compiled under file (an absolute path: __file__, sys.path[0] its
        directory) and sys.argv is argv (argv[0] the script as named), for
        this run only. sys.exit() ends a run without a traceback:
        ExecResult.exit_code. syntax: "ipython" (magics, `!cmd`, `obj?`,
        trailing `;`, pretty values) or "python"; None: the context's
        default (ctx.create syntax), else plain Python.

        Raises RefusedError (e.g. busy, unknown_context), UnreachableError,
        LostError; a KeyboardInterrupt while waiting interrupts the run."""
        return self.submit(code, ctx, on_stdout=on_stdout, on_stderr=on_stderr,
                           on_result=on_result, on_error=on_error, on_accepted=on_accepted,
                           timeout=timeout, envs=envs, silent=silent,
                           stop_on_error=stop_on_error, on_display=on_display,
                           on_clear_output=on_clear_output, on_input=on_input,
                           artifacts=artifacts, argv=argv, file=file,
                           syntax=syntax).wait()

    def interrupt(self, ctx: Any = None, run: Optional[int] = None) -> bool:
        """Raises KeyboardInterrupt in the run executing on ctx (default
        "default"), whoever sent it; with run (a Run or its id), only if that
        run of this client is the one executing. Returns whether something
        was interrupted."""
        if isinstance(run, Run):
            run = run.id
        reply = self._call("interrupt", ctx=ctx_name(ctx) or "default", run=run)
        return bool(reply.get("interrupted"))

    # ---- contexts ---------------------------------------------------------------------

    def hello(self) -> HelloInfo:
        """The daemon's version, pid, instance and limits."""
        info = parse_hello(self._call("hello"))
        with self._lock:
            self._core.note_hello(info)
        return info

    def stats(self, request_timeout: Optional[float] = None) -> StatsInfo:
        """The daemon's counters since it started (the `stats` request;
        RefusedError code "unknown_type" from a daemon without it)."""
        return parse_stats(self._call("stats", request_timeout))

    def snapshot_context(self, ctx: Any, name: Optional[str] = None) -> Dict[str, Any]:
        """Writes ctx's Python state to snapshot name (None: generated),
        `ctx.snapshot`; waits behind its runs, without a deadline. Returns
        {"snapshot": {id, ctx, name, size, created}, "unsaved": [{name,
        reason}]}: every global that could not be saved, and why.
        RefusedError codes: unknown_context, dead, busy, limit, too_large
        (the message says the size it would need), io, aborted."""
        reply = self._call("ctx.snapshot", 0, _kind="live", ctx=ctx_name(ctx), name=name)
        return {"snapshot": reply.get("snapshot"), "unsaved": reply.get("unsaved", [])}

    def restore_context(self, ctx: Any, snapshot: str) -> Dict[str, Any]:
        """Replaces ctx's state with snapshot ("NAME" of ctx's, or
        "CTX/NAME"), `ctx.restore`. Returns {"ctx": ContextInfo,
        "snapshot": id, "restored": n, "unsaved": [...]}. A corrupt or
        foreign snapshot raises RefusedError bad_snapshot and ctx keeps its
        state."""
        reply = self._call("ctx.restore", 0, _kind="live", ctx=ctx_name(ctx),
                               snapshot=snapshot)
        return {"ctx": ContextInfo.from_msg(reply.get("ctx")), "snapshot": reply.get("snapshot"),
                "restored": reply.get("restored", 0), "unsaved": reply.get("unsaved", [])}

    def list_snapshots(self, ctx: Any = None,
                       request_timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """The snapshots of ctx (None: of every context), `ctx.snapshots`:
        [{id, ctx, name, size, created}]."""
        reply = self._call("ctx.snapshots", request_timeout,
                               ctx=ctx_name(ctx) if ctx is not None else None)
        return list(reply.get("snapshots", []))

    def delete_snapshot(self, snapshot: str, request_timeout: Optional[float] = None) -> None:
        """Deletes snapshot "CTX/NAME" (`ctx.snapshot_delete`)."""
        self._call("ctx.snapshot_delete", request_timeout, snapshot=snapshot)

    def export_snapshot(self, snapshot: str,
                        request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Copies snapshot "CTX/NAME" to STATE_DIR/exports/CTX/NAME, its
        writer's tier marked under the operator's STATE_DIR/export.key
        (`ctx.snapshot_export`). Returns {snapshot, path, tier, size}.
        RefusedError codes: not_found, no_key, io."""
        reply = self._call("ctx.snapshot_export", request_timeout, snapshot=snapshot)
        return {k: reply.get(k) for k in ("snapshot", "path", "tier", "size")}

    def import_snapshot(self, snapshot: str,
                        request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Makes the export put at STATE_DIR/imports/CTX/NAME snapshot
        "CTX/NAME", checked with STATE_DIR/export.key, the writer's tier
        kept (`ctx.snapshot_import`). Returns {"snapshot": {id, ctx, name,
        size, created, tier}}. RefusedError codes: not_found, bad_snapshot
        (another key, changed), too_large, limit, io."""
        reply = self._call("ctx.snapshot_import", request_timeout, snapshot=snapshot)
        return {"snapshot": reply.get("snapshot")}

    def fork_context(self, ctx: Any, name: Optional[str] = None) -> ContextInfo:
        """Clones the live context ctx into a new one (name None: generated)
        with the same globals, modules, cwd and environment (`ctx.fork`).
        The fork waits in ctx's queue behind its runs, so this call has no
        deadline; the liveness check guards it as it guards runs.
        RefusedError codes: unknown_context, dead, exists, limit, busy,
        spawn, aborted."""
        src = ctx_name(ctx)
        if not src:
            raise ValueError("fork_context needs a context")
        reply = self._call("ctx.fork", 0, _kind="live", ctx=src, name=name)
        return ContextInfo.from_msg(reply.get("ctx"))

    def create_context(self, name: Optional[str] = None, *, cwd: Optional[str] = None,
                       env: Optional[Dict[str, str]] = None,
                       request_timeout: Optional[float] = None,
                       figures: bool = True,
                       packages: Optional[List[str]] = None, tier: Optional[str] = None,
                       policy: Optional[Dict[str, Any]] = None,
                       syntax: Optional[str] = None,
                       lease: Optional[float] = None,
                       from_snapshot: Optional[str] = None,
                       autosnapshot: Any = None) -> ContextInfo:
        """Starts a context (a generated name ctx-XXXXXXXXXXXX when name is
        None) with its own worker process. cwd: an absolute directory (a
        relative one is made absolute here); env: added to its environment;
        figures=False: matplotlib figures are not sent as display outputs;
        packages: installed into it first, as pip_install (then without a
        deadline: pip may take long). tier ("static", "unsafe", "local",
        "sandbox", or mellea's names) and policy (a map of policy fields):
        PROTOCOL.md section 5, "Tiers and policies"; hello_info.tiers lists
        what each tier enforces. syntax: the default of its runs ("python"
        or "ipython"). lease: seconds (1 to 86400) the context lives
        without a request naming it (renew_context is the heartbeat); the
        daemon deletes it past that, busy or not. from_snapshot: "CTX/NAME",
        the new context starts with that snapshot's state (then without a
        deadline); autosnapshot: "run" or seconds, its state is kept as
        snapshot NAME/auto (after each run that ends ok, or at most every
        that many seconds) and comes back after a daemon restart.
        RefusedError codes: exists, bad_name, bad_cwd, bad_field, limit,
        spawn, install, not_found, bad_snapshot, too_large."""
        if cwd is not None:
            cwd = os.path.abspath(cwd)
        fields = dict(name=name, cwd=cwd, env=env or None, figures=None if figures else False,
                      packages=list(packages) if packages else None, tier=tier, policy=policy,
                      syntax=syntax, lease=lease, from_snapshot=from_snapshot,
                      autosnapshot=autosnapshot)
        if packages or from_snapshot:
            reply = self._call("ctx.create", 0, _kind="live", **fields)
        else:
            reply = self._call("ctx.create", request_timeout, **fields)
        return ContextInfo.from_msg(reply.get("ctx"))

    def pip_install(self, packages: List[str], ctx: Any = None) -> List[Dict[str, Any]]:
        """Installs requirements ("name", "name==1.0", "name[extra]>=1"; at
        most 64) from the daemon's wheelhouse or index into ctx (default
        "default"), importable there from the next run on and nowhere else
        (`pip.install`). Returns [{"name": normalised requirement, "cached":
        True when the daemon's cache had it and pip did not run}]. pip may
        take long: no deadline, the liveness check guards the wait.
        RefusedError codes: install (pip's message is in the error),
        bad_field, unknown_context, busy."""
        if isinstance(packages, str):
            raise TypeError("pip_install takes a list of requirements")
        reply = self._call("pip.install", 0, _kind="live", ctx=ctx_name(ctx) or "default",
                           packages=list(packages))
        pkgs = reply.get("packages")
        if not isinstance(pkgs, list):
            raise ProtocolError("pip.install reply without packages")
        return pkgs

    def list_contexts(self, request_timeout: Optional[float] = None) -> List[ContextInfo]:
        """Every context, "default" included, sorted by name."""
        out: List[ContextInfo] = []
        fields: dict = {}
        while True:  # page by page: a page ends before the daemon's cap
            reply = self._call("ctx.list", request_timeout, _fields=fields)
            ctxs = reply.get("contexts")
            if not isinstance(ctxs, list):
                raise ProtocolError("ctx.list reply without contexts")
            out += [ContextInfo.from_msg(c) for c in ctxs]
            nxt = reply.get("next")
            if not isinstance(nxt, str) or not ctxs:
                return out
            fields = {"after": nxt}

    def context_info(self, ctx: Any, request_timeout: Optional[float] = None) -> ContextInfo:
        """One context (`ctx.info`); UnknownContextError when there is none."""
        reply = self._call("ctx.info", request_timeout, ctx=ctx_name(ctx))
        if not isinstance(reply.get("ctx"), dict):
            raise ProtocolError("ctx.info reply without ctx")
        return ContextInfo.from_msg(reply["ctx"])

    FILE_CHUNK = 4 * 1024 * 1024

    def put_file(self, ctx: Any, path: str, source: Any,
                 request_timeout: Optional[float] = None) -> int:
        """Copies source (bytes, a binary file object, or a local path) to
        path, relative to the context's directory, in 4 MiB chunks (the
        daemon never holds more than one). Returns the size written.
        RefusedError codes: bad_path (.., absolute, a symlink on the path),
        not_found, io, too_large."""
        name = ctx_name(ctx)
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = memoryview(source)
            chunks = (bytes(data[i:i + self.FILE_CHUNK])
                      for i in range(0, max(len(data), 1), self.FILE_CHUNK))
            return self._put_chunks(name, path, chunks, request_timeout)
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                return self._put_chunks(name, path, _file_chunks(f, self.FILE_CHUNK),
                                        request_timeout)
        return self._put_chunks(name, path, _file_chunks(source, self.FILE_CHUNK), request_timeout)

    def _put_chunks(self, ctx, path, chunks, request_timeout) -> int:
        offset = 0
        for chunk in chunks:
            r = self._call("file.put", request_timeout, ctx=ctx, path=path, data=chunk,
                           offset=offset)
            offset = int(r.get("size", offset + len(chunk)))
        return offset

    def get_file(self, ctx: Any, path: str, dest: Any = None,
                 request_timeout: Optional[float] = None) -> Any:
        """Copies path (relative to the context's directory) out in 4 MiB
        chunks: into dest (a local path or a binary file object) and returns
        the size, or, with dest None, returns the bytes."""
        name = ctx_name(ctx)
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                return self.get_file(name, path, f, request_timeout)
        parts = [] if dest is None else None
        offset = 0
        while True:
            r = self._call("file.get", request_timeout, ctx=name, path=path, offset=offset)
            data = r.get("data") or b""
            if parts is None:
                dest.write(data)
            else:
                parts.append(data)
            offset += len(data)
            if r.get("eof") or not data:
                break
        return b"".join(parts) if parts is not None else offset

    def renew_context(self, ctx: Any, request_timeout: Optional[float] = None) -> float:
        """Renews a leased context's lease (`ctx.renew`); returns the lease
        in seconds (0: the context has none)."""
        reply = self._call("ctx.renew", request_timeout, ctx=ctx_name(ctx))
        return float(reply.get("lease") or 0)

    def delete_context(self, ctx: Any, request_timeout: Optional[float] = None) -> None:
        """Kills the context's worker and its processes; its running and
        queued runs end "aborted". "default" cannot be deleted (RefusedError
        forbidden); NotFoundError for an unknown context."""
        name = ctx_name(ctx)
        if not name:
            raise ValueError("delete_context needs a context")
        self._call("ctx.delete", request_timeout, ctx=name)

    def restart_context(self, ctx: Any = None,
                        request_timeout: Optional[float] = None) -> ContextInfo:
        """A fresh interpreter for the context (default "default"): empty
        globals, execution count 0; running and queued runs end "aborted"."""
        reply = self._call("ctx.restart", request_timeout, ctx=ctx_name(ctx) or "default")
        return ContextInfo.from_msg(reply.get("ctx"))

    # ---- queries: complete, inspect, is_complete ------------------------------------

    def complete(self, code: str, cursor: Optional[int] = None, ctx: Any = None, *,
                 timeout: Optional[float] = None, wait: Optional[float] = None) -> Completion:
        """Completions for the name before cursor (characters into code;
        None: the end) from the context's live globals: names, attributes,
        keywords, builtins, module names after `import`. The query waits in
        the context's queue behind its runs; the daemon interrupts it after
        timeout seconds (default 10). wait bounds this call (None: no
        deadline; past it UnreachableError, and the answer is dropped when it
        comes). RefusedError: bad_field (cursor past the end),
        unknown_context, dead, busy, timeout."""
        reply = self._call("complete", wait or 0, _kind="live", _fields=query_fields(code, ctx, cursor, timeout))
        return parse_completion(reply)

    def inspect(self, code: str, cursor: Optional[int] = None, ctx: Any = None, *,
                detail_level: int = 0, timeout: Optional[float] = None,
                wait: Optional[float] = None) -> Inspection:
        """What the name at cursor (or the function being called there) is:
        signature, type, docstring; detail_level 1 adds its source."""
        reply = self._call("inspect", wait or 0, _kind="live", detail_level=detail_level or None,
                           _fields=query_fields(code, ctx, cursor, timeout))
        return parse_inspection(reply)

    def is_complete(self, code: str, ctx: Any = None, *,
                    timeout: Optional[float] = None,
                    wait: Optional[float] = None) -> Completeness:
        """Whether code would run as typed (a REPL's Enter), or needs more
        lines, or cannot compile."""
        reply = self._call("is_complete", wait or 0, _kind="live",
                           _fields=query_fields(code, ctx, None, timeout))
        return parse_completeness(reply)
