#!/bin/sh
# Installs the build into a temporary prefix and checks what a packager gets:
# the daemon finds its worker in libexec, ctx runs code through it, libctxd
# builds a program via pkg-config, the Python package imports (laid out
# where Debian's python3 looks under /usr/local), the systemd
# unit and config are in place and name the install prefix, the unit passes
# `systemd-analyze verify`, and the installed daemon runs code as PID 1 of a
# new pid namespace.
#   tests/install/run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
prefix=$(mktemp -d /tmp/ctxd-install.XXXXXX)
daemon=""
trap '[ -z "$daemon" ] || kill $daemon 2>/dev/null || true; rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
# The Python package where Debian's python3 looks under /usr/local (the
# default prefix), as it is laid out under any prefix but /usr.
pydir=lib/python$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
/usr/bin/python3 -c "import sys; sys.exit('/usr/local/$pydir' not in sys.path)" ||
    { echo "/usr/bin/python3 does not look in /usr/local/$pydir"; exit 1; }
for f in bin/ctxd bin/ctx libexec/ctxd/ctxd-worker include/ctxd.h lib/systemd/system/ctxd.service \
    etc/ctxd/ctxd.conf share/doc/ctxd/PROTOCOL.md $pydir/ctxd/__init__.py \
    $pydir/ctxd/kernel/kernel.py share/jupyter/kernels/ctxd/kernel.json; do
    [ -e "$prefix/$f" ] || { echo "missing: $f"; exit 1; }
done
pc=$(find "$prefix" -name ctxd.pc | head -n 1)
[ -n "$pc" ] || { echo "missing: ctxd.pc"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
unit="$prefix/lib/systemd/system/ctxd.service"
# ExecStart and the config path follow the install prefix
grep -q "^ExecStart=$prefix/bin/ctxd --config $prefix/etc/ctxd/ctxd.conf " "$unit" ||
    { echo "ExecStart does not follow the prefix:"; grep ExecStart "$unit"; exit 1; }
grep -q "^Type=notify" "$unit" && grep -q "^Delegate=yes" "$unit"
grep -q "installed as $prefix/etc/ctxd/ctxd.conf" "$prefix/etc/ctxd/ctxd.conf"
[ -e "$prefix/lib/sysusers.d/ctxd.conf" ] || { echo "missing: lib/sysusers.d/ctxd.conf"; exit 1; }
# systemd-analyze verify on the installed unit (where systemd is installed)
if command -v systemd-analyze >/dev/null 2>&1; then
    out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "$unit" 2>&1) ||
        { echo "systemd-analyze verify failed:"; echo "$out"; exit 1; }
    # it also warns (status 0) on what it does not understand
    if echo "$out" | grep -i "ctxd.service" | grep -v "Failed to put bus name"; then
        echo "systemd-analyze verify warns about the unit"; exit 1
    fi
else
    echo "install: systemd-analyze not installed, unit not verified"
fi
# the installed config file parses
"$prefix/bin/ctxd" --config "$prefix/etc/ctxd/ctxd.conf" --help >/dev/null
# a program built against the installed library
PKG_CONFIG_PATH="$libdir/pkgconfig" cc -o "$prefix/hello" "$src/client/examples/run_hello.c" \
    $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs ctxd)
ep="ipc://$prefix/s.sock"
"$prefix/bin/ctxd" --listen "$ep" 2>"$prefix/ctxd.log" &
daemon=$!
i=0
until "$prefix/bin/ctx" --endpoint "$ep" hello >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 100 ] || { cat "$prefix/ctxd.log"; exit 1; }; sleep 0.1
done
out=$("$prefix/bin/ctx" --endpoint "$ep" run 'print(6 * 7)')
[ "$out" = 42 ] || { echo "ctx run printed '$out'"; exit 1; }
# the .pc file gives an rpath: no LD_LIBRARY_PATH needed
CTXD_ENDPOINT="$ep" "$prefix/hello" >/dev/null
PYTHONPATH="$prefix/$pydir" /usr/bin/python3 -c "
import ctxd
with ctxd.Client('$ep') as c:
    assert c.execute('1 + 1').result == '2'
"
kill $daemon
wait $daemon || true
daemon=""
# The installed daemon as PID 1 of a new pid namespace (a container's init):
# its workers must live (root and unshare(1) only).
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null 2>&1; then
    ep1="ipc://$prefix/pid1.sock"
    unshare --pid --fork --mount-proc --kill-child "$prefix/bin/ctxd" --listen "$ep1" \
        --state-dir "$prefix/state1" 2>"$prefix/pid1.log" &
    daemon=$!
    i=0
    until "$prefix/bin/ctx" --endpoint "$ep1" hello >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 100 ] || { cat "$prefix/pid1.log"; exit 1; }; sleep 0.1
    done
    "$prefix/bin/ctx" --endpoint "$ep1" --json hello | grep -q '"pid":1,' ||
        { echo "the daemon is not PID 1 in its namespace"; exit 1; }
    out=$("$prefix/bin/ctx" --endpoint "$ep1" run 'import os; print(os.getppid(), 6 * 7)')
    [ "$out" = "1 42" ] || { echo "as PID 1, ctx run printed '$out'"; cat "$prefix/pid1.log"; exit 1; }
    # unshare does not pass SIGTERM on: the daemon inside (PID 1 there) gets it
    kill "$(cat /proc/$daemon/task/$daemon/children)"
    wait $daemon || { echo "as PID 1 the daemon did not exit cleanly on SIGTERM"; exit 1; }
    daemon=""
fi
echo "install: 1 passed, 0 failed"
