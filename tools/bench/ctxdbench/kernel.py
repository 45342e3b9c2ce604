"""ipykernel, the other side of the comparison, driven by jupyter_client;
and a kernelspec running the ctxd kernel against the bench's daemon (the
notebook path)."""

import json
import os
import subprocess
import time

from .common import ROOT


def have_ipykernel():
    try:
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
        return True
    except Exception:
        return False


def ctxd_kernelspec(tmp, endpoint):
    """A kernelspec `ctxd-bench` (in tmp, added to JUPYTER_PATH) running the
    ctxd kernel from this tree against the bench's daemon."""
    d = os.path.join(tmp, "jupyter", "kernels", "ctxd-bench")
    os.makedirs(d, exist_ok=True)
    spec = {"argv": ["/usr/bin/python3", "-m", "ctxd.kernel", "-f", "{connection_file}",
                     "--endpoint", endpoint, "--history", ":memory:"],
            "display_name": "ctxd (bench)", "language": "python", "interrupt_mode": "message",
            "env": {"PYTHONPATH": os.path.join(ROOT, "client", "python")}}
    with open(os.path.join(d, "kernel.json"), "w") as f:
        json.dump(spec, f)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        p for p in (os.path.join(tmp, "jupyter"), os.environ.get("JUPYTER_PATH")) if p)
    return "ctxd-bench"


class Kernel:
    log = subprocess.DEVNULL  # set to a file by Bench

    def __init__(self, name="python3"):
        from jupyter_client.manager import KernelManager
        self.name = name
        self.km = KernelManager(kernel_name=name)
        # the kernel's own chatter (debugpy warnings) goes to a log, not here
        self.km.start_kernel(stdout=Kernel.log, stderr=Kernel.log)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    @property
    def pid(self):
        prov = getattr(self.km, "provisioner", None)
        proc = getattr(prov, "process", None) if prov else None
        if proc is not None:
            return proc.pid
        return self.km.kernel.pid

    @property
    def argv(self):
        try:
            return self.km.kernel_spec.argv
        except Exception:
            return None

    def execute(self, code, on_stream=None, timeout=600):
        """Runs code; returns once this request's idle status (all output
        delivered) and its execute_reply have both arrived."""
        import queue
        kc = self.kc
        mid = kc.execute(code)
        deadline = time.monotonic() + timeout
        try:
            while True:
                m = kc.get_iopub_msg(timeout=max(0.001, deadline - time.monotonic()))
                if m["parent_header"].get("msg_id") != mid:
                    continue
                t = m["msg_type"]
                if t == "stream" and on_stream:
                    on_stream(m["content"]["name"], m["content"]["text"])
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    break
            while True:
                r = kc.get_shell_msg(timeout=max(0.001, deadline - time.monotonic()))
                if r["parent_header"].get("msg_id") == mid:
                    break
        except queue.Empty:
            raise TimeoutError(f"ipykernel: no answer to {code!r}")
        if r["content"]["status"] != "ok":
            raise RuntimeError(f"ipykernel: {code!r} ended {r['content']['status']}")

    def stop(self):
        try:
            self.kc.stop_channels()
            # the ctxd kernel deletes its context when asked to shut down
            self.km.shutdown_kernel(now=self.name == "python3")
        except Exception:
            pass
