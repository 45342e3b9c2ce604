#!/bin/sh
# What `cmake --install` lays out for client/js, used from the installed tree:
# the package imports and runs code, bin/ctxd-mcp answers, the tarball is there.
#   client/js/test/install.sh BUILD_DIR CTXD_BIN
set -eu
build=$1
ctxd=$2
[ -f "$(dirname "$0")/../dist/index.js" ] || { echo "client/js is not built (npm ci && npm run build)"; exit 1; }
prefix=$(mktemp -d /tmp/ctxd-js-install.XXXXXX)
daemon=""
trap '[ -z "$daemon" ] || kill $daemon 2>/dev/null || true; rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/ctxd-mcp lib/node_modules/ctxd/dist/index.js lib/node_modules/ctxd/dist/index.d.ts \
    lib/node_modules/ctxd/node_modules/zeromq/package.json; do
    [ -e "$prefix/$f" ] || { echo "missing: $f"; exit 1; }
done
[ ! -e "$prefix/lib/node_modules/ctxd/node_modules/typescript" ] || { echo "dev dependencies installed"; exit 1; }
ls "$prefix"/share/ctxd/js/ctxd-*.tgz >/dev/null
"$prefix/bin/ctxd-mcp" --help | grep -q run_python
ep="ipc://$prefix/s.sock"
"$ctxd" --listen "$ep" --state-dir "$prefix/state" 2>"$prefix/ctxd.log" &
daemon=$!
cd "$prefix/lib/node_modules/ctxd"
node --input-type=module -e "
import { Client } from './dist/index.js';
for (let i = 0; ; i++) {
  try {
    const c = await Client.connect('$ep', { requestTimeout: 1 });
    const r = await c.execute('6 * 7');
    if (r.result !== '42') throw new Error('got ' + r.result);
    c.close();
    break;
  } catch (e) {
    if (i > 100) throw e;
    await new Promise((r) => setTimeout(r, 100));
  }
}"
kill $daemon
wait $daemon || true
echo "js_install: 1 passed, 0 failed"
