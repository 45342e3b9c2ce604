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
import fcntl
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


@pytest.mark.parametrize("tier", TIERS)
def test_posix_queue_private(make_daemon, tmp_path, tier, table):
    """README and PROTOCOL: POSIX message queues are never shared: each
    confined context has its own IPC namespace, and so its own queues (on
    this kernel a `local` context cannot make one: EACCES; `sandbox`'s
    allowlist refuses mq_open). Whatever the maker got, the other context
    must not open it."""
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="mq-a", tier=tier)
    c.ok("ctx.create", name="mq-b", tier=tier)
    make = c.execute(PRELUDE + "os.umask(0)\n"
                     "_c('mq_open', b'/ctxd-escape-mq', os.O_CREAT | os.O_RDWR, 0o666, None)",
                     ctx="mq-a")
    r, alive = run(c, "mq-b", "_c('mq_open', b'/ctxd-escape-mq', os.O_RDWR)")
    by = "own IPC namespace per context (its own mqueue): ENOENT"
    if make.status != "ok":
        by = "the queue could not be made: " + outcome(make)
    table.add("open another context's POSIX message queue", tier, r, alive, by)
    assert r.status != "ok", r
    # ... and one the host made, 0666, in the host's IPC namespace.
    libc = ctypes.CDLL(None, use_errno=True)
    old = os.umask(0)
    try:
        q = libc.mq_open(b"/ctxd-escape-mq-host", os.O_CREAT | os.O_RDWR, 0o666, None)
    finally:
        os.umask(old)
    assert q >= 0, os.strerror(ctypes.get_errno())
    try:
        r, alive = run(c, "mq-b", "_c('mq_open', b'/ctxd-escape-mq-host', os.O_RDWR)")
        table.add("open the host's POSIX message queue (0666)", tier, r, alive,
                  {"local": "own IPC namespace per context: ENOENT",
                   "sandbox": "seccomp allowlist: EPERM (and its own IPC namespace)"}[tier])
        assert r.status != "ok", r
    finally:
        os.close(q)
        libc.mq_unlink(b"/ctxd-escape-mq-host")

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


# ---- 10. namespaces by flag; private by default (wave 3: classes 1, 3) ----
# (the classes 1 and 3, and /dev/shm outliving ctx.delete of 2)

# A raw clone/clone3 made with the GIL held (PyDLL), so the child, one
# thread, can run os._exit at once: 0 in the child, its pid in the parent.
CLONE_PRELUDE = textwrap.dedent("""
    import ctypes, os, signal
    _py = ctypes.PyDLL(None, use_errno=True)
    _py.syscall.restype = ctypes.c_long
    def _clone(flags):
        pid = _py.syscall(ctypes.c_long(56), ctypes.c_long(flags | signal.SIGCHLD),
                          ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
        if pid == 0:
            os._exit(0)
        if pid < 0:
            e = ctypes.get_errno()
            raise OSError(e, 'clone: ' + os.strerror(e))
        os.waitpid(pid, 0)
    class _Args(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in (
            'flags', 'pidfd', 'child_tid', 'parent_tid', 'exit_signal', 'stack',
            'stack_size', 'tls', 'set_tid', 'set_tid_size', 'cgroup')]
    def _clone3(flags):
        a = _Args(flags=flags, exit_signal=signal.SIGCHLD)
        pid = _py.syscall(ctypes.c_long(435), ctypes.byref(a), ctypes.c_long(ctypes.sizeof(a)))
        if pid == 0:
            os._exit(0)
        if pid < 0:
            e = ctypes.get_errno()
            raise OSError(e, 'clone3: ' + os.strerror(e))
        os.waitpid(pid, 0)
""")

NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET = (
    0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)

NAMESPACE_ATTEMPTS = [
    ("clone(CLONE_NEWUSER | SIGCHLD), subprocess allowed", f"_clone({NEWUSER})"),
    ("clone(CLONE_NEWUSER | CLONE_NEWNET)", f"_clone({NEWUSER | NEWNET})"),
    ("clone(CLONE_NEWUSER | CLONE_NEWNS)", f"_clone({NEWUSER | NEWNS})"),
    ("clone(CLONE_NEWUSER | CLONE_NEWPID)", f"_clone({NEWUSER | NEWPID})"),
    ("clone(CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP)",
     f"_clone({NEWUSER | NEWIPC | NEWUTS | NEWCGROUP})"),
    ("clone3 {flags: CLONE_NEWUSER}", f"_clone3({NEWUSER})"),
    ("clone3 {flags: CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS}",
     f"_clone3({NEWUSER | NEWNET | NEWNS})"),
]


@pytest.mark.parametrize("tier", TIERS)
def test_namespace_flags(make_daemon, tmp_path, tier, table):
    d = make_daemon()
    c = d.client()
    make_contexts(c, tmp_path, tier)
    # the same process can still fork and start programs
    r = c.execute("import subprocess; print(subprocess.run(['true']).returncode)",
                  ctx=f"{tier}-a")
    assert r.status == "ok" and r.stdout.decode().strip() == "0", r
    by = {"local": "seccomp: clone with a CLONE_NEW* flag EPERM; clone3 ENOSYS",
          "sandbox": "seccomp allowlist: clone only without CLONE_NEW*; clone3 ENOSYS"}[tier]
    for name, code in NAMESPACE_ATTEMPTS:
        r, alive = run(c, f"{tier}-a", CLONE_PRELUDE + code)
        table.add(name, tier, r, alive, by)
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


@pytest.mark.parametrize("tier", TIERS)
def test_dev_shm_private(make_daemon, tmp_path, tier, table):
    """One context's 0644 file in /dev/shm (and /tmp) is not another's to
    read, and none is left on the host after ctx.delete."""
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name=f"{tier}-a", tier=tier)  # local's default roots: /dev/shm
    c.ok("ctx.create", name=f"{tier}-v", tier=tier)
    name = f"ctxd-ns-{os.getpid()}-{tier}"
    places = ["/dev/shm"] + (["/tmp"] if tier == "sandbox" else [])
    for place in places:
        r = c.execute(f"import os\np = {place + '/' + name!r}\nopen(p, 'w').write('secret')\n"
                      "os.chmod(p, 0o644)", ctx=f"{tier}-a")
        assert r.status == "ok", (r.error, r)
        r, alive = run(c, f"{tier}-v", f"print(open({place + '/' + name!r}).read())")
        table.add(f"read another context's 0644 file in {place}", tier, r, alive,
                  f"its own tmpfs {place} per context: ENOENT")
    # a POSIX shared memory segment, multiprocessing's way
    r = c.execute("import os\nfrom multiprocessing import shared_memory\n"
                  f"s = shared_memory.SharedMemory({name + '-sm'!r}, create=True, size=4096)\n"
                  "s.buf[:6] = b'secret'\nos.fchmod(s._fd, 0o666)", ctx=f"{tier}-a")
    assert r.status == "ok", (r.error, r)
    r, alive = run(c, f"{tier}-v", "from multiprocessing import shared_memory\n"
                   f"print(bytes(shared_memory.SharedMemory({name + '-sm'!r}).buf[:6]))")
    table.add("open another context's SharedMemory (mode 0666)", tier, r, alive,
              "its own tmpfs /dev/shm per context: ENOENT")
    c.ok("ctx.delete", ctx=f"{tier}-a")
    left = [p for p in ("/dev/shm/" + name, "/dev/shm/" + name + "-sm") if os.path.exists(p)]
    for p in left:
        os.unlink(p)
    table.add("/dev/shm files left on the host after ctx.delete", tier, None, True,
              "the context's /dev/shm is its own tmpfs, gone with its worker",
              "left on the host: " + ", ".join(left) if left else None, host_checked=True)
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


def test_multiprocessing_with_private_shm(make_daemon):
    """multiprocessing's semaphores and shared memory live in /dev/shm: they
    work in `local` with a private one."""
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="mp", tier="local")
    r = c.execute(textwrap.dedent("""
        import multiprocessing as mp
        from multiprocessing import shared_memory
        q = mp.Queue()
        p = mp.Process(target=q.put, args=(42,))
        p.start(); got = q.get(timeout=20); p.join()
        s = shared_memory.SharedMemory(create=True, size=4096)
        s.buf[:2] = b'ok'
        t = shared_memory.SharedMemory(s.name)
        print(got, bytes(t.buf[:2]).decode(), mp.Lock().acquire())
        t.close(); s.close(); s.unlink()
        """), ctx="mp", timeout=60)
    assert r.status == "ok" and r.stdout.decode().split() == ["42", "ok", "True"], r


@pytest.mark.parametrize("tier", TIERS)
def test_files_private_by_default(make_daemon, tmp_path, tier, table):
    """umask 077: what a confined context creates with plain open(), mkdir()
    and a subprocess is neither group- nor other-readable on the host."""
    d = make_daemon()
    c = d.client()
    wr = make_contexts(c, tmp_path, tier)
    cwd = c.info(f"{tier}-v")["cwd"]  # the default policy: it writes its directory
    f, dd, g, sub = wr / "f", wr / "d", os.path.join(cwd, "g"), os.path.join(cwd, "s")
    made = {"open() in a write root": f, "mkdir() in a write root": dd,
            "open() in its directory": g, "a subprocess's file": sub}
    r = c.execute(f"import os\nopen({str(f)!r}, 'w').write('x')\nos.mkdir({str(dd)!r})",
                  ctx=f"{tier}-a")
    assert r.status == "ok", (r.error, r)
    r = c.execute("import subprocess\nopen('g', 'w').write('x')\n"
                  "subprocess.run(['touch', 's'], check=True)", ctx=f"{tier}-v")
    assert r.status == "ok", (r.error, r)
    for what, path in made.items():
        mode = os.stat(path).st_mode & 0o777
        table.add(f"{what} readable by group/other", tier, None, True,
                  "umask 077 in every confined worker (inherited by its children)",
                  f"mode {mode:04o}" if mode & 0o077 else None, host_checked=True)
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


@pytest.mark.parametrize("tier", TIERS)
def test_default_read_set(make_daemon, tmp_path, tier, table):
    """A context without read roots still reads no other context's
    operator-given cwd shared the README's way (group FIRST of
    --worker-uids, g+rwx), nor the host's /tmp. (The state directory is
    closed by its modes already: 0711, nothing in it other-readable.)"""
    d = make_daemon()
    c = d.client()
    group = d.hello["identity"]["worker_uids"][0]
    shared = tmp_path / f"{tier}-victim-cwd"
    shared.mkdir()
    os.chown(shared, 0, group)
    os.chmod(shared, 0o2770)
    reachable.open_ancestors(shared)
    (shared / "data.csv").write_text("secret\n")
    os.chown(shared / "data.csv", 0, group)
    os.chmod(shared / "data.csv", 0o640)
    c.ok("ctx.create", name=f"{tier}-v", tier=tier, cwd=str(shared))
    c.ok("ctx.create", name=f"{tier}-a", tier=tier)
    if tier == "local":  # its own cwd it reads (a sandbox's root is not in group FIRST)
        r = c.execute("print(open('data.csv').read())", ctx=f"{tier}-v")
        assert r.status == "ok" and b"secret" in r.stdout, r
    by = {"local": "Landlock: the default read set (system, its directory and write roots)",
          "sandbox": "not in its root: ENOENT"}[tier]
    r, alive = run(c, f"{tier}-a", f"print(open({str(shared / 'data.csv')!r}).read())")
    table.add("read another context's group-shared cwd", tier, r, alive, by)
    r, alive = run(c, f"{tier}-a", "print(os.listdir('/tmp'))")
    table.add("list the host's /tmp", tier, r, alive,
              {"local": by, "sandbox": "its own tmpfs /tmp (empty listing)"}[tier],
              None, host_checked=tier == "sandbox")
    # what a context needs still works without read roots
    r = c.execute("import numpy, subprocess, json, ssl, tempfile\n"
                  "tempfile.NamedTemporaryFile().write(b'x')\n"
                  "print(subprocess.run(['/usr/bin/python3', '-c', 'print(6*7)'], capture_output=True,"
                  " text=True).stdout.strip())", ctx=f"{tier}-a", timeout=60)
    assert r.status == "ok" and r.stdout.decode().strip() == "42", r
    assert d.alive()
    assert not [f for f in table.failures if f.startswith(tier)], "\n".join(table.failures)


LOCAL_WORKLOAD = r"""
import io, json, os, ssl, sqlite3, subprocess, sys, tempfile, time, multiprocessing as mp
import numpy
assert float(numpy.linalg.inv(numpy.eye(3)).sum()) == 3.0
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
plt.plot([1, 2, 3]); b = io.BytesIO(); plt.savefig(b, format='png')
assert b.getvalue()[:4] == b'\x89PNG'
ssl.create_default_context()
time.localtime()
with tempfile.NamedTemporaryFile() as f:
    f.write(b'x')
sqlite3.connect('t.db').execute('create table if not exists t (x)')
out = subprocess.run(['/usr/bin/python3', '-c', 'import numpy; print(6*7)'],
                     capture_output=True, text=True, check=True).stdout.strip()
with mp.Pool(2) as p:
    sq = p.map(abs, [-1, -2])
print(out, sq, len(os.listdir('/usr/lib')) > 0)
"""


def test_local_default_read_set_runs_workload(make_daemon):
    """Without read roots, `local` reads only the system, the interpreter,
    its directory and write roots: numpy, matplotlib, ssl, subprocess and
    multiprocessing still work."""
    d = make_daemon()
    c = d.client()
    # a local worker's uid has no home directory: matplotlib is told where
    # its cache goes (the same without this change)
    c.ok("ctx.create", name="wl", tier="local", env={"MPLCONFIGDIR": "/dev/shm/mpl"})
    r = c.execute(LOCAL_WORKLOAD, ctx="wl", timeout=90)
    assert r.status == "ok" and r.stdout.decode().split() == ["42", "[1,", "2]", "True"], \
        (r.error, r.stderr, r)

# ---- 11. snapshots: what is reported is what is kept; the writer's tier (class 4) ----

SNAP_CAP = 96 << 20  # --max-snapshot-bytes of these daemons

# A thread of the cell takes a copy of every writable descriptor that
# appears while the snapshot is written (the file's, had the worker one).
SNAP_GRAB = """
import fcntl, os, signal, threading
import dill  # what importing it opens is not the snapshot's
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
base = set(os.listdir('/proc/self/fd'))
kept, stop = [], []
def grab():
    while not stop:
        for fd in os.listdir('/proc/self/fd'):
            if fd in base:
                continue
            try:
                if os.readlink('/proc/self/fd/' + fd).startswith('pipe:') and kept:
                    continue
                if (os.stat('/proc/self/fd/' + fd).st_mode & 0o170000) not in (0o100000, 0o010000):
                    continue
                if fcntl.fcntl(int(fd), fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                    kept.append(os.dup(int(fd)))
                    base.add(fd)
            except OSError:
                pass
pad = bytes(64 << 20)
t = threading.Thread(target=grab, daemon=True)
t.start()
"""

SNAP_TAMPER = """
stop.append(1)
t.join()
tries = []
for fd in kept:
    for what in (lambda: os.pwrite(fd, b'EVIL', 0),
                 lambda: [os.write(fd, bytes(1 << 20)) for _ in range(48)]):
        try:
            what()
            tries.append('done')
        except OSError as e:
            tries.append(e.errno)
print(len(kept), tries)
"""


def _state_dir(d):
    return d.tmp.parent / (d.tmp.name + "-state")


def _sha(path):
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("tier", TIERS)
def test_snapshot_file_never_the_workers(make_daemon, tmp_path, tier, table):
    """The worker keeps a descriptor it had during the save and, after the
    supervisor reported the snapshot, changes the file and grows it past
    --max-snapshot-bytes: on the host the file is what was reported."""
    d = make_daemon("--max-snapshot-bytes", str(SNAP_CAP))
    c = d.client()
    ctx = f"{tier}-a"
    c.ok("ctx.create", name=ctx, tier=tier, policy={"memory_bytes": 512 << 20})
    assert c.execute(SNAP_GRAB, ctx=ctx).status == "ok"
    snap = c.ok("ctx.snapshot", ctx=ctx, name="s")["snapshot"]
    path = _state_dir(d) / "snapshots" / ctx / "s"
    reported = (snap["size"], _sha(path))
    r, alive = run(c, ctx, SNAP_TAMPER, timeout=60)
    size = os.stat(path).st_size
    changed = None if _sha(path) == reported[1] else "the file changed after it was reported"
    grown = None
    if size != reported[0] or size > SNAP_CAP:
        grown = f"{size} bytes on disk; {reported[0]} reported, cap {SNAP_CAP}"
    by = "the worker writes to a pipe the supervisor copies; the file is never the worker's"
    table.add("keep the snapshot's descriptor, change it after it was reported", tier, r, alive,
              by, changed, host_checked=True)
    table.add("grow a reported snapshot past --max-snapshot-bytes", tier, r, alive,
              by + " (the copier stops at the cap)", grown, host_checked=True)
    assert changed is None and grown is None, (r.stdout, size, reported)
    c.ok("ctx.restore", ctx=ctx, snapshot="s")  # what was reported restores
    assert d.alive()


def _evil_cell(marker):
    return f"""
import os
class E:
    def __reduce__(self):
        return (os.system, ("id -u > {marker}",))
e = E()
"""


@pytest.mark.parametrize("tier", TIERS)
def test_copied_confined_snapshot_not_run_as_root(make_daemon, tmp_path, tier, table):
    """A confined context's snapshot copied with plain cp (no extended
    attribute), then restored into an unsafe context: its pickle must not
    run as root."""
    d = make_daemon()
    c = d.client()
    ctx = f"{tier}-a"
    c.ok("ctx.create", name=ctx, tier=tier, policy={"memory_bytes": 512 << 20})
    marker = tmp_path / f"{tier}-marker"
    assert c.execute(_evil_cell(marker), ctx=ctx).status == "ok"
    assert c.ok("ctx.snapshot", ctx=ctx, name="s")["unsaved"] == []
    snapdir = _state_dir(d) / "snapshots" / ctx
    subprocess.run(["cp", str(snapdir / "s"), str(snapdir / "copied")], check=True)
    c.ok("ctx.create", name="u", tier="unsafe")
    r = c.request("ctx.restore", ctx="u", snapshot=f"{ctx}/copied")
    escaped = None
    if marker.exists():
        escaped = "the pickle ran as uid " + marker.read_text().strip()
    alive = c.execute("1 + 1", ctx="u").text == "2"
    table.rows.append(("copy a confined snapshot with cp, restore into unsafe", tier,
                       "ESCAPED: " + escaped if escaped else
                       f"refused: {r.get('code')}" if r["t"] == "err" else "RESTORED",
                       "the writer's tier is in the file's HMAC-SHA256 tag: a file without a "
                       "valid one is of the sandbox tier", "yes" if alive else "NO"))
    if escaped or r["t"] != "err":
        table.failures.append(f"{tier}: cp'd snapshot restored into unsafe: {r!r} {escaped}")
    assert escaped is None and r["t"] == "err" and r["code"] == "forbidden", r
    assert c.ok("ctx.create", name="sb", tier="sandbox", from_snapshot=f"{ctx}/copied")


def _forge_snapshot(marker, tag):
    """A file of the worker's format (wrk_snap.py) whose pickle runs a
    command; with tag, a made-up supervisor's tag claiming `unsafe`."""
    import json
    import pickle
    import struct
    import sys
    import zlib

    class E:
        def __reduce__(self):
            return (os.system, (f"id -u > {marker}",))
    header = json.dumps({"format": 1, "python": "%d.%d" % sys.version_info[:2],
                         "implementation": sys.implementation.name, "byteorder": sys.byteorder,
                         "packages": {}, "modules": {}, "execution_count": 1,
                         "tier": "unsafe"}, sort_keys=True).encode()
    stream = pickle.dumps({"e": E()}, protocol=5)
    head = b"CTXDSNP\x01" + struct.pack("<I", len(header)) + header
    trailer = struct.pack("<QQIIQ", len(head), len(stream), zlib.crc32(stream),
                          zlib.crc32(header), 0)
    trailer += struct.pack("<Q", len(trailer) + 16) + b"CTXDEND\x01"
    body = head + stream + trailer
    if tag:
        t = bytearray(128)
        t[0:8] = b"CTXDTAG\x01"
        t[8:16] = struct.pack("<Q", len(body))
        t[16], t[17], t[18] = 1, 1, 5
        t[24:29] = b"admin"
        t[96:128] = os.urandom(32)
        body += bytes(t)
    return body


def test_forged_snapshot_not_run_as_root(make_daemon, tmp_path, table):
    """A hand-made snapshot file (a header that says `unsafe`, with or
    without a made-up tag) put in the state directory and restored into an
    unsafe context: its pickle must not run as root."""
    d = make_daemon()
    c = d.client()
    c.ok("ctx.create", name="u", tier="unsafe")
    snapdir = _state_dir(d) / "snapshots" / "forged"
    snapdir.mkdir(parents=True, mode=0o700)
    for tag in (False, True):
        marker = tmp_path / f"forged-{tag}"
        (snapdir / f"f{int(tag)}").write_bytes(_forge_snapshot(marker, tag))
        r = c.request("ctx.restore", ctx="u", snapshot=f"forged/f{int(tag)}")
        escaped = "the pickle ran as uid " + marker.read_text().strip() if marker.exists() else None
        alive = c.execute("1 + 1", ctx="u").text == "2"
        table.rows.append((f"forged snapshot file ({'made-up tag' if tag else 'no tag'}), "
                           "restored into unsafe", "unsafe",
                           "ESCAPED: " + escaped if escaped else
                           f"refused: {r.get('code')}" if r["t"] == "err" else "RESTORED",
                           "no tag that verifies under the daemon's key: sandbox tier only",
                           "yes" if alive else "NO"))
        assert escaped is None and r["t"] == "err" and r["code"] == "forbidden", r

# ---- 12. survivors of a killed daemon (class 7) ----------------------------
# After SIGKILL of the supervisor, with no daemon started after it, nothing a
# run started outlives it: processes in a new session (setsid, double fork)
# and forked copies of the worker that left its session. The daemon's
# reaper (daemon/supervisor/sup_reaper.c) kills its cgroups when it dies and
# removes them. An `unsafe` run (the daemon's uid) can kill the reaper: the
# supervisor starts another; a confined one cannot reach it.

WORKER_COPY = """
import ctypes, os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    ctypes.CDLL(None).prctl(15, {comm!r}.encode(), 0, 0, 0)  # PR_SET_NAME
    while True:
        time.sleep(1)
"""

KILL_REAPER = """
import os
killed, errors = [], []
for p in os.listdir('/proc'):
    if not p.isdigit():
        continue
    try:
        if open(f'/proc/{{p}}/comm').read() == 'ctxd-reaper\\n':
            os.kill(int(p), {sig})
            killed.append(int(p))
    except OSError as e:
        errors.append(e)
if not killed:
    raise (errors[0] if errors else ProcessLookupError('no ctxd-reaper in sight'))
killed
"""


def host_pids_by_comm(comm):
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/comm").read() == comm + "\n":
                found.append(int(p))
        except OSError:
            pass
    return found


def reapers_of(pid):
    """Pids of the reapers whose parent is pid."""
    found = []
    for p in host_pids_by_comm("ctxd-reaper"):
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(p)
        except (OSError, ValueError, IndexError):
            pass
    return found


def daemon_cgroup_dirs(worker_pid):
    """The daemon's tree directories (ctxd/<tree>) in every hierarchy, from
    the worker's /proc/PID/cgroup."""
    tree = None
    for line in open(f"/proc/{worker_pid}/cgroup"):
        path = line.rstrip("\n").split(":", 2)[2]
        if "/ctxd/" in path + "/" and path.startswith("/ctxd/"):
            tree = path.split("/")[2]
    assert tree, open(f"/proc/{worker_pid}/cgroup").read()
    return [f"/sys/fs/cgroup/{h}/ctxd/{tree}" for h in ("unified", "memory", "pids")
            if os.path.isdir(f"/sys/fs/cgroup/{h}/ctxd/{tree}")]


def mounted(path):
    """Whether something is mounted on path (this process's mount table)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


@pytest.mark.parametrize("tier", ("unsafe", "local", "sandbox"))
@pytest.mark.parametrize("how", ("daemon killed, no successor",
                                 "the run kills the reaper, daemon killed, no successor",
                                 "the run stops the reaper, daemon killed, no successor"))
def test_nothing_survives_a_killed_daemon(make_daemon, tmp_path, tier, how, table):
    d = make_daemon()
    c = d.client()
    # A confined context's disk budget is a tmpfs on its private directory
    # (sup_disk.c): the reaper detaches it too.
    c.ok("ctx.create", name="e", tier=tier,
         policy={"timeout": 30, "disk_bytes": 64 << 20} if tier != "unsafe" else None)
    home = c.info("e")["cwd"]
    assert tier == "unsafe" or mounted(home), f"no disk budget mounted on {home}"
    mark = "%d.%06d" % (301, os.getpid() % 1000000) + str(time.monotonic_ns() % 1000)
    comm = "rp%08d" % (time.monotonic_ns() % 100000000)
    r = c.execute(ESCAPERS.format(mark=mark), ctx="e")
    assert r.status == "ok", r.error
    r = c.execute(WORKER_COPY.format(comm=comm), ctx="e")
    assert r.status == "ok", r.error
    pids = []
    end = time.monotonic() + 10
    while len(pids) < 3 and time.monotonic() < end:
        pids = host_pids_of(mark) + host_pids_by_comm(comm)
        time.sleep(0.05)
    assert len(pids) == 3, f"the escapers did not start: {pids}"
    dirs = daemon_cgroup_dirs(c.info("e")["pid"])
    assert dirs, "the worker is in no cgroup of the daemon's tree"
    by = "the reaper: cgroup.kill of the daemon's tree when the supervisor dies"
    if how.startswith("the run"):
        sig = signal.SIGKILL if "kills" in how else signal.SIGSTOP
        before = reapers_of(d.proc.pid)
        r, alive = run(c, "e", KILL_REAPER.format(sig=int(sig)))
        if tier == "unsafe":
            # The daemon's uid may: the supervisor starts another reaper.
            end = time.monotonic() + 10
            while time.monotonic() < end and not set(reapers_of(d.proc.pid)) - set(before):
                time.sleep(0.05)
            again = set(reapers_of(d.proc.pid)) - set(before)
            table.rows.append((f"an unsafe run sends {sig.name} to the daemon's reaper", tier,
                               ("done; another reaper started by the supervisor" if again else
                                "DONE, NO NEW REAPER" if r.status == "ok" else
                                "not done: " + outcome(r)),
                               "the supervisor replaces a reaper that dies or is stopped",
                               "yes" if alive else "NO"))
            assert again, f"{how}: no reaper after the run's {sig.name}: {outcome(r)}"
        else:
            table.add(f"send {sig.name} to the daemon's reaper", tier, r, alive,
                      {"local": "another uid + Landlock signal scope: EPERM",
                       "sandbox": "pid namespace: not in sight"}[tier])
    # The tree's lock (sup_cgroup.c): taken by the test as soon as the
    # supervisor is dead, so that no other daemon starting on this machine
    # meanwhile sweeps the tree; only the dead daemon's own reaper acts.
    lock = os.open(dirs[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        d.proc.kill()
        d.proc.wait(20)
        fcntl.flock(lock, fcntl.LOCK_EX)
        d.stopped_by_test = True
        left = wait_gone(pids)
        end = time.monotonic() + 10
        while time.monotonic() < end and [p for p in dirs if os.path.isdir(p)]:
            time.sleep(0.05)
        kept = [p for p in dirs if os.path.isdir(p)]
        while time.monotonic() < end and mounted(home):
            time.sleep(0.05)
        kept += [home] if mounted(home) else []
    finally:
        os.close(lock)
    table.rows.append((f"setsid + double fork + forked worker copy survive: {how}", tier,
                       "SURVIVED" if left else "killed" + (", CGROUPS OR MOUNTS LEFT" if kept
                                                           else ", cgroups and mounts removed"),
                       by + "; its disk budgets' mounts detached", "-"))
    for p in left:
        os.kill(p, 9)
    assert not left, f"{tier}/{how}: processes outlived the killed daemon: {left}"
    assert not kept, f"{tier}/{how}: the daemon's cgroups or mounts were left: {kept}"

# ---- 13. front ends: ctxd-mcp's model gets no more than the operator allowed (class 6) ----
# The router's half of this class (per-key tiers, cwd roots, policy caps,
# snapshots scoped to their client) is tested in tests/router, which needs
# the router cluster (network namespaces, etcd).
import json  # noqa: E402
import shutil  # noqa: E402

JS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "client", "js")
NODE = shutil.which("node")
MCP_ESCAPE = "/root/ctxd-mcp-escape"


def mcp_calls(d, args, calls):
    """ctxd-mcp (with args) against daemon d, the model's tool calls made by
    the MCP SDK's client (mcp_drive.mjs): the tools and each call's result."""
    spec = json.dumps({"args": ["--endpoint", d.endpoint, *args], "calls": calls})
    p = subprocess.run([NODE, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_drive.mjs"),
                        JS_DIR, spec], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.skipif(not NODE or not os.path.exists(os.path.join(JS_DIR, "dist", "mcp-main.js")),
                    reason="needs node and client/js built (npm ci && npm run build)")
@pytest.mark.parametrize("tier", TIERS)
def test_mcp_model_within_the_operators_bounds(make_daemon, tmp_path, tier, table):
    """The operator runs ctxd-mcp with the defaults (sandbox) or --tier local,
    and a root for the model's cwds; the model asks for unsafe, for a cwd
    beside its root through '..', and runs code that writes where only the
    daemon's root can."""
    d = make_daemon()
    c = d.client()
    root = reachable.writable(str(tmp_path / "mcp" / "root"))
    reachable.writable(str(tmp_path / "mcp" / "beside"))  # exists, writable: only the bounds stop it
    # --allow-cwd: the older spelling of --cwd-root, which the tree before this change knew too
    args = ["--allow-cwd", root, "--context", "model"] + (["--tier", "local"] if tier == "local" else [])
    if os.path.exists(MCP_ESCAPE):
        os.unlink(MCP_ESCAPE)
    attempts = (
        ("model asks create_context for tier unsafe",
         {"name": "create_context", "arguments": {"name": "wants-root", "tier": "unsafe"}},
         "the tool schema offers only the operator's tier and narrower ones"),
        ("model asks for a cwd beside its root via ..",
         {"name": "create_context", "arguments": {"name": "beside", "cwd": f"{root}/../beside"}},
         "cwd checked by components under --cwd-root: '..' refused (the daemon refuses links)"),
        ("model asks for cwd /",
         {"name": "create_context", "arguments": {"name": "slash", "cwd": "/"}},
         "cwd only under --cwd-root"),
        ("model's run_python writes a file only root may",
         {"name": "run_python", "arguments": {"code": f"open({MCP_ESCAPE!r}, 'w').write('x')"}},
         f"its context is {tier} (the default is sandbox, never the daemon's root)"),
    )
    got = mcp_calls(d, args, [a[1] for a in attempts])
    contexts = {i["name"]: i for i in c.request("ctx.list")["contexts"]}
    for (name, call, by), res in zip(attempts, got["results"]):
        lines = " ".join(x.get("text", "") for x in res["content"]).strip().splitlines()
        text = (lines[-1] if lines else "")[:70]  # a traceback's exception line
        made = contexts.get(call["arguments"].get("name", "model"))
        if call["name"] == "run_python":
            escaped = "wrote " + MCP_ESCAPE if os.path.exists(MCP_ESCAPE) else None
            escaped = escaped or (f"the model's context is {made['tier']}" if made and made["tier"] != tier else None)
        else:
            escaped = f"made {made['name']} ({made['tier']}, cwd {made['cwd']})" if made else None
        blocked = res.get("isError") and escaped is None
        table.rows.append((f"mcp: {name}", tier, ("blocked: " + text) if blocked else f"ESCAPED: {escaped or text}",
                           by, "daemon yes" if d.alive() else "DAEMON DEAD"))
        assert blocked, (name, escaped, res)
    tiers = next(t for t in got["tools"] if t["name"] == "create_context")["schema"]["properties"]["tier"]["enum"]
    assert "unsafe" not in tiers, tiers
    assert not os.path.exists(MCP_ESCAPE)

# ---- 14. budgets kept by the supervisor (class 5) --------------------------

# A frame header announcing ~20 MiB, most of the frame, then a stall: the
# supervisor would buffer what came, outside every memory cgroup, once per
# context.
STALLER = """
import os, struct, time
_n = (20 << 20) - 64
_v = memoryview(struct.pack('>I', _n) + bytes(_n - (1 << 20)))
while _v:
    try:
        _v = _v[os.write(3, _v):]
    except BlockingIOError:
        time.sleep(0.01)
time.sleep(300)
"""


def vm_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("tier", ("unsafe",) + TIERS)
def test_stalled_frames_bounded(make_daemon, tmp_path, tier, table):
    n_ctx = 8
    d = make_daemon("--max-contexts", "10")
    c = d.client()
    # The daemon's budget of frames being received (default 64 MiB): at most
    # that, not 20 MiB x contexts, plus one read (256 KiB) per context.
    budget = c.request("hello")["limits"].get("max_chan_held", 64 << 20)
    frame = 20 << 20
    bound = budget + n_ctx * (1 << 20)
    names = [f"{tier}-s{i}" for i in range(n_ctx)]
    for n in names:
        c.ok("ctx.create", name=n, tier=tier)
        assert c.execute("1 + 1", ctx=n).text == "2"
    base = vm_rss(d.proc.pid)
    rids = [c.submit(STALLER, n, timeout=120) for n in names]
    # Until the supervisor holds what it will hold: the contexts let in sent
    # their 19 MiB and the others wait for the budget (or, unbounded, it
    # holds more than the bound already).
    deadline = time.monotonic() + 60
    settled = 0
    while time.monotonic() < deadline and vm_rss(d.proc.pid) - base <= bound:
        cb = c.request("stats").get("chan_bytes") or {}
        let_in = n_ctx - cb.get("waiting", n_ctx)
        if cb.get("waiting") and vm_rss(d.proc.pid) - base > let_in * (frame - (2 << 20)):
            settled += 1
            if settled > 5:
                break
        time.sleep(0.2)
    grew = vm_rss(d.proc.pid) - base
    print(f"{tier}: the supervisor grew by {grew >> 10} KiB;",
          (c.request("stats").get("chan_bytes")))
    assert d.alive()
    # The first context let in stalls while others wait: it is killed, so
    # the others get their turn (and no stalled worker keeps them out).
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and not c.request("stats")["counters"]["runs_died"]:
        time.sleep(0.2)
    for n in names:
        c.ok("ctx.restart", ctx=n)
    ends = [c.wait(rid, 30) for rid in rids]
    stalled_killed = any(r.status == "died" and "stalled" in (r.done.get("cause") or "")
                         for r in ends)
    alive = all(c.execute("1 + 1", ctx=n).text == "2" for n in names)
    held = (c.request("stats").get("chan_bytes") or {}).get("current")
    escaped = None
    if grew > bound:
        escaped = (f"the supervisor grew by {grew >> 20} MiB for {n_ctx} stalled 20 MiB frames "
                   f"(bound {bound >> 20} MiB)")
    elif not stalled_killed:
        escaped = f"no stalled worker let in was killed: {[r.status for r in ends]}"
    elif held != 0:
        escaped = f"{held} bytes of the channel budget still held after the restarts"
    table.add(f"{n_ctx} contexts announce a 20 MiB frame and stall", tier, None, alive,
              "--max-chan-held: a frame larger than one read is buffered only with room in one "
              "budget across contexts; the others wait unread (their workers block); one "
              "that stalls mid-frame while others wait is killed",
              host_escape=escaped, host_checked=True)
    assert escaped is None, escaped
    assert alive and d.alive()


def mounted_on(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


FILL = """
n = 0
try:
    for i in range(160):  # 160 x 512 KiB = 80 MiB, 5 x the budget; each under file_size_bytes
        with open(os.path.join(WHERE, f'fill{i}'), 'wb') as f:
            f.write(bytes(512 << 10))
        n += 1
finally:
    print(n)
"""


@pytest.mark.parametrize("tier", TIERS)
def test_disk_budget(make_daemon, tmp_path, tier, table):
    d = make_daemon()
    c = d.client()
    budget = 16 << 20
    name = f"{tier}-disk"
    c.ok("ctx.create", name=name, tier=tier,
         policy={"disk_bytes": budget, "file_size_bytes": 1 << 20, "memory_bytes": 512 << 20})
    cwd = c.ok("ctx.info", ctx=name)["ctx"]["cwd"]
    places = [("its directory", ".")] + ([("/tmp", "/tmp")] if tier == "sandbox" else [])
    failures = []
    for label, where in places:
        r, alive = run(c, name, f"WHERE = {where!r}\n" + FILL, timeout=60)
        # The host's view: what the directory holds (for /tmp, the sandbox's
        # own tmpfs, what the run managed to write).
        if where == ".":
            used = sum(os.path.getsize(os.path.join(cwd, f)) for f in os.listdir(cwd))
        else:
            used = int(r.stdout.strip() or 0) * (512 << 10)
        ok = (r.error is not None and r.error["ename"] == "OSError"
              and "No space left" in r.error["evalue"])
        escaped = None
        if used > budget:
            escaped = f"{used >> 20} MiB written in {label}, past disk_bytes {budget >> 20} MiB"
        elif not ok:
            escaped = f"no ENOSPC: {outcome(r)}"
        table.add(f"fill {label} past disk_bytes with files under file_size_bytes", tier, r,
                  alive, "disk_bytes: a tmpfs of that size (memory cgroup charged); ENOSPC",
                  host_escape=escaped, host_checked=True)
        if escaped:
            failures.append(escaped)
        # Room again for the next attempt.
        c.execute(f"import glob\nfor f in glob.glob(os.path.join({where!r}, 'fill*')): os.unlink(f)",
                  ctx=name)
    # The daemon's own writes into the directory (file.put) meet the budget
    # too, and say which.
    off, r = 0, None
    for _ in range(8):  # 8 x 4 MiB = 32 MiB, twice the budget
        r = c.request("file.put", ctx=name, path="big", data=bytes(4 << 20), offset=off)
        if r["t"] != "ok":
            break
        off = r["size"]
    put_ok = r["t"] == "err" and "disk_bytes" in r.get("message", "")
    table.add("file.put past disk_bytes", tier, None, True,
              "the same file system: ENOSPC, the reply names disk_bytes",
              host_escape=None if put_ok else f"file.put: {r!r}", host_checked=True)
    if not put_ok:
        failures.append(f"file.put: {r!r}")
    assert mounted_on(cwd)
    c.ok("ctx.delete", ctx=name)
    assert not mounted_on(cwd), "the context's file system outlived it"
    assert d.alive()
    assert not failures, failures


# ---- 15. a uid is an identity, not a counter (class 2) --------------------
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
