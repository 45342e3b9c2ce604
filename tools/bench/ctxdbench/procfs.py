"""What /proc says of processes: page faults, PSS, CPU time, open-file
limits, the process tree, and pinning threads to a CPU."""

import contextlib
import os
import sys
import time


def minor_faults(pid):
    """A process's minor page faults so far (all threads), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[7])


def pss_of(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def nofile_limit(pid):
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


def processes():
    """(pid, ppid, cmdline) of every process, from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(d), ppid, cmd))
    return out


def descendants(pid):
    """(pid, cmdline) of every process below pid."""
    kids = {}
    for p, ppid, cmd in processes():
        kids.setdefault(ppid, []).append((p, cmd))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k[0])
    return out


def daemon_pids(d):
    """The pids of a bench daemon's supervisor and every process below it."""
    return [d.proc.pid] + [p for p, _ in descendants(d.proc.pid)]


def pin(pids, cpus):
    """Pins every thread of pids to cpus; returns the old affinities."""
    saved = {}
    for p in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except OSError:
            continue
        for t in tids:
            try:
                saved[t] = os.sched_getaffinity(t)
                os.sched_setaffinity(t, cpus)
            except OSError:
                pass
    return saved


@contextlib.contextmanager
def on_cpu0(pids):
    """Every thread of pids, and this process (so the clients it starts),
    on CPU 0 for the block; the old affinities put back after it."""
    saved = pin(pids, {0})
    pin_self = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {0})  # cbench children inherit it
        yield
    finally:
        os.sched_setaffinity(0, pin_self)
        for tid, cpus in saved.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


def children_with(daemon_pid, marker):
    """Pids of the daemon's children whose command line holds marker."""
    return [p for p, ppid, cmd in processes() if ppid == daemon_pid and marker in cmd]


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def kthreads(prefix="kdamond"):
    """Pids of the kernel threads whose name starts with prefix (ppid 2,
    kthreadd). kdamond is DAMON's: where the VM runs a physical-address scheme
    (this one pages out cold memory for its host), its CPU grows with the
    memory in use (measured here: 0.1% of a CPU idle, ~30% with 5,000
    contexts alive), and a woken task waits for the CPU it holds."""
    return [p for p, ppid, _ in processes() if ppid == 2 and (_comm(p) or "").startswith(prefix)]


def zygote_pid(daemon_pid):
    z = children_with(daemon_pid, b"--zygote")
    return z[0] if z else None


def machine_info():
    info = {"cpus": os.cpu_count(), "kernel": os.uname().release,
            "python": sys.version.split()[0], "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
        info["mem_total_gib"] = round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
                                      / 2**30, 1)
    except Exception:
        pass
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYTHONUNBUFFERED"):
        if var in os.environ:
            info[var] = os.environ[var]
    return info
