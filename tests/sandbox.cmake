# The escape suite (tests/sandbox/test_escape.py): escape attempts through the
# daemon against each confining tier, printing a table (attempt, outcome,
# blocked by what, context alive after). Needs root, the pids cgroup
# controller and Landlock (ABI 6 for signal scoping), as on the CI machine.
# The table also goes to sandbox_escape_table.txt in the build directory.
add_test(NAME sandbox_escape
  COMMAND /usr/bin/python3 -m pytest -q -s -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/sandbox)
set_tests_properties(sandbox_escape PROPERTIES
  ENVIRONMENT "${PYTEST_ENV};CTXD_ESCAPE_TABLE=${CMAKE_CURRENT_BINARY_DIR}/sandbox_escape_table.txt"
  TIMEOUT 300)
