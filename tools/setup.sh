#!/bin/sh
# One-step set-up on a fresh Debian 12 machine (as root):
#   sh tools/setup.sh demo   install what is missing, build, install, start a
#                            ctxd of its own and run a demo session through ctx
#   sh tools/setup.sh test   install what is missing, build, install, run every test
#   sh tools/setup.sh build  install what is missing, build and install only
#   sh tools/setup.sh bench  also install ipykernel, jupyter_client, numpy and
#                            matplotlib, build, install, and run tools/bench/bench.py
# The build goes to ./build (override with BUILD_DIR), with warnings as
# errors (CTXD_WERROR). Every mode then installs it (`cmake --install`) into
# /usr/local (override with PREFIX): ctxd, ctx, ctxd-mcp, libctxd, the Python
# package (where Debian's python3 finds it) and the Jupyter kernelspec. A
# prefix it cannot write (not root) is left alone, with a message.
set -eu
mode=${1:-demo}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
prefix=${PREFIX:-/usr/local}

PACKAGES="build-essential cmake pkg-config libzmq3-dev libmsgpack-dev python3-dev python3-zmq
python3-msgpack python3-pytest python3-venv clang libclang-rt-14-dev libseccomp-dev
python3-matplotlib python3-pip libedit-dev python3-dill libssl-dev"
# libssl-dev: HMAC-SHA256 of snapshots' writer marks (sup_snapmac.c).
# libedit-dev: ctx repl's line editor (tools/ctx/ctx_edit.c).
# python3-dill: snapshots of a context's state (daemon/worker/wrk_snap.py).
# python3-matplotlib: the figure tests (tests/integration/test_rich.py).
# python3-pandas (test mode): a DataFrame's text/html (test_rich.py), and
# DataFrames in snapshots (test_snapshot.py).
[ "$mode" = test ] && PACKAGES="$PACKAGES python3-pandas"
# python3-pip: the daemon runs `python3 -m pip` for pip.install (test_pkgs.py).
# The Jupyter kernel and its tests (tests/kernel.cmake): ipykernel's kernelbase,
# jupyter_client, jupyter_kernel_test, nbclient (a notebook run side by side
# with ipykernel); systemd: `systemd-analyze verify` on the installed unit
# (tests/install/run.sh).
[ "$mode" = test ] && PACKAGES="$PACKAGES python3-ipykernel python3-jupyter-client
python3-jupyter-kernel-test python3-nbclient systemd"
# ctxd-router (tests/router.cmake): a real etcd, iproute2 for the hosts'
# network namespaces, kubectl (kubernetes-client) to render dist/kubernetes,
# mmdebstrap for the image's root file system (dist/kubernetes/image.sh).
[ "$mode" = test ] && PACKAGES="$PACKAGES etcd-server iproute2 mmdebstrap"
# (a kubectl from elsewhere, e.g. google-cloud-sdk's, conflicts with the package)
[ "$mode" = test ] && ! command -v kubectl >/dev/null && PACKAGES="$PACKAGES kubernetes-client"
# Only for the benchmark (ctxd side by side with ipykernel; valgrind and
# linux-perf: the supervisor's instructions and system calls per request,
# figure 9).
[ "$mode" = bench ] && PACKAGES="$PACKAGES python3-ipykernel python3-jupyter-client
python3-numpy python3-matplotlib valgrind linux-perf etcd-server iproute2"

install_missing() {
    missing=""
    for p in $PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        echo "setup: installing$missing"
        if [ "$(id -u)" -ne 0 ]; then
            echo "setup: run as root to install packages (or install:$missing)" >&2
            exit 1
        fi
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
    fi
}

# Node.js and npm (the TypeScript client and MCP server, client/js): Debian's,
# when missing.
install_node() {
    command -v node >/dev/null && command -v npm >/dev/null && return 0
    saved=$PACKAGES
    PACKAGES="nodejs npm"
    install_missing
    PACKAGES=$saved
}

build_all() {
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTXD_WERROR=ON \
        -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
    cmake --build "$build" -j"$(nproc)"
    # client/js: its dependencies from the committed lockfile (again only
    # when the lockfile changed since), then tsc.
    (cd "$root/client/js" &&
        { [ node_modules/.package-lock.json -nt package-lock.json ] ||
            npm ci --no-audit --no-fund; } &&
        npm run build)
}

# The build into $prefix, so that README's commands (`ctxd`, `ctx`,
# `python3 -c 'import ctxd'`, `jupyter console --kernel ctxd`) work as typed.
install_all() {
    if ! mkdir -p "$prefix" 2>/dev/null || [ ! -w "$prefix" ]; then
        echo "setup: $prefix is not writable: not installed (run as root, or set PREFIX)" >&2
        return 0
    fi
    cmake --install "$build" >"$build/install.log" ||
        { cat "$build/install.log"; echo "setup: cmake --install failed" >&2; exit 1; }
    echo "setup: installed into $prefix"
}

demo() {
    rt=$(mktemp -d /tmp/ctxd-demo.XXXXXX)
    ep="ipc://$rt/ctxd.sock"
    "$build/daemon/ctxd" --listen "$ep" --log "$rt/requests.log" &
    daemon=$!
    trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$rt"' EXIT INT TERM
    ctx="$build/tools/ctx --endpoint $ep"
    i=0
    until $ctx hello >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || { echo "setup: ctxd did not start" >&2; exit 1; }
        sleep 0.05
    done
    set -x
    $ctx run 'import sys; x = 21; print("hello from", sys.version.split()[0])'
    $ctx run 'x * 2'
    $ctx run 'import time
for i in range(3):
    print("tick", i, flush=True); time.sleep(0.3)'
    $ctx create exp-1
    $ctx run -c exp-1 'x' || true   # a NameError: exp-1 does not see default's globals
    $ctx run -c exp-1 'import os; os.system("echo from a subprocess")'
    $ctx run -t 1 'while True: pass' || true
    $ctx run 'x'
    $ctx ls
    $ctx rm exp-1
    set +x
    echo "setup: the daemon's request log (one line per request):"
    tail -n 4 "$rt/requests.log"
    echo "setup: next, README's quick start (ctxd &, then ctx run ...)"
}

install_missing
install_node
build_all
install_all
case "$mode" in
demo) demo ;;
test) cd "$build" && ctest --output-on-failure ;;
build) ;;
bench) shift; /usr/bin/python3 "$root/tools/bench/bench.py" --build-dir "$build" "$@" ;;
*) echo "usage: sh tools/setup.sh demo|test|build|bench" >&2; exit 2 ;;
esac
