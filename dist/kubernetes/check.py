#!/usr/bin/python3
"""ctest kustomize: renders dist/kubernetes with `kubectl kustomize` (no
cluster needed) and checks what comes out: every document parses, has
apiVersion, kind and a name in namespace ctxd, and the parts the design
relies on are there (a headless Service for the hosts, a StatefulSet with
podManagementPolicy Parallel and a PVC per pod, the router Deployment, the
NetworkPolicies, the namespace's Pod Security labels). Exit 77 (skipped)
with the reason when kubectl or PyYAML is missing."""

import shutil
import subprocess
import sys

here = sys.argv[1] if len(sys.argv) > 1 else "dist/kubernetes"
kubectl = shutil.which("kubectl")
if not kubectl:
    print("kustomize check skipped: no kubectl (Debian kubernetes-client)")
    sys.exit(77)
try:
    import yaml
except ImportError:
    print("kustomize check skipped: no PyYAML (python3-yaml)")
    sys.exit(77)

out = subprocess.run([kubectl, "kustomize", here], capture_output=True, text=True)
if out.returncode != 0:
    print(out.stderr)
    sys.exit(1)
docs = [d for d in yaml.safe_load_all(out.stdout) if d]
by = {}
for d in docs:
    assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d
    if d["kind"] != "Namespace":
        assert d["metadata"].get("namespace") == "ctxd", d["metadata"]
    by[(d["kind"], d["metadata"]["name"])] = d

svc = by[("Service", "ctxd")]
assert svc["spec"]["clusterIP"] == "None"
sts = by[("StatefulSet", "ctxd")]["spec"]
assert sts["serviceName"] == "ctxd" and sts["podManagementPolicy"] == "Parallel"
assert sts["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
ctr = sts["template"]["spec"]["containers"][0]
assert any(a.startswith("--state-dir=") for a in ctr["args"])
assert any(m["name"] == "state" and m["mountPath"] == "/var/lib/ctxd" for m in ctr["volumeMounts"])
assert ctr["image"].startswith("localhost/ctxd:")
router = by[("Deployment", "ctxd-router")]["spec"]["template"]["spec"]
args = router["containers"][0]["args"]
hosts = [a for a in args if a.startswith("--host=")]
assert len(hosts) == sts["replicas"], (hosts, sts["replicas"])
for k, h in enumerate(hosts):
    assert h == f"--host=tcp://ctxd-{k}.ctxd.ctxd.svc.cluster.local:7100", h
assert router["securityContext"]["runAsNonRoot"] is True
for name in ("ctxd-hosts", "ctxd-etcd", "ctxd-router"):
    assert ("NetworkPolicy", name) in by, name
ns = by[("Namespace", "ctxd")]["metadata"]["labels"]
assert ns["pod-security.kubernetes.io/enforce"] == "privileged"
print(f"kubectl kustomize {here}: {len(docs)} objects: " +
      ", ".join(f"{k}/{n}" for k, n in sorted(by)))
