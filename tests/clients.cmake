# Client tests (issue 3), included from tests/CMakeLists.txt after PYTEST_ENV
# is set:
# - client_event_loop: libctxd's event-loop API in C (two concurrent runs on
#   two contexts driven by one poll loop, interrupts from callbacks, ...); it
#   starts its own daemon on a private socket;
# - client_ctx: the ctx command line and its REPL (driven in a pty), pytest;
# - python_client: the Python package in client/python (native, asyncio,
#   Daytona- and mellea-compatible APIs, the codec against proto/vectors/, an
#   offline pip install), pytest, importing the package from the source tree.
#   The mellea tests run on every tier, the sandbox (docker, docker_unsafe)
#   included.
add_executable(test_event_loop ${CMAKE_CURRENT_LIST_DIR}/client/test_event_loop.c)
target_link_libraries(test_event_loop PRIVATE ctxd_client)
add_test(NAME client_event_loop COMMAND test_event_loop $<TARGET_FILE:ctxd>)
set_tests_properties(client_event_loop PROPERTIES TIMEOUT 300)

# libctxd's input, clear_output, file and package calls (own daemon with a
# wheelhouse it makes).
add_executable(test_client_io ${CMAKE_CURRENT_LIST_DIR}/client/test_client_io.c)
target_link_libraries(test_client_io PRIVATE ctxd_client)
add_test(NAME client_io COMMAND test_client_io $<TARGET_FILE:ctxd>)
set_tests_properties(client_io PROPERTIES TIMEOUT 300)

add_test(NAME client_ctx
  COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/client)
set_tests_properties(client_ctx PROPERTIES ENVIRONMENT "${PYTEST_ENV}" TIMEOUT 600)

add_test(NAME python_client
  COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR}/python)
set_tests_properties(python_client PROPERTIES
  ENVIRONMENT "${PYTEST_ENV};PYTHONPATH=${CMAKE_SOURCE_DIR}/client/python" TIMEOUT 600)
