"""ctx.create, ctx.list, ctx.delete, ctx.restart."""

import os
import re
import time

from conftest import pid_gone, proc_start, wait_until

INFO_FIELDS = {"name": str, "cwd": str, "state": str, "pid": int, "incarnation": int,
               "created": float, "execution_count": int, "queued": int, "rss": int,
               "pss": int}


def check_info(info):
    for f, ty in INFO_FIELDS.items():
        assert isinstance(info.get(f), ty) and not isinstance(info.get(f), bool), \
            f"INFO.{f} missing or of wrong type: {info!r}"
    assert info["state"] in ("idle", "busy", "dead"), info
    if "last_death" in info:
        assert isinstance(info["last_death"], str), info
    if info["state"] == "dead":
        assert info["pid"] == 0 and info["rss"] == 0 and info["pss"] == 0, info
    else:
        # a live CPython worker uses some MiB, and PSS <= RSS
        assert info["rss"] > 1024 * 1024, info
        assert 0 < info["pss"] <= info["rss"], info


def test_create_named(client, daemon):
    before = time.time()
    r = client.ok("ctx.create", name="exp-1.a_B")
    info = r["ctx"]
    check_info(info)
    assert info["name"] == "exp-1.a_B"
    assert info["state"] == "idle"
    assert info["pid"] > 0 and not pid_gone(info["pid"])
    assert info["incarnation"] == 1
    assert info["execution_count"] == 0
    assert info["queued"] == 0
    assert before - 5 <= info["created"] <= time.time() + 5
    assert "last_death" not in info
    # default cwd: a private directory of its own, never the daemon's
    assert os.path.basename(info["cwd"]).startswith("exp-1.a_B.")
    # STATE_DIR/contexts/INSTANCE/NAME.XXXXXX
    assert os.path.basename(os.path.dirname(os.path.dirname(info["cwd"]))) == "contexts"
    assert os.path.realpath(info["cwd"]) != os.path.realpath(daemon.cwd)
    assert os.stat(info["cwd"]).st_mode & 0o777 == 0o700
    r = client.execute("import os\nos.getcwd()", ctx="exp-1.a_B")
    assert eval(r.text) == info["cwd"]
    client.ok("ctx.delete", ctx="exp-1.a_B")
    assert not os.path.exists(info["cwd"]), "the private directory outlived its context"


def test_create_generated_name(client):
    r = client.ok("ctx.create")
    name = r["ctx"]["name"]
    assert re.fullmatch(r"ctx-[0-9a-f]{12}", name), name
    r2 = client.ok("ctx.create")
    assert r2["ctx"]["name"] != name
    assert client.execute("1", ctx=name).status == "ok"
    assert {name, r2["ctx"]["name"]} <= set(client.contexts())


def test_create_longest_name(client):
    name = "n" * 64
    assert client.ok("ctx.create", name=name)["ctx"]["name"] == name
    assert client.execute("1", ctx=name).text == "1"


def test_create_default_before_first_use(client):
    r = client.ok("ctx.create", name="default", env={"CTXD_D": "1"})
    assert r["ctx"]["name"] == "default"
    r = client.execute("import os\nos.environ['CTXD_D']")
    assert r.text == "'1'", r
    assert r.accepted["incarnation"] == 1
    client.err("ctx.create", "exists", name="default")


def test_create_exists(client):
    client.ok("ctx.create", name="dup")
    client.err("ctx.create", "exists", name="dup")
    # default, once it exists, too
    client.execute("1")
    client.err("ctx.create", "exists", name="default")


def test_create_bad_cwd(client, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for cwd in ("relative/dir", str(tmp_path / "missing"), str(f), ""):
        client.err("ctx.create", "bad_cwd", name="c", cwd=cwd)
    assert "c" not in client.contexts()


def test_create_cwd_respected(client, tmp_path):
    d = tmp_path / "work dir"
    d.mkdir()
    r = client.ok("ctx.create", name="cw", cwd=str(d))
    assert os.path.realpath(r["ctx"]["cwd"]) == os.path.realpath(d)
    r = client.execute("import os\nos.getcwd()", ctx="cw")
    assert os.path.realpath(eval(r.text)) == os.path.realpath(d)
    r = client.execute("open('made.txt', 'w').write('ok')", ctx="cw")
    assert r.status == "ok", r
    assert (d / "made.txt").read_text() == "ok"


def test_create_env_respected(client):
    client.ok("ctx.create", name="env", env={"CTXD_A": "alpha", "CTXD_B": "b=c d"})
    r = client.execute("import os\nos.environ['CTXD_A'], os.environ['CTXD_B']", ctx="env")
    assert r.text == "('alpha', 'b=c d')", r
    r = client.execute("import os\nos.system('echo $CTXD_A')", ctx="env")
    assert r.stdout == b"alpha\n"
    # not in other contexts
    r = client.execute("import os\n'CTXD_A' in os.environ")
    assert r.text == "False"


def test_list_fields_sorted_and_states(client):
    for n in ("zeta", "alpha", "Mid"):
        client.ok("ctx.create", name=n)
    r = client.ok("ctx.list")
    names = [c["name"] for c in r["contexts"]]
    assert names == sorted(names), names
    assert {"zeta", "alpha", "Mid"} <= set(names)
    for c in r["contexts"]:
        check_info(c)
    rid = client.submit("import time\ntime.sleep(30)", ctx="alpha")
    q1 = client.submit("1", ctx="alpha")
    q2 = client.submit("2", ctx="alpha")
    client.wait_event(rid, "accepted")
    info = client.info("alpha")
    assert info["state"] == "busy", info
    assert info["queued"] == 2, info
    assert client.info("zeta")["state"] == "idle"
    client.request("interrupt", ctx="alpha")
    assert client.wait(rid).status == "interrupted"
    assert client.wait(q1).status == "ok" and client.wait(q2).status == "ok"
    info = client.info("alpha")
    assert info["state"] == "idle" and info["queued"] == 0, info
    assert info["execution_count"] == 3, info


def test_rss_follows_memory_use(client):
    client.ok("ctx.create", name="mem")
    before = client.info("mem")["rss"]
    assert client.execute("big = bytearray(200 * 1024 * 1024)", ctx="mem").status == "ok"
    after = client.info("mem")["rss"]
    assert after - before > 150 * 1024 * 1024, (before, after)
    assert client.execute("del big", ctx="mem").status == "ok"


def test_back_to_back_runs_do_not_each_read_pss(client):
    """A context running short runs back to back gets its PSS read from
    the kernel (0.3 ms of the supervisor's CPU, more than the run) at most
    once a second, not after every run; the list still shows a figure."""
    client.ok("ctx.create", name="busy")
    assert client.execute("x = 0", ctx="busy").status == "ok"
    time.sleep(1.2)  # the new worker's first read is behind us
    before = client.request("stats")["counters"]["pss_reads"]
    t0 = time.monotonic()
    for _ in range(200):
        assert client.execute("x += 1", ctx="busy").status == "ok"
    elapsed = time.monotonic() - t0
    reads = client.request("stats")["counters"]["pss_reads"] - before
    # once per PSS_MIN_GAP (1 s) at most, plus the one at the start
    assert reads <= elapsed / 1.0 + 2, (reads, elapsed)
    assert client.info("busy")["pss"] > 0


def test_pss_is_read_under_requests_without_a_pause(client):
    """The background PSS reads wait for a pause in the clients' requests
    (a read takes a CPU from the request in hand), but not for ever: under
    back-to-back requests for 3 s a context whose runs keep ending still
    gets its figure read (at most a second late)."""
    client.ok("ctx.create", name="steady")
    assert client.execute("x = 0", ctx="steady").status == "ok"
    time.sleep(1.2)  # the new worker's first read is behind us
    before = client.request("stats")["counters"]["pss_reads"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:
        assert client.execute("x += 1", ctx="steady").status == "ok"
    reads = client.request("stats")["counters"]["pss_reads"] - before
    assert reads >= 1, reads
    assert client.info("steady")["pss"] > 0


def test_delete_kills_worker_and_children(client):
    client.ok("ctx.create", name="del")
    pid = client.info("del")["pid"]
    r = client.execute("import subprocess\np = subprocess.Popen(['sleep', '100'])\np.pid",
                       ctx="del")
    child = int(r.text)
    assert not pid_gone(child) and not pid_gone(pid)
    s_pid, s_child = proc_start(pid), proc_start(child)
    r = client.ok("ctx.delete", ctx="del")
    assert wait_until(lambda: pid_gone(pid, s_pid), 10), f"worker {pid} still alive"
    assert wait_until(lambda: pid_gone(child, s_child), 10), \
        f"worker's child {child} still alive"
    assert "del" not in client.contexts()
    client.err("execute", "unknown_context", ctx="del", code="1")
    # the name can be used again
    r = client.ok("ctx.create", name="del")
    assert r["ctx"]["incarnation"] == 1


def test_delete_aborts_running_and_queued(client):
    client.ok("ctx.create", name="busydel")
    rid = client.submit("import time\ntime.sleep(30)", ctx="busydel")
    q = client.submit("1", ctx="busydel")
    client.wait_event(rid, "accepted")
    client.ok("ctx.delete", ctx="busydel")
    for i, lost in ((rid, True), (q, False)):
        r = client.wait(i)
        assert r.status == "aborted", r
        assert r.done["cause"] == "context deleted", r.done
        assert r.done["state_lost"] is lost, r.done
    for i in (rid, q):
        client.expect_quiet(i, 0.1)


def test_delete_default_forbidden(client):
    client.execute("1")
    client.err("ctx.delete", "forbidden", ctx="default")
    assert client.execute("2").status == "ok"


def test_delete_unknown_and_missing_ctx(client):
    client.err("ctx.delete", "unknown_context", ctx="ghost")
    client.err("ctx.delete", "bad_field")  # ctx is required


def test_restart(client):
    client.ok("ctx.create", name="rs")
    assert client.execute("x = 1", ctx="rs").status == "ok"
    assert client.execute("x", ctx="rs").status == "ok"
    old_pid = client.info("rs")["pid"]
    old_start = proc_start(old_pid)
    r = client.ok("ctx.restart", ctx="rs")
    info = r["ctx"]
    check_info(info)
    assert info["state"] == "idle", info  # the reply comes once the worker is ready
    assert info["incarnation"] == 2
    assert info["execution_count"] == 0
    assert info["pid"] != old_pid and info["pid"] > 0
    assert wait_until(lambda: pid_gone(old_pid, old_start), 10)
    r = client.execute("'x' in globals()", ctx="rs")
    assert r.text == "False", r
    assert r.accepted["execution_count"] == 1
    assert r.accepted["incarnation"] == 2
    assert "previous_death" not in r.accepted, "a restart is not a death"
    assert "last_death" not in client.info("rs")


def test_restart_default_creates_it(client):
    r = client.ok("ctx.restart", ctx="default")
    assert r["ctx"]["name"] == "default"
    assert client.execute("1").status == "ok"
    r = client.ok("ctx.restart", ctx="default")
    assert r["ctx"]["incarnation"] >= 2


def test_restart_aborts_running_and_queued(sclient):
    c = sclient
    rid = c.submit("import time\ntime.sleep(30)")
    q = c.submit("1")
    c.wait_event(rid, "accepted")
    c.ok("ctx.restart", ctx="default")
    for i in (rid, q):
        r = c.wait(i)
        assert r.status == "aborted", r
        assert r.done["cause"] == "context restarted", r.done
    r = c.execute("'time' in globals()")
    assert r.text == "False" and r.accepted["execution_count"] == 1


def test_restart_unknown(client):
    client.err("ctx.restart", "unknown_context", ctx="ghost")


def test_list_pages(client):
    """ctx.list after/limit: pages in name order, `next` until the last."""
    for n in ("pg-a", "pg-b", "pg-c"):
        client.ok("ctx.create", name=n)
    whole = [c["name"] for c in client.ok("ctx.list")["contexts"]]
    assert "next" not in client.ok("ctx.list"), "one page holds a few contexts"
    seen, after = [], None
    while True:
        r = client.ok("ctx.list", limit=2, **({"after": after} if after else {}))
        assert 1 <= len(r["contexts"]) <= 2, r
        for info in r["contexts"]:
            check_info(info)
        seen += [c["name"] for c in r["contexts"]]
        if "next" not in r:
            break
        assert r["next"] == seen[-1], r
        after = r["next"]
    assert seen == whole == sorted(whole), (seen, whole)
    r = client.ok("ctx.list", after="pg-b")
    assert [c["name"] for c in r["contexts"]][0] == "pg-c", r
    assert client.ok("ctx.list", after="zzz")["contexts"] == []
    client.err("ctx.list", "bad_field", limit="2")


def test_ctx_info_is_one_contexts_listing(client):
    """ctx.info gives one context's INFO as ctx.list shows it; a missing or
    bad name is refused."""
    client.ok("ctx.create", name="one")
    client.execute("x = 1", ctx="one")
    info = client.ok("ctx.info", ctx="one")["ctx"]
    listed = [c for c in client.ok("ctx.list")["contexts"] if c["name"] == "one"][0]
    assert info["name"] == "one" and info["execution_count"] == 1
    assert info.keys() == listed.keys()
    assert {k: v for k, v in info.items() if k != "pss"} == \
        {k: v for k, v in listed.items() if k != "pss"}
    client.err("ctx.info", "unknown_context", ctx="none-such")
    client.err("ctx.info", "bad_name", ctx="../x")
    client.err("ctx.info", "bad_field")
