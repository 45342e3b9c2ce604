"""A Daytona-compatible surface: code written for Daytona's
`sandbox.code_interpreter` (CodeInterpreter.run_code, create_context,
list_contexts, delete_context and the OutputMessage / ExecutionError /
ExecutionResult / InterpreterContext models) runs unchanged against ctxd:

    from ctxd.daytona import CodeInterpreter
    code_interpreter = CodeInterpreter()          # or CodeInterpreter(endpoint=...)
    result = code_interpreter.run_code("x = 41\\nprint(x + 1)")
    print(result.stdout)                          # "42\\n"

Semantics, as Daytona documents them:
- run_code runs in the default context (ctxd's "default"), shared by every
  client, unless context= names one made with create_context().
- timeout is in seconds: None means 10 minutes, 0 means none. A run past
  its timeout raises DaytonaTimeoutError (the callbacks have fired for the
  output produced until then); the context's globals are kept when the code
  stopped on the KeyboardInterrupt, lost when it had to be killed.
- on_stdout / on_stderr receive OutputMessage(output=text) while the code
  runs; on_error receives ExecutionError(name, value, traceback) when the
  code raised. ExecutionResult holds the whole stdout, stderr and the error
  (None when the code ran through).
- list_contexts() returns the user-made contexts only (not "default").
- Communication failures raise DaytonaError (DaytonaConnectionError when the
  daemon is unreachable, DaytonaNotFoundError for an unknown context), with
  Daytona's message prefixes ("Failed to run code: ...").

As Daytona's interpreter: sys.exit() / sys.exit(0) / SystemExit(None) ends
a run normally (error None); a KeyboardInterrupt the code raises itself
raises DaytonaTimeoutError, as Daytona's SDK reports it. The models have
pydantic's model_dump() / model_dump_json(); InterpreterContext.created_at
is an ISO 8601 str; DaytonaError carries status_code (the HTTP status
Daytona's API would answer), error_code (the daemon's err code) and
headers (empty).

ctxd specifics: a worker that died during the run (e.g. a segfault) or a run
aborted by a context restart/delete returns an ExecutionResult whose error
is ExecutionError("WorkerProcessError" / "ExecutionAborted", cause) and
calls on_error (also when the daemon shut down during the run);
ExecutionResult also carries `result`, the repr of a trailing expression
(Daytona has none; None when absent), and `displays`, the display()
outputs and matplotlib figures (Display: data, the MIME bundle; `charts`,
those with an image); sys.exit(n) with n not 0 is an error (SystemExit).
CodeInterpreter(own_default_context=True) runs in a context of its own
rather than the daemon's shared "default".

Daytona's import paths: install_as_daytona() (opt-in) makes `daytona`,
`daytona.common.errors` (DaytonaError and its subclasses, all of Daytona's)
and the code interpreter's modules resolve to this module.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
import json
from dataclasses import fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from ._common import ContextInfo, ExecResult
from ._errors import (
    CtxdError,
    CtxdTimeoutError,
    LostError,
    NotFoundError,
    RefusedError,
    UnreachableError,
)
from . import _alias
from .aio import AsyncClient
from .client import Client

__all__ = [
    "AsyncCodeInterpreter", "CodeInterpreter", "DaytonaAuthenticationError",
    "DaytonaBadRequestError", "DaytonaConflictError", "DaytonaConnectionError", "DaytonaError",
    "DaytonaForbiddenError", "DaytonaNotFoundError", "DaytonaRateLimitError",
    "DaytonaServerError", "DaytonaTimeoutError", "DaytonaValidationError", "Display",
    "ExecutionError", "ExecutionResult", "InterpreterContext", "OutputMessage",
    "install_as_daytona",
]

# The module names Daytona users import the code interpreter's names from:
# its errors (daytona.common.errors), the interpreter and its models.
DAYTONA_MODULES = (
    "daytona", "daytona.common.errors", "daytona.common.code_interpreter",
    "daytona._sync.code_interpreter", "daytona._async.code_interpreter",
)


def install_as_daytona() -> None:
    """Makes `import daytona` and the modules in DAYTONA_MODULES (e.g.
    `from daytona.common.errors import DaytonaError`) give this surface, as
    pymysql.install_as_MySQLdb() does for MySQLdb. Opt-in and idempotent;
    a real Daytona SDK imported before is replaced in sys.modules."""
    import sys
    _alias.install(sys.modules[__name__], DAYTONA_MODULES)

class DaytonaError(CtxdError):
    """Daytona's base error: message, status_code (the HTTP status Daytona's
    API would have answered; None for client-side errors), error_code (the
    daemon's err code, e.g. "unknown_context"; also in `code`), headers
    (always empty: there is no HTTP response). Also a CtxdError."""

    def __init__(self, message: str = "", status_code: Optional[int] = None,
                 headers: Optional[Mapping[str, Any]] = None,
                 error_code: Optional[str] = None) -> None:
        super().__init__(message, error_code)
        self.status_code = status_code
        self.headers: Dict[str, Any] = dict(headers or {})
        self.error_code = error_code


class DaytonaBadRequestError(DaytonaError, RefusedError):
    """A request the daemon refused as malformed or invalid (400)."""


class DaytonaAuthenticationError(DaytonaError):
    """Authentication failed (401)."""


class DaytonaForbiddenError(DaytonaError, RefusedError):
    """Not permitted (403)."""


class DaytonaNotFoundError(DaytonaError, NotFoundError):
    """A context that does not exist (404)."""


class DaytonaConflictError(DaytonaError, RefusedError):
    """A conflict with what exists, e.g. a context name taken (409)."""


class DaytonaValidationError(DaytonaError):
    """Well-formed values that fail validation (422)."""


class DaytonaServerError(DaytonaError):
    """A failure on the server's side (5xx)."""


class DaytonaRateLimitError(DaytonaError, RefusedError):
    """The daemon is at a limit or busy (429)."""


class DaytonaTimeoutError(DaytonaError, CtxdTimeoutError):
    """A run or request past its timeout."""


class DaytonaConnectionError(DaytonaError, UnreachableError):
    """The daemon cannot be reached, or the connection was lost."""


# A ctxd error's Daytona class and HTTP status, by the ctxd class (first
# match) or err code.
_ERROR_CLASSES = ((NotFoundError, DaytonaNotFoundError, 404),
                  (CtxdTimeoutError, DaytonaTimeoutError, 408),
                  (UnreachableError, DaytonaConnectionError, None),
                  (LostError, DaytonaConnectionError, None))
_CODE_CLASSES = {"busy": (DaytonaRateLimitError, 429), "limit": (DaytonaRateLimitError, 429),
                 "exists": (DaytonaConflictError, 409),
                 "forbidden": (DaytonaForbiddenError, 403)}

DEFAULT_TIMEOUT = 600  # seconds: Daytona's "10 minutes"

T = TypeVar("T")
OutputHandler = Callable[[T], Any]


class _Model:
    """What user code touches of Daytona's pydantic models: model_dump()
    and model_dump_json() (exclude, include, exclude_none; indent). The
    dump holds Daytona's fields; ctxd's extra ones (_EXTRA) only when
    `include` names them, so a dump sent on (to a model, say) is Daytona's."""

    _EXTRA: Tuple[str, ...] = ()

    def model_dump(self, *, mode: str = "python", include: Any = None, exclude: Any = None,
                   exclude_none: bool = False, **_: Any) -> Dict[str, Any]:
        """The model as a dict, as pydantic's model_dump."""
        d = {f.name: getattr(self, f.name) for f in fields(self)
             if not f.name.startswith("_")
             and (f.name not in self._EXTRA or (include is not None and f.name in include))}
        d = {k: (v.model_dump(mode=mode, exclude_none=exclude_none)
                 if isinstance(v, _Model) else
                 [x.model_dump(mode=mode, exclude_none=exclude_none)
                  if isinstance(x, _Model) else x for x in v] if isinstance(v, list) else v)
             for k, v in d.items()}
        if include is not None:
            d = {k: v for k, v in d.items() if k in include}
        if exclude is not None:
            d = {k: v for k, v in d.items() if k not in exclude}
        if exclude_none:
            d = {k: v for k, v in d.items() if v is not None}
        return d

    def model_dump_json(self, *, indent: Optional[int] = None, **kw: Any) -> str:
        """The model as JSON text, as pydantic's model_dump_json."""
        return json.dumps(self.model_dump(mode="json", **kw), indent=indent,
                          separators=None if indent is not None else (",", ":"), default=str)


@dataclass
class OutputMessage(_Model):
    """Represents stdout or stderr output from code execution."""

    output: str


@dataclass
class ExecutionError(_Model):
    """An error that occurred during code execution: the exception class
    name, its value, and the full traceback text."""

    name: str
    value: str
    traceback: str = ""


@dataclass
class Display(_Model):
    """A display() output or matplotlib figure the run produced (ctxd's;
    Daytona's run_code has none): data is the MIME bundle ("text/plain"
    always; "image/png" base64...), text its text/plain."""

    data: Dict[str, str]
    text: str = ""
    is_main_result: bool = False

    @property
    def png(self) -> Optional[str]:
        """The base64 PNG, when the display is an image."""
        return self.data.get("image/png")


@dataclass
class ExecutionResult(_Model):
    """Result of code execution: Daytona's stdout, stderr, error; ctxd's
    result (the trailing expression's repr) and displays (display() outputs
    and matplotlib figures, each a Display with its MIME bundle)."""

    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    result: Optional[str] = None
    displays: List[Display] = field(default_factory=list)
    _EXTRA = ("result", "displays")

    @property
    def charts(self) -> List[Display]:
        """The displays holding an image (figures)."""
        return [d for d in self.displays if "image/png" in d.data or "image/svg+xml" in d.data]


@dataclass
class InterpreterContext(_Model):
    """An isolated interpreter context (a ctxd context: its own process).
    created_at is a str as in Daytona (ISO 8601, UTC)."""

    id: str
    cwd: str = ""
    created_at: str = ""
    active: bool = True
    language: str = "python"

    @classmethod
    def _from(cls, info: ContextInfo) -> "InterpreterContext":
        created = (datetime.fromtimestamp(info.created, timezone.utc).isoformat()
                   .replace("+00:00", "Z") if info.created else "")
        return cls(id=info.name, cwd=info.cwd, created_at=created,
                   active=info.state != "dead", language="python")


def _request_timeout(t: Optional[float]) -> Optional[float]:
    """Daytona's request_timeout: positive values under 1 s become 1 s, 0
    disables the client-side bound, negative values are rejected."""
    if t is None:
        return None
    if t < 0:
        raise DaytonaError("request_timeout must not be negative")
    if t == 0:
        return 0
    return max(1.0, float(t))


def _run_timeout(timeout: Optional[float]) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise DaytonaError("Failed to run code: timeout must be greater than or equal to 0")
    return timeout


def _prefixed(e: CtxdError, prefix: str) -> DaytonaError:
    """The Daytona error for a ctxd one, its message prefixed as Daytona's
    SDK does."""
    if isinstance(e, DaytonaError):
        cls, status = type(e), e.status_code
    else:
        cls, status = next(((c, st) for base, c, st in _ERROR_CLASSES if isinstance(e, base)),
                           _CODE_CLASSES.get(e.code, (DaytonaError,
                                                      400 if isinstance(e, RefusedError)
                                                      else None)))
    err = cls(f"{prefix}{e.message or e}", status, None, e.code)
    err.__cause__ = e
    return err


def _context_name(context: Any) -> Optional[str]:
    if context is None:
        return None
    if isinstance(context, InterpreterContext):
        return context.id
    if isinstance(context, str):
        return context
    raise DaytonaError(f"not an InterpreterContext: {context!r}")


def _system_exit_ok(res: ExecResult) -> bool:
    """sys.exit() / sys.exit(0) / SystemExit(None): the run ended normally,
    as in Daytona's interpreter."""
    e = res.error
    return (res.status == "error" and e is not None and e.ename == "SystemExit"
            and e.evalue.strip() in ("", "None", "0"))


def _to_execution_error(res: ExecResult) -> Optional[ExecutionError]:
    if _system_exit_ok(res):
        return None
    if res.error is not None:
        e = res.error
        return ExecutionError(e.ename, e.evalue, "\n".join(e.traceback))
    if res.exit_code:  # sys.exit(n), n not 0: ctxd sends no traceback, exit_code
        return ExecutionError("SystemExit", str(res.exit_code), "")
    if res.status == "died":
        return ExecutionError("WorkerProcessError", res.cause or "the worker process died", "")
    if res.status in ("aborted", "shutdown"):
        return ExecutionError("ExecutionAborted", res.cause or f"the run ended: {res.status}", "")
    return None


def _outcome(res: ExecResult, t: float) -> ExecutionResult:
    """The ExecutionResult of a finished run, or Daytona's error for a run
    past its timeout, or one the code stopped with KeyboardInterrupt
    (Daytona's worker reports both as "interrupted", its SDK raises
    DaytonaTimeoutError for both)."""
    if res.status == "timeout":
        raise _timeout_error(t)
    if res.status in ("error", "interrupted") and res.error is not None \
            and res.error.ename == "KeyboardInterrupt":
        raise DaytonaTimeoutError(
            "Failed to run code: Execution timed out: the code was interrupted "
            "(KeyboardInterrupt)", 408, None, "interrupted")
    err = _to_execution_error(res)
    displays = [Display(dict(d.data), d.text, d.is_main_result) for d in res.displays]
    return ExecutionResult(res.stdout, res.stderr, err, res.result, displays)


def _timeout_error(timeout: float) -> CtxdTimeoutError:
    return DaytonaTimeoutError(
        "Failed to run code: Execution timed out: operation exceeded the configured "
        f"`timeout` of {timeout:g} s. Increase `timeout` (0 disables it) or shorten the code.",
        408, None, "timeout")


class CodeInterpreter:
    """Handles code interpretation and execution in ctxd contexts (Python
    only). If subsequent code executions are performed in the same context,
    the variables, imports and functions defined in the previous execution
    are available.

    CodeInterpreter(client=None, *, endpoint=None, own_default_context=False):
    over an existing Client, or one it opens (and closes with close()).
    own_default_context=True: run_code without a context runs in a context
    of this interpreter's own (created on first use, deleted by close()),
    not in the daemon's shared "default", so several interpreters served by
    one daemon are as separate as several Daytona sandboxes. Thread-safe
    like Client."""

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None,
                 own_default_context: bool = False):
        try:
            self._own = client is None
            self._client = client if client is not None else Client(endpoint)
        except CtxdError as e:
            raise _prefixed(e, "Failed to connect to ctxd: ") from None
        self._own_default = own_default_context
        self._default: Optional[str] = None

    def _default_name(self) -> Optional[str]:
        """The context run_code uses without one: None (the daemon's
        "default"), or this interpreter's own, created now if needed."""
        if not self._own_default:
            return None
        if self._default is None:
            self._default = self._client.create_context(f"cip-{os.urandom(6).hex()}").name
        return self._default

    @property
    def client(self) -> Client:
        return self._client

    def close(self) -> None:
        """Deletes this interpreter's own default context (if it made one)
        and closes the client it opened."""
        name, self._default = self._default, None
        if name is not None:
            try:
                self._client.delete_context(name)
            except CtxdError:
                pass  # already gone, or the daemon is
        if self._own:
            self._client.close()

    def __enter__(self) -> "CodeInterpreter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run_code(self, code: str, *, context: Optional[InterpreterContext] = None,
                 on_stdout: Optional[OutputHandler[OutputMessage]] = None,
                 on_stderr: Optional[OutputHandler[OutputMessage]] = None,
                 on_error: Optional[OutputHandler[ExecutionError]] = None,
                 envs: Optional[Dict[str, str]] = None,
                 timeout: Optional[int] = None) -> ExecutionResult:
        """Executes Python code; see the module docstring for the semantics.
        Raises DaytonaTimeoutError when the run times out, DaytonaError when
        it fails for communication or other SDK reasons."""
        t = _run_timeout(timeout)
        name = _context_name(context)
        try:
            if name is None:
                name = self._default_name()
            res = self._client.execute(
                code, name,
                on_stdout=(lambda s: on_stdout(OutputMessage(s))) if on_stdout else None,
                on_stderr=(lambda s: on_stderr(OutputMessage(s))) if on_stderr else None,
                timeout=t, envs=envs)
        except CtxdError as e:
            raise _prefixed(e, "Failed to run code: ") from None
        out = _outcome(res, t)
        if out.error is not None and on_error is not None:
            on_error(out.error)
        return out

    def create_context(self, cwd: Optional[str] = None,
                       request_timeout: Optional[float] = None) -> InterpreterContext:
        """Creates a new isolated interpreter context (its own process)."""
        try:
            info = self._client.create_context(
                cwd=os.path.abspath(cwd) if cwd else None,
                request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to create interpreter context: ") from None
        return InterpreterContext._from(info)

    def list_contexts(self, request_timeout: Optional[float] = None) -> List[InterpreterContext]:
        """The user-created contexts (the default context, the daemon's or
        this interpreter's own, is not listed)."""
        try:
            infos = self._client.list_contexts(request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to list interpreter contexts: ") from None
        return [InterpreterContext._from(i) for i in infos
                if i.name not in ("default", self._default)]

    def delete_context(self, context: InterpreterContext,
                       request_timeout: Optional[float] = None) -> None:
        """Deletes a context and shuts down all its processes. The default
        context cannot be deleted."""
        name = _context_name(context)
        if not name:
            raise DaytonaError("Failed to delete interpreter context: no context given")
        try:
            self._client.delete_context(name, request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to delete interpreter context: ") from None


async def _maybe_await(r) -> None:
    if inspect.isawaitable(r):
        await r


class AsyncCodeInterpreter:
    """The asyncio twin of CodeInterpreter (Daytona's AsyncCodeInterpreter):
    the same methods as coroutines; handlers may be coroutine functions."""

    def __init__(self, client: Optional[AsyncClient] = None, *, endpoint: Optional[str] = None,
                 own_default_context: bool = False):
        self._own = client is None
        self._client = client if client is not None else AsyncClient(endpoint)
        self._own_default = own_default_context
        self._default: Optional[str] = None

    async def _default_name(self) -> Optional[str]:
        """As CodeInterpreter._default_name."""
        if not self._own_default:
            return None
        if self._default is None:
            info = await self._client.create_context(f"cip-{os.urandom(6).hex()}")
            self._default = info.name
        return self._default

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
        name, self._default = self._default, None
        if name is not None:
            try:
                await self._client.delete_context(name)
            except CtxdError:
                pass  # already gone, or the daemon is
        if self._own:
            await self._client.close()

    async def __aenter__(self) -> "AsyncCodeInterpreter":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def run_code(self, code: str, *, context: Optional[InterpreterContext] = None,
                       on_stdout: Optional[OutputHandler[OutputMessage]] = None,
                       on_stderr: Optional[OutputHandler[OutputMessage]] = None,
                       on_error: Optional[OutputHandler[ExecutionError]] = None,
                       envs: Optional[Dict[str, str]] = None,
                       timeout: Optional[int] = None) -> ExecutionResult:
        t = _run_timeout(timeout)
        name = _context_name(context)
        try:
            if name is None:
                name = await self._default_name()
            res = await self._client.execute(
                code, name,
                on_stdout=(lambda s: on_stdout(OutputMessage(s))) if on_stdout else None,
                on_stderr=(lambda s: on_stderr(OutputMessage(s))) if on_stderr else None,
                timeout=t, envs=envs)
        except CtxdError as e:
            raise _prefixed(e, "Failed to run code: ") from None
        out = _outcome(res, t)
        if out.error is not None and on_error is not None:
            await _maybe_await(on_error(out.error))
        return out

    async def create_context(self, cwd: Optional[str] = None,
                             request_timeout: Optional[float] = None) -> InterpreterContext:
        try:
            info = await self._client.create_context(
                cwd=os.path.abspath(cwd) if cwd else None,
                request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to create interpreter context: ") from None
        return InterpreterContext._from(info)

    async def list_contexts(self, request_timeout: Optional[float] = None
                            ) -> List[InterpreterContext]:
        try:
            infos = await self._client.list_contexts(
                request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to list interpreter contexts: ") from None
        return [InterpreterContext._from(i) for i in infos
                if i.name not in ("default", self._default)]

    async def delete_context(self, context: InterpreterContext,
                             request_timeout: Optional[float] = None) -> None:
        name = _context_name(context)
        if not name:
            raise DaytonaError("Failed to delete interpreter context: no context given")
        try:
            await self._client.delete_context(name,
                                              request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to delete interpreter context: ") from None
