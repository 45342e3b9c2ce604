"""CtxdKernel: Jupyter's messaging protocol (5.3) over a ctxd context.

Mapping (front end -> kernel -> ctxd, and back):

- the kernel's own context: made in the kernel's cwd with its environment
  (a kernelspec's "env" included), IPython syntax by default and a lease
  (--lease, $CTXD_KERNEL_LEASE, 60 s) a thread renews (`ctx.renew`), so the
  daemon deletes it when the kernel dies without a shutdown.
- execute_request -> `execute` with syntax "ipython" (allow_stdin as asked,
  no timeout unless --timeout); `exit` / `quit` -> the ask_exit payload. Events: accepted -> execute_input (with the context's
  execution count, which the reply and execute_result carry too), stream ->
  stream, display -> display_data / update_display_data (display_id in
  `transient`), clear_output -> clear_output, result -> execute_result,
  error -> error, input.request -> input_request on the stdin channel and
  its input_reply -> `input.reply`. A run that died, was aborted or cut by
  a daemon shutdown gets an error built from its `done.cause`. Status idle
  follows only after `done`, so after all output. `x?` / `?x` / `x??` cells
  answer with a pager payload (inspect).
- complete_request, inspect_request, is_complete_request -> the queries of
  the same names (answered by the context from its live globals).
- interrupt_request (interrupt_mode "message", on the control thread) ->
  `interrupt` of the kernel's own running execute only (a shared context's
  other clients are never hit); the context survives.
- shutdown_request -> restart: `ctx.restart` (fresh globals, count 0);
  shutdown: the kernel's own context is deleted, an attached one (--context)
  is left as it is.
- history_request -> the kernel's own history (history.py).
- debug_request -> a reply saying the debugger is not supported.
- stop_on_error: ipykernel's kernelbase aborts the queued execute_requests
  when a cell fails.

The daemon: --endpoint, else $CTXD_ENDPOINT, else the default socket. When
neither is given and no daemon answers there, the kernel starts a private
daemon (--ctxd, $CTXD_DAEMON or ctxd on PATH) on a socket of its own, which
ends with the kernel; the banner names its endpoint so other clients can
join.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ipykernel.kernelbase import Kernel

from .. import __version__
from .._errors import CtxdError, RefusedError, UnreachableError
from ..client import NO_REPLY, Client
from .history import History


@dataclass
class KernelOptions:
    context: Optional[str] = None
    endpoint: Optional[str] = None
    ctxd: Optional[str] = None
    timeout: float = 0.0
    history: Optional[str] = None
    lease: Optional[float] = None


# Set by launch.main before IPKernelApp makes the kernel.
OPTIONS = KernelOptions()

# `name?`, `?name`, `name??`: IPython's help syntax, answered with the pager.
_HELP = re.compile(r"\A\s*(\?{0,2})\s*([A-Za-z_][\w.]*)\s*(\?{0,2})\s*\Z")

# `exit` / `quit` (and called): end the session, as ipykernel's ask_exit.
_EXIT = re.compile(r"\A\s*(?:exit|quit)\s*(?:\(\s*(?:keep_kernel\s*=\s*\w+)?\s*\))?\s*;?\s*\Z")

# Variables of the kernel's environment that are the kernel's own business,
# not the cells': they would change how the worker's interpreter starts or
# name the front end's matplotlib backend.
_ENV_SKIP = ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONEXECUTABLE", "LD_PRELOAD", "JPY_PARENT_PID",
             "JPY_SESSION_NAME", "PYDEVD_DISABLE_FILE_VALIDATION")


def _cell_env() -> Dict[str, str]:
    """The kernel's environment for its context (what ipykernel's cells
    see: the kernelspec's "env" included), minus the variables above and
    ctxd's own CTXD_*."""
    env = {}
    for k, v in os.environ.items():
        if k in _ENV_SKIP or k.startswith("CTXD_") or not k or "=" in k:
            continue
        if k == "MPLBACKEND" and v.startswith("module://"):
            continue
        env[k] = v
    return env


# A done status without an error event becomes this exception name.
_ENAMES = {"died": "WorkerDied", "aborted": "RunAborted", "shutdown": "DaemonShutdown",
           "timeout": "TimeoutError"}


def _local_is_complete(code: str):
    """is_complete decided in the kernel (same rules as the worker's, on
    this interpreter), for when the context does not answer."""
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<input>", "exec", 0x4000 | 0x200 | 0x2000, dont_inherit=True)
        more = False
    except SyntaxError as e:
        if "incomplete input" not in str(e.msg):
            return "invalid", ""
        more = True
    except (OverflowError, ValueError):
        return "invalid", ""
    lines = code.split("\n")
    last = next((ln for ln in reversed(lines) if ln.strip()), "")
    indent = last[:len(last) - len(last.lstrip())]
    if more:
        return "incomplete", indent + ("    " if last.rstrip().endswith(":") else "")
    if indent and lines[-1].strip():
        return "incomplete", indent
    return "complete", ""


class PrivateDaemon:
    """A ctxd the kernel started because none was reachable: its socket in
    a temporary directory, killed with the kernel (also on SIGKILL of the
    kernel: parent-death signal)."""

    def __init__(self, binary: str):
        self.dir = tempfile.mkdtemp(prefix="ctxd-kernel-")
        self.endpoint = f"ipc://{self.dir}/ctxd.sock"
        self.log = open(os.path.join(self.dir, "ctxd.log"), "ab")
        self.proc = subprocess.Popen([binary, "--listen", self.endpoint], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, cwd=os.getcwd(),
                                     preexec_fn=_die_with_parent, start_new_session=True)

    def connect(self, deadline: float = 30.0) -> Client:
        end = time.monotonic() + deadline
        while True:
            try:
                return Client(self.endpoint)
            except UnreachableError:
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise UnreachableError(
                        f"the private ctxd did not start (see {self.dir}/ctxd.log)") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the daemon's child: SIGTERM when the kernel dies (PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:
        pass


def _daemon_binary(opts: KernelOptions) -> Optional[str]:
    for cand in (opts.ctxd, os.environ.get("CTXD_DAEMON"), shutil.which("ctxd")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _context_name(connection_file: str) -> str:
    """The kernel's own context: jupyter-<kernel id from the connection
    file>, stable across restarts of this kernel."""
    base = os.path.basename(connection_file or "")
    base = re.sub(r"\.json\Z", "", base)
    base = re.sub(r"\Akernel-", "", base)
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", base).lstrip(".-")
    if not base:
        base = f"{os.getpid()}-{int(time.time())}"
    return ("jupyter-" + base)[:64]


class CtxdKernel(Kernel):
    implementation = "ctxd"
    implementation_version = __version__
    language_info = {
        "name": "python",
        "version": sys.version.split()[0],
        "mimetype": "text/x-python",
        "file_extension": ".py",
        "pygments_lexer": "ipython3",
        "codemirror_mode": {"name": "ipython", "version": 3},
        "nbconvert_exporter": "python",
    }
    help_links = [{"text": "ctxd protocol", "url": "https://github.com/ctxd/ctxd"}]
    # kernelbase sleeps this long before every execute_reply so that output
    # written to its own sys.stdout reaches the front end first; this
    # kernel's output has all been published (in order) before the reply.
    _execute_sleep = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.opts = OPTIONS
        self._daemon: Optional[PrivateDaemon] = None
        self.client = self._connect()
        self.own_context = self.opts.context is None
        self.ctx = self.opts.context or _context_name(
            getattr(self.parent, "connection_file", "") if self.parent else "")
        self._attach()
        self.history = History(self.opts.history)
        self._run = None  # the execute in flight, for interrupts
        self._run_lock = threading.Lock()
        self._input_cancel = threading.Event()
        self._stop = threading.Event()
        if self.own_context and self.lease:
            threading.Thread(target=self._renew_loop, name="ctxd-lease", daemon=True).start()

    # ---- the daemon and the context ------------------------------------------

    def _connect(self) -> Client:
        endpoint = self.opts.endpoint or os.environ.get("CTXD_ENDPOINT")
        try:
            return Client(endpoint)
        except UnreachableError:
            binary = _daemon_binary(self.opts)
            if endpoint or not binary:
                raise
        self._daemon = PrivateDaemon(binary)
        return self._daemon.connect()

    @property
    def lease(self) -> float:
        if self.opts.lease is not None:
            return max(0.0, self.opts.lease)
        try:
            return max(0.0, float(os.environ.get("CTXD_KERNEL_LEASE", "60")))
        except ValueError:
            return 60.0

    def _attach(self) -> None:
        """--context: the named context, created if missing (and kept at
        shutdown: no lease). Else the kernel's own, fresh, in the kernel's
        cwd with its environment, IPython syntax by default and a lease the
        kernel renews while it lives: a previous process of this kernel
        left it (a restart, or a crash) is replaced."""
        names = {c.name for c in self.client.list_contexts()}
        if not self.own_context:
            if self.ctx == "default":
                if self.ctx not in names:
                    self.client.restart_context("default")  # made on first use
            elif self.ctx not in names:
                self.client.create_context(self.ctx, syntax="ipython")
            return
        if self.ctx in names:
            self.client.delete_context(self.ctx)
        kw = dict(env=_cell_env(), syntax="ipython", lease=self.lease or None)
        try:  # the daemon opens cwd without following links: the resolved path
            self.client.create_context(self.ctx, cwd=os.path.realpath(os.getcwd()), **kw)
        except RefusedError as e:
            if e.code != "bad_cwd":
                raise
            # a daemon that cannot use this directory (another machine, a
            # confined tier): the context's own directory, said in the log
            self.log.warning("ctxd: the context cannot run in %s (%s); it runs in a directory "
                             "of its own", os.getcwd(), e)
            self.client.create_context(self.ctx, **kw)

    def _renew_loop(self) -> None:
        """The lease's heartbeat: a renew every quarter of the lease."""
        period = max(0.25, self.lease / 4)
        while not self._stop.wait(period):
            try:
                self.client.renew_context(self.ctx, request_timeout=max(1.0, period))
            except CtxdError as e:
                self.log.info("ctxd: renewing the lease: %s", e)

    @property
    def banner(self) -> str:
        where = self.client.endpoint
        how = "private daemon" if self._daemon else "daemon"
        share = (f"CTXD_ENDPOINT={where} ctx run -c {self.ctx} ..."
                 if self._daemon else f"ctx run -c {self.ctx} ...")
        return (f"Python {sys.version.split()[0]} in ctxd context '{self.ctx}' ({how} at "
                f"{where}).\nOther clients share its globals: {share}\n")

    # ---- publishing ----------------------------------------------------------

    def _pub(self, msg_type: str, content: Dict[str, Any]) -> None:
        self.send_response(self.iopub_socket, msg_type, content)

    def _publish_execute_input(self, code, parent, execution_count):
        """kernelbase calls this before the run with its own count; the
        input is published at `accepted` instead, with the context's."""

    def _on_display(self, d) -> None:
        content = {"data": d.data, "metadata": d.metadata or {},
                   "transient": {"display_id": d.display_id} if d.display_id else {}}
        self._pub("update_display_data" if d.update else "display_data", content)

    # ---- execute ---------------------------------------------------------------

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False, *, cell_id=None):
        if not silent:
            m = _HELP.match(code)
            if m and (m.group(1) or m.group(3)):
                return self._help(code, m)
            if _EXIT.match(code):
                keep = "keep_kernel" in code and "True" in code
                return {"status": "ok", "execution_count": self.execution_count,
                        "user_expressions": {},
                        "payload": [{"source": "ask_exit", "keepkernel": keep}]}
        state = {"count": self.execution_count, "output": None, "error": None}

        def accepted(msg):
            state["count"] = self.execution_count = msg["execution_count"]
            if not silent:
                self._pub("execute_input", {"code": code, "execution_count": state["count"]})
            if msg.get("previous_death"):
                self._pub("stream", {"name": "stderr", "text": (
                    f"[ctxd: the previous worker of '{self.ctx}' died "
                    f"({msg['previous_death']}); its globals are gone]\n")})

        def result(r):
            state["output"] = r.text
            self._pub("execute_result", {"execution_count": state["count"], "data": r.data,
                                         "metadata": r.metadata or {}})

        def error(e):
            state["error"] = e
            self._pub("error", {"ename": e.ename, "evalue": e.evalue,
                                "traceback": e.traceback})

        self._input_cancel.clear()
        try:
            run = self.client.submit(
                code, self.ctx, timeout=self.opts.timeout or 0, silent=silent,
                syntax="ipython",
                on_accepted=accepted,
                on_stdout=lambda t: self._pub("stream", {"name": "stdout", "text": t}),
                on_stderr=lambda t: self._pub("stream", {"name": "stderr", "text": t}),
                on_result=result, on_error=error, on_display=self._on_display,
                on_clear_output=lambda w: self._pub("clear_output", {"wait": bool(w)}),
                on_input=self._ask_input if allow_stdin else None)
            with self._run_lock:
                self._run = run
            try:
                res = run.wait()
            finally:
                with self._run_lock:
                    self._run = None
        except CtxdError as e:
            return self._failed(type(e).__name__, str(e), state)
        if res.status != "ok" and state["error"] is None and res.exit_code is not None:
            return self._failed("SystemExit", str(res.exit_code), state)  # sys.exit(n), n != 0
        if res.status != "ok" and state["error"] is None:
            return self._failed(_ENAMES.get(res.status, "RunFailed"),
                                res.cause or f"the run ended with status {res.status}", state)
        if store_history and not silent:
            self.history.add(state["count"], code, state["output"])
        if state["error"] is not None:
            e = state["error"]
            return {"status": "error", "execution_count": state["count"], "ename": e.ename,
                    "evalue": e.evalue, "traceback": e.traceback}
        return {"status": "ok", "execution_count": state["count"], "payload": [],
                "user_expressions": self._user_expressions(user_expressions or {})}

    def _failed(self, ename: str, evalue: str, state) -> Dict[str, Any]:
        """A run that ended without an error event (died, aborted, daemon
        gone): an error the front end shows."""
        tb = [f"{ename}: {evalue}"]
        self._pub("error", {"ename": ename, "evalue": evalue, "traceback": tb})
        return {"status": "error", "execution_count": state["count"], "ename": ename,
                "evalue": evalue, "traceback": tb}

    def _user_expressions(self, exprs: Dict[str, str]) -> Dict[str, Any]:
        """Each expression's repr, from a silent run (no count, no `_`)."""
        out = {}
        for name, expr in exprs.items():
            code = ("__import__('builtins').print(__import__('builtins').repr((\n"
                    f"{expr}\n)), end='')")
            try:
                r = self.client.execute(code, self.ctx, silent=True,
                                        timeout=self.opts.timeout or 0)
            except CtxdError as e:
                r = None
                out[name] = {"status": "error", "ename": type(e).__name__, "evalue": str(e),
                             "traceback": []}
            if r is None:
                continue
            if r.error is not None:
                out[name] = {"status": "error", "ename": r.error.ename,
                             "evalue": r.error.evalue, "traceback": r.error.traceback}
            else:
                out[name] = {"status": "ok", "data": {"text/plain": r.stdout}, "metadata": {}}
        return out

    def _help(self, code: str, m) -> Dict[str, Any]:
        """`x?` / `x??`: the inspect text as a pager payload."""
        detail = 1 if "??" in (m.group(1) + m.group(3)) else 0
        name = m.group(2)
        try:
            info = self.client.inspect(name, len(name), self.ctx, detail_level=detail)
            data = info.data if info.found else {"text/plain": f"Object `{name}` not found."}
        except CtxdError as e:
            data = {"text/plain": f"ctxd: {e}"}
        return {"status": "ok", "execution_count": self.execution_count, "user_expressions": {},
                "payload": [{"source": "page", "data": data, "start": 0}]}

    def _ask_input(self, prompt: str, password: bool) -> str:
        """input() in the cell: an input_request to the front end. Polls the
        stdin socket so an interrupt (which ends the input() in the context)
        stops the wait too."""
        import zmq
        sys.stdout.flush()
        sys.stderr.flush()
        while True:  # stale replies
            try:
                self.stdin_socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
        # An interrupt cancels the input() it ended, not this one: code
        # that caught it (pdb, a REPL loop) asks again and must really ask.
        self._input_cancel.clear()
        parent = self.get_parent("shell")
        self.session.send(self.stdin_socket, "input_request",
                          {"prompt": prompt, "password": password}, parent,
                          ident=self._parent_ident["shell"])
        while not self._input_cancel.is_set():
            if self.stdin_socket.poll(100):
                _, reply = self.session.recv(self.stdin_socket)
                if reply is not None:
                    return reply.get("content", {}).get("value", "")
        return NO_REPLY

    # ---- control ---------------------------------------------------------------

    async def interrupt_request(self, stream, ident, parent):
        """Control thread: interrupts only this kernel's running execute
        (PROTOCOL.md: interrupt with `run`); the context survives."""
        with self._run_lock:
            run = self._run
        if run is not None:
            self._input_cancel.set()
            run.interrupt()
        self.session.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)

    async def do_debug_request(self, msg):
        """The debugger (DAP over debug_request) is not supported: a reply
        that says so, instead of none."""
        return {"type": "response", "request_seq": msg.get("seq", 0), "success": False,
                "command": msg.get("command", ""),
                "message": "the ctxd kernel does not support the debugger"}

    def do_shutdown(self, restart):
        self._stop.set()
        try:
            if restart:
                self.client.restart_context(self.ctx)
            elif self.own_context and self.ctx != "default":
                self.client.delete_context(self.ctx)
        except CtxdError as e:
            self.log.warning("ctxd: %s", e)
        finally:
            self._close()
        return {"status": "ok", "restart": restart}

    def _close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._daemon is not None:
                self._daemon.stop()
                self._daemon = None
            self.history.close()

    # ---- queries ---------------------------------------------------------------
    # A query waits in the context's queue; while another client's run holds
    # a shared context, the kernel stops waiting after QUERY_WAIT seconds and
    # answers empty (is_complete: decided locally) rather than freeze the
    # front end.

    QUERY_WAIT = 5.0

    def do_complete(self, code, cursor_pos):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        try:
            r = self.client.complete(code, cursor_pos, self.ctx, wait=self.QUERY_WAIT)
        except CtxdError as e:
            self.log.info("ctxd: complete: %s", e)
            return {"status": "ok", "matches": [], "cursor_start": cursor_pos,
                    "cursor_end": cursor_pos, "metadata": {}}
        return {"status": "ok", "matches": r.matches, "cursor_start": r.cursor_start,
                "cursor_end": r.cursor_end, "metadata": r.metadata}

    def do_inspect(self, code, cursor_pos, detail_level=0, omit_sections=()):
        cursor_pos = len(code) if cursor_pos is None else cursor_pos
        try:
            r = self.client.inspect(code, cursor_pos, self.ctx, detail_level=min(detail_level, 1),
                                    wait=self.QUERY_WAIT)
        except CtxdError as e:
            self.log.info("ctxd: inspect: %s", e)
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        return {"status": "ok", "found": r.found, "data": r.data, "metadata": r.metadata}

    def do_is_complete(self, code):
        try:
            r = self.client.is_complete(code, self.ctx, wait=self.QUERY_WAIT)
            status, indent = r.status, r.indent
        except CtxdError as e:
            self.log.info("ctxd: is_complete: %s", e)
            status, indent = _local_is_complete(code)
        out = {"status": status}
        if status == "incomplete":
            out["indent"] = indent
        return out

    def do_history(self, hist_access_type, output, raw, session=None, start=None, stop=None,
                   n=None, pattern=None, unique=False, **kw):
        if hist_access_type == "tail":
            hist = self.history.tail(n or 10, output)
        elif hist_access_type == "range":
            hist = self.history.range(session or 0, start or 0, stop, output)
        elif hist_access_type == "search":
            hist = self.history.search(pattern or "*", n, unique, output)
        else:
            hist = []
        return {"status": "ok", "history": hist}
