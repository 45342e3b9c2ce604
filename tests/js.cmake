# The TypeScript client and the MCP server (client/js), with Node's own test
# runner against the real daemon (each test file starts its own on a private
# ipc socket). They run the built package: tools/setup.sh runs `npm ci` and
# `npm run build` in client/js first.
# - js_client: the codec against proto/vectors/, the client (runs, streaming,
#   interrupts, AbortSignal, contexts, files, queries, 100 MB, bad input, a
#   dead daemon), CurveZMQ on tcp://, the Daytona-compatible CodeInterpreter;
# - mcp_server: ctxd-mcp through the MCP SDK's Client over stdio and
#   streamable HTTP; the npm pack tarball installed with npm install -g and
#   README's mcpServers block started from it;
# - js_install: what `cmake --install` lays out for it, used from there.
find_program(NODE node)
if(NODE)
  set(JS_DIR ${CMAKE_SOURCE_DIR}/client/js)
  set(JS_ENV
    "CTXD_BIN=$<TARGET_FILE:ctxd>"
    "CTXD_WORKER_BIN=$<TARGET_FILE:ctxd-worker>"
    "CTXD_CTX_BIN=$<TARGET_FILE:ctx>")
  add_test(NAME js_client
    COMMAND ${NODE} --test --test-concurrency=1
      ${JS_DIR}/test/vectors.test.mjs ${JS_DIR}/test/client.test.mjs
      ${JS_DIR}/test/curve.test.mjs ${JS_DIR}/test/daytona.test.mjs
    WORKING_DIRECTORY ${JS_DIR})
  add_test(NAME mcp_server
    COMMAND ${NODE} --test --test-concurrency=1 ${JS_DIR}/test/policy.test.mjs ${JS_DIR}/test/mcp.test.mjs
      ${JS_DIR}/test/package.test.mjs
    WORKING_DIRECTORY ${JS_DIR})
  add_test(NAME js_install COMMAND sh ${JS_DIR}/test/install.sh ${CMAKE_BINARY_DIR} $<TARGET_FILE:ctxd>)
  set_tests_properties(js_client mcp_server PROPERTIES ENVIRONMENT "${JS_ENV}" TIMEOUT 600)
  set_tests_properties(js_install PROPERTIES TIMEOUT 300)
else()
  message(STATUS "node not found: the TypeScript client and MCP tests are not run (tools/setup.sh installs nodejs)")
endif()
