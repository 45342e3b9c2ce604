"""An E2B-compatible surface: code written for `e2b_code_interpreter`
(Sandbox.run_code with streaming callbacks, code contexts, files; Execution,
Result, Logs, ExecutionError, OutputMessage, Context; structured charts)
runs against ctxd:

    from ctxd.e2b import Sandbox
    with Sandbox() as sandbox:                       # or Sandbox(endpoint=...)
        execution = sandbox.run_code("x = 41\\nx + 1")
        execution.text                               # '42'
        sandbox.run_code("print('hi')", on_stdout=lambda m: print(m.line))
        ctx = sandbox.create_code_context(cwd="/tmp")
        sandbox.files.write("data.csv", "a,b\\n1,2\\n")

A Sandbox is a set of ctxd contexts: its default context (created with
it; its name is the sandbox_id) and those create_code_context() makes
(named after it); kill() (or leaving the `with` block) deletes them, and a
run_code or command in progress then raises E2B's TimeoutException ("The
sandbox was killed while the request was in progress").
Sandbox.connect(sandbox_id) (AsyncSandbox.connect too) attaches to a live
sandbox from any process. sandbox.commands.run(cmd) runs a shell command
in the sandbox as E2B does (`/bin/bash -l -c`, _e2b_commands.py): a
CommandResult, CommandExitException for a non-zero exit. Python is the
only language of run_code: any other `language` raises
InvalidArgumentException naming what is supported.

E2B users keep their imports: ctxd.e2b.install_as_e2b() (opt-in, as
pymysql.install_as_MySQLdb()) makes `e2b_code_interpreter` and `e2b` (and
the submodules in E2B_MODULES) resolve to this module, so
`from e2b_code_interpreter import Sandbox` runs against ctxd.

Rich output as E2B gives it: each display() output and each matplotlib
figure is a Result with is_main_result False, the trailing expression's
value the one with is_main_result True. A figure carries `png` and also
`chart`, E2B's structured chart (LineChart, ScatterChart, BarChart,
PieChart, BoxAndWhiskerChart, SuperChart for several axes; title, labels,
units, ticks, tick labels, scales, elements), extracted in the context's
own Python by a helper the surface installs there (ctxd/_e2b_helper.py: a
matplotlib backend whose show() displays each figure with its chart; the
figures a cell leaves open are shown after it; a figure whose axes hold no
data has no chart, pie angles are rounded as E2B rounds them). A pandas
DataFrame result also carries `data`, E2B's table form (column -> list of
values). A PIL image saved to a path (Image.save) or shown is also
displayed, as in E2B's sandbox.

Cells are read with IPython syntax (`!pip list`, `%time`) when the daemon
offers it (hello advertises the "ipython" syntax and this client can send
it); otherwise as plain Python.

What differs from E2B, on purpose: no cloud sandbox or template (the
contexts are the daemon's, their cwd the daemon's private directory unless
cwd is given); run_code past its timeout raises TimeoutException as E2B's
SDK does, but the context survives with its globals (the run gets
KeyboardInterrupt); `request_timeout` is accepted and not used (a lost
daemon is detected by the client's liveness check); files.* act in the
default context's view of the filesystem (relative paths are relative to
its directory), and through a run when the path is outside that directory
(at most FILE_VIA_RUN_MAX bytes); update_display_data and clear_output are
ignored, as in E2B.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional, TypeVar, Union

from . import _alias, _e2b_helper
from ._common import ExecResult
from ._common import Result as _CtxdResult
from ._e2b_commands import (  # noqa: F401 (E2B's names, re-exported)
    AsyncCommands, CommandExitException, CommandHandle, CommandResult, Commands, Stderr, Stdout,
)
from ._e2b_charts import (  # noqa: F401 (E2B's names, re-exported)
    BarChart, BarData, BoxAndWhiskerChart, BoxAndWhiskerData, Chart, Chart2D, ChartType,
    LineChart, PieChart, PieData, PointChart, PointData, ScaleType, ScatterChart, SuperChart,
)
from ._e2b_models import (  # noqa: F401 (E2B's names, re-exported)
    Context, EntryInfo, Execution, ExecutionError, FileType, InvalidArgumentException, Logs,
    NotFoundException, OutputMessage, Result, SandboxException, SandboxNotFoundException,
    TimeoutException, WriteEntry, WriteInfo, _wrap,
)
from ._errors import CtxdError, NotFoundError
from .aio import AsyncClient
from .client import Client

__all__ = [
    "AsyncSandbox", "BarChart", "BarData", "BoxAndWhiskerChart", "BoxAndWhiskerData",
    "Chart", "Chart2D", "ChartType", "CommandExitException", "CommandHandle", "CommandResult",
    "Context", "EntryInfo", "Execution", "ExecutionError", "FileType",
    "InvalidArgumentException", "LineChart", "Logs", "NotFoundException", "OutputMessage",
    "PieChart", "PieData", "PointChart", "PointData", "Result", "Sandbox", "SandboxException",
    "SandboxNotFoundException", "Stderr", "Stdout",
    "ScaleType", "ScatterChart", "SuperChart", "TimeoutException", "WriteEntry", "WriteInfo",
    "install_as_e2b",
]

DEFAULT_TIMEOUT = 300  # seconds a run may take when run_code gets no timeout (E2B's)
FILE_VIA_RUN_MAX = 4 << 20  # bytes a file op outside the context's directory may move
SUPPORTED_LANGUAGES = ("python",)

T = TypeVar("T")
OutputHandler = Union[Callable[[T], Any], Callable[[T], Awaitable[Any]]]


# The module names E2B users import (E2B's SDK `e2b` and its code
# interpreter `e2b_code_interpreter`, with the submodules code imports from).
E2B_MODULES = (
    "e2b", "e2b.exceptions", "e2b.sandbox.commands.command_handle",
    "e2b.sandbox.filesystem.filesystem", "e2b.sandbox_sync.main", "e2b.sandbox_async.main",
    "e2b_code_interpreter", "e2b_code_interpreter.models", "e2b_code_interpreter.charts",
    "e2b_code_interpreter.exceptions", "e2b_code_interpreter.code_interpreter_sync",
    "e2b_code_interpreter.code_interpreter_async",
)


def install_as_e2b() -> None:
    """Makes `import e2b_code_interpreter` and `import e2b` (and the
    submodules in E2B_MODULES) give this surface, so E2B code runs
    unchanged against ctxd, as pymysql.install_as_MySQLdb() does for
    MySQLdb. Opt-in and idempotent; a real E2B SDK imported before is
    replaced in sys.modules."""
    import sys
    _alias.install(sys.modules[__name__], E2B_MODULES)


# ---- shared by the two sandboxes ---------------------------------------------------------


def _check_language(language: Optional[str], context: Any) -> None:
    """E2B's checks: context and language exclude each other; Python only."""
    if language is not None and context is not None:
        raise InvalidArgumentException(
            "You can provide context or language, but not both at the same time.")
    if language is not None and str(language).lower() not in SUPPORTED_LANGUAGES:
        raise InvalidArgumentException(
            f"language {language!r} is not supported: ctxd runs Python only "
            f"(supported: {', '.join(repr(x) for x in SUPPORTED_LANGUAGES)})")


def _context_id(context: Any) -> str:
    """The ctxd context name of a Context (or of its id)."""
    if isinstance(context, Context):
        return context.id
    if isinstance(context, str) and context:
        return context
    raise InvalidArgumentException(f"not a Context: {context!r}")


def _run_timeout(timeout: Optional[float]) -> float:
    """run_code's timeout in seconds: None is E2B's default, 0 none."""
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidArgumentException("timeout is a number of seconds >= 0 (0: none)")
    return float(timeout)


def _syntax(client: Any) -> Dict[str, str]:
    """{"syntax": "ipython"} when the daemon's hello advertises the IPython
    syntax and this client's submit() can send it; else {} (plain Python,
    before that feature)."""
    h = getattr(client, "hello_info", None)
    if h is None:
        return {}
    offered = None
    for key in ("syntaxes", "syntax"):
        offered = getattr(h, key, None) or (h.limits.get(key) if h.limits else None)
        if offered:
            break
    if not offered or "ipython" not in offered:
        return {}
    try:
        params = inspect.signature(client.submit).parameters
    except (TypeError, ValueError):
        return {}
    return {"syntax": "ipython"} if "syntax" in params else {}


class _Cell:
    """Collects one cell's outcome from the client's callbacks and calls the
    user's. A coroutine handler's awaitable is returned (the async client
    awaits it in order); those fired outside a client callback (the
    post-cell figures) are kept in `pending` for the async twin."""

    def __init__(self, on_stdout: Any, on_stderr: Any, on_result: Any, on_error: Any) -> None:
        self.execution = Execution()
        self.user = (on_stdout, on_stderr, on_result, on_error)
        self.pending: List[Any] = []

    def _call(self, fn: Any, arg: Any) -> Any:
        """Calls a user handler (if any), returning what it returns."""
        return fn(arg) if fn is not None else None

    def stdout(self, text: str) -> Any:
        """A stdout chunk: logged, passed on with its arrival time."""
        self.execution.logs.stdout.append(text)
        return self._call(self.user[0], OutputMessage(text, time.time_ns(), False))

    def stderr(self, text: str) -> Any:
        """A stderr chunk: logged, passed on with its arrival time."""
        self.execution.logs.stderr.append(text)
        return self._call(self.user[1], OutputMessage(text, time.time_ns(), True))

    def result(self, r: _CtxdResult) -> Any:
        """The trailing expression's value: the main result."""
        res = Result._from(r, True)
        self.execution.results.append(res)
        return self._call(self.user[2], res)

    def display(self, r: _CtxdResult) -> Any:
        """A display() output or figure: a result that is not the main one."""
        if r.update:
            return None  # update_display_data: ignored, as E2B does
        res = Result._from(r, False)
        self.execution.results.append(res)
        return self._call(self.user[2], res)

    def error(self, e: Any) -> Any:
        """The exception the cell raised."""
        err = ExecutionError(e.ename, e.evalue, "\n".join(e.traceback))
        self.execution.error = err
        return self._call(self.user[3], err)

    def kw(self) -> Dict[str, Any]:
        """The client callbacks feeding this cell."""
        return dict(on_stdout=self.stdout, on_stderr=self.stderr, on_result=self.result,
                    on_display=self.display, on_error=self.error)

    def finish(self, res: ExecResult, t: float) -> None:
        """Raises E2B's TimeoutException for a run past its timeout; a worker
        that died or a run aborted becomes the cell's error."""
        if res.status == "timeout":
            raise TimeoutException(
                f"Execution timed out after {t:g} s: the 'timeout' option can be used to "
                "increase this timeout (the context kept its globals)"
                if not res.state_lost else
                f"Execution timed out after {t:g} s; the interpreter was restarted and its "
                "globals are lost", "timeout")
        self.execution.execution_count = res.execution_count or None
        if self.execution.error is None and res.exit_code:  # sys.exit(n), n not 0
            self._keep(self.error(_Err("SystemExit", str(res.exit_code))))
        if self.execution.error is None and res.status in ("died", "aborted", "shutdown"):
            name = "WorkerProcessError" if res.status == "died" else "ExecutionAborted"
            self._keep(self.error(_Err(name, res.cause or res.status)))

    def _keep(self, r: Any) -> None:
        """Keeps a handler's awaitable fired outside a client callback."""
        if inspect.isawaitable(r):
            self.pending.append(r)

    def figures(self, res: ExecResult) -> None:
        """The figures the post-cell run showed, as results."""
        for d in res.displays:
            self._keep(self.display(d))


@dataclass
class _Err:
    ename: str
    evalue: str
    traceback: List[str] = field(default_factory=list)


def _killed_error() -> TimeoutException:
    """What E2B raises for a request the sandbox's kill() cut short."""
    return TimeoutException(
        "The sandbox was killed while the request was in progress. This can happen when the "
        "sandbox times out or is killed manually.", "killed")


def _code_context_name(sandbox_id: str) -> str:
    """A new code context's name: the sandbox's id with a suffix, so that
    Sandbox.connect(sandbox_id) finds the sandbox's contexts."""
    return f"{sandbox_id}-{uuid.uuid4().hex[:8]}"


def _sandbox_contexts(sandbox_id: str, infos: List[Any]) -> List[Any]:
    """The contexts of sandbox sandbox_id among infos, its default first."""
    mine = [i for i in infos if i.name.startswith(sandbox_id + "-")]
    return [i for i in infos if i.name == sandbox_id] + sorted(mine, key=lambda i: i.name)


class _InstanceOrClass:
    """A method that, called on the class, is E2B's static form taking a
    sandbox_id first (Sandbox.kill(sandbox_id)); on an instance, the
    instance's method."""

    def __init__(self, method: Callable[..., Any], static: Callable[..., Any]) -> None:
        self._method, self._static = method, static
        self.__doc__ = method.__doc__

    def __get__(self, obj: Any, owner: Any) -> Any:
        if obj is None:
            return lambda *a, **kw: self._static(owner, *a, **kw)
        return self._method.__get__(obj, owner)


def _kill_by_id(cls: Any, sandbox_id: str, **kw: Any) -> bool:
    """Sandbox.kill(sandbox_id, endpoint=..., client=...): True when the
    sandbox was found and killed, False when there is none."""
    try:
        sb = cls.connect(sandbox_id, **kw)
    except NotFoundException:
        return False
    return sb.kill()


async def _kill_by_id_async(cls: Any, sandbox_id: str, **kw: Any) -> bool:
    """As _kill_by_id, for AsyncSandbox."""
    try:
        sb = await cls.connect(sandbox_id, **kw)
    except NotFoundException:
        return False
    return await sb.kill()


def _installed(res: ExecResult) -> ExecResult:
    """Checks the helper's install run."""
    if res.status != "ok":
        raise SandboxException(f"installing the E2B helper in the context failed: "
                               f"{res.error or res.cause or res.status}", "helper")
    return res


_MARK = "@@ctxd-e2b@@ "


def _fs_code(op: str, **args: Any) -> str:
    """A silent run's code doing one file operation in the context's view,
    printing its JSON answer after _MARK."""
    body = r'''
import base64, json, os
def _answer(v):
    print(MARK + json.dumps(v))
p = os.path.expanduser(A["path"])
try:
    if OP == "read":
        if os.path.getsize(p) > A["max"]:
            _answer({"error": "too_large"})
        else:
            with open(p, "rb") as f:
                _answer({"data": base64.b64encode(f.read()).decode()})
    elif OP == "write":
        d = os.path.dirname(p)
        if d:
            os.makedirs(d, exist_ok=True)
        with open(p, "wb") as f:
            f.write(base64.b64decode(A["data"]))
        _answer({"path": os.path.abspath(p)})
    elif OP == "list":
        out = []
        for e in sorted(os.scandir(p), key=lambda e: e.name)[:10000]:
            dir_ = e.is_dir(follow_symlinks=False)
            size = 0 if dir_ else e.stat(follow_symlinks=False).st_size
            out.append([e.name, "dir" if dir_ else "file", os.path.abspath(e.path), size])
        _answer({"entries": out})
    elif OP == "exists":
        _answer({"exists": os.path.exists(p)})
    elif OP == "remove":
        import shutil
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
        _answer({})
    elif OP == "make_dir":
        made = not os.path.exists(p)
        os.makedirs(p, exist_ok=True)
        _answer({"made": made})
except FileNotFoundError as e:
    _answer({"error": "not_found", "message": str(e)})
except OSError as e:
    _answer({"error": "io", "message": str(e)})
'''
    src = f"MARK = {_MARK!r}\nOP = {op!r}\nA = {args!r}\n" + body
    return f"exec({src!r}, {{}})"


def _fs_answer(res: ExecResult, path: str) -> Dict[str, Any]:
    """The JSON answer of a _fs_code run, or E2B's error."""
    if res.status != "ok":
        raise SandboxException(f"the file operation on {path!r} failed: "
                               f"{res.error or res.cause or res.status}", res.status)
    for line in res.stdout.splitlines():
        if line.startswith(_MARK):
            a = json.loads(line[len(_MARK):])
            if a.get("error") == "not_found":
                raise NotFoundException(f"path {path!r} not found", "not_found")
            if a.get("error") == "too_large":
                raise InvalidArgumentException(
                    f"{path!r} is over {FILE_VIA_RUN_MAX} bytes: files outside the context's "
                    "directory move through a run (use a path inside it)", "too_large")
            if a.get("error"):
                raise SandboxException(f"{path!r}: {a.get('message')}", a["error"])
            return a
    raise SandboxException(f"the file operation on {path!r} gave no answer", "protocol")


def _as_bytes(data: Any) -> bytes:
    """files.write's data (str, bytes or a file object) as bytes."""
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        d = data.read()
        return d.encode() if isinstance(d, str) else bytes(d)
    raise InvalidArgumentException("data must be str, bytes or a file object")


def _decode(raw: bytes, fmt: str) -> Any:
    """files.read's result in the format asked for."""
    if fmt == "text":
        return raw.decode("utf-8", "replace")
    if fmt == "bytes":
        return bytearray(raw)
    if fmt == "stream":
        return iter([raw])
    raise InvalidArgumentException(f"format {fmt!r}: expected 'text', 'bytes' or 'stream'")


# ---- Sandbox ----------------------------------------------------------------------------------


class Filesystem:
    """sandbox.files: read, write, list, exists, remove, make_dir in the
    default context's view of the filesystem. A relative path is relative to
    that context's directory; a path inside it moves through the daemon's
    file.get/file.put (any size), one outside it through a run (at most
    FILE_VIA_RUN_MAX bytes)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _inside(self, path: str) -> Optional[str]:
        """path relative to the context's directory when it is inside it."""
        base = self._sb._cwd
        full = path if os.path.isabs(path) else os.path.join(base, path)
        full = os.path.normpath(full)
        if base and os.path.commonpath([base, full]) == base and full != base:
            return os.path.relpath(full, base)
        return None

    def _full(self, path: str) -> str:
        """path made absolute against the default context's directory."""
        return path if os.path.isabs(path) else os.path.join(self._sb._cwd, path)

    def _run(self, op: str, path: str, **args: Any) -> Dict[str, Any]:
        """One file operation through a silent run in the default context."""
        c = self._sb._client
        res = c.execute(_fs_code(op, path=self._full(path), **args), self._sb._default,
                        silent=True, timeout=60)
        return _fs_answer(res, path)

    def read(self, path: str, format: str = "text", user: Any = None,
             request_timeout: Optional[float] = None) -> Any:
        """The file's content: format "text" (str), "bytes" (bytearray) or
        "stream" (an iterator of bytes)."""
        rel = self._inside(path)
        if rel is not None:
            try:
                raw = self._sb._client.get_file(self._sb._default, rel)
            except CtxdError as e:
                raise _wrap(e) from None
        else:
            raw = base64.b64decode(self._run("read", path, max=FILE_VIA_RUN_MAX)["data"])
        return _decode(raw, format)

    def write(self, path: str, data: Any, user: Any = None,
              request_timeout: Optional[float] = None) -> WriteInfo:
        """Writes data (str, bytes or a file object), making parent
        directories."""
        raw = _as_bytes(data)
        rel = self._inside(path)
        if rel is not None and os.path.dirname(rel):
            self.make_dir(os.path.dirname(self._full(path)))
        if rel is not None:
            try:
                self._sb._client.put_file(self._sb._default, rel.replace(os.sep, "/"), raw)
            except CtxdError as e:
                raise _wrap(e) from None
            full = os.path.join(self._sb._cwd, rel)
        else:
            if len(raw) > FILE_VIA_RUN_MAX:
                raise InvalidArgumentException(
                    f"{len(raw)} bytes: over {FILE_VIA_RUN_MAX} for a path outside the "
                    "context's directory", "too_large")
            full = self._run("write", path, data=base64.b64encode(raw).decode())["path"]
        return WriteInfo(os.path.basename(full), "file", full)

    def write_files(self, files: List[WriteEntry], user: Any = None,
                    request_timeout: Optional[float] = None) -> List[WriteInfo]:
        """Writes each WriteEntry in turn, as write()."""
        return [self.write(f.path, f.data) for f in files]

    def list(self, path: str = ".", depth: int = 1, user: Any = None,
             request_timeout: Optional[float] = None) -> List[EntryInfo]:
        """The entries of a directory (sorted by name, at most 10000)."""
        return [EntryInfo(*e) for e in self._run("list", path)["entries"]]

    def exists(self, path: str, user: Any = None,
               request_timeout: Optional[float] = None) -> bool:
        """Whether the path exists in the context's view."""
        return bool(self._run("exists", path)["exists"])

    def remove(self, path: str, user: Any = None,
               request_timeout: Optional[float] = None) -> None:
        """Removes a file, or a directory with its content."""
        self._run("remove", path)

    def make_dir(self, path: str, user: Any = None,
                 request_timeout: Optional[float] = None) -> bool:
        """Creates the directory and its parents; False if it existed."""
        return bool(self._run("make_dir", path)["made"])


class Sandbox:
    """E2B's Sandbox over ctxd: Sandbox(template=None, *, endpoint=None,
    client=None, cwd=None, envs=None) or Sandbox.create(...). The default
    context is created here (cwd, envs: its directory and environment);
    endpoint (else $CTXD_ENDPOINT, else the default socket) or client say
    which daemon; E2B's other arguments (template, timeout, api_key, ...)
    are accepted and ignored. kill() deletes every context this Sandbox
    made."""

    def __init__(self, template: Optional[str] = None, *, endpoint: Optional[str] = None,
                 client: Optional[Client] = None, cwd: Optional[str] = None,
                 envs: Optional[Dict[str, str]] = None, _connect: Optional[str] = None,
                 **_ignored: Any) -> None:
        self._killed = False
        self._killed_error = _killed_error
        self.sandbox_id = ""
        try:
            self._own = client is None
            self._client = client if client is not None else Client(endpoint)
            self._contexts: List[str] = []
            if _connect is not None:
                ctx = self._attach(_connect)
            else:
                ctx = self._new_context(cwd, envs)
        except CtxdError as e:
            if self._own:
                self._client.close()
            raise _wrap(e) from None
        self._default, self._cwd = ctx.id, ctx.cwd
        self.sandbox_id = ctx.id
        self.files = Filesystem(self)
        self.commands = Commands(self)

    @classmethod
    def connect(cls, sandbox_id: str, timeout: Optional[int] = None, *,
                endpoint: Optional[str] = None, client: Optional[Client] = None,
                **_ignored: Any) -> "Sandbox":
        """Attaches to a live sandbox by its id (from this process or
        another): its contexts, globals and files are the ones its creator
        sees. An unknown id raises SandboxNotFoundException."""
        return cls(endpoint=endpoint, client=client, _connect=sandbox_id)

    def _attach(self, sandbox_id: str) -> Context:
        """Adopts the contexts of sandbox sandbox_id (its default first)."""
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise InvalidArgumentException("sandbox_id is a non-empty str")
        infos = _sandbox_contexts(sandbox_id, self._client.list_contexts())
        if not infos or infos[0].name != sandbox_id:
            raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found", "not_found")
        self._contexts = [i.name for i in infos]
        return Context(sandbox_id, "python", infos[0].cwd)

    @classmethod
    def create(cls, *args: Any, **kw: Any) -> "Sandbox":
        """E2B's constructor spelling."""
        return cls(*args, **kw)

    @property
    def client(self) -> Client:
        """The ctxd client this sandbox uses."""
        return self._client

    def _new_context(self, cwd: Optional[str], envs: Optional[Dict[str, str]] = None) -> Context:
        """A ctxd context for E2B: figures left to the helper, helper installed."""
        name = (_code_context_name(self.sandbox_id) if self.sandbox_id
                else f"e2b-{uuid.uuid4().hex[:12]}")
        info = self._client.create_context(name, cwd=cwd, env=envs, figures=False)
        self._contexts.append(info.name)
        self._install(info.name)
        return Context(info.name, "python", info.cwd)

    def _gone(self, ctx: str) -> bool:
        """Whether context ctx no longer exists (its sandbox was killed,
        maybe from another process)."""
        try:
            self._client.context_info(ctx)
        except NotFoundError:
            return True
        except CtxdError:
            pass
        return False

    def _install(self, ctx: str) -> ExecResult:
        """Installs the helper in ctx's interpreter (a silent run; figures
        already open are shown by it)."""
        return _installed(self._client.execute(_e2b_helper.INSTALL, ctx, silent=True,
                                               timeout=60))

    def _figures(self, cell: _Cell, post: ExecResult, ctx: str) -> None:
        """The figures the post-cell run showed; a respawned interpreter
        that lacked the helper (or a post-cell run aborted with the cell)
        gets it, and its figures are shown then."""
        if post.status != "ok" or _e2b_helper.MISSING in post.stdout:
            cell.figures(self._install(ctx))
            post = self._client.execute(_e2b_helper.POST_CELL, ctx, silent=True, timeout=60)
        cell.figures(post)

    def kill(self, request_timeout: Optional[float] = None) -> bool:
        """Deletes this Sandbox's contexts and closes the client it opened; a
        run_code or command in progress raises E2B's TimeoutException ("The
        sandbox was killed while the request was in progress")."""
        names, self._contexts = self._contexts, []
        self._killed = self._killed or bool(names)
        for n in names:
            try:
                self._client.delete_context(n)
            except CtxdError:
                pass  # already gone, or the daemon is
        if self._own:
            self._client.close()
        return bool(names)

    close = kill
    kill = _InstanceOrClass(kill, _kill_by_id)  # type: ignore[assignment]

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.kill()

    def run_code(self, code: str, language: Optional[str] = None,
                 context: Optional[Context] = None,
                 on_stdout: Optional[OutputHandler[OutputMessage]] = None,
                 on_stderr: Optional[OutputHandler[OutputMessage]] = None,
                 on_result: Optional[OutputHandler[Result]] = None,
                 on_error: Optional[OutputHandler[ExecutionError]] = None,
                 envs: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
                 request_timeout: Optional[float] = None) -> Execution:
        """Runs a cell in context (default: the Sandbox's own) and returns its
        Execution; callbacks fire as output arrives. A cell that raises sets
        Execution.error (and calls on_error); a cell past timeout (seconds,
        None: 300, 0: none) raises TimeoutException."""
        _check_language(language, context)
        t = _run_timeout(timeout)
        ctx = _context_id(context) if context is not None else self._default
        cell = _Cell(on_stdout, on_stderr, on_result, on_error)
        try:
            # the post-cell run is queued right behind the cell: no extra
            # round trip
            run = self._client.submit(code, ctx, timeout=t, envs=envs,
                                      **_syntax(self._client), **cell.kw())
            post_run = self._client.submit(_e2b_helper.POST_CELL, ctx, silent=True, timeout=60)
            try:
                res = run.wait()
            finally:
                post = post_run.wait()
            if res.status in ("aborted", "died") and (self._killed or self._gone(ctx)):
                raise _killed_error()
            cell.finish(res, t)
            self._figures(cell, post, ctx)
        except CtxdError as e:
            if self._killed:
                raise _killed_error() from None
            raise _wrap(e) from None
        return cell.execution

    def create_code_context(self, cwd: Optional[str] = None, language: Optional[str] = None,
                            request_timeout: Optional[float] = None) -> Context:
        """A new context (its own interpreter) in directory cwd (None: the
        daemon's private directory)."""
        _check_language(language, None)
        try:
            return self._new_context(cwd)
        except CtxdError as e:
            raise _wrap(e) from None

    def list_code_contexts(self) -> List[Context]:
        """This Sandbox's contexts that still exist, the default first."""
        try:
            infos = {i.name: i for i in self._client.list_contexts()}
        except CtxdError as e:
            raise _wrap(e) from None
        return [Context(n, "python", infos[n].cwd) for n in self._contexts if n in infos]

    def restart_code_context(self, context: Optional[Context] = None,
                             request_timeout: Optional[float] = None) -> None:
        """A fresh interpreter for the context (its globals are dropped)."""
        ctx = _context_id(context) if context is not None else self._default
        try:
            self._client.restart_context(ctx)
            self._install(ctx)
        except CtxdError as e:
            raise _wrap(e) from None

    def remove_code_context(self, context: Union[Context, str],
                            request_timeout: Optional[float] = None) -> None:
        """Deletes the context (the default one too, after which run_code
        needs a context)."""
        ctx = _context_id(context)
        try:
            self._client.delete_context(ctx)
        except CtxdError as e:
            raise _wrap(e) from None
        if ctx in self._contexts:
            self._contexts.remove(ctx)


# ---- the async twin ---------------------------------------------------------------------


class AsyncFilesystem:
    """AsyncSandbox.files: as Filesystem, every operation through a run in
    the default context (so at most FILE_VIA_RUN_MAX bytes per file)."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    async def _run(self, op: str, path: str, **args: Any) -> Dict[str, Any]:
        """One file operation through a silent run in the default context."""
        full = path if os.path.isabs(path) else os.path.join(self._sb._cwd, path)
        res = await self._sb._client.execute(_fs_code(op, path=full, **args), self._sb._default,
                                             silent=True, timeout=60)
        return _fs_answer(res, path)

    async def read(self, path: str, format: str = "text", **_: Any) -> Any:
        """As Filesystem.read."""
        a = await self._run("read", path, max=FILE_VIA_RUN_MAX)
        return _decode(base64.b64decode(a["data"]), format)

    async def write(self, path: str, data: Any, **_: Any) -> WriteInfo:
        """As Filesystem.write."""
        raw = _as_bytes(data)
        if len(raw) > FILE_VIA_RUN_MAX:
            raise InvalidArgumentException(f"{len(raw)} bytes: over {FILE_VIA_RUN_MAX}",
                                           "too_large")
        full = (await self._run("write", path, data=base64.b64encode(raw).decode()))["path"]
        return WriteInfo(os.path.basename(full), "file", full)

    async def write_files(self, files: List[WriteEntry], **_: Any) -> List[WriteInfo]:
        """As Filesystem.write_files."""
        return [await self.write(f.path, f.data) for f in files]

    async def list(self, path: str = ".", depth: int = 1, **_: Any) -> List[EntryInfo]:
        """As Filesystem.list."""
        return [EntryInfo(*e) for e in (await self._run("list", path))["entries"]]

    async def exists(self, path: str, **_: Any) -> bool:
        """Whether the path exists in the context's view."""
        return bool((await self._run("exists", path))["exists"])

    async def remove(self, path: str, **_: Any) -> None:
        """Removes a file, or a directory with its content."""
        await self._run("remove", path)

    async def make_dir(self, path: str, **_: Any) -> bool:
        """As Filesystem.make_dir."""
        return bool((await self._run("make_dir", path))["made"])


class AsyncSandbox:
    """The asyncio twin of Sandbox (E2B's AsyncSandbox): make one with
    `await AsyncSandbox.create(template=None, *, endpoint=None, client=None,
    cwd=None, envs=None)`; the same methods as coroutines; handlers may be coroutine
    functions, awaited as their output arrives)."""

    def __init__(self, client: AsyncClient, own: bool) -> None:
        self._client, self._own = client, own
        self._contexts: List[str] = []
        self._default = self._cwd = ""
        self.sandbox_id = ""
        self.files = AsyncFilesystem(self)
        self.commands = AsyncCommands(self)
        self._killed = False
        self._killed_error = _killed_error

    @classmethod
    async def create(cls, template: Optional[str] = None, *, endpoint: Optional[str] = None,
                     client: Optional[AsyncClient] = None, cwd: Optional[str] = None,
                     envs: Optional[Dict[str, str]] = None, **_ignored: Any) -> "AsyncSandbox":
        """E2B's constructor spelling."""
        sb = cls(client if client is not None else AsyncClient(endpoint), client is None)
        try:
            ctx = await sb._new_context(cwd, envs)
        except CtxdError as e:
            await sb.kill()
            raise _wrap(e) from None
        sb._default, sb._cwd, sb.sandbox_id = ctx.id, ctx.cwd, ctx.id
        return sb

    @classmethod
    async def connect(cls, sandbox_id: str, timeout: Optional[int] = None, *,
                      endpoint: Optional[str] = None, client: Optional[AsyncClient] = None,
                      **_ignored: Any) -> "AsyncSandbox":
        """As Sandbox.connect."""
        sb = cls(client if client is not None else AsyncClient(endpoint), client is None)
        try:
            if not isinstance(sandbox_id, str) or not sandbox_id:
                raise InvalidArgumentException("sandbox_id is a non-empty str")
            infos = _sandbox_contexts(sandbox_id, await sb._client.list_contexts())
            if not infos or infos[0].name != sandbox_id:
                raise SandboxNotFoundException(f"Sandbox {sandbox_id} not found", "not_found")
        except CtxdError as e:
            if sb._own:
                await sb._client.close()
            raise _wrap(e) from None
        sb._contexts = [i.name for i in infos]
        sb._default, sb._cwd, sb.sandbox_id = sandbox_id, infos[0].cwd, sandbox_id
        return sb

    @property
    def client(self) -> AsyncClient:
        """The ctxd client this sandbox uses."""
        return self._client

    async def _new_context(self, cwd: Optional[str],
                           envs: Optional[Dict[str, str]] = None) -> Context:
        """A ctxd context for E2B: figures left to the helper, helper installed."""
        name = (_code_context_name(self.sandbox_id) if self.sandbox_id
                else f"e2b-{uuid.uuid4().hex[:12]}")
        info = await self._client.create_context(name, cwd=cwd, env=envs, figures=False)
        self._contexts.append(info.name)
        await self._install(info.name)
        return Context(info.name, "python", info.cwd)

    async def _gone(self, ctx: str) -> bool:
        """As Sandbox._gone."""
        try:
            await self._client.context_info(ctx)
        except NotFoundError:
            return True
        except CtxdError:
            pass
        return False

    async def _install(self, ctx: str) -> ExecResult:
        """As Sandbox._install."""
        return _installed(await self._client.execute(_e2b_helper.INSTALL, ctx, silent=True,
                                                     timeout=60))

    async def _figures(self, cell: _Cell, post: ExecResult, ctx: str) -> None:
        """As Sandbox._figures."""
        if post.status != "ok" or _e2b_helper.MISSING in post.stdout:
            cell.figures(await self._install(ctx))
            post = await self._client.execute(_e2b_helper.POST_CELL, ctx, silent=True,
                                              timeout=60)
        cell.figures(post)

    async def kill(self, request_timeout: Optional[float] = None) -> bool:
        """As Sandbox.kill."""
        names, self._contexts = self._contexts, []
        self._killed = self._killed or bool(names)
        for n in names:
            try:
                await self._client.delete_context(n)
            except CtxdError:
                pass  # already gone, or the daemon is
        if self._own:
            await self._client.close()
        return bool(names)

    close = kill
    kill = _InstanceOrClass(kill, _kill_by_id_async)  # type: ignore[assignment]

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.kill()

    async def run_code(self, code: str, language: Optional[str] = None,
                       context: Optional[Context] = None,
                       on_stdout: Optional[OutputHandler[OutputMessage]] = None,
                       on_stderr: Optional[OutputHandler[OutputMessage]] = None,
                       on_result: Optional[OutputHandler[Result]] = None,
                       on_error: Optional[OutputHandler[ExecutionError]] = None,
                       envs: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
                       request_timeout: Optional[float] = None) -> Execution:
        """As Sandbox.run_code."""
        _check_language(language, context)
        t = _run_timeout(timeout)
        ctx = _context_id(context) if context is not None else self._default
        cell = _Cell(on_stdout, on_stderr, on_result, on_error)
        try:
            run = await self._client.submit(code, ctx, timeout=t, envs=envs,
                                            **_syntax(self._client), **cell.kw())
            post_run = await self._client.submit(_e2b_helper.POST_CELL, ctx, silent=True,
                                                 timeout=60)
            try:
                res = await run.wait()
            finally:
                post = await post_run.wait()
            if res.status in ("aborted", "died") and (self._killed or await self._gone(ctx)):
                raise _killed_error()
            try:
                cell.finish(res, t)
                await self._figures(cell, post, ctx)
            finally:
                for p in cell.pending:
                    await p
        except CtxdError as e:
            if self._killed:
                raise _killed_error() from None
            raise _wrap(e) from None
        return cell.execution

    async def create_code_context(self, cwd: Optional[str] = None,
                                  language: Optional[str] = None,
                                  request_timeout: Optional[float] = None) -> Context:
        """As Sandbox.create_code_context."""
        _check_language(language, None)
        try:
            return await self._new_context(cwd)
        except CtxdError as e:
            raise _wrap(e) from None

    async def list_code_contexts(self) -> List[Context]:
        """As Sandbox.list_code_contexts."""
        try:
            infos = {i.name: i for i in await self._client.list_contexts()}
        except CtxdError as e:
            raise _wrap(e) from None
        return [Context(n, "python", infos[n].cwd) for n in self._contexts if n in infos]

    async def restart_code_context(self, context: Optional[Context] = None,
                                   request_timeout: Optional[float] = None) -> None:
        """As Sandbox.restart_code_context."""
        ctx = _context_id(context) if context is not None else self._default
        try:
            await self._client.restart_context(ctx)
            await self._install(ctx)
        except CtxdError as e:
            raise _wrap(e) from None

    async def remove_code_context(self, context: Union[Context, str],
                                  request_timeout: Optional[float] = None) -> None:
        """As Sandbox.remove_code_context."""
        ctx = _context_id(context)
        try:
            await self._client.delete_context(ctx)
        except CtxdError as e:
            raise _wrap(e) from None
        if ctx in self._contexts:
            self._contexts.remove(ctx)
