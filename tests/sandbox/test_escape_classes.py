"""The red team's classes of escape (issue #12), each tried in both
confining tiers (`local`, `sandbox`) and, for the process-lifetime ones, in
`unsafe` too. Every attempt must be blocked: an exception inside the run
(or, where the escape would show only on the host, a check made on the host
after the run), with the context answering the next run. The table
(attempt, tier, outcome, what blocked it, context alive after) goes to
$CTXD_ESCAPE_TABLE with the suffix `_classes`.

The daemon runs as root (as a service does): confined workers get uids of
their own (ctxd --worker-uids), so these attempts also check that no worker
holds the daemon's identity."""

import ctypes
import os
import signal
import socket
import stat
import subprocess
import textwrap
import time

import pytest

import reachable
from test_escape import PRELUDE, SECRET, outcome, write_table

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the red team's daemon runs as root")

TIERS = ("local", "sandbox")


def make_contexts(c, tmp_path, tier, **extra):
    """The attacker's context `a` (with a write root) and a victim `v`."""
    wr = reachable.writable(tmp_path / f"{tier}-w")
    policy = {"memory_bytes": 512 << 20, "timeout": 30, "filesystem_write_roots": [str(wr)]}
    policy.update(extra)
    c.ok("ctx.create", name=f"{tier}-a", tier=tier, policy=policy)
    c.ok("ctx.create", name=f"{tier}-v", tier=tier)
    return wr


def run(c, ctx, code, timeout=20):
    r = c.execute(PRELUDE + textwrap.dedent(code), ctx=ctx, timeout=timeout)
    alive = c.execute("1 + 1", ctx=ctx).text == "2"
    return r, alive


class Table:
    def __init__(self):
        self.rows, self.failures = [], []

    def add(self, name, tier, r, alive, by, host_escape=None, host_checked=False):
        """host_escape: None, or a string when the host shows an escape;
        host_checked: the host's view decides (the run itself may succeed)."""
        out = outcome(r) if r is not None else "refused"
        if host_checked and host_escape is None:
            out = "harmless inside (host checked): " + out
        blocked = (host_checked or r is None or r.status != "ok") and host_escape is None
        if host_escape:
            out = "ESCAPED: " + host_escape
        self.rows.append((name, tier, out, by, "yes" if alive else "NO"))
        if not blocked:
            self.failures.append(f"{tier}: {name}: not blocked: {out} {r!r}")
        if not alive:
            self.failures.append(f"{tier}: {name}: the context did not answer the next run")


@pytest.fixture(scope="module")
def table():
    t = Table()
    yield t
    write_table(t.rows, "classes")


# ---- 1. a confined worker never holds the daemon's identity -------------

IDENTITY = [
    ("run as the daemon's uid (root)",
     "m = open('/proc/self/uid_map').read().split()\n"
     "host = int(m[1]) + os.geteuid() - int(m[0])\nassert host == 0, 'host uid %d' % host",
     {"local": "own uid from --worker-uids", "sandbox": "uid 0 inside maps to its own uid"}),
    ("any capability left",
     "caps = {l.split(':')[0]: int(l.split()[1], 16) for l in open('/proc/self/status')"
     " if l.startswith('Cap')}\nassert any(caps.values()), caps",
     {"local": "all sets empty (bounding too)", "sandbox": "all sets empty (bounding too)"}),
    ("setuid(0)", "os.setuid(0); assert os.getuid() == 0",
     {"local": "no CAP_SETUID: EPERM", "sandbox": "no CAP_SETUID: EPERM"}),
    ("rewrite a host sysctl", "open('/proc/sys/kernel/hostname', 'w').write('pwned')",
     {"local": "uid: /proc/sys belongs to root (EACCES)",
      "sandbox": "/proc/sys read-only bind (EROFS); host root not mapped"}),
    ("open core_pattern for writing", "open('/proc/sys/kernel/core_pattern', 'w')",
     {"local": "uid (EACCES)", "sandbox": "/proc/sys read-only (EROFS)"}),
    ("sysrq-trigger", "open('/proc/sysrq-trigger', 'w').write('h')",
     {"local": "uid: root's (EACCES), where the kernel has it",
      "sandbox": "masked: read-only (EROFS), where the kernel has it"}),
    ("read kernel symbols / kcore",
     "d = open('/proc/kcore', 'rb').read(16)\nassert d, 'masked'",
     {"local": "uid: kcore is root's (EACCES), where the kernel has it",
      "sandbox": "masked by /dev/null (empty), where the kernel has it"}),
    ("read the kernel log", "assert os.read(os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK), 99)",
     {"local": "dmesg_restrict / no CAP_SYSLOG", "sandbox": "/dev/kmsg not in the root"}),
    ("real-time scheduling", "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))",
     {"local": "no CAP_SYS_NICE, RLIMIT_RTPRIO 0: EPERM",
      "sandbox": "seccomp allowlist / no capability: EPERM"}),
    ("make a device node",
     "os.mknod('dev0', 0o600 | stat.S_IFCHR, os.makedev(1, 3))\n"
     "assert open('dev0', 'rb').read(1) is not None",
     {"local": "no CAP_MKNOD: EPERM", "sandbox": "no CAP_MKNOD (EPERM); nodev binds"}),
    ("leave the cgroup (v2)",
     "open('/sys/fs/cgroup/unified/cgroup.procs', 'w').write(str(os.getpid()))",
     {"local": "uid: cgroup.procs is root's (EACCES)", "sandbox": "no /sys in the root"}),
    ("leave the pids cgroup (v1)",
     "open('/sys/fs/cgroup/pids/cgroup.procs', 'w').write(str(os.getpid()))",
     {"local": "uid: cgroup.procs is root's (EACCES)", "sandbox": "no /sys in the root"}),
]


@pytest.mark.parametrize("tier", TIERS)
def test_identity(make_daemon, tmp_path, tier, table):
    d = make_daemon()
    c = d.client()
    make_contexts(c, tmp_path, tier)
    for name, code, by in IDENTITY:
        r, alive = run(c, f"{tier}-a", "import stat\n" + code)
        table.add(name, tier, r, alive, by[tier])
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


@pytest.mark.parametrize("tier", TIERS)
def test_setuid_binary_in_write_root(make_daemon, tmp_path, tier, table):
    """A setuid-root binary made in a write root must not be one on the host."""
    d = make_daemon()
    c = d.client()
    wr = make_contexts(c, tmp_path, tier)
    target = wr / "su"
    r, alive = run(c, f"{tier}-a", f"""
        import shutil
        shutil.copy('/usr/bin/id', {str(target)!r})
        os.chown({str(target)!r}, 0, 0)
        os.chmod({str(target)!r}, 0o4755)
        """)
    st = os.lstat(target) if target.exists() else None
    escaped = None
    if st and st.st_uid == 0 and st.st_mode & stat.S_ISUID:
        escaped = "a setuid-root file on the host"
    by = {"local": "own uid: chown to 0 EPERM",
          "sandbox": "its root is its own uid outside: the file is not root's on the host"}[tier]
    # In a sandbox, chown to 0 is chown to its own uid outside: allowed, harmless.
    table.add("setuid-root binary in a write root", tier, r, alive, by, escaped,
              host_checked=tier == "sandbox")
    assert escaped is None


# ---- 2. nothing of the daemon is reachable ------------------------------

@pytest.mark.parametrize("tier", TIERS)
def test_daemon_unreachable(make_daemon, tmp_path, tier, table, monkeypatch):
    monkeypatch.setenv("CTXD_ESCAPE_SECRET", SECRET)
    d = make_daemon()
    sock = d.endpoint[len("ipc://"):]
    os.chmod(os.path.dirname(sock), 0o711)  # the socket's directory: others pass, never list
    c = d.client()
    make_contexts(c, tmp_path, tier, network_access=False)
    sock = d.endpoint[len("ipc://"):]
    zygote = int(subprocess.run(["pgrep", "-P", str(d.proc.pid), "-f", "--", "--zygote"],
                                capture_output=True, text=True).stdout.split()[0])
    other_pid = c.info(f"{tier}-v")["pid"]
    attempts = [
        ("io_uring (IORING_OP_SOCKET path)", "_c('syscall', 425, 8, ctypes.create_string_buffer(120))",
         {"local": "seccomp: io_uring_setup EPERM", "sandbox": "seccomp allowlist: EPERM"}),
        ("socketpair + connect to the daemon's socket", f"""
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.connect({sock!r})""",
         {"local": "seccomp: connect EPERM (network_access false); socket dir 0700 root",
          "sandbox": "seccomp; the socket is not in the root"}),
        ("sendto a path from a socketpair", f"""
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.sendto(b'x', {sock!r})""",
         {"local": "seccomp: sendto with an address EPERM", "sandbox": "not in the root"}),
        ("list the daemon's socket directory", f"os.listdir({os.path.dirname(sock)!r})",
         {"local": "mode 0700, another uid: EACCES", "sandbox": "not in the root: ENOENT"}),
        ("read the supervisor's environment",
         f"assert {SECRET!r}.encode() in open('/proc/{d.proc.pid}/environ', 'rb').read()",
         {"local": "uid: EACCES", "sandbox": "pid namespace: ENOENT"}),
        ("read the zygote's environment",
         f"assert {SECRET!r}.encode() in open('/proc/{zygote}/environ', 'rb').read()",
         {"local": "uid: EACCES", "sandbox": "pid namespace: ENOENT"}),
        ("read another context's environment and memory",
         f"open('/proc/{other_pid}/environ', 'rb').read(); open('/proc/{other_pid}/mem', 'rb')",
         {"local": "another uid: EACCES", "sandbox": "pid namespace: ENOENT"}),
        ("list other contexts' directories",
         f"assert set(os.listdir({os.path.dirname(c.info(tier + '-v')['cwd'])!r})) - "
         "{os.path.basename(os.getcwd())}, 'only its own'",
         {"local": "state directory 0711: EACCES",
          "sandbox": "only its own directory is in the root"}),
        ("enter another context's directory", f"os.listdir({c.info(tier + '-v')['cwd']!r})",
         {"local": "0700, another uid: EACCES", "sandbox": "not in the root: ENOENT"}),
        ("read the server key",
         f"open({os.path.dirname(os.path.dirname(os.path.dirname(c.info(tier + '-v')['cwd'])))!r}"
         " + '/server.key').read()",
         {"local": "0600 root (or absent): EACCES/ENOENT", "sandbox": "not in the root"}),
        ("signal another context", f"os.kill({other_pid}, 0)",
         {"local": "another uid + Landlock scope: EPERM", "sandbox": "pid namespace: ESRCH"}),
    ]
    for name, code, by in attempts:
        r, alive = run(c, f"{tier}-a", "import socket\n" + textwrap.dedent(code))
        table.add(name, tier, r, alive, by[tier])
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


# ---- 4. paths are opened by descriptor, never followed ------------------

@pytest.mark.parametrize("tier", TIERS)
def test_symlinked_paths_refused(make_daemon, tmp_path, tier, table):
    """Code of one context leaves symbolic links in its directory; a later
    context named with them as cwd or roots must be refused, never given
    the host's / or /proc."""
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="planter", tier="unsafe")
    home = c.info("planter")["cwd"]
    run(c, "planter", "os.symlink('/', 'root'); os.symlink('/proc', 'proc'); os.mkdir('sub');"
        "os.symlink('/etc', 'sub/etc')")
    for field, path in (("cwd", f"{home}/root"), ("cwd", f"{home}/sub/etc"),
                        ("filesystem_read_roots", f"{home}/proc"),
                        ("filesystem_write_roots", f"{home}/root"),
                        ("filesystem_write_roots", f"{home}/sub/etc/ssl")):
        kw = {"cwd": path} if field == "cwd" else {"policy": {field: [path]}}
        r = c.request("ctx.create", name="victim", tier=tier, **kw)
        refused = r["t"] == "err" and "symbolic link" in r["message"]
        if r["t"] == "ok":
            c.request("ctx.delete", ctx="victim")
        table.rows.append((f"{field} through a symlink ({os.path.relpath(path, home)})", tier,
                           "refused: " + r["code"] if refused else "ACCEPTED", "openat2 RESOLVE_NO_SYMLINKS at create (and in the worker)",
                           "yes"))
        if not refused:
            table.failures.append(f"{tier}: {field}={path}: accepted: {r!r}")
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


# ---- 5. budgets that cannot be ignored ----------------------------------

@pytest.mark.parametrize("tier", TIERS)
def test_budgets(make_daemon, tmp_path, tier, table):
    d = make_daemon("--kill-grace", "1")
    c = d.client()
    make_contexts(c, tmp_path, tier, cpu_seconds=1, max_processes=16, memory_bytes=256 << 20)
    # cpu_seconds with SIGXCPU ignored (and SIGINT too): the cgroup counts.
    r, alive = run(c, f"{tier}-a", """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            pass
        """, timeout=60)
    ok = r.status == "timeout" and "cpu_seconds" in (r.done.get("cause") or "")
    table.add("ignore SIGXCPU and SIGINT, burn CPU", tier, r, alive,
              "cgroup CPU time read by the supervisor; kill after grace")
    if not ok:
        table.failures.append(f"{tier}: cpu budget: {r!r}")
    # ... and with the run never saying it started: the worker holds a run's
    # `start` back until its first frame or until its timerfd fires, so a
    # cell that disarms that timer as it begins (bound in the run before,
    # which waits until the timer it armed has fired) and writes nothing
    # never sends one. The supervisor counts from its own dispatch.
    setup = c.execute(PRELUDE + textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        def _kind(f):
            try:
                return os.readlink(f'/proc/self/fd/{f}')
            except OSError:
                return ''  # the listing's own descriptor
        _timers = [int(f) for f in os.listdir('/proc/self/fd')
                   if _kind(f) == 'anon_inode:[timerfd]']
        _zero = (ctypes.c_long * 4)()
        def disarm():
            for fd in _timers:
                _libc.timerfd_settime(fd, 0, _zero, None)
        time.sleep(0.01)
        len(_timers)
        """), ctx=f"{tier}-a")
    assert setup.status == "ok" and int(setup.text) >= 1, setup
    r = c.execute("disarm()\nwhile True: pass", ctx=f"{tier}-a", timeout=60)
    alive = c.execute("1 + 1", ctx=f"{tier}-a").text == "2"
    ok = r.status == "timeout" and "cpu_seconds" in (r.done.get("cause") or "")
    table.add("disarm the timer that sends the run's start, burn CPU", tier, r, alive,
              "cgroup CPU time read by the supervisor from dispatch on")
    if not ok:
        table.failures.append(f"{tier}: cpu budget without start: {r!r}")
    # ... and in children, which the worker's own timer does not count.
    r, alive = run(c, f"{tier}-a", """
        pids = []
        for i in range(2):
            p = os.fork()
            if p == 0:
                while True:
                    pass
            pids.append(p)
        try:
            for p in pids:
                os.waitpid(p, 0)
        finally:
            for p in pids:
                os.kill(p, 9)
        """, timeout=60)
    table.add("burn CPU in children", tier, r, alive,
              "cgroup CPU time (children included) read by the supervisor")
    # memory_bytes for the whole context: 4 children x 100 MiB under 256 MiB.
    r, alive = run(c, f"{tier}-a", """
        pids = []
        for i in range(4):
            p = os.fork()
            if p == 0:
                x = bytearray(100 << 20)
                for k in range(0, len(x), 4096):
                    x[k] = 1
                import time; time.sleep(3); os._exit(0)
            pids.append(p)
        codes = [os.waitpid(p, 0)[1] for p in pids]
        assert all(c == 0 for c in codes), 'a child was killed: %r' % codes
        """, timeout=60)
    table.add("4 children x 100 MiB under 256 MiB", tier, r, alive,
              "memory cgroup for the whole context: OOM kill")
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


def test_sysv_ipc_private(make_daemon, tmp_path, table):
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="ipc-a", tier="local")
    c.ok("ctx.create", name="ipc-b", tier="local")
    key = 0x5eed
    r = c.execute(PRELUDE + f"_c('shmget', {key}, 4096, 0o1666)", ctx="ipc-a")
    assert r.status == "ok", r
    r, alive = run(c, "ipc-b", f"_c('shmget', {key}, 0, 0o666)")
    table.add("SysV shared memory of another context", "local", r, alive,
              "own IPC namespace per context: ENOENT")
    assert r.status != "ok"


# ---- 8. processes never outlive their context ---------------------------

ESCAPERS = """
import os, subprocess
subprocess.Popen(['setsid', 'sleep', {mark!r}])
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', {mark!r}])
    os._exit(0)
os.waitpid(pid, 0)
"""


def host_pids_of(mark):
    """Host pids of the escapers: `sleep MARK`."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/cmdline", "rb").read() == b"sleep\0" + mark.encode() + b"\0":
                found.append(int(p))
        except OSError:
            pass
    return found


def running(pid):
    """Whether pid is a live, not yet zombie, process. A process reaped
    between the open and the read (ESRCH) or before the open is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        alive = [p for p in pids if running(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("tier", ("unsafe", "local", "sandbox"))
@pytest.mark.parametrize("how", ("delete", "restart", "daemon exit", "daemon killed"))
def test_processes_die_with_context(make_daemon, tmp_path, tier, how, table):
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="e", tier=tier, policy={"timeout": 30} if tier != "unsafe" else None)
    mark = "%d.%06d" % (300, os.getpid() % 1000000) + str(time.monotonic_ns() % 1000)
    r = c.execute(ESCAPERS.format(mark=mark), ctx="e")
    assert r.status == "ok", r.error
    pids = []
    end = time.monotonic() + 10
    while len(pids) < 2 and time.monotonic() < end:
        pids = host_pids_of(mark)
        time.sleep(0.05)
    assert len(pids) == 2, f"the escapers did not start: {pids}"
    if how == "delete":
        c.ok("ctx.delete", ctx="e")
    elif how == "restart":
        c.ok("ctx.restart", ctx="e")
    elif how == "daemon exit":
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(20)
        d.stopped_by_test = True
    else:  # SIGKILL: the next daemon sweeps what its predecessor left
        d.proc.kill()
        d.proc.wait(20)
        d.stopped_by_test = True
        d2 = make_daemon()
        d2.client().ok("hello")
    left = wait_gone(pids)
    table.rows.append((f"setsid + double fork survive {how}", tier,
                       "SURVIVED" if left else "killed", "the context's cgroup (cgroup.kill)"
                       + (", swept by the next daemon" if how == "daemon killed" else ""), "-"))
    for p in left:
        os.kill(p, 9)
    assert not left, f"{tier}/{how}: processes outlived their context: {left}"


# ---- 9. safe defaults -----------------------------------------------------

@pytest.mark.parametrize("tier", TIERS)
def test_defaults(make_daemon, tmp_path, tier, table):
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="plain", tier=tier)
    cwd = c.info("plain")["cwd"]
    for name, code, by in (
            ("works in the daemon's directory",
             f"assert os.getcwd() in ({d.cwd!r}, {os.getcwd()!r}), os.getcwd()",
             "a private directory of its own under the state directory"),
            ("write outside its directory", "open('/var/tmp/ctxd-escape', 'w').write('x')",
             {"local": "Landlock: default write roots are its directory and /dev/shm",
              "sandbox": "read-only root"}[tier]),
            ("write into /etc", "open('/etc/ctxd-escape', 'w')", "own uid (and Landlock / EROFS)")):
        r, alive = run(c, "plain", code)
        table.add(name, tier, r, alive, by)
    assert cwd.startswith(os.path.realpath(cwd).rsplit("/contexts/", 1)[0])
    assert not os.path.exists("/var/tmp/ctxd-escape") and not os.path.exists("/etc/ctxd-escape")
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


# ---- 3. the supervisor acts on nothing a worker says -----------------------

FORGER = """
import struct
def _mp(o):
    if isinstance(o, int):
        return b'\\xcf' + struct.pack('>Q', o)
    if isinstance(o, str):
        b = o.encode()
        return b'\\xdb' + struct.pack('>I', len(b)) + b
    return b'\\xdf' + struct.pack('>I', len(o)) + b''.join(_mp(k) + _mp(v) for k, v in o.items())
def forge(m):
    b = _mp(m)
    os.write(3, struct.pack('>I', len(b)) + b)
"""


@pytest.mark.parametrize("tier", ("unsafe",) + TIERS)
def test_forged_frames_act_on_nothing(make_daemon, tmp_path, tier, table):
    d = make_daemon()
    c = d.client()
    victim = subprocess.Popen(["sleep", "300"])
    try:
        for name, forged, by in (
                ("forged `forked` naming a host pid", {"t": "forked", "run_id": 1, "pid": victim.pid},
                 "no fork pending: the worker is killed and reported; pids are never taken "
                 "from a worker (pidfds, its cgroup)"),
                ("forged `forked` naming pid 1", {"t": "forked", "run_id": 1, "pid": 1},
                 "the same"),
                ("forged `done` for another run", {"t": "done", "run_id": 12345, "status": "ok"},
                 "run ids: a frame for no run in progress kills the worker")):
            c.ok("ctx.create", name="f", tier=tier)
            r = c.execute(PRELUDE + FORGER + f"forge({forged!r})\nimport time; time.sleep(5)",
                          ctx="f", timeout=20)
            c.ok("ctx.delete", ctx="f")  # what a forged pid would have been killed with
            alive = victim.poll() is None and os.path.exists("/proc/1")
            blocked = r.status == "died" and "channel protocol" in (r.done.get("cause") or "")
            table.rows.append((name, tier, "blocked: died: " + (r.done.get("cause") or "")[:60]
                               if blocked else "NOT BLOCKED: " + r.status, by,
                               "daemon yes" if d.alive() else "DAEMON DEAD"))
            assert blocked, r
            assert alive, "a process outside the context was signalled"
            assert c.request("hello")["t"] == "ok"
    finally:
        victim.kill()


# ---- 10. a uid is an identity, not a counter ---------------------------------
# A context's uid is all that guards what it leaves behind (a 0600 file in a
# write root shared with other contexts, or in /dev/shm): the uid must never
# be another context's while that remains, neither after the daemon restarts
# nor in a second daemon of the host (sup_uidreg.c, sup_ident.c).

UID_LEAVE = """
fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, b'the victim context secret')
os.close(fd)
"""


@pytest.mark.parametrize("tier", TIERS)
def test_uid_leftovers(make_daemon, tmp_path, zctx, tier, table):
    import conftest
    Daemon, finish = conftest._mod.Daemon, conftest._mod._finish
    wr = reachable.writable(tmp_path / f"{tier}-shared")
    pol = {"timeout": 30, "filesystem_write_roots": [str(wr)]}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = ("--state-dir", str(tmp_path / "state"))
    d = Daemon(run_dir, zctx).start(args)
    try:
        c = d.client()
        c.ok("ctx.create", name="v", tier=tier, policy=pol)
        secret = str(wr / "victim.secret")
        r, _ = run(c, "v", UID_LEAVE.format(path=secret))
        assert r.status == "ok" and os.path.exists(secret), r.terminal
        c.ok("ctx.delete", ctx="v")
        finish(d)
        d = Daemon(run_dir, zctx).start(args)  # restarted: its allocator is not lost
        c = d.client()
        c.ok("ctx.create", name="a", tier=tier, policy=pol)
        r, alive = run(c, "a", f"print(open({secret!r}).read())")
        table.add("read what a deleted context left (0600, shared write root) after a daemon "
                  "restart", tier, r, alive,
                  "a uid is not handed out again while what it left may remain "
                  "(allocator saved in the state directory)")
        other = make_daemon()  # a second daemon of the host, default flags
        oc = other.client()
        oc.ok("ctx.create", name="a", tier=tier, policy=pol)
        r, alive = run(oc, "a", f"print(open({secret!r}).read())")
        table.add("read another daemon's context's 0600 file (shared write root)", tier, r,
                  alive, "each daemon's uid range is its own on the host (uid registry)")
    finally:
        finish(d)
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)
