#!/bin/sh
# `pip install ./client/python` into a venv of Debian's python3 that sees the
# Debian packages (`--system-site-packages`; no package index here): pip takes
# the dependencies from python3-zmq and python3-msgpack (`pip check`), and the
# venv's own copy of the package runs code on a real daemon.
#   tests/install/venv.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d /tmp/ctxd-venv.XXXXXX)
daemon=""
trap '[ -z "$daemon" ] || kill $daemon 2>/dev/null || true; rm -rf "$tmp"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH
(cd "$tmp" && "$tmp/venv/bin/pip" install -q "$src/client/python") ||
    { echo "pip install ./client/python failed"; exit 1; }
# (pip check looks at every package the venv sees: only ctxd's lines count)
if "$tmp/venv/bin/pip" check 2>&1 | grep -i "^ctxd "; then
    echo "pip check: a dependency of ctxd is missing"; exit 1
fi
"$tmp/venv/bin/pip" show ctxd | grep -qx "Requires: msgpack, pyzmq" ||
    { "$tmp/venv/bin/pip" show ctxd; echo "ctxd's dependencies are not pyzmq and msgpack"; exit 1; }
ep="ipc://$tmp/s.sock"
"$build/daemon/ctxd" --listen "$ep" --state-dir "$tmp/state" 2>"$tmp/ctxd.log" &
daemon=$!
(cd "$tmp" && "$tmp/venv/bin/python" - "$tmp/venv" "$ep") <<'PY' || { cat "$tmp/ctxd.log"; exit 1; }
import sys, time
import ctxd
venv, ep = sys.argv[1:]
assert ctxd.__file__.startswith(venv + "/"), f"ctxd imported from {ctxd.__file__}"
for _ in range(100):
    try:
        with ctxd.Client(ep) as c:
            c.hello()
        break
    except Exception:
        time.sleep(0.1)
with ctxd.Client(ep) as c:
    r = c.execute("print(6 * 7)")
    assert r.status == "ok" and r.stdout == "42\n", (r.status, r.stdout)
print("venv: ctxd", ctxd.__version__, "from", ctxd.__file__)
PY
echo "install_venv: 1 passed, 0 failed"
