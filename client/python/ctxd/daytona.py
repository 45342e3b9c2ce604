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

ctxd specifics: a worker that died during the run (e.g. a segfault) or a run
aborted by a context restart/delete returns an ExecutionResult whose error
is ExecutionError("WorkerProcessError" / "ExecutionAborted", cause) and
calls on_error (also when the daemon shut down during the run); ExecutionResult also carries `result`, the repr of a
trailing expression (Daytona has none; None when absent).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, TypeVar

from ._common import ContextInfo, ExecResult
from ._errors import (
    CtxdError,
    CtxdTimeoutError,
    NotFoundError,
    UnreachableError,
)
from .aio import AsyncClient
from .client import Client

# Daytona's exception names, as aliases of the package's own classes.
DaytonaError = CtxdError
DaytonaTimeoutError = CtxdTimeoutError
DaytonaConnectionError = UnreachableError
DaytonaNotFoundError = NotFoundError

DEFAULT_TIMEOUT = 600  # seconds: Daytona's "10 minutes"

T = TypeVar("T")
OutputHandler = Callable[[T], Any]


@dataclass
class OutputMessage:
    """Represents stdout or stderr output from code execution."""

    output: str


@dataclass
class ExecutionError:
    """An error that occurred during code execution: the exception class
    name, its value, and the full traceback text."""

    name: str
    value: str
    traceback: str = ""


@dataclass
class ExecutionResult:
    """Result of code execution."""

    stdout: str = ""
    stderr: str = ""
    error: Optional[ExecutionError] = None
    result: Optional[str] = None  # ctxd extension: the trailing expression's repr


@dataclass
class InterpreterContext:
    """An isolated interpreter context (a ctxd context: its own process)."""

    id: str
    cwd: str = ""
    created_at: Optional[datetime] = None
    active: bool = True
    language: str = "python"

    @classmethod
    def _from(cls, info: ContextInfo) -> "InterpreterContext":
        created = datetime.fromtimestamp(info.created, timezone.utc) if info.created else None
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


def _prefixed(e: CtxdError, prefix: str) -> CtxdError:
    err = type(e)(f"{prefix}{e.message or e}", e.code)
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


def _to_execution_error(res: ExecResult) -> Optional[ExecutionError]:
    if res.error is not None:
        e = res.error
        return ExecutionError(e.ename, e.evalue, "\n".join(e.traceback))
    if res.status == "died":
        return ExecutionError("WorkerProcessError", res.cause or "the worker process died", "")
    if res.status in ("aborted", "shutdown"):
        return ExecutionError("ExecutionAborted", res.cause or f"the run ended: {res.status}", "")
    return None


def _timeout_error(timeout: float) -> CtxdTimeoutError:
    return DaytonaTimeoutError(
        "Failed to run code: Execution timed out: operation exceeded the configured "
        f"`timeout` of {timeout:g} s. Increase `timeout` (0 disables it) or shorten the code.")


class CodeInterpreter:
    """Handles code interpretation and execution in ctxd contexts (Python
    only). If subsequent code executions are performed in the same context,
    the variables, imports and functions defined in the previous execution
    are available.

    CodeInterpreter(client=None, *, endpoint=None): over an existing Client,
    or one it opens (and closes with close()). Thread-safe like Client."""

    def __init__(self, client: Optional[Client] = None, *, endpoint: Optional[str] = None):
        try:
            self._own = client is None
            self._client = client if client is not None else Client(endpoint)
        except CtxdError as e:
            raise _prefixed(e, "Failed to connect to ctxd: ") from None

    @property
    def client(self) -> Client:
        return self._client

    def close(self) -> None:
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
            res = self._client.execute(
                code, name,
                on_stdout=(lambda s: on_stdout(OutputMessage(s))) if on_stdout else None,
                on_stderr=(lambda s: on_stderr(OutputMessage(s))) if on_stderr else None,
                timeout=t, envs=envs)
        except CtxdError as e:
            raise _prefixed(e, "Failed to run code: ") from None
        if res.status == "timeout":
            raise _timeout_error(t)
        err = _to_execution_error(res)
        if err is not None and on_error is not None:
            on_error(err)
        return ExecutionResult(res.stdout, res.stderr, err, res.result)

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
        """The user-created contexts (the default context is not listed)."""
        try:
            infos = self._client.list_contexts(request_timeout=_request_timeout(request_timeout))
        except CtxdError as e:
            raise _prefixed(e, "Failed to list interpreter contexts: ") from None
        return [InterpreterContext._from(i) for i in infos if i.name != "default"]

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

    def __init__(self, client: Optional[AsyncClient] = None, *, endpoint: Optional[str] = None):
        self._own = client is None
        self._client = client if client is not None else AsyncClient(endpoint)

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def close(self) -> None:
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
            res = await self._client.execute(
                code, name,
                on_stdout=(lambda s: on_stdout(OutputMessage(s))) if on_stdout else None,
                on_stderr=(lambda s: on_stderr(OutputMessage(s))) if on_stderr else None,
                timeout=t, envs=envs)
        except CtxdError as e:
            raise _prefixed(e, "Failed to run code: ") from None
        if res.status == "timeout":
            raise _timeout_error(t)
        err = _to_execution_error(res)
        if err is not None and on_error is not None:
            await _maybe_await(on_error(err))
        return ExecutionResult(res.stdout, res.stderr, err, res.result)

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
        return [InterpreterContext._from(i) for i in infos if i.name != "default"]

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
