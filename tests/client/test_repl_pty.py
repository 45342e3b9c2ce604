"""`ctx repl` driven in a pseudo-terminal, as a person would use it: a
multi-line function definition, a call, Ctrl-C on `while True: pass`, the
globals still there afterwards; Ctrl-C at the prompt, history across
sessions, colours only on a terminal, the local completeness heuristic,
and plain (non-terminal) input; Tab completion from the context, Ctrl-R,
multi-line history entries, figures and display(), input() and getpass(),
`name?`, vi mode through an editrc."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time

import pytest

from conftest import CTX_BIN, WAIT, wait_until

ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]|\r")


class Repl:
    """ctx repl in a pty (the child's controlling terminal)."""

    def __init__(self, daemon, *args, env=None):
        self.daemon = daemon
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            e = dict(os.environ, TERM="xterm")
            e.pop("NO_COLOR", None)
            e.update(env or {})
            os.execve(CTX_BIN, [CTX_BIN, "--endpoint", daemon.endpoint, "repl", *args], e)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self.raw = b""
        self.pos = 0  # expect() searches from here
        self.status = None

    @property
    def text(self):
        return ANSI.sub(b"", self.raw).decode("utf-8", "replace")

    def _read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], timeout)
        if r:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            if not data:
                return False
            self.raw += data
        return True

    def expect(self, pattern, timeout=WAIT):
        """Waits until the screen text after the last match matches pattern;
        returns the match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.text, self.pos)
            if m:
                self.pos = m.end()
                return m
            if time.monotonic() > deadline or not self._read(0.05):
                if not rx.search(self.text, self.pos):
                    raise AssertionError(f"no {pattern!r} in:\n{self.text[self.pos:]}\n"
                                         f"--- whole session ---\n{self.text}")

    def send(self, s):
        os.write(self.fd, s.encode() if isinstance(s, str) else s)

    def line(self, s):
        self.send(s + "\r")

    def wait_exit(self):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            self._read(0.05)
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                while self._read(0.05):
                    pass
                self.status = os.waitstatus_to_exitcode(st)
                return self.status
        raise AssertionError("ctx repl did not exit:\n" + self.text)

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.fd)


@pytest.fixture
def repl(daemon, tmp_path):
    opened = []

    def start(*args, env=None):
        e = {"CTX_HISTORY": str(tmp_path / "history")}
        e.update(env or {})
        r = Repl(daemon, *args, env=e)
        opened.append(r)
        return r

    yield start
    for r in opened:
        r.close()


def prompt(n=None):
    num = r"\d+" if n is None else str(n)
    return r"\[" + num + r"\]: $"


def context_state(daemon, name):
    rc, [reply] = daemon.json("ls")
    return {c["name"]: c for c in reply["contexts"]}.get(name, {}).get("state")


def test_session_multiline_call_interrupt_globals(daemon, repl):
    r = repl("-c", "nb")
    r.expect(r"context 'nb'")
    r.expect(prompt(1))
    r.line("def double(x):")
    r.expect(r"\.\.\.: $")
    r.line("    return x * 2")
    r.expect(r"\.\.\.: $")
    r.line("")  # an empty line ends the block: it runs as cell 1
    r.expect(prompt(2))
    r.line("double(21)")
    r.expect(r"Out\[2\]: 42\n")
    r.expect(prompt(3))
    r.line("while True: pass")  # a compound statement: Python wants a blank line
    r.expect(r"\.\.\.: $")
    r.line("")
    assert wait_until(lambda: context_state(daemon, "nb") == "busy")
    r.send("\x03")  # Ctrl-C while it runs
    r.expect(r"Traceback \(most recent call last\):")
    r.expect(r"KeyboardInterrupt\n")
    r.expect(prompt(4))
    r.line("double(4)")  # the function is still defined
    r.expect(r"Out\[4\]: 8\n")
    r.expect(prompt(5))
    r.send("\x04")  # Ctrl-D leaves
    assert r.wait_exit() == 0
    # The completeness checks touched no globals.
    out = daemon.ctx("run", "-c", "nb", "sorted(k for k in globals() if not k.startswith('__'))")
    assert out.stdout == "['_', 'double']\n"


def test_ctrl_c_at_the_prompt_clears_the_input(daemon, repl):
    r = repl()
    r.expect(prompt(1))
    r.send("undefined_name_here")
    r.expect(r"undefined_name_here$")
    r.send("\x03")
    r.expect(r"\^C\n")
    r.expect(prompt(1))
    r.line("if True:")
    r.expect(r"\.\.\.: $")
    r.send("\x03")  # clears the whole block
    r.expect(prompt(1))
    r.line("1 + 1")
    r.expect(r"Out\[1\]: 2\n")
    assert "NameError" not in r.text
    r.line("exit")
    assert r.wait_exit() == 0


def test_history_across_sessions(daemon, repl, tmp_path):
    r = repl()
    r.expect(prompt(1))
    r.line("remembered = 12345")
    r.expect(prompt(2))
    r.send("\x04")
    assert r.wait_exit() == 0
    assert (tmp_path / "history").read_text() == "remembered = 12345\n"
    assert oct((tmp_path / "history").stat().st_mode & 0o777) == "0o600"
    r = repl()
    r.expect(prompt(2))
    r.send("\x1b[A")  # Up: the previous session's line
    r.expect(r"remembered = 12345$")
    r.send("\x1b[D" * 5 + "\x1b[3~" + "9\r")  # edit it: Left x5, Delete, 9: 92345
    r.expect(prompt(3))
    r.line("remembered")
    r.expect(r"Out\[3\]: 92345\n")
    r.expect(prompt(4))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_results_and_errors_distinct_colour_only_on_a_terminal(daemon, repl):
    r = repl()
    r.expect(prompt(1))
    r.line("print('plain'); 1/0")
    r.expect(r"ZeroDivisionError: division by zero\n")
    assert b"\x1b[31m" in r.raw or b"\x1b[1;31m" in r.raw  # the traceback in red
    r.line("'value'")
    r.expect(r"Out\[2\]: 'value'\n")
    assert b"\x1b[1;34mOut[2]:" in r.raw
    r.expect(prompt(3))
    r.send("\x04")
    assert r.wait_exit() == 0
    r = repl(env={"NO_COLOR": "1"})
    r.expect(prompt(3))
    r.line("1/0")
    r.expect(r"ZeroDivisionError")
    r.expect(prompt(4))  # keys typed while code runs are not the editor's
    r.send("\x04")
    r.wait_exit()
    assert b"\x1b[3" not in r.raw and b"\x1b[1;3" not in r.raw


def test_local_heuristic(daemon, repl):
    r = repl(env={"CTX_REPL_COMPLETE": "local"})
    r.expect(prompt(1))
    r.line("def f(a,")
    r.expect(r"\.\.\.: $")  # an open bracket
    r.line("      b):")
    r.expect(r"\.\.\.: $")
    r.line("    return a + b")
    r.expect(r"\.\.\.: $")
    r.line("")
    r.expect(prompt(2))
    r.line("s = '''one")
    r.expect(r"\.\.\.: $")  # an open triple-quoted string
    r.line("two'''")
    r.expect(prompt(3))
    r.line("f(len(s), 1)")
    r.expect(r"Out\[3\]: 8\n")
    r.expect(prompt(4))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_plain_input_without_a_terminal(daemon):
    code = "def g():\n    return 5\n\ng()\nx = [1,\n     2]\nx\n"
    p = subprocess.run([CTX_BIN, "--endpoint", daemon.endpoint, "repl", "-c", "plain"],
                       input=code, capture_output=True, text=True, timeout=WAIT)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "Out[2]: 5\nOut[4]: [1, 2]\n"


def test_tab_completes_from_the_contexts_globals(daemon, repl):
    r = repl("-c", "tabs")
    r.expect(prompt(1))
    r.line("unusual_variable_name = 41")
    r.expect(prompt(2))
    r.send("unusual_v\t")  # one match: completed in place
    r.expect(r"unusual_variable_name$")
    r.line(" + 1")
    r.expect(r"Out\[2\]: 42\n")
    r.expect(prompt(3))
    r.line("alpha_one = alpha_two = 0")
    r.expect(prompt(4))
    r.send("alpha_\t")  # two matches: listed below the line
    r.expect(r"alpha_one\s+alpha_two")
    r.send("\x03")
    r.expect(prompt(4))
    r.line("if True:")
    r.expect(r"\.\.\.: $")
    r.send("\t")  # at the start of a line Tab indents
    r.line("x = 5")
    r.line("")
    r.expect(prompt(5))
    r.line("x")
    r.expect(r"Out\[5\]: 5\n")
    r.expect(prompt(6))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_ctrl_r_searches_history(daemon, repl):
    r = repl()
    r.expect(prompt(1))
    r.line("needle_value = 7")
    r.expect(prompt(2))
    r.line("other = 1")
    r.expect(prompt(3))
    r.send("\x12")  # Ctrl-R, then part of the older entry
    r.send("needle")
    r.expect(r"needle_value = 7")
    r.send("\r")  # accepts the found entry
    r.expect(prompt(4))
    r.line("needle_value * 6")
    r.expect(r"Out\[4\]: 42\n")
    r.expect(prompt(5))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_multiline_block_is_one_history_entry(daemon, repl, tmp_path):
    r = repl()
    r.expect(prompt(1))
    r.line("def triple(x):")
    r.expect(r"\.\.\.: $")
    r.line("    return x * 3")
    r.line("")
    r.expect(prompt(2))
    r.send("\x04")
    assert r.wait_exit() == 0
    assert (tmp_path / "history").read_text() == "def triple(x):\\n    return x * 3\n"
    r = repl()
    r.expect(prompt(2))
    r.send("\x1b[A")  # Up: the whole block, both lines
    r.expect(r"return x \* 3")
    r.send("\r")
    r.expect(r"\.\.\.: $")  # the block still needs its empty line
    r.line("")
    r.expect(prompt(3))
    r.line("triple(14)")
    r.expect(r"Out\[3\]: 42\n")
    r.expect(prompt(4))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_figure_and_display(daemon, repl, tmp_path):
    out = tmp_path / "figures"
    out.mkdir()
    r = repl(env={"CTX_OUTPUT_DIR": str(out)})
    r.expect(prompt(1))
    r.line("import matplotlib.pyplot as plt; plt.plot([1, 2, 3]); plt.show()")
    m = r.expect(r"\[image/png saved to (\S+\.png)\]")
    path = m.group(1)
    assert path.startswith(str(out))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    r.expect(prompt(2))
    r.line("display({'text/html': '<b>bold</b>', 'text/plain': 'plain words'}, raw=True)")
    r.expect(r"plain words\n")
    assert r.text.count("<b>bold</b>") == 1  # only in the echoed input
    r.expect(prompt(3))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_input_and_getpass_read_the_terminal(daemon, repl):
    r = repl("-c", "asks")
    r.expect(prompt(1))
    r.line("name = input('your name? ')")
    r.expect(r"\nyour name\? $")  # the prompt, not the echo of the line typed
    r.line("Ada")
    r.expect(prompt(2))
    r.line("import getpass; secret = getpass.getpass('secret: ')")
    r.expect(r"\nsecret: $")
    r.line("hunter2")
    r.expect(prompt(3))
    assert "hunter2" not in r.text  # no echo
    r.line("name, len(secret)")
    r.expect(r"Out\[3\]: \('Ada', 7\)\n")
    r.expect(prompt(4))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_question_mark_inspects(daemon, repl):
    r = repl("-c", "insp")
    r.expect(prompt(1))
    r.line("def documented(a):")
    r.line("    'Says what it does.'")
    r.line("    return a")
    r.line("")
    r.expect(prompt(2))
    r.line("documented?")
    r.expect(r"Says what it does\.")
    r.expect(prompt(2))  # no cell ran
    r.line("documented??")
    r.expect(r"return a")
    r.line("nothing_here?")
    r.expect(r"no object named 'nothing_here'")
    r.expect(prompt(2))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_editrc_vi_mode(daemon, repl, tmp_path):
    rc = tmp_path / "editrc"
    rc.write_text("ctx:bind -v\n")
    r = repl(env={"EDITRC": str(rc)})
    r.expect(prompt(1))
    r.send("viword = 3")
    r.send("\x1b")  # vi command mode: 0 goes to the start, x deletes a character
    r.send("0x")
    r.send("\r")
    r.expect(prompt(2))
    r.line("iword")
    r.expect(r"Out\[2\]: 3\n")
    r.expect(prompt(3))
    r.line("exit")
    assert r.wait_exit() == 0
