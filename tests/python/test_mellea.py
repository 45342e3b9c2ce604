"""The mellea-compatible surface (ctxd.mellea) against a real daemon, every
tier: static, unsafe (local_unsafe), local, and sandbox (docker_unsafe,
docker), the last only when the daemon's hello offers it.

Each behaviour that differs between tiers is checked against a tier where
it does not hold (a secret the unsafe tier sees and the local tier does not,
a socket the unsafe tier opens and the local tier cannot), so no test passes
by doing nothing."""

import dataclasses
import json
import os
import socket
import warnings
from pathlib import Path

import pytest

import reachable  # tests/reachable.py, on sys.path via conftest

import ctxd
from ctxd.mellea import (
    DOCKER_POLICY,
    LOCAL_POLICY,
    Artifact,
    CapabilityPolicy,
    ExecutionEnvironment,
    ExecutionResult,
    PackageInstallError,
    PythonTool,
    make_execution_environment,
    python_tool,
)
from conftest import Daemon

SANDBOX_TIERS = ("docker_unsafe", "docker", "sandbox")
RUN_TIERS = ("local_unsafe", "unsafe", "local") + SANDBOX_TIERS

# Runs forever, printing first: a timeout must keep the partial output.
FOREVER = "print('before the loop', flush=True)\nimport time\nwhile True:\n    time.sleep(0.01)\n"


def offered_tiers(endpoint):
    with ctxd.Client(endpoint) as c:
        return c.hello_info.tiers


def need_tier(endpoint, tier):
    """A sandbox-tier test needs the daemon to offer it (this daemon always
    does: a missing tier is a failure, not a skip)."""
    if tier in SANDBOX_TIERS:
        tiers = offered_tiers(endpoint)
        assert "sandbox" in tiers, f"hello.tiers lacks sandbox: {sorted(tiers)}"


@pytest.fixture
def env_for(endpoint):
    """make_execution_environment bound to the test daemon; closes what it made."""
    made = []

    def make(tier, *args, **kw):
        need_tier(endpoint, tier)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            env = make_execution_environment(tier, *args, endpoint=endpoint, **kw)
            env.open()
        made.append(env)
        return env

    yield make
    for e in made:
        e.close()


@pytest.fixture
def tool_for(endpoint):
    made = []

    def make(tier="local_unsafe", **kw):
        need_tier(endpoint, tier)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = python_tool(tier=tier, endpoint=endpoint, **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def context_info(endpoint, name):
    with ctxd.Client(endpoint) as c:
        for info in c.list_contexts():
            if info.name == name:
                return info
    return None


# ---- static ---------------------------------------------------------------------------


def test_static_returns_the_analysis(env_for):
    env = env_for("static")
    r = env.execute("import math\nfrom os import path\nprint(math.pi)")
    assert isinstance(r, ExecutionResult)
    assert r.success and r.skipped, r
    assert r.stdout is None and r.stderr is None and r.exit_code is None
    assert r.execution_mode == "static" and not r.timed_out
    a = r.analysis_result
    assert a["syntax_error"] is None and a["imports"] == ["math", "os"]
    assert a["executed"] is False and a["disallowed"] == []
    assert "not executed" in r.to_validationresult_reason()


def test_static_syntax_error_with_line(env_for):
    env = env_for("static")
    r = env.execute("x = 1\nif x\n    pass\n")
    assert not r.success and r.skipped
    se = r.analysis_result["syntax_error"]
    assert se["line"] == 2 and se["col"] >= 1, se
    assert r.skip_message.startswith("Parse failed")
    assert "line 2" in r.skip_message and r.to_validationresult_reason() == r.skip_message


def test_static_disallowed_import_found(env_for):
    env = env_for("static", allowed_imports=["math"])
    r = env.execute("import math\nimport os\nimport subprocess as sp\n")
    assert not r.success and r.skipped
    assert r.analysis_result["disallowed"] == ["os", "subprocess"]
    assert r.skip_message == "Unauthorized imports detected: os, subprocess"
    ok = env.execute("import math")
    assert ok.success and ok.skipped and ok.analysis_result["disallowed"] == []


def test_static_runs_nothing(env_for, tmp_path):
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')\nprint('hello')"
    r = make_and_run(env_for, "static", code)
    assert r.skipped and r.stdout is None
    assert not marker.exists()
    # the same code does run in an executing tier (the check can fail)
    r = make_and_run(env_for, "local_unsafe", code)
    assert r.success and r.stdout == "hello" and marker.exists()


def make_and_run(env_for, tier, code, **kw):
    return env_for(tier, **kw).execute(code)


# ---- every executing tier -----------------------------------------------------------


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_run_and_fields(env_for, endpoint, tier):
    env = env_for(tier)
    r = env.execute("print(1 + 1)")
    assert r.success and not r.skipped and r.exit_code == 0 and not r.timed_out
    assert r.stdout == "2" and r.stderr == ""
    assert r.execution_mode == tier and r.status == "ok"
    assert r.to_validationresult_reason() == "2"
    info = context_info(endpoint, env.context)
    assert info.tier == {"local_unsafe": "unsafe", "docker_unsafe": "sandbox",
                         "docker": "sandbox"}.get(tier, tier)


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_state_persists_unless_stateless(env_for, tier):
    env = env_for(tier)
    assert env.execute("x = 41").success
    assert env.execute("print(x + 1)").stdout == "42"
    fresh = env_for(tier, stateful=False)
    assert fresh.execute("y = 1").success
    r = fresh.execute("print(y)")
    assert not r.success and "NameError" in r.stderr


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_timeout_keeps_partial_output(env_for, tier):
    env = env_for(tier)
    assert env.execute("kept = 'yes'").success
    r = env.execute(FOREVER, timeout=1)
    # skipped and skip_message as mellea reports a timeout; the partial
    # output is kept (mellea's stdout would be None)
    assert r.timed_out and not r.success and r.skipped
    assert r.skip_message == "Execution timed out."
    assert r.exit_code is None and r.status == "timeout"
    assert r.stdout == "before the loop"  # mellea would return None here
    assert "timed out" in r.stderr
    reason = r.to_validationresult_reason()
    assert reason.startswith("Execution timed out.") and "before the loop" in reason
    # the interrupt left the interpreter and its globals alive
    assert env.execute("print(kept)").stdout == "yes"


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_exit_code_and_success_on_error(env_for, tier):
    env = env_for(tier)
    r = env.execute("print('partial')\nraise ValueError('bad value')")
    assert not r.success and r.exit_code == 1 and not r.skipped
    assert r.stdout == "partial"
    assert "ValueError: bad value" in r.stderr and "Traceback" in r.stderr
    assert r.to_validationresult_reason() == r.stderr
    r = env.execute("import sys\nsys.exit(3)")
    assert not r.success and r.exit_code == 3
    r = env.execute("import sys\nsys.exit(0)")
    assert r.success and r.exit_code == 0
    r = env.execute("import sys\nsys.exit('fatal: no input')")
    assert not r.success and r.exit_code == 1 and "fatal: no input" in r.stderr
    r = env.execute("import os\nos._exit(4)")
    assert not r.success and r.exit_code == 4 and r.state_lost and r.status == "died"
    assert env.execute("print('alive')").stdout == "alive"


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_working_directory(env_for, tier, tmp_path):
    wd = reachable.writable(tmp_path / "wd")  # confined tiers: a uid of their own
    env = env_for(tier, working_directory=str(wd))
    r = env.execute("import os\nprint(os.getcwd())\nopen('out.txt', 'w').write('data')")
    assert r.success and r.working_directory == str(wd)
    if tier not in SANDBOX_TIERS:  # the sandbox may mount it elsewhere
        assert r.stdout == str(wd)
    assert [a.path for a in r.artifacts] == [wd / "out.txt"]
    assert r.artifacts[0].size_bytes == 4 and r.artifacts[0].content_type == "text/plain"
    assert (wd / "out.txt").read_text() == "data"


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_copy_in_and_out(env_for, tier, tmp_path):
    wd = reachable.writable(tmp_path / "wd")  # confined tiers: a uid of their own
    env = env_for(tier, working_directory=str(wd))
    src = tmp_path / "in.bin"
    src.write_bytes(b"\x00payload\xff")
    env.copy_in(src, "in.bin")
    r = env.execute("d = open('in.bin', 'rb').read()\nopen('res.bin', 'wb').write(d[::-1])")
    assert r.success, r
    env.copy_out("res.bin", tmp_path / "res.bin")
    assert (tmp_path / "res.bin").read_bytes() == b"\xffdaolyap\x00"


def test_copy_in_out_not_in_static(env_for, tmp_path):
    env = env_for("static")
    with pytest.raises(NotImplementedError):
        env.copy_in(tmp_path, "x")
    with pytest.raises(NotImplementedError):
        env.copy_out("x", tmp_path / "x")


# ---- import allowlist -----------------------------------------------------------------


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_allowlist_precheck_skips_and_runs_nothing(env_for, tier, tmp_path):
    wd = reachable.writable(tmp_path / "wd")  # confined tiers: a uid of their own
    env = env_for(tier, allowed_imports=["math"], working_directory=str(wd))
    r = env.execute("open('ran', 'w').write('x')\n__import__('socket')")
    assert r.skipped and not r.success and r.stdout is None
    assert r.skip_message == "Unauthorized imports detected: socket"
    assert r.to_validationresult_reason() == r.skip_message
    assert not (wd / "ran").exists()
    ok = env.execute("import math\nprint(math.floor(2.5))")
    assert ok.success and ok.stdout == "2"


@pytest.mark.parametrize("tier", ("local",) + SANDBOX_TIERS)
def test_allowlist_enforced_at_run_time(env_for, tier):
    """A dynamic import the static check cannot name is stopped by the
    daemon's import hook in the confined tiers."""
    env = env_for(tier, allowed_imports=["math"])
    r = env.execute("name = 'so' + 'cket'\nm = __import__(name)\nprint('imported', m)")
    assert not r.skipped and not r.success and r.exit_code == 1
    assert "ImportError" in r.stderr and "allowed_imports" in r.stderr
    assert "imported" not in r.stdout
    r = env.execute("import importlib\n")
    assert r.skipped  # importlib itself is not on the list
    r = env.execute("exec('import ' + 'os')")
    assert not r.success and "ImportError" in r.stderr


def test_allowlist_dynamic_import_skipped_in_unsafe(env_for):
    """The unsafe tier has no runtime hook: a dynamic import is refused
    before the run instead."""
    env = env_for("local_unsafe", allowed_imports=["math"])
    r = env.execute("m = __import__('so' + 'cket')")
    assert r.skipped and "<dynamic import>" in r.skip_message


def test_empty_allowlist_allows_no_import(env_for):
    env = env_for("local", allowed_imports=[])
    r = env.execute("import math")
    assert r.skipped and r.skip_message == "Unauthorized imports detected: math"
    assert env.execute("print(len('abc'))").stdout == "3"


# ---- confinement: local and sandbox against unsafe ------------------------------------------


@pytest.fixture
def secret_endpoint(tmp_path, monkeypatch):
    """A daemon whose own environment holds a secret."""
    monkeypatch.setenv("CTXD_TEST_SECRET", "hunter2")
    d = Daemon(tmp_path).start()
    yield d.endpoint
    crashed = d.stop()
    assert crashed is None, crashed


@pytest.mark.parametrize("tier", ("local_unsafe", "local") + SANDBOX_TIERS)
def test_clean_environment(secret_endpoint, tier):
    need_tier(secret_endpoint, tier)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        env = make_execution_environment(tier, endpoint=secret_endpoint)
    with env:
        r = env.execute("import os\nprint(os.environ.get('CTXD_TEST_SECRET'))")
    assert r.success
    # the unsafe tier inherits the daemon's environment; the confined ones never do
    assert r.stdout == ("hunter2" if tier == "local_unsafe" else "None")


@pytest.mark.parametrize("tier", ("local_unsafe", "local") + SANDBOX_TIERS)
def test_default_policy_blocks_network(env_for, tier):
    """LOCAL_POLICY and DOCKER_POLICY say network_access=False: enforced."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        env = env_for(tier)
        r = env.execute(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 5)\n"
                        "print('connected')")
    finally:
        srv.close()
    if tier == "local_unsafe":
        assert r.success and r.stdout == "connected"
    else:
        assert not r.success and "connected" not in r.stdout
        assert "Error" in r.stderr


@pytest.mark.parametrize("tier", ("local",) + SANDBOX_TIERS)
def test_policy_limits_enforced(env_for, tier, tmp_path):
    roots = reachable.writable(tmp_path / "w")
    with pytest.warns(UserWarning, match="'local' and 'docker' tiers enforce them"):
        pol = CapabilityPolicy(subprocess_execution=False, memory_bytes=256 << 20,
                               filesystem_write_roots=[roots], timeout=30)
    env = env_for(tier, policy=pol, working_directory=str(roots))
    r = env.execute("import subprocess\nsubprocess.run(['true'])")
    assert not r.success and "PermissionError" in r.stderr
    r = env.execute("b = b'x' * (1 << 30)")  # 4x the limit, every page written
    assert not r.success
    if tier == "local":  # RLIMIT_AS
        assert "MemoryError" in r.stderr
    else:  # the sandbox may use a memory cgroup: an OOM kill is reported as a death
        assert "MemoryError" in r.stderr or (r.status == "died" and r.state_lost), r
    if tier == "local":  # Landlock: refused
        r = env.execute(f"open({str(tmp_path / 'outside')!r}, 'w')")
        assert not r.success and "PermissionError" in r.stderr
    else:  # the root is read-only; /tmp (where tmp_path is) is the sandbox's own tmpfs
        r = env.execute("open('/etc/outside', 'w')")
        assert not r.success and "Read-only file system" in r.stderr
        r = env.execute(f"open({str(tmp_path / 'outside')!r}, 'w').write('mine')")
        assert r.success
    assert not (tmp_path / "outside").exists()
    r = env.execute("open('inside', 'w').write('ok')")
    assert r.success and (roots / "inside").read_text() == "ok"


# ---- CapabilityPolicy -------------------------------------------------------------------


def test_policy_defaults_are_melleas():
    p = CapabilityPolicy()
    assert p.timeout == 30 and p.network_access is False and p.subprocess_execution is False
    assert p.env_var_access is True and p.package_installation is False
    assert p.stdout_max_bytes is None and p.stderr_max_bytes is None
    assert p.artifact_export_paths == [] and p.packages == []
    assert p.filesystem_read_roots is None and p.filesystem_write_roots is None
    assert (LOCAL_POLICY.timeout, LOCAL_POLICY.subprocess_execution) == (30, True)
    assert (DOCKER_POLICY.timeout, DOCKER_POLICY.package_installation) == (60, True)


def test_policy_to_ctxd_mapping(tmp_path):
    with pytest.warns(UserWarning, match="path-restriction fields"):
        p = CapabilityPolicy(filesystem_read_roots=[tmp_path],
                             filesystem_write_roots=[Path("rel")], network_access=True,
                             timeout=7, stdout_max_bytes=10,
                             packages=["numpy"], memory_bytes=1 << 28, cpu_seconds=2,
                             max_processes=4, file_size_bytes=1000, env=["HOME"],
                             allowed_imports=["math"], artifact_export_paths=[Path("/x")])
    m = p.to_ctxd()
    assert m == {"timeout": 7, "network_access": True, "subprocess_execution": False,
                 "env_var_access": True, "env": ["HOME"],
                 "filesystem_read_roots": [str(tmp_path)],
                 "filesystem_write_roots": [os.path.abspath("rel")],
                 "memory_bytes": 1 << 28, "max_processes": 4, "file_size_bytes": 1000,
                 "cpu_seconds": 2.0, "allowed_imports": ["math"], "packages": ["numpy"]}
    json.dumps(m)  # wire-ready


def test_policy_reaches_the_daemon(env_for, endpoint):
    pol = CapabilityPolicy(timeout=9, memory_bytes=1 << 30, cpu_seconds=5)
    env = env_for("local", policy=pol, allowed_imports=["math"])
    info = context_info(endpoint, env.context)
    assert info.tier == "local"
    assert info.policy == {"timeout": 9.0, "network_access": False,
                           "subprocess_execution": False, "env_var_access": True,
                           "memory_bytes": 1 << 30, "cpu_seconds": 5.0,
                           "allowed_imports": ["math"],
                           "max_processes": 512}  # a root daemon's default for local
    default = env_for("local")
    assert context_info(endpoint, default.context).policy["subprocess_execution"] is True


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_policy_timeout_applies(env_for, tier):
    env = env_for(tier, policy=CapabilityPolicy(timeout=1, subprocess_execution=True))
    r = env.execute(FOREVER)  # no timeout given: the policy's
    assert r.timed_out and r.stdout == "before the loop"
    r = env.execute(FOREVER, timeout=3600)  # the policy's timeout is a cap
    assert r.timed_out


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_output_caps_truncate_visibly(env_for, tier):
    pol = CapabilityPolicy(stdout_max_bytes=30, stderr_max_bytes=40, subprocess_execution=True)
    env = env_for(tier, policy=pol)
    r = env.execute("import sys\nprint('x' * 100)\nprint('e' * 100, file=sys.stderr)")
    assert r.success
    assert r.stdout.endswith("... [truncated]") and len(r.stdout.encode()) <= 30
    assert r.stdout.startswith("x" * 15)
    assert r.stderr.endswith("... [truncated]") and len(r.stderr.encode()) <= 40
    short = env.execute("print('short')")
    assert short.stdout == "short"


def test_unsafe_tier_declares_what_it_cannot_enforce(endpoint):
    env = make_execution_environment("local_unsafe", policy=CapabilityPolicy(timeout=5),
                                     endpoint=endpoint)
    with pytest.warns(UserWarning, match="declared but will not restrict actual execution"
                      ".*network_access=False, package_installation=False, "
                      "subprocess_execution=False"):
        env.open()
    try:
        assert env.unenforced_capabilities() == ["network_access", "subprocess_execution"]
        # timeout and the output caps are the supervisor's, in every tier
        assert env.enforced_capabilities() == ["timeout", "stdout_max_bytes", "stderr_max_bytes"]
        with ctxd.Client(endpoint) as c:
            info = [i for i in c.list_contexts() if i.name == env.context][0]
        assert info.policy == {"timeout": 5.0}
    finally:
        env.close()


def test_local_tier_enforces_every_field_given(env_for):
    env = env_for("local", policy=CapabilityPolicy())
    assert env.unenforced_capabilities() == []
    assert "network_access" in env.enforced_capabilities()


def test_unknown_tier_is_a_value_error():
    with pytest.raises(ValueError, match="docker2"):
        make_execution_environment("docker2")
    with pytest.raises(ValueError):
        python_tool(tier="kubernetes")


# ---- lifecycle ------------------------------------------------------------------------


def test_context_lifecycle(endpoint):
    with ctxd.Client(endpoint) as c:
        before = {i.name for i in c.list_contexts()}
        env = make_execution_environment("local", endpoint=endpoint, allowed_imports=["math"])
        assert env.context is None  # lazily created
        env.execute("x = 1")
        made = {i.name for i in c.list_contexts()} - before
        assert env.context in made and len(made) == 2  # the run and the import-check contexts
        env.close()
        assert {i.name for i in c.list_contexts()} == before
        with make_execution_environment("static", endpoint=endpoint) as env2:
            assert env2.context in {i.name for i in c.list_contexts()}
        assert {i.name for i in c.list_contexts()} == before
        env3 = make_execution_environment("local_unsafe", endpoint=endpoint)
        env3.execute("pass")
        name = env3.context
        del env3
        import gc
        gc.collect()
        assert name not in {i.name for i in c.list_contexts()}


def test_shared_client_is_not_closed(client):
    with make_execution_environment("local_unsafe", client=client) as env:
        assert env.execute("print('a')").stdout == "a"
    assert client.execute("1 + 1").result == "2"


def test_strip_output_off_keeps_whitespace(env_for):
    env = env_for("local_unsafe", strip_output=False)
    assert env.execute("print('  x  ')").stdout == "  x  \n"


# ---- python_tool --------------------------------------------------------------------------


def test_tool_schema(tool_for):
    t = tool_for("local", name="run_python")
    assert isinstance(t, PythonTool) and t.name == "run_python"
    assert t.description
    spec = t.as_json_tool
    assert json.loads(json.dumps(spec)) == spec
    assert spec["type"] == "function"
    fn = spec["function"]
    assert fn["name"] == "run_python" and fn["description"] == t.description
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["code"]
    assert params["properties"]["code"]["type"] == "string"
    assert list(params["properties"]) == ["code"]
    spec["function"]["name"] = "changed"
    assert t.as_json_tool["function"]["name"] == "run_python"  # a copy


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_tool_call(tool_for, tier):
    t = tool_for(tier)
    r = t(code="value = 6 * 7\nprint(value)")
    assert isinstance(r, ExecutionResult) and r.success and r.stdout == "42"
    assert r.execution_mode == tier and r.artifacts == []
    assert t.run(code="print(value + 1)").stdout == "43"  # the interpreter persists
    out = json.loads(t.invoke('{"code": "print(value * 2)"}'))
    assert out["success"] is True and out["stdout"] == "84" and out["exit_code"] == 0
    bad = json.loads(t.invoke({"code": "1/0"}))
    assert bad["success"] is False and "ZeroDivisionError" in bad["stderr"]
    assert json.loads(t.invoke({}))["skipped"] is True


def test_tool_static_tier(tool_for):
    t = tool_for("static", allowed_imports=["math"])
    r = t(code="import os")
    assert r.skipped and "os" in r.skip_message


@pytest.mark.parametrize("tier", RUN_TIERS)
def test_tool_artifact_dir_receives_files(tool_for, tier, tmp_path):
    adir = tmp_path / "artifacts"
    t = tool_for(tier, artifact_dir=adir)
    code = ("import os, csv\n"
            "os.makedirs('plots', exist_ok=True)\n"
            "with open('table.csv', 'w', newline='') as f:\n"
            "    csv.writer(f).writerows([['a', 'b'], [1, 2]])\n"
            "open('plots/p.json', 'w').write('{\"k\": 1}')\n"
            "print(os.getcwd())")
    r = t(code=code)
    assert r.success, r
    assert r.stdout != str(adir)  # the code ran elsewhere: the files were copied
    got = sorted(r.artifacts, key=lambda a: str(a.path))
    assert [a.path for a in got] == [adir / "plots" / "p.json", adir / "table.csv"]
    assert (adir / "table.csv").read_bytes() == b"a,b\r\n1,2\r\n"
    assert json.loads((adir / "plots" / "p.json").read_text()) == {"k": 1}
    assert got[1].size_bytes == len("a,b\r\n1,2\r\n") and got[1].content_type == "text/csv"
    assert got[0].content_type == "application/json"
    # the next run reports only what it changed
    r = t(code="open('table.csv', 'a').write('3,4\\n')")
    assert [a.path for a in r.artifacts] == [adir / "table.csv"]
    assert (adir / "table.csv").read_text().endswith("3,4\n")
    assert t(code="print('nothing written')").artifacts == []


@pytest.mark.parametrize("tier", ("local_unsafe", "local"))
def test_tool_without_artifact_dir(tool_for, tier):
    t = tool_for(tier)
    r = t(code="open('out.txt', 'w').write('hello')")
    assert r.success and len(r.artifacts) == 1
    a = r.artifacts[0]
    assert isinstance(a, Artifact) and a.path.name == "out.txt" and a.size_bytes == 5
    assert a.path.read_text() == "hello" and str(a.path.parent) == r.working_directory
    wd = r.working_directory
    t.close()
    assert not os.path.exists(wd)  # the tool's temporary directory went with it


def test_tool_default_tier_warns(endpoint):
    with pytest.warns(UserWarning, match="local_unsafe"):
        t = python_tool(endpoint=endpoint)
    try:
        assert t.environment.tier == "local_unsafe"
        assert t(code="print('ok')").stdout == "ok"
    finally:
        t.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        python_tool(tier="local_unsafe", endpoint=endpoint).close()


@pytest.mark.parametrize("bad", [[""], ["   "], ["-r", "reqs.txt"], ["--index-url=x"]])
def test_tool_rejects_bad_package_specs(bad):
    with pytest.raises(ValueError):
        python_tool(tier="local", packages=bad)


def test_tool_packages_go_to_the_daemon(endpoint):
    """packages reach ctx.create's policy; a daemon that refuses or fails
    them raises PackageInstallError at construction, naming the package and
    quoting the daemon."""
    try:
        t = python_tool(tier="local", packages=["ctxd-no-such-package-0"], endpoint=endpoint)
    except PackageInstallError as e:
        assert "ctxd-no-such-package-0" in str(e) and e.code
        assert isinstance(e, ctxd.RefusedError)
        return
    # a daemon that accepts the list must show it in the context's policy
    try:
        info = context_info(endpoint, t.environment.context)
        assert info.policy.get("packages") == ["ctxd-no-such-package-0"]
    finally:
        t.close()


def test_tool_packages_merge_into_policy(endpoint):
    pol = CapabilityPolicy(packages=["ctxd-no-such-a"], timeout=5)
    try:
        t = python_tool(tier="local", packages=["ctxd-no-such-a", "ctxd-no-such-b"],
                        policy=pol, endpoint=endpoint)
    except PackageInstallError as e:
        assert "ctxd-no-such-a, ctxd-no-such-b" in str(e)
    else:
        try:
            info = context_info(endpoint, t.environment.context)
            assert info.policy["packages"] == ["ctxd-no-such-a", "ctxd-no-such-b"]
        finally:
            t.close()
    assert pol.packages == ["ctxd-no-such-a"]  # the caller's policy is not changed


def test_result_dataclass_is_melleas():
    names = [f.name for f in dataclasses.fields(ExecutionResult)]
    assert names[:11] == ["success", "stdout", "stderr", "skipped", "skip_message",
                          "analysis_result", "exit_code", "timed_out", "artifacts",
                          "execution_mode", "working_directory"]
    r = ExecutionResult(True, "out", "")
    assert (r.exit_code, r.timed_out, r.artifacts, r.execution_mode) == (None, False, [], "unknown")
    assert r.to_validationresult_reason() == "out"
    assert ExecutionResult(False, "o", "err").to_validationresult_reason() == "err"
    assert ExecutionResult(False, None, None, True, "why").to_validationresult_reason() == "why"
    assert isinstance(make_execution_environment("local"), ExecutionEnvironment)
