"""README's set-up and quick start, run as typed on this machine.

    /usr/bin/python3 tests/quick/run.py SOURCE_DIR BUILD_DIR

Runs README.md's set-up command (`sh tools/setup.sh demo`, with BUILD_DIR
as its build tree, so a developer's own tree is left alone; it installs into
/usr/local as it does for a user), then each line of the block under
"## Quick start", one at a time, in one bash session with a fresh Debian
root's PATH, a private XDG_RUNTIME_DIR and XDG_STATE_HOME (so the daemon's
default socket and state are the test's own) and a temporary HOME and cwd.
The README is the script: when it and reality part, this fails.

What the test reads in a line's comment:
  - every command must exit 0;
  - `# prints WORD`: the command's stdout is exactly WORD;
  - `CMD &  # ... "TEXT" ...`: a background command; the test waits, as a
    reader would, until its output shows TEXT, and it must still be alive.
The install is left in /usr/local (running again installs the same files);
the daemon and every job of the session are ended.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COMMAND_TIMEOUT = 120
SETUP_TIMEOUT = 1200


def block_under(readme, heading):
    """The commands of the first indented block after heading (one per line)."""
    lines = readme.split("\n")
    start = lines.index(heading)
    block = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("    ") and line.strip():
            block.append(line[4:])
        elif block and line.strip():
            break
    if not block:
        sys.exit(f"quick: README.md has no command block under {heading!r}")
    return block


def split_comment(line):
    """(command, comment): the comment starts at the first `#` after two spaces."""
    m = re.match(r"^(.*?\S)\s{2,}#\s?(.*)$", line)
    return (m.group(1), m.group(2)) if m else (line.strip(), "")


def fail(msg, detail=""):
    print(f"quick: FAILED: {msg}")
    if detail:
        print(detail.rstrip())
    sys.exit(1)


def run_setup(src, build, line):
    """README's set-up line, in the source tree, as root would type it."""
    env = dict(os.environ, PATH=DEBIAN_PATH, BUILD_DIR=build)
    print(f"$ {line}    (BUILD_DIR={build})", flush=True)
    t = time.monotonic()
    r = subprocess.run(["bash", "-c", line], cwd=src, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=SETUP_TIMEOUT)
    print(f"  ({time.monotonic() - t:.0f} s)")
    if r.returncode != 0:
        fail(f"`{line}` exited {r.returncode}", r.stdout[-6000:])
    if "setup: installed into /usr/local" not in r.stdout:
        print("  (set-up did not say it installed into /usr/local)")


class Session:
    """One bash reading commands from a pipe, as a terminal's shell does."""

    def __init__(self, tmp):
        self.q = os.path.join(tmp, "q")
        home = os.path.join(tmp, "home")
        run = os.path.join(tmp, "run")
        for d in (self.q, home, run):
            os.makedirs(d, mode=0o700)
        env = {"PATH": DEBIAN_PATH, "HOME": home, "USER": "root", "LOGNAME": "root",
               "SHELL": "/bin/bash", "TERM": "dumb", "LANG": "C.UTF-8",
               "XDG_RUNTIME_DIR": run, "XDG_STATE_HOME": os.path.join(tmp, "state")}
        self.bash = subprocess.Popen(["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
                                     cwd=home, env=env, text=True, start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.n = 0
        self.pids = []

    def send(self, text):
        self.bash.stdin.write(text + "\n")
        self.bash.stdin.flush()

    def path(self, name):
        return os.path.join(self.q, f"{name}.{self.n}")

    def read(self, name):
        try:
            with open(self.path(name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def wait_file(self, name, timeout):
        end = time.monotonic() + timeout
        while not os.path.exists(self.path(name)):
            if self.bash.poll() is not None:
                fail(f"the shell ended (status {self.bash.returncode})")
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        time.sleep(0.05)  # the writer's newline
        return True

    def run(self, line):
        """One line of the block, as typed; its stdout, stderr and status."""
        self.n += 1
        out, err, rc = (self.path(x) for x in ("out", "err", "rc"))
        self.send(f"{{ {line}\n}} >{out} 2>{err}; echo $? >{rc}")
        if not self.wait_file("rc", COMMAND_TIMEOUT):
            fail(f"`{split_comment(line)[0]}` did not end within {COMMAND_TIMEOUT} s",
                 self.read("out") + self.read("err"))
        return self.read("out"), self.read("err"), int(self.read("rc"))

    def background(self, line, text):
        """A line ending in `&`: started, then waited for until it shows text."""
        self.n += 1
        out, pid = self.path("out"), self.path("pid")
        self.send(f"{{ {line}\n}} >{out} 2>&1; echo $! >{pid}")
        if not self.wait_file("pid", COMMAND_TIMEOUT):
            fail(f"`{split_comment(line)[0]}` did not start")
        p = int(self.read("pid"))
        self.pids.append(p)
        end = time.monotonic() + COMMAND_TIMEOUT
        while text not in self.read("out"):
            if not os.path.exists(f"/proc/{p}") or time.monotonic() > end:
                fail(f"`{split_comment(line)[0]}` did not show {text!r}", self.read("out"))
            time.sleep(0.05)
        return self.read("out")

    def close(self):
        """Every job of the session ended, then the shell."""
        self.n += 1
        self.send(f"jobs -p >{self.path('jobs')}")
        self.wait_file("jobs", 10)
        left = [int(x) for x in self.read("jobs").split()] + self.pids
        for p in left:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.send("wait; exit 0")
        try:
            self.bash.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.bash.pid, signal.SIGKILL)
            self.bash.wait()
        end = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{p}") for p in self.pids):
            if time.monotonic() > end:
                fail(f"the daemon (pid {self.pids}) did not end")
            time.sleep(0.05)


def check_kernelspec():
    """The kernelspec where Jupyter looks, when jupyter_client is installed."""
    r = subprocess.run(["/usr/bin/python3", "-c",
                        "import json, jupyter_client.kernelspec as k\n"
                        "s = k.KernelSpecManager().get_kernel_spec('ctxd')\n"
                        "print(json.dumps([s.resource_dir, s.argv, s.env]))"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env={"PATH": DEBIAN_PATH, "HOME": "/nonexistent"})
    if "No module named 'jupyter_client'" in r.stderr:
        print("quick: jupyter_client not installed: the kernelspec is not looked up")
        return
    if r.returncode != 0:
        fail("Jupyter does not find the kernelspec ctxd", r.stderr)
    where, argv, env = json.loads(r.stdout)
    print(f"quick: Jupyter finds the kernelspec ctxd in {where} ({' '.join(argv)})")
    # the kernel's interpreter imports the package without the spec's env too
    r = subprocess.run([argv[0], "-c", "import ctxd.kernel, ctxd; print(ctxd.__file__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env={"PATH": DEBIAN_PATH, "HOME": "/nonexistent"})
    if r.returncode != 0:
        fail(f"{argv[0]} does not import the kernel", r.stdout)
    if not r.stdout.startswith("/usr/local/lib/python3"):
        fail(f"{argv[0]} imports ctxd from {r.stdout.strip()}, not the install")


def main():
    src, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if os.geteuid() != 0 and not os.access("/usr/local", os.W_OK):
        print("quick: skipped: set-up installs into /usr/local (run as root)")
        sys.exit(77)
    with open(os.path.join(src, "README.md")) as f:
        readme = f.read()
    setup = [c for c in block_under(readme, "## Set-up (fresh Debian 12, as root)")
             if "setup.sh demo" in c]
    if not setup:
        fail("README's set-up block has no `sh tools/setup.sh demo`")
    quick = block_under(readme, "## Quick start")
    run_setup(src, build, setup[0])
    tmp = tempfile.mkdtemp(prefix="ctxd-quick.")
    session = Session(tmp)
    try:
        for line in quick:
            cmd, comment = split_comment(line)
            print(f"$ {line}", flush=True)
            if cmd.endswith("&") and not cmd.endswith("&&"):
                m = re.search(r'"([^"]+?)(?:\.\.\.)?"', comment)
                if not m:
                    fail(f'`{cmd}`: the comment names no "TEXT" it shows when ready')
                shown = session.background(line, m.group(1))
                print("  " + shown.rstrip().replace("\n", "\n  "))
                continue
            out, err, rc = session.run(line)
            for text in (out, err):
                if text.strip():
                    print("  " + text.rstrip().replace("\n", "\n  "))
            if rc != 0:
                fail(f"`{cmd}` exited {rc}", err)
            m = re.match(r"prints (\S+?)[:,;.]?(\s|$)", comment)
            if m and out.strip() != m.group(1):
                fail(f"`{cmd}` printed {out.strip()!r}, README says {m.group(1)!r}")
    finally:
        session.close()
        shutil.rmtree(tmp, ignore_errors=True)
    check_kernelspec()
    print(f"quick: {len(quick)} commands of README's quick start ran as typed")


if __name__ == "__main__":
    main()
