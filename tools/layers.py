#!/usr/bin/python3
"""The architecture's rules, checked from the code's own #include lines.

    /usr/bin/python3 tools/layers.py [--check] [ROOT]

A unit is a .c file with its header of the same name (sup_ctx.c + sup_ctx.h).
Unit A uses unit B when A's .c or .h includes B's header; with one header per
concept a file can call only what it includes, so these edges are the calls
between units (callbacks set at init excepted, and they are the point).

Prints each program's units as layers, lowest first (a unit's layer is one
above the highest unit it uses), and with --check exits 1 when a rule breaks:

- no circle of units in any folder (the supervisor reads loop -> contexts ->
  requests, never back);
- daemon/sandbox includes no worker or supervisor header (it knows nothing of
  runs or frames);
- daemon/supervisor includes no worker header, never Python.h and never
  sbx.h (the sandbox's Python-side steps): it never links libpython;
- daemon/worker includes no supervisor header (it knows the channel, not the
  supervisor);
- what the supervisor and the worker share lives in daemon/channel or proto/
  (or daemon/sandbox's ctxd_confine: sbx_cgroup, sbx_path, sbx_schema).
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

# folder -> folders whose headers it must never include, and headers (its
# own project's or the system's) it must never include.
RULES = {
    "daemon/sandbox": ({"daemon/worker", "daemon/supervisor"}, set()),
    "daemon/supervisor": ({"daemon/worker"}, {"Python.h", "sbx.h"}),
    "daemon/worker": ({"daemon/supervisor"}, set()),
    "daemon/channel": ({"daemon/worker", "daemon/supervisor", "daemon/sandbox"},
                       {"Python.h"}),
    # ctxd-router speaks the protocol to both sides: nothing of either daemon
    "daemon/router": ({"daemon/worker", "daemon/supervisor", "daemon/sandbox",
                       "daemon/channel"}, {"Python.h", "sbx.h"}),
    # the ZAP handler both daemons run: libzmq only
    "daemon/zap": ({"daemon/worker", "daemon/supervisor", "daemon/sandbox",
                    "daemon/channel", "daemon/router"}, {"Python.h", "sbx.h"}),
}
FOLDERS = ["proto", "daemon/channel", "daemon/zap", "daemon/sandbox", "daemon/supervisor",
           "daemon/worker", "daemon/router", "client", "tools/ctx"]


def scan(root):
    """Each source file's folder, unit name and includes."""
    files = {}
    for folder in FOLDERS:
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h")):
                continue
            with open(os.path.join(d, name), encoding="utf-8") as f:
                text = f.read()
            files[f"{folder}/{name}"] = INCLUDE.findall(text)
    return files


def units_of(files):
    """Headers by base name -> their folder; each file's unit key."""
    headers = {}
    for path in files:
        if path.endswith(".h"):
            headers.setdefault(os.path.basename(path), path)
    return headers


def unit(path):
    return path[:-2]


def graph(files, headers):
    """Unit edges (within the project) and rule breaks."""
    edges = {}
    breaks = []
    for path, incs in files.items():
        folder = os.path.dirname(path)
        u = unit(path)
        edges.setdefault(u, set())
        banned_dirs, banned_sys = RULES.get(folder, (set(), set()))
        for kind, inc in incs:
            base = os.path.basename(inc)
            if base in banned_sys:
                breaks.append(f"{path} includes {inc}")
            if kind == "<":
                continue
            target = headers.get(base)
            if target is None:
                continue
            if os.path.dirname(target) in banned_dirs:
                breaks.append(f"{path} includes {target}")
            if unit(target) != u:
                edges[u].add(unit(target))
    return edges, breaks


def circles(edges):
    """Strongly connected components of more than one unit (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layers(edges, members):
    """Each unit's layer: 0 when it uses nothing among members."""
    memo = {}

    def depth(v, seen):
        if v in memo:
            return memo[v]
        if v in seen:
            return 0
        seen = seen | {v}
        d = 0
        for w in edges.get(v, ()):
            if w in members:
                d = max(d, depth(w, seen) + 1)
        memo[v] = d
        return d

    return {v: depth(v, frozenset()) for v in members}


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "..")
    files = scan(root)
    headers = units_of(files)
    edges, breaks = graph(files, headers)
    bad = circles(edges)
    for folder in FOLDERS:
        members = {u for u in edges if os.path.dirname(u) == folder}
        if not members:
            continue
        lay = layers(edges, members)
        print(f"{folder}:")
        for n in range(max(lay.values()) + 1):
            names = sorted(os.path.basename(u) for u in members if lay[u] == n)
            print(f"  {n:2}  {' '.join(names)}")
    for comp in bad:
        print("circle: " + " -> ".join(comp))
    for b in breaks:
        print("rule broken: " + b)
    if not bad and not breaks:
        print("no circle, no rule broken")
    return 1 if check and (bad or breaks) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
