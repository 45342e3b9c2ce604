"""ctxd.e2b.install_as_e2b(): E2B users keep their imports. E2B's own
snippets run unchanged, in a Python process of their own (the alias changes
sys.modules), against a real daemon found through $CTXD_ENDPOINT."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = "import ctxd.e2b\nctxd.e2b.install_as_e2b()\n"

# e2b-dev/code-interpreter README.md, "3. Execute code with code interpreter
# inside Sandbox", Python: as published.
README_CODE_INTERPRETER = '''\
from e2b_code_interpreter import Sandbox

with Sandbox.create() as sandbox:
    sandbox.run_code("x = 1")
    execution = sandbox.run_code("x+=1; x")
    print(execution.text)  # outputs 2
'''

# E2B's quick start (docs): create, run code, list files, kill.
QUICKSTART = '''\
from e2b_code_interpreter import Sandbox

sbx = Sandbox.create() # By default the sandbox is alive for 5 minutes
execution = sbx.run_code("print('hello world')") # Execute Python inside the sandbox
print(execution.logs)

files = sbx.files.list("/")
print(files)
sbx.kill()
'''

def run_python(code, endpoint, prelude=PRELUDE):
    env = dict(os.environ, CTXD_ENDPOINT=endpoint,
               PYTHONPATH=os.pathsep.join([str(ROOT / "client" / "python"),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", prelude + code], env=env, capture_output=True,
                          text=True, timeout=120)


def test_code_interpreter_readme_runs_unchanged(endpoint):
    p = run_python(README_CODE_INTERPRETER, endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "2\n"


def test_quickstart_runs_unchanged(endpoint):
    p = run_python(QUICKSTART, endpoint)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "Logs(stdout: ['hello world\\n'], stderr: [])"
    assert "EntryInfo(name=" in lines[1] and "name='usr'" in lines[1]


def test_without_the_alias_e2b_is_not_importable(endpoint):
    p = run_python("import e2b_code_interpreter", endpoint, prelude="import ctxd.e2b\n")
    assert p.returncode != 0 and "No module named 'e2b_code_interpreter'" in p.stderr


def test_the_names_e2b_users_import(endpoint):
    code = textwrap.dedent('''\
        import e2b, e2b_code_interpreter
        import e2b.exceptions
        import e2b_code_interpreter.models as models
        from e2b import CommandExitException, CommandResult, AsyncSandbox
        from e2b.exceptions import TimeoutException, NotFoundException, SandboxException
        from e2b.sandbox.commands.command_handle import CommandExitException as C2
        from e2b_code_interpreter import Sandbox, Execution, Result, ExecutionError
        from e2b_code_interpreter.charts import ChartType, PieChart
        from e2b_code_interpreter.models import Logs, OutputMessage
        import ctxd.e2b as surface
        assert Sandbox is surface.Sandbox and e2b.Sandbox is surface.Sandbox
        assert C2 is CommandExitException is surface.CommandExitException
        assert e2b.exceptions.TimeoutException is TimeoutException is surface.TimeoutException
        assert models.Execution is Execution
        assert issubclass(CommandExitException, SandboxException)
        assert issubclass(NotFoundException, SandboxException)
        from e2b_code_interpreter import *
        assert AsyncSandbox is surface.AsyncSandbox
        print("ok")
    ''')
    p = run_python(code, endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "ok\n"


# e2b-dev/E2B README.md, "3. Execute commands inside Sandbox", Python.
README_E2B = '''\
from e2b import Sandbox

with Sandbox.create() as sandbox:
    result = sandbox.commands.run('echo "Hello from E2B!"')
    print(result.stdout)  # Hello from E2B!
'''


def test_e2b_readme_commands_run_unchanged(endpoint):
    p = run_python(README_E2B, endpoint)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "Hello from E2B!\n\n"
