"""ctxd: the Python client of the ctxd daemon, a persistent, stateful Python
interpreter service (see the ctxd README and proto/PROTOCOL.md).

Native API:

    from ctxd import Client
    with Client() as c:                       # $CTXD_ENDPOINT or the default socket
        c.execute("x = 21")
        r = c.execute("print('hi'); x * 2", on_stdout=print)
        r.status, r.result, r.stdout          # ('ok', '42', 'hi\\n')

- Client (blocking, thread-safe) and AsyncClient (asyncio; callbacks may be
  coroutines): execute / submit, interrupt, hello, stats, create_context,
  list_contexts, fork_context, delete_context, restart_context, complete,
  inspect, is_complete.
- ExecResult, ErrorInfo, Result, ContextInfo, HelloInfo, StatsInfo,
  Completion, Inspection, Completeness: what they return.
- Errors: CtxdError and its subclasses RefusedError (NotFoundError),
  UnreachableError (AuthenticationError: a tcp:// CurveZMQ handshake
  failed), LostError, ProtocolError, ClosedError, CtxdTimeoutError;
  TooLargeError (a RefusedError) for a request over the daemon's
  max_request_bytes, refused before it is sent; DisconnectedError (both a
  LostError and an UnreachableError) for requests in flight on a
  connection that dropped.

Daytona-compatible API (ctxd.daytona, also importable from here):
CodeInterpreter, AsyncCodeInterpreter, ExecutionResult, ExecutionError,
OutputMessage, InterpreterContext, DaytonaError, DaytonaTimeoutError.

mellea-compatible API (ctxd.mellea, imported from there: its names, e.g.
ExecutionResult, overlap Daytona's): make_execution_environment,
ExecutionEnvironment, UnsafeEnvironment, StaticAnalysisEnvironment,
LLMSandboxEnvironment, ExecutionResult, CapabilityPolicy, LOCAL_POLICY,
DOCKER_POLICY, COMPATIBILITY_MATRIX, Artifact, python_tool, PythonTool,
code_interpreter, local_code_interpreter, PackageInstallError.

E2B-compatible API (ctxd.e2b, imported from there): Sandbox, AsyncSandbox,
Execution, Result, Logs, ExecutionError, OutputMessage, Context, the chart
classes (LineChart, ScatterChart, BarChart, PieChart, BoxAndWhiskerChart,
SuperChart) and E2B's exceptions.

The wire codec is ctxd._proto (pack / unpack / encode_request).
"""

from ._common import (
    Artifact,
    Completeness,
    Completion,
    Inspection,
    ContextInfo,
    ErrorInfo,
    ExecResult,
    HelloInfo,
    Result,
    StatsInfo,
    default_endpoint,
)
from ._errors import (
    AuthenticationError,
    ClosedError,
    CtxdError,
    CtxdTimeoutError,
    DisconnectedError,
    LostError,
    NotFoundError,
    TooLargeError,
    ProtocolError,
    RefusedError,
    UnreachableError,
)
from .aio import AsyncClient, AsyncRun
from .client import Client, Run
from .daytona import (
    AsyncCodeInterpreter,
    CodeInterpreter,
    DaytonaConnectionError,
    DaytonaError,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    ExecutionError,
    ExecutionResult,
    InterpreterContext,
    OutputMessage,
)

__version__ = "0.1.0"

__all__ = [
    "Artifact", "Completeness", "Completion", "Inspection",
    "AsyncClient", "AsyncCodeInterpreter", "AsyncRun", "Client", "ClosedError",
    "CodeInterpreter", "ContextInfo", "CtxdError", "CtxdTimeoutError", "DaytonaConnectionError", "DisconnectedError",
    "DaytonaError", "DaytonaNotFoundError", "DaytonaTimeoutError", "ErrorInfo", "ExecResult",
    "ExecutionError", "ExecutionResult", "HelloInfo", "InterpreterContext", "LostError",
    "NotFoundError", "OutputMessage", "ProtocolError", "RefusedError", "Result", "Run", "TooLargeError",
    "StatsInfo",
    "UnreachableError", "AuthenticationError", "default_endpoint",
]
