# The Jupyter kernel (client/python/ctxd/kernel) against a real daemon:
# - kernel_spec: jupyter_kernel_test's KernelTests, every test enabled
#   (tests/kernel/test_spec.py; Debian python3-jupyter-kernel-test);
# - kernel_client: jupyter_client's execute_interactive (print, figure,
#   error), interrupts through the KernelManager, input(), restart,
#   --context sharing, the private daemon, input after a caught interrupt,
#   leases, cwd/env (tests/kernel/test_client.py);
# - kernel_notebook: a published-style notebook run with nbclient on the
#   ctxd kernel and on ipykernel, compared cell by cell (test_notebook.py).
foreach(part spec client notebook)
  add_test(NAME kernel_${part}
    COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
            ${CMAKE_CURRENT_SOURCE_DIR}/kernel/test_${part}.py)
  set_tests_properties(kernel_${part} PROPERTIES
    ENVIRONMENT "${PYTEST_ENV};PYTHONPATH=${CMAKE_SOURCE_DIR}/client/python" TIMEOUT 600)
endforeach()
