"""The kernel's input history: an SQLite file shared by every ctxd kernel of
the user (like IPython's history.sqlite), one session per kernel start.

Entries are (session, line, source) or, with output, (session, line,
(source, output)), where line is the cell's execution count and output the
text/plain of its result (None when it had none): what Jupyter's
history_request returns."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import List, Optional


def default_path() -> str:
    env = os.environ.get("CTXD_KERNEL_HISTORY")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return os.path.join(base, "ctxd", "kernel_history.sqlite")


class History:
    """Thread-safe (one lock); a file that cannot be opened falls back to
    memory, so history never stops the kernel."""

    def __init__(self, path: Optional[str] = None):
        path = path or default_path()
        self._lock = threading.Lock()
        try:
            if path != ":memory:":
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._db = self._open(path)
        except (OSError, sqlite3.Error):
            self._db = self._open(":memory:")
        self.session = 0
        self.last_line = 0
        self.new_session()

    @staticmethod
    def _open(path: str) -> sqlite3.Connection:
        db = sqlite3.connect(path, timeout=5, check_same_thread=False, isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS sessions "
                   "(session INTEGER PRIMARY KEY AUTOINCREMENT, start REAL, context TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS history (session INTEGER, line INTEGER, "
                   "source TEXT, output TEXT, PRIMARY KEY (session, line))")
        return db

    def new_session(self, context: str = "") -> int:
        with self._lock:
            cur = self._db.execute("INSERT INTO sessions (start, context) VALUES (?, ?)",
                                   (time.time(), context))
            self.session = cur.lastrowid
            self.last_line = 0
            return self.session

    def add(self, line: int, source: str, output: Optional[str]) -> None:
        """Stores a cell. A line at or below the last one means the context
        was restarted (its count began again): a new session starts."""
        if line <= self.last_line:
            self.new_session()
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO history VALUES (?, ?, ?, ?)",
                             (self.session, line, source, output))
            self.last_line = line

    @staticmethod
    def _entries(rows, output: bool) -> List[tuple]:
        if output:
            return [(s, ln, (src, out)) for s, ln, src, out in rows]
        return [(s, ln, src) for s, ln, src, _ in rows]

    def tail(self, n: int, output: bool) -> List[tuple]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM history ORDER BY session DESC, line DESC "
                                    "LIMIT ?", (max(0, n),)).fetchall()
        return self._entries(reversed(rows), output)

    def range(self, session: int, start: int, stop: Optional[int], output: bool) -> List[tuple]:
        """Lines start <= line < stop of session (0 or less: relative to this
        one, as IPython counts them; stop None: to the end)."""
        if session <= 0:
            session += self.session
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM history WHERE session = ? AND line >= ? AND line < ? "
                "ORDER BY line", (session, start, stop if stop is not None else 2 ** 62)
            ).fetchall()
        return self._entries(rows, output)

    def search(self, pattern: str, n: Optional[int], unique: bool, output: bool) -> List[tuple]:
        """Cells whose source matches the glob pattern, oldest first; the
        last n of them (n None: all); unique: each source once (its latest)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM history WHERE source GLOB ? "
                                    "ORDER BY session, line", (pattern or "*",)).fetchall()
        if unique:
            latest = {}
            for r in rows:
                latest.pop(r[2], None)
                latest[r[2]] = r
            rows = list(latest.values())
        if n:
            rows = rows[-n:]
        return self._entries(rows, output)

    def close(self) -> None:
        with self._lock:
            self._db.close()
