# ctxd-worker: embeds CPython (Debian's python3-embed); one process per
# context, started by the supervisor with the channel on fd 3.
find_package(Threads REQUIRED)
pkg_get_variable(CTXD_PYEMBED_PREFIX python3-embed prefix)
add_executable(ctxd-worker
  ${CMAKE_CURRENT_LIST_DIR}/wrk_main.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_chan.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_display.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_input.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_log.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_mpmain.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_output.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_py.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_query.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_run.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_site.c
  ${CMAKE_CURRENT_LIST_DIR}/wrk_zygote.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_apply.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_allow.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_cgroup.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_ns.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_path.c
  ${CMAKE_CURRENT_LIST_DIR}/../sandbox/sbx_py.c)
# Confinement of local- and sandbox-tier workers (sbx_*.c).
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
target_link_libraries(ctxd-worker PRIVATE ctxd_proto PkgConfig::PYEMBED Threads::Threads
  PkgConfig::SECCOMP)
target_include_directories(ctxd-worker PRIVATE ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/../sandbox)
# The interpreter's own executable and prefix: sys.executable and the
# stdlib must not depend on PATH or on a PYTHONHOME meant for another python.
target_compile_definitions(ctxd-worker PRIVATE
  WRK_PYTHON_EXE="${CTXD_PYEMBED_PREFIX}/bin/python${PYEMBED_VERSION}"
  WRK_PYTHON_HOME="${CTXD_PYEMBED_PREFIX}")
# pip (sup_pkgs.c) must install for the workers' CPython.
target_compile_definitions(ctxd PRIVATE
  SUP_PIP_PYTHON="${CTXD_PYEMBED_PREFIX}/bin/python${PYEMBED_VERSION}")
