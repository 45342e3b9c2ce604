"""Spare workers (--spare-workers): workers forked ahead for new contexts of
the default tier, taken by ctx.create and bound to the context's name and
directory (PROTOCOL.md 9, `bind`). A context on a spare must be the same as
one whose worker was forked for it; a context that needs anything else
(tier, policy, env) never gets one. No timing thresholds."""

import os
import signal
import time

from conftest import pid_gone, wait_until
from test_zygote_fork import children

PRELOAD = "decimal"


def spares(d):
    """Pids of the daemon's spare workers, alive."""
    return {p for p, cmd in children(d.proc.pid)
            if cmd.startswith("ctxd-worker (spare)") and not pid_gone(p)}


def ready_spares(d, n):
    """Waits until n spares are alive and answers their pids."""
    assert wait_until(lambda: len(spares(d)) == n, timeout=30), (spares(d), d.log_text())
    return spares(d)


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")[:2]


def test_a_context_takes_a_spare_and_is_like_a_fresh_one(make_daemon):
    d = make_daemon("--spare-workers", "2", "--preload", PRELOAD)
    c = d.client()
    before = ready_spares(d, 2)
    info = c.ok("ctx.create", name="s1")["ctx"]
    assert info["pid"] in before, (info, before)
    r = c.execute("import os, sys, linecache\n"
                  f"(os.getcwd(), sorted(k for k in globals() if not k.startswith('__')),\n"
                  f" __name__, '{PRELOAD}' in sys.modules, 'x' in globals(),\n"
                  f" [k for k in linecache.cache if 'warm' in k])", ctx="s1")
    assert r.status == "ok", r
    # named and placed as a forked one: its title (`bind` is obeyed before
    # the run, not before the `ok` of ctx.create), its private directory
    assert cmdline(info["pid"]) == [b"ctxd-worker", b"s1"]
    # the warm-up run left nothing behind, and this is the context's first run
    assert r.accepted["execution_count"] == 1, r.accepted
    cwd, names, name, preloaded, has_x, warm_lines = eval(r.text)
    assert cwd == info["cwd"] and os.path.basename(cwd).startswith("s1."), (cwd, info)
    assert names == ["linecache", "os", "sys"] and name == "__main__" and preloaded, r.text
    # neither the zygote's warm-up cell nor the spare's (`if 0:` over an
    # assignment to x) left a name or a source line
    assert not has_x and warm_lines == [], r.text
    # a spare is made again to replace it
    after = ready_spares(d, 2)
    assert info["pid"] not in after
    # the spares are nobody's contexts
    listed = {x["name"] for x in c.ok("ctx.list")["contexts"]}
    assert listed == {"s1"}, listed


def test_a_spare_is_made_again_under_requests_without_a_pause(make_daemon):
    """A taken spare's successor is forked in a pause of the clients'
    requests (a fork beside a request takes its CPU), but not only then:
    under back-to-back requests for 3 s it is made all the same."""
    d = make_daemon("--spare-workers", "1")
    c = d.client()
    ready_spares(d, 1)
    spawned = c.ok("stats")["counters"]["workers_spawned"]
    c.ok("ctx.create", name="steady")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:
        assert c.execute("x = 1", ctx="steady").status == "ok"
    # asked at once, no pause before it
    assert c.ok("stats")["counters"]["workers_spawned"] > spawned


def test_contexts_needing_more_than_the_default_never_take_a_spare(make_daemon, tmp_path):
    d = make_daemon("--spare-workers", "2")
    c = d.client()
    pool = ready_spares(d, 2)
    made = {
        "env": c.ok("ctx.create", name="e", env={"CTXD_SPARE_T": "1"})["ctx"],
        "tier": c.ok("ctx.create", name="t", tier="local")["ctx"],
        "static": c.ok("ctx.create", name="p", tier="static")["ctx"],
    }
    for why, info in made.items():
        assert info["pid"] not in pool, (why, info, pool)
    assert spares(d) == pool  # none was taken
    r = c.execute("import os\nos.environ.get('CTXD_SPARE_T')", ctx="e")
    assert r.text == "'1'", r
    # the unsafe tier's policy is the supervisor's (timeout, output caps):
    # its worker is the default's, so it takes one
    info = c.ok("ctx.create", name="u", tier="unsafe", policy={"timeout": 30})["ctx"]
    assert info["pid"] in pool, (info, pool)
    assert info["policy"] == {"timeout": 30.0}, info


def test_a_given_cwd_is_entered_by_a_spare(make_daemon, tmp_path):
    d = make_daemon("--spare-workers", "1")
    c = d.client()
    pool = ready_spares(d, 1)
    wd = tmp_path / "wd"
    wd.mkdir()
    info = c.ok("ctx.create", name="w", cwd=str(wd))["ctx"]
    assert info["pid"] in pool
    r = c.execute("import os\nos.getcwd()", ctx="w")
    assert r.text == repr(str(wd)), r


def test_a_first_run_exiting_126_is_not_taken_for_a_failed_bind(make_daemon):
    # The supervisor reads an exit 126 before the first `start` after a bind
    # as "cannot enter directory"; the worker sends that start at once (not
    # held back with the run's `done`), so a run that exits 126 is a death
    # of its own.
    # Repeated: whether the run ends before a held-back start would go out
    # is a race.
    d = make_daemon("--spare-workers", "1")
    c = d.client()
    for i in range(6):
        pool = ready_spares(d, 1)
        info = c.ok("ctx.create", name=f"e{i}")["ctx"]
        assert info["pid"] in pool
        r = c.execute("import os\nos._exit(126)", ctx=f"e{i}")
        assert r.status == "died", r
        assert r.done["cause"] == "exited with code 126", r.done
        assert r.accepted["execution_count"] == 1, r


def test_a_spare_that_dies_is_replaced_and_never_seen(make_daemon):
    d = make_daemon("--spare-workers", "2")
    c = d.client()
    pool = ready_spares(d, 2)
    victim = min(pool)
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: pid_gone(victim))
    # replaced after the pause that keeps a failing spare from a fork loop
    again = ready_spares(d, 2)
    assert victim not in again
    info = c.ok("ctx.create", name="a")["ctx"]
    assert info["pid"] in again
    assert c.execute("1 + 1", ctx="a").text == "2"
    assert "spare-died" in d.log_text()


def test_spares_do_not_count_against_max_contexts_and_end_with_the_daemon(make_daemon):
    d = make_daemon("--spare-workers", "3", "--max-contexts", "2")
    c = d.client()
    # spares are made only while contexts + spares stay under the limit
    pool = ready_spares(d, 2)
    assert c.ok("ctx.create", name="b")["ctx"]["pid"] in pool
    assert c.ok("ctx.create", name="c")["ctx"]["pid"] in pool
    c.err("ctx.create", "limit", name="d")
    c.ok("ctx.delete", ctx="b")
    # room again: a spare again
    everyone = pool | ready_spares(d, 1)
    assert len(everyone) == 3, everyone
    d.stop()
    d.proc = None
    assert wait_until(lambda: all(pid_gone(p) for p in everyone)), everyone


def test_a_spare_taken_before_it_is_ready_serves_its_context(make_daemon):
    # Created back to back, contexts take spares still starting (their
    # warm-up and `bind` queue behind `ready`) and then fall back to a fork.
    d = make_daemon("--spare-workers", "2")
    c = d.client()
    for i in range(6):
        c.ok("ctx.create", name=f"q{i}")
    for i in range(6):
        r = c.execute("import os\n(os.path.basename(os.getcwd()).split('.')[0], x) "
                      "if 'x' in globals() else os.path.basename(os.getcwd()).split('.')[0]",
                      ctx=f"q{i}")
        assert r.status == "ok" and r.text == repr(f"q{i}"), r
        assert r.accepted["execution_count"] == 1


def test_spares_are_the_zygotes_from_the_start(make_daemon):
    # Made while the zygote was still starting, a spare would have been
    # started by exec, without the preloads: spares wait for the zygote.
    # numpy: a preload slow enough to import that the zygote is still
    # starting when the daemon's loop first looks for spares
    d = make_daemon("--spare-workers", "2", "--preload", "numpy")
    c = d.client()
    pool = ready_spares(d, 2)
    for i in range(2):
        info = c.ok("ctx.create", name=f"z{i}")["ctx"]
        assert info["pid"] in pool, (info, pool)
        r = c.execute("import sys\n'numpy' in sys.modules", ctx=f"z{i}")
        assert r.text == "True", r
    # every worker the daemon has is the zygote's child's shape (never an exec'd one)
    for p, cmd in children(d.proc.pid):
        assert "--out-fds" not in cmd, (p, cmd)
