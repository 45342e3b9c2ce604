"""jupyter_kernel_test's KernelTests against the ctxd kernel, every test
enabled (Debian python3-jupyter-kernel-test)."""

import jupyter_kernel_test


class CtxdKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = "ctxd-test"
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('oops', file=sys.stderr)"
    code_generate_error = "raise ValueError('boom')"
    code_execute_result = [
        {"code": "1+2+3", "result": "6"},
        {"code": "[n * n for n in range(4)]", "result": "[0, 1, 4, 9]"},
        {"code": "class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\nH()",
         "mime": "text/html", "result": "<b>h</b>"},
    ]
    code_display_data = [
        {"code": "display({'a': 1})", "mime": "text/plain"},
        {"code": "class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\ndisplay(H())",
         "mime": "text/html"},
        {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
         "mime": "image/png"},
    ]
    code_clear_output = "print('x')\nclear_output()"
    code_page_something = "print?"
    code_inspect_sample = "zip"
    completion_samples = [
        {"text": "zi", "matches": {"zip"}},
        {"text": "x = ValueEr", "matches": {"ValueError"}},
        {"text": "import collecti", "matches": {"collections"}},
    ]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n",
                             "await __import__('asyncio').sleep(0)"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  return x*2", "for i in x:",
                               "a = [1,"]
    invalid_code_samples = ["import = 7q", "x = 1\n)"]
    code_history_pattern = "1?2*"
    supported_history_operations = ("tail", "range", "search")
