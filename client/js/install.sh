#!/bin/sh
# Installs the built TypeScript package (run by `cmake --install`, or by hand):
#   client/js/install.sh PREFIX
# lays out
#   PREFIX/lib/node_modules/ctxd/       the package (dist/, package.json) with its
#                                       runtime dependencies (node_modules, pruned
#                                       of the dev ones; no network needed)
#   PREFIX/bin/ctxd-mcp                 the MCP server (a link into it)
#   PREFIX/share/ctxd/js/ctxd-VERSION.tgz  the `npm pack` tarball, for
#                                       `npm install` into a project
# It needs `npm ci && npm run build` done in client/js (tools/setup.sh does both).
set -eu
prefix=$1
src=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$src/dist/index.js" ] || [ ! -d "$src/node_modules" ]; then
    echo "client/js: not built (run: cd client/js && npm ci && npm run build); the TypeScript package is not installed" >&2
    exit 0
fi
pkg="$prefix/lib/node_modules/ctxd"
rm -rf "$pkg"
mkdir -p "$pkg" "$prefix/bin" "$prefix/share/ctxd/js"
cp -R "$src/package.json" "$src/package-lock.json" "$src/README.md" "$src/dist" "$src/node_modules" "$pkg/"
(cd "$pkg" && npm prune --omit=dev --no-audit --no-fund --offline >/dev/null 2>&1 ||
    npm prune --omit=dev --no-audit --no-fund >/dev/null)
chmod +x "$pkg/dist/mcp-main.js"
ln -sf ../lib/node_modules/ctxd/dist/mcp-main.js "$prefix/bin/ctxd-mcp"
(cd "$src" && npm pack --silent --pack-destination "$prefix/share/ctxd/js" >/dev/null)
echo "client/js: installed $pkg, $prefix/bin/ctxd-mcp and $(ls "$prefix/share/ctxd/js"/ctxd-*.tgz)"
