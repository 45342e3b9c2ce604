#!/usr/bin/python3
"""ctxd against ipykernel, side by side, on this machine: the command line
of the ctxdbench package beside it (`bench.py --help` lists the figures).

    tools/bench/bench.py [--quick] [--only FIGS] [--build-dir DIR] [--out DIR]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ctxdbench.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
