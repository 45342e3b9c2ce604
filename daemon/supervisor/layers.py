#!/usr/bin/python3
"""The supervisor's include graph as layers (daemon/supervisor/README.md),
and the daemon's part boundaries.

Each module is a sup_X.h with its sup_X.c; module A depends on B when A's
header or source includes sup_B.h. Prints each module's layer (0: includes
no other module; n: 1 + the highest layer it includes) and exits 1, naming
the modules, if the graph has a cycle. Also exits 1 when a part includes
what it must never touch: the supervisor a worker's header or Python, the
sandbox a worker's or the supervisor's header."""
import os
import re
import sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)))
mods = {}
for f in sorted(os.listdir(here)):
    m = re.fullmatch(r'(sup_\w+)\.[ch]', f)
    if not m:
        continue
    with open(os.path.join(here, f)) as fh:
        incs = re.findall(r'^#include "(sup_\w+)\.h"', fh.read(), re.M)
    mods.setdefault(m.group(1), set()).update(i for i in incs if i != m.group(1))
layer, state = {}, {}


def visit(m, path):
    if state.get(m) == 'done':
        return layer[m]
    if state.get(m) == 'open':
        sys.exit('cycle: ' + ' -> '.join(path[path.index(m):] + [m]))
    state[m] = 'open'
    deps = [d for d in mods[m] if d in mods]
    layer[m] = 1 + max((visit(d, path + [m]) for d in deps), default=-1)
    state[m] = 'done'
    return layer[m]


for m in mods:
    visit(m, [])
for n in range(max(layer.values()) + 1):
    print('layer %d: %s' % (n, ' '.join(sorted(m for m in layer if layer[m] == n))))

daemon = os.path.dirname(os.path.abspath(here))
forbidden = {
    'supervisor': re.compile(r'^#include [<"](wrk_\w+\.h|sbx\.h|Python\.h)[>"]', re.M),
    'sandbox': re.compile(r'^#include "(wrk_|sup_)\w+\.h"', re.M),
    'channel': re.compile(r'^#include "(wrk_|sup_|sbx)\w*\.h"', re.M),
}
bad = []
for part, rx in forbidden.items():
    d = os.path.join(daemon, part)
    for f in sorted(os.listdir(d)):
        if f.endswith(('.c', '.h')):
            with open(os.path.join(d, f)) as fh:
                bad += ['%s/%s includes %s' % (part, f, m.group(1)) for m in rx.finditer(fh.read())]
if bad:
    sys.exit('\n'.join(bad))
