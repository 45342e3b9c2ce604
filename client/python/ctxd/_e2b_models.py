"""E2B's results and errors (e2b_code_interpreter.models and its
exceptions) for ctxd.e2b: OutputMessage, ExecutionError, Result, Logs,
Execution, Context, EntryInfo, WriteInfo; SandboxException and its
subclasses."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from ._common import Result as _CtxdResult
from ._e2b_charts import _chart
from ._errors import CtxdError, CtxdTimeoutError, NotFoundError

_CHART_MIME = "application/vnd.e2b.chart+json"
_DATA_MIME = "application/vnd.e2b.data+json"


# ---- errors -------------------------------------------------------------------


class SandboxException(CtxdError):
    """E2B's base error (also a CtxdError)."""


class TimeoutException(SandboxException, CtxdTimeoutError):
    """A run past its timeout (E2B's TimeoutException)."""


class NotFoundException(SandboxException, NotFoundError):
    """An unknown context or file."""


class SandboxNotFoundException(NotFoundException):
    """No live sandbox has that id (Sandbox.connect)."""


class InvalidArgumentException(SandboxException, ValueError):
    """A bad argument: an unsupported language, context with language..."""


def _wrap(e: CtxdError) -> SandboxException:
    """The E2B error for a ctxd one."""
    if isinstance(e, SandboxException):
        return e
    if isinstance(e, NotFoundError) or e.code == "not_found":
        err: SandboxException = NotFoundException(e.message or str(e), e.code)
    elif isinstance(e, CtxdTimeoutError):
        err = TimeoutException(e.message or str(e), e.code)
    else:
        err = SandboxException(e.message or str(e), e.code)
    err.__cause__ = e
    return err


# ---- results ----------------------------------------------------------------------------


@dataclass
class OutputMessage:
    """A chunk of stdout or stderr as it arrived: line (the text), timestamp
    (Unix epoch in nanoseconds, when the client received it), error (True
    for stderr)."""

    line: str
    timestamp: int
    error: bool = False

    def __str__(self) -> str:
        return self.line


class ExecutionError:
    """The exception a cell raised: name, value, traceback (the full text)."""

    def __init__(self, name: str, value: str, traceback: str, **_: Any) -> None:
        self.name, self.value, self.traceback = name, value, traceback

    def to_json(self) -> str:
        """The object as JSON text, as E2B's to_json."""
        return json.dumps({"name": self.name, "value": self.value, "traceback": self.traceback})

    def __repr__(self) -> str:
        return f"ExecutionError(name={self.name!r}, value={self.value!r})"


# MIME type -> Result attribute (E2B's mapping); the rest goes to `extra`
_MIME_FIELDS = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown",
                "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
                "application/pdf": "pdf", "text/latex": "latex", "application/json": "json",
                "application/javascript": "javascript", _DATA_MIME: "data",
                _CHART_MIME: "chart"}
_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json",
            "javascript", "data", "chart")


class Result:
    """One output of a cell (E2B's Result): text, html, markdown, svg, png,
    jpeg, pdf (base64 str), latex, json (decoded), javascript, data (a
    DataFrame's columns), chart (a Chart), is_main_result (the trailing
    expression's value, not a display), extra (other MIME types)."""

    def __init__(self, text: Optional[str] = None, html: Optional[str] = None,
                 markdown: Optional[str] = None, svg: Optional[str] = None,
                 png: Optional[str] = None, jpeg: Optional[str] = None,
                 pdf: Optional[str] = None, latex: Optional[str] = None,
                 json: Optional[Any] = None, javascript: Optional[str] = None,
                 data: Optional[Any] = None, chart: Optional[Any] = None,
                 is_main_result: bool = False, extra: Optional[dict] = None, **_: Any) -> None:
        self.text, self.html, self.markdown, self.svg = text, html, markdown, svg
        self.png, self.jpeg, self.pdf, self.latex = png, jpeg, pdf, latex
        self.json, self.javascript, self.data = json, javascript, data
        self.chart = _chart(chart) if isinstance(chart, dict) else chart
        self.is_main_result = is_main_result
        self.extra = extra

    def __getitem__(self, item: str) -> Any:
        return getattr(self, item)

    def formats(self) -> Iterable[str]:
        """The formats present: E2B's attribute names, then extra's keys."""
        out = [f for f in _FORMATS if getattr(self, f)]
        return out + list(self.extra or {})

    def __repr__(self) -> str:
        if self.text:
            return f"Result({self.text})"
        return "Result(Formats: " + ", ".join(self.formats()) + ")"

    __str__ = __repr__

    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_markdown_(self) -> Optional[str]:
        return self.markdown

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def _repr_png_(self) -> Optional[str]:
        return self.png

    def _repr_jpeg_(self) -> Optional[str]:
        return self.jpeg

    def _repr_pdf_(self) -> Optional[str]:
        return self.pdf

    def _repr_latex_(self) -> Optional[str]:
        return self.latex

    def _repr_json_(self) -> Optional[Any]:
        return self.json

    def _repr_javascript_(self) -> Optional[str]:
        return self.javascript

    @classmethod
    def _from(cls, r: _CtxdResult, main: bool) -> "Result":
        """The E2B Result of a ctxd display or main result."""
        kw: Dict[str, Any] = {}
        extra: Dict[str, Any] = {}
        for mime, v in r.data.items():
            name = _MIME_FIELDS.get(mime)
            if name is None:
                extra[mime] = v
                continue
            if name in ("json", "data", "chart"):
                try:
                    v = json.loads(v)
                except ValueError:
                    pass
            kw[name] = v
        t = kw.get("text")
        if isinstance(t, str) and len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
            kw["text"] = t[1:-1]  # E2B strips a str result's quotes
        return cls(is_main_result=main, extra=extra or None, **kw)


@dataclass(repr=False)
class Logs:
    """What a cell printed: stdout and stderr as lists of chunks."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Logs(stdout: {self.stdout}, stderr: {self.stderr})"

    def to_json(self) -> str:
        """The object as JSON text, as E2B's to_json."""
        return json.dumps({"stdout": self.stdout, "stderr": self.stderr})


@dataclass(repr=False)
class Execution:
    """A cell's outcome: results (displays, figures and the main result),
    logs, error (None when it ran through), execution_count."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (None without one)."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    def __repr__(self) -> str:
        return f"Execution(Results: {self.results}, Logs: {self.logs}, Error: {self.error})"

    def to_json(self) -> str:
        """The object as JSON text, as E2B's to_json."""
        res = []
        for r in self.results:
            d = {k: (r.chart.to_dict() if k == "chart" else r[k]) for k in r.formats()
                 if k in _FORMATS}
            d["text"] = r.text
            res.append(d)
        return json.dumps({"results": res, "logs": self.logs.to_json(),
                           "error": self.error.to_json() if self.error else None})


class Context:
    """A code context (a ctxd context): id, language, cwd."""

    def __init__(self, context_id: str, language: str, cwd: str, **_: Any) -> None:
        self.id, self.language, self.cwd = context_id, language, cwd

    def __repr__(self) -> str:
        return f"Context(id={self.id!r}, language={self.language!r}, cwd={self.cwd!r})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Context) and other.id == self.id


class FileType(str, enum.Enum):
    """E2B's FileType; also equal to its str ("file", "dir", "symlink")."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value


def _file_type(t: Any) -> Any:
    """t as a FileType when it names one."""
    try:
        return FileType(t)
    except ValueError:
        return t


@dataclass
class EntryInfo:
    """A directory entry (files.list): name, type (FileType.FILE or .DIR,
    equal to "file" / "dir"), path (absolute), size (bytes)."""

    name: str
    type: Any
    path: str
    size: int = 0

    def __post_init__(self) -> None:
        self.type = _file_type(self.type)


@dataclass
class WriteInfo:
    """What files.write wrote: name, type (FileType.FILE, equal to "file"),
    path (absolute)."""

    name: str
    type: Any
    path: str

    def __post_init__(self) -> None:
        self.type = _file_type(self.type)


@dataclass
class WriteEntry:
    """One file for files.write_files: path and data (str, bytes or a file
    object)."""

    path: str
    data: Any
