#!/bin/sh
# Installs the build into a temporary prefix and checks what a packager gets:
# the daemon finds its worker in libexec, ctx runs code through it, libctxd
# builds a program via pkg-config, the Python package imports, and the
# systemd unit and config are in place.
#   tests/install/run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
prefix=$(mktemp -d /tmp/ctxd-install.XXXXXX)
daemon=""
trap '[ -z "$daemon" ] || kill $daemon 2>/dev/null || true; rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/ctxd bin/ctx libexec/ctxd/ctxd-worker include/ctxd.h lib/systemd/system/ctxd.service \
    etc/ctxd/ctxd.conf share/doc/ctxd/PROTOCOL.md lib/python3/dist-packages/ctxd/__init__.py \
    lib/python3/dist-packages/ctxd/kernel/kernel.py share/jupyter/kernels/ctxd/kernel.json; do
    [ -e "$prefix/$f" ] || { echo "missing: $f"; exit 1; }
done
pc=$(find "$prefix" -name ctxd.pc | head -n 1)
[ -n "$pc" ] || { echo "missing: ctxd.pc"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
# (ExecStart names the configure-time prefix, CMAKE_INSTALL_PREFIX)
grep -q "^ExecStart=.*/bin/ctxd --config" "$prefix/lib/systemd/system/ctxd.service"
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
CTXD_ENDPOINT="$ep" LD_LIBRARY_PATH="$libdir" "$prefix/hello" >/dev/null
PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c "
import ctxd
with ctxd.Client('$ep') as c:
    assert c.execute('1 + 1').result == '2'
"
kill $daemon
wait $daemon || true
echo "install: 1 passed, 0 failed"
