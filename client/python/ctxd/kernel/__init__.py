"""ctxd.kernel: a Jupyter kernel whose cells run in a ctxd context.

    python3 -m ctxd.kernel -f CONNECTION_FILE [--context NAME] [--endpoint E]
    python3 -m ctxd.kernel install [--user | --prefix DIR | --sys-prefix] [--ctxd PATH]
                                   [--context NAME] [--name NAME] [--display-name TEXT]

It is an ipykernel "wrapper kernel" (ipykernel.kernelbase.Kernel) over the
ctxd Python client: Jupyter messages become ctxd requests (execute, the
queries complete / inspect / is_complete, interrupt, ctx.restart,
input.reply) and ctxd events become Jupyter messages (see kernel.py).
"""

from .kernel import CtxdKernel, KernelOptions  # noqa: F401
