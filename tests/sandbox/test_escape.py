"""Escape attempts, driven through the daemon, for each tier that confines
(`local` and `sandbox`). Each attempt runs as user code; the expectation says
whether the tier must block it. A blocked
attempt must fail inside Python (an exception in the run), and the context
must answer the next run. The table (attempt, outcome, blocked by what,
context alive after) is printed (run pytest with -s to see it) and written
to $CTXD_ESCAPE_TABLE when set.

Known gaps of `local` (it runs as the daemon's user, without namespaces) are
listed as such: they are the sandbox tier's job and the table says so. The
sandbox tier has no known gap: every attempt must fail inside Python."""

import os
import socket
import textwrap

import pytest

import reachable  # tests/reachable.py, on sys.path via conftest

# ctypes helpers the attempts share: call libc, raise OSError on failure.
PRELUDE = textwrap.dedent("""
    import ctypes, errno as _errno, os
    _libc = ctypes.CDLL(None, use_errno=True)
    def _c(fn, *args):
        r = getattr(_libc, fn)(*args)
        if r == -1:
            e = ctypes.get_errno()
            raise OSError(e, '%s: %s' % (fn, os.strerror(e)))
        return r
""")

SECRET = "ctxd-escape-secret-4242"

# Offering its own pages to the kernel's same-page merging, where the
# unsafe-tier workers' pages are (README "Page merging"): a merged page's
# copy on write can be timed to learn what another process holds.
MADV_MERGEABLE = ("import mmap\n"
                  "_libc.mmap.restype = ctypes.c_void_p\n"
                  "_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,"
                  " ctypes.c_int, ctypes.c_int, ctypes.c_long]\n"
                  "_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]\n"
                  "p = _libc.mmap(None, 1 << 16, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,"
                  " -1, 0)\n"
                  "_c('madvise', ctypes.c_void_p(p), 1 << 16, 12)")
MEMORY_MERGE = "_c('prctl', 67, 1, 0, 0, 0)"


def attempts(env):
    """(name, code, must_block, blocked_by) for the local tier. `must_block`
    False marks a known gap of the tier (reported, not failed)."""
    w, other, sock_path, port, sup = (env["write_root"], env["other_file"], env["sock"],
                                      env["port"], env["sup_pid"])
    return [
        ("read /etc/shadow", "open('/etc/shadow').read(1)", True,
         "Landlock (filesystem_read_roots)"),
        ("write outside write roots", "open('/etc/ctxd-escape-test', 'w')", True,
         "Landlock (filesystem_write_roots)"),
        ("connect to host loopback TCP",
         f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)", True,
         "seccomp: socket() EPERM (network_access false)"),
        ("fork bomb", "while True: os.fork()", True,
         "seccomp: clone/fork EPERM (subprocess_execution false)"),
        ("fork bomb (subprocesses allowed)",
         "pids = []\ntry:\n    while True:\n        p = os.fork()\n        if p == 0:\n"
         "            import time; time.sleep(30); os._exit(0)\n        pids.append(p)\n"
         "finally:\n    for p in pids:\n        os.kill(p, 9); os.waitpid(p, 0)", True,
         "pids cgroup (max_processes): fork EAGAIN"),
        ("allocate 4x memory limit", "x = bytearray(4 * (512 << 20))", True,
         "RLIMIT_AS (memory_bytes): MemoryError"),
        ("ptrace", f"_c('ptrace', 16, {sup}, 0, 0)", True, "seccomp: ptrace EPERM"),
        ("mount", "_c('mount', b'none', b'/mnt', b'tmpfs', 0, None)", True,
         "seccomp: mount EPERM"),
        ("unshare", "_c('unshare', 0x00020000 | 0x10000000)", True, "seccomp: unshare EPERM"),
        ("setns", "fd = os.open('/proc/self/ns/net', os.O_RDONLY); _c('setns', fd, 0)", True,
         "seccomp: setns EPERM (/proc/1/ns/*: Landlock ptrace restriction, EACCES)"),
        ("kill the supervisor", f"os.kill({sup}, 9)", True,
         "Landlock signal scoping (ABI 6): EPERM"),
        ("list other contexts' processes",
         f"assert {env['other_pid']} in [int(p) for p in os.listdir('/proc') if p.isdigit()]",
         False, "not blocked: no pid namespace in local (sandbox tier's job)"),
        ("read another context's files", f"open({other!r}).read()", True,
         "Landlock (filesystem_read_roots)"),
        ("read the daemon's secret env var",
         "v = os.environ.get('CTXD_ESCAPE_SECRET') or open('/proc/self/environ','rb').read()"
         f"\nassert {SECRET!r} in str(v), 'absent'", True,
         "clean environment (allowlist): variable absent"),
        ("connect to the daemon's socket",
         f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({sock_path!r})", True,
         "seccomp: socket() EPERM (network_access false)"),
        ("write a 10 GB file",
         f"f = open({w + '/big'!r}, 'wb')\nfor i in range(10240):\n"
         "    f.write(b'x' * (1 << 20))", True, "RLIMIT_FSIZE (file_size_bytes): EFBIG"),
        ("setuid binary", "os.execv('/usr/bin/passwd', ['passwd', '-S', 'root'])", True,
         "seccomp: execve EPERM (subprocess_execution false); no_new_privs"),
        ("offer pages to same-page merging (madvise)", MADV_MERGEABLE, True,
         "seccomp: madvise(MADV_MERGEABLE) EPERM"),
        ("offer pages to same-page merging (prctl)", MEMORY_MERGE, True,
         "seccomp: prctl(PR_SET_MEMORY_MERGE) EPERM"),
    ]


def run_attempt(c, ctx, code):
    r = c.execute(PRELUDE + code, ctx=ctx, timeout=20)
    ok = c.execute("1 + 1", ctx=ctx).text == "2"
    return r, ok


def outcome(r):
    if r.status == "ok":
        return "ALLOWED"
    if r.error is not None:
        return "blocked: %s: %s" % (r.error["ename"], r.error["evalue"][:60])
    return "ended: %s (%s)" % (r.status, r.done.get("cause", ""))


def write_table(rows, suffix=""):
    head = ("attempt", "tier", "outcome", "blocked by", "ctx alive after")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(5)]
    lines = [" | ".join(str(x).ljust(widths[i]) for i, x in enumerate(row))
             for row in [head] + rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    text = "\n".join(lines)
    print("\n" + text)
    path = os.environ.get("CTXD_ESCAPE_TABLE")
    if path:
        if suffix:
            path = path.replace(".txt", "") + "_" + suffix + ".txt"
        with open(path, "w") as f:
            f.write(text + "\n")


def test_escape_local(make_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXD_ESCAPE_SECRET", SECRET)
    d = make_daemon("--max-output", "1M")
    c = d.client()
    write_root = reachable.writable(tmp_path / "w")  # the context's own uid writes it
    # Another context with a file of its own.
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    c.ok("ctx.create", name="other", cwd=str(other_dir))
    c.execute("open('private.txt', 'w').write('other context data')", ctx="other")
    base = {"memory_bytes": 512 << 20, "file_size_bytes": 10 << 20,
            "filesystem_write_roots": [str(write_root)],
            "filesystem_read_roots": [str(write_root)], "timeout": 30}
    c.ok("ctx.create", name="loc", tier="local", cwd=str(write_root),
         policy=dict(base, network_access=False, subprocess_execution=False))
    c.ok("ctx.create", name="procs", tier="local", cwd=str(write_root),
         policy=dict(base, max_processes=16))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    env = {"write_root": str(write_root), "other_file": str(other_dir / "private.txt"),
           "sock": d.endpoint[len("ipc://"):], "port": srv.getsockname()[1],
           "sup_pid": d.proc.pid, "other_pid": c.info("other")["pid"]}
    rows, failures = [], []
    try:
        for name, code, must, by in attempts(env):
            ctx = "procs" if "subprocesses allowed" in name else "loc"
            r, alive = run_attempt(c, ctx, code)
            out = outcome(r)
            blocked = r.status != "ok"
            rows.append((name, ctx == "procs" and "local+procs" or "local", out, by,
                         "yes" if alive else "NO"))
            if must and (not blocked or r.error is None):
                failures.append(f"{name}: expected an exception in the run, got {r!r}")
            if not must and blocked:
                failures.append(f"{name}: listed as a known gap but was blocked ({out}); "
                                "update the table")
            if not alive:
                failures.append(f"{name}: the context did not answer the next run")
        # Infinite output: cut at --max-output, visibly, and the run ends at its timeout.
        r = c.execute("while True: print('x' * 1000)", ctx="loc", timeout=3)
        alive = c.execute("1 + 1", ctx="loc").text == "2"
        trunc = r.done.get("truncated") is True
        rows.append(("infinite output", "local", f"ended: {r.status}, truncated={trunc}",
                     "daemon max_output (visible truncation) + timeout", "yes" if alive else "NO"))
        if not trunc or r.status != "timeout" or not alive:
            failures.append(f"infinite output: {r!r}")
        assert d.alive()
    finally:
        srv.close()
        write_table(rows)
    assert not failures, "\n".join(failures)


def sandbox_attempts(env):
    """(name, code, blocked_by) for the sandbox tier: every one must fail."""
    other, sock_path, port, sup = env["other_file"], env["sock"], env["port"], env["sup_pid"]
    return [
        ("read /etc/shadow", "open('/etc/shadow').read(1)",
         "mount namespace: not in the sandbox's root (ENOENT)"),
        ("write outside write roots", "open('/etc/ctxd-escape-test', 'w')",
         "read-only root (EROFS)"),
        ("write into the Python installation", "open('/usr/lib/python3.11/os.py', 'a')",
         "read-only bind of /usr (EROFS)"),
        ("connect to host loopback TCP",
         f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)",
         "seccomp: socket() EPERM; behind it a net namespace with no interface up"),
        ("fork bomb",
         "pids = []\ntry:\n    while True:\n        p = os.fork()\n        if p == 0:\n"
         "            import time; time.sleep(30); os._exit(0)\n        pids.append(p)\n"
         "finally:\n    for p in pids:\n        os.kill(p, 9); os.waitpid(p, 0)",
         "pids cgroup (max_processes): fork EAGAIN"),
        ("allocate 4x memory limit", "x = bytearray(4 * (512 << 20))",
         "RLIMIT_AS (memory_bytes): MemoryError; memory cgroup behind it"),
        ("ptrace the supervisor", f"_c('ptrace', 16, {sup}, 0, 0)",
         "seccomp allowlist: ptrace EPERM"),
        ("mount", "_c('mount', b'none', b'/tmp', b'tmpfs', 0, None)",
         "seccomp allowlist: mount EPERM; no capabilities"),
        ("unshare", "_c('unshare', 0x10000000)", "seccomp allowlist: unshare EPERM"),
        ("setns", "fd = os.open('/proc/self/ns/net', os.O_RDONLY); _c('setns', fd, 0)",
         "seccomp allowlist: setns EPERM"),
        ("kill the supervisor", f"os.kill({sup}, 9)",
         "pid namespace: no such process (ESRCH)"),
        ("list other contexts' processes",
         f"assert {env['other_pid']} in [int(p) for p in os.listdir('/proc') if p.isdigit()],"
         " 'not visible'", "pid namespace: own /proc shows only the sandbox"),
        ("read another context's files", f"open({other!r}).read()",
         "mount namespace: other directories are not in the root (ENOENT)"),
        ("read the daemon's secret env var",
         "v = os.environ.get('CTXD_ESCAPE_SECRET') or open('/proc/self/environ','rb').read()"
         f"\nassert {SECRET!r} in str(v), 'absent'", "clean environment (allowlist): absent"),
        ("connect to the daemon's socket",
         f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({sock_path!r})",
         "seccomp: socket() EPERM; the socket's directory is not in the root"),
        ("write a 10 GB file",
         "f = open('big', 'wb')\nfor i in range(10240):\n    f.write(b'x' * (1 << 20))",
         "RLIMIT_FSIZE (file_size_bytes): EFBIG"),
        ("setuid binary",
         "import subprocess\nr = subprocess.run(['/usr/bin/passwd', '-d', 'root'], "
         "capture_output=True)\nassert r.returncode == 0, r.stderr",
         "no_new_privs, nosuid mounts, no capabilities (SECBIT_NOROOT): passwd fails"),
        ("load a kernel module", "_c('init_module', None, 0, b'')",
         "seccomp allowlist: init_module EPERM"),
        ("raw io_uring", "_c('syscall', 425, 8, None)", "seccomp allowlist: io_uring_setup EPERM"),
        ("offer pages to same-page merging (madvise)", MADV_MERGEABLE,
         "seccomp allowlist: madvise(MADV_MERGEABLE) EPERM"),
        ("offer pages to same-page merging (prctl)", MEMORY_MERGE,
         "seccomp allowlist: prctl(PR_SET_MEMORY_MERGE) EPERM"),
    ]


def test_escape_sandbox(make_daemon, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXD_ESCAPE_SECRET", SECRET)
    d = make_daemon("--max-output", "1M")
    c = d.client()
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    c.ok("ctx.create", name="other", cwd=str(other_dir))
    c.execute("open('private.txt', 'w').write('other context data')", ctx="other")
    c.ok("ctx.create", name="sbx", tier="sandbox",
         policy={"memory_bytes": 512 << 20, "file_size_bytes": 10 << 20, "max_processes": 16,
                 "timeout": 30})
    assert c.info("sbx")["tier"] == "sandbox"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    env = {"other_file": str(other_dir / "private.txt"), "sock": d.endpoint[len("ipc://"):],
           "port": srv.getsockname()[1], "sup_pid": d.proc.pid,
           "other_pid": c.info("other")["pid"]}
    rows, failures = [], []
    try:
        for name, code, by in sandbox_attempts(env):
            r, alive = run_attempt(c, "sbx", code)
            out = outcome(r)
            rows.append((name, "sandbox", out, by, "yes" if alive else "NO"))
            if r.status == "ok" or r.error is None:
                failures.append(f"{name}: expected an exception in the run, got {r!r}")
            if not alive:
                failures.append(f"{name}: the context did not answer the next run")
        r = c.execute("while True: print('x' * 1000)", ctx="sbx", timeout=3)
        alive = c.execute("1 + 1", ctx="sbx").text == "2"
        trunc = r.done.get("truncated") is True
        rows.append(("infinite output", "sandbox", f"ended: {r.status}, truncated={trunc}",
                     "daemon max_output (visible truncation) + timeout",
                     "yes" if alive else "NO"))
        if not trunc or r.status != "timeout" or not alive:
            failures.append(f"infinite output: {r!r}")
        assert d.alive()
    finally:
        srv.close()
        write_table(rows, "sandbox")
    assert not failures, "\n".join(failures)
