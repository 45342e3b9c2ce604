"""A ctxd daemon of the bench's own (private socket and state directory),
a minimal zmq + msgpack client of it, and the measuring programs run
beside it: ctxd-bench (C), rtt.mjs (TypeScript), the Python package."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import msgpack  # Debian: python3-msgpack
import zmq  # Debian: python3-zmq

from .common import HERE, ROOT


class Daemon:
    def __init__(self, build, tmp, preload="numpy", max_contexts=1100, extra=(), wrap=(),
                 name="ctxd"):
        self.sock = os.path.join(tmp, name + ".sock")
        self.endpoint = "ipc://" + self.sock
        self.log_path = os.path.join(tmp, name + ".log")
        # A state directory of its own: nothing of a run stays in root's
        # /var/lib/ctxd, and no context of an earlier run comes back.
        args = [*wrap, os.path.join(build, "daemon", "ctxd"), "--listen", self.endpoint,
                "--state-dir", os.path.join(tmp, name + ".state"),
                "--max-contexts", str(max_contexts), *extra]
        if preload:
            args += ["--preload", preload]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
        self.c = Mini(self.endpoint)
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"ctxd exited at start: see {self.log_path}")
            try:
                self.hello = self.c.req("hello", wait=1)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise SystemExit("ctxd did not answer hello")
        self.pid = self.proc.pid

    def stop(self):
        self.c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)  # under valgrind it writes its counts first
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Mini:
    """A minimal zmq + msgpack client (also the 'minimal loop' of figure 1)."""

    def __init__(self, endpoint):
        self.z = zmq.Context()
        self.s = self.z.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(endpoint)
        self.n = 0

    def req(self, t, wait=600, **kw):
        self.n += 1
        rid = self.n
        m = {"v": 1, "t": t, "id": rid}
        m.update(kw)
        self.s.send(msgpack.packb(m))
        while True:
            if not self.s.poll(int(wait * 1000)):
                raise TimeoutError(t)
            r = msgpack.unpackb(self.s.recv(), raw=False)
            if r.get("re") == rid and r["t"] in ("ok", "err", "done"):
                if r["t"] == "err":
                    raise RuntimeError(f"{t}: {r['code']}: {r['message']}")
                return r

    def run(self, code, ctx="default"):
        r = self.req("execute", code=code, ctx=ctx, timeout=0)
        if r["status"] != "ok":
            raise RuntimeError(f"{code!r} ended {r['status']}: {r}")
        return r

    def contexts(self):
        return self.req("ctx.list")["contexts"]

    def close(self):
        self.s.close(0)
        self.z.term()


def cbench(build, *args, timeout=900):
    exe = os.path.join(build, "tools", "bench", "ctxd-bench")
    try:
        out = subprocess.run([exe, *map(str, args)], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"ctxd-bench {' '.join(map(str, args))}: no answer in {timeout} s") from e
    if out.returncode != 0:
        raise RuntimeError(f"ctxd-bench {' '.join(map(str, args))}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def ts_bench(*args):
    """tools/bench/rtt.mjs (the TypeScript client, client/js) with args, or
    None when node or the built package is missing."""
    node = shutil.which("node")
    if not node or not os.path.exists(os.path.join(ROOT, "client", "js", "dist", "index.js")):
        return None
    out = subprocess.run([node, os.path.join(HERE, "rtt.mjs"), *map(str, args)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"rtt.mjs: {out.stderr.strip()}")
    return json.loads(out.stdout)


def python_client():
    """The ctxd Python package (client/python), or None."""
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    try:
        import ctxd  # noqa: F401
        return ctxd if hasattr(ctxd, "Client") else None
    except Exception:
        return None
