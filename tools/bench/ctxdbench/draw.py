"""The picture of a run (bench.png): latency distributions, streaming and
memory bars, and the scale curves; nothing without python3-matplotlib."""

import statistics

from .common import GAP_MS, SCALE_SERIES, pct


def draw(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return None
    F = res["figures"]
    fig, axes = plt.subplots(3, 2, figsize=(13, 13.5))

    def cdf(ax, v, label, scale):
        if not v:
            return
        s = sorted(x * scale for x in v)
        ax.plot(s, [(i + 1) / len(s) for i in range(len(s))], label=f"{label} (n={len(s)})")

    ax = axes[0][0]
    r = F.get("rtt", {})
    for key, label in (("zmq_floor", "raw ZeroMQ floor"), ("ctxd_c", "ctxd, C client"),
                       ("ctxd_python", "ctxd, Python client"),
                       ("ctxd_python_minimal", "ctxd, minimal Python loop"),
                       ("ipykernel", "ipykernel (jupyter_client)")):
        cdf(ax, r.get(key), label, 1e6)
    ax.set_xscale("log")
    ax.set_xlabel("round trip of x = 1 (µs, log)")
    ax.set_ylabel("fraction")
    ax.set_title("1. execute round trip")
    if ax.lines:
        ax.legend(fontsize=8)
    ax.grid(alpha=.3)

    ax = axes[0][1]
    cdf(ax, F.get("ready", {}).get("ctxd"), "ctxd: create -> first done", 1e3)
    cdf(ax, F.get("ready", {}).get("ctxd_spares"), "ctxd: the same, a spare ready", 1e3)
    cdf(ax, F.get("ready", {}).get("ipykernel"), "ipykernel: start -> first done", 1e3)
    cdf(ax, F.get("fork", {}).get("ctxd"), "ctxd: fork of 200 MB -> ready", 1e3)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log)")
    ax.set_title("2./3. new context ready, fork ready")
    if ax.lines:
        ax.legend(fontsize=8)
    ax.grid(alpha=.3)

    ax = axes[1][0]
    s = F.get("stream", {})
    labels, vals = [], []
    for key, label in (("floor_print", "floor\nprint"), ("ctxd_print", "ctxd\nprint"),
                       ("ipykernel_print", "ipykernel\nprint"), ("floor_write", "floor\nwrite"),
                       ("ctxd_write", "ctxd\nwrite"), ("ipykernel_write", "ipykernel\nwrite")):
        if s.get(key):
            labels.append(label)
            vals.append(statistics.median(s[key]))
    ax.bar(labels, vals, color=["#888", "#1f77b4", "#d62728"] * 2)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("MB/s delivered (100 MB)")
    ax.set_title("4. stdout streaming")

    ax = axes[1][1]
    m = F.get("memory", {})
    labels, vals = [], []
    if m.get("ctxd_pss_per_context"):
        labels.append("ctxd context")
        vals.append(statistics.median(m["ctxd_pss_per_context"]) / 2**20)
    if m.get("ipykernel_pss_per_kernel"):
        labels.append("ipykernel")
        vals.append(statistics.median(m["ipykernel_pss_per_kernel"]) / 2**20)
    ax.bar(labels, vals, color=["#1f77b4", "#d62728"][:len(vals)])
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("PSS per idle interpreter (MiB)")
    ax.set_title("5. idle memory")
    sc = F.get("scale", {})
    ax, ax2 = axes[2][0], axes[2][1]
    for tag, style in (("new", "-o"), ("old", "--x")):
        if not sc.get(tag):
            continue
        ks = [str(k) for k in sc["counts"]]
        xs = [int(k) for k in ks]
        for key, label in SCALE_SERIES:
            if key not in sc[tag]["at"][ks[0]]:
                continue
            ax.plot(xs, [pct(sc[tag]["at"][k][key], .5) * 1e3 for k in ks], style,
                    label=f"{label}, median ({tag})")
        ax.plot(xs, [pct(sc[tag]["at"][k]["create"], .99) * 1e3 for k in ks], style, alpha=.4,
                label=f"create p99, {GAP_MS} ms apart ({tag})")
        if all("paced_floor" in sc[tag]["at"][k] for k in ks):
            ax.plot(xs, [pct(sc[tag]["at"][k]["paced_floor"], .99) * 1e3 for k in ks], "k:",
                    label="floor p99: 2 raw ZeroMQ round trips, same gap and count")
        ax2.plot(xs, [sc[tag]["at"][k]["pss_per_context"] / 2**20 for k in ks], style,
                 label=f"PSS per idle context incl. zygote + supervisor + spares ({tag})")
    for a in (ax, ax2):
        a.set_xscale("log")
        a.set_xlabel("idle contexts alive (log)")
        a.grid(alpha=.3)
        if a.lines:
            a.legend(fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms (log)")
    ax.set_title("8. cost against the number of contexts alive")
    ax2.axhline(1.5, color="#888", lw=.8)
    ax2.set_ylabel("MiB")
    ax2.set_title("8. memory per context against the count")
    fig.suptitle(f"ctxd vs ipykernel on {res['machine'].get('cpus')} CPUs "
                 f"({res['machine'].get('when')}){' --quick' if res['quick'] else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
