"""mellea's own checks of UnsafeEnvironment that ctxd.mellea missed:
working_directory on a result is the directory asked for, None without one
(mellea's test_working_directory_none_by_default), while a python_tool
without one still reports the private directory it worked in."""

import warnings

from ctxd.mellea import LOCAL_POLICY, UnsafeEnvironment, python_tool


def test_working_directory_none_by_default(endpoint, tmp_path):
    with UnsafeEnvironment(endpoint=endpoint) as env:
        r = env.execute("print('ok')")
        assert r.success and r.working_directory is None, r
    with UnsafeEnvironment(policy=LOCAL_POLICY, endpoint=endpoint) as env:
        r = env.execute("raise ValueError('boom')")
        assert not r.success and r.working_directory is None, r
    with UnsafeEnvironment(working_directory=str(tmp_path), endpoint=endpoint) as env:
        r = env.execute("import os; print(os.getcwd())")
        assert r.working_directory == str(tmp_path) and r.stdout == str(tmp_path)


def test_a_tool_reports_its_own_directory(endpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = python_tool(tier="local_unsafe", endpoint=endpoint)
    try:
        r = t(code="import os; print(os.getcwd())")
        assert r.success and r.working_directory == r.stdout and r.stdout
    finally:
        t.close()
