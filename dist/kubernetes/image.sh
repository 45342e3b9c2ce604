#!/bin/sh
# Builds the OCI image the manifests use (localhost/ctxd:VERSION) with no
# registry: a Debian 12 root file system made by mmdebstrap from the
# configured apt sources, ctxd installed into it from a build directory, and
# `docker import` of that tarball. Run as root (or with mmdebstrap's unshare
# mode) after `cmake --build build`:
#   sh dist/kubernetes/image.sh [BUILD_DIR] [TAG]
# Then load it into the cluster's nodes (e.g. `docker save TAG | ctr -n k8s.io
# images import -`, or `kind load docker-image TAG`) or push it to a
# registry the cluster reaches and set `images:` in kustomization.yaml.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
tag=${2:-localhost/ctxd:0.1.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ctxd, ctxd-worker, ctxd-router, ctx and the Python client, as installed.
DESTDIR="$work/stage" cmake --install "$build" --prefix /usr/local >/dev/null

# What the binaries link and run: libzmq, msgpack-c, libedit, libseccomp,
# libcrypto (libssl3: snapshots' HMAC),
# CPython 3.11 (embedded by ctxd-worker); pip for pip.install; etcd-server
# for the etcd pod and the routers' etcd gateway (one image for all pods).
mmdebstrap --variant=apt --mode="${MMDEBSTRAP_MODE:-auto}" \
    --include=libzmq5,libmsgpackc2,libedit2,libseccomp2,libssl3,libpython3.11,python3,python3-pip,python3-zmq,python3-msgpack,etcd-server,ca-certificates \
    --customize-hook="copy-in $work/stage/usr/local /usr" \
    --customize-hook='chroot "$1" ldconfig' \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    bookworm "$work/rootfs.tar"

docker import \
    --change 'ENTRYPOINT ["/usr/local/bin/ctxd"]' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'STOPSIGNAL SIGTERM' \
    "$work/rootfs.tar" "$tag"
echo "built $tag"
