"""A cluster on one machine for the ctxd-router tests and bench: hosts are
network namespaces with their own addresses (veth pairs on a bridge inside a
namespace of the cluster's own, one more veth to the test's namespace), a
real ctxd in each on tcp:// with CurveZMQ, a real etcd on loopback, and
ctxd-router processes in the test's namespace. Nothing leaves the machine.

Needs root, `ip netns` and etcd; `why_not()` says what is missing."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CTXD_BUILD", os.path.join(ROOT, "build"))
CTXD = os.environ.get("CTXD_BIN", os.path.join(BUILD, "daemon", "ctxd"))
ROUTER = os.environ.get("CTXD_ROUTER_BIN", os.path.join(os.path.dirname(CTXD), "ctxd-router"))
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
TERMINAL = ("done", "ok", "err")
ZCTX = zmq.Context.instance()


def why_not():
    """None when the machine can run the cluster, else the reason."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip"):
        return "needs iproute2 (ip netns)"
    if not os.path.exists(ETCD):
        return "needs etcd (Debian etcd-server)"
    name = f"rtprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return "cannot create network namespaces here"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_keys(d, stem, secret_name):
    """A CurveZMQ key pair as ctxd keeps its own: STEM.key (secret), STEM.pub."""
    public, secret = zmq.curve_keypair()
    os.makedirs(d, mode=0o700, exist_ok=True)
    with open(os.path.join(d, f"{stem}.{secret_name}"), "w") as f:
        f.write(secret.decode() + "\n")
    os.chmod(os.path.join(d, f"{stem}.{secret_name}"), 0o600)
    with open(os.path.join(d, f"{stem}.pub"), "w") as f:
        f.write(public.decode() + "\n")
    return public.decode(), secret.decode()


class Conn:
    """A raw DEALER client (PROTOCOL.md), to see every message."""

    def __init__(self, endpoint, server_pub=None, secret=None, rcvhwm=None):
        self.s = ZCTX.socket(zmq.DEALER)
        self.s.linger = 0
        if rcvhwm:
            self.s.rcvhwm = rcvhwm
        if server_pub:
            self.s.curve_serverkey = server_pub.encode()
            self.s.curve_secretkey = secret.encode()
            self.s.curve_publickey = zmq.curve_public(secret.encode())
        self.s.connect(endpoint)
        self.n = 0
        self.msgs = {}

    def close(self):
        self.s.close(0)

    def send(self, t, **fields):
        self.n += 1
        rid = self.n
        self.s.send(msgpack.packb({"v": 1, "t": t, "id": rid, **fields}, use_bin_type=True))
        self.msgs[rid] = []
        return rid

    def collect(self, ids, timeout=60.0):
        """Messages per id until each has its terminal reply."""
        want = set(ids)
        deadline = time.monotonic() + timeout
        while any(not self.msgs[i] or self.msgs[i][-1]["t"] not in TERMINAL for i in want):
            left = deadline - time.monotonic()
            assert left > 0, f"no terminal reply within {timeout} s: " + repr(
                {i: self.msgs[i][-3:] for i in want if not self.msgs[i] or
                 self.msgs[i][-1]["t"] not in TERMINAL})
            if not self.s.poll(int(left * 1000)):
                continue
            m = msgpack.unpackb(self.s.recv(), raw=False)
            re = m.get("re")
            assert re in self.msgs, f"message for no request: {m}"
            assert not self.msgs[re] or self.msgs[re][-1]["t"] not in TERMINAL, \
                f"a second terminal reply or a late event: {m}"
            self.msgs[re].append(m)
        return {i: self.msgs[i] for i in ids}

    def req(self, t, timeout=60.0, **fields):
        rid = self.send(t, **fields)
        return self.collect([rid], timeout)[rid]

    def quiet(self, seconds=0.3):
        """Nothing more arrives (no second terminal reply)."""
        if self.s.poll(int(seconds * 1000)):
            raise AssertionError(f"unexpected message: {msgpack.unpackb(self.s.recv(), raw=False)}")


def cgroup_mounts():
    """Shell commands mounting the cgroup file systems as this namespace has
    them under /sys/fs/cgroup (v1 controllers, v2, or both)."""
    cmds = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            point = left.split()[4]
            fstype, _, opts = right.split()[:3]
            if not point.startswith("/sys/fs/cgroup") or fstype not in ("tmpfs", "cgroup", "cgroup2"):
                continue
            keep = ",".join(o for o in opts.split(",") if o not in ("rw", "ro") and "=" not in o or
                            o.startswith("name=")) or "none"
            if fstype == "tmpfs":
                keep = "mode=755"
            cmds.append(f"mkdir -p {point} && mount -t {fstype} -o {keep} {fstype} {point} && ")
    return "".join(cmds)


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


class Cluster:
    def __init__(self, nhosts=3, liveness=0.5, liveness_max=2.0):
        self.tag = f"rt{os.getpid() % 100000}"
        self.tmp = tempfile.mkdtemp(prefix="ctxd-router-")
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self.nhosts = nhosts
        self.liveness, self.liveness_max = liveness, liveness_max
        self.procs = []
        self.hosts = []
        self.routers = {}
        self.etcd = None
        # keys: one server key pair for every host (as a Kubernetes Secret
        # would give), the router's, and the test clients'
        self.keydir = os.path.join(self.tmp, "keys")
        self.host_pub, self.host_sec = write_keys(self.keydir, "server", "key")
        self.client_pub, self.client_sec = zmq.curve_keypair()
        self.client_pub, self.client_sec = self.client_pub.decode(), self.client_sec.decode()
        self.tenant_pub, self.tenant_sec = (k.decode() for k in zmq.curve_keypair())
        self.beta_pub, self.beta_sec = (k.decode() for k in zmq.curve_keypair())
        # keys no tenants line names: each in a namespace of its own ("* +")
        self.anon = [tuple(k.decode() for k in zmq.curve_keypair()) for _ in range(2)]
        self.router_dir = os.path.join(self.tmp, "router")
        self.router_pub, self.router_sec = write_keys(self.router_dir, "router", "key")
        with open(os.path.join(self.router_dir, "authorized_keys"), "w") as f:
            f.write(f"{self.client_pub}\n{self.tenant_pub}\n{self.beta_pub}\n")
            f.write("".join(f"{pub}\n" for pub, _ in self.anon))
        # The clients' bounds: the test's plaintext and keyed clients may use
        # every tier (the operator's choice: their runs read the host's
        # environment); tenant acme gets sandbox (the default), a cwd root
        # and caps; tenant beta only the defaults.
        self.acme_root = os.path.join(self.tmp, "acme-root")
        os.makedirs(os.path.join(self.acme_root, "work"))
        os.chmod(self.acme_root, 0o755)
        os.chmod(os.path.join(self.acme_root, "work"), 0o777)
        os.chmod(self.tmp, 0o755)
        self.tenants = os.path.join(self.tmp, "tenants")
        with open(self.tenants, "w") as f:
            f.write(f"- - tiers=unsafe,local,sandbox,static\n"
                    f"{self.client_pub} - tiers=unsafe,local,sandbox,static\n"
                    f"{self.tenant_pub} acme cwd={self.acme_root} memory_bytes=268435456"
                    f" timeout=30 network_access=false\n"
                    f"{self.beta_pub} beta\n"
                    f"* +\n")

    # ---- network ------------------------------------------------------
    def ns(self, i):
        return f"{self.tag}h{i}"

    def host_ip(self, i):
        return f"{self.subnet}.{11 + i}"

    def host_endpoint(self, i):
        return f"tcp://{self.host_ip(i)}:7100"

    def net_up(self):
        br = f"{self.tag}br"
        sh("ip", "netns", "add", br)
        sh("ip", "netns", "exec", br, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", br, "ip", "link", "set", "br0", "up")
        sh("ip", "netns", "exec", br, "ip", "link", "set", "lo", "up")
        # the test's own namespace (router, etcd, clients) on the bridge
        sh("ip", "link", "add", f"{self.tag}v", "type", "veth", "peer", "name", "up0",
           "netns", br)
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", f"{self.tag}v")
        sh("ip", "link", "set", f"{self.tag}v", "up")
        sh("ip", "netns", "exec", br, "ip", "link", "set", "up0", "master", "br0", "up")
        for i in range(self.nhosts):
            n = self.ns(i)
            sh("ip", "netns", "add", n)
            sh("ip", "netns", "exec", br, "ip", "link", "add", f"p{i}", "type", "veth", "peer",
               "name", "eth0", "netns", n)
            sh("ip", "netns", "exec", br, "ip", "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "netns", "exec", n, "ip", "addr", "add", f"{self.host_ip(i)}/24", "dev", "eth0")
            sh("ip", "netns", "exec", n, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", n, "ip", "link", "set", "lo", "up")

    def partition(self, i, cut=True):
        """Cuts (or heals) host i's cable: its link to the bridge down."""
        sh("ip", "netns", "exec", f"{self.tag}br", "ip", "link", "set", f"p{i}",
           "down" if cut else "up")

    def reset_links(self, i):
        """Resets every TCP connection from the test's namespace (the
        routers) to host i, the host itself left running: a broken cable
        for an instant, as a NAT or a load balancer dropping state does.
        `ss -K` aborts the router's end and sends the host a reset; both
        ends' ZeroMQ then reconnect."""
        sh("ss", "-K", "dst", self.host_ip(i), "dport", "=", ":7100")

    # ---- processes ----------------------------------------------------
    def spawn(self, args, log, env=None):
        f = open(os.path.join(self.tmp, log), "ab")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def start_etcd(self):
        cport, pport = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{cport}"
        self.etcd = self.spawn([
            ETCD, "--name", "default", "--data-dir", os.path.join(self.tmp, "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{pport}",
            "--initial-cluster", f"default=http://127.0.0.1:{pport}"], "etcd.log")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", cport), 0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("etcd did not start: " + open(os.path.join(self.tmp, "etcd.log")).read()[-2000:])

    def host_dir(self, i):
        return os.path.join(self.tmp, f"host{i}")

    def start_host(self, i, authorized=None):
        d = self.host_dir(i)
        if not os.path.exists(d):
            os.makedirs(d, mode=0o700)
            for name in ("server.key", "server.pub"):
                shutil.copy(os.path.join(self.keydir, name), d)
            os.chmod(os.path.join(d, "server.key"), 0o600)
        with open(os.path.join(d, "authorized_keys"), "w") as f:
            f.write("\n".join(authorized or [self.router_pub, self.client_pub]) + "\n")
        env = dict(os.environ, CTXD_TEST_HOST=f"h{i}")
        # `ip netns exec` mounts a sysfs of the namespace's own, without the
        # cgroup tree: mounted again in its private mount namespace, so the
        # host can make confined (local, sandbox) contexts.
        p = self.spawn(["ip", "netns", "exec", self.ns(i), "sh", "-c",
                        cgroup_mounts() + 'exec "$@"', "sh",
                        CTXD, "--state-dir", d,
                        "--listen", self.host_endpoint(i), "--kill-grace", "0.5"],
                       f"host{i}.log", env)
        while len(self.hosts) <= i:
            self.hosts.append(None)
        self.hosts[i] = p
        self.wait_host(i)
        return p

    def wait_host(self, i):
        c = self.direct(i)
        try:
            assert c.req("hello", timeout=30)[-1]["t"] == "ok"
        finally:
            c.close()

    def kill_host(self, i):
        p = self.hosts[i]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def router_endpoint(self, name):
        return f"ipc://{self.tmp}/{name}.sock"

    def start_router(self, name="r1", etcd=True, state_dir=None, extra=(), host_key=None):
        port = free_port()
        args = [ROUTER, "--state-dir", state_dir or self.router_dir,
                "--listen", self.router_endpoint(name), "--listen", f"tcp://127.0.0.1:{port}",
                *(host_key or ["--host-key-file", os.path.join(self.keydir, "server.pub")]),
                "--tenants", self.tenants,
                "--liveness", str(self.liveness), "--liveness-max", str(self.liveness_max)]
        for i in range(self.nhosts):
            args += ["--host", self.host_endpoint(i)]
        if etcd:
            args += ["--etcd", self.etcd_url]
        wrap = os.environ.get("CTXD_ROUTER_WRAP", "").split()  # e.g. a debugger
        p = self.spawn(wrap + args + list(extra), f"{name}.log")
        self.routers[name] = (p, f"tcp://127.0.0.1:{port}")
        return p

    def stop_router(self, name):
        p, _ = self.routers.pop(name)
        p.send_signal(signal.SIGTERM)
        p.wait(10)

    def client(self, name="r1", tenant=False):
        """A client of router `name` over ipc (no key) or, for the tenant's
        key, over tcp with CurveZMQ."""
        if tenant in ("anon0", "anon1"):
            return Conn(self.routers[name][1], self.router_pub, self.anon[int(tenant[-1])][1])
        if tenant == "beta":
            return Conn(self.routers[name][1], self.router_pub, self.beta_sec)
        if tenant:
            return Conn(self.routers[name][1], self.router_pub, self.tenant_sec)
        return Conn(self.router_endpoint(name))

    def tcp_client(self, name="r1", secret=None):
        return Conn(self.routers[name][1], self.router_pub, secret or self.client_sec)

    def direct(self, i):
        """A client straight to host i (its authorized_keys list the test's key)."""
        return Conn(self.host_endpoint(i), self.host_pub, self.client_sec)

    def wait_router(self, name="r1", live=None, timeout=30):
        """Until the router's stats show `live` hosts live (default: all)."""
        live = self.nhosts if live is None else live
        c = self.client(name)
        deadline = time.monotonic() + timeout
        try:
            while True:
                st = c.req("stats", timeout=timeout)[-1]
                if st["t"] == "ok" and sum(h["state"] == "live" for h in st["hosts"]) == live:
                    return st
                assert time.monotonic() < deadline, f"router hosts: {st}"
                time.sleep(0.1)
        finally:
            c.close()

    def host_state(self, name, i):
        c = self.client(name)
        try:
            return c.req("stats")[-1]["hosts"][i]
        finally:
            c.close()

    def log(self, name):
        with open(os.path.join(self.tmp, name), errors="replace") as f:
            return f.read()

    def down(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for i in range(self.nhosts):
            sh("ip", "netns", "del", self.ns(i), check=False)
        sh("ip", "netns", "del", f"{self.tag}br", check=False)
        sh("ip", "link", "del", f"{self.tag}v", check=False)
        if not os.environ.get("CTXD_KEEP_TMP"):
            shutil.rmtree(self.tmp, ignore_errors=True)
