"""python3 -m ctxd.kernel: run the kernel, or `install` its kernelspec."""

import sys

from .launch import main

sys.exit(main(sys.argv[1:]))
