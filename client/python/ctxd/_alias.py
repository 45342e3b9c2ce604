"""Module aliases for ctxd's peer surfaces, in the manner of
pymysql.install_as_MySQLdb(): after install(), importing a peer's module
names (the package and the submodules its users import from) gives modules
that hold the surface's public names, so the peer's code runs unchanged.

Each alias is a module of its own (so `import e2b.exceptions` binds
attributes down the dotted path) whose public names are the surface's;
other names are looked up on the surface when asked for.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Iterable


def _alias(name: str, surface: types.ModuleType, package: bool) -> types.ModuleType:
    """A module called name holding surface's public names."""
    mod = types.ModuleType(name, surface.__doc__)
    public = list(getattr(surface, "__all__", []))
    for n in public:
        setattr(mod, n, getattr(surface, n))
    mod.__all__ = public  # type: ignore[attr-defined]
    mod.__ctxd_alias_of__ = surface.__name__  # type: ignore[attr-defined]

    def __getattr__(attr: str):  # noqa: N807 (PEP 562)
        try:
            return getattr(surface, attr)
        except AttributeError:
            raise AttributeError(f"module {name!r} (ctxd's {surface.__name__}) has no "
                                 f"attribute {attr!r}") from None

    mod.__getattr__ = __getattr__  # type: ignore[attr-defined]
    if package:
        mod.__path__ = []  # type: ignore[attr-defined]
    return mod


def _parent(name: str) -> types.ModuleType:
    """The real package called name when it can be imported, else an empty
    package of that name."""
    mod = sys.modules.get(name)
    if mod is not None and not hasattr(mod, "__ctxd_alias_of__"):
        return mod
    try:
        return importlib.import_module(name)
    except ImportError:
        mod = types.ModuleType(name)
        mod.__path__ = []  # type: ignore[attr-defined]
        return mod


def install(surface: types.ModuleType, names: Iterable[str],
            real_parents: bool = False) -> None:
    """Puts an alias of surface in sys.modules under each dotted name and
    binds each child to its parent, so `import a.b` and `from a.b import X`
    both resolve to the surface. A name's parents not listed are aliases
    too, or with real_parents the real packages when they import (else
    empty packages), so a peer installed beside ctxd keeps its other
    modules. Idempotent; aliases replace whatever held those names before."""
    names = list(names)
    wanted = set()
    for n in names:
        parts = n.split(".")
        for i in range(1, len(parts) + 1):
            wanted.add(".".join(parts[:i]))
    parents = {n.rsplit(".", 1)[0] for n in wanted if "." in n}
    made = {}
    for n in sorted(wanted, key=lambda s: s.count(".")):
        if real_parents and n not in names:
            made[n] = _parent(n)
        else:
            made[n] = _alias(n, surface, n in parents)
        sys.modules[n] = made[n]
    for n, mod in made.items():
        if "." in n:
            parent, child = n.rsplit(".", 1)
            setattr(made[parent], child, mod)
