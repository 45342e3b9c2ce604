"""Spawning never blocks the daemon (issue #13, item 5): the zygote is asked
for a worker and answers later, through the event loop. A stopped zygote
makes no client wait for another's ctx.create; a zygote in back-off after
crashes is restarted for a sandbox that needs it; a context deleted while
its worker is being made leaves no process behind."""

import os
import signal

from conftest import wait_until, zygote_of


def test_stopped_zygote_blocks_nobody(daemon):
    z = zygote_of(daemon)
    assert z
    a, b = daemon.client(), daemon.client()
    os.kill(z, signal.SIGSTOP)
    try:
        rid = a.send("ctx.create", name="slow")
        # While the zygote does not answer, another client is served at once:
        # its hello's reply comes before the create's.
        hid = b.send("hello")
        assert b.next_for(hid)["t"] == "ok"
        assert a.sock.poll(0) == 0, "the create was answered first"
        # The create ends, by exec, when the zygote's time is up.
        reply = a.collect(rid, 30)[-1]
        assert reply["t"] == "ok", reply
    finally:
        try:
            os.kill(z, signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed by the daemon for not answering: as it should
    assert a.execute("1 + 1", ctx="slow").text == "2"


def test_sandbox_while_the_zygote_backs_off(daemon):
    c = daemon.client()
    # Crash the zygote a few times: it restarts after growing pauses.
    for _ in range(3):
        z = None
        wait_until(lambda: zygote_of(daemon) is not None)
        z = zygote_of(daemon)
        os.kill(z, signal.SIGKILL)
        wait_until(lambda: zygote_of(daemon) != z)
    c.ok("ctx.create", name="box", tier="sandbox")
    assert c.execute("import os; os.getpid()", ctx="box").text == "1"


def test_delete_while_spawning_leaves_nothing(daemon):
    z = zygote_of(daemon)
    c = daemon.client()
    os.kill(z, signal.SIGSTOP)
    rid = c.send("ctx.create", name="gone", tier="local")
    c.ok("ctx.delete", ctx="gone")  # read after the create: same connection, in order
    reply = c.collect(rid, 30)[-1]
    assert reply["t"] == "err", reply
    try:
        os.kill(z, signal.SIGCONT)
    except ProcessLookupError:
        pass
    c.ok("hello")
    # Nothing of it is left: no worker named after it.
    def workers():
        out = []
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and open(f"/proc/{p}/cmdline", "rb").read() == b"ctxd-worker\0gone":
                    out.append(p)
            except OSError:
                pass
        return out
    wait_until(lambda: not workers())
    c.ok("ctx.create", name="gone")
