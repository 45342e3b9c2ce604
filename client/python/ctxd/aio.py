"""The asyncio client: AsyncClient, the twin of Client, and AsyncRun.

Use it from one event loop (it is not thread-safe; any number of tasks of
that loop may use it at once). A reader task owns the receiving side of the
socket and routes messages to the request they answer. Callbacks may be
plain functions or coroutine functions (awaited in order, in the task that
waits for the run, before the next event is handled). Cancelling the task
that waits for a run interrupts the run in the daemon.

    async with AsyncClient() as c:
        r = await c.execute("print(6 * 7)", on_stdout=print)
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import os
import time
from typing import Any, Dict, List, Optional

import zmq
import zmq.asyncio

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
from ._errors import (ClosedError, CtxdError, CtxdTimeoutError, ProtocolError, RefusedError,
                      UnreachableError)
from ._proto import decode_message

# Each AsyncClient has its own ZeroMQ context, as each Client has: with one
# context shared by many clients, a CurveZMQ handshake refused by the daemon
# was at times never reported by libzmq (no monitor event, the connection
# left half-closed), so the caller waited out its timeout instead of getting
# AuthenticationError. The contexts of open clients are held here: pyzmq's
# Context.__del__ terminates a context (blocking while a socket of it is
# still open) when the garbage collector meets it before its sockets, so a
# context is terminated only by close(), after its sockets.
_contexts: set = set()


# Longest sleep of the reader, so a run submitted while nothing else is in
# flight gets its liveness check on time.
_MAX_POLL_MS = 1000


async def _call_cb(cb, arg) -> None:
    r = cb(arg)
    if inspect.isawaitable(r):
        await r


class AsyncRun:
    """A run submitted with AsyncClient.submit()."""

    def __init__(self, client: "AsyncClient", rid: int, ctx: Optional[str], q, callbacks):
        self.id = rid
        self.ctx = ctx or "default"
        self._client = client
        self._q = q
        self._cb = callbacks
        self._state = _RunState(ctx, rid)

    @property
    def done(self) -> bool:
        return self._state.final is not None

    async def interrupt(self) -> None:
        """Interrupts this run (at once if it started, else when it starts);
        it ends "interrupted"."""
        await self._client._cancel(self.id, detach=False)

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """As Run.wait: fires the callbacks (awaiting coroutine ones) and
        returns the ExecResult. A cancelled wait (or a callback that raised)
        interrupts the run and drops its further events; timeout bounds this
        wait only (CtxdTimeoutError, the run goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        in_callback = False
        try:
            while self._state.final is None:
                if deadline is None:
                    msg = await self._q.get()
                else:
                    left = deadline - time.monotonic()
                    try:
                        if left <= 0:
                            raise asyncio.TimeoutError
                        msg = await asyncio.wait_for(self._q.get(), left)
                    except asyncio.TimeoutError:
                        raise CtxdTimeoutError(
                            f"run {self.id} still running after {timeout:g} s") from None
                if isinstance(msg, BaseException):
                    raise msg
                for kind, arg in self._state.feed(msg):
                    cb = self._cb.get(kind)
                    if cb is not None:
                        in_callback = True
                        if kind == "input":
                            value = cb(*arg)
                            if inspect.isawaitable(value):
                                value = await value
                            try:
                                if value is None:  # declined: the code gets EOFError
                                    await self._client._call("input.reply", ctx=self.ctx, eof=True)
                                else:
                                    await self._client._call("input.reply", ctx=self.ctx, value=str(value))
                            except RefusedError as e:
                                if e.code != "no_input":  # no_input: interrupted meanwhile
                                    raise
                        else:
                            await _call_cb(cb, arg)
                        in_callback = False
        except BaseException as e:
            # Cancelled, or a failing callback: stop the run. A CtxdError of
            # the run itself (refused, daemon gone, bounded wait over) leaves
            # it be.
            if in_callback or not isinstance(e, CtxdError):
                self._client._cancel_nowait(self.id)
            raise
        return self._state.final


class AsyncClient:
    """The asyncio twin of Client (same arguments, same methods, as
    coroutines). It connects on first use, or explicitly with
    `await client.connect()` / `async with AsyncClient(...) as client`."""

    def __init__(self, endpoint: Optional[str] = None, *,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 liveness: float = DEFAULT_LIVENESS,
                 server_key: Optional[str] = None, client_key: Optional[str] = None,
                 server_key_file: Optional[str] = None,
                 client_key_file: Optional[str] = None):
        self.endpoint = resolve_endpoint(endpoint)
        self._server_key, self._client_key = server_key, client_key
        self._key_files = (server_key_file, client_key_file)
        self._core = _Core(liveness, request_timeout)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._sock = None
        self._mon = None
        self._zctx: Optional[zmq.asyncio.Context] = None
        self._zctx_pid = os.getpid()
        self._backlog: collections.deque = collections.deque()
        self._reader: Optional[asyncio.Task] = None
        self._closed = False
        self._connecting: Optional[asyncio.Future] = None
        self.hello_info: Optional[HelloInfo] = None

    # ---- lifecycle -------------------------------------------------------------

    async def connect(self) -> "AsyncClient":
        """Connects and checks the daemon answers `hello`."""
        if self._closed:
            raise ClosedError("the client is closed")
        if self._sock is not None:
            return self
        probe(self.endpoint)
        sock = None
        try:
            self._zctx, self._zctx_pid = zmq.asyncio.Context(), os.getpid()
            _contexts.add(self._zctx)
            sock = self._zctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.SNDHWM, 0)
            apply_curve(sock, self.endpoint, self._server_key, self._client_key,
                        *self._key_files)
            # A dropped connection loses what was in flight on it: the
            # reader watches the monitor and ends those requests. Monitored
            # before connecting: libzmq does not retry a connection whose
            # handshake failed, so an event missed then would never come.
            self._mon = sock.get_monitor_socket(MONITOR_EVENTS, monitor_addr())
            sock.connect(self.endpoint)
        except zmq.ZMQError as e:
            if sock is not None:
                sock.close(0)
            self._end_context()
            raise UnreachableError(f"cannot connect to {self.endpoint!r}: {e}") from None
        self._sock = sock
        self._backlog.clear()
        self._loop = asyncio.get_running_loop()
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            self.hello_info = await self.hello()
        except BaseException:
            await self.close()
            raise
        return self

    async def _ensure(self) -> None:
        if self._closed:
            raise ClosedError("the client is closed")
        if self._sock is not None and self._loop is not asyncio.get_running_loop():
            # Used from another event loop (a second asyncio.run): the
            # socket and reader belong to the first one. Requests still
            # waiting there cannot be answered; start afresh in this loop.
            self._core.fail_all(ClosedError("the client moved to another event loop"))
            self._drop()
        if self._sock is None:
            await self.connect()

    def _drop(self) -> None:
        """Closes the sockets (synchronously) and forgets the reader."""
        if self._reader is not None and not self._reader.done():
            try:
                self._reader.cancel()
            except RuntimeError:  # its loop is closed
                pass
        self._reader = None
        for sock in (self._mon, self._sock):
            if sock is not None:
                sock.close(0)
        self._mon = self._sock = None
        self._end_context()
        self._backlog.clear()
        self._loop = None

    def _end_context(self) -> None:
        """Terminates this client's ZeroMQ context once its sockets are
        closed (they linger 0, so it does not wait)."""
        if self._zctx is not None:
            _contexts.discard(self._zctx)
            if self._zctx_pid == os.getpid():  # not a forked parent's
                self._zctx.term()
            self._zctx = None

    async def close(self) -> None:
        """Stops the reader and closes the socket; waiting calls raise
        ClosedError. Idempotent."""
        if self._closed:
            return
        self._closed = True
        same_loop = self._loop is asyncio.get_running_loop()
        if self._reader is not None and same_loop:
            self._reader.cancel()
            try:
                await self._reader
            except BaseException:
                pass
        self._core.fail_all(ClosedError("the client was closed"))
        self._drop()

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- I/O ---------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        """Queues bytes and sends what ZeroMQ takes now. Never waits: a
        DEALER whose connection failed its handshake has no peer, and an
        awaited send would then wait forever. What is left, the reader
        retries each turn (at least once a second); its request is still
        bounded by its timeout or the liveness check."""
        self._backlog.append(data)
        self._flush()

    def _flush(self) -> None:
        """Sends the backlog, in order, until ZeroMQ would block."""
        if self._core.auth_error is not None:
            # Those requests ended with AuthenticationError, and libzmq
            # never retries this connection.
            self._backlog.clear()
        while self._backlog and self._sock is not None:
            # With NOBLOCK, and no send of ours ever left waiting, pyzmq
            # tries the send at once and returns a finished future (sending
            # through pyzmq's asyncio socket, not a plain one, keeps it
            # re-checking the reader's poll: a plain send could swallow the
            # wake-up of a reply that came meanwhile).
            f = self._sock.send(self._backlog[0], zmq.NOBLOCK)
            if f.done() and f.exception() is not None:
                if isinstance(f.exception(), zmq.Again):
                    return
                raise f.exception()
            self._backlog.popleft()

    def _send_soon(self, datas: List[bytes]) -> None:
        for data in datas:
            self._send(data)

    async def _read_loop(self) -> None:
        due: Optional[float] = None
        failure: Optional[CtxdError] = None
        poller = zmq.asyncio.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._mon, zmq.POLLIN)
        try:
            while True:
                ms = _MAX_POLL_MS if due is None else min(_MAX_POLL_MS, max(0, int(due * 1000) + 1))
                events = dict(await poller.poll(ms))
                if self._mon in events:
                    while True:
                        try:
                            frames = await self._mon.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._core.monitor(frames, self.endpoint)
                if self._sock in events:
                    while True:
                        try:
                            frames = await self._sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        msg = None
                        if len(frames) == 1:  # PROTOCOL.md: one frame per message
                            try:
                                msg = decode_message(frames[0])
                            except ProtocolError:
                                pass  # cannot be matched to a request
                        for data in self._core.route(msg) if msg is not None else ():
                            self._send(data)
                out, due = self._core.tick(time.monotonic())
                for data in out:
                    self._send(data)
                self._flush()
        except asyncio.CancelledError:
            raise
        except zmq.ZMQError as e:
            failure = UnreachableError(f"ZeroMQ failure on {self.endpoint}: {e}")
        finally:
            if failure is not None:
                self._core.fail_all(failure)

    async def _call(self, t: str, timeout: Optional[float] = None, _kind: str = "ctl",
                    _fields: Optional[dict] = None, **fields) -> dict:
        await self._ensure()
        if _fields:
            fields.update(_fields)
        q: asyncio.Queue = asyncio.Queue()
        rid, data = self._core.request(_kind, q, t, **fields)
        self._send(data)
        wait = self._core.request_timeout if timeout is None else timeout
        try:
            msg = await (asyncio.wait_for(q.get(), wait) if wait and wait > 0 else q.get())
        except asyncio.TimeoutError:
            self._core.forget(rid)
            raise UnreachableError(
                f"no reply from ctxd at {self.endpoint} within {wait:g} s "
                "(is the daemon running?)") from None
        except BaseException:
            self._core.forget(rid)
            raise
        if isinstance(msg, BaseException):
            raise msg
        return check_reply(msg)

    async def _cancel(self, rid: int, detach: bool) -> None:
        for data in self._core.cancel(rid, detach):
            self._send(data)

    def _cancel_nowait(self, rid: int) -> None:
        if not self._closed:
            self._send_soon(self._core.cancel(rid, True))

    # ---- runs ------------------------------------------------------------------------

    async def submit(self, code: str, ctx: Any = None, *, on_stdout: Callback = None,
                     on_stderr: Callback = None, on_result: Callback = None,
                     on_error: Callback = None, on_accepted: Callback = None,
                     timeout: Optional[float] = None, envs: Optional[Dict[str, str]] = None,
                     silent: bool = False, stop_on_error: bool = False,
                     on_display: Callback = None, on_clear_output: Callback = None,
                     on_input: Callback = None, artifacts: bool = False,
                     argv: Optional[List[str]] = None, file: Optional[str] = None,
                     syntax: Optional[str] = None) -> AsyncRun:
        """Sends an execute and returns an AsyncRun to wait() for."""
        await self._ensure()
        fields = exec_fields(code, ctx, timeout, envs, silent, stop_on_error,
                             allow_stdin=on_input is not None, artifacts=artifacts,
                             argv=argv, file=file, syntax=syntax)
        q: asyncio.Queue = asyncio.Queue()
        rid, data = self._core.request("exec", q, "execute", route_ctx=fields["ctx"], **fields)
        self._send(data)
        cbs = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result,
               "error": on_error, "accepted": on_accepted, "display": on_display,
               "clear_output": on_clear_output, "input": on_input}
        return AsyncRun(self, rid, fields["ctx"], q, cbs)

    async def execute(self, code: str, ctx: Any = None, on_stdout: Callback = None,
                      on_stderr: Callback = None, on_result: Callback = None,
                      on_error: Callback = None, timeout: Optional[float] = None,
                      envs: Optional[Dict[str, str]] = None, *, silent: bool = False,
                      stop_on_error: bool = False, on_accepted: Callback = None,
                      on_display: Callback = None, on_clear_output: Callback = None,
                      on_input: Callback = None, artifacts: bool = False,
                      argv: Optional[List[str]] = None, file: Optional[str] = None,
                      syntax: Optional[str] = None) -> ExecResult:
        """As Client.execute; callbacks may be coroutine functions."""
        run = await self.submit(code, ctx, on_stdout=on_stdout, on_stderr=on_stderr,
                                on_result=on_result, on_error=on_error,
                                on_accepted=on_accepted, timeout=timeout, envs=envs,
                                silent=silent, stop_on_error=stop_on_error,
                                on_display=on_display, on_clear_output=on_clear_output,
                                on_input=on_input, artifacts=artifacts,
                                argv=argv, file=file, syntax=syntax)
        return await run.wait()

    async def interrupt(self, ctx: Any = None, run: Any = None) -> bool:
        """As Client.interrupt."""
        if isinstance(run, AsyncRun):
            run = run.id
        reply = await self._call("interrupt", ctx=ctx_name(ctx) or "default", run=run)
        return bool(reply.get("interrupted"))

    # ---- contexts ---------------------------------------------------------------------

    async def hello(self) -> HelloInfo:
        info = parse_hello(await self._call("hello"))
        self._core.note_hello(info)
        return info

    async def stats(self, request_timeout: Optional[float] = None) -> StatsInfo:
        """As Client.stats."""
        return parse_stats(await self._call("stats", request_timeout))

    async def snapshot_context(self, ctx: Any, name: Optional[str] = None) -> Dict[str, Any]:
        """As Client.snapshot_context."""
        reply = await self._call("ctx.snapshot", 0, _kind="live", ctx=ctx_name(ctx), name=name)
        return {"snapshot": reply.get("snapshot"), "unsaved": reply.get("unsaved", [])}

    async def restore_context(self, ctx: Any, snapshot: str) -> Dict[str, Any]:
        """As Client.restore_context."""
        reply = await self._call("ctx.restore", 0, _kind="live", ctx=ctx_name(ctx),
                               snapshot=snapshot)
        return {"ctx": ContextInfo.from_msg(reply.get("ctx")), "snapshot": reply.get("snapshot"),
                "restored": reply.get("restored", 0), "unsaved": reply.get("unsaved", [])}

    async def list_snapshots(self, ctx: Any = None,
                       request_timeout: Optional[float] = None) -> List[Dict[str, Any]]:
        """As Client.list_snapshots."""
        reply = await self._call("ctx.snapshots", request_timeout,
                               ctx=ctx_name(ctx) if ctx is not None else None)
        return list(reply.get("snapshots", []))

    async def delete_snapshot(self, snapshot: str, request_timeout: Optional[float] = None) -> None:
        """As Client.delete_snapshot."""
        await self._call("ctx.snapshot_delete", request_timeout, snapshot=snapshot)

    async def export_snapshot(self, snapshot: str,
                              request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """As Client.export_snapshot."""
        reply = await self._call("ctx.snapshot_export", request_timeout, snapshot=snapshot)
        return {k: reply.get(k) for k in ("snapshot", "path", "tier", "size")}

    async def import_snapshot(self, snapshot: str,
                              request_timeout: Optional[float] = None) -> Dict[str, Any]:
        """As Client.import_snapshot."""
        reply = await self._call("ctx.snapshot_import", request_timeout, snapshot=snapshot)
        return {"snapshot": reply.get("snapshot")}

    async def fork_context(self, ctx: Any, name: Optional[str] = None) -> ContextInfo:
        """As Client.fork_context."""
        src = ctx_name(ctx)
        if not src:
            raise ValueError("fork_context needs a context")
        reply = await self._call("ctx.fork", 0, _kind="live", ctx=src, name=name)
        return ContextInfo.from_msg(reply.get("ctx"))

    async def create_context(self, name: Optional[str] = None, *, cwd: Optional[str] = None,
                             env: Optional[Dict[str, str]] = None,
                             request_timeout: Optional[float] = None,
                             figures: bool = True,
                             packages: Optional[List[str]] = None,
                             tier: Optional[str] = None,
                             policy: Optional[Dict[str, Any]] = None,
                             syntax: Optional[str] = None,
                             lease: Optional[float] = None,
                       from_snapshot: Optional[str] = None,
                       autosnapshot: Any = None) -> ContextInfo:
        """As Client.create_context."""
        if cwd is not None:
            cwd = os.path.abspath(cwd)
        fields = dict(name=name, cwd=cwd, env=env or None, figures=None if figures else False,
                      packages=list(packages) if packages else None, tier=tier, policy=policy,
                      syntax=syntax, lease=lease, from_snapshot=from_snapshot,
                      autosnapshot=autosnapshot)
        if packages or from_snapshot:
            reply = await self._call("ctx.create", 0, _kind="live", **fields)
        else:
            reply = await self._call("ctx.create", request_timeout, **fields)
        return ContextInfo.from_msg(reply.get("ctx"))

    async def renew_context(self, ctx: Any, request_timeout: Optional[float] = None) -> float:
        """As Client.renew_context."""
        reply = await self._call("ctx.renew", request_timeout, ctx=ctx_name(ctx))
        return float(reply.get("lease") or 0)

    async def pip_install(self, packages: List[str], ctx: Any = None) -> List[Dict[str, Any]]:
        """As Client.pip_install."""
        if isinstance(packages, str):
            raise TypeError("pip_install takes a list of requirements")
        reply = await self._call("pip.install", 0, _kind="live", ctx=ctx_name(ctx) or "default",
                                 packages=list(packages))
        pkgs = reply.get("packages")
        if not isinstance(pkgs, list):
            raise ProtocolError("pip.install reply without packages")
        return pkgs

    async def context_info(self, ctx: Any, request_timeout: Optional[float] = None) -> ContextInfo:
        reply = await self._call("ctx.info", request_timeout, ctx=ctx_name(ctx))
        if not isinstance(reply.get("ctx"), dict):
            raise ProtocolError("ctx.info reply without ctx")
        return ContextInfo.from_msg(reply["ctx"])

    async def list_contexts(self, request_timeout: Optional[float] = None) -> List[ContextInfo]:
        out: List[ContextInfo] = []
        fields: dict = {}
        while True:  # page by page: a page ends before the daemon's cap
            reply = await self._call("ctx.list", request_timeout, _fields=fields)
            ctxs = reply.get("contexts")
            if not isinstance(ctxs, list):
                raise ProtocolError("ctx.list reply without contexts")
            out += [ContextInfo.from_msg(c) for c in ctxs]
            nxt = reply.get("next")
            if not isinstance(nxt, str) or not ctxs:
                return out
            fields = {"after": nxt}

    async def delete_context(self, ctx: Any, request_timeout: Optional[float] = None) -> None:
        name = ctx_name(ctx)
        if not name:
            raise ValueError("delete_context needs a context")
        await self._call("ctx.delete", request_timeout, ctx=name)

    async def restart_context(self, ctx: Any = None,
                              request_timeout: Optional[float] = None) -> ContextInfo:
        reply = await self._call("ctx.restart", request_timeout, ctx=ctx_name(ctx) or "default")
        return ContextInfo.from_msg(reply.get("ctx"))

    # ---- queries: complete, inspect, is_complete ------------------------------------

    async def complete(self, code: str, cursor: Optional[int] = None, ctx: Any = None, *,
                 timeout: Optional[float] = None, wait: Optional[float] = None) -> Completion:
        """Completions for the name before cursor (characters into code;
        None: the end) from the context's live globals: names, attributes,
        keywords, builtins, module names after `import`. The query waits in
        the context's queue behind its runs (a coroutine); the daemon interrupts it after
        timeout seconds (default 10). wait bounds this call (None: no
        deadline; past it UnreachableError, and the answer is dropped when it
        comes). RefusedError: bad_field (cursor past the end),
        unknown_context, dead, busy, timeout."""
        reply = await self._call("complete", wait or 0, _kind="live", _fields=query_fields(code, ctx, cursor, timeout))
        return parse_completion(reply)

    async def inspect(self, code: str, cursor: Optional[int] = None, ctx: Any = None, *,
                detail_level: int = 0, timeout: Optional[float] = None,
                wait: Optional[float] = None) -> Inspection:
        """What the name at cursor (or the function being called there) is:
        signature, type, docstring; detail_level 1 adds its source."""
        reply = await self._call("inspect", wait or 0, _kind="live", detail_level=detail_level or None,
                           _fields=query_fields(code, ctx, cursor, timeout))
        return parse_inspection(reply)

    async def is_complete(self, code: str, ctx: Any = None, *,
                    timeout: Optional[float] = None,
                    wait: Optional[float] = None) -> Completeness:
        """Whether code would run as typed (a REPL's Enter), or needs more
        lines, or cannot compile."""
        reply = await self._call("is_complete", wait or 0, _kind="live",
                           _fields=query_fields(code, ctx, None, timeout))
        return parse_completeness(reply)
