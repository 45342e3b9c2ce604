"""mellea's own usage against ctxd.mellea: the seed page's python_tool
example verbatim, on a daemon with no package source; mellea's public names;
artifacts, warnings and timeouts as mellea reports them."""

import sys
import warnings
from pathlib import Path

import pytest

import ctxd
from ctxd import mellea
from ctxd.mellea import (
    COMPATIBILITY_MATRIX,
    CapabilityPolicy,
    LLMSandboxEnvironment,
    PackageInstallError,
    StaticAnalysisEnvironment,
    UnsafeEnvironment,
    code_interpreter,
    local_code_interpreter,
    make_execution_environment,
    python_tool,
)

# The example of mellea's python_tool reference page (the seed ctxd was
# made from), character for character.
SEED_EXAMPLE = '''\
from mellea.stdlib.tools import python_tool

tool = python_tool(packages=["matplotlib", "numpy"])
result = tool.run(code="import numpy as np; print(np.sqrt(4))")
print(result.stdout)   # "2.0"
print(result.artifacts)  # files written during execution
'''


@pytest.fixture
def mellea_path(tmp_path, endpoint, monkeypatch):
    """mellea's import path served by ctxd.mellea (as the held-out harness
    maps it), the daemon reached through $CTXD_ENDPOINT."""
    pkg = tmp_path / "shim" / "mellea" / "stdlib" / "tools"
    pkg.mkdir(parents=True)
    for d in (pkg.parent.parent, pkg.parent):
        (d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from ctxd.mellea import *  # noqa\n"
                                     "from ctxd.mellea import __all__  # noqa\n")
    monkeypatch.syspath_prepend(str(tmp_path / "shim"))
    monkeypatch.setenv("CTXD_ENDPOINT", endpoint)
    yield
    for m in [m for m in sys.modules if m == "mellea" or m.startswith("mellea.")]:
        del sys.modules[m]


def test_seed_example_verbatim_without_package_source(mellea_path, capsys):
    ns = {}
    with pytest.warns(UserWarning, match="defaulted to 'local_unsafe'"):
        exec(compile(SEED_EXAMPLE, "<seed>", "exec"), ns)
    assert capsys.readouterr().out == "2.0\n[]\n"
    tool = ns["tool"]
    try:
        assert ns["result"].success and ns["result"].execution_mode == "local_unsafe"
        # both were already importable in the context: installed, pip not asked
        got = {e["name"]: e for e in tool.environment.installed}
        assert set(got) == {"matplotlib", "numpy"}
        import matplotlib
        import numpy
        assert got["numpy"]["present"] == numpy.__version__
        assert got["matplotlib"]["present"] == matplotlib.__version__
        assert tool.run(code="import matplotlib; print(matplotlib.__version__)").stdout == \
            matplotlib.__version__
    finally:
        tool.close()


def test_only_unsatisfied_requirements_go_to_pip(endpoint):
    import numpy
    # numpy at a satisfying version is present; a version that cannot be is not,
    # and neither is an unknown package: this daemon has no package source
    for missing in ("numpy<1", "ctxd-no-such-package-1"):
        with pytest.raises(PackageInstallError, match="no packages") as e:
            python_tool(tier="local_unsafe", packages=["numpy>=1.0", missing],
                        endpoint=endpoint)
        assert "Package installation failed" in str(e.value) and missing in str(e.value)
    t = python_tool(tier="local", packages=[f"numpy=={numpy.__version__}", "numpy[extra]>=1"],
                    endpoint=endpoint)
    try:
        assert [e["present"] for e in t.environment.installed] == [numpy.__version__] * 2
        assert t.run(code="import numpy; print(numpy.__version__)").stdout == numpy.__version__
    finally:
        t.close()
    with ctxd.Client(endpoint) as c:
        assert not [i for i in c.list_contexts() if i.name.startswith("mellea-")]


def test_public_names_and_enforcement_flags():
    for name in ("UnsafeEnvironment", "StaticAnalysisEnvironment", "LLMSandboxEnvironment",
                 "code_interpreter", "local_code_interpreter", "COMPATIBILITY_MATRIX"):
        assert name in mellea.__all__ and hasattr(mellea, name)
    p = CapabilityPolicy()
    assert p.unenforced_capabilities() == [
        "filesystem_read_roots", "filesystem_write_roots", "network_access",
        "package_installation", "subprocess_execution", "env_var_access"]
    assert p.enforced_capabilities() == ["timeout", "stdout_max_bytes", "stderr_max_bytes",
                                         "artifact_export_paths", "packages"]
    assert CapabilityPolicy.ENFORCED_timeout and not CapabilityPolicy.ENFORCED_network_access

    class Stricter(CapabilityPolicy):
        ENFORCED_network_access = True

    assert "network_access" in Stricter().enforced_capabilities()
    assert "network_access" not in Stricter().unenforced_capabilities()
    assert set(COMPATIBILITY_MATRIX) == {"static", "local_unsafe", "local", "docker_unsafe",
                                         "docker"}
    assert not COMPATIBILITY_MATRIX["static"]["execute_code"]
    assert [t for t, row in COMPATIBILITY_MATRIX.items() if row["policy_applied"]] == \
        ["local", "docker"]
    assert [t for t, row in COMPATIBILITY_MATRIX.items() if row["docker_isolation"]] == \
        ["docker_unsafe", "docker"]
    assert isinstance(make_execution_environment("static"), StaticAnalysisEnvironment)
    assert make_execution_environment("local").tier == "local"
    assert isinstance(make_execution_environment("local_unsafe"), UnsafeEnvironment)
    assert isinstance(make_execution_environment("docker"), LLMSandboxEnvironment)
    # mellea's tier inference from the policy
    assert UnsafeEnvironment().tier == "local_unsafe"
    assert UnsafeEnvironment(policy=CapabilityPolicy()).tier == "local"
    assert LLMSandboxEnvironment().tier == "docker_unsafe"
    assert LLMSandboxEnvironment(policy=CapabilityPolicy()).tier == "docker"
    assert LLMSandboxEnvironment(export_dir=Path(".")).export_dir is None


def test_environment_classes_run(endpoint):
    with UnsafeEnvironment(endpoint=endpoint) as env:
        r = env.execute("print(6 * 7)")
        assert (r.success, r.stdout, r.execution_mode) == (True, "42", "local_unsafe")
    with LLMSandboxEnvironment(endpoint=endpoint) as env:
        assert env.execute("print('boxed')").stdout == "boxed"
    with StaticAnalysisEnvironment(endpoint=endpoint) as env:
        r = env.execute("import os\nwhile True: pass")
        assert r.success and r.skipped


def test_deprecated_interpreters(endpoint, monkeypatch):
    monkeypatch.setenv("CTXD_ENDPOINT", endpoint)
    with pytest.warns(DeprecationWarning, match="python_tool\\(tier='local_unsafe'\\)"):
        r = local_code_interpreter("print('local')")
    assert r.success and r.stdout == "local" and r.execution_mode == "local_unsafe"
    with pytest.warns(DeprecationWarning, match="python_tool\\(tier='docker_unsafe'\\)"):
        r = code_interpreter("print('docker')")
    assert r.success and r.stdout == "docker" and r.execution_mode == "docker_unsafe"
    with ctxd.Client(endpoint) as c:  # each made and deleted its context
        assert not [i for i in c.list_contexts() if i.name.startswith("mellea-")]


# ---- artifacts -------------------------------------------------------------------------------


@pytest.fixture
def tool(endpoint, tmp_path):
    made = []

    def make(**kw):
        with warnings.catch_warnings():  # a policy on local_unsafe: mellea's warning
            warnings.simplefilter("ignore", UserWarning)
            t = python_tool(tier=kw.pop("tier", "local_unsafe"), endpoint=endpoint, **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def test_failed_and_timed_out_runs_have_no_artifacts(tool, tmp_path):
    adir = tmp_path / "art"
    t = tool(artifact_dir=adir, policy=CapabilityPolicy(timeout=1, subprocess_execution=True))
    r = t.run(code="open('failed.txt', 'w').write('x')\nraise ValueError('no')")
    assert not r.success and not r.skipped and r.artifacts == []
    assert not (adir / "failed.txt").exists()
    r = t.run(code="open('slow.txt', 'w').write('x')\nprint('partial', flush=True)\n"
                   "while True: pass")
    assert r.timed_out and r.skipped and not r.success and r.artifacts == []
    assert r.skip_message == "Execution timed out."
    assert r.stdout == "partial"  # ctxd keeps the partial output (mellea: None)
    assert r.to_validationresult_reason().startswith("Execution timed out.")
    assert not (adir / "slow.txt").exists()
    r = t.run(code="open('ok.txt', 'w').write('fine')")
    assert [a.path.name for a in r.artifacts] == ["ok.txt"]
    assert (adir / "ok.txt").read_text() == "fine"


def test_files_written_into_artifact_dir_by_absolute_path(tool, tmp_path):
    adir = tmp_path / "abs"
    t = tool(artifact_dir=adir)
    (adir / "old.txt").write_text("before")
    r = t.run(code=f"open({str(adir / 'plot.csv')!r}, 'w').write('a,b')")
    assert r.success
    assert [(a.path, a.size_bytes, a.content_type) for a in r.artifacts] == \
        [(adir / "plot.csv", 3, "text/csv")]  # old.txt was there before: not an artifact
    assert t.run(code="print('no files')").artifacts == []


def test_artifact_export_paths(tool, tmp_path):
    adir, elsewhere = tmp_path / "exp", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pol = CapabilityPolicy(artifact_export_paths=[elsewhere / "report.json", Path("rel.txt"),
                                                  elsewhere / "never-written"],
                           subprocess_execution=True)
    t = tool(artifact_dir=adir, policy=pol, tier="local_unsafe")
    r = t.run(code=f"open({str(elsewhere / 'report.json')!r}, 'w').write('{{}}')\n"
                   "open('rel.txt', 'w').write('r')")
    assert r.success
    got = {a.path.name: a for a in r.artifacts}
    assert set(got) == {"report.json", "rel.txt"}
    assert got["report.json"].path == adir / "report.json"
    assert (adir / "report.json").read_text() == "{}" and got["report.json"].size_bytes == 2
    assert got["report.json"].content_type == "application/json"
    assert (adir / "rel.txt").read_text() == "r"
    # a failed run exports nothing
    (adir / "report.json").unlink()
    assert t.run(code="raise SystemExit(2)").artifacts == []
    assert not (adir / "report.json").exists()


# ---- warnings as mellea gives them ---------------------------------------------------------


def test_packages_without_policy_do_not_warn(endpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = python_tool(tier="local_unsafe", packages=["numpy"], endpoint=endpoint)
        try:
            assert t.run(code="import numpy; print('ok')").stdout == "ok"
        finally:
            t.close()


def test_caller_policy_on_unsafe_tier_warns_with_mellea_wording(endpoint):
    with pytest.warns(UserWarning) as rec:
        t = python_tool(tier="local_unsafe", policy=CapabilityPolicy(network_access=False),
                        endpoint=endpoint)
    t.close()
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith("A CapabilityPolicy with unenforced restrictions was passed to a "
                              "'local_unsafe' execution environment.")
    assert "network_access=False, package_installation=False, subprocess_execution=False" \
        in msgs[0]
    # mellea users' filter on that message keeps working
    with warnings.catch_warnings():
        warnings.filterwarnings("error")
        warnings.filterwarnings("ignore", message="A CapabilityPolicy with unenforced")
        python_tool(tier="local_unsafe", policy=CapabilityPolicy(), endpoint=endpoint).close()
    # the local tier enforces the policy: nothing to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        python_tool(tier="local", policy=CapabilityPolicy(), endpoint=endpoint).close()


@pytest.mark.parametrize("tier", ["local", "docker", "local_unsafe"])
def test_present_packages_with_an_import_allowlist(endpoint, tier):
    """The check needs importlib.metadata, which the allowlist forbids: it
    runs beside the context, and the allowlist still holds in it."""
    import numpy
    t = python_tool(tier=tier, packages=["numpy"], allowed_imports=["numpy"], endpoint=endpoint)
    try:
        assert t.environment.installed == [{"name": "numpy", "cached": True,
                                            "present": numpy.__version__}]
        assert t.run(code="import numpy; print(numpy.sqrt(4))").stdout == "2.0"
        r = t.run(code="import os")
        assert r.skipped and "os" in r.skip_message
    finally:
        t.close()
    with ctxd.Client(endpoint) as c:
        assert not [i for i in c.list_contexts() if i.name.startswith("mellea-")]


def test_path_roots_warn_once_at_construction(endpoint, tmp_path):
    with pytest.warns(UserWarning) as rec:
        p = CapabilityPolicy(filesystem_read_roots=[tmp_path], subprocess_execution=True,
                             network_access=True, env_var_access=True)
    (w,) = rec
    assert str(w.message).startswith("CapabilityPolicy was constructed with path-restriction "
                                      "fields that are declared but not enforced at runtime")
    assert "'filesystem_read_roots': declared but not enforced at runtime" in str(w.message)
    assert w.filename == __file__
    with warnings.catch_warnings():  # merging packages and copying: no second warning
        warnings.simplefilter("error")
        t = python_tool(tier="local", policy=p, packages=["numpy"], endpoint=endpoint)
        t.close()


def test_with_a_wheelhouse_only_the_missing_go_to_pip(tmp_path):
    """A daemon whose wheelhouse has neither numpy nor matplotlib (pip would
    say "No matching distribution"): those the context imports count as
    installed, the one it lacks comes from the wheelhouse."""
    from conftest import Daemon
    from test_pkgs import make_wheel
    wh = tmp_path / "wh"
    wh.mkdir()
    make_wheel(wh, "ctxdmellpkg", "1.2", "VALUE = 12\n")
    d = Daemon(tmp_path).start("--wheelhouse", str(wh), "--package-cache",
                               str(tmp_path / "cache"))
    try:
        t = python_tool(tier="local", packages=["matplotlib", "numpy", "ctxdmellpkg==1.2"],
                        endpoint=d.endpoint)
        try:
            got = {e["name"]: e for e in t.environment.installed}
            assert got["matplotlib"]["present"] and got["numpy"]["present"]
            assert got["ctxdmellpkg==1.2"] == {"name": "ctxdmellpkg==1.2", "cached": False}
            r = t.run(code="import numpy, ctxdmellpkg; print(ctxdmellpkg.VALUE)")
            assert r.stdout == "12"
        finally:
            t.close()
        with pytest.raises(PackageInstallError, match="No matching distribution"):
            python_tool(tier="local", packages=["numpy", "ctxd-not-in-wheelhouse"],
                        endpoint=d.endpoint)
    finally:
        crashed = d.stop()
        assert crashed is None, crashed
