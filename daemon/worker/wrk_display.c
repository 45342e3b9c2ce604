/* wrk_display: rich output of runs (PROTOCOL.md section 5, `result`,
 * `display`, `clear_output`). A private Python helper builds MIME bundles
 * (text/plain plus what the object offers), provides the display(),
 * update_display() and clear_output() builtins, routes IPython.display
 * there when IPython is installed, and sends the matplotlib figures a run
 * leaves open (and those plt.show() is called for) as image/png. The C half
 * encodes those events as channel frames, sent in order with the run's
 * output. */
#include "wrk_display.h"

#include <stdint.h>

#include "mem.h"
#include "wrk_input.h"
#include "wrk_output.h"
#include "wrk_py.h"

/* Frames stay far below PROTO_MAX_FRAME (20 MiB); the helper keeps each
 * bundle under BUNDLE_MAX bytes and metadata is cut at these limits. */
#define META_MAX_DEPTH 8
#define META_MAX_ITEMS 256

static const char rich_src[] =
    "import base64, io, json, os, sys, uuid\n"
    "\n"
    "_emit_display = _emit_clear = None  # set by the worker\n"
    "_ENTRY_MAX = 8 * 1024 * 1024  # bytes, as encoded on the wire\n"
    "_BUNDLE_MAX = 16 * 1024 * 1024\n"
    "_REPRS = (('text/html', '_repr_html_'), ('text/markdown', '_repr_markdown_'),\n"
    "          ('image/svg+xml', '_repr_svg_'), ('image/png', '_repr_png_'),\n"
    "          ('image/jpeg', '_repr_jpeg_'), ('text/latex', '_repr_latex_'),\n"
    "          ('application/json', '_repr_json_'))\n"
    "_TEXTUAL = ('text/', 'image/svg+xml')\n"
    "\n"
    "def _warn(what, e):\n"
    "    try:\n"
    "        sys.stderr.write('[ctxd: %s failed: %s: %s]\\n' % (what, type(e).__name__, e))\n"
    "    except BaseException:\n"
    "        pass\n"
    "\n"
    /* Binary formats travel base64-encoded (as in Jupyter); JSON as its
     * text; anything else as str(). */
    "def _enc(mime, v):\n"
    "    if v is None:\n"
    "        return None\n"
    "    if isinstance(v, (bytes, bytearray, memoryview)):\n"
    "        if mime.startswith(_TEXTUAL):\n"
    "            return bytes(v).decode('utf-8', 'replace')\n"
    "        return base64.b64encode(v).decode('ascii')\n"
    "    if isinstance(v, str):\n"
    "        if not mime.startswith(_TEXTUAL) and not mime.endswith('json'):\n"
    "            return ''.join(v.split())  # base64 without line breaks\n"
    "        return v\n"
    "    if mime == 'application/json' or mime.endswith('+json'):\n"
    "        return json.dumps(v, default=str)\n"
    "    return str(v)\n"
    "\n"
    /* Like IPython: looked up on instances only, never on classes, and a
     * __getattr__ that answers every name does not count. */
    "def _method(obj, name):\n"
    "    if isinstance(obj, type):\n"
    "        return None\n"
    "    try:\n"
    "        m = getattr(obj, name, None)\n"
    "        if m is not None and getattr(obj, '_ctxd_no_such_method_', None) is not None:\n"
    "            return None\n"
    "    except Exception:\n"
    "        return None\n"
    "    return m if callable(m) else None\n"
    "\n"
    "def _add(data, md, mime, v):\n"
    "    if isinstance(v, tuple) and len(v) == 2:\n"
    "        v, m = v\n"
    "        if isinstance(m, dict) and m:\n"
    "            md[mime] = m\n"
    "    s = _enc(mime, v)\n"
    "    if s is not None:\n"
    "        data[mime] = s\n"
    "\n"
    "def _wanted(mime, include, exclude):\n"
    "    return (include is None or mime in include) and (exclude is None or mime not in exclude)\n"
    "\n"
    /* (data, metadata): data maps MIME type to str, text/plain first. */
    "def bundle(obj, include=None, exclude=None, plain=repr):\n"
    "    plain = plain(obj)\n"
    "    data, md = {}, {}\n"
    "    if _is_figure(obj) and _wanted('image/png', include, exclude):\n"
    "        try:\n"
    "            png, w, h = _figure_png(obj)\n"
    "            data['image/png'] = base64.b64encode(png).decode('ascii')\n"
    "            md['image/png'] = {'width': w, 'height': h}\n"
    "        except Exception as e:\n"
    "            _warn('drawing the figure', e)\n"
    "    m = _method(obj, '_repr_mimebundle_')\n"
    "    if m is not None:\n"
    "        try:\n"
    "            r = m(include=include, exclude=exclude)\n"
    "            if isinstance(r, tuple) and len(r) == 2:\n"
    "                r, rmd = r\n"
    "                if isinstance(rmd, dict):\n"
    "                    md.update(rmd)\n"
    "            if isinstance(r, dict):\n"
    "                for k, v in r.items():\n"
    "                    _add(data, md, str(k), v)\n"
    "        except Exception as e:\n"
    "            _warn('_repr_mimebundle_', e)\n"
    "    for mime, name in _REPRS:\n"
    "        if mime in data or not _wanted(mime, include, exclude):\n"
    "            continue\n"
    "        m = _method(obj, name)\n"
    "        if m is None:\n"
    "            continue\n"
    "        try:\n"
    "            _add(data, md, mime, m())\n"
    "        except Exception as e:\n"
    "            _warn(name, e)\n"
    "    data.pop('text/plain', None)\n"
    "    return _cap(plain, data), md\n"
    "\n"
    "def _size(s):\n"
    "    return len(s) if s.isascii() else len(s.encode('utf-8', 'backslashreplace'))\n"
    "\n"
    /* Sizes in encoded bytes, so a frame stays under the channel's limit. */
    "def _cap(plain, data):\n"
    "    if _size(plain) > _ENTRY_MAX:\n"
    "        b = plain.encode('utf-8', 'backslashreplace')[:_ENTRY_MAX - 64]\n"
    "        plain = b.decode('utf-8', 'ignore') + '... [truncated]'\n"
    "    out = {'text/plain': plain}\n"
    "    total = _size(plain)\n"
    "    for k, v in data.items():\n"
    "        k = k[:200]\n"
    "        vn = _size(v)\n"
    "        n = _size(k) + vn\n"
    "        if len(out) >= 64 or vn > _ENTRY_MAX or total + n > _BUNDLE_MAX:\n"
    "            _warn('display of %s' % k, ValueError('%d bytes: over the size limit, left out' % "
    "vn))\n"
    "            continue\n"
    "        out[k] = v\n"
    "        total += n\n"
    "    return out\n"
    "\n"
    /* plain: repr, or IPython's pretty printer for IPython syntax. */
    "def result(value, plain=repr):\n"
    "    return bundle(value, plain=plain)[0]\n"
    "\n"
    "class DisplayHandle:\n"
    "    def __init__(self, display_id=None):\n"
    "        self.display_id = display_id or uuid.uuid4().hex\n"
    "    def __repr__(self):\n"
    "        return '<DisplayHandle display_id=%s>' % self.display_id\n"
    "    def display(self, obj, **kw):\n"
    "        display(obj, display_id=self.display_id, **kw)\n"
    "    def update(self, obj, **kw):\n"
    "        update_display(obj, display_id=self.display_id, **kw)\n"
    "\n"
    "def display(*objs, include=None, exclude=None, metadata=None, transient=None,\n"
    "            display_id=None, raw=False, clear=False, update=False, **kw):\n"
    "    if display_id is True:\n"
    "        display_id = uuid.uuid4().hex\n"
    "    if isinstance(transient, dict) and display_id is None:\n"
    "        display_id = transient.get('display_id')\n"
    "    if display_id is not None:\n"
    "        display_id = str(display_id)\n"
    "    if clear:\n"
    "        clear_output(wait=True)\n"
    "    for obj in objs:\n"
    "        if raw:\n"
    "            data, md = {}, {}\n"
    "            for k, v in dict(obj).items():\n"
    "                _add(data, md, str(k), v)\n"
    "            plain = data.pop('text/plain', '')\n"
    "            data = _cap(plain, data)\n"
    "        else:\n"
    "            data, md = bundle(obj, include, exclude)\n"
    "        if isinstance(metadata, dict):\n"
    "            md.update(metadata)\n"
    "        _emit_display(data, md, display_id, bool(update))\n"
    "    if display_id is not None and not update:\n"
    "        return DisplayHandle(display_id)\n"
    "\n"
    "def update_display(obj, *, display_id, **kw):\n"
    "    kw['update'] = True\n"
    "    display(obj, display_id=display_id, **kw)\n"
    "\n"
    "def clear_output(wait=False):\n"
    "    _emit_clear(bool(wait))\n"
    "\n"
    "def publish_display_data(data, metadata=None, source=None, *, transient=None, **kw):\n"
    "    display(data, raw=True, metadata=metadata, transient=transient, **kw)\n"
    "\n"
    /* ---- matplotlib ---- */
    "def figures_enabled():\n"
    "    return os.environ.get('CTXD_FIGURES', '1') != '0'\n"
    "\n"
    /* A matplotlib Figure shown as a value (or displayed) is its image, as
     * in Jupyter. */
    "def _is_figure(obj):\n"
    "    if 'matplotlib.figure' not in sys.modules:\n"
    "        return False\n"
    "    return isinstance(obj, sys.modules['matplotlib.figure'].Figure)\n"
    "\n"
    "def _figure_png(fig):\n"
    "    buf = io.BytesIO()\n"
    "    fig.savefig(buf, format='png', bbox_inches='tight')\n"
    "    png = buf.getvalue()\n"
    "    return png, int.from_bytes(png[16:20], 'big'), int.from_bytes(png[20:24], 'big')\n"
    "\n"
    "def flush_figures():\n"
    "    if 'matplotlib.pyplot' not in sys.modules:\n"
    "        return\n"
    "    try:\n"
    "        from matplotlib._pylab_helpers import Gcf\n"
    "        import matplotlib.pyplot as plt\n"
    "        managers = Gcf.get_all_fig_managers()\n"
    "    except Exception as e:\n"
    "        _warn('sending figures', e)\n"
    "        return\n"
    "    for mgr in managers:\n"
    "        fig = mgr.canvas.figure\n"
    "        try:\n"
    "            png, w, h = _figure_png(fig)\n"
    "            data = _cap(repr(fig), {'image/png': base64.b64encode(png).decode('ascii')})\n"
    "            _emit_display(data, {'image/png': {'width': w, 'height': h}}, None, False)\n"
    "        except Exception as e:\n"
    "            _warn('drawing figure %s' % mgr.num, e)\n"
    "        finally:\n"
    "            try:\n"
    "                plt.close(fig)\n"
    "            except Exception:\n"
    "                pass\n"
    "\n"
    "def end_run(silent):\n"
    "    if silent or 'matplotlib.pyplot' not in sys.modules or not figures_enabled():\n"
    "        return\n"
    "    try:\n"
    "        flush_figures()\n"
    "    except BaseException as e:\n"
    "        _warn('sending figures', e)\n"
    "\n"
    "def _patch_pyplot(plt):\n"
    "    orig = plt.show\n"
    "    def show(*args, **kwargs):\n"
    "        if figures_enabled():\n"
    "            flush_figures()\n"
    "        else:\n"
    "            return orig(*args, **kwargs)\n"
    "    show.__doc__ = orig.__doc__\n"
    "    show.__wrapped__ = orig\n"
    "    plt.show = show\n"
    "\n"
    /* input() and getpass() ask the client (_input, _getpass: wrk_input.c). */
    "def _patch_getpass(mod):\n"
    "    mod.getpass = _getpass\n"
    "\n"
    "def _patch_ipython(mod):\n"
    "    for name in ('display', 'update_display', 'clear_output', 'publish_display_data'):\n"
    "        if hasattr(mod, name):\n"
    "            setattr(mod, name, globals()[name])\n"
    "    if hasattr(mod, 'DisplayHandle'):\n"
    "        mod.DisplayHandle = DisplayHandle\n"
    "\n"
    "_PATCHES = {'matplotlib.pyplot': _patch_pyplot,\n"
    "            'IPython.core.display_functions': _patch_ipython,\n"
    "            'IPython.core.display': _patch_ipython,\n"
    "            'getpass': _patch_getpass}\n"
    "\n"
    "class _Loader:\n"
    "    def __init__(self, inner, patch):\n"
    "        self._inner, self._patch = inner, patch\n"
    "    def __getattr__(self, name):\n"
    "        return getattr(self._inner, name)\n"
    "    def create_module(self, spec):\n"
    "        return self._inner.create_module(spec)\n"
    "    def exec_module(self, module):\n"
    "        self._inner.exec_module(module)\n"
    "        try:\n"
    "            self._patch(module)\n"
    "        except Exception as e:\n"
    "            _warn('patching ' + module.__name__, e)\n"
    "\n"
    /* Patches the modules above right after they are first executed (the
     * spec is found by the other finders; only its loader is wrapped). */
    "class _Finder:\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name == 'matplotlib' and 'MPLBACKEND' not in os.environ:\n"
    "            os.environ['MPLBACKEND'] = 'Agg'  # an environment without the daemon's\n"
    "        patch = _PATCHES.get(name)\n"
    "        if patch is None:\n"
    "            return None\n"
    "        for f in sys.meta_path:\n"
    "            if f is self or not hasattr(f, 'find_spec'):\n"
    "                continue\n"
    "            spec = f.find_spec(name, path, target)\n"
    "            if spec is not None:\n"
    "                if spec.loader is not None and hasattr(spec.loader, 'exec_module'):\n"
    "                    spec.loader = _Loader(spec.loader, patch)\n"
    "                return spec\n"
    "        return None\n"
    "\n"
    /* ---- artifacts: files created or changed in the cwd during a run ---- */
    "_SCAN_MAX = 10000\n"
    "_SCAN_SECONDS = 0.2\n"
    "_ARTIFACTS_MAX = 1000\n"
    "_SKIP_DIRS = ('__pycache__', '.git', '.ipynb_checkpoints')\n"
    "\n"
    "def scan(root=None):\n"
    "    import time\n"
    "    try:\n"
    "        root = root or os.getcwd()\n"
    "    except OSError:\n"
    "        return None\n"
    /* complete: the directories listed whole; only files in those can be
     * called new after a scan that stopped early. */
    "    files, complete = {}, set()\n"
    "    t0 = time.monotonic()\n"
    "    for top, dirs, names in os.walk(root):\n"
    "        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)\n"
    "        for name in sorted(names):\n"
    "            if len(files) >= _SCAN_MAX or time.monotonic() - t0 > _SCAN_SECONDS:\n"
    "                return root, files, complete\n"
    "            p = os.path.join(top, name)\n"
    "            try:\n"
    "                st = os.lstat(p)\n"
    "            except OSError:\n"
    "                continue\n"
    "            if (st.st_mode & 0o170000) == 0o100000:\n"
    "                files[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, st.st_ino)\n"
    "        complete.add(os.path.relpath(top, root))\n"
    "    return root, files, None\n"
    "\n"
    "def artifacts(before):\n"
    "    if before is None:\n"
    "        return []\n"
    "    import mimetypes\n"
    "    root, old, complete = before\n"
    "    after = scan(root)\n"
    "    out = []\n"
    "    for path, sig in (after[1] if after else {}).items():\n"
    "        if path not in old and complete is not None and \\\n"
    "                (os.path.dirname(path) or '.') not in complete:\n"
    "            continue  # its directory was not listed before the run\n"
    "        if old.get(path) != sig:\n"
    "            t = mimetypes.guess_type(path)[0] or 'application/octet-stream'\n"
    "            out.append((path, sig[0], t))\n"
    "            if len(out) >= _ARTIFACTS_MAX:\n"
    "                break\n"
    "    return out\n"
    "\n"
    "def add_patch(name, patch):\n"
    "    _PATCHES[name] = patch\n"
    "    if name in sys.modules:\n"
    "        patch(sys.modules[name])\n"
    "\n"
    "def install():\n"
    "    import builtins\n"
    "    builtins.display = display\n"
    "    builtins.update_display = update_display\n"
    "    builtins.clear_output = clear_output\n"
    "    builtins.input = _input\n"
    "    sys.meta_path.insert(0, _Finder())\n"
    "    for name, patch in _PATCHES.items():\n"
    "        if name in sys.modules:\n"
    "            patch(sys.modules[name])\n";

/* ---- Python objects -> msgpack (metadata) ---------------------------------- */

static void put_pyobj(proto_buf *b, PyObject *o, int depth, uint32_t *budget);

static void put_pystr_lossy(proto_buf *b, PyObject *s)
{
    PyObject *bytes = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
    if (!bytes) {
        PyErr_Clear();
        proto_put_str(b, "");
        return;
    }
    proto_put_strn(b, PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
    Py_DECREF(bytes);
}

static void put_as_str(proto_buf *b, PyObject *o)
{
    PyObject *s = PyObject_Str(o);
    if (!s) {
        PyErr_Clear();
        proto_put_str(b, "");
        return;
    }
    put_pystr_lossy(b, s);
    Py_DECREF(s);
}

/* JSON-like values are encoded as such; anything else (and what is deeper
 * or longer than the limits) as its str(). */
static void put_pyobj(proto_buf *b, PyObject *o, int depth, uint32_t *budget)
{
    if (o == Py_None) {
        proto_put_nil(b);
    } else if (PyBool_Check(o)) {
        proto_put_bool(b, o == Py_True);
    } else if (PyLong_Check(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            put_as_str(b, o);
        } else {
            proto_put_int(b, v);
        }
    } else if (PyFloat_Check(o)) {
        proto_put_double(b, PyFloat_AS_DOUBLE(o));
    } else if (PyUnicode_Check(o)) {
        put_pystr_lossy(b, o);
    } else if (PyDict_Check(o) && depth < META_MAX_DEPTH &&
               PyDict_GET_SIZE(o) <= (Py_ssize_t)*budget) {
        *budget -= (uint32_t)PyDict_GET_SIZE(o);
        proto_put_map(b, (uint32_t)PyDict_GET_SIZE(o));
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (PyUnicode_Check(k))
                put_pystr_lossy(b, k);
            else
                put_as_str(b, k);
            put_pyobj(b, v, depth + 1, budget);
        }
    } else if ((PyList_Check(o) || PyTuple_Check(o)) && depth < META_MAX_DEPTH &&
               PySequence_Fast_GET_SIZE(o) <= (Py_ssize_t)*budget) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        *budget -= (uint32_t)n;
        proto_put_array(b, (uint32_t)n);
        for (Py_ssize_t i = 0; i < n; i++)
            put_pyobj(b, PySequence_Fast_GET_ITEM(o, i), depth + 1, budget);
    } else {
        put_as_str(b, o);
    }
}

/* Queries (wrk_query.c) answer with plain dicts: the same encoder, so the
 * supervisor gets the same JSON-like subset. */
void wrk_display_put_pyobj(proto_buf *b, PyObject *o, uint32_t budget)
{
    put_pyobj(b, o, 0, &budget);
}

/* ---- the emitters ------------------------------------------------------------ */

/* Where display frames go instead of the channel while a run's tail is
 * built (wrk_display_collect); NULL: sent at once. */
static proto_buf *collecting;

void wrk_display_collect(proto_buf *tail)
{
    collecting = tail;
}

static void send_frames(proto_buf *b)
{
    if (collecting) {
        proto_buf_append(collecting, b->data, b->len);
        proto_buf_free(b);
        return;
    }
    PyThreadState *ts = PyEval_SaveThread();
    wrk_output_send_frames(b);
    PyEval_RestoreThread(ts);
    proto_buf_free(b);
}

/* _emit_display(data: dict str->str, metadata: dict, display_id: str|None,
 * update: bool) */
static PyObject *emit_display(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *data, *md, *id;
    int update;
    if (!PyArg_ParseTuple(args, "O!O!Op", &PyDict_Type, &data, &PyDict_Type, &md, &id, &update))
        return NULL;
    if (id != Py_None && !PyUnicode_Check(id))
        return PyErr_Format(PyExc_TypeError, "display_id must be a str");
    if (PyDict_GET_SIZE(data) > 64 || PyDict_GET_SIZE(md) > 64)
        return PyErr_Format(PyExc_ValueError, "at most 64 MIME types per display");
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(data, &pos, &k, &v))
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v))
            return PyErr_Format(PyExc_TypeError, "display data must map str to str");
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_map m = proto_map_open(&b);
    proto_key(&b, &m, "t");
    proto_put_str(&b, "display");
    proto_key(&b, &m, "data");
    proto_put_map(&b, (uint32_t)PyDict_GET_SIZE(data));
    pos = 0;
    while (PyDict_Next(data, &pos, &k, &v)) {
        put_pystr_lossy(&b, k);
        put_pystr_lossy(&b, v);
    }
    proto_key(&b, &m, "metadata");
    uint32_t budget = META_MAX_ITEMS;
    put_pyobj(&b, md, 0, &budget);
    if (id != Py_None) {
        proto_key(&b, &m, "display_id");
        put_pystr_lossy(&b, id);
    }
    proto_key(&b, &m, "update");
    proto_put_bool(&b, update);
    proto_map_close(&b, &m);
    proto_frame_end(&b, start);
    send_frames(&b);
    Py_RETURN_NONE;
}

/* _emit_clear(wait: bool) */
static PyObject *emit_clear(PyObject *self, PyObject *args)
{
    (void)self;
    int wait;
    if (!PyArg_ParseTuple(args, "p", &wait))
        return NULL;
    proto_buf b;
    proto_buf_init(&b);
    size_t start = proto_frame_begin(&b);
    proto_put_map(&b, 2);
    proto_put_str(&b, "t");
    proto_put_str(&b, "clear_output");
    proto_put_str(&b, "wait");
    proto_put_bool(&b, wait);
    proto_frame_end(&b, start);
    send_frames(&b);
    Py_RETURN_NONE;
}

static PyMethodDef emit_methods[] = {
    {"_emit_display", emit_display, METH_VARARGS, NULL},
    {"_emit_clear", emit_clear, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyObject *rich_mod;

PyObject *wrk_display_scan(void)
{
    PyObject *r = rich_mod ? PyObject_CallMethod(rich_mod, "scan", NULL) : NULL;
    if (!r) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return r;
}

size_t wrk_display_put_artifacts(proto_buf *b, PyObject *snap)
{
    PyObject *list = rich_mod && snap && snap != Py_None
                         ? PyObject_CallMethod(rich_mod, "artifacts", "(O)", snap)
                         : NULL;
    if (!list || !PyList_Check(list)) {
        PyErr_Clear();
        Py_XDECREF(list);
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0) {
        Py_DECREF(list);
        return 0;
    }
    proto_put_array(b, (uint32_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(list, i);
        PyObject *path = PyTuple_GET_ITEM(t, 0), *size = PyTuple_GET_ITEM(t, 1);
        proto_put_map(b, 3);
        proto_put_str(b, "path");
        put_pystr_lossy(b, path);
        proto_put_str(b, "size");
        unsigned long long sz = PyLong_AsUnsignedLongLong(size);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            sz = 0;
        }
        proto_put_uint(b, sz);
        proto_put_str(b, "type");
        put_pystr_lossy(b, PyTuple_GET_ITEM(t, 2));
    }
    Py_DECREF(list);
    return (size_t)n + 1;
}

int wrk_display_patch_module(const char *name, PyObject *patch)
{
    PyObject *r =
        rich_mod && name ? PyObject_CallMethod(rich_mod, "add_patch", "(sO)", name, patch) : NULL;
    if (!rich_mod)
        PyErr_SetString(PyExc_RuntimeError, "wrk_display not initialised");
    Py_XDECREF(r);
    return r ? 0 : -1;
}

int wrk_display_init(void)
{
    PyObject *mod = wrk_py_private_module("_ctxd_rich", rich_src, "<ctxd-worker>");
    if (!mod)
        return -1;
    PyObject *d = PyModule_GetDict(mod);
    PyObject *r;
    for (PyMethodDef *m = emit_methods; m->ml_name; m++) {
        PyObject *f = PyCFunction_New(m, NULL);
        if (!f || PyDict_SetItemString(d, m->ml_name, f) < 0) {
            Py_XDECREF(f);
            goto fail;
        }
        Py_DECREF(f);
    }
    for (int i = 0; i < 2; i++) {
        PyObject *in = wrk_input_function(i);
        if (!in || PyDict_SetItemString(d, i ? "_getpass" : "_input", in) < 0) {
            Py_XDECREF(in);
            goto fail;
        }
        Py_DECREF(in);
    }
    r = PyObject_CallMethod(mod, "install", NULL);
    if (!r)
        goto fail;
    Py_DECREF(r);
    if (wrk_py_set_global("_rich", mod) < 0)
        goto fail;
    rich_mod = mod; /* keeps the reference */
    return 0;
fail:
    Py_DECREF(mod);
    return -1;
}
