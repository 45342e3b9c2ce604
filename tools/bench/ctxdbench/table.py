"""The table of a run: one row per measure (medians, p99, ratios against
ipykernel, the floor or the --compare build) and the goals each meets."""

import statistics

from .common import GAP_MS, SCALE_SERIES, SPARES, paired_ratio, pct


def make_table(res):
    F = res["figures"]
    rows = []   # (figure, what, ctxd, ipykernel, ratio, goal, met)
    goals = []

    def us(v):
        return f"{pct(v, .5) * 1e6:.0f} / {pct(v, .99) * 1e6:.0f} us" if v else "-"

    def ms(v):
        return f"{pct(v, .5) * 1e3:.2f} / {pct(v, .99) * 1e3:.2f} ms" if v else "-"

    def goal(name, ok, detail):
        goals.append({"goal": name, "met": ok, "detail": detail})
        return "yes" if ok else ("NO" if ok is not None else "n/a")

    r = F.get("rtt", {})
    if r:
        c, fl, ipy = r.get("ctxd_c"), r.get("zmq_floor"), r.get("ipykernel")
        rows.append(("1 rtt", "x = 1, C client (libctxd)", us(c), us(ipy),
                     f"ipy/ctxd {pct(ipy, .5) / pct(c, .5):.0f}x" if ipy else "",
                     ">= 10x faster", goal("rtt >= 10x faster than ipykernel",
                                           pct(ipy, .5) / pct(c, .5) >= 10 if ipy else None,
                                           "median ratio")))
        if r.get("ctxd_c_old"):
            o = r["ctxd_c_old"]
            rows.append(("1 rtt", "  x = 1, C client: --compare build (alternating blocks)", us(o),
                         "", f"new/old {pct(c, .5) / pct(o, .5):.2f}x", "", ""))
        if r.get("ctxd_python"):
            p = r["ctxd_python"]
            rows.append(("1 rtt", "x = 1, Python client (ctxd pkg)", us(p), "",
                         f"ipy/ctxd {pct(ipy, .5) / pct(p, .5):.0f}x" if ipy else "", "", ""))
        ts = r.get("ctxd_ts")
        if ts:
            py = r.get("ctxd_python")
            ratio = pct(ts, .5) / pct(py, .5) if py else None
            rows.append(("1 rtt", "x = 1, TypeScript client (client/js)", us(ts), "",
                         f"ts/python {ratio:.2f}x" if ratio else "", "<= 1.5x Python client",
                         goal("TypeScript client rtt within 1.5x the Python client's",
                              ratio <= 1.5 if ratio else None, "median TS / median Python")))
        p = r.get("ctxd_python_minimal")
        rows.append(("1 rtt", "x = 1, minimal zmq+msgpack loop", us(p), "",
                     f"ipy/ctxd {pct(ipy, .5) / pct(p, .5):.0f}x" if ipy and p else "", "", ""))
        rows.append(("1 rtt", "raw ZeroMQ DEALER/ROUTER 100 B (floor)", us(fl), "",
                     f"ctxd/floor {pct(c, .5) / pct(fl, .5):.2f}x", "<= 2x floor",
                     goal("rtt within 2x the ZeroMQ floor", pct(c, .5) / pct(fl, .5) <= 2,
                          "median C client / median floor, unpinned")))
        nb = r.get("ctxd_kernel")
        if nb:
            rows.append(("1 rtt", "x = 1, notebook path: jupyter_client -> kernel", us(nb),
                         us(ipy), f"ipy/ctxd {pct(ipy, .5) / pct(nb, .5):.1f}x", "", ""))
        c1, f1 = r.get("ctxd_c_one_cpu"), r.get("zmq_floor_one_cpu")
        if c1 and f1:
            rows.append(("1 rtt", "all on one CPU: C client / floor", f"{us(c1)} / {us(f1)}",
                         "", f"ctxd/floor {pct(c1, .5) / pct(f1, .5):.2f}x", "(CPU cost)", ""))
    r = F.get("ready", {})
    if r:
        c, ipy = r.get("ctxd"), r.get("ipykernel")
        sp = r.get("ctxd_spares")
        rows.append(("2 ready", "create -> first x = 1 done (numpy preloaded, a fork each)",
                     ms(c), ms(ipy),
                     f"ipy/ctxd {pct(ipy, .5) / pct(c, .5):.0f}x" if ipy else "", "",
                     ""))
        if r.get("ctxd_old"):
            o = r["ctxd_old"]
            rows.append(("2 ready", "  --compare build, a fork each (alternating blocks)", ms(o),
                         "", f"new/old {pct(c, .5) / pct(o, .5):.2f}x", "", ""))
        if sp:
            rows.append(("2 ready", f"  the same, --spare-workers {SPARES}, {GAP_MS} ms apart",
                         ms(sp), ms(ipy),
                         f"ipy/ctxd {pct(ipy, .5) / pct(sp, .5):.0f}x" if ipy else "",
                         "<= 5 ms median",
                         goal("context ready <= 5 ms median (a spare ready)",
                              pct(sp, .5) <= 0.005, "median")))
        if sp and r.get("ctxd_spares_old"):
            o = r["ctxd_spares_old"]
            rows.append(("2 ready", "  spares: --compare build (alternating blocks)", ms(o), "",
                         f"new/old {pct(sp, .5) / pct(o, .5):.2f}x", "", ""))
        if r.get("first_run_faults"):
            fo = r.get("first_run_faults_old")
            rows.append(("2 ready", "  page faults of its first x = 1 (median)",
                         f"{pct(r['first_run_faults'], .5):.0f}", "",
                         f"old {pct(fo, .5):.0f}" if fo else "", "", ""))
        if r.get("local"):
            rows.append(("2 ready", "  the same, local tier (confined)", ms(r["local"]), "", "",
                         "", ""))
        if r.get("sandbox"):
            rows.append(("2 ready", "  the same, sandbox tier (namespaces, own root)",
                         ms(r["sandbox"]), "", "", "<= 20 ms median",
                         goal("sandbox context ready <= 20 ms median",
                              pct(r["sandbox"], .5) <= 0.020, "median")))
        for tier in ("local", "sandbox"):
            if r.get(tier + "_old"):
                new_old = pct(r[tier], .5) / pct(r[tier + "_old"], .5)
                rows.append(("2 ready", f"  {tier}: --compare build (alternating blocks)",
                             ms(r[tier + "_old"]), "", f"new/old {new_old:.2f}x",
                             "new <= 1.1x old",
                             goal(f"{tier} ready within 1.1x of the --compare build",
                                  new_old <= 1.1, "median")))
    r = F.get("fork", {})
    if r:
        c = r.get("ctxd")
        rows.append(("3 fork", f"ctx.fork of 200 MB context -> ready", ms(c), "n/a", "",
                     "<= 20 ms", goal("200 MB fork ready <= 20 ms", pct(c, .5) <= 0.020,
                                      "median")))
        rows.append(("3 fork", "PSS source alone / source + fork",
                     f"{r['pss_source_alone'] / 2**20:.0f} / "
                     f"{r['pss_source_plus_fork'] / 2**20:.0f} MiB", "n/a", "", "", ""))
    r = F.get("stream", {})
    if r:
        for mode, label in (("print", "1e6 x print('x'*99)"), ("write", "one 100 MB write")):
            c, ipy, fl = r.get(f"ctxd_{mode}"), r.get(f"ipykernel_{mode}"), r.get(f"floor_{mode}")
            cm = statistics.median(c) if c else None
            im = statistics.median(ipy) if ipy else None
            fm = statistics.median(fl) if fl else None
            ok = goal("print-loop streaming >= 5x ipykernel", cm / im >= 5 if im else None,
                      "median MB/s ratio") if mode == "print" else ""
            rows.append(("4 stream", f"{label} MB/s (floor: pipe+cat {fm:.0f})",
                         f"{cm:.0f} MB/s", f"{im:.0f} MB/s" if im else "-",
                         f"ctxd/ipy {cm / im:.1f}x" if im else "",
                         ">= 5x ipykernel" if mode == "print" else "", ok))
            # issue #19: the print loop at >= 90% of the pipe's speed, the
            # one write not below it; the median of the trials' ratios
            want = 0.9 if mode == "print" else 1.0
            cf = paired_ratio(c, fl)
            ok = goal(f"{mode} at >= {want:.0%} of the pipe floor",
                      cf >= want if cf else None, "median of the trials' ratios")
            # three digits: 0.897 is not met, and 0.90 would read as if it were
            rows.append(("4 stream", f"{label}: ctxd / pipe+cat floor", f"{cf:.3f}x" if cf
                         else "-", "", f"trials {len(c)}", f">= {want:.1f}x", ok))
            o = r.get(f"old_{mode}")
            if o:
                om = statistics.median(o)
                of = paired_ratio(o, fl)
                rows.append(("4 stream", f"  {label}: --compare build (alternating)",
                             f"{om:.0f} MB/s", "", f"new/old {paired_ratio(c, o):.2f}x",
                             f"old / floor {of:.3f}x" if of else "", ""))
    r = F.get("memory", {})
    if r:
        v = r["ctxd_pss_per_context"]
        ipy = r.get("ipykernel_pss_per_kernel")
        cm = statistics.median(v) / 2**20
        im = statistics.median(ipy) / 2**20 if ipy else None
        rows.append(("5 memory", f"PSS per idle context ({len(v)} idle)", f"{cm:.2f} MiB",
                     f"{im:.1f} MiB" if im else "-", f"ipy/ctxd {im / cm:.0f}x" if im else "",
                     "<= 5 MB", goal("idle context PSS <= 5 MB", cm * 2**20 <= 5e6, "median")))
        rows.append(("5 memory", "  incl. zygote + supervisor, per context",
                     f"{r['ctxd_total_pss_per_context'] / 2**20:.2f} MiB", "", "", "", ""))
    r = F.get("tput", {})
    if r:
        c, ipy = r.get("ctxd_runs_per_s"), r.get("ipykernel_runs_per_s")
        rows.append(("6 tput", "8 threads x 8 contexts, x = 1", f"{c:.0f} runs/s",
                     f"{ipy:.0f} runs/s" if ipy else "-", f"ctxd/ipy {c / ipy:.0f}x" if ipy else "",
                     "", ""))
    r = F.get("thousand", {})
    if r:
        rows.append(("7 1000", f"{r['requested']} idle contexts alive at once",
                     f"{r['alive']} alive, {r['total_pss'] / 2**30:.2f} GiB PSS, "
                     f"{r['seconds_to_create']:.1f} s", "", "", "1,000 alive",
                     goal("1,000 idle contexts alive at once",
                          r["alive"] >= 1000 if r["requested"] >= 1000 else None,
                          f"MemAvailable drop {r['mem_available_drop'] / 2**30:.2f} GiB")))
    r = F.get("tput", {})
    if r.get("supervisor_cpu_per_run") is not None:
        rows.append(("6 tput", "  CPU per run: supervisor / a worker",
                     f"{r['supervisor_cpu_per_run'] * 1e6:.0f} / "
                     f"{r['worker_cpu_per_run'] * 1e6:.0f} us", "", "", "", ""))
    r = F.get("rtt", {})
    c1, f1 = r.get("ctxd_c_one_cpu"), r.get("zmq_floor_one_cpu")
    if c1 and f1:
        # The median of the blocks' ratios (each block: the floor, then
        # ctxd, back to back); median / median where a run has no blocks.
        br = r.get("one_cpu_block_ratios")
        ratio = pct(br, .5) if br else pct(c1, .5) / pct(f1, .5)
        how = (f"median of {len(br)} blocks' ratios ({min(br):.2f}-{max(br):.2f}); "
               f"median / median {pct(c1, .5) / pct(f1, .5):.2f}x") if br else "median / median"
        rows.append(("9 cpu", "all on one CPU: ctxd rtt / ZeroMQ floor", f"{ratio:.2f}x", "", "",
                     "<= 2.0x", goal("one-CPU round trip <= 2.0x the ZeroMQ floor",
                                     ratio <= 2.0, how)))
        bo = r.get("one_cpu_block_ratios_old")
        if bo:
            rows.append(("9 cpu", "  the same, --compare build (same blocks)",
                         f"{pct(bo, .5):.2f}x", "", f"new/old {ratio / pct(bo, .5):.2f}x", "",
                         f"old C client {us(r['ctxd_c_one_cpu_old'])}"))
    r = F.get("cpu", {})
    if r.get("supervisor_cpu_per_x1") is not None:
        rows.append(("9 cpu", "CPU per x = 1: supervisor / worker (/proc)",
                     f"{r['supervisor_cpu_per_x1'] * 1e6:.0f} / {r['worker_cpu_per_x1'] * 1e6:.0f} us",
                     "", "", "", ""))
    if r.get("callgrind_unavailable"):
        rows.append(("9 cpu", "supervisor instructions per x = 1 (callgrind)", "not counted", "",
                     "", "", "valgrind: " + r["callgrind_unavailable"][:60]))
    for tag in ("new", "old"):
        if r.get(f"{tag}_icount_per_x1"):
            per = r[f"{tag}_icount_per_x1"]
            spread = (max(per) - min(per)) / pct(per, .5) * 100 if len(per) > 1 else 0
            ratio = ""
            if tag == "old" and r.get("new_icount_per_x1"):
                ratio = f"new/old {pct(r['new_icount_per_x1'], .5) / pct(per, .5):.2f}x"
            rows.append(("9 cpu", f"supervisor instructions per x = 1 ({tag}, ptrace count)",
                         f"{pct(per, .5):.0f}", "", ratio, "(exact count)",
                         f"median of {len(per)}, spread {spread:.0f}%"))
    for tag in ("new", "old"):
        sc = r.get(f"{tag}_syscalls_per_x1")
        if sc:
            loop, io = (sum(sc.get(t, {}).values()) for t in ("loop", "io"))
            ratio = ""
            if tag == "old" and r.get("new_syscalls_per_x1"):
                nsc = r["new_syscalls_per_x1"]
                nl, ni = (sum(nsc.get(t, {}).values()) for t in ("loop", "io"))
                ratio = f"new/old {(nl + ni) / (loop + io):.2f}x" if loop + io else ""
            rows.append(("9 cpu", f"supervisor system calls per x = 1 ({tag}): loop / I/O thread",
                         f"{loop:.1f} / {io:.1f}", "", ratio, "(count)", "perf stat tracepoints"))
    for tag in ("new", "old"):
        if r.get(f"{tag}_instructions_per_x1"):
            rows.append(("9 cpu", f"supervisor instructions per x = 1 ({tag}, callgrind)",
                         f"{r[f'{tag}_instructions_per_x1']:.0f}", "", "", "(exact)", ""))
    r = F.get("scale", {})
    for tag in ("new", "old"):
        sc = r.get(tag)
        if not sc:
            continue
        ks = [str(k) for k in r["counts"]]
        lo, hi = sc["at"][ks[0]], sc["at"][ks[-1]]
        for key, label in SCALE_SERIES:
            if key not in hi:
                continue
            if key == "create":
                label += f" ({sc.get('spares', 0)} spares)"
            ratio = pct(hi[key], .5) / pct(lo[key], .5)
            rows.append((f"8 scale {tag}", f"{label} at " + "/".join(ks) + " alive (median)",
                         " / ".join(f"{pct(sc['at'][k][key], .5) * 1e3:.2f}" for k in ks) + " ms",
                         "", f"{ks[-1]}/{ks[0]} {ratio:.2f}x", "<= 1.2x",
                         goal(f"{label} at {ks[-1]} within 1.2x of {ks[0]} ({tag})", ratio <= 1.2,
                              "median ratio") if tag == "new" and key != "create_burst" else ""))
        worst = max(pct(sc["at"][k]["create"], .99) for k in ks)
        if "create_burst" in hi:
            wb = max(pct(sc["at"][k]["create_burst"], .99) for k in ks)
            rows.append((f"8 scale {tag}", "create p99 back to back, worst count",
                         f"{wb * 1e3:.2f} ms", "", "", "", "a fork each once spares run out"))
        slowest = max(max(sc["at"][k]["create"]) for k in ks)
        rows.append((f"8 scale {tag}", f"create p99 ({GAP_MS} ms apart, "
                     f"{len(hi['create'])} per count), worst count",
                     f"{worst * 1e3:.2f} ms", "", f"slowest one {slowest * 1e3:.2f} ms", "<= 5 ms",
                     goal(f"creation p99 <= 5 ms at every count ({tag})", worst <= 0.005, "p99")
                     if tag == "new" else ""))
        if all("kdamond_cpu_share" in sc["at"][k] for k in ks):
            rows.append((f"8 scale {tag}", "kdamond (the VM's DAMON) CPU during the paced "
                         "creations at " + "/".join(ks),
                         " / ".join(f"{sc['at'][k]['kdamond_cpu_share']:.0%}" for k in ks), "", "",
                         "(machine)", "a woken task waits for the CPU it holds"))
        if all("paced_floor" in sc["at"][k] for k in ks):
            rows.append((f"8 scale {tag}", "the floor's p99 with " + "/".join(ks) + " alive "
                         "(the same 2 raw round trips, right after)",
                         " / ".join(f"{pct(sc['at'][k]['paced_floor'], .99) * 1e3:.2f}" for k in ks)
                         + " ms", "",
                         "create p99 / floor p99 " + " / ".join(
                             f"{pct(sc['at'][k]['create'], .99) / pct(sc['at'][k]['paced_floor'], .99):.1f}"
                             for k in ks) + "x", "(machine)", ""))
        if tag == "new" and r.get("paced_floor"):
            pf = r["paced_floor"]
            rows.append(("8 scale", f"floor of that: 2 raw ZeroMQ round trips after {GAP_MS} ms "
                         "idle (median / p99)",
                         f"{pct(pf, .5) * 1e3:.2f} / {pct(pf, .99) * 1e3:.2f} ms", "",
                         f"slowest {max(pf) * 1e3:.2f} ms; create p99 / floor p99 "
                         f"{worst / pct(pf, .99):.2f}x", "(machine)", ""))
        rows.append((f"8 scale {tag}", f"ctx.list / stats at {ks[-1]}",
                     f"{pct(hi['ctx.list'], .5) * 1e3:.1f} / {pct(hi['stats'], .5) * 1e3:.2f} ms",
                     "", f"reply {hi['list_bytes'] / 2**20:.2f} MiB", "", ""))
        per = sc["fds_per_context"]
        lim = sc.get("nofile_limit")
        if sc.get("capped"):
            rows.append((f"8 scale {tag}", f"{ks[-1]} asked: filled to {sc['capped']['filled_to']}",
                         sc["capped"]["why"], "", "", "", ""))
        rows.append((f"8 scale {tag}", f"{hi['alive']} alive; supervisor descriptors per context",
                     f"{per:.2f}", "", f"limit {lim}: binds at ~{int(lim / per)}" if lim and per else "",
                     f">= {ks[-1]} alive", goal(f"{ks[-1]} idle contexts alive ({tag})",
                                                hi["alive"] >= int(ks[-1]) - 1, "alive")
                     if tag == "new" else ""))
        rows.append((f"8 scale {tag}", f"PSS per idle context at {ks[-1]}, incl. zygote+supervisor+spares",
                     f"{hi['pss_per_context'] / 2**20:.2f} MiB", "", "", "<= 1.5 MiB",
                     goal(f"PSS per idle context <= 1.5 MiB ({tag})",
                          hi["pss_per_context"] <= 1.5 * 2**20, "at the top count")
                     if tag == "new" else ""))
        if "ksmd_cpu_seconds" in sc:
            settle = hi.get("ksm_settle_seconds")
            rows.append((f"8 scale {tag}", "ksmd CPU over the figure (pages merged: "
                         + ("yes" if sc.get("page_merging") else "none marked") + ")",
                         f"{sc['ksmd_cpu_seconds']:.1f} s of {sc['seconds']:.0f} s", "",
                         f"{sc['ksmd_cpu_seconds'] / sc['seconds']:.1%} of a CPU", "",
                         f"two passes at {ks[-1]}: {settle:.0f} s" if settle is not None else ""))
    head = ("figure", "what", "ctxd (median / p99)", "ipykernel", "ratio", "goal", "met")
    widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*map(str, row)) for row in rows]
    return lines, goals
