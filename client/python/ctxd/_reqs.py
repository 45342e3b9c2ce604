"""Requirements a context can already import.

A compatibility surface asked for packages (mellea's python_tool(packages=
["matplotlib", "numpy"])) should not need a package source for what the
context's Python already has. Only the context knows what it can import (its
sys.path, its tier's view of the filesystem), so the check runs there: a
silent run, in a namespace of its own (the context's globals are untouched),
reads importlib.metadata and tests the version against the requirement's
specifiers. Only the rest goes to the daemon's pip.install.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from ._errors import ProtocolError

# Runs in the context. Prints one marked JSON line: for each requirement,
# the installed version when it satisfies the requirement and its top-level
# module can be found, else null.
_CHECK = r'''
import importlib.metadata as _md, importlib.util as _iu, json as _json, re as _re
def _vt(v):
    out = []
    for p in _re.split(r"[.+!-]", v):
        m = _re.match(r"\d+", p)
        out.append(int(m.group()) if m else -1)
        if not m:
            break
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return tuple(out)
def _ok(ver, spec):
    try:
        from packaging.specifiers import SpecifierSet
        return SpecifierSet(spec).contains(ver, prereleases=True)
    except ImportError:
        pass
    for s in filter(None, (x.strip() for x in spec.split(","))):
        m = _re.match(r"(===|==|!=|<=|>=|~=|<|>)\s*(\S+)$", s)
        if not m:
            return False
        op, want = m.groups()
        if want.endswith(".*"):
            pre = _vt(want[:-2])
            eq = _vt(ver)[:len(pre)] == pre
            if (op == "==" and not eq) or (op == "!=" and eq):
                return False
            continue
        a, b = _vt(ver), _vt(want)
        if op == "~=":
            pre = _vt(want)[:-1] if len(_vt(want)) > 1 else _vt(want)
            if not (a >= b and a[:len(pre)] == pre):
                return False
        elif not {"==": a == b, "===": ver == want, "!=": a != b, "<=": a <= b,
                  ">=": a >= b, "<": a < b, ">": a > b}[op]:
            return False
    return True
def _top(dist, name):
    try:
        t = (dist.read_text("top_level.txt") or "").split()
    except Exception:
        t = []
    return t or [name.replace("-", "_")]
def _one(req):
    m = _re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$", req)
    if not m:
        return None
    name, spec = m.group(1), m.group(3).strip()
    try:
        dist = _md.distribution(name)
    except _md.PackageNotFoundError:
        return None
    ver = dist.version
    if spec and not _ok(ver, spec):
        return None
    if not any(_iu.find_spec(t) is not None for t in _top(dist, name) if t.isidentifier()):
        return None
    return ver
print("@@ctxd-reqs@@ " + _json.dumps([_one(r) for r in REQS]))
'''

_MARK = "@@ctxd-reqs@@ "


def present(client: Any, ctx: str, reqs: List[str], timeout: float = 60) -> List[Any]:
    """For each requirement, the version the context ctx already imports when
    it satisfies the requirement, else None (a silent run in ctx)."""
    if not reqs:
        return []
    src = "REQS = " + repr([str(r) for r in reqs]) + "\n" + _CHECK
    res = client.execute(f"exec({src!r}, {{}})", ctx, silent=True, timeout=timeout)
    return _parse(res, len(reqs))


def _parse(res: Any, n: int) -> List[Any]:
    """The check's answer from its run's stdout."""
    if res.status != "ok":
        raise ProtocolError(f"the requirement check failed in the context: "
                            f"{res.error or res.cause or res.status}")
    for line in res.stdout.splitlines():
        if line.startswith(_MARK):
            got = json.loads(line[len(_MARK):])
            if isinstance(got, list) and len(got) == n:
                return got
    raise ProtocolError("the requirement check printed no answer")


def split(reqs: List[str], versions: List[Any]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The report entries for requirements already present, and the rest."""
    have = [{"name": r, "cached": True, "present": v} for r, v in zip(reqs, versions) if v]
    missing = [r for r, v in zip(reqs, versions) if not v]
    return have, missing


def install(client: Any, ctx: str, reqs: List[str],
            probe: Optional[str] = None) -> List[Dict[str, Any]]:
    """Installs into ctx what it cannot already import. Returns one entry per
    requirement: {"name", "cached", "present": the version found in the
    context} for those already there (pip did not run), then the daemon's
    pip.install entries for the rest. probe: the context to check in when
    not ctx itself (one like it whose policy lets the check import what it
    needs). Raises RefusedError as pip_install."""
    have, missing = split(reqs, present(client, probe or ctx, reqs))
    if missing:
        have = have + client.pip_install(missing, ctx)
    return have


async def install_async(client: Any, ctx: str, reqs: List[str]) -> List[Dict[str, Any]]:
    """install() over an AsyncClient."""
    if not reqs:
        return []
    src = "REQS = " + repr([str(r) for r in reqs]) + "\n" + _CHECK
    res = await client.execute(f"exec({src!r}, {{}})", ctx, silent=True, timeout=60)
    have, missing = split(reqs, _parse(res, len(reqs)))
    if missing:
        have = have + await client.pip_install(missing, ctx)
    return have
