"""The part of the E2B surface that runs inside a context (ctxd.e2b installs
its source there with a silent run; this file is never imported by the
client itself).

Charts must be extracted where the figure lives, in the context's Python.
The helper becomes the module `_ctxd_e2b` of that interpreter:

- a matplotlib backend (`module://_ctxd_e2b`, Agg underneath) whose show()
  displays each open figure as one result holding image/png and the E2B
  chart (application/vnd.e2b.chart+json), then closes it, as E2B's inline
  backend does; flush() does the same for figures a cell leaves open (the
  E2B surface calls it after each cell);
- pandas DataFrames get a _repr_mimebundle_ adding E2B's table form
  (application/vnd.e2b.data+json: column name -> list of values, dates in
  ISO 8601), patched when pandas is imported;
- PIL's Image.save(a path str) also displays the image and Image.show()
  displays it, as in E2B's sandbox, patched when PIL.Image is imported.

The chart model is E2B's (e2b_code_interpreter.charts): line, scatter, bar,
pie, box_and_whisker, superchart, unknown; 2D charts carry x/y labels, units,
ticks, tick labels and scales.
"""

HELPER_SRC = r'''
import base64, io, os, re, sys

_CHART_MIME = "application/vnd.e2b.chart+json"
_DATA_MIME = "application/vnd.e2b.data+json"
_POINTS_MAX = 100000  # points per chart (a bigger chart is cut)


def _unit(label):
    m = re.search(r"\(([^()]+)\)\s*$", label or "")
    return m.group(1) if m else None


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _is_date_axis(axis):
    conv = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
    return conv is not None and "date" in type(conv).__module__ + type(conv).__name__.lower()


def _value(v, dates):
    if dates:
        try:
            import matplotlib.dates as mdates
            return mdates.num2date(float(v)).isoformat()
        except Exception:
            pass
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return _num(v)


def _axis_info(ax, name):
    axis = ax.xaxis if name == "x" else ax.yaxis
    dates = _is_date_axis(axis)
    locs = list(axis.get_ticklocs())
    labels = [t.get_text() for t in axis.get_ticklabels()]
    ticks = [_value(t, dates) for t in locs]
    scale = "datetime" if dates else axis.get_scale()
    if scale == "linear" and labels and len(labels) == len(locs) and \
            all(float(t) == i for i, t in enumerate(locs)) and \
            any(l != str(i) for i, l in enumerate(labels)):
        scale = "categorical"
    return ticks, labels, scale, dates


def _base2d(ax, kind):
    xl, yl = ax.get_xlabel(), ax.get_ylabel()
    return {"type": kind, "title": ax.get_title() or None, "x_label": xl or None,
            "y_label": yl or None, "x_unit": _unit(xl), "y_unit": _unit(yl), "elements": []}


def _point_chart(ax, kind):
    c = _base2d(ax, kind)
    xt, xtl, xs, xd = _axis_info(ax, "x")
    yt, ytl, ys, yd = _axis_info(ax, "y")
    c.update(x_ticks=xt, x_tick_labels=xtl, x_scale=xs, y_ticks=yt, y_tick_labels=ytl,
             y_scale=ys)
    n = 0
    if kind == "line":
        for i, line in enumerate(_data_lines(ax)):
            label = line.get_label()
            if label.startswith("_child"):
                label = "Line %s" % label[6:]
            pts = []
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                if n >= _POINTS_MAX:
                    break
                pts.append((_value(x, xd), _value(y, yd)))
                n += 1
            c["elements"].append({"label": label, "points": pts})
    else:
        for coll in ax.collections:
            pts = []
            for x, y in coll.get_offsets():
                if n >= _POINTS_MAX:
                    break
                pts.append((_value(x, xd), _value(y, yd)))
                n += 1
            c["elements"].append({"label": coll.get_label(), "points": pts})
    return c


def _tick_label(locs, labels, pos):
    for loc, label in zip(locs, labels):
        if abs(float(loc) - pos) < 1e-9:
            return label
    return str(_num(pos))


def _bar_chart(ax):
    from matplotlib.container import BarContainer
    c = _base2d(ax, "bar")
    containers = [k for k in ax.containers if isinstance(k, BarContainer)]
    for k, cont in enumerate(containers):
        group = cont.get_label() or ""
        if group.startswith("_container"):
            group = "Group %s" % group[10:]
        rects = list(cont)
        horizontal = getattr(cont, "orientation", None) == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        locs = list(axis.get_ticklocs())
        labels = [t.get_text() for t in axis.get_ticklabels()]
        for r in rects:
            if horizontal:
                pos, value = r.get_y() + r.get_height() / 2, r.get_width()
            else:
                pos, value = r.get_x() + r.get_width() / 2, r.get_height()
            c["elements"].append({"label": _tick_label(locs, labels, pos), "group": group,
                                  "value": _num(value)})
    return c


def _angle(w):
    # E2B's rounding: the exact difference of the two angles, kept to
    # 8 - (its decimal exponent) significant digits, made positive
    from decimal import Decimal, localcontext
    d = Decimal(float(w.theta2)) - Decimal(float(w.theta1))
    d = Decimal(str(d))
    with localcontext() as lc:
        lc.prec = max(1, 8 - d.adjusted())
        return abs(float(+d))


def _pie_chart(ax):
    c = {"type": "pie", "title": ax.get_title() or None, "elements": []}
    for w in ax.patches:
        c["elements"].append({"label": w.get_label(), "angle": _angle(w),
                              "radius": _num(w.r)})
    return c


def _box_chart(ax):
    c = _base2d(ax, "box_and_whisker")
    verts = [p.get_path().vertices for p in ax.patches]
    spans = [(max(v[:, 0]) - min(v[:, 0]), max(v[:, 1]) - min(v[:, 1])) for v in verts]
    # boxes of one width side by side are vertical; of one height, horizontal
    vertical = len(verts) < 2 or len({round(w, 9) for w, _ in spans}) == 1
    axis = ax.xaxis if vertical else ax.yaxis
    locs = list(axis.get_ticklocs())
    labels = [t.get_text() for t in axis.get_ticklabels()]
    boxes = []
    for v in verts:
        xs, ys = [float(a) for a in v[:, 0]], [float(a) for a in v[:, 1]]
        if not vertical:
            xs, ys = ys, xs
        boxes.append({"x0": min(xs), "x1": max(xs), "q1": min(ys), "q3": max(ys)})
    out = []
    for b in boxes:
        e = {"label": _tick_label(locs, labels, (b["x0"] + b["x1"]) / 2),
             "min": b["q1"], "first_quartile": b["q1"], "median": None,
             "third_quartile": b["q3"], "max": b["q3"], "outliers": []}
        for line in ax.lines:
            xs = [float(a) for a in line.get_xdata()]
            ys = [float(a) for a in line.get_ydata()]
            if not vertical:
                xs, ys = ys, xs
            if not xs or not all(b["x0"] - 1e-9 <= x <= b["x1"] + 1e-9 for x in xs):
                continue
            if line.get_linestyle() in ("None", "none", " ", ""):
                e["outliers"].extend(ys)
            elif len(ys) == 2 and ys[0] == ys[1] and b["q1"] <= ys[0] <= b["q3"] and \
                    xs[0] != xs[1]:
                e["median"] = ys[0]
            elif len(xs) == 2 and xs[0] == xs[1]:
                lo, hi = min(ys), max(ys)
                if hi <= b["q1"]:
                    e["min"] = lo
                elif lo >= b["q3"]:
                    e["max"] = hi
        out.append(e)
    c["elements"] = out
    return c


def _is_grid(line):
    return line.get_gid() == "grid" or (len(line.get_xdata()) == 2 and
                                        getattr(line, "_ctxd_grid", False))


def _data_lines(ax):
    return [l for l in ax.lines if not _is_grid(l)]


def _kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    lines, colls, patches = _data_lines(ax), list(ax.collections), list(ax.patches)
    if lines and not colls and not patches:
        return "line"
    if patches and not colls and all(isinstance(p, PathPatch) for p in patches):
        return "box_and_whisker"
    if colls and not lines and not patches and all(isinstance(c, PathCollection) for c in colls):
        return "scatter"
    if patches and not lines and not colls and all(isinstance(p, Wedge) for p in patches):
        return "pie"
    if patches and not colls and all(isinstance(p, Rectangle) for p in patches) and \
            ax.containers:
        return "bar"
    return "unknown"


def _ax_chart(ax):
    kind = _kind(ax)
    if kind in ("line", "scatter"):
        return _point_chart(ax, kind)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return {"type": "unknown", "title": ax.get_title() or None, "elements": []}


def chart(fig):
    """E2B's chart of a drawn figure (a dict); None, as E2B, for a figure
    without axes or whose axes hold no data."""
    if not any(a.has_data() for a in fig.get_axes()):
        return None
    axes = [a for a in fig.get_axes() if a.get_visible()]
    if not axes:
        return None
    if len(axes) == 1:
        return _ax_chart(axes[0])
    sup = getattr(fig, "_suptitle", None)
    return {"type": "superchart", "title": sup.get_text() if sup is not None else None,
            "elements": [_ax_chart(a) for a in axes]}


class _Figure:
    """A figure as one display: its PNG and its chart."""

    def __init__(self, fig):
        self._fig = fig

    def __repr__(self):
        return repr(self._fig)

    def _repr_mimebundle_(self, include=None, exclude=None):
        buf = io.BytesIO()
        self._fig.savefig(buf, format="png", bbox_inches="tight")  # draws: ticks are final
        data = {"image/png": base64.b64encode(buf.getvalue()).decode("ascii")}
        try:
            ch = chart(self._fig)
        except Exception as e:
            sys.stderr.write("[ctxd.e2b: chart extraction failed: %s: %s]\n"
                             % (type(e).__name__, e))
            ch = None
        if ch is not None:
            data[_CHART_MIME] = ch
        return data


def flush():
    """Displays every open figure (PNG and chart) and closes it."""
    if "matplotlib.pyplot" not in sys.modules:
        return
    import matplotlib.pyplot as plt
    from matplotlib._pylab_helpers import Gcf
    for mgr in list(Gcf.get_all_fig_managers()):
        fig = mgr.canvas.figure
        try:
            display(_Figure(fig))
        finally:
            plt.close(fig)


# ---- the matplotlib backend: Agg, with show() = flush() ----
def _backend():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backend_bases import FigureManagerBase
    g = globals()
    g["FigureCanvas"] = FigureCanvasAgg
    g["FigureManager"] = FigureManagerBase


def __getattr__(name):
    # matplotlib looks the canvas up when it loads the backend: Agg's,
    # imported only then
    if name in ("FigureCanvas", "FigureManager"):
        _backend()
        return globals()[name]
    raise AttributeError(name)


def show(*args, **kwargs):
    flush()


# ---- pandas: E2B's table form ----
def _frame_bundle(self, include=None, exclude=None):
    import json
    try:
        cols = {str(c): json.loads(self[c].to_json(orient="values", date_format="iso"))
                for c in self.columns}
    except Exception:
        return {}
    return {_DATA_MIME: cols}


def _patch_pandas(mod):
    try:
        mod.DataFrame._repr_mimebundle_ = _frame_bundle
    except Exception:
        pass


# ---- PIL: Image.save(a path) also displays the image, as E2B's startup
# script does; Image.show() displays it (E2B has Pillow's IPython viewer)
def _patch_pil(mod):
    image = getattr(mod, "Image", None)
    if image is None or getattr(image.save, "_ctxd_e2b", False):
        return
    save, show = image.save, image.show

    def _save(self, fp, format=None, **params):
        if isinstance(fp, str):
            display(self)
        return save(self, fp, format, **params)

    def _show(self, title=None, **options):
        display(self)

    _save._ctxd_e2b = True
    _save.__doc__, _show.__doc__ = save.__doc__, show.__doc__
    image.save, image.show = _save, _show


_PATCHES = {"pandas": _patch_pandas, "PIL.Image": _patch_pil}


class _Finder:
    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None:
                inner = spec.loader
                if inner is not None and hasattr(inner, "exec_module"):
                    class _Loader:
                        def __getattr__(self, n):
                            return getattr(inner, n)
                        def create_module(self, s):
                            return inner.create_module(s)
                        def exec_module(self, module):
                            inner.exec_module(module)
                            patch(module)
                    spec.loader = _Loader()
                return spec
        return None


def after_cell():
    """Run after each cell: a backend chosen before the helper came (a
    respawned worker) is switched, then the open figures are shown."""
    if "matplotlib.pyplot" in sys.modules:
        install()
    flush()


def install():
    """Backend, pandas hook; idempotent."""
    os.environ["MPLBACKEND"] = "module://_ctxd_e2b"
    if "matplotlib" in sys.modules:
        _backend()
        if "matplotlib.pyplot" in sys.modules:
            import matplotlib.pyplot as plt
            try:
                if plt.get_backend() != "module://_ctxd_e2b":
                    flush()  # switching closes the open figures: show them first
                    plt.switch_backend("module://_ctxd_e2b")
            except Exception:
                pass
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(type(f).__name__ == "_Finder" and getattr(f, "_ctxd_e2b", False)
               for f in sys.meta_path):
        f = _Finder()
        f._ctxd_e2b = True
        sys.meta_path.insert(0, f)
'''

# Run by the E2B surface (silent) when a context is made or restarted, and
# when POST_CELL finds the helper missing (a worker that was respawned):
# makes the helper the module _ctxd_e2b and installs it, in a namespace of
# its own, so the context's globals are untouched.
_INSTALL = r'''
import sys as _s, types as _t
_m = _t.ModuleType("_ctxd_e2b")
_m.__dict__["display"] = display
exec(compile(HELPER_SRC, "<ctxd-e2b>", "exec"), _m.__dict__)
_s.modules["_ctxd_e2b"] = _m
_m.install()
'''

MISSING = "@@ctxd-e2b-missing@@"

# Queued (silent) behind each cell: shows the figures the cell left open;
# one expression, so nothing is bound in the context's globals.
POST_CELL = ("(lambda m: print(%r) if m is None else m.after_cell())"
             "(__import__('sys').modules.get('_ctxd_e2b'))" % MISSING)

INSTALL = "exec(%r, {'display': display})" % ("HELPER_SRC = " + repr(HELPER_SRC) + "\n" + _INSTALL)
