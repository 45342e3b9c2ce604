"""`ctx repl` as users of IPython's terminal expect it (issue 41), driven in
a pseudo-terminal against a real daemon: a bracketed paste is one cell,
auto-indent, multi-line values under `Out[n]:`; and the command line's
hints for a mistyped endpoint or subcommand."""

import subprocess

from conftest import CTX_BIN, WAIT
from test_repl_pty import prompt, repl  # noqa: F401 (the fixture)

PASTE_BEGIN, PASTE_END = "\x1b[200~", "\x1b[201~"


def test_bracketed_paste_is_one_cell(daemon, repl):
    r = repl("-c", "paste")
    r.expect(prompt(1))
    assert b"\x1b[?2004h" in r.raw  # the terminal is asked to bracket pastes
    # Blank lines inside the function and between statements: typed line by
    # line, the first blank line would end the block.
    block = "def f(a):\r\r    b = a * 2\r\r    return b + 1\r\rvalue = f(20)\rprint('pasted', value)\r"
    r.send(PASTE_BEGIN + block + PASTE_END)
    r.send("\r")
    r.expect(r"pasted 41\n")
    r.expect(prompt(2))
    r.line("f(1)")
    r.expect(r"Out\[2\]: 3\n")
    r.expect(prompt(3))
    r.send("\x04")
    assert r.wait_exit() == 0
    assert r.raw.endswith(b"\x1b[?2004l") or b"\x1b[?2004l" in r.raw


def test_multiline_value_starts_below_out(daemon, repl):
    r = repl("-c", "table")
    r.expect(prompt(1))
    r.line("import pandas as pd; pd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    # As IPython: the label on its own line, the table's header below it.
    r.expect(r"Out\[1\]:\n   a  b\n0  1  3\n1  2  4\n")
    r.expect(prompt(2))
    r.line("class Lead:\r    def __repr__(self): return '\\nfirst\\nsecond'\r")
    r.expect(prompt(3))
    r.line("Lead()")  # a text starting with a newline: no empty line after the label
    r.expect(r"Out\[3\]:\nfirst\nsecond\n")
    r.expect(prompt(4))
    r.line("'one line'")
    r.expect(r"Out\[4\]: 'one line'\n")
    r.expect(prompt(5))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_autoindent_after_colon_and_dedent(daemon, repl):
    r = repl("-c", "indent", "--autoindent")
    r.expect(prompt(1))
    r.line("def f(x):")
    r.expect(r"\.\.\.:     $")  # four spaces given after a ':'
    r.line("if x:")  # typed after them
    r.expect(r"\.\.\.:         $")
    r.line("return 'yes'")
    r.expect(r"\.\.\.:     $")  # one level less after return
    r.line("raise ValueError('no')")
    r.expect(r"\.\.\.: $")  # and again: back to the def's level
    r.line("")
    r.expect(prompt(2))
    r.line("f(1)")
    r.expect(r"Out\[2\]: 'yes'\n")
    r.expect(prompt(3))
    r.line("for i in range(3):")
    r.expect(r"\.\.\.:     $")
    r.line("total = i")
    r.expect(r"\.\.\.:     $")  # the same level: only the indentation given
    r.line("")  # Enter on it ends the block
    r.expect(prompt(4))
    r.line("%autoindent")  # IPython's toggle
    r.expect(r"Automatic indentation is: OFF\n")
    r.line("if True:")
    r.expect(r"\.\.\.: $")
    r.line("    y = total")
    r.line("")
    r.expect(prompt(5))
    r.line("y")
    r.expect(r"Out\[5\]: 2\n")
    r.expect(prompt(6))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_endpoint_without_a_scheme_gets_a_hint(tmp_path):
    cases = {
        "/run/x.sock": "ipc:///run/x.sock",
        str(tmp_path / "s.sock"): f"ipc://{tmp_path}/s.sock",
        "http://localhost:5555/": "tcp://localhost:5555",
        "localhost:5555": "tcp://localhost:5555",
    }
    for given, meant in cases.items():
        p = subprocess.run([CTX_BIN, "--endpoint", given, "ls"], capture_output=True,
                           text=True, timeout=WAIT)
        assert p.returncode != 0
        assert f"did you mean {meant}?" in p.stderr, (given, p.stderr)
    p = subprocess.run([CTX_BIN, "--endpoint", f"ipc://{tmp_path}/none.sock", "ls"],
                       capture_output=True, text=True, timeout=WAIT)
    assert p.returncode != 0 and "did you mean" not in p.stderr  # a scheme: no guess


def test_mistyped_command_gets_the_closest(daemon):
    for typed, meant in [("lss", "ls"), ("stast", "stats"), ("snapshts", "snapshots"),
                         ("rpel", "repl")]:
        p = daemon.ctx(typed, check=False)
        assert p.returncode == 2
        assert f"unknown command '{typed}'; did you mean '{meant}'?" in p.stderr, p.stderr
    p = daemon.ctx("xyzzy", check=False)
    assert p.returncode == 2 and "did you mean" not in p.stderr
    p = daemon.ctx("help", "stast", check=False)
    assert "did you mean 'stats'?" in p.stderr


def test_snapshots_header_and_dates(daemon):
    import os
    import pty
    import re
    import time
    daemon.ctx("create", "snapped")
    daemon.ctx("run", "-c", "snapped", "x = 1")
    daemon.ctx("snapshot", "snapped", "first")
    pid, fd = pty.fork()  # on a terminal: a header
    if pid == 0:
        os.execv(CTX_BIN, [CTX_BIN, "--endpoint", daemon.endpoint, "snapshots"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    lines = out.decode().replace("\r", "").splitlines()
    assert lines[0].split() == ["ID", "SIZE", "CREATED"], lines
    today = time.strftime("%Y-%m-%d")
    assert re.fullmatch(r"snapped/first\s+\S+ \S+\s+" + today + r" \d\d:\d\d:\d\d", lines[1]), lines
    piped = daemon.ctx("snapshots").stdout.splitlines()  # a pipe: the rows alone
    assert [line.split()[0] for line in piped] == ["snapped/first"]


def test_reverse_search_labelled_as_bash_and_ipython(daemon, repl):
    r = repl("-c", "rsearch")
    r.expect(prompt(1))
    r.line("needle_a = 1")
    r.expect(prompt(2))
    r.line("needle_b = 2")
    r.expect(prompt(3))
    r.line("other = 3")
    r.expect(prompt(4))
    r.send("\x12")
    r.expect(r"\(reverse-i-search\)`': $")
    r.send("needle")
    r.expect(r"\(reverse-i-search\)`needle': needle_b = 2$")  # the newest match
    r.send("\x12")  # again: an older one
    r.expect(r"\(reverse-i-search\)`needle': needle_a = 1$")
    r.send("X")  # nothing holds it
    r.expect(r"\(failed reverse-i-search\)`needleX': needle_a = 1$")
    r.send("\x7f")  # Backspace: the query shrinks, the newest match again
    r.expect(r"\(reverse-i-search\)`needle': needle_b = 2$")
    r.send("\x07")  # Ctrl-G: the line as it was (empty), the prompt back
    r.expect(prompt(4))
    r.send("\x12" + "a = 1")
    r.expect(r"\(reverse-i-search\)`a = 1': needle_a = 1$")
    r.send("\x05" + "0")  # Ctrl-E ends the search and moves to the end; then 0
    r.expect(r"\[4\]: needle_a = 10$")
    r.send("\r")
    r.expect(prompt(5))
    r.line("needle_a")
    r.expect(r"Out\[5\]: 10\n")
    r.expect(prompt(6))
    r.send("\x04")
    assert r.wait_exit() == 0


def test_bracketed_paste_in_vi_mode_and_into_input(daemon, repl, tmp_path):
    rc = tmp_path / "editrc"
    rc.write_text("ctx:bind -v\n")
    r = repl("-c", "vipaste", env={"EDITRC": str(rc)})
    r.expect(prompt(1))
    # In vi insert mode ESC is a key of its own: the paste's ESC[200~ must
    # still open a paste, not command mode.
    r.send(PASTE_BEGIN + "def g():\r\r    return 'vi'\r\rv = g()\r" + PASTE_END + "\r")
    r.expect(prompt(2))
    r.line("v")
    r.expect(r"Out\[2\]: 'vi'\n")
    r.expect(prompt(3))
    r.line("answer = input('? ')")
    r.expect(r"\? $")
    r.send(PASTE_BEGIN + "pasted words" + PASTE_END + "\r")  # the markers are not the answer
    r.expect(prompt(4))
    r.line("answer")
    r.expect(r"Out\[4\]: 'pasted words'\n")
    r.expect(prompt(5))
    r.send("\x04")
    assert r.wait_exit() == 0
