"""E2B's Commands API (sandbox.commands) for ctxd.e2b: run(cmd) runs a
shell command in the sandbox, as E2B runs it (`/bin/bash -l -c cmd`), and
returns a CommandResult (stdout, stderr, exit_code, error); a non-zero
exit raises CommandExitException, as E2B's SDK does.

The command runs inside the sandbox's default context (a silent run that
starts the shell as a child of the context's interpreter, in its directory
and with its confinement) and its output streams back as the run's stdout
and stderr; on_stdout / on_stderr get each chunk as it arrives. A command
past its timeout (seconds, default 60, 0 none) has its process group
killed and raises TimeoutException. The command and run_code share the
context's queue: one waits for the other.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ._common import ExecResult
from ._e2b_models import InvalidArgumentException, SandboxException, TimeoutException, _wrap
from ._errors import CtxdError

DEFAULT_COMMAND_TIMEOUT = 60  # seconds (E2B's commands.run default)

Stdout = str
Stderr = str


@dataclass
class CommandResult:
    """How a command ended (E2B's CommandResult): stderr, stdout,
    exit_code (0 when it succeeded), error (a message, or None)."""

    stderr: str
    stdout: str
    exit_code: int
    error: Optional[str]


@dataclass
class CommandExitException(SandboxException, CommandResult):
    """A command that exited with a non-zero code (E2B's
    CommandExitException): a SandboxException with the CommandResult's
    fields."""

    def __post_init__(self) -> None:
        self.message = str(self)

    def __str__(self) -> str:
        return f"Command exited with code {self.exit_code} and error:\n{self.stderr}"


# Runs in the context (inside exec, so nothing is bound in its globals):
# the shell's output is copied to the run's stdout/stderr as it comes; the
# exit status ends the run as SystemExit (the run's exit_code). Whatever
# stops the run (its timeout's KeyboardInterrupt, a kill) kills the
# command's process group first.
_RUN_SRC = r'''
import codecs, os, selectors, signal, subprocess, sys
p = subprocess.Popen(["/bin/bash", "-l", "-c", A["cmd"]], stdin=subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=A["cwd"],
                     start_new_session=True)
try:
    sel = selectors.DefaultSelector()
    for f, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
        sel.register(f, selectors.EVENT_READ,
                     (out, codecs.getincrementaldecoder("utf-8")("replace")))
    left = 2
    while left:
        for key, _ in sel.select():
            out, dec = key.data
            b = os.read(key.fd, 65536)
            if not b:
                sel.unregister(key.fileobj)
                left -= 1
            t = dec.decode(b, not b)
            if t:
                out.write(t)
                out.flush()
    rc = p.wait()
except BaseException:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait()
    raise
raise SystemExit(rc if rc >= 0 else 128 - rc)
'''


def command_code(cmd: str, cwd: Optional[str]) -> str:
    """The run's code for one command."""
    if not isinstance(cmd, str) or not cmd:
        raise InvalidArgumentException("cmd is a non-empty str")
    return f"exec({('A = ' + repr({'cmd': cmd, 'cwd': cwd}) + chr(10) + _RUN_SRC)!r}, {{}})"


def command_timeout(timeout: Optional[float]) -> float:
    """commands.run's timeout in seconds: None is E2B's 60, 0 none."""
    if timeout is None:
        return float(DEFAULT_COMMAND_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise InvalidArgumentException("timeout is a number of seconds >= 0 (0: none)")
    return float(timeout)


def command_result(res: ExecResult, t: float, killed: Callable[[], Exception]) -> CommandResult:
    """The CommandResult of a command's run; raises CommandExitException for
    a non-zero exit, TimeoutException past its timeout, killed() when the
    sandbox was killed during it."""
    if res.status == "timeout":
        raise TimeoutException(f"Command timed out after {t:g} s: the 'timeout' option can be "
                               "used to increase this timeout", "timeout")
    if res.status in ("aborted", "died", "shutdown"):
        raise killed()
    if res.status == "interrupted":  # CommandHandle.kill(): E2B's SIGKILLed command
        raise CommandExitException(stderr=res.stderr, stdout=res.stdout, exit_code=-1,
                                   error="signal: killed")
    if res.exit_code is None:
        # the run ended without the command's exit (it could not start it)
        msg = res.error.evalue if res.error else (res.cause or res.status)
        name = res.error.ename if res.error else res.status
        raise SandboxException(f"the command could not run: {name}: {msg}", "command")
    out = CommandResult(stderr=res.stderr, stdout=res.stdout, exit_code=res.exit_code,
                        error=None)
    if out.exit_code != 0:
        raise CommandExitException(stderr=out.stderr, stdout=out.stdout,
                                   exit_code=out.exit_code, error=out.stderr or None)
    return out


def _handler(fn: Optional[Callable[[str], Any]]) -> Optional[Callable[[str], Any]]:
    """A user's on_stdout/on_stderr as a client callback."""
    return None if fn is None else (lambda text: fn(text))


class Commands:
    """sandbox.commands: run(cmd, background=None, envs=None, user=None,
    cwd=None, on_stdout=None, on_stderr=None, stdin=None, timeout=60)."""

    def __init__(self, sandbox: Any) -> None:
        self._sb = sandbox

    def run(self, cmd: str, background: Optional[bool] = None,
            envs: Optional[Dict[str, str]] = None, user: Any = None, cwd: Optional[str] = None,
            on_stdout: Optional[Callable[[str], Any]] = None,
            on_stderr: Optional[Callable[[str], Any]] = None, stdin: Optional[bool] = None,
            timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
            request_timeout: Optional[float] = None) -> Any:
        """Runs cmd and waits for it: its CommandResult; a non-zero exit
        raises CommandExitException. background=True returns a
        CommandHandle at once (wait() gives the result)."""
        t = command_timeout(timeout)
        try:
            run = self._sb._client.submit(command_code(cmd, cwd), self._sb._default,
                                          silent=True, timeout=t, envs=envs,
                                          on_stdout=_handler(on_stdout),
                                          on_stderr=_handler(on_stderr))
        except CtxdError as e:
            raise _wrap(e) from None
        handle = CommandHandle(self._sb, run, t)
        return handle if background else handle.wait()


class CommandHandle:
    """A command started with background=True (E2B's CommandHandle):
    wait() returns its CommandResult (raising as run() does), kill() stops
    it."""

    def __init__(self, sandbox: Any, run: Any, t: float) -> None:
        self._sb, self._run, self._t = sandbox, run, t

    def wait(self, on_stdout: Any = None, on_stderr: Any = None) -> CommandResult:
        """The command's result once it ended."""
        try:
            res = self._run.wait()
        except CtxdError as e:
            if self._sb._killed:
                raise self._sb._killed_error() from None
            raise _wrap(e) from None
        return command_result(res, self._t, self._sb._killed_error)

    def kill(self) -> bool:
        """Stops the command (its process group is killed)."""
        if self._run.done:
            return False
        self._run.interrupt()
        return True


class AsyncCommands:
    """AsyncSandbox.commands: as Commands, run() a coroutine; handlers may
    be coroutine functions."""

    def __init__(self, sandbox: Any) -> None:
        self._sb = sandbox

    async def run(self, cmd: str, background: Optional[bool] = None,
                  envs: Optional[Dict[str, str]] = None, user: Any = None,
                  cwd: Optional[str] = None, on_stdout: Any = None, on_stderr: Any = None,
                  stdin: Optional[bool] = None,
                  timeout: Optional[float] = DEFAULT_COMMAND_TIMEOUT,
                  request_timeout: Optional[float] = None) -> CommandResult:
        """As Commands.run (background is not offered here)."""
        if background:
            raise InvalidArgumentException("background commands: use the sync Sandbox")
        t = command_timeout(timeout)

        def cb(fn: Any) -> Any:
            if fn is None:
                return None

            def call(text: str) -> Any:
                r = fn(text)
                return r if inspect.isawaitable(r) else None
            return call
        try:
            res = await self._sb._client.execute(command_code(cmd, cwd), self._sb._default,
                                                 silent=True, timeout=t, envs=envs,
                                                 on_stdout=cb(on_stdout),
                                                 on_stderr=cb(on_stderr))
        except CtxdError as e:
            if self._sb._killed:
                raise self._sb._killed_error() from None
            raise _wrap(e) from None
        return command_result(res, t, self._sb._killed_error)
