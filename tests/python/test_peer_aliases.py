"""The mellea and Daytona surfaces under the module names their users
import: ctxd.mellea.install_as_mellea() (mellea.stdlib.tools and its
execution_policy / interpreter modules: COMPATIBILITY_MATRIX,
UnsafeEnvironment, ...) and ctxd.daytona.install_as_daytona()
(daytona.common.errors and the code interpreter's modules). Each check runs
in a Python process of its own (the aliases change sys.modules), against a
real daemon found through $CTXD_ENDPOINT."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code, endpoint, extra_path=()):
    env = dict(os.environ, CTXD_ENDPOINT=endpoint,
               PYTHONPATH=os.pathsep.join([*map(str, extra_path), str(ROOT / "client" / "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_mellea_names_where_mellea_exports_them(endpoint, tmp_path):
    p = run_python(f'''
        import ctxd.mellea
        ctxd.mellea.install_as_mellea()
        from mellea.stdlib.tools import (
            COMPATIBILITY_MATRIX, DOCKER_POLICY, LOCAL_POLICY, Artifact, CapabilityPolicy,
            ExecutionResult, StaticAnalysisEnvironment, UnsafeEnvironment, python_tool,
        )
        from mellea.stdlib.tools.execution_policy import COMPATIBILITY_MATRIX as M2, ExecutionTier
        from mellea.stdlib.tools.interpreter import UnsafeEnvironment as U2, LLMSandboxEnvironment
        import mellea.stdlib.tools.interpreter as interp
        assert M2 is COMPATIBILITY_MATRIX is ctxd.mellea.COMPATIBILITY_MATRIX
        assert U2 is UnsafeEnvironment is interp.UnsafeEnvironment is ctxd.mellea.UnsafeEnvironment
        # mellea's own checks of the matrix and of UnsafeEnvironment
        assert set(COMPATIBILITY_MATRIX) == {{"static", "local_unsafe", "local", "docker_unsafe",
                                             "docker"}}
        assert [COMPATIBILITY_MATRIX[t]["policy_applied"] for t in
                ("local_unsafe", "docker_unsafe", "local", "docker")] == [False, False, True, True]
        for t in ("docker_unsafe", "docker"):
            assert COMPATIBILITY_MATRIX[t]["copy_in"] and COMPATIBILITY_MATRIX[t]["copy_out"]
        assert ExecutionResult(success=True, stdout="", stderr="").execution_mode == "unknown"
        env = UnsafeEnvironment()
        r = env.execute("print('hi')")
        assert (r.execution_mode, r.exit_code, r.stdout, r.working_directory) == \\
            ("local_unsafe", 0, "hi", None), r
        r = env.execute("raise ValueError('boom')")
        assert r.exit_code not in (None, 0), r
        env.close()
        with UnsafeEnvironment(policy=LOCAL_POLICY) as env:
            assert env.execute("print('hi')").execution_mode == "local"
        with UnsafeEnvironment(working_directory={str(tmp_path)!r}) as env:
            r = env.execute("import os; print(os.getcwd())")
            assert r.success and {str(tmp_path)!r} in r.stdout, r
            assert r.working_directory == {str(tmp_path)!r}
        print("ok")
    ''', endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"


def test_a_mellea_installed_beside_keeps_its_other_modules(endpoint, tmp_path):
    # a stand-in for the mellea package (its parts other than the interpreter)
    pkg = tmp_path / "site" / "mellea"
    (pkg / "stdlib").mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHO = 'the real mellea'\n")
    (pkg / "core.py").write_text("class Context:\n    pass\n")
    (pkg / "stdlib" / "__init__.py").write_text("")
    p = run_python('''
        import ctxd.mellea
        ctxd.mellea.install_as_mellea()
        import mellea, mellea.core, mellea.stdlib.tools
        from mellea.stdlib.tools import UnsafeEnvironment
        assert mellea.WHO == "the real mellea" and mellea.core.Context
        assert mellea.stdlib.tools.UnsafeEnvironment is ctxd.mellea.UnsafeEnvironment
        assert UnsafeEnvironment is ctxd.mellea.UnsafeEnvironment
        print("ok")
    ''', endpoint, extra_path=[tmp_path / "site"])
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"


def test_daytona_errors_import_path(endpoint):
    p = run_python('''
        import ctxd.daytona
        ctxd.daytona.install_as_daytona()
        from daytona.common.errors import (
            DaytonaAuthenticationError, DaytonaBadRequestError, DaytonaConflictError,
            DaytonaConnectionError, DaytonaError, DaytonaForbiddenError, DaytonaNotFoundError,
            DaytonaRateLimitError, DaytonaServerError, DaytonaTimeoutError,
            DaytonaValidationError,
        )
        from daytona.common.code_interpreter import ExecutionError, ExecutionResult, OutputMessage
        from daytona import DaytonaError as D2
        import daytona.common.errors
        assert D2 is DaytonaError is daytona.common.errors.DaytonaError is ctxd.daytona.DaytonaError
        for cls in (DaytonaAuthenticationError, DaytonaBadRequestError, DaytonaConflictError,
                    DaytonaConnectionError, DaytonaForbiddenError, DaytonaNotFoundError,
                    DaytonaRateLimitError, DaytonaServerError, DaytonaTimeoutError,
                    DaytonaValidationError):
            assert issubclass(cls, DaytonaError), cls
        # what the interpreter raises is caught by the names Daytona code imports
        ci = ctxd.daytona.CodeInterpreter()
        r = ci.run_code("print(6 * 7)")
        assert isinstance(r, ExecutionResult) and r.stdout == "42\\n"
        ctx = ci.create_context()
        ci.delete_context(ctx)
        try:
            ci.delete_context(ctx)
        except DaytonaNotFoundError as e:
            assert e.status_code == 404
        else:
            raise AssertionError("no DaytonaNotFoundError")
        try:
            ci.run_code("while True: pass", timeout=1)
        except DaytonaTimeoutError:
            pass
        ci.close()
        print("ok")
    ''', endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"
