"""The ctxd kernel through jupyter_client: execute_interactive (print, a
matplotlib figure, an error), interrupts through the KernelManager, input(),
display updates, stop_on_error, restart, --context sharing with an agent,
the own context's deletion and the private daemon. Every wait is on a
message (a handshake), never on a time bound."""

import base64
import os
import subprocess
import sys

import pytest
from jupyter_client.manager import start_new_kernel

from conftest import CTXD_BIN, PKG

TIMEOUT = 60


@pytest.fixture
def kernel():
    km, kc = start_new_kernel(kernel_name="ctxd-test")
    yield km, kc
    kc.stop_channels()
    km.shutdown_kernel(now=False)


def run(kc, code, **kw):
    """execute_interactive, collecting the iopub messages of the cell."""
    msgs = []
    reply = kc.execute_interactive(code, output_hook=msgs.append, timeout=TIMEOUT, **kw)
    return reply["content"], msgs


def shell_reply(kc):
    """The next shell reply, past kernel_info replies that start_new_kernel's
    readiness probe left behind (it asks again while a slow kernel starts)."""
    while True:
        m = kc.get_shell_msg(timeout=TIMEOUT)
        if m["msg_type"] != "kernel_info_reply":
            return m


def kinds(msgs):
    return [m["msg_type"] for m in msgs if m["msg_type"] != "status"]


def test_print_plot_and_fail(kernel):
    km, kc = kernel
    code = ("print('before the plot')\n"
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 4, 9])\n"
            "1 / 0\n")
    reply, msgs = run(kc, code)
    assert reply["status"] == "error" and reply["ename"] == "ZeroDivisionError"
    # busy first, idle last: after every output
    states = [m["content"]["execution_state"] for m in msgs if m["msg_type"] == "status"]
    assert states == ["busy", "idle"] and msgs[-1]["msg_type"] == "status"
    # the figure after the error, as ipykernel sends it
    assert kinds(msgs) == ["execute_input", "stream", "error", "display_data"]
    ex_in, stream, err, disp = [m for m in msgs if m["msg_type"] != "status"]
    assert ex_in["content"]["code"] == code
    assert ex_in["content"]["execution_count"] == reply["execution_count"]
    assert stream["content"] == {"name": "stdout", "text": "before the plot\n"}
    png = base64.b64decode(disp["content"]["data"]["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert err["content"]["ename"] == "ZeroDivisionError"
    assert any("1 / 0" in line for line in err["content"]["traceback"])


def test_execution_counts_and_result(kernel):
    km, kc = kernel
    first, _ = run(kc, "a = 20")
    reply, msgs = run(kc, "a * 2 + 2")
    assert reply["execution_count"] == first["execution_count"] + 1
    res = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert len(res) == 1 and res[0]["content"]["data"]["text/plain"] == "42"
    assert res[0]["content"]["execution_count"] == reply["execution_count"]
    # silent: no count, no execute_input, no result
    reply, msgs = run(kc, "a + 1", silent=True)
    assert kinds(msgs) == []
    again, _ = run(kc, "a")
    assert again["execution_count"] == first["execution_count"] + 2


def test_interrupt_keeps_globals(kernel):
    km, kc = kernel
    run(kc, "kept = 'still here'")
    # stop_on_error off: kernelbase would abort requests arriving while it
    # aborts the queue after the failed cell (a race with the next cell)
    msg_id = kc.execute("print('spinning', flush=True)\nwhile True: pass", stop_on_error=False)
    # handshake: the loop has started once its output arrived
    while True:
        m = kc.get_iopub_msg(timeout=TIMEOUT)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
            break
    km.interrupt_kernel()
    reply = shell_reply(kc)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    reply, msgs = run(kc, "kept")
    assert reply["status"] == "ok"
    res = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert res[0]["content"]["data"]["text/plain"] == "'still here'"


def test_input_request(kernel):
    km, kc = kernel
    prompts = []

    def answer(msg):
        prompts.append((msg["content"]["prompt"], msg["content"]["password"]))
        kc.input("Ada")

    reply, msgs = run(kc, "name = input('who? ')\nprint('hello', name)",
                      allow_stdin=True, stdin_hook=answer)
    assert reply["status"] == "ok", reply
    assert prompts == [("who? ", False)]
    assert [m["content"]["text"] for m in msgs if m["msg_type"] == "stream"] == ["hello Ada\n"]
    # without allow_stdin, input() raises EOFError as in ipykernel
    reply, _ = run(kc, "input()", allow_stdin=False)
    assert reply["status"] == "error" and reply["ename"] == "EOFError"


def test_interrupt_during_input(kernel):
    km, kc = kernel
    msg_id = kc.execute("v = input('never answered: ')", allow_stdin=True, stop_on_error=False)
    req = kc.get_stdin_msg(timeout=TIMEOUT)
    assert req["content"]["prompt"] == "never answered: "
    km.interrupt_kernel()
    reply = shell_reply(kc)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    reply, _ = run(kc, "1")
    assert reply["status"] == "ok"


def test_display_update_and_clear(kernel):
    km, kc = kernel
    reply, msgs = run(kc, "h = display('first', display_id=True)\nh.update('second')\n"
                          "clear_output(wait=True)\nprint('after')")
    assert reply["status"] == "ok"
    assert kinds(msgs) == ["execute_input", "display_data", "update_display_data",
                           "clear_output", "stream"]
    disp, upd, clear = [m["content"] for m in msgs if m["msg_type"] in
                        ("display_data", "update_display_data", "clear_output")]
    assert disp["transient"]["display_id"] == upd["transient"]["display_id"]
    assert upd["data"]["text/plain"] == "'second'"
    assert clear == {"wait": True}


def test_stop_on_error_aborts_queued_cells(kernel):
    km, kc = kernel
    run(kc, "ran = []")
    # the first cell waits in input() until the second request was sent
    first = kc.execute("ran.append(1); input('go? '); raise RuntimeError('stop')",
                       allow_stdin=True)
    kc.get_stdin_msg(timeout=TIMEOUT)
    second = kc.execute("ran.append(2)")
    kc.input("go")
    replies = {}
    while len(replies) < 2:
        m = shell_reply(kc)
        replies[m["parent_header"]["msg_id"]] = m["content"]
    assert replies[first]["status"] == "error"
    assert replies[second]["status"] == "aborted"
    # a kernel_info round trip: the abort is over (only executes are aborted)
    kc.kernel_info()
    assert kc.get_shell_msg(timeout=TIMEOUT)["msg_type"] == "kernel_info_reply"
    reply, msgs = run(kc, "ran")
    res = [m for m in msgs if m["msg_type"] == "execute_result"]
    assert res[0]["content"]["data"]["text/plain"] == "[1]"


def test_user_expressions(kernel):
    km, kc = kernel
    reply, _ = run(kc, "z = 6", user_expressions={"double": "z * 2", "bad": "1 / 0"})
    ux = reply["user_expressions"]
    assert ux["double"] == {"status": "ok", "data": {"text/plain": "12"}, "metadata": {}}
    assert ux["bad"]["status"] == "error" and ux["bad"]["ename"] == "ZeroDivisionError"


def test_restart_gives_fresh_globals(kernel, ctxd_env):
    km, kc = kernel
    run(kc, "before_restart = 1")
    names = {c.name for c in ctxd_env.client.list_contexts()}
    km.restart_kernel(now=False)
    kc.wait_for_ready(timeout=TIMEOUT)
    reply, _ = run(kc, "before_restart")
    assert reply["status"] == "error" and reply["ename"] == "NameError"
    assert reply["execution_count"] == 1  # the context was restarted: count from 0
    # the same context, restarted (no new one)
    assert {c.name for c in ctxd_env.client.list_contexts()} == names


def test_own_context_deleted_at_shutdown(ctxd_env):
    before = {c.name for c in ctxd_env.client.list_contexts()}
    km, kc = start_new_kernel(kernel_name="ctxd-test")
    run(kc, "1")
    during = {c.name for c in ctxd_env.client.list_contexts()}
    mine = during - before
    assert len(mine) == 1 and next(iter(mine)).startswith("jupyter-")
    kc.stop_channels()
    km.shutdown_kernel(now=False)
    assert {c.name for c in ctxd_env.client.list_contexts()} == before


def test_context_shared_with_an_agent(ctxd_env):
    agent = ctxd_env.client
    if "shared-ctx" not in {c.name for c in agent.list_contexts()}:
        agent.create_context("shared-ctx")
    agent.execute("agent_value = 7", "shared-ctx")
    km, kc = start_new_kernel(kernel_name="ctxd-shared")
    try:
        reply, msgs = run(kc, "notebook_value = agent_value * 6\nnotebook_value")
        assert reply["status"] == "ok"
        res = [m for m in msgs if m["msg_type"] == "execute_result"]
        assert res[0]["content"]["data"]["text/plain"] == "42"
        assert agent.execute("notebook_value", "shared-ctx").result == "42"
        # completion sees the agent's names too
        kc.complete("agent_va")
        assert shell_reply(kc)["content"]["matches"] == ["agent_value"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    # an attached context outlives the kernel
    assert agent.execute("agent_value + notebook_value", "shared-ctx").result == "49"


def test_private_daemon_when_none_runs(tmp_path):
    """No endpoint configured and nothing at the default socket: the kernel
    starts its own daemon, which ends with it."""
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path), CTXD_DAEMON=CTXD_BIN,
               PYTHONPATH=PKG)
    env.pop("CTXD_ENDPOINT", None)
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="ctxd-test")
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=TIMEOUT)
        kc.kernel_info()
        info = kc.get_shell_msg(timeout=TIMEOUT)["content"]
        assert "private daemon at ipc://" in info["banner"]
        endpoint = info["banner"].split("private daemon at ")[1].split(")")[0]
        sock = endpoint[len("ipc://"):]
        assert os.path.exists(sock)
        reply, msgs = run(kc, "import os\nos.getppid() != 1 and 6 * 7")
        assert reply["status"] == "ok"
        assert [m for m in msgs if m["msg_type"] == "execute_result"][0][
            "content"]["data"]["text/plain"] == "42"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    assert not os.path.exists(sock), "the private daemon outlived the kernel"


def test_kernelspec_install(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ctxd.kernel", "install", "--prefix",
                          str(tmp_path), "--context", "lab"],
                         env=dict(os.environ, PYTHONPATH=PKG), check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    spec_dir = tmp_path / "share" / "jupyter" / "kernels" / "ctxd"
    assert str(spec_dir) in out
    import json
    spec = json.loads((spec_dir / "kernel.json").read_text())
    assert spec["interrupt_mode"] == "message" and spec["language"] == "python"
    assert spec["argv"][1:5] == ["-m", "ctxd.kernel", "-f", "{connection_file}"]
    assert spec["argv"][-2:] == ["--context", "lab"]


def test_ctx_kernel_install_then_run(tmp_path):
    """`ctx kernel install` (the command line) writes a spec that runs."""
    ctx_bin = os.environ.get("CTXD_CTX_BIN", os.path.join(os.path.dirname(os.path.dirname(
        CTXD_BIN)), "tools", "ctx"))
    out = subprocess.run([ctx_bin, "kernel", "install", "--prefix", str(tmp_path), "--name",
                          "ctxd-from-ctx"], check=True, stdout=subprocess.PIPE, text=True).stdout
    assert "ctxd-from-ctx" in out
    jupyter_path = os.environ["JUPYTER_PATH"]
    os.environ["JUPYTER_PATH"] = str(tmp_path / "share" / "jupyter")
    try:
        km, kc = start_new_kernel(kernel_name="ctxd-from-ctx")
    finally:
        os.environ["JUPYTER_PATH"] = jupyter_path
    try:
        reply, msgs = run(kc, "6 * 7")
        assert [m for m in msgs if m["msg_type"] == "execute_result"][0][
            "content"]["data"]["text/plain"] == "42"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_queries_while_an_agent_holds_the_context(ctxd_env):
    """An agent's run blocks the shared context: the kernel's queries stop
    waiting (empty completion; is_complete decided locally) instead of
    freezing the front end, and the agent's run is untouched."""
    agent = ctxd_env.client
    if "shared-ctx" not in {c.name for c in agent.list_contexts()}:
        agent.create_context("shared-ctx")
    km, kc = start_new_kernel(kernel_name="ctxd-shared")
    try:
        asked = []
        held = agent.submit("held = input()", "shared-ctx",
                            on_input=lambda p, pw: asked.append(p) or "released")
        # handshake: the context is busy with the agent's run (waiting in input())
        while next(c for c in agent.list_contexts() if c.name == "shared-ctx").state != "busy":
            pass
        kc.is_complete("for i in x:")
        reply = shell_reply(kc)["content"]
        assert reply == {"status": "incomplete", "indent": "    "}
        kc.complete("pri")
        assert shell_reply(kc)["content"]["matches"] == []
        assert held.wait(timeout=TIMEOUT).status == "ok"
        assert agent.execute("held", "shared-ctx").result == "'released'"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_input_after_an_interrupt_that_the_code_catches(kernel):
    """Code that catches the KeyboardInterrupt of an input() (pdb, a REPL
    loop) and asks again: the second input() really asks, once."""
    km, kc = kernel
    code = ("got = []\n"
            "while len(got) < 2:\n"
            "    try:\n"
            "        got.append(input('> '))\n"
            "    except KeyboardInterrupt:\n"
            "        got.append('interrupted')\n"
            "print(got)")
    msg_id = kc.execute(code, allow_stdin=True)
    assert kc.get_stdin_msg(timeout=TIMEOUT)["content"]["prompt"] == "> "
    km.interrupt_kernel()
    assert kc.get_stdin_msg(timeout=TIMEOUT)["content"]["prompt"] == "> "
    kc.input("typed")
    reply = shell_reply(kc)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "ok", reply["content"]
    out = []
    while True:
        m = kc.get_iopub_msg(timeout=TIMEOUT)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "stream":
            out.append(m["content"]["text"])
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    assert "".join(out) == "['interrupted', 'typed']\n"


def test_exit_asks_the_front_end_to_exit(kernel):
    km, kc = kernel
    for code in ("exit", "quit()"):
        reply, _ = run(kc, code)
        assert reply["status"] == "ok"
        assert reply["payload"] == [{"source": "ask_exit", "keepkernel": False}]


def test_debug_request_answered(kernel):
    km, kc = kernel
    msg = kc.session.msg("debug_request", {"seq": 1, "type": "request", "command": "initialize",
                                           "arguments": {}})
    kc.control_channel.send(msg)
    while True:
        reply = kc.get_control_msg(timeout=TIMEOUT)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            break
    assert reply["msg_type"] == "debug_reply"
    assert reply["content"]["success"] is False
    assert "not support" in reply["content"]["message"]


def test_kernel_cwd_and_env_reach_the_cells(ctxd_env, tmp_path):
    (tmp_path / "here.txt").write_text("found")
    km, kc = start_new_kernel(kernel_name="ctxd-test", cwd=str(tmp_path),
                              env=dict(os.environ, NB_KERNEL_VAR="from the kernel"))
    try:
        reply, msgs = run(kc, "import os\n(open('here.txt').read(), os.environ['NB_KERNEL_VAR'])")
        assert reply["status"] == "ok", reply
        res = [m for m in msgs if m["msg_type"] == "execute_result"]
        assert res[0]["content"]["data"]["text/plain"] == "('found', 'from the kernel')"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_sigkilled_kernel_leaves_no_context(ctxd_env):
    """The kernel's own context has a lease it renews; SIGKILL the kernel
    and the daemon deletes the context once the lease ran out (even busy),
    while a --context attachment of another SIGKILLed kernel stays."""
    import signal
    import time
    agent = ctxd_env.client
    env = dict(os.environ, CTXD_KERNEL_LEASE="2")
    before = {c.name for c in agent.list_contexts()}
    km, kc = start_new_kernel(kernel_name="ctxd-test", env=env)
    skm, skc = start_new_kernel(kernel_name="ctxd-shared", env=env)
    try:
        run(kc, "x = 1")
        run(skc, "shared_x = 1")
        mine = {c.name for c in agent.list_contexts()} - before - {"shared-ctx"}
        assert len(mine) == 1, mine
        # the context stays while the kernel lives, past several leases
        run(kc, "import time; time.sleep(5)")
        assert mine <= {c.name for c in agent.list_contexts()}
        kc.execute("while True: pass")  # busy when its kernel dies
        for m in (km, skm):
            os.kill(m.provisioner.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while mine & {c.name for c in agent.list_contexts()}:
            assert time.monotonic() < deadline, "the context outlived its lease"
            time.sleep(0.2)
        assert "shared-ctx" in {c.name for c in agent.list_contexts()}
    finally:
        for c, m in ((kc, km), (skc, skm)):
            c.stop_channels()
            m.cleanup_resources()
