"""The side-by-side summary of a run with --compare BUILD: each round-trip,
creation and streaming figure measured for both builds in the same blocks,
its median for each, their ratio, and whether that is within 3%; and the
ratio block by block (the median of the blocks' ratios and their range),
which shows how far two runs of one tree would differ on this machine."""

from .common import GAP_MS, pct

# (figure, what, key of this build's samples, key of the --compare build's,
# unit, scale, higher is better)
PAIRS = (
    ("rtt", "x = 1 round trip, C client", "ctxd_c", "ctxd_c_old", "us", 1e6, False),
    ("rtt", "x = 1 round trip, C client, all on one CPU", "ctxd_c_one_cpu",
     "ctxd_c_one_cpu_old", "us", 1e6, False),
    ("ready", "create -> first x = 1, a fork each", "ctxd", "ctxd_old", "ms", 1e3, False),
    ("ready", "create -> first x = 1, a fork each, all on one CPU", "ctxd_one_cpu",
     "ctxd_one_cpu_old", "ms", 1e3, False),
    ("ready", f"create -> first x = 1, a spare taken, {GAP_MS} ms apart", "ctxd_spares",
     "ctxd_spares_old", "ms", 1e3, False),
    ("ready", "create -> first x = 1, local tier", "local", "local_old", "ms", 1e3, False),
    ("ready", "create -> first x = 1, sandbox tier", "sandbox", "sandbox_old", "ms", 1e3, False),
    ("stream", "1e6 x print('x'*99)", "ctxd_print", "old_print", "MB/s", 1, True),
    ("stream", "one 100 MB write", "ctxd_write", "old_write", "MB/s", 1, True),
    ("stream", "1e6 x print('x'*99), all on one CPU", "ctxd_print_one_cpu", "old_print_one_cpu",
     "MB/s", 1, True),
    ("stream", "one 100 MB write, all on one CPU", "ctxd_write_one_cpu", "old_write_one_cpu",
     "MB/s", 1, True),
)
WITHIN = 0.03


def block_ratios(a, b, blocks):
    """The ratio of the medians of a's and b's i-th blocks, for each of
    `blocks` equal blocks (a trial each where blocks is their count)."""
    if not blocks or len(a) != len(b) or len(a) % blocks:
        return []
    k = len(a) // blocks
    return [pct(a[i * k:(i + 1) * k], .5) / pct(b[i * k:(i + 1) * k], .5) for i in range(blocks)]


def side_by_side(res, build, compare):
    """The rows of the summary as dicts (empty when no figure has both
    builds' samples) and its lines: the medians of each build, new/old of
    the medians, and "yes" where this build is no more than 3% slower."""
    F = res["figures"]
    rows = []
    for fig, what, new, old, unit, scale, higher in PAIRS:
        a, b = F.get(fig, {}).get(new), F.get(fig, {}).get(old)
        if not a or not b:
            continue
        ma, mb = pct(a, .5), pct(b, .5)
        ratio = ma / mb
        ok = ratio >= 1 - WITHIN if higher else ratio <= 1 + WITHIN
        br = block_ratios(a, b, F[fig].get("compare_blocks", {}).get(new))
        rows.append({"figure": fig, "what": what, "unit": unit, "new_median": ma * scale,
                     "old_median": mb * scale, "new_over_old": ratio, "within": ok,
                     "samples": [len(a), len(b)], "block_ratios": br})
    if not rows:
        return rows, []
    digits = {"us": 0, "ms": 2, "MB/s": 0}
    table = [("figure", "what", "this build", "--compare build", "new/old",
              f"within {WITHIN:.0%}", "blocks: median ratio (range)", "samples")]
    for r in rows:
        d = digits[r["unit"]]
        table.append((r["figure"], r["what"], f"{r['new_median']:.{d}f} {r['unit']}",
                      f"{r['old_median']:.{d}f} {r['unit']}", f"{r['new_over_old']:.3f}x",
                      "yes" if r["within"] else "NO", blocks_cell(r["block_ratios"]),
                      "{} / {}".format(*r["samples"])))
    widths = [max(len(x[i]) for x in table) for i in range(len(table[0]))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    lines = ["", f"side by side (medians; alternating blocks): this build {build}",
             f"  against --compare {compare}",
             fmt.format(*table[0]), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*row) for row in table[1:]]
    return rows, lines


def blocks_cell(br):
    if not br:
        return "-"
    return f"{pct(br, .5):.3f}x ({min(br):.2f}-{max(br):.2f}, {len(br)})"
