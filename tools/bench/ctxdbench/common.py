"""What every figure shares: where the tree is, the figures' names, the
counts and gaps they agree on, the log, and the statistics (nearest-rank
percentiles, ratios of paired trials)."""

import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIGS = ["rtt", "ready", "fork", "stream", "memory", "tput", "thousand", "scale", "cpu"]
MB = 1e6


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- statistics --------------------------------------------------------------

def pct(v, q):
    """Nearest-rank percentile (as in shared/research/baseline.md)."""
    s = sorted(v)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else float("nan")


def summary(v, unit_scale=1.0):
    if not v:
        return None
    return {"n": len(v), "median": pct(v, 0.5) * unit_scale, "p99": pct(v, 0.99) * unit_scale,
            "min": min(v) * unit_scale, "max": max(v) * unit_scale}


SPARES = 2    # --spare-workers of the scale figure's daemon
GAP_MS = 150  # between paced creations: a spare is made again 50 ms after one is taken
# The curves of figure 8: the key of each series at a count, its label.
SCALE_SERIES = (("create", f"create -> first x = 1, {GAP_MS} ms apart"),
                ("create_burst", "create -> first x = 1, back to back"),
                ("rtt", "x = 1 round trip"),
                ("rtt_one_cpu", "x = 1 round trip, all on one CPU"))


def has_option(build, option):
    """Whether that build's ctxd knows a command-line option (an older
    tree under --compare may not)."""
    exe = os.path.join(build, "daemon", "ctxd")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True)
    return option in out.stdout + out.stderr


def paired_ratio(a, b):
    """The median of a[i] / b[i] over trials made side by side (this VM's
    speed drifts between trials); the ratio of the medians when the two
    were not paired (an older bench.json)."""
    if not a or not b:
        return None
    if len(a) == len(b):
        return statistics.median(x / y for x, y in zip(a, b))
    return statistics.median(a) / statistics.median(b)
