"""A mellea-compatible surface: the API of mellea's
`mellea.stdlib.tools.interpreter` (make_execution_environment,
ExecutionEnvironment.execute, ExecutionResult, CapabilityPolicy, python_tool)
served by ctxd, where every tier is a ctxd context and the policy is enforced
by the daemon, not just declared:

    from ctxd.mellea import make_execution_environment, python_tool

    with make_execution_environment("local") as env:   # ctxd's local tier
        r = env.execute("import math\\nprint(math.pi)")
        r.success, r.stdout                            # (True, '3.141592653589793')

    tool = python_tool(tier="docker", artifact_dir="out")   # ctxd's sandbox tier
    tool.as_json_tool                                   # OpenAI-style function schema
    tool(code="open('a.csv', 'w').write('x,y')").artifacts   # copied into out/

Tiers: mellea's names are passed to the daemon, which resolves them
(PROTOCOL.md section 5, ctx.create `tier`): "static"; "local_unsafe" = ctxd's
"unsafe"; "local"; "docker_unsafe" and "docker" = ctxd's "sandbox" (Linux
namespaces, seccomp, cgroups: no Docker engine). ctxd's own names ("unsafe",
"sandbox") are accepted too. `execution_mode` reports the name given.

mellea's code keeps its imports: install_as_mellea() (opt-in) makes
mellea.stdlib.tools and its execution_policy / interpreter modules resolve
to this module (`from mellea.stdlib.tools import COMPATIBILITY_MATRIX,
UnsafeEnvironment`), leaving the rest of an installed mellea as it is.

mellea's public names are all here (UnsafeEnvironment,
StaticAnalysisEnvironment, LLMSandboxEnvironment, code_interpreter,
local_code_interpreter, COMPATIBILITY_MATRIX, CapabilityPolicy's ENFORCED_*
flags with enforced_capabilities() / unenforced_capabilities()), and so are
its warnings, in its words. Packages: a requirement the context can already
import at a satisfying version (checked in the context's Python) counts as
installed (environment.installed: "present", the version found); only the
rest goes to the daemon's pip.install. Artifacts: only a successful run has
them (mellea's rule); with artifact_dir, the files the run wrote in its
directory (copied there), the files it wrote into artifact_dir itself, and
the policy's artifact_export_paths.

Where this differs from mellea, on purpose:
- A run past its timeout is reported as mellea does (`timed_out=True`,
  `skipped=True`, skip_message "Execution timed out.", `success=False`) but
  keeps its partial stdout/stderr (mellea's are None), and the context its
  globals when the code stopped on the KeyboardInterrupt;
  to_validationresult_reason() starts with "Execution timed out." and
  adds the partial output.
- The policy is enforced. On "local" and "sandbox" every field given a
  restricting value is enforced by the daemon, which refuses (RefusedError
  `bad_field`) what it cannot enforce rather than run unconfined. On the
  unsafe tiers ("local_unsafe", "unsafe") the policy is only declared, as in
  mellea: fields the daemon's `hello` does not list as enforced for that tier
  are not sent, and a caller's policy gets mellea's UserWarning
  ("A CapabilityPolicy with unenforced restrictions was passed to ...");
  environment.unenforced_capabilities() names them. The ENFORCED_* flags
  describe mellea's default tier; environment.enforced_capabilities() the
  environment's own.
- The import allowlist is checked twice on executing tiers: before the run,
  by the daemon's static analysis (an import outside the list skips the run
  with mellea's "Unauthorized imports detected: ..." and nothing runs), and
  on "local"/"sandbox" at run time by the daemon's import hook, which also
  catches `__import__`, importlib and imports inside exec'd strings. An
  empty list allows no import (mellea's empty list allows any).
- An environment is a persistent interpreter (a ctxd context): globals and
  imports survive from one execute() to the next. stateful=False restarts
  the context's interpreter before each run, for mellea's fresh-process
  semantics.
- The static tier's analysis_result is the daemon's analysis (a dict:
  syntax_error {message, line, col, end_line, end_col, text} or None,
  imports, dynamic_imports, disallowed, executed False), not an ast.Module.
- stdout_max_bytes / stderr_max_bytes are applied by this client, with
  mellea's marker "... [truncated]" (the daemon's own cap is its
  --max-output). package_installation is accepted and not used.
- Packages are installed into the context, never into the caller's Python;
  a failure raises PackageInstallError when the tool or context is made.
- Output is stripped of leading and trailing whitespace, as mellea does
  (strip_output=False keeps it whole).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import mimetypes
import os
import shutil
import threading
import uuid
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Literal, Optional, Sequence, Tuple, Union

from . import _alias, _reqs
from ._common import ExecResult
from ._errors import CtxdError, RefusedError
from .client import Client

__all__ = [
    "Artifact",
    "CapabilityPolicy",
    "DOCKER_POLICY",
    "ExecutionEnvironment",
    "ExecutionResult",
    "ExecutionTier",
    "COMPATIBILITY_MATRIX",
    "LLMSandboxEnvironment",
    "LOCAL_POLICY",
    "PackageInstallError",
    "PythonTool",
    "StaticAnalysisEnvironment",
    "TIERS",
    "UnsafeEnvironment",
    "code_interpreter",
    "local_code_interpreter",
    "make_execution_environment",
    "python_tool",
    "install_as_mellea",
]

# The module names mellea exports the interpreter's names from: the
# package's __init__ (mellea.stdlib.tools), execution_policy
# (COMPATIBILITY_MATRIX, the policies, Artifact) and interpreter
# (UnsafeEnvironment and the other environments, python_tool).
MELLEA_MODULES = ("mellea.stdlib.tools", "mellea.stdlib.tools.execution_policy",
                  "mellea.stdlib.tools.interpreter")


def install_as_mellea() -> None:
    """Makes the modules in MELLEA_MODULES give this surface, so mellea
    code (`from mellea.stdlib.tools import COMPATIBILITY_MATRIX,
    UnsafeEnvironment`, `from mellea.stdlib.tools.interpreter import
    python_tool`) runs against ctxd, as pymysql.install_as_MySQLdb() does
    for MySQLdb. A mellea installed beside ctxd keeps its other modules
    (mellea, mellea.stdlib are the real ones). Opt-in and idempotent."""
    import sys
    _alias.install(sys.modules[__name__], MELLEA_MODULES, real_parents=True)

ExecutionTier = Literal["static", "local_unsafe", "local", "docker_unsafe", "docker",
                        "unsafe", "sandbox"]

# The tier names accepted here and the ctxd tier the daemon resolves each to
# (daemon/sup_policy.c, tier_names). The daemon does the resolving; this
# table only picks mellea's default policy and timeout per name, and lets an
# unknown name fail at once with mellea's ValueError.
TIERS: Dict[str, str] = {
    "static": "static",
    "local_unsafe": "unsafe",
    "local": "local",
    "docker_unsafe": "sandbox",
    "docker": "sandbox",
    "unsafe": "unsafe",
    "sandbox": "sandbox",
}

_TRUNCATION_MARKER = "... [truncated]"
_DEFAULT_TIMEOUT = {"unsafe": 30, "local": 30, "sandbox": 60, "static": 30}


class PackageInstallError(RefusedError):
    """The daemon refused or failed to install the packages a context asked
    for (ctx.create's policy `packages`). `code` is the daemon's err code;
    the message names the packages and quotes the daemon."""

    code = "packages"


def _warn(message: str) -> None:
    """A UserWarning attributed to the caller's first frame outside this
    module."""
    import sys
    level, f = 2, sys._getframe(1)
    while f is not None and f.f_globals.get("__name__") == __name__:
        level, f = level + 1, f.f_back
    warnings.warn(message, UserWarning, stacklevel=level)


def _warn_declared(policy: "CapabilityPolicy", tier: str, unenforced: Sequence[str]) -> None:
    """mellea's construction-time warning (same category and wording, so
    mellea users' warning filters keep working) for a caller's policy whose
    restrictions the tier only declares: its boolean fields set False, as
    mellea lists them, then any other restricting field ctxd's unsafe tier
    does not enforce."""
    restricted = [f"{k}=False" for k in ("network_access", "package_installation",
                                         "subprocess_execution", "env_var_access")
                  if getattr(policy, k) is False]
    restricted += [k for k in unenforced if k not in ("network_access", "subprocess_execution",
                                                       "env_var_access")]
    if restricted:
        _warn(f"A CapabilityPolicy with unenforced restrictions was passed to a {tier!r} "
              "execution environment. The following fields are declared but will not restrict "
              "actual execution on local tiers \u2014 no subprocess isolation is applied: "
              f"{', '.join(restricted)}. These values are informational only. Use tier='docker' "
              "or tier='docker_unsafe' for real process isolation.")


# ---- policy ------------------------------------------------------------------


@dataclass
class CapabilityPolicy:
    """What executed code may do: mellea's CapabilityPolicy fields and
    defaults, plus ctxd's own limits. Sent to the daemon as the context's
    policy (PROTOCOL.md section 5, "Tiers and policies"), which enforces it.

    mellea's fields: filesystem_read_roots / filesystem_write_roots (None:
    unrestricted; Landlock), network_access (False: socket() fails with
    PermissionError), package_installation (declaration only), subprocess_execution
    (False: fork/exec fail with PermissionError), env_var_access (False:
    the code sees only PATH; True: still never the daemon's own variables),
    timeout (seconds; the cap of every run), stdout_max_bytes /
    stderr_max_bytes (None: no cut; applied by the client with mellea's
    marker), artifact_export_paths (accepted, not used), packages (installed
    into the context by the daemon).

    ctxd's fields (None: not set): env (names of further daemon variables
    passed through), memory_bytes (RLIMIT_AS), max_processes (pids cgroup),
    cpu_seconds (per run), file_size_bytes (RLIMIT_FSIZE), disk_bytes (the
    private directory's size: a write past it raises OSError ENOSPC; a
    sandbox's /tmp too), allowed_imports
    (None: any; []: none; make_execution_environment's allowed_imports
    argument wins when both are given)."""

    filesystem_read_roots: Optional[List[Path]] = None
    filesystem_write_roots: Optional[List[Path]] = None
    network_access: bool = False
    package_installation: bool = False
    subprocess_execution: bool = False
    env_var_access: bool = True
    timeout: int = 30
    stdout_max_bytes: Optional[int] = None
    stderr_max_bytes: Optional[int] = None
    artifact_export_paths: List[Path] = field(default_factory=list)
    packages: List[str] = field(default_factory=list)
    # ctxd's own fields
    env: Optional[List[str]] = None
    memory_bytes: Optional[int] = None
    max_processes: Optional[int] = None
    cpu_seconds: Optional[float] = None
    file_size_bytes: Optional[int] = None
    disk_bytes: Optional[int] = None
    allowed_imports: Optional[List[str]] = None

    # mellea's honest-gap flags, as they hold for mellea's default tier
    # ("local_unsafe", ctxd's "unsafe"): True = enforced at run time there.
    # ctxd's "local" and "sandbox"/"docker" tiers enforce more: an
    # environment's enforced_capabilities() says what its tier enforces.
    ENFORCED_filesystem_read_roots: ClassVar[bool] = False
    ENFORCED_filesystem_write_roots: ClassVar[bool] = False
    ENFORCED_network_access: ClassVar[bool] = False
    ENFORCED_package_installation: ClassVar[bool] = False
    ENFORCED_subprocess_execution: ClassVar[bool] = False
    ENFORCED_env_var_access: ClassVar[bool] = False
    ENFORCED_timeout: ClassVar[bool] = True
    ENFORCED_stdout_max_bytes: ClassVar[bool] = True
    ENFORCED_stderr_max_bytes: ClassVar[bool] = True
    ENFORCED_artifact_export_paths: ClassVar[bool] = True
    ENFORCED_packages: ClassVar[bool] = True

    def __post_init__(self) -> None:
        """mellea's construction-time warning for path roots, in its words
        (mellea users' filters keep working), and what ctxd adds: they are
        only declared on the unsafe tiers, enforced on "local" and
        "docker"."""
        named = [k for k in ("filesystem_read_roots", "filesystem_write_roots")
                 if getattr(self, k) is not None]
        if named:
            lines = "\n".join(f"  {k!r}: declared but not enforced at runtime" for k in named)
            _warn("CapabilityPolicy was constructed with path-restriction fields that are "
                  "declared but not enforced at runtime \u2014 the declared paths will not "
                  f"restrict actual filesystem access:\n{lines}\nThese fields are "
                  "informational only. Check CapabilityPolicy.ENFORCED_* class attributes to "
                  "see what is actively enforced. Use a 'docker' tier for stronger isolation. "
                  "(ctxd: this holds on the 'local_unsafe' tier; the 'local' and 'docker' "
                  "tiers enforce them.)")

    def unenforced_capabilities(self) -> List[str]:
        """The fields whose ENFORCED_* flag is False (declared only on
        mellea's default tier), subclasses' flags winning."""
        return [k for k, v in _enforced_flags(type(self)) if not v]

    def enforced_capabilities(self) -> List[str]:
        """The fields whose ENFORCED_* flag is True."""
        return [k for k, v in _enforced_flags(type(self)) if v]

    def to_ctxd(self) -> Dict[str, Any]:
        """The ctx.create `policy` map: every field the daemon knows, None
        values left out (stdout/stderr_max_bytes, package_installation and
        artifact_export_paths are the client's)."""
        p: Dict[str, Any] = {}
        if self.timeout is not None and self.timeout > 0:
            p["timeout"] = self.timeout
        p["network_access"] = bool(self.network_access)
        p["subprocess_execution"] = bool(self.subprocess_execution)
        p["env_var_access"] = bool(self.env_var_access)
        if self.env is not None:
            p["env"] = [str(x) for x in self.env]
        for k in ("filesystem_read_roots", "filesystem_write_roots"):
            v = getattr(self, k)
            if v is not None:
                p[k] = [os.path.abspath(os.fspath(x)) for x in v]
        for k in ("memory_bytes", "max_processes", "file_size_bytes", "disk_bytes"):
            v = getattr(self, k)
            if v is not None:
                p[k] = int(v)
        if self.cpu_seconds is not None:
            p["cpu_seconds"] = float(self.cpu_seconds)
        if self.allowed_imports is not None:
            p["allowed_imports"] = list(self.allowed_imports)
        if self.packages:
            p["packages"] = list(self.packages)
        return p


def _copy(policy: "CapabilityPolicy", **changes: Any) -> "CapabilityPolicy":
    """dataclasses.replace without warning again (the caller saw it when
    the policy was made)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="CapabilityPolicy was constructed",
                                category=UserWarning)
        return dataclasses.replace(policy, **changes)


def _enforced_flags(cls: type) -> List[Tuple[str, bool]]:
    """The ENFORCED_<field> flags along the MRO, the most derived winning,
    in declaration order."""
    seen: Dict[str, bool] = {}
    for klass in reversed(cls.__mro__):
        for k, v in vars(klass).items():
            if k.startswith("ENFORCED_") and isinstance(v, bool):
                seen[k[len("ENFORCED_"):]] = v
    return list(seen.items())


# mellea's tier defaults (execution_policy.py)
LOCAL_POLICY = CapabilityPolicy(network_access=False, package_installation=False,
                                subprocess_execution=True, env_var_access=True, timeout=30)
DOCKER_POLICY = CapabilityPolicy(network_access=False, package_installation=True,
                                 subprocess_execution=True, env_var_access=True, timeout=60)

# What each tier offers (mellea's COMPATIBILITY_MATRIX keys), as ctxd serves
# it: every executing tier has copy_in/copy_out (file.put/file.get) and
# package installation; "docker_isolation" is ctxd's sandbox tier (Linux
# namespaces, seccomp, cgroups); "policy_applied" is mellea's (False for the
# unsafe tiers, whose policy is only declared).
def _tier_row(execute: bool, policy: bool, isolated: bool) -> Dict[str, bool]:
    """One COMPATIBILITY_MATRIX row."""
    return {"execute_code": execute, "timeout_enforcement": execute,
            "import_allowlist": True, "policy_applied": policy, "copy_in": execute,
            "copy_out": execute, "package_installation": execute,
            "docker_isolation": isolated}


COMPATIBILITY_MATRIX: Dict[str, Dict[str, bool]] = {
    "static": _tier_row(False, False, False),
    "local_unsafe": _tier_row(True, False, False),
    "local": _tier_row(True, True, False),
    "docker_unsafe": _tier_row(True, False, True),
    "docker": _tier_row(True, True, True),
}


def _restricts(field_name: str, value: Any) -> bool:
    """Whether a ctxd policy value restricts anything (the daemon refuses a
    restricting value in a tier that does not enforce the field)."""
    if field_name in ("network_access", "subprocess_execution", "env_var_access"):
        return value is False
    if field_name == "timeout":
        return value is not None and value > 0
    if field_name == "packages":
        return bool(value)
    return value is not None


def _truncate(text: str, max_bytes: Optional[int]) -> str:
    """mellea's truncation: at most max_bytes UTF-8 bytes, the marker
    included."""
    if max_bytes is None:
        return text
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    if max_bytes < len(_TRUNCATION_MARKER):
        return data[:max_bytes].decode(errors="ignore")
    return data[:max_bytes - len(_TRUNCATION_MARKER)].decode(errors="ignore") + _TRUNCATION_MARKER


# ---- results -----------------------------------------------------------------


@dataclass
class Artifact:
    """A file a run created or changed: its host path, size and MIME type
    (mellea's Artifact)."""

    path: Path
    size_bytes: Optional[int] = None
    content_type: Optional[str] = None


@dataclass
class ExecutionResult:
    """mellea's ExecutionResult. success: the code ran to the end (exit code
    0) or, in the static tier, passed the analysis. stdout/stderr: None when
    nothing ran; stderr holds the traceback of an uncaught exception, as a
    script's would. skipped/skip_message: the code was not run, and why.
    analysis_result: the static analysis (a dict, see the module doc).
    exit_code: 0, SystemExit's code, 1 for an uncaught exception, the
    worker's exit code or -signal when it died; None when nothing ran or the
    run timed out. timed_out: stopped at its timeout (stdout/stderr keep the
    partial output). artifacts: files the run wrote. execution_mode: the tier
    name. working_directory: the directory the code ran in (None: the
    daemon's default).

    ctxd's fields: status (the daemon's `done` status: ok, error, timeout,
    interrupted, died, aborted, shutdown; None when nothing ran), result (the
    repr of a trailing expression's value), state_lost (the interpreter's
    globals were lost: it was killed or died)."""

    success: bool
    stdout: Optional[str]
    stderr: Optional[str]
    skipped: bool = False
    skip_message: Optional[str] = None
    analysis_result: Optional[Any] = None
    exit_code: Optional[int] = None
    timed_out: bool = False
    artifacts: List[Artifact] = field(default_factory=list)
    execution_mode: str = "unknown"
    working_directory: Optional[str] = None
    # ctxd's
    status: Optional[str] = None
    result: Optional[str] = None
    state_lost: bool = False

    def to_validationresult_reason(self) -> str:
        """mellea's reason string: the skip message if the run was skipped;
        for a timed-out run "Execution timed out." and the partial output;
        stdout on success; stderr on failure."""
        if self.timed_out:
            parts = [self.skip_message or "Execution timed out."]
            if self.stdout:
                parts.append("Partial stdout:\n" + self.stdout)
            if self.stderr:
                parts.append("Partial stderr:\n" + self.stderr)
            return "\n".join(parts)
        if self.skip_message is not None:
            return self.skip_message
        assert self.stdout is not None and self.stderr is not None, \
            "a result that was not skipped has stdout and stderr"
        return self.stdout if self.success else self.stderr

    def to_dict(self) -> Dict[str, Any]:
        """The result as JSON-able values (artifact paths as str; the
        analysis as it is)."""
        d = dataclasses.asdict(self)
        d["artifacts"] = [{"path": str(a.path), "size_bytes": a.size_bytes,
                           "content_type": a.content_type} for a in self.artifacts]
        return d


# ---- environments ------------------------------------------------------------------


class _Owned:
    """What an environment owns, released by close() or its finalizer (which
    must not refer to the environment itself)."""

    def __init__(self) -> None:
        self.client: Optional[Client] = None
        self.own_client = False
        self.contexts: List[str] = []
        self.tmpdirs: List[str] = []

    def release(self) -> None:
        c, self.client = self.client, None
        ctxs, self.contexts = self.contexts, []
        if c is not None:
            for name in ctxs:
                try:
                    c.delete_context(name)
                except CtxdError:
                    pass  # already gone, or the daemon is
            if self.own_client:
                c.close()
        dirs, self.tmpdirs = self.tmpdirs, []
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


class ExecutionEnvironment:
    """An environment executing Python code in one ctxd context of the given
    tier (mellea's ExecutionEnvironment; make one with
    make_execution_environment). The context is created on the first
    execute() (or open()) and deleted by close(), by leaving a `with` block,
    or when the environment is garbage-collected.

    allowed_imports: top-level modules the code may import (None: any).
    policy: the CapabilityPolicy (None: none, as mellea's unsafe tiers).
    working_directory: the directory the code runs in (the context's cwd;
    None: the daemon's). Keyword-only, ctxd's: endpoint (else
    $CTXD_ENDPOINT, else the default socket) or client (a ctxd.Client to
    share; not closed here), stateful (False: a fresh interpreter for each
    run), strip_output (mellea strips stdout/stderr), env (variables added to
    the context's environment), artifacts (report the files each run writes
    in the working directory; default: when working_directory is given)."""

    def __init__(self, tier: str, policy: Optional[CapabilityPolicy] = None,
                 allowed_imports: Optional[Sequence[str]] = None,
                 working_directory: Optional[Union[str, os.PathLike]] = None, *,
                 endpoint: Optional[str] = None, client: Optional[Client] = None,
                 stateful: bool = True, strip_output: bool = True,
                 env: Optional[Dict[str, str]] = None,
                 artifacts: Optional[bool] = None) -> None:
        if tier not in TIERS:
            raise ValueError(f"Unknown execution tier {tier!r}: expected one of "
                             + ", ".join(repr(t) for t in TIERS))
        self.tier = tier
        self.ctxd_tier = TIERS[tier]
        self.policy = policy
        self.allowed_imports = list(allowed_imports) if allowed_imports is not None else None
        if self.allowed_imports is None and policy is not None:
            self.allowed_imports = (list(policy.allowed_imports)
                                    if policy.allowed_imports is not None else None)
        self.working_directory = (os.path.abspath(os.fspath(working_directory))
                                  if working_directory is not None else None)
        self.stateful = stateful
        self.strip_output = strip_output
        self.artifacts = (self.working_directory is not None) if artifacts is None else artifacts
        self._env = dict(env) if env else None
        self._endpoint = endpoint
        self._owned = _Owned()
        if client is not None:
            self._owned.client = client
        self._finalizer = weakref.finalize(self, self._owned.release)
        self._lock = threading.RLock()
        self._ctx: Optional[str] = None
        self._cwd: Optional[str] = None
        self._check_ctx: Optional[str] = None
        self._runs = 0
        self._closed = False
        self._unenforced: List[str] = []
        # warn (mellea's wording) about a caller's policy the tier only declares
        self._warn_declared = True
        self.installed: List[Dict[str, Any]] = []
        self.installed_packages: set = set()
        self.failed_packages: set = set()

    # ---- lifecycle -----------------------------------------------------------

    @property
    def client(self) -> Client:
        """The ctxd client (connected on first use)."""
        with self._lock:
            if self._closed:
                raise CtxdError("the environment is closed", "closed")
            if self._owned.client is None:
                self._owned.client = Client(self._endpoint)
                self._owned.own_client = True
            return self._owned.client

    @property
    def context(self) -> Optional[str]:
        """The name of the ctxd context (None until it is created)."""
        return self._ctx

    def open(self) -> "ExecutionEnvironment":
        """Creates the context now (execute() does it on first use).
        Raises RefusedError when the daemon refuses the tier or the policy
        (e.g. `bad_field` naming a field the tier cannot enforce),
        PackageInstallError when it refuses or fails the packages,
        UnreachableError without a daemon."""
        with self._lock:
            if self._ctx is None:
                self._create()
        return self

    def close(self) -> None:
        """Deletes the context (and the import-check context), closes the
        client if this environment opened it. Idempotent."""
        with self._lock:
            self._closed = True
            self._ctx = self._check_ctx = None
        self._finalizer()

    def __enter__(self) -> "ExecutionEnvironment":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ctxd_policy(self) -> Dict[str, Any]:
        """The policy sent to the daemon, for the run context."""
        if self.ctxd_tier == "static":
            return {} if self.allowed_imports is None else {"allowed_imports": self.allowed_imports}
        pol = self.policy.to_ctxd() if self.policy is not None else {}
        if self.allowed_imports is not None:
            pol["allowed_imports"] = list(self.allowed_imports)
        if self.ctxd_tier == "unsafe":
            # mellea's unsafe tiers declare their policy and enforce what
            # they can: send what the daemon enforces here, name the rest.
            # The allowlist is checked before each run (static analysis).
            enforced = set(self.client.hello_info.tiers.get("unsafe", ("timeout",)))
            pol.pop("allowed_imports", None)
            unenforced = [k for k, v in pol.items() if k not in enforced and _restricts(k, v)]
            if self._warn_declared and self.policy is not None:
                _warn_declared(self.policy, self.tier, unenforced)
            self._unenforced = unenforced
            pol = {k: v for k, v in pol.items() if k in enforced or k == "packages"}
        return pol

    def _create(self) -> None:
        client = self.client
        policy = self._ctxd_policy()
        cwd = self.working_directory if self.ctxd_tier != "static" else None
        name = f"mellea-{self.ctxd_tier}-{uuid.uuid4().hex[:12]}"
        pkgs = [p for p in policy.pop("packages", []) if p not in self.installed_packages]
        info = client.create_context(name, cwd=cwd, env=self._env, tier=self.tier,
                                     policy=policy)
        self._owned.contexts.append(info.name)
        if pkgs:
            self._install(info.name, pkgs, policy)
        self._ctx, self._cwd = info.name, info.cwd or None
        if self.allowed_imports is not None and self.ctxd_tier != "static":
            chk = client.create_context(f"{name}-imports", tier="static",
                                        policy={"allowed_imports": self.allowed_imports})
            self._owned.contexts.append(chk.name)
            self._check_ctx = chk.name

    def _install(self, ctx: str, pkgs: List[str], policy: Dict[str, Any]) -> None:
        """Makes pkgs importable in the new context ctx: a requirement the
        context already imports at a satisfying version counts as installed
        (self.installed says so: "present": its version); only the rest goes
        to the daemon's pip.install. With an import allowlist the check
        (which imports importlib.metadata) runs in a sibling context of the
        same tier and policy, allowlist aside, deleted right after. On
        failure the context is deleted and PackageInstallError names the
        packages and quotes the daemon."""
        failed = [p for p in pkgs if p in self.failed_packages]
        probe: Optional[str] = None
        try:
            if failed:
                raise RefusedError("installation failed earlier (failed_packages)", "install")
            if "allowed_imports" in policy:
                probe = self.client.create_context(
                    f"{ctx}-probe", tier=self.tier,
                    policy={k: v for k, v in policy.items() if k != "allowed_imports"}).name
            self.installed = _reqs.install(self.client, ctx, pkgs, probe=probe)
        except CtxdError as e:
            self.failed_packages.update(pkgs)
            try:
                self.client.delete_context(ctx)
                self._owned.contexts.remove(ctx)
            except (CtxdError, ValueError):
                pass
            raise PackageInstallError(
                f"Package installation failed: {', '.join(pkgs)} (ctxd: {e.message or e})",
                e.code or "install") from e
        finally:
            if probe is not None:
                try:
                    self.client.delete_context(probe)
                except CtxdError:
                    pass  # already gone, or the daemon is
        self.installed_packages.update(pkgs)

    def enforced_capabilities(self) -> List[str]:
        """The policy fields the daemon enforces in this environment's tier
        (hello's `tiers`; empty for a tier the daemon does not offer)."""
        return list(self.client.hello_info.tiers.get(self.ctxd_tier, []))

    def unenforced_capabilities(self) -> List[str]:
        """The restricting policy fields this environment only declares
        (unsafe tiers; known once the context exists): they were not sent to
        the daemon."""
        return list(self._unenforced)

    # ---- execution -------------------------------------------------------------

    def _resolve_timeout(self, timeout: Optional[float]) -> float:
        """The run's timeout: the argument, else the policy's, else the
        tier's default; never past the policy's (the daemon caps it)."""
        cap = self.policy.timeout if self.policy is not None and self.policy.timeout else None
        if timeout is None:
            return cap if cap is not None else _DEFAULT_TIMEOUT[self.ctxd_tier]
        return min(timeout, cap) if cap is not None and timeout > 0 else timeout

    def _result(self, **kw: Any) -> ExecutionResult:
        kw.setdefault("execution_mode", self.tier)
        # mellea's: the directory asked for, None for the default one
        kw.setdefault("working_directory", self.working_directory)
        return ExecutionResult(**kw)

    def execute(self, code: str, timeout: Optional[float] = None) -> ExecutionResult:
        """Runs code (static tier: analyses it) and returns how it went.

        timeout: seconds (None: the policy's, else 30, 60 for the docker
        tiers); the policy's timeout is also a cap the daemon applies to
        every run. Raises CtxdError subclasses for failures of ctxd itself
        (no daemon, a refused policy), never for failures of the code."""
        return self._execute(code, timeout)

    def _execute(self, code: str, timeout: Optional[float], *,
                 artifacts: Optional[bool] = None) -> ExecutionResult:
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        with self._lock:
            if self._ctx is None:
                self._create()
            ctx, check = self._ctx, self._check_ctx
            if self.ctxd_tier == "static":
                return self._analyse(ctx, code)
            if check is not None:
                skipped = self._precheck(check, code)
                if skipped is not None:
                    return skipped
            if not self.stateful and self._runs:
                self.client.restart_context(ctx)
            self._runs += 1
            want = self.artifacts if artifacts is None else artifacts
            t = self._resolve_timeout(timeout)
            r = self.client.execute(code, ctx, timeout=t, artifacts=want)
            return self._from_run(r, t)

    def _analysis(self, r: ExecResult) -> Dict[str, Any]:
        raw = (r.data or {}).get("application/vnd.ctxd.analysis+json")
        if raw is None:
            raise CtxdError(f"the static tier returned no analysis (status {r.status}: "
                            f"{r.error or r.cause})", "protocol")
        return json.loads(raw)

    def _analyse(self, ctx: str, code: str) -> ExecutionResult:
        a = self._analysis(self.client.execute(code, ctx))
        se = a.get("syntax_error")
        if se:
            msg = (f"Parse failed: {se.get('message')} (line {se.get('line')}, "
                   f"column {se.get('col')}).")
            return self._result(success=False, stdout=None, stderr=None, skipped=True,
                                skip_message=msg, analysis_result=a, working_directory=None)
        if a.get("disallowed"):
            return self._result(success=False, stdout=None, stderr=None, skipped=True,
                                skip_message="Unauthorized imports detected: "
                                + ", ".join(a["disallowed"]),
                                analysis_result=a, working_directory=None)
        imports = ", ".join(a.get("imports") or []) or "none"
        return self._result(success=True, stdout=None, stderr=None, skipped=True,
                            skip_message=f"Code parses successfully (imports: {imports}); "
                            "static analysis only, the code was not executed.",
                            analysis_result=a, working_directory=None)

    def _precheck(self, check: str, code: str) -> Optional[ExecutionResult]:
        """mellea's import pre-check, by the daemon's static analysis: a
        skipped result when the code imports a module outside the list.
        Dynamic imports count only on tiers without a runtime check."""
        a = self._analysis(self.client.execute(code, check))
        bad = [m for m in a.get("disallowed") or []
               if m != "<dynamic import>" or self.ctxd_tier == "unsafe"]
        if not bad:
            return None
        return self._result(success=False, stdout=None, stderr=None, skipped=True,
                            skip_message=f"Unauthorized imports detected: {', '.join(bad)}",
                            analysis_result=a)

    def _from_run(self, r: ExecResult, timeout: float) -> ExecutionResult:
        out, err = r.stdout, r.stderr
        notes: List[str] = []
        exit_code: Optional[int] = None
        success = False
        timed_out = False
        if r.exit_code is not None:  # sys.exit(): the status a script exits with
            exit_code = r.exit_code
            success = exit_code == 0
        elif r.status == "ok":
            success, exit_code = True, 0
        elif r.status == "error" and r.error is not None and r.error.ename == "SystemExit":
            # as a script: sys.exit(n) exits n, sys.exit() 0, sys.exit("msg") 1
            v = r.error.evalue.strip()
            if v in ("", "None"):
                exit_code = 0
            else:
                try:
                    exit_code = int(v)
                except ValueError:
                    exit_code = 1
                    notes.append(v)
            success = exit_code == 0
        elif r.status == "error":
            exit_code = 1
            if r.error is not None:
                notes.append(str(r.error))
        elif r.status == "timeout":
            timed_out = True
            if r.error is not None:
                notes.append(str(r.error))
            notes.append(f"Execution timed out after {timeout:g} s"
                         + (f" ({r.cause})" if r.cause else "")
                         + ("; the interpreter was restarted, its globals are lost."
                            if r.state_lost else "; the context's globals were kept."))
        elif r.status == "interrupted":
            exit_code = -2
            if r.error is not None:
                notes.append(str(r.error))
        elif r.status == "died":
            exit_code = _exit_code_of(r.cause)
            notes.append(f"The interpreter process died: {r.cause}; its globals are lost.")
        else:  # aborted, shutdown
            notes.append(f"ctxd: the run ended {r.status}: {r.cause or 'no cause given'}")
        if r.truncated:
            notes.append(f"ctxd: output past the daemon's max_output was dropped "
                         f"({r.dropped or {}}).")
        if notes:
            if err and not err.endswith("\n"):
                err += "\n"
            err += "\n".join(notes) + "\n"
        if self.strip_output:
            out, err = out.strip(), err.strip()
        if self.policy is not None:
            out = _truncate(out, self.policy.stdout_max_bytes)
            err = _truncate(err, self.policy.stderr_max_bytes)
        skipped = r.status == "aborted" and not r.state_lost
        skip_message = f"Execution aborted: {r.cause}" if skipped else None
        if timed_out:  # as mellea reports it; ctxd keeps the partial output
            skipped, skip_message = True, "Execution timed out."
        return self._result(
            success=success, stdout=out, stderr=err,
            skipped=skipped, skip_message=skip_message,
            exit_code=exit_code, timed_out=timed_out,
            # as mellea: only a successful run's files are artifacts
            artifacts=[self._artifact(a.path, a.size, a.type) for a in r.artifacts]
            if success else [],
            status=r.status, result=r.result, state_lost=r.state_lost)

    def _artifact(self, rel: str, size: int, ctype: str) -> Artifact:
        base = self._cwd or self.working_directory or ""
        return Artifact(Path(base) / rel, size,
                        None if ctype == "application/octet-stream" else ctype)

    # ---- files -----------------------------------------------------------------

    def _rel(self, path: str) -> str:
        """A path in the environment as the daemon's file requests want it:
        relative to the working directory."""
        if os.path.isabs(path):
            base = self._cwd or self.working_directory
            if base is None or os.path.commonpath([base, os.path.abspath(path)]) != base:
                raise ValueError(f"{path!r} is not under the working directory {base!r}")
            return os.path.relpath(os.path.abspath(path), base)
        return path

    def copy_in(self, host_path: Union[str, os.PathLike], container_path: str) -> None:
        """Copies a host file into the environment: container_path is relative
        to the working directory (or absolute beneath it) (ctxd's file.put)."""
        if self.ctxd_tier == "static":
            raise NotImplementedError("the static tier does not support copy_in")
        self.open()
        self.client.put_file(self._ctx, self._rel(container_path), os.fspath(host_path))

    def copy_out(self, container_path: str, host_path: Union[str, os.PathLike]) -> None:
        """Copies a file out of the environment to host_path (ctxd's file.get)."""
        if self.ctxd_tier == "static":
            raise NotImplementedError("the static tier does not support copy_out")
        self.open()
        self.client.get_file(self._ctx, self._rel(container_path), os.fspath(host_path))


class StaticAnalysisEnvironment(ExecutionEnvironment):
    """mellea's StaticAnalysisEnvironment: parses and checks the imports of
    the code, never runs it (ctxd's static tier)."""

    def __init__(self, allowed_imports: Optional[Sequence[str]] = None,
                 policy: Optional[CapabilityPolicy] = None,
                 working_directory: Optional[Union[str, os.PathLike]] = None,
                 **ctxd_options: Any) -> None:
        super().__init__("static", policy, allowed_imports, working_directory, **ctxd_options)


class UnsafeEnvironment(ExecutionEnvironment):
    """mellea's UnsafeEnvironment: tier "local" when a policy is given, else
    "local_unsafe" (tier= overrides). installed_packages / failed_packages:
    sets shared across environments, as mellea's install caches."""

    _TIERS: Tuple[str, str] = ("local", "local_unsafe")

    def __init__(self, allowed_imports: Optional[Sequence[str]] = None,
                 policy: Optional[CapabilityPolicy] = None,
                 working_directory: Optional[Union[str, os.PathLike]] = None,
                 installed_packages: Optional[set] = None,
                 failed_packages: Optional[set] = None, tier: Optional[str] = None,
                 **ctxd_options: Any) -> None:
        if tier is None:
            tier = self._TIERS[0] if policy is not None else self._TIERS[1]
        super().__init__(tier, policy, allowed_imports, working_directory, **ctxd_options)
        if installed_packages is not None:
            self.installed_packages = installed_packages
        if failed_packages is not None:
            self.failed_packages = failed_packages


class LLMSandboxEnvironment(UnsafeEnvironment):
    """mellea's LLMSandboxEnvironment: tier "docker" when a policy is given,
    else "docker_unsafe": ctxd's sandbox tier (namespaces, seccomp, cgroups;
    no Docker engine). export_dir is accepted for compatibility (artifacts
    are copied by python_tool's artifact_dir)."""

    _TIERS = ("docker", "docker_unsafe")

    def __init__(self, allowed_imports: Optional[Sequence[str]] = None,
                 policy: Optional[CapabilityPolicy] = None,
                 working_directory: Optional[Union[str, os.PathLike]] = None,
                 installed_packages: Optional[set] = None,
                 failed_packages: Optional[set] = None, tier: Optional[str] = None,
                 export_dir: Optional[Union[str, os.PathLike]] = None,
                 **ctxd_options: Any) -> None:
        super().__init__(allowed_imports, policy, working_directory, installed_packages,
                         failed_packages, tier, **ctxd_options)
        self.export_dir = (None if export_dir is None or os.fspath(export_dir) in ("", ".")
                           else Path(export_dir))


def code_interpreter(code: str) -> ExecutionResult:
    """mellea's deprecated code_interpreter: runs code once in tier
    "docker_unsafe" (ctxd's sandbox), in a context deleted afterwards."""
    warnings.warn("code_interpreter() is deprecated and will be removed in a future release. "
                  "Use python_tool(tier='docker_unsafe') instead.", DeprecationWarning,
                  stacklevel=2)
    with make_execution_environment("docker_unsafe") as env:
        return env.execute(code)


def local_code_interpreter(code: str) -> ExecutionResult:
    """mellea's deprecated local_code_interpreter: runs code once in tier
    "local_unsafe" with a 60 s timeout, in a context deleted afterwards."""
    warnings.warn("local_code_interpreter() is deprecated and will be removed in a future "
                  "release. Use python_tool(tier='local_unsafe') instead.", DeprecationWarning,
                  stacklevel=2)
    with make_execution_environment("local_unsafe") as env:
        return env.execute(code, timeout=60)


def _exit_code_of(cause: Optional[str]) -> Optional[int]:
    """A died run's exit code from its cause: 'exited with code N' -> N,
    'killed by signal N (...)' -> -N, as subprocess reports them."""
    import re
    if not cause:
        return None
    m = re.search(r"exited with code (-?\d+)", cause)
    if m:
        return int(m.group(1))
    m = re.search(r"signal (\d+)", cause)
    if m:
        return -int(m.group(1))
    return None


def make_execution_environment(tier: ExecutionTier, policy: Optional[CapabilityPolicy] = None,
                               allowed_imports: Optional[Sequence[str]] = None,
                               working_directory: Optional[Union[str, os.PathLike]] = None,
                               _install_cache: Optional[set] = None,
                               _failed_cache: Optional[set] = None,
                               **ctxd_options: Any) -> ExecutionEnvironment:
    """mellea's make_execution_environment: an ExecutionEnvironment for tier
    ("static", "local_unsafe", "local", "docker_unsafe", "docker", or ctxd's
    "unsafe", "sandbox"). policy None gives the tier's default (LOCAL_POLICY
    for "local", DOCKER_POLICY for "docker" and "sandbox", none for the
    unsafe tiers and "static"). allowed_imports: the import allowlist (None:
    any). working_directory: the code's working directory (all executing
    tiers; ignored by "static"). ctxd_options: the keyword-only options of
    ExecutionEnvironment (endpoint, client, stateful, strip_output, env,
    artifacts). Raises ValueError for an unknown tier. Nothing is contacted
    until the first execute() (or open())."""
    if tier not in TIERS:
        raise ValueError(f"Unknown execution tier {tier!r}: expected one of "
                         + ", ".join(repr(t) for t in TIERS))
    if policy is None:
        if tier == "local":
            policy = LOCAL_POLICY
        elif tier in ("docker", "sandbox"):
            policy = DOCKER_POLICY
    if policy is not None:
        policy = _copy(policy)  # the environment keeps its own copy
    if TIERS[tier] == "static":
        return StaticAnalysisEnvironment(allowed_imports, policy, working_directory,
                                         **ctxd_options)
    cls = LLMSandboxEnvironment if TIERS[tier] == "sandbox" else UnsafeEnvironment
    return cls(allowed_imports, policy, working_directory, _install_cache, _failed_cache,
               tier, **ctxd_options)


_EXPORT_MAX = 16 << 20  # bytes of one artifact_export_paths file read through a run
_SNAPSHOT_MAX = 10000   # files of artifact_dir looked at for changes


def _snapshot_entry(path: Path) -> Optional[Tuple[int, int]]:
    """A file's (mtime_ns, size), None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _snapshot(root: Optional[Path]) -> Dict[str, Tuple[int, int]]:
    """The regular files under root (relative path -> (mtime_ns, size)),
    at most _SNAPSHOT_MAX of them, symbolic links not followed."""
    out: Dict[str, Tuple[int, int]] = {}
    if root is None or not root.is_dir():
        return out
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            full = Path(dirpath) / f
            if full.is_symlink() or not full.is_file():
                continue
            e = _snapshot_entry(full)
            if e is not None:
                out[full.relative_to(root).as_posix()] = e
            if len(out) >= _SNAPSHOT_MAX:
                return out
    return out


# ---- python_tool -------------------------------------------------------------------

_TOOL_DESCRIPTION = (
    "Execute Python code and return its stdout, stderr and outcome. "
    "The interpreter is persistent: variables, functions and imports defined in one call "
    "remain available in the next. Print what you need to see. Files written to the "
    "current directory are returned as artifacts.")


def _validate_packages(packages: Sequence[str]) -> List[str]:
    out: List[str] = []
    for p in packages:
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"package specifiers must be non-empty strings, got {p!r}")
        if p.lstrip().startswith("-"):
            raise ValueError(f"flag-style package specifier {p!r} is not allowed")
        if p not in out:
            out.append(p)
    return out


class PythonTool:
    """A Python execution tool for tool-calling models (mellea's python_tool
    returns a MelleaTool; this has the same name / run / as_json_tool).

    Call it with code (tool(code) or tool.run(code=...)): an
    ExecutionResult. invoke(arguments) takes a model's tool-call arguments
    (a dict or its JSON text) and returns a JSON str for the model.
    as_json_tool: the OpenAI-style function schema ({"type": "function",
    "function": {name, description, parameters}}); parameters requires the
    str `code`. close() (or a with block, or garbage collection) deletes the
    tool's context (and with it its private working directory)."""

    def __init__(self, env: ExecutionEnvironment, name: str, description: str,
                 artifact_dir: Optional[Path]) -> None:
        self.name = name
        self.description = description
        self.environment = env
        self.artifact_dir = artifact_dir

    @property
    def parameters(self) -> Dict[str, Any]:
        """The JSON schema of the arguments."""
        return {
            "type": "object",
            "properties": {
                "code": {"type": "string",
                         "description": "The Python source code to execute."},
            },
            "required": ["code"],
        }

    @property
    def as_json_tool(self) -> Dict[str, Any]:
        """The tool as an OpenAI-compatible function definition (a fresh
        copy)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": self.parameters}}

    def run(self, code: str) -> ExecutionResult:
        """Runs code (mellea's run_python). A successful run's artifacts:
        the files it wrote in the context's directory (copied into
        artifact_dir when there is one), the files it wrote into
        artifact_dir itself (by absolute path), and the policy's
        artifact_export_paths (copied into artifact_dir). A failed or
        timed-out run has none, and nothing is copied."""
        env = self.environment
        before = _snapshot(self.artifact_dir) if self.artifact_dir is not None else {}
        res = env._execute(code, None, artifacts=env.ctxd_tier != "static")
        if res.working_directory is None and res.stdout is not None:
            res.working_directory = env._cwd  # the tool's own directory, where it ran
        if not res.success or res.skipped:
            res.artifacts = []
            return res
        if self.artifact_dir is not None:
            copied = self._export(res.artifacts)
            exported = self._export_paths()
            seen = {a.path for a in copied + exported}
            direct = [Artifact(self.artifact_dir / rel, size, mimetypes.guess_type(rel)[0])
                      for rel, (_, size) in sorted(_snapshot(self.artifact_dir).items())
                      if before.get(rel) != _snapshot_entry(self.artifact_dir / rel)
                      and self.artifact_dir / rel not in seen]
            res.artifacts = copied + exported + direct
        return res

    def _export_paths(self) -> List[Artifact]:
        """The policy's artifact_export_paths, copied out of the context into
        artifact_dir (by base name): a path in the context's directory
        through file.get, any other path read by the context itself (so
        the context's view of the filesystem decides, as docker cp does).
        A missing path is skipped."""
        env = self.environment
        pol = env.policy
        if pol is None or not pol.artifact_export_paths or self.artifact_dir is None:
            return []
        out = []
        for p in pol.artifact_export_paths:
            dest = self.artifact_dir / Path(p).name
            try:
                data = self._read_in_context(os.fspath(p))
            except (CtxdError, ValueError):
                continue
            if data is None:
                continue
            dest.write_bytes(data)
            out.append(Artifact(dest, len(data), mimetypes.guess_type(dest.name)[0]))
        return out

    def _read_in_context(self, path: str) -> Optional[bytes]:
        """A file's bytes as the context sees it (None: no such regular
        file; at most _EXPORT_MAX bytes)."""
        env = self.environment
        base = env._cwd or env.working_directory
        full = path if os.path.isabs(path) else os.path.join(base or "", path)
        if base and os.path.commonpath([base, os.path.abspath(full)]) == base:
            try:
                return env.client.get_file(env.context, os.path.relpath(full, base))
            except RefusedError:
                return None
        src = (f"import base64 as _b, os as _o\n_p = {full!r}\n"
               f"if _o.path.isfile(_p) and _o.path.getsize(_p) <= {_EXPORT_MAX}:\n"
               "    print('@@ctxd-file@@', _b.b64encode(open(_p, 'rb').read()).decode())\n")
        r = env.client.execute(f"exec({src!r}, {{}})", env.context, silent=True, timeout=60)
        for line in r.stdout.splitlines():
            if line.startswith("@@ctxd-file@@ "):
                return base64.b64decode(line.split(" ", 1)[1])
        return None

    __call__ = run

    def _export(self, artifacts: List[Artifact]) -> List[Artifact]:
        """Copies the run's files out of the context (file.get) into
        artifact_dir, keeping their relative paths."""
        env = self.environment
        base = Path(env._cwd or env.working_directory or "")
        assert self.artifact_dir is not None
        out = []
        for a in artifacts:
            rel = a.path.relative_to(base) if a.path.is_absolute() else a.path
            dest = self.artifact_dir / rel
            if a.path.is_absolute() and dest == a.path:
                out.append(a)  # the context works in artifact_dir itself
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                size = env.client.get_file(env.context, rel.as_posix(), str(dest))
            except RefusedError:
                # gone since the run, or no longer a regular file
                dest.unlink(missing_ok=True)
                continue
            out.append(Artifact(dest, size, a.content_type or mimetypes.guess_type(dest.name)[0]))
        return out

    def invoke(self, arguments: Union[str, Dict[str, Any]]) -> str:
        """Runs a model's tool call: arguments {"code": ...} (a dict or JSON
        text); returns the result as JSON text."""
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        code = args.get("code")
        if not isinstance(code, str):
            return json.dumps({"success": False, "skipped": True,
                               "skip_message": "the tool call has no str 'code' argument"})
        return json.dumps(self.run(code).to_dict(), default=str)

    def close(self) -> None:
        """Deletes the tool's context (and its private working directory)."""
        self.environment.close()

    def __enter__(self) -> "PythonTool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PythonTool {self.name!r} tier={self.environment.tier!r}>"


def python_tool(tier: Optional[ExecutionTier] = None, packages: Optional[Sequence[str]] = None,
                artifact_dir: Optional[Union[str, os.PathLike]] = None,
                policy: Optional[CapabilityPolicy] = None,
                allowed_imports: Optional[Sequence[str]] = None, name: str = "python",
                suppress_agg: bool = False, **ctxd_options: Any) -> PythonTool:
    """mellea's python_tool: a tool running model-written Python in a ctxd
    context of the given tier (None: "local_unsafe", with mellea's
    UserWarning).

    packages: made importable in the context: those it already imports at
    a satisfying version count as installed, the rest go to the daemon's
    pip.install (tool.environment.installed reports both); specifiers must
    be non-empty and not start with "-" (ValueError); ignored by "static".
    A daemon that refuses or fails them raises PackageInstallError here, at
    construction. artifact_dir: a successful run's new or changed files (in
    the context's working directory) are copied there (file.get), keeping
    their relative paths, and listed in ExecutionResult.artifacts with the
    files the run wrote into artifact_dir itself and the policy's
    artifact_export_paths (copied there); a failed or timed-out run has no
    artifacts. Without artifact_dir the artifacts are the files in the
    working directory itself. Without working_directory the context works
    in the private directory the daemon gives it (owned by the context's
    uid on the confined tiers), removed with the context by close(). suppress_agg: accepted; ctxd never rewrites the code
    (matplotlib's backend is Agg through MPLBACKEND in every context, which
    code may change with matplotlib.use()). ctxd_options: as for
    make_execution_environment (working_directory included).

    The context is created here, so a refused tier, policy or package list
    raises now (RefusedError, PackageInstallError), not at the first call."""
    if tier is None:
        _warn("python_tool() was called without an explicit 'tier' argument and defaulted "
              "to 'local_unsafe', which executes model-generated code as an unrestricted "
              "subprocess with no container isolation or resource limits. "
              "Pass tier='local_unsafe' explicitly to acknowledge this trust decision, "
              "or use tier='local', tier='docker_unsafe', or tier='docker' for a more "
              "constrained environment.")
        tier = "local_unsafe"
    if tier not in TIERS:
        raise ValueError(f"Unknown execution tier {tier!r}: expected one of "
                         + ", ".join(repr(t) for t in TIERS))
    pkgs = _validate_packages(packages or [])
    del suppress_agg  # see the docstring
    if policy is not None and TIERS[tier] == "unsafe":
        _warn_declared(policy, tier, [])
    working_directory = ctxd_options.pop("working_directory", None)
    if policy is None and tier == "local":
        policy = LOCAL_POLICY
    elif policy is None and tier in ("docker", "sandbox"):
        policy = DOCKER_POLICY
    if pkgs and TIERS[tier] != "static":
        base = policy if policy is not None else CapabilityPolicy()
        merged = list(base.packages) + [p for p in pkgs if p not in base.packages]
        policy = _copy(base, packages=merged, package_installation=True)
    env = make_execution_environment(tier, policy, allowed_imports, None, **ctxd_options)
    env._warn_declared = False  # warned above, at the caller's line, if at all
    # Without one, the daemon gives the context a private directory of its
    # own (owned by the context's uid on confined tiers), removed with it.
    if working_directory is not None:
        env.working_directory = os.path.abspath(os.fspath(working_directory))
    adir = None
    if artifact_dir is not None and TIERS[tier] != "static":
        adir = Path(artifact_dir).absolute()
        adir.mkdir(parents=True, exist_ok=True)
    tool = PythonTool(env, name, _TOOL_DESCRIPTION, adir)
    env.open()
    return tool
