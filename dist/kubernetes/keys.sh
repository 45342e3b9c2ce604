#!/bin/sh
# Makes the two Secrets the manifests use, with fresh CurveZMQ keys, in
# namespace ctxd (kubectl's current cluster):
#   ctxd-host-keys    server.key, server.pub: the hosts' one key pair
#   ctxd-router-keys  router.key, router.pub (the routers' pair, which every
#                     host lists in its authorized_keys), authorized_keys
#                     (the client keys the routers let in: CLIENT_KEYS, a
#                     file of public keys, one a line) and tenants
#                     (TENANTS: "CLIENTKEY TENANT" lines; may be empty)
# The keys never touch the working tree: a temporary directory, removed.
#   CLIENT_KEYS=clients.pub [TENANTS=tenants] sh dist/kubernetes/keys.sh
# The clients then use CTXD_SERVER_KEY=<router.pub printed below>.
set -eu
: "${CLIENT_KEYS:?a file of client public keys, one a line (ctx keygen makes a pair)}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 - "$tmp" <<'PY'
import os, sys, zmq
d = sys.argv[1]
for stem in ("server", "router"):
    pub, sec = zmq.curve_keypair()
    with open(os.path.join(d, f"{stem}.key"), "w") as f:
        f.write(sec.decode() + "\n")
    with open(os.path.join(d, f"{stem}.pub"), "w") as f:
        f.write(pub.decode() + "\n")
PY
cp "$CLIENT_KEYS" "$tmp/authorized_keys"
if [ -n "${TENANTS:-}" ]; then cp "$TENANTS" "$tmp/tenants"; else : > "$tmp/tenants"; fi
kubectl get namespace ctxd >/dev/null 2>&1 || kubectl create namespace ctxd
kubectl -n ctxd create secret generic ctxd-host-keys \
    --from-file=server.key="$tmp/server.key" --from-file=server.pub="$tmp/server.pub"
kubectl -n ctxd create secret generic ctxd-router-keys \
    --from-file=router.key="$tmp/router.key" --from-file=router.pub="$tmp/router.pub" \
    --from-file=authorized_keys="$tmp/authorized_keys" --from-file=tenants="$tmp/tenants"
echo "router public key (the clients' CTXD_SERVER_KEY): $(cat "$tmp/router.pub")"
