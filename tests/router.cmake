# ctxd-router (tests/router): 3 ctxd hosts in network namespaces of their
# own over tcp:// with CurveZMQ, a real etcd on loopback, one or two
# routers. About a minute on 2 cores; skipped with the reason printed where
# the machine lacks root, network namespaces or etcd (Debian etcd-server).
add_test(NAME router
  COMMAND /usr/bin/python3 -m pytest -q -rs -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/router)
set_tests_properties(router PROPERTIES
  ENVIRONMENT "${PYTEST_ENV};CTXD_ROUTER_BIN=$<TARGET_FILE:ctxd-router>"
  TIMEOUT 300)

# dist/kubernetes: the manifests render (kubectl kustomize, no cluster) and
# parse; skipped with the reason printed when kubectl is absent.
add_test(NAME kustomize
  COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/dist/kubernetes/check.py ${CMAKE_SOURCE_DIR}/dist/kubernetes)
set_tests_properties(kustomize PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
