"""The kernel's command line: launching it for a front end, and `install`,
which writes the `ctxd` kernelspec (what `ctx kernel install` runs)."""

from __future__ import annotations

import argparse
import json
import os
import site
import sys
import tempfile
from typing import List, Optional

from .kernel import KernelOptions


def _kernel_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m ctxd.kernel",
        description="A Jupyter kernel whose cells run in a ctxd context. Other options "
                    "(-f CONNECTION_FILE, ...) go to ipykernel's IPKernelApp.")
    p.add_argument("--context", metavar="NAME",
                   help="attach to this named context (created if missing; kept at shutdown), "
                        "so a notebook and an agent share its globals; default: a context of "
                        "the kernel's own, deleted at shutdown")
    p.add_argument("--endpoint", metavar="ENDPOINT",
                   help="the daemon to use (else $CTXD_ENDPOINT, else the default socket)")
    p.add_argument("--ctxd", metavar="PATH",
                   help="the ctxd binary to start as a private daemon when no endpoint is "
                        "given and none answers at the default socket (else $CTXD_DAEMON, "
                        "else ctxd on PATH)")
    p.add_argument("--timeout", type=float, default=0.0, metavar="SECONDS",
                   help="timeout of each cell (default 0: none; a context policy may cap it)")
    p.add_argument("--lease", type=float, default=None, metavar="SECONDS",
                   help="the kernel's own context is deleted by the daemon this long after "
                        "the kernel stopped renewing it (it died without a shutdown); default "
                        "$CTXD_KERNEL_LEASE, else 60")
    p.add_argument("--history", metavar="FILE",
                   help="the history database (default $CTXD_KERNEL_HISTORY, else "
                        "$XDG_DATA_HOME/ctxd/kernel_history.sqlite; ':memory:' keeps none)")
    return p


def parse_kernel_args(argv: List[str]):
    """Our options, and the rest for IPKernelApp."""
    opts, rest = _kernel_parser().parse_known_args(argv)
    return KernelOptions(context=opts.context, endpoint=opts.endpoint, ctxd=opts.ctxd,
                         timeout=opts.timeout, history=opts.history, lease=opts.lease), rest


def _package_parent() -> str:
    import ctxd
    return os.path.dirname(os.path.dirname(os.path.abspath(ctxd.__file__)))


def install(argv: List[str]) -> int:
    """Writes kernel.json for the `ctxd` kernelspec and installs it with
    jupyter_client's KernelSpecManager (as `jupyter kernelspec install`)."""
    p = argparse.ArgumentParser(prog="ctx kernel install",
                                description="Install the ctxd Jupyter kernelspec.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true",
                       help="for this user (~/.local/share/jupyter/kernels)")
    where.add_argument("--prefix", metavar="DIR", help="under DIR/share/jupyter/kernels")
    where.add_argument("--sys-prefix", action="store_true",
                       help=f"under {sys.prefix}/share/jupyter/kernels")
    p.add_argument("--name", default="ctxd", help="kernelspec name (default ctxd)")
    p.add_argument("--display-name", help="name shown in front ends (default \"Python 3 "
                                          "(ctxd)\", with the context when --context is given)")
    p.add_argument("--python", default=sys.executable,
                   help=f"the interpreter that runs the kernel (default {sys.executable})")
    p.add_argument("--ctxd", metavar="PATH", help="the daemon binary for a private daemon")
    p.add_argument("--context", metavar="NAME", help="make the kernel attach to this context")
    p.add_argument("--endpoint", metavar="ENDPOINT", help="make the kernel use this daemon")
    a = p.parse_args(argv)
    try:
        from jupyter_client.kernelspec import KernelSpecManager
    except ImportError:
        print("ctx kernel install: jupyter_client is not installed "
              "(Debian: apt-get install python3-jupyter-client python3-ipykernel)",
              file=sys.stderr)
        return 1
    args = [a.python, "-m", "ctxd.kernel", "-f", "{connection_file}"]
    for flag, value in (("--context", a.context), ("--endpoint", a.endpoint),
                        ("--ctxd", os.path.abspath(a.ctxd) if a.ctxd else None)):
        if value:
            args += [flag, value]
    display = a.display_name or ("Python 3 (ctxd)" if not a.context
                                 else f"Python 3 (ctxd: {a.context})")
    spec = {"argv": args, "display_name": display, "language": "python",
            "interrupt_mode": "message", "metadata": {"debugger": False},
            # debugpy (imported by ipykernel) warns about frozen modules otherwise
            "env": {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}}
    parent = _package_parent()
    known = set(site.getsitepackages()) | {"/usr/lib/python3/dist-packages",
                                           "/usr/local/lib/python3/dist-packages"}
    if parent not in known:
        spec["env"]["PYTHONPATH"] = parent  # the package used in place
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w") as f:
            json.dump(spec, f, indent=1)
            f.write("\n")
        try:
            dest = KernelSpecManager().install_kernel_spec(
                tmp, kernel_name=a.name, user=a.user, replace=True,
                prefix=a.prefix or (sys.prefix if a.sys_prefix else None))
        except OSError as e:
            print(f"ctx kernel install: {e} (try --user or --prefix)", file=sys.stderr)
            return 1
    print(f"installed kernelspec {a.name} in {dest}")
    return 0


def main(argv: List[str]) -> Optional[int]:
    if argv and argv[0] == "install":
        return install(argv[1:])
    opts, rest = parse_kernel_args(argv)
    from ipykernel.kernelapp import IPKernelApp

    from . import kernel
    kernel.OPTIONS = opts
    IPKernelApp.launch_instance(argv=rest, kernel_class=kernel.CtxdKernel)
    return 0


__all__ = ["main", "install", "parse_kernel_args"]
