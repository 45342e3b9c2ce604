"""Same-page merging (KSM) of unsafe-tier workers (README "Operating it",
--no-page-merging): every unsafe-tier worker running as the daemon's uid is
marked mergeable, so that a running ksmd stores the pages identical across
idle workers once; a confined worker (local, sandbox) is never merged and
cannot offer its own pages either (its seccomp filter refuses
madvise(MADV_MERGEABLE) and prctl(PR_SET_MEMORY_MERGE)), since a merged page
is one whose copy on write a tenant could time. No timing thresholds."""

import os

import pytest

from conftest import wait_until

KSM = "/sys/kernel/mm/ksm"

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ksm_stat"),
                                reason="kernel without KSM (or older than 6.4)")


def ksm_stat(pid):
    with open(f"/proc/{pid}/ksm_stat") as f:
        # "ksm_rmap_items 0", "ksm_merge_any: yes"
        return {k.rstrip(":"): v for k, v in (line.split(None, 1) for line in f if line.strip())}


def merge_any(pid):
    return ksm_stat(pid)["ksm_merge_any"].strip()


# What user code tries, to offer its own pages: both calls' results.
OPT_IN = """
import ctypes, ctypes.util, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
p = libc.mmap(None, 1 << 16, mmap.PROT_READ | mmap.PROT_WRITE,
              mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
m = libc.madvise(p, 1 << 16, 12)  # MADV_MERGEABLE
m_err = ctypes.get_errno()
r = libc.prctl(67, 1, 0, 0, 0)    # PR_SET_MEMORY_MERGE
r_err = ctypes.get_errno()
(m, m_err, r, r_err)
"""


def test_unsafe_workers_are_mergeable_confined_ones_never(daemon):
    c = daemon.client()
    pids = {}
    for tier in ("unsafe", "local", "sandbox"):
        pids[tier] = c.ok("ctx.create", name=tier, tier=tier)["ctx"]["pid"]
        assert c.execute("x = 1", ctx=tier).status == "ok"
    c.ok("ctx.fork", ctx="unsafe", name="copy")
    pids["copy"] = c.info("copy")["pid"]
    got = {k: merge_any(p) for k, p in pids.items()}
    assert got == {"unsafe": "yes", "copy": "yes", "local": "no", "sandbox": "no"}, got
    # a confined worker cannot offer its pages itself; an unsafe one can
    # (the control: the same code, where nothing refuses it)
    eperm = 1
    for tier in ("local", "sandbox"):
        r = c.execute(OPT_IN, ctx=tier)
        assert r.status == "ok", r
        assert eval(r.text) == (-1, eperm, -1, eperm), (tier, r.text)
        assert merge_any(pids[tier]) == "no"
    r = c.execute(OPT_IN, ctx="unsafe")
    m, _, p, _ = eval(r.text)
    assert (m, p) == (0, 0), r.text


def test_no_page_merging_leaves_workers_unmarked(make_daemon):
    d = make_daemon("--no-page-merging")
    c = d.client()
    pid = c.ok("ctx.create", name="u")["ctx"]["pid"]
    assert c.execute("x = 1", ctx="u").status == "ok"
    assert merge_any(pid) == "no"
    assert "page merging" not in d.log_text()


def read(name):
    with open(os.path.join(KSM, name)) as f:
        return f.read().strip()


def write(name, value):
    with open(os.path.join(KSM, name), "w") as f:
        f.write(str(value))


@pytest.mark.skipif(os.geteuid() != 0, reason="starting ksmd needs root")
def test_ksmd_merges_idle_unsafe_workers_and_no_confined_one(daemon):
    """With ksmd running (started here, its settings put back after), idle
    unsafe workers share merged pages; the local worker beside them, given
    the same code, has none."""
    saved = {k: read(k) for k in ("run", "pages_to_scan", "sleep_millisecs")}
    c = daemon.client()
    unsafe = []
    for i in range(6):
        unsafe.append(c.ok("ctx.create", name=f"u{i}")["ctx"]["pid"])
    local = c.ok("ctx.create", name="l", tier="local")["ctx"]["pid"]
    for name in [f"u{i}" for i in range(6)] + ["l"]:
        assert c.execute("import json\nx = [json.dumps(i) for i in range(100)]",
                         ctx=name).status == "ok"
    try:
        write("pages_to_scan", 5000)
        write("sleep_millisecs", 10)
        write("run", 1)

        def merged():
            return sum(int(ksm_stat(p)["ksm_merging_pages"]) for p in unsafe)
        assert wait_until(lambda: merged() > 6 * 16, timeout=120, step=0.5), \
            [ksm_stat(p) for p in unsafe]
        assert int(ksm_stat(local)["ksm_merging_pages"]) == 0, ksm_stat(local)
        # merged or not, the contexts are what they were
        for i in range(6):
            assert c.execute("len(x), x[99]", ctx=f"u{i}").text == "(100, '99')"
    finally:
        # run first: 0 stops ksmd and keeps what it merged
        write("run", saved["run"] if saved["run"] in ("0", "1") else 0)
        write("pages_to_scan", saved["pages_to_scan"])
        write("sleep_millisecs", saved["sleep_millisecs"])
